//! Manifest downloads with a size cap. oci-client reads a manifest response whole into
//! memory, so a registry streaming gigabytes could exhaust the node; here the manifest GET
//! is made directly (after oci-client's token negotiation) and stops at
//! [`MAX_MANIFEST_BYTES`], the limit of distribution's own client.

use oci_client::Reference;
use oci_client::client::Client;
use oci_client::secrets::RegistryAuth;

use super::service::ImageError;
use super::service::PullAuth;

/// Largest manifest or index accepted (distribution's client: `maxManifestBodySize`).
pub const MAX_MANIFEST_BYTES: usize = 4 << 20;

/// Largest image config accepted. Real configs are kilobytes; the descriptor's size comes
/// from the registry, so it is bounded before anything is downloaded.
pub const MAX_CONFIG_BYTES: i64 = 8 << 20;

/// GETs the manifest `reference` names, accepting `accepted` media types, refusing a body
/// larger than [`MAX_MANIFEST_BYTES`] without reading past it.
pub async fn fetch_manifest(
    client: &Client,
    http: &reqwest::Client,
    plain_http: bool,
    reference: &Reference,
    auth: Option<&PullAuth>,
    accepted: &[&str],
) -> Result<Vec<u8>, ImageError> {
    let what = reference.whole();
    let registry_auth = match auth {
        Some(a) if !a.username.is_empty() || !a.password.is_empty() => {
            RegistryAuth::Basic(a.username.clone(), a.password.clone())
        }
        _ => RegistryAuth::Anonymous,
    };
    let token = client
        .auth(reference, &registry_auth, oci_client::RegistryOperation::Pull)
        .await
        .map_err(|e| super::embedded::map_oci(&what, e))?;
    let scheme = if plain_http { "http" } else { "https" };
    let tag_or_digest = reference.digest().or(reference.tag()).unwrap_or("latest");
    let url =
        format!("{scheme}://{}/v2/{}/manifests/{tag_or_digest}", reference.resolve_registry(), reference.repository());
    let mut request = http.get(&url).header(reqwest::header::ACCEPT, accepted.join(", "));
    request = match (token, &registry_auth) {
        (Some(t), _) => request.bearer_auth(t),
        (None, RegistryAuth::Basic(u, p)) => request.basic_auth(u, Some(p)),
        _ => request,
    };
    let mut response = request.send().await.map_err(|e| ImageError::Registry(format!("{what}: {e}")))?;
    let status = response.status();
    if !status.is_success() {
        let mut body = Vec::new();
        while let Ok(Some(chunk)) = response.chunk().await {
            body.extend_from_slice(&chunk);
            if body.len() > 64 << 10 {
                break;
            }
        }
        let text = String::from_utf8_lossy(&body);
        return Err(match status.as_u16() {
            401 | 403 => ImageError::Unauthorized(format!("unexpected status from GET request to {url}: {status}")),
            404 => ImageError::NotFound(what),
            _ => ImageError::Registry(format!("{url}: {status}: {}", text.trim())),
        });
    }
    let too_large =
        || ImageError::Unsupported(format!("{what}: manifest is larger than the {MAX_MANIFEST_BYTES}-byte limit"));
    if response.content_length().is_some_and(|n| n > MAX_MANIFEST_BYTES as u64) {
        return Err(too_large());
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| ImageError::Registry(format!("{what}: {e}")))? {
        if body.len() + chunk.len() > MAX_MANIFEST_BYTES {
            return Err(too_large());
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}
