//! API request bodies: JSON and kubectl's protobuf, as the REST layer decodes them first.
#![no_main]

use libfuzzer_sys::fuzz_target;
use podpass_apiserver::decode_request_body;

fuzz_target!(|data: &[u8]| {
    let _ = decode_request_body("application/json", data);
    let _ = decode_request_body("application/vnd.kubernetes.protobuf", data);
});
