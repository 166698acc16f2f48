//! batch/v1 Job (pkg/registry/batch/job): defaulted as `SetDefaults_Job` (one completion at
//! parallelism one, six retries, NonIndexed, not suspended), its selector generated from its
//! UID (`generateSelector`: the `batch.kubernetes.io/controller-uid` and `job-name` labels, and
//! their legacy unprefixed twins, on the template) unless `manualSelector`, validated as
//! `ValidateJob` (restartPolicy OnFailure or Never, Indexed needs completions, the template
//! and selector immutable), `status` through `/status` only (the Job controller's), and
//! kubectl's table. The pod failure and success policies and per-index back-off are refused
//! by name: the controller manager's Job controller does not run them, and a Job that
//! silently ignored them would not do what its author asked.

use k8s_openapi::api::batch;
use k8s_openapi::api::batch::v1::Job;
use serde_json::{Value, json};

use super::super::table::{age_column, column, human_duration, name_column, name_middle_age};
use super::types::{TypeOf, read};
use super::{Names, Printer, Resource, Strategy, invalid, pod_template};
use crate::server::status::StatusError;

/// The Job strategy.
pub(crate) struct JobStrategy;

/// The resource (`kubectl get jobs`, and in `kubectl get all`).
pub(crate) const RESOURCE: Resource = Resource::stored(
    Names { group: "batch", kind: "Job", plural: "jobs", singular: "job" },
    &JobStrategy,
    &TypeOf::<batch::v1::Job>::NEW,
)
.in_categories(&["all"]);

/// The labels `generateSelector` puts on a Job's template (upstream `batch.ControllerUidLabel`,
/// `batch.JobNameLabel` and their legacy forms).
const CONTROLLER_UID: &str = "batch.kubernetes.io/controller-uid";
const JOB_NAME: &str = "batch.kubernetes.io/job-name";
const LEGACY_CONTROLLER_UID: &str = "controller-uid";
const LEGACY_JOB_NAME: &str = "job-name";
/// The most completions an Indexed Job may ask (`completionsSoftLimit`).
const MAX_INDEXED_COMPLETIONS: i32 = 100_000;
/// The field manager upstream's Job controller answers for (`managedBy`'s default).
const JOB_CONTROLLER: &str = "kubernetes.io/job-controller";

/// `generateSelector`: the template labelled with the Job's UID and name, the selector the
/// UID label; nothing when `manualSelector` is set.
fn generate_selector(object: &mut Value) {
    if object.pointer("/spec/manualSelector").and_then(Value::as_bool) == Some(true) {
        return;
    }
    let uid = object.pointer("/metadata/uid").cloned().unwrap_or(Value::Null);
    let name = object.pointer("/metadata/name").cloned().unwrap_or(Value::Null);
    let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut) else { return };
    let template = spec.entry("template").or_insert(json!({}));
    if let Some(t) = template.as_object_mut() {
        let meta = t.entry("metadata").or_insert(json!({}));
        if let Some(m) = meta.as_object_mut() {
            let labels = m.entry("labels").or_insert(json!({}));
            if labels.is_null() {
                *labels = json!({});
            }
            if let Some(l) = labels.as_object_mut() {
                for key in [CONTROLLER_UID, LEGACY_CONTROLLER_UID] {
                    l.entry(key).or_insert(uid.clone());
                }
                for key in [JOB_NAME, LEGACY_JOB_NAME] {
                    l.entry(key).or_insert(name.clone());
                }
            }
        }
    }
    spec.insert("selector".into(), json!({"matchLabels": {CONTROLLER_UID: uid}}));
}

