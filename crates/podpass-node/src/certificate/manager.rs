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

/// Whatever shows a certificate: the API client's identity, the node server's.
pub trait ShowsCertificate: Send + Sync {
    /// Shows `pair` from the next handshake on.
    fn show(&self, pair: &StoredPair) -> Result<(), super::CertificateError>;
}

impl ShowsCertificate for RotatingIdentity {
    fn show(&self, pair: &StoredPair) -> Result<(), super::CertificateError> {
        self.set(pair)
    }
}

/// Rotates the node's client certificate until dropped: sleeps until the rotation deadline
/// of the stored pair, then asks for a new one with `client` (which shows `identity`), stores
/// it and makes `identity` show it. Failures are logged and retried with backoff; the old
/// certificate keeps serving meanwhile.
pub async fn rotate_client_certificate(
    client: kube::Client,
    store: CertificateStore,
    template: Template,
    identity: Arc<RotatingIdentity>,
    pair: StoredPair,
) {
    rotate_certificate(client, store, template, identity, pair).await
}

/// Rotates one certificate of the node until dropped, as client-go's manager: at the
/// rotation deadline of `pair` a new key and request; the issued pair stored and shown by
/// `shown`; a failure logged and asked again after a backoff, the current pair still shown.
pub async fn rotate_certificate(
    client: kube::Client,
    store: CertificateStore,
    template: Template,
    shown: Arc<dyn ShowsCertificate>,
    mut pair: StoredPair,
) {
    let role = store.prefix();
    loop {
        let deadline = rotation_deadline(&pair, random_fraction());
        let now = jiff::Timestamp::now().as_second();
        let wait = Duration::from_secs(deadline.saturating_sub(now).max(0) as u64);
        tracing::info!(
            certificate = role,
            expires = pair.not_after,
            rotation_in_seconds = wait.as_secs(),
            "certificate rotation scheduled"
        );
        tokio::time::sleep(wait).await;
        pair = issue_with_retry(&client, &store, &template, shown.as_ref()).await;
        tracing::info!(certificate = role, expires = pair.not_after, "certificate rotated");
    }
}

/// A new pair for `template`, asked for until one is issued (client-go's backoff between
/// failures, each logged), stored and shown.
pub async fn issue_with_retry(
    client: &kube::Client,
    store: &CertificateStore,
    template: &Template,
    shown: &dyn ShowsCertificate,
) -> StoredPair {
    let mut failures = 0u32;
    loop {
        match rotate_once(client, store, template, shown).await {
            Ok(new) => return new,
            Err(e) => {
                let again = retry_after(failures);
                failures = failures.saturating_add(1);
                tracing::warn!(certificate = store.prefix(), error = %e, retry_in_seconds = again.as_secs(), "certificate request failed");
                tokio::time::sleep(again).await;
            }
        }
    }
}

async fn rotate_once(
    client: &kube::Client,
    store: &CertificateStore,
    template: &Template,
    shown: &dyn ShowsCertificate,
) -> Result<StoredPair, super::CertificateError> {
    let key = new_private_key()?;
    let cert = request_certificate(client, template, &key, RequestName::Generate("csr-"), REQUEST_TIMEOUT).await?;
    let store = store.clone();
    let pair = tokio::task::spawn_blocking(move || store.update(&cert, &key))
        .await
        .map_err(|e| super::CertificateError::Key(format!("file task: {e}")))??;
    shown.show(&pair)?;
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
