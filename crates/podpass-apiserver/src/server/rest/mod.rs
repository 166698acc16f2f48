//! The resource API: discovery documents and get/list/create/update/delete of the served
//! objects, with the upstream behaviours users rely on.

pub(crate) mod admission;
pub(crate) mod apply;
pub(crate) mod binding;
mod delete;
mod dry_run;
pub mod field_validation;
mod kinds;
pub(crate) mod lifecycle;
mod list;
pub(crate) mod metrics_api;
pub mod objects;
pub mod openapi;
mod openapi_v2_proto;
pub(crate) mod pagination;
mod patch;
mod pod_log;
pub(crate) mod pod_stream;
mod protobuf;
pub mod resources;
mod reviews;
mod rules_review;
mod scale;
mod shape;
mod table;
mod token;
mod typed_body;
pub(crate) mod watch;
mod write;

use field_validation::FieldValidation;

use std::collections::HashMap;
use std::sync::Arc;

use axum::Json;
use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use self::resources::{ApiPath, RESOURCES, Resource, find, groups};
use self::write::{Body, Target};
use super::AppState;
use super::status::StatusError;
use crate::store::{MAX_OBJECT_DEPTH, ObjectKey, ReadConsistency};

fn json_response(code: StatusCode, body: Value) -> Response {
    (code, Json(body)).into_response()
}

/// `/api/v1` or `/apis/<g>/v1`: the APIResourceList.
pub fn resource_list(group: &str, version: &str) -> Result<Response, StatusError> {
    if (group, version) == (metrics_api::GROUP, metrics_api::VERSION) {
        return Ok(metrics_api::resource_list());
    }
    let gv = if group.is_empty() { version.to_owned() } else { format!("{group}/{version}") };
    let mut resources: Vec<Value> = Vec::new();
    for r in RESOURCES.iter().filter(|r| r.group == group && r.version == version) {
        resources.push(json!({
            "name": r.plural, "singularName": r.singular, "namespaced": r.namespaced, "kind": r.kind,
            "verbs": r.verbs(), "shortNames": r.short_names,
        }));
        if !r.categories.is_empty()
            && let Some(last) = resources.last_mut()
        {
            last["categories"] = json!(r.categories);
        }
        for sub in r.subresources() {
            let verbs = sub.serves.verbs();
            let group_kind = match sub.serves {
                kinds::Serves::Token => json!({"group": "authentication.k8s.io", "version": "v1"}),
                kinds::Serves::Scale => json!({"group": "autoscaling", "version": "v1"}),
                _ => json!(null),
            };
            let mut entry = json!({"name": format!("{}/{}", r.plural, sub.name), "singularName": "", "namespaced": r.namespaced, "kind": sub.kind, "verbs": verbs});
            if !group_kind.is_null() {
                entry["group"] = group_kind["group"].clone();
                entry["version"] = group_kind["version"].clone();
            }
            resources.push(entry);
        }
    }
    if resources.is_empty() {
        return Err(StatusError::not_found_path());
    }
    Ok(json_response(
        StatusCode::OK,
        json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources}),
    ))
}

fn group_json(name: &str) -> Value {
    let gv = json!({"groupVersion": format!("{name}/v1"), "version": "v1"});
    json!({"name": name, "versions": [gv.clone()], "preferredVersion": gv})
}

/// `/apis`: the APIGroupList.
pub fn group_list() -> Response {
    let mut groups: Vec<Value> = groups().into_iter().map(group_json).collect();
    groups.push(metrics_api::group_entry());
    json_response(StatusCode::OK, json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}))
}

/// `/apis/<g>`: one APIGroup.
pub fn group(name: &str) -> Result<Response, StatusError> {
    if name == metrics_api::GROUP {
        let mut g = metrics_api::group_entry();
        g["kind"] = json!("APIGroup");
        g["apiVersion"] = json!("v1");
        return Ok(json_response(StatusCode::OK, g));
    }
    if !groups().contains(&name) {
        return Err(StatusError::not_found_path());
    }
    let mut g = group_json(name);
    g["kind"] = json!("APIGroup");
    g["apiVersion"] = json!("v1");
    Ok(json_response(StatusCode::OK, g))
}

fn key(res: &Resource, namespace: Option<&str>, name: &str) -> ObjectKey {
    match namespace {
        Some(ns) if res.namespaced => ObjectKey::namespaced(res.plural, ns, name),
        _ => ObjectKey::cluster(res.plural, name),
    }
}

