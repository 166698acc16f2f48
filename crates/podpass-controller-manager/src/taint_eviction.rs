//! The taint eviction controller (`pkg/controller/tainteviction`, `processPodOnNode`): a
//! pod on a node with NoExecute taints is deleted at once when it does not tolerate one of
//! them, after the shortest `tolerationSeconds` of the tolerations it uses when it
//! tolerates them all for a while, and never when it tolerates them forever. Before the
//! DELETE, the pod gets the `DisruptionTarget` condition (`DeletionByTaintManager`) and a
//! `TaintManagerEviction` event; a deletion called off (the taint went, the pod now
//! tolerates it) gets one too.
//!
//! The countdown starts when the controller first sees the pod under the taint, by its
//! own clock, as upstream's timed queue: a node's clock cannot shorten it. DefaultToleration
//! Seconds admission gives every pod 300 s of `not-ready` and `unreachable`, so a dead
//! node's pods go 300 s after the node lifecycle controller taints it. Writes are the
//! controller's own (`system:serviceaccount:kube-system:taint-eviction-controller`).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Pod, Taint, Toleration};
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use kube::runtime::reflector::Store;
use kube::{Api, ResourceExt};
use serde_json::json;

use crate::credentials::Credentials;
use crate::events::{Recorder, Regarding};
use crate::sync_error::SyncError;

/// The controller's name (`--controllers`).
pub const NAME: &str = "taint-eviction-controller";
/// Its service account (upstream's, `system:controller:taint-eviction-controller`).
pub const ACCOUNT: &str = "taint-eviction-controller";
/// How often the caches are looked at: the granularity of a countdown.
const PERIOD: Duration = Duration::from_secs(1);
const REASON: &str = "DeletionByTaintManager";
const MESSAGE: &str = "Taint manager: deleting due to NoExecute taint";

/// What a pod's tolerations make of its node's NoExecute taints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// No NoExecute taint, or all tolerated forever.
    Stay,
    /// One is not tolerated.
    Now,
    /// All tolerated, the shortest for this long.
    After(Duration),
}

fn tolerates(toleration: &Toleration, taint: &Taint) -> bool {
    podpass_api::taint::Toleration {
        key: toleration.key.as_deref().unwrap_or_default(),
        operator: toleration.operator.as_deref().unwrap_or_default(),
        value: toleration.value.as_deref().unwrap_or_default(),
        effect: toleration.effect.as_deref().unwrap_or_default(),
    }
    .tolerates(&podpass_api::taint::Taint {
        key: &taint.key,
        value: taint.value.as_deref().unwrap_or_default(),
        effect: &taint.effect,
    })
}

/// `GetMatchingTolerations` then `getMinTolerationTime`: each NoExecute taint's first
/// tolerating toleration; the shortest of their `tolerationSeconds` (≤ 0: at once).
pub(crate) fn verdict(tolerations: &[Toleration], taints: &[Taint]) -> Verdict {
    let mut shortest: Option<i64> = None;
    let mut any = false;
    for taint in taints.iter().filter(|t| t.effect == "NoExecute") {
        any = true;
        let Some(used) = tolerations.iter().find(|t| tolerates(t, taint)) else { return Verdict::Now };
        if let Some(seconds) = used.toleration_seconds {
            shortest = Some(shortest.map_or(seconds, |s| s.min(seconds)));
        }
    }
    match shortest {
        _ if !any => Verdict::Stay,
        None => Verdict::Stay,
        Some(s) if s <= 0 => Verdict::Now,
        Some(s) => Verdict::After(Duration::from_secs(s.unsigned_abs())),
    }
}

/// A pod, by namespace, name and uid.
pub(crate) type PodKey = (String, String, String);

/// A deletion waiting for its time (the timed queue's `TimedWorker`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Scheduled {
    /// When the pod was first seen under the taints.
    pub since: Instant,
    pub due: Instant,
}

/// What one pass does.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Plan {
    pub evict: Vec<PodKey>,
    /// Deletions called off: an event each.
    pub cancelled: Vec<PodKey>,
}

