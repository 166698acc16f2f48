//! The subset of `KubeletConfiguration` (`kubelet.config.k8s.io/v1beta1`) a podpass node
//! reads: the image settings, container log rotation, `maxPods`, `seccompDefault` and the
//! cgroup settings (`cgroupsPerQOS`, `podPidsLimit`, `kubeReserved`, `systemReserved`) and the
//! eviction manager's (`evictionHard`, `evictionPressureTransitionPeriod`,
//! `imageMinimumGCAge`). Fields podpass does not
//! use are ignored, as a kubelet ignores nothing but a podpass node never uses them; the
//! fields it uses are validated with upstream's rules and defaults.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;

use crate::images::policy::{PolicyEnforcer, VerificationPolicy};

/// The kubelet settings a podpass node uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KubeletConfig {
    /// `imagePullCredentialsVerificationPolicy` (default NeverVerifyPreloadedImages).
    pub policy: VerificationPolicy,
    /// `preloadedImagesVerificationAllowlist`.
    pub allowlist: Vec<String>,
    /// `serializeImagePulls` (default true).
    pub serialize_image_pulls: bool,
    /// `maxParallelImagePulls` (unset: unlimited when pulls are parallel).
    pub max_parallel_image_pulls: Option<i32>,
    /// `featureGates`.
    pub feature_gates: BTreeMap<String, bool>,
    /// `containerLogMaxSize` in bytes (default 10Mi; negative: logs are never rotated).
    pub container_log_max_size: i64,
    /// `containerLogMaxFiles` (default 5, at least 2): the current file and the rotated ones.
    pub container_log_max_files: usize,
    /// `containerLogMonitorInterval` (default 10 s, at least 3 s).
    pub container_log_monitor_interval: Duration,
    /// `maxPods` (default 110): pods the node admits at once.
    pub max_pods: u32,
    /// `seccompDefault` (default false, as upstream): a container whose pod and container
    /// name no seccomp profile runs under the runtime's default profile, not unconfined.
    pub seccomp_default: bool,
    /// `serverTLSBootstrap` (default false, as upstream): the node's serving certificate is
    /// asked of the cluster (signer `kubernetes.io/kubelet-serving`) and rotated, instead of
    /// a self-signed one made at each start.
    pub server_tls_bootstrap: bool,
    /// `cgroupRoot` (default `/`): the node's `kubepods` cgroup is `<cgroupRoot>/kubepods`,
    /// so nodes sharing a machine keep their pods apart.
    pub cgroup_root: String,
    /// `cgroupsPerQOS` (default true): the `kubepods` cgroup sized to allocatable, a cgroup
    /// per QoS class and one per pod, every container under its pod's.
    pub cgroups_per_qos: bool,
    /// `podPidsLimit` (default -1; zero or negative: unbounded): processes one pod may hold.
    pub pod_pids_limit: i64,
    /// `kubeReserved` plus `systemReserved`, per resource (`cpu` in millicores, `memory` in
    /// bytes): what the `kubepods` cgroup and `status.allocatable` leave to the node.
    pub reserved: Reserved,
    /// `evictionHard` (default upstream's Linux defaults; a map given replaces them whole,
    /// as upstream without `mergeDefaultEvictionSettings`).
    pub eviction_hard: Vec<crate::eviction_thresholds::Threshold>,
    /// `evictionPressureTransitionPeriod` (default 5m): how long a pressure condition stays
    /// after its threshold was last met.
    pub eviction_pressure_transition_period: Duration,
    /// `imageMinimumGCAge` (default 2m): an unused image first seen more recently is not
    /// removed to reclaim disk.
    pub image_minimum_gc_age: Duration,
    /// `streamingConnectionIdleTimeout` (default 4h): an exec or attach stream with nothing
    /// crossing it for that long is closed; zero never closes one.
    pub streaming_connection_idle_timeout: Duration,
}

/// Resources kept from pods (`kubeReserved` + `systemReserved`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Reserved {
    /// Millicores.
    pub cpu_milli: u64,
    /// Bytes.
    pub memory_bytes: u64,
}

