//! LIST and WATCH of a stored resource: label and field selectors (the fields its
//! strategy makes selectable), watches with bookmarks and timeouts, Tables, and paging
//! (`limit`/`continue` over a kept snapshot, see `pagination`).

use std::collections::HashMap;

use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{Value, json};

use super::resources::Resource;
use super::shape::Shape;
use super::{freshness, json_response, pagination, table, watch};
use crate::field::Field;
use crate::server::status::StatusError;
use crate::server::{AppState, User};
use crate::store::{FieldSelector, LabelSelector, ListOptions};

/// The label and field selectors of a list, watch or DeleteCollection: a field the kind
/// does not make selectable is a 400 naming it.
pub(super) fn list_options(res: &Resource, query: &HashMap<String, String>) -> Result<ListOptions, StatusError> {
    let labels = LabelSelector::parse(query.get("labelSelector").map_or("", String::as_str))
        .map_err(|e| StatusError::bad_request(e.to_string()))?;
    let fields = FieldSelector::parse(query.get("fieldSelector").map_or("", String::as_str))
        .map_err(|e| StatusError::bad_request(e.to_string()))?;
    let strategy = res.strategy;
    for path in fields.paths() {
        let supported =
            matches!(path, "metadata.name" | "metadata.namespace") || strategy.selectable_fields().contains(&path);
        if !supported {
            return Err(StatusError::bad_request(format!("field label not supported: {path}")));
        }
    }
    let fields = strategy.field_aliases().iter().fold(fields, |fields, (alias, path)| fields.alias(alias, path));
    Ok(ListOptions { labels, fields })
}

pub(super) async fn list(
    state: &AppState,
    user: &User,
    res: &'static Resource,
    ns: Option<&str>,
    query: &HashMap<String, String>,
    shape: Shape,
) -> Result<Response, StatusError> {
    let options = list_options(res, query)?;
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
        let conversion = res.conversion;
        let table_events = match (shape, conversion) {
            (Shape::Table(include), _) => Some(Box::new(move |object: Value| {
                let rv = object.field("/metadata/resourceVersion").and_then(Value::as_str).unwrap_or("").to_owned();
                table::table(res, &[object], &rv, include, podpass_token::now_unix())
            }) as watch::Transform),
            (Shape::Metadata, _) => {
                Some(Box::new(move |object: Value| super::shape::partial(&object)) as watch::Transform)
            }
            (Shape::Objects, Some(c)) => Some(Box::new(move |object: Value| c.to_served(object)) as watch::Transform),
            (Shape::Objects, None) => None,
        };
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
        return Ok(list_response(res, shape, &result.items, result.revision, None, None));
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
    Ok(list_response(res, shape, page, revision, token, remaining))
}

/// A list (or its Table) at `revision`, with the continue token and remaining count of a
/// paged list.
pub(super) fn list_response(
    res: &Resource,
    shape: Shape,
    items: &[Value],
    revision: u64,
    continue_token: Option<String>,
    remaining: Option<usize>,
) -> Response {
    let rv = revision.to_string();
    let mut body = match shape {
        Shape::Table(include) => table::table(res, items, &rv, include, podpass_token::now_unix()),
        Shape::Metadata => super::shape::partial_list(items, &rv),
        Shape::Objects => {
            let items: Vec<Value> = match res.conversion {
                Some(c) => items.iter().map(|o| c.to_served(o.clone())).collect(),
                None => items.to_vec(),
            };
            json!({"kind": format!("{}List", res.kind), "apiVersion": res.api_version(),
                   "metadata": {"resourceVersion": rv}, "items": items})
        }
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
