//! The node's own HTTPS server, as the kubelet's on port 10250, serving container logs and
//! exec and attach streams ([`super::streaming`]) to the API server (`kubectl logs` and
//! `kubectl exec` are proxied here). Clients authenticate with a certificate
//! from the cluster's CA (the API server's kubelet client certificate) or, as the kubelet's
//! webhook authentication, a bearer token the API server's TokenReview authenticates (a
//! Prometheus with a service-account token); each request is authorized as the kubelet's
//! webhook mode does, by a SubjectAccessReview of the user and groups for `get nodes/proxy`
//! (or `nodes/metrics`) on this node.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path as UrlPath, RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use k8s_openapi::api::authorization::v1::{ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec};
use kube::api::{Api, PostParams};

use super::containers::{CONTAINER_NAME_LABEL, POD_UID_LABEL, PodRuntime};
use super::known_pods::container_log_status;
use super::logs::{LogOptions, render};
use crate::runtime::CONTAINER_RUNNING;

/// The most of a log file read for one answer (its end; the kubelet rotates at 10 MiB).
const MAX_READ: u64 = 32 << 20;
/// How often a followed log is read again.
const FOLLOW_POLL: Duration = Duration::from_millis(250);

/// How long a TokenReview's answer is reused. The kubelet's `authentication.webhook.cacheTTL`
/// is 2 minutes; podpass keeps it as short as registry-auth's review cache, so a revoked or
/// deleted account's token stops working here within seconds too.
const TOKEN_REVIEW_TTL: Duration = Duration::from_secs(10);
/// Reviewed tokens remembered at most (the cache is emptied when full).
const MAX_REVIEWED: usize = 1024;
/// A bearer token longer than this is refused unread (a JWT of the cluster is far shorter).
const MAX_TOKEN_BYTES: usize = 16 << 10;

/// Who a token was, by its SHA-256 (`None`: it did not authenticate), and when asked.
type Reviewed = std::sync::Mutex<HashMap<[u8; 32], (std::time::Instant, Option<(String, Vec<String>)>)>>;

/// What the server needs.
pub(crate) struct NodeServer {
    pub client: kube::Client,
    /// Bearer tokens reviewed lately.
    pub reviewed: Reviewed,
    pub node: String,
    /// The pods this node knows now.
    pub pods: Arc<super::known_pods::KnownPods>,
    pub runtime: Option<Arc<PodRuntime>>,
    /// What `/metrics` reads.
    pub shared: Arc<super::worker::Shared>,
    /// Exec and attach streams open now.
    pub streams: super::streaming::StreamSlots,
    /// The resource metrics' last samples.
    pub resources: Arc<super::resource_metrics::ResourceSamples>,
    /// `streamingConnectionIdleTimeout` (zero: none).
    pub stream_idle_timeout: Duration,
}

pub(super) fn status(code: StatusCode, message: impl Into<String>) -> Response {
    (code, message.into()).into_response()
}

/// The user and groups of a verified client certificate (CN, O).
fn identity(der: &[u8]) -> Option<(String, Vec<String>)> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    let subject = cert.subject();
    let user = subject.iter_common_name().next()?.as_str().ok()?.to_owned();
    let groups = subject.iter_organization().filter_map(|o| o.as_str().ok().map(str::to_owned)).collect();
    Some((user, groups))
}

