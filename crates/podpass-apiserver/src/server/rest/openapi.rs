//! The OpenAPI documents of the served kinds, built once from k8s-openapi's schemas
//! (schemars) as kube-apiserver publishes them: `/openapi/v3` (the index),
//! `/openapi/v3/<api/v1 | apis/g/v>` (per group-version: `components.schemas` with each
//! kind's `x-kubernetes-group-version-kind`, and the paths served with their verbs and
//! parameters — PATCH carries `fieldValidation`, which is how kubectl learns it may leave
//! validation to the server) and `/openapi/v2` (Swagger 2.0 definitions, JSON or the
//! gnostic protobuf kubectl asks for: its client-side validation of kinds without PATCH,
//! such as TokenReview, reads it). `kubectl explain` walks the v3 documents.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use schemars::generate::SchemaSettings;
use serde_json::{Map, Value, json};

use super::kinds::type_of;
use super::resources::{RESOURCES, Resource};
use crate::server::KUBE_MINOR;

/// A stable hash of the served schema, so clients may cache documents.
const SCHEMA_HASH: &str = concat!("podpass-", env!("CARGO_PKG_VERSION"));

/// The served documents, encoded.
struct Documents {
    v3: BTreeMap<String, Vec<u8>>,
    v2_json: Vec<u8>,
    v2_protobuf: Vec<u8>,
}

fn gv_path(group: &str, version: &str) -> String {
    if group.is_empty() { format!("api/{version}") } else { format!("apis/{group}/{version}") }
}

/// The kinds a group-version document describes: its resources, and TokenRequest in the
/// core group (upstream lists it there, beside `serviceaccounts/token`).
fn kinds_of(group: &str, version: &str) -> Vec<(&'static str, &'static str)> {
    let mut kinds: Vec<(&'static str, &'static str)> =
        RESOURCES.iter().filter(|r| r.group == group && r.version == version).map(|r| (r.group, r.kind)).collect();
    if group.is_empty() {
        kinds.push(("authentication.k8s.io", "TokenRequest"));
    }
    kinds
}

/// Marks each kind's top-level schema with its group-version-kind; `metadata` is not
/// required (k8s-openapi's types always have one, upstream's schemas never require it:
/// a TokenReview manifest has none).
fn mark_kinds(definitions: &mut Map<String, Value>, kinds: &[(String, &str, &str)]) {
    for (name, group, kind) in kinds {
        if let Some(Value::Object(schema)) = definitions.get_mut(name) {
            if let Some(Value::Array(required)) = schema.get_mut("required") {
                required.retain(|r| r != "metadata");
                if required.is_empty() {
                    schema.remove("required");
                }
            }
            schema.insert(
                "x-kubernetes-group-version-kind".into(),
                json!([{"group": group, "version": "v1", "kind": kind}]),
            );
        }
    }
}

fn gvk(r: &Resource) -> Value {
    json!({"group": r.group, "version": r.version, "kind": r.kind})
}

fn query_param(name: &str, description: &str) -> Value {
    json!({"name": name, "in": "query", "description": description, "schema": {"type": "string", "uniqueItems": true}})
}

fn path_param(name: &str) -> Value {
    json!({"name": name, "in": "path", "required": true, "schema": {"type": "string", "uniqueItems": true}})
}

fn body_content(schema_ref: &str) -> Value {
    json!({"application/json": {"schema": {"$ref": schema_ref}}})
}

/// One operation of `r` with its kind's schema as body and answer.
fn operation(r: &Resource, schema_ref: &str, action: &str, has_body: bool, success: &str) -> Value {
    let mut op = json!({
        "operationId": format!("{action}{}", r.kind),
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": gvk(r),
        "responses": {success: {"description": "OK", "content": body_content(schema_ref)}},
    });
    if has_body {
        op["requestBody"] = json!({"content": body_content(schema_ref), "required": true});
        op["parameters"] = json!([
            query_param("dryRun", "When present, indicates that modifications should not be persisted."),
            query_param("fieldManager", "A name associated with the actor or entity that is making these changes."),
            query_param(
                "fieldValidation",
                "How the server treats unknown and duplicate fields: Ignore, Warn (default) or Strict."
            ),
        ]);
    }
    op
}

