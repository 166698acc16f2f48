//! Verification at the image's own registry (beyond upstream; KEP-2535 trusts the
//! runtime's pull). A container runtime may pull through a mirror or a P2P cache
//! (containerd `hosts.toml` mirrors) that serves an image without asking for credentials,
//! so a pull that succeeded proves nothing about the pod's access. After such a pull the
//! node asks the registry the image names — directly, never through a mirror — for the
//! manifest by digest (`HEAD /v2/<repo>/manifests/<digest>`) with the pod's credentials,
//! and only its answer may write a pull record or let a container start. The layers may
//! still come from the mirror.
//!
//! The registry's challenge is followed as the distribution token protocol says: Basic
//! credentials, or a Bearer token fetched from the challenge's realm (`GET realm?service=…
//! &scope=repository:<repo>:pull`) with the credentials as Basic auth and, where the node
//! has one, its TLS client certificate (registry-auth's proof of a node). Credentials are
//! never sent in clear to a host the registry itself is not reached in clear on, nor after
//! a redirect; every answer is bounded in size and time.

use podpass_serve::error_chain;
use std::sync::Arc;
use std::time::Duration;

use reqwest::StatusCode;
use reqwest::header::{ACCEPT, WWW_AUTHENTICATE};
use thiserror::Error;

use super::embedded::plain_http_allowed;
use super::reference::{ImageReference, parse};
use super::service::PullAuth;

/// The manifest media types a HEAD accepts (an index as well as an image manifest: the
/// digest a runtime records for a multi-platform image is its index's).
const ACCEPTED: &str = "application/vnd.oci.image.index.v1+json, application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.list.v2+json, application/vnd.docker.distribution.manifest.v2+json";
/// Largest token answer read (registry tokens are a few kilobytes).
const MAX_TOKEN_BYTES: usize = 64 << 10;
/// Longest a challenge header is parsed.
const MAX_CHALLENGE_BYTES: usize = 4 << 10;
/// One verification's deadline (the HEAD, the token, the second HEAD).
const DEADLINE: Duration = Duration::from_secs(30);

/// Why the registry did not confirm access.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum OriginError {
    /// The registry answered that these credentials may not read the manifest (401, 403,
    /// or 404 — a registry hides what a client may not see).
    #[error("{registry} refused {what}: {reason}")]
    Refused {
        /// `host[:port]`.
        registry: String,
        /// `repo@digest`.
        what: String,
        /// The registry's words.
        reason: String,
    },
    /// The registry could not be asked (network, TLS, 5xx, a malformed challenge).
    #[error("asking {registry} for {what}: {reason}")]
    Unreachable {
        /// `host[:port]`.
        registry: String,
        /// `repo@digest`.
        what: String,
        /// Why.
        reason: String,
    },
    /// The image reference or digest cannot be asked for.
    #[error("{0}")]
    Reference(String),
}

/// How the origin is reached: the trust and identity of the node's registry client.
#[derive(Clone, Default)]
pub struct OriginSettings {
    /// PEM CA bundle trusted for registries (and their token realms); with it, loopback
    /// registries are reached over HTTPS too, as the embedded store does.
    pub registry_ca: Option<Vec<u8>>,
    /// The node's TLS client certificate and key (PEM, concatenated), shown to any server
    /// that asks for one.
    pub client_identity: Option<Vec<u8>>,
    /// Registries reached over plain HTTP besides loopback ones (without a CA).
    pub insecure_registries: Vec<String>,
}

impl std::fmt::Debug for OriginSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OriginSettings")
            .field("registry_ca", &self.registry_ca.is_some())
            .field("client_identity", &self.client_identity.as_ref().map(|_| "<redacted>"))
            .field("insecure_registries", &self.insecure_registries)
            .finish()
    }
}

