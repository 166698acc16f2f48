//! A credential provider plugin's stdout.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = podpass_node::credential::decode_response(data, "credentialprovider.kubelet.k8s.io/v1");
});
