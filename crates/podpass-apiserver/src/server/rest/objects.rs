//! What the API server does to objects on their way in: server-set metadata, name rules,
//! and the admission steps users rely on (namespace must exist, ServiceAccount admission
//! for pods, per-namespace defaults).

use crate::field::Field;
use aws_lc_rs::rand::{SecureRandom, SystemRandom};
use podpass_token::user::{is_dns1123_label, is_dns1123_subdomain};
use serde_json::{Value, json};

use super::resources::Resource;
use crate::server::status::StatusError;
use crate::time::format_rfc3339;

/// Characters upstream uses for generated name suffixes (no vowels, no look-alikes).
const SUFFIX_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

/// A random suffix of `n` characters.
pub fn random_suffix(n: usize) -> Result<String, StatusError> {
    let mut bytes = vec![0u8; n];
    SystemRandom::new().fill(&mut bytes).map_err(|_| StatusError::internal("random source failed"))?;
    Ok(bytes.iter().map(|b| char::from(SUFFIX_ALPHABET[usize::from(*b) % SUFFIX_ALPHABET.len()])).collect())
}

/// The `metadata` object of a request body, or 400.
fn metadata_mut(object: &mut Value) -> Result<&mut serde_json::Map<String, Value>, StatusError> {
    if !object.is_object() {
        return Err(StatusError::bad_request("the body of the request must be a JSON object"));
    }
    let meta = object.as_object_mut().map(|o| o.entry("metadata").or_insert_with(|| json!({})));
    meta.and_then(Value::as_object_mut).ok_or_else(|| StatusError::bad_request("metadata must be an object"))
}

/// Checks `kind`/`apiVersion` of a body against the resource, filling them when absent.
pub fn check_type(res: &Resource, object: &mut Value) -> Result<(), StatusError> {
    let api_version = res.api_version();
    let obj = object
        .as_object_mut()
        .ok_or_else(|| StatusError::bad_request("the body of the request must be a JSON object"))?;
    match obj.get("kind").and_then(Value::as_str) {
        None => {
            obj.insert("kind".into(), json!(res.kind));
        }
        Some(k) if k == res.kind => {}
        Some(k) => {
            return Err(StatusError::bad_request(format!(
                "the API version in the data ({api_version}) does not match the expected API version ({api_version}) for kind {k:?}, expected {:?}",
                res.kind
            )));
        }
    }
    match obj.get("apiVersion").and_then(Value::as_str) {
        None => {
            obj.insert("apiVersion".into(), json!(api_version));
        }
        Some(v) if v == api_version => {}
        Some(v) => {
            return Err(StatusError::bad_request(format!(
                "the API version in the data ({v}) does not match the expected API version ({api_version})"
            )));
        }
    }
    Ok(())
}

/// Validates a name as upstream does for the resource (namespaces: DNS label; others:
/// DNS subdomain), with upstream-shaped messages.
pub fn validate_name(res: &Resource, name: &str) -> Result<(), StatusError> {
    if res.group == "rbac.authorization.k8s.io" {
        return match super::rbac::rbac_name_problem(name) {
            None => Ok(()),
            Some(p) => Err(StatusError::invalid(format!(
                "{}.{} {name:?} is invalid: metadata.name: Invalid value: {}: {p}",
                res.kind,
                res.group,
                podpass_api::validation::quote(name)
            ))),
        };
    }
    let (ok, rule) = if res.plural == "namespaces" {
        (
            is_dns1123_label(name),
            "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character",
        )
    } else {
        (
            is_dns1123_subdomain(name),
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character",
        )
    };
    if ok {
        Ok(())
    } else {
        Err(StatusError::invalid(format!(
            "{} {name:?} is invalid: metadata.name: Invalid value: {name:?}: {rule}",
            res.kind
        )))
    }
}

