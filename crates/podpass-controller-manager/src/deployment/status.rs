//! A Deployment's status as upstream computes it (`sync.go` `calculateStatus`,
//! `progress.go` `syncRolloutStatus`, `checkPausedConditions`, `util/deployment_util.go`
//! `DeploymentComplete`/`DeploymentProgressing`/`DeploymentTimedOut`): the replica counts,
//! `Available`, `Progressing` with its reasons and deadline, and `ReplicaFailure` copied up
//! from the ReplicaSets. Pure functions of the Deployment, its sets and the clock.

use std::time::Duration;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentCondition, DeploymentStatus, ReplicaSet};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::plan::{available, max_unavailable, replicas, spec_replicas};

/// The `Progressing` reasons (`util/deployment_util.go`).
pub(crate) const NEW_RS_AVAILABLE: &str = "NewReplicaSetAvailable";
pub(crate) const RS_UPDATED: &str = "ReplicaSetUpdated";
pub(crate) const TIMED_OUT: &str = "ProgressDeadlineExceeded";
pub(crate) const PAUSED: &str = "DeploymentPaused";
pub(crate) const RESUMED: &str = "DeploymentResumed";
pub(crate) const FOUND_NEW_RS: &str = "FoundNewReplicaSet";
pub(crate) const NEW_RS_CREATED: &str = "NewReplicaSetCreated";
pub(crate) const RS_CREATE_ERROR: &str = "ReplicaSetCreateError";

/// `progressDeadlineSeconds`, unless it is MaxInt32 (no deadline) or unset.
fn deadline(d: &Deployment) -> Option<i32> {
    d.spec.as_ref().and_then(|s| s.progress_deadline_seconds).filter(|s| *s != i32::MAX)
}

/// `HasProgressDeadline`.
pub(crate) fn has_deadline(d: &Deployment) -> bool {
    deadline(d).is_some()
}

/// A condition as `NewDeploymentCondition` makes one: both times now.
pub(crate) fn condition(
    kind: &str,
    status: &str,
    reason: &str,
    message: String,
    now: jiff::Timestamp,
) -> DeploymentCondition {
    DeploymentCondition {
        type_: kind.into(),
        status: status.into(),
        reason: Some(reason.into()),
        message: Some(message),
        last_update_time: Some(Time(now)),
        last_transition_time: Some(Time(now)),
    }
}

/// The condition of `kind`, if any.
pub(crate) fn get<'a>(status: &'a DeploymentStatus, kind: &str) -> Option<&'a DeploymentCondition> {
    status.conditions.iter().flatten().find(|c| c.type_ == kind)
}

/// `SetDeploymentCondition`: nothing when status and reason are the same; the transition
/// time kept when only the reason or message moved.
pub(crate) fn set(status: &mut DeploymentStatus, mut new: DeploymentCondition) {
    if let Some(current) = get(status, &new.type_) {
        if current.status == new.status && current.reason == new.reason {
            return;
        }
        if current.status == new.status {
            new.last_transition_time.clone_from(&current.last_transition_time);
        }
    }
    let conditions = status.conditions.get_or_insert_with(Vec::new);
    conditions.retain(|c| c.type_ != new.type_);
    conditions.push(new);
}

/// `RemoveDeploymentCondition`.
pub(crate) fn remove(status: &mut DeploymentStatus, kind: &str) {
    if let Some(conditions) = status.conditions.as_mut() {
        conditions.retain(|c| c.type_ != kind);
        if conditions.is_empty() {
            status.conditions = None;
        }
    }
}