/// The kubelet's default `containerLogMaxSize` (10Mi).
pub const DEFAULT_CONTAINER_LOG_MAX_SIZE: i64 = 10 << 20;
/// The kubelet's default `containerLogMaxFiles`.
pub const DEFAULT_CONTAINER_LOG_MAX_FILES: usize = 5;
/// The kubelet's default `containerLogMonitorInterval`.
pub const DEFAULT_CONTAINER_LOG_MONITOR_INTERVAL: Duration = Duration::from_secs(10);
/// The kubelet's default `maxPods`.
pub const DEFAULT_MAX_PODS: u32 = 110;
/// The kubelet's default `evictionPressureTransitionPeriod`.
pub const DEFAULT_EVICTION_PRESSURE_TRANSITION_PERIOD: Duration = Duration::from_secs(300);
/// The kubelet's default `imageMinimumGCAge`.
pub const DEFAULT_IMAGE_MINIMUM_GC_AGE: Duration = Duration::from_secs(120);

impl Default for KubeletConfig {
    fn default() -> Self {
        Self {
            policy: VerificationPolicy::default(),
            allowlist: Vec::new(),
            serialize_image_pulls: true,
            max_parallel_image_pulls: None,
            feature_gates: BTreeMap::new(),
            container_log_max_size: DEFAULT_CONTAINER_LOG_MAX_SIZE,
            container_log_max_files: DEFAULT_CONTAINER_LOG_MAX_FILES,
            container_log_monitor_interval: DEFAULT_CONTAINER_LOG_MONITOR_INTERVAL,
            max_pods: DEFAULT_MAX_PODS,
            seccomp_default: false,
            server_tls_bootstrap: false,
            cgroup_root: "/".to_owned(),
            cgroups_per_qos: true,
            pod_pids_limit: -1,
            reserved: Reserved::default(),
            eviction_hard: crate::eviction_thresholds::default_eviction_hard(),
            eviction_pressure_transition_period: DEFAULT_EVICTION_PRESSURE_TRANSITION_PERIOD,
            image_minimum_gc_age: DEFAULT_IMAGE_MINIMUM_GC_AGE,
            streaming_connection_idle_timeout: DEFAULT_STREAMING_CONNECTION_IDLE_TIMEOUT,
        }
    }
}

/// The kubelet's default `streamingConnectionIdleTimeout`.
const DEFAULT_STREAMING_CONNECTION_IDLE_TIMEOUT: Duration = Duration::from_secs(4 * 3600);

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Raw {
    #[serde(default)]
    kind: String,
    #[serde(default)]
    api_version: String,
    #[serde(default)]
    image_pull_credentials_verification_policy: Option<String>,
    #[serde(default)]
    preloaded_images_verification_allowlist: Vec<String>,
    #[serde(default)]
    serialize_image_pulls: Option<bool>,
    #[serde(default)]
    max_parallel_image_pulls: Option<i32>,
    #[serde(default)]
    feature_gates: BTreeMap<String, bool>,
    #[serde(default)]
    container_log_max_size: Option<String>,
    #[serde(default)]
    container_log_max_files: Option<i64>,
    #[serde(default)]
    container_log_monitor_interval: Option<String>,
    #[serde(default)]
    max_pods: Option<i64>,
    #[serde(default)]
    seccomp_default: Option<bool>,
    #[serde(default, rename = "serverTLSBootstrap")]
    server_tls_bootstrap: Option<bool>,
    #[serde(default)]
    cgroup_root: Option<String>,
    #[serde(default, rename = "cgroupsPerQOS")]
    cgroups_per_qos: Option<bool>,
    #[serde(default)]
    pod_pids_limit: Option<i64>,
    #[serde(default)]
    kube_reserved: BTreeMap<String, String>,
    #[serde(default)]
    system_reserved: BTreeMap<String, String>,
    #[serde(default)]
    eviction_hard: Option<BTreeMap<String, String>>,
    #[serde(default)]
    eviction_pressure_transition_period: Option<String>,
    #[serde(default, rename = "imageMinimumGCAge")]
    image_minimum_gc_age: Option<String>,
    #[serde(default)]
    streaming_connection_idle_timeout: Option<String>,
}

