//! The node's API client as the kubelet makes it: first the TLS bootstrap when a bootstrap
//! kubeconfig is given and `--kubeconfig` holds no valid certificate, then, with
//! `--rotate-certificates`, a client showing the certificate manager's current pair with
//! the rotation running beside it; otherwise `--kubeconfig` as it is.

use std::sync::Arc;

use crate::certificate::{
    BOOTSTRAP_TIMEOUT, BootstrapPaths, Bootstrapped, CLIENT_PREFIX, CertificateError, CertificateStore,
    RotatingIdentity, StoredPair, Template, client_with_identity, kubeconfig_client_pair, load_client_cert,
    rotate_client_certificate,
};

use super::{AgentConfig, AgentError};

/// Aborts a background task when dropped.
pub(super) struct AbortOnDrop(pub(super) tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The client the node runs with.
pub(super) struct NodeClient {
    pub client: kube::Client,
    /// The rotation task, when it rotates.
    pub rotation: Option<tokio::task::JoinHandle<()>>,
    /// The client certificate it shows, and each rotated one; `None` when its kubeconfig
    /// names none (a token).
    pub pairs: Option<tokio::sync::watch::Receiver<StoredPair>>,
}

/// The client the node runs with (see [`NodeClient`]).
pub(super) async fn connect(config: &AgentConfig, node: &str) -> Result<NodeClient, AgentError> {
    let cert_dir = config.cert_dir();
    if let Some(bootstrap) = &config.bootstrap_kubeconfig {
        let paths = BootstrapPaths {
            kubeconfig: config.kubeconfig.clone(),
            bootstrap_kubeconfig: bootstrap.clone(),
            cert_dir: cert_dir.clone(),
        };
        match load_client_cert(&paths, node, BOOTSTRAP_TIMEOUT).await? {
            Bootstrapped::Existing => {
                tracing::info!(kubeconfig = %paths.kubeconfig.display(), "client certificate still valid; no bootstrap")
            }
            Bootstrapped::Issued { csr } => {
                tracing::info!(%csr, kubeconfig = %paths.kubeconfig.display(), "client certificate issued")
            }
        }
    }
    if !config.rotate_certificates {
        let client = crate::api::client_from_kubeconfig(&config.kubeconfig).await?;
        let kubeconfig = config.kubeconfig.clone();
        // What the kubeconfig shows, never changing.
        let fixed = tokio::task::spawn_blocking(move || {
            let (cert, key) = kubeconfig_client_pair(&kubeconfig)?;
            let text = |b: Vec<u8>| String::from_utf8(b).unwrap_or_default();
            crate::certificate::parse_stored_pair(&format!("{}\n{}", text(cert).trim_end(), text(key))).ok()
        })
        .await
        .ok()
        .flatten();
        let pairs = fixed.map(|pair| tokio::sync::watch::channel(pair).1);
        return Ok(NodeClient { client, rotation: None, pairs });
    }
    // The manager's store first; a node not bootstrapped by us starts it from the pair its
    // kubeconfig names (client-go: the bootstrap certificate and key).
    let store = CertificateStore::new(&cert_dir, CLIENT_PREFIX);
    let kubeconfig = config.kubeconfig.clone();
    let seed = store.clone();
    let pair = tokio::task::spawn_blocking(move || match seed.current()? {
        Some(pair) => Ok(pair),
        None => {
            let (cert, key) = kubeconfig_client_pair(&kubeconfig).ok_or_else(|| CertificateError::Kubeconfig {
                path: kubeconfig.clone(),
                reason: "names no client certificate and key to rotate (--rotate-certificates)".into(),
            })?;
            let text = |b: Vec<u8>| String::from_utf8(b).unwrap_or_default();
            seed.update(&text(cert), &text(key))
        }
    })
    .await
    .map_err(|e| CertificateError::Key(format!("file task: {e}")))??;
    let identity = Arc::new(RotatingIdentity::new(&pair)?);
    let pairs = identity.pairs();
    let client = client_with_identity(&config.kubeconfig, Arc::clone(&identity)).await?;
    let rotation = podpass_serve::spawn_named(
        "certificate-rotation",
        rotate_client_certificate(client.clone(), store, Template::kubelet_client(node), identity, pair),
    );
    Ok(NodeClient { client, rotation: Some(rotation), pairs: Some(pairs) })
}
