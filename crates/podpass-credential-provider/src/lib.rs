//! The kubelet credential-provider exec plugin (credentialprovider.kubelet.k8s.io/v1)
//! behind the `podpass-credential-provider` binary: it reads a `CredentialProviderRequest`
//! carrying the pod's service-account token (`tokenAttributes` in the kubelet's config) and
//! answers credentials for the image's registry.
//!
//! The kubelet execs the plugin for every pull it has no cached credential for, so this
//! crate stands alone: its tree is an HTTP client (reqwest on rustls) and the provider wire
//! types of `podpass-api` — no server stack, no Kubernetes client.
//!
//! - `passthrough`: the token itself is the password (registry-auth verifies it per pull);
//!   the kubelet's `cacheType` must be `Token`, since the credential is the token.
//! - `exchange`: the token is traded at registry-auth for an exchange token bound to the
//!   service account (UID included) and to the pod and node of the token it came from,
//!   answered with a `cacheDuration` below its lifetime. The kubelet's `cacheType` should be
//!   `Token`: an answer then serves the pod whose token made it (each pod's token is its
//!   own key), as upstream's cache semantics call for credentials bound to the token; one
//!   exchange per pod and token rotation, not per pull. Under `ServiceAccount` another pod
//!   would reuse an exchange token that ends with its pod.
//!
//! Errors never carry a token.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use podpass_api::GoDuration;
use podpass_api::credential_provider::wire::PROVIDER_API_VERSIONS;
use podpass_api::credential_provider::{AuthConfig, CredentialProviderRequest, CredentialProviderResponse};
use serde::Deserialize;
use thiserror::Error;

/// Requests larger than this are refused.
pub const MAX_REQUEST_BYTES: usize = 1024 * 1024;
/// The username answered (registries ignore it; the password carries the identity).
pub const USERNAME: &str = "podpass";
/// Timeout of the exchange call.
const EXCHANGE_TIMEOUT: Duration = Duration::from_secs(20);

/// What the plugin does with the token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PluginMode {
    /// Answer the service-account token as the password.
    Passthrough,
    /// Trade it at registry-auth.
    Exchange(ExchangeConfig),
}

/// Where and how to exchange.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExchangeConfig {
    /// registry-auth's base URL (`https://…`, or `http://` on loopback).
    pub url: String,
    /// PEM bundle trusted for it instead of the platform's roots.
    pub ca_pem: Option<Vec<u8>>,
    /// The node's TLS client certificate and key (PEM; one file may hold both, as the
    /// kubelet's `kubelet-client-current.pem`), presented to registry-auth as the node's
    /// proof; re-read per call, so a rotated certificate is used at once.
    pub client_identity: Option<ClientIdentity>,
}

/// A TLS client identity read from PEM files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientIdentity {
    /// `--client-certificate`: the certificate chain, leaf first.
    pub certificate: PathBuf,
    /// `--client-key`: its private key (may be the same file).
    pub key: PathBuf,
}

/// The plugin failed; the message is printed on stderr.
#[derive(Debug, Error)]
pub enum PluginError {
    /// The request on stdin is not a CredentialProviderRequest.
    #[error("reading the CredentialProviderRequest: {0}")]
    Request(String),
    /// No token in the request.
    #[error(
        "the request carries no serviceAccountToken: set tokenAttributes (serviceAccountTokenAudience = registry-auth's --audience) for this provider in the kubelet's CredentialProviderConfig"
    )]
    NoToken,
    /// The exchange call failed.
    #[error("exchange at {url}: {reason}")]
    Exchange {
        /// registry-auth's token URL.
        url: String,
        /// Why (registry-auth's error description, or the transport error).
        reason: String,
    },
    /// The client certificate or key could not be read or used.
    #[error("{flag} {path}: {reason}")]
    ClientIdentity {
        /// `--client-certificate` or `--client-key`.
        flag: &'static str,
        /// The file.
        path: String,
        /// Why.
        reason: String,
    },
}

/// Decodes and checks the kubelet's request.
pub fn decode_request(bytes: &[u8]) -> Result<CredentialProviderRequest, PluginError> {
    if bytes.len() > MAX_REQUEST_BYTES {
        return Err(PluginError::Request(format!("larger than {MAX_REQUEST_BYTES} bytes")));
    }
    let request: CredentialProviderRequest =
        serde_json::from_slice(bytes).map_err(|e| PluginError::Request(e.to_string()))?;
    if request.kind != "CredentialProviderRequest" {
        return Err(PluginError::Request(format!("kind {:?} is not CredentialProviderRequest", request.kind)));
    }
    if !PROVIDER_API_VERSIONS.contains(&request.api_version.as_str()) {
        return Err(PluginError::Request(format!("apiVersion {:?} is not supported", request.api_version)));
    }
    if request.image.is_empty() {
        return Err(PluginError::Request("image is empty".into()));
    }
    Ok(request)
}

