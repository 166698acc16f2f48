//! `/metrics`: Prometheus text exposition with upstream metric names
//! (pkg/serviceaccount/metrics.go, k8s.io/apiserver endpoints/metrics).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// Labels of `apiserver_request_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    /// Kubernetes verb.
    pub verb: String,
    /// API group.
    pub group: String,
    /// API version.
    pub version: String,
    /// Resource.
    pub resource: String,
    /// Subresource.
    pub subresource: String,
    /// HTTP status code.
    pub code: String,
}

/// Labels of `apiserver_request_duration_seconds`: upstream's `verb`, `resource`,
/// `subresource` and `scope` (what the scalability SLIs split on: a single object, a
/// namespace's collection, the cluster's).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DurationLabels {
    /// Kubernetes verb.
    pub verb: String,
    /// Resource.
    pub resource: String,
    /// Subresource.
    pub subresource: String,
    /// `resource` (one named object), `namespace` or `cluster` (a collection); empty for a
    /// path that names no served resource.
    pub scope: String,
}

/// Upstream's `scope` of a request on `path` (`CleanScope`).
fn scope_of(path: Option<&crate::server::rest::resources::ApiPath>, resource: &str) -> &'static str {
    match path {
        _ if resource.is_empty() => "",
        Some(p) if p.name.is_some() => "resource",
        Some(p) if p.namespace.is_some() => "namespace",
        Some(_) => "cluster",
        None => "",
    }
}

/// Labels of `apiserver_longrunning_requests` (upstream's label set).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LongRunningLabels {
    /// `WATCH`.
    pub verb: String,
    /// API group.
    pub group: String,
    /// API version.
    pub version: String,
    /// Resource.
    pub resource: String,
    /// Subresource.
    pub subresource: String,
    /// `namespace` or `cluster`.
    pub scope: String,
    /// `apiserver`.
    pub component: String,
}

/// The `bound_object_kind` label of KEP-4193's counters.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BoundObjectLabels {
    /// `Pod`, `Node` or `Secret`.
    pub bound_object_kind: String,
}

/// The control plane's metrics.
pub struct ApiServerMetrics {
    registry: Registry,
    /// Tokens with `warnafter` used before it.
    pub valid_tokens: Counter,
    /// Tokens with `warnafter` used after it.
    pub stale_tokens: Counter,
    /// Tokens without an audience.
    pub legacy_tokens: Counter,
    /// Secret-based tokens of Secrets their service account lists (auto-generated).
    pub legacy_auto_token_uses: Counter,
    /// Secret-based tokens of manually created Secrets.
    pub legacy_manual_token_uses: Counter,
    /// Bound tokens issued by TokenRequest, by bound object kind (KEP-4193).
    pub bound_tokens_issued: Family<BoundObjectLabels, Counter>,
    /// Pod-bound tokens issued carrying the pod's node (KEP-4193).
    pub pod_with_node_tokens_issued: Counter,
    /// Tokens issued with a `jti` (KEP-4193).
    pub tokens_issued_with_identifier: Counter,
    /// Authentications of pod-bound tokens whose node reference was taken (KEP-4193).
    pub pod_node_ref_verified: Counter,
    /// Uses of a token whose `jti` is revoked, refused (beyond upstream).
    pub revoked_token_uses: Counter,
    /// Authentications that verified a bound object, by its kind (KEP-4193).
    pub bound_object_verified: Family<BoundObjectLabels, Counter>,
    /// Requests by verb, resource and code.
    pub requests: Family<RequestLabels, Counter>,
    /// Request latency.
    pub durations: Family<DurationLabels, Histogram>,
    /// Open watches.
    pub longrunning: Family<LongRunningLabels, prometheus_client::metrics::gauge::Gauge>,
}

fn latency_histogram() -> Histogram {
    // Upstream's buckets, trimmed to the range a local control plane sees.
    Histogram::new([0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 1.25, 1.5, 2.0, 3.0, 5.0, 10.0, 30.0, 60.0])
}

impl ApiServerMetrics {
    /// The server's metrics and `store`'s own.
    pub fn with_store(store: &dyn crate::store::Store) -> Self {
        let mut m = Self::default();
        store.register_metrics(&mut m.registry);
        m
    }
}

