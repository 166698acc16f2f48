//! `--event-ttl`: Events live for this long after their last write, as kube-apiserver keeps
//! them (upstream attaches an etcd lease to each Event write; here one reaper serves both
//! stores the same way). Without it a busy cluster's Events grow the store without bound.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use super::AppState;
use crate::field::Field;
use crate::store::{ListOptions, StoreError};

/// kube-apiserver's `--event-ttl` default.
pub const DEFAULT_EVENT_TTL: Duration = Duration::from_secs(3600);

/// The last time an Event was written, as its fields tell: the latest of its creation,
/// `lastTimestamp`, `eventTime` and `series.lastObservedTime` (a series' update is a
/// write, and renews its lease upstream).
pub fn last_written(event: &Value) -> Option<i64> {
    ["/metadata/creationTimestamp", "/lastTimestamp", "/eventTime", "/series/lastObservedTime"]
        .iter()
        .filter_map(|p| event.field(p).and_then(Value::as_str))
        .filter_map(timestamp)
        .max()
}

/// An RFC 3339 time, with or without microseconds (`eventTime` is a MicroTime, UTC).
fn timestamp(t: &str) -> Option<i64> {
    crate::time::parse_rfc3339(t).or_else(|| {
        let (whole, _) = t.split_once('.')?;
        crate::time::parse_rfc3339(&format!("{whole}Z"))
    })
}

/// Whether `event` is past `ttl` at `now`. An Event with no readable time is kept (it is
/// never removed on a guess).
pub fn expired(event: &Value, ttl: Duration, now: i64) -> bool {
    let ttl = i64::try_from(ttl.as_secs()).unwrap_or(i64::MAX);
    last_written(event).is_some_and(|t| t.saturating_add(ttl) <= now)
}

/// How often the reaper looks: a quarter of the TTL, between 1 s and 1 min, so an Event
/// outlives its TTL by at most that.
fn period(ttl: Duration) -> Duration {
    (ttl / 4).clamp(Duration::from_secs(1), Duration::from_secs(60))
}

/// Removes expired Events until the task is dropped.
pub async fn reap_forever(state: Arc<AppState>, ttl: Duration) {
    let mut tick = tokio::time::interval(period(ttl));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        match reap(&state, ttl, podpass_token::now_unix()).await {
            Ok(0) => {}
            Ok(n) => tracing::debug!(events = n, "expired events removed"),
            Err(e) => tracing::warn!(error = %e, "removing expired events failed; retrying"),
        }
    }
}

/// One pass: every expired Event removed (one changed since it was listed is left for the
/// next pass). Returns how many were removed.
pub async fn reap(state: &AppState, ttl: Duration, now: i64) -> Result<usize, StoreError> {
    let listed = state.store.list("events", None, &ListOptions::default()).await?;
    crate::store::delete_listed(state.store.as_ref(), "events", &listed.items, |e| expired(e, ttl, now)).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_event_lives_for_the_ttl_after_its_last_write() {
        let hour = Duration::from_secs(3600);
        let created = json!({"metadata": {"creationTimestamp": "2026-01-01T00:00:00Z"}});
        let t0 = crate::time::parse_rfc3339("2026-01-01T00:00:00Z").unwrap_or_default();
        assert!(!expired(&created, hour, t0 + 3599));
        assert!(expired(&created, hour, t0 + 3600));
        // a series seen again later lives on from then
        let repeated = json!({"metadata": {"creationTimestamp": "2026-01-01T00:00:00Z"},
            "lastTimestamp": "2026-01-01T00:30:00Z"});
        assert!(!expired(&repeated, hour, t0 + 3600));
        assert!(expired(&repeated, hour, t0 + 5400));
        let micro = json!({"eventTime": "2026-01-01T00:45:00.123456Z"});
        assert_eq!(last_written(&micro), Some(t0 + 2700));
        // no readable time: kept
        assert!(!expired(&json!({"metadata": {}}), hour, i64::MAX));
        assert_eq!(period(hour), Duration::from_secs(60));
        assert_eq!(period(Duration::from_secs(2)), Duration::from_secs(1));
    }
}
