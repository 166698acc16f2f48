//! What a sync does to a pod's sandbox and containers, decided before anything is done
//! (kubelet: `computePodActions`, which `SyncPod` then executes): a plain function of the
//! pod's spec, what the runtime holds of it, the images its containers may use, their
//! restart back-offs and the clock. No I/O, no `async`: the table of cases is tested here,
//! and [`super::containers::sync`] carries the plan out.

use std::collections::HashMap;
use std::time::Duration;

use tokio::time::Instant;

use k8s_openapi::api::core::v1::{Container, PodSpec};

use super::containers::ImageCheck;
use crate::runtime::{CONTAINER_CREATED, CONTAINER_EXITED, CONTAINER_RUNNING, ContainerStatus};

/// The first restart back-off (kubelet: 10 s, doubling).
pub(crate) const BACKOFF_FIRST: Duration = Duration::from_secs(10);
/// The longest restart back-off (5 min).
pub(crate) const BACKOFF_MAX: Duration = Duration::from_secs(300);
/// A container that ran this long without exiting starts its back-off afresh.
pub(crate) const BACKOFF_RESET: Duration = Duration::from_secs(600);

/// A pod's (or a sidecar's) `restartPolicy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RestartPolicy {
    /// `Always` (the default).
    Always,
    /// `OnFailure`.
    OnFailure,
    /// `Never`.
    Never,
}

impl RestartPolicy {
    /// The pod's policy (absent or unknown: `Always`, as the API defaults it).
    pub(crate) fn of(spec: &PodSpec) -> Self {
        match spec.restart_policy.as_deref() {
            Some("OnFailure") => Self::OnFailure,
            Some("Never") => Self::Never,
            _ => Self::Always,
        }
    }

    /// Whether a container that exited with `exit_code` is started again.
    pub(crate) fn restarts(self, exit_code: i32) -> bool {
        match self {
            Self::Always => true,
            Self::OnFailure => exit_code != 0,
            Self::Never => false,
        }
    }

    /// The policy an init container runs under: `Always` pods restart a failed init
    /// container, never a succeeded one.
    fn for_init(self) -> Self {
        match self {
            Self::Always => Self::OnFailure,
            other => other,
        }
    }
}

/// A container's state in the runtime.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RuntimeState {
    /// Created, never started (an agent stopped in between).
    Created,
    /// Running.
    Running,
    /// Exited.
    Exited,
    /// Anything else the runtime says.
    Unknown,
}

impl RuntimeState {
    fn of(status: &ContainerStatus) -> Self {
        match status.state {
            CONTAINER_CREATED => Self::Created,
            CONTAINER_RUNNING => Self::Running,
            CONTAINER_EXITED => Self::Exited,
            _ => Self::Unknown,
        }
    }
}

/// The newest attempt of a container the runtime holds.
#[derive(Debug, Clone, Default)]
pub(crate) struct Observed {
    /// The runtime's container ID.
    pub id: String,
    /// Its attempt (the restart count).
    pub attempt: u32,
    /// The spec hash it was created from (none: made before hashes were recorded).
    pub hash: Option<String>,
    /// What the runtime says of it.
    pub status: ContainerStatus,
    /// The attempt before it, when the runtime still holds it: its ID and status.
    pub previous: Option<(String, ContainerStatus)>,
}

impl Observed {
    fn state(&self) -> RuntimeState {
        RuntimeState::of(&self.status)
    }

    /// How long it ran: until it exited, or until `wall_nanos` while it runs.
    fn ran(&self, wall_nanos: i64) -> Duration {
        let until = if self.state() == RuntimeState::Exited { self.status.finished_at } else { wall_nanos };
        Duration::from_nanos(u64::try_from(until - self.status.started_at).unwrap_or(0))
    }
}

/// What the runtime holds of the pod's regular and init containers, by name, and for a
/// container it does not hold the restart count its logs give (kubelet
/// `calcRestartCountByLogDir`).
#[derive(Debug, Clone, Default)]
pub(crate) struct Observation {
    pub containers: HashMap<String, Observed>,
    pub log_restarts: HashMap<String, u32>,
    /// Running containers, by name, that a liveness or startup probe failed.
    pub probe_kills: HashMap<String, super::prober::ProbeKill>,
}