/// `processPodOnNode` for every pod bound to a node: `verdicts` holds each live pod's
/// (pods already being deleted are not in it); `scheduled` is the queue.
pub(crate) fn plan(verdicts: &[(PodKey, Verdict)], scheduled: &mut HashMap<PodKey, Scheduled>, now: Instant) -> Plan {
    let mut plan = Plan::default();
    let mut live = std::collections::HashSet::new();
    for (key, verdict) in verdicts {
        live.insert(key);
        match *verdict {
            Verdict::Stay => {
                if scheduled.remove(key).is_some() {
                    plan.cancelled.push(key.clone());
                }
            }
            Verdict::Now => {
                scheduled.remove(key);
                plan.evict.push(key.clone());
            }
            Verdict::After(wait) => {
                let since = scheduled.get(key).map_or(now, |s| s.since);
                // A later deadline than one already set moves it (upstream cancels and
                // re-adds with the same start); an earlier one keeps its start too.
                let entry = Scheduled { since, due: since + wait };
                scheduled.insert(key.clone(), entry);
                if entry.due <= now {
                    plan.evict.push(key.clone());
                }
            }
        }
    }
    // Pods gone or being deleted: nothing to cancel with an event.
    scheduled.retain(|key, _| live.contains(key));
    for key in &plan.evict {
        scheduled.remove(key);
    }
    plan
}

/// Runs the controller until the task is dropped.
pub(crate) async fn run(credentials: Credentials) {
    let root = credentials.root();
    let (pods, fill_pods) = crate::cache::cached(Api::<Pod>::all(root.clone()));
    let (nodes, fill_nodes) = crate::cache::cached(Api::<Node>::all(root));
    let drive = futures::future::join(fill_pods, fill_nodes);
    tokio::join!(drive, evict(credentials, pods, nodes));
}

/// Each bound, live pod's verdict from the caches.
fn verdicts(pods: &[Arc<Pod>], nodes: &[Arc<Node>]) -> Vec<(PodKey, Verdict)> {
    let taints: HashMap<String, &[Taint]> = nodes
        .iter()
        .filter_map(|n| Some((n.name_any(), n.spec.as_ref()?.taints.as_deref()?)))
        .filter(|(_, t)| t.iter().any(|t| t.effect == "NoExecute"))
        .collect();
    pods.iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter_map(|p| {
            let spec = p.spec.as_ref()?;
            let node = spec.node_name.as_deref()?;
            let verdict =
                taints.get(node).map_or(Verdict::Stay, |t| verdict(spec.tolerations.as_deref().unwrap_or_default(), t));
            Some(((p.namespace().unwrap_or_default(), p.name_any(), p.uid().unwrap_or_default()), verdict))
        })
        .collect()
}

async fn evict(credentials: Credentials, pods: Store<Pod>, nodes: Store<Node>) {
    if pods.wait_until_ready().await.is_err() || nodes.wait_until_ready().await.is_err() {
        return;
    }
    let mut scheduled = HashMap::new();
    let mut ticks = tokio::time::interval(PERIOD);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let plan = plan(&verdicts(&pods.state(), &nodes.state()), &mut scheduled, Instant::now());
        if plan == Plan::default() {
            continue;
        }
        let span = tracing::info_span!("reconcile", controller = NAME);
        if let Err(e) = tracing::Instrument::instrument(write(&credentials, &plan), span).await {
            tracing::warn!(error = %e, "taint eviction failed; trying again next period");
        }
    }
}

