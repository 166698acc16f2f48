//! Pod admission on the node (kubelet: `lifecycle.predicateAdmitHandler`, the `pods`
//! resource of GeneralPredicates, and `rejectPod`): a pod bound to a node that already runs
//! `maxPods` active pods is not run. It is marked `Failed` with reason `OutOfpods` and the
//! kubelet's message, and a Warning event says so; nothing of it is prepared or started.
//! This bounds what one node does however many pods are bound to it (the scheduler counts
//! the same capacity, but a pod may name its node itself).

use k8s_openapi::api::core::v1::{Pod, PodStatus};

use super::worker::Shared;

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
    fn finished_pods_are_terminal() {
        let with = |phase: &str| Pod {
            status: Some(PodStatus { phase: Some(phase.into()), ..Default::default() }),
            ..Default::default()
        };
        assert!(is_terminal(&with("Succeeded")) && is_terminal(&with("Failed")));
        assert!(!is_terminal(&with("Running")) && !is_terminal(&with("Pending")) && !is_terminal(&Pod::default()));
    }
}
