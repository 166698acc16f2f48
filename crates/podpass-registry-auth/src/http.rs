//! The HTTP surface: `/token` as the Docker registry token protocol and the OAuth2 form
//! that containerd POSTs (interop.md §2), `/jwks` for registries that read one
//! (distribution 3.x), `/healthz` and `/metrics`.
//!
//! - `GET /token?service=…&scope=…[&offline_token=true]` with Basic auth (any username;
//!   the password is a service-account token or an exchange token).
//! - `POST /token` form: `grant_type=password` (`username`, `password`) or
//!   `grant_type=refresh_token` (`refresh_token`), `service`, `scope` (space-separated),
//!   `access_type=offline`.
//! - Either may add `annotation` (repeatable `key=value`: service-account annotations the
//!   node forwards), honoured only over a TLS connection where the node presented its
//!   client certificate. `node_token` is refused (400): a node-bound service-account token
//!   is no proof of a node, since any tenant can mint one (see `node_binding`).
//!
//! Answers `{"token","access_token","expires_in","issued_at","scope"[,"refresh_token"]}`;
//! 400 `invalid_request` / `unsupported_grant_type`, 401 with `WWW-Authenticate` for bad
//! credentials, 429 with `Retry-After: 1` past the client's share of the work in flight,
//! 503 while an issuer's keys are unknown.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use podpass_serve::Peer;
use serde_json::json;

use crate::node_binding::node_from_certificate;
use crate::scope::Scope;
use crate::service::{ExchangeRequest, Grant, Refusal, TokenService};

/// Request bodies and query strings larger than this are refused.
pub const MAX_REQUEST_BYTES: usize = 64 * 1024;
/// A token request not answered by then is a 503 (issuer fetches are bounded below it).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Why `node_token` is refused, for the clients of older plugins.
const NODE_TOKEN_REFUSED: &str = "node_token is not accepted as a node's proof: any tenant can bind a token of its own service account to a Node; present the node's TLS client certificate (CN=system:node:<name>, O=system:nodes) instead";
/// The Basic realm of 401 answers.
const REALM: &str = "Basic realm=\"podpass-registry-auth\"";

/// Shared state of the handlers.
#[derive(Debug)]
pub struct AppState {
    /// The decision.
    pub service: Arc<TokenService>,
    /// The JWKS document of the registry-token key, encoded once.
    pub jwks: String,
    /// `--metrics-auth delegated`: who may read `/metrics` is the cluster's to say, through
    /// this reviewer; `None`: anyone may.
    pub metrics_reviewer: Option<Arc<crate::review::TokenReviewer>>,
}

/// The router.
pub fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/token", get(token_get).post(token_post))
        .route("/jwks", get(jwks))
        .route("/healthz", get(healthz))
        .route("/metrics", get(metrics))
        .layer(DefaultBodyLimit::max(MAX_REQUEST_BYTES))
        .with_state(state)
}

/// A malformed request, answered 400 with an OAuth2 error code.
struct BadRequest {
    code: &'static str,
    message: String,
}

fn bad(message: impl Into<String>) -> BadRequest {
    BadRequest { code: "invalid_request", message: message.into() }
}

fn oauth_error(status: StatusCode, code: &str, message: &str) -> Response {
    let body = json!({
        "error": code,
        "error_description": message,
        "errors": [{"code": if status == StatusCode::UNAUTHORIZED { "UNAUTHORIZED" } else { "DENIED" }, "message": message}],
    });
    let mut response = (status, axum::Json(body)).into_response();
    if status == StatusCode::UNAUTHORIZED {
        response.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static(REALM));
    }
    response
}

/// The parameters both methods share, collected from a query string or a form.
#[derive(Default)]
struct Params {
    service: Option<String>,
    scopes: Vec<String>,
    offline: bool,
    annotations: BTreeMap<String, String>,
    grant_type: Option<String>,
    password: Option<String>,
    refresh_token: Option<String>,
}

