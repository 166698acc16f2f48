//! registry-auth's token request parsing, as an anonymous internet client sends it: the
//! query string or form body (repeated scopes, annotations, grant parameters), the `Basic`
//! Authorization header, and the scopes (`repository:name:pull,push`). The first byte
//! splits the input between body and header.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&split, rest)) = data.split_first() else { return };
    let at = usize::from(split).min(rest.len());
    let (authorization, raw) = rest.split_at(at);
    let _ = podpass_registry_auth::parse_for_fuzzing(raw, authorization);
});
