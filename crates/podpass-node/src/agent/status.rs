//! The pod status the agent posts, as a pure function of the pod and what the agent did
//! for it. A container not (yet) in the runtime is `waiting` with the kubelet's reason
//! (`ContainerCreating` while preparing, `PodInitializing` behind an init container,
//! `ErrImagePull`, `ImagePullBackOff`, `ErrImageNeverPull`, …); one in the runtime shows
//! its state (running, terminated with exit code and reason, or waiting in
//! `CrashLoopBackOff`), restart count and IDs, and the phase and conditions follow the
//! kubelet's `getPhase`. On a preparation-only node (no runtime) nothing claims to run and
//! the phase stays `Pending`. The condition [`PREPARED_CONDITION`] says whether every image
//! is usable and every volume written (readiness-gate style: a pod may list it in
//! `spec.readinessGates`).

use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStateWaiting, ContainerStatus, HostIP,
    Pod, PodCondition, PodIP, PodStatus,
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
    /// The image may not be used (yet): the waiting reason and message are the error's.
    Failed(super::sync_error::SyncError),
    /// In the runtime.
    Run(Box<RunState>),
}

/// A container in the runtime.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunState {
    /// `containerd://<id>` (empty until created).
    pub id: String,
    /// The image it runs.
    pub image_id: String,
    /// Restarts so far.
    pub restart_count: i32,
    /// What it does now.
    pub phase: RunPhase,
    /// How it ended last time, when it was restarted.
    pub last_terminated: Option<Terminated>,
    /// What its probes say, while it runs.
    pub probes: ProbeView,
}

/// A running container's probes as its status shows them (no probes: ready and started).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProbeView {
    /// Its readiness probe succeeded (or it has none).
    pub ready: bool,
    /// Its startup probe succeeded (or it has none).
    pub started: bool,
}

impl Default for ProbeView {
    fn default() -> Self {
        Self { ready: true, started: true }
    }
}

/// A container's state in the runtime.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunPhase {
    /// Not running: `ContainerCreating`, `CrashLoopBackOff`, `CreateContainerConfigError`, …
    Waiting {
        /// The reason.
        reason: String,
        /// The message.
        message: Option<String>,
    },
    /// Running since.
    Running {
        /// Started at.
        started: Option<Time>,
    },
    /// Exited, not to be started again.
    Terminated(Terminated),
}

/// How a container ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Terminated {
    /// Exit code.
    pub exit_code: i32,
    /// `Completed`, `Error`, `OOMKilled`.
    pub reason: String,
    /// The runtime's message.
    pub message: Option<String>,
    /// Started at.
    pub started: Option<Time>,
    /// Finished at.
    pub finished: Option<Time>,
    /// `containerd://<id>`.
    pub container_id: String,
}

impl Terminated {
    /// As the API writes it.
    pub(crate) fn to_api(&self) -> ContainerStateTerminated {
        self.state()
    }

    fn state(&self) -> ContainerStateTerminated {
        ContainerStateTerminated {
            exit_code: self.exit_code,
            reason: Some(self.reason.clone()),
            message: self.message.clone(),
            started_at: self.started.clone(),
            finished_at: self.finished.clone(),
            container_id: Some(self.container_id.clone()),
            ..Default::default()
        }
    }
}

/// What the runtime says of the pod as a whole (none on a preparation-only node).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodRuntimeView {
    /// The sandbox's IP.
    pub pod_ip: Option<String>,
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

/// The pod's volumes are not all written: every volume's error, joined as the kubelet's
/// `FailedMount` event says them.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct VolumesNotWritten(pub String);

/// Whether the pod's volumes are written.
pub type VolumesOutcome = Result<(), VolumesNotWritten>;

/// A waiting container's message once its image is ready: honest about what podpass does.
pub const PREPARED_MESSAGE: &str = "image ready and volumes written; podpass runs no containers";

