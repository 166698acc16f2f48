//! Routing: the public endpoints, and for everything else the request pipeline —
//! decode the path, authenticate, impersonate, authorize, then discovery, the OIDC
//! documents, OpenAPI, metrics or the resource API — with metrics and audit for every
//! answer.

use std::collections::HashMap;
use std::sync::Arc;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::header::AUTHORIZATION;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use podpass_token::documents::{JWKS_PATH, OPENID_CONFIG_PATH};
use serde_json::json;
use tracing::Instrument;

use super::audit::audit_time;
use super::authn::{User, authenticate};
use super::status::StatusError;
use super::{AppState, KUBE_MINOR, audit, authz, rest};

pub(crate) fn router(state: Arc<AppState>) -> Router {
    Router::new()
        // go-restful serves the version at both (the Python client's VersionApi asks for
        // `/version/`).
        .route("/version", get(version))
        .route("/version/", get(version))
        .route("/healthz", get(ok))
        .route("/livez", get(ok))
        .route("/readyz", get(ok))
        .fallback(api_request)
        .with_state(state)
}

async fn version() -> Response {
    axum::Json(json!({
        "major": "1",
        "minor": KUBE_MINOR,
        "gitVersion": format!("v1.{KUBE_MINOR}.0-podpass.{}", env!("CARGO_PKG_VERSION")),
        "gitCommit": "",
        "gitTreeState": "clean",
        "buildDate": "",
        "goVersion": "",
        "compiler": "rustc",
        "platform": format!("{}/{}", std::env::consts::OS, std::env::consts::ARCH),
    }))
    .into_response()
}

async fn ok() -> &'static str {
    "ok"
}

fn json_bytes(body: Vec<u8>, content_type: &'static str) -> Response {
    if body.is_empty() {
        return StatusError::not_found_path().into_response();
    }
    ([(axum::http::header::CONTENT_TYPE, content_type)], body).into_response()
}

/// The authorization attributes of a request.
fn attributes(
    user: &User,
    verb: &str,
    path: &str,
    api_path: Option<&rest::resources::ApiPath>,
    query: &std::collections::HashMap<String, String>,
) -> authz::Attributes {
    let mut attrs = authz::Attributes::non_resource(user.clone(), verb, path);
    attrs.field_selector = query.get("fieldSelector").cloned().unwrap_or_default();
    if let Some(p) = api_path {
        attrs.resource_request = true;
        attrs.namespace = p.namespace.clone().unwrap_or_default();
        attrs.api_group = p.group.clone();
        attrs.resource = p.resource.clone();
        attrs.subresource = p.subresource.clone().unwrap_or_default();
        attrs.name = p.name.clone().unwrap_or_default();
        // As upstream: a namespace's own path is a request in that namespace.
        if p.resource == "namespaces" && p.namespace.is_none() && !attrs.name.is_empty() {
            attrs.namespace = attrs.name.clone();
        }
    }
    attrs
}

/// Authorizes through the configured chain; refusals worded as upstream's.
pub(crate) async fn authorize(state: &AppState, attrs: &authz::Attributes) -> Result<(), StatusError> {
    match authz::authorize(state.authz(), &state.authorization_modes, attrs).await? {
        authz::AuthorizationDecision::Allow(_) => Ok(()),
        authz::AuthorizationDecision::Deny(reason) | authz::AuthorizationDecision::NoOpinion(reason) => {
            Err(authz::forbidden(attrs, &reason))
        }
    }
}

/// Largest request body accepted.
const MAX_BODY_BYTES: usize = 3 * 1024 * 1024;