async fn write(credentials: &Credentials, plan: &Plan) -> Result<(), SyncError> {
    let client = credentials.client(ACCOUNT).await?;
    let recorder = Recorder::new(client.clone(), NAME);
    for (ns, name, uid) in &plan.cancelled {
        let about = Regarding { api_version: "v1", kind: "Pod", namespace: ns, name, uid };
        recorder.normal(&about, "TaintManagerEviction", &format!("Cancelling deletion of Pod {ns}/{name}")).await;
    }
    for (ns, name, uid) in &plan.evict {
        let api: Api<Pod> = Api::namespaced(client.clone(), ns);
        let about = Regarding { api_version: "v1", kind: "Pod", namespace: ns, name, uid };
        recorder.normal(&about, "TaintManagerEviction", &format!("Marking for deletion Pod {ns}/{name}")).await;
        // addConditionAndDeletePod: why it goes, on the pod, first.
        let now = k8s_openapi::jiff::Timestamp::now().to_string();
        let status = json!({"status": {"conditions": [{"type": "DisruptionTarget", "status": "True",
            "reason": REASON, "message": MESSAGE, "lastTransitionTime": now}]}});
        match api.patch_status(name, &PatchParams::default(), &Patch::Strategic(status)).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => continue,
            Err(e) => return Err(e.into()),
        }
        let params = DeleteParams {
            preconditions: Some(Preconditions { uid: Some(uid.clone()), resource_version: None }),
            ..DeleteParams::default()
        };
        match api.delete(name, &params).await {
            Ok(_) => tracing::info!(pod = %format!("{ns}/{name}"), "evicted: its node's NoExecute taint"),
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn taint(key: &str, effect: &str) -> Taint {
        Taint { key: key.into(), effect: effect.into(), ..Default::default() }
    }

    fn toleration(key: &str, seconds: Option<i64>) -> Toleration {
        Toleration {
            key: Some(key.into()),
            operator: Some("Exists".into()),
            effect: Some("NoExecute".into()),
            toleration_seconds: seconds,
            ..Default::default()
        }
    }

    const UNREACHABLE: &str = "node.kubernetes.io/unreachable";

    #[test]
    fn verdicts_follow_process_pod_on_node() {
        let unreachable = [taint(UNREACHABLE, "NoExecute")];
        assert_eq!(verdict(&[], &[taint(UNREACHABLE, "NoSchedule")]), Verdict::Stay, "NoSchedule evicts nothing");
        assert_eq!(verdict(&[], &unreachable), Verdict::Now);
        assert_eq!(
            verdict(&[toleration(UNREACHABLE, Some(300))], &unreachable),
            Verdict::After(Duration::from_secs(300))
        );
        assert_eq!(verdict(&[toleration(UNREACHABLE, None)], &unreachable), Verdict::Stay, "forever");
        assert_eq!(verdict(&[toleration(UNREACHABLE, Some(0))], &unreachable), Verdict::Now);
        assert_eq!(verdict(&[toleration(UNREACHABLE, Some(-5))], &unreachable), Verdict::Now);
        // Two taints: all must be tolerated; the shortest time of the tolerations used wins.
        let both = [taint(UNREACHABLE, "NoExecute"), taint("dedicated", "NoExecute")];
        assert_eq!(verdict(&[toleration(UNREACHABLE, Some(300))], &both), Verdict::Now);
        let used = [toleration(UNREACHABLE, Some(300)), toleration("dedicated", Some(30))];
        assert_eq!(verdict(&used, &both), Verdict::After(Duration::from_secs(30)));
        let forever_and_timed = [toleration(UNREACHABLE, None), toleration("dedicated", Some(30))];
        assert_eq!(verdict(&forever_and_timed, &both), Verdict::After(Duration::from_secs(30)));
        // Only the first tolerating toleration is used (an `Exists` for every key here).
        let all = Toleration { operator: Some("Exists".into()), ..Default::default() };
        assert_eq!(verdict(&[all, toleration(UNREACHABLE, Some(1))], &unreachable), Verdict::Stay);
    }

    fn key(name: &str) -> PodKey {
        ("team-a".into(), name.into(), format!("uid-{name}"))
    }

    #[test]
    fn a_countdown_starts_when_first_seen_and_is_called_off_with_an_event() {
        let start = Instant::now();
        let mut queue = HashMap::new();
        let wait = Verdict::After(Duration::from_secs(300));
        let first = plan(&[(key("a"), wait), (key("b"), Verdict::Now)], &mut queue, start);
        assert_eq!(first.evict, [key("b")]);
        assert!(plan(&[(key("a"), wait)], &mut queue, start + Duration::from_secs(299)).evict.is_empty());
        // The taint went before its time: called off, with an event.
        let off = plan(&[(key("a"), Verdict::Stay)], &mut queue, start + Duration::from_secs(299));
        assert_eq!(off.cancelled, [key("a")]);
        assert!(queue.is_empty());
        // Tainted again: a fresh countdown.
        plan(&[(key("a"), wait)], &mut queue, start + Duration::from_secs(400));
        let due = plan(&[(key("a"), wait)], &mut queue, start + Duration::from_secs(700));
        assert_eq!(due.evict, [key("a")]);
        // A pod that went (or is being deleted) is forgotten without an event.
        plan(&[(key("c"), wait)], &mut queue, start);
        assert_eq!(plan(&[], &mut queue, start), Plan::default());
        assert!(queue.is_empty());
    }

    #[test]
    fn a_shorter_toleration_counts_from_the_first_sight() {
        let start = Instant::now();
        let mut queue = HashMap::new();
        plan(&[(key("a"), Verdict::After(Duration::from_secs(300)))], &mut queue, start);
        let shorter = Verdict::After(Duration::from_secs(30));
        assert_eq!(plan(&[(key("a"), shorter)], &mut queue, start + Duration::from_secs(31)).evict, [key("a")]);
    }
}