/// `ValidateJobSpec` (and what podpass's controller does not run, refused by name).
fn spec_errors(job: &Job, object: &Value) -> Vec<String> {
    let spec = job.spec.clone().unwrap_or_default();
    let mut errors: Vec<String> = [
        pod_template::non_negative("spec.parallelism", spec.parallelism),
        pod_template::non_negative("spec.completions", spec.completions),
        pod_template::non_negative("spec.backoffLimit", spec.backoff_limit),
        pod_template::non_negative("spec.ttlSecondsAfterFinished", spec.ttl_seconds_after_finished),
    ]
    .into_iter()
    .flatten()
    .collect();
    if let Some(d) = spec.active_deadline_seconds.filter(|d| *d <= 0) {
        errors.push(format!("spec.activeDeadlineSeconds: Invalid value: {d}: must be greater than 0"));
    }
    errors.extend(pod_template::errors(object, spec.selector.as_ref(), Some(&spec.template), &["OnFailure", "Never"]));
    match spec.completion_mode.as_deref().unwrap_or("NonIndexed") {
        "NonIndexed" => {}
        "Indexed" => match spec.completions {
            None => errors.push("spec.completions: Required value: when completion mode is Indexed".into()),
            Some(n) if n > MAX_INDEXED_COMPLETIONS => errors.push(format!(
                "spec.completions: Invalid value: {n}: must be less than or equal to {MAX_INDEXED_COMPLETIONS} when completion mode is Indexed"
            )),
            Some(_) => {}
        },
        other => errors.push(format!(
            "spec.completionMode: Unsupported value: {}: supported values: \"NonIndexed\", \"Indexed\"",
            podpass_api::validation::quote(other)
        )),
    }
    for (field, set) in [
        ("podFailurePolicy", spec.pod_failure_policy.is_some()),
        ("successPolicy", spec.success_policy.is_some()),
        ("backoffLimitPerIndex", spec.backoff_limit_per_index.is_some()),
        ("maxFailedIndexes", spec.max_failed_indexes.is_some()),
    ] {
        if set {
            errors.push(format!("spec.{field}: Forbidden: podpass's Job controller does not run {field}"));
        }
    }
    errors
}

/// kubectl's Status, Completions and Duration cells (`printJob`).
fn cells(job: &Job, deleting: bool, now: i64) -> Vec<Value> {
    let spec = job.spec.clone().unwrap_or_default();
    let status = job.status.clone().unwrap_or_default();
    let has = |kind: &str| status.conditions.iter().flatten().any(|c| c.type_ == kind && c.status == "True");
    let state = if has("Complete") {
        "Complete"
    } else if has("Failed") {
        "Failed"
    } else if deleting {
        "Terminating"
    } else if has("Suspended") {
        "Suspended"
    } else if has("FailureTarget") {
        "FailureTarget"
    } else if has("SuccessCriteriaMet") {
        "SuccessCriteriaMet"
    } else {
        "Running"
    };
    let succeeded = status.succeeded.unwrap_or(0);
    let completions = match (spec.completions, spec.parallelism.unwrap_or(1)) {
        (Some(c), _) => format!("{succeeded}/{c}"),
        (None, p) if p > 1 => format!("{succeeded}/1 of {p}"),
        (None, _) => format!("{succeeded}/1"),
    };
    let duration = match (status.start_time, status.completion_time) {
        (Some(start), Some(end)) => human_duration(end.0.as_second() - start.0.as_second()),
        (Some(start), None) => human_duration(now - start.0.as_second()),
        (None, _) => String::new(),
    };
    vec![json!(state), json!(completions), json!(duration)]
}