impl Default for ApiServerMetrics {
    fn default() -> Self {
        let mut registry = Registry::default();
        let m = Self {
            valid_tokens: Counter::default(),
            stale_tokens: Counter::default(),
            legacy_tokens: Counter::default(),
            legacy_auto_token_uses: Counter::default(),
            legacy_manual_token_uses: Counter::default(),
            bound_tokens_issued: Family::default(),
            pod_with_node_tokens_issued: Counter::default(),
            tokens_issued_with_identifier: Counter::default(),
            pod_node_ref_verified: Counter::default(),
            revoked_token_uses: Counter::default(),
            bound_object_verified: Family::default(),
            requests: Family::default(),
            durations: Family::new_with_constructor(latency_histogram),
            longrunning: Family::default(),
            registry: Registry::default(),
        };
        registry.register(
            "apiserver_longrunning_requests",
            "Gauge of all active long-running apiserver requests broken out by verb, group, version, resource, scope and component",
            m.longrunning.clone(),
        );
        // The encoder appends `_total` to counters.
        registry.register(
            "serviceaccount_valid_tokens",
            "Cumulative valid projected service account tokens used",
            m.valid_tokens.clone(),
        );
        registry.register(
            "serviceaccount_stale_tokens",
            "Cumulative stale projected service account tokens used",
            m.stale_tokens.clone(),
        );
        registry.register(
            "serviceaccount_legacy_tokens",
            "Cumulative legacy service account tokens used",
            m.legacy_tokens.clone(),
        );
        registry.register(
            "serviceaccount_legacy_auto_token_uses",
            "Cumulative auto-generated legacy tokens used",
            m.legacy_auto_token_uses.clone(),
        );
        registry.register(
            "serviceaccount_legacy_manual_token_uses",
            "Cumulative manually created legacy tokens used",
            m.legacy_manual_token_uses.clone(),
        );
        // KEP-4193's names.
        registry.register(
            "serviceaccount_bound_tokens_issued",
            "Cumulative bound service account tokens issued, by the kind of object they are bound to",
            m.bound_tokens_issued.clone(),
        );
        registry.register(
            "serviceaccount_bound_tokens_issued_pod_with_node_tokens",
            "Cumulative pod-bound service account tokens issued carrying the pod's node",
            m.pod_with_node_tokens_issued.clone(),
        );
        registry.register(
            "serviceaccount_bound_tokens_issued_with_identifier",
            "Cumulative service account tokens issued with a credential identifier (jti)",
            m.tokens_issued_with_identifier.clone(),
        );
        registry.register(
            "podpass_serviceaccount_revoked_token_uses",
            "Cumulative uses of service account tokens refused because their jti is revoked",
            m.revoked_token_uses.clone(),
        );
        registry.register(
            "serviceaccount_authentication_pod_node_ref_verified",
            "Cumulative pod-bound service account tokens authenticated with their node reference",
            m.pod_node_ref_verified.clone(),
        );
        registry.register(
            "serviceaccount_authentication_bound_object_verified",
            "Cumulative service account token authentications that verified a bound object, by its kind",
            m.bound_object_verified.clone(),
        );
        registry.register(
            "apiserver_request",
            "Counter of apiserver requests broken out for each verb, group, version, resource and HTTP response code",
            m.requests.clone(),
        );
        registry.register(
            "apiserver_request_duration_seconds",
            "Response latency distribution in seconds for each verb and resource",
            m.durations.clone(),
        );
        Self { registry, ..m }
    }
}

/// Verbs a metric label may carry; anything else is `other` (upstream `cleanVerb` keeps
/// label values to a fixed set).
const KNOWN_VERBS: &[&str] = &[
    "get",
    "list",
    "watch",
    "create",
    "update",
    "patch",
    "delete",
    "deletecollection",
    "post",
    "put",
    "head",
    "options",
    "connect",
];

/// The labels of one request, from what routing understood of it: the verb if it is a known
/// one, and group/version/resource/subresource only when they name something served.
/// Never a raw path segment, so a client sending random paths cannot grow the label set.
pub fn request_labels(verb: &str, path: Option<&crate::server::rest::resources::ApiPath>) -> RequestLabels {
    use crate::server::rest::resources::find;
    let verb = if KNOWN_VERBS.contains(&verb) { verb } else { "other" };
    let mut labels = RequestLabels {
        verb: verb.to_owned(),
        group: String::new(),
        version: String::new(),
        resource: String::new(),
        subresource: String::new(),
        code: String::new(),
    };
    let Some(p) = path else { return labels };
    let Some(res) = find(&p.group, &p.resource).filter(|r| r.version == p.version) else { return labels };
    labels.group = res.group.to_owned();
    labels.version = res.version.to_owned();
    labels.resource = res.plural.to_owned();
    if let Some(sub) = &p.subresource
        && let Some(known) = res.subresource(sub)
    {
        labels.subresource = known.name.to_owned();
    }
    labels
}

