//! kubeadm's token discovery over the wire (`discovery/token` `retrieveValidatedConfigInfo`):
//! `kube-public/cluster-info` fetched without trusting the server, polled until the
//! token's signature is there, checked ([`super::validate_cluster_info`]), then fetched again
//! over TLS pinned to the CA it names, which must give the same kubeconfig.

use std::time::{Duration, Instant};

use serde_json::Value;
use thiserror::Error;

use super::discovery::{ClusterInfo, DiscoveryError, validate};

/// How often discovery asks again (kubeadm `DiscoveryRetryInterval`).
const RETRY: Duration = Duration::from_secs(5);

/// How long one request may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// Largest cluster-info answer read (a kubeconfig and a signature per token).
const MAX_BODY_BYTES: usize = 1024 * 1024;

/// Discovery failed.
#[derive(Debug, Error)]
pub enum JoinError {
    /// The answer was not trustworthy, or a flag is wrong.
    #[error(transparent)]
    Discovery(#[from] DiscoveryError),
    /// `--server` is not an https URL.
    #[error("--server {0:?}: must be an https:// URL (host:port is taken as https://host:port)")]
    Server(String),
    /// Nothing trustworthy came before the deadline; the last problem seen.
    #[error("couldn't validate the identity of the API Server within {seconds}s: {last}")]
    Timeout {
        /// How long discovery tried.
        seconds: u64,
        /// The last failure.
        last: String,
    },
    /// The pinned fetch gave another kubeconfig (kubeadm's check against a server that
    /// answers the insecure and the secure request differently).
    #[error("the second kubeconfig from the cluster-info ConfigMap (using validated TLS) was different from the first")]
    Changed,
    /// The pinned fetch failed.
    #[error("fetching cluster-info over the pinned CA: {0}")]
    Pinned(String),
    /// The cluster's node configuration could not be read, or is not valid.
    #[error("reading the cluster's node configuration: {0}")]
    Configuration(String),
}

/// `--server` as a URL: `host:port` as kubeadm takes it, or an `https://` URL.
pub fn server_url(server: &str) -> Result<String, JoinError> {
    let url = if server.contains("://") { server.to_owned() } else { format!("https://{server}") };
    match url::Url::parse(&url) {
        Ok(u) if u.scheme() == "https" && u.host_str().is_some() => Ok(url.trim_end_matches('/').to_owned()),
        _ => Err(JoinError::Server(server.to_owned())),
    }
}

/// Discovers the cluster at `server` for `token`, trusting only a CA among `pins`; the
/// validated cluster (its server and CA, as cluster-info names them).
pub async fn discover(server: &str, token: &str, pins: &[String], timeout: Duration) -> Result<ClusterInfo, JoinError> {
    let base = server_url(server)?;
    // The flags first: a bad pin or token is said at once, before any request.
    for pin in pins {
        super::discovery::check_pin(pin)?;
    }
    if podpass_api::bootstrap_token::parse(token).is_none() {
        return Err(DiscoveryError::BadToken.into());
    }
    let url = format!("{base}/api/v1/namespaces/kube-public/configmaps/cluster-info");
    // Nothing is trusted yet: the signature and the pin are what make the answer good.
    let insecure = reqwest::Client::builder()
        .tls_danger_accept_invalid_certs(true)
        .timeout(REQUEST_TIMEOUT)
        .build()
        .map_err(|e| JoinError::Pinned(e.to_string()))?;
    let deadline = Instant::now() + timeout;
    let (info, kubeconfig) = loop {
        let last = match fetch(&insecure, &url).await {
            Ok(cm) => match validate(&cm, token, pins) {
                Ok(info) => break (info, kubeconfig_of(&cm)),
                // Not signed yet: the signer may not have run since the token was made.
                Err(e @ DiscoveryError::NotSigned(_)) => e.to_string(),
                Err(e) => return Err(e.into()),
            },
            Err(e) => e.to_string(),
        };
        if Instant::now() + RETRY > deadline {
            return Err(JoinError::Timeout { seconds: timeout.as_secs(), last });
        }
        tracing::info!(reason = %last, "cluster-info not usable yet; asking again in {}s", RETRY.as_secs());
        tokio::time::sleep(RETRY).await;
    };
    let ca = reqwest::Certificate::from_pem(info.ca_pem.as_bytes()).map_err(|e| JoinError::Pinned(e.to_string()))?;
    let pinned = reqwest::Client::builder()
        .tls_certs_only([ca])
        .timeout(REQUEST_TIMEOUT)
        .build()
        .map_err(|e| JoinError::Pinned(e.to_string()))?;
    let again = fetch(&pinned, &url).await.map_err(|e| JoinError::Pinned(e.to_string()))?;
    if kubeconfig_of(&again) != kubeconfig {
        return Err(JoinError::Changed);
    }
    Ok(info)
}

fn kubeconfig_of(cm: &Value) -> Option<String> {
    cm.pointer("/data/kubeconfig").and_then(Value::as_str).map(str::to_owned)
}

/// A GET of cluster-info that failed, as one line.
#[derive(Debug, Error)]
#[error("GET {url}: {reason}")]
struct FetchError {
    url: String,
    reason: String,
}

/// One GET of cluster-info, its body bounded.
async fn fetch(client: &reqwest::Client, url: &str) -> Result<Value, FetchError> {
    let fail = |reason: String| FetchError { url: url.to_owned(), reason };
    let resp = client.get(url).send().await.map_err(|e| fail(e.to_string()))?;
    let status = resp.status();
    let body = bounded_body(resp, MAX_BODY_BYTES).await.map_err(|e| fail(e.into()))?;
    if !status.is_success() {
        return Err(fail(status.to_string()));
    }
    serde_json::from_slice(&body).map_err(|e| fail(format!("not a ConfigMap: {e}")))
}

/// An answer's body that could not be read whole.
#[derive(Debug, Error)]
#[error("{0}")]
pub(super) struct BodyError(String);

impl From<BodyError> for String {
    fn from(e: BodyError) -> String {
        e.0
    }
}

/// An answer's body, at most `max` bytes of it (more is an error, read no further).
pub(super) async fn bounded_body(mut resp: reqwest::Response, max: usize) -> Result<Vec<u8>, BodyError> {
    let mut body = Vec::new();
    while let Some(chunk) = resp.chunk().await.map_err(|e| BodyError(e.to_string()))? {
        if body.len() + chunk.len() > max {
            return Err(BodyError(format!("the answer is over {max} bytes")));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// A bootstrap kubeconfig (kubeadm's `bootstrap-kubelet.conf`): the cluster's server and CA,
/// the bootstrap token as its user.
pub fn bootstrap_kubeconfig(server: &str, ca_pem: &str, token: &str) -> String {
    let ca = data_encoding::BASE64.encode(ca_pem.as_bytes());
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: kubernetes\n  cluster:\n    server: {server}\n    certificate-authority-data: {ca}\ncontexts:\n- name: tls-bootstrap-token-user@kubernetes\n  context:\n    cluster: kubernetes\n    user: tls-bootstrap-token-user\ncurrent-context: tls-bootstrap-token-user@kubernetes\nusers:\n- name: tls-bootstrap-token-user\n  user:\n    token: {token}\n"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_server_is_https_and_host_port_is_taken_as_kubeadm_does() {
        assert_eq!(server_url("127.0.0.1:6443").ok().as_deref(), Some("https://127.0.0.1:6443"));
        assert_eq!(server_url("https://k.example:6443/").ok().as_deref(), Some("https://k.example:6443"));
        assert!(matches!(server_url("http://127.0.0.1:6443"), Err(JoinError::Server(_))));
        assert!(matches!(server_url("https://"), Err(JoinError::Server(_))));
    }

    #[test]
    fn a_bootstrap_kubeconfig_names_the_server_the_ca_and_the_token() {
        let text = bootstrap_kubeconfig("https://h:1", "PEM", "abcdef.0123456789abcdef");
        let v: Value = serde_yaml_ng::from_str(&text).unwrap_or_default();
        assert_eq!(v["clusters"][0]["cluster"]["server"], "https://h:1");
        assert_eq!(v["clusters"][0]["cluster"]["certificate-authority-data"], "UEVN");
        assert_eq!(v["users"][0]["user"]["token"], "abcdef.0123456789abcdef");
        assert_eq!(v["current-context"], "tls-bootstrap-token-user@kubernetes");
    }
}
