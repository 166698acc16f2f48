//! The kubelet's client certificate manager (client-go `certificate.manager`), with
//! `--rotate-certificates`: at a random point between 70% and 90% of the current
//! certificate's life a new key is made and a certificate asked for it (a request named
//! `csr-…`, as the node itself, which the approver grants through `selfnodeclient`); once
//! issued it is stored as `kubelet-client-current.pem` and shown from the next handshake.

use std::sync::Arc;
use std::time::Duration;

use super::client::RotatingIdentity;
use super::request::{RequestName, Template, new_private_key, request_certificate};
use super::store::{CertificateStore, StoredPair};

/// client-go `nextRotationDeadline` and `jitteryDuration`: `notBefore` plus a uniform
/// 70–90% of the certificate's whole life (Unix seconds). `fraction` is the random draw in
/// [0, 1).
pub fn rotation_deadline(pair: &StoredPair, fraction: f64) -> i64 {
    let total = (pair.not_after - pair.not_before).max(0) as f64;
    let jittered = total * 0.7 + total * 0.2 * fraction.clamp(0.0, 1.0);
    pair.not_before + jittered as i64
}

/// A uniform draw in [0, 1) from the system's random source.
fn random_fraction() -> f64 {
    let mut b = [0u8; 8];
    if aws_lc_rs::rand::fill(&mut b).is_err() {
        return 0.5;
    }
    (u64::from_le_bytes(b) >> 11) as f64 / (1u64 << 53) as f64
}

/// The waits after a failed rotation (client-go's backoff: 2 s doubling, capped at
/// 32 s, as its `wait.Backoff{Duration: 2s, Factor: 2, Steps: 5, Cap: …}` then every 32 s).
fn retry_after(failures: u32) -> Duration {
    Duration::from_secs(2u64.saturating_mul(1 << failures.min(4)).min(32))
}

/// How long a rotation's request is waited for before it is asked again.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(15 * 60);

/// Rotates the node's client certificate until dropped: sleeps until the rotation deadline
/// of the stored pair, then asks for a new one with `client` (which shows `identity`), stores
/// it and makes `identity` show it. Failures are logged and retried with backoff; the old
/// certificate keeps serving meanwhile.
pub async fn rotate_client_certificate(
    client: kube::Client,
    store: CertificateStore,
    template: Template,
    identity: Arc<RotatingIdentity>,
    mut pair: StoredPair,
) {
    let mut failures = 0u32;
    loop {
        let deadline = rotation_deadline(&pair, random_fraction());
        let now = jiff::Timestamp::now().as_second();
        let wait = Duration::from_secs(deadline.saturating_sub(now).max(0) as u64);
        tracing::info!(
            expires = pair.not_after,
            rotation_in_seconds = wait.as_secs(),
            "client certificate rotation scheduled"
        );
        tokio::time::sleep(wait).await;
        match rotate_once(&client, &store, &template, &identity).await {
            Ok(new) => {
                failures = 0;
                tracing::info!(expires = new.not_after, "client certificate rotated");
                pair = new;
            }
            Err(e) => {
                let again = retry_after(failures);
                failures = failures.saturating_add(1);
                tracing::warn!(error = %e, retry_in_seconds = again.as_secs(), "client certificate rotation failed");
                tokio::time::sleep(again).await;
                // Asked again at once: the deadline is behind us.
            }
        }
    }
}

async fn rotate_once(
    client: &kube::Client,
    store: &CertificateStore,
    template: &Template,
    identity: &RotatingIdentity,
) -> Result<StoredPair, super::CertificateError> {
    let key = new_private_key()?;
    let cert = request_certificate(client, template, &key, RequestName::Generate("csr-"), REQUEST_TIMEOUT).await?;
    let store = store.clone();
    let pair = tokio::task::spawn_blocking(move || store.update(&cert, &key))
        .await
        .map_err(|e| super::CertificateError::Key(format!("file task: {e}")))??;
    identity.set(&pair)?;
    Ok(pair)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(not_before: i64, not_after: i64) -> StoredPair {
        StoredPair {
            cert_pem: String::new(),
            key_pem: String::new(),
            not_before,
            not_after,
            common_name: String::new(),
        }
    }

    #[test]
    fn the_deadline_falls_between_70_and_90_percent_of_the_whole_life() {
        let p = pair(1000, 2000);
        assert_eq!(rotation_deadline(&p, 0.0), 1700);
        assert_eq!(rotation_deadline(&p, 0.5), 1800);
        assert_eq!(rotation_deadline(&p, 0.999_999), 1899);
        // the signer's 5-minute backdate counts in the life, as upstream's notBefore does
        let backdated = pair(0, 300 + 3600);
        assert_eq!(rotation_deadline(&backdated, 0.0), 2730);
        for _ in 0..100 {
            let f = random_fraction();
            assert!((0.0..1.0).contains(&f), "{f}");
        }
        assert_eq!(rotation_deadline(&pair(5, 5), 0.3), 5, "a zero life rotates at once");
    }

    #[test]
    fn failures_back_off_from_2_to_32_seconds() {
        let waits: Vec<u64> = (0..7).map(|n| retry_after(n).as_secs()).collect();
        assert_eq!(waits, [2, 4, 8, 16, 32, 32, 32]);
    }
}
