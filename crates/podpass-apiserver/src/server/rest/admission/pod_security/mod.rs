//! Pod Security admission, built into kube-apiserver since 1.25 (upstream:
//! `pod-security-admission/admission/admission.go`): each namespace's
//! `pod-security.kubernetes.io/{enforce,audit,warn}[-version]` labels over the configured
//! defaults decide which Pod Security Standard a pod is held to. Enforce refuses (403,
//! `violates PodSecurity "baseline:latest": …`), audit annotates the audit event, warn
//! answers a `Warning:` header; a namespace whose enforce label changes is answered with
//! warnings naming its existing pods that would violate it. Exemptions by user, namespace
//! and runtime class come from the `PodSecurityConfiguration` in the API server's
//! admission configuration file.

mod checks;
mod config;
mod policy;

#[cfg(test)]
mod fixtures;

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Pod, PodSpec};
use serde_json::Value;

pub(crate) use config::{PodSecurityConfig, read_admission_config};
use policy::{LevelVersion, Policy, policy_to_evaluate};

use super::{Attributes, Notes, Operation};
use crate::server::AppState;
use crate::server::status::StatusError;
use crate::store::{ListOptions, ObjectKey, StoreError};

/// Audit annotation: which enforce policy a request was held to.
const ENFORCE_POLICY_ANNOTATION: &str = "pod-security.kubernetes.io/enforce-policy";
/// Audit annotation: what the audit policy found.
const AUDIT_VIOLATIONS_ANNOTATION: &str = "pod-security.kubernetes.io/audit-violations";
/// Audit annotation: why a request was exempt (`user`, `namespace`, `runtimeClass`).
const EXEMPT_ANNOTATION: &str = "pod-security.kubernetes.io/exempt";
/// The most existing pods a namespace's label change evaluates (upstream's
/// `namespaceMaxPodsToCheck`).
const MAX_PODS_TO_CHECK: usize = 3000;

/// The pod's metadata annotations and spec as the checks read them; `None` if the object
/// is not a pod the checks can read (API validation has refused such a one already).
fn typed(object: &Value) -> Option<(BTreeMap<String, String>, PodSpec)> {
    let pod: Pod = serde_json::from_value(object.clone()).ok()?;
    Some((pod.metadata.annotations.unwrap_or_default(), pod.spec.unwrap_or_default()))
}

/// `isSignificantPodUpdate`: only these can change on a pod after its creation in a way the
/// checks see (the rest of the spec is immutable): images, ephemeral containers, seccomp
/// annotations.
fn significant_update(new: &Value, old: &Value) -> bool {
    let (Some((new_ann, new)), Some((old_ann, old))) = (typed(new), typed(old)) else { return true };
    let pod_key = "seccomp.security.alpha.kubernetes.io/pod";
    if new.ephemeral_containers.as_ref().map_or(0, Vec::len) != old.ephemeral_containers.as_ref().map_or(0, Vec::len)
        || new_ann.get(pod_key) != old_ann.get(pod_key)
        || new.containers.len() != old.containers.len()
        || new.init_containers.as_ref().map_or(0, Vec::len) != old.init_containers.as_ref().map_or(0, Vec::len)
    {
        return true;
    }
    let container_changed = |name: &str, image: &Option<String>, old_image: &Option<String>| {
        let key = format!("container.seccomp.security.alpha.kubernetes.io/{name}");
        image != old_image || new_ann.get(&key) != old_ann.get(&key)
    };
    let pairs = new.containers.iter().zip(old.containers.iter());
    let init_pairs = new.init_containers.iter().flatten().zip(old.init_containers.iter().flatten());
    if pairs.chain(init_pairs).any(|(n, o)| container_changed(&n.name, &n.image, &o.image)) {
        return true;
    }
    new.ephemeral_containers
        .iter()
        .flatten()
        .zip(old.ephemeral_containers.iter().flatten())
        .any(|(n, o)| container_changed(&n.name, &n.image, &o.image))
}

/// The namespace's labels (none if it is gone: NamespaceLifecycle answers for that).
async fn namespace_labels(state: &AppState, ns: &str) -> Result<BTreeMap<String, String>, StatusError> {
    match state.store.get_shared(&ObjectKey::cluster("namespaces", ns)).await {
        Ok(n) => Ok(labels_of(&n.object)),
        Err(StoreError::NotFound { .. }) => Ok(BTreeMap::new()),
        Err(e) => Err(e.into()),
    }
}

fn labels_of(object: &Value) -> BTreeMap<String, String> {
    object
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
        .collect()
}

/// `would violate PodSecurity "restricted:latest": …` / `violates …`.
fn message(prefix: &str, lv: LevelVersion, violations: &[checks::Violation]) -> String {
    format!("{prefix} PodSecurity \"{lv}\": {}", checks::forbidden_detail(violations))
}

