//! RevokedToken (`revocation.podpass.dev/v1`, beyond upstream, which has no revocation):
//! a leaked service-account token revoked by its `jti` — the credential id the audit log
//! names (`authentication.kubernetes.io/credential-id: JTI=…`) — never by a hash of its
//! bytes (an ECDSA signature is malleable, so one token has many encodings). The object's
//! name is the `jti`; it is kept until `spec.expirationTimestamp` (the token's `exp`), after
//! which the token is dead anyway and the elected replica collects it
//! (`server::revoked_tokens`). Cluster-scoped, so only who RBAC lets `create revokedtokens`
//! (cluster-admin by default) may revoke; every request is in the audit log.

use std::borrow::Cow;

use podpass_api::validation::FieldError;
use serde_json::{Value, json};

use super::super::table::{age_column, column, name_column, name_middle_age, or_none, text};
use super::{Printer, Strategy, invalid};
use crate::server::status::StatusError;

/// The API group.
pub(crate) const GROUP: &str = "revocation.podpass.dev";
/// Longest `spec.reason`.
const MAX_REASON: usize = 1024;

/// The RevokedToken strategy.
pub(crate) struct RevokedTokens;

/// Registered in the resource table.
pub(crate) static REVOKED_TOKEN: RevokedTokens = RevokedTokens;

/// The resource.
pub(crate) const RESOURCE: super::Resource = super::Resource::stored(
    super::Names { group: GROUP, kind: "RevokedToken", plural: "revokedtokens", singular: "revokedtoken" },
    &REVOKED_TOKEN,
    &super::types::TypeOf::<RevokedToken>::NEW,
)
.cluster_scoped();

/// The type of a RevokedToken, for field validation and the OpenAPI documents: decoded to
/// check a body's shape, never read (the strategy reads the JSON, as every kind's does).
#[allow(dead_code)]
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RevokedToken {
    /// `revocation.podpass.dev/v1`.
    pub api_version: Option<String>,
    /// `RevokedToken`.
    pub kind: Option<String>,
    /// Its name is the token's `jti`.
    pub metadata: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta>,
    /// What is revoked until when.
    pub spec: Option<RevokedTokenSpec>,
}

/// `spec` of a RevokedToken.
#[allow(dead_code)]
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RevokedTokenSpec {
    /// Until when the revocation is kept: the token's `exp` (RFC 3339).
    pub expiration_timestamp: Option<String>,
    /// Why, in words (at most 1024 characters).
    pub reason: Option<String>,
}

impl schemars::JsonSchema for RevokedToken {
    fn schema_name() -> Cow<'static, str> {
        "dev.podpass.revocation.v1.RevokedToken".into()
    }

    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        let metadata = generator.subschema_for::<k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta>();
        schemars::json_schema!({
            "description": "A service-account token revoked by its jti (the object's name) until its expiry.",
            "type": "object",
            "properties": {
                "apiVersion": {"type": "string"},
                "kind": {"type": "string"},
                "metadata": metadata,
                "spec": {
                    "type": "object",
                    "properties": {
                        "expirationTimestamp": {
                            "description": "Until when the revocation is kept: the token's exp.",
                            "type": "string",
                            "format": "date-time"
                        },
                        "reason": {"description": "Why, in words.", "type": "string"}
                    },
                    "required": ["expirationTimestamp"]
                }
            },
            "required": ["spec"]
        })
    }
}

/// When a stored RevokedToken's revocation ends (`None`: unreadable — kept, never dropped
/// on a guess).
pub(crate) fn expires_at(object: &Value) -> Option<i64> {
    object.pointer("/spec/expirationTimestamp").and_then(Value::as_str).and_then(crate::time::parse_rfc3339)
}

fn spec_errors(object: &Value) -> Vec<String> {
    let mut errors = Vec::new();
    match object.pointer("/spec/expirationTimestamp").and_then(Value::as_str) {
        None | Some("") => errors.push(FieldError::required("spec.expirationTimestamp", "").to_string()),
        Some(t) if crate::time::parse_rfc3339(t).is_none() => errors.push(
            FieldError::invalid("spec.expirationTimestamp", t, "must be an RFC 3339 time (the token's exp)")
                .to_string(),
        ),
        Some(_) => {}
    }
    if let Some(reason) = object.pointer("/spec/reason").and_then(Value::as_str)
        // Bytes, as the message says (apimachinery's TooLong counts bytes).
        && reason.len() > MAX_REASON
    {
        errors.push(format!("spec.reason: Too long: may not be more than {MAX_REASON} bytes"));
    }
    errors
}

impl Strategy for RevokedTokens {
    fn validate(&self, name: &str, object: &Value) -> Result<(), StatusError> {
        invalid("RevokedToken", name, spec_errors(object))
    }

    fn printer(&self) -> Option<Printer> {
        Some((
            vec![
                name_column(),
                column("Expires", "string", "", "Until when the revocation is kept (the token's exp)", 0),
                column("Reason", "string", "", "Why the token was revoked", 0),
                age_column(),
            ],
            |o, now| {
                let middle =
                    vec![json!(or_none(text(o, "/spec/expirationTimestamp"))), json!(or_none(text(o, "/spec/reason")))];
                name_middle_age(o, middle, now)
            },
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_revocation_says_until_when_it_holds() {
        let ok = json!({"spec": {"expirationTimestamp": "2026-11-27T16:00:00Z", "reason": "leaked in a CI log"}});
        assert!(spec_errors(&ok).is_empty());
        assert_eq!(expires_at(&ok), Some(1_795_795_200));
        assert_eq!(spec_errors(&json!({"spec": {}})), ["spec.expirationTimestamp: Required value"]);
        assert_eq!(
            spec_errors(&json!({"spec": {"expirationTimestamp": "tomorrow", "reason": "x".repeat(1025)}})),
            [
                r#"spec.expirationTimestamp: Invalid value: "tomorrow": must be an RFC 3339 time (the token's exp)"#,
                "spec.reason: Too long: may not be more than 1024 bytes",
            ]
        );
        // 600 characters of two bytes each: too long in bytes.
        let wide = json!({"spec": {"expirationTimestamp": "2026-11-27T16:00:00Z", "reason": "é".repeat(600)}});
        assert_eq!(spec_errors(&wide), ["spec.reason: Too long: may not be more than 1024 bytes"]);
    }
}