/// Decodes a request body (JSON or kubectl's protobuf) into an object no deeper than
/// [`MAX_OBJECT_DEPTH`].
pub fn parse_body(content_type: &str, body: &[u8]) -> Result<Value, StatusError> {
    let media = content_type.split(';').next().unwrap_or("").trim();
    let value = if media == "application/vnd.kubernetes.protobuf" {
        protobuf::decode(body)
            .map_err(|e| StatusError::bad_request(format!("error decoding protobuf request body: {}", e.0)))?
    } else if is_json(content_type) {
        serde_json::from_slice(body)
            .map_err(|e| StatusError::bad_request(format!("error decoding request body: {e}")))?
    } else {
        return Err(StatusError::unsupported_media_type(media));
    };
    check_depth(&value)?;
    Ok(value)
}

/// The DeleteOptions of a DELETE's body (JSON or protobuf); an empty body has none
/// (`null`). A body that does not decode, or decodes as another kind, is a 400: a dryRun
/// or precondition the server could not read must never become a real delete.
pub(crate) fn delete_options(content_type: &str, body: &[u8]) -> Result<Value, StatusError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(Value::Null);
    }
    let options = parse_body(content_type, body)?;
    match options.get("kind").and_then(Value::as_str) {
        None | Some("DeleteOptions") if options.is_object() => Ok(options),
        _ => Err(StatusError::bad_request("decoded object cannot be converted to DeleteOptions")),
    }
}

/// A `continue` token a list request refuses (400): the refusal's message.
#[cfg(feature = "fuzzing")]
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct InvalidContinue(pub String);

/// Decodes a `continue` token as a list request does: the list's revision (`None`: an
/// inconsistent continuation) and the key to start at, or the 400's message.
#[cfg(feature = "fuzzing")]
pub fn decode_continue_token(token: &str) -> Result<(Option<u64>, String), InvalidContinue> {
    pagination::decode(token).map(|c| (c.revision, c.start)).map_err(|e| InvalidContinue(e.message))
}

/// Encodes a `continue` token for the list at `revision` resuming at `start`.
#[cfg(feature = "fuzzing")]
pub fn encode_continue_token(revision: Option<u64>, start: &str) -> String {
    pagination::encode(revision, start)
}

/// Refuses objects nested deeper than [`MAX_OBJECT_DEPTH`].
fn check_depth(value: &Value) -> Result<(), StatusError> {
    let depth = crate::store::depth(value);
    if depth > MAX_OBJECT_DEPTH {
        return Err(StatusError::bad_request(format!(
            "error decoding request body: object nesting depth {depth} exceeds the limit of {MAX_OBJECT_DEPTH}"
        )));
    }
    Ok(())
}

/// A parsed request to a resource path.
pub struct ResourceRequest<'a> {
    /// HTTP method.
    pub method: Method,
    /// The path.
    pub path: ApiPath,
    /// Query parameters.
    pub query: HashMap<String, String>,
    /// `Content-Type`.
    pub content_type: &'a str,
    /// `Accept` (a Table for `kubectl get`).
    pub accept: Option<&'a str>,
    /// Body.
    pub body: &'a [u8],
    /// The (possibly impersonated) user.
    pub user: &'a super::User,
    /// `User-Agent`: the field manager of a write that names none.
    pub user_agent: &'a str,
}

