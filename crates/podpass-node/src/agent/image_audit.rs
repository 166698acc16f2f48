//! The node's image decisions as audit events (beyond upstream, whose kubelet records only
//! Events): one JSON line per EnsureImageExists of a pod's container, carrying the keys
//! registry-auth's grants carry — pod UID, service account UID, node, credential id (the
//! `jti` of the token a provider was given), image and the digest it resolved to — so
//! `podpass audit images` can join the two logs.

use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};

use crate::credential::{CredentialSource, Lookup};
use crate::images::EnsureOutcome;

/// What was decided, in the words of the audit (and of `podpass audit images`).
pub(crate) fn decision_of(d: &EnsureOutcome) -> &'static str {
    match (&d.error, d.pulled, d.verified_at.is_some(), d.allowed_by) {
        (Some(_), ..) => "refused",
        (None, true, true, _) => "verified_at_origin",
        (None, true, false, _) => "pulled",
        (None, false, _, Some("record")) => "allowed_by_record",
        (None, false, _, Some("policy")) => "allowed_by_policy",
        (None, false, _, _) => "present_unchecked",
    }
}

/// The event for `decision` on container `container` of `pod` on `node`; `lookup` is the
/// pod's credentials when they were looked up.
pub(crate) fn event(node: &str, pod: &Pod, container: &str, d: &EnsureOutcome, lookup: Option<&Lookup>) -> Value {
    let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
    let service_account = pod.spec.as_ref().and_then(|s| s.service_account_name.as_deref()).unwrap_or("default");
    // The credential that pulled names its service account; without a pull, the first
    // provider credential the lookup found does.
    let used = d.credential_used.clone().unwrap_or(Value::Null);
    let looked_up = lookup.into_iter().flat_map(|l| &l.credentials).find_map(|c| match &c.source {
        CredentialSource::ServiceAccount { uid, credential_id, .. } => Some((uid.clone(), credential_id.clone())),
        _ => None,
    });
    let from_used = (used["type"] == "serviceAccount").then(|| {
        (
            used["uid"].as_str().unwrap_or_default().to_owned(),
            used["credentialId"].as_str().unwrap_or_default().to_owned(),
        )
    });
    let (service_account_uid, credential_id) = from_used.or(looked_up).unwrap_or_default();
    json!({
        "time": jiff::Timestamp::now().to_string(),
        "kind": "ImageDecision",
        "decision": decision_of(d),
        "reason": d.error.map(|e| e.reason()),
        "message": d.message,
        "node": node,
        "pod": format!("{namespace}/{}", pod.metadata.name.as_deref().unwrap_or_default()),
        "pod_uid": pod.metadata.uid.as_deref().unwrap_or_default(),
        "container": container,
        "service_account": format!("{namespace}/{service_account}"),
        "service_account_uid": service_account_uid,
        "credential_id": credential_id,
        "credential": used,
        "image": d.image,
        "digest": d.digest,
        "image_ref": d.image_ref,
        "verified_at": d.verified_at.as_ref().map(|p| p.registry.clone()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_outcome_has_its_word() {
        let mut d = EnsureOutcome { pulled: true, ..Default::default() };
        assert_eq!(decision_of(&d), "pulled");
        d.verified_at = Some(crate::images::OriginProof { registry: "r".into(), digest: "d".into(), auth: "basic" });
        assert_eq!(decision_of(&d), "verified_at_origin");
        d.error = Some(crate::images::EnsureError::ErrImagePull);
        assert_eq!(decision_of(&d), "refused");
        let present = |by| EnsureOutcome { allowed_by: Some(by), ..Default::default() };
        assert_eq!(decision_of(&present("record")), "allowed_by_record");
        assert_eq!(decision_of(&present("policy")), "allowed_by_policy");
        assert_eq!(decision_of(&present("unchecked")), "present_unchecked");
    }

    #[test]
    fn the_event_names_the_token_that_obtained_the_credential() {
        let pod: Pod =
            serde_json::from_value(json!({"metadata": {"name": "app", "namespace": "team-a", "uid": "pod-1"},
            "spec": {"serviceAccountName": "app", "containers": []}}))
            .unwrap_or_default();
        let d = EnsureOutcome {
            image: "r/team-a/app:v1".into(),
            pulled: true,
            digest: Some("sha256:x".into()),
            credential_used: Some(
                json!({"type": "serviceAccount", "namespace": "team-a", "name": "app", "uid": "sa-1", "credentialId": "JTI=j-1"}),
            ),
            ..Default::default()
        };
        let e = event("node-1", &pod, "app", &d, None);
        assert_eq!(
            (&e["decision"], &e["pod_uid"], &e["service_account_uid"], &e["credential_id"], &e["digest"]),
            (&json!("pulled"), &json!("pod-1"), &json!("sa-1"), &json!("JTI=j-1"), &json!("sha256:x"))
        );
        assert_eq!(e["service_account"], "team-a/app");
    }
}
