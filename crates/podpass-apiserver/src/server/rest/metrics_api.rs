//! The resource metrics API, `metrics.k8s.io/v1beta1`, as metrics-server serves it
//! (`kubectl top`): `NodeMetrics` and `PodMetrics` at the same paths, discovered as that API
//! is, authorized as any request (upstream's `system:aggregated-metrics-reader`, aggregated
//! into view, edit and admin, grants them). Each answer asks the nodes' Summary API
//! (`/stats/summary`, with the kubelet client certificate) at once: CPU as nano-cores over the
//! node's own window, memory as the working set, each with its sample's time.

use std::time::Duration;

use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{Value, json};

use super::json_response;
use crate::field::Field;
use crate::server::AppState;
use crate::server::status::StatusError;
use crate::store::{FieldSelector, LabelSelector, ListOptions, ObjectKey};

/// The group.
pub const GROUP: &str = "metrics.k8s.io";
/// Its one version.
pub const VERSION: &str = "v1beta1";
/// How long one node's summary may take.
const NODE_TIMEOUT: Duration = Duration::from_secs(5);
/// The largest summary read from a node.
const MAX_SUMMARY_BYTES: usize = 16 << 20;

/// The group's entry in `/apis`.
pub fn group_entry() -> Value {
    let gv = json!({"groupVersion": format!("{GROUP}/{VERSION}"), "version": VERSION});
    json!({"name": GROUP, "versions": [gv.clone()], "preferredVersion": gv})
}

/// `/apis/metrics.k8s.io/v1beta1`.
pub fn resource_list() -> Response {
    json_response(
        StatusCode::OK,
        json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": format!("{GROUP}/{VERSION}"),
               "resources": [
                   {"name": "nodes", "singularName": "", "namespaced": false, "kind": "NodeMetrics", "verbs": ["get", "list"]},
                   {"name": "pods", "singularName": "", "namespaced": true, "kind": "PodMetrics", "verbs": ["get", "list"]}]}),
    )
}

/// A Summary API quantity: CPU in nano-cores (`123n`), memory in KiB (`456Ki`), as
/// metrics-server writes them.
fn usage(stats: &Value) -> Value {
    let cpu = stats.field("/cpu/usageNanoCores").and_then(Value::as_u64).unwrap_or(0);
    let memory = stats.field("/memory/workingSetBytes").and_then(Value::as_u64).unwrap_or(0);
    json!({"cpu": format!("{cpu}n"), "memory": format!("{}Ki", memory / 1024)})
}

/// Every Ready-or-not node's summary that answers in time (a node that does not is left
/// out, as metrics-server leaves out one it could not scrape).
async fn summaries(state: &AppState) -> Result<Vec<(Value, Value)>, StatusError> {
    let nodes = state.store.list("nodes", None, &ListOptions::default()).await?.items;
    let asks = nodes.into_iter().map(|node| async move {
        let (client, mut url) = super::pod_log::node_endpoint(state, &node).ok()?;
        url.set_path("/stats/summary");
        let mut answer = client.get(url).timeout(NODE_TIMEOUT).send().await.ok()?;
        if !answer.status().is_success() {
            return None;
        }
        let mut body = Vec::new();
        while let Ok(Some(chunk)) = answer.chunk().await {
            if body.len() + chunk.len() > MAX_SUMMARY_BYTES {
                return None;
            }
            body.extend_from_slice(&chunk);
        }
        let summary: Value = serde_json::from_slice(&body).ok()?;
        Some((node, summary))
    });
    Ok(futures::future::join_all(asks).await.into_iter().flatten().collect())
}

/// The label and field selectors of a request, as metrics-server takes them: labels of the
/// node or pod as the API has it now, fields of its metadata (`metadata.name`,
/// `metadata.namespace`); any other field is a 400 naming it (metrics-server would match
/// it against nothing and answer an empty list).
fn selectors(query: &std::collections::HashMap<String, String>) -> Result<(LabelSelector, FieldSelector), StatusError> {
    let labels = LabelSelector::parse(query.get("labelSelector").map_or("", String::as_str))
        .map_err(|e| StatusError::bad_request(e.to_string()))?;
    let fields = FieldSelector::parse(query.get("fieldSelector").map_or("", String::as_str))
        .map_err(|e| StatusError::bad_request(e.to_string()))?;
    if let Some(path) = fields.paths().find(|p| !matches!(*p, "metadata.name" | "metadata.namespace")) {
        return Err(StatusError::bad_request(format!("field label not supported: {path}")));
    }
    Ok((labels, fields))
}

