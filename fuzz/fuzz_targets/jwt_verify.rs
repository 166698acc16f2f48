//! A service-account token from anyone: parse and verify must never panic, and a token
//! signed by the key under test must verify whatever its claims say, or be refused cleanly.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use podpass_token::{Algorithm, Authenticator, SigningKey, TokenFeatures};

fn fixture() -> &'static (SigningKey, Authenticator) {
    static F: OnceLock<(SigningKey, Authenticator)> = OnceLock::new();
    F.get_or_init(|| {
        let key = SigningKey::generate(Algorithm::ES256).expect("key");
        let auth = Authenticator::new(
            vec!["https://issuer.fuzz".into()],
            vec![key.public_key().clone()],
            vec!["aud".into()],
            TokenFeatures::default(),
        );
        (key, auth)
    })
}

fn b64(data: &[u8]) -> String {
    const T: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::new();
    for chunk in data.chunks(3) {
        let n = chunk.iter().enumerate().fold(0u32, |acc, (i, b)| acc | (u32::from(*b) << (16 - 8 * i)));
        for i in 0..=chunk.len() {
            out.push(char::from(T[((n >> (18 - 6 * i)) & 63) as usize]));
        }
    }
    out
}

fuzz_target!(|data: &[u8]| {
    let (key, auth) = fixture();
    let now = 1_700_000_000;
    // 1. the bytes as a compact token
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = auth.verify(text, None, now);
        let _ = auth.verify(text, Some(&["aud".to_owned(), String::new()]), now);
    }
    // 2. the bytes as a claims payload under a valid signature: claim parsing and checks
    let header = format!(r#"{{"alg":"ES256","kid":"{}"}}"#, key.key_id());
    let signing_input = format!("{}.{}", b64(header.as_bytes()), b64(data));
    if let Ok(sig) = key.sign(signing_input.as_bytes()) {
        let token = format!("{signing_input}.{}", b64(&sig));
        let _ = auth.verify(&token, None, now);
    }
});