/// The registry part of an image (upstream parseRegistry: up to the first `/`), the key of
/// the answered credential.
fn registry_of(image: &str) -> &str {
    image.split_once('/').map_or(image, |(registry, _)| registry)
}

/// The unverified `exp` of a JWT (for cache durations only: the plugin is no verifier).
fn unverified_exp(token: &str) -> Option<i64> {
    #[derive(Deserialize)]
    struct Exp {
        exp: i64,
    }
    let payload = token.split('.').nth(1)?;
    let bytes = data_encoding::BASE64URL_NOPAD.decode(payload.as_bytes()).ok()?;
    serde_json::from_slice::<Exp>(&bytes).ok().map(|e| e.exp)
}

/// Four fifths of what is left of a token's life: cached credentials are dropped well
/// before the token behind them expires.
fn cache_duration(exp: Option<i64>, now: i64) -> GoDuration {
    GoDuration::from_secs(exp.map_or(0, |exp| (exp - now).max(0) * 4 / 5))
}

fn response(request: &CredentialProviderRequest, password: String, cache: GoDuration) -> CredentialProviderResponse {
    let auth =
        BTreeMap::from([(registry_of(&request.image).to_owned(), AuthConfig { username: USERNAME.into(), password })]);
    CredentialProviderResponse {
        kind: "CredentialProviderResponse".into(),
        api_version: request.api_version.clone(),
        cache_key_type: Some("Registry".into()),
        cache_duration: Some(cache),
        auth,
    }
}

/// Answers `request` in `mode` at `now`.
pub async fn respond(
    mode: &PluginMode,
    request: &CredentialProviderRequest,
    now: i64,
) -> Result<CredentialProviderResponse, PluginError> {
    let token = request.service_account_token.trim();
    if token.is_empty() {
        return Err(PluginError::NoToken);
    }
    match mode {
        PluginMode::Passthrough => Ok(response(request, token.to_owned(), cache_duration(unverified_exp(token), now))),
        PluginMode::Exchange(config) => {
            let exchanged = exchange(config, token, &request.service_account_annotations).await?;
            let cache = cache_duration(unverified_exp(&exchanged), now);
            Ok(response(request, exchanged, cache))
        }
    }
}

#[derive(Deserialize)]
struct ExchangeAnswer {
    #[serde(default)]
    refresh_token: Option<String>,
}

#[derive(Deserialize)]
struct ErrorAnswer {
    #[serde(default)]
    error: String,
    #[serde(default)]
    error_description: String,
}

fn loopback_http(url: &reqwest::Url) -> bool {
    url.scheme() == "http"
        && match url.host() {
            Some(url::Host::Domain(d)) => d == "localhost",
            Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
            Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
            None => false,
        }
}

/// Client certificates and keys larger than this are refused.
const MAX_IDENTITY_BYTES: u64 = 64 * 1024;

/// The PEM identity of `--client-certificate` and `--client-key` (read afresh each call).
fn read_identity(identity: &ClientIdentity) -> Result<reqwest::Identity, PluginError> {
    use std::io::Read as _;
    let read = |flag: &'static str, path: &PathBuf| {
        let err = |reason: String| PluginError::ClientIdentity { flag, path: path.display().to_string(), reason };
        let mut bytes = Vec::new();
        std::fs::File::open(path)
            .and_then(|f| f.take(MAX_IDENTITY_BYTES + 1).read_to_end(&mut bytes))
            .map_err(|e| err(e.to_string()))?;
        if bytes.len() as u64 > MAX_IDENTITY_BYTES {
            return Err(err(format!("larger than {MAX_IDENTITY_BYTES} bytes")));
        }
        Ok(bytes)
    };
    let mut pem = read("--client-certificate", &identity.certificate)?;
    if identity.key != identity.certificate {
        pem.push(b'\n');
        pem.extend(read("--client-key", &identity.key)?);
    }
    reqwest::Identity::from_pem(&pem).map_err(|e| PluginError::ClientIdentity {
        flag: "--client-certificate",
        path: identity.certificate.display().to_string(),
        reason: format!("not a PEM certificate and private key: {e}"),
    })
}