/// A non-negative duration field (`5m`), its default when absent.
fn duration_field(field: &str, value: Option<&str>, default: Duration, errors: &mut Vec<String>) -> Duration {
    match value {
        None | Some("") => default,
        Some(d) => podpass_api::duration::GoDuration::parse(d).ok().and_then(|g| g.to_std()).unwrap_or_else(|| {
            errors.push(format!("invalid configuration: {field} {d:?} must be a non-negative time duration"));
            default
        }),
    }
}

/// `kubeReserved` and `systemReserved` summed (kubelet: `parseResourceList`): cpu and
/// memory are used, `pid` and `ephemeral-storage` accepted, anything else refused; a
/// negative or unparsable quantity names its field.
fn reserved(raw: &Raw, errors: &mut Vec<String>) -> Reserved {
    let mut out = Reserved::default();
    for (field, list) in [("kubeReserved", &raw.kube_reserved), ("systemReserved", &raw.system_reserved)] {
        for (name, quantity) in list {
            let milli = match podpass_api::quantity::parse_milli(quantity) {
                Ok(m) if m >= 0 => m,
                Ok(_) => {
                    errors.push(format!("{field}: resource quantity for {name:?} cannot be negative: {quantity}"));
                    continue;
                }
                Err(e) => {
                    errors.push(format!("{field}[{name}]: {quantity:?}: {e}"));
                    continue;
                }
            };
            let whole = u64::try_from(milli.div_euclid(1000)).unwrap_or(u64::MAX);
            match name.as_str() {
                "cpu" => out.cpu_milli = out.cpu_milli.saturating_add(u64::try_from(milli).unwrap_or(u64::MAX)),
                "memory" => out.memory_bytes = out.memory_bytes.saturating_add(whole),
                "pid" | "ephemeral-storage" => {}
                other => errors.push(format!("{field}: cannot reserve {other:?} resource")),
            }
        }
    }
    out
}

