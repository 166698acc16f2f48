//! The resource API: discovery documents and get/list/create/update/delete of the served
//! objects, with the upstream behaviours users rely on.

mod delete;
mod dry_run;
pub mod field_validation;
mod kinds;
pub(crate) mod lifecycle;
mod node_restriction;
pub mod objects;
pub mod openapi;
mod openapi_v2_proto;
pub(crate) mod pagination;
mod patch;
mod projection;
mod protobuf;
mod rbac;
pub mod resources;
mod rules_review;
mod table;
mod token;
pub(crate) mod watch;

use field_validation::FieldValidation;

use crate::field::Field;
use std::collections::HashMap;
use std::sync::Arc;

use axum::Json;
use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use self::objects::{admit_pod, pod_service_account, prepare_new, prepare_update};
use self::resources::{ApiPath, RESOURCES, Resource, SUBRESOURCES, find, groups};
use super::AppState;
use super::status::StatusError;
use crate::store::{
    FieldSelector, LabelSelector, ListOptions, MAX_OBJECT_DEPTH, ObjectKey, ReadConsistency, StoreError,
};

fn json_response(code: StatusCode, body: Value) -> Response {
    (code, Json(body)).into_response()
}

/// `/api/v1` or `/apis/<g>/v1`: the APIResourceList.
pub fn resource_list(group: &str, version: &str) -> Result<Response, StatusError> {
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
        for (res, sub, kind) in SUBRESOURCES.iter().filter(|(res, _, _)| *res == r.plural) {
            let verbs: &[&str] = if *sub == "token" { &["create"] } else { &["get", "patch", "update"] };
            let group_kind =
                if *sub == "token" { json!({"group": "authentication.k8s.io", "version": "v1"}) } else { json!(null) };
            let mut entry = json!({"name": format!("{res}/{sub}"), "singularName": "", "namespaced": r.namespaced, "kind": kind, "verbs": verbs});
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
    let groups: Vec<Value> = groups().into_iter().map(group_json).collect();
    json_response(StatusCode::OK, json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}))
}

/// `/apis/<g>`: one APIGroup.
pub fn group(name: &str) -> Result<Response, StatusError> {
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
    } else if matches!(media, "" | "application/json" | "*/*") {
        serde_json::from_slice(body)
            .map_err(|e| StatusError::bad_request(format!("error decoding request body: {e}")))?
    } else {
        return Err(StatusError::unsupported_media_type(media));
    };
    check_depth(&value)?;
    Ok(value)
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
}

