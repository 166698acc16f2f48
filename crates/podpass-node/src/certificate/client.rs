//! An API client whose TLS client certificate can change under it (client-go's dynamic
//! client certificate, `transport.GetClientCertificate` over the certificate manager's
//! current pair): every new connection shows the pair current at its handshake, so a
//! rotated certificate is used without rebuilding the client every part of the node holds.

use std::sync::{Arc, RwLock};

use kube::client::ConfigExt;
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject};
use tokio_rustls::rustls::sign::CertifiedKey;

use super::CertificateError;
use super::store::StoredPair;

/// The client certificate new connections show; [`RotatingIdentity::set`] replaces it.
#[derive(Debug)]
pub struct RotatingIdentity {
    current: RwLock<Arc<CertifiedKey>>,
    /// The pair shown, for whoever shows it elsewhere (the node's registry checks).
    pairs: tokio::sync::watch::Sender<StoredPair>,
}

impl RotatingIdentity {
    /// An identity showing `pair`.
    pub fn new(pair: &StoredPair) -> Result<Self, CertificateError> {
        Ok(Self { current: RwLock::new(certified_key(pair)?), pairs: tokio::sync::watch::Sender::new(pair.clone()) })
    }

    /// Shows `pair` from the next handshake on.
    pub fn set(&self, pair: &StoredPair) -> Result<(), CertificateError> {
        let key = certified_key(pair)?;
        match self.current.write() {
            Ok(mut current) => *current = key,
            Err(poisoned) => *poisoned.into_inner() = key,
        }
        self.pairs.send_replace(pair.clone());
        Ok(())
    }

    /// The pair shown now, and each one shown after it.
    pub fn pairs(&self) -> tokio::sync::watch::Receiver<StoredPair> {
        self.pairs.subscribe()
    }

    fn get(&self) -> Arc<CertifiedKey> {
        match self.current.read() {
            Ok(current) => Arc::clone(&current),
            Err(poisoned) => Arc::clone(&poisoned.into_inner()),
        }
    }
}

impl rustls::client::ResolvesClientCert for RotatingIdentity {
    fn resolve(&self, _hints: &[&[u8]], _schemes: &[rustls::SignatureScheme]) -> Option<Arc<CertifiedKey>> {
        Some(self.get())
    }

    fn has_certs(&self) -> bool {
        true
    }
}

pub(super) fn certified_key(pair: &StoredPair) -> Result<Arc<CertifiedKey>, CertificateError> {
    let bad = |e: String| CertificateError::Issued { reason: e };
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(pair.cert_pem.as_bytes())
        .collect::<Result<_, _>>()
        .map_err(|e| bad(e.to_string()))?;
    let key = PrivateKeyDer::from_pem_slice(pair.key_pem.as_bytes()).map_err(|e| bad(e.to_string()))?;
    let provider = rustls::crypto::aws_lc_rs::default_provider();
    CertifiedKey::from_der(chain, key, &provider).map(Arc::new).map_err(|e| bad(e.to_string()))
}

/// A client for the cluster `kubeconfig` names (its server, CA, timeouts) that shows
/// `identity` as its client certificate instead of the kubeconfig's.
pub async fn client_with_identity(
    kubeconfig: &std::path::Path,
    identity: Arc<RotatingIdentity>,
) -> Result<kube::Client, CertificateError> {
    use kube::config::{KubeConfigOptions, Kubeconfig};
    let err = |reason: String| CertificateError::Kubeconfig { path: kubeconfig.to_path_buf(), reason };
    let file = Kubeconfig::read_from(kubeconfig).map_err(|e| err(e.to_string()))?;
    let mut config = kube::Config::from_custom_kubeconfig(file, &KubeConfigOptions::default())
        .await
        .map_err(|e| err(e.to_string()))?;
    // The pair is ours to show, not the file's: kube-rs would read it once.
    config.auth_info.client_certificate = None;
    config.auth_info.client_certificate_data = None;
    config.auth_info.client_key = None;
    config.auth_info.client_key_data = None;
    let mut tls = config.rustls_client_config().map_err(|e| err(e.to_string()))?;
    tls.client_auth_cert_resolver = identity;
    let mut http = hyper_util::client::legacy::connect::HttpConnector::new();
    http.enforce_http(false);
    let https = hyper_rustls::HttpsConnector::from((http, Arc::new(tls)));
    // kube-rs' own timeouts: a connection that stops answering is not waited on for ever.
    let mut connector = hyper_timeout::TimeoutConnector::new(https);
    connector.set_connect_timeout(config.connect_timeout);
    connector.set_read_timeout(config.read_timeout);
    connector.set_write_timeout(config.write_timeout);
    let http_client = hyper_util::client::legacy::Builder::new(hyper_util::rt::TokioExecutor::new()).build(connector);
    let service = tower::ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(config.auth_layer().map_err(|e| err(e.to_string()))?)
        .layer(config.extra_headers_layer().map_err(|e| err(e.to_string()))?)
        .map_err(|e: hyper_util::client::legacy::Error| -> Box<dyn std::error::Error + Send + Sync> { Box::new(e) })
        .service(http_client);
    Ok(kube::Client::new(service, config.default_namespace))
}