/// Serves one resource request (after authentication and authorization).
pub(crate) async fn handle(state: &Arc<AppState>, req: ResourceRequest<'_>) -> Result<Response, StatusError> {
    let ResourceRequest { method, path, query, content_type, accept, body, user, user_agent } = req;
    let res = find(&path.group, &path.resource)
        .filter(|r| r.version == path.version)
        .ok_or_else(StatusError::not_found_path)?;
    if res.namespaced != path.namespace.is_some() && path.name.is_some() && res.stored {
        return Err(StatusError::not_found_path());
    }
    // Only kinds that have a subresource serve it: `secrets/db/status` is no path at all.
    if let Some(sub) = path.subresource.as_deref()
        && res.subresource(sub).is_none()
    {
        return Err(StatusError::not_found_path());
    }
    // A namespaced kind is created in a namespace: the cluster path lists across
    // namespaces and serves nothing else (upstream: 405).
    if res.namespaced && path.namespace.is_none() && path.name.is_none() && method != Method::GET {
        return Err(StatusError::method_not_supported(&method.as_str().to_lowercase(), res.plural));
    }
    let ns = path.namespace.as_deref();
    let mode = if method == Method::GET {
        FieldValidation::Ignore
    } else {
        FieldValidation::from_query(query.get("fieldValidation").map(String::as_str))?
    };
    // The body decoded and validated as `kind`; the warnings go on the answer. The status
    // of what is only created to be answered (TokenRequest, the reviews) is output only and
    // dropped unread, as upstream's handlers overwrite it (client-go sends an empty one,
    // whose zero expirationTimestamp the typed decoding would refuse).
    let validated = |group: &str, kind: &str, output_only_status: bool| -> Result<(Value, Vec<String>), StatusError> {
        let mut object = parse_body(content_type, body)?;
        if let (true, Some(fields)) = (output_only_status, object.as_object_mut()) {
            fields.remove("status");
        }
        let json_body = (!is_protobuf(content_type)).then_some(body);
        let warnings = field_validation::validate(mode, group, res.version, kind, json_body, &mut object)?;
        Ok((object, warnings))
    };
    // dryRun is checked for every write before anything else runs (upstream's handlers:
    // ValidateCreateOptions and its siblings).
    let write = match method {
        Method::POST => dry_run::from_request("CreateOptions", &query, None)?,
        Method::PUT => dry_run::from_request("UpdateOptions", &query, None)?,
        Method::PATCH => dry_run::from_request("PatchOptions", &query, None)?,
        Method::DELETE => dry_run::from_request("DeleteOptions", &query, Some(&delete_options(content_type, body)?))?,
        _ => dry_run::Write::Persist,
    };
    // A version served from another resource's storage (events.k8s.io/v1 Events): writes
    // run as the stored resource's, converted on the way in and out.
    let served = res;
    let stored = match res.conversion {
        Some(c) => find(c.stored_group(), res.plural).ok_or_else(StatusError::not_found_path)?,
        None => res,
    };
    let to_stored = |object: Value, name: Option<&str>| -> Result<Value, StatusError> {
        let Some(c) = served.conversion else { return Ok(object) };
        if let Some(name) = name {
            c.validate(name, &object)?;
        }
        Ok(c.to_stored(object))
    };
    // Who the write's changes are recorded under, and whether an apply takes fields from
    // other managers (PatchOptions `force`, only for apply).
    let options_kind = match method {
        Method::POST => "CreateOptions",
        Method::PUT => "UpdateOptions",
        _ => "PatchOptions",
    };
    let manager = apply::manager_name(options_kind, query.get("fieldManager").map(String::as_str), user_agent)?;
    let force = match query.get("force").map(String::as_str) {
        None | Some("" | "false") => false,
        Some("true") => true,
        Some(other) => return Err(StatusError::bad_request(format!("invalid force {other:?}: must be true or false"))),
    };
    let is_apply = content_type.split(';').next().unwrap_or("").trim() == write::APPLY_PATCH;
    if method == Method::PATCH && is_apply && query.get("fieldManager").is_none_or(|m| m.is_empty()) {
        return Err(StatusError::invalid(
            "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch",
        ));
    }
    if force && !(method == Method::PATCH && is_apply) {
        return Err(StatusError::invalid(format!(
            "{options_kind}.meta.k8s.io \"\" is invalid: force: Forbidden: may not be specified for non-apply patch"
        )));
    }
    let notes = admission::Notes::default();
    let target = Target { state, user, res: stored, served, ns, write, manager: &manager, force, notes: &notes };
    let (response, warnings) = match (&method, path.name.as_deref(), path.subresource.as_deref()) {
        (&Method::POST, None, None) if res.stored => {
            let (object, warnings) = validated(res.group, res.kind, false)?;
            let name = object
                .get("metadata")
                .and_then(|m| m.get("name"))
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            let object = to_stored(object, Some(&name))?;
            (served_as(served, write::create(&target, object).await?).await?, warnings)
        }
        (&Method::PUT, Some(name), sub)
            if res.stored
                && let Some(part) = part_of(res, sub, "update") =>
        {
            let (object, warnings) = validated(res.group, res.kind, false)?;
            let object = to_stored(object, None)?;
            (served_as(served, write::update(&target, name, part, object).await?).await?, warnings)
        }
        (&Method::PATCH, Some(name), sub)
            if res.stored
                && let Some(part) = part_of(res, sub, "patch") =>
        {
            let (response, warnings) =
                write::patch(&target, name, part, &Body { content_type, bytes: body, mode }).await?;
            (served_as(served, response).await?, warnings)
        }
        (method, Some(name), Some(sub)) if let Some(declared) = res.subresource(sub) => {
            match (declared.serves, method) {
                (kinds::Serves::Log, &Method::GET) => {
                    return pod_log::get(state, ns.unwrap_or_default(), name, &query).await;
                }
                (kinds::Serves::Stream, _) => {
                    return Err(StatusError::new(
                        StatusCode::METHOD_NOT_ALLOWED,
                        "MethodNotAllowed",
                        format!("{}/{sub} is served as a connection upgrade only", res.plural),
                    ));
                }
                (kinds::Serves::Binding, &Method::POST) => {
                    let (object, warnings) = validated("", declared.kind, false)?;
                    (binding::create(&target, name, object).await?, warnings)
                }
                (kinds::Serves::Scale, &Method::GET) => {
                    (json_response(StatusCode::OK, scale::get(&target, name).await?), Vec::new())
                }
                (kinds::Serves::Scale, &Method::PUT) => {
                    let (object, warnings) = validated("autoscaling", declared.kind, false)?;
                    (json_response(StatusCode::OK, scale::update(&target, name, &object).await?), warnings)
                }
                (kinds::Serves::Scale, &Method::PATCH) => {
                    (json_response(StatusCode::OK, scale::patch(&target, name, content_type, body).await?), Vec::new())
                }
                (kinds::Serves::Token, &Method::POST) => {
                    let (request, warnings) = create_only::<typed_body::TokenRequestKind>(content_type, body, mode)?;
                    let dry = write.is_dry_run();
                    (token::create_token(state, user, ns.unwrap_or_default(), name, request, dry).await?, warnings)
                }
                _ => return reads(&target, method, &path, &query, (content_type, body), accept).await,
            }
        }
        (&Method::POST, None, None) if let Some(answers) = res.strategy.answers() => match answers {
            kinds::Answers::TokenReview => {
                let (review, warnings) = create_only::<typed_body::TokenReviewKind>(content_type, body, mode)?;
                (token::review(state, review.spec).await?, warnings)
            }
            kinds::Answers::Review => {
                let (object, warnings) = validated(res.group, res.kind, true)?;
                (reviews::review(state, user, res, ns, object).await?, warnings)
            }
        },
        _ => return reads(&target, &method, &path, &query, (content_type, body), accept).await,
    };
    // What admission added: its warnings after the decoding's, its audit annotations on
    // the event.
    let (admission_warnings, annotations) = notes.take();
    let mut response = response;
    if !annotations.is_empty() {
        let mut all = response.extensions_mut().remove::<super::audit::Annotations>().unwrap_or_default();
        all.0.extend(annotations);
        response.extensions_mut().insert(all);
    }
    let warnings: Vec<String> = warnings.into_iter().chain(admission_warnings).collect();
    Ok(with_warnings(dry_run_audited(response, write), &warnings))
}

