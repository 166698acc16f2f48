//! The pods this node knows now, by namespace and name (the kubelet's pod manager
//! `GetPodByName`): what the pod watch last said of each, so a request naming a pod reaches
//! *that* pod — its UID, its containers' statuses — and never an earlier pod of the same
//! name (a recreated namespace's, or a deleted one's whose files are still on disk).

use std::collections::HashMap;
use std::sync::{Arc, PoisonError, RwLock};

use k8s_openapi::api::core::v1::Pod;

/// Pods by `(namespace, name)`.
#[derive(Debug, Default)]
pub(crate) struct KnownPods {
    pods: RwLock<HashMap<(String, String), Arc<Pod>>>,
}

fn key(pod: &Pod) -> Option<(String, String)> {
    Some((pod.metadata.namespace.clone()?, pod.metadata.name.clone()?))
}

impl KnownPods {
    /// The watch's latest word on `pod` (a newer pod of the same name replaces an older).
    pub(crate) fn upsert(&self, pod: &Pod) {
        if let Some(k) = key(pod) {
            self.pods.write().unwrap_or_else(PoisonError::into_inner).insert(k, Arc::new(pod.clone()));
        }
    }

    /// `pod` is gone: forgotten, unless the name now belongs to a newer pod.
    pub(crate) fn remove(&self, pod: &Pod) {
        let Some(k) = key(pod) else { return };
        let mut pods = self.pods.write().unwrap_or_else(PoisonError::into_inner);
        if pods.get(&k).is_some_and(|known| known.metadata.uid == pod.metadata.uid) {
            pods.remove(&k);
        }
    }

    /// The pod `namespace/name` as the node knows it now.
    pub(crate) fn get(&self, namespace: &str, name: &str) -> Option<Arc<Pod>> {
        let pods = self.pods.read().unwrap_or_else(PoisonError::into_inner);
        pods.get(&(namespace.to_owned(), name.to_owned())).cloned()
    }

    /// Every pod the node knows now.
    pub(crate) fn all(&self) -> Vec<Arc<Pod>> {
        self.pods.read().unwrap_or_else(PoisonError::into_inner).values().cloned().collect()
    }
}

/// Why a container has no log to read (the kubelet's `validateContainerLogStatus`
/// messages, answered 400).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum LogUnavailable {
    /// The pod has no such container.
    #[error("container {container:?} in pod {pod:?} is not available")]
    NoContainer { container: String, pod: String },
    /// `previous` asked, and no instance terminated before.
    #[error("previous terminated container {container:?} in pod {pod:?} not found")]
    NoPrevious { container: String, pod: String },
    /// Running, but no runtime ID yet.
    #[error("container {container:?} in pod {pod:?} is waiting to start - no logs yet")]
    NotStarted { container: String, pod: String },
    /// Terminated, without a runtime ID.
    #[error("container {container:?} in pod {pod:?} is terminated")]
    Terminated { container: String, pod: String },
    /// Waiting, for `reason` in the kubelet's words.
    #[error("container {container:?} in pod {pod:?} is waiting to start: {reason}")]
    Waiting { container: String, pod: String, reason: String },
}

