//! Running a pod's containers through the CRI (kubelet: `kuberuntime_manager.go` SyncPod,
//! `kuberuntime_container.go`): the pod's sandbox, then its init containers one at a time
//! to completion, then its containers — each only once EnsureImageExists allowed its image
//! for this pod — restarted under `restartPolicy` with the kubelet's back-off (10 s doubling
//! to 5 min, `CrashLoopBackOff`), and everything stopped and removed when the pod goes.
//!
//! Everything the runtime holds for a pod carries the kubelet's labels
//! (`io.kubernetes.pod.uid`, `io.kubernetes.container.name`), so an agent that restarts
//! finds (adopts) what it started instead of starting it twice.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Pod};
use tokio::time::Instant;

use super::pod_actions;
use super::status::{RunPhase, RunState, Terminated};
use super::sync_error::SyncError;
use crate::runtime::{
    CriRuntime, Int64Value, LinuxPodSandboxConfig, LinuxSandboxSecurityContext, NAMESPACE_CONTAINER, NAMESPACE_NODE,
    NAMESPACE_POD, NamespaceOption, PodSandboxConfig, PodSandboxMetadata, RuntimeError, SANDBOX_READY,
};

/// The kubelet's label of the pod UID.
pub const POD_UID_LABEL: &str = "io.kubernetes.pod.uid";
/// ... of the pod name and namespace.
pub const POD_NAME_LABEL: &str = "io.kubernetes.pod.name";
/// ... of the pod namespace.
pub const POD_NAMESPACE_LABEL: &str = "io.kubernetes.pod.namespace";
/// ... of the container name.
pub const CONTAINER_NAME_LABEL: &str = "io.kubernetes.container.name";
/// The kubelet's annotation of a container's spec hash: a container whose spec changed
/// (its image) is killed and started again (kubelet: `containerChanged`).
pub const CONTAINER_HASH_ANNOTATION: &str = "io.kubernetes.container.hash";
pub(super) use super::pod_actions::BACKOFF_FIRST;
use crate::runtime::NODE_LABEL;
/// A container created but not started (an agent stopped in between) whose start failed
/// is tried again this soon. Running containers are not polled: the node's relist
/// ([`super::pleg`]) wakes the pod when they change.
const START_RETRY: Duration = Duration::from_secs(2);

/// The node's container runtime and where container logs go.
pub(crate) struct PodRuntime {
    pub cri: CriRuntime,
    /// `<root>/logs/pods`: `<ns>_<name>_<uid>/<container>/<restart>.log`, the kubelet's
    /// `/var/log/pods` layout.
    pub logs: PathBuf,
    /// The agent's root dir (the pods' volumes).
    pub root: PathBuf,
    /// The node's name ([`NODE_LABEL`]).
    pub node: String,
    /// The node's allocatable memory in bytes (0: unknown): memory emptyDir volumes are
    /// at most this large.
    pub node_allocatable_memory: u64,
    /// `seccompDefault`: RuntimeDefault for a container whose pod names no profile.
    pub seccomp_default: bool,
    /// `containerLogMaxSize` (negative: unbounded) and `containerLogMaxFiles`: an exited
    /// container's kept log is trimmed to their product ([`super::container_gc`]).
    pub log_max_size: i64,
    /// `containerLogMaxFiles`.
    pub log_max_files: usize,
    /// The `kubernetes` Service's variables and relays (none: no in-cluster access).
    pub in_cluster: Option<std::sync::Arc<super::in_cluster::InCluster>>,
    /// The pods' cgroups (`cgroupsPerQOS`; none: containers sit where the runtime puts
    /// them).
    pub cgroups: Option<super::cgroups::PodCgroups>,
}

/// What the runtime side of a pod worker remembers between syncs.
#[derive(Debug, Default)]
pub(crate) struct RuntimeState {
    /// Container name → restart back-off (the earliest next start, and the current delay).
    backoff: HashMap<String, (Instant, Duration)>,
}