impl Strategy for JobStrategy {
    fn default(&self, _name: &str, object: &mut Value) -> Result<(), StatusError> {
        if let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut) {
            if spec.get("completions").is_none_or(Value::is_null) && spec.get("parallelism").is_none_or(Value::is_null)
            {
                spec.insert("completions".into(), json!(1));
            }
            spec.entry("parallelism").or_insert(json!(1));
            spec.entry("backoffLimit").or_insert(json!(6));
            spec.entry("completionMode").or_insert(json!("NonIndexed"));
            spec.entry("suspend").or_insert(json!(false));
            spec.entry("manualSelector").or_insert(json!(false));
            spec.entry("podReplacementPolicy").or_insert(json!("TerminatingOrFailed"));
        }
        pod_template::default(object);
        Ok(())
    }

    fn prepare_for_create(&self, object: &mut Value) {
        if let Some(obj) = object.as_object_mut() {
            obj.remove("status");
        }
        generate_selector(object);
    }

    fn prepare_for_update(&self, object: &mut Value, old: &Value) {
        super::namespace::keep_status(object, old);
    }

    fn validate(&self, name: &str, object: &Value) -> Result<(), StatusError> {
        let job: Job = read(object)?;
        let mut errors = spec_errors(&job, object);
        if let Some(by) = job.spec.as_ref().and_then(|s| s.managed_by.as_deref())
            && by != JOB_CONTROLLER
            && !by.contains('/')
        {
            errors.push(format!(
                "spec.managedBy: Invalid value: {}: must be a domain-prefixed path (such as \"acme.io/foo\")",
                podpass_api::validation::quote(by)
            ));
        }
        invalid("Job", name, errors)
    }

    fn validate_update(&self, name: &str, object: &Value, old: &Value) -> Result<(), StatusError> {
        let (job, was): (Job, Job) = (read(object)?, read(old)?);
        let mut errors = spec_errors(&job, object);
        let (spec, old_spec) = (job.spec.clone().unwrap_or_default(), was.spec.clone().unwrap_or_default());
        let immutable = |field: &str, changed: bool, shown: String, errors: &mut Vec<String>| {
            if changed {
                errors.push(format!("spec.{field}: Invalid value: {shown}: field is immutable"));
            }
        };
        let show = |v: &dyn erased::Show| v.show();
        immutable("selector", spec.selector != old_spec.selector, show(&spec.selector), &mut errors);
        immutable(
            "completionMode",
            spec.completion_mode != old_spec.completion_mode,
            show(&spec.completion_mode),
            &mut errors,
        );
        immutable("completions", spec.completions != old_spec.completions, show(&spec.completions), &mut errors);
        immutable("managedBy", spec.managed_by != old_spec.managed_by, show(&spec.managed_by), &mut errors);
        // The template may change only while the Job is suspended (and never its labels'
        // generated selector terms): upstream's mutable scheduling directives.
        let suspended = old_spec.suspend.unwrap_or(false) && spec.suspend.unwrap_or(false);
        if spec.template != old_spec.template && !suspended {
            errors.push(format!("spec.template: Invalid value: {}: field is immutable", show(&spec.template)));
        }
        invalid("Job", name, errors)
    }

    fn orphans_by_default(&self) -> bool {
        true
    }

    fn subresources(&self) -> &'static [super::Subresource] {
        const SUBRESOURCES: [super::Subresource; 1] = [super::status("Job")];
        &SUBRESOURCES
    }

    fn printer(&self) -> Option<Printer> {
        Some((
            vec![
                name_column(),
                column("Status", "string", "", "Status of the job.", 0),
                column("Completions", "string", "", "The completion status of the job.", 0),
                column("Duration", "string", "", "Time required to complete the job.", 0),
                age_column(),
            ],
            |o, now| {
                let deleting = o.pointer("/metadata/deletionTimestamp").is_some_and(|v| !v.is_null());
                let cells = read(o).map(|j| cells(&j, deleting, now)).unwrap_or_else(|_| vec![json!(""); 3]);
                name_middle_age(o, cells, now)
            },
        ))
    }
}

