//! What the Job controller decides, as pure functions of the Job, its pods and the clock
//! (upstream `pkg/controller/job/job_controller.go`, `indexed_job_utils.go`,
//! `backoff_utils.go`): which pods are active or newly finished, how many should run, which
//! indexes are pending, the recreate back-off, and whether the Job has met its success
//! criteria or its failure target. `super` executes the plan.

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::batch::v1::{Job, JobCondition};
use k8s_openapi::api::core::v1::Pod;

/// The finalizer that keeps a finished pod until the Job has counted it.
pub(crate) const TRACKING_FINALIZER: &str = "batch.kubernetes.io/job-tracking";
/// The label and annotation of an Indexed Job's pod.
pub(crate) const COMPLETION_INDEX: &str = "batch.kubernetes.io/job-completion-index";
/// The first recreate back-off (`DefaultJobPodFailureBackOff`) and its cap
/// (`MaxJobPodFailureBackOff`).
const BACKOFF_BASE: Duration = Duration::from_secs(10);
const BACKOFF_MAX: Duration = Duration::from_secs(600);

fn phase(pod: &Pod) -> &str {
    pod.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or("Pending")
}

/// Whether the pod still carries the tracking finalizer.
pub(crate) fn tracked(pod: &Pod) -> bool {
    pod.metadata.finalizers.iter().flatten().any(|f| f == TRACKING_FINALIZER)
}

/// Not finished and not being deleted.
pub(crate) fn is_active(pod: &Pod) -> bool {
    !matches!(phase(pod), "Succeeded" | "Failed") && pod.metadata.deletion_timestamp.is_none()
}

/// How a finished pod counts: succeeded, failed (a pod deleted before it succeeded counts
/// as failed, `isPodFailed`), or not finished.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Still to finish.
    Running,
    /// Succeeded.
    Succeeded,
    /// Failed, or deleted before it succeeded.
    Failed,
}

/// The pod's outcome.
pub(crate) fn outcome(pod: &Pod) -> Outcome {
    match phase(pod) {
        "Succeeded" => Outcome::Succeeded,
        "Failed" => Outcome::Failed,
        _ if pod.metadata.deletion_timestamp.is_some() => Outcome::Failed,
        _ => Outcome::Running,
    }
}

/// An Indexed Job pod's index.
pub(crate) fn index_of(pod: &Pod) -> Option<i32> {
    let from = |m: Option<&std::collections::BTreeMap<String, String>>| {
        m.and_then(|m| m.get(COMPLETION_INDEX)).and_then(|v| v.parse().ok())
    };
    from(pod.metadata.annotations.as_ref()).or_else(|| from(pod.metadata.labels.as_ref()))
}

/// Whether the Job is Indexed.
pub(crate) fn is_indexed(job: &Job) -> bool {
    job.spec.as_ref().and_then(|s| s.completion_mode.as_deref()) == Some("Indexed")
}

/// `completedIndexes` ("1,3-5") as a set.
pub(crate) fn parse_indexes(text: &str) -> BTreeSet<i32> {
    let mut set = BTreeSet::new();
    for part in text.split(',').filter(|p| !p.is_empty()) {
        let mut ends = part.splitn(2, '-');
        let first = ends.next().and_then(|v| v.parse::<i32>().ok());
        let last = ends.next().map_or(first, |v| v.parse::<i32>().ok());
        if let (Some(a), Some(b)) = (first, last) {
            // Bounded by the Job's completions, which validation caps.
            set.extend(a..=b.min(a.saturating_add(100_000)));
        }
    }
    set
}

/// A set of indexes as `completedIndexes` writes it: ascending runs, `a-b` for three or
/// more in a row (upstream's `succeededIndexes.String`).
pub(crate) fn format_indexes(set: &BTreeSet<i32>) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut run: Option<(i32, i32)> = None;
    let flush = |run: (i32, i32), parts: &mut Vec<String>| {
        parts.push(if run.0 == run.1 { run.0.to_string() } else { format!("{}-{}", run.0, run.1) });
    };
    for &i in set {
        run = match run {
            Some((a, b)) if i == b + 1 => Some((a, i)),
            Some(r) => {
                flush(r, &mut parts);
                Some((i, i))
            }
            None => Some((i, i)),
        };
    }
    if let Some(r) = run {
        flush(r, &mut parts);
    }
    parts.join(",")
}