/// Parses a KubeletConfiguration (YAML or JSON); every problem is reported.
pub fn parse(data: &[u8]) -> Result<KubeletConfig, Vec<String>> {
    let value: Value = serde_yaml_ng::from_slice(data).map_err(|e| vec![e.to_string()])?;
    let raw: Raw = serde_json::from_value(value).map_err(|e| vec![e.to_string()])?;
    let mut errors = Vec::new();
    if raw.kind != "KubeletConfiguration" || raw.api_version != "kubelet.config.k8s.io/v1beta1" {
        errors.push(format!("no kind {:?} is registered for version {:?}", raw.kind, raw.api_version));
    }
    let policy = match raw.image_pull_credentials_verification_policy.as_deref() {
        None | Some("") => VerificationPolicy::default(),
        Some(p) => p.parse().unwrap_or_else(|e: String| {
            errors.push(e);
            VerificationPolicy::default()
        }),
    };
    if let Err(allowlist_errors) = PolicyEnforcer::new(policy, &raw.preloaded_images_verification_allowlist) {
        errors
            .extend(allowlist_errors.into_iter().map(|e| format!("invalid preloadedImagesVerificationAllowlist: {e}")));
    }
    let serialize = raw.serialize_image_pulls.unwrap_or(true);
    if let Some(n) = raw.max_parallel_image_pulls {
        if n < 1 {
            errors.push(format!("invalid configuration: maxParallelImagePulls {n} must be a positive number"));
        } else if serialize && n > 1 {
            errors.push(
                "invalid configuration: maxParallelImagePulls cannot be larger than 1 unless SerializeImagePulls (true) is set to false".to_owned(),
            );
        }
    }
    // kubelet: NewContainerLogManager and ValidateKubeletConfiguration.
    let max_size = match raw.container_log_max_size.as_deref() {
        None | Some("") => DEFAULT_CONTAINER_LOG_MAX_SIZE,
        Some(q) => match podpass_api::quantity::parse_milli(q) {
            Ok(milli) => i64::try_from(milli.div_euclid(1000)).unwrap_or(i64::MAX),
            Err(e) => {
                errors.push(format!("failed to parse container log max size {q:?}: {e}"));
                DEFAULT_CONTAINER_LOG_MAX_SIZE
            }
        },
    };
    let max_files = match raw.container_log_max_files {
        None => DEFAULT_CONTAINER_LOG_MAX_FILES,
        Some(n) if n > 1 => usize::try_from(n).unwrap_or(usize::MAX),
        Some(n) => {
            errors.push(format!(
                "invalid configuration: containerLogMaxFiles (--container-log-max-files) {n} must be greater than 1"
            ));
            DEFAULT_CONTAINER_LOG_MAX_FILES
        }
    };
    let interval = match raw.container_log_monitor_interval.as_deref() {
        None | Some("") => DEFAULT_CONTAINER_LOG_MONITOR_INTERVAL,
        Some(d) => match podpass_api::duration::GoDuration::parse(d).ok().and_then(|g| g.to_std()) {
            Some(i) if i >= Duration::from_secs(3) => i,
            _ => {
                errors.push(format!(
                    "invalid configuration: containerLogMonitorInterval {d:?} must be a positive time duration greater than or equal to 3s"
                ));
                DEFAULT_CONTAINER_LOG_MONITOR_INTERVAL
            }
        },
    };
    let max_pods = match raw.max_pods {
        None => DEFAULT_MAX_PODS,
        Some(n) => u32::try_from(n).unwrap_or_else(|_| {
            errors.push(format!("invalid configuration: maxPods (--max-pods) {n} must not be a negative number"));
            DEFAULT_MAX_PODS
        }),
    };
    let reserved = reserved(&raw, &mut errors);
    let cgroup_root = match raw.cgroup_root.as_deref() {
        None | Some("") => "/".to_owned(),
        Some(root) if crate::agent::kubepods_under(root).is_some() => root.to_owned(),
        Some(root) => {
            errors.push(format!(
                "invalid configuration: cgroupRoot {root:?} must be an absolute path of cgroup names (letters, digits, '-', '_', '.'; no '.' or '..')"
            ));
            "/".to_owned()
        }
    };
    // As the kubelet: only a positive limit is applied.
    let pod_pids_limit = raw.pod_pids_limit.unwrap_or(-1);
    let eviction_hard = match &raw.eviction_hard {
        None => crate::eviction_thresholds::default_eviction_hard(),
        Some(map) => crate::eviction_thresholds::parse_eviction_hard(map).unwrap_or_else(|e| {
            errors.extend(e);
            Vec::new()
        }),
    };
    let transition = duration_field(
        "evictionPressureTransitionPeriod",
        raw.eviction_pressure_transition_period.as_deref(),
        DEFAULT_EVICTION_PRESSURE_TRANSITION_PERIOD,
        &mut errors,
    );
    let image_age = duration_field(
        "imageMinimumGCAge",
        raw.image_minimum_gc_age.as_deref(),
        DEFAULT_IMAGE_MINIMUM_GC_AGE,
        &mut errors,
    );
    let idle = duration_field(
        "streamingConnectionIdleTimeout",
        raw.streaming_connection_idle_timeout.as_deref(),
        DEFAULT_STREAMING_CONNECTION_IDLE_TIMEOUT,
        &mut errors,
    );
    if !errors.is_empty() {
        return Err(errors);
    }
    Ok(KubeletConfig {
        policy,
        allowlist: raw.preloaded_images_verification_allowlist,
        serialize_image_pulls: serialize,
        max_parallel_image_pulls: raw.max_parallel_image_pulls,
        feature_gates: raw.feature_gates,
        container_log_max_size: max_size,
        container_log_max_files: max_files,
        container_log_monitor_interval: interval,
        max_pods,
        seccomp_default: raw.seccomp_default.unwrap_or(false),
        server_tls_bootstrap: raw.server_tls_bootstrap.unwrap_or(false),
        cgroup_root,
        cgroups_per_qos: raw.cgroups_per_qos.unwrap_or(true),
        pod_pids_limit,
        reserved,
        eviction_hard,
        eviction_pressure_transition_period: transition,
        image_minimum_gc_age: image_age,
        streaming_connection_idle_timeout: idle,
    })
}

