//! The Pod Security Standards checks (upstream: `pod-security-admission/policy/check_*.go`),
//! each a pure function of the pod's metadata and spec, with the versions it applies to and
//! upstream's reasons and details word for word. [`evaluate`] runs them in upstream's order
//! (the registry's: baseline checks, then the overlapping baseline ones at baseline or the
//! restricted ones at restricted, each group in check-file order).

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{
    Container, LifecycleHandler, PodSecurityContext, PodSpec, Probe, SecurityContext, Volume,
};

use super::policy::{Level, LevelVersion};

/// A check that forbade the pod: its reason, and the detail naming what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Violation {
    /// `ForbiddenReason`.
    pub reason: String,
    /// `ForbiddenDetail` (may be empty).
    pub detail: String,
}

/// What a check reads of a pod.
pub(crate) struct PodView<'a> {
    /// `metadata.annotations`.
    pub annotations: &'a BTreeMap<String, String>,
    /// `spec`.
    pub spec: &'a PodSpec,
    /// Init, regular and ephemeral containers, in upstream's visiting order.
    pub containers: Vec<Container>,
}

impl<'a> PodView<'a> {
    /// The view of `spec` with `annotations`; ephemeral containers read as containers (the
    /// fields the checks read are the same).
    pub(crate) fn new(annotations: &'a BTreeMap<String, String>, spec: &'a PodSpec) -> Self {
        let mut containers: Vec<Container> = spec.init_containers.iter().flatten().cloned().collect();
        containers.extend(spec.containers.iter().cloned());
        for e in spec.ephemeral_containers.iter().flatten() {
            let as_container = serde_json::to_value(e)
                .ok()
                .and_then(|v| serde_json::from_value::<Container>(v).ok())
                .unwrap_or_default();
            containers.push(as_container);
        }
        PodView { annotations, spec, containers }
    }

    fn pod_sc(&self) -> Option<&PodSecurityContext> {
        self.spec.security_context.as_ref()
    }
}

fn sc(c: &Container) -> Option<&SecurityContext> {
    c.security_context.as_ref()
}

/// `joinQuote`: `"a", "b"`.
fn join_quote<S: AsRef<str>>(items: &[S]) -> String {
    items.iter().map(|i| format!("\"{}\"", i.as_ref())).collect::<Vec<_>>().join(", ")
}

/// `pluralize`.
fn plural<'s>(singular: &'s str, plural: &'s str, n: usize) -> &'s str {
    if n == 1 { singular } else { plural }
}

/// `container "a"` / `containers "a", "b"`.
fn containers_phrase(names: &[String]) -> String {
    format!("{} {}", plural("container", "containers", names.len()), join_quote(names))
}

fn violation(reason: impl Into<String>, detail: impl Into<String>) -> Option<Violation> {
    Some(Violation { reason: reason.into(), detail: detail.into() })
}

