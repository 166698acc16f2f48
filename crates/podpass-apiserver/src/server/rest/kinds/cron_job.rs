//! batch/v1 CronJob (pkg/registry/batch/cronjob): defaulted as `SetDefaults_CronJob`
//! (Allow, not suspended, 3 successful and 1 failed Jobs of history), validated as
//! `ValidateCronJob` — a name of at most 52 characters (its Jobs add 11), a schedule robfig's
//! parser takes ([`podpass_api::cron`]), a known `timeZone` and no `TZ=` in the schedule,
//! the concurrency policy, the Job template's pod with restartPolicy OnFailure or Never —
//! `status` through `/status` only (the CronJob controller's), and kubectl's table.

use k8s_openapi::api::batch;
use k8s_openapi::api::batch::v1::CronJob;
use serde_json::{Value, json};

use super::super::table::{age, age_column, column, name_column, name_middle_age};
use super::types::{TypeOf, read};
use super::{Names, Printer, Resource, Strategy, invalid, pod_template};
use crate::server::status::StatusError;

/// The CronJob strategy.
pub(crate) struct CronJobStrategy;

/// The resource (`kubectl get cronjobs`, `cj`, and in `kubectl get all`).
pub(crate) const RESOURCE: Resource = Resource::stored(
    Names { group: "batch", kind: "CronJob", plural: "cronjobs", singular: "cronjob" },
    &CronJobStrategy,
    &TypeOf::<batch::v1::CronJob>::NEW,
)
.with_short_names(&["cj"])
.in_categories(&["all"]);

/// A CronJob's name leaves room for its Jobs' `-<minutes>` suffix (`validateCronJobName`).
const MAX_NAME: usize = 52;

/// `ValidateCronJobSpec`.
fn spec_errors(cj: &CronJob, object: &Value) -> Vec<String> {
    let spec = cj.spec.clone().unwrap_or_default();
    let quote = podpass_api::validation::quote;
    let mut errors: Vec<String> = [
        pod_template::non_negative("spec.successfulJobsHistoryLimit", spec.successful_jobs_history_limit),
        pod_template::non_negative("spec.failedJobsHistoryLimit", spec.failed_jobs_history_limit),
    ]
    .into_iter()
    .flatten()
    .collect();
    if let Some(d) = spec.starting_deadline_seconds.filter(|d| *d < 0) {
        errors.push(format!("spec.startingDeadlineSeconds: Invalid value: {d}: must be greater than or equal to 0"));
    }
    let zone = match spec.time_zone.as_deref() {
        None => Some(jiff::tz::TimeZone::UTC),
        Some(name) => match jiff::tz::TimeZone::get(name) {
            Ok(z) => Some(z),
            Err(_) => {
                errors.push(format!("spec.timeZone: Invalid value: {}: unknown time zone {name}", quote(name)));
                None
            }
        },
    };
    if spec.schedule.is_empty() {
        errors.push("spec.schedule: Required value".into());
    } else if spec.schedule.contains("TZ") {
        let why = if spec.time_zone.is_some() {
            "cannot use both timeZone field and TZ or CRON_TZ in schedule"
        } else {
            "cannot use TZ or CRON_TZ in schedule, use timeZone field instead"
        };
        errors.push(format!("spec.schedule: Invalid value: {}: {why}", quote(&spec.schedule)));
    } else if let Some(zone) = zone
        && let Err(e) = podpass_api::cron::Schedule::parse(&spec.schedule, zone)
    {
        errors.push(format!("spec.schedule: Invalid value: {}: {e}", quote(&spec.schedule)));
    }
    match spec.concurrency_policy.as_deref().unwrap_or("Allow") {
        "Allow" | "Forbid" | "Replace" => {}
        other => errors.push(format!(
            "spec.concurrencyPolicy: Unsupported value: {}: supported values: \"Allow\", \"Forbid\", \"Replace\"",
            quote(other)
        )),
    }
    let job = spec.job_template.spec.clone().unwrap_or_default();
    errors.extend(pod_template::template_errors(
        object.pointer("/spec/jobTemplate/spec/template"),
        Some(&job.template),
        "spec.jobTemplate.spec.template",
        &["OnFailure", "Never"],
    ));
    errors
}

/// kubectl's Schedule, Timezone, Suspend, Active and Last Schedule cells (`printCronJob`).
fn cells(cj: &CronJob, object: &Value, now: i64) -> Vec<Value> {
    let spec = cj.spec.clone().unwrap_or_default();
    let status = cj.status.clone().unwrap_or_default();
    let last = if status.last_schedule_time.is_some() {
        age(object, "/status/lastScheduleTime", now)
    } else {
        "<none>".into()
    };
    vec![
        json!(spec.schedule),
        json!(spec.time_zone.unwrap_or_else(|| "<none>".into())),
        json!(if spec.suspend.unwrap_or(false) { "True" } else { "False" }),
        json!(status.active.map_or(0, |a| a.len())),
        json!(last),
    ]
}

impl Strategy for CronJobStrategy {
    fn name_problem(&self, name: &str) -> Option<String> {
        let mut problems = podpass_api::validation::is_dns1123_subdomain(name);
        if name.len() > MAX_NAME {
            problems.push(format!("must be no more than {MAX_NAME} characters"));
        }
        (!problems.is_empty()).then(|| problems.join(", "))
    }

