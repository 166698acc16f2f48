//! Pull intents and pulled records on disk, byte-compatible with the kubelet's
//! (pullmanager/fs_pullrecords.go): `<root-dir>/image_manager/{pulling,pulled}` (0700),
//! files named `sha256-<hex of the key>`, JSON of `kubelet.config.k8s.io/v1beta1`
//! (v1alpha1 read too), strict decoding, atomic tmp+rename writes made durable with fsync,
//! and the read-side integrity check (a record must be for the key asked).
//!
//! These are blocking file operations; async callers run them on `spawn_blocking`.

use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use std::borrow::Cow;

use serde::{Deserialize, Serialize};

pub use super::mapping::CredentialMapping;
use thiserror::Error;

/// The version written.
pub const API_VERSION: &str = "kubelet.config.k8s.io/v1beta1";
/// Versions read.
pub const READ_VERSIONS: [&str; 2] = ["kubelet.config.k8s.io/v1beta1", "kubelet.config.k8s.io/v1alpha1"];

/// The known kind and version strings share one static copy (a node holds thousands of
/// records in memory); anything else is kept as read (and refused by the decoder).
fn interned<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Cow<'static, str>, D::Error> {
    let s = String::deserialize(d)?;
    Ok(
        match [READ_VERSIONS[0], READ_VERSIONS[1], "ImagePulledRecord", "ImagePullIntent"].into_iter().find(|k| *k == s)
        {
            Some(k) => Cow::Borrowed(k),
            None => Cow::Owned(s),
        },
    )
}

/// A pull in progress (`ImagePullIntent`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ImagePullIntent {
    /// `ImagePullIntent`.
    pub kind: String,
    /// Version.
    pub api_version: String,
    /// The image as requested.
    pub image: String,
}

/// A secret that pulled an image.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ImagePullSecret {
    /// UID.
    pub uid: String,
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// The credential's `AuthConfigHash`.
    pub credential_hash: String,
}

/// A service account whose token pulled an image.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ImagePullServiceAccount {
    /// UID.
    pub uid: String,
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// Who may use an image (`ImagePullCredentials`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ImagePullCredentials {
    /// Secrets that pulled it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kubernetes_secrets: Vec<ImagePullSecret>,
    /// Service accounts that pulled it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kubernetes_service_accounts: Vec<ImagePullServiceAccount>,
    /// Pulled without credentials or with node-wide ones: every pod may use it.
    #[serde(default, skip_serializing_if = "is_false")]
    pub node_pods_accessible: bool,
}

/// An image on the node and the credentials that pulled it (`ImagePulledRecord`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ImagePulledRecord {
    /// `ImagePulledRecord`.
    #[serde(deserialize_with = "interned")]
    pub kind: Cow<'static, str>,
    /// Version.
    #[serde(deserialize_with = "interned")]
    pub api_version: Cow<'static, str>,
    /// RFC 3339 (seconds) of the last change.
    pub last_updated_time: String,
    /// The CRI image ID.
    pub image_ref: String,
    /// Normalised image name → credentials.
    #[serde(default, skip_serializing_if = "CredentialMapping::is_empty")]
    pub credential_mapping: CredentialMapping,
}

/// A record store failure.
#[derive(Debug, Error)]
pub enum RecordError {
    /// I/O on a path.
    #[error("{path}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// A file that does not decode strictly, or is of another kind/version.
    #[error("{path}: {reason}")]
    Decode {
        /// The path.
        path: PathBuf,
        /// Why.
        reason: String,
    },
}

impl RecordError {
    /// What the file is, from its directory: `pull intent` (`pulling/`), `pulled record`
    /// (`pulled/`), else `image record`.
    pub fn file_kind(&self) -> &'static str {
        let (RecordError::Io { path, .. } | RecordError::Decode { path, .. }) = self;
        match path.parent().and_then(Path::file_name).and_then(|n| n.to_str()) {
            Some("pulling") => "pull intent",
            Some("pulled") => "pulled record",
            _ => "image record",
        }
    }
}

/// `sha256-<hex>` of a key.
pub fn file_name(key: &str) -> String {
    let digest = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, key.as_bytes());
    format!("sha256-{}", data_encoding::HEXLOWER.encode(digest.as_ref()))
}

/// The two record directories under a kubelet root dir.
#[derive(Debug, Clone)]
pub struct RecordStore {
    pulling: PathBuf,
    pulled: PathBuf,
    lock: PathBuf,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> RecordError + '_ {
    move |source| RecordError::Io { path: path.to_owned(), source }
}

