//! The node's resource metrics, as the kubelet's Summary API (`/stats/summary`) gives them to
//! metrics-server: every [`RESOLUTION`] the node samples its own CPU time and working set
//! (`/proc/stat`, `/proc/meminfo`) and each running container's (CRI `ListContainerStats`:
//! cumulative CPU time, working set); CPU usage is the rate between the last two samples,
//! and each figure carries its sample's time, the window being the time between the two.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};

use super::containers::{CONTAINER_NAME_LABEL, POD_NAME_LABEL, POD_NAMESPACE_LABEL, POD_UID_LABEL, PodRuntime};

/// How often the node samples (metrics-server's default resolution is 15 s).
pub(crate) const RESOLUTION: Duration = Duration::from_secs(10);

/// One container's sample.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ContainerSample {
    namespace: String,
    pod: String,
    uid: String,
    name: String,
    cpu_ns: u64,
    working_set: u64,
}

/// One sample of the node and its containers.
#[derive(Debug, Clone)]
struct Sample {
    /// When (ns since the epoch).
    at_ns: i64,
    node_cpu_ns: u64,
    node_working_set: u64,
    containers: HashMap<String, ContainerSample>,
}

/// The last two samples.
#[derive(Default)]
pub(crate) struct ResourceSamples(Mutex<(Option<Sample>, Option<Sample>)>);

/// The machine's busy CPU time (ns): `/proc/stat`'s first line, all but idle and iowait.
fn node_cpu_ns(stat: &str) -> Option<u64> {
    let line = stat.lines().next()?.strip_prefix("cpu ")?;
    let ticks: Vec<u64> = line.split_whitespace().filter_map(|f| f.parse().ok()).collect();
    let busy: u64 = ticks.iter().enumerate().filter(|(i, _)| *i != 3 && *i != 4).map(|(_, t)| *t).sum();
    // USER_HZ is 100 on Linux: a tick is 10 ms.
    busy.checked_mul(10_000_000)
}

/// The machine's working set: `MemTotal - MemAvailable` (bytes).
fn node_working_set(meminfo: &str) -> Option<u64> {
    let field = |name: &str| {
        meminfo.lines().find_map(|l| l.strip_prefix(name)?.trim().strip_suffix("kB")?.trim().parse::<u64>().ok())
    };
    Some(field("MemTotal:")?.saturating_sub(field("MemAvailable:")?) * 1024)
}

impl ResourceSamples {
    /// Takes a sample now.
    pub(crate) async fn sample(&self, runtime: Option<&PodRuntime>) {
        let (stat, meminfo) =
            tokio::join!(tokio::fs::read_to_string("/proc/stat"), tokio::fs::read_to_string("/proc/meminfo"));
        let mut containers = HashMap::new();
        if let Some(rt) = runtime
            && let Ok(stats) = rt.cri.list_container_stats(HashMap::new()).await
            && let Ok(listed) = rt.cri.list_containers(HashMap::new()).await
        {
            // Running ones only, as the Summary API: an exited container uses nothing.
            let running: std::collections::HashSet<String> =
                listed.into_iter().filter(|c| c.state == crate::runtime::CONTAINER_RUNNING).map(|c| c.id).collect();
            for s in stats {
                let Some(a) = s.attributes else { continue };
                if !running.contains(&a.id) {
                    continue;
                }
                let label = |k: &str| a.labels.get(k).cloned().unwrap_or_default();
                let cpu = s.cpu.and_then(|c| c.usage_core_nano_seconds).map_or(0, |v| v.value);
                let working_set = s.memory.and_then(|m| m.working_set_bytes).map_or(0, |v| v.value);
                let sample = ContainerSample {
                    namespace: label(POD_NAMESPACE_LABEL),
                    pod: label(POD_NAME_LABEL),
                    uid: label(POD_UID_LABEL),
                    name: label(CONTAINER_NAME_LABEL),
                    cpu_ns: cpu,
                    working_set,
                };
                if !sample.uid.is_empty() && !sample.name.is_empty() {
                    containers.insert(a.id, sample);
                }
            }
        }
        let sample = Sample {
            at_ns: i64::try_from(jiff::Timestamp::now().as_nanosecond()).unwrap_or(i64::MAX),
            node_cpu_ns: stat.ok().as_deref().and_then(node_cpu_ns).unwrap_or(0),
            node_working_set: meminfo.ok().as_deref().and_then(node_working_set).unwrap_or(0),
            containers,
        };
        let mut last = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let previous = last.1.take();
        *last = (previous, Some(sample));
    }

