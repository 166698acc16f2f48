//! A container's CRI configuration (kubelet: `generateContainerConfig`,
//! `makeEnvironmentVariables`, `makeMounts`, `generateLinuxContainerResources`,
//! `getSeccompProfile`, `convertToRuntimeCapabilities`): its mounts, environment with
//! `$(VAR)` expansion under a bound, cgroup limits, capabilities and seccomp profile. What
//! cannot be configured is a [`ConfigError`], the pod's `CreateContainerConfigError`.

use std::collections::HashMap;
use std::path::Path;

use k8s_openapi::api::core::v1::{Container, Pod};

use super::containers::{
    CONTAINER_HASH_ANNOTATION, CONTAINER_NAME_LABEL, PodRuntime, container_hash, host_network, labels,
};
use crate::runtime::{
    ContainerConfig, ContainerMetadata, ImageSpec, Int64Value, KeyValue, LinuxContainerConfig, LinuxContainerResources,
    LinuxContainerSecurityContext, Mount, NAMESPACE_CONTAINER, NAMESPACE_NODE, NAMESPACE_POD, NamespaceOption,
};
use crate::volumes::{pod_dir, volume_dir};

/// Why a container cannot be configured (`CreateContainerConfigError`), in the kubelet's
/// words where it has them.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ConfigError {
    /// The expansion went past [`MAX_EXPANDED_BYTES`].
    #[error("the container's environment, command and arguments expand past {MAX_EXPANDED_BYTES} bytes (ARG_MAX)")]
    TooLarge,
    /// A `volumeMounts` entry names no volume.
    #[error("volumeMount {0:?}: no volume of that name")]
    NoVolume(String),
    /// A volume name that is no DNS label.
    #[error("volume {0:?}: not a valid volume name")]
    VolumeName(String),
    /// An emptyDir could not be made.
    #[error("emptyDir {volume:?}: {reason}")]
    EmptyDir { volume: String, reason: String },
    /// A volume type this node does not mount.
    #[error("volume {0:?}: podpass mounts projected, configMap, secret, downwardAPI and emptyDir volumes only")]
    UnsupportedVolume(String),
    /// A subPath that does not resolve safely beneath its volume.
    #[error("failed to prepare subPath for volumeMount {mount:?} of container {container:?}: {source}")]
    SubPath { mount: String, container: String, source: crate::volumes::SubPathError },
    /// The API could not be asked for a referenced object.
    #[error(transparent)]
    Api(#[from] crate::api::RequestError),
    /// A config map the environment needs is missing.
    #[error("configmap {0:?} not found")]
    ConfigMapNotFound(String),
    /// A secret the environment needs is missing.
    #[error("secret {0:?} not found")]
    SecretNotFound(String),
    /// A key of a config map the environment needs is missing.
    #[error("couldn't find key {key} in ConfigMap {namespace}/{name}")]
    ConfigMapKey { key: String, namespace: String, name: String },
    /// A key of a secret the environment needs is missing.
    #[error("couldn't find key {key} in Secret {namespace}/{name}")]
    SecretKey { key: String, namespace: String, name: String },
    /// A `fieldRef` this node does not resolve.
    #[error("env {env:?}: fieldRef {path:?} is not supported")]
    FieldRef { env: String, path: String },
    /// `resourceFieldRef` in the environment.
    #[error("env {0:?}: resourceFieldRef is not supported")]
    ResourceFieldRef(String),
    /// A resource quantity that does not parse.
    #[error("resources {name}: {source}")]
    Quantity { name: String, source: podpass_api::quantity::QuantityError },
    /// A privileged container.
    #[error("privileged containers are not run by podpass (they own the node)")]
    Privileged,
    /// The mounts' blocking task failed.
    #[error("setting up the container's mounts: {0}")]
    MountTask(tokio::task::JoinError),
    /// A Localhost seccomp profile outside the profiles directory.
    #[error("seccompProfile.localhostProfile {0:?} must be a relative path without '..'")]
    SeccompPath(String),
    /// A seccomp profile type upstream does not know.
    #[error("seccompProfile.type {0:?} is not RuntimeDefault, Unconfined or Localhost")]
    SeccompType(String),
}