/// How many pods should be active now (`manageJob`): the parallelism, no more than the
/// completions left; a work queue (no completions) starts none once one has succeeded.
pub(crate) fn want_active(job: &Job, succeeded: i32) -> i32 {
    let spec = job.spec.clone().unwrap_or_default();
    let parallelism = spec.parallelism.unwrap_or(1).max(0);
    match spec.completions {
        Some(c) => (c - succeeded).clamp(0, parallelism),
        None if succeeded > 0 => 0,
        None => parallelism,
    }
}

/// An Indexed Job's indexes still to run: neither succeeded nor held by an active pod,
/// lowest first.
pub(crate) fn pending_indexes(job: &Job, succeeded: &BTreeSet<i32>, active: &[&Pod]) -> Vec<i32> {
    let completions = job.spec.as_ref().and_then(|s| s.completions).unwrap_or(0);
    let running: BTreeSet<i32> = active.iter().filter_map(|p| index_of(p)).collect();
    (0..completions).filter(|i| !succeeded.contains(i) && !running.contains(i)).collect()
}

/// Whether every completion is done: the count reached, or (a work queue) one succeeded and
/// none is active, or (Indexed) every index succeeded.
pub(crate) fn complete(job: &Job, succeeded: i32, succeeded_indexes: &BTreeSet<i32>, active: usize) -> bool {
    let completions = job.spec.as_ref().and_then(|s| s.completions);
    if is_indexed(job) {
        let c = completions.unwrap_or(0);
        return (0..c).all(|i| succeeded_indexes.contains(&i));
    }
    match completions {
        Some(c) => succeeded >= c,
        None => succeeded > 0 && active == 0,
    }
}

/// The recreate back-off left after `failures` in a row since the last success, the last at
/// `last` (`getRemainingTimeForFailuresCount`): 10 s doubling, at most 10 min.
pub(crate) fn backoff_left(failures: u32, last: jiff::Timestamp, now: jiff::Timestamp) -> Duration {
    if failures == 0 {
        return Duration::ZERO;
    }
    let wait = BACKOFF_BASE.saturating_mul(1u32 << (failures - 1).min(10)).min(BACKOFF_MAX);
    let elapsed = Duration::try_from(now.duration_since(last)).unwrap_or(Duration::ZERO);
    wait.saturating_sub(elapsed)
}

/// A condition of the Job, True, with both times now.
pub(crate) fn condition(kind: &str, reason: &str, message: &str, now: jiff::Timestamp) -> JobCondition {
    let t = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now);
    JobCondition {
        type_: kind.into(),
        status: "True".into(),
        reason: Some(reason.into()),
        message: Some(message.into()),
        last_probe_time: Some(t.clone()),
        last_transition_time: Some(t),
    }
}

/// The True condition of `kind`, if any.
pub(crate) fn has(job: &Job, kind: &str) -> Option<JobCondition> {
    let conditions = job.status.as_ref().and_then(|s| s.conditions.as_ref());
    conditions.into_iter().flatten().find(|c| c.type_ == kind && c.status == "True").cloned()
}

/// Why the Job has failed, if it has (`FailureTarget` reasons): too many failures
/// (`pastBackoffLimitOnFailure` counts restarts for OnFailure), or past its deadline.
pub(crate) fn failure(
    job: &Job,
    failed: i32,
    active: &[&Pod],
    now: jiff::Timestamp,
) -> Option<(&'static str, &'static str)> {
    let spec = job.spec.clone().unwrap_or_default();
    let limit = spec.backoff_limit.unwrap_or(6);
    let on_failure = spec.template.spec.as_ref().and_then(|s| s.restart_policy.as_deref()) == Some("OnFailure");
    let restarts: i32 = active
        .iter()
        .flat_map(|p| p.status.iter().flat_map(|s| s.container_statuses.iter().flatten()))
        .map(|c| c.restart_count)
        .sum();
    if failed > limit || (on_failure && limit > 0 && restarts >= limit) {
        return Some(("BackoffLimitExceeded", "Job has reached the specified backoff limit"));
    }
    let start = job.status.as_ref().and_then(|s| s.start_time.as_ref()).map(|t| t.0);
    if let (Some(deadline), Some(start)) = (spec.active_deadline_seconds, start)
        && now.as_second() - start.as_second() >= deadline
    {
        return Some(("DeadlineExceeded", "Job was active longer than specified deadline"));
    }
    None
}