    /// The Summary API's answer (the subset metrics-server reads): the node's and each pod's
    /// containers' CPU (nano-cores over the window) and working set, with the sample's time;
    /// empty until two samples were taken.
    pub(crate) fn summary(&self, node: &str) -> Value {
        let last = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let (Some(before), Some(now)) = (&last.0, &last.1) else {
            return json!({"node": {"nodeName": node}, "pods": []});
        };
        let elapsed_ns = u64::try_from(now.at_ns.saturating_sub(before.at_ns)).unwrap_or(0).max(1);
        let rate = |a: u64, b: u64| u128::from(b.saturating_sub(a)) * 1_000_000_000 / u128::from(elapsed_ns);
        let time = jiff::Timestamp::from_nanosecond(i128::from(now.at_ns))
            .map(|t| t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string())
            .unwrap_or_default();
        let window = format!("{:.3}s", elapsed_ns as f64 / 1e9);
        let mut pods: HashMap<&str, (Value, Vec<Value>)> = HashMap::new();
        for (id, c) in &now.containers {
            // Only a container in both samples has a rate.
            let Some(prev) = before.containers.get(id) else { continue };
            let entry = pods
                .entry(c.uid.as_str())
                .or_insert_with(|| (json!({"name": c.pod, "namespace": c.namespace, "uid": c.uid}), Vec::new()));
            entry.1.push(json!({
                "name": c.name,
                "cpu": {"time": time, "usageNanoCores": rate(prev.cpu_ns, c.cpu_ns) as u64},
                "memory": {"time": time, "workingSetBytes": c.working_set},
            }));
        }
        let pods: Vec<Value> =
            pods.into_values().map(|(r, cs)| json!({"podRef": r, "containers": cs, "window": window})).collect();
        json!({
            "node": {
                "nodeName": node,
                "cpu": {"time": time, "usageNanoCores": rate(before.node_cpu_ns, now.node_cpu_ns) as u64},
                "memory": {"time": time, "workingSetBytes": now.node_working_set},
                "window": window,
            },
            "pods": pods,
        })
    }
}

/// Samples every [`RESOLUTION`] for as long as the node runs.
pub(crate) async fn sample_loop(samples: Arc<ResourceSamples>, runtime: Option<Arc<PodRuntime>>) {
    let mut tick = tokio::time::interval(RESOLUTION);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        samples.sample(runtime.as_deref()).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_machine_is_read_from_proc() {
        assert_eq!(node_cpu_ns("cpu  10 0 5 1000 7 1 1 0 0 0\ncpu0 1 2 3"), Some(17 * 10_000_000));
        assert_eq!(node_cpu_ns("nonsense"), None);
        assert_eq!(node_working_set("MemTotal:  1000 kB\nMemFree: 1 kB\nMemAvailable:  400 kB\n"), Some(600 * 1024));
        assert_eq!(node_working_set("MemTotal: 1 kB\n"), None);
    }

    #[test]
    fn cpu_is_a_rate_between_two_samples() {
        let samples = ResourceSamples::default();
        assert_eq!(samples.summary("n1")["pods"], json!([]), "nothing before two samples");
        let container = |cpu_ns| ContainerSample {
            namespace: "team".into(),
            pod: "web".into(),
            uid: "u1".into(),
            name: "app".into(),
            cpu_ns,
            working_set: 4096,
        };
        let at = |s: i64, cpu: u64| Sample {
            at_ns: s * 1_000_000_000,
            node_cpu_ns: cpu * 2,
            node_working_set: 1 << 30,
            containers: HashMap::from([("c1".to_owned(), container(cpu))]),
        };
        *samples.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner) =
            (Some(at(100, 0)), Some(at(110, 5_000_000_000)));
        let s = samples.summary("n1");
        assert_eq!(s["node"]["cpu"]["usageNanoCores"], 1_000_000_000, "{s}");
        assert_eq!(s["pods"][0]["containers"][0]["cpu"]["usageNanoCores"], 500_000_000, "{s}");
        assert_eq!(s["pods"][0]["containers"][0]["memory"]["workingSetBytes"], 4096);
        assert_eq!(s["pods"][0]["window"], "10.000s");
        assert_eq!(s["pods"][0]["podRef"], json!({"name": "web", "namespace": "team", "uid": "u1"}));
    }
}
