//! `--audit-log-path`: one `audit.k8s.io/v1` Event per request at Metadata level, as JSON
//! lines — with the user's `authentication.kubernetes.io/credential-id` extra for
//! service-account tokens and the `authentication.k8s.io/issued-credential-id` annotation
//! on token creation, so "who issued the token that did X" is two greps.
//!
//! Events go through the one audit writer every podpass server shares
//! ([`podpass_serve::AuditWriter`]: a writer thread, JSON lines, size-bounded rotation with
//! kube-apiserver's `--audit-log-maxsize`/`--audit-log-maxbackup`, `-` for standard out).

use serde_json::Value;

/// Sends events to the shared audit writer.
#[derive(Debug, Clone)]
pub struct AuditLog {
    writer: podpass_serve::AuditWriter,
}

impl AuditLog {
    /// Opens the log the flags name (created 0600, appended to) and starts its writer.
    pub fn open(flags: &podpass_serve::AuditFlags) -> std::io::Result<Self> {
        match flags.open()? {
            Some(writer) => Ok(Self { writer }),
            None => Err(std::io::Error::other("no --audit-log-path")),
        }
    }

    /// Queues one event.
    pub fn record(&self, event: &Value) {
        self.writer.record(event);
    }
}

/// Audit annotations a handler attaches to its response (e.g.
/// `authentication.k8s.io/issued-credential-id` = `JTI=<jti>`).
#[derive(Debug, Clone, Default)]
pub struct Annotations(pub std::collections::BTreeMap<String, String>);

/// Audit timestamps: RFC 3339 with microseconds, as upstream writes them.
pub(crate) fn audit_time() -> String {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let secs = i64::try_from(now.as_secs()).unwrap_or(i64::MAX);
    let base = crate::time::format_rfc3339(secs);
    format!("{}.{:06}Z", base.trim_end_matches('Z'), now.subsec_micros())
}

/// What the audit event of one request says about the request.
#[derive(Debug)]
pub struct RequestInfo<'a> {
    /// The request URI as received.
    pub uri: String,
    /// The Kubernetes verb.
    pub verb: &'a str,
    /// Who, once authenticated (absent for requests refused before that).
    pub user: Option<&'a crate::server::User>,
    /// `User-Agent`.
    pub user_agent: &'a str,
    /// The resource path, for `objectRef`.
    pub path: Option<&'a crate::server::rest::resources::ApiPath>,
    /// `requestReceivedTimestamp`.
    pub received: Option<String>,
}

/// The `audit.k8s.io/v1` Event (level Metadata, stage ResponseComplete) for a request and
/// its response, with the annotations handlers attached to the response.
pub fn event(request: &RequestInfo<'_>, response: &axum::response::Response) -> serde_json::Value {
    use serde_json::json;
    let user = request.user.map_or(json!({}), |u| {
        let mut v = json!({"username": u.name, "groups": u.groups});
        if !u.uid.is_empty() {
            v["uid"] = json!(u.uid);
        }
        if !u.extra.is_empty() {
            v["extra"] = json!(u.extra);
        }
        v
    });
    let mut event = json!({
        "kind": "Event",
        "apiVersion": "audit.k8s.io/v1",
        "level": "Metadata",
        "auditID": podpass_token::claims::new_uuid_v4().unwrap_or_default(),
        "stage": "ResponseComplete",
        "requestURI": request.uri,
        "verb": request.verb,
        "user": user,
        "userAgent": request.user_agent,
        "responseStatus": {"metadata": {}, "code": response.status().as_u16()},
        "requestReceivedTimestamp": request.received,
        "stageTimestamp": audit_time(),
    });
    if let Some(p) = request.path {
        let mut object_ref = json!({"resource": p.resource, "apiVersion": p.version});
        if !p.group.is_empty() {
            object_ref["apiGroup"] = json!(p.group);
        }
        for (k, v) in [("namespace", &p.namespace), ("name", &p.name), ("subresource", &p.subresource)] {
            if let Some(v) = v {
                object_ref[k] = json!(v);
            }
        }
        event["objectRef"] = object_ref;
    }
    if let Some(annotations) = response.extensions().get::<Annotations>()
        && !annotations.0.is_empty()
    {
        event["annotations"] = json!(annotations.0);
    }
    event
}

#[cfg(test)]
mod event_tests {
    use super::*;
    use axum::response::IntoResponse;

    #[test]
    fn events_carry_user_object_and_handler_annotations() {
        let user = crate::server::User {
            name: "system:node:n1".into(),
            uid: String::new(),
            groups: vec!["system:nodes".into()],
            extra: Default::default(),
        };
        let path = match crate::server::rest::resources::parse("/api/v1/namespaces/ns/serviceaccounts/sa/token") {
            Some(crate::server::rest::resources::Target::Resource(p)) => p,
            other => panic!("{other:?}"),
        };
        let mut response = (axum::http::StatusCode::CREATED, "x").into_response();
        let mut annotations = Annotations::default();
        annotations.0.insert("authentication.k8s.io/issued-credential-id".into(), "JTI=1".into());
        response.extensions_mut().insert(annotations);
        let request = RequestInfo {
            uri: "/api/v1/namespaces/ns/serviceaccounts/sa/token".into(),
            verb: "create",
            user: Some(&user),
            user_agent: "kubectl",
            path: Some(&path),
            received: Some("t".into()),
        };
        let e = event(&request, &response);
        assert_eq!(e["user"], serde_json::json!({"username": "system:node:n1", "groups": ["system:nodes"]}));
        assert_eq!(
            e["objectRef"],
            serde_json::json!({"resource": "serviceaccounts", "apiVersion": "v1", "namespace": "ns", "name": "sa", "subresource": "token"})
        );
        assert_eq!(e["responseStatus"]["code"], 201);
        assert_eq!(e["annotations"]["authentication.k8s.io/issued-credential-id"], "JTI=1");
        let anonymous = RequestInfo { user: None, path: None, ..request };
        let e = event(&anonymous, &response);
        assert_eq!(e["user"], serde_json::json!({}));
        assert!(e.get("objectRef").is_none());
    }
}