/// Serves one resource request (after authentication and authorization).
pub(crate) async fn handle(state: &Arc<AppState>, req: ResourceRequest<'_>) -> Result<Response, StatusError> {
    let ResourceRequest { method, path, query, content_type, accept, body, user } = req;
    let res = find(&path.group, &path.resource)
        .filter(|r| r.version == path.version)
        .ok_or_else(StatusError::not_found_path)?;
    if res.namespaced != path.namespace.is_some() && path.name.is_some() && res.stored {
        return Err(StatusError::not_found_path());
    }
    // Only kinds that have a subresource serve it: `secrets/db/status` is no path at all.
    if let Some(sub) = path.subresource.as_deref()
        && !SUBRESOURCES.iter().any(|(r, s, _)| *r == res.plural && *s == sub)
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
    // The body decoded and validated as `kind`; the warnings go on the answer.
    let validated = |group: &str, kind: &str| -> Result<(Value, Vec<String>), StatusError> {
        let mut object = parse_body(content_type, body)?;
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
        Method::DELETE => dry_run::from_request("DeleteOptions", &query, Some(body))?,
        _ => dry_run::Write::Persist,
    };
    let (response, warnings) = match (&method, path.name.as_deref(), path.subresource.as_deref()) {
        (&Method::POST, None, None) if res.stored => {
            let (object, warnings) = validated(res.group, res.kind)?;
            (create(state, user, res, ns, object, write).await?, warnings)
        }
        (&Method::PUT, Some(name), sub @ (None | Some("status"))) if res.stored => {
            let (object, warnings) = validated(res.group, res.kind)?;
            (update(state, user, res, ns, name, sub.is_some(), object, write).await?, warnings)
        }
        (&Method::PATCH, Some(name), sub @ (None | Some("status"))) if res.stored => {
            patch(state, user, res, ns, name, sub.is_some(), content_type, body, mode, write).await?
        }
        (&Method::POST, Some(name), Some("token")) if res.plural == "serviceaccounts" => {
            let (object, warnings) = validated("authentication.k8s.io", "TokenRequest")?;
            (token::create_token(state, user, ns.unwrap_or_default(), name, object).await?, warnings)
        }
        (&Method::POST, None, None) if !res.stored => {
            let (object, warnings) = validated(res.group, res.kind)?;
            let response = match res.plural {
                "tokenreviews" => token::review(state, object).await?,
                "selfsubjectreviews" => token::self_subject_review(user, &object)?,
                "selfsubjectaccessreviews" => token::self_subject_access_review(state, user, object).await?,
                "subjectaccessreviews" => token::subject_access_review(state, object).await?,
                "selfsubjectrulesreviews" => rules_review::self_subject_rules_review(state, user, &object).await?,
                "localsubjectaccessreviews" => {
                    rules_review::local_subject_access_review(state, ns.unwrap_or_default(), object).await?
                }
                _ => return Err(StatusError::method_not_supported("create", res.plural)),
            };
            (response, warnings)
        }
        _ => return reads(state, user, res, ns, &method, &path, &query, body, accept, write).await,
    };
    Ok(with_warnings(dry_run_audited(response, write), &warnings))
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

fn is_protobuf(content_type: &str) -> bool {
    content_type.split(';').next().unwrap_or("").trim() == "application/vnd.kubernetes.protobuf"
}

/// Reads and deletes: what carries no body to validate.
#[allow(clippy::too_many_arguments)]
async fn reads(
    state: &Arc<AppState>,
    user: &super::User,
    res: &Resource,
    ns: Option<&str>,
    method: &Method,
    path: &ApiPath,
    query: &HashMap<String, String>,
    body: &[u8],
    accept: Option<&str>,
    write: dry_run::Write,
) -> Result<Response, StatusError> {
    // kubectl get: a Table of what is read; `kubectl get -w`: each watch event's object a
    // one-row Table.
    let as_table = table::wants_table(accept);
    let include = table::IncludeObject::parse(query.get("includeObject").map(String::as_str))
        .map_err(StatusError::bad_request)?;
    match (method, path.name.as_deref(), path.subresource.as_deref()) {
        (&Method::GET, Some(name), None | Some("status")) if res.stored => {
            let stored = state.store.get_with(&key(res, ns, name), freshness(query)?).await?;
            if as_table {
                let rv = stored.revision.to_string();
                let t = table::table(
                    res.plural,
                    std::slice::from_ref(&stored.object),
                    &rv,
                    include,
                    podpass_token::now_unix(),
                );
                return Ok(json_response(StatusCode::OK, t));
            }
            Ok(json_response(StatusCode::OK, stored.object.clone()))
        }
        (&Method::GET, None, None) if res.stored => {
            list(state, user, res, ns, query, as_table.then_some(include)).await
        }
        (&Method::DELETE, Some(name), None) if res.stored => {
            if res.plural == "leases" {
                node_restriction::admit_lease_write(user, ns.unwrap_or_default(), name)?;
            }
            let response = delete::delete(state, res, ns, name, query, body, write).await?;
            Ok(dry_run_audited(response, write))
        }
        _ => Err(StatusError::method_not_supported(&method.as_str().to_lowercase(), res.plural)),
    }
}

async fn list(
    state: &AppState,
    user: &super::User,
    res: &Resource,
    ns: Option<&str>,
    query: &HashMap<String, String>,
    table: Option<table::IncludeObject>,
) -> Result<Response, StatusError> {
    let labels = LabelSelector::parse(query.get("labelSelector").map_or("", String::as_str))
        .map_err(|e| StatusError::bad_request(e.to_string()))?;
    let fields = FieldSelector::parse(query.get("fieldSelector").map_or("", String::as_str))
        .map_err(|e| StatusError::bad_request(e.to_string()))?;
    for path in fields.paths() {
        let supported = matches!(path, "metadata.name" | "metadata.namespace")
            || (res.plural == "pods" && matches!(path, "spec.nodeName" | "spec.serviceAccountName" | "status.phase"))
            || (res.plural == "secrets" && path == "type")
            // EventToSelectableFields (core/v1 events), so `kubectl describe` finds a pod's events
            || (res.plural == "events"
                && matches!(
                    path,
                    "involvedObject.kind"
                        | "involvedObject.namespace"
                        | "involvedObject.name"
                        | "involvedObject.uid"
                        | "involvedObject.apiVersion"
                        | "involvedObject.resourceVersion"
                        | "involvedObject.fieldPath"
                        | "reason"
                        | "reportingComponent"
                        | "source"
                        | "type"
                ));
        if !supported {
            return Err(StatusError::bad_request(format!("field label not supported: {path}")));
        }
    }
    let fields = if res.plural == "events" { fields.alias("source", "source.component") } else { fields };
    let options = ListOptions { labels, fields };
    if query.get("watch").is_some_and(|w| w == "true" || w == "1") {
        // Upstream: resourceVersion "" or "0" starts with the current state as ADDED events.
        let from = match query.get("resourceVersion").map(String::as_str) {
            None | Some("" | "0") => None,
            Some(rv) => Some(
                rv.parse::<u64>().map_err(|_| StatusError::bad_request(format!("invalid resourceVersion {rv:?}")))?,
            ),
        };
        let timeout_seconds = match query.get("timeoutSeconds").map(String::as_str) {
            None | Some("") => None,
            Some(t) => Some(t.parse::<u64>().map_err(|_| {
                StatusError::bad_request(format!("timeoutSeconds: invalid value {t:?}: must be a non-negative integer"))
            })?),
        };
        let bookmarks = query.get("allowWatchBookmarks").is_some_and(|b| b == "true" || b == "1");
        let slot = state.watches.acquire(&user.name).ok_or_else(|| {
            StatusError::new(
                StatusCode::TOO_MANY_REQUESTS,
                "TooManyRequests",
                format!("too many open watches for user {:?}, please try again later", user.name),
            )
        })?;
        let gauge = state
            .metrics
            .longrunning
            .get_or_create(&crate::server::metrics::LongRunningLabels {
                verb: "WATCH".into(),
                group: res.group.into(),
                version: res.version.into(),
                resource: res.plural.into(),
                subresource: String::new(),
                scope: if ns.is_some() { "namespace" } else { "cluster" }.into(),
                component: "apiserver".into(),
            })
            .clone();
        let slot = slot.counted_in(gauge);
        let stream = state.store.watch(res.plural, ns, options, from).await?;
        let plural = res.plural;
        let table_events = table.map(|include| {
            Box::new(move |object: Value| {
                let rv = object.field("/metadata/resourceVersion").and_then(Value::as_str).unwrap_or("").to_owned();
                table::table(plural, &[object], &rv, include, podpass_token::now_unix())
            }) as watch::Transform
        });
        let timeout = watch::watch_timeout(timeout_seconds, state.min_request_timeout);
        let bookmarks = bookmarks
            .then(|| watch::BookmarkKind { api_version: res.api_version().to_string(), kind: res.kind.to_owned() });
        return Ok(watch::response(stream, Some(slot), timeout, bookmarks, table_events));
    }
    let limit = pagination::limit(query)?;
    let resume = match query.get("continue").map(String::as_str) {
        None | Some("") => None,
        Some(token) => Some(pagination::decode(token)?),
    };
    if resume.is_some() && query.get("resourceVersion").is_some_and(|rv| !rv.is_empty() && rv != "0") {
        return Err(StatusError::bad_request("specifying resource version is not allowed when using continue"));
    }
    if limit.is_none() && resume.is_none() {
        let result = state.store.list_with(res.plural, ns, &options, freshness(query)?).await?;
        return Ok(list_response(res, table, &result.items, result.revision, None, None));
    }
    // A paged list: every page is read from the first page's result (a consistent list).
    let across = res.namespaced && ns.is_none();
    let list_key = pagination::ListKey {
        resource: res.plural.to_owned(),
        namespace: ns.unwrap_or_default().to_owned(),
        labels: query.get("labelSelector").cloned().unwrap_or_default(),
        fields: query.get("fieldSelector").cloned().unwrap_or_default(),
    };
    let now = std::time::Instant::now();
    let (items, revision, fresh) = match &resume {
        Some(pagination::Continue { revision: Some(rv), start }) => {
            match state.list_snapshots.get(&list_key, *rv, now) {
                Some(items) => (items, *rv, false),
                None => return Ok(expired_continue(start)),
            }
        }
        _ => {
            let result = state.store.list_with(res.plural, ns, &options, freshness(query)?).await?;
            let mut items = result.items;
            items.sort_by_cached_key(|o| pagination::relative_key(o, across));
            (std::sync::Arc::new(items), result.revision, true)
        }
    };
    let start = resume.as_ref().map(|r| r.start.as_str());
    let (page, next, remaining) = pagination::page(&items, start, limit.unwrap_or(usize::MAX), across);
    let token = next.map(|next| {
        if fresh {
            state.list_snapshots.keep(list_key, revision, std::sync::Arc::clone(&items), now);
        }
        pagination::encode(Some(revision), &next)
    });
    // Upstream counts what remains only when no selector filters the list.
    let unfiltered = query.get("labelSelector").is_none_or(|s| s.is_empty())
        && query.get("fieldSelector").is_none_or(|s| s.is_empty());
    let remaining = (token.is_some() && unfiltered).then_some(remaining);
    Ok(list_response(res, table, page, revision, token, remaining))
}

/// A list (or its Table) at `revision`, with the continue token and remaining count of a
/// paged list.
fn list_response(
    res: &Resource,
    table: Option<table::IncludeObject>,
    items: &[Value],
    revision: u64,
    continue_token: Option<String>,
    remaining: Option<usize>,
) -> Response {
    let rv = revision.to_string();
    let mut body = match table {
        Some(include) => table::table(res.plural, items, &rv, include, podpass_token::now_unix()),
        None => json!({"kind": format!("{}List", res.kind), "apiVersion": res.api_version(),
                       "metadata": {"resourceVersion": rv}, "items": items}),
    };
    if let Some(token) = continue_token {
        body["metadata"]["continue"] = json!(token);
    }
    if let Some(n) = remaining {
        body["metadata"]["remainingItemCount"] = json!(n);
    }
    json_response(StatusCode::OK, body)
}

/// A continue token whose list is no longer kept: upstream's 410 Expired (as past etcd's
/// compaction), with a token that continues from the same place on the latest state.
fn expired_continue(start: &str) -> Response {
    json_response(
        StatusCode::GONE,
        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Expired", "code": 410,
               "message": pagination::EXPIRED_MESSAGE,
               "metadata": {"continue": pagination::encode(None, start)}}),
    )
}

