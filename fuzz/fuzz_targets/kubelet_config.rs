//! The kubelet configuration subset podpass reads (image pull policy, allowlist, gates).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = podpass_node::parse_kubelet_config(data);
});