/// The container whose log a request reads, as the kubelet's `validateContainerLogStatus`
/// picks it from the pod's status (its runtime ID, scheme stripped), or why there is none.
pub(crate) fn container_log_status(pod: &Pod, container: &str, previous: bool) -> Result<String, LogUnavailable> {
    let name = pod.metadata.name.clone().unwrap_or_default();
    let status = pod.status.as_ref();
    let found = status
        .into_iter()
        .flat_map(|s| {
            s.container_statuses
                .iter()
                .flatten()
                .chain(s.init_container_statuses.iter().flatten())
                .chain(s.ephemeral_container_statuses.iter().flatten())
        })
        .find(|s| s.name == container);
    let (container, pod) = (container.to_owned(), name);
    let Some(c) = found else {
        return Err(LogUnavailable::NoContainer { container, pod });
    };
    let id = |id: &Option<String>| -> Option<String> {
        let id = id.as_deref().filter(|i| !i.is_empty())?;
        Some(id.split_once("://").map_or(id, |(_, rest)| rest).to_owned())
    };
    let state = c.state.clone().unwrap_or_default();
    let last = c.last_state.as_ref().and_then(|l| l.terminated.as_ref()).and_then(|t| id(&t.container_id));
    if previous {
        return last.ok_or(LogUnavailable::NoPrevious { container, pod });
    }
    if state.running.is_some() {
        return id(&c.container_id).ok_or(LogUnavailable::NotStarted { container, pod });
    }
    if let Some(t) = &state.terminated {
        // The next instance did not start: the last one's log.
        return id(&t.container_id).or(last).ok_or(LogUnavailable::Terminated { container, pod });
    }
    if c.last_state.as_ref().and_then(|l| l.terminated.as_ref()).is_some() {
        return last.ok_or(LogUnavailable::Terminated { container, pod });
    }
    if let Some(w) = &state.waiting {
        let reason = match w.reason.as_deref().unwrap_or_default() {
            "ErrImagePull" => "image can't be pulled".to_owned(),
            "ImagePullBackOff" => "trying and failing to pull image".to_owned(),
            other => other.to_owned(),
        };
        return Err(LogUnavailable::Waiting { container, pod, reason });
    }
    Err(LogUnavailable::NotStarted { container, pod })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(uid: &str, status: serde_json::Value) -> Pod {
        serde_json::from_value(serde_json::json!({"metadata": {"namespace": "ns", "name": "web", "uid": uid},
            "spec": {"containers": [{"name": "app"}]}, "status": status}))
        .unwrap_or_default()
    }

    #[test]
    fn a_name_is_the_newest_pod_of_it_and_a_gone_pod_never_takes_a_newer_ones_name() {
        let known = KnownPods::default();
        let (old, new) = (pod("u1", serde_json::json!({})), pod("u2", serde_json::json!({})));
        known.upsert(&old);
        known.upsert(&new);
        known.remove(&old);
        assert_eq!(known.get("ns", "web").and_then(|p| p.metadata.uid.clone()).as_deref(), Some("u2"));
        known.remove(&new);
        assert!(known.get("ns", "web").is_none());
    }

    #[test]
    fn log_requests_are_decided_from_the_status_as_the_kubelets() {
        let waiting = pod(
            "u",
            serde_json::json!({"containerStatuses": [{"name": "app", "image": "", "imageID": "",
            "ready": false, "restartCount": 0, "state": {"waiting": {"reason": "ErrImagePull"}}}]}),
        );
        assert_eq!(
            container_log_status(&waiting, "app", false).unwrap_err().to_string(),
            "container \"app\" in pod \"web\" is waiting to start: image can't be pulled"
        );
        assert_eq!(
            container_log_status(&waiting, "app", true).unwrap_err().to_string(),
            "previous terminated container \"app\" in pod \"web\" not found"
        );
        assert_eq!(
            container_log_status(&waiting, "other", false).unwrap_err().to_string(),
            "container \"other\" in pod \"web\" is not available"
        );
        let restarted = pod(
            "u",
            serde_json::json!({"containerStatuses": [{"name": "app", "image": "", "imageID": "",
            "ready": true, "restartCount": 1, "state": {"running": {}}, "containerID": "containerd://b",
            "lastState": {"terminated": {"exitCode": 1, "containerID": "containerd://a"}}}]}),
        );
        assert_eq!(container_log_status(&restarted, "app", false).as_deref(), Ok("b"));
        assert_eq!(container_log_status(&restarted, "app", true).as_deref(), Ok("a"));
        let backing_off = pod(
            "u",
            serde_json::json!({"containerStatuses": [{"name": "app", "image": "", "imageID": "",
            "ready": false, "restartCount": 3, "state": {"waiting": {"reason": "CrashLoopBackOff"}},
            "lastState": {"terminated": {"exitCode": 1, "containerID": "containerd://c"}}}]}),
        );
        assert_eq!(container_log_status(&backing_off, "app", false).as_deref(), Ok("c"), "the last instance's");
        let creating = pod(
            "u",
            serde_json::json!({"containerStatuses": [{"name": "app", "image": "", "imageID": "",
            "ready": false, "restartCount": 0, "state": {"waiting": {"reason": "ContainerCreating"}}}]}),
        );
        assert_eq!(
            container_log_status(&creating, "app", false).unwrap_err().to_string(),
            "container \"app\" in pod \"web\" is waiting to start: ContainerCreating"
        );
    }
}