/// How fresh a get or list must be, from its `resourceVersion` (upstream: `""` a
/// consistent read, `"0"` any, `"N"` not older than N).
fn freshness(query: &HashMap<String, String>) -> Result<ReadConsistency, StatusError> {
    ReadConsistency::from_resource_version(query.get("resourceVersion").map(String::as_str))
        .map_err(StatusError::bad_request)
}

/// Admission for writes of existing kinds: RBAC objects are defaulted, validated, and
/// checked for privilege escalation (see `authz::escalation`); nodes writing Node objects
/// pass NodeRestriction; pod specs are immutable once created.
async fn admit_write(
    state: &AppState,
    user: &super::User,
    res: &Resource,
    ns: Option<&str>,
    name: &str,
    object: &mut Value,
    old: Option<&Value>,
) -> Result<(), StatusError> {
    if res.plural == "secrets" {
        projection::secret_defaults(name, object)?;
        projection::validate_secret_type(name, object)?;
    }
    if res.plural == "configmaps" || res.plural == "secrets" {
        projection::validate_config_object(res, name, object)?;
        if let Some(old) = old {
            projection::validate_config_update(res, name, object, old)?;
        }
    }
    if res.plural == "nodes" {
        return node_restriction::admit_node_write(user, name, object, old);
    }
    if res.plural == "leases" {
        return node_restriction::admit_lease_write(user, ns.unwrap_or_default(), name);
    }
    if res.plural == "pods"
        && let Some(old) = old
    {
        return objects::validate_pod_update(name, old, object);
    }
    if res.group != crate::server::authz::escalation::RBAC_GROUP {
        return Ok(());
    }
    rbac::admit(res, object, old)?;
    let write = crate::server::authz::escalation::RbacWrite {
        user,
        resource: res.plural,
        namespace: ns.unwrap_or_default(),
        name,
        new: object,
        old,
    };
    crate::server::authz::escalation::check(state.authz(), &state.authorization_modes, &write).await
}

