//! Zones and their eviction rates (`ComputeZoneState`, `handleDisruption`,
//! `setLimiterInZone`): nodes are NoExecute-tainted through a per-zone queue drained at
//! `--node-eviction-rate` nodes per second, slower in a zone mostly down, and not at all
//! when every zone is down — then the fault is more likely the control plane's view of
//! the nodes than the nodes, and evicting everything would make it worse.

use std::collections::{BTreeMap, VecDeque};
use std::time::Instant;

use k8s_openapi::api::core::v1::Node;

/// `topology.kubernetes.io/region` and `zone`, with their deprecated beta labels.
const REGION: [&str; 2] = ["topology.kubernetes.io/region", "failure-domain.beta.kubernetes.io/region"];
const ZONE: [&str; 2] = ["topology.kubernetes.io/zone", "failure-domain.beta.kubernetes.io/zone"];

/// A node's zone key (upstream `GetZoneKey`: `region:\0:zone`, empty without labels).
pub(crate) fn key(node: &Node) -> String {
    let labels = node.metadata.labels.as_ref();
    let first = |names: [&str; 2]| {
        names.iter().find_map(|n| labels.and_then(|l| l.get(*n)).filter(|v| !v.is_empty())).cloned().unwrap_or_default()
    };
    let (region, zone) = (first(REGION), first(ZONE));
    if region.is_empty() && zone.is_empty() { String::new() } else { format!("{region}:\x00:{zone}") }
}

/// A zone's health.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum State {
    /// Not judged yet.
    Initial,
    Normal,
    /// More than two nodes and at least `--unhealthy-zone-threshold` of them not Ready.
    PartialDisruption,
    /// No node Ready.
    FullDisruption,
}

/// The eviction settings (kube-controller-manager's flags).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Rates {
    /// `--node-eviction-rate`: nodes per second in a healthy zone.
    pub primary: f64,
    /// `--secondary-node-eviction-rate`: in a partly disrupted large zone.
    pub secondary: f64,
    /// `--large-cluster-size-threshold`: a zone of more nodes is large.
    pub large_zone: usize,
    /// `--unhealthy-zone-threshold`: the share of not-Ready nodes that disrupts a zone.
    pub unhealthy: f64,
}

/// `ComputeZoneState` over the Ready statuses of a zone's nodes.
pub(crate) fn state(ready: &[&str], unhealthy: f64) -> State {
    let up = ready.iter().filter(|s| **s == "True").count();
    let down = ready.len() - up;
    if up == 0 && down > 0 {
        State::FullDisruption
    } else if down > 2 && down as f64 / ready.len() as f64 >= unhealthy {
        State::PartialDisruption
    } else {
        State::Normal
    }
}

/// A token bucket of burst 1 (client-go's `NewTokenBucketRateLimiter(qps, 1)`); at 0 qps it
/// never accepts (`NewFakeNeverRateLimiter`).
#[derive(Debug, Clone)]
pub(crate) struct Limiter {
    qps: f64,
    tokens: f64,
    at: Instant,
}

impl Limiter {
    pub(crate) fn new(qps: f64, now: Instant) -> Self {
        Self { qps, tokens: 1.0, at: now }
    }

    fn refill(&mut self, now: Instant) {
        if self.qps > 0.0 {
            self.tokens = (self.tokens + now.duration_since(self.at).as_secs_f64() * self.qps).min(1.0);
        }
        self.at = now;
    }

    /// Takes a token if one is there.
    pub(crate) fn try_accept(&mut self, now: Instant) -> bool {
        self.refill(now);
        if self.qps > 0.0 && self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }

    /// `SwapLimiter`: a new rate; the new bucket starts as empty as the old one was, so a
    /// rate change is not a free burst.
    pub(crate) fn swap(&mut self, qps: f64, now: Instant) {
        if (qps - self.qps).abs() < f64::EPSILON {
            return;
        }
        self.refill(now);
        let empty = self.qps <= 0.0 || self.tokens < 1.0;
        *self = Self::new(qps, now);
        if empty {
            self.tokens = 0.0;
        }
    }
}

/// One zone: its state, its rate and the nodes waiting for their NoExecute taint.
#[derive(Debug, Clone)]
pub(crate) struct Zone {
    pub state: State,
    pub limiter: Limiter,
    pub queue: VecDeque<String>,
}

impl Zone {
    pub(crate) fn new(rates: &Rates, now: Instant) -> Self {
        Self { state: State::Initial, limiter: Limiter::new(rates.primary, now), queue: VecDeque::new() }
    }

    /// Queues `node` once.
    pub(crate) fn enqueue(&mut self, node: &str) {
        if !self.queue.iter().any(|n| n == node) {
            self.queue.push_back(node.to_owned());
        }
    }

    /// Forgets `node` (Ready again, or gone).
    pub(crate) fn cancel(&mut self, node: &str) {
        self.queue.retain(|n| n != node);
    }
}

/// `setLimiterInZone`: the rate a zone of `size` nodes in `state` drains at.
pub(crate) fn rate(rates: &Rates, size: usize, state: State) -> f64 {
    match state {
        State::Normal | State::Initial | State::FullDisruption => rates.primary,
        State::PartialDisruption if size > rates.large_zone => rates.secondary,
        State::PartialDisruption => 0.0,
    }
}

/// What [`handle_disruption`] decided beyond the zones' rates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// As before.
    Unchanged,
    /// Every zone just went down: all NoExecute taints come off, evictions stop.
    EnteredFullDisruption,
    /// Some node is Ready again after every zone was down: every node gets a fresh grace.
    LeftFullDisruption,
}

