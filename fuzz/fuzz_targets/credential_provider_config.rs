//! CredentialProviderConfig files (YAML or JSON), decoded and validated as the kubelet does.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(config) = podpass_api::credential_provider::config::decode(data) {
        let _ = podpass_api::credential_provider::validate::validate(&config, true);
    }
});
