//! A node's health as the node lifecycle controller judges it (`tryUpdateNodeHealth`): the
//! controller remembers, per node, when it last saw the node alive — its Ready condition's
//! heartbeat moving or its Lease in `kube-node-lease` renewed — by its *own* clock, so a
//! node whose clock is off can neither hide its death nor fake its life. Past the grace
//! period, the node's Ready, MemoryPressure, DiskPressure and PIDPressure conditions turn
//! `Unknown`.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, NodeCondition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

/// The conditions a silent node's are set `Unknown` for (upstream's order).
const CONDITIONS: [&str; 4] = ["Ready", "MemoryPressure", "DiskPressure", "PIDPressure"];

/// How long a node may stay silent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Grace {
    /// `--node-monitor-grace-period`: a node that posted a Ready condition.
    pub monitor: Duration,
    /// `--node-startup-grace-period`: a node that never did.
    pub startup: Duration,
}

/// What the controller remembers of one node (`nodeHealthData`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Health {
    /// The node object this is about: a node deleted and registered again starts afresh.
    pub uid: String,
    /// When the controller last saw the node alive, by its own clock.
    pub probe: Instant,
    /// The Ready condition as last seen (absent: the node never posted one).
    pub ready: Option<ReadySeen>,
    /// The Lease's renewTime as last seen.
    pub lease_renewed: Option<Timestamp>,
}

/// The part of a Ready condition whose change shows a live node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ReadySeen {
    pub heartbeat: Option<Timestamp>,
}

/// One node's assessment in one pass.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Assessment {
    /// The Ready status the node's object holds (`Unknown` when it holds none): what the
    /// taint decisions of this pass read, as upstream's `observedReadyCondition`.
    pub observed: String,
    /// The Ready status after this pass.
    pub current: String,
    /// The conditions to write to `nodes/<name>/status`, when the node went silent.
    pub conditions: Option<Vec<NodeCondition>>,
}

/// A node's Ready condition's status (`Unknown` when absent).
pub(crate) fn ready_status(conditions: &[NodeCondition]) -> String {
    conditions.iter().find(|c| c.type_ == "Ready").map_or_else(|| "Unknown".to_owned(), |c| c.status.clone())
}

fn seen(condition: &NodeCondition) -> ReadySeen {
    ReadySeen { heartbeat: condition.last_heartbeat_time.as_ref().map(|t| t.0) }
}

