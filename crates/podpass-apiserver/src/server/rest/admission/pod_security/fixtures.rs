//! Upstream's Pod Security fixtures (`pod-security-admission/test/fixtures*.go`, which
//! generate `test/testdata/<level>/<version>/{pass,fail}`), restated as a table: each check's
//! passing and failing tweaks of upstream's minimal valid pod for the level and version,
//! evaluated at every version from v1.0 to latest, deciding as upstream — and a failing
//! fixture failing for its own check (the expected substring of the message).

use serde_json::{Value, json};

use super::checks::{PodView, evaluate, forbidden_detail};
use super::policy::{Level, LevelVersion, MAX_MINOR, Version};
use super::typed;

/// `GetMinimalValidPod`: the minimal valid pod of `level` at `minor`.
fn minimal_valid_pod(level: Level, minor: u32) -> Value {
    let mut p = json!({"metadata": {"name": "test-pod"}, "spec": {
        "initContainers": [{"name": "initcontainer1", "image": "k8s.gcr.io/pause"}],
        "containers": [{"name": "container1", "image": "k8s.gcr.io/pause"}]}});
    if level == Level::Restricted {
        p["spec"]["securityContext"] = json!({"runAsNonRoot": true});
        if minor >= 8 {
            for c in ["containers", "initContainers"] {
                p["spec"][c][0]["securityContext"] = json!({"allowPrivilegeEscalation": false});
            }
        }
        if minor >= 19 {
            p["spec"]["securityContext"]["seccompProfile"] = json!({"type": "RuntimeDefault"});
        }
        if minor >= 22 {
            for c in ["containers", "initContainers"] {
                p["spec"][c][0]["securityContext"]["capabilities"] = json!({"drop": ["ALL"]});
            }
        }
    }
    p
}

type Tweak = fn(&mut Value);

/// Where a check's fixtures run.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Levels {
    /// Baseline and restricted.
    Both,
    /// Baseline only (an overlapping check: restricted's own covers it there).
    Baseline,
    /// Restricted only.
    Restricted,
}

struct Fixture {
    check: &'static str,
    levels: Levels,
    /// The policy versions this generator covers: `[from, until)`.
    from: u32,
    until: u32,
    /// `expectErrorSubstring`.
    substring: &'static str,
    pass: &'static [Tweak],
    fail: &'static [Tweak],
}

fn sc<'a>(p: &'a mut Value, container: &str) -> &'a mut Value {
    let c = &mut p["spec"][container][0];
    if c.get("securityContext").is_none_or(Value::is_null) {
        c["securityContext"] = json!({});
    }
    &mut c["securityContext"]
}

fn pod_sc(p: &mut Value) -> &mut Value {
    if p["spec"].get("securityContext").is_none_or(Value::is_null) {
        p["spec"]["securityContext"] = json!({});
    }
    &mut p["spec"]["securityContext"]
}

const ALL: u32 = MAX_MINOR + 1;