/// Trades `token` for an exchange token.
async fn exchange(
    config: &ExchangeConfig,
    token: &str,
    annotations: &BTreeMap<String, String>,
) -> Result<String, PluginError> {
    let url = format!("{}/token", config.url.trim_end_matches('/'));
    let fail = |reason: String| PluginError::Exchange { url: url.clone(), reason };
    let parsed = reqwest::Url::parse(&url).map_err(|e| fail(e.to_string()))?;
    if parsed.scheme() != "https" && !loopback_http(&parsed) {
        return Err(fail("--exchange-url must be https:// (or http:// on loopback)".into()));
    }
    let mut builder = reqwest::Client::builder().timeout(EXCHANGE_TIMEOUT).redirect(reqwest::redirect::Policy::none());
    if let Some(pem) = &config.ca_pem {
        let certs = reqwest::Certificate::from_pem_bundle(pem).map_err(|e| fail(format!("--exchange-ca: {e}")))?;
        builder = builder.tls_certs_only(certs);
    }
    if let Some(identity) = &config.client_identity {
        builder = builder.identity(read_identity(identity)?);
    }
    let client = builder.build().map_err(|e| fail(e.to_string()))?;
    let mut form: Vec<(&str, String)> = vec![
        ("grant_type", "password".into()),
        ("username", USERNAME.into()),
        ("password", token.into()),
        ("access_type", "offline".into()),
        ("client_id", "podpass-credential-provider".into()),
    ];
    for (k, v) in annotations {
        form.push(("annotation", format!("{k}={v}")));
    }
    let body = form_urlencoded::Serializer::new(String::new()).extend_pairs(form).finish();
    let response = client
        .post(parsed)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(body)
        .send()
        .await
        .map_err(|e| fail(format!("request failed: {e}")))?;
    let status = response.status();
    let bytes = response.bytes().await.map_err(|e| fail(format!("reading the answer: {e}")))?;
    if bytes.len() > MAX_REQUEST_BYTES {
        return Err(fail("answer too large".into()));
    }
    if !status.is_success() {
        let why = serde_json::from_slice::<ErrorAnswer>(&bytes)
            .map(|e| format!("{}: {}", e.error, e.error_description))
            .unwrap_or_else(|_| "no error description".into());
        return Err(fail(format!("HTTP {}: {why}", status.as_u16())));
    }
    let answer: ExchangeAnswer = serde_json::from_slice(&bytes).map_err(|e| fail(format!("answer: {e}")))?;
    answer.refresh_token.filter(|t| !t.is_empty()).ok_or_else(|| fail("the answer holds no refresh_token".into()))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn request(token: &str) -> CredentialProviderRequest {
        let mut r =
            CredentialProviderRequest::new(podpass_api::credential_provider::wire::V1, "127.0.0.1:5000/team-a/app:v1");
        r.service_account_token = token.into();
        r
    }

    #[tokio::test]
    async fn passthrough_answers_the_token_for_the_registry_with_four_fifths_of_its_life() {
        let payload = data_encoding::BASE64URL_NOPAD.encode(br#"{"exp":1100}"#);
        let token = format!("h.{payload}.s");
        let r = respond(&PluginMode::Passthrough, &request(&token), 1000).await.unwrap();
        assert_eq!(r.api_version, podpass_api::credential_provider::wire::V1);
        assert_eq!(r.cache_key_type.as_deref(), Some("Registry"));
        assert_eq!(r.cache_duration, Some(GoDuration::from_secs(80)));
        assert_eq!(r.auth["127.0.0.1:5000"], AuthConfig { username: USERNAME.into(), password: token });
    }

    #[tokio::test]
    async fn no_token_is_an_error_that_says_what_to_configure() {
        let err = respond(&PluginMode::Passthrough, &request(""), 0).await.unwrap_err().to_string();
        assert!(err.contains("tokenAttributes"), "{err}");
    }

    #[test]
    fn requests_are_checked() {
        assert!(decode_request(b"{}").is_err());
        let ok = br#"{"kind":"CredentialProviderRequest","apiVersion":"credentialprovider.kubelet.k8s.io/v1","image":"a/b"}"#;
        assert_eq!(decode_request(ok).unwrap().image, "a/b");
        let wrong = br#"{"kind":"CredentialProviderRequest","apiVersion":"v9","image":"a/b"}"#;
        assert!(decode_request(wrong).unwrap_err().to_string().contains("apiVersion"));
        assert_eq!(registry_of("ubuntu"), "ubuntu");
    }
}