/// The mounts of container `c`: every `volumeMounts` entry onto its volume's directory
/// under `root` (emptyDirs made, memory ones mounted, sized within `allocatable_memory`).
/// Blocking: file system calls and mounts.
fn mounts(root: &Path, allocatable_memory: u64, pod: &Pod, c: &Container) -> Result<Vec<Mount>, ConfigError> {
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let volumes = pod.spec.as_ref().and_then(|s| s.volumes.clone()).unwrap_or_default();
    let mut out = Vec::new();
    for (index, vm) in c.volume_mounts.iter().flatten().enumerate() {
        let volume =
            volumes.iter().find(|v| v.name == vm.name).ok_or_else(|| ConfigError::NoVolume(vm.name.clone()))?;
        let written = crate::volumes::as_projection(volume);
        let dir = if let Some((plugin, _)) = &written {
            volume_dir(root, &uid, plugin, &volume.name)
        } else if let Some(empty) = &volume.empty_dir {
            // A DNS label, as API validation makes it: nothing is made or mounted outside
            // the pod's directory whatever the API server let through.
            if !crate::volumes::safe_segment(&volume.name, false) || volume.name.len() > 63 {
                return Err(ConfigError::VolumeName(volume.name.clone()));
            }
            let dir = pod_dir(root, &uid).join("volumes/kubernetes.io~empty-dir").join(&volume.name);
            if empty.medium.as_deref() == Some("Memory") {
                // emptyDir's setupTmpfs, sized by calculateEmptyDirMemorySize.
                let size = crate::volumes::tmpfs_size(pod, allocatable_memory, empty.size_limit.as_ref());
                crate::volumes::set_up_memory_volume(&dir, size)
                    .map_err(|e| ConfigError::EmptyDir { volume: volume.name.clone(), reason: e.to_string() })?;
            } else {
                std::fs::create_dir_all(&dir)
                    .map_err(|e| ConfigError::EmptyDir { volume: volume.name.clone(), reason: e.to_string() })?;
                // The kubelet's emptyDir is 0777: any user the containers run as may write it.
                std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o777))
                    .map_err(|e| ConfigError::EmptyDir { volume: volume.name.clone(), reason: e.to_string() })?;
            }
            dir
        } else {
            return Err(ConfigError::UnsupportedVolume(volume.name.clone()));
        };
        let host = match vm.sub_path.as_deref().filter(|s| !s.is_empty()) {
            // Opened beneath the volume and bind-mounted by descriptor (CVE-2021-25741): the
            // runtime is given a path only the node writes, never the pod's string.
            Some(sub) => {
                let s = crate::volumes::SubPath {
                    volume_dir: &dir,
                    volume: &volume.name,
                    container: &c.name,
                    index,
                    sub_path: sub,
                };
                crate::volumes::prepare_sub_path(root, &uid, s).map_err(|source| ConfigError::SubPath {
                    mount: vm.name.clone(),
                    container: c.name.clone(),
                    source,
                })?
            }
            None => dir,
        };
        out.push(Mount {
            container_path: vm.mount_path.clone(),
            host_path: host.display().to_string(),
            // Written volumes are the node's to update: read-only in the container.
            readonly: vm.read_only.unwrap_or(false) || written.is_some(),
            ..Default::default()
        });
    }
    Ok(out)
}

/// The most bytes a container's environment (names and values), command and arguments
/// may hold once expanded: a quarter of the default 8 MiB stack, Linux's `ARG_MAX` past
/// which the container's exec fails anyway. A tenant's `$(VAR)` doubling stops here, as a
/// `CreateContainerConfigError`, instead of growing in the agent's memory.
pub(crate) const MAX_EXPANDED_BYTES: usize = 2 << 20;

