//! `pods/log` (pkg/registry/core/pod/rest `LogREST`): the container's output, read from the
//! pod's node — its `InternalIP` and `daemonEndpoints.kubeletEndpoint.Port` — at
//! `/containerLogs/{namespace}/{pod}/{container}` over HTTPS with the server's kubelet client
//! certificate, and streamed back (`follow` included). The node authorizes the server as
//! `get nodes/proxy`.

use std::collections::HashMap;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use crate::field::Field;
use crate::server::AppState;
use crate::server::status::StatusError;
use crate::store::ObjectKey;

/// The query parameters passed on to the node (`PodLogOptions`).
const FORWARDED: [&str; 7] =
    ["follow", "previous", "timestamps", "tailLines", "limitBytes", "sinceSeconds", "sinceTime"];

fn names(pod: &Value, list: &str) -> Vec<String> {
    pod.field(&format!("/spec/{list}"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|c| c.get("name").and_then(Value::as_str).map(str::to_owned))
        .collect()
}

/// The container a log request names, or upstream's 400 (`a container name must be
/// specified for pod web, choose one of: [a b]`, `container x is not valid for pod web`).
pub(super) fn container(pod: &Value, name: &str, asked: Option<&str>) -> Result<String, StatusError> {
    let (containers, inits) = (names(pod, "containers"), names(pod, "initContainers"));
    let ephemeral = names(pod, "ephemeralContainers");
    match asked {
        Some(c) if containers.iter().chain(&inits).chain(&ephemeral).any(|n| n == c) => Ok(c.to_owned()),
        Some(c) => Err(StatusError::bad_request(format!("container {c} is not valid for pod {name}"))),
        None if containers.len() == 1 => Ok(containers[0].clone()),
        None => {
            let mut message =
                format!("a container name must be specified for pod {name}, choose one of: [{}]", containers.join(" "));
            if !inits.is_empty() {
                message.push_str(&format!(" or one of the init containers: [{}]", inits.join(" ")));
            }
            if !ephemeral.is_empty() {
                message.push_str(&format!(" or one of the ephemeral containers: [{}]", ephemeral.join(" ")));
            }
            Err(StatusError::bad_request(message))
        }
    }
}

/// The kubelet client, the base URL of `pod`'s node (its `InternalIP`, else `ExternalIP`,
/// else `Hostname`, and `daemonEndpoints.kubeletEndpoint.Port`) and the node's name.
pub(super) async fn node_url(
    state: &AppState,
    pod: &Value,
    name: &str,
) -> Result<(reqwest::Client, reqwest::Url, String), StatusError> {
    let node = pod.field("/spec/nodeName").and_then(Value::as_str).unwrap_or_default().to_owned();
    if node.is_empty() {
        return Err(StatusError::bad_request(format!("pod {name} does not have a host assigned")));
    }
    let node_obj = state.store.get(&ObjectKey::cluster("nodes", &node)).await?.object;
    let (client, url) = node_endpoint(state, &node_obj)?;
    Ok((client, url, node))
}

/// The kubelet client and the base URL of Node `node_obj`.
pub(super) fn node_endpoint(
    state: &AppState,
    node_obj: &Value,
) -> Result<(reqwest::Client, reqwest::Url), StatusError> {
    let node = node_obj.field("/metadata/name").and_then(Value::as_str).unwrap_or_default();
    let addresses = node_obj.field("/status/addresses").and_then(Value::as_array).cloned().unwrap_or_default();
    let address = ["InternalIP", "ExternalIP", "Hostname"]
        .iter()
        .find_map(|kind| addresses.iter().find(|a| a["type"] == *kind).and_then(|a| a["address"].as_str()))
        .unwrap_or_default()
        .to_owned();
    let port = node_obj.field("/status/daemonEndpoints/kubeletEndpoint/Port").and_then(Value::as_i64).unwrap_or(0);
    if address.is_empty() || port <= 0 {
        return Err(StatusError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "ServiceUnavailable",
            format!("node {node} serves no container logs or streams (no address or port in its status)"),
        ));
    }
    let Some(client) = &state.kubelet_client else {
        return Err(StatusError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "ServiceUnavailable",
            "this API server has no kubelet client certificate (its serving certificate is not the data dir's)",
        ));
    };
    let host = if address.contains(':') { format!("[{address}]") } else { address };
    let url = reqwest::Url::parse(&format!("https://{host}:{port}/"))
        .map_err(|e| StatusError::internal(format!("node address: {e}")))?;
    Ok((client.clone(), url))
}

/// An error answer of the node, as the API server's (its status and first 4 KiB).
pub(super) async fn node_refusal(answer: reqwest::Response) -> StatusError {
    let status = answer.status();
    let text = answer.text().await.unwrap_or_default();
    let code = StatusCode::from_u16(status.as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
    let reason = match code {
        StatusCode::BAD_REQUEST => "BadRequest",
        StatusCode::NOT_FOUND => "NotFound",
        StatusCode::FORBIDDEN => "Forbidden",
        StatusCode::TOO_MANY_REQUESTS => "TooManyRequests",
        _ => "InternalError",
    };
    StatusError::new(code, reason, text.chars().take(4096).collect::<String>())
}

/// GET `pods/{name}/log`.
pub(super) async fn get(
    state: &AppState,
    ns: &str,
    name: &str,
    query: &HashMap<String, String>,
) -> Result<Response, StatusError> {
    let pod = state.store.get(&ObjectKey::namespaced("pods", ns, name)).await?.object;
    let container = container(&pod, name, query.get("container").map(String::as_str))?;
    let (client, mut url, node) = node_url(state, &pod, name).await?;
    url.set_path(&format!("/containerLogs/{ns}/{name}/{container}"));
    for key in FORWARDED {
        if let Some(v) = query.get(key) {
            url.query_pairs_mut().append_pair(key, v);
        }
    }
    let follow = query.get("follow").is_some_and(|v| v == "true" || v == "1");
    let mut request = client.get(url);
    if !follow {
        request = request.timeout(std::time::Duration::from_secs(60));
    }
    let answer = request.send().await.map_err(|e| {
        StatusError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "ServiceUnavailable",
            format!("reading logs from node {node}: {e}"),
        )
    })?;
    if !answer.status().is_success() {
        return Err(node_refusal(answer).await);
    }
    let body = axum::body::Body::from_stream(answer.bytes_stream());
    Ok((StatusCode::OK, [(axum::http::header::CONTENT_TYPE, "text/plain")], body).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_container_is_chosen_as_upstream() {
        let one = json!({"spec": {"containers": [{"name": "app"}]}});
        assert_eq!(container(&one, "web", None).unwrap(), "app");
        let two = json!({"spec": {"containers": [{"name": "a"}, {"name": "b"}], "initContainers": [{"name": "i"}]}});
        assert_eq!(
            container(&two, "web", None).unwrap_err().message,
            "a container name must be specified for pod web, choose one of: [a b] or one of the init containers: [i]"
        );
        assert_eq!(container(&two, "web", Some("i")).unwrap(), "i");
        assert_eq!(container(&two, "web", Some("x")).unwrap_err().message, "container x is not valid for pod web");
        let debugged =
            json!({"spec": {"containers": [{"name": "a"}, {"name": "b"}], "ephemeralContainers": [{"name": "dbg"}]}});
        assert_eq!(container(&debugged, "web", Some("dbg")).unwrap(), "dbg");
        assert!(
            container(&debugged, "web", None)
                .unwrap_err()
                .message
                .ends_with(" or one of the ephemeral containers: [dbg]")
        );
    }
}