/// Reads `--config FILE`.
pub fn read(path: &Path) -> Result<KubeletConfig, Vec<String>> {
    let data = std::fs::read(path).map_err(|e| vec![format!("{}: {e}", path.display())])?;
    parse(&data)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_image_settings_and_ignores_the_rest() {
        let yaml = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nimagePullCredentialsVerificationPolicy: NeverVerifyAllowlistedImages\npreloadedImagesVerificationAllowlist: [\"registry.example/base/*\"]\nserializeImagePulls: false\nmaxParallelImagePulls: 3\nfeatureGates: {KubeletEnsureSecretPulledImages: true}\ncgroupDriver: systemd\n";
        let c = parse(yaml.as_bytes()).unwrap();
        assert_eq!(c.policy, VerificationPolicy::NeverVerifyAllowlistedImages);
        assert_eq!(c.max_parallel_image_pulls, Some(3));
        assert!(!c.serialize_image_pulls);
        assert!(c.feature_gates["KubeletEnsureSecretPulledImages"]);
        let minimal = parse(b"apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n").unwrap();
        assert_eq!(minimal, KubeletConfig::default());
    }

    #[test]
    fn cgroup_settings_and_reservations_sum_and_name_their_field() {
        let head = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n";
        let c = parse(format!("{head}podPidsLimit: 1024\ncgroupsPerQOS: false\nkubeReserved: {{cpu: 100m, memory: 100Mi, pid: \"100\"}}\nsystemReserved: {{cpu: \"1\", memory: 1Gi}}\n").as_bytes()).unwrap();
        assert_eq!((c.pod_pids_limit, c.cgroups_per_qos), (1024, false));
        assert_eq!(c.reserved, Reserved { cpu_milli: 1100, memory_bytes: (100 << 20) + (1 << 30) });
        assert_eq!((c.cgroup_root.as_str(), c.server_tls_bootstrap), ("/", false), "upstream's defaults");
        let c = parse(format!("{head}cgroupRoot: /podpass/node-2\nserverTLSBootstrap: true\n").as_bytes()).unwrap();
        assert_eq!((c.cgroup_root.as_str(), c.server_tls_bootstrap), ("/podpass/node-2", true));
        let errors = parse(format!("{head}cgroupRoot: /a/../b\n").as_bytes()).unwrap_err();
        assert!(errors[0].starts_with("invalid configuration: cgroupRoot \"/a/../b\" must be"), "{errors:?}");
        let errors = parse(
            format!("{head}kubeReserved: {{memory: -1Mi, gpu: \"1\"}}\nsystemReserved: {{cpu: lots}}\n").as_bytes(),
        )
        .unwrap_err();
        assert_eq!(errors.len(), 3, "{errors:?}");
        assert!(errors.iter().any(|e| e.starts_with("kubeReserved: cannot reserve \"gpu\"")), "{errors:?}");
        assert!(errors.iter().any(|e| e.contains("cannot be negative")), "{errors:?}");
        assert!(errors.iter().any(|e| e.starts_with("systemReserved[cpu]")), "{errors:?}");
    }

    #[test]
    fn the_streaming_idle_timeout_defaults_to_four_hours_and_names_its_field() {
        let head = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n";
        assert_eq!(parse(head.as_bytes()).unwrap().streaming_connection_idle_timeout, Duration::from_secs(4 * 3600));
        let short = format!("{head}streamingConnectionIdleTimeout: 90s\n");
        assert_eq!(parse(short.as_bytes()).unwrap().streaming_connection_idle_timeout, Duration::from_secs(90));
        let bad = format!("{head}streamingConnectionIdleTimeout: soon\n");
        assert_eq!(
            parse(bad.as_bytes()).unwrap_err(),
            ["invalid configuration: streamingConnectionIdleTimeout \"soon\" must be a non-negative time duration"]
        );
    }

    #[test]
    fn eviction_settings_default_as_upstream_and_a_given_map_replaces_the_defaults() {
        use crate::eviction_thresholds::{Signal, Threshold, ThresholdValue};
        let head = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n";
        let c = parse(head.as_bytes()).unwrap();
        assert_eq!(c.eviction_hard.len(), 5);
        assert_eq!(
            (c.eviction_pressure_transition_period, c.image_minimum_gc_age),
            (Duration::from_secs(300), Duration::from_secs(120))
        );
        let c = parse(format!("{head}evictionHard: {{nodefs.inodesFree: \"1000\"}}\nevictionPressureTransitionPeriod: 5s\nimageMinimumGCAge: 0s\n").as_bytes()).unwrap();
        assert_eq!(
            c.eviction_hard,
            vec![Threshold { signal: Signal::NodeFsInodesFree, value: ThresholdValue::Quantity(1000, false) }]
        );
        assert_eq!(
            (c.eviction_pressure_transition_period, c.image_minimum_gc_age),
            (Duration::from_secs(5), Duration::ZERO)
        );
        let errors = parse(
            format!("{head}evictionHard: {{disk.free: 1Gi}}\nevictionPressureTransitionPeriod: soon\n").as_bytes(),
        )
        .unwrap_err();
        assert_eq!(errors.len(), 2, "{errors:?}");
        assert!(errors[0].contains("unsupported eviction signal disk.free"), "{errors:?}");
        assert!(errors[1].contains("evictionPressureTransitionPeriod \"soon\""), "{errors:?}");
    }

    #[test]
    fn reports_every_problem() {
        let yaml = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nimagePullCredentialsVerificationPolicy: Sometimes\npreloadedImagesVerificationAllowlist: [\"/*\", \"alpine\"]\nmaxParallelImagePulls: 2\n";
        let errors = parse(yaml.as_bytes()).unwrap_err();
        assert_eq!(errors[0], "unknown image pull credential verification policy: Sometimes");
        assert_eq!(errors[1], "invalid preloadedImagesVerificationAllowlist: at least registry hostname is required");
        assert_eq!(
            errors[2],
            "invalid preloadedImagesVerificationAllowlist: neither tag nor digest is accepted in an image reference: alpine"
        );
        assert!(errors[3].contains("maxParallelImagePulls cannot be larger than 1"));
        assert_eq!(errors.len(), 4);
        assert!(parse(b"apiVersion: v1\nkind: Pod\n").unwrap_err()[0].starts_with("no kind"));
    }

    #[test]
    fn log_rotation_and_max_pods_follow_the_kubelets_defaults_and_bounds() {
        let head = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n";
        let c = parse(head.as_bytes()).unwrap();
        assert_eq!(
            (c.container_log_max_size, c.container_log_max_files, c.container_log_monitor_interval, c.max_pods),
            (10 << 20, 5, Duration::from_secs(10), 110)
        );
        let set = format!(
            "{head}containerLogMaxSize: 100Ki\ncontainerLogMaxFiles: 2\ncontainerLogMonitorInterval: 3s\nmaxPods: 3\n"
        );
        let c = parse(set.as_bytes()).unwrap();
        assert_eq!(
            (c.container_log_max_size, c.container_log_max_files, c.container_log_monitor_interval, c.max_pods),
            (100 << 10, 2, Duration::from_secs(3), 3)
        );
        assert_eq!(
            parse(format!("{head}containerLogMaxSize: \"-1\"\n").as_bytes()).unwrap().container_log_max_size,
            -1
        );
        let bad = format!(
            "{head}containerLogMaxSize: lots\ncontainerLogMaxFiles: 1\ncontainerLogMonitorInterval: 1s\nmaxPods: -1\n"
        );
        let errors = parse(bad.as_bytes()).unwrap_err();
        assert!(errors[0].starts_with("failed to parse container log max size \"lots\""), "{errors:?}");
        assert!(errors[1].contains("containerLogMaxFiles (--container-log-max-files) 1 must be greater than 1"));
        assert!(errors[2].contains("containerLogMonitorInterval \"1s\" must be a positive time duration"));
        assert!(errors[3].contains("maxPods (--max-pods) -1 must not be a negative number"));
        assert_eq!(errors.len(), 4);
    }
}