fn waiting(r: &ContainerReport, volumes_ok: bool) -> ContainerStateWaiting {
    let (reason, message) = match &r.outcome {
        ContainerOutcome::Preparing => ("ContainerCreating", None),
        ContainerOutcome::Initializing => ("PodInitializing", None),
        ContainerOutcome::ImageReady { .. } if volumes_ok => ("ContainerCreating", Some(PREPARED_MESSAGE.to_owned())),
        ContainerOutcome::ImageReady { .. } => ("ContainerCreating", None),
        ContainerOutcome::Failed(error) => (error.reason(), Some(error.to_string())),
        // Handled by container_status before it asks.
        ContainerOutcome::Run(_) => ("ContainerCreating", None),
    };
    ContainerStateWaiting { reason: Some(reason.to_owned()), message }
}

fn container_status(r: &ContainerReport, volumes_ok: bool) -> ContainerStatus {
    if let ContainerOutcome::Run(run) = &r.outcome {
        let (state, running) = match &run.phase {
            RunPhase::Waiting { reason, message } => (
                ContainerState {
                    waiting: Some(ContainerStateWaiting { reason: Some(reason.clone()), message: message.clone() }),
                    ..Default::default()
                },
                false,
            ),
            RunPhase::Running { started } => (
                ContainerState {
                    running: Some(ContainerStateRunning { started_at: started.clone() }),
                    ..Default::default()
                },
                true,
            ),
            RunPhase::Terminated(t) => (ContainerState { terminated: Some(t.state()), ..Default::default() }, false),
        };
        return ContainerStatus {
            name: r.name.clone(),
            image: r.image.clone(),
            image_id: run.image_id.clone(),
            container_id: (!run.id.is_empty()).then(|| run.id.clone()),
            // Ready once running and its readiness probe (if any) succeeded; a plain init
            // container never is. Started once its startup probe (if any) succeeded.
            ready: running && !r.init && run.probes.ready,
            restart_count: run.restart_count,
            started: Some(running && run.probes.started),
            state: Some(state),
            last_state: run
                .last_terminated
                .as_ref()
                .map(|t| ContainerState { terminated: Some(t.state()), ..Default::default() }),
            ..Default::default()
        };
    }
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

/// Where a container stands, for the phase and the conditions.
fn run_of(c: &ContainerReport) -> Option<&RunState> {
    match &c.outcome {
        ContainerOutcome::Run(run) => Some(run),
        _ => None,
    }
}

/// Running, and its readiness probe (if any) succeeded: what `ContainersReady` counts.
fn ready(c: &ContainerReport) -> bool {
    run_of(c).is_some_and(|r| matches!(r.phase, RunPhase::Running { .. }) && r.probes.ready)
}

fn completed(c: &ContainerReport) -> bool {
    run_of(c).is_some_and(|r| matches!(&r.phase, RunPhase::Terminated(t) if t.exit_code == 0))
}

/// The kubelet's `getPhase` for a pod whose containers the node runs.
fn phase(pod: &Pod, containers: &[ContainerReport]) -> &'static str {
    use super::pod_actions::RestartPolicy;
    let policy = pod.spec.as_ref().map_or(RestartPolicy::Always, RestartPolicy::of);
    let inits: Vec<&ContainerReport> = containers.iter().filter(|c| c.init).collect();
    let init_failed = inits.iter().any(|c| {
        run_of(c).is_some_and(|r| match &r.phase {
            RunPhase::Terminated(t) => t.exit_code != 0,
            _ => r.last_terminated.as_ref().is_some_and(|t| t.exit_code != 0),
        })
    });
    if init_failed && policy == RestartPolicy::Never {
        return "Failed";
    }
    if !inits.iter().all(|c| completed(c)) {
        return "Pending";
    }
    let (mut waiting, mut running_n, mut stopped, mut succeeded) = (0, 0, 0, 0);
    for c in containers.iter().filter(|c| !c.init) {
        match run_of(c).map(|r| (&r.phase, r.last_terminated.is_some())) {
            Some((RunPhase::Running { .. }, _)) => running_n += 1,
            Some((RunPhase::Terminated(t), _)) => {
                stopped += 1;
                if t.exit_code == 0 {
                    succeeded += 1;
                }
            }
            Some((RunPhase::Waiting { .. }, true)) => stopped += 1,
            _ => waiting += 1,
        }
    }
    match () {
        () if waiting > 0 => "Pending",
        () if running_n > 0 => "Running",
        () if stopped > 0 && stopped == succeeded => "Succeeded",
        () if stopped > 0 && policy == RestartPolicy::Never => "Failed",
        () if stopped > 0 => "Running",
        () => "Pending",
    }
}

