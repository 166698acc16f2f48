//! Ephemeral containers (kubelet `SyncPod` step 5, KEP-277): a container added to a running
//! pod through `pods/ephemeralcontainers` (`kubectl debug`) runs once in the pod's sandbox —
//! never restarted, never killed for a spec change — on an image EnsureImageExists allowed
//! for this pod, as every container's, and under the same security context handling. With a
//! `targetContainerName` it joins that container's process namespace.
//!
//! They are started whenever the sandbox is ready, before init containers finish (upstream
//! starts them first so an init container can be debugged), and do not count toward the
//! pod's phase or readiness.

use std::collections::HashMap;
use tokio::time::Instant;

use k8s_openapi::api::core::v1::{Container, Pod};

use super::containers::{ImageCheck, PodRuntime, RuntimeSync, Sandbox, nanos_to_time, start, terminated};
use super::status::{RunPhase, RunState};
use crate::runtime::{CONTAINER_EXITED, CONTAINER_RUNNING, RuntimeError};

/// The ephemeral containers of `pod`, as the containers they run as (the fields are the
/// same; `targetContainerName` is returned beside).
pub(crate) fn of(pod: &Pod) -> Vec<(Container, Option<String>)> {
    let list = pod.spec.as_ref().and_then(|s| s.ephemeral_containers.as_ref());
    list.into_iter()
        .flatten()
        .filter_map(|e| {
            let value = serde_json::to_value(e).ok()?;
            let container: Container = serde_json::from_value(value).ok()?;
            Some((container, e.target_container_name.clone().filter(|t| !t.is_empty())))
        })
        .collect()
}

/// The events' field path of an ephemeral container.
pub(crate) fn field_path(name: &str) -> String {
    format!("spec.ephemeralContainers{{{name}}}")
}

/// Starts each ephemeral container not started yet (once its image is allowed) and reports
/// each one's state under `(false, name)` — names are unique across all of a pod's
/// containers.
pub(super) async fn sync(
    rt: &PodRuntime,
    pod: &Pod,
    images: &HashMap<(bool, String), ImageCheck>,
    sandbox: &Sandbox<'_>,
    existing: &HashMap<String, crate::runtime::Container>,
    out: &mut RuntimeSync,
    sources: &dyn crate::volumes::ProjectionSources,
) -> Result<(), RuntimeError> {
    for (c, target) in of(pod) {
        let key = (false, c.name.clone());
        let mut run = RunState {
            id: String::new(),
            image_id: String::new(),
            restart_count: 0,
            phase: RunPhase::Waiting { reason: "ContainerCreating".into(), message: None },
            last_terminated: None,
            probes: Default::default(),
        };
        if let Some(found) = existing.get(&c.name) {
            let status = rt.cri.container_status(&found.id).await?.unwrap_or_default();
            run.id = format!("containerd://{}", found.id);
            run.image_id = status.image_ref.clone();
            run.phase = match status.state {
                CONTAINER_RUNNING => RunPhase::Running { started: nanos_to_time(status.started_at) },
                CONTAINER_EXITED => RunPhase::Terminated(terminated(&status, &run.id)),
                // Created but not started (an agent stopped in between): start it, once.
                _ => match rt.cri.start_container(&found.id).await {
                    Ok(()) => RunPhase::Running { started: None },
                    Err(e) => super::sync_error::SyncError::RunContainer(e.to_string()).waiting(),
                },
            };
            out.states.insert(key, run);
            continue;
        }
        match images.get(&key) {
            Some(ImageCheck::Allowed { image_ref, checked_now: true }) => {
                let target_id = target.as_ref().and_then(|t| existing.get(t)).map(|t| t.id.clone());
                let path = field_path(&c.name);
                match start(rt, pod, &c, (0, image_ref), sandbox, sources, target_id.as_deref()).await {
                    Ok(id) => {
                        run.id = format!("containerd://{id}");
                        run.image_id = image_ref.clone();
                        run.phase = RunPhase::Running { started: None };
                        out.started.push(key.clone());
                        out.events.push((path.clone(), "Normal", "Created", format!("Created container {}", c.name)));
                        out.events.push((path, "Normal", "Started", format!("Started container {}", c.name)));
                    }
                    Err(error) => {
                        out.events.push((path, "Warning", "Failed", format!("Error: {error}")));
                        run.phase = error.waiting();
                        out.next = Some(Instant::now() + super::containers::BACKOFF_FIRST);
                    }
                }
            }
            // Allowed once, not checked for this start: the worker checks it again at once.
            Some(ImageCheck::Allowed { .. }) => out.next = Some(Instant::now()),
            Some(ImageCheck::Refused(error)) => run.phase = error.waiting(),
            None => {}
        }
        out.states.insert(key, run);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ephemeral_containers_run_as_containers_with_their_target_beside() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web"},
            "spec": {"containers": [{"name": "app", "image": "a"}],
                     "ephemeralContainers": [{"name": "debugger", "image": "busybox", "command": ["sh"],
                                              "targetContainerName": "app", "stdin": true}]}
        }))
        .unwrap_or_default();
        let list = of(&pod);
        assert_eq!(list.len(), 1);
        let (c, target) = &list[0];
        assert_eq!((c.name.as_str(), c.image.as_deref(), c.stdin), ("debugger", Some("busybox"), Some(true)));
        assert_eq!(target.as_deref(), Some("app"));
        assert_eq!(field_path("debugger"), "spec.ephemeralContainers{debugger}");
    }
}
