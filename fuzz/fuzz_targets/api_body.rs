//! API request inputs as the REST layer decodes them first: bodies (JSON, and protobuf of
//! every served kind through the generated schema) and `continue` tokens. A token that decodes names a start key inside its list
//! (never empty, absolute or with a `..` segment) and survives a round trip.
#![no_main]

use libfuzzer_sys::fuzz_target;
use podpass_apiserver::{decode_continue_token, decode_request_body, encode_continue_token};

fuzz_target!(|data: &[u8]| {
    let _ = decode_request_body("application/json", data);
    let _ = decode_request_body("application/vnd.kubernetes.protobuf", data);
    if let Ok(text) = std::str::from_utf8(data)
        && let Ok((revision, start)) = decode_continue_token(text)
    {
        assert!(!start.is_empty() && !start.starts_with('/'), "start key {start:?}");
        assert!(!start.split('/').any(|p| p == ".."), "start key {start:?}");
        let again = decode_continue_token(&encode_continue_token(revision, &start));
        assert_eq!(again, Ok((revision, start)));
    }
});