/// What EnsureImageExists said of a container's image for this pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ImageCheck {
    /// The pod may use it.
    Allowed {
        /// The image reference to create the container with.
        image_ref: String,
        /// Whether the check ran in this sync: only such an allowance starts a container,
        /// so every start (restarts included) follows its own check (kubelet:
        /// EnsureImageExists in `startContainer`).
        checked_now: bool,
    },
    /// It may not (yet): the container waits with the check's reason and message.
    Refused(SyncError),
}

/// The hash of the container's spec the kubelet compares (`HashContainer`): the whole
/// container but its resources (resized in place, not restarted), FNV-1a 64, hex.
pub(crate) fn container_hash(c: &Container) -> String {
    let mut spec = c.clone();
    spec.resources = None;
    spec.resize_policy = None;
    let bytes = serde_json::to_vec(&spec).unwrap_or_default();
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:x}")
}

/// What one runtime sync found and did.
#[derive(Debug, Default)]
pub(crate) struct RuntimeSync {
    /// Per container name: its state in the runtime (absent: not created yet).
    pub states: HashMap<(bool, String), RunState>,
    /// The sandbox's IP.
    pub pod_ip: Option<String>,
    /// The sandbox's network namespace (none: the node's, or the runtime named none).
    pub netns: Option<PathBuf>,
    /// When to look again (running containers, a back-off ending).
    pub next: Option<Instant>,
    /// Events to record: (container field path, type, reason, message).
    pub events: Vec<(String, &'static str, &'static str, String)>,
    /// The containers started in this sync: their image checks are spent.
    pub started: Vec<(bool, String)>,
}

/// The pod's log directory.
pub(crate) fn log_dir(logs: &Path, pod: &Pod) -> PathBuf {
    let m = &pod.metadata;
    pod_log_dir(
        logs,
        m.namespace.as_deref().unwrap_or_default(),
        m.name.as_deref().unwrap_or_default(),
        m.uid.as_deref().unwrap_or_default(),
    )
}

/// The log directory of pod `namespace/name` with `uid`: `<logs>/<ns>_<name>_<uid>`.
pub(crate) fn pod_log_dir(logs: &Path, namespace: &str, name: &str, uid: &str) -> PathBuf {
    logs.join(format!("{namespace}_{name}_{uid}"))
}