impl ApiServerMetrics {
    /// Counts one answered request (`apiserver_request_total`,
    /// `apiserver_request_duration_seconds`), labelled by [`request_labels`].
    pub fn observe_request(
        &self,
        verb: &str,
        path: Option<&crate::server::rest::resources::ApiPath>,
        code: u16,
        seconds: f64,
    ) {
        let mut labels = request_labels(verb, path);
        let scope = scope_of(path, &labels.resource).to_owned();
        self.durations
            .get_or_create(&DurationLabels {
                verb: labels.verb.clone(),
                resource: labels.resource.clone(),
                subresource: labels.subresource.clone(),
                scope,
            })
            .observe(seconds);
        labels.code = code.to_string();
        self.requests.get_or_create(&labels).inc();
    }

    /// The text exposition.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Encoding into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::rest::resources::{Target, parse};

    fn path(p: &str) -> Option<crate::server::rest::resources::ApiPath> {
        match parse(p) {
            Some(Target::Resource(r)) => Some(r),
            _ => None,
        }
    }

    #[test]
    fn durations_carry_upstreams_scope_and_subresource() {
        let m = ApiServerMetrics::default();
        m.observe_request("get", path("/api/v1/namespaces/ns/pods/p").as_ref(), 200, 0.001);
        m.observe_request("list", path("/api/v1/namespaces/ns/pods").as_ref(), 200, 0.001);
        m.observe_request("list", path("/api/v1/pods").as_ref(), 200, 0.001);
        m.observe_request("create", path("/api/v1/namespaces/ns/serviceaccounts/sa/token").as_ref(), 201, 0.001);
        m.observe_request("get", None, 404, 0.001);
        let text = m.encode();
        for labels in [
            r#"verb="get",resource="pods",subresource="",scope="resource""#,
            r#"verb="list",resource="pods",subresource="",scope="namespace""#,
            r#"verb="list",resource="pods",subresource="",scope="cluster""#,
            r#"verb="create",resource="serviceaccounts",subresource="token",scope="resource""#,
            r#"verb="get",resource="",subresource="",scope="""#,
        ] {
            assert!(
                text.contains(&format!("apiserver_request_duration_seconds_count{{{labels}}} 1")),
                "{labels}\n{text}"
            );
        }
    }

    #[test]
    fn attacker_paths_and_methods_do_not_grow_the_label_set() {
        let m = ApiServerMetrics::default();
        for i in 0..500 {
            m.observe_request(&format!("method{i}"), path(&format!("/api/v1/random{i}/x/y")).as_ref(), 403, 0.001);
            m.observe_request("get", path(&format!("/apis/g{i}/v{i}/r{i}")).as_ref(), 403, 0.001);
            m.observe_request(
                "get",
                path(&format!("/api/v1/namespaces/n{i}/secrets/s{i}/sub{i}")).as_ref(),
                404,
                0.001,
            );
            m.observe_request("get", None, 404, 0.001);
        }
        let text = m.encode();
        let series = text.lines().filter(|l| l.starts_with("apiserver_request_total{")).count();
        assert_eq!(series, 4, "{text}");
        assert!(
            text.contains(
                r#"apiserver_request_total{verb="other",group="",version="",resource="",subresource="",code="403"} 500"#
            ),
            "{text}"
        );
        assert!(text.contains(r#"apiserver_request_total{verb="get",group="",version="v1",resource="secrets",subresource="",code="404"} 500"#), "{text}");
        assert!(!text.contains("random") && !text.contains("sub1"));
    }

    #[test]
    fn served_resources_keep_their_labels() {
        let l = request_labels("create", path("/api/v1/namespaces/ns/serviceaccounts/sa/token").as_ref());
        assert_eq!(
            (l.verb.as_str(), l.resource.as_str(), l.subresource.as_str()),
            ("create", "serviceaccounts", "token")
        );
        let l = request_labels("list", path("/apis/rbac.authorization.k8s.io/v1/clusterroles").as_ref());
        assert_eq!((l.group.as_str(), l.version.as_str()), ("rbac.authorization.k8s.io", "v1"));
    }
}