/// Whether `user` in `groups` may `<verb> nodes/<sub>` on this node (SubjectAccessReview).
async fn authorized(
    s: &NodeServer,
    user: String,
    groups: Vec<String>,
    verb: &str,
    sub: &str,
) -> Result<bool, kube::Error> {
    let review = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(user),
            groups: Some(groups),
            resource_attributes: Some(ResourceAttributes {
                verb: Some(verb.into()),
                resource: Some("nodes".into()),
                subresource: Some(sub.into()),
                name: Some(s.node.clone()),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    let answer = Api::<SubjectAccessReview>::all(s.client.clone()).create(&PostParams::default(), &review).await?;
    Ok(answer.status.is_some_and(|st| st.allowed))
}

/// The end of a file (at most [`MAX_READ`]) from `offset`, starting at a line.
fn read_from(path: &std::path::Path, offset: u64) -> std::io::Result<(String, u64)> {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = std::fs::File::open(path)?;
    let len = f.metadata()?.len();
    let start = offset.max(len.saturating_sub(MAX_READ));
    f.seek(SeekFrom::Start(start))?;
    let mut bytes = Vec::new();
    f.take(MAX_READ).read_to_end(&mut bytes)?;
    let mut text = String::from_utf8_lossy(&bytes).into_owned();
    if start > offset {
        // Cut into a line: drop what precedes the first whole one.
        let cut = text.find('\n').map_or(text.len(), |i| i + 1);
        text.drain(..cut);
        return Ok((text, start + u64::try_from(cut).unwrap_or(0)));
    }
    Ok((text, start))
}

/// The user and groups `token` authenticates as, by the API server's TokenReview (its
/// default audiences, as the kubelet's webhook authenticator), reused for
/// [`TOKEN_REVIEW_TTL`].
async fn review_token(s: &NodeServer, token: &str) -> Result<Option<(String, Vec<String>)>, kube::Error> {
    use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
    let digest = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, token.as_bytes());
    // A SHA-256 digest is 32 bytes; the key is its first 32 whatever the slice says.
    let mut key = [0u8; 32];
    for (k, d) in key.iter_mut().zip(digest.as_ref()) {
        *k = *d;
    }
    let now = std::time::Instant::now();
    {
        let cache = s.reviewed.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((at, who)) = cache.get(&key)
            && now.duration_since(*at) < TOKEN_REVIEW_TTL
        {
            return Ok(who.clone());
        }
    }
    let review = TokenReview {
        spec: TokenReviewSpec { token: Some(token.to_owned()), ..Default::default() },
        ..Default::default()
    };
    let answer = Api::<TokenReview>::all(s.client.clone()).create(&PostParams::default(), &review).await?;
    let who = answer.status.filter(|st| st.authenticated == Some(true)).and_then(|st| st.user).and_then(|u| {
        let name = u.username.filter(|n| !n.is_empty())?;
        Some((name, u.groups.unwrap_or_default()))
    });
    let mut cache = s.reviewed.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if cache.len() >= MAX_REVIEWED {
        cache.clear();
    }
    cache.insert(key, (now, who.clone()));
    Ok(who)
}

/// Who is asking: the verified client certificate's user, else the bearer token's, as the
/// TokenReview says; `None`: nobody (401).
async fn requester(
    s: &NodeServer,
    peer: &podpass_serve::Peer,
    headers: &axum::http::HeaderMap,
) -> Result<Option<(String, Vec<String>)>, kube::Error> {
    if let Some(who) = peer.client_certificates.first().and_then(|c| identity(c)) {
        return Ok(Some(who));
    }
    let Some(value) = headers.get(axum::http::header::AUTHORIZATION) else { return Ok(None) };
    let Some(token) = value.to_str().ok().and_then(|v| v.strip_prefix("Bearer ")).map(str::trim) else {
        return Ok(None);
    };
    if token.is_empty() || token.len() > MAX_TOKEN_BYTES {
        return Ok(None);
    }
    review_token(s, token).await
}

/// The requester (certificate or bearer token), authorized for `<verb> nodes/<sub>` on this
/// node; otherwise the kubelet's 401/403 answer.
pub(super) async fn authorize(
    s: &NodeServer,
    peer: &podpass_serve::Peer,
    headers: &axum::http::HeaderMap,
    verb: &str,
    sub: &str,
) -> Result<(), Response> {
    let (user, groups) = match requester(s, peer, headers).await {
        Ok(Some(who)) => who,
        Ok(None) => return Err(status(StatusCode::UNAUTHORIZED, "Unauthorized")),
        Err(e) => return Err(status(StatusCode::INTERNAL_SERVER_ERROR, format!("authenticating the request: {e}"))),
    };
    match authorized(s, user.clone(), groups, verb, sub).await {
        Ok(true) => Ok(()),
        Ok(false) => Err(status(
            StatusCode::FORBIDDEN,
            format!("Forbidden (user={user}, verb={verb}, resource=nodes, subresource={sub})"),
        )),
        Err(e) => Err(status(StatusCode::INTERNAL_SERVER_ERROR, format!("authorizing the request: {e}"))),
    }
}

/// GET `/metrics`: the node's metrics, to an identity allowed `get nodes/metrics` (the
/// kubelet serves them on its authenticated port only).
async fn node_metrics(
    State(s): State<Arc<NodeServer>>,
    axum::Extension(peer): axum::Extension<podpass_serve::Peer>,
    headers: axum::http::HeaderMap,
) -> Response {
    if let Err(refused) = authorize(&s, &peer, &headers, "get", "metrics").await {
        return refused;
    }
    super::ops::render_metrics(s.shared.clone()).await
}

/// GET `/stats/summary`: the resource metrics (the Summary API's subset metrics-server
/// reads), to an identity allowed `get nodes/stats`.
async fn stats_summary(
    State(s): State<Arc<NodeServer>>,
    axum::Extension(peer): axum::Extension<podpass_serve::Peer>,
    headers: axum::http::HeaderMap,
) -> Response {
    if let Err(refused) = authorize(&s, &peer, &headers, "get", "stats").await {
        return refused;
    }
    axum::Json(s.resources.summary(&s.node)).into_response()
}

/// GET `/containerLogs/{namespace}/{pod}/{container}` (kubelet `getContainerLogs`).
async fn container_logs(
    State(s): State<Arc<NodeServer>>,
    UrlPath((ns, pod, container)): UrlPath<(String, String, String)>,
    RawQuery(query): RawQuery,
    axum::Extension(peer): axum::Extension<podpass_serve::Peer>,
    headers: axum::http::HeaderMap,
) -> Response {
    if let Err(refused) = authorize(&s, &peer, &headers, "get", "proxy").await {
        return refused;
    }
    // Names are DNS labels and subdomains: nothing that could step outside the logs.
    let safe = |v: &str| {
        !v.is_empty()
            && v.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
            && !v.starts_with('.')
    };
    if ![&ns, &pod, &container].iter().all(|v| safe(v)) {
        return status(StatusCode::BAD_REQUEST, "namespace, pod and container must be Kubernetes names");
    }
    let pairs: Vec<(String, String)> = url_pairs(query.as_deref().unwrap_or_default());
    let now = jiff::Timestamp::now().as_nanosecond();
    let options = match LogOptions::from_query(&pairs, now) {
        Ok(o) => o,
        Err(e) => return status(StatusCode::BAD_REQUEST, e.to_string()),
    };
    // The pod this node knows by that name now (kubelet: GetPodByName), never the files of
    // an earlier pod of the same name: its UID and its status pick the container.
    let Some(known) = s.pods.get(&ns, &pod) else {
        return status(StatusCode::NOT_FOUND, format!("pod {pod:?} does not exist"));
    };
    let uid = known.metadata.uid.clone().unwrap_or_default();
    let id = match container_log_status(&known, &container, options.previous) {
        Ok(id) => id,
        Err(unavailable) => return status(StatusCode::BAD_REQUEST, unavailable.to_string()),
    };
    let Some(rt) = s.runtime.as_deref() else {
        return status(StatusCode::NOT_FOUND, format!("node {} runs no containers", s.node));
    };
    let file = match rt.cri.container_status(&id).await {
        Ok(Some(st)) => PathBuf::from(st.log_path),
        Ok(None) => {
            return status(
                StatusCode::NOT_FOUND,
                format!("container {container:?} in pod {pod:?} is gone from the runtime"),
            );
        }
        Err(e) => return status(StatusCode::INTERNAL_SERVER_ERROR, format!("reading the container's status: {e}")),
    };
    // Only a file of this pod's own log directory is read, whatever the runtime answered.
    let dir = super::containers::log_dir(&rt.logs, &known);
    if !file.starts_with(&dir) || file.components().any(|c| matches!(c, std::path::Component::ParentDir)) {
        return status(StatusCode::INTERNAL_SERVER_ERROR, "the runtime named a log outside the pod's log directory");
    }
    let Ok((text, offset)) = read_from(&file, 0) else {
        return status(StatusCode::INTERNAL_SERVER_ERROR, format!("reading {}", file.display()));
    };
    let (first, consumed) = render(&text, &options);
    if !options.follow || options.previous {
        return (StatusCode::OK, first).into_response();
    }
    // Follow: what is there, then what the container writes while it runs.
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Vec<u8>, std::io::Error>>(16);
    let mut sent = first.len();
    let _ = tx.send(Ok(first)).await;
    let mut position = offset + u64::try_from(consumed).unwrap_or(0);
    let runtime = s.runtime.clone();
    podpass_serve::spawn_named("log-follow", async move {
        let follow = LogOptions { tail_lines: None, ..options.clone() };
        loop {
            tokio::time::sleep(FOLLOW_POLL).await;
            if tx.is_closed() {
                return;
            }
            let read = tokio::task::spawn_blocking({
                let file = file.clone();
                move || read_from(&file, position)
            })
            .await;
            let Ok(Ok((text, start))) = read else { return };
            let (bytes, consumed) = render(&text, &follow);
            position = start + u64::try_from(consumed).unwrap_or(0);
            if !bytes.is_empty() {
                let room = options.limit_bytes.map_or(bytes.len(), |l| l.saturating_sub(sent).min(bytes.len()));
                sent += room;
                if tx.send(Ok(bytes[..room].to_vec())).await.is_err() || options.limit_bytes.is_some_and(|l| sent >= l)
                {
                    return;
                }
                continue;
            }
            if !running(runtime.as_deref(), &uid, &container).await {
                return;
            }
        }
    });
    let body = axum::body::Body::from_stream(tokio_stream(rx));
    (StatusCode::OK, body).into_response()
}

/// The receiver as a stream of body chunks.
fn tokio_stream(
    mut rx: tokio::sync::mpsc::Receiver<Result<Vec<u8>, std::io::Error>>,
) -> impl futures::Stream<Item = Result<Vec<u8>, std::io::Error>> {
    futures::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

/// Whether the pod's container of that name still runs.
async fn running(runtime: Option<&PodRuntime>, uid: &str, container: &str) -> bool {
    let Some(rt) = runtime else { return false };
    let labels = HashMap::from([
        (POD_UID_LABEL.to_owned(), uid.to_owned()),
        (CONTAINER_NAME_LABEL.to_owned(), container.to_owned()),
    ]);
    rt.cri.list_containers(labels).await.is_ok_and(|cs| cs.iter().any(|c| c.state == CONTAINER_RUNNING))
}

/// `a=1&b=2` (percent-decoded).
fn url_pairs(query: &str) -> Vec<(String, String)> {
    url::form_urlencoded::parse(query.as_bytes()).map(|(k, v)| (k.into_owned(), v.into_owned())).collect()
}

/// The router.
pub(crate) fn router(server: Arc<NodeServer>) -> axum::Router {
    axum::Router::new()
        .route("/containerLogs/{namespace}/{pod}/{container}", axum::routing::get(container_logs))
        .route("/metrics", axum::routing::get(node_metrics))
        .route("/stats/summary", axum::routing::get(stats_summary))
        .route(
            "/exec/{namespace}/{pod}/{container}",
            axum::routing::get(super::streaming::stream).post(super::streaming::stream),
        )
        .route(
            "/attach/{namespace}/{pod}/{container}",
            axum::routing::get(super::streaming::stream).post(super::streaming::stream),
        )
        .route(
            "/portForward/{namespace}/{pod}",
            axum::routing::get(super::port_forward::port_forward).post(super::port_forward::port_forward),
        )
        .with_state(server)
}

/// A self-signed serving certificate for `names` (the API server does not verify the
/// kubelet's, as upstream without `--kubelet-certificate-authority`): chain and key PEM.
pub(crate) fn self_signed(names: &[String]) -> Result<(String, String), rcgen::Error> {
    let key = rcgen::KeyPair::generate()?;
    let params = rcgen::CertificateParams::new(names.to_vec())?;
    let cert = params.self_signed(&key)?;
    Ok((cert.pem(), key.serialize_pem()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_certificate_names_its_user_and_groups() {
        let key = rcgen::KeyPair::generate().unwrap_or_else(|e| panic!("{e}"));
        let mut params = rcgen::CertificateParams::default();
        params.distinguished_name.push(rcgen::DnType::CommonName, "kube-apiserver-kubelet-client");
        params.distinguished_name.push(rcgen::DnType::OrganizationName, "system:masters");
        let cert = params.self_signed(&key).unwrap_or_else(|e| panic!("{e}"));
        let (user, groups) = identity(cert.der()).unwrap_or_default();
        assert_eq!(user, "kube-apiserver-kubelet-client");
        assert_eq!(groups, ["system:masters"]);
        assert!(identity(b"not a certificate").is_none());
    }
}
