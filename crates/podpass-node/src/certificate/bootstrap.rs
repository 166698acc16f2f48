//! The kubelet's TLS bootstrap (`pkg/kubelet/certificate/bootstrap` `LoadClientCert`): a node
//! started with a bootstrap kubeconfig (a bootstrap token) asks the cluster for its own
//! client certificate and writes the kubeconfig it runs with from then on.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::CertificateError;
use super::request::{RequestName, Template, digested_name, new_private_key, public_key_der, request_certificate};
use super::store::{CLIENT_PREFIX, CertificateStore};

/// The private key of a bootstrap in progress (the kubelet's `kubelet-client.key.tmp`):
/// kept so a node restarted before its certificate came finds its request by name.
const PENDING_KEY: &str = "kubelet-client.key.tmp";

/// How long the kubelet waits for its bootstrap certificate.
pub const BOOTSTRAP_TIMEOUT: Duration = Duration::from_secs(3600);

/// Where the bootstrap reads and writes.
#[derive(Debug, Clone)]
pub struct BootstrapPaths {
    /// `--kubeconfig`: written here, and used as is when its certificate is still good.
    pub kubeconfig: PathBuf,
    /// `--bootstrap-kubeconfig`: the bootstrap token's.
    pub bootstrap_kubeconfig: PathBuf,
    /// `--cert-dir`.
    pub cert_dir: PathBuf,
}

/// What [`load_client_cert`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Bootstrapped {
    /// The kubeconfig's client certificate is still valid: nothing asked.
    Existing,
    /// A certificate was issued for request `csr` and the kubeconfig written.
    Issued {
        /// The CertificateSigningRequest's name.
        csr: String,
    },
}

/// kubelet `LoadClientCert`: nothing when `--kubeconfig` names a client certificate that
/// has not expired; otherwise, as the bootstrap kubeconfig's user, a kubelet client
/// certificate is asked for `node` (under its digested name, with the key kept in
/// `kubelet-client.key.tmp` until issued), stored as `kubelet-client-current.pem`, and
/// `--kubeconfig` written naming it (`default-cluster`, `default-auth`, `default-context`)
/// with the bootstrap kubeconfig's server and CA.
pub async fn load_client_cert(
    paths: &BootstrapPaths,
    node: &str,
    timeout: Duration,
) -> Result<Bootstrapped, CertificateError> {
    let kubeconfig = paths.kubeconfig.clone();
    if blocking(move || Ok(client_config_still_valid(&kubeconfig))).await? {
        return Ok(Bootstrapped::Existing);
    }
    let bootstrap = &paths.bootstrap_kubeconfig;
    let kube_err = |e: crate::api::ApiClientError| CertificateError::BootstrapKubeconfig {
        path: bootstrap.clone(),
        reason: e.to_string(),
    };
    let client = crate::api::client_from_kubeconfig(bootstrap).await.map_err(kube_err)?;
    let server = server_url(bootstrap).await?;
    let ca = crate::api::cluster_ca_pem(bootstrap).await.map_err(kube_err)?;

    let dir = paths.cert_dir.clone();
    let key_pem = blocking(move || pending_key(&dir)).await?;
    let template = Template::kubelet_client(node);
    let name = digested_name(&public_key_der(&key_pem)?, &template);
    let cert = request_certificate(&client, &template, &key_pem, RequestName::Fixed(name.clone()), timeout).await?;

    let (dir, kubeconfig) = (paths.cert_dir.clone(), paths.kubeconfig.clone());
    blocking(move || {
        let store = CertificateStore::new(&dir, CLIENT_PREFIX);
        store.update(&cert, &key_pem)?;
        write_kubeconfig(&kubeconfig, &server, &ca, &store.current_path())?;
        match std::fs::remove_file(dir.join(PENDING_KEY)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                tracing::warn!(error = %e, "the bootstrap's pending key could not be removed")
            }
            _ => {}
        }
        Ok(())
    })
    .await?;
    Ok(Bootstrapped::Issued { csr: name })
}

/// Blocking file work off the async threads.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, CertificateError> + Send + 'static,
) -> Result<T, CertificateError> {
    tokio::task::spawn_blocking(f).await.map_err(|e| CertificateError::Key(format!("file task: {e}")))?
}

/// The bootstrap kubeconfig's server URL.
async fn server_url(path: &Path) -> Result<String, CertificateError> {
    use kube::config::{KubeConfigOptions, Kubeconfig};
    let err = |reason: String| CertificateError::BootstrapKubeconfig { path: path.to_path_buf(), reason };
    let kubeconfig = Kubeconfig::read_from(path).map_err(|e| err(e.to_string()))?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .map_err(|e| err(e.to_string()))?;
    Ok(config.cluster_url.to_string().trim_end_matches('/').to_owned())
}

/// The client certificate and key (PEM) the current user of a kubeconfig names, as data or
/// files; `None` when it names none or they cannot be read.
pub fn kubeconfig_client_pair(path: &Path) -> Option<(Vec<u8>, Vec<u8>)> {
    use kube::config::Kubeconfig;
    let config = Kubeconfig::read_from(path).ok()?;
    let context = config.current_context.as_ref()?;
    let user = config.contexts.iter().find(|n| &n.name == context)?.context.as_ref()?.user.clone()?;
    let user = config.auth_infos.iter().find(|a| a.name == user)?.auth_info.as_ref()?;
    let read = |data: &Option<String>, file: &Option<String>| match (data, file) {
        (Some(data), _) => data_encoding::BASE64.decode(data.as_bytes()).ok(),
        (None, Some(file)) => std::fs::read(file).ok(),
        (None, None) => None,
    };
    let key = user.client_key_data.as_ref().map(|k| secrecy::ExposeSecret::expose_secret(k).to_owned());
    Some((read(&user.client_certificate_data, &user.client_certificate)?, read(&key, &user.client_key)?))
}

