//! The kubelet's certificate files (client-go `certificate.fileStore`): each certificate
//! with its key in one dated PEM file, `<prefix>-<YYYY-MM-DD-HH-MM-SS>.pem` (0600), and
//! `<prefix>-current.pem` a symlink to the one in use, switched by renaming a fresh
//! `<prefix>-updated.pem` symlink over it, so a reader sees the old pair or the new one,
//! never half of each.

use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use super::CertificateError;

/// A certificate and its private key as one stored pair, with the leaf's validity.
#[derive(Clone, PartialEq, Eq)]
pub struct StoredPair {
    /// The certificate chain, PEM, leaf first.
    pub cert_pem: String,
    /// The private key, PEM.
    pub key_pem: String,
    /// The leaf's notBefore, Unix seconds.
    pub not_before: i64,
    /// The leaf's notAfter, Unix seconds.
    pub not_after: i64,
    /// The leaf's subject common name (`system:node:<name>` for a kubelet's).
    pub common_name: String,
}

impl std::fmt::Debug for StoredPair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The key never reaches a log.
        f.debug_struct("StoredPair").field("not_before", &self.not_before).field("not_after", &self.not_after).finish()
    }
}

/// The files of one certificate role in a directory (`kubelet-client` or `kubelet-server`
/// in the kubelet's `--cert-dir`).
#[derive(Debug, Clone)]
pub struct CertificateStore {
    dir: PathBuf,
    prefix: &'static str,
}

/// What the kubelet names its client certificate's files.
pub const CLIENT_PREFIX: &str = "kubelet-client";

/// What the kubelet names its serving certificate's files.
pub const SERVER_PREFIX: &str = "kubelet-server";

/// Largest stored PEM read back: a chain and a key are a few KiB.
const MAX_PEM_BYTES: u64 = 256 * 1024;

impl CertificateStore {
    /// The store of `prefix` in `dir` (created 0700 on the first update).
    pub fn new(dir: &Path, prefix: &'static str) -> Self {
        Self { dir: dir.to_path_buf(), prefix }
    }

    /// The role's file prefix (`kubelet-client`).
    pub fn prefix(&self) -> &'static str {
        self.prefix
    }

    /// `<prefix>-current.pem`: what a kubeconfig names as its client certificate and key.
    pub fn current_path(&self) -> PathBuf {
        self.dir.join(format!("{}-current.pem", self.prefix))
    }

    /// The pair `<prefix>-current.pem` holds, `None` when there is none yet. A file that
    /// is not a certificate and a key is an error naming it (never taken for absent: the
    /// caller decides whether to replace it).
    pub fn current(&self) -> Result<Option<StoredPair>, CertificateError> {
        let path = self.current_path();
        let io = |source| CertificateError::Io { path: path.clone(), source };
        let text = match read_bounded(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io(e)),
        };
        parse_pair(&text).map(Some).map_err(|e| CertificateError::Stored { path, reason: e.to_string() })
    }

    /// Stores a new pair and makes it current: the dated file written durably (0600), then
    /// `<prefix>-updated.pem` pointed at it and renamed over `<prefix>-current.pem`, the
    /// directory fsynced. The pair must parse, so a broken certificate never becomes current.
    pub fn update(&self, cert_pem: &str, key_pem: &str) -> Result<StoredPair, CertificateError> {
        let text = format!("{}\n{}", cert_pem.trim_end(), key_pem.trim_start());
        let text = if text.ends_with('\n') { text } else { format!("{text}\n") };
        let pair = parse_pair(&text).map_err(|e| CertificateError::Issued { reason: e.to_string() })?;
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| CertificateError::Io { path, source }
        };
        if let Some(warning) = podpass_serve::durable::private_dir(&self.dir).map_err(io(&self.dir))? {
            tracing::warn!("certificate directory {warning}");
        }
        let stamp = jiff::Timestamp::now().strftime("%Y-%m-%d-%H-%M-%S").to_string();
        let dated = self.dir.join(format!("{}-{stamp}.pem", self.prefix));
        podpass_serve::durable::replace(&dated, text.as_bytes(), 0o600).map_err(io(&dated))?;
        let updated = self.dir.join(format!("{}-updated.pem", self.prefix));
        match std::fs::remove_file(&updated) {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::NotFound => {}
            Err(e) => return Err(io(&updated)(e)),
        }
        std::os::unix::fs::symlink(&dated, &updated).map_err(io(&updated))?;
        let current = self.current_path();
        std::fs::rename(&updated, &current).map_err(io(&current))?;
        std::fs::File::open(&self.dir).and_then(|d| d.sync_all()).map_err(io(&self.dir))?;
        Ok(pair)
    }
}