/// Removes the pod's log directory (`<ns>_<name>_<uid>`), once its containers are gone:
/// a deleted pod's logs go with it (kubelet: the container GC's pod log sweep).
pub(crate) fn remove_log_dir(logs: &Path, pod: &Pod) -> std::io::Result<()> {
    match std::fs::remove_dir_all(log_dir(logs, pod)) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

/// Removes the log directories under `logs` of pods not in `known` (by the UID ending
/// their `<ns>_<name>_<uid>` name) last changed before `before`; how many. Blocking.
pub(crate) fn remove_orphaned_logs(
    logs: &Path,
    known: &std::collections::HashSet<String>,
    before: std::time::SystemTime,
) -> usize {
    let mut removed = 0;
    for entry in std::fs::read_dir(logs).into_iter().flatten().flatten() {
        let Ok(name) = entry.file_name().into_string() else { continue };
        // Namespaces and names are DNS labels and subdomains: no '_' in them.
        let Some((_, uid)) = name.rsplit_once('_') else { continue };
        let old = entry.metadata().and_then(|m| m.modified()).is_ok_and(|t| t < before);
        if !known.contains(uid) && old && std::fs::remove_dir_all(entry.path()).is_ok() {
            removed += 1;
        }
    }
    removed
}

pub(super) fn labels(rt: &PodRuntime, pod: &Pod) -> HashMap<String, String> {
    let m = &pod.metadata;
    HashMap::from([
        (POD_UID_LABEL.to_owned(), m.uid.clone().unwrap_or_default()),
        (POD_NAME_LABEL.to_owned(), m.name.clone().unwrap_or_default()),
        (POD_NAMESPACE_LABEL.to_owned(), m.namespace.clone().unwrap_or_default()),
        (NODE_LABEL.to_owned(), rt.node.clone()),
    ])
}

pub(super) fn host_network(pod: &Pod) -> bool {
    pod.spec.as_ref().and_then(|s| s.host_network).unwrap_or(false)
}

/// The pod's sandbox config (kubelet `generatePodSandboxConfig`).
fn sandbox_config(rt: &PodRuntime, pod: &Pod, attempt: u32) -> PodSandboxConfig {
    let cgroup_parent = match &rt.cgroups {
        Some(pc) => {
            let spec = pod.spec.clone().unwrap_or_default();
            let uid = pod.metadata.uid.as_deref().unwrap_or_default();
            super::cgroups::pod_cgroup(pc.cgroups.kubepods(), super::cgroups::qos_class(&spec), uid)
        }
        None => String::new(),
    };
    let m = &pod.metadata;
    let spec = pod.spec.clone().unwrap_or_default();
    let network = if host_network(pod) { NAMESPACE_NODE } else { NAMESPACE_POD };
    // With the node's network the node's UTS namespace is shared: no hostname of its own.
    let hostname = if network == NAMESPACE_NODE {
        String::new()
    } else {
        spec.hostname.clone().unwrap_or_else(|| m.name.clone().unwrap_or_default())
    };
    let sc = spec.security_context.clone().unwrap_or_default();
    PodSandboxConfig {
        metadata: Some(PodSandboxMetadata {
            name: m.name.clone().unwrap_or_default(),
            uid: m.uid.clone().unwrap_or_default(),
            namespace: m.namespace.clone().unwrap_or_default(),
            attempt,
        }),
        hostname,
        log_directory: log_dir(&rt.logs, pod).display().to_string(),
        labels: labels(rt, pod),
        annotations: m.annotations.clone().unwrap_or_default().into_iter().collect(),
        linux: Some(LinuxPodSandboxConfig {
            cgroup_parent,
            security_context: Some(LinuxSandboxSecurityContext {
                namespace_options: Some(NamespaceOption {
                    network,
                    pid: NAMESPACE_CONTAINER,
                    ipc: NAMESPACE_POD,
                    target_id: String::new(),
                }),
                run_as_user: sc.run_as_user.map(|value| Int64Value { value }),
                run_as_group: sc.run_as_group.map(|value| Int64Value { value }),
                supplemental_groups: sc.supplemental_groups.clone().unwrap_or_default(),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

pub(super) fn nanos_to_time(ns: i64) -> Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time> {
    (ns > 0).then(|| {
        k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::from_nanosecond(i128::from(ns)).unwrap_or_default(),
        )
    })
}

/// The runtime's containers of the pod by name: the newest attempt, and the one before it
/// (the dead instance the container GC keeps, which the status shows as `lastState`).
async fn current(rt: &PodRuntime, uid: &str) -> Result<(Containers, Containers), RuntimeError> {
    let all = rt.cri.list_containers(HashMap::from([(POD_UID_LABEL.to_owned(), uid.to_owned())])).await?;
    let mut by_name: HashMap<String, Vec<crate::runtime::Container>> = HashMap::new();
    for c in all {
        let name = c.labels.get(CONTAINER_NAME_LABEL).cloned().unwrap_or_default();
        by_name.entry(name).or_default().push(c);
    }
    let (mut newest, mut previous) = (HashMap::new(), HashMap::new());
    for (name, mut instances) in by_name {
        instances.sort_by_key(|c| std::cmp::Reverse(c.metadata.as_ref().map_or(0, |m| m.attempt)));
        let mut instances = instances.into_iter();
        if let Some(first) = instances.next() {
            newest.insert(name.clone(), first);
        }
        if let Some(second) = instances.next() {
            previous.insert(name, second);
        }
    }
    Ok((newest, previous))
}

/// Runtime containers by container name.
type Containers = HashMap<String, crate::runtime::Container>;

/// What the runtime holds of the pod's regular and init containers (each newest attempt
/// with its status), and for those it does not hold the restart count their logs give.
async fn observe(
    rt: &PodRuntime,
    pod: &Pod,
    existing: &Containers,
    previous: &Containers,
) -> Result<pod_actions::Observation, RuntimeError> {
    let spec = pod.spec.clone().unwrap_or_default();
    let mut out = pod_actions::Observation::default();
    for c in spec.init_containers.iter().flatten().chain(&spec.containers) {
        match existing.get(&c.name) {
            Some(found) => {
                let status = rt.cri.container_status(&found.id).await?.unwrap_or_default();
                let previous = match previous.get(&c.name) {
                    Some(p) => rt.cri.container_status(&p.id).await?.map(|s| (p.id.clone(), s)),
                    None => None,
                };
                out.containers.insert(
                    c.name.clone(),
                    pod_actions::Observed {
                        id: found.id.clone(),
                        attempt: found.metadata.as_ref().map_or(0, |m| m.attempt),
                        hash: found.annotations.get(CONTAINER_HASH_ANNOTATION).cloned(),
                        status,
                        previous,
                    },
                );
            }
            None => {
                // kubelet startContainer: a runtime that lost the container (podpass up
                // removes its pods' containers when it stops) still leaves its logs; the
                // restart count goes on from the newest `<n>.log` (calcRestartCountByLogDir).
                let dir = log_dir(&rt.logs, pod).join(&c.name);
                let next =
                    tokio::task::spawn_blocking(move || super::logs::restart_count_by_log_dir(&dir)).await.unwrap_or(0);
                out.log_restarts.insert(c.name.clone(), next);
            }
        }
    }
    Ok(out)
}

/// One sync of the pod's containers: what the runtime holds is observed, the plan made
/// ([`pod_actions::compute_container_actions`]), then carried out. `images`: container
/// (init, name) → the image EnsureImageExists allowed for this pod (no entry: not allowed
/// yet, never started; one not checked in this sync asks for another sync before it
/// starts anything).
pub(crate) async fn sync(
    rt: &PodRuntime,
    pod: &Pod,
    images: &HashMap<(bool, String), ImageCheck>,
    state: &mut RuntimeState,
    sources: &dyn crate::volumes::ProjectionSources,
    probe_kills: &HashMap<String, super::prober::ProbeKill>,
) -> Result<RuntimeSync, SyncError> {
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let spec = pod.spec.clone().unwrap_or_default();
    let mut out = RuntimeSync::default();
    let err = SyncError::Runtime;
    let sandboxes =
        rt.cri.list_pod_sandboxes(HashMap::from([(POD_UID_LABEL.to_owned(), uid.clone())])).await.map_err(err)?;
    let (existing, previous) = current(rt, &uid).await.map_err(err)?;
    let mut observed = observe(rt, pod, &existing, &previous).await.map_err(err)?;
    // The prober's kills are by container ID: only the container it probed is killed.
    for (name, found) in &observed.containers {
        if let Some(kill) = probe_kills.get(&found.id) {
            observed.probe_kills.insert(name.clone(), kill.clone());
        }
    }

    // The sandbox: the pod's ready one, or a new one once some image may run.
    let ready = sandboxes.iter().filter(|s| s.state == SANDBOX_READY).max_by_key(|s| s.created_at);
    let attempt = u32::try_from(sandboxes.len()).unwrap_or(u32::MAX);
    let sandbox_config =
        sandbox_config(rt, pod, ready.and_then(|s| s.metadata.as_ref()).map_or(attempt, |m| m.attempt));
    let sandbox = match ready {
        Some(s) => s.id.clone(),
        None if !images.values().any(|i| matches!(i, ImageCheck::Allowed { .. })) => return Ok(out),
        // A pod that finished for good keeps its stopped sandbox: it is not run again.
        None if !sandboxes.is_empty() && pod_actions::finished_for_good(&spec, &observed) => {
            out.states = finished_states(&spec, &observed);
            return Ok(out);
        }
        None => create_sandbox(rt, pod, sandbox_config.clone(), &mut out).await?,
    };
    let pod_ip = if host_network(pod) {
        None
    } else {
        rt.cri.pod_sandbox_status(&sandbox).await.map_err(err)?.and_then(|s| s.network).map(|n| n.ip)
    };
    if !host_network(pod) {
        out.netns = rt.cri.pod_sandbox_netns(&sandbox).await.map_err(err)?;
    }
    relay_in_cluster(rt, pod, &sandbox, &mut out).await;
    out.pod_ip = pod_ip.clone();
    // Ephemeral containers first, as the kubelet: one can debug an init container.
    let running = Sandbox { id: &sandbox, config: &sandbox_config, pod_ip: pod_ip.as_deref().unwrap_or_default() };
    super::ephemeral::sync(rt, pod, images, &running, &existing, &mut out, sources).await.map_err(err)?;

    let clock = pod_actions::Clock { now: Instant::now(), wall_nanos: jiff_now_nanos() };
    let plan = pod_actions::compute_container_actions(&spec, &observed, images, &state.backoff, clock);
    for action in plan {
        let found = observed.containers.get(&action.name);
        let run = act(rt, pod, &action, found, &running, state, sources, &mut out).await?;
        out.states.insert((action.init, action.name.clone()), run);
    }
    // A pod whose containers have all finished for good holds no running sandbox (the
    // kubelet stops a terminal pod's sandbox): its processes and network go, its
    // containers and logs stay until the pod is deleted.
    let finished = !spec.containers.is_empty()
        && spec.containers.iter().all(|c| {
            out.states.get(&(false, c.name.clone())).is_some_and(|r| matches!(r.phase, RunPhase::Terminated(_)))
        });
    if finished {
        rt.cri.stop_pod_sandbox(&sandbox).await.map_err(err)?;
        out.next = None;
    }
    Ok(out)
}

/// The pod's new sandbox: its log directory, its cgroup, then the runtime's sandbox.
async fn create_sandbox(
    rt: &PodRuntime,
    pod: &Pod,
    config: PodSandboxConfig,
    out: &mut RuntimeSync,
) -> Result<String, SyncError> {
    std::fs::create_dir_all(log_dir(&rt.logs, pod))
        .map_err(|e| SyncError::CreatePodSandbox(format!("creating the log directory: {e}")))?;
    if let Some(pc) = &rt.cgroups {
        pc.ensure_pod(pod).await.map_err(|e| SyncError::CreatePodSandbox(e.to_string()))?;
    }
    let id = rt.cri.run_pod_sandbox(config).await.map_err(|e| SyncError::CreatePodSandbox(e.to_string()))?;
    out.events.push((String::new(), "Normal", "SandboxCreated", "Pod sandbox created".into()));
    Ok(id)
}

/// The API server's Service answers inside the pod's namespace before any container
/// starts in it; without it the pod still runs (as without kube-proxy) and the next sync
/// tries again.
async fn relay_in_cluster(rt: &PodRuntime, pod: &Pod, sandbox: &str, out: &mut RuntimeSync) {
    let Some(in_cluster) = &rt.in_cluster else { return };
    if host_network(pod) {
        return;
    }
    let relayed = match out.netns.clone() {
        Some(netns) => in_cluster.ensure_relay(sandbox, netns).await,
        None => Err(super::in_cluster::RelayError::NoNamespace),
    };
    if let Err(e) = relayed {
        tracing::warn!(sandbox, error = %e, "no in-cluster access to the API server for this pod");
        out.events.push((String::new(), "Warning", "FailedInClusterAccess", e.to_string()));
    }
}

/// Carries out one container's part of the plan; answers the state to report.
#[allow(clippy::too_many_arguments)]
async fn act(
    rt: &PodRuntime,
    pod: &Pod,
    action: &pod_actions::ContainerAction,
    found: Option<&pod_actions::Observed>,
    running: &Sandbox<'_>,
    state: &mut RuntimeState,
    sources: &dyn crate::volumes::ProjectionSources,
    out: &mut RuntimeSync,
) -> Result<RunState, SyncError> {
    use pod_actions::{Gate, Step};
    let (init, name) = (action.init, action.name.as_str());
    let path = super::events::field_path(name, init);
    let id = found.map(|f| format!("containerd://{}", f.id)).unwrap_or_default();
    let mut run = RunState {
        id: id.clone(),
        image_id: found.map(|f| f.status.image_ref.clone()).unwrap_or_default(),
        restart_count: i32::try_from(found.map_or(0, |f| f.attempt)).unwrap_or(i32::MAX),
        phase: RunPhase::Waiting { reason: "ContainerCreating".into(), message: None },
        last_terminated: None,
        probes: Default::default(),
    };
    if action.reset_backoff {
        state.backoff.remove(name);
    }
    let spec = pod.spec.clone().unwrap_or_default();
    match &action.step {
        Step::Keep => {
            run.phase = RunPhase::Running { started: found.and_then(|f| nanos_to_time(f.status.started_at)) };
            // kubelet: the dead instance before it is its lastState.
            run.last_terminated = found
                .and_then(|f| f.previous.as_ref())
                .map(|(id, status)| terminated(status, &format!("containerd://{id}")));
        }
        Step::Done => {
            if let Some(f) = found {
                run.phase = RunPhase::Terminated(terminated(&f.status, &id));
            }
        }
        Step::BackOff { until, delay } => {
            let uid = pod.metadata.uid.as_deref().unwrap_or_default();
            let pod_ref = format!(
                "{}_{}({uid})",
                pod.metadata.name.as_deref().unwrap_or_default(),
                pod.metadata.namespace.as_deref().unwrap_or_default()
            );
            run.phase = SyncError::CrashLoopBackOff(format!(
                "back-off {}s restarting failed container={name} pod={pod_ref}",
                delay.as_secs()
            ))
            .waiting();
            run.last_terminated = found.map(|f| terminated(&f.status, &id));
            out.next = Some(out.next.map_or(*until, |n| n.min(*until)));
        }
        Step::Kill(kill) => {
            if let Some(f) = found {
                let ended = kill_container(rt, &spec, f, kill, &path, out).await?;
                if let Some(status) = ended {
                    run.phase = RunPhase::Terminated(terminated(&status, &id));
                }
            }
        }
        Step::StartCreated => {
            if let Some(f) = found
                && let Err(e) = rt.cri.start_container(&f.id).await
            {
                run.phase = SyncError::RunContainer(e.to_string()).waiting();
                out.next = Some(Instant::now() + START_RETRY);
            }
        }
        Step::Start { attempt, kill, report_last, backoff, gate } => {
            let mut ended = found.map(|f| f.status.clone());
            if let (Some(kill), Some(f)) = (kill, found) {
                ended = kill_container(rt, &spec, f, kill, &path, out).await?;
            }
            if *report_last {
                run.last_terminated = ended.as_ref().map(|s| terminated(s, &id));
            }
            let image_ref = match gate {
                Gate::Go(image_ref) => image_ref,
                // Allowed once, but not checked for this start: the worker checks it again
                // in the next sync, at once.
                Gate::RecheckNow => {
                    out.next = Some(Instant::now());
                    return Ok(run);
                }
                Gate::Refused(error) => {
                    run.phase = error.waiting();
                    return Ok(run);
                }
                // EnsureImageExists has not allowed the image for this pod: never started.
                Gate::NotAllowed => return Ok(run),
            };
            let Some(c) = spec.init_containers.iter().flatten().chain(&spec.containers).find(|c| c.name == name) else {
                return Ok(run);
            };
            match start(rt, pod, c, (*attempt, image_ref), running, sources, None).await {
                Ok(id) => {
                    run.id = format!("containerd://{id}");
                    run.restart_count = i32::try_from(*attempt).unwrap_or(i32::MAX);
                    run.image_id = image_ref.clone();
                    out.started.push((init, name.to_owned()));
                    if let Some(b) = backoff {
                        state.backoff.insert(name.to_owned(), *b);
                    }
                    run.phase = RunPhase::Running { started: nanos_to_time(jiff_now_nanos()) };
                    out.events.push((path.clone(), "Normal", "Created", format!("Created container {name}")));
                    out.events.push((path, "Normal", "Started", format!("Started container {name}")));
                }
                Err(error) => {
                    if let Some(b) = backoff {
                        state.backoff.insert(name.to_owned(), *b);
                    }
                    out.events.push((path, "Warning", "Failed", format!("Error: {error}")));
                    run.phase = error.waiting();
                    out.next = Some(Instant::now() + BACKOFF_FIRST);
                }
            }
        }
    }
    Ok(run)
}

/// Stops a running container as `kill` says (its grace, else the pod's) with the kubelet's
/// `Killing` event; answers how it ended.
async fn kill_container(
    rt: &PodRuntime,
    spec: &k8s_openapi::api::core::v1::PodSpec,
    found: &pod_actions::Observed,
    kill: &pod_actions::Kill,
    path: &str,
    out: &mut RuntimeSync,
) -> Result<Option<crate::runtime::ContainerStatus>, SyncError> {
    let grace = kill.grace_seconds.or(spec.termination_grace_period_seconds).unwrap_or(30);
    out.events.push((path.to_owned(), "Normal", "Killing", kill.message.clone()));
    rt.cri.stop_container(&found.id, grace).await.map_err(SyncError::Runtime)?;
    rt.cri.container_status(&found.id).await.map_err(SyncError::Runtime)
}

/// How an exited container ended (the runtime's reason, else `Completed` or `Error`).
pub(super) fn terminated(status: &crate::runtime::ContainerStatus, id: &str) -> Terminated {
    let reason = match (status.reason.as_str(), status.exit_code) {
        ("", 0) => "Completed".to_owned(),
        ("", _) => "Error".to_owned(),
        (r, _) => r.to_owned(),
    };
    Terminated {
        exit_code: status.exit_code,
        reason,
        message: (!status.message.is_empty()).then(|| status.message.clone()),
        started: nanos_to_time(status.started_at),
        finished: nanos_to_time(status.finished_at),
        container_id: id.to_owned(),
    }
}

/// The states a pod that finished for good reports: each regular container's end.
fn finished_states(
    spec: &k8s_openapi::api::core::v1::PodSpec,
    observed: &pod_actions::Observation,
) -> HashMap<(bool, String), RunState> {
    spec.containers
        .iter()
        .filter_map(|c| {
            let found = observed.containers.get(&c.name)?;
            let id = format!("containerd://{}", found.id);
            let run = RunState {
                id: id.clone(),
                image_id: found.status.image_ref.clone(),
                restart_count: i32::try_from(found.attempt).unwrap_or(i32::MAX),
                phase: RunPhase::Terminated(terminated(&found.status, &id)),
                last_terminated: None,
                probes: Default::default(),
            };
            Some(((false, c.name.clone()), run))
        })
        .collect()
}

fn jiff_now_nanos() -> i64 {
    i64::try_from(k8s_openapi::jiff::Timestamp::now().as_nanosecond()).unwrap_or(i64::MAX)
}

/// The pod's running sandbox.
pub(super) struct Sandbox<'a> {
    pub(super) id: &'a str,
    pub(super) config: &'a PodSandboxConfig,
    pub(super) pod_ip: &'a str,
}

/// Creates and starts attempt `attempt` of `c`; the kubelet's waiting reason and message
/// when it cannot. `pid_target`: the container whose process namespace `c` joins (an
/// ephemeral container's target).
pub(super) async fn start(
    rt: &PodRuntime,
    pod: &Pod,
    c: &Container,
    (attempt, image_ref): (u32, &str),
    sandbox: &Sandbox<'_>,
    sources: &dyn crate::volumes::ProjectionSources,
    pid_target: Option<&str>,
) -> Result<String, SyncError> {
    let mut config = super::container_config::container_config(rt, pod, c, attempt, image_ref, sandbox.pod_ip, sources)
        .await
        .map_err(|e| SyncError::CreateContainerConfig(e.to_string()))?;
    if let Some(target) = pid_target {
        let options =
            config.linux.as_mut().and_then(|l| l.security_context.as_mut()).and_then(|s| s.namespace_options.as_mut());
        if let Some(options) = options {
            options.pid = crate::runtime::NAMESPACE_TARGET;
            options.target_id = target.to_owned();
        }
    }
    let dir = log_dir(&rt.logs, pod).join(&c.name);
    std::fs::create_dir_all(&dir)
        .map_err(|e| SyncError::CreateContainer(format!("creating {}: {e}", dir.display())))?;
    let id = rt
        .cri
        .create_container(sandbox.id, config, sandbox.config.clone())
        .await
        .map_err(|e| SyncError::CreateContainer(e.to_string()))?;
    rt.cri.start_container(&id).await.map_err(|e| SyncError::RunContainer(e.to_string()))?;
    Ok(id)
}

/// Stops the pod's containers (SIGTERM, SIGKILL after `grace_seconds`) and its sandboxes,
/// then removes them all. Every step is tried; what is already gone (or going) is fine;
/// the first other failure is returned after.
pub(crate) async fn tear_down(rt: &PodRuntime, uid: &str, grace_seconds: i64) -> Result<(), RuntimeError> {
    rt.cri.remove_pods(HashMap::from([(POD_UID_LABEL.to_owned(), uid.to_owned())]), grace_seconds).await?;
    // Its containers are gone: its cgroup goes too (kubelet: the pod container manager's
    // Destroy). One the kernel still finds busy stays until the pod is torn down again.
    if let Some(pc) = rt.cgroups.clone() {
        let owned = uid.to_owned();
        match tokio::task::spawn_blocking(move || pc.cgroups.remove_pod(&owned)).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!(pod_uid = uid, error = %e, "the pod's cgroup was not removed"),
            Err(e) => tracing::warn!(pod_uid = uid, error = %e, "the pod's cgroup was not removed"),
        }
    }
    Ok(())
}

/// The pod UIDs the runtime holds sandboxes of for this node (for removing those of pods
/// gone while the agent was down).
pub(crate) async fn pod_uids(rt: &PodRuntime) -> Result<Vec<String>, RuntimeError> {
    // Only what carries this node's label: a runtime shared with another kubelet keeps its
    // pods.
    let ours = HashMap::from([(NODE_LABEL.to_owned(), rt.node.clone())]);
    let mut uids: Vec<String> = rt
        .cri
        .list_pod_sandboxes(ours)
        .await?
        .into_iter()
        .filter_map(|s| s.labels.get(POD_UID_LABEL).cloned())
        .collect();
    uids.sort();
    uids.dedup();
    Ok(uids)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_logs_of_pods_the_node_no_longer_knows_are_collected() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        for d in ["team_web_u1/app", "team_web_u2/app", "team_db_u3/app"] {
            std::fs::create_dir_all(dir.path().join(d)).unwrap_or_else(|e| panic!("{e}"));
        }
        let known = std::collections::HashSet::from(["u2".to_owned()]);
        let later = std::time::SystemTime::now() + Duration::from_secs(60);
        assert_eq!(remove_orphaned_logs(dir.path(), &known, later), 2);
        assert!(dir.path().join("team_web_u2/app").exists(), "the known pod's logs stay");
        assert!(!dir.path().join("team_web_u1").exists(), "a recreated pod's predecessor's logs go");
        // A directory newer than the listing (its pod arrived since) stays.
        std::fs::create_dir_all(dir.path().join("team_new_u9")).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(remove_orphaned_logs(dir.path(), &known, std::time::SystemTime::UNIX_EPOCH), 0);
    }

    #[test]
    fn a_containers_hash_changes_with_its_image_not_its_resources() {
        let c = |image: &str, cpu: &str| -> Container {
            serde_json::from_value(serde_json::json!({"name": "app", "image": image,
                "resources": {"limits": {"cpu": cpu}}}))
            .unwrap_or_default()
        };
        assert_eq!(container_hash(&c("a:1", "1")), container_hash(&c("a:1", "2")));
        assert_ne!(container_hash(&c("a:1", "1")), container_hash(&c("a:2", "1")));
    }
}
