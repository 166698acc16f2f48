//! Requests in flight, bounded per flow (kube-apiserver's `--max-requests-inflight` and
//! API Priority and Fairness, in their simplest form): work in flight is the unit of
//! fairness, not connections. Each flow holds at most [`PER_USER`] requests at once, and
//! all of them together at most [`TOTAL`]; past either, a request is answered 429 with
//! `Retry-After: 1` at once, as upstream. [`RESERVE`] of the total is kept for flows
//! holding fewer than [`FLOOR`]: however many flows fill the rest, another still gets in.
//!
//! A flow is who is really asking (beyond upstream, whose APF keys the impersonated user):
//! the authenticated user behind any `Impersonate-User`, and for a service account its
//! namespace — a tenant that may create service accounts, and impersonate them as the
//! `edit` role may, still has one flow, not one per account it made.
//!
//! The cluster's own identities (`system:masters`, `system:nodes`: the admin, the nodes and
//! the control plane's clients) are exempt — a tenant or an anonymous flood never starves
//! them — and long-running requests (watches, followed logs) are not counted, as upstream.

use podpass_serve::{FairShare, InFlightPermit};

use super::User;
use super::status::StatusError;

/// Requests one identity may have in flight at once.
pub(crate) const PER_USER: usize = 100;
/// Requests all non-exempt identities may have in flight at once (upstream's
/// `--max-requests-inflight` 400 plus `--max-mutating-requests-inflight` 200).
pub(crate) const TOTAL: usize = 600;
/// Of the total, what only flows holding fewer than [`FLOOR`] may take.
pub(crate) const RESERVE: usize = 100;
/// Requests in flight every flow is guaranteed while the reserve lasts (for 20 flows at
/// once).
pub(crate) const FLOOR: usize = 5;

/// Groups whose requests are never bounded here.
const EXEMPT_GROUPS: [&str; 2] = ["system:masters", "system:nodes"];

/// The in-flight bounds of one server.
#[derive(Debug)]
pub(crate) struct InFlight(FairShare);

impl Default for InFlight {
    fn default() -> Self {
        Self(FairShare::new(TOTAL, PER_USER).with_reserve(RESERVE, FLOOR))
    }
}

/// The flow `requester`'s work counts in: `serviceaccounts:<namespace>` for a service
/// account, its name otherwise.
pub(crate) fn flow_of(requester: &User) -> String {
    match requester.name.strip_prefix("system:serviceaccount:").and_then(|rest| rest.split_once(':')) {
        Some((namespace, _)) => format!("serviceaccounts:{namespace}"),
        None => format!("user:{}", requester.name),
    }
}

fn too_many() -> StatusError {
    let mut e = StatusError::new(
        axum::http::StatusCode::TOO_MANY_REQUESTS,
        "TooManyRequests",
        "Too many requests, please try again later.",
    );
    e.details = Some(Box::new(serde_json::json!({"retryAfterSeconds": 1})));
    e
}

impl InFlight {
    /// Bounds without a reserve (tests).
    #[cfg(test)]
    pub(crate) fn new(total: usize, per_user: usize) -> Self {
        Self(FairShare::new(total, per_user))
    }

    /// Counts a request in flight in the flow of `requester` (who authenticated, whoever it
    /// impersonates), or refuses it (429) when its flow or all flows are at their bound.
    /// Exempt requesters and long-running requests pass uncounted.
    pub(crate) fn admit(&self, requester: &User, long_running: bool) -> Result<InFlightPermit, StatusError> {
        if long_running || requester.groups.iter().any(|g| EXEMPT_GROUPS.contains(&g.as_str())) {
            return Ok(InFlightPermit::uncounted());
        }
        self.0.admit(&flow_of(requester), true).map_err(|_| too_many())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(name: &str, groups: &[&str]) -> User {
        User {
            name: name.into(),
            uid: String::new(),
            groups: groups.iter().map(|g| (*g).to_owned()).collect(),
            extra: Default::default(),
        }
    }

    #[test]
    fn a_service_account_is_counted_in_its_namespaces_flow() {
        let sa = |ns: &str, name: &str| user(&format!("system:serviceaccount:{ns}:{name}"), &[]);
        assert_eq!(flow_of(&sa("team-b", "a1")), flow_of(&sa("team-b", "a7")));
        assert_ne!(flow_of(&sa("team-b", "a1")), flow_of(&sa("team-a", "a1")));
        assert_eq!(flow_of(&user("bob", &[])), "user:bob");
        // A user named like a flow is not that flow.
        assert_ne!(flow_of(&user("serviceaccounts:team-b", &[])), flow_of(&sa("team-b", "x")));
        // Seven accounts of one namespace share one flow's bound.
        let bounds = InFlight::new(10, 2);
        let held =
            [bounds.admit(&sa("team-b", "a1"), false).unwrap(), bounds.admit(&sa("team-b", "a2"), false).unwrap()];
        assert_eq!(bounds.admit(&sa("team-b", "a3"), false).unwrap_err().code.as_u16(), 429);
        assert!(bounds.admit(&sa("team-a", "app"), false).is_ok());
        drop(held);
    }

    #[test]
    fn the_reserve_serves_a_light_flow_when_heavy_ones_fill_the_total() {
        let bounds = InFlight::default();
        let sa = |ns: String| user(&format!("system:serviceaccount:{ns}:x"), &[]);
        let heavy: Vec<_> =
            (0..(TOTAL - RESERVE)).map(|i| bounds.admit(&sa(format!("heavy-{}", i % 5)), false).unwrap()).collect();
        assert_eq!(bounds.admit(&sa("heavy-0".into()), false).unwrap_err().code.as_u16(), 429);
        let light: Vec<_> = (0..FLOOR).map(|_| bounds.admit(&sa("team-a".into()), false).unwrap()).collect();
        assert_eq!(bounds.admit(&sa("team-a".into()), false).unwrap_err().code.as_u16(), 429, "past its floor");
        drop((heavy, light));
    }

    #[test]
    fn one_identity_cannot_take_the_servers_work_and_the_cluster_is_never_starved() {
        let bounds = InFlight::new(3, 2);
        let tenant = user("system:serviceaccount:team:app", &["system:authenticated"]);
        let held = [bounds.admit(&tenant, false).unwrap(), bounds.admit(&tenant, false).unwrap()];
        let e = bounds.admit(&tenant, false).unwrap_err();
        assert_eq!((e.code.as_u16(), e.reason), (429, "TooManyRequests"));
        // Another tenant still gets its share, until the total is reached.
        let other = user("bob", &["system:authenticated"]);
        let _third = bounds.admit(&other, false).unwrap();
        assert!(bounds.admit(&other, false).is_err(), "past the total");
        // The admin and the nodes pass whatever tenants hold; a watch is not counted.
        assert!(bounds.admit(&user("admin", &["system:masters"]), false).is_ok());
        assert!(bounds.admit(&user("system:node:n1", &["system:nodes"]), false).is_ok());
        assert!(bounds.admit(&tenant, true).is_ok());
        drop(held);
        assert!(bounds.admit(&tenant, false).is_ok(), "given back when its requests end");
    }
}