/// Admission of a pod create or update (`pods`; its `status` and other subresources are
/// not checked, as upstream).
pub(crate) async fn admit_pod(
    state: &AppState,
    config: &PodSecurityConfig,
    attrs: &Attributes<'_>,
    object: &Value,
    old: Option<&Value>,
) -> Result<(), StatusError> {
    let ns = attrs.namespace.unwrap_or_default();
    if attrs.operation == Operation::Update && old.is_some_and(|old| !significant_update(object, old)) {
        return Ok(());
    }
    let runtime_class = object.pointer("/spec/runtimeClassName").and_then(Value::as_str).unwrap_or_default();
    if let Some(why) = config.exemption(&attrs.user.name, ns, runtime_class) {
        attrs.notes.annotate(EXEMPT_ANNOTATION, why);
        return Ok(());
    }
    let (policy, _label_errors) = policy_to_evaluate(&namespace_labels(state, ns).await?, &config.defaults);
    let Some((annotations, spec)) = typed(object) else { return Ok(()) };
    let view = checks::PodView::new(&annotations, &spec);
    decide(attrs.notes, &policy, &view).map_err(|violation| {
        let mut e = StatusError::forbidden_raw(format!("pods {:?} is forbidden: {violation}", attrs.name));
        e.details = Some(Box::new(serde_json::json!({"name": attrs.name, "kind": "pods"})));
        e
    })
}

/// The pod template of a workload (upstream `DefaultPodSpecExtractor`): `spec.template` of
/// the kinds that run pods from one, `spec.jobTemplate.spec.template` of a CronJob; `None`
/// for any other resource.
pub(crate) fn pod_template<'a>(group: &str, plural: &str, object: &'a Value) -> Option<&'a Value> {
    match (group, plural) {
        ("", "replicationcontrollers")
        | ("apps", "replicasets" | "deployments" | "statefulsets" | "daemonsets")
        | ("batch", "jobs") => object.pointer("/spec/template"),
        ("", "podtemplates") => object.get("template"),
        ("batch", "cronjobs") => object.pointer("/spec/jobTemplate/spec/template"),
        _ => None,
    }
}

/// Admission of a workload's create or update (`ValidatePodController`): its pod template
/// is evaluated against every mode but never refused — what enforce would refuse is a
/// warning and an audit annotation, as upstream, and the pods the controller creates are
/// then refused one by one. An update that leaves the template as it was is not evaluated.
pub(crate) async fn admit_pod_controller(
    state: &AppState,
    config: &PodSecurityConfig,
    attrs: &Attributes<'_>,
    (template, old_template): (&Value, Option<&Value>),
) -> Result<(), StatusError> {
    if attrs.operation == Operation::Update && old_template == Some(template) {
        return Ok(());
    }
    let ns = attrs.namespace.unwrap_or_default();
    let runtime_class = template.pointer("/spec/runtimeClassName").and_then(Value::as_str).unwrap_or_default();
    if let Some(why) = config.exemption(&attrs.user.name, ns, runtime_class) {
        attrs.notes.annotate(EXEMPT_ANNOTATION, why);
        return Ok(());
    }
    let (policy, _label_errors) = policy_to_evaluate(&namespace_labels(state, ns).await?, &config.defaults);
    let pod = serde_json::json!({"metadata": template.get("metadata").cloned().unwrap_or(Value::Null),
                                 "spec": template.get("spec").cloned().unwrap_or(Value::Null)});
    let Some((annotations, spec)) = typed(&pod) else { return Ok(()) };
    let view = checks::PodView::new(&annotations, &spec);
    if let Err(Violation(refusal)) = decide(attrs.notes, &policy, &view) {
        // Not refused: said, as enforce would say it of the pods.
        let would = refusal.replacen("violates", "would violate", 1);
        attrs.notes.warn(would.clone());
        attrs.notes.annotate(AUDIT_VIOLATIONS_ANNOTATION, &would);
        // The audit and warn modes, which `decide` stops short of once enforce refuses.
        let evaluate = |lv: LevelVersion| if lv == policy.enforce { Vec::new() } else { checks::evaluate(lv, &view) };
        let warned = evaluate(policy.warn);
        if !warned.is_empty() {
            attrs.notes.warn(message("would violate", policy.warn, &warned));
        }
    }
    Ok(())
}

/// What the enforce mode refuses a pod for: `violates PodSecurity "<level>:<version>": …`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
struct Violation(String);

