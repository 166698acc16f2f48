//! `dryRun` on writes (apimachinery `ValidateDryRun`, the registry's `DryRunnableStorage`):
//! with `dryRun=All` a create, update, patch or delete runs through defaulting, validation,
//! admission and its preconditions, and answers what would result — and nothing is written,
//! no controller starts, no RBAC index changes. Any other value is refused before anything
//! runs.

use std::collections::HashMap;

use serde_json::Value;

use crate::server::status::StatusError;

/// The only value upstream accepts (`metav1.DryRunAll`).
const ALL: &str = "All";

/// Audit annotation on a dry-run write's event.
pub(crate) const AUDIT_ANNOTATION: &str = "podpass.dev/dry-run";

/// Whether a write persists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Write {
    /// Stored, with its effects (controllers, RBAC index).
    Persist,
    /// `dryRun=All`: checked and answered, nothing stored.
    DryRun,
}

impl Write {
    /// Whether this is a dry run.
    pub(crate) fn is_dry_run(self) -> bool {
        self == Self::DryRun
    }
}

/// The `dryRun` of a write: from the query (`?dryRun=All`) or, for DELETE, the
/// DeleteOptions body (`"dryRun": ["All"]`, as kubectl sends it). `options_kind` names the
/// options in upstream's refusal (`CreateOptions`, `UpdateOptions`, `PatchOptions`,
/// `DeleteOptions`): 422 Invalid, `dryRun: Unsupported value`.
pub(crate) fn from_request(
    options_kind: &str,
    query: &HashMap<String, String>,
    delete_options: Option<&Value>,
) -> Result<Write, StatusError> {
    let mut values: Vec<String> = query.get("dryRun").into_iter().cloned().collect();
    if let Some(options) = delete_options {
        match options.get("dryRun") {
            None | Some(Value::Null) => {}
            Some(Value::Array(items)) => {
                for item in items {
                    values.push(item.as_str().map_or_else(|| item.to_string(), str::to_owned));
                }
            }
            Some(other) => values.push(other.to_string()),
        }
    }
    values.retain(|v| !v.is_empty());
    if values.is_empty() {
        return Ok(Write::Persist);
    }
    if values.iter().all(|v| v == ALL) {
        return Ok(Write::DryRun);
    }
    let shown = values.iter().map(|v| format!("{v:?}")).collect::<Vec<_>>().join(", ");
    Err(StatusError::invalid(format!(
        "{options_kind}.meta.k8s.io \"\" is invalid: dryRun: Unsupported value: []string{{{shown}}}: supported values: \"{ALL}\""
    )))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn query(v: &str) -> HashMap<String, String> {
        HashMap::from([("dryRun".to_owned(), v.to_owned())])
    }

    #[test]
    fn all_is_a_dry_run_and_anything_else_is_refused_as_upstream() {
        assert_eq!(from_request("CreateOptions", &HashMap::new(), None).unwrap(), Write::Persist);
        assert_eq!(from_request("CreateOptions", &query("All"), None).unwrap(), Write::DryRun);
        let e = from_request("UpdateOptions", &query("all"), None).unwrap_err();
        assert_eq!(e.code, axum::http::StatusCode::UNPROCESSABLE_ENTITY);
        assert_eq!(
            e.message,
            "UpdateOptions.meta.k8s.io \"\" is invalid: dryRun: Unsupported value: []string{\"all\"}: supported values: \"All\""
        );
        assert_eq!(from_request("PatchOptions", &query(""), None).unwrap(), Write::Persist);
    }

    #[test]
    fn a_delete_body_may_ask_for_it_as_kubectl_does() {
        let none = HashMap::new();
        let options = |s: &str| serde_json::from_str::<Value>(s).unwrap();
        let body = options(r#"{"kind":"DeleteOptions","apiVersion":"v1","dryRun":["All"]}"#);
        assert_eq!(from_request("DeleteOptions", &none, Some(&body)).unwrap(), Write::DryRun);
        assert_eq!(from_request("DeleteOptions", &none, Some(&options("{}"))).unwrap(), Write::Persist);
        assert_eq!(from_request("DeleteOptions", &none, Some(&Value::Null)).unwrap(), Write::Persist);
        assert!(from_request("DeleteOptions", &none, Some(&options(r#"{"dryRun":["Server"]}"#))).is_err());
        let not_a_list = options(r#"{"dryRun":"All"}"#);
        assert!(from_request("DeleteOptions", &none, Some(&not_a_list)).is_err(), "a list, as upstream");
    }
}