/// The part of the object a path reads or writes with `verb`: the main resource, or a
/// subresource the kind declares as a part of it and serves `verb` on (`None` for any
/// other subresource, and `namespaces/finalize` but for `update`).
fn part_of(res: &Resource, sub: Option<&str>, verb: &str) -> Option<kinds::Part> {
    match sub {
        None => Some(kinds::Part::Main),
        Some(sub) => {
            let declared = res.subresource(sub)?;
            match declared.serves {
                kinds::Serves::Part(part) if declared.serves.verbs().contains(&verb) => Some(part),
                _ => None,
            }
        }
    }
}

/// The body of a TokenRequest or TokenReview, validated under `mode`: JSON decoded straight
/// into its type (their hot paths build no tree), kubectl's protobuf through a tree as
/// every other body.
fn create_only<K: typed_body::CreateOnly>(
    content_type: &str,
    body: &[u8],
    mode: FieldValidation,
) -> Result<(typed_body::Body<K>, Vec<String>), StatusError> {
    if is_json(content_type) {
        return field_validation::decode_json(mode, K::GROUP, K::VERSION, K::KIND, body);
    }
    let mut object = parse_body(content_type, body)?;
    // Output only, and client-go's empty one would not decode as the typed status.
    if let Some(fields) = object.as_object_mut() {
        fields.remove("status");
    }
    let warnings = field_validation::validate(mode, K::GROUP, K::VERSION, K::KIND, None, &mut object)?;
    let decoded = serde::Deserialize::deserialize(object)
        .map_err(|e| StatusError::bad_request(format!("error decoding request body: {e}")))?;
    Ok((decoded, warnings))
}

/// Largest write answer re-read to convert it into the served version.
const MAX_CONVERTED_BODY: usize = 16 << 20;

