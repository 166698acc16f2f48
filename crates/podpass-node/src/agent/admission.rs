//! Pod admission on the node (kubelet: the eviction manager's `Admit`, then
//! `lifecycle.predicateAdmitHandler`'s `pods` resource of GeneralPredicates, and
//! `rejectPod`): under node pressure a pod is refused as upstream's eviction manager refuses
//! it (reason `Evicted`, "The node had condition: [DiskPressure]. "), and a pod bound to a
//! node that already runs `maxPods` active pods is not run. It is marked `Failed` with reason `OutOfpods` and the
//! kubelet's message, and a Warning event says so; nothing of it is prepared or started.
//! This bounds what one node does however many pods are bound to it (the scheduler counts
//! the same capacity, but a pod may name its node itself).

use k8s_openapi::api::core::v1::{Pod, PodStatus};
use podpass_api::taint::{Taint, Toleration};

use super::worker::Shared;

/// Admits a pod under the node's `pressure` (kubelet eviction manager `Admit`): nothing
/// refused without pressure; critical pods always admitted; under memory pressure alone a
/// pod that is not BestEffort, or a BestEffort one tolerating the memory-pressure taint;
/// under any other pressure nothing else.
pub(crate) fn admit_under_pressure(pod: &Pod, pressure: super::pressure::Pressure) -> Result<(), Rejection> {
    let conditions = pressure.names();
    if conditions.is_empty() || super::eviction_manager::is_critical(pod) {
        return Ok(());
    }
    if conditions == ["MemoryPressure"] {
        let spec = pod.spec.clone().unwrap_or_default();
        let best_effort = super::cgroups::qos_class(&spec) == super::cgroups::QosClass::BestEffort;
        // TaintToleration's ToleratesTaint against {node.kubernetes.io/memory-pressure:NoSchedule}.
        let taint = Taint { key: "node.kubernetes.io/memory-pressure", value: "", effect: "NoSchedule" };
        let tolerates = spec.tolerations.iter().flatten().any(|t| {
            fn field(f: &Option<String>) -> &str {
                f.as_deref().unwrap_or("")
            }
            let t = Toleration {
                key: field(&t.key),
                operator: field(&t.operator),
                value: field(&t.value),
                effect: field(&t.effect),
            };
            t.tolerates(&taint)
        });
        if !best_effort || tolerates {
            return Ok(());
        }
    }
    Err(Rejection { reason: EVICTED, message: format!("The node had condition: [{}]. ", conditions.join(" ")) })
}

/// kubelet: the eviction manager's `Reason`.
pub(crate) const EVICTED: &str = "Evicted";

/// kubelet: `lifecycle.OutOfPods`.
pub(crate) const OUT_OF_PODS: &str = "OutOfpods";

/// Why a pod was not admitted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Rejection {
    /// The status reason (`OutOfpods`).
    pub reason: &'static str,
    /// The kubelet's message, without the "Pod was rejected: " of the status.
    pub message: String,
}

/// Whether the pod has finished for good (phase `Succeeded` or `Failed`): it is not run,
/// and does not count against `maxPods`.
pub(crate) fn is_terminal(pod: &Pod) -> bool {
    matches!(pod.status.as_ref().and_then(|s| s.phase.as_deref()), Some("Succeeded" | "Failed"))
}

/// Admits one more pod beside `active` admitted, unfinished pods, under `max_pods`.
pub(crate) fn admit(active: usize, max_pods: u32) -> Result<(), Rejection> {
    let capacity = usize::try_from(max_pods).unwrap_or(usize::MAX);
    if active < capacity {
        return Ok(());
    }
    // kubelet: InsufficientResourceError.Error().
    Err(Rejection {
        reason: OUT_OF_PODS,
        message: format!("Node didn't have enough resource: pods, requested: 1, used: {active}, capacity: {capacity}"),
    })
}

/// Records the rejection (a Warning event) and posts the pod's status as the kubelet's
/// `rejectPod`: `Failed`, the reason, "Pod was rejected: " and the message.
pub(crate) async fn reject(shared: &Shared, pod: &Pod, rejection: &Rejection) {
    shared.events.record(pod, "", "Warning", rejection.reason, &rejection.message);
    let status = PodStatus {
        phase: Some("Failed".into()),
        reason: Some(rejection.reason.into()),
        message: Some(format!("Pod was rejected: {}", rejection.message)),
        ..Default::default()
    };
    if let Err(e) = super::worker::post_status(shared, pod, &status).await {
        tracing::warn!(pod = %crate::PodRef::of(pod), error = %e, "posting a rejected pod's status failed");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_node_admits_up_to_max_pods_with_the_kubelets_message() {
        assert_eq!(admit(0, 110), Ok(()));
        assert_eq!(admit(109, 110), Ok(()));
        let r = admit(110, 110).unwrap_err();
        assert_eq!(r.reason, "OutOfpods");
        assert_eq!(r.message, "Node didn't have enough resource: pods, requested: 1, used: 110, capacity: 110");
        assert!(admit(0, 0).is_err(), "maxPods 0 admits nothing");
    }

    #[test]
    fn under_pressure_pods_are_refused_as_the_kubelets_eviction_manager_refuses_them() {
        use super::super::pressure::Pressure;
        let pod = |spec: serde_json::Value| -> Pod {
            serde_json::from_value(serde_json::json!({"metadata": {"name": "p"}, "spec": spec}))
                .unwrap_or_else(|e| panic!("{e}"))
        };
        let best_effort = pod(serde_json::json!({"containers": [{"name": "a"}]}));
        let burstable =
            pod(serde_json::json!({"containers": [{"name": "a", "resources": {"requests": {"memory": "1Mi"}}}]}));
        let tolerant = pod(serde_json::json!({"containers": [{"name": "a"}],
            "tolerations": [{"key": "node.kubernetes.io/memory-pressure", "operator": "Exists", "effect": "NoSchedule"}]}));
        let critical = pod(serde_json::json!({"containers": [{"name": "a"}], "priority": 2_000_000_000}));
        let memory = Pressure { memory: true, ..Pressure::default() };
        let disk = Pressure { disk: true, ..Pressure::default() };
        assert_eq!(admit_under_pressure(&best_effort, Pressure::default()), Ok(()));
        assert_eq!(admit_under_pressure(&burstable, memory), Ok(()));
        assert_eq!(admit_under_pressure(&tolerant, memory), Ok(()));
        let r = admit_under_pressure(&best_effort, memory).unwrap_err();
        assert_eq!((r.reason, r.message.as_str()), ("Evicted", "The node had condition: [MemoryPressure]. "));
        let r = admit_under_pressure(&burstable, disk).unwrap_err();
        assert_eq!(r.message, "The node had condition: [DiskPressure]. ");
        let both = Pressure { memory: true, disk: true, pid: false };
        assert_eq!(
            admit_under_pressure(&tolerant, both).unwrap_err().message,
            "The node had condition: [MemoryPressure DiskPressure]. "
        );
        assert_eq!(admit_under_pressure(&critical, both), Ok(()));
    }

    #[test]
    fn finished_pods_are_terminal() {
        let with = |phase: &str| Pod {
            status: Some(PodStatus { phase: Some(phase.into()), ..Default::default() }),
            ..Default::default()
        };
        assert!(is_terminal(&with("Succeeded")) && is_terminal(&with("Failed")));
        assert!(!is_terminal(&with("Running")) && !is_terminal(&with("Pending")) && !is_terminal(&Pod::default()));
    }
}