/// When the active deadline falls, if the Job has one and has started.
pub(crate) fn deadline_in(job: &Job, now: jiff::Timestamp) -> Option<Duration> {
    let deadline = job.spec.as_ref().and_then(|s| s.active_deadline_seconds)?;
    let start = job.status.as_ref().and_then(|s| s.start_time.as_ref())?.0;
    let left = deadline - (now.as_second() - start.as_second());
    Some(Duration::from_secs(u64::try_from(left.max(0)).unwrap_or(0)) + Duration::from_millis(500))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn job(spec: serde_json::Value) -> Job {
        serde_json::from_value(json!({"metadata": {"name": "pi"}, "spec": spec})).unwrap_or_default()
    }

    #[test]
    fn active_pods_follow_parallelism_and_the_completions_left() {
        assert_eq!(want_active(&job(json!({"completions": 5, "parallelism": 2})), 0), 2);
        assert_eq!(want_active(&job(json!({"completions": 5, "parallelism": 2})), 4), 1);
        assert_eq!(want_active(&job(json!({"completions": 5, "parallelism": 2})), 5), 0);
        assert_eq!(want_active(&job(json!({"parallelism": 3})), 0), 3, "a work queue");
        assert_eq!(want_active(&job(json!({"parallelism": 3})), 1), 0, "one success ends a work queue's creates");
        assert!(complete(&job(json!({"parallelism": 3})), 1, &BTreeSet::new(), 0));
        assert!(!complete(&job(json!({"parallelism": 3})), 1, &BTreeSet::new(), 2));
    }

    #[test]
    fn completed_indexes_read_and_write_as_upstream() {
        let set = parse_indexes("1,3-5,7");
        assert_eq!(set.iter().copied().collect::<Vec<_>>(), [1, 3, 4, 5, 7]);
        assert_eq!(format_indexes(&set), "1,3-5,7");
        assert_eq!(format_indexes(&[0, 1].into_iter().collect()), "0-1");
        assert_eq!(format_indexes(&BTreeSet::new()), "");
        let indexed = job(json!({"completionMode": "Indexed", "completions": 4, "parallelism": 2}));
        assert!(!complete(&indexed, 3, &parse_indexes("0-2"), 0));
        assert!(complete(&indexed, 4, &parse_indexes("0-3"), 0));
        assert_eq!(pending_indexes(&indexed, &parse_indexes("0,2"), &[]), [1, 3]);
    }

    #[test]
    fn recreates_back_off_ten_seconds_doubling_to_ten_minutes() {
        let now = jiff::Timestamp::now();
        let ago = |s: i64| now.checked_sub(jiff::SignedDuration::from_secs(s)).unwrap_or(now);
        assert_eq!(backoff_left(0, now, now), Duration::ZERO);
        assert_eq!(backoff_left(1, now, now), Duration::from_secs(10));
        assert_eq!(backoff_left(3, ago(15), now), Duration::from_secs(25));
        assert_eq!(backoff_left(20, now, now), Duration::from_secs(600));
        assert_eq!(backoff_left(1, ago(30), now), Duration::ZERO);
    }

    #[test]
    fn failures_past_the_limit_or_the_deadline_fail_the_job() {
        let now = jiff::Timestamp::now();
        let started = now.checked_sub(jiff::SignedDuration::from_secs(20)).unwrap_or(now).to_string();
        let mut j = job(json!({"backoffLimit": 2, "activeDeadlineSeconds": 30,
            "template": {"spec": {"restartPolicy": "Never", "containers": []}}}));
        j.status = serde_json::from_value(json!({"startTime": started})).ok();
        assert_eq!(failure(&j, 2, &[], now), None);
        assert_eq!(failure(&j, 3, &[], now).map(|f| f.0), Some("BackoffLimitExceeded"));
        let later = now.checked_add(jiff::SignedDuration::from_secs(11)).unwrap_or(now);
        assert_eq!(failure(&j, 0, &[], later).map(|f| f.0), Some("DeadlineExceeded"));
        assert!(deadline_in(&j, now).is_some_and(|d| d > Duration::from_secs(9)));
        let restarting: Pod = serde_json::from_value(json!({"status": {"phase": "Running",
            "containerStatuses": [{"name": "c", "image": "", "imageID": "", "ready": false, "restartCount": 2}]}}))
        .unwrap_or_default();
        let mut on_failure = j.clone();
        if let Some(t) = on_failure.spec.as_mut().and_then(|s| s.template.spec.as_mut()) {
            t.restart_policy = Some("OnFailure".into());
        }
        assert_eq!(failure(&on_failure, 0, &[&restarting], now).map(|f| f.0), Some("BackoffLimitExceeded"));
    }
}
