//! The Node authorizer's graph (plugin/pkg/auth/authorizer/node `graph`), kept from a pod
//! watch: which node each pod is bound to, and for each node which secrets, config maps
//! and service accounts its pods reference. An allow is then a map lookup; a lookup that
//! finds no edge is checked against the store before it refuses, so a pod created a moment
//! ago (its watch event not yet applied) is not refused, and a revocation (pod deleted or
//! moved) applies with the watch event.

use std::collections::HashMap;
use std::sync::RwLock;

use serde_json::Value;

use super::node::pod_refs;
use crate::field::Field;
use crate::server::informer::View;
use crate::store::EventType;

/// What the graph watches.
pub const RESOURCES: [&str; 1] = ["pods"];

/// An object a node's pods reference: (namespace, resource, name).
type Edge = (String, &'static str, String);
/// A pod's node and what it references.
type PodEntry = (String, Vec<(&'static str, String)>);

#[derive(Debug, Default)]
struct Graph {
    /// (namespace, pod name) → its node and what it references.
    pods: HashMap<(String, String), PodEntry>,
    /// node → referenced object → how many of its pods reference it.
    edges: HashMap<String, HashMap<Edge, u32>>,
}

impl Graph {
    fn remove(&mut self, id: &(String, String)) {
        let Some((node, refs)) = self.pods.remove(id) else { return };
        let Some(edges) = self.edges.get_mut(&node) else { return };
        for (resource, name) in refs {
            let edge = (id.0.clone(), resource, name);
            if let Some(n) = edges.get_mut(&edge) {
                *n -= 1;
                if *n == 0 {
                    edges.remove(&edge);
                }
            }
        }
        if edges.is_empty() {
            self.edges.remove(&node);
        }
    }

    fn put(&mut self, pod: &Value) {
        let namespace = pod.field("/metadata/namespace").and_then(Value::as_str).unwrap_or("").to_owned();
        let name = pod.field("/metadata/name").and_then(Value::as_str).unwrap_or("").to_owned();
        let id = (namespace, name);
        self.remove(&id);
        let node = pod.field("/spec/nodeName").and_then(Value::as_str).unwrap_or("");
        if node.is_empty() {
            return;
        }
        let mut refs = pod_refs(pod);
        refs.sort();
        refs.dedup();
        let edges = self.edges.entry(node.to_owned()).or_default();
        for (resource, name) in &refs {
            *edges.entry((id.0.clone(), resource, name.clone())).or_default() += 1;
        }
        self.pods.insert(id, (node.to_owned(), refs));
    }
}

/// The graph (see the module docs).
#[derive(Debug, Default)]
pub struct NodeGraph {
    graph: RwLock<Graph>,
}

impl View for NodeGraph {
    fn reset(&self, _resource: &'static str, items: Vec<Value>) {
        if let Ok(mut g) = self.graph.write() {
            *g = Graph::default();
            for pod in &items {
                g.put(pod);
            }
        }
    }

    fn apply(&self, _resource: &'static str, kind: EventType, object: Value) {
        if let Ok(mut g) = self.graph.write() {
            match kind {
                EventType::Deleted => {
                    let namespace = object.field("/metadata/namespace").and_then(Value::as_str).unwrap_or("");
                    let name = object.field("/metadata/name").and_then(Value::as_str).unwrap_or("");
                    g.remove(&(namespace.to_owned(), name.to_owned()));
                }
                EventType::Added | EventType::Modified => g.put(&object),
            }
        }
    }
}

impl NodeGraph {
    /// Whether the pod `namespace/name` is bound to `node`, as far as the graph knows.
    pub fn pod_on(&self, node: &str, namespace: &str, name: &str) -> bool {
        self.graph
            .read()
            .is_ok_and(|g| g.pods.get(&(namespace.to_owned(), name.to_owned())).is_some_and(|(n, _)| n == node))
    }

    /// Whether a pod on `node` references `resource` `namespace/name`, as far as the graph
    /// knows.
    pub fn references(&self, node: &str, namespace: &str, resource: &str, name: &str) -> bool {
        let Some(resource) = ["secrets", "configmaps", "serviceaccounts"].into_iter().find(|r| *r == resource) else {
            return false;
        };
        self.graph.read().is_ok_and(|g| {
            g.edges
                .get(node)
                .is_some_and(|edges| edges.contains_key(&(namespace.to_owned(), resource, name.to_owned())))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(name: &str, node: &str, secret: &str) -> Value {
        json!({"metadata": {"namespace": "team", "name": name},
               "spec": {"nodeName": node, "serviceAccountName": "app", "imagePullSecrets": [{"name": secret}],
                        "containers": [{"name": "c", "image": "i"}]}})
    }

    #[test]
    fn edges_follow_pods_and_are_counted() {
        let g = NodeGraph::default();
        g.apply("pods", EventType::Added, pod("a", "n1", "s"));
        g.apply("pods", EventType::Added, pod("b", "n1", "s"));
        assert!(g.pod_on("n1", "team", "a") && !g.pod_on("n2", "team", "a"));
        assert!(g.references("n1", "team", "secrets", "s"));
        assert!(g.references("n1", "team", "serviceaccounts", "app"));
        assert!(!g.references("n1", "other", "secrets", "s"));
        assert!(!g.references("n1", "team", "pods", "a"));
        // One of two pods referencing the secret goes: the edge stays; both: it goes.
        g.apply("pods", EventType::Deleted, pod("a", "n1", "s"));
        assert!(g.references("n1", "team", "secrets", "s"));
        g.apply("pods", EventType::Modified, pod("b", "n2", "s"));
        assert!(!g.references("n1", "team", "secrets", "s"));
        assert!(g.references("n2", "team", "secrets", "s"));
        g.reset("pods", vec![]);
        assert!(!g.references("n2", "team", "secrets", "s"));
    }
}
