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

/// Labels of `apiserver_request_duration_seconds`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DurationLabels {
    /// Kubernetes verb.
    pub verb: String,
    /// Resource.
    pub resource: String,
}

/// Labels of the issued-token counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct IssuedLabels {
    /// `pod`, `node`, `secret` or `none`.
    pub bound_kind: String,
}

/// The control plane's metrics.
pub struct Metrics {
    registry: Registry,
    /// Tokens with `warnafter` used before it.
    pub valid_tokens: Counter,
    /// Tokens with `warnafter` used after it.
    pub stale_tokens: Counter,
    /// Tokens without an audience.
    pub legacy_tokens: Counter,
    /// TokenRequests answered, by bound object kind.
    pub issued_tokens: Family<IssuedLabels, Counter>,
    /// Requests by verb, resource and code.
    pub requests: Family<RequestLabels, Counter>,
    /// Request latency.
    pub durations: Family<DurationLabels, Histogram>,
}

fn latency_histogram() -> Histogram {
    // Upstream's buckets, trimmed to the range a local control plane sees.
    Histogram::new([0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 1.25, 1.5, 2.0, 3.0, 5.0, 10.0, 30.0, 60.0])
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::default();
        let m = Self {
            valid_tokens: Counter::default(),
            stale_tokens: Counter::default(),
            legacy_tokens: Counter::default(),
            issued_tokens: Family::default(),
            requests: Family::default(),
            durations: Family::new_with_constructor(latency_histogram),
            registry: Registry::default(),
        };
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
            "podpass_serviceaccount_issued_tokens",
            "Service account tokens issued by TokenRequest, by bound object kind",
            m.issued_tokens.clone(),
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

impl Metrics {
    /// The text exposition.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Encoding into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}