/// One check at one policy version: `None` allows.
type CheckFn = fn(&PodView<'_>, u32) -> Option<Violation>;

/// A check, the first version it applies to, and where it runs.
struct Check {
    min_minor: u32,
    kind: Kind,
    run: CheckFn,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Every level above privileged.
    Baseline,
    /// Baseline only (a restricted check covers it at restricted).
    BaselineOverlap,
    /// Restricted only.
    Restricted,
}

/// Every check, in upstream's file order.
const CHECKS: &[Check] = &[
    Check { min_minor: 8, kind: Kind::Restricted, run: allow_privilege_escalation },
    Check { min_minor: 0, kind: Kind::Baseline, run: app_armor_profile },
    Check { min_minor: 0, kind: Kind::BaselineOverlap, run: capabilities_baseline },
    Check { min_minor: 22, kind: Kind::Restricted, run: capabilities_restricted },
    Check { min_minor: 0, kind: Kind::Baseline, run: host_namespaces },
    Check { min_minor: 0, kind: Kind::BaselineOverlap, run: host_path_volumes },
    Check { min_minor: 0, kind: Kind::Baseline, run: host_ports },
    Check { min_minor: 34, kind: Kind::Baseline, run: host_probes_and_host_lifecycle },
    Check { min_minor: 0, kind: Kind::Baseline, run: privileged },
    Check { min_minor: 0, kind: Kind::Baseline, run: proc_mount },
    Check { min_minor: 0, kind: Kind::Restricted, run: restricted_volumes },
    Check { min_minor: 0, kind: Kind::Restricted, run: run_as_non_root },
    Check { min_minor: 23, kind: Kind::Restricted, run: run_as_user },
    Check { min_minor: 0, kind: Kind::Baseline, run: se_linux_options },
    Check { min_minor: 0, kind: Kind::BaselineOverlap, run: seccomp_profile_baseline },
    Check { min_minor: 19, kind: Kind::Restricted, run: seccomp_profile_restricted },
    Check { min_minor: 0, kind: Kind::Baseline, run: sysctls },
    Check { min_minor: 0, kind: Kind::Baseline, run: windows_host_process },
];

/// `EvaluatePod`: the violations of `pod` at `lv`, in upstream's order (none at privileged).
pub(crate) fn evaluate(lv: LevelVersion, pod: &PodView<'_>) -> Vec<Violation> {
    if lv.level == Level::Privileged {
        return Vec::new();
    }
    let minor = lv.version.minor();
    let applies = |c: &&Check| c.min_minor <= minor;
    let group = |kind: Kind| CHECKS.iter().filter(move |c| c.kind == kind).filter(applies);
    let second = if lv.level == Level::Baseline { Kind::BaselineOverlap } else { Kind::Restricted };
    group(Kind::Baseline).chain(group(second)).filter_map(|c| (c.run)(pod, minor)).collect()
}

/// `AggregateCheckResult.ForbiddenDetail`: `reason (detail), reason, …`.
pub(crate) fn forbidden_detail(violations: &[Violation]) -> String {
    violations
        .iter()
        .map(|v| if v.detail.is_empty() { v.reason.clone() } else { format!("{} ({})", v.reason, v.detail) })
        .collect::<Vec<_>>()
        .join(", ")
}

/// `AggregateCheckResult.ForbiddenReason`: the reasons alone.
pub(crate) fn forbidden_reason(violations: &[Violation]) -> String {
    violations.iter().map(|v| v.reason.as_str()).collect::<Vec<_>>().join(", ")
}

fn allow_privilege_escalation(pod: &PodView<'_>, _: u32) -> Option<Violation> {
    let bad: Vec<String> = pod
        .containers
        .iter()
        .filter(|c| sc(c).and_then(|s| s.allow_privilege_escalation) != Some(false))
        .map(|c| c.name.clone())
        .collect();
    if bad.is_empty() {
        return None;
    }
    violation(
        "allowPrivilegeEscalation != false",
        format!("{} must set securityContext.allowPrivilegeEscalation=false", containers_phrase(&bad)),
    )
}

fn app_armor_profile(pod: &PodView<'_>, _: u32) -> Option<Violation> {
    let allowed_type = |t: &str| matches!(t, "RuntimeDefault" | "Localhost");
    let mut setters: Vec<String> = Vec::new();
    let mut values: BTreeSet<String> = BTreeSet::new();
    if let Some(p) = pod.pod_sc().and_then(|s| s.app_armor_profile.as_ref())
        && !allowed_type(&p.type_)
    {
        setters.push("pod".into());
        values.insert(p.type_.clone());
    }
    let mut bad = Vec::new();
    for c in &pod.containers {
        if let Some(p) = sc(c).and_then(|s| s.app_armor_profile.as_ref())
            && !allowed_type(&p.type_)
        {
            bad.push(c.name.clone());
            values.insert(p.type_.clone());
        }
    }
    if !bad.is_empty() {
        setters.push(containers_phrase(&bad));
    }
    let mut annotations: Vec<String> = pod
        .annotations
        .iter()
        .filter(|(k, v)| {
            k.starts_with("container.apparmor.security.beta.kubernetes.io/")
                && !(v.is_empty() || *v == "runtime/default" || v.starts_with("localhost/"))
        })
        .map(|(k, v)| format!("{k}={v:?}"))
        .collect();
    annotations.sort();
    let mut value_list: Vec<String> = values.into_iter().collect();
    if !annotations.is_empty() {
        setters.push(plural("annotation", "annotations", annotations.len()).to_owned());
        value_list.extend(annotations);
    }
    if setters.is_empty() {
        return None;
    }
    violation(
        plural("forbidden AppArmor profile", "forbidden AppArmor profiles", value_list.len()),
        format!("{} must not set AppArmor profile type to {}", setters.join(" and "), join_quote(&value_list)),
    )
}

/// The capabilities baseline lets a container add (the runtime's default set).
pub(crate) use podpass_api::validation::BASELINE_CAPABILITIES;

fn capabilities_baseline(pod: &PodView<'_>, _: u32) -> Option<Violation> {
    let mut bad = Vec::new();
    let mut caps = BTreeSet::new();
    for c in &pod.containers {
        let added = sc(c).and_then(|s| s.capabilities.as_ref()).and_then(|c| c.add.as_ref());
        let forbidden: Vec<&String> =
            added.into_iter().flatten().filter(|a| !BASELINE_CAPABILITIES.contains(&a.as_str())).collect();
        if !forbidden.is_empty() {
            bad.push(c.name.clone());
            caps.extend(forbidden.into_iter().cloned());
        }
    }
    if bad.is_empty() {
        return None;
    }
    let caps: Vec<String> = caps.into_iter().collect();
    violation(
        "non-default capabilities",
        format!(
            "{} must not include {} in securityContext.capabilities.add",
            containers_phrase(&bad),
            join_quote(&caps)
        ),
    )
}

fn capabilities_restricted(pod: &PodView<'_>, _: u32) -> Option<Violation> {
    let (mut missing_drop, mut adding) = (Vec::new(), Vec::new());
    let mut forbidden = BTreeSet::new();
    for c in &pod.containers {
        let Some(caps) = sc(c).and_then(|s| s.capabilities.as_ref()) else {
            missing_drop.push(c.name.clone());
            continue;
        };
        if !caps.drop.iter().flatten().any(|d| d == "ALL") {
            missing_drop.push(c.name.clone());
        }
        let extra: Vec<&String> = caps.add.iter().flatten().filter(|a| *a != "NET_BIND_SERVICE").collect();
        if !extra.is_empty() {
            adding.push(c.name.clone());
            forbidden.extend(extra.into_iter().cloned());
        }
    }
    let mut details = Vec::new();
    if !missing_drop.is_empty() {
        details
            .push(format!("{} must set securityContext.capabilities.drop=[\"ALL\"]", containers_phrase(&missing_drop)));
    }
    if !adding.is_empty() {
        let forbidden: Vec<String> = forbidden.into_iter().collect();
        details.push(format!(
            "{} must not include {} in securityContext.capabilities.add",
            containers_phrase(&adding),
            join_quote(&forbidden)
        ));
    }
    if details.is_empty() {
        return None;
    }
    violation("unrestricted capabilities", details.join("; "))
}

fn host_namespaces(pod: &PodView<'_>, _: u32) -> Option<Violation> {
    let s = pod.spec;
    // sets.NewString(...).List(): sorted.
    let mut set: Vec<&str> = [("hostNetwork", s.host_network), ("hostPID", s.host_pid), ("hostIPC", s.host_ipc)]
        .into_iter()
        .filter(|(_, on)| *on == Some(true))
        .map(|(name, _)| name)
        .collect();
    set.sort_unstable();
    if set.is_empty() {
        return None;
    }
    violation("host namespaces", set.iter().map(|n| format!("{n}=true")).collect::<Vec<_>>().join(", "))
}

fn host_path_volumes(pod: &PodView<'_>, _: u32) -> Option<Violation> {
    let names: Vec<String> =
        pod.spec.volumes.iter().flatten().filter(|v| v.host_path.is_some()).map(|v| v.name.clone()).collect();
    if names.is_empty() {
        return None;
    }
    violation("hostPath volumes", format!("{} {}", plural("volume", "volumes", names.len()), join_quote(&names)))
}

fn host_ports(pod: &PodView<'_>, _: u32) -> Option<Violation> {
    let mut bad = Vec::new();
    let mut ports: BTreeSet<String> = BTreeSet::new();
    for c in &pod.containers {
        let used: Vec<i32> = c.ports.iter().flatten().filter_map(|p| p.host_port).filter(|p| *p != 0).collect();
        if !used.is_empty() {
            bad.push(c.name.clone());
            ports.extend(used.iter().map(i32::to_string));
        }
    }
    if bad.is_empty() {
        return None;
    }
    let ports: Vec<String> = ports.into_iter().collect();
    violation(
        "hostPort",
        format!(
            "{} {} {} {}",
            containers_phrase(&bad),
            plural("uses", "use", bad.len()),
            plural("hostPort", "hostPorts", ports.len()),
            ports.join(", ")
        ),
    )
}

fn host_probes_and_host_lifecycle(pod: &PodView<'_>, _: u32) -> Option<Violation> {
    fn probe(p: Option<&Probe>, out: &mut Vec<String>) {
        if let Some(p) = p {
            out.extend(p.http_get.as_ref().and_then(|h| h.host.clone()).filter(|h| !h.is_empty()));
            out.extend(p.tcp_socket.as_ref().and_then(|t| t.host.clone()).filter(|h| !h.is_empty()));
        }
    }
    fn handler(h: Option<&LifecycleHandler>, out: &mut Vec<String>) {
        if let Some(h) = h {
            out.extend(h.http_get.as_ref().and_then(|g| g.host.clone()).filter(|h| !h.is_empty()));
            out.extend(h.tcp_socket.as_ref().and_then(|t| t.host.clone()).filter(|h| !h.is_empty()));
        }
    }
    let (mut bad, mut hosts) = (BTreeSet::new(), BTreeSet::new());
    for c in &pod.containers {
        let mut found = Vec::new();
        probe(c.liveness_probe.as_ref(), &mut found);
        probe(c.readiness_probe.as_ref(), &mut found);
        probe(c.startup_probe.as_ref(), &mut found);
        if let Some(l) = &c.lifecycle {
            handler(l.post_start.as_ref(), &mut found);
            handler(l.pre_stop.as_ref(), &mut found);
        }
        if !found.is_empty() {
            bad.insert(c.name.clone());
            hosts.extend(found);
        }
    }
    if bad.is_empty() {
        return None;
    }
    let (bad, hosts): (Vec<String>, Vec<String>) = (bad.into_iter().collect(), hosts.into_iter().collect());
    violation(
        "probe or lifecycle host",
        format!(
            "{} {} {} {}",
            containers_phrase(&bad),
            plural("uses", "use", bad.len()),
            plural("probe or lifecycle host", "probe or lifecycle hosts", hosts.len()),
            join_quote(&hosts)
        ),
    )
}

fn privileged(pod: &PodView<'_>, _: u32) -> Option<Violation> {
    let bad: Vec<String> = pod
        .containers
        .iter()
        .filter(|c| sc(c).and_then(|s| s.privileged) == Some(true))
        .map(|c| c.name.clone())
        .collect();
    if bad.is_empty() {
        return None;
    }
    violation("privileged", format!("{} must not set securityContext.privileged=true", containers_phrase(&bad)))
}

fn proc_mount(pod: &PodView<'_>, _: u32) -> Option<Violation> {
    let mut bad = Vec::new();
    let mut types = BTreeSet::new();
    for c in &pod.containers {
        if let Some(t) = sc(c).and_then(|s| s.proc_mount.as_ref())
            && t != "Default"
        {
            bad.push(c.name.clone());
            types.insert(t.clone());
        }
    }
    if bad.is_empty() {
        return None;
    }
    let types: Vec<String> = types.into_iter().collect();
    violation(
        "procMount",
        format!("{} must not set securityContext.procMount to {}", containers_phrase(&bad), join_quote(&types)),
    )
}

/// The volume types restricted allows.
fn unrestricted_volume(v: &Volume) -> bool {
    v.config_map.is_some()
        || v.csi.is_some()
        || v.downward_api.is_some()
        || v.empty_dir.is_some()
        || v.ephemeral.is_some()
        || v.persistent_volume_claim.is_some()
        || v.projected.is_some()
        || v.secret.is_some()
}

fn restricted_volumes(pod: &PodView<'_>, _: u32) -> Option<Violation> {
    let names: BTreeSet<String> =
        pod.spec.volumes.iter().flatten().filter(|v| !unrestricted_volume(v)).map(|v| v.name.clone()).collect();
    if names.is_empty() {
        return None;
    }
    // Go's %q of a []string: ["a" "b"].
    let quoted = names.iter().map(|n| format!("{n:?}")).collect::<Vec<_>>().join(" ");
    violation("restricted volume types", format!("volumes [{quoted}] have restricted types"))
}

fn run_as_non_root(pod: &PodView<'_>, _: u32) -> Option<Violation> {
    let mut setters = Vec::new();
    let mut pod_non_root = false;
    match pod.pod_sc().and_then(|s| s.run_as_non_root) {
        Some(false) => setters.push("pod".to_owned()),
        Some(true) => pod_non_root = true,
        None => {}
    }
    let (mut explicit, mut implicit) = (Vec::new(), Vec::new());
    for c in &pod.containers {
        match sc(c).and_then(|s| s.run_as_non_root) {
            Some(false) => explicit.push(c.name.clone()),
            Some(true) => {}
            None if !pod_non_root => implicit.push(c.name.clone()),
            None => {}
        }
    }
    if !explicit.is_empty() {
        setters.push(containers_phrase(&explicit));
    }
    if !setters.is_empty() {
        return violation(
            "runAsNonRoot != true",
            format!("{} must not set securityContext.runAsNonRoot=false", setters.join(" and ")),
        );
    }
    if !implicit.is_empty() {
        return violation(
            "runAsNonRoot != true",
            format!("pod or {} must set securityContext.runAsNonRoot=true", containers_phrase(&implicit)),
        );
    }
    None
}

fn run_as_user(pod: &PodView<'_>, _: u32) -> Option<Violation> {
    let mut setters = Vec::new();
    if pod.pod_sc().and_then(|s| s.run_as_user) == Some(0) {
        setters.push("pod".to_owned());
    }
    let bad: Vec<String> = pod
        .containers
        .iter()
        .filter(|c| sc(c).and_then(|s| s.run_as_user) == Some(0))
        .map(|c| c.name.clone())
        .collect();
    if !bad.is_empty() {
        setters.push(containers_phrase(&bad));
    }
    if setters.is_empty() {
        return None;
    }
    violation("runAsUser=0", format!("{} must not set runAsUser=0", setters.join(" and ")))
}

fn se_linux_options(pod: &PodView<'_>, _: u32) -> Option<Violation> {
    let allowed = |t: &str| matches!(t, "" | "container_t" | "container_init_t" | "container_kvm_t");
    let mut bad_types = BTreeSet::new();
    let (mut set_user, mut set_role) = (false, false);
    let mut valid = |o: &k8s_openapi::api::core::v1::SELinuxOptions| -> bool {
        let mut ok = true;
        let t = o.type_.clone().unwrap_or_default();
        if !allowed(&t) {
            ok = false;
            bad_types.insert(t);
        }
        if o.user.as_deref().is_some_and(|u| !u.is_empty()) {
            ok = false;
            set_user = true;
        }
        if o.role.as_deref().is_some_and(|r| !r.is_empty()) {
            ok = false;
            set_role = true;
        }
        ok
    };
    let mut setters = Vec::new();
    if let Some(o) = pod.pod_sc().and_then(|s| s.se_linux_options.as_ref())
        && !valid(o)
    {
        setters.push("pod".to_owned());
    }
    let mut bad = Vec::new();
    for c in &pod.containers {
        if let Some(o) = sc(c).and_then(|s| s.se_linux_options.as_ref())
            && !valid(o)
        {
            bad.push(c.name.clone());
        }
    }
    if !bad.is_empty() {
        setters.push(containers_phrase(&bad));
    }
    if setters.is_empty() {
        return None;
    }
    // Upstream lists user and role only beside a bad type (its detail reads so).
    let mut data = Vec::new();
    if !bad_types.is_empty() {
        let types: Vec<String> = bad_types.into_iter().collect();
        data.push(format!("{} {}", plural("type", "types", types.len()), join_quote(&types)));
        if set_user {
            data.push("user may not be set".to_owned());
        }
        if set_role {
            data.push("role may not be set".to_owned());
        }
    }
    violation(
        "seLinuxOptions",
        format!("{} set forbidden securityContext.seLinuxOptions: {}", setters.join(" and "), data.join("; ")),
    )
}

fn valid_seccomp(t: &str) -> bool {
    matches!(t, "Localhost" | "RuntimeDefault")
}

fn seccomp_profile_baseline(pod: &PodView<'_>, minor: u32) -> Option<Violation> {
    if minor < 19 {
        // The alpha annotations, as 1.0–1.18 read them.
        let valid = |v: &str| v == "runtime/default" || v == "docker/default" || v.starts_with("localhost/");
        let mut forbidden = BTreeSet::new();
        let pod_key = "seccomp.security.alpha.kubernetes.io/pod";
        if let Some(v) = pod.annotations.get(pod_key)
            && !valid(v)
        {
            forbidden.insert(format!("{pod_key}={v:?}"));
        }
        for c in &pod.containers {
            let key = format!("container.seccomp.security.alpha.kubernetes.io/{}", c.name);
            if let Some(v) = pod.annotations.get(&key)
                && !valid(v)
            {
                forbidden.insert(format!("{key}={v:?}"));
            }
        }
        if forbidden.is_empty() {
            return None;
        }
        let list: Vec<String> = forbidden.into_iter().collect();
        return violation(
            "seccompProfile",
            format!("forbidden {} {}", plural("annotation", "annotations", list.len()), list.join(", ")),
        );
    }
    let mut setters = Vec::new();
    let mut values = BTreeSet::new();
    if let Some(p) = pod.pod_sc().and_then(|s| s.seccomp_profile.as_ref())
        && !valid_seccomp(&p.type_)
    {
        setters.push("pod".to_owned());
        values.insert(p.type_.clone());
    }
    let mut bad = Vec::new();
    for c in &pod.containers {
        if let Some(p) = sc(c).and_then(|s| s.seccomp_profile.as_ref())
            && !valid_seccomp(&p.type_)
        {
            bad.push(c.name.clone());
            values.insert(p.type_.clone());
        }
    }
    if !bad.is_empty() {
        setters.push(containers_phrase(&bad));
    }
    if setters.is_empty() {
        return None;
    }
    let values: Vec<String> = values.into_iter().collect();
    violation(
        "seccompProfile",
        format!(
            "{} must not set securityContext.seccompProfile.type to {}",
            setters.join(" and "),
            join_quote(&values)
        ),
    )
}

fn seccomp_profile_restricted(pod: &PodView<'_>, _: u32) -> Option<Violation> {
    let mut setters = Vec::new();
    let mut values = BTreeSet::new();
    let mut pod_set = false;
    if let Some(p) = pod.pod_sc().and_then(|s| s.seccomp_profile.as_ref()) {
        if valid_seccomp(&p.type_) {
            pod_set = true;
        } else {
            setters.push("pod".to_owned());
            values.insert(p.type_.clone());
        }
    }
    let (mut explicit, mut implicit) = (Vec::new(), Vec::new());
    for c in &pod.containers {
        match sc(c).and_then(|s| s.seccomp_profile.as_ref()) {
            Some(p) if !valid_seccomp(&p.type_) => {
                explicit.push(c.name.clone());
                values.insert(p.type_.clone());
            }
            Some(_) => {}
            None if !pod_set => implicit.push(c.name.clone()),
            None => {}
        }
    }
    if !explicit.is_empty() {
        setters.push(containers_phrase(&explicit));
    }
    if !setters.is_empty() {
        let values: Vec<String> = values.into_iter().collect();
        return violation(
            "seccompProfile",
            format!(
                "{} must not set securityContext.seccompProfile.type to {}",
                setters.join(" and "),
                join_quote(&values)
            ),
        );
    }
    if !implicit.is_empty() {
        return violation(
            "seccompProfile",
            format!(
                "pod or {} must set securityContext.seccompProfile.type to \"RuntimeDefault\" or \"Localhost\"",
                containers_phrase(&implicit)
            ),
        );
    }
    None
}

/// The sysctls baseline allows at policy minor `minor` (1.27 and 1.29 added some).
fn sysctl_allowed(name: &str, minor: u32) -> bool {
    const V1_0: [&str; 5] = [
        "kernel.shm_rmid_forced",
        "net.ipv4.ip_local_port_range",
        "net.ipv4.tcp_syncookies",
        "net.ipv4.ping_group_range",
        "net.ipv4.ip_unprivileged_port_start",
    ];
    const V1_29: [&str; 4] = [
        "net.ipv4.tcp_keepalive_time",
        "net.ipv4.tcp_fin_timeout",
        "net.ipv4.tcp_keepalive_intvl",
        "net.ipv4.tcp_keepalive_probes",
    ];
    V1_0.contains(&name)
        || (minor >= 27 && name == "net.ipv4.ip_local_reserved_ports")
        || (minor >= 29 && V1_29.contains(&name))
}

fn sysctls(pod: &PodView<'_>, minor: u32) -> Option<Violation> {
    let bad: Vec<String> = pod
        .pod_sc()
        .and_then(|s| s.sysctls.as_ref())
        .into_iter()
        .flatten()
        .filter(|s| !sysctl_allowed(&s.name, minor))
        .map(|s| s.name.clone())
        .collect();
    if bad.is_empty() {
        return None;
    }
    violation("forbidden sysctls", bad.join(", "))
}

fn windows_host_process(pod: &PodView<'_>, _: u32) -> Option<Violation> {
    let host_process = |w: Option<&k8s_openapi::api::core::v1::WindowsSecurityContextOptions>| {
        w.and_then(|w| w.host_process) == Some(true)
    };
    let bad: Vec<String> = pod
        .containers
        .iter()
        .filter(|c| host_process(sc(c).and_then(|s| s.windows_options.as_ref())))
        .map(|c| c.name.clone())
        .collect();
    let mut setters = Vec::new();
    if host_process(pod.pod_sc().and_then(|s| s.windows_options.as_ref())) {
        setters.push("pod".to_owned());
    }
    if !bad.is_empty() {
        setters.push(containers_phrase(&bad));
    }
    if setters.is_empty() {
        return None;
    }
    violation(
        "hostProcess",
        format!("{} must not set securityContext.windowsOptions.hostProcess=true", setters.join(" and ")),
    )
}
