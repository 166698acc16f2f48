//! Mint and verify throughput on one core, against the physical limit measured in the
//! same run: raw aws-lc-rs sign/verify of the same bytes with the same key.
//!
//! `cargo bench -p podpass-token` (PODPASS_BENCH_SECS sets the seconds per figure, default 2).

// A benchmark aborts on any failure: there is no caller to hand an error to.
#![allow(clippy::expect_used)]

use std::hint::black_box;
use std::time::{Duration, Instant};

use aws_lc_rs::rand::SystemRandom;
use aws_lc_rs::signature::{self, EcdsaKeyPair, ParsedPublicKey, RsaKeyPair};
use podpass_token::{
    Algorithm, Authenticator, ObjectRef, SigningKey, TokenFeatures, TokenGenerator, TokenRequest, now_unix, pem,
};

const ISSUER: &str = "https://kubernetes.default.svc.cluster.local";

/// One measurement of `ours` against its physical limit `raw`.
struct Pair {
    ours: f64,
    raw: f64,
    ratio: f64,
}

/// Runs `ours` and `raw` in alternating 25 ms slices for `secs` each. Throughputs are the
/// totals; the ratio is the median of the per-slice-pair ratios, so that a noisy neighbour
/// on a shared machine slows both sides of a pair alike instead of skewing the figure.
fn compare(secs: f64, mut ours: impl FnMut(), mut raw: impl FnMut()) -> Pair {
    fn slice(f: &mut impl FnMut()) -> (u64, Duration) {
        let start = Instant::now();
        let mut n = 0u64;
        while start.elapsed() < Duration::from_millis(25) {
            f();
            n += 1;
        }
        (n, start.elapsed())
    }
    let rounds = ((secs / 0.025).ceil() as usize).max(8);
    let (mut n_ours, mut t_ours, mut n_raw, mut t_raw) = (0u64, Duration::ZERO, 0u64, Duration::ZERO);
    let mut ratios = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let (a, ta) = slice(&mut ours);
        let (b, tb) = slice(&mut raw);
        n_ours += a;
        t_ours += ta;
        n_raw += b;
        t_raw += tb;
        ratios.push((a as f64 / ta.as_secs_f64()) / (b as f64 / tb.as_secs_f64()));
    }
    ratios.sort_by(f64::total_cmp);
    Pair {
        ours: n_ours as f64 / t_ours.as_secs_f64(),
        raw: n_raw as f64 / t_raw.as_secs_f64(),
        ratio: ratios[ratios.len() / 2],
    }
}

fn request() -> TokenRequest {
    TokenRequest {
        namespace: "tenant-a".into(),
        service_account: ObjectRef::new("builder", "0b9f8a52-3f6e-4d5b-9a51-0d6c3c0f9e11"),
        audiences: vec!["registry.example.com".into()],
        expiration_seconds: 3600,
        warnafter_seconds: 0,
        pod: Some(ObjectRef::new("builder-7d9f8-x2x", "8f1c1b8e-2f0e-4a43-9a7e-6f6f0c7c9d21")),
        secret: None,
        node: Some(ObjectRef::new("node-1", "c1d2e3f4-0000-4000-8000-000000000001")),
    }
}

fn main() {
    let secs: f64 = std::env::var("PODPASS_BENCH_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(2.0);
    let features = TokenFeatures::default();
    let rng = SystemRandom::new();
    println!(
        "podpass-token bench: one core, {secs} s per figure, alternating 25 ms slices with the raw aws-lc-rs baseline"
    );
    println!(
        "{:<6} {:>14} {:>14} {:>7}   {:>14} {:>14} {:>7}",
        "alg", "mint/s", "raw sign/s", "ratio", "verify/s", "raw verify/s", "ratio"
    );
    for alg in [Algorithm::ES256, Algorithm::RS256] {
        let key = SigningKey::generate(alg).expect("generate key");
        let pkcs8 = pem::parse_all(key.to_pkcs8_pem().expect("pkcs8").as_bytes()).expect("pem").remove(0).der;
        let verifier = Authenticator::new(
            vec![ISSUER.into()],
            vec![key.public_key().clone()],
            vec!["registry.example.com".into()],
            features,
        );
        // The raw baseline parses the very same SubjectPublicKeyInfo bytes.
        let spki = key.public_key().spki_der().to_vec();
        let generator = TokenGenerator::new(ISSUER, key);
        let now = now_unix();
        let req = request();
        let token = generator.mint(&req, &features, now).expect("mint").token;
        let (signing_input, sig_b64) = token.rsplit_once('.').expect("three segments");
        let sig = data_encoding::BASE64URL_NOPAD.decode(sig_b64.as_bytes()).expect("b64");
        let message = signing_input.as_bytes().to_vec();

        let (raw_sign, raw_public): (Box<dyn FnMut()>, ParsedPublicKey) = match alg {
            Algorithm::RS256 => {
                let kp = RsaKeyPair::from_pkcs8(&pkcs8).expect("rsa");
                let public = ParsedPublicKey::new(&signature::RSA_PKCS1_2048_8192_SHA256, &spki).expect("pub");
                let mut out = vec![0u8; kp.public_modulus_len()];
                let msg = message.clone();
                let rng = rng.clone();
                (
                    Box::new(move || {
                        kp.sign(&signature::RSA_PKCS1_SHA256, &rng, black_box(&msg), &mut out).expect("sign")
                    }),
                    public,
                )
            }
            _ => {
                let kp = EcdsaKeyPair::from_pkcs8(&signature::ECDSA_P256_SHA256_FIXED_SIGNING, &pkcs8).expect("ec");
                let public = ParsedPublicKey::new(&signature::ECDSA_P256_SHA256_FIXED, &spki).expect("pub");
                let msg = message.clone();
                let rng = rng.clone();
                (
                    Box::new(move || {
                        black_box(kp.sign(&rng, black_box(&msg)).expect("sign"));
                    }),
                    public,
                )
            }
        };
        let mut raw_sign = raw_sign;
        let sign = compare(
            secs,
            || {
                black_box(generator.mint(black_box(&req), &features, now).expect("mint"));
            },
            &mut raw_sign,
        );
        let verify = compare(
            secs,
            || {
                black_box(verifier.verify(black_box(&token), None, now).expect("verify"));
            },
            || raw_public.verify_sig(black_box(&message), black_box(&sig)).expect("raw verify"),
        );
        println!(
            "{:<6} {:>14.0} {:>14.0} {:>7.3}   {:>14.0} {:>14.0} {:>7.3}",
            alg.as_str(),
            sign.ours,
            sign.raw,
            sign.ratio,
            verify.ours,
            verify.raw,
            verify.ratio
        );
    }
    println!("token size: {} bytes (pod-bound, node info, jti)", {
        let g = TokenGenerator::new(ISSUER, SigningKey::generate(Algorithm::ES256).expect("key"));
        g.mint(&request(), &features, now_unix()).expect("mint").token.len()
    });
}