/// `$(VAR)` of an env value, command or argument as the kubelet expands it: a variable
/// defined earlier is replaced, `$$` is a `$`, anything else is left as written. At most
/// `limit` bytes are produced: past it the expansion stops with an error.
pub(crate) fn expand(input: &str, vars: &[KeyValue], limit: usize) -> Result<String, ConfigError> {
    let mut out = String::with_capacity(input.len().min(limit));
    let mut rest = input;
    let push = |out: &mut String, s: &str| {
        if out.len() + s.len() > limit {
            return Err(ConfigError::TooLarge);
        }
        out.push_str(s);
        Ok(())
    };
    while let Some(i) = rest.find('$') {
        push(&mut out, &rest[..i])?;
        let after = &rest[i + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            push(&mut out, "$")?;
            rest = tail;
        } else if let Some(body) = after.strip_prefix('(')
            && let Some(end) = body.find(')')
            && let Some(v) = vars.iter().rev().find(|v| v.key == body[..end])
        {
            push(&mut out, &v.value)?;
            rest = &body[end + 1..];
        } else {
            push(&mut out, "$")?;
            rest = after;
        }
    }
    push(&mut out, rest)?;
    Ok(out)
}

/// The bytes an environment holds (each `NAME=value` with its terminator, as exec counts).
fn env_bytes(vars: &[KeyValue]) -> usize {
    vars.iter().map(|v| v.key.len() + v.value.len() + 2).sum()
}

fn set(out: &mut Vec<KeyValue>, key: String, value: String) {
    match out.iter_mut().find(|v| v.key == key) {
        Some(v) => v.value = value,
        None => out.push(KeyValue { key, value }),
    }
}

/// The environment of container `c` (kubelet `makeEnvironmentVariables`): `envFrom`
/// config maps and secrets (with their prefix), then `env` — `value` with `$(VAR)`
/// expansion, `fieldRef` of the pod, `configMapKeyRef`, `secretKeyRef` — a later name
/// replacing an earlier one. What is missing and not `optional` is the kubelet's error.
async fn envs(
    pod: &Pod,
    c: &Container,
    pod_ip: &str,
    sources: &dyn crate::volumes::ProjectionSources,
) -> Result<Vec<KeyValue>, ConfigError> {
    let m = &pod.metadata;
    let ns = m.namespace.clone().unwrap_or_default();
    let spec = pod.spec.clone().unwrap_or_default();
    let mut out: Vec<KeyValue> = Vec::new();
    for from in c.env_from.iter().flatten() {
        let prefix = from.prefix.clone().unwrap_or_default();
        if let Some(r) = &from.config_map_ref {
            match sources.config_map(&ns, &r.name).await? {
                Some(cm) => {
                    for (k, v) in cm.data.unwrap_or_default() {
                        set(&mut out, format!("{prefix}{k}"), v);
                    }
                }
                None if r.optional == Some(true) => {}
                None => return Err(ConfigError::ConfigMapNotFound(r.name.clone())),
            }
        }
        if let Some(r) = &from.secret_ref {
            match sources.secret(&ns, &r.name).await? {
                Some(secret) => {
                    for (k, v) in secret.data.unwrap_or_default() {
                        set(&mut out, format!("{prefix}{k}"), String::from_utf8_lossy(&v.0).into_owned());
                    }
                }
                None if r.optional == Some(true) => {}
                None => return Err(ConfigError::SecretNotFound(r.name.clone())),
            }
        }
    }
    // What envFrom brought counts against the bound too; each value below is expanded
    // within what is left of it.
    let mut used = env_bytes(&out);
    if used > MAX_EXPANDED_BYTES {
        return Err(ConfigError::TooLarge);
    }
    for e in c.env.iter().flatten() {
        let value = match (&e.value, &e.value_from) {
            (Some(v), _) => expand(v, &out, MAX_EXPANDED_BYTES - used)?,
            (None, None) => String::new(),
            (None, Some(from)) => {
                if let Some(f) = &from.field_ref {
                    match f.field_path.as_str() {
                        "metadata.name" => m.name.clone().unwrap_or_default(),
                        "metadata.namespace" => ns.clone(),
                        "metadata.uid" => m.uid.clone().unwrap_or_default(),
                        "spec.nodeName" => spec.node_name.clone().unwrap_or_default(),
                        "spec.serviceAccountName" => spec.service_account_name.clone().unwrap_or_default(),
                        "status.podIP" | "status.podIPs" => pod_ip.to_owned(),
                        // `metadata.labels['k']`, `metadata.annotations['k']` (an Indexed
                        // Job's JOB_COMPLETION_INDEX reads its annotation).
                        other => match crate::volumes::subscripted(m, other) {
                            Some(v) => v,
                            None => return Err(ConfigError::FieldRef { env: e.name.clone(), path: other.to_owned() }),
                        },
                    }
                } else if let Some(r) = &from.config_map_key_ref {
                    let found = sources.config_map(&ns, &r.name).await?;
                    match (found, r.optional == Some(true)) {
                        (Some(cm), optional) => match cm.data.and_then(|d| d.get(&r.key).cloned()) {
                            Some(v) => v,
                            None if optional => continue,
                            None => {
                                return Err(ConfigError::ConfigMapKey {
                                    key: r.key.clone(),
                                    namespace: ns,
                                    name: r.name.clone(),
                                });
                            }
                        },
                        (None, true) => continue,
                        (None, false) => return Err(ConfigError::ConfigMapNotFound(r.name.clone())),
                    }
                } else if let Some(r) = &from.secret_key_ref {
                    let found = sources.secret(&ns, &r.name).await?;
                    match (found, r.optional == Some(true)) {
                        (Some(secret), optional) => match secret.data.and_then(|d| d.get(&r.key).cloned()) {
                            Some(v) => String::from_utf8_lossy(&v.0).into_owned(),
                            None if optional => continue,
                            None => {
                                return Err(ConfigError::SecretKey {
                                    key: r.key.clone(),
                                    namespace: ns,
                                    name: r.name.clone(),
                                });
                            }
                        },
                        (None, true) => continue,
                        (None, false) => return Err(ConfigError::SecretNotFound(r.name.clone())),
                    }
                } else {
                    return Err(ConfigError::ResourceFieldRef(e.name.clone()));
                }
            }
        };
        let replaced = out.iter().find(|v| v.key == e.name).map_or(0, |v| v.key.len() + v.value.len() + 2);
        used = (used - replaced).saturating_add(e.name.len() + value.len() + 2);
        if used > MAX_EXPANDED_BYTES {
            return Err(ConfigError::TooLarge);
        }
        set(&mut out, e.name.clone(), value);
    }
    Ok(out)
}

