//! The minimal OpenAPI v3 documents that let `kubectl apply` (default `--validate=strict`)
//! hand field validation to the server: per group-version, a PATCH operation for each kind
//! that carries the `fieldValidation` parameter (see interop.md §4).

use serde_json::{Map, Value, json};

use super::resources::{RESOURCES, Resource};
use crate::server::KUBE_MINOR;

fn gv_path(group: &str, version: &str) -> String {
    if group.is_empty() { format!("api/{version}") } else { format!("apis/{group}/{version}") }
}

/// A stable hash of the served schema, so clients may cache documents.
const SCHEMA_HASH: &str = concat!("podpass-", env!("CARGO_PKG_VERSION"));

/// `GET /openapi/v3`.
pub fn root() -> Value {
    let mut paths = Map::new();
    for r in RESOURCES {
        let p = gv_path(r.group, r.version);
        paths.insert(p.clone(), json!({"serverRelativeURL": format!("/openapi/v3/{p}?hash={SCHEMA_HASH}")}));
    }
    json!({"paths": paths})
}

fn patch_operation(r: &Resource) -> Value {
    json!({"patch": {
        "parameters": [{"name": "fieldValidation", "in": "query", "schema": {"type": "string", "uniqueItems": true}}],
        "x-kubernetes-action": "patch",
        "x-kubernetes-group-version-kind": {"group": r.group, "version": r.version, "kind": r.kind},
        "responses": {"200": {"description": "OK"}}
    }})
}

/// `GET /openapi/v3/<api/v1 | apis/g/v>`; `None` for an unknown group-version.
pub fn group_version(path: &str) -> Option<Value> {
    let mut paths = Map::new();
    for r in RESOURCES.iter().filter(|r| r.stored && gv_path(r.group, r.version) == path) {
        let url = if r.namespaced {
            format!("/{path}/namespaces/{{namespace}}/{}/{{name}}", r.plural)
        } else {
            format!("/{path}/{}/{{name}}", r.plural)
        };
        paths.insert(url, patch_operation(r));
    }
    if paths.is_empty() {
        return None;
    }
    Some(json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": format!("v1.{KUBE_MINOR}.0")},
        "paths": paths,
        "components": {"schemas": {}}
    }))
}
