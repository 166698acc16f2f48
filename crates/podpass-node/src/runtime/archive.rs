//! Runnable images made on the machine, with no registry download: a ustar layer of a few
//! files (a static binary and its links), wrapped in an OCI image layout archive that
//! `ctr images import` loads — the sandbox ("pause") image containerd's CRI needs, and the
//! demo's and tests' application images. The bytes are the same for the same input (mtime
//! 0, root-owned), so the image ID is too.

use aws_lc_rs::digest;
use serde_json::{Value, json};

/// One entry of a layer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    /// A directory (`name` without a trailing slash).
    Dir {
        /// Path inside the image, relative (`bin`).
        name: String,
    },
    /// A regular file.
    File {
        /// Path inside the image, relative (`bin/busybox`).
        name: String,
        /// Permission bits (`0o755`).
        mode: u32,
        /// Its bytes.
        content: Vec<u8>,
    },
    /// A symbolic link.
    Symlink {
        /// Path inside the image (`bin/sh`).
        name: String,
        /// What it points to (`busybox`).
        target: String,
    },
}

/// The archive could not be made.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum ArchiveError {
    /// A name or link target longer than ustar's 100 bytes.
    #[error("{0:?} is longer than the 100 bytes a ustar name holds")]
    NameTooLong(String),
}

/// `sha256:<hex>` of `data`.
pub fn sha256(data: &[u8]) -> String {
    format!("sha256:{}", data_encoding::HEXLOWER.encode(digest::digest(&digest::SHA256, data).as_ref()))
}

fn header(name: &str, mode: u32, size: usize, kind: u8, link: &str) -> Result<[u8; 512], ArchiveError> {
    for s in [name, link] {
        if s.len() > 100 {
            return Err(ArchiveError::NameTooLong(s.to_owned()));
        }
    }
    let mut h = [0u8; 512];
    let put = |h: &mut [u8; 512], at: usize, v: &[u8]| h[at..at + v.len()].copy_from_slice(v);
    put(&mut h, 0, name.as_bytes());
    put(&mut h, 100, format!("{mode:07o}\0").as_bytes());
    put(&mut h, 108, b"0000000\0");
    put(&mut h, 116, b"0000000\0");
    put(&mut h, 124, format!("{size:011o}\0").as_bytes());
    put(&mut h, 136, b"00000000000\0");
    put(&mut h, 148, b"        ");
    h[156] = kind;
    put(&mut h, 157, link.as_bytes());
    put(&mut h, 257, b"ustar\0");
    put(&mut h, 263, b"00");
    let sum: u32 = h.iter().map(|b| u32::from(*b)).sum();
    put(&mut h, 148, format!("{sum:06o}\0 ").as_bytes());
    Ok(h)
}

/// A ustar archive of `entries`, in order, root-owned with mtime 0.
pub fn ustar(entries: &[Entry]) -> Result<Vec<u8>, ArchiveError> {
    let mut tar = Vec::new();
    for entry in entries {
        match entry {
            Entry::Dir { name } => tar.extend_from_slice(&header(&format!("{name}/"), 0o755, 0, b'5', "")?),
            Entry::File { name, mode, content } => {
                tar.extend_from_slice(&header(name, *mode, content.len(), b'0', "")?);
                tar.extend_from_slice(content);
                tar.resize(tar.len().div_ceil(512) * 512, 0);
            }
            Entry::Symlink { name, target } => tar.extend_from_slice(&header(name, 0o777, 0, b'2', target)?),
        }
    }
    tar.extend_from_slice(&[0u8; 1024]);
    Ok(tar)
}

/// Go's `GOARCH` for this machine, as image configs name it.
pub fn go_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
}