    fn default(&self, _name: &str, object: &mut Value) -> Result<(), StatusError> {
        if let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut) {
            spec.entry("concurrencyPolicy").or_insert(json!("Allow"));
            spec.entry("suspend").or_insert(json!(false));
            spec.entry("successfulJobsHistoryLimit").or_insert(json!(3));
            spec.entry("failedJobsHistoryLimit").or_insert(json!(1));
        }
        if let Some(template) = object.pointer_mut("/spec/jobTemplate/spec/template") {
            super::pod::default_pod(template);
        }
        Ok(())
    }

    fn prepare_for_create(&self, object: &mut Value) {
        if let Some(obj) = object.as_object_mut() {
            obj.remove("status");
        }
    }

    fn prepare_for_update(&self, object: &mut Value, old: &Value) {
        super::namespace::keep_status(object, old);
    }

    fn validate(&self, name: &str, object: &Value) -> Result<(), StatusError> {
        let cj: CronJob = read(object)?;
        invalid("CronJob", name, spec_errors(&cj, object))
    }

    fn subresources(&self) -> &'static [super::Subresource] {
        const SUBRESOURCES: [super::Subresource; 1] = [super::status("CronJob")];
        &SUBRESOURCES
    }

    fn printer(&self) -> Option<Printer> {
        Some((
            vec![
                name_column(),
                column(
                    "Schedule",
                    "string",
                    "",
                    "The schedule in Cron format, see https://en.wikipedia.org/wiki/Cron.",
                    0,
                ),
                column(
                    "Timezone",
                    "string",
                    "",
                    "The time zone name for the given schedule, see https://en.wikipedia.org/wiki/List_of_tz_database_time_zones. If not specified, this will default to the time zone of the kube-controller-manager process.",
                    0,
                ),
                column(
                    "Suspend",
                    "boolean",
                    "",
                    "This flag tells the controller to suspend subsequent executions, it does not apply to already started executions.  Defaults to false.",
                    0,
                ),
                column("Active", "integer", "", "A list of pointers to currently running jobs.", 0),
                column(
                    "Last Schedule",
                    "string",
                    "",
                    "Information when was the last time the job was successfully scheduled.",
                    0,
                ),
                age_column(),
            ],
            |o, now| {
                let cells = read(o).map(|cj| cells(&cj, o, now)).unwrap_or_else(|_| vec![json!(""); 5]);
                name_middle_age(o, cells, now)
            },
        ))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn cron_job(spec: Value) -> Value {
        let mut cj = json!({"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "nightly"},
            "spec": {"schedule": "0 3 * * *", "jobTemplate": {"spec": {"template": {"spec": {
                "restartPolicy": "OnFailure", "containers": [{"name": "c", "image": "busybox"}]}}}}}});
        for (k, v) in spec.as_object().unwrap() {
            cj["spec"][k] = v.clone();
        }
        CronJobStrategy.default("nightly", &mut cj).unwrap();
        cj
    }

    #[test]
    fn cron_jobs_are_defaulted_and_validated_as_upstream() {
        let cj = cron_job(json!({}));
        assert_eq!(cj["spec"]["concurrencyPolicy"], "Allow");
        assert_eq!(
            (cj["spec"]["successfulJobsHistoryLimit"].clone(), cj["spec"]["failedJobsHistoryLimit"].clone()),
            (json!(3), json!(1))
        );
        assert!(CronJobStrategy.validate("nightly", &cj).is_ok());
        assert!(CronJobStrategy.validate("nightly", &cron_job(json!({"timeZone": "Europe/Paris"}))).is_ok());
        let check = |spec: Value, expected: &str| {
            let e = CronJobStrategy.validate("nightly", &cron_job(spec)).unwrap_err().message;
            assert!(e.contains(expected), "{e}");
        };
        check(
            json!({"schedule": "61 * * * *"}),
            r#"spec.schedule: Invalid value: "61 * * * *": end of range (61) above maximum (59): 61"#,
        );
        check(json!({"schedule": ""}), "spec.schedule: Required value");
        check(
            json!({"timeZone": "Mars/Olympus"}),
            r#"spec.timeZone: Invalid value: "Mars/Olympus": unknown time zone Mars/Olympus"#,
        );
        check(
            json!({"schedule": "TZ=UTC 0 3 * * *"}),
            "cannot use TZ or CRON_TZ in schedule, use timeZone field instead",
        );
        check(json!({"concurrencyPolicy": "Sometimes"}), r#"spec.concurrencyPolicy: Unsupported value: "Sometimes""#);
        check(
            json!({"jobTemplate": {"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "busybox"}]}}}}}),
            r#"spec.jobTemplate.spec.template.spec.restartPolicy: Unsupported value: "Always": supported values: "OnFailure", "Never""#,
        );
        assert!(CronJobStrategy.name_problem(&"a".repeat(53)).unwrap().contains("must be no more than 52 characters"));
        assert!(CronJobStrategy.name_problem(&"a".repeat(52)).is_none());
    }

    #[test]
    fn the_table_reads_as_kubectls() {
        let (_, cells) = CronJobStrategy.printer().unwrap();
        let mut cj = cron_job(json!({}));
        cj["metadata"]["creationTimestamp"] = json!("2026-01-01T00:00:00Z");
        assert_eq!(
            cells(&cj, 0)[1..6],
            [json!("0 3 * * *"), json!("<none>"), json!("False"), json!(0), json!("<none>")]
        );
    }
}