/// A file read whole, refused past [`MAX_PEM_BYTES`].
fn read_bounded(path: &Path) -> std::io::Result<String> {
    use std::io::Read;
    let mut text = String::new();
    let file = std::fs::File::open(path)?;
    file.take(MAX_PEM_BYTES + 1).read_to_string(&mut text)?;
    if text.len() as u64 > MAX_PEM_BYTES {
        return Err(std::io::Error::new(ErrorKind::InvalidData, format!("larger than {MAX_PEM_BYTES} bytes")));
    }
    Ok(text)
}

/// Why a PEM text is not a certificate chain and its one key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct MalformedPair(String);

/// The certificates and the one private key of a PEM text, with the leaf's validity.
pub(super) fn parse_pair(text: &str) -> Result<StoredPair, MalformedPair> {
    let mut certs = Vec::new();
    let mut keys = Vec::new();
    for block in x509_parser::pem::Pem::iter_from_buffer(text.as_bytes()) {
        let block = block.map_err(|e| MalformedPair(format!("not PEM: {e}")))?;
        match block.label.as_str() {
            "CERTIFICATE" => certs.push(block),
            "PRIVATE KEY" | "EC PRIVATE KEY" | "RSA PRIVATE KEY" => keys.push(block),
            other => return Err(MalformedPair(format!("unexpected PEM block {other:?}"))),
        }
    }
    let [key] = keys.as_slice() else { return Err(MalformedPair(format!("{} private keys, want one", keys.len()))) };
    let leaf = certs.first().ok_or_else(|| MalformedPair("no certificate".into()))?;
    let (_, cert) =
        x509_parser::parse_x509_certificate(&leaf.contents).map_err(|e| MalformedPair(format!("certificate: {e}")))?;
    let validity = cert.validity();
    let pem = podpass_token::pem::encode;
    Ok(StoredPair {
        cert_pem: certs.iter().map(|c| pem("CERTIFICATE", &c.contents)).collect(),
        key_pem: pem(&key.label, &key.contents),
        not_before: validity.not_before.timestamp(),
        not_after: validity.not_after.timestamp(),
        common_name: cert
            .subject()
            .iter_common_name()
            .next()
            .and_then(|c| c.as_str().ok())
            .unwrap_or_default()
            .to_owned(),
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn pair(cn: &str) -> (String, String) {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name.push(rcgen::DnType::CommonName, cn);
        let cert = params.self_signed(&key).unwrap();
        (cert.pem(), key.serialize_pem())
    }

    #[test]
    fn updates_keep_the_kubelets_layout_and_switch_current_whole() {
        let dir = tempfile::tempdir().unwrap();
        let store = CertificateStore::new(&dir.path().join("pki"), CLIENT_PREFIX);
        assert_eq!(store.current().unwrap(), None, "nothing stored yet");
        let (cert, key) = pair("system:node:n1");
        let stored = store.update(&cert, &key).unwrap();
        assert!(stored.not_after > stored.not_before);
        let current = store.current_path();
        assert!(current.ends_with("pki/kubelet-client-current.pem"));
        let target = std::fs::read_link(&current).unwrap();
        let name = target.file_name().unwrap().to_str().unwrap();
        // kubelet-client-YYYY-MM-DD-HH-MM-SS.pem
        assert_eq!(name.len(), "kubelet-client-".len() + 19 + ".pem".len(), "{name}");
        assert!(name.starts_with("kubelet-client-20") && name.ends_with(".pem"), "{name}");
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&target).unwrap().permissions().mode() & 0o777, 0o600);
        assert!(!dir.path().join("pki/kubelet-client-updated.pem").exists(), "the updated link was renamed");
        let read = store.current().unwrap().unwrap();
        assert_eq!(read, stored);
        assert_eq!(read.common_name, "system:node:n1");
        // What `podpass node explain` names the root dir by.
        assert_eq!(crate::certificate_node_name(dir.path()).as_deref(), Some("n1"));
        assert!(read.cert_pem.contains("BEGIN CERTIFICATE") && read.key_pem.contains("BEGIN PRIVATE KEY"));

        // A second update makes the new pair current.
        let (cert2, key2) = pair("system:node:n1");
        store.update(&cert2, &key2).unwrap();
        assert_eq!(store.current().unwrap().unwrap().key_pem.trim(), key2.trim());
    }

    #[test]
    fn a_broken_pair_is_never_made_current_and_a_broken_file_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let store = CertificateStore::new(dir.path(), CLIENT_PREFIX);
        let (cert, key) = pair("a");
        assert!(matches!(store.update("garbage", &key), Err(CertificateError::Issued { .. })));
        assert!(matches!(store.update(&cert, ""), Err(CertificateError::Issued { .. })));
        assert!(!store.current_path().exists());
        std::fs::write(store.current_path(), "not a pem").unwrap();
        let err = store.current().unwrap_err().to_string();
        assert!(err.contains("kubelet-client-current.pem"), "{err}");
        let (other_cert, _) = pair("b");
        std::fs::write(store.current_path(), format!("{cert}{other_cert}")).unwrap();
        assert!(store.current().unwrap_err().to_string().contains("0 private keys"));
    }
}