/// A write's answer (one object) in the version the client addressed: unchanged for a
/// resource that owns its storage, converted for a view of another's.
async fn served_as(served: &Resource, response: Response) -> Result<Response, StatusError> {
    let Some(conversion) = served.conversion else { return Ok(response) };
    let (mut parts, body) = response.into_parts();
    let bytes = axum::body::to_bytes(body, MAX_CONVERTED_BODY)
        .await
        .map_err(|e| StatusError::internal(format!("reading the answer to convert it: {e}")))?;
    let object: Value = serde_json::from_slice(&bytes)
        .map_err(|e| StatusError::internal(format!("decoding the answer to convert it: {e}")))?;
    let converted = if object.get("kind").and_then(Value::as_str) == Some(served.kind) {
        conversion.to_served(object)
    } else {
        object
    };
    parts.headers.remove(axum::http::header::CONTENT_LENGTH);
    Ok(Response::from_parts(parts, axum::body::Body::from(serde_json::to_vec(&converted).unwrap_or_default())))
}

/// A dry run's answer carries an audit annotation saying so.
fn dry_run_audited(mut response: Response, write: dry_run::Write) -> Response {
    if write.is_dry_run() {
        let mut annotations = response.extensions_mut().remove::<super::audit::Annotations>().unwrap_or_default();
        annotations.0.insert(dry_run::AUDIT_ANNOTATION.into(), "All".into());
        response.extensions_mut().insert(annotations);
    }
    response
}

/// Appends one `Warning: 299 - "…"` header per warning (RFC 7234, as upstream).
pub(super) fn with_warnings(mut response: Response, warnings: &[String]) -> Response {
    for w in warnings {
        if let Ok(value) = axum::http::HeaderValue::from_str(&format!("299 - {w:?}")) {
            response.headers_mut().append("warning", value);
        }
    }
    response
}

/// Whether a body of `content_type` is read as JSON (also when none is named).
fn is_json(content_type: &str) -> bool {
    matches!(content_type.split(';').next().unwrap_or("").trim(), "" | "application/json" | "*/*")
}

fn is_protobuf(content_type: &str) -> bool {
    content_type.split(';').next().unwrap_or("").trim() == "application/vnd.kubernetes.protobuf"
}

/// Reads and deletes: what carries no body to validate.
async fn reads(
    t: &Target<'_>,
    method: &Method,
    path: &ApiPath,
    query: &HashMap<String, String>,
    (content_type, body): (&str, &[u8]),
    accept: Option<&str>,
) -> Result<Response, StatusError> {
    let (state, res, ns) = (t.state, t.res, t.ns);
    // kubectl get: a Table of what is read; `kubectl get -w`: each watch event's object a
    // one-row Table.
    let include = table::IncludeObject::parse(query.get("includeObject").map(String::as_str))
        .map_err(|e| StatusError::bad_request(e.to_string()))?;
    let shape = shape::Shape::of(accept, include);
    match (method, path.name.as_deref(), path.subresource.as_deref()) {
        (&Method::GET, Some(name), sub) if res.stored && part_of(res, sub, "get").is_some() => {
            let res = t.served;
            let stored = state.store.get_with(&key(res, ns, name), freshness(query)?).await?;
            match shape {
                shape::Shape::Table(include) => {
                    let rv = stored.revision.to_string();
                    let t = table::table(
                        res,
                        std::slice::from_ref(&stored.object),
                        &rv,
                        include,
                        podpass_token::now_unix(),
                    );
                    return Ok(json_response(StatusCode::OK, t));
                }
                shape::Shape::Metadata => return Ok(json_response(StatusCode::OK, shape::partial(&stored.object))),
                shape::Shape::Objects => {}
            }
            let object = match res.conversion {
                Some(c) => c.to_served(stored.object.clone()),
                None => stored.object.clone(),
            };
            Ok(json_response(StatusCode::OK, object))
        }
        (&Method::GET, None, None) if res.stored => list::list(state, t.user, t.served, ns, query, shape).await,
        (&Method::DELETE, None, None) if res.serves_delete_collection() => {
            let options = delete_options(content_type, body)?;
            Ok(dry_run_audited(delete::delete_collection(t, query, &options).await?, t.write))
        }
        (&Method::DELETE, Some(name), None) if res.stored => {
            let options = delete_options(content_type, body)?;
            let response = served_as(t.served, delete::delete(t, name, query, &options).await?).await?;
            Ok(dry_run_audited(response, t.write))
        }
        _ => Err(StatusError::method_not_supported(&method.as_str().to_lowercase(), res.plural)),
    }
}

/// How fresh a get or list must be, from its `resourceVersion` (upstream: `""` a
/// consistent read, `"0"` any, `"N"` not older than N).
fn freshness(query: &HashMap<String, String>) -> Result<ReadConsistency, StatusError> {
    ReadConsistency::from_resource_version(query.get("resourceVersion").map(String::as_str))
        .map_err(StatusError::bad_request)
}

pub(crate) use kinds::ensure_system_namespaces;
pub(crate) use kinds::revoked_token::expires_at as revocation_end;
