//! Pull secrets any namespace user can create: docker config JSON, the legacy dockercfg,
//! whole Secret manifests, and a keyring lookup over what they hold.
#![no_main]

use libfuzzer_sys::fuzz_target;
use podpass_node::credential::{parse_config_json, parse_dockercfg, parse_pull_secret};
use podpass_node::credential::{CredentialSource, Keyring};

fuzz_target!(|data: &[u8]| {
    let _ = parse_pull_secret(data);
    let _ = parse_dockercfg(data);
    if let Ok(config) = parse_config_json(data) {
        let mut keyring = Keyring::new();
        keyring.add(&config, &CredentialSource::NodeWide);
        for key in config.keys().take(8) {
            let _ = keyring.lookup(key);
        }
        let _ = keyring.lookup("registry.example/team/app:1");
    }
});