/// The cgroup limits of container `c` (kubelet `generateLinuxContainerResources`): CPU
/// shares from the request (`MilliCPUToShares`, at least 2), a CFS quota from the limit
/// (`MilliCPUToQuota`, period 100 ms, at least 1 ms), the memory limit in bytes.
fn resources(c: &Container) -> Result<LinuxContainerResources, ConfigError> {
    let r = c.resources.clone().unwrap_or_default();
    let milli =
        |list: &Option<std::collections::BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>>,
         name: &str|
         -> Result<Option<i128>, ConfigError> {
            match list.as_ref().and_then(|l| l.get(name)) {
                None => Ok(None),
                Some(q) => podpass_api::quantity::parse_milli(&q.0)
                    .map(Some)
                    .map_err(|source| ConfigError::Quantity { name: name.to_owned(), source }),
            }
        };
    let to_i64 = |v: i128| i64::try_from(v).unwrap_or(i64::MAX);
    // Requests default to limits, as API defaulting does.
    let cpu_request = milli(&r.requests, "cpu")?.or(milli(&r.limits, "cpu")?);
    let mut out = LinuxContainerResources {
        cpu_shares: cpu_request.map_or(2, |m| to_i64((m * 1024 / 1000).max(2))),
        ..Default::default()
    };
    if let Some(limit) = milli(&r.limits, "cpu")? {
        out.cpu_period = 100_000;
        out.cpu_quota = to_i64((limit * 100_000 / 1000).max(1000));
    }
    if let Some(memory) = milli(&r.limits, "memory")? {
        out.memory_limit_in_bytes = to_i64((memory + 999) / 1000);
    }
    Ok(out)
}