/// Writes a record file: atomic, durable, 0600 (`durable::replace`).
fn write_atomic(path: &Path, data: &[u8]) -> Result<(), RecordError> {
    podpass_serve::durable::replace(path, data, 0o600).map_err(io(path))
}

/// A record kind with its `kind` and `apiVersion` fields.
pub trait Versioned {
    /// `(kind, apiVersion)`.
    fn kind_and_version(&self) -> (&str, &str);
}

impl Versioned for ImagePullIntent {
    fn kind_and_version(&self) -> (&str, &str) {
        (&self.kind, &self.api_version)
    }
}

impl Versioned for ImagePulledRecord {
    fn kind_and_version(&self) -> (&str, &str) {
        (self.kind.as_ref(), self.api_version.as_ref())
    }
}

fn decode<T: serde::de::DeserializeOwned + Versioned>(path: &Path, data: &[u8], kind: &str) -> Result<T, RecordError> {
    // One pass straight into the struct for the common case; anything off is re-read
    // through a generic value for the precise error.
    if let Ok(item) = serde_json::from_slice::<T>(data) {
        let (k, v) = item.kind_and_version();
        if k == kind && READ_VERSIONS.contains(&v) {
            return Ok(item);
        }
    }
    let err = |reason: String| RecordError::Decode { path: path.to_owned(), reason };
    let value: serde_json::Value = serde_json::from_slice(data).map_err(|e| err(e.to_string()))?;
    let got_kind = value.get("kind").and_then(serde_json::Value::as_str).unwrap_or("");
    let version = value.get("apiVersion").and_then(serde_json::Value::as_str).unwrap_or("");
    if got_kind != kind || !READ_VERSIONS.contains(&version) {
        return Err(err(format!("no kind {got_kind:?} is registered for version {version:?}")));
    }
    serde_json::from_value(value).map_err(|e| err(format!("strict decoding error: {e}")))
}

/// Decodes the bytes of a pulled-record file as [`RecordStore::get_pulled`] does (strict,
/// upstream kinds and versions); `path` only names the file in errors.
pub fn decode_pulled(path: &Path, data: &[u8]) -> Result<ImagePulledRecord, RecordError> {
    decode(path, data, "ImagePulledRecord")
}

/// Decodes the bytes of a pull-intent file, as start-up housekeeping reads them.
pub fn decode_intent(path: &Path, data: &[u8]) -> Result<ImagePullIntent, RecordError> {
    decode(path, data, "ImagePullIntent")
}

/// Encodes as the kubelet's JSON serializer does (compact, trailing newline).
pub fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    let mut out = serde_json::to_vec(value).unwrap_or_default();
    out.push(b'\n');
    out
}

