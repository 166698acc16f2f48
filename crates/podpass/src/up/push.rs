//! The demo's push: a one-file OCI image, uploaded over the registry v2 API with a bearer
//! token registry-auth granted a service account (Docker token protocol) — no password
//! anywhere.

use anyhow::{Context, Result, bail};
use aws_lc_rs::digest;
use serde_json::Value;

/// Answers larger than this are refused.
const MAX_ANSWER_BYTES: usize = 1024 * 1024;

/// `sha256:<hex>` of `data`.
pub fn sha256(data: &[u8]) -> String {
    format!("sha256:{}", data_encoding::HEXLOWER.encode(digest::digest(&digest::SHA256, data).as_ref()))
}

/// A tar archive (ustar) of one regular file `name` holding `content`, owned by root,
/// mode 0644, mtime 0: the same bytes every time, so the image is the same every run.
pub fn tar_one_file(name: &str, content: &[u8]) -> Vec<u8> {
    let mut header = [0u8; 512];
    let put = |h: &mut [u8; 512], at: usize, v: &[u8]| h[at..at + v.len()].copy_from_slice(v);
    put(&mut header, 0, &name.as_bytes()[..name.len().min(100)]);
    put(&mut header, 100, b"0000644\0");
    put(&mut header, 108, b"0000000\0");
    put(&mut header, 116, b"0000000\0");
    put(&mut header, 124, format!("{:011o}\0", content.len()).as_bytes());
    put(&mut header, 136, b"00000000000\0");
    put(&mut header, 148, b"        ");
    header[156] = b'0';
    put(&mut header, 257, b"ustar\0");
    put(&mut header, 263, b"00");
    let sum: u32 = header.iter().map(|b| u32::from(*b)).sum();
    put(&mut header, 148, format!("{sum:06o}\0 ").as_bytes());
    let mut tar = header.to_vec();
    tar.extend_from_slice(content);
    tar.resize(tar.len().div_ceil(512) * 512, 0);
    tar.extend_from_slice(&[0u8; 1024]);
    tar
}

/// A pushed image.
pub struct Pushed {
    /// The config's digest: the image ID.
    pub image_id: String,
    /// The manifest's digest.
    pub manifest_digest: String,
}

/// Asks registry-auth (`auth_url`) for a token of `scope` with the service-account token
/// `sa_token` as the password; returns the registry token and what was granted.
pub async fn registry_token(
    client: &reqwest::Client,
    auth_url: &str,
    service: &str,
    scope: &str,
    sa_token: &str,
) -> Result<String> {
    let resp = client
        .get(format!("{auth_url}/token"))
        .query(&[("service", service), ("scope", scope)])
        .basic_auth("podpass-up", Some(sa_token))
        .send()
        .await
        .context("asking registry-auth for a token")?;
    let status = resp.status();
    let body = bounded(resp).await?;
    if !status.is_success() {
        bail!("registry-auth answered {status}: {}", String::from_utf8_lossy(&body));
    }
    let v: Value = serde_json::from_slice(&body).context("registry-auth's answer")?;
    Ok(v["token"]
        .as_str()
        .or_else(|| v["access_token"].as_str())
        .context("registry-auth's answer has no token")?
        .to_owned())
}

async fn bounded(resp: reqwest::Response) -> Result<Vec<u8>> {
    let bytes = resp.bytes().await.context("reading an answer")?;
    if bytes.len() > MAX_ANSWER_BYTES {
        bail!("an answer of {} bytes", bytes.len());
    }
    Ok(bytes.to_vec())
}

/// What the demo's container runs: the file, its own token's claims (the JWT's middle
/// part), then it waits — leaving at once on SIGTERM.
pub const APP_SCRIPT: &str = "cat /hello.txt; cut -d. -f2 /var/run/secrets/kubernetes.io/serviceaccount/token; \
trap 'exit 0' TERM; while true; do sleep 1; done";