/// After a ClusterRole changed: the aggregation controller's pass.
/// After a write: an aggregated ClusterRole is reconciled, and an RBAC write is applied to
/// the RBAC index before it is answered, so the writer may use it at once.
async fn after_rbac_write(state: &AppState, res: &Resource, revision: u64) -> Result<(), StatusError> {
    if res.plural == "clusterroles" {
        crate::server::authz::aggregation::reconcile(state.store.as_ref()).await?;
    }
    if res.group == crate::server::authz::escalation::RBAC_GROUP {
        state.rbac.wait_applied(res.plural, revision).await;
    }
    Ok(())
}

async fn create(
    state: &AppState,
    user: &super::User,
    res: &Resource,
    ns: Option<&str>,
    mut object: Value,
    write: dry_run::Write,
) -> Result<Response, StatusError> {
    let name = prepare_new(res, ns, &mut object, podpass_token::now_unix())?;
    let ns_uid = match ns {
        Some(ns) => Some(lifecycle::admit_create(state, res, ns, &name).await?),
        None => None,
    };
    if res.plural == "namespaces" {
        lifecycle::namespace_defaults(&mut object);
    }
    admit_write(state, user, res, ns, &name, &mut object, None).await?;
    if res.plural == "pods" {
        let ns = ns.unwrap_or_default();
        let sa_name = pod_service_account(&mut object);
        let sa = match state.store.get(&ObjectKey::namespaced("serviceaccounts", ns, &sa_name)).await {
            Ok(sa) => sa.object,
            Err(StoreError::NotFound { .. }) => {
                return Err(StatusError::new(
                    StatusCode::FORBIDDEN,
                    "Forbidden",
                    format!(
                        "pods {name:?} is forbidden: error looking up service account {ns}/{sa_name}: serviceaccount {sa_name:?} not found"
                    ),
                ));
            }
            Err(e) => return Err(e.into()),
        };
        objects::default_pod(&mut object);
        objects::validate_pod_names(&name, &object)?;
        projection::validate_pod_volumes(&name, &object)?;
        admit_pod(&mut object, &sa)?;
    }
    let k = key(res, ns, &name);
    if write.is_dry_run() {
        // DryRunnableStorage.Create: an existing object is still a conflict; the answer is
        // the object as it would be stored (no resourceVersion), and nothing else runs.
        return match state.store.get(&k).await {
            Ok(_) => Err(StoreError::AlreadyExists { resource: res.plural.to_owned(), name }.into()),
            Err(StoreError::NotFound { .. }) => Ok(json_response(StatusCode::CREATED, object)),
            Err(e) => Err(e.into()),
        };
    }
    let created = state.store.create(&k, object).await?;
    if let (Some(ns), Some(uid)) = (ns, &ns_uid) {
        lifecycle::after_create(state, res, ns, uid, &k, &created).await?;
    }
    if res.plural == "namespaces" {
        namespace_defaults(state, &name).await?;
    }
    after_rbac_write(state, res, created.revision).await?;
    Ok(json_response(StatusCode::CREATED, created.object))
}

