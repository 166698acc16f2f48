//! The physical limit: raw ES256 operations of aws-lc-rs, the library that signs and
//! verifies podpass tokens, on the same machine in the same run.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Result;
use aws_lc_rs::rand::SystemRandom;
use aws_lc_rs::signature::{self, EcdsaKeyPair, KeyPair};

/// Which raw operation to measure.
#[derive(Clone, Copy)]
pub enum RawOp {
    /// ES256 sign.
    Sign,
    /// ES256 verify.
    Verify,
}

/// Raw ES256 operations per second on `threads` threads for `duration`, signing (or
/// verifying) a payload the size of a pod-bound token's signing input.
pub fn raw_rate(threads: usize, duration: Duration, op: RawOp) -> Result<f64> {
    let rng = SystemRandom::new();
    let pkcs8 = EcdsaKeyPair::generate_pkcs8(&signature::ECDSA_P256_SHA256_FIXED_SIGNING, &rng)
        .map_err(|_| anyhow::anyhow!("generating a P-256 key"))?;
    let key = Arc::new(
        EcdsaKeyPair::from_pkcs8(&signature::ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref())
            .map_err(|_| anyhow::anyhow!("loading the P-256 key"))?,
    );
    let message = Arc::new(vec![b'x'; 900]);
    let sig = key.sign(&rng, &message).map_err(|_| anyhow::anyhow!("signing"))?.as_ref().to_vec();
    let public = Arc::new(key.public_key().as_ref().to_vec());
    let sig = Arc::new(sig);
    let started = Instant::now();
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let (key, message, sig, public) = (key.clone(), message.clone(), sig.clone(), public.clone());
            std::thread::spawn(move || {
                let rng = SystemRandom::new();
                let verifier =
                    signature::UnparsedPublicKey::new(&signature::ECDSA_P256_SHA256_FIXED, public.as_slice());
                let mut n = 0u64;
                while started.elapsed() < duration {
                    for _ in 0..16 {
                        let ok = match op {
                            RawOp::Sign => key.sign(&rng, &message).is_ok(),
                            RawOp::Verify => verifier.verify(&message, &sig).is_ok(),
                        };
                        if !ok {
                            return Err(anyhow::anyhow!("raw ES256 operation failed"));
                        }
                        n += 1;
                    }
                }
                Ok(n)
            })
        })
        .collect();
    let mut total = 0u64;
    for h in handles {
        total += h.join().map_err(|_| anyhow::anyhow!("raw bench thread panicked"))??;
    }
    Ok(total as f64 / started.elapsed().as_secs_f64())
}