/// `handleDisruption`: new states and rates for `zones` from the Ready statuses of their
/// nodes (`ready` by zone key).
pub(crate) fn handle_disruption(
    zones: &mut BTreeMap<String, Zone>,
    ready: &BTreeMap<String, Vec<&str>>,
    rates: &Rates,
    now: Instant,
) -> Mode {
    let new: BTreeMap<&String, State> = ready.iter().map(|(k, v)| (k, state(v, rates.unhealthy))).collect();
    let all_are_down = new.values().all(|s| *s == State::FullDisruption);
    for k in ready.keys() {
        zones.entry(k.clone()).or_insert_with(|| Zone::new(rates, now));
    }
    zones.retain(|k, _| ready.contains_key(k));
    let all_were_down = zones.values().all(|z| z.state == State::FullDisruption);
    if all_are_down && all_were_down {
        return Mode::Unchanged;
    }
    if all_are_down {
        tracing::info!("all nodes are not ready: entering master disruption mode, no evictions");
        for zone in zones.values_mut() {
            zone.limiter.swap(0.0, now);
            zone.state = State::FullDisruption;
        }
        return Mode::EnteredFullDisruption;
    }
    for (k, zone) in zones.iter_mut() {
        let state = new.get(k).copied().unwrap_or(State::Normal);
        if all_were_down || zone.state != state {
            if !all_were_down {
                tracing::info!(zone = %k.replace('\0', ""), ?state, "zone changed state");
            }
            let size = ready.get(k).map_or(0, Vec::len);
            zone.limiter.swap(rate(rates, size, state), now);
            zone.state = state;
        }
    }
    if all_were_down {
        tracing::info!("some nodes are ready again: leaving master disruption mode");
        Mode::LeftFullDisruption
    } else {
        Mode::Unchanged
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use std::time::Duration;

    const RATES: Rates = Rates { primary: 0.1, secondary: 0.01, large_zone: 50, unhealthy: 0.55 };

    #[test]
    fn zone_states_follow_compute_zone_state() {
        assert_eq!(state(&["Unknown"], 0.55), State::FullDisruption);
        assert_eq!(state(&["True", "Unknown"], 0.55), State::Normal, "two down is never partial");
        assert_eq!(state(&["True", "False", "Unknown", "Unknown"], 0.55), State::PartialDisruption);
        assert_eq!(state(&["True", "True", "False", "Unknown", "Unknown", "True"], 0.55), State::Normal);
        assert_eq!(rate(&RATES, 51, State::PartialDisruption), 0.01);
        assert_eq!(rate(&RATES, 50, State::PartialDisruption), 0.0);
        assert_eq!(rate(&RATES, 3, State::FullDisruption), 0.1, "one zone down among healthy ones is evicted");
    }

    #[test]
    fn the_zone_key_is_region_and_zone() {
        let mut node = Node { metadata: ObjectMeta::default(), ..Default::default() };
        assert_eq!(key(&node), "");
        node.metadata.labels = Some(
            [
                ("topology.kubernetes.io/zone".to_owned(), "a".to_owned()),
                ("failure-domain.beta.kubernetes.io/region".to_owned(), "r".to_owned()),
            ]
            .into(),
        );
        assert_eq!(key(&node), "r:\x00:a");
    }

    #[test]
    fn the_limiter_takes_one_node_per_interval_and_a_new_rate_is_no_free_burst() {
        let start = Instant::now();
        let mut limiter = Limiter::new(0.1, start);
        assert!(limiter.try_accept(start));
        assert!(!limiter.try_accept(start + Duration::from_secs(9)));
        assert!(limiter.try_accept(start + Duration::from_secs(10)));
        limiter.swap(0.0, start + Duration::from_secs(10));
        assert!(!limiter.try_accept(start + Duration::from_secs(1000)), "zero never accepts");
        limiter.swap(0.1, start + Duration::from_secs(1000));
        assert!(!limiter.try_accept(start + Duration::from_secs(1000)), "starts empty after zero");
        assert!(limiter.try_accept(start + Duration::from_secs(1010)));
    }

    #[test]
    fn every_zone_down_stops_evictions_and_a_ready_node_resumes_them() {
        let start = Instant::now();
        let mut zones = BTreeMap::new();
        let one = |s: &'static str| BTreeMap::from([(String::new(), vec![s])]);
        assert_eq!(handle_disruption(&mut zones, &one("True"), &RATES, start), Mode::Unchanged);
        assert_eq!(zones[""].state, State::Normal);
        // The only node is down: the whole cluster is, so nothing is evicted.
        assert_eq!(handle_disruption(&mut zones, &one("Unknown"), &RATES, start), Mode::EnteredFullDisruption);
        assert_eq!(handle_disruption(&mut zones, &one("Unknown"), &RATES, start), Mode::Unchanged);
        let zone = zones.get_mut("").map(|z| z.limiter.try_accept(start + Duration::from_secs(100)));
        assert_eq!(zone, Some(false));
        assert_eq!(handle_disruption(&mut zones, &one("True"), &RATES, start), Mode::LeftFullDisruption);
        assert_eq!(zones[""].state, State::Normal);
        // Two nodes, one down: a normal zone, its node is tainted at the primary rate.
        let two = BTreeMap::from([(String::new(), vec!["True", "Unknown"])]);
        assert_eq!(handle_disruption(&mut zones, &two, &RATES, start), Mode::Unchanged);
        assert!(zones.get_mut("").is_some_and(|z| z.limiter.try_accept(start + Duration::from_secs(200))));
    }
}