/// Flags of the origin check, shared by the node agent and `node ensure-image`.
#[derive(Debug, Clone, Default, PartialEq, Eq, clap::Args)]
pub struct OriginFlags {
    /// Take a container runtime's successful pull as proof that the pod may use the image,
    /// as the kubelet does, instead of asking the image's own registry. A mirror or P2P
    /// cache that serves images without credentials then proves access for anyone.
    #[arg(long)]
    pub trust_runtime_pulls: bool,
    /// The node's TLS client certificate (PEM), shown to registries and token realms that
    /// ask for one when the node verifies a pull at the image's registry.
    #[arg(long, requires = "registry_client_key_file")]
    pub registry_client_cert_file: Option<std::path::PathBuf>,
    /// The key of `--registry-client-cert-file` (PEM).
    #[arg(long, requires = "registry_client_cert_file")]
    pub registry_client_key_file: Option<std::path::PathBuf>,
}

impl OriginFlags {
    /// The client identity the flags name, read and checked: `Err` holds each problem with
    /// the flag it concerns.
    pub fn client_identity(&self) -> Result<Option<Vec<u8>>, Vec<(&'static str, String)>> {
        let (Some(cert), Some(key)) = (&self.registry_client_cert_file, &self.registry_client_key_file) else {
            return match (&self.registry_client_cert_file, &self.registry_client_key_file) {
                (None, None) => Ok(None),
                (Some(_), None) => {
                    Err(vec![("--registry-client-key-file", "is required with --registry-client-cert-file".into())])
                }
                _ => Err(vec![("--registry-client-cert-file", "is required with --registry-client-key-file".into())]),
            };
        };
        let mut problems = Vec::new();
        let read = |flag: &'static str, path: &std::path::Path, problems: &mut Vec<(&'static str, String)>| {
            std::fs::read(path).map_err(|e| problems.push((flag, format!("{}: {e}", path.display())))).ok()
        };
        let cert_pem = read("--registry-client-cert-file", cert, &mut problems);
        let key_pem = read("--registry-client-key-file", key, &mut problems);
        let (Some(mut pem), Some(key_pem)) = (cert_pem, key_pem) else {
            return Err(problems);
        };
        pem.push(b'\n');
        pem.extend_from_slice(&key_pem);
        if let Err(e) = reqwest::Identity::from_pem(&pem) {
            return Err(vec![("--registry-client-cert-file", format!("{} with its key: {e}", cert.display()))]);
        }
        Ok(Some(pem))
    }
}

/// The origin checker: one HTTP client, no redirects. Its clones share the client, which
/// [`OriginCheck::set_client_identity`] replaces (a rotated node certificate).
#[derive(Debug, Clone)]
pub struct OriginCheck {
    http: Arc<std::sync::RwLock<reqwest::Client>>,
    registry_ca: Option<Vec<u8>>,
    tls_everywhere: bool,
    insecure_registries: Vec<String>,
}

/// Where a proof came from, for the decision and `podpass node explain`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OriginProof {
    /// The registry asked (`host[:port]`).
    pub registry: String,
    /// The manifest digest it confirmed.
    pub digest: String,
    /// `anonymous`, `basic` or `bearer`.
    pub auth: &'static str,
}

/// Why the origin check's HTTP client could not be built.
#[derive(Debug, thiserror::Error)]
pub enum OriginClientError {
    /// The registry CA bundle does not parse.
    #[error("registry CA bundle: {0}")]
    RegistryCa(reqwest::Error),
    /// The node's client certificate and key do not parse.
    #[error("client certificate: {0}")]
    ClientCertificate(reqwest::Error),
    /// The client could not be built.
    #[error("HTTP client: {0}")]
    Client(reqwest::Error),
}

/// A HEAD that got no answer.
#[derive(Debug, thiserror::Error)]
#[error("HEAD {url}: {chain}")]
struct HeadFailed {
    url: String,
    /// The error and its causes.
    chain: String,
}

impl OriginCheck {
    /// A checker with `settings`' trust and identity.
    pub fn new(settings: &OriginSettings) -> Result<Self, OriginClientError> {
        let http = Self::client(settings.registry_ca.as_deref(), settings.client_identity.as_deref())?;
        Ok(Self {
            http: Arc::new(std::sync::RwLock::new(http)),
            registry_ca: settings.registry_ca.clone(),
            tls_everywhere: settings.registry_ca.is_some(),
            insecure_registries: settings.insecure_registries.clone(),
        })
    }