/// The paths of `r` in its group-version document.
fn paths_of(r: &Resource, schema_ref: &str, paths: &mut Map<String, Value>) {
    let base = format!("/{}", gv_path(r.group, r.version));
    let collection = if r.namespaced {
        format!("{base}/namespaces/{{namespace}}/{}", r.plural)
    } else {
        format!("{base}/{}", r.plural)
    };
    let scope: Vec<Value> = if r.namespaced { vec![path_param("namespace")] } else { vec![] };
    if !r.stored {
        paths.insert(collection, json!({"post": operation(r, schema_ref, "post", true, "201")}));
        return;
    }
    paths.insert(
        collection.clone(),
        json!({"parameters": scope, "get": operation(r, schema_ref, "list", false, "200"),
               "post": operation(r, schema_ref, "post", true, "201")}),
    );
    let mut item_scope = scope.clone();
    item_scope.push(path_param("name"));
    paths.insert(
        format!("{collection}/{{name}}"),
        json!({"parameters": item_scope,
               "get": operation(r, schema_ref, "get", false, "200"),
               "put": operation(r, schema_ref, "put", true, "200"),
               "patch": operation(r, schema_ref, "patch", true, "200"),
               "delete": operation(r, schema_ref, "delete", false, "200")}),
    );
}

/// The OpenAPI v3 document of one group-version.
pub(crate) fn v3_document(group: &str, version: &str) -> Value {
    let mut generator = SchemaSettings::openapi3().into_generator();
    let mut names = Vec::new();
    for (g, kind) in kinds_of(group, version) {
        if let Some(name) = type_of(g, kind).map(|typed| typed.add_schema(&mut generator)) {
            names.push((name, g, kind));
        }
    }
    let mut definitions = generator.take_definitions(true);
    mark_kinds(&mut definitions, &names);
    let mut paths = Map::new();
    for r in RESOURCES.iter().filter(|r| r.group == group && r.version == version) {
        if let Some((name, ..)) = names.iter().find(|(_, g, k)| *g == r.group && *k == r.kind) {
            paths_of(r, &format!("#/components/schemas/{name}"), &mut paths);
        }
    }
    json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": format!("v1.{KUBE_MINOR}.0")},
        "paths": paths,
        "components": {"schemas": definitions},
    })
}

/// Swagger 2.0: every kind's definitions in one document. `$ref` keeps its siblings (as
/// upstream's v2 does; kubectl's v2 reader follows a `$ref` only at the top of a schema)
/// and int-or-string is `type: string, format: int-or-string` as upstream writes it.
fn v2_document() -> Value {
    let mut generator = SchemaSettings::draft07()
        .with(|s| {
            s.definitions_path = "/definitions".into();
            s.meta_schema = None;
            s.transforms = Vec::new();
        })
        .into_generator();
    let mut names = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for r in RESOURCES {
        for (g, kind) in kinds_of(r.group, r.version) {
            if seen.insert((g, kind))
                && let Some(name) = type_of(g, kind).map(|typed| typed.add_schema(&mut generator))
            {
                names.push((name, g, kind));
            }
        }
    }
    let mut definitions = generator.take_definitions(false);
    mark_kinds(&mut definitions, &names);
    for schema in definitions.values_mut() {
        int_or_string_as_v2(schema);
    }
    json!({
        "swagger": "2.0",
        "info": {"title": "Kubernetes", "version": format!("v1.{KUBE_MINOR}.0")},
        "paths": {},
        "definitions": definitions,
    })
}

fn int_or_string_as_v2(schema: &mut Value) {
    match schema {
        Value::Object(map) => {
            if map.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true)) && !map.contains_key("type") {
                map.insert("type".into(), json!("string"));
                map.insert("format".into(), json!("int-or-string"));
            }
            map.values_mut().for_each(int_or_string_as_v2);
        }
        Value::Array(items) => items.iter_mut().for_each(int_or_string_as_v2),
        _ => {}
    }
}