impl RecordStore {
    /// Opens (creating, 0700) `<root_dir>/image_manager/{pulling,pulled}`.
    pub fn open(root_dir: &Path) -> Result<Self, RecordError> {
        let base = root_dir.join("image_manager");
        let (pulling, pulled) = (base.join("pulling"), base.join("pulled"));
        for dir in [&pulling, &pulled] {
            std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir).map_err(io(dir))?;
        }
        let store = Self { pulling, pulled, lock: base.join(".lock") };
        // At open, not only in the agent's background warm-up: a one-shot command that
        // exits first cleans up too.
        store.remove_stale_tmp();
        Ok(store)
    }

    /// Removes tmp files that writers killed mid-write left in both directories.
    pub fn remove_stale_tmp(&self) -> usize {
        podpass_serve::durable::remove_stale_tmp(&self.pulling) + podpass_serve::durable::remove_stale_tmp(&self.pulled)
    }

    /// An exclusive advisory lock (flock on `image_manager/.lock`) for read-modify-write of
    /// records, released when the returned file is dropped: node processes sharing a root
    /// dir merge credentials without losing each other's.
    pub fn lock(&self) -> Result<std::fs::File, RecordError> {
        let f = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .open(&self.lock)
            .map_err(io(&self.lock))?;
        f.lock().map_err(io(&self.lock))?;
        Ok(f)
    }

    /// Records that `image` is being pulled.
    pub fn write_intent(&self, image: &str) -> Result<(), RecordError> {
        let intent =
            ImagePullIntent { kind: "ImagePullIntent".into(), api_version: API_VERSION.into(), image: image.into() };
        write_atomic(&self.pulling.join(file_name(image)), &encode(&intent))
    }

    /// Whether an intent for exactly `image` exists.
    pub fn intent_exists(&self, image: &str) -> Result<bool, RecordError> {
        let path = self.pulling.join(file_name(image));
        match std::fs::read(&path) {
            Ok(data) => Ok(decode::<ImagePullIntent>(&path, &data, "ImagePullIntent")?.image == image),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(io(&path)(e)),
        }
    }

    /// Removes the intent (absent is fine).
    pub fn delete_intent(&self, image: &str) -> Result<(), RecordError> {
        remove(&self.pulling.join(file_name(image)))
    }

    /// Writes a pulled record.
    pub fn write_pulled(&self, record: &ImagePulledRecord) -> Result<(), RecordError> {
        write_atomic(&self.pulled.join(file_name(&record.image_ref)), &encode(record))
    }

    /// The record for exactly `image_ref` (a file holding another ref is not it).
    pub fn get_pulled(&self, image_ref: &str) -> Result<Option<ImagePulledRecord>, RecordError> {
        let path = self.pulled.join(file_name(image_ref));
        match std::fs::read(&path) {
            Ok(data) => {
                let record = decode_pulled(&path, &data)?;
                Ok((record.image_ref == image_ref).then_some(record))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io(&path)(e)),
        }
    }

    /// Removes the record (absent is fine).
    pub fn delete_pulled(&self, image_ref: &str) -> Result<(), RecordError> {
        remove(&self.pulled.join(file_name(image_ref)))
    }

    /// How many intent and pulled-record files there are (names only; nothing is read).
    pub fn count_files(&self) -> (usize, usize) {
        let count = |dir: &Path| {
            std::fs::read_dir(dir).map_or(0, |entries| {
                entries
                    .filter_map(Result::ok)
                    .filter(|e| {
                        let name = e.file_name();
                        let name = name.to_string_lossy();
                        name.starts_with("sha256-") && !name.ends_with(".tmp")
                    })
                    .count()
            })
        };
        (count(&self.pulling), count(&self.pulled))
    }

    /// Every intent, and the errors of files that did not read.
    pub fn list_intents(&self) -> (Vec<ImagePullIntent>, Vec<RecordError>) {
        list(&self.pulling, "ImagePullIntent")
    }

    /// Every pulled record, and the errors of files that did not read.
    pub fn list_pulled(&self) -> (Vec<ImagePulledRecord>, Vec<RecordError>) {
        list(&self.pulled, "ImagePulledRecord")
    }
}

fn remove(path: &Path) -> Result<(), RecordError> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io(path)(e)),
    }
}

/// Readers used for a listing: reading many small files is latency-bound on a cold page
/// cache, so several are kept in flight.
const LIST_READERS: usize = 16;