/// When the plan is made.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Clock {
    pub now: Instant,
    /// Wall-clock nanoseconds (what the runtime's timestamps are in).
    pub wall_nanos: i64,
}

/// Whether a container may start now, from its image check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Gate {
    /// Checked in this sync: start it on this image reference.
    Go(String),
    /// Allowed before, not checked for this start: sync again at once.
    RecheckNow,
    /// Refused: it waits with the check's reason.
    Refused(super::sync_error::SyncError),
    /// Not allowed (yet): never started.
    NotAllowed,
}

/// A running container killed: the `Killing` event's message and the grace it gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Kill {
    /// `Container app definition changed, will be restarted`, `Container app failed
    /// liveness probe, will be restarted`.
    pub message: String,
    /// Seconds between SIGTERM and SIGKILL (`None`: the pod's grace period).
    pub grace_seconds: Option<i64>,
}

/// What is done to one container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Step {
    /// Running on its spec: kept.
    Keep,
    /// Exited, and not run again (an init container that succeeded, or its policy).
    Done,
    /// Exited, restarted once its back-off ends at `until` (its current delay `delay`).
    BackOff { until: Instant, delay: Duration },
    /// Created but never started: started.
    StartCreated,
    /// Attempt `attempt` created and started, once the gate allows: the running
    /// container killed first (`kill`: its spec changed, or a probe failed it), the last
    /// one's end reported (`report_last`), and the back-off to keep once it starts.
    Start { attempt: u32, kill: Option<Kill>, report_last: bool, backoff: Option<(Instant, Duration)>, gate: Gate },
    /// Running, killed and not started again (a probe failed it under `restartPolicy:
    /// Never`).
    Kill(Kill),
}

/// One container's part of the plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ContainerAction {
    /// An init container.
    pub init: bool,
    /// Its name.
    pub name: String,
    /// What is done.
    pub step: Step,
    /// Its restart back-off is forgotten (it ran long enough, or its spec changed).
    pub reset_backoff: bool,
}

/// The containers' plan, in the order the kubelet goes through them: the init containers
/// up to the first one not finished, then (once every init container succeeded) the
/// regular ones.
pub(crate) fn compute_container_actions(
    spec: &PodSpec,
    observed: &Observation,
    images: &HashMap<(bool, String), ImageCheck>,
    backoff: &HashMap<String, (Instant, Duration)>,
    clock: Clock,
) -> Vec<ContainerAction> {
    let policy = RestartPolicy::of(spec);
    let inits = spec.init_containers.iter().flatten().map(|c| (true, c));
    let apps = spec.containers.iter().map(|c| (false, c));
    let mut out = Vec::new();
    for (init, c) in inits.chain(apps) {
        let policy = if init { policy.for_init() } else { policy };
        let action = container_action(init, c, policy, observed, images, backoff, clock);
        // An init container holds the ones after it until it has succeeded.
        let succeeded =
            action.step == Step::Done && observed.containers.get(&c.name).is_some_and(|o| o.status.exit_code == 0);
        out.push(action);
        if init && !succeeded {
            break;
        }
    }
    out
}

