//! Pull records and intents on disk: whatever a crash or another program left there.
#![no_main]

use libfuzzer_sys::fuzz_target;
use podpass_node::images::{decode_intent, decode_pulled};

fuzz_target!(|data: &[u8]| {
    let path = std::path::Path::new("fuzz");
    let _ = decode_pulled(path, data);
    let _ = decode_intent(path, data);
});
