//! The CronJob controller (`pkg/controller/cronjob`, v2), on kube-runtime's Controller: one
//! sync per CronJob, woken by its own changes and its Jobs', and requeued for its next
//! scheduled time. Each sync — as `syncCronJob` — reconciles `status.active` with the Jobs
//! it owns (`SawCompletedJob`, `MissingJob`), trims finished Jobs to the history limits,
//! and, unless suspended, runs the most recent scheduled time not yet run: too late past
//! `startingDeadlineSeconds` is `MissSchedule`, `Forbid` with a Job active waits
//! (`JobAlreadyActive`), `Replace` deletes the active ones first; the Job is
//! `<cronjob>-<minutes>` so a retried create can never make a twin. Every write as
//! `system:serviceaccount:kube-system:cronjob-controller`.

pub(crate) mod plan;

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::batch::v1::{CronJob, CronJobStatus, Job};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use kube::api::{DeleteParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, ResourceExt};
use podpass_api::cron::Schedule;

use crate::claim;
use crate::credentials::Credentials;
use crate::events::{Recorder, Regarding};
pub use crate::sync_error::SyncError;

/// The controller's name and service account.
pub const NAME: &str = "cronjob-controller";
/// The annotation naming the time a Job was scheduled for.
const SCHEDULED_AT: &str = "batch.kubernetes.io/cronjob-scheduled-timestamp";
/// Past the next scheduled time by this much before looking again (`nextScheduleTimeDuration`).
const AFTER_NEXT: Duration = Duration::from_millis(100);

struct Context {
    credentials: Credentials,
    jobs: Store<Job>,
    jobs_ready: tokio::sync::OnceCell<bool>,
}

/// The CronJobs a Job concerns: its controller, when that is a CronJob.
fn concerned(job: &Job) -> Vec<ObjectRef<CronJob>> {
    match claim::controller_of(job.metadata.owner_references.as_ref()) {
        Some(owner) if owner.kind == "CronJob" => {
            vec![ObjectRef::new(&owner.name).within(&job.namespace().unwrap_or_default())]
        }
        _ => Vec::new(),
    }
}

/// Runs the controller until its streams end.
pub async fn run(credentials: Credentials) {
    let root = credentials.root();
    let (jobs, writer) = reflector::store::<Job>();
    let job_events = reflector::reflector(
        writer,
        watcher(Api::<Job>::all(root.clone()), watcher::Config::default()).default_backoff(),
    )
    .touched_objects();
    let context = Arc::new(Context { credentials, jobs, jobs_ready: tokio::sync::OnceCell::new() });
    Controller::new(Api::<CronJob>::all(root), watcher::Config::default())
        .watches_stream(job_events, |job| concerned(&job))
        .run(reconcile, error_policy, context)
        .for_each(|result| async move {
            if let Err(e) = result {
                tracing::debug!(error = %e, "cronjob sync");
            }
        })
        .await;
}

fn error_policy(_cj: Arc<CronJob>, error: &SyncError, _ctx: Arc<Context>) -> Action {
    if error.is_conflict() {
        return Action::requeue(Duration::from_millis(200));
    }
    tracing::warn!(error = %error, "cronjob sync failed; retrying");
    Action::requeue(Duration::from_secs(5))
}

async fn reconcile(cj: Arc<CronJob>, ctx: Arc<Context>) -> Result<Action, SyncError> {
    let key = format!("{}/{}", cj.namespace().unwrap_or_default(), cj.name_any());
    let span = tracing::info_span!("reconcile", controller = NAME, cronjob = %key);
    tracing::Instrument::instrument(sync(cj.as_ref().clone(), ctx), span).await
}

fn reference(job: &Job) -> ObjectReference {
    ObjectReference {
        api_version: Some("batch/v1".into()),
        kind: Some("Job".into()),
        name: job.metadata.name.clone(),
        namespace: job.metadata.namespace.clone(),
        uid: job.metadata.uid.clone(),
        resource_version: job.metadata.resource_version.clone(),
        field_path: None,
    }
}

