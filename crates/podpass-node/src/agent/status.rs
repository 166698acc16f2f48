//! The pod status the agent posts, as a pure function of the pod and what the agent did
//! for it. podpass runs no containers, so nothing here claims one runs: the phase stays
//! `Pending`, every container is `waiting` with the kubelet's reason (`ContainerCreating`
//! while preparing or once prepared, `PodInitializing` behind an init container,
//! `ErrImagePull`, `ImagePullBackOff`, `ErrImageNeverPull`, …), and the condition
//! [`PREPARED_CONDITION`] says whether every image is usable and every volume written
//! (readiness-gate style: a pod may list it in `spec.readinessGates`).

use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateWaiting, ContainerStatus, Pod, PodCondition, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

/// The condition type podpass owns on each pod it prepared.
pub const PREPARED_CONDITION: &str = "podpass.dev/Prepared";

/// What the agent knows of one container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ContainerOutcome {
    /// Not tried yet (or its image is being ensured).
    Preparing,
    /// Behind an init container that is not prepared.
    Initializing,
    /// The image may be used by this pod.
    ImageReady {
        /// The image ID the container would run.
        image_ref: String,
    },
    /// The image may not be used (yet): the kubelet's waiting reason and message.
    Failed {
        /// `ErrImagePull`, `ImagePullBackOff`, `ErrImageNeverPull`, `InvalidImageName`, …
        reason: String,
        /// The message.
        message: String,
    },
}

/// One container as the status needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerReport {
    /// Its name.
    pub name: String,
    /// `spec.containers[].image`.
    pub image: String,
    /// An init container.
    pub init: bool,
    /// What happened.
    pub outcome: ContainerOutcome,
}

/// Whether the pod's volumes are written (`Err`: the aggregated error).
pub type VolumesOutcome = Result<(), String>;

/// A waiting container's message once its image is ready: honest about what podpass does.
pub const PREPARED_MESSAGE: &str = "image ready and volumes written; podpass runs no containers";

fn waiting(r: &ContainerReport, volumes_ok: bool) -> ContainerStateWaiting {
    let (reason, message) = match &r.outcome {
        ContainerOutcome::Preparing => ("ContainerCreating", None),
        ContainerOutcome::Initializing => ("PodInitializing", None),
        ContainerOutcome::ImageReady { .. } if volumes_ok => ("ContainerCreating", Some(PREPARED_MESSAGE.to_owned())),
        ContainerOutcome::ImageReady { .. } => ("ContainerCreating", None),
        ContainerOutcome::Failed { reason, message } => (reason.as_str(), Some(message.clone())),
    };
    ContainerStateWaiting { reason: Some(reason.to_owned()), message }
}

fn container_status(r: &ContainerReport, volumes_ok: bool) -> ContainerStatus {
    ContainerStatus {
        name: r.name.clone(),
        image: r.image.clone(),
        image_id: String::new(),
        ready: false,
        restart_count: 0,
        started: Some(false),
        state: Some(ContainerState { waiting: Some(waiting(r, volumes_ok)), ..Default::default() }),
        ..Default::default()
    }
}

fn condition(type_: &str, ok: bool, reason: Option<&str>, message: Option<String>) -> PodCondition {
    PodCondition {
        type_: type_.to_owned(),
        status: if ok { "True" } else { "False" }.to_owned(),
        reason: reason.map(str::to_owned),
        message,
        ..Default::default()
    }
}

