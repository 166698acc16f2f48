//! Requests in flight, bounded per identity (kube-apiserver's `--max-requests-inflight` and
//! API Priority and Fairness, in their simplest form): work in flight is the unit of
//! fairness, not connections. Each authenticated user (or anonymous) holds at most
//! [`PER_USER`] requests at once, and all of them together at most [`TOTAL`]; past either,
//! a request is answered 429 with `Retry-After: 1` at once, as upstream. The cluster's own
//! identities (`system:masters`, `system:nodes`: the admin, the nodes and the control
//! plane's clients) are exempt — a tenant or an anonymous flood never starves them — and
//! long-running requests (watches, followed logs) are not counted, as upstream.

use podpass_serve::{FairShare, InFlightPermit};

use super::User;
use super::status::StatusError;

/// Requests one identity may have in flight at once.
pub(crate) const PER_USER: usize = 100;
/// Requests all non-exempt identities may have in flight at once (upstream's
/// `--max-requests-inflight` 400 plus `--max-mutating-requests-inflight` 200).
pub(crate) const TOTAL: usize = 600;

/// Groups whose requests are never bounded here.
const EXEMPT_GROUPS: [&str; 2] = ["system:masters", "system:nodes"];

/// The in-flight bounds of one server.
#[derive(Debug)]
pub(crate) struct InFlight(FairShare);

impl Default for InFlight {
    fn default() -> Self {
        Self::new(TOTAL, PER_USER)
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
    pub(crate) fn new(total: usize, per_user: usize) -> Self {
        Self(FairShare::new(total, per_user))
    }

    /// Counts a request of `user` in flight, or refuses it (429) when its identity or all
    /// identities are at their bound. Exempt users and long-running requests pass uncounted.
    pub(crate) fn admit(&self, user: &User, long_running: bool) -> Result<InFlightPermit, StatusError> {
        if long_running || user.groups.iter().any(|g| EXEMPT_GROUPS.contains(&g.as_str())) {
            return Ok(InFlightPermit::uncounted());
        }
        self.0.admit(&user.name, true).map_err(|_| too_many())
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
