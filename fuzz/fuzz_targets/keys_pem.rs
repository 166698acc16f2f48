//! Key files given to the control plane and the CLI: PEM and the DER inside it.
#![no_main]

use libfuzzer_sys::fuzz_target;
use podpass_token::{SigningKey, VerificationKey};

fuzz_target!(|data: &[u8]| {
    let _ = SigningKey::from_pem(data);
    let _ = VerificationKey::from_pem(data);
    let _ = SigningKey::from_pkcs8_der(data);
    let _ = SigningKey::from_sec1_der(data);
    let _ = SigningKey::from_pkcs1_der(data);
    let _ = VerificationKey::from_spki_der(data);
    let _ = VerificationKey::from_pkcs1_der(data);
});