fn parse_params(raw: &[u8]) -> Result<Params, BadRequest> {
    if raw.len() > MAX_REQUEST_BYTES {
        return Err(bad(format!("request larger than {MAX_REQUEST_BYTES} bytes")));
    }
    let mut p = Params::default();
    let once = |slot: &mut Option<String>, name: &str, value: String| {
        if slot.is_some() {
            return Err(bad(format!("{name} given more than once")));
        }
        *slot = Some(value);
        Ok(())
    };
    for (key, value) in form_urlencoded::parse(raw) {
        let value = value.into_owned();
        match key.as_ref() {
            "service" => once(&mut p.service, "service", value)?,
            "scope" => p.scopes.push(value),
            "offline_token" => p.offline |= value == "true",
            "access_type" => p.offline |= value == "offline",
            "node_token" => return Err(bad(NODE_TOKEN_REFUSED)),
            "grant_type" => once(&mut p.grant_type, "grant_type", value)?,
            "password" => once(&mut p.password, "password", value)?,
            "refresh_token" => once(&mut p.refresh_token, "refresh_token", value)?,
            "annotation" => {
                let (k, v) = value.split_once('=').ok_or_else(|| bad("annotation must be key=value"))?;
                p.annotations.insert(k.to_owned(), v.to_owned());
            }
            // client_id, username, account and unknown parameters are not used.
            _ => {}
        }
    }
    Ok(p)
}

/// The password of a `Basic` Authorization header (scheme case-insensitive).
fn basic_password(headers: &HeaderMap) -> Result<Option<String>, BadRequest> {
    let Some(value) = headers.get(header::AUTHORIZATION) else { return Ok(None) };
    let value = value.to_str().map_err(|_| bad("Authorization header is not ASCII"))?;
    let Some((scheme, encoded)) = value.split_once(' ') else { return Err(bad("Authorization header is malformed")) };
    if !scheme.eq_ignore_ascii_case("basic") {
        return Ok(None);
    }
    let decoded =
        data_encoding::BASE64.decode(encoded.trim().as_bytes()).map_err(|_| bad("Basic credentials are not base64"))?;
    let text = String::from_utf8(decoded).map_err(|_| bad("Basic credentials are not UTF-8"))?;
    let (_user, password) = text.split_once(':').ok_or_else(|| bad("Basic credentials have no ':'"))?;
    Ok(Some(password.to_owned()))
}

fn peer_node(peer: Option<&Peer>) -> Option<String> {
    peer.and_then(|p| p.client_certificates.first()).and_then(|leaf| node_from_certificate(leaf))
}