fn container_action(
    init: bool,
    c: &Container,
    policy: RestartPolicy,
    observed: &Observation,
    images: &HashMap<(bool, String), ImageCheck>,
    backoff: &HashMap<String, (Instant, Duration)>,
    clock: Clock,
) -> ContainerAction {
    let gate = || gate(images.get(&(init, c.name.clone())));
    let action = |step, reset_backoff| ContainerAction { init, name: c.name.clone(), step, reset_backoff };
    let Some(found) = observed.containers.get(&c.name) else {
        // Lost by the runtime (or never made): its logs tell its restart count.
        let attempt = observed.log_restarts.get(&c.name).copied().unwrap_or(0);
        return action(Step::Start { attempt, kill: None, report_last: false, backoff: None, gate: gate() }, false);
    };
    let state = found.state();
    // A container whose spec changed (its image) is killed and started again, whatever
    // the restart policy; a finished init container is not run again. One made before
    // hashes were recorded counts as unchanged.
    let finished_init = init && state == RuntimeState::Exited && found.status.exit_code == 0;
    let changed = found.hash.as_deref().is_some_and(|h| h != super::containers::container_hash(c)) && !finished_init;
    if changed {
        let kill = (state != RuntimeState::Exited).then(|| Kill {
            message: format!("Container {} definition changed, will be restarted", c.name),
            grace_seconds: None,
        });
        let step = Step::Start { attempt: found.attempt + 1, kill, report_last: true, backoff: None, gate: gate() };
        return action(step, true);
    }
    let ran_long = found.ran(clock.wall_nanos) >= BACKOFF_RESET;
    match state {
        // kubelet computePodActions: a container a liveness or startup probe failed is
        // killed, and started again unless the policy is Never (at once: the back-off
        // counts exits, and this one was running).
        RuntimeState::Running if let Some(failed) = observed.probe_kills.get(&c.name) => {
            if policy == RestartPolicy::Never {
                let kill = Kill { message: failed.message.clone(), grace_seconds: failed.grace_seconds };
                action(Step::Kill(kill), false)
            } else {
                let kill = Some(Kill {
                    message: format!("{}, will be restarted", failed.message),
                    grace_seconds: failed.grace_seconds,
                });
                let step =
                    Step::Start { attempt: found.attempt + 1, kill, report_last: true, backoff: None, gate: gate() };
                action(step, false)
            }
        }
        RuntimeState::Running => action(Step::Keep, ran_long),
        RuntimeState::Exited if finished_init || !policy.restarts(found.status.exit_code) => {
            action(Step::Done, ran_long)
        }
        RuntimeState::Exited => {
            // The back-off it has (none once it ran long enough): a first failure waits
            // half the first delay's doubling, i.e. starts at once.
            let current = if ran_long { None } else { backoff.get(&c.name).copied() };
            let (at, delay) = current.unwrap_or((clock.now, BACKOFF_FIRST / 2));
            if clock.now >= at {
                let delay = (delay * 2).min(BACKOFF_MAX);
                let next = Some((clock.now + delay, delay));
                let step = Step::Start {
                    attempt: found.attempt + 1,
                    kill: None,
                    report_last: true,
                    backoff: next,
                    gate: gate(),
                };
                action(step, ran_long)
            } else {
                action(Step::BackOff { until: at, delay }, ran_long)
            }
        }
        RuntimeState::Created | RuntimeState::Unknown => action(Step::StartCreated, false),
    }
}

fn gate(check: Option<&ImageCheck>) -> Gate {
    match check {
        Some(ImageCheck::Allowed { image_ref, checked_now: true }) => Gate::Go(image_ref.clone()),
        Some(ImageCheck::Allowed { .. }) => Gate::RecheckNow,
        Some(ImageCheck::Refused(error)) => Gate::Refused(error.clone()),
        None => Gate::NotAllowed,
    }
}