/// `getJobFromTemplate2`: the template's Job, named for its scheduled time, annotated with
/// it (in the CronJob's zone), controlled by the CronJob.
fn job_from_template(cj: &CronJob, scheduled: jiff::Timestamp, zone: &jiff::tz::TimeZone) -> Job {
    let template = cj.spec.as_ref().map(|s| s.job_template.clone()).unwrap_or_default();
    let meta = template.metadata.unwrap_or_default();
    let mut annotations = meta.annotations.unwrap_or_default();
    let local = scheduled.to_zoned(zone.clone());
    annotations.insert(SCHEDULED_AT.into(), local.strftime("%Y-%m-%dT%H:%M:%S%:z").to_string());
    Job {
        metadata: ObjectMeta {
            name: Some(plan::job_name(&cj.name_any(), scheduled)),
            namespace: cj.namespace(),
            labels: meta.labels,
            annotations: Some(annotations),
            owner_references: Some(vec![OwnerReference {
                api_version: "batch/v1".into(),
                kind: "CronJob".into(),
                name: cj.name_any(),
                uid: cj.metadata.uid.clone().unwrap_or_default(),
                controller: Some(true),
                block_owner_deletion: Some(true),
            }]),
            ..Default::default()
        },
        spec: template.spec,
        status: None,
    }
}

/// Writes `status` (an Update of `/status`) if it differs from the cached one.
async fn write_status(api: &Api<CronJob>, cj: &CronJob, status: CronJobStatus) -> Result<(), SyncError> {
    if cj.status.as_ref() == Some(&status) {
        return Ok(());
    }
    let mut updated = cj.clone();
    updated.status = Some(status);
    api.replace_status(&cj.name_any(), &PostParams::default(), &updated).await?;
    Ok(())
}