/// The three modes on one pod: a [`Violation`] if enforce refuses it; audit annotations and
/// warnings recorded in `notes` otherwise.
fn decide(notes: &Notes, policy: &Policy, view: &checks::PodView<'_>) -> Result<(), Violation> {
    notes.annotate(ENFORCE_POLICY_ANNOTATION, &policy.enforce.to_string());
    let enforced = checks::evaluate(policy.enforce, view);
    if !enforced.is_empty() {
        return Err(Violation(message("violates", policy.enforce, &enforced)));
    }
    // The same level and version need not be evaluated twice.
    let evaluate = |lv: LevelVersion| if lv == policy.enforce { Vec::new() } else { checks::evaluate(lv, view) };
    let audited = evaluate(policy.audit);
    if !audited.is_empty() {
        notes.annotate(AUDIT_VIOLATIONS_ANNOTATION, &message("would violate", policy.audit, &audited));
    }
    let warned = evaluate(policy.warn);
    if !warned.is_empty() {
        notes.warn(message("would violate", policy.warn, &warned));
    }
    Ok(())
}

/// Admission of a namespace create or update: its Pod Security labels must parse (422
/// naming each); when an update changes its enforce level or version, the answer warns of
/// its existing pods that would violate the new one.
pub(crate) async fn admit_namespace(
    state: &AppState,
    config: &PodSecurityConfig,
    attrs: &Attributes<'_>,
    object: &Value,
    old: Option<&Value>,
) -> Result<(), StatusError> {
    let labels = labels_of(object);
    let (policy, errors) = policy_to_evaluate(&labels, &config.defaults);
    if !errors.is_empty() {
        let list = errors.iter().map(ToString::to_string).collect::<Vec<_>>();
        let joined = if list.len() == 1 { list[0].clone() } else { format!("[{}]", list.join(", ")) };
        return Err(StatusError::invalid(format!("namespaces {:?} is invalid: {joined}", attrs.name)));
    }
    let Some(old) = old else { return Ok(()) };
    let (old_policy, _) = policy_to_evaluate(&labels_of(old), &config.defaults);
    if policy.enforce == old_policy.enforce || policy.enforce.level == policy::Level::Privileged {
        return Ok(());
    }
    if config.namespace_exempt(attrs.name) {
        attrs.notes.warn(format!(
            "namespace {:?} is exempt from Pod Security, and the policy ({}) will be ignored",
            attrs.name, policy.enforce
        ));
        return Ok(());
    }
    let pods = state.store.list("pods", Some(attrs.name), &ListOptions::default()).await?.items;
    for w in existing_pod_warnings(config, attrs.name, policy.enforce, pods.iter()) {
        attrs.notes.warn(w);
    }
    Ok(())
}

/// The warnings of a namespace whose enforce policy became `enforce`: a header line, then
/// one per distinct set of reasons, naming the first pod and how many others share it.
fn existing_pod_warnings<'v>(
    config: &PodSecurityConfig,
    namespace: &str,
    enforce: LevelVersion,
    pods: impl Iterator<Item = &'v Value>,
) -> Vec<String> {
    // Reasons → (first pod, how many more), in the order first seen.
    let mut found: Vec<(String, String, usize)> = Vec::new();
    let mut checked = 0;
    for pod in pods {
        if checked == MAX_PODS_TO_CHECK {
            break;
        }
        let runtime_class = pod.pointer("/spec/runtimeClassName").and_then(Value::as_str).unwrap_or_default();
        if config.runtime_class_exempt(runtime_class) {
            continue;
        }
        checked += 1;
        let Some((annotations, spec)) = typed(pod) else { continue };
        let violations = checks::evaluate(enforce, &checks::PodView::new(&annotations, &spec));
        if violations.is_empty() {
            continue;
        }
        let reasons = checks::forbidden_reason(&violations);
        let name = pod.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default();
        match found.iter_mut().find(|(r, _, _)| *r == reasons) {
            Some((_, _, more)) => *more += 1,
            None => found.push((reasons, name.to_owned(), 0)),
        }
    }
    if found.is_empty() {
        return Vec::new();
    }
    let mut out = vec![format!(
        "existing pods in namespace {namespace:?} violate the new PodSecurity enforce level {:?}",
        enforce.to_string()
    )];
    for (reasons, pod, more) in found {
        out.push(match more {
            0 => format!("{pod}: {reasons}"),
            n => format!("{pod} (and {n} other {}): {reasons}", if n == 1 { "pod" } else { "pods" }),
        });
    }
    out
}

#[cfg(test)]
mod tests {

    #[test]
    fn the_pod_templates_of_workloads_are_found_where_upstream_looks() {
        let rs = json!({"spec": {"template": {"spec": {"hostNetwork": true}}}});
        assert!(pod_template("apps", "replicasets", &rs).is_some());
        assert!(pod_template("apps", "deployments", &rs).is_some());
        assert!(pod_template("", "pods", &rs).is_none());
        let cron = json!({"spec": {"jobTemplate": {"spec": {"template": {"spec": {}}}}}});
        assert!(pod_template("batch", "cronjobs", &cron).is_some());
        assert!(pod_template("batch", "jobs", &cron).is_none());
    }