/// Whether every regular container exited and none is to run again under the pod's
/// policy: a pod that finished for good keeps its stopped sandbox and is not run again.
pub(crate) fn finished_for_good(spec: &PodSpec, observed: &Observation) -> bool {
    let policy = RestartPolicy::of(spec);
    !spec.containers.is_empty()
        && spec.containers.iter().all(|c| {
            observed
                .containers
                .get(&c.name)
                .is_some_and(|o| o.state() == RuntimeState::Exited && !policy.restarts(o.status.exit_code))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINUTE_NS: i64 = 60_000_000_000;

    fn spec(policy: &str, inits: &[&str], apps: &[&str]) -> PodSpec {
        let c = |n: &&str| serde_json::json!({"name": n, "image": "img"});
        serde_json::from_value(serde_json::json!({"restartPolicy": policy,
            "initContainers": inits.iter().map(c).collect::<Vec<_>>(),
            "containers": apps.iter().map(c).collect::<Vec<_>>()}))
        .unwrap_or_else(|e| panic!("{e}"))
    }

    fn hash_of(spec: &PodSpec, name: &str) -> String {
        let c = spec.init_containers.iter().flatten().chain(&spec.containers).find(|c| c.name == name);
        super::super::containers::container_hash(c.unwrap_or_else(|| panic!("{name}")))
    }

    /// A container the runtime holds: `state`, its exit code, run for `minutes`.
    fn held(state: i32, exit_code: i32, minutes: i64, hash: Option<String>) -> Observed {
        let now = 1_000 * MINUTE_NS;
        Observed {
            id: "c1".into(),
            attempt: 2,
            hash,
            status: ContainerStatus {
                state,
                exit_code,
                started_at: now - minutes * MINUTE_NS - MINUTE_NS,
                finished_at: if state == CONTAINER_EXITED { now - MINUTE_NS } else { 0 },
                ..Default::default()
            },
            previous: None,
        }
    }

    fn allowed_now(names: &[(bool, &str)]) -> HashMap<(bool, String), ImageCheck> {
        names
            .iter()
            .map(|(i, n)| {
                ((*i, (*n).to_owned()), ImageCheck::Allowed { image_ref: "sha256:x".into(), checked_now: true })
            })
            .collect()
    }

    fn clock(now: Instant) -> Clock {
        Clock { now, wall_nanos: 1_000 * MINUTE_NS }
    }

    /// The plan's step for app container `app` of a `policy` pod observed as `found`.
    fn app_step(policy: &str, found: Option<Observed>, backoff: Option<(Instant, Duration)>, now: Instant) -> Step {
        let s = spec(policy, &[], &["app"]);
        let mut o = Observation::default();
        if let Some(mut f) = found {
            f.hash = f.hash.map(|h| if h == "same" { hash_of(&s, "app") } else { h });
            o.containers.insert("app".into(), f);
        }
        let backoffs: HashMap<String, (Instant, Duration)> =
            backoff.map(|b| ("app".to_owned(), b)).into_iter().collect();
        let plan = compute_container_actions(&s, &o, &allowed_now(&[(false, "app")]), &backoffs, clock(now));
        assert_eq!(plan.len(), 1, "{plan:?}");
        plan[0].step.clone()
    }

    #[test]
    fn each_restart_policy_and_exit_is_planned_as_the_kubelets() {
        let now = Instant::now();
        let go = Gate::Go("sha256:x".into());
        let first = |attempt| Step::Start {
            attempt,
            kill: None,
            report_last: true,
            backoff: Some((now + BACKOFF_FIRST, BACKOFF_FIRST)),
            gate: Gate::Go("sha256:x".into()),
        };
        let same = || Some("same".to_owned());
        // (policy, exit code) → restart at once (its first failure) or done.
        for (policy, code, restarted) in [
            ("Always", 0, true),
            ("Always", 1, true),
            ("OnFailure", 0, false),
            ("OnFailure", 1, true),
            ("Never", 0, false),
            ("Never", 1, false),
        ] {
            let step = app_step(policy, Some(held(CONTAINER_EXITED, code, 1, same())), None, now);
            let expected = if restarted { first(3) } else { Step::Done };
            assert_eq!(step, expected, "{policy} exit {code}");
        }
        // Running on its spec: kept; never made: attempt 0 (or its logs' count).
        assert_eq!(app_step("Always", Some(held(CONTAINER_RUNNING, 0, 1, same())), None, now), Step::Keep);
        assert_eq!(
            app_step("Never", None, None, now),
            Step::Start { attempt: 0, kill: None, report_last: false, backoff: None, gate: go.clone() }
        );
        // Created, never started: started as it is.
        assert_eq!(app_step("Always", Some(held(CONTAINER_CREATED, 0, 0, same())), None, now), Step::StartCreated);
    }

    #[test]
    fn back_off_doubles_to_its_cap_and_resets_after_a_long_run() {
        let now = Instant::now();
        let same = || Some("same".to_owned());
        let crashed = || Some(held(CONTAINER_EXITED, 1, 1, same()));
        // Still within its back-off: it waits, and says until when.
        let waiting = app_step("Always", crashed(), Some((now + Duration::from_secs(5), BACKOFF_FIRST)), now);
        assert_eq!(waiting, Step::BackOff { until: now + Duration::from_secs(5), delay: BACKOFF_FIRST });
        // Past it: started, the next delay doubled...
        let Step::Start { backoff, .. } = app_step("Always", crashed(), Some((now, BACKOFF_FIRST)), now) else {
            panic!("started")
        };
        assert_eq!(backoff, Some((now + 2 * BACKOFF_FIRST, 2 * BACKOFF_FIRST)));
        // ...up to five minutes.
        let Step::Start { backoff, .. } = app_step("Always", crashed(), Some((now, BACKOFF_MAX)), now) else {
            panic!("started")
        };
        assert_eq!(backoff, Some((now + BACKOFF_MAX, BACKOFF_MAX)));
        // A container that ran ten minutes starts afresh: at once, the first delay.
        let s = spec("Always", &[], &["app"]);
        let mut o = Observation::default();
        let mut f = held(CONTAINER_EXITED, 1, 10, same());
        f.hash = Some(hash_of(&s, "app"));
        o.containers.insert("app".into(), f);
        let backoffs = HashMap::from([("app".to_owned(), (now + BACKOFF_MAX, BACKOFF_MAX))]);
        let plan = compute_container_actions(&s, &o, &allowed_now(&[(false, "app")]), &backoffs, clock(now));
        assert!(plan[0].reset_backoff);
        assert!(matches!(plan[0].step, Step::Start { backoff: Some((_, d)), .. } if d == BACKOFF_FIRST), "{plan:?}");
    }

    #[test]
    fn a_failed_liveness_probe_kills_and_restarts_at_once_unless_the_policy_is_never() {
        let now = Instant::now();
        for policy in ["Always", "OnFailure", "Never"] {
            let s = spec(policy, &[], &["app"]);
            let mut o = Observation::default();
            let mut f = held(CONTAINER_RUNNING, 0, 1, None);
            f.hash = Some(hash_of(&s, "app"));
            o.containers.insert("app".into(), f);
            let failed = super::super::prober::ProbeKill {
                message: "Container app failed liveness probe".into(),
                grace_seconds: Some(5),
            };
            o.probe_kills.insert("app".into(), failed);
            let plan = compute_container_actions(&s, &o, &allowed_now(&[(false, "app")]), &HashMap::new(), clock(now));
            let expected = if policy == "Never" {
                Step::Kill(Kill { message: "Container app failed liveness probe".into(), grace_seconds: Some(5) })
            } else {
                Step::Start {
                    attempt: 3,
                    kill: Some(Kill {
                        message: "Container app failed liveness probe, will be restarted".into(),
                        grace_seconds: Some(5),
                    }),
                    report_last: true,
                    backoff: None,
                    gate: Gate::Go("sha256:x".into()),
                }
            };
            assert_eq!(plan[0].step, expected, "{policy}");
        }
    }

    #[test]
    fn a_changed_spec_kills_and_restarts_whatever_the_policy_but_not_a_finished_init() {
        let now = Instant::now();
        let other = || Some("0ld".to_owned());
        for policy in ["Always", "OnFailure", "Never"] {
            let step = app_step(policy, Some(held(CONTAINER_RUNNING, 0, 1, other())), None, now);
            assert_eq!(
                step,
                Step::Start {
                    attempt: 3,
                    kill: Some(Kill {
                        message: "Container app definition changed, will be restarted".into(),
                        grace_seconds: None
                    }),
                    report_last: true,
                    backoff: None,
                    gate: Gate::Go("sha256:x".into())
                },
                "{policy}"
            );
            let exited = app_step(policy, Some(held(CONTAINER_EXITED, 0, 1, other())), None, now);
            assert!(matches!(exited, Step::Start { kill: None, .. }), "{policy}: {exited:?}");
        }
        // No recorded hash: unchanged.
        assert_eq!(app_step("Always", Some(held(CONTAINER_RUNNING, 0, 1, None)), None, now), Step::Keep);
        // A finished init container is not run again for a changed spec.
        let s = spec("Always", &["init"], &["app"]);
        let mut o = Observation::default();
        o.containers.insert("init".into(), held(CONTAINER_EXITED, 0, 1, Some("0ld".into())));
        let plan = compute_container_actions(
            &s,
            &o,
            &allowed_now(&[(true, "init"), (false, "app")]),
            &HashMap::new(),
            clock(now),
        );
        assert_eq!(plan[0].step, Step::Done);
        assert_eq!(plan[1].name, "app");
    }

    #[test]
    fn init_containers_run_in_order_and_hold_the_rest_until_they_succeed() {
        let now = Instant::now();
        let s = spec("Always", &["one", "two"], &["app"]);
        let images = allowed_now(&[(true, "one"), (true, "two"), (false, "app")]);
        let hashed = |name: &str, state, code| {
            let mut o = held(state, code, 1, None);
            o.hash = Some(hash_of(&s, name));
            o
        };
        let plan_of = |o: &Observation| -> Vec<(String, Step)> {
            compute_container_actions(&s, o, &images, &HashMap::new(), clock(now))
                .into_iter()
                .map(|a| (a.name, a.step))
                .collect()
        };
        // Nothing yet: only the first init container starts.
        let plan = plan_of(&Observation::default());
        assert_eq!(plan.len(), 1);
        assert_eq!(plan[0].0, "one");
        // The first running: it holds the second.
        let mut o = Observation::default();
        o.containers.insert("one".into(), hashed("one", CONTAINER_RUNNING, 0));
        assert_eq!(plan_of(&o), vec![("one".to_owned(), Step::Keep)]);
        // The first succeeded: the second starts; both succeeded: the app starts.
        o.containers.insert("one".into(), hashed("one", CONTAINER_EXITED, 0));
        let plan = plan_of(&o);
        assert_eq!((plan.len(), plan[1].0.as_str()), (2, "two"));
        o.containers.insert("two".into(), hashed("two", CONTAINER_EXITED, 0));
        let plan = plan_of(&o);
        assert_eq!((plan.len(), plan[2].0.as_str()), (3, "app"));
        // A failed init container restarts under Always and OnFailure, and under Never the
        // pod stays held (it fails).
        o.containers.insert("two".into(), hashed("two", CONTAINER_EXITED, 1));
        assert!(matches!(plan_of(&o)[1].1, Step::Start { .. }));
        let never = spec("Never", &["one", "two"], &["app"]);
        let plan = compute_container_actions(&never, &o, &images, &HashMap::new(), clock(now));
        assert_eq!(plan.len(), 2, "held: {plan:?}");
        assert_eq!(plan[1].step, Step::Done);
    }

    #[test]
    fn starts_follow_their_image_check() {
        let now = Instant::now();
        let s = spec("Always", &[], &["app"]);
        let step_with = |check: Option<ImageCheck>| {
            let images: HashMap<(bool, String), ImageCheck> =
                check.map(|c| ((false, "app".to_owned()), c)).into_iter().collect();
            compute_container_actions(&s, &Observation::default(), &images, &HashMap::new(), clock(now))[0].step.clone()
        };
        let gate_of = |step: Step| match step {
            Step::Start { gate, .. } => gate,
            other => panic!("{other:?}"),
        };
        assert_eq!(gate_of(step_with(None)), Gate::NotAllowed);
        let earlier = ImageCheck::Allowed { image_ref: "sha256:x".into(), checked_now: false };
        assert_eq!(gate_of(step_with(Some(earlier))), Gate::RecheckNow);
        let refused = super::super::sync_error::SyncError::CrashLoopBackOff("x".into());
        assert_eq!(gate_of(step_with(Some(ImageCheck::Refused(refused.clone())))), Gate::Refused(refused));
    }

    #[test]
    fn a_pod_finished_for_good_is_one_whose_containers_all_exited_for_good() {
        let s = spec("OnFailure", &[], &["a", "b"]);
        let mut o = Observation::default();
        o.containers.insert("a".into(), held(CONTAINER_EXITED, 0, 1, None));
        assert!(!finished_for_good(&s, &o), "b never ran");
        o.containers.insert("b".into(), held(CONTAINER_EXITED, 1, 1, None));
        assert!(!finished_for_good(&s, &o), "b restarts on failure");
        o.containers.insert("b".into(), held(CONTAINER_EXITED, 0, 1, None));
        assert!(finished_for_good(&s, &o));
        assert!(!finished_for_good(&spec("Always", &[], &["a", "b"]), &o), "Always runs them again");
    }
}