const FIXTURES: &[Fixture] = &[
    Fixture {
        check: "hostNamespaces",
        levels: Levels::Both,
        from: 0,
        until: ALL,
        substring: "host namespaces",
        pass: &[|p| {
            p["spec"]["hostNetwork"] = json!(false);
            p["spec"]["hostPID"] = json!(false);
            p["spec"]["hostIPC"] = json!(false);
        }],
        fail: &[
            |p| p["spec"]["hostNetwork"] = json!(true),
            |p| p["spec"]["hostPID"] = json!(true),
            |p| p["spec"]["hostIPC"] = json!(true),
        ],
    },
    Fixture {
        check: "privileged",
        levels: Levels::Both,
        from: 0,
        until: ALL,
        substring: "privileged",
        pass: &[|p| {
            sc(p, "containers")["privileged"] = json!(false);
            sc(p, "initContainers")["privileged"] = json!(false);
        }],
        fail: &[
            |p| sc(p, "containers")["privileged"] = json!(true),
            |p| sc(p, "initContainers")["privileged"] = json!(true),
        ],
    },
    Fixture {
        check: "capabilities_baseline",
        levels: Levels::Baseline,
        from: 0,
        until: ALL,
        substring: "non-default capabilities",
        pass: &[|p| {
            sc(p, "containers")["capabilities"] = json!({"add": ["AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER",
                "FSETID", "KILL", "MKNOD", "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"]});
            sc(p, "initContainers")["capabilities"] = json!({"add": ["CHOWN"]});
        }],
        fail: &[
            |p| sc(p, "containers")["capabilities"] = json!({"add": ["NET_RAW"]}),
            |p| sc(p, "initContainers")["capabilities"] = json!({"add": ["SYS_ADMIN"]}),
            // Not normalized: the lower-case name is not in the set.
            |p| sc(p, "containers")["capabilities"] = json!({"add": ["chown"]}),
        ],
    },
    Fixture {
        check: "appArmorProfile",
        levels: Levels::Both,
        from: 0,
        until: ALL,
        substring: "forbidden AppArmor profile",
        pass: &[
            |p| {
                p["metadata"]["annotations"] = json!({
                    "container.apparmor.security.beta.kubernetes.io/container1": "runtime/default",
                    "container.apparmor.security.beta.kubernetes.io/initcontainer1": "localhost/foo"});
            },
            |p| {
                pod_sc(p)["appArmorProfile"] = json!({"type": "RuntimeDefault"});
                sc(p, "containers")["appArmorProfile"] = json!({"type": "Localhost", "localhostProfile": "foo"});
            },
        ],
        fail: &[
            |p| {
                p["metadata"]["annotations"] =
                    json!({"container.apparmor.security.beta.kubernetes.io/container1": "unconfined"});
            },
            |p| pod_sc(p)["appArmorProfile"] = json!({"type": "Unconfined"}),
            |p| sc(p, "initContainers")["appArmorProfile"] = json!({"type": "Unconfined"}),
        ],
    },
    Fixture {
        check: "hostPathVolumes",
        levels: Levels::Baseline,
        from: 0,
        until: ALL,
        substring: "hostPath volumes",
        pass: &[|p| p["spec"]["volumes"] = json!([{"name": "v", "emptyDir": {}}])],
        fail: &[|p| p["spec"]["volumes"] = json!([{"name": "v", "hostPath": {"path": "/a"}}])],
    },
    Fixture {
        check: "hostPorts",
        levels: Levels::Both,
        from: 0,
        until: ALL,
        substring: "hostPort",
        pass: &[|p| {
            p["spec"]["containers"][0]["ports"] =
                json!([{"containerPort": 12345}, {"containerPort": 8080, "hostPort": 0}]);
        }],
        fail: &[
            |p| p["spec"]["containers"][0]["ports"] = json!([{"containerPort": 12345, "hostPort": 12345}]),
            |p| p["spec"]["initContainers"][0]["ports"] = json!([{"containerPort": 12346, "hostPort": 12346}]),
        ],
    },
    Fixture {
        check: "hostProbesAndHostLifecycle",
        levels: Levels::Both,
        from: 34,
        until: ALL,
        substring: "probe or lifecycle host",
        pass: &[|p| {
            p["spec"]["containers"][0]["livenessProbe"] = json!({"httpGet": {"port": 8080, "path": "/healthz"}});
            p["spec"]["containers"][0]["readinessProbe"] = json!({"tcpSocket": {"port": 8080, "host": ""}});
        }],
        fail: &[
            |p| p["spec"]["containers"][0]["livenessProbe"] = json!({"httpGet": {"port": 8080, "host": "10.0.0.1"}}),
            |p| p["spec"]["initContainers"][0]["startupProbe"] = json!({"tcpSocket": {"port": 8080, "host": "node"}}),
            |p| {
                p["spec"]["containers"][0]["lifecycle"] =
                    json!({"postStart": {"httpGet": {"port": 80, "host": "metadata.internal"}}});
            },
        ],
    },
    Fixture {
        check: "procMount",
        levels: Levels::Both,
        from: 0,
        until: ALL,
        substring: "procMount",
        pass: &[|p| {
            sc(p, "containers")["procMount"] = json!("Default");
            sc(p, "initContainers")["procMount"] = json!("Default");
        }],
        fail: &[
            |p| sc(p, "containers")["procMount"] = json!("Unmasked"),
            |p| sc(p, "initContainers")["procMount"] = json!("Unmasked"),
        ],
    },
    Fixture {
        check: "seLinuxOptions",
        levels: Levels::Both,
        from: 0,
        until: ALL,
        substring: "seLinuxOptions",
        pass: &[|p| {
            pod_sc(p)["seLinuxOptions"] = json!({"type": "container_t", "level": "somevalue"});
            sc(p, "containers")["seLinuxOptions"] = json!({"type": "container_init_t"});
            sc(p, "initContainers")["seLinuxOptions"] = json!({"type": "container_kvm_t"});
        }],
        fail: &[
            |p| pod_sc(p)["seLinuxOptions"] = json!({"type": "bar"}),
            |p| sc(p, "containers")["seLinuxOptions"] = json!({"type": "bar"}),
            |p| sc(p, "initContainers")["seLinuxOptions"] = json!({"user": "bar"}),
            |p| pod_sc(p)["seLinuxOptions"] = json!({"role": "bar"}),
        ],
    },
    Fixture {
        check: "seccompProfile_baseline",
        levels: Levels::Baseline,
        from: 0,
        until: 19,
        substring: "seccompProfile",
        pass: &[|p| {
            p["metadata"]["annotations"] = json!({"seccomp.security.alpha.kubernetes.io/pod": "runtime/default",
                "container.seccomp.security.alpha.kubernetes.io/container1": "localhost/foo",
                "container.seccomp.security.alpha.kubernetes.io/initcontainer1": "docker/default"});
        }],
        fail: &[
            |p| p["metadata"]["annotations"] = json!({"seccomp.security.alpha.kubernetes.io/pod": "unconfined"}),
            |p| {
                p["metadata"]["annotations"] =
                    json!({"container.seccomp.security.alpha.kubernetes.io/initcontainer1": "unconfined"});
            },
        ],
    },
    Fixture {
        check: "seccompProfile_baseline",
        levels: Levels::Baseline,
        from: 19,
        until: ALL,
        substring: "seccompProfile",
        pass: &[|p| {
            pod_sc(p)["seccompProfile"] = json!({"type": "RuntimeDefault"});
            sc(p, "containers")["seccompProfile"] = json!({"type": "Localhost", "localhostProfile": "testing"});
        }],
        fail: &[
            |p| pod_sc(p)["seccompProfile"] = json!({"type": "Unconfined"}),
            |p| sc(p, "initContainers")["seccompProfile"] = json!({"type": "Unconfined"}),
        ],
    },
    Fixture {
        check: "sysctls",
        levels: Levels::Both,
        from: 0,
        until: 27,
        substring: "forbidden sysctl",
        pass: &[|p| {
            pod_sc(p)["sysctls"] = json!([{"name": "kernel.shm_rmid_forced", "value": "0"},
                {"name": "net.ipv4.ip_local_port_range", "value": "1024 65535"},
                {"name": "net.ipv4.tcp_syncookies", "value": "0"},
                {"name": "net.ipv4.ping_group_range", "value": "1 0"},
                {"name": "net.ipv4.ip_unprivileged_port_start", "value": "1024"}]);
        }],
        fail: &[
            |p| pod_sc(p)["sysctls"] = json!([{"name": "othersysctl", "value": "other"}]),
            |p| pod_sc(p)["sysctls"] = json!([{"name": "net.ipv4.ip_local_reserved_ports", "value": "1024-4999"}]),
        ],
    },
    Fixture {
        check: "sysctls",
        levels: Levels::Both,
        from: 27,
        until: 29,
        substring: "forbidden sysctl",
        pass: &[|p| pod_sc(p)["sysctls"] = json!([{"name": "net.ipv4.ip_local_reserved_ports", "value": "1024-4999"}])],
        fail: &[
            |p| pod_sc(p)["sysctls"] = json!([{"name": "othersysctl", "value": "other"}]),
            |p| pod_sc(p)["sysctls"] = json!([{"name": "net.ipv4.tcp_keepalive_time", "value": "7200"}]),
        ],
    },
    Fixture {
        check: "sysctls",
        levels: Levels::Both,
        from: 29,
        until: ALL,
        substring: "forbidden sysctl",
        pass: &[|p| {
            pod_sc(p)["sysctls"] = json!([{"name": "net.ipv4.ip_local_reserved_ports", "value": "1024-4999"},
                {"name": "net.ipv4.tcp_keepalive_time", "value": "7200"},
                {"name": "net.ipv4.tcp_fin_timeout", "value": "60"},
                {"name": "net.ipv4.tcp_keepalive_intvl", "value": "75"},
                {"name": "net.ipv4.tcp_keepalive_probes", "value": "9"}]);
        }],
        fail: &[|p| pod_sc(p)["sysctls"] = json!([{"name": "othersysctl", "value": "other"}])],
    },
    Fixture {
        check: "windowsHostProcess",
        levels: Levels::Both,
        from: 0,
        until: ALL,
        substring: "hostProcess",
        pass: &[|p| pod_sc(p)["windowsOptions"] = json!({"hostProcess": false})],
        fail: &[
            |p| pod_sc(p)["windowsOptions"] = json!({"hostProcess": true}),
            |p| sc(p, "containers")["windowsOptions"] = json!({"hostProcess": true}),
        ],
    },
    Fixture {
        check: "restrictedVolumes",
        levels: Levels::Restricted,
        from: 0,
        until: ALL,
        substring: "restricted volume types",
        pass: &[|p| {
            p["spec"]["volumes"] = json!([
                {"name": "a", "configMap": {"name": "c"}}, {"name": "b", "csi": {"driver": "inline.storage.kubernetes.io"}},
                {"name": "c", "downwardAPI": {}}, {"name": "d", "emptyDir": {}},
                {"name": "e", "ephemeral": {"volumeClaimTemplate": {"spec": {"accessModes": ["ReadWriteOnce"],
                    "resources": {"requests": {"storage": "1Gi"}}}}}},
                {"name": "f", "persistentVolumeClaim": {"claimName": "c"}}, {"name": "g", "projected": {"sources": []}},
                {"name": "h", "secret": {"secretName": "s"}}]);
        }],
        fail: &[
            |p| p["spec"]["volumes"] = json!([{"name": "a", "hostPath": {"path": "/a"}}]),
            |p| p["spec"]["volumes"] = json!([{"name": "b", "nfs": {"server": "nfs", "path": "/"}}]),
            |p| {
                p["spec"]["volumes"] =
                    json!([{"name": "c", "gitRepo": {"repository": "github.com/kubernetes/kubernetes"}}])
            },
            |p| p["spec"]["volumes"] = json!([{"name": "d", "iscsi": {"targetPortal": "t", "iqn": "i", "lun": 0}}]),
        ],
    },
    Fixture {
        check: "allowPrivilegeEscalation",
        levels: Levels::Restricted,
        from: 8,
        until: ALL,
        substring: "allowPrivilegeEscalation != false",
        pass: &[|p| sc(p, "containers")["allowPrivilegeEscalation"] = json!(false)],
        fail: &[
            |p| sc(p, "containers")["allowPrivilegeEscalation"] = json!(true),
            |p| {
                sc(p, "initContainers").as_object_mut().map(|o| o.remove("allowPrivilegeEscalation"));
            },
        ],
    },
    Fixture {
        check: "runAsNonRoot",
        levels: Levels::Restricted,
        from: 0,
        until: ALL,
        substring: "runAsNonRoot != true",
        pass: &[|p| {
            pod_sc(p).as_object_mut().map(|o| o.remove("runAsNonRoot"));
            sc(p, "containers")["runAsNonRoot"] = json!(true);
            sc(p, "initContainers")["runAsNonRoot"] = json!(true);
        }],
        fail: &[
            |p| {
                pod_sc(p).as_object_mut().map(|o| o.remove("runAsNonRoot"));
            },
            |p| pod_sc(p)["runAsNonRoot"] = json!(false),
            |p| sc(p, "containers")["runAsNonRoot"] = json!(false),
            |p| {
                pod_sc(p).as_object_mut().map(|o| o.remove("runAsNonRoot"));
                sc(p, "containers")["runAsNonRoot"] = json!(true);
            },
        ],
    },
    Fixture {
        check: "runAsUser",
        levels: Levels::Restricted,
        from: 23,
        until: ALL,
        substring: "runAsUser=0",
        pass: &[|p| {
            pod_sc(p)["runAsUser"] = json!(1000);
            sc(p, "containers")["runAsUser"] = json!(1000);
        }],
        fail: &[|p| pod_sc(p)["runAsUser"] = json!(0), |p| sc(p, "initContainers")["runAsUser"] = json!(0)],
    },
    Fixture {
        check: "seccompProfile_restricted",
        levels: Levels::Restricted,
        from: 19,
        until: ALL,
        substring: "seccompProfile",
        pass: &[|p| {
            pod_sc(p).as_object_mut().map(|o| o.remove("seccompProfile"));
            sc(p, "containers")["seccompProfile"] = json!({"type": "RuntimeDefault"});
            sc(p, "initContainers")["seccompProfile"] = json!({"type": "Localhost", "localhostProfile": "x"});
        }],
        fail: &[
            |p| {
                pod_sc(p).as_object_mut().map(|o| o.remove("seccompProfile"));
            },
            |p| pod_sc(p)["seccompProfile"] = json!({"type": "Unconfined"}),
            |p| sc(p, "containers")["seccompProfile"] = json!({"type": "Unconfined"}),
            |p| {
                pod_sc(p).as_object_mut().map(|o| o.remove("seccompProfile"));
                sc(p, "containers")["seccompProfile"] = json!({"type": "RuntimeDefault"});
            },
        ],
    },
    Fixture {
        check: "capabilities_restricted",
        levels: Levels::Restricted,
        from: 22,
        until: ALL,
        substring: "unrestricted capabilities",
        pass: &[|p| sc(p, "containers")["capabilities"] = json!({"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]})],
        fail: &[
            |p| {
                sc(p, "containers").as_object_mut().map(|o| o.remove("capabilities"));
            },
            |p| sc(p, "initContainers")["capabilities"] = json!({"drop": ["NET_RAW"]}),
            |p| sc(p, "containers")["capabilities"] = json!({"drop": ["ALL"], "add": ["NET_RAW"]}),
            |p| sc(p, "containers")["capabilities"] = json!({"drop": ["ALL"], "add": ["CHOWN"]}),
        ],
    },
];

fn decide(level: Level, minor: u32, pod: &Value) -> String {
    let (annotations, spec) = typed(pod).unwrap_or_else(|| panic!("not a pod: {pod}"));
    let version = if minor == MAX_MINOR { Version::Latest } else { Version::Minor(minor) };
    forbidden_detail(&evaluate(LevelVersion { level, version }, &PodView::new(&annotations, &spec)))
}

#[test]
fn every_fixture_decides_as_upstream_at_every_version() {
    let mut cases = 0;
    for f in FIXTURES {
        let levels: &[Level] = match f.levels {
            Levels::Both => &[Level::Baseline, Level::Restricted],
            Levels::Baseline => &[Level::Baseline],
            Levels::Restricted => &[Level::Restricted],
        };
        for &level in levels {
            for minor in f.from..f.until.min(MAX_MINOR + 1) {
                let base = minimal_valid_pod(level, minor);
                assert_eq!(decide(level, minor, &base), "", "{level:?} v1.{minor}: the minimal valid pod");
                for (i, tweak) in f.pass.iter().enumerate() {
                    let mut pod = base.clone();
                    tweak(&mut pod);
                    let d = decide(level, minor, &pod);
                    assert_eq!(d, "", "{} {level:?} v1.{minor} pass[{i}] refused: {pod}", f.check);
                    cases += 1;
                }
                for (i, tweak) in f.fail.iter().enumerate() {
                    let mut pod = base.clone();
                    tweak(&mut pod);
                    let d = decide(level, minor, &pod);
                    assert!(d.contains(f.substring), "{} {level:?} v1.{minor} fail[{i}] gave {d:?}: {pod}", f.check);
                    cases += 1;
                }
            }
        }
    }
    assert!(cases > 1500, "{cases}");
}

#[test]
fn checks_newer_than_a_pinned_version_do_not_apply_to_it() {
    let probe =
        |p: &mut Value| p["spec"]["containers"][0]["livenessProbe"] = json!({"httpGet": {"port": 1, "host": "x"}});
    let mut pod = minimal_valid_pod(Level::Baseline, 33);
    probe(&mut pod);
    assert_eq!(decide(Level::Baseline, 33, &pod), "");
    assert!(decide(Level::Baseline, 34, &pod).starts_with("probe or lifecycle host"));
    let mut root = minimal_valid_pod(Level::Restricted, 22);
    root["spec"]["securityContext"]["runAsUser"] = json!(0);
    assert_eq!(decide(Level::Restricted, 22, &root), "", "runAsUser=0 is restricted from v1.23");
    let mut sysctl = minimal_valid_pod(Level::Baseline, 26);
    sysctl["spec"]["securityContext"] =
        json!({"sysctls": [{"name": "net.ipv4.ip_local_reserved_ports", "value": "1"}]});
    assert_eq!(decide(Level::Baseline, 26, &sysctl), "forbidden sysctls (net.ipv4.ip_local_reserved_ports)");
}

#[test]
fn messages_are_upstreams_word_for_word() {
    let mut p = minimal_valid_pod(Level::Baseline, MAX_MINOR);
    p["spec"]["hostNetwork"] = json!(true);
    p["spec"]["hostPID"] = json!(true);
    p["spec"]["containers"][0]["securityContext"] =
        json!({"privileged": true, "capabilities": {"add": ["SYS_ADMIN", "NET_RAW"]}});
    p["spec"]["initContainers"][0]["ports"] = json!([{"containerPort": 80, "hostPort": 80}]);
    p["spec"]["volumes"] = json!([{"name": "root", "hostPath": {"path": "/"}}]);
    assert_eq!(
        decide(Level::Baseline, MAX_MINOR, &p),
        "host namespaces (hostNetwork=true, hostPID=true), hostPort (container \"initcontainer1\" uses hostPort 80), \
         privileged (container \"container1\" must not set securityContext.privileged=true), \
         non-default capabilities (container \"container1\" must not include \"NET_RAW\", \"SYS_ADMIN\" in securityContext.capabilities.add), \
         hostPath volumes (volume \"root\")"
    );
    let mut r = minimal_valid_pod(Level::Restricted, MAX_MINOR);
    r["spec"]["volumes"] =
        json!([{"name": "b", "hostPath": {"path": "/"}}, {"name": "a", "nfs": {"server": "s", "path": "/"}}]);
    r["spec"]["securityContext"]["runAsUser"] = json!(0);
    assert_eq!(
        decide(Level::Restricted, MAX_MINOR, &r),
        "restricted volume types (volumes [\"a\" \"b\"] have restricted types), runAsUser=0 (pod must not set runAsUser=0)"
    );
}
