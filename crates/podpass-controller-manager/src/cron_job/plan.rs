//! What the CronJob controller decides, as pure functions of the CronJob, its Jobs and the
//! clock (upstream `pkg/controller/cronjob/utils.go` `mostRecentScheduleTime`,
//! `getJobName`, `cleanupFinishedJobs`): which scheduled time is due, how many were missed,
//! the name of its Job, and which finished Jobs the history limits remove.

use jiff::Timestamp;
use k8s_openapi::api::batch::v1::{CronJob, Job};
use podpass_api::cron::Schedule;

/// More missed start times than this is worth a warning (`TooManyMissedTimes`).
pub(crate) const TOO_MANY_MISSED: u64 = 100;
/// Steps the missed-times walk takes one by one before it jumps (a minutely schedule left a
/// year behind would otherwise take half a million steps).
const WALK: u64 = 1_000;

/// What is due.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Due {
    /// The most recent scheduled time not yet run, if any.
    pub at: Option<Timestamp>,
    /// How many scheduled times passed unrun (the most recent included).
    pub missed: u64,
    /// The next scheduled time after now.
    pub next: Option<Timestamp>,
}

/// `mostRecentScheduleTime`: from the last scheduled time (or the CronJob's creation), no
/// earlier than `startingDeadlineSeconds` ago, the scheduled times up to `now`.
pub(crate) fn due(cj: &CronJob, schedule: &Schedule, now: Timestamp) -> Due {
    let spec = cj.spec.clone().unwrap_or_default();
    let created = cj.metadata.creation_timestamp.as_ref().map_or(now, |t| t.0);
    let mut earliest = cj.status.as_ref().and_then(|s| s.last_schedule_time.as_ref()).map_or(created, |t| t.0);
    if let Some(deadline) = spec.starting_deadline_seconds
        && let Ok(limit) = Timestamp::from_second(now.as_second().saturating_sub(deadline))
        && earliest < limit
    {
        earliest = limit;
    }
    let mut at = None;
    let mut missed = 0u64;
    let mut t = earliest;
    while let Some(n) = schedule.next(t) {
        if n > now {
            return Due { at, missed, next: Some(n) };
        }
        at = Some(n);
        missed += 1;
        t = n;
        if missed == WALK {
            // Jump: the schedule's last period, repeated, brings the walk near `now`.
            let period = schedule.next(n).map(|m| m.as_second() - n.as_second()).filter(|p| *p > 0);
            if let Some(p) = period {
                let skip = (now.as_second() - n.as_second()) / p - 1;
                if skip > 0 {
                    missed = missed.saturating_add(skip.cast_unsigned());
                    t = Timestamp::from_second(n.as_second() + skip * p).unwrap_or(n);
                }
            }
        }
    }
    Due { at, missed, next: None }
}

/// `getJobName`: `<cronjob>-<scheduled time in minutes since the epoch>`, the same for
/// every attempt at one scheduled time (a second create is AlreadyExists, never a twin).
pub(crate) fn job_name(cj_name: &str, scheduled: Timestamp) -> String {
    format!("{cj_name}-{}", scheduled.as_second().div_euclid(60))
}

/// Whether a Job has finished, and whether it succeeded.
pub(crate) fn finished(job: &Job) -> Option<bool> {
    let conditions = job.status.as_ref().and_then(|s| s.conditions.as_ref());
    conditions.into_iter().flatten().find_map(|c| match (c.type_.as_str(), c.status.as_str()) {
        ("Complete", "True") => Some(true),
        ("Failed", "True") => Some(false),
        _ => None,
    })
}