/// Top-level `sha256-*` files (not `.tmp`, not directories), decoded; failures collected.
fn list<T: serde::de::DeserializeOwned + Versioned + Send>(dir: &Path, kind: &str) -> (Vec<T>, Vec<RecordError>) {
    let (mut items, mut errors) = (Vec::new(), Vec::new());
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) => return (items, vec![io(dir)(e)]),
    };
    let mut paths = Vec::new();
    for entry in entries {
        let entry = match entry {
            Ok(e) => e,
            Err(e) => {
                errors.push(io(dir)(e));
                continue;
            }
        };
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.starts_with("sha256-") || name.ends_with(".tmp") || entry.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        paths.push((std::os::unix::fs::DirEntryExt::ino(&entry), entry.path()));
    }
    // Inode order reads the files close to where the file system put them (cold caches).
    paths.sort_unstable_by_key(|(ino, _)| *ino);
    let paths: Vec<PathBuf> = paths.into_iter().map(|(_, p)| p).collect();
    let read_one = |path: &PathBuf| -> Result<T, RecordError> {
        let data = std::fs::read(path).map_err(io(path))?;
        decode(path, &data, kind)
    };
    let chunk = paths.len().div_ceil(LIST_READERS).max(1);
    let results: Vec<Vec<Result<T, RecordError>>> = if paths.len() < 64 {
        vec![paths.iter().map(read_one).collect()]
    } else {
        std::thread::scope(|scope| {
            let handles: Vec<_> =
                paths.chunks(chunk).map(|part| scope.spawn(move || part.iter().map(read_one).collect())).collect();
            handles.into_iter().map(|h| h.join().unwrap_or_default()).collect()
        })
    };
    items.reserve_exact(paths.len());
    for r in results.into_iter().flatten() {
        match r {
            Ok(item) => items.push(item),
            Err(e) => errors.push(e),
        }
    }
    (items, errors)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn record(image_ref: &str) -> ImagePulledRecord {
        let mut mapping = CredentialMapping::new();
        mapping.insert(
            "docker.io/testing/test".to_owned(),
            ImagePullCredentials {
                kubernetes_secrets: vec![ImagePullSecret {
                    uid: "testsecretuid".into(),
                    namespace: "default".into(),
                    name: "pull-secret".into(),
                    credential_hash: "testsecrethash".into(),
                }],
                ..Default::default()
            },
        );
        mapping.insert(
            "repo.repo/test/test".to_owned(),
            ImagePullCredentials { node_pods_accessible: true, ..Default::default() },
        );
        ImagePulledRecord {
            kind: "ImagePulledRecord".into(),
            api_version: API_VERSION.into(),
            last_updated_time: "2024-10-21T12:12:12Z".into(),
            image_ref: image_ref.into(),
            credential_mapping: mapping,
        }
    }

    #[test]
    fn file_names_are_sha256_of_the_key() {
        // sha256("testimageref") and sha256("repo.repo/test/test:latest"), computed with sha256sum.
        assert!(file_name("testimageref").starts_with("sha256-b3c0cc42"));
        assert!(file_name("repo.repo/test/test:latest").starts_with("sha256-7d8c031e"));
        assert!(file_name("repo.repo/test/test:latest").ends_with("1c02"));
    }

    #[test]
    fn writes_the_kubelet_format_and_reads_it_back() {
        let root = tempfile::tempdir().unwrap();
        let store = RecordStore::open(root.path()).unwrap();
        let dir = root.path().join("image_manager/pulled");
        assert_eq!(std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777, 0o700);
        store.write_pulled(&record("testimageref")).unwrap();
        let path = dir.join(file_name("testimageref"));
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "{\"kind\":\"ImagePulledRecord\",\"apiVersion\":\"kubelet.config.k8s.io/v1beta1\",\"lastUpdatedTime\":\"2024-10-21T12:12:12Z\",\"imageRef\":\"testimageref\",\"credentialMapping\":{\"docker.io/testing/test\":{\"kubernetesSecrets\":[{\"uid\":\"testsecretuid\",\"namespace\":\"default\",\"name\":\"pull-secret\",\"credentialHash\":\"testsecrethash\"}]},\"repo.repo/test/test\":{\"nodePodsAccessible\":true}}}\n"
        );
        assert_eq!(store.get_pulled("testimageref").unwrap(), Some(record("testimageref")));
        assert_eq!(store.get_pulled("other").unwrap(), None);
        store.write_intent("repo.repo/test/test:latest").unwrap();
        assert!(store.intent_exists("repo.repo/test/test:latest").unwrap());
        store.delete_intent("repo.repo/test/test:latest").unwrap();
        store.delete_intent("repo.repo/test/test:latest").unwrap();
        assert!(!store.intent_exists("repo.repo/test/test:latest").unwrap());
    }

    #[test]
    fn integrity_strictness_and_partial_listing() {
        let root = tempfile::tempdir().unwrap();
        let store = RecordStore::open(root.path()).unwrap();
        let dir = root.path().join("image_manager/pulled");
        // a record stored under another ref's name is not that ref's record
        let mut moved = record("sha256:aaa");
        moved.image_ref = "sha256:bbb".into();
        std::fs::write(dir.join(file_name("sha256:aaa")), encode(&moved)).unwrap();
        assert_eq!(store.get_pulled("sha256:aaa").unwrap(), None);
        // unknown fields and unknown versions are errors; v1alpha1 is read
        let unknown =
            String::from_utf8(encode(&record("u"))).unwrap().replace("\"imageRef\"", "\"extra\":1,\"imageRef\"");
        std::fs::write(dir.join(file_name("u")), unknown).unwrap();
        assert!(store.get_pulled("u").is_err());
        let alpha = String::from_utf8(encode(&record("a"))).unwrap().replace("v1beta1", "v1alpha1");
        std::fs::write(dir.join(file_name("a")), alpha).unwrap();
        assert_eq!(store.get_pulled("a").unwrap().unwrap().api_version, "kubelet.config.k8s.io/v1alpha1");
        let v2 = String::from_utf8(encode(&record("v"))).unwrap().replace("v1beta1", "v2");
        std::fs::write(dir.join(file_name("v")), v2).unwrap();
        // listing skips .tmp, foreign names and directories, and returns what decoded
        std::fs::write(dir.join("sha256-x.tmp"), "garbage").unwrap();
        std::fs::write(dir.join("notes.txt"), "garbage").unwrap();
        std::fs::create_dir(dir.join("sha256-dir")).unwrap();
        store.write_pulled(&record("good")).unwrap();
        let (items, errors) = store.list_pulled();
        let mut refs: Vec<_> = items.iter().map(|r| r.image_ref.as_str()).collect();
        refs.sort_unstable();
        assert_eq!(refs, ["a", "good", "sha256:bbb"]);
        assert_eq!(errors.len(), 2, "{errors:?}");
    }
}
