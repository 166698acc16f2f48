//! Server TLS configuration from PEM: HTTP/1.1 over TLS 1.2/1.3 (rustls defaults, aws-lc-rs),
//! with optional client certificates verified against a CA bundle.

use std::sync::Arc;

use thiserror::Error;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::server::{ResolvesServerCert, WebPkiClientVerifier};
use tokio_rustls::rustls::{RootCertStore, ServerConfig};

/// A TLS configuration could not be built; the variant names the input at fault.
#[derive(Debug, Error)]
pub enum TlsError {
    /// The certificate chain is not PEM certificates, or holds none.
    #[error("certificate chain: {0}")]
    CertChain(String),
    /// The private key is not a PEM private key.
    #[error("private key: {0}")]
    PrivateKey(String),
    /// The client CA bundle is not PEM certificates, holds none, or one is unusable.
    #[error("client CA: {0}")]
    ClientCa(String),
    /// rustls refused the combination (e.g. the key does not match the certificate).
    #[error("TLS configuration: {0}")]
    Config(String),
}

/// Parses every certificate of a PEM bundle; an empty bundle is an error.
fn certificates(pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs: Vec<CertificateDer<'static>> =
        CertificateDer::pem_slice_iter(pem).collect::<Result<_, _>>().map_err(|e| e.to_string())?;
    if certs.is_empty() {
        return Err("no certificates found".into());
    }
    Ok(certs)
}

/// A TLS acceptor serving `cert_chain_pem` (leaf first) with `key_pem`. With
/// `client_ca_pem`, clients are asked for a certificate and one that is presented must
/// chain to that bundle (an invalid one fails the handshake); clients without one are
/// still served, and [`crate::Peer::client_certificates`] is then empty.
pub fn tls_acceptor(
    cert_chain_pem: &[u8],
    key_pem: &[u8],
    client_ca_pem: Option<&[u8]>,
) -> Result<TlsAcceptor, TlsError> {
    let certs = certificates(cert_chain_pem).map_err(TlsError::CertChain)?;
    let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|e| TlsError::PrivateKey(e.to_string()))?;
    let config =
        client_auth(client_ca_pem)?.with_single_cert(certs, key).map_err(|e| TlsError::Config(e.to_string()))?;
    Ok(acceptor(config))
}

/// A TLS acceptor whose certificate `resolver` chooses at each handshake (a serving
/// certificate that rotates under a running server, as the kubelet's
/// `tlsConfig.GetCertificate` over its certificate manager); clients as [`tls_acceptor`].
pub fn tls_acceptor_resolving(
    resolver: Arc<dyn ResolvesServerCert>,
    client_ca_pem: Option<&[u8]>,
) -> Result<TlsAcceptor, TlsError> {
    Ok(acceptor(client_auth(client_ca_pem)?.with_cert_resolver(resolver)))
}

/// The configuration's client authentication: none, or certificates chaining to the bundle
/// (clients without one still served).
fn client_auth(
    client_ca_pem: Option<&[u8]>,
) -> Result<tokio_rustls::rustls::ConfigBuilder<ServerConfig, tokio_rustls::rustls::server::WantsServerCert>, TlsError>
{
    let builder = ServerConfig::builder();
    Ok(match client_ca_pem {
        None => builder.with_no_client_auth(),
        Some(pem) => {
            let mut roots = RootCertStore::empty();
            for cert in certificates(pem).map_err(TlsError::ClientCa)? {
                roots.add(cert).map_err(|e| TlsError::ClientCa(e.to_string()))?;
            }
            let verifier = WebPkiClientVerifier::builder(Arc::new(roots))
                .allow_unauthenticated()
                .build()
                .map_err(|e| TlsError::ClientCa(e.to_string()))?;
            builder.with_client_cert_verifier(verifier)
        }
    })
}

fn acceptor(mut config: ServerConfig) -> TlsAcceptor {
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    TlsAcceptor::from(Arc::new(config))
}