/// `calculateStatus`: the counts over all the sets, the new set's as `updatedReplicas`, and
/// `Available` against `replicas − maxUnavailable`.
pub(crate) fn calculate(
    d: &Deployment,
    all: &[&ReplicaSet],
    new: Option<&ReplicaSet>,
    now: jiff::Timestamp,
) -> DeploymentStatus {
    let actual = |rs: &&ReplicaSet| rs.status.as_ref().map_or(0, |s| s.replicas);
    let ready = |rs: &&ReplicaSet| rs.status.as_ref().and_then(|s| s.ready_replicas).unwrap_or(0);
    let available_count: i32 = all.iter().map(|rs| available(rs)).sum();
    let total: i32 = all.iter().map(|rs| spec_replicas(rs)).sum();
    let previous = d.status.clone().unwrap_or_default();
    let mut status = DeploymentStatus {
        observed_generation: d.metadata.generation,
        replicas: Some(all.iter().map(actual).sum()),
        updated_replicas: Some(new.as_ref().map_or(0, actual)),
        ready_replicas: Some(all.iter().map(ready).sum()),
        available_replicas: Some(available_count),
        unavailable_replicas: Some((total - available_count).max(0)),
        collision_count: previous.collision_count,
        conditions: previous.conditions,
        terminating_replicas: None,
    };
    let available_condition = if available_count >= replicas(d) - max_unavailable(d) {
        condition("Available", "True", "MinimumReplicasAvailable", "Deployment has minimum availability.".into(), now)
    } else {
        condition(
            "Available",
            "False",
            "MinimumReplicasUnavailable",
            "Deployment does not have minimum availability.".into(),
            now,
        )
    };
    set(&mut status, available_condition);
    status
}

/// `DeploymentComplete`: every replica updated and available, the generation observed.
pub(crate) fn complete(d: &Deployment, status: &DeploymentStatus) -> bool {
    let n = replicas(d);
    status.updated_replicas == Some(n)
        && status.replicas == Some(n)
        && status.available_replicas == Some(n)
        && status.observed_generation >= d.metadata.generation
}

/// `DeploymentProgressing`: more updated, fewer old, more ready or more available than
/// the status last written.
fn progressing(d: &Deployment, new: &DeploymentStatus) -> bool {
    let old = d.status.clone().unwrap_or_default();
    let n = |v: Option<i32>| v.unwrap_or(0);
    let old_old = n(old.replicas) - n(old.updated_replicas);
    let new_old = n(new.replicas) - n(new.updated_replicas);
    n(new.updated_replicas) > n(old.updated_replicas)
        || new_old < old_old
        || n(new.ready_replicas) > n(old.ready_replicas)
        || n(new.available_replicas) > n(old.available_replicas)
}

/// When the `Progressing` condition of `status` passes its deadline, if it can.
fn deadline_at(d: &Deployment, status: &DeploymentStatus) -> Option<jiff::Timestamp> {
    let seconds = deadline(d)?;
    let c = get(status, "Progressing")?;
    if c.reason.as_deref() == Some(NEW_RS_AVAILABLE) {
        return None;
    }
    let from = c.last_update_time.as_ref()?.0;
    from.checked_add(jiff::SignedDuration::from_secs(i64::from(seconds))).ok()
}

/// `DeploymentTimedOut`.
fn timed_out(d: &Deployment, status: &DeploymentStatus, now: jiff::Timestamp) -> bool {
    match get(status, "Progressing") {
        Some(c) if c.reason.as_deref() == Some(TIMED_OUT) => true,
        Some(_) => deadline_at(d, status).is_some_and(|at| at < now),
        None => false,
    }
}