async fn sync(cj: CronJob, ctx: Arc<Context>) -> Result<Action, SyncError> {
    let ready = ctx.jobs_ready.get_or_init(|| async { ctx.jobs.wait_until_ready().await.is_ok() }).await;
    if !*ready {
        return Err(SyncError::CacheGone("jobs"));
    }
    if cj.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let namespace = cj.namespace().unwrap_or_default();
    let uid = cj.metadata.uid.clone().unwrap_or_default();
    let client = ctx.credentials.client(NAME).await?;
    let cron_jobs: Api<CronJob> = Api::namespaced(client.clone(), &namespace);
    let jobs_api: Api<Job> = Api::namespaced(client.clone(), &namespace);
    let recorder = Recorder::new(client, NAME);
    let name = cj.name_any();
    let regarding =
        Regarding { api_version: "batch/v1", kind: "CronJob", namespace: &namespace, name: &name, uid: &uid };
    let spec = cj.spec.clone().unwrap_or_default();
    let zone = match spec.time_zone.as_deref() {
        None => jiff::tz::TimeZone::UTC,
        Some(z) => match jiff::tz::TimeZone::get(z) {
            Ok(zone) => zone,
            Err(_) => {
                recorder.warning(&regarding, "UnknownTimeZone", &format!("invalid timeZone: {z:?}")).await;
                return Ok(Action::await_change());
            }
        },
    };
    let schedule = match Schedule::parse(&spec.schedule, zone.clone()) {
        Ok(s) => s,
        Err(e) => {
            let message = format!("unparseable schedule: {:?} : {e}", spec.schedule);
            recorder.warning(&regarding, "UnparseableSchedule", &message).await;
            return Ok(Action::await_change());
        }
    };

    // The Jobs it owns, and status.active reconciled with them.
    let owned: Vec<Job> = ctx
        .jobs
        .state()
        .iter()
        .filter(|j| j.namespace().as_deref() == Some(namespace.as_str()))
        .filter(|j| claim::controller_of(j.metadata.owner_references.as_ref()).is_some_and(|o| o.uid == uid))
        .map(|j| j.as_ref().clone())
        .collect();
    let mut status: CronJobStatus = cj.status.clone().unwrap_or_default();
    let mut active: Vec<ObjectReference> = status.active.clone().unwrap_or_default();
    for job in &owned {
        let listed = active.iter().any(|a| a.uid == job.metadata.uid);
        match plan::finished(job) {
            Some(succeeded) => {
                if listed {
                    active.retain(|a| a.uid != job.metadata.uid);
                    let condition = if succeeded { "Complete" } else { "Failed" };
                    recorder
                        .normal(
                            &regarding,
                            "SawCompletedJob",
                            &format!("Saw completed job: {}, condition: {condition}", job.name_any()),
                        )
                        .await;
                }
                if succeeded {
                    let done = job.status.as_ref().and_then(|s| s.completion_time.clone());
                    if done.as_ref().is_some_and(|d| status.last_successful_time.as_ref().is_none_or(|l| l.0 < d.0)) {
                        status.last_successful_time = done;
                    }
                }
            }
            None if !listed => {
                let manual = job.metadata.annotations.as_ref().and_then(|a| a.get("cronjob.kubernetes.io/instantiate"));
                if manual.is_none() {
                    let message = format!("Saw a job that the controller did not create or forgot: {}", job.name_any());
                    recorder.warning(&regarding, "UnexpectedJob", &message).await;
                }
            }
            None => {}
        }
    }
    let known: Vec<Option<String>> = owned.iter().map(|j| j.metadata.uid.clone()).collect();
    let missing: Vec<ObjectReference> = active.iter().filter(|a| !known.contains(&a.uid)).cloned().collect();
    for gone in &missing {
        // Not in the cache: asked live before it is taken for gone.
        let name = gone.name.clone().unwrap_or_default();
        let live = jobs_api.get_opt(&name).await?;
        if live.is_none_or(|j| j.metadata.uid != gone.uid) {
            active.retain(|a| a.uid != gone.uid);
            recorder.normal(&regarding, "MissingJob", &format!("Active job went missing: {name}")).await;
        }
    }

    // History.
    let refs: Vec<&Job> = owned.iter().filter(|j| j.metadata.deletion_timestamp.is_none()).collect();
    for job in plan::beyond_history(&cj, &refs) {
        match jobs_api.delete(&job.name_any(), &DeleteParams::background()).await {
            Ok(_) => recorder.normal(&regarding, "SuccessfulDelete", &format!("Deleted job {}", job.name_any())).await,
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(e.into()),
        }
    }

    let now = jiff::Timestamp::now();
    let requeue_at = |next: Option<jiff::Timestamp>| {
        next.map_or_else(Action::await_change, |n| {
            let wait = Duration::try_from(n.duration_since(now)).unwrap_or(Duration::ZERO);
            Action::requeue(wait + AFTER_NEXT)
        })
    };
    status.active = (!active.is_empty()).then(|| active.clone());
    if spec.suspend.unwrap_or(false) {
        write_status(&cron_jobs, &cj, status).await?;
        return Ok(Action::await_change());
    }
    let due = plan::due(&cj, &schedule, now);
    let Some(scheduled) = due.at else {
        write_status(&cron_jobs, &cj, status).await?;
        return Ok(requeue_at(due.next));
    };
    if due.missed > plan::TOO_MANY_MISSED {
        let message = "too many missed start times. Set or decrease .spec.startingDeadlineSeconds or check clock skew";
        recorder.warning(&regarding, "TooManyMissedTimes", message).await;
    }
    if let Some(deadline) = spec.starting_deadline_seconds
        && scheduled.as_second() + deadline < now.as_second()
    {
        let when = scheduled.to_zoned(zone.clone()).strftime("%a, %d %b %Y %H:%M:%S %z").to_string();
        recorder.warning(&regarding, "MissSchedule", &format!("Missed scheduled time to start a job: {when}")).await;
        write_status(&cron_jobs, &cj, status).await?;
        return Ok(requeue_at(due.next));
    }
    match spec.concurrency_policy.as_deref().unwrap_or("Allow") {
        "Forbid" if !active.is_empty() => {
            let message = "Not starting job because prior execution is running and concurrency policy is Forbid";
            recorder.normal(&regarding, "JobAlreadyActive", message).await;
            write_status(&cron_jobs, &cj, status).await?;
            return Ok(requeue_at(due.next));
        }
        "Replace" => {
            for a in std::mem::take(&mut active) {
                let name = a.name.clone().unwrap_or_default();
                match jobs_api.delete(&name, &DeleteParams::background()).await {
                    Ok(_) => recorder.normal(&regarding, "SuccessfulDelete", &format!("Deleted job {name}")).await,
                    Err(kube::Error::Api(s)) if s.code == 404 => {}
                    Err(e) => return Err(e.into()),
                }
            }
        }
        _ => {}
    }
    let job = job_from_template(&cj, scheduled, &zone);
    let created = match jobs_api.create(&PostParams::default(), &job).await {
        Ok(created) => {
            recorder.normal(&regarding, "SuccessfulCreate", &format!("Created job {}", created.name_any())).await;
            Some(created)
        }
        Err(kube::Error::Api(s)) if s.code == 409 && s.reason == "AlreadyExists" => {
            // A retried sync: the Job of this scheduled time is ours if it names us.
            let existing = jobs_api.get_opt(&job.name_any()).await?;
            existing
                .filter(|j| claim::controller_of(j.metadata.owner_references.as_ref()).is_some_and(|o| o.uid == uid))
        }
        Err(kube::Error::Api(s)) => {
            recorder.warning(&regarding, "FailedCreate", &format!("Error creating job: {}", s.message)).await;
            write_status(&cron_jobs, &cj, status).await?;
            return Err(kube::Error::Api(s).into());
        }
        Err(e) => return Err(e.into()),
    };
    if let Some(job) = created
        && !active.iter().any(|a| a.uid == job.metadata.uid)
        && plan::finished(&job).is_none()
    {
        active.push(reference(&job));
    }
    status.active = (!active.is_empty()).then_some(active);
    status.last_schedule_time = Some(Time(scheduled));
    write_status(&cron_jobs, &cj, status).await?;
    Ok(requeue_at(due.next))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_is_named_and_annotated_for_its_scheduled_time_in_the_cronjobs_zone() {
        let cj: CronJob = serde_json::from_value(serde_json::json!({"metadata": {"name": "tick", "namespace": "ns", "uid": "u"},
            "spec": {"schedule": "0 9 * * *", "timeZone": "Asia/Tokyo",
                     "jobTemplate": {"metadata": {"labels": {"a": "b"}}, "spec": {"template": {"spec": {"containers": []}}}}}}))
        .unwrap_or_default();
        let at: jiff::Timestamp = "2026-07-02T00:00:00Z".parse().unwrap_or_default();
        let zone = jiff::tz::TimeZone::get("Asia/Tokyo").unwrap_or(jiff::tz::TimeZone::UTC);
        let job = job_from_template(&cj, at, &zone);
        assert_eq!(job.metadata.name, Some(format!("tick-{}", at.as_second() / 60)));
        let annotations = job.metadata.annotations.unwrap_or_default();
        assert_eq!(annotations.get(SCHEDULED_AT).map(String::as_str), Some("2026-07-02T09:00:00+09:00"));
        let owner = job.metadata.owner_references.unwrap_or_default();
        assert_eq!((owner[0].kind.as_str(), owner[0].controller), ("CronJob", Some(true)));
        assert_eq!(job.metadata.labels.unwrap_or_default().get("a").map(String::as_str), Some("b"));
    }
}