/// Container `c`'s CRI config for restart number `attempt`.
pub(super) async fn container_config(
    rt: &PodRuntime,
    pod: &Pod,
    c: &Container,
    attempt: u32,
    image_ref: &str,
    pod_ip: &str,
    sources: &dyn crate::volumes::ProjectionSources,
) -> Result<ContainerConfig, ConfigError> {
    let pod_sc = pod.spec.as_ref().and_then(|s| s.security_context.clone()).unwrap_or_default();
    let sc = c.security_context.clone().unwrap_or_default();
    if sc.privileged == Some(true) {
        return Err(ConfigError::Privileged);
    }
    let mut groups = pod_sc.supplemental_groups.clone().unwrap_or_default();
    groups.extend(pod_sc.fs_group);
    let mut labels = labels(rt, pod);
    labels.insert(CONTAINER_NAME_LABEL.to_owned(), c.name.clone());
    let mut envs = envs(pod, c, pod_ip, sources).await?;
    // kubelet: the Service variables come last and never replace one the pod set.
    if let Some(in_cluster) = &rt.in_cluster {
        for kv in in_cluster.env(host_network(pod)).await {
            if !envs.iter().any(|e| e.key == kv.key) {
                envs.push(kv);
            }
        }
    }
    // Off the async workers: emptyDirs are made (and mounted) and subPaths resolved on disk.
    let (root, allocatable, owned_pod, owned_c) = (rt.root.clone(), rt.node_allocatable_memory, pod.clone(), c.clone());
    let mounts = tokio::task::spawn_blocking(move || mounts(&root, allocatable, &owned_pod, &owned_c))
        .await
        .map_err(ConfigError::MountTask)??;
    // The command and arguments expand within what the environment left of the bound.
    let mut left = MAX_EXPANDED_BYTES.saturating_sub(env_bytes(&envs));
    let mut expanded = |list: &Option<Vec<String>>| -> Result<Vec<String>, ConfigError> {
        let mut out = Vec::new();
        for a in list.iter().flatten() {
            let e = expand(a, &envs, left)?;
            left = left.saturating_sub(e.len() + 1);
            out.push(e);
        }
        Ok(out)
    };
    let (command, args) = (expanded(&c.command)?, expanded(&c.args)?);
    Ok(ContainerConfig {
        metadata: Some(ContainerMetadata { name: c.name.clone(), attempt }),
        image: Some(ImageSpec { image: image_ref.to_owned(), annotations: HashMap::new() }),
        command,
        args,
        working_dir: c.working_dir.clone().unwrap_or_default(),
        envs,
        mounts,
        labels,
        annotations: HashMap::from([
            ("io.kubernetes.container.restartCount".to_owned(), attempt.to_string()),
            (CONTAINER_HASH_ANNOTATION.to_owned(), container_hash(c)),
        ]),
        log_path: format!("{}/{attempt}.log", c.name),
        stdin: c.stdin.unwrap_or(false),
        stdin_once: c.stdin_once.unwrap_or(false),
        tty: c.tty.unwrap_or(false),
        linux: Some(LinuxContainerConfig {
            resources: Some(resources(c)?),
            security_context: Some(LinuxContainerSecurityContext {
                namespace_options: Some(NamespaceOption {
                    network: if host_network(pod) { NAMESPACE_NODE } else { NAMESPACE_POD },
                    pid: NAMESPACE_CONTAINER,
                    ipc: NAMESPACE_POD,
                    target_id: String::new(),
                }),
                run_as_user: sc.run_as_user.or(pod_sc.run_as_user).map(|value| Int64Value { value }),
                run_as_group: sc.run_as_group.or(pod_sc.run_as_group).map(|value| Int64Value { value }),
                readonly_rootfs: sc.read_only_root_filesystem.unwrap_or(false),
                supplemental_groups: groups,
                no_new_privs: sc.allow_privilege_escalation == Some(false),
                capabilities: Some(capabilities(c)),
                seccomp: Some(seccomp(&rt.root, rt.seccomp_default, pod, c)?),
                ..Default::default()
            }),
        }),
    })
}

/// The capabilities a container may add to the runtime's default set: Pod Security's
/// baseline list (`capabilities.add` beyond it is not honoured by this node). All are in
/// the runtime's default set already; adding one back matters after `drop: [ALL]`, as
/// restricted pods write it.
use podpass_api::validation::BASELINE_CAPABILITIES as ADDABLE_CAPABILITIES;