fn documents() -> &'static Documents {
    static DOCUMENTS: OnceLock<Documents> = OnceLock::new();
    DOCUMENTS.get_or_init(|| {
        let mut v3 = BTreeMap::new();
        for r in RESOURCES {
            let path = gv_path(r.group, r.version);
            v3.entry(path).or_insert_with(|| serde_json::to_vec(&v3_document(r.group, r.version)).unwrap_or_default());
        }
        let v2 = v2_document();
        Documents {
            v3,
            v2_json: serde_json::to_vec(&v2).unwrap_or_default(),
            v2_protobuf: super::openapi_v2_proto::encode_document(&v2),
        }
    })
}

/// `GET /openapi/v3`.
pub fn root() -> Value {
    let mut paths = Map::new();
    for path in documents().v3.keys() {
        paths.insert(path.clone(), json!({"serverRelativeURL": format!("/openapi/v3/{path}?hash={SCHEMA_HASH}")}));
    }
    json!({"paths": paths})
}

/// `GET /openapi/v3/<api/v1 | apis/g/v>` (JSON); `None` for an unknown group-version.
pub fn group_version(path: &str) -> Option<Vec<u8>> {
    documents().v3.get(path).cloned()
}

/// The protobuf media type of `/openapi/v2` answers (kube-openapi's; the `@` form clients
/// send is not a valid media type to Go's parser, so it is never answered).
pub const V2_PROTOBUF: &str = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf";
/// The older form of the same, which kubectl sends in `Accept`.
const V2_PROTOBUF_DEPRECATED: &str = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf";

/// `GET /openapi/v2`: `(content type, body)`, the gnostic protobuf when `accept` names it.
pub fn v2(accept: Option<&str>) -> (&'static str, Vec<u8>) {
    let docs = documents();
    let wants = |m: &str| {
        let m = m.split(';').next().unwrap_or("").trim();
        m == V2_PROTOBUF || m == V2_PROTOBUF_DEPRECATED
    };
    if accept.is_some_and(|a| a.split(',').any(wants)) {
        (V2_PROTOBUF, docs.v2_protobuf.clone())
    } else {
        ("application/json", docs.v2_json.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v3(path: &str) -> Value {
        serde_json::from_slice(&group_version(path).unwrap()).unwrap()
    }

    #[test]
    fn every_listed_group_version_has_its_kinds_schemas_and_paths() {
        let root = root();
        for (path, _) in root["paths"].as_object().unwrap() {
            let doc = v3(path);
            assert!(!doc["components"]["schemas"].as_object().unwrap().is_empty(), "{path}");
        }
        let core = v3("api/v1");
        let pod = &core["components"]["schemas"]["io.k8s.api.core.v1.Pod"];
        assert_eq!(pod["x-kubernetes-group-version-kind"], json!([{"group": "", "version": "v1", "kind": "Pod"}]));
        let spec = &core["components"]["schemas"]["io.k8s.api.core.v1.PodSpec"];
        assert!(spec["properties"]["serviceAccountName"]["description"].as_str().unwrap().contains("ServiceAccount"));
        let patch = &core["paths"]["/api/v1/namespaces/{namespace}/pods/{name}"]["patch"];
        assert!(patch["parameters"].as_array().unwrap().iter().any(|p| p["name"] == "fieldValidation"));
        let auth = v3("apis/authentication.k8s.io/v1");
        assert!(auth["paths"]["/apis/authentication.k8s.io/v1/tokenreviews"]["post"].is_object());
        assert!(auth["components"]["schemas"]["io.k8s.api.authentication.v1.TokenReview"].is_object());
        assert!(group_version("apis/nothing.example/v1").is_none());
    }

    #[test]
    fn v2_is_swagger_with_refs_to_definitions() {
        let (media, body) = v2(None);
        assert_eq!(media, "application/json");
        let doc: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(doc["swagger"], "2.0");
        let pod = &doc["definitions"]["io.k8s.api.core.v1.Pod"];
        assert_eq!(pod["properties"]["spec"]["$ref"], "#/definitions/io.k8s.api.core.v1.PodSpec");
        let port = &doc["definitions"]["io.k8s.apimachinery.pkg.util.intstr.IntOrString"];
        assert_eq!((port["type"].as_str(), port["format"].as_str()), (Some("string"), Some("int-or-string")));
        let (media, body) = v2(Some("application/json, application/com.github.proto-openapi.spec.v2@v1.0+protobuf"));
        assert_eq!(media, V2_PROTOBUF);
        assert!(body.len() > 1000);
    }
}