    /// Shows `pem` (certificate and key) from the next connection on, in every clone; an
    /// identity that does not parse leaves the current one.
    pub fn set_client_identity(&self, pem: &[u8]) -> Result<(), OriginClientError> {
        let http = Self::client(self.registry_ca.as_deref(), Some(pem))?;
        match self.http.write() {
            Ok(mut current) => *current = http,
            Err(poisoned) => *poisoned.into_inner() = http,
        }
        Ok(())
    }

    fn http(&self) -> reqwest::Client {
        match self.http.read() {
            Ok(current) => current.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    fn client(
        registry_ca: Option<&[u8]>,
        client_identity: Option<&[u8]>,
    ) -> Result<reqwest::Client, OriginClientError> {
        let mut builder = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(Duration::from_secs(10))
            .timeout(DEADLINE)
            .user_agent(concat!("podpass/", env!("CARGO_PKG_VERSION")));
        if let Some(pem) = registry_ca {
            for cert in reqwest::Certificate::from_pem_bundle(pem).map_err(OriginClientError::RegistryCa)? {
                builder = builder.add_root_certificate(cert);
            }
        }
        if let Some(pem) = client_identity {
            let identity = reqwest::Identity::from_pem(pem).map_err(OriginClientError::ClientCertificate)?;
            builder = builder.identity(identity);
        }
        builder.build().map_err(OriginClientError::Client)
    }

    fn plain_http(&self, registry: &str) -> bool {
        if self.tls_everywhere {
            self.insecure_registries.iter().any(|r| r == registry)
        } else {
            plain_http_allowed(registry, &self.insecure_registries)
        }
    }

    /// Asks `image`'s registry whether `auth` (anonymous when `None`) may read the manifest
    /// `digest` of its repository.
    pub async fn verify(&self, image: &str, digest: &str, auth: Option<&PullAuth>) -> Result<OriginProof, OriginError> {
        let r = parse(image).map_err(|e| OriginError::Reference(format!("{image}: {e}")))?;
        if !valid_digest(digest) {
            return Err(OriginError::Reference(format!("{digest:?} is not a manifest digest")));
        }
        match tokio::time::timeout(DEADLINE, self.ask(&r, digest, auth)).await {
            Ok(result) => result,
            Err(_) => Err(OriginError::Unreachable {
                registry: r.domain.clone(),
                what: format!("{}@{digest}", r.path),
                reason: format!("no answer within {} s", DEADLINE.as_secs()),
            }),
        }
    }

    async fn ask(&self, r: &ImageReference, digest: &str, auth: Option<&PullAuth>) -> Result<OriginProof, OriginError> {
        let registry = r.domain.clone();
        let asked = Asked { registry: registry.clone(), what: format!("{}@{digest}", r.path) };
        let unreachable = |reason: String| asked.unreachable(reason);
        let refused = |reason: String| asked.refused(reason);
        let plain = self.plain_http(&registry);
        let scheme = if plain { "http" } else { "https" };
        // docker.io's API lives on another host (kubelet/containerd: the default registry host).
        let api_host = if registry == "docker.io" { "registry-1.docker.io" } else { registry.as_str() };
        let url = format!("{scheme}://{api_host}/v2/{}/manifests/{digest}", r.path);
        let proof =
            |how: &'static str| OriginProof { registry: registry.clone(), digest: digest.to_owned(), auth: how };

        let first = self.head(&url, None).await.map_err(|e| unreachable(e.to_string()))?;
        let challenge = match first {
            Answer::Ok => return Ok(proof("anonymous")),
            Answer::Denied { challenge, status } => match challenge {
                Some(c) => c,
                None => return Err(refused(format!("{status} with no challenge"))),
            },
            Answer::Other(status) => return Err(unreachable(format!("HEAD {url}: {status}"))),
        };
        let Some(auth) = auth.filter(|a| !a.username.is_empty() || !a.password.is_empty()) else {
            // Anonymous: a Bearer realm may still grant an anonymous token.
            if let Challenge::Bearer { realm, service } = &challenge {
                let token = self.token(realm, service.as_deref(), &r.path, None, plain).await;
                let token = token.map_err(|e| e.into_error(&asked))?;
                return self.head_with(&url, Credential::Bearer(&token), proof("anonymous"), &asked).await;
            }
            return Err(refused("anonymous access refused".into()));
        };
        match challenge {
            // In clear only where the registry is reached in clear at all (loopback, or
            // named by --insecure-registry), as the runtime would send them.
            Challenge::Basic => self.head_with(&url, Credential::Basic(auth), proof("basic"), &asked).await,
            Challenge::Bearer { realm, service } => {
                let token = self.token(&realm, service.as_deref(), &r.path, Some(auth), plain).await;
                let token = token.map_err(|e| e.into_error(&asked))?;
                self.head_with(&url, Credential::Bearer(&token), proof("bearer"), &asked).await
            }
        }
    }

    async fn head_with(
        &self,
        url: &str,
        credential: Credential<'_>,
        proof: OriginProof,
        asked: &Asked,
    ) -> Result<OriginProof, OriginError> {
        match self.head(url, Some(credential)).await.map_err(|e| asked.unreachable(e.to_string()))? {
            Answer::Ok => Ok(proof),
            Answer::Denied { status, .. } => Err(asked.refused(format!("HEAD {url}: {status}"))),
            Answer::Other(status) => Err(asked.unreachable(format!("HEAD {url}: {status}"))),
        }
    }

    async fn head(&self, url: &str, credential: Option<Credential<'_>>) -> Result<Answer, HeadFailed> {
        let mut request = self.http().head(url).header(ACCEPT, ACCEPTED);
        request = match credential {
            Some(Credential::Basic(a)) => request.basic_auth(&a.username, Some(&a.password)),
            Some(Credential::Bearer(t)) => request.bearer_auth(t),
            None => request,
        };
        let response = request.send().await.map_err(|e| HeadFailed { url: url.to_owned(), chain: error_chain(&e) })?;
        let status = response.status();
        Ok(match status {
            s if s.is_success() => Answer::Ok,
            StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN | StatusCode::NOT_FOUND => {
                let challenge = response
                    .headers()
                    .get_all(WWW_AUTHENTICATE)
                    .iter()
                    .filter_map(|v| v.to_str().ok())
                    .find_map(Challenge::parse);
                Answer::Denied { challenge, status }
            }
            s => Answer::Other(s),
        })
    }

    /// A Bearer token from `realm` for pulling `repository`.
    async fn token(
        &self,
        realm: &str,
        service: Option<&str>,
        repository: &str,
        auth: Option<&PullAuth>,
        registry_plain: bool,
    ) -> Result<String, TokenError> {
        let mut url =
            url::Url::parse(realm).map_err(|e| TokenError::Unusable(format!("token realm {realm:?}: {e}")))?;
        match url.scheme() {
            "https" => {}
            // A realm in clear only where the registry itself is reached in clear.
            "http" if registry_plain => {}
            other => {
                return Err(TokenError::Unusable(format!(
                    "token realm {realm:?}: scheme {other:?} would carry credentials in clear"
                )));
            }
        }
        {
            let mut q = url.query_pairs_mut();
            if let Some(s) = service {
                q.append_pair("service", s);
            }
            q.append_pair("scope", &format!("repository:{repository}:pull"));
        }
        let mut request = self.http().get(url.as_str());
        if let Some(a) = auth {
            request = request.basic_auth(&a.username, Some(&a.password));
        }
        let mut response =
            request.send().await.map_err(|e| TokenError::Unusable(format!("GET {realm}: {}", error_chain(&e))))?;
        let status = response.status();
        let mut body = Vec::new();
        while let Some(chunk) =
            response.chunk().await.map_err(|e| TokenError::Unusable(format!("GET {realm}: {}", error_chain(&e))))?
        {
            if body.len() + chunk.len() > MAX_TOKEN_BYTES {
                return Err(TokenError::Unusable(format!("GET {realm}: answer larger than {MAX_TOKEN_BYTES} bytes")));
            }
            body.extend_from_slice(&chunk);
        }
        if matches!(status, StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN) {
            return Err(TokenError::Refused(format!("token realm {realm}: {status}")));
        }
        if !status.is_success() {
            return Err(TokenError::Unusable(format!("token realm {realm}: {status}")));
        }
        let answer: serde_json::Value = serde_json::from_slice(&body)
            .map_err(|e| TokenError::Unusable(format!("token realm {realm}: answer is not JSON: {e}")))?;
        ["token", "access_token"]
            .iter()
            .find_map(|k| answer.get(*k).and_then(serde_json::Value::as_str).filter(|t| !t.is_empty()))
            .map(str::to_owned)
            .ok_or_else(|| TokenError::Unusable(format!("token realm {realm}: answer holds no token")))
    }
}

enum Credential<'a> {
    Basic(&'a PullAuth),
    Bearer(&'a str),
}

enum Answer {
    Ok,
    Denied { challenge: Option<Challenge>, status: StatusCode },
    Other(StatusCode),
}

enum TokenError {
    Refused(String),
    Unusable(String),
}

impl TokenError {
    fn into_error(self, asked: &Asked) -> OriginError {
        match self {
            Self::Refused(m) => asked.refused(m),
            Self::Unusable(m) => asked.unreachable(m),
        }
    }
}

/// What one verification asked of whom, for its errors.
struct Asked {
    registry: String,
    what: String,
}

impl Asked {
    fn refused(&self, reason: String) -> OriginError {
        OriginError::Refused { registry: self.registry.clone(), what: self.what.clone(), reason }
    }

    fn unreachable(&self, reason: String) -> OriginError {
        OriginError::Unreachable { registry: self.registry.clone(), what: self.what.clone(), reason }
    }
}

/// A `WWW-Authenticate` challenge this checker answers.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Challenge {
    Basic,
    Bearer { realm: String, service: Option<String> },
}

impl Challenge {
    /// `Basic realm="…"` or `Bearer realm="…",service="…",scope="…"` (RFC 7235
    /// auth-params; quoted strings with backslash escapes). Other schemes: `None`.
    fn parse(header: &str) -> Option<Self> {
        if header.len() > MAX_CHALLENGE_BYTES {
            return None;
        }
        let header = header.trim();
        let (scheme, rest) = header.split_once(' ').unwrap_or((header, ""));
        if scheme.eq_ignore_ascii_case("basic") {
            return Some(Self::Basic);
        }
        if !scheme.eq_ignore_ascii_case("bearer") {
            return None;
        }
        let params = auth_params(rest)?;
        let get = |k: &str| params.iter().find(|(n, _)| n.eq_ignore_ascii_case(k)).map(|(_, v)| v.clone());
        Some(Self::Bearer { realm: get("realm")?, service: get("service") })
    }
}

/// `name=value` pairs separated by commas; values are tokens or quoted strings.
fn auth_params(s: &str) -> Option<Vec<(String, String)>> {
    let mut out = Vec::new();
    let mut chars = s.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| *c == ',' || c.is_whitespace()) {
            chars.next();
        }
        if chars.peek().is_none() {
            return Some(out);
        }
        let mut name = String::new();
        while let Some(c) = chars.next_if(|c| *c != '=' && *c != ',' && !c.is_whitespace()) {
            name.push(c);
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        chars.next_if_eq(&'=')?;
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        let mut value = String::new();
        if chars.next_if_eq(&'"').is_some() {
            loop {
                match chars.next()? {
                    '"' => break,
                    '\\' => value.push(chars.next()?),
                    c => value.push(c),
                }
            }
        } else {
            while let Some(c) = chars.next_if(|c| *c != ',' && !c.is_whitespace()) {
                value.push(c);
            }
        }
        out.push((name, value));
    }
}

/// `sha256:<64 hex>` or `sha512:<128 hex>` (it becomes part of a URL path).
fn valid_digest(d: &str) -> bool {
    let hex = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    match d.split_once(':') {
        Some(("sha256", h)) => hex(h, 64),
        Some(("sha512", h)) => hex(h, 128),
        _ => false,
    }
}

/// The manifest digest the runtime recorded for `image`'s repository among
/// `repo_digests` (`domain/path@digest`), or the digest `image` names itself.
pub fn manifest_digest(image: &str, repo_digests: &[String]) -> Option<String> {
    let r = parse(image).ok()?;
    if let Some(d) = r.digest {
        return Some(d);
    }
    let prefix = format!("{}/{}@", r.domain, r.path);
    // containerd names Docker Hub images `docker.io/library/x`; so does parse.
    repo_digests.iter().find_map(|rd| rd.strip_prefix(&prefix)).filter(|d| valid_digest(d)).map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn challenges_parse_as_distribution_writes_them() {
        assert_eq!(Challenge::parse(r#"Basic realm="basic-realm""#), Some(Challenge::Basic));
        assert_eq!(
            Challenge::parse(
                r#"Bearer realm="http://127.0.0.1:5003/token",service="registry.local",scope="repository:tiny/hello:pull""#
            ),
            Some(Challenge::Bearer {
                realm: "http://127.0.0.1:5003/token".into(),
                service: Some("registry.local".into())
            })
        );
        assert_eq!(
            Challenge::parse(r#"bearer realm = "a\"b" , error=invalid_token"#),
            Some(Challenge::Bearer { realm: "a\"b".into(), service: None })
        );
        // No realm, an unterminated quote, an unknown scheme, an oversized header.
        assert_eq!(Challenge::parse(r#"Bearer service="x""#), None);
        assert_eq!(Challenge::parse(r#"Bearer realm="x"#), None);
        assert_eq!(Challenge::parse("Negotiate abc"), None);
        assert_eq!(Challenge::parse(&format!("Bearer realm=\"{}\"", "a".repeat(MAX_CHALLENGE_BYTES))), None);
    }

    #[test]
    fn the_manifest_digest_is_the_repositorys_own() {
        let d = format!("sha256:{}", "a".repeat(64));
        let other = format!("sha256:{}", "b".repeat(64));
        let digests = vec![format!("127.0.0.1:5000/other/app@{other}"), format!("127.0.0.1:5000/team/app@{d}")];
        assert_eq!(manifest_digest("127.0.0.1:5000/team/app:v1", &digests), Some(d.clone()));
        assert_eq!(manifest_digest("127.0.0.1:5000/team/app@".to_owned().as_str(), &digests), None);
        assert_eq!(manifest_digest(&format!("127.0.0.1:5000/x/y@{other}"), &[]), Some(other));
        assert_eq!(manifest_digest("busybox", &[format!("docker.io/library/busybox@{d}")]), Some(d));
        assert_eq!(manifest_digest("127.0.0.1:5000/team/app:v1", &["127.0.0.1:5000/team/app@md5:x".into()]), None);
    }

    #[test]
    fn digests_must_be_what_a_url_path_can_carry() {
        assert!(valid_digest(&format!("sha256:{}", "0".repeat(64))));
        assert!(!valid_digest(&format!("sha256:{}/../x", "0".repeat(58))));
        assert!(!valid_digest("sha256:ABC"));
        assert!(!valid_digest(&format!("sha384:{}", "0".repeat(96))));
    }

    /// A registry on loopback (plain HTTP) whose `/v2/team/app/manifests/<DIGEST>` needs a
    /// Bearer token from its realm, which grants alice only; `/v2/big/...` points at a realm
    /// answering more than a token may be; `/v2/down/...` answers 500; `/v2/moved/...` a
    /// redirect.
    async fn registry() -> String {
        use axum::http::{HeaderMap, StatusCode};
        use axum::response::IntoResponse;
        use axum::routing::get;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap_or_else(|e| panic!("{e}"));
        let addr = listener.local_addr().unwrap_or_else(|e| panic!("{e}"));
        let realm = format!("http://{addr}/token");
        let big = format!("http://{addr}/big-token");
        let manifest = move |axum::extract::Path(rest): axum::extract::Path<String>, headers: HeaderMap| {
            let (realm, big) = (realm.clone(), big.clone());
            async move {
                let (repo, reference) = rest.split_once("/manifests/").unwrap_or_default();
                let repo = repo.split('/').next().unwrap_or_default();
                let bearer = headers.get("authorization").and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
                match repo {
                    "down" => return StatusCode::INTERNAL_SERVER_ERROR.into_response(),
                    "moved" => return (StatusCode::FOUND, [("location", "http://203.0.113.1/")]).into_response(),
                    _ => {}
                }
                let realm = if repo == "big" { big } else { realm };
                if bearer != "Bearer t-alice" {
                    let challenge = format!(r#"Bearer realm="{realm}",service="registry.local""#);
                    return (StatusCode::UNAUTHORIZED, [("www-authenticate", challenge)]).into_response();
                }
                if reference == DIGEST { StatusCode::OK.into_response() } else { StatusCode::NOT_FOUND.into_response() }
            }
        };
        let token = |headers: HeaderMap, q: axum::extract::RawQuery| async move {
            let auth = headers.get("authorization").and_then(|v| v.to_str().ok()).unwrap_or_default();
            // alice:wonderland
            let query = q.0.unwrap_or_default();
            if auth == "Basic YWxpY2U6d29uZGVybGFuZA==" && query.contains("scope=repository%3Ateam%2Fapp%3Apull") {
                (StatusCode::OK, r#"{"token":"t-alice"}"#.to_owned())
            } else {
                (StatusCode::UNAUTHORIZED, "{}".to_owned())
            }
        };
        let app = axum::Router::new()
            .route("/v2/{*rest}", get(manifest.clone()).head(manifest))
            .route("/token", get(token))
            .route("/big-token", get(|| async { "x".repeat(MAX_TOKEN_BYTES + 1) }));
        tokio::spawn(async move { axum::serve(listener, app).await });
        addr.to_string()
    }

    const DIGEST: &str = "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";

    #[tokio::test]
    async fn only_the_registrys_answer_to_these_credentials_is_a_proof() {
        let host = registry().await;
        let check = OriginCheck::new(&OriginSettings::default()).unwrap_or_else(|e| panic!("{e}"));
        let alice = PullAuth { username: "alice".into(), password: "wonderland".into() };
        let mallory = PullAuth { username: "alice".into(), password: "guessed".into() };
        let image = format!("{host}/team/app:v1");
        let proof = check.verify(&image, DIGEST, Some(&alice)).await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((proof.registry.as_str(), proof.auth), (host.as_str(), "bearer"));
        // A wrong password, no credentials, another digest: refused by the registry.
        let refused = |r: Result<OriginProof, OriginError>| matches!(r, Err(OriginError::Refused { .. }));
        assert!(refused(check.verify(&image, DIGEST, Some(&mallory)).await));
        assert!(refused(check.verify(&image, DIGEST, None).await));
        let other = format!("sha256:{}", "b".repeat(64));
        assert!(refused(check.verify(&image, &other, Some(&alice)).await));
        // A registry that fails, redirects, or whose realm floods: no proof, and says why.
        for (repo, why) in [("down", "500"), ("moved", "302"), ("big", "larger than")] {
            let r = check.verify(&format!("{host}/{repo}/app:v1"), DIGEST, Some(&alice)).await;
            match r {
                Err(OriginError::Unreachable { reason, .. }) => assert!(reason.contains(why), "{repo}: {reason}"),
                other => panic!("{repo}: {other:?}"),
            }
        }
        // A digest that is not one never reaches the registry.
        assert!(matches!(check.verify(&image, "sha256:../../x", Some(&alice)).await, Err(OriginError::Reference(_))));
    }

    #[tokio::test]
    async fn a_realm_in_clear_for_a_tls_registry_gets_no_credentials() {
        let check = OriginCheck::new(&OriginSettings::default()).unwrap_or_else(|e| panic!("{e}"));
        let auth = PullAuth { username: "u".into(), password: "p".into() };
        let r = check.token("http://203.0.113.1/token", None, "team/app", Some(&auth), false).await;
        assert!(matches!(r, Err(TokenError::Unusable(m)) if m.contains("in clear")));
        let r = check.token("ftp://x/token", None, "team/app", Some(&auth), true).await;
        assert!(matches!(r, Err(TokenError::Unusable(_))));
    }
}