/// The status for `pod`: conditions the agent does not own are kept; a condition keeps its
/// `lastTransitionTime` while its status stays the same; `startTime` is set once.
pub fn pod_status(pod: &Pod, containers: &[ContainerReport], volumes: &VolumesOutcome, now: &Time) -> PodStatus {
    let old = pod.status.clone().unwrap_or_default();
    let volumes_ok = volumes.is_ok();
    let names =
        |init: bool| -> Vec<&str> { containers.iter().filter(|c| c.init == init).map(|c| c.name.as_str()).collect() };
    let (init_names, names) = (names(true), names(false));
    let not_ready = format!("containers with unready status: [{}]", names.join(" "));
    let mut ours = vec![
        if init_names.is_empty() {
            condition("Initialized", true, None, None)
        } else {
            condition(
                "Initialized",
                false,
                Some("ContainersNotInitialized"),
                Some(format!("containers with incomplete status: [{}]", init_names.join(" "))),
            )
        },
        condition("Ready", false, Some("ContainersNotReady"), Some(not_ready.clone())),
        condition("ContainersReady", false, Some("ContainersNotReady"), Some(not_ready)),
    ];
    let failed: Vec<String> = containers
        .iter()
        .filter_map(|c| match &c.outcome {
            ContainerOutcome::Failed { reason, .. } => Some(format!("{}: {reason}", c.name)),
            _ => None,
        })
        .collect();
    let images_ready = containers.iter().all(|c| matches!(c.outcome, ContainerOutcome::ImageReady { .. }));
    ours.push(match (&volumes, images_ready) {
        (Ok(()), true) => condition(
            PREPARED_CONDITION,
            true,
            Some("ImagesAndVolumesReady"),
            Some("every image may be used by this pod and every volume is written".into()),
        ),
        (Err(e), _) => condition(PREPARED_CONDITION, false, Some("VolumesNotWritten"), Some(e.clone())),
        (Ok(()), false) if !failed.is_empty() => {
            condition(PREPARED_CONDITION, false, Some("ImagesNotReady"), Some(failed.join(", ")))
        }
        (Ok(()), false) => condition(PREPARED_CONDITION, false, Some("Preparing"), None),
    });
    let mut conditions: Vec<PodCondition> = old
        .conditions
        .clone()
        .unwrap_or_default()
        .into_iter()
        .filter(|c| !ours.iter().any(|o| o.type_ == c.type_))
        .collect();
    for mut c in ours {
        let previous = old.conditions.iter().flatten().find(|p| p.type_ == c.type_);
        c.last_transition_time = match previous {
            Some(p) if p.status == c.status => p.last_transition_time.clone().or_else(|| Some(now.clone())),
            _ => Some(now.clone()),
        };
        conditions.push(c);
    }
    let statuses = |init: bool| -> Option<Vec<ContainerStatus>> {
        let list: Vec<ContainerStatus> =
            containers.iter().filter(|c| c.init == init).map(|c| container_status(c, volumes_ok)).collect();
        (!list.is_empty()).then_some(list)
    };
    PodStatus {
        phase: Some("Pending".into()),
        conditions: Some(conditions),
        container_statuses: statuses(false),
        init_container_statuses: statuses(true),
        start_time: old.start_time.clone().or_else(|| Some(now.clone())),
        host_ip: old.host_ip.clone(),
        host_ips: old.host_ips.clone(),
        qos_class: old.qos_class.clone(),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::jiff::Timestamp;

    fn t(s: i64) -> Time {
        Time(Timestamp::from_second(s).unwrap_or_else(|e| panic!("{e}")))
    }

    fn report(name: &str, init: bool, outcome: ContainerOutcome) -> ContainerReport {
        ContainerReport { name: name.into(), image: format!("reg/{name}:1"), init, outcome }
    }

    fn cond<'a>(s: &'a PodStatus, type_: &str) -> &'a PodCondition {
        s.conditions.iter().flatten().find(|c| c.type_ == type_).unwrap_or_else(|| panic!("no {type_}"))
    }

    fn reason(s: &ContainerStatus) -> &str {
        s.state.as_ref().and_then(|st| st.waiting.as_ref()).and_then(|w| w.reason.as_deref()).unwrap_or_default()
    }

    #[test]
    fn failures_show_the_kubelet_reasons_and_nothing_claims_to_run() {
        let pod = Pod {
            status: Some(PodStatus {
                conditions: Some(vec![PodCondition {
                    type_: "PodScheduled".into(),
                    status: "True".into(),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        };
        let containers = [
            report("init", true, ContainerOutcome::ImageReady { image_ref: "sha256:1".into() }),
            report(
                "app",
                false,
                ContainerOutcome::Failed { reason: "ErrImagePull".into(), message: "unauthorized".into() },
            ),
            report("side", false, ContainerOutcome::Preparing),
        ];
        let s = pod_status(&pod, &containers, &Ok(()), &t(100));
        assert_eq!(s.phase.as_deref(), Some("Pending"));
        let statuses = s.container_statuses.clone().unwrap_or_default();
        assert_eq!(statuses.iter().map(reason).collect::<Vec<_>>(), ["ErrImagePull", "ContainerCreating"]);
        assert!(statuses.iter().all(|c| !c.ready && c.started == Some(false) && c.image_id.is_empty()));
        assert_eq!(s.init_container_statuses.as_ref().map(Vec::len), Some(1));
        assert_eq!(cond(&s, "PodScheduled").status, "True", "foreign conditions are kept");
        assert_eq!(cond(&s, "Ready").message.as_deref(), Some("containers with unready status: [app side]"));
        assert_eq!(cond(&s, "Initialized").message.as_deref(), Some("containers with incomplete status: [init]"));
        let prepared = cond(&s, PREPARED_CONDITION);
        assert_eq!((prepared.status.as_str(), prepared.reason.as_deref()), ("False", Some("ImagesNotReady")));
        assert_eq!(prepared.message.as_deref(), Some("app: ErrImagePull"));
        assert_eq!(s.start_time, Some(t(100)));
    }

    #[test]
    fn prepared_only_when_every_image_and_volume_is_and_transitions_keep_their_time() {
        let mut pod = Pod::default();
        let ready = [report("app", false, ContainerOutcome::ImageReady { image_ref: "sha256:1".into() })];
        let s1 = pod_status(&pod, &ready, &Err("configmap \"x\" not found".into()), &t(100));
        assert_eq!(cond(&s1, PREPARED_CONDITION).reason.as_deref(), Some("VolumesNotWritten"));
        pod.status = Some(s1.clone());
        let s2 = pod_status(&pod, &ready, &Ok(()), &t(200));
        let c = cond(&s2, PREPARED_CONDITION);
        assert_eq!((c.status.as_str(), c.last_transition_time.clone()), ("True", Some(t(200))));
        assert_eq!(cond(&s2, "Ready").last_transition_time, Some(t(100)), "unchanged: time kept");
        assert_eq!(s2.start_time, Some(t(100)));
        let waiting = s2.container_statuses.as_ref().and_then(|c| c[0].state.clone()).and_then(|s| s.waiting);
        assert_eq!(waiting.and_then(|w| w.message).as_deref(), Some(PREPARED_MESSAGE));
        pod.status = Some(s2.clone());
        assert_eq!(pod_status(&pod, &ready, &Ok(()), &t(300)), s2, "a steady pod is not posted again");
        assert_eq!(cond(&s2, "Initialized").status, "True", "no init containers");
    }
}