async fn token_get(
    State(state): State<Arc<AppState>>,
    peer: Option<axum::Extension<Peer>>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> Response {
    let parsed = (|| {
        let params = parse_params(query.as_deref().unwrap_or("").as_bytes())?;
        let password = basic_password(&headers)?;
        Ok::<_, BadRequest>((params, password))
    })();
    match parsed {
        Err(e) => oauth_error(StatusCode::BAD_REQUEST, e.code, &e.message),
        Ok((_, None)) => oauth_error(StatusCode::UNAUTHORIZED, "invalid_client", "Basic credentials required"),
        Ok((params, Some(password))) => {
            answer(&state, peer.as_deref(), params, Grant::Password(password), "basic").await
        }
    }
}

async fn token_post(State(state): State<Arc<AppState>>, peer: Option<axum::Extension<Peer>>, body: Bytes) -> Response {
    let params = match parse_params(&body) {
        Ok(p) => p,
        Err(e) => return oauth_error(StatusCode::BAD_REQUEST, e.code, &e.message),
    };
    let (grant, via) = match params.grant_type.as_deref() {
        Some("password") => (Grant::Password(params.password.clone().unwrap_or_default()), "password"),
        Some("refresh_token") => {
            (Grant::RefreshToken(params.refresh_token.clone().unwrap_or_default()), "refresh_token")
        }
        Some(other) => {
            let message = format!("grant_type {other:?} is not supported (password, refresh_token)");
            return oauth_error(StatusCode::BAD_REQUEST, "unsupported_grant_type", &message);
        }
        None => return oauth_error(StatusCode::BAD_REQUEST, "invalid_request", "grant_type is required"),
    };
    answer(&state, peer.as_deref(), params, grant, via).await
}

async fn answer(state: &AppState, peer: Option<&Peer>, params: Params, grant: Grant, via: &'static str) -> Response {
    let started = Instant::now();
    let scopes = match Scope::parse_all(params.scopes.iter().map(String::as_str)) {
        Ok(s) => s,
        Err(e) => return oauth_error(StatusCode::BAD_REQUEST, "invalid_scope", &e.to_string()),
    };
    let request = ExchangeRequest {
        grant,
        service: params.service,
        scopes,
        offline: params.offline,
        annotations: params.annotations,
        peer_node: peer_node(peer),
        peer_addr: peer.map(|p| p.addr.ip()),
        via,
    };
    let now = podpass_token::now_unix();
    let decided = tokio::time::timeout(REQUEST_TIMEOUT, state.service.decide(request, now)).await;
    state.service.metrics().observe(started.elapsed().as_secs_f64());
    match decided {
        Err(_) => oauth_error(StatusCode::SERVICE_UNAVAILABLE, "temporarily_unavailable", "request timed out"),
        Ok(Err(Refusal::Invalid(m))) => oauth_error(StatusCode::BAD_REQUEST, "invalid_request", &m),
        Ok(Err(Refusal::Unauthorized { message, .. })) => {
            oauth_error(StatusCode::UNAUTHORIZED, "invalid_grant", &message)
        }
        Ok(Err(Refusal::TooMany { message, .. })) => {
            let mut response = oauth_error(StatusCode::TOO_MANY_REQUESTS, "temporarily_unavailable", &message);
            response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            response
        }
        Ok(Err(Refusal::Unavailable { message, .. })) => {
            oauth_error(StatusCode::SERVICE_UNAVAILABLE, "temporarily_unavailable", &message)
        }
        Ok(Ok(answer)) => {
            let issued_at =
                jiff::Timestamp::from_second(answer.token.issued_at).map(|t| t.to_string()).unwrap_or_default();
            let granted: Vec<String> = answer.granted.iter().map(ToString::to_string).collect();
            let mut body = json!({
                "token": answer.token.token,
                "access_token": answer.token.token,
                "expires_in": answer.token.expires_in,
                "issued_at": issued_at,
                "scope": granted.join(" "),
            });
            if let Some(refresh) = answer.refresh_token {
                body["refresh_token"] = json!(refresh);
            }
            let mut response = axum::Json(body).into_response();
            response.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
            response
        }
    }
}

/// What a token request's bytes decode to, for fuzzing the parsers in one call: the query
/// string or form body, the `Authorization` header, and the scopes they name. Never panics;
/// every input is either parsed or refused with a message.
#[doc(hidden)]
pub fn parse_for_fuzzing(raw: &[u8], authorization: &[u8]) -> Result<usize, String> {
    let params = parse_params(raw).map_err(|e| e.message)?;
    let mut headers = HeaderMap::new();
    if let Ok(value) = HeaderValue::from_bytes(authorization) {
        headers.insert(header::AUTHORIZATION, value);
    }
    let password = basic_password(&headers).map_err(|e| e.message)?;
    let scopes = Scope::parse_all(params.scopes.iter().map(String::as_str)).map_err(|e| e.to_string())?;
    Ok(scopes.len() + password.map_or(0, |p| p.len()) + params.annotations.len())
}

async fn jwks(State(state): State<Arc<AppState>>) -> Response {
    ([(header::CONTENT_TYPE, "application/jwk-set+json")], state.jwks.clone()).into_response()
}

async fn healthz(State(state): State<Arc<AppState>>) -> Response {
    let mut lines = String::new();
    let mut healthy = true;
    for trust in state.service.trusts() {
        let (keys, error) = trust.status();
        if keys > 0 {
            lines.push_str(&format!("[+]issuer {} ok ({keys} keys)\n", trust.issuer()));
        } else {
            healthy = false;
            let why = error.unwrap_or_else(|| "not fetched yet".into());
            lines.push_str(&format!("[-]issuer {} failed: {why}\n", trust.issuer()));
        }
    }
    if healthy {
        (StatusCode::OK, "ok").into_response()
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, format!("{lines}healthz check failed\n")).into_response()
    }
}

async fn metrics(State(state): State<Arc<AppState>>, headers: axum::http::HeaderMap) -> Response {
    if let Some(reviewer) = &state.metrics_reviewer {
        let token = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim)
            .filter(|t| !t.is_empty());
        let Some(token) = token else { return (StatusCode::UNAUTHORIZED, "Unauthorized").into_response() };
        match reviewer.authorize_path(token, "/metrics").await {
            Ok(Some(true)) => {}
            Ok(Some(false)) => return (StatusCode::FORBIDDEN, "Forbidden: get on /metrics").into_response(),
            Ok(None) => return (StatusCode::UNAUTHORIZED, "Unauthorized").into_response(),
            Err(e) => {
                return (StatusCode::SERVICE_UNAVAILABLE, format!("authorizing the request: {e}")).into_response();
            }
        }
    }
    (
        [(header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")],
        state.service.metrics().encode(),
    )
        .into_response()
}