/// `syncRolloutStatus`'s status: [`calculate`] and then `Progressing` — complete, progressing,
/// or timed out — and the sets' `ReplicaFailure`; with when to look again for a deadline
/// (`requeueStuckDeployment`).
pub(crate) fn rollout(
    d: &Deployment,
    all: &[&ReplicaSet],
    new: Option<&ReplicaSet>,
    now: jiff::Timestamp,
) -> (DeploymentStatus, Option<Duration>) {
    let mut status = calculate(d, all, new, now);
    if !has_deadline(d) {
        remove(&mut status, "Progressing");
    }
    let current = get(&status, "Progressing").cloned();
    let already_complete = status.replicas == status.updated_replicas
        && current.as_ref().is_some_and(|c| c.reason.as_deref() == Some(NEW_RS_AVAILABLE));
    let name = new.and_then(|rs| rs.metadata.name.clone()).unwrap_or_default();
    if has_deadline(d) && !already_complete {
        if complete(d, &status) {
            let message = format!("ReplicaSet {name:?} has successfully progressed.");
            set(&mut status, condition("Progressing", "True", NEW_RS_AVAILABLE, message, now));
        } else if progressing(d, &status) {
            let message = format!("ReplicaSet {name:?} is progressing.");
            let mut c = condition("Progressing", "True", RS_UPDATED, message, now);
            // Progress moves lastUpdateTime; the transition time stays while it is True.
            if let Some(cur) = current.as_ref().filter(|c| c.status == "True") {
                c.last_transition_time.clone_from(&cur.last_transition_time);
            }
            remove(&mut status, "Progressing");
            set(&mut status, c);
        } else if timed_out(d, &status, now) {
            let message = format!("ReplicaSet {name:?} has timed out progressing.");
            set(&mut status, condition("Progressing", "False", TIMED_OUT, message, now));
        }
    }
    // GetReplicaFailures: the new set's first, else any set's.
    let failure = new
        .into_iter()
        .chain(all.iter().copied())
        .flat_map(|rs| rs.status.iter().flat_map(|s| s.conditions.iter().flatten()))
        .find(|c| c.type_ == "ReplicaFailure")
        .cloned();
    match failure {
        Some(f) => {
            let reason = f.reason.unwrap_or_default();
            let mut c = condition("ReplicaFailure", &f.status, &reason, f.message.unwrap_or_default(), now);
            c.last_transition_time = f.last_transition_time.or(c.last_transition_time);
            set(&mut status, c);
        }
        None => remove(&mut status, "ReplicaFailure"),
    }
    let requeue = if has_deadline(d) && !complete(d, &status) && !timed_out(d, &status, now) {
        deadline_at(d, &status).map(|at| {
            let left = at.duration_since(now);
            Duration::try_from(left).unwrap_or(Duration::ZERO) + Duration::from_secs(1)
        })
    } else {
        None
    };
    (status, requeue)
}