/// Everything but the public endpoints: authenticate, authorize, then discovery or the
/// resource API; every answer is counted and audited.
async fn api_request(State(state): State<Arc<AppState>>, req: Request) -> Response {
    // Wall-clock formatting costs on every request; only the audit log needs it.
    let received = state.audit.as_ref().map(|_| audit_time());
    let received_at = std::time::Instant::now();
    let (mut parts, body) = req.into_parts();
    // An upgrade (exec, attach) is taken by its handler, deep below: kept where it finds it.
    if let Some(upgrade) = parts.extensions.remove::<hyper::upgrade::OnUpgrade>() {
        parts.extensions.insert(Arc::new(rest::pod_stream::PendingUpgrade(std::sync::Mutex::new(Some(upgrade)))));
    }
    // Go's server hands handlers the decoded path; a malformed escape is a bad request.
    let Some(path) = rest::resources::decode_path(parts.uri.path()) else {
        return StatusError::bad_request(format!("invalid URL escape in path {:?}", parts.uri.path())).into_response();
    };
    let api_path = match rest::resources::parse(&path) {
        Some(rest::resources::Target::Resource(p)) => Some(p),
        _ => None,
    };
    let query: HashMap<String, String> =
        axum::extract::Query::try_from_uri(&parts.uri).map(|q| q.0).unwrap_or_default();
    let verb = request_verb(&parts.method, api_path.as_ref(), &query);
    // Every line logged while the request is handled carries what it is and who asked.
    let span = tracing::info_span!(
        "request",
        verb = %verb,
        resource = api_path.as_ref().map_or(path.as_str(), |p| p.resource.as_str()),
        namespace = api_path.as_ref().and_then(|p| p.namespace.as_deref()).unwrap_or(""),
        user = tracing::field::Empty,
    );
    let mut audit_user = None;
    // `--request-timeout`: the whole request (body upload included) up to the response
    // head; a watch's stream is not bounded by it.
    let request_timeout = state.request_timeout;
    let handled = async {
        let certificates = parts.extensions.get::<podpass_serve::Peer>().map(|p| Arc::clone(&p.client_certificates));
        let (user, requester) = identify(&state, certificates.as_deref().unwrap_or_default(), &parts.headers).await?;
        tracing::Span::current().record("user", user.name.as_str());
        audit_user = Some(user.clone());
        // Work in flight, bounded per flow: who really asks, whoever it impersonates (a
        // watch or a followed log is long-running).
        let follow = query.get("follow").is_some_and(|f| f == "true" || f == "1");
        let long_running = verb == "watch" || (follow && path.ends_with("/log"));
        let _in_flight = state.inflight.admit(&requester, long_running)?;
        let attrs = attributes(&user, &verb, &path, api_path.as_ref(), &query);
        authorize(&state, &attrs).await?;
        // A WebSocket's GET to a pod's exec, attach or port-forward needs `create` too
        // (upstream's AuthorizePodWebsocketUpgradeCreatePermission, on since 1.31): what
        // a POST of the same stream needs.
        if verb == "get"
            && attrs.resource == "pods"
            && ["exec", "attach", "portforward"].contains(&attrs.subresource.as_str())
            && rest::pod_stream::is_upgrade(&parts.headers)
        {
            let mut create = attrs.clone();
            create.verb = "create".to_owned();
            authorize(&state, &create).await?;
        }
        let body = axum::body::to_bytes(body, MAX_BODY_BYTES).await.map_err(|_| {
            StatusError::new(
                axum::http::StatusCode::PAYLOAD_TOO_LARGE,
                "RequestEntityTooLarge",
                "the request body is too large",
            )
        })?;
        let accept = parts.headers.get(axum::http::header::ACCEPT).and_then(|v| v.to_str().ok());
        if let Some(response) = non_resource(&state, &parts.method, &path, accept)? {
            return Ok(response);
        }
        dispatch(&state, &parts, &path, query.clone(), &body, &user).await
    };
    let result = match tokio::time::timeout(request_timeout, handled.instrument(span)).await {
        Ok(result) => result,
        Err(_) => Err(StatusError::new(
            axum::http::StatusCode::GATEWAY_TIMEOUT,
            "Timeout",
            "Timeout: request did not complete within requested timeout - context deadline exceeded",
        )),
    };
    let response = result.unwrap_or_else(IntoResponse::into_response);
    let elapsed = received_at.elapsed().as_secs_f64();
    state.metrics.observe_request(&verb, api_path.as_ref(), response.status().as_u16(), elapsed);
    if let Some(log) = &state.audit {
        let request = audit::RequestInfo {
            uri: parts.uri.to_string(),
            verb: &verb,
            user: audit_user.as_ref(),
            user_agent: parts.headers.get(axum::http::header::USER_AGENT).and_then(|h| h.to_str().ok()).unwrap_or(""),
            path: api_path.as_ref(),
            received,
        };
        log.record(&audit::event(&request, &response));
    }
    response
}