/// GET of `nodes[/name]` or `[namespaces/ns/]pods[/name]`.
pub(crate) async fn serve(
    state: &AppState,
    resource: &str,
    namespace: Option<&str>,
    name: Option<&str>,
    query: &std::collections::HashMap<String, String>,
) -> Result<Response, StatusError> {
    let (labels, fields) = selectors(query)?;
    let selected = |object: &Value| labels.matches(object) && fields.matches(object);
    let summaries = summaries(state).await?;
    let items: Vec<Value> = match resource {
        "nodes" => summaries
            .iter()
            .filter(|(node, _)| name.is_none_or(|n| node.field("/metadata/name").and_then(Value::as_str) == Some(n)))
            .filter(|(node, _)| selected(node))
            .filter_map(|(node, summary)| {
                let stats = summary.get("node")?;
                stats.get("cpu")?;
                Some(json!({
                    "metadata": {"name": node.field("/metadata/name"), "creationTimestamp": node.field("/metadata/creationTimestamp"),
                                 "labels": node.field("/metadata/labels").cloned().unwrap_or(json!({}))},
                    "timestamp": stats.field("/cpu/time"),
                    "window": stats.get("window"),
                    "usage": usage(stats),
                }))
            })
            .collect(),
        _ => {
            let mut items = Vec::new();
            for (_, summary) in &summaries {
                for pod in summary["pods"].as_array().into_iter().flatten() {
                    let (ns, pod_name) = (pod.field("/podRef/namespace").and_then(Value::as_str), pod.field("/podRef/name").and_then(Value::as_str));
                    let (Some(ns), Some(pod_name)) = (ns, pod_name) else { continue };
                    if namespace.is_some_and(|n| n != ns) || name.is_some_and(|n| n != pod_name) {
                        continue;
                    }
                    // The pod as the API has it now (its labels); one gone or replaced is left out.
                    let Ok(stored) = state.store.get(&ObjectKey::namespaced("pods", ns, pod_name)).await else { continue };
                    if stored.object.field("/metadata/uid") != pod.field("/podRef/uid") || !selected(&stored.object) {
                        continue;
                    }
                    let containers: Vec<Value> = pod["containers"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .map(|c| json!({"name": c["name"], "usage": usage(c)}))
                        .collect();
                    let time = pod["containers"][0].field("/cpu/time").cloned().unwrap_or(Value::Null);
                    items.push(json!({
                        "metadata": {"name": pod_name, "namespace": ns,
                                     "creationTimestamp": stored.object.field("/metadata/creationTimestamp"),
                                     "labels": stored.object.field("/metadata/labels").cloned().unwrap_or(json!({}))},
                        "timestamp": time,
                        "window": pod.get("window"),
                        "containers": containers,
                    }));
                }
            }
            items
        }
    };
    let kind = if resource == "nodes" { "NodeMetrics" } else { "PodMetrics" };
    if let Some(n) = name {
        let Some(item) = items.into_iter().next() else {
            let what = if resource == "nodes" { "nodemetrics" } else { "podmetrics" };
            return Err(StatusError::new(
                StatusCode::NOT_FOUND,
                "NotFound",
                format!("{what}.{GROUP} \"{n}\" not found"),
            ));
        };
        let mut item = item;
        item["kind"] = json!(kind);
        item["apiVersion"] = json!(format!("{GROUP}/{VERSION}"));
        return Ok(json_response(StatusCode::OK, item));
    }
    Ok(json_response(
        StatusCode::OK,
        json!({"kind": format!("{kind}List"), "apiVersion": format!("{GROUP}/{VERSION}"), "metadata": {}, "items": items}),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(pairs: &[(&str, &str)]) -> std::collections::HashMap<String, String> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    #[test]
    fn selectors_read_labels_and_metadata_fields() {
        let pod = json!({"metadata": {"name": "web-1", "namespace": "team", "labels": {"app": "web"}}});
        for (labels, fields, want) in [
            ("", "", true),
            ("app=web", "", true),
            ("app in (db)", "", false),
            ("", "metadata.name=web-1", true),
            ("app=web", "metadata.namespace!=team", false),
        ] {
            let (l, f) = selectors(&query(&[("labelSelector", labels), ("fieldSelector", fields)]))
                .unwrap_or_else(|e| panic!("{labels} {fields}: {e:?}"));
            assert_eq!(l.matches(&pod) && f.matches(&pod), want, "{labels} {fields}");
        }
    }

    #[test]
    fn a_selector_it_cannot_answer_is_a_400_naming_it() {
        let message = |q: &[(&str, &str)]| selectors(&query(q)).err().map(|e| e.message);
        assert_eq!(
            message(&[("fieldSelector", "spec.nodeName=n1")]).as_deref(),
            Some("field label not supported: spec.nodeName")
        );
        assert!(message(&[("labelSelector", "app in web")]).is_some_and(|m| m.contains("unable to parse requirement")));
    }

    #[test]
    fn usage_is_written_as_metrics_server_writes_it() {
        let stats = json!({"cpu": {"usageNanoCores": 1_234_567}, "memory": {"workingSetBytes": 10_485_760}});
        assert_eq!(usage(&stats), json!({"cpu": "1234567n", "memory": "10240Ki"}));
        assert_eq!(usage(&json!({})), json!({"cpu": "0n", "memory": "0Ki"}));
    }
}