/// `tryUpdateNodeHealth` for `node`, whose Lease was last renewed at `lease_renewed`:
/// updates what is remembered in `saved` and says whether its conditions turn `Unknown`.
/// `now` and `wall` are this pass's time on the controller's clocks.
pub(crate) fn assess(
    node: &Node,
    lease_renewed: Option<Timestamp>,
    saved: &mut Option<Health>,
    grace: Grace,
    now: Instant,
    wall: Timestamp,
) -> Assessment {
    let uid = node.metadata.uid.clone().unwrap_or_default();
    if saved.as_ref().is_some_and(|h| h.uid != uid) {
        *saved = None;
    }
    let conditions: &[NodeCondition] = node.status.as_ref().and_then(|s| s.conditions.as_deref()).unwrap_or_default();
    let ready = conditions.iter().find(|c| c.type_ == "Ready");
    let created = node.metadata.creation_timestamp.as_ref().map(|t| t.0);
    let period = if ready.is_some() { grace.monitor } else { grace.startup };
    let fresh = |probe: Instant| Health { uid: uid.clone(), probe, ready: ready.map(seen), lease_renewed: None };
    let mut health = match (saved.take(), ready) {
        // Never seen, never posted: its life counts from its creation.
        (None, None) => {
            let age = created.map_or(Duration::ZERO, |c| wall.duration_since(c).unsigned_abs());
            fresh(now.checked_sub(age).unwrap_or(now))
        }
        (None, Some(_)) => fresh(now),
        // Still never posted: its probe stays.
        (Some(h), None) if h.ready.is_none() => h,
        // The first Ready condition seen, or the one seen before removed: from now.
        (Some(h), _) if h.ready.is_none() || ready.is_none() => Health { lease_renewed: h.lease_renewed, ..fresh(now) },
        // The heartbeat moved: alive now.
        (Some(h), r) => {
            let latest = r.map(seen);
            if h.ready.as_ref().map(|s| s.heartbeat) != latest.as_ref().map(|s| s.heartbeat) {
                Health { probe: now, ready: latest, ..h }
            } else {
                h
            }
        }
    };
    // A renewed lease always counts as alive.
    if let Some(renewed) = lease_renewed
        && health.lease_renewed.is_none_or(|before| before < renewed)
    {
        health.lease_renewed = Some(renewed);
        health.probe = now;
    }
    let observed = ready_status(conditions);
    let mut assessment = Assessment { observed: observed.clone(), current: observed, conditions: None };
    if now.duration_since(health.probe) > period {
        let stamp = Time(wall);
        let mut updated = conditions.to_vec();
        for kind in CONDITIONS {
            match updated.iter_mut().find(|c| c.type_ == kind) {
                None => updated.push(NodeCondition {
                    type_: kind.to_owned(),
                    status: "Unknown".to_owned(),
                    reason: Some("NodeStatusNeverUpdated".to_owned()),
                    message: Some("Kubelet never posted node status.".to_owned()),
                    last_heartbeat_time: created.map(Time),
                    last_transition_time: Some(stamp.clone()),
                }),
                Some(c) if c.status != "Unknown" => {
                    c.status = "Unknown".to_owned();
                    c.reason = Some("NodeStatusUnknown".to_owned());
                    c.message = Some("Kubelet stopped posting node status.".to_owned());
                    c.last_transition_time = Some(stamp.clone());
                }
                Some(_) => {}
            }
        }
        // Written only when the Ready condition changed: a node already Unknown is left be.
        if updated.iter().find(|c| c.type_ == "Ready") != ready {
            assessment.current = ready_status(&updated);
            assessment.conditions = Some(updated);
        }
    }
    *saved = Some(health);
    assessment
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::NodeStatus;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    const GRACE: Grace = Grace { monitor: Duration::from_secs(50), startup: Duration::from_secs(60) };

    fn at(second: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + second).unwrap_or(Timestamp::UNIX_EPOCH)
    }

    fn node(ready: Option<(&str, i64)>) -> Node {
        let conditions = ready.map(|(status, beat)| {
            vec![NodeCondition {
                type_: "Ready".into(),
                status: status.into(),
                reason: Some("KubeletReady".into()),
                last_heartbeat_time: Some(Time(at(beat))),
                last_transition_time: Some(Time(at(0))),
                ..Default::default()
            }]
        });
        Node {
            metadata: ObjectMeta {
                name: Some("node-2".into()),
                uid: Some("u1".into()),
                creation_timestamp: Some(Time(at(0))),
                ..Default::default()
            },
            status: Some(NodeStatus { conditions, ..Default::default() }),
            ..Default::default()
        }
    }

    #[test]
    fn a_node_whose_lease_stops_turns_unknown_after_the_grace_period_only() {
        let start = Instant::now();
        let mut saved = None;
        let n = node(Some(("True", 0)));
        let a = assess(&n, Some(at(0)), &mut saved, GRACE, start, at(0));
        assert_eq!((a.observed.as_str(), a.conditions.is_none()), ("True", true));
        // The lease keeps it alive though its status heartbeat never moves.
        let a = assess(&n, Some(at(40)), &mut saved, GRACE, start + Duration::from_secs(40), at(40));
        assert!(a.conditions.is_none());
        let a = assess(&n, Some(at(40)), &mut saved, GRACE, start + Duration::from_secs(90), at(90));
        assert!(a.conditions.is_none(), "exactly the grace period is not past it");
        let a = assess(&n, Some(at(40)), &mut saved, GRACE, start + Duration::from_secs(91), at(91));
        assert_eq!((a.observed.as_str(), a.current.as_str()), ("True", "Unknown"));
        let conditions = a.conditions.unwrap_or_default();
        let ready = conditions.iter().find(|c| c.type_ == "Ready").cloned().unwrap_or_default();
        assert_eq!(ready.reason.as_deref(), Some("NodeStatusUnknown"));
        assert_eq!(ready.message.as_deref(), Some("Kubelet stopped posting node status."));
        assert_eq!(ready.last_heartbeat_time, Some(Time(at(0))), "the heartbeat stays the node's");
        assert_eq!(ready.last_transition_time, Some(Time(at(91))));
        // The pressure conditions it never posted are added as never updated.
        let memory = conditions.iter().find(|c| c.type_ == "MemoryPressure").cloned().unwrap_or_default();
        assert_eq!(
            (memory.status.as_str(), memory.reason.as_deref(), memory.last_heartbeat_time),
            ("Unknown", Some("NodeStatusNeverUpdated"), Some(Time(at(0))))
        );
        assert_eq!(conditions.len(), 4);
    }

    #[test]
    fn an_unknown_node_is_written_once_and_a_renewal_brings_it_back() {
        let start = Instant::now();
        let mut saved = None;
        let mut n = node(Some(("True", 0)));
        assess(&n, None, &mut saved, GRACE, start, at(0));
        let a = assess(&n, None, &mut saved, GRACE, start + Duration::from_secs(51), at(51));
        n.status = Some(NodeStatus { conditions: a.conditions, ..Default::default() });
        let again = assess(&n, None, &mut saved, GRACE, start + Duration::from_secs(56), at(56));
        assert_eq!((again.observed.as_str(), again.conditions), ("Unknown", None));
        // The lease renews: alive again, nothing to write (the node posts its own Ready).
        let back = assess(&n, Some(at(60)), &mut saved, GRACE, start + Duration::from_secs(60), at(60));
        assert!(back.conditions.is_none());
        assert_eq!(saved.map(|h| h.probe), Some(start + Duration::from_secs(60)));
    }

    #[test]
    fn a_heartbeat_counts_as_alive_by_the_controllers_clock_not_the_nodes() {
        let start = Instant::now();
        let mut saved = None;
        assess(&node(Some(("True", 0))), None, &mut saved, GRACE, start, at(0));
        // The node's clock runs far behind: what counts is that the heartbeat moved.
        let behind = node(Some(("True", -5000)));
        let a = assess(&behind, None, &mut saved, GRACE, start + Duration::from_secs(45), at(45));
        assert!(a.conditions.is_none());
        let a = assess(&behind, None, &mut saved, GRACE, start + Duration::from_secs(94), at(94));
        assert!(a.conditions.is_none(), "seen alive at 45 s");
        let a = assess(&behind, None, &mut saved, GRACE, start + Duration::from_secs(96), at(96));
        assert_eq!(a.current, "Unknown");
    }

    #[test]
    fn a_node_that_never_posted_status_has_the_startup_grace_from_its_creation() {
        let start = Instant::now();
        let mut saved = None;
        let n = node(None);
        // First seen 30 s after it was created: 30 s of its startup grace are left.
        let a = assess(&n, None, &mut saved, GRACE, start, at(30));
        assert_eq!((a.observed.as_str(), a.conditions.is_none()), ("Unknown", true));
        let a = assess(&n, None, &mut saved, GRACE, start + Duration::from_secs(31), at(61));
        let conditions = a.conditions.unwrap_or_default();
        let ready = conditions.iter().find(|c| c.type_ == "Ready").cloned().unwrap_or_default();
        assert_eq!((ready.status.as_str(), ready.reason.as_deref()), ("Unknown", Some("NodeStatusNeverUpdated")));
        assert_eq!(ready.message.as_deref(), Some("Kubelet never posted node status."));
    }

    #[test]
    fn a_node_registered_again_under_a_new_uid_starts_afresh() {
        let start = Instant::now();
        let mut saved = None;
        assess(&node(Some(("True", 0))), None, &mut saved, GRACE, start, at(0));
        let mut again = node(Some(("True", 0)));
        again.metadata.uid = Some("u2".into());
        let a = assess(&again, None, &mut saved, GRACE, start + Duration::from_secs(51), at(51));
        assert!(a.conditions.is_none(), "the new node's grace starts when it is first seen");
    }
}