/// Container `c`'s capabilities against the runtime's default set (kubelet:
/// `convertToRuntimeCapabilities`): its `drop` as written, its `add` within
/// [`ADDABLE_CAPABILITIES`], and `NET_RAW` always dropped — a container on this node never
/// crafts packets or captures another's traffic (containerd's default set has it).
fn capabilities(c: &Container) -> crate::runtime::Capability {
    let caps = c.security_context.as_ref().and_then(|s| s.capabilities.clone()).unwrap_or_default();
    // Upstream accepts the names with or without `CAP_`; the runtime is given them without.
    let bare = |n: &String| n.strip_prefix("CAP_").unwrap_or(n).to_owned();
    let add: Vec<String> =
        caps.add.iter().flatten().map(bare).filter(|n| ADDABLE_CAPABILITIES.contains(&n.as_str())).collect();
    let mut drop: Vec<String> = caps.drop.iter().flatten().map(bare).collect();
    if !drop.iter().any(|d| d == "ALL" || d == "NET_RAW") {
        drop.push("NET_RAW".to_owned());
    }
    crate::runtime::Capability { add_capabilities: add, drop_capabilities: drop }
}

/// Container `c`'s seccomp profile (kubelet: `getSeccompProfile`): the container's
/// `seccompProfile`, else the pod's, else RuntimeDefault under `seccompDefault` and
/// Unconfined without it. A Localhost profile is a file under `<root>/seccomp`, named by a
/// relative path without `..`.
fn seccomp(
    root: &Path,
    seccomp_default: bool,
    pod: &Pod,
    c: &Container,
) -> Result<crate::runtime::SecurityProfile, ConfigError> {
    use crate::runtime::{PROFILE_LOCALHOST, PROFILE_RUNTIME_DEFAULT, PROFILE_UNCONFINED, SecurityProfile};
    let named = c.security_context.as_ref().and_then(|s| s.seccomp_profile.clone()).or_else(|| {
        pod.spec.as_ref().and_then(|s| s.security_context.as_ref()).and_then(|s| s.seccomp_profile.clone())
    });
    let Some(profile) = named else {
        let profile_type = if seccomp_default { PROFILE_RUNTIME_DEFAULT } else { PROFILE_UNCONFINED };
        return Ok(SecurityProfile { profile_type, localhost_ref: String::new() });
    };
    match profile.type_.as_str() {
        "RuntimeDefault" => Ok(SecurityProfile { profile_type: PROFILE_RUNTIME_DEFAULT, localhost_ref: String::new() }),
        "Unconfined" => Ok(SecurityProfile { profile_type: PROFILE_UNCONFINED, localhost_ref: String::new() }),
        "Localhost" => {
            let name = profile.localhost_profile.unwrap_or_default();
            let relative = Path::new(&name);
            if name.is_empty()
                || relative.is_absolute()
                || relative.components().any(|c| !matches!(c, std::path::Component::Normal(_)))
            {
                return Err(ConfigError::SeccompPath(name));
            }
            let path = root.join("seccomp").join(relative);
            Ok(SecurityProfile { profile_type: PROFILE_LOCALHOST, localhost_ref: path.display().to_string() })
        }
        other => Err(ConfigError::SeccompType(other.to_owned())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variables_expand_as_the_kubelets() {
        let vars = [KeyValue { key: "POD".into(), value: "web".into() }];
        let expand = |s: &str| expand(s, &vars, 1024).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(expand("name=$(POD)"), "name=web");
        assert_eq!(expand("$$(POD) $(MISSING) $ $("), "$(POD) $(MISSING) $ $(");
        assert_eq!(expand("$(POD)$(POD)"), "webweb");
    }

    #[test]
    fn doubling_variables_stop_at_the_bound_not_in_the_agents_memory() {
        // 40 variables each twice the one before: 2^40 bytes if nothing stopped them.
        let mut vars = vec![KeyValue { key: "V0".into(), value: "x".repeat(64) }];
        let mut failed = None;
        for i in 1..40 {
            match expand(&format!("$(V{})$(V{})", i - 1, i - 1), &vars, MAX_EXPANDED_BYTES) {
                Ok(value) => vars.push(KeyValue { key: format!("V{i}"), value }),
                Err(e) => {
                    failed = Some((i, e));
                    break;
                }
            }
        }
        let (at, e) = failed.unwrap_or_else(|| panic!("40 doublings were all expanded"));
        assert!(at < 20, "stopped at variable {at}");
        assert!(matches!(e, ConfigError::TooLarge) && e.to_string().contains("ARG_MAX"), "{e}");
        assert!(vars.iter().all(|v| v.value.len() <= MAX_EXPANDED_BYTES));
    }

    #[test]
    fn limits_become_the_kubelets_cgroup_settings() {
        let c: Container = serde_json::from_value(serde_json::json!({"name": "c", "resources": {
            "requests": {"cpu": "250m"}, "limits": {"cpu": "500m", "memory": "64Mi"}}}))
        .unwrap_or_default();
        let r = resources(&c).unwrap_or_default();
        assert_eq!((r.cpu_shares, r.cpu_quota, r.cpu_period), (256, 50_000, 100_000));
        assert_eq!(r.memory_limit_in_bytes, 64 << 20);
        let none = resources(&Container::default()).unwrap_or_default();
        assert_eq!((none.cpu_shares, none.cpu_quota, none.memory_limit_in_bytes), (2, 0, 0));
        let bad: Container =
            serde_json::from_value(serde_json::json!({"name": "c", "resources": {"limits": {"memory": "lots"}}}))
                .unwrap_or_default();
        assert!(resources(&bad).unwrap_err().to_string().starts_with("resources memory: quantities must match"));
    }

    #[test]
    fn net_raw_is_never_in_a_containers_capabilities_and_drop_all_can_add_back() {
        let c = |caps: serde_json::Value| -> Container {
            serde_json::from_value(serde_json::json!({"name": "c", "securityContext": {"capabilities": caps}}))
                .unwrap_or_default()
        };
        let none = capabilities(&Container::default());
        assert_eq!((none.add_capabilities.len(), none.drop_capabilities), (0, vec!["NET_RAW".to_owned()]));
        let restricted = capabilities(&c(serde_json::json!({"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]})));
        assert_eq!(restricted.drop_capabilities, ["ALL"]);
        assert_eq!(restricted.add_capabilities, ["NET_BIND_SERVICE"]);
        let greedy = capabilities(&c(serde_json::json!({"add": ["NET_RAW", "CAP_SYS_ADMIN", "CAP_CHOWN"]})));
        assert_eq!(greedy.add_capabilities, ["CHOWN"], "only the baseline's, without CAP_");
        assert!(greedy.drop_capabilities.contains(&"NET_RAW".to_owned()));
    }

    #[test]
    fn seccomp_follows_the_container_then_the_pod_then_seccomp_default() {
        use crate::runtime::{PROFILE_LOCALHOST, PROFILE_RUNTIME_DEFAULT, PROFILE_UNCONFINED};
        let pod = |p: serde_json::Value| -> Pod {
            serde_json::from_value(serde_json::json!({"spec": {"containers": [], "securityContext": p}}))
                .unwrap_or_default()
        };
        let root = Path::new("/var/lib/podpass");
        let plain = Container::default();
        let kind =
            |d: bool, p: &Pod, c: &Container| seccomp(root, d, p, c).map(|s| s.profile_type).map_err(|e| e.to_string());
        assert_eq!(kind(true, &pod(serde_json::json!({})), &plain), Ok(PROFILE_RUNTIME_DEFAULT));
        assert_eq!(kind(false, &pod(serde_json::json!({})), &plain), Ok(PROFILE_UNCONFINED));
        let unconfined = pod(serde_json::json!({"seccompProfile": {"type": "Unconfined"}}));
        assert_eq!(kind(true, &unconfined, &plain), Ok(PROFILE_UNCONFINED), "the pod's own choice");
        let own: Container = serde_json::from_value(serde_json::json!({"name": "c",
            "securityContext": {"seccompProfile": {"type": "Localhost", "localhostProfile": "profiles/audit.json"}}}))
        .unwrap_or_default();
        let local = seccomp(root, true, &unconfined, &own).unwrap_or_default();
        assert_eq!(local.profile_type, PROFILE_LOCALHOST, "the container's over the pod's");
        assert_eq!(local.localhost_ref, "/var/lib/podpass/seccomp/profiles/audit.json");
        let escape: Container = serde_json::from_value(serde_json::json!({"name": "c",
            "securityContext": {"seccompProfile": {"type": "Localhost", "localhostProfile": "../../etc/x"}}}))
        .unwrap_or_default();
        let refused = seccomp(root, true, &unconfined, &escape).unwrap_err();
        assert!(matches!(refused, ConfigError::SeccompPath(_)) && refused.to_string().contains("without '..'"));
    }
}