/// `checkPausedConditions`: `Progressing=Unknown` `DeploymentPaused` when paused,
/// `DeploymentResumed` when no longer; never over a timed-out rollout. The new status if it
/// changed.
pub(crate) fn paused(d: &Deployment, now: jiff::Timestamp) -> Option<DeploymentStatus> {
    if !has_deadline(d) {
        return None;
    }
    let mut status = d.status.clone().unwrap_or_default();
    let current = get(&status, "Progressing");
    if current.is_some_and(|c| c.reason.as_deref() == Some(TIMED_OUT)) {
        return None;
    }
    let paused_shown = current.is_some_and(|c| c.reason.as_deref() == Some(PAUSED));
    let is_paused = d.spec.as_ref().and_then(|s| s.paused).unwrap_or(false);
    let c = match (is_paused, paused_shown) {
        (true, false) => condition("Progressing", "Unknown", PAUSED, "Deployment is paused".into(), now),
        (false, true) => condition("Progressing", "Unknown", RESUMED, "Deployment is resumed".into(), now),
        _ => return None,
    };
    set(&mut status, c);
    Some(status)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn deployment(status: serde_json::Value) -> Deployment {
        serde_json::from_value(json!({"metadata": {"name": "web", "generation": 2},
            "spec": {"replicas": 2, "progressDeadlineSeconds": 60, "selector": {"matchLabels": {"app": "web"}},
                     "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
                     "template": {"metadata": {"labels": {"app": "web"}}}},
            "status": status}))
        .unwrap_or_default()
    }

    fn rs(name: &str, replicas: i32, ready: i32, available: i32) -> ReplicaSet {
        serde_json::from_value(json!({"metadata": {"name": name}, "spec": {"replicas": replicas, "selector": {}},
            "status": {"replicas": replicas, "readyReplicas": ready, "availableReplicas": available}}))
        .unwrap_or_default()
    }

    fn reason(s: &DeploymentStatus, kind: &str) -> Option<String> {
        get(s, kind).and_then(|c| c.reason.clone())
    }

    #[test]
    fn counts_and_availability_are_upstreams() {
        let now = jiff::Timestamp::now();
        let d = deployment(json!({}));
        let (old, new) = (rs("web-1", 2, 2, 2), rs("web-2", 1, 0, 0));
        let s = calculate(&d, &[&old, &new], Some(&new), now);
        assert_eq!(
            (s.replicas, s.updated_replicas, s.ready_replicas, s.available_replicas),
            (Some(3), Some(1), Some(2), Some(2))
        );
        assert_eq!(s.unavailable_replicas, Some(1));
        assert_eq!(s.observed_generation, Some(2));
        assert_eq!(reason(&s, "Available").as_deref(), Some("MinimumReplicasAvailable"));
        let s = calculate(&d, &[&rs("web-2", 2, 1, 1)], None, now);
        assert_eq!(reason(&s, "Available").as_deref(), Some("MinimumReplicasUnavailable"), "maxUnavailable 0");
    }

    #[test]
    fn progressing_moves_from_updated_to_available_or_times_out() {
        let now = jiff::Timestamp::now();
        let d = deployment(json!({"replicas": 2, "updatedReplicas": 0, "availableReplicas": 2}));
        let (old, new) = (rs("web-1", 2, 2, 2), rs("web-2", 1, 0, 0));
        let (s, requeue) = rollout(&d, &[&old, &new], Some(&new), now);
        let c = get(&s, "Progressing").cloned().unwrap_or_default();
        assert_eq!((c.status.as_str(), c.reason.as_deref()), ("True", Some(RS_UPDATED)));
        assert_eq!(c.message.as_deref(), Some("ReplicaSet \"web-2\" is progressing."));
        assert!(requeue.is_some_and(|r| r > Duration::from_secs(55)), "{requeue:?}");

        // No progress past the deadline: timed out.
        let mut stuck = d.clone();
        stuck.status = Some(s.clone());
        let later = now.checked_add(jiff::SignedDuration::from_secs(61)).unwrap_or(now);
        let (t, _) = rollout(&stuck, &[&old, &new], Some(&new), later);
        assert_eq!(reason(&t, "Progressing").as_deref(), Some(TIMED_OUT));
        assert_eq!(get(&t, "Progressing").map(|c| c.status.as_str()), Some("False"));

        let done = rs("web-2", 2, 2, 2);
        let (s, requeue) = rollout(&stuck, &[&done], Some(&done), now);
        assert_eq!(reason(&s, "Progressing").as_deref(), Some(NEW_RS_AVAILABLE));
        assert_eq!(requeue, None);
    }

    #[test]
    fn replica_failures_are_copied_up_and_pausing_is_shown() {
        let now = jiff::Timestamp::now();
        let mut failing = rs("web-2", 2, 0, 0);
        if let Some(s) = failing.status.as_mut() {
            s.conditions = Some(vec![k8s_openapi::api::apps::v1::ReplicaSetCondition {
                type_: "ReplicaFailure".into(),
                status: "True".into(),
                reason: Some("FailedCreate".into()),
                message: Some("pods \"web-2-x\" is forbidden: violates PodSecurity".into()),
                last_transition_time: Some(Time(now)),
            }]);
        }
        let d = deployment(json!({}));
        let (s, _) = rollout(&d, &[&failing], Some(&failing), now);
        assert_eq!(reason(&s, "ReplicaFailure").as_deref(), Some("FailedCreate"));
        let mut paused_d = d.clone();
        if let Some(spec) = paused_d.spec.as_mut() {
            spec.paused = Some(true);
        }
        let p = paused(&paused_d, now).unwrap_or_default();
        assert_eq!(reason(&p, "Progressing").as_deref(), Some(PAUSED));
        paused_d.status = Some(p);
        assert!(paused(&paused_d, now).is_none(), "already shown");
        if let Some(spec) = paused_d.spec.as_mut() {
            spec.paused = Some(false);
        }
        assert_eq!(paused(&paused_d, now).and_then(|s| reason(&s, "Progressing")).as_deref(), Some(RESUMED));
    }
}
