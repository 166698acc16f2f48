//! `/metrics`: decisions by outcome and reason, JWKS fetches, issuer keys, latency. Every
//! label value comes from a closed set (outcomes, reasons) or the configuration (issuers).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// Labels of a decision.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DecisionLabels {
    /// `granted`, `partial`, `denied` (valid identity, nothing granted), `refused` (bad
    /// credentials), `invalid` (malformed request), `unavailable`, `throttled` (past its share of the work in flight).
    pub outcome: String,
    /// Why, from a closed set (`ok`, `expired`, `audience`, `node_mismatch`, …).
    pub reason: String,
}

/// Labels of a JWKS fetch.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FetchLabels {
    /// The configured issuer.
    pub issuer: String,
    /// `success` or `error`.
    pub result: String,
}

/// Label of per-issuer gauges.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct IssuerLabels {
    /// The configured issuer.
    pub issuer: String,
}

/// The service's metrics, registered in their own registry.
#[derive(Debug)]
pub struct RegistryAuthMetrics {
    registry: Registry,
    decisions: Family<DecisionLabels, Counter>,
    fetches: Family<FetchLabels, Counter>,
    keys: Family<IssuerLabels, Gauge>,
    duration: Histogram,
}

impl Default for RegistryAuthMetrics {
    fn default() -> Self {
        let decisions = Family::<DecisionLabels, Counter>::default();
        let fetches = Family::<FetchLabels, Counter>::default();
        let keys = Family::<IssuerLabels, Gauge>::default();
        let duration = Histogram::new([0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5]);
        let mut registry = Registry::default();
        registry.register(
            "podpass_registry_auth_token_requests",
            "Token requests by outcome and reason",
            decisions.clone(),
        );
        registry.register("podpass_registry_auth_jwks_fetches", "Issuer discovery and JWKS fetches", fetches.clone());
        registry.register("podpass_registry_auth_issuer_keys", "Verification keys known per issuer", keys.clone());
        registry.register(
            "podpass_registry_auth_token_request_duration_seconds",
            "Time to answer a token request",
            duration.clone(),
        );
        Self { registry, decisions, fetches, keys, duration }
    }
}

impl RegistryAuthMetrics {
    /// Counts a decision.
    pub fn decision(&self, outcome: &str, reason: &str) {
        self.decisions.get_or_create(&DecisionLabels { outcome: outcome.into(), reason: reason.into() }).inc();
    }

    /// Counts a fetch of `issuer`'s documents.
    pub fn jwks_fetch(&self, issuer: &str, result: &str) {
        self.fetches.get_or_create(&FetchLabels { issuer: issuer.into(), result: result.into() }).inc();
    }

    /// Sets the number of keys of `issuer`.
    pub fn issuer_keys(&self, issuer: &str, count: usize) {
        self.keys.get_or_create(&IssuerLabels { issuer: issuer.into() }).set(i64::try_from(count).unwrap_or(i64::MAX));
    }

    /// Records a request's duration.
    pub fn observe(&self, seconds: f64) {
        self.duration.observe(seconds);
    }

    /// The OpenMetrics text.
    pub fn encode(&self) -> String {
        let mut text = String::new();
        // Encoding into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut text, &self.registry);
        text
    }
}