/// The status for `pod`: conditions the agent does not own are kept; a condition keeps its
/// `lastTransitionTime` while its status stays the same; `startTime` is set once;
/// `hostIP`/`hostIPs` are the node's `host_ip` (its InternalIP, as the kubelet's
/// `generateAPIPodStatus`). `runtime`: what the container runtime says (`None` on a
/// preparation-only node).
pub fn pod_status(
    pod: &Pod,
    containers: &[ContainerReport],
    volumes: &VolumesOutcome,
    now: &Time,
    host_ip: &str,
    runtime: Option<&PodRuntimeView>,
) -> PodStatus {
    let old = pod.status.clone().unwrap_or_default();
    let volumes_ok = volumes.is_ok();
    // Ephemeral containers are reported on their own and count toward neither the phase
    // nor readiness (kubelet `generateAPIPodStatus`).
    let ephemeral_names: std::collections::HashSet<&str> =
        pod.spec.iter().flat_map(|s| s.ephemeral_containers.iter().flatten()).map(|e| e.name.as_str()).collect();
    let (ephemeral, regular): (Vec<ContainerReport>, Vec<ContainerReport>) =
        containers.iter().cloned().partition(|c| !c.init && ephemeral_names.contains(c.name.as_str()));
    let containers = regular.as_slice();
    let phase = if runtime.is_some() { phase(pod, containers) } else { "Pending" };
    let unready: Vec<&str> = containers.iter().filter(|c| !c.init && !ready(c)).map(|c| c.name.as_str()).collect();
    let incomplete: Vec<&str> =
        containers.iter().filter(|c| c.init && !completed(c)).map(|c| c.name.as_str()).collect();
    let ready = runtime.is_some() && unready.is_empty() && matches!(phase, "Running");
    let gates_ok = pod
        .spec
        .iter()
        .flat_map(|s| s.readiness_gates.iter().flatten())
        .all(|g| old.conditions.iter().flatten().any(|c| c.type_ == g.condition_type && c.status == "True"));
    let not_ready = format!("containers with unready status: [{}]", unready.join(" "));
    let (ready_reason, ready_message) = if matches!(phase, "Succeeded" | "Failed") {
        (Some("PodCompleted"), None)
    } else {
        (Some("ContainersNotReady"), Some(not_ready.clone()))
    };
    let mut ours = vec![
        if incomplete.is_empty() {
            condition("Initialized", true, None, None)
        } else {
            condition(
                "Initialized",
                false,
                Some("ContainersNotInitialized"),
                Some(format!("containers with incomplete status: [{}]", incomplete.join(" "))),
            )
        },
        if ready && gates_ok {
            condition("Ready", true, None, None)
        } else {
            condition("Ready", false, ready_reason, ready_message.clone())
        },
        if ready {
            condition("ContainersReady", true, None, None)
        } else {
            condition("ContainersReady", false, ready_reason, ready_message)
        },
    ];
    let failed: Vec<String> = containers
        .iter()
        .filter_map(|c| match &c.outcome {
            ContainerOutcome::Failed(error) => Some(format!("{}: {}", c.name, error.reason())),
            _ => None,
        })
        .collect();
    let images_ready =
        containers.iter().all(|c| matches!(c.outcome, ContainerOutcome::ImageReady { .. } | ContainerOutcome::Run(_)));
    ours.push(match (&volumes, images_ready) {
        (Ok(()), true) => condition(
            PREPARED_CONDITION,
            true,
            Some("ImagesAndVolumesReady"),
            Some("every image may be used by this pod and every volume is written".into()),
        ),
        (Err(e), _) => condition(PREPARED_CONDITION, false, Some("VolumesNotWritten"), Some(e.to_string())),
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
    let pod_ip = runtime.and_then(|r| r.pod_ip.clone()).or_else(|| old.pod_ip.clone());
    PodStatus {
        phase: Some(phase.into()),
        conditions: Some(conditions),
        container_statuses: statuses(false),
        init_container_statuses: statuses(true),
        ephemeral_container_statuses: (!ephemeral.is_empty())
            .then(|| ephemeral.iter().map(|c| container_status(c, volumes_ok)).collect()),
        start_time: old.start_time.clone().or_else(|| Some(now.clone())),
        host_ip: Some(host_ip.to_owned()),
        host_ips: Some(vec![HostIP { ip: host_ip.to_owned() }]),
        pod_ips: pod_ip.clone().map(|ip| vec![PodIP { ip }]),
        pod_ip,
        // kubelet generateAPIPodStatus: GetPodQOS of the pod (its class never changes).
        qos_class: pod
            .spec
            .as_ref()
            .map(|s| super::cgroups::qos_class(s).api_name().to_owned())
            .or_else(|| old.qos_class.clone()),
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
                ContainerOutcome::Failed(super::super::sync_error::SyncError::Image {
                    error: crate::images::EnsureError::ErrImagePull,
                    message: "unauthorized".into(),
                }),
            ),
            report("side", false, ContainerOutcome::Preparing),
        ];
        let s = pod_status(&pod, &containers, &Ok(()), &t(100), "10.0.0.7", None);
        assert_eq!(s.phase.as_deref(), Some("Pending"));
        assert_eq!(s.host_ip.as_deref(), Some("10.0.0.7"), "hostIP even before the pod runs");
        assert_eq!(s.host_ips, Some(vec![HostIP { ip: "10.0.0.7".into() }]));
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
        let s1 = pod_status(
            &pod,
            &ready,
            &Err(VolumesNotWritten("configmap \"x\" not found".into())),
            &t(100),
            "10.0.0.7",
            None,
        );
        assert_eq!(cond(&s1, PREPARED_CONDITION).reason.as_deref(), Some("VolumesNotWritten"));
        pod.status = Some(s1.clone());
        let s2 = pod_status(&pod, &ready, &Ok(()), &t(200), "10.0.0.7", None);
        let c = cond(&s2, PREPARED_CONDITION);
        assert_eq!((c.status.as_str(), c.last_transition_time.clone()), ("True", Some(t(200))));
        assert_eq!(cond(&s2, "Ready").last_transition_time, Some(t(100)), "unchanged: time kept");
        assert_eq!(s2.start_time, Some(t(100)));
        let waiting = s2.container_statuses.as_ref().and_then(|c| c[0].state.clone()).and_then(|s| s.waiting);
        assert_eq!(waiting.and_then(|w| w.message).as_deref(), Some(PREPARED_MESSAGE));
        pod.status = Some(s2.clone());
        assert_eq!(
            pod_status(&pod, &ready, &Ok(()), &t(300), "10.0.0.7", None),
            s2,
            "a steady pod is not posted again"
        );
        assert_eq!(cond(&s2, "Initialized").status, "True", "no init containers");
    }

    fn run(phase: RunPhase, last: Option<i32>) -> ContainerOutcome {
        let terminated = |code: i32| Terminated {
            exit_code: code,
            reason: if code == 0 { "Completed".into() } else { "Error".into() },
            message: None,
            started: Some(t(10)),
            finished: Some(t(20)),
            container_id: "containerd://c1".into(),
        };
        ContainerOutcome::Run(Box::new(RunState {
            id: "containerd://c2".into(),
            image_id: "sha256:1".into(),
            restart_count: i32::from(last.is_some()),
            phase,
            last_terminated: last.map(terminated),
            probes: Default::default(),
        }))
    }

    fn exited(code: i32) -> RunPhase {
        RunPhase::Terminated(Terminated {
            exit_code: code,
            reason: if code == 0 { "Completed".into() } else { "Error".into() },
            message: None,
            started: Some(t(10)),
            finished: Some(t(20)),
            container_id: "containerd://c2".into(),
        })
    }

    /// The kubelet's getPhase over restart policies, and what a running pod reports.
    #[test]
    fn the_phase_follows_the_containers_as_the_kubelets_get_phase() {
        let pod_with = |policy: &str| Pod {
            spec: Some(k8s_openapi::api::core::v1::PodSpec {
                restart_policy: Some(policy.into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        let view = PodRuntimeView { pod_ip: Some("127.200.0.9".into()) };
        let status = |policy: &str, outcomes: Vec<ContainerOutcome>| {
            let reports: Vec<ContainerReport> =
                outcomes.into_iter().enumerate().map(|(i, o)| report(&format!("c{i}"), false, o)).collect();
            pod_status(&pod_with(policy), &reports, &Ok(()), &t(100), "10.0.0.7", Some(&view))
        };
        let running = || run(RunPhase::Running { started: Some(t(10)) }, None);
        let s = status("Always", vec![running()]);
        assert_eq!(s.phase.as_deref(), Some("Running"));
        assert_eq!(cond(&s, "Ready").status, "True");
        assert_eq!(s.pod_ip.as_deref(), Some("127.200.0.9"));
        // A readiness probe not (yet) passed: running, not ready, and so neither the pod;
        // a startup probe not passed: not started.
        let mut probed = running();
        if let ContainerOutcome::Run(r) = &mut probed {
            r.probes = ProbeView { ready: false, started: false };
        }
        let probed = status("Always", vec![probed, running()]);
        let c0 = probed.container_statuses.as_ref().map(|c| c[0].clone()).unwrap_or_default();
        assert_eq!((c0.ready, c0.started), (false, Some(false)));
        assert_eq!(probed.phase.as_deref(), Some("Running"));
        assert_eq!(
            (cond(&probed, "Ready").status.as_str(), cond(&probed, "ContainersReady").reason.as_deref()),
            ("False", Some("ContainersNotReady"))
        );
        assert_eq!(cond(&probed, "Ready").message.as_deref(), Some("containers with unready status: [c0]"));
        let c = &s.container_statuses.clone().unwrap_or_default()[0];
        assert!(c.ready && c.started == Some(true) && c.container_id.as_deref() == Some("containerd://c2"));
        assert_eq!(
            status("Never", vec![run(exited(0), None), run(exited(0), None)]).phase.as_deref(),
            Some("Succeeded")
        );
        let failed = status("Never", vec![run(exited(0), None), run(exited(3), None)]);
        assert_eq!(failed.phase.as_deref(), Some("Failed"));
        assert_eq!(cond(&failed, "Ready").reason.as_deref(), Some("PodCompleted"));
        let crash = RunPhase::Waiting { reason: "CrashLoopBackOff".into(), message: Some("back-off 10s".into()) };
        let s = status("Always", vec![run(crash, Some(1))]);
        assert_eq!(s.phase.as_deref(), Some("Running"), "a restarting container keeps the pod Running");
        let c = &s.container_statuses.clone().unwrap_or_default()[0];
        assert_eq!(reason(c), "CrashLoopBackOff");
        assert_eq!(c.last_state.as_ref().and_then(|l| l.terminated.as_ref()).map(|t| t.exit_code), Some(1));
        assert_eq!(c.restart_count, 1);
        assert_eq!(status("Always", vec![running(), ContainerOutcome::Preparing]).phase.as_deref(), Some("Pending"));
        // an init container that has not completed keeps the pod Pending and not Initialized
        let init = report("init", true, run(RunPhase::Running { started: None }, None));
        let s = pod_status(
            &pod_with("Always"),
            &[init, report("app", false, ContainerOutcome::Preparing)],
            &Ok(()),
            &t(1),
            "10.0.0.7",
            Some(&view),
        );
        assert_eq!(s.phase.as_deref(), Some("Pending"));
        assert_eq!(cond(&s, "Initialized").message.as_deref(), Some("containers with incomplete status: [init]"));
    }
}