/// An OCI image layout archive (`oci-layout`, `index.json`, `blobs/sha256/…`) of one image
/// named `name` (`podpass.local/pause:1`) with one uncompressed `layer` and this
/// `entrypoint`/`cmd`; `ctr images import` takes it as is. Returns the archive and the
/// image's config digest (its ID).
pub fn oci_image(
    name: &str,
    layer: &[u8],
    entrypoint: &[&str],
    cmd: &[&str],
) -> Result<(Vec<u8>, String), ArchiveError> {
    let layer_digest = sha256(layer);
    let config = json!({
        "architecture": go_arch(), "os": "linux",
        "config": {"Entrypoint": entrypoint, "Cmd": cmd, "Env": ["PATH=/bin"], "WorkingDir": "/"},
        "rootfs": {"type": "layers", "diff_ids": [layer_digest]},
    });
    let config = serde_json::to_vec(&config).unwrap_or_default();
    let manifest = json!({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": sha256(&config), "size": config.len()},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": layer_digest, "size": layer.len()}],
    });
    let manifest = serde_json::to_vec(&manifest).unwrap_or_default();
    let tag = name.rsplit_once(':').map_or("latest", |(_, t)| t);
    let index = json!({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": sha256(&manifest),
                       "size": manifest.len(),
                       "annotations": {"io.containerd.image.name": name, "org.opencontainers.image.ref.name": tag},
                       "platform": {"architecture": go_arch(), "os": "linux"}}],
    });
    let blob = |data: &[u8]| Entry::File {
        name: format!("blobs/sha256/{}", sha256(data).trim_start_matches("sha256:")),
        mode: 0o644,
        content: data.to_vec(),
    };
    let id = sha256(&config);
    let entries = vec![
        Entry::File { name: "oci-layout".into(), mode: 0o644, content: br#"{"imageLayoutVersion":"1.0.0"}"#.to_vec() },
        Entry::File { name: "index.json".into(), mode: 0o644, content: json_bytes(&index) },
        Entry::Dir { name: "blobs".into() },
        Entry::Dir { name: "blobs/sha256".into() },
        blob(layer),
        blob(&config),
        blob(&manifest),
    ];
    Ok((ustar(&entries)?, id))
}

fn json_bytes(v: &Value) -> Vec<u8> {
    serde_json::to_vec(v).unwrap_or_default()
}

/// A layer holding `busybox` (a static binary's bytes) at `bin/busybox` and links to it
/// for each of `applets` (`sh`, `sleep`, `cat`, …), plus `extra` files.
pub fn busybox_layer(busybox: &[u8], applets: &[&str], extra: Vec<Entry>) -> Result<Vec<u8>, ArchiveError> {
    let mut entries = vec![
        Entry::Dir { name: "bin".into() },
        Entry::File { name: "bin/busybox".into(), mode: 0o755, content: busybox.to_vec() },
    ];
    entries.extend(applets.iter().map(|a| Entry::Symlink { name: format!("bin/{a}"), target: "busybox".into() }));
    for dir in ["etc", "tmp", "proc", "sys", "dev", "var", "var/run"] {
        entries.push(Entry::Dir { name: dir.into() });
    }
    entries.extend(extra);
    ustar(&entries)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_layer_is_ustar_with_files_links_and_directories() {
        let tar = busybox_layer(b"\x7fELF", &["sh"], vec![]).unwrap_or_default();
        assert_eq!(&tar[0..4], b"bin/");
        assert_eq!(tar[156], b'5', "a directory");
        assert_eq!(&tar[512..523], b"bin/busybox");
        assert_eq!(tar[512 + 156], b'0');
        assert_eq!(&tar[512 + 124..512 + 135], b"00000000004", "size in octal");
        // the file's data block, then the link
        let link = &tar[1536..2048];
        assert_eq!(&link[0..6], b"bin/sh");
        assert_eq!(link[156], b'2');
        assert_eq!(&link[157..164], b"busybox");
        assert_eq!(tar.len() % 512, 0);
        assert!(tar.ends_with(&[0u8; 1024]));
        let long = "x".repeat(101);
        assert_eq!(ustar(&[Entry::Dir { name: long.clone() }]), Err(ArchiveError::NameTooLong(format!("{long}/"))));
    }

    #[test]
    fn the_image_is_an_oci_layout_with_its_blobs_named_by_digest() {
        let layer = busybox_layer(b"bin", &["sleep"], vec![]).unwrap_or_default();
        let (archive, id) =
            oci_image("podpass.local/pause:1", &layer, &["/bin/sleep"], &["2147483647"]).unwrap_or_default();
        let again = oci_image("podpass.local/pause:1", &layer, &["/bin/sleep"], &["2147483647"]).unwrap_or_default();
        assert_eq!((archive.clone(), id.clone()), again, "the same bytes every time");
        let text = String::from_utf8_lossy(&archive);
        assert!(text.contains(r#""io.containerd.image.name":"podpass.local/pause:1""#), "{text}");
        assert!(text.contains(&format!("blobs/sha256/{}", id.trim_start_matches("sha256:"))));
        assert!(text.contains(&format!("blobs/sha256/{}", sha256(&layer).trim_start_matches("sha256:"))));
    }
}
