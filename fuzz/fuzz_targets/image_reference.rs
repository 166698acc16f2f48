//! Image names from pod specs and matchImages globs from configs: reference parsing,
//! schemeless URL parsing and keyring glob matching, with any pair of inputs.
#![no_main]

use libfuzzer_sys::fuzz_target;
use podpass_api::image_url::{glob_match, parse_schemeless, urls_match_str};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let (a, b) = text.split_once('\n').unwrap_or((text, "registry.example/app:1"));
    let _ = podpass_node::images::parse_reference(a);
    let _ = parse_schemeless(a);
    let _ = glob_match(a, b);
    let _ = urls_match_str(a, b);
    let _ = urls_match_str(b, a);
    let _ = podpass_node::credential::is_default_registry_match(a);
});