/// Server-set metadata for a new object in `namespace` at `now`: name (or generateName),
/// namespace, uid, creationTimestamp, generation; resourceVersion and deletion fields
/// cleared. Returns the name.
pub fn prepare_new(
    res: &Resource,
    namespace: Option<&str>,
    object: &mut Value,
    now: i64,
) -> Result<String, StatusError> {
    check_type(res, object)?;
    let meta = metadata_mut(object)?;
    let name = match meta.get("name").and_then(Value::as_str).filter(|n| !n.is_empty()) {
        Some(n) => n.to_owned(),
        None => match meta.get("generateName").and_then(Value::as_str).filter(|n| !n.is_empty()) {
            Some(prefix) => format!("{prefix}{}", random_suffix(5)?),
            None => {
                return Err(StatusError::invalid(format!(
                    "{} \"\" is invalid: metadata.name: Required value: name or generateName is required",
                    res.kind
                )));
            }
        },
    };
    validate_name(res, &name)?;
    match (namespace, meta.get("namespace").and_then(Value::as_str)) {
        (Some(url), Some(body)) if !body.is_empty() && body != url => {
            return Err(StatusError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
        _ => {}
    }
    meta.insert("name".into(), json!(name));
    match namespace {
        Some(ns) => meta.insert("namespace".into(), json!(ns)),
        None => meta.remove("namespace"),
    };
    meta.insert("uid".into(), json!(podpass_token::claims::new_uuid_v4().map_err(StatusError::internal)?));
    meta.insert("creationTimestamp".into(), json!(format_rfc3339(now)));
    meta.insert("generation".into(), json!(1));
    for server_owned in ["resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds", "selfLink"] {
        meta.remove(server_owned);
    }
    Ok(name)
}

/// Carries server-owned metadata of `old` into a replacement `new` (uid, creation time,
/// generation bumped when the spec changed); refuses a rename.
pub fn prepare_update(res: &Resource, old: &Value, new: &mut Value, name: &str) -> Result<(), StatusError> {
    check_type(res, new)?;
    let old_meta = old.get("metadata").cloned().unwrap_or_else(|| json!({}));
    let spec_changed = old.get("spec") != new.get("spec");
    let meta = metadata_mut(new)?;
    match meta.get("name").and_then(Value::as_str) {
        Some(n) if n != name => {
            return Err(StatusError::bad_request(format!(
                "the name of the object ({n}) does not match the name on the URL ({name})"
            )));
        }
        _ => {}
    }
    meta.insert("name".into(), json!(name));
    // rest.BeforeUpdate: a namespaced object's namespace in the body must be the request's
    // (an empty one is filled in); it is never silently ignored. Cluster-scoped objects
    // have none (it is cleared below).
    if let Some(old_ns) = old_meta.get("namespace").and_then(Value::as_str)
        && let Some(ns) = meta.get("namespace").and_then(Value::as_str).filter(|ns| !ns.is_empty())
        && ns != old_ns
    {
        return Err(StatusError::bad_request(
            "the namespace of the provided object does not match the namespace sent on the request",
        ));
    }
    for kept in ["namespace", "uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds"] {
        match old_meta.get(kept) {
            Some(v) => meta.insert(kept.into(), v.clone()),
            None => meta.remove(kept),
        };
    }
    let generation = old_meta.get("generation").and_then(Value::as_i64).unwrap_or(1);
    meta.insert("generation".into(), json!(if spec_changed { generation + 1 } else { generation }));
    Ok(())
}

/// The automounted token volume upstream's ServiceAccount admission adds to pods
/// (`kube-api-access-<suffix>`): a bound token for the API audience (3607 s), the cluster
/// CA and the namespace.
pub fn api_access_volume(name: &str) -> Value {
    json!({
        "name": name,
        "projected": {
            "defaultMode": 420,
            "sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}
            ]
        }
    })
}

/// `ValidatePodSpec`'s name rules for what becomes a directory or file name on a node:
/// volume and container names are unique DNS-1123 labels.
pub fn validate_pod_names(name: &str, pod: &Value) -> Result<(), StatusError> {
    const LABEL: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";
    let mut errors = Vec::new();
    for (list, what) in [("volumes", "volumes"), ("initContainers", "initContainers"), ("containers", "containers")] {
        let mut seen = std::collections::HashSet::new();
        for (i, item) in pod.field(&format!("/spec/{list}")).and_then(Value::as_array).into_iter().flatten().enumerate()
        {
            let n = item.get("name").and_then(Value::as_str).unwrap_or_default();
            let path = format!("spec.{what}[{i}].name");
            if n.is_empty() {
                errors.push(format!("{path}: Required value"));
            } else if !is_dns1123_label(n) {
                errors.push(format!("{path}: Invalid value: {}: {LABEL}", podpass_api::validation::quote(n)));
            } else if !seen.insert(n.to_owned()) {
                errors.push(format!("{path}: Duplicate value: {}", podpass_api::validation::quote(n)));
            }
        }
    }
    match errors.as_slice() {
        [] => Ok(()),
        [one] => Err(StatusError::invalid(format!("Pod {name:?} is invalid: {one}"))),
        many => Err(StatusError::invalid(format!("Pod {name:?} is invalid: [{}]", many.join(", ")))),
    }
}

/// The tag `parsers.ParseImageName` reports: the explicit tag, `latest` when the image has
/// neither tag nor digest, empty for a digest without a tag.
fn image_tag(image: &str) -> &str {
    let (name, digest) = match image.split_once('@') {
        Some((n, _)) => (n, true),
        None => (image, false),
    };
    let last = name.rsplit('/').next().unwrap_or(name);
    match last.rsplit_once(':') {
        Some((_, tag)) => tag,
        None if digest => "",
        None => "latest",
    }
}

/// core/v1 defaulting of a new pod (`SetDefaults_Pod`, `_PodSpec`, `_Container`, and the
/// volume sources'): file modes 0644 on secret, configMap, downwardAPI and projected
/// volumes, one hour for projected service-account tokens, the pull policy from the tag
/// (`Always` for `latest`), and the spec-level defaults kubectl shows.
pub fn default_pod(pod: &mut Value) {
    let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut) else { return };
    for (key, value) in [
        ("restartPolicy", json!("Always")),
        ("terminationGracePeriodSeconds", json!(30)),
        ("dnsPolicy", json!("ClusterFirst")),
        ("schedulerName", json!("default-scheduler")),
        ("securityContext", json!({})),
        ("enableServiceLinks", json!(true)),
    ] {
        spec.entry(key).or_insert(value);
    }
    for volume in spec.get_mut("volumes").and_then(Value::as_array_mut).into_iter().flatten() {
        for source in ["secret", "configMap", "downwardAPI", "projected"] {
            if let Some(src) = volume.get_mut(source).and_then(Value::as_object_mut) {
                src.entry("defaultMode").or_insert(json!(420));
            }
        }
        let sources = volume.pointer_mut("/projected/sources").and_then(Value::as_array_mut);
        for source in sources.into_iter().flatten() {
            if let Some(token) = source.get_mut("serviceAccountToken").and_then(Value::as_object_mut) {
                token.entry("expirationSeconds").or_insert(json!(3600));
            }
        }
    }
    for list in ["initContainers", "containers"] {
        for c in spec.get_mut(list).and_then(Value::as_array_mut).into_iter().flatten() {
            let Some(c) = c.as_object_mut() else { continue };
            let policy = if image_tag(c.get("image").and_then(Value::as_str).unwrap_or_default()) == "latest" {
                "Always"
            } else {
                "IfNotPresent"
            };
            c.entry("imagePullPolicy").or_insert(json!(policy));
            c.entry("terminationMessagePath").or_insert(json!("/dev/termination-log"));
            c.entry("terminationMessagePolicy").or_insert(json!("File"));
        }
    }
}