/// kubelet `isClientConfigStillValid`: the kubeconfig exists, its current user has a client
/// certificate, and no certificate of it has expired. Anything else (unreadable, no
/// certificate, a token instead) means bootstrapping.
pub fn client_config_still_valid(path: &Path) -> bool {
    let Some((pem, _)) = kubeconfig_client_pair(path) else { return false };
    let now = jiff::Timestamp::now().as_second();
    let mut any = false;
    for block in x509_parser::pem::Pem::iter_from_buffer(&pem) {
        let Ok(block) = block else { return false };
        if block.label != "CERTIFICATE" {
            continue;
        }
        let Ok((_, cert)) = x509_parser::parse_x509_certificate(&block.contents) else { return false };
        if cert.validity().not_after.timestamp() <= now {
            tracing::info!(kubeconfig = %path.display(), "its client certificate has expired; bootstrapping");
            return false;
        }
        any = true;
    }
    any
}

/// The pending key of `dir`, made (0600, durably) when there is none or it is unusable.
fn pending_key(dir: &Path) -> Result<String, CertificateError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| CertificateError::Io { path, source }
    };
    if let Some(warning) = podpass_serve::durable::private_dir(dir).map_err(io(dir))? {
        tracing::warn!("--cert-dir {warning}");
    }
    let path = dir.join(PENDING_KEY);
    if let Ok(pem) = std::fs::read_to_string(&path)
        && public_key_der(&pem).is_ok()
    {
        return Ok(pem);
    }
    let pem = new_private_key()?;
    podpass_serve::durable::replace(&path, pem.as_bytes(), 0o600).map_err(io(&path))?;
    Ok(pem)
}

/// The kubeconfig the bootstrap writes (kubelet `writeKubeconfigFromBootstrapping`), 0600,
/// atomically.
fn write_kubeconfig(path: &Path, server: &str, ca_pem: &str, pair: &Path) -> Result<(), CertificateError> {
    let pair = pair.display().to_string();
    let config = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "default-cluster", "cluster": {
            "server": server,
            "certificate-authority-data": data_encoding::BASE64.encode(ca_pem.as_bytes()),
        }}],
        "contexts": [{"name": "default-context", "context": {
            "cluster": "default-cluster", "namespace": "default", "user": "default-auth",
        }}],
        "current-context": "default-context",
        "preferences": {},
        "users": [{"name": "default-auth", "user": {"client-certificate": pair, "client-key": pair}}],
    });
    let text = serde_yaml_ng::to_string(&config).map_err(|e| CertificateError::Key(format!("kubeconfig: {e}")))?;
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)
            .map_err(|source| CertificateError::Io { path: parent.to_path_buf(), source })?;
    }
    podpass_serve::durable::replace(path, text.as_bytes(), 0o600)
        .map_err(|source| CertificateError::Io { path: path.to_path_buf(), source })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// A certificate valid until the end of `until_year` (from 2000).
    fn self_signed(until_year: i32) -> (String, String) {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name.push(rcgen::DnType::CommonName, "system:node:n1");
        params.not_before = rcgen::date_time_ymd(2000, 1, 1);
        params.not_after = rcgen::date_time_ymd(until_year, 12, 31);
        (params.self_signed(&key).unwrap().pem(), key.serialize_pem())
    }

    #[test]
    fn a_written_kubeconfig_is_used_while_its_certificate_holds() {
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = dir.path().join("kubeconfig");
        assert!(!client_config_still_valid(&kubeconfig), "none yet");
        let store = CertificateStore::new(&dir.path().join("pki"), CLIENT_PREFIX);
        let (cert, key) = self_signed(2999);
        store.update(&cert, &key).unwrap();
        write_kubeconfig(&kubeconfig, "https://127.0.0.1:6443", &cert, &store.current_path()).unwrap();
        assert!(client_config_still_valid(&kubeconfig));
        let text = std::fs::read_to_string(&kubeconfig).unwrap();
        assert!(text.contains("current-context: default-context"), "{text}");
        assert!(text.contains("kubelet-client-current.pem"), "{text}");
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&kubeconfig).unwrap().permissions().mode() & 0o777, 0o600);

        let (expired, key) = self_signed(2001);
        store.update(&expired, &key).unwrap();
        assert!(!client_config_still_valid(&kubeconfig), "an expired certificate bootstraps again");
    }

    #[test]
    fn the_pending_key_survives_a_restart_and_a_broken_one_is_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let first = pending_key(dir.path()).unwrap();
        assert_eq!(pending_key(dir.path()).unwrap(), first, "the same key: the same request name");
        std::fs::write(dir.path().join(PENDING_KEY), "garbage").unwrap();
        let replaced = pending_key(dir.path()).unwrap();
        assert_ne!(replaced, first);
        assert!(public_key_der(&replaced).is_ok());
    }
}