/// Who the request is from: its client certificate or bearer token, then `Impersonate-*` headers if the
/// authenticated user may impersonate; with who authenticated (the same user when nobody
/// is impersonated).
async fn identify(
    state: &AppState,
    client_certificates: &[tokio_rustls::rustls::pki_types::CertificateDer<'static>],
    headers: &axum::http::HeaderMap,
) -> Result<(User, User), StatusError> {
    // A header that is not visible ASCII cannot hold a token: refused, never anonymous.
    let auth = headers.get(AUTHORIZATION).map(|h| h.to_str().unwrap_or("Bearer \u{0}").to_owned());
    let requester = authenticate(state, client_certificates, auth).await?;
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).map(str::to_owned);
    let groups: Vec<String> =
        headers.get_all("impersonate-group").iter().filter_map(|v| v.to_str().ok().map(str::to_owned)).collect();
    let impersonated = authz::impersonate(
        state.authz(),
        &state.authorization_modes,
        &requester,
        header("impersonate-user").as_deref(),
        &groups,
        header("impersonate-uid").as_deref(),
    )
    .await?;
    Ok(match impersonated {
        Some(user) => (user, requester),
        None => (requester.clone(), requester),
    })
}

/// The non-resource paths behind authorization: API discovery roots, the OIDC documents
/// (RBAC's system:service-account-issuer-discovery grants them, as upstream), OpenAPI and
/// metrics. `None` for any other path.
fn non_resource(
    state: &AppState,
    method: &axum::http::Method,
    path: &str,
    accept: Option<&str>,
) -> Result<Option<Response>, StatusError> {
    let get = method == axum::http::Method::GET;
    let response = match path {
        "/api" | "/api/" => {
            let address = state.server_url.trim_start_matches("https://").to_owned();
            axum::Json(json!({
                "kind": "APIVersions",
                "versions": ["v1"],
                "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": address}],
            }))
            .into_response()
        }
        "/apis" | "/apis/" => rest::group_list(),
        OPENID_CONFIG_PATH if get => json_bytes(state.oidc_config.clone(), "application/json"),
        JWKS_PATH if get => json_bytes(state.jwks.clone(), "application/jwk-set+json"),
        "/openapi/v3" => axum::Json(rest::openapi::root()).into_response(),
        "/openapi/v2" if get => {
            let (media, body) = rest::openapi::v2(accept);
            json_bytes(body, media)
        }
        "/metrics" => {
            ([(axum::http::header::CONTENT_TYPE, "text/plain; version=0.0.4")], state.metrics.encode()).into_response()
        }
        _ => match path.strip_prefix("/openapi/v3/") {
            Some(gv) => json_bytes(
                rest::openapi::group_version(gv).ok_or_else(StatusError::not_found_path)?,
                "application/json",
            ),
            None => return Ok(None),
        },
    };
    Ok(Some(response))
}

/// Group and resource paths under `/api` and `/apis`.
async fn dispatch(
    state: &Arc<AppState>,
    parts: &axum::http::request::Parts,
    path: &str,
    query: HashMap<String, String>,
    body: &[u8],
    user: &User,
) -> Result<Response, StatusError> {
    let target = rest::resources::parse(path);
    if let Some(rest::resources::Target::Resource(api_path)) = &target
        && api_path.group.is_empty()
        && api_path.resource == "pods"
        && let (Some(ns), Some(name), Some(sub @ ("exec" | "attach" | "portforward"))) =
            (api_path.namespace.as_deref(), api_path.name.as_deref(), api_path.subresource.as_deref())
    {
        return rest::pod_stream::connect(state, parts, (ns, name, sub), &user.name).await;
    }
    if let Some(rest::resources::Target::Resource(api_path)) = &target
        && api_path.group == rest::metrics_api::GROUP
    {
        if parts.method != axum::http::Method::GET
            || api_path.subresource.is_some()
            || !["pods", "nodes"].contains(&api_path.resource.as_str())
        {
            return Err(StatusError::not_found_path());
        }
        return rest::metrics_api::serve(
            state,
            &api_path.resource,
            api_path.namespace.as_deref(),
            api_path.name.as_deref(),
            &query,
        )
        .await;
    }
    match target {
        Some(rest::resources::Target::Group(g)) => rest::group(&g),
        Some(rest::resources::Target::GroupVersion { group, version }) => rest::resource_list(&group, &version),
        Some(rest::resources::Target::Resource(api_path)) => {
            let content_type =
                parts.headers.get(axum::http::header::CONTENT_TYPE).and_then(|c| c.to_str().ok()).unwrap_or("");
            rest::handle(
                state,
                rest::ResourceRequest {
                    method: parts.method.clone(),
                    path: api_path,
                    query,
                    content_type,
                    accept: parts.headers.get(axum::http::header::ACCEPT).and_then(|c| c.to_str().ok()),
                    body,
                    user,
                    user_agent: parts
                        .headers
                        .get(axum::http::header::USER_AGENT)
                        .and_then(|h| h.to_str().ok())
                        .unwrap_or(""),
                },
            )
            .await
        }
        None => Err(StatusError::not_found_path()),
    }
}