/// Pushes `repo:tag` to the registry at `registry_url` with `bearer`: one layer holding
/// `hello.txt` = `content` — and, given Debian's static `busybox`, a shell running
/// [`APP_SCRIPT`], so the image runs on the node.
pub async fn push(
    client: &reqwest::Client,
    registry_url: &str,
    bearer: &str,
    repo: &str,
    tag: &str,
    content: &str,
    busybox: Option<&[u8]>,
) -> Result<Pushed> {
    let (layer, cmd) = match busybox {
        Some(busybox) => {
            let hello = podpass_node::runtime::archive::Entry::File {
                name: "hello.txt".into(),
                mode: 0o644,
                content: content.as_bytes().to_vec(),
            };
            let layer =
                podpass_node::runtime::archive::busybox_layer(busybox, &["sh", "cat", "cut", "sleep"], vec![hello])?;
            (layer, serde_json::json!(["/bin/sh", "-c", APP_SCRIPT]))
        }
        None => (tar_one_file("hello.txt", content.as_bytes()), serde_json::json!(["/bin/cat", "/hello.txt"])),
    };
    let config = serde_json::json!({
        "architecture": podpass_node::runtime::archive::go_arch(), "os": "linux", "config": {"Cmd": cmd},
        "rootfs": {"type": "layers", "diff_ids": [sha256(&layer)]},
    })
    .to_string()
    .into_bytes();
    for blob in [&config, &layer] {
        upload_blob(client, registry_url, bearer, repo, blob).await?;
    }
    let manifest = serde_json::json!({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": sha256(&config), "size": config.len()},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": sha256(&layer), "size": layer.len()}],
    })
    .to_string()
    .into_bytes();
    let resp = client
        .put(format!("{registry_url}/v2/{repo}/manifests/{tag}"))
        .bearer_auth(bearer)
        .header("content-type", "application/vnd.oci.image.manifest.v1+json")
        .body(manifest.clone())
        .send()
        .await
        .context("pushing the manifest")?;
    let status = resp.status();
    if status != 201 {
        bail!("pushing the manifest: {status}: {}", String::from_utf8_lossy(&bounded(resp).await?));
    }
    Ok(Pushed { image_id: sha256(&config), manifest_digest: sha256(&manifest) })
}

async fn upload_blob(
    client: &reqwest::Client,
    registry_url: &str,
    bearer: &str,
    repo: &str,
    blob: &[u8],
) -> Result<()> {
    let digest = sha256(blob);
    let head = client
        .head(format!("{registry_url}/v2/{repo}/blobs/{digest}"))
        .bearer_auth(bearer)
        .send()
        .await
        .context("checking a blob")?;
    if head.status() == 200 {
        return Ok(());
    }
    let resp = client
        .post(format!("{registry_url}/v2/{repo}/blobs/uploads/"))
        .bearer_auth(bearer)
        .send()
        .await
        .context("starting a blob upload")?;
    let status = resp.status();
    if status != 202 {
        bail!("starting a blob upload: {status}: {}", String::from_utf8_lossy(&bounded(resp).await?));
    }
    let location = resp
        .headers()
        .get("location")
        .and_then(|v| v.to_str().ok())
        .context("the registry's upload answer has no Location")?
        .to_owned();
    let mut url = if location.starts_with("http://") || location.starts_with("https://") {
        location
    } else {
        format!("{registry_url}{location}")
    };
    url.push(if url.contains('?') { '&' } else { '?' });
    url.push_str(&format!("digest={digest}"));
    let resp = client
        .put(url)
        .bearer_auth(bearer)
        .header("content-type", "application/octet-stream")
        .body(blob.to_vec())
        .send()
        .await
        .context("uploading a blob")?;
    let status = resp.status();
    if status != 201 {
        bail!("uploading blob {digest}: {status}: {}", String::from_utf8_lossy(&bounded(resp).await?));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tar_is_a_valid_ustar_archive_of_one_file() {
        let tar = tar_one_file("hello.txt", b"hi\n");
        assert_eq!(tar.len(), 512 + 512 + 1024);
        assert_eq!(&tar[0..9], b"hello.txt");
        assert_eq!(&tar[257..263], b"ustar\0");
        // the checksum counts the checksum field as spaces
        let mut h = tar[..512].to_vec();
        let stored = u32::from_str_radix(std::str::from_utf8(&h[148..154]).unwrap(), 8).unwrap();
        h[148..156].copy_from_slice(b"        ");
        assert_eq!(stored, h.iter().map(|b| u32::from(*b)).sum::<u32>());
        assert_eq!(&tar[512..515], b"hi\n");
        assert_eq!(tar_one_file("hello.txt", b"hi\n"), tar, "reproducible");
    }
}