/// What upstream's controllers add to every namespace: ServiceAccount `default` and
/// ConfigMap `kube-root-ca.crt` with the cluster CA.
async fn namespace_defaults(state: &AppState, ns: &str) -> Result<(), StatusError> {
    let now = podpass_token::now_unix();
    let sa_res = find("", "serviceaccounts").ok_or_else(StatusError::not_found_path)?;
    let cm_res = find("", "configmaps").ok_or_else(StatusError::not_found_path)?;
    let mut sa = json!({"metadata": {"name": "default"}});
    prepare_new(sa_res, Some(ns), &mut sa, now)?;
    let mut cm = json!({"metadata": {"name": "kube-root-ca.crt"}, "data": {"ca.crt": state.ca_pem}});
    prepare_new(cm_res, Some(ns), &mut cm, now)?;
    for (res, obj, name) in [(sa_res, sa, "default"), (cm_res, cm, "kube-root-ca.crt")] {
        match state.store.create(&key(res, Some(ns), name), obj).await {
            Ok(_) | Err(StoreError::AlreadyExists { .. }) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

// The per-kind strategies (next) gather these into one request context.
#[allow(clippy::too_many_arguments)]
async fn update(
    state: &AppState,
    user: &super::User,
    res: &Resource,
    ns: Option<&str>,
    name: &str,
    status_only: bool,
    mut object: Value,
    write: dry_run::Write,
) -> Result<Response, StatusError> {
    let k = key(res, ns, name);
    let current = state.store.get(&k).await?;
    let expected = match object.field("/metadata/resourceVersion").and_then(Value::as_str) {
        Some(rv) => {
            Some(rv.parse::<u64>().map_err(|_| StatusError::bad_request(format!("invalid resourceVersion {rv:?}")))?)
        }
        None => None,
    };
    split_status(res, status_only, &current.object, &mut object);
    prepare_update(res, &current.object, &mut object, name)?;
    lifecycle::check_finalizer_update(res.kind, name, &current.object, &object)?;
    admit_write(state, user, res, ns, name, &mut object, Some(&current.object)).await?;
    if write.is_dry_run() {
        return dry_run_update(res, name, object, expected.unwrap_or(current.revision), &current);
    }
    let updated = state.store.update(&k, object, expected.or(Some(current.revision))).await?;
    after_rbac_write(state, res, updated.revision).await?;
    Ok(json_response(StatusCode::OK, lifecycle::finish_if_finalized(state, &k, updated).await?))
}

/// A dry-run update's answer (DryRunnableStorage.GuaranteedUpdate): the precondition still
/// holds or it is a conflict, and the object is what would be stored, at the current
/// resourceVersion.
fn dry_run_update(
    res: &Resource,
    name: &str,
    mut object: Value,
    expected: u64,
    current: &crate::store::Stored,
) -> Result<Response, StatusError> {
    if expected != current.revision {
        return Err(StoreError::Conflict { resource: res.plural.to_owned(), name: name.to_owned() }.into());
    }
    if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.insert("resourceVersion".into(), json!(current.revision.to_string()));
    }
    Ok(json_response(StatusCode::OK, object))
}

/// Kinds whose strategy keeps `status` out of main-resource writes (upstream's pod, node
/// and namespace strategies: `PrepareForUpdate` copies the old status): only their
/// `/status` subresource changes it, which the Node authorizer and NodeRestriction guard.
const STATUS_KINDS: [&str; 3] = ["pods", "nodes", "namespaces"];

/// What a write may change: through `/status` the status only (everything else is the
/// current object's); through the main resource of a [`STATUS_KINDS`] kind everything but
/// the status.
fn split_status(res: &Resource, status_only: bool, current: &Value, object: &mut Value) {
    if status_only {
        let status = object.get("status").cloned().unwrap_or(Value::Null);
        *object = current.clone();
        object["status"] = status;
    } else if STATUS_KINDS.contains(&res.plural)
        && let Some(obj) = object.as_object_mut()
    {
        match current.get("status") {
            Some(status) => obj.insert("status".into(), status.clone()),
            None => obj.remove("status"),
        };
    }
}

/// The patch types of `Content-Type` (apimachinery types.PatchType).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PatchKind {
    /// `application/merge-patch+json` (RFC 7386).
    Merge,
    /// `application/strategic-merge-patch+json`.
    Strategic,
    /// `application/json-patch+json` (RFC 6902).
    Json,
}

/// Conflicts a patch retries on before giving up (upstream retries patches internally).
const PATCH_RETRIES: usize = 5;

#[allow(clippy::too_many_arguments)]
async fn patch(
    state: &AppState,
    user: &super::User,
    res: &Resource,
    ns: Option<&str>,
    name: &str,
    status_only: bool,
    content_type: &str,
    body: &[u8],
    mode: FieldValidation,
    write: dry_run::Write,
) -> Result<(Response, Vec<String>), StatusError> {
    let media = content_type.split(';').next().unwrap_or("").trim();
    let kind = match media {
        "application/merge-patch+json" => PatchKind::Merge,
        "application/strategic-merge-patch+json" => PatchKind::Strategic,
        "application/json-patch+json" => PatchKind::Json,
        other => return Err(StatusError::unsupported_media_type(other)),
    };
    let patch: Value =
        serde_json::from_slice(body).map_err(|e| StatusError::bad_request(format!("error decoding patch: {e}")))?;
    check_depth(&patch)?;
    let json_patch = match kind {
        PatchKind::Json => Some(patch::decode_json_patch(&patch)?),
        _ => None,
    };
    // Duplicates are the patch body's; unknown fields are the patched object's.
    let duplicates: Vec<String> = if json_patch.is_none() {
        field_validation::duplicate_fields(body).into_iter().map(|p| format!("duplicate field {p:?}")).collect()
    } else {
        Vec::new()
    };
    let k = key(res, ns, name);
    let mut attempt = 0;
    loop {
        let current = state.store.get(&k).await?;
        let mut object = current.object.clone();
        match (&json_patch, kind) {
            (Some(ops), _) => patch::apply_json_patch(&mut object, ops)?,
            (None, PatchKind::Strategic) => patch::strategic_merge_patch(&mut object, &patch),
            (None, _) => patch::merge_patch(&mut object, &patch),
        }
        // A patch that sets a resourceVersion (any patch type, a JSON patch's `replace` of
        // /metadata/resourceVersion included) makes it a precondition; otherwise the current
        // one. Read before the subresource split, which keeps the current metadata.
        let before = current.object.field("/metadata/resourceVersion");
        let patched_rv = object.field("/metadata/resourceVersion").filter(|rv| Some(*rv) != before).cloned();
        let precondition = patch.field("/metadata/resourceVersion").cloned().or(patched_rv);
        let expected = match &precondition {
            Some(rv) => {
                let text = rv.as_str().unwrap_or_default();
                text.parse::<u64>().map_err(|_| StatusError::bad_request(format!("invalid resourceVersion {rv}")))?
            }
            None => current.revision,
        };
        split_status(res, status_only, &current.object, &mut object);
        let mut warnings = field_validation::validate(mode, res.group, res.version, res.kind, None, &mut object)?;
        if !duplicates.is_empty() {
            if mode == FieldValidation::Strict {
                return Err(StatusError::bad_request(format!("strict decoding error: {}", duplicates.join(", "))));
            }
            if mode == FieldValidation::Warn {
                warnings.extend(duplicates.iter().cloned());
            }
        }
        prepare_update(res, &current.object, &mut object, name)?;
        check_depth(&object)?;
        lifecycle::check_finalizer_update(res.kind, name, &current.object, &object)?;
        admit_write(state, user, res, ns, name, &mut object, Some(&current.object)).await?;
        if write.is_dry_run() {
            return Ok((dry_run_update(res, name, object, expected, &current)?, warnings));
        }
        match state.store.update(&k, object, Some(expected)).await {
            Ok(updated) => {
                after_rbac_write(state, res, updated.revision).await?;
                let answer = json_response(StatusCode::OK, lifecycle::finish_if_finalized(state, &k, updated).await?);
                return Ok((answer, warnings));
            }
            Err(StoreError::Conflict { .. }) if attempt < PATCH_RETRIES && precondition.is_none() => {
                attempt += 1;
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// At start-up: the namespaces every cluster has (`default`, `kube-system`, `kube-public`,
/// `kube-node-lease`), each with its defaults.
pub(crate) use delete::resume_pending_deletions;

pub(crate) async fn ensure_system_namespaces(state: &AppState) -> Result<(), StatusError> {
    let res = find("", "namespaces").ok_or_else(StatusError::not_found_path)?;
    for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
        let mut object = json!({"metadata": {"name": ns}});
        prepare_new(res, None, &mut object, podpass_token::now_unix())?;
        lifecycle::namespace_defaults(&mut object);
        match state.store.create(&ObjectKey::cluster("namespaces", ns), object).await {
            Ok(_) | Err(StoreError::AlreadyExists { .. }) => {}
            Err(e) => return Err(e.into()),
        }
        namespace_defaults(state, ns).await?;
    }
    Ok(())
}