/// The Kubernetes verb of a request (`list`/`watch` for collection GETs).
fn request_verb(
    method: &axum::http::Method,
    path: Option<&rest::resources::ApiPath>,
    query: &std::collections::HashMap<String, String>,
) -> String {
    use axum::http::Method;
    let Some(p) = path else { return method.as_str().to_lowercase() };
    match *method {
        Method::GET if p.name.is_none() && query.get("watch").is_some_and(|w| w == "true" || w == "1") => "watch",
        Method::GET if p.name.is_none() => "list",
        Method::GET => "get",
        Method::POST => "create",
        Method::PUT => "update",
        Method::PATCH => "patch",
        // A collection DELETE is its own verb, so RBAC's `delete` of one object (or of
        // named ones) never grants deleting them all.
        Method::DELETE if p.name.is_none() => "deletecollection",
        Method::DELETE => "delete",
        _ => return method.as_str().to_lowercase(),
    }
    .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::Method;

    fn parsed(path: &str) -> Option<rest::resources::ApiPath> {
        match rest::resources::parse(path) {
            Some(rest::resources::Target::Resource(p)) => Some(p),
            _ => None,
        }
    }

    #[test]
    fn verbs_as_upstream_request_info() {
        let q = |w: &str| HashMap::from([("watch".to_owned(), w.to_owned())]);
        let none = HashMap::new();
        let list = parsed("/api/v1/namespaces/ns/pods");
        let one = parsed("/api/v1/namespaces/ns/pods/web");
        assert_eq!(request_verb(&Method::GET, list.as_ref(), &none), "list");
        assert_eq!(request_verb(&Method::GET, list.as_ref(), &q("true")), "watch");
        assert_eq!(request_verb(&Method::GET, list.as_ref(), &q("1")), "watch");
        assert_eq!(request_verb(&Method::GET, list.as_ref(), &q("false")), "list");
        assert_eq!(request_verb(&Method::GET, one.as_ref(), &none), "get");
        assert_eq!(request_verb(&Method::POST, list.as_ref(), &none), "create");
        assert_eq!(request_verb(&Method::PUT, one.as_ref(), &none), "update");
        assert_eq!(request_verb(&Method::PATCH, one.as_ref(), &none), "patch");
        assert_eq!(request_verb(&Method::DELETE, one.as_ref(), &none), "delete");
        assert_eq!(request_verb(&Method::DELETE, list.as_ref(), &none), "deletecollection");
        assert_eq!(request_verb(&Method::GET, None, &none), "get");
    }

    #[test]
    fn a_namespaces_own_path_is_a_request_in_that_namespace() {
        let user = User { name: "u".into(), uid: String::new(), groups: vec![], extra: Default::default() };
        let p = parsed("/api/v1/namespaces/team");
        let a = attributes(&user, "get", "/api/v1/namespaces/team", p.as_ref(), &HashMap::new());
        assert_eq!((a.namespace.as_str(), a.resource.as_str(), a.name.as_str()), ("team", "namespaces", "team"));
        let q = HashMap::from([("fieldSelector".to_owned(), "spec.nodeName=n1".to_owned())]);
        let a = attributes(&user, "list", "/api/v1/pods", parsed("/api/v1/pods").as_ref(), &q);
        assert_eq!((a.namespace.as_str(), a.field_selector.as_str()), ("", "spec.nodeName=n1"));
        let a = attributes(&user, "get", "/metrics", None, &HashMap::new());
        assert!(!a.resource_request);
        assert_eq!(a.path, "/metrics");
    }
}