/// A field's value as an error message shows it (its JSON).
mod erased {
    /// Shown as JSON.
    pub(super) trait Show {
        fn show(&self) -> String;
    }
    impl<T: serde::Serialize> Show for T {
        fn show(&self) -> String {
            serde_json::to_string(self).unwrap_or_default()
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn job(spec: Value) -> Value {
        json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "pi", "uid": "u-1"}, "spec": spec})
    }

    fn template(restart: &str) -> Value {
        json!({"spec": {"restartPolicy": restart, "containers": [{"name": "c", "image": "busybox"}]}})
    }

    fn created(spec: Value) -> Value {
        let mut j = job(spec);
        JobStrategy.default("pi", &mut j).unwrap();
        JobStrategy.prepare_for_create(&mut j);
        j
    }

    #[test]
    fn jobs_are_defaulted_and_get_a_selector_of_their_own_uid() {
        let j = created(json!({"template": template("Never")}));
        assert_eq!((j["spec"]["completions"].clone(), j["spec"]["parallelism"].clone()), (json!(1), json!(1)));
        assert_eq!(j["spec"]["backoffLimit"], 6);
        assert_eq!(j["spec"]["completionMode"], "NonIndexed");
        assert_eq!(j["spec"]["selector"], json!({"matchLabels": {CONTROLLER_UID: "u-1"}}));
        let labels = &j["spec"]["template"]["metadata"]["labels"];
        assert_eq!((labels[JOB_NAME].clone(), labels[LEGACY_CONTROLLER_UID].clone()), (json!("pi"), json!("u-1")));
        assert!(JobStrategy.validate("pi", &j).is_ok());
        let parallel = created(json!({"parallelism": 3, "template": template("Never")}));
        assert!(parallel["spec"]["completions"].is_null(), "a work queue: parallelism without completions");
    }

    #[test]
    fn invalid_jobs_are_named_as_upstream() {
        let check = |spec: Value, expected: &str| {
            let e = JobStrategy.validate("pi", &created(spec)).unwrap_err().message;
            assert!(e.contains(expected), "{e}");
        };
        check(
            json!({"template": {"spec": {"containers": [{"name": "c", "image": "busybox"}]}}}),
            r#"spec.template.spec.restartPolicy: Unsupported value: "Always": supported values: "OnFailure", "Never""#,
        );
        check(
            json!({"completionMode": "Indexed", "parallelism": 2, "template": template("Never")}),
            "spec.completions: Required value: when completion mode is Indexed",
        );
        check(json!({"backoffLimit": -1, "template": template("Never")}), "spec.backoffLimit: Invalid value: -1");
        check(json!({"activeDeadlineSeconds": 0, "template": template("Never")}), "must be greater than 0");
        check(
            json!({"podFailurePolicy": {"rules": []}, "template": template("Never")}),
            "spec.podFailurePolicy: Forbidden",
        );
        let manual = created(json!({"manualSelector": true, "template": template("Never")}));
        let e = JobStrategy.validate("pi", &manual).unwrap_err().message;
        assert!(e.contains("spec.selector: Required value"), "{e}");
    }

    #[test]
    fn the_template_changes_only_while_suspended() {
        let j = created(json!({"template": template("Never")}));
        let mut changed = j.clone();
        changed["spec"]["template"]["spec"]["containers"][0]["image"] = json!("busybox:2");
        let e = JobStrategy.validate_update("pi", &changed, &j).unwrap_err().message;
        assert!(e.contains("spec.template: Invalid value") && e.contains("field is immutable"), "{e}");
        let mut suspended = j.clone();
        suspended["spec"]["suspend"] = json!(true);
        let mut edited = suspended.clone();
        edited["spec"]["template"]["spec"]["containers"][0]["image"] = json!("busybox:2");
        assert!(JobStrategy.validate_update("pi", &edited, &suspended).is_ok());
    }

    #[test]
    fn the_table_reads_as_kubectls() {
        let (_, cells) = JobStrategy.printer().unwrap();
        let mut j = created(json!({"completions": 3, "template": template("Never")}));
        j["status"] = json!({"succeeded": 1, "startTime": "2026-01-01T00:00:00Z"});
        let now = crate::time::parse_rfc3339("2026-01-01T00:01:00Z").unwrap();
        assert_eq!(cells(&j, now)[1..4], [json!("Running"), json!("1/3"), json!("60s")]);
        j["status"] = json!({"succeeded": 3, "startTime": "2026-01-01T00:00:00Z", "completionTime": "2026-01-01T00:00:05Z",
            "conditions": [{"type": "Complete", "status": "True"}]});
        assert_eq!(cells(&j, now)[1..4], [json!("Complete"), json!("3/3"), json!("5s")]);
    }
}
