//! The pod lifecycle event generator (kubelet: GenericPLEG): one relist of the node's
//! sandboxes and containers every [`RELIST`] — two CRI list calls, whatever the number of
//! pods — and a wake-up for each pod whose sandboxes or containers changed (appeared,
//! changed state, went). Pod workers wait on it instead of polling their running
//! containers, so a node of idle running pods costs one relist per second, not a sync per
//! pod every few seconds. With no pod subscribed it lists nothing.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::Notify;

use super::containers::{POD_UID_LABEL, PodRuntime};
use crate::runtime::{Container, NODE_LABEL, PodSandbox};

/// How often the runtime is relisted (kubelet: `relistPeriod`, 1 s).
pub const RELIST: Duration = Duration::from_secs(1);

/// What the runtime holds of one pod: (kind, ID, state) of each sandbox and container.
type PodRecord = BTreeSet<(u8, String, i32)>;

/// Per pod UID, what a relist found.
fn records(sandboxes: &[PodSandbox], containers: &[Container]) -> HashMap<String, PodRecord> {
    let mut out: HashMap<String, PodRecord> = HashMap::new();
    let sandboxes = sandboxes.iter().map(|s| (0, &s.labels, &s.id, s.state));
    let containers = containers.iter().map(|c| (1, &c.labels, &c.id, c.state));
    for (kind, labels, id, state) in sandboxes.chain(containers) {
        if let Some(uid) = labels.get(POD_UID_LABEL) {
            out.entry(uid.clone()).or_default().insert((kind, id.clone(), state));
        }
    }
    out
}

/// The UIDs whose record differs between two relists.
fn changed<'a>(before: &'a HashMap<String, PodRecord>, now: &'a HashMap<String, PodRecord>) -> Vec<&'a str> {
    before
        .keys()
        .chain(now.keys())
        .filter(|uid| before.get(*uid) != now.get(*uid))
        .map(String::as_str)
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect()
}

/// The pod workers waiting for their pods' runtime changes.
#[derive(Default)]
pub(crate) struct Pleg {
    subscribers: Mutex<HashMap<String, Arc<Notify>>>,
}

impl Pleg {
    /// The signal of pod `uid`: notified (a permit kept if no one waits) when a relist
    /// finds its sandboxes or containers changed.
    pub(crate) fn subscribe(&self, uid: &str) -> Arc<Notify> {
        let mut subscribers = self.subscribers.lock().unwrap_or_else(PoisonError::into_inner);
        subscribers.entry(uid.to_owned()).or_default().clone()
    }

    /// Pod `uid` is gone: no more signals.
    pub(crate) fn unsubscribe(&self, uid: &str) {
        self.subscribers.lock().unwrap_or_else(PoisonError::into_inner).remove(uid);
    }

    /// Wakes the subscribers of the pods whose records changed; answers how many.
    fn wake(&self, before: &HashMap<String, PodRecord>, now: &HashMap<String, PodRecord>) -> usize {
        let subscribers = self.subscribers.lock().unwrap_or_else(PoisonError::into_inner);
        let mut woken = 0;
        for uid in changed(before, now) {
            if let Some(signal) = subscribers.get(uid) {
                signal.notify_one();
                woken += 1;
            }
        }
        woken
    }

    fn idle(&self) -> bool {
        self.subscribers.lock().unwrap_or_else(PoisonError::into_inner).is_empty()
    }

    /// Relists every [`RELIST`] until `shutdown`.
    pub(crate) async fn run(self: Arc<Self>, rt: Arc<PodRuntime>, shutdown: impl std::future::Future<Output = ()>) {
        let mut tick = tokio::time::interval(RELIST);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let ours = HashMap::from([(NODE_LABEL.to_owned(), rt.node.clone())]);
        // `None`: nothing listed yet (or listing paused), so the next relist wakes every pod
        // it finds: nothing that happened meanwhile is missed.
        let mut before: Option<HashMap<String, PodRecord>> = None;
        let mut failing = false;
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                () = &mut shutdown => return,
                _ = tick.tick() => {}
            }
            if self.idle() {
                before = None;
                continue;
            }
            let listed = async {
                let sandboxes = rt.cri.list_pod_sandboxes(ours.clone()).await?;
                let containers = rt.cri.list_containers(ours.clone()).await?;
                Ok::<_, crate::runtime::RuntimeError>(records(&sandboxes, &containers))
            };
            match listed.await {
                Ok(now) => {
                    failing = false;
                    let woken = self.wake(before.as_ref().unwrap_or(&HashMap::new()), &now);
                    if woken > 0 {
                        tracing::debug!(pods = woken, "runtime changes; pod workers woken");
                    }
                    before = Some(now);
                }
                Err(e) => {
                    // Said once per outage; the workers keep their last view meanwhile.
                    if !failing {
                        tracing::warn!(error = %e, "relisting the runtime failed; retrying every second");
                    }
                    failing = true;
                    before = None;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sandbox(uid: &str, id: &str, state: i32) -> PodSandbox {
        PodSandbox {
            id: id.into(),
            state,
            labels: HashMap::from([(POD_UID_LABEL.to_owned(), uid.to_owned())]),
            ..PodSandbox::default()
        }
    }

    fn container(uid: &str, id: &str, state: i32) -> Container {
        Container {
            id: id.into(),
            state,
            labels: HashMap::from([(POD_UID_LABEL.to_owned(), uid.to_owned())]),
            ..Container::default()
        }
    }

    #[test]
    fn only_pods_whose_runtime_state_changed_are_woken() {
        let before = records(
            &[sandbox("a", "sa", 0), sandbox("b", "sb", 0), sandbox("c", "sc", 0)],
            &[container("a", "ca", 1), container("b", "cb", 1), container("c", "cc", 1)],
        );
        // a: its container exited; b: unchanged; c: its container restarted (a new ID);
        // d: new; e's sandbox was never labelled with a UID and counts for no pod.
        let mut unlabelled = sandbox("e", "se", 0);
        unlabelled.labels.clear();
        let now = records(
            &[sandbox("a", "sa", 0), sandbox("b", "sb", 0), sandbox("c", "sc", 0), sandbox("d", "sd", 0), unlabelled],
            &[container("a", "ca", 2), container("b", "cb", 1), container("c", "cc", 2), container("c", "cc2", 1)],
        );
        assert_eq!(changed(&before, &now), ["a", "c", "d"]);
        // A pod that went entirely counts as changed too.
        assert_eq!(changed(&now, &records(&[], &[])), ["a", "b", "c", "d"]);
    }

    #[tokio::test]
    async fn a_change_wakes_its_subscriber_even_if_it_was_not_waiting_yet() {
        let pleg = Pleg::default();
        let a = pleg.subscribe("a");
        let b = pleg.subscribe("b");
        let before = records(&[sandbox("a", "sa", 0), sandbox("b", "sb", 0)], &[]);
        let now = records(&[sandbox("a", "sa", 1), sandbox("b", "sb", 0)], &[]);
        // Only subscribed pods count; the permit waits for a's worker.
        assert_eq!(pleg.wake(&before, &now), 1);
        tokio::time::timeout(Duration::from_secs(1), a.notified()).await.unwrap_or_else(|_| panic!("a not woken"));
        assert!(tokio::time::timeout(Duration::from_millis(50), b.notified()).await.is_err(), "b woken");
        pleg.unsubscribe("a");
        pleg.unsubscribe("b");
        assert!(pleg.idle());
        assert_eq!(pleg.wake(&now, &before), 0);
    }
}