/// `cleanupFinishedJobs`: the finished Jobs past the history limits (successful and failed
/// apart), oldest start first.
pub(crate) fn beyond_history<'a>(cj: &CronJob, jobs: &[&'a Job]) -> Vec<&'a Job> {
    let spec = cj.spec.clone().unwrap_or_default();
    let mut out = Vec::new();
    for (succeeded, limit) in
        [(true, spec.successful_jobs_history_limit.unwrap_or(3)), (false, spec.failed_jobs_history_limit.unwrap_or(1))]
    {
        let mut done: Vec<&Job> = jobs.iter().copied().filter(|j| finished(j) == Some(succeeded)).collect();
        let limit = usize::try_from(limit.max(0)).unwrap_or(0);
        if done.len() <= limit {
            continue;
        }
        let started = |j: &Job| j.status.as_ref().and_then(|s| s.start_time.as_ref()).map(|t| t.0);
        done.sort_by(|a, b| started(a).cmp(&started(b)).then_with(|| a.metadata.name.cmp(&b.metadata.name)));
        let excess = done.len() - limit;
        out.extend(done.into_iter().take(excess));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use jiff::tz::TimeZone;
    use serde_json::json;

    fn cj(spec: serde_json::Value, status: serde_json::Value) -> CronJob {
        let mut s = json!({"schedule": "*/5 * * * *", "jobTemplate": {}});
        for (k, v) in spec.as_object().into_iter().flatten() {
            s[k] = v.clone();
        }
        serde_json::from_value(json!({"metadata": {"name": "tick", "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": s, "status": status}))
        .unwrap_or_default()
    }

    fn t(s: &str) -> Timestamp {
        s.parse().unwrap_or_default()
    }

    fn every_five() -> Schedule {
        Schedule::parse("*/5 * * * *", TimeZone::UTC).unwrap_or(Schedule::Every(std::time::Duration::from_secs(300)))
    }

    #[test]
    fn the_most_recent_missed_time_is_the_one_due() {
        let s = every_five();
        let d = due(&cj(json!({}), json!({})), &s, t("2026-01-01T00:12:00Z"));
        assert_eq!(d.at, Some(t("2026-01-01T00:10:00Z")));
        assert_eq!(d.missed, 2);
        assert_eq!(d.next, Some(t("2026-01-01T00:15:00Z")));
        let ran = cj(json!({}), json!({"lastScheduleTime": "2026-01-01T00:10:00Z"}));
        assert_eq!(due(&ran, &s, t("2026-01-01T00:12:00Z")).at, None, "already run");
        // A deadline of 2 minutes: 00:10 was 2 min ago, still due; with 1 minute it is not.
        let strict = cj(json!({"startingDeadlineSeconds": 60}), json!({}));
        assert_eq!(due(&strict, &s, t("2026-01-01T00:12:00Z")).at, None);
    }

    #[test]
    fn a_year_behind_is_counted_without_walking_every_minute() {
        let s =
            Schedule::parse("* * * * *", TimeZone::UTC).unwrap_or(Schedule::Every(std::time::Duration::from_secs(60)));
        let d = due(&cj(json!({"schedule": "* * * * *"}), json!({})), &s, t("2027-01-01T00:00:30Z"));
        assert_eq!(d.at, Some(t("2027-01-01T00:00:00Z")));
        assert!(d.missed > TOO_MANY_MISSED && d.missed <= 525_600 + 1, "{}", d.missed);
    }

    #[test]
    fn jobs_are_named_by_their_minute_and_history_is_trimmed_oldest_first() {
        assert_eq!(
            job_name("tick", t("2026-01-01T00:10:00Z")),
            format!("tick-{}", t("2026-01-01T00:10:00Z").as_second() / 60)
        );
        let job = |name: &str, kind: &str, start: &str| -> Job {
            serde_json::from_value(json!({"metadata": {"name": name}, "status": {"startTime": start,
                "conditions": [{"type": kind, "status": "True"}]}}))
            .unwrap_or_default()
        };
        let jobs = [
            job("a", "Complete", "2026-01-01T00:00:00Z"),
            job("b", "Complete", "2026-01-01T00:05:00Z"),
            job("c", "Failed", "2026-01-01T00:06:00Z"),
            job("d", "Failed", "2026-01-01T00:07:00Z"),
        ];
        let refs: Vec<&Job> = jobs.iter().collect();
        let limits = cj(json!({"successfulJobsHistoryLimit": 1, "failedJobsHistoryLimit": 1}), json!({}));
        let gone: Vec<String> = beyond_history(&limits, &refs).iter().filter_map(|j| j.metadata.name.clone()).collect();
        assert_eq!(gone, ["a", "c"]);
    }
}