/// Pod defaults and ServiceAccount admission, given the pod's service account (if it
/// exists): `serviceAccountName` defaults to `default`, the token volume is added and
/// mounted unless automounting is off on the pod or the service account, status starts
/// `Pending`.
pub fn admit_pod(pod: &mut Value, service_account: &Value) -> Result<(), StatusError> {
    let automount = pod
        .field("/spec/automountServiceAccountToken")
        .and_then(Value::as_bool)
        .or_else(|| service_account.get("automountServiceAccountToken").and_then(Value::as_bool))
        .unwrap_or(true);
    let spec = pod
        .get_mut("spec")
        .and_then(Value::as_object_mut)
        .ok_or_else(|| StatusError::invalid("Pod is invalid: spec: Required value"))?;
    if automount {
        let volume_name = format!("kube-api-access-{}", random_suffix(5)?);
        let volumes = spec.entry("volumes").or_insert_with(|| json!([]));
        if let Some(v) = volumes.as_array_mut() {
            v.push(api_access_volume(&volume_name));
        }
        for containers in ["initContainers", "containers"] {
            if let Some(list) = spec.get_mut(containers).and_then(Value::as_array_mut) {
                for c in list {
                    if let Some(obj) = c.as_object_mut() {
                        let mounts = obj.entry("volumeMounts").or_insert_with(|| json!([]));
                        if let Some(m) = mounts.as_array_mut() {
                            m.push(json!({"name": volume_name, "readOnly": true, "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}));
                        }
                    }
                }
            }
        }
    }
    // podStrategy.PrepareForCreate: a new pod's status is the server's (Pending), never
    // what the creator wrote (a pod that never ran is not Succeeded, nor Ready).
    if let Some(obj) = pod.as_object_mut() {
        obj.insert("status".into(), json!({"phase": "Pending"}));
    }
    Ok(())
}

/// The service account a pod runs as (defaulting `spec.serviceAccountName` to `default`).
pub fn pod_service_account(pod: &mut Value) -> String {
    let name = pod
        .field("/spec/serviceAccountName")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .unwrap_or("default")
        .to_owned();
    if let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut) {
        spec.insert("serviceAccountName".into(), json!(name));
    }
    name
}

/// `ValidatePodUpdate`: after creation only container images, `activeDeadlineSeconds`,
/// added tolerations and a negative `terminationGracePeriodSeconds` set to 1 may change in a
/// pod's spec — in particular `nodeName`, `serviceAccountName` and volumes are fixed, which
/// the Node authorizer and NodeRestriction rely on.
pub fn validate_pod_update(name: &str, old: &Value, new: &Value) -> Result<(), StatusError> {
    let (Some(old_spec), Some(new_spec)) = (old.get("spec"), new.get("spec")) else {
        return if old.get("spec") == new.get("spec") {
            Ok(())
        } else {
            Err(StatusError::invalid(format!("Pod {name:?} is invalid: spec: Required value")))
        };
    };
    // The new spec with the mutable fields taken from the old one must equal the old one.
    let mut candidate = new_spec.clone();
    for list in ["containers", "initContainers"] {
        let old_list = old_spec.get(list).and_then(Value::as_array);
        if let (Some(items), Some(old_items)) = (candidate.get_mut(list).and_then(Value::as_array_mut), old_list)
            && items.len() == old_items.len()
        {
            for (item, old_item) in items.iter_mut().zip(old_items) {
                if let Some(obj) = item.as_object_mut() {
                    match old_item.get("image") {
                        Some(image) => obj.insert("image".into(), image.clone()),
                        None => obj.remove("image"),
                    };
                }
            }
        }
    }
    let Some(obj) = candidate.as_object_mut() else {
        return Err(StatusError::invalid(format!("Pod {name:?} is invalid: spec: Invalid value: must be an object")));
    };
    let mut copy_old = |field: &str| match old_spec.get(field) {
        Some(v) => obj.insert(field.into(), v.clone()),
        None => obj.remove(field),
    };
    copy_old("activeDeadlineSeconds");
    // tolerations: additions only
    let old_tolerations = old_spec.get("tolerations").and_then(Value::as_array).cloned().unwrap_or_default();
    let new_tolerations = new_spec.get("tolerations").and_then(Value::as_array).cloned().unwrap_or_default();
    let only_added = old_tolerations.iter().all(|t| new_tolerations.contains(t));
    if only_added {
        copy_old("tolerations");
    }
    let old_grace = old_spec.get("terminationGracePeriodSeconds").and_then(Value::as_i64);
    let new_grace = new_spec.get("terminationGracePeriodSeconds").and_then(Value::as_i64);
    if old_grace.is_some_and(|g| g < 0) && new_grace == Some(1) {
        copy_old("terminationGracePeriodSeconds");
    }
    if &candidate == old_spec {
        return Ok(());
    }
    Err(StatusError::invalid(format!(
        "Pod {name:?} is invalid: spec: Forbidden: pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)"
    )))
}

#[cfg(test)]
mod pod_update_tests {
    use super::*;

    #[test]
    fn volume_and_container_names_are_dns_labels() {
        let pod = |volume: &str| json!({"spec": {"containers": [{"name": "c"}], "volumes": [{"name": volume}, {"name": "ok"}]}});
        assert_eq!(validate_pod_names("web", &pod("data")), Ok(()));
        let err = validate_pod_names("web", &pod("../../etc")).unwrap_err();
        assert!(
            err.message.starts_with(
                r#"Pod "web" is invalid: spec.volumes[0].name: Invalid value: "../../etc": a lowercase RFC 1123 label"#
            ),
            "{}",
            err.message
        );
        assert!(
            validate_pod_names("web", &pod("ok"))
                .unwrap_err()
                .message
                .contains(r#"spec.volumes[1].name: Duplicate value: "ok""#)
        );
        assert!(
            validate_pod_names("web", &json!({"spec": {"containers": [{"image": "x"}]}}))
                .unwrap_err()
                .message
                .contains("spec.containers[0].name: Required value")
        );
    }

    #[test]
    fn new_pods_get_upstreams_defaults() {
        let mut pod = json!({"spec": {
            "containers": [{"name": "a", "image": "r.io/app"}, {"name": "b", "image": "r.io:5000/app:1"},
                           {"name": "c", "image": format!("app@sha256:{}", "a".repeat(64))},
                           {"name": "d", "image": "app:latest", "imagePullPolicy": "Never"}],
            "volumes": [{"name": "p", "projected": {"sources": [{"serviceAccountToken": {"path": "t"}},
                                                                {"serviceAccountToken": {"path": "u", "expirationSeconds": 600}}]}},
                        {"name": "s", "secret": {"secretName": "x", "defaultMode": 256}}]}});
        default_pod(&mut pod);
        let policies: Vec<&str> =
            (0..4).map(|i| pod["spec"]["containers"][i]["imagePullPolicy"].as_str().unwrap()).collect();
        assert_eq!(policies, ["Always", "IfNotPresent", "IfNotPresent", "Never"]);
        assert_eq!(pod["spec"]["volumes"][0]["projected"]["defaultMode"], 420);
        assert_eq!(
            pod["spec"]["volumes"][0]["projected"]["sources"][0]["serviceAccountToken"]["expirationSeconds"],
            3600
        );
        assert_eq!(
            pod["spec"]["volumes"][0]["projected"]["sources"][1]["serviceAccountToken"]["expirationSeconds"],
            600
        );
        assert_eq!(pod["spec"]["volumes"][1]["secret"]["defaultMode"], 256, "given values stay");
        assert_eq!(pod["spec"]["restartPolicy"], "Always");
        assert_eq!(pod["spec"]["terminationGracePeriodSeconds"], 30);
    }

    #[test]
    fn only_upstreams_mutable_pod_fields_change() {
        let old = json!({"spec": {"nodeName": "n1", "serviceAccountName": "sa",
            "containers": [{"name": "c", "image": "a:1"}], "tolerations": [{"key": "a"}]}});
        let with = |f: &dyn Fn(&mut Value)| {
            let mut v = old.clone();
            f(&mut v);
            validate_pod_update("web", &old, &v)
        };
        assert_eq!(with(&|v| v["spec"]["containers"][0]["image"] = json!("a:2")), Ok(()));
        assert_eq!(with(&|v| v["spec"]["activeDeadlineSeconds"] = json!(5)), Ok(()));
        assert_eq!(with(&|v| v["spec"]["tolerations"] = json!([{"key": "a"}, {"key": "b"}])), Ok(()));
        let moved = with(&|v| v["spec"]["nodeName"] = json!("n2")).unwrap_err();
        assert!(
            moved.message.starts_with(r#"Pod "web" is invalid: spec: Forbidden: pod updates may not change fields"#)
        );
        assert!(with(&|v| v["spec"]["serviceAccountName"] = json!("admin")).is_err());
        assert!(with(&|v| v["spec"]["tolerations"] = json!([])).is_err());
        assert!(with(&|v| v["spec"]["containers"][0]["name"] = json!("d")).is_err());
        assert!(with(&|v| v["spec"]["volumes"] = json!([{"name": "x"}])).is_err());
    }
}