    use super::*;
    use serde_json::json;

    fn view_of(pod: &Value) -> (BTreeMap<String, String>, PodSpec) {
        typed(pod).unwrap_or_default()
    }

    #[test]
    fn enforce_refuses_with_upstreams_message_and_warn_answers_the_stricter_level() {
        let pod = json!({"metadata": {"name": "p"}, "spec": {"hostNetwork": true,
            "containers": [{"name": "app", "image": "busybox"}]}});
        let (a, s) = view_of(&pod);
        let view = checks::PodView::new(&a, &s);
        let cluster = PodSecurityConfig::multi_tenant();
        let notes = Notes::default();
        let e = decide(&notes, &cluster.defaults, &view).unwrap_err().to_string();
        assert_eq!(e, "violates PodSecurity \"baseline:latest\": host namespaces (hostNetwork=true)");

        let fine = json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "app", "image": "busybox"}]}});
        let (a, s) = view_of(&fine);
        let notes = Notes::default();
        assert!(decide(&notes, &cluster.defaults, &checks::PodView::new(&a, &s)).is_ok());
        let warnings = notes.take().0;
        assert_eq!(
            warnings,
            [
                "would violate PodSecurity \"restricted:latest\": allowPrivilegeEscalation != false (container \"app\" must set securityContext.allowPrivilegeEscalation=false), unrestricted capabilities (container \"app\" must set securityContext.capabilities.drop=[\"ALL\"]), runAsNonRoot != true (pod or container \"app\" must set securityContext.runAsNonRoot=true), seccompProfile (pod or container \"app\" must set securityContext.seccompProfile.type to \"RuntimeDefault\" or \"Localhost\")"
            ]
        );
    }

    #[test]
    fn only_image_and_ephemeral_container_changes_are_significant_updates() {
        let pod = json!({"metadata": {"name": "p", "labels": {"a": "1"}}, "spec": {"hostNetwork": true,
            "containers": [{"name": "app", "image": "busybox:1"}]}});
        let mut relabelled = pod.clone();
        relabelled["metadata"]["labels"]["a"] = json!("2");
        assert!(!significant_update(&relabelled, &pod));
        let mut new_image = pod.clone();
        new_image["spec"]["containers"][0]["image"] = json!("busybox:2");
        assert!(significant_update(&new_image, &pod));
        let mut debug = pod.clone();
        debug["spec"]["ephemeralContainers"] = json!([{"name": "dbg", "image": "busybox"}]);
        assert!(significant_update(&debug, &pod));
    }

    #[test]
    fn a_new_enforce_level_names_the_existing_pods_that_violate_it() {
        let pod = |name: &str, host: bool| {
            json!({"metadata": {"name": name}, "spec": {"hostNetwork": host,
                "containers": [{"name": "app", "image": "busybox"}]}})
        };
        let pods = [pod("a", true), pod("b", false), pod("c", true), pod("d", true)];
        let baseline = LevelVersion { level: policy::Level::Baseline, version: policy::Version::Latest };
        let w = existing_pod_warnings(&PodSecurityConfig::default(), "team", baseline, pods.iter());
        assert_eq!(
            w,
            [
                "existing pods in namespace \"team\" violate the new PodSecurity enforce level \"baseline:latest\"",
                "a (and 2 other pods): host namespaces"
            ]
        );
    }

    /// Upstream's check_seLinuxOptions lists `user may not be set` and `role may not be set`
    /// only beside a forbidden type: a user or role alone leaves the detail empty after the
    /// colon (pod-security-admission policy/check_seLinuxOptions.go, to this day). Pinned so
    /// the messages stay upstream's byte for byte, quirk included.
    #[test]
    fn selinux_user_or_role_alone_gives_upstreams_empty_detail() {
        let cluster = PodSecurityConfig::multi_tenant();
        let refusal = |options: Value| {
            let pod = json!({"metadata": {"name": "p"}, "spec": {
                "containers": [{"name": "app", "image": "busybox", "securityContext": {"seLinuxOptions": options}}]}});
            let (a, s) = view_of(&pod);
            decide(&Notes::default(), &cluster.defaults, &checks::PodView::new(&a, &s)).unwrap_err().to_string()
        };
        assert_eq!(
            refusal(json!({"user": "system_u"})),
            "violates PodSecurity \"baseline:latest\": seLinuxOptions (container \"app\" set forbidden securityContext.seLinuxOptions: )"
        );
        assert_eq!(
            refusal(json!({"type": "spc_t", "user": "system_u", "role": "r"})),
            "violates PodSecurity \"baseline:latest\": seLinuxOptions (container \"app\" set forbidden securityContext.seLinuxOptions: type \"spc_t\"; user may not be set; role may not be set)"
        );
    }
}
