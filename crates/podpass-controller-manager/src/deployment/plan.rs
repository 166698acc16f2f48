//! What the Deployment controller decides about ReplicaSets, as pure functions of the
//! Deployment and its ReplicaSets (upstream `pkg/controller/deployment/{sync,rolling,
//! recreate}.go` and `util/deployment_util.go`): which ReplicaSet is new, its name and
//! hash, how far a rolling update may scale each set, proportional scaling, and which old
//! sets the history limit removes. `super` executes the plan.

use std::cmp::Ordering;

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use podpass_api::int_or_percent::IntOrPercent;

/// The label (and selector term) that ties a ReplicaSet and its pods to one template.
pub(crate) const TEMPLATE_HASH: &str = "pod-template-hash";

/// `rand.SafeEncodeString`'s alphabet: no vowels, no look-alikes.
const SAFE_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

/// A template as upstream's semantic equality sees it (`apiequality.Semantic.DeepEqual`
/// treats empty and absent slices and maps as one, and Go writes an empty struct where we
/// may have none): its JSON with every null, `{}` and `[]` left out. `kubectl rollout undo`
/// writes `resources: {}` back, which must still name the same template.
fn normalized(template: &PodTemplateSpec) -> serde_json::Value {
    fn prune(v: &mut serde_json::Value) -> bool {
        match v {
            serde_json::Value::Object(map) => {
                map.retain(|_, child| !prune(child));
                map.is_empty()
            }
            serde_json::Value::Array(items) => {
                for item in items.iter_mut() {
                    prune(item);
                }
                items.is_empty()
            }
            serde_json::Value::Null => true,
            _ => false,
        }
    }
    let mut v = serde_json::to_value(template).unwrap_or_default();
    prune(&mut v);
    v
}

/// `ComputeHash`: FNV-32a over the template's serialization (upstream hashes a spew dump; a
/// canonical JSON of the [`normalized`] template is as stable here) and the collision
/// count, the decimal of the sum mapped through [`SAFE_ALPHABET`] as `SafeEncodeString` maps it.
pub(crate) fn template_hash(template: &PodTemplateSpec, collision_count: Option<i32>) -> String {
    let mut hash: u32 = 0x811c_9dc5;
    let mut feed = |bytes: &[u8]| {
        for b in bytes {
            hash ^= u32::from(*b);
            hash = hash.wrapping_mul(0x0100_0193);
        }
    };
    feed(&serde_json::to_vec(&normalized(template)).unwrap_or_default());
    if let Some(count) = collision_count {
        // upstream writes the uint32 as 8 bytes, little-endian.
        feed(&u64::from(count.cast_unsigned()).to_le_bytes());
    }
    hash.to_string().bytes().map(|b| char::from(SAFE_ALPHABET[usize::from(b) % SAFE_ALPHABET.len()])).collect()
}

/// A template without its `pod-template-hash` label.
fn without_hash(template: &PodTemplateSpec) -> PodTemplateSpec {
    let mut t = template.clone();
    if let Some(labels) = t.metadata.as_mut().and_then(|m| m.labels.as_mut()) {
        labels.remove(TEMPLATE_HASH);
    }
    t
}

/// `EqualIgnoreHash`: the same template once the hash label is left out, compared as
/// upstream's semantic equality compares ([`normalized`]).
pub(crate) fn equal_ignore_hash(a: &PodTemplateSpec, b: &PodTemplateSpec) -> bool {
    normalized(&without_hash(a)) == normalized(&without_hash(b))
}

fn template_of(rs: &ReplicaSet) -> PodTemplateSpec {
    rs.spec.as_ref().and_then(|s| s.template.clone()).unwrap_or_default()
}

/// A ReplicaSet's `spec.replicas` (1 when unset, as defaulted).
pub(crate) fn spec_replicas(rs: &ReplicaSet) -> i32 {
    rs.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1)
}

/// A Deployment's `spec.replicas`.
pub(crate) fn replicas(d: &Deployment) -> i32 {
    d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1)
}

fn status_replicas(rs: &ReplicaSet) -> i32 {
    rs.status.as_ref().map_or(0, |s| s.replicas)
}

/// A ReplicaSet's available replicas as its status says.
pub(crate) fn available(rs: &ReplicaSet) -> i32 {
    rs.status.as_ref().and_then(|s| s.available_replicas).unwrap_or(0)
}

fn created(rs: &ReplicaSet) -> (Option<jiff::Timestamp>, String) {
    (rs.metadata.creation_timestamp.as_ref().map(|t| t.0), rs.metadata.name.clone().unwrap_or_default())
}

/// `ReplicaSetsByCreationTimestamp`: oldest first, then by name.
pub(crate) fn oldest_first(a: &ReplicaSet, b: &ReplicaSet) -> Ordering {
    created(a).cmp(&created(b))
}

/// `FindNewReplicaSet`: the oldest of `sets` whose template is the Deployment's.
pub(crate) fn find_new<'a>(d: &Deployment, sets: &[&'a ReplicaSet]) -> Option<&'a ReplicaSet> {
    let template = d.spec.as_ref().map(|s| s.template.clone()).unwrap_or_default();
    let mut sorted = sets.to_vec();
    sorted.sort_by(|a, b| oldest_first(a, b));
    sorted.into_iter().find(|rs| equal_ignore_hash(&template_of(rs), &template))
}

/// An IntOrString as `intstr` reads it (the DaemonSet controller's bounds too).
pub(crate) fn int_or_percent(v: &IntOrString) -> IntOrPercent<'_> {
    match v {
        IntOrString::Int(n) => IntOrPercent::Int(*n),
        IntOrString::String(s) => IntOrPercent::String(s),
    }
}

/// Whether the Deployment rolls (RollingUpdate) rather than recreates.
pub(crate) fn is_rolling(d: &Deployment) -> bool {
    let kind = d.spec.as_ref().and_then(|s| s.strategy.as_ref()).and_then(|s| s.type_.as_deref());
    kind.is_none_or(|k| k == "RollingUpdate")
}

/// `ResolveFenceposts`: (maxSurge, maxUnavailable) out of `replicas`, the surge rounded up,
/// the unavailability down, and 1 unavailable when both come to 0 (or a rollout would
/// never start).
pub(crate) fn fenceposts(d: &Deployment, replicas: i32) -> (i32, i32) {
    let rolling = d.spec.as_ref().and_then(|s| s.strategy.as_ref()).and_then(|s| s.rolling_update.clone());
    let quarter = IntOrString::String("25%".into());
    let surge_v = rolling.as_ref().and_then(|r| r.max_surge.clone()).unwrap_or_else(|| quarter.clone());
    let unavailable_v = rolling.and_then(|r| r.max_unavailable).unwrap_or(quarter);
    let surge = int_or_percent(&surge_v).scaled(replicas, true).unwrap_or(0);
    let unavailable = int_or_percent(&unavailable_v).scaled(replicas, false).unwrap_or(0);
    if surge == 0 && unavailable == 0 { (0, 1) } else { (surge, unavailable) }
}

/// `MaxSurge`: 0 unless rolling.
pub(crate) fn max_surge(d: &Deployment) -> i32 {
    if is_rolling(d) { fenceposts(d, replicas(d)).0 } else { 0 }
}

/// `MaxUnavailable`: 0 unless rolling with replicas, never above the replicas.
pub(crate) fn max_unavailable(d: &Deployment) -> i32 {
    let n = replicas(d);
    if !is_rolling(d) || n == 0 { 0 } else { fenceposts(d, n).1.min(n) }
}

/// `NewRSNewReplicas`: what the new ReplicaSet scales to now — all the replicas when
/// recreating; when rolling, up by what the surge leaves room for.
pub(crate) fn new_rs_replicas(d: &Deployment, all: &[&ReplicaSet], new_spec: i32) -> i32 {
    let n = replicas(d);
    if !is_rolling(d) {
        return n;
    }
    if new_spec == n {
        return new_spec;
    }
    let max_total = n + max_surge(d);
    let current: i32 = all.iter().map(|rs| spec_replicas(rs)).sum();
    if current >= max_total {
        return new_spec;
    }
    let up = (max_total - current).min(n - new_spec).max(0);
    new_spec + up
}

/// `reconcileOldReplicaSets` for a rolling update: the old sets' new sizes (by name, only
/// those that change), first removing unhealthy replicas (`cleanupUnhealthyReplicas`), then
/// available ones down to the minimum available (`scaleDownOldReplicaSetsForRollingUpdate`),
/// oldest first.
pub(crate) fn scale_down_old(
    d: &Deployment,
    all: &[&ReplicaSet],
    old: &[&ReplicaSet],
    new: Option<&ReplicaSet>,
) -> Vec<(String, i32)> {
    let mut old: Vec<(&ReplicaSet, i32)> =
        old.iter().filter(|rs| spec_replicas(rs) > 0).map(|rs| (*rs, spec_replicas(rs))).collect();
    let old_pods: i32 = old.iter().map(|(_, n)| n).sum();
    if old_pods == 0 {
        return Vec::new();
    }
    old.sort_by(|a, b| oldest_first(a.0, b.0));
    let all_pods: i32 = all.iter().map(|rs| spec_replicas(rs)).sum();
    let min_available = replicas(d) - max_unavailable(d);
    let new_unavailable = new.map_or(0, |rs| spec_replicas(rs) - available(rs));
    let max_scaled_down = all_pods - min_available - new_unavailable;
    if max_scaled_down <= 0 {
        return Vec::new();
    }
    // cleanupUnhealthyReplicas: unavailable replicas go first, whatever the minimum.
    let mut cleaned = 0;
    for (rs, size) in &mut old {
        if cleaned >= max_scaled_down {
            break;
        }
        let unhealthy = *size - available(rs);
        if *size == 0 || unhealthy <= 0 {
            continue;
        }
        let down = (max_scaled_down - cleaned).min(unhealthy);
        *size -= down;
        cleaned += down;
    }
    // Then available replicas, down to the minimum available.
    let available_now: i32 = all.iter().map(|rs| available(rs)).sum();
    if available_now > min_available {
        let total = available_now - min_available;
        let mut scaled = 0;
        for (_, size) in &mut old {
            if scaled >= total {
                break;
            }
            if *size == 0 {
                continue;
            }
            let down = (*size).min(total - scaled);
            *size -= down;
            scaled += down;
        }
    }
    old.into_iter()
        .filter(|(rs, size)| *size != spec_replicas(rs))
        .map(|(rs, size)| (rs.metadata.name.clone().unwrap_or_default(), size))
        .collect()
}

/// The annotations the controller keeps on a ReplicaSet (`deployment.kubernetes.io/…`).
pub(crate) const REVISION: &str = "deployment.kubernetes.io/revision";
pub(crate) const REVISION_HISTORY: &str = "deployment.kubernetes.io/revision-history";
pub(crate) const DESIRED_REPLICAS: &str = "deployment.kubernetes.io/desired-replicas";
pub(crate) const MAX_REPLICAS: &str = "deployment.kubernetes.io/max-replicas";

fn annotation(rs: &ReplicaSet, key: &str) -> Option<i32> {
    rs.metadata.annotations.as_ref().and_then(|a| a.get(key)).and_then(|v| v.parse().ok())
}

/// `FindActiveOrLatest`: the one set with replicas, or (none has any) the new or newest.
fn active_or_latest<'a>(new: Option<&'a ReplicaSet>, old: &[&'a ReplicaSet]) -> Option<&'a ReplicaSet> {
    let mut old = old.to_vec();
    old.sort_by(|a, b| oldest_first(b, a));
    let active: Vec<&ReplicaSet> = old.iter().copied().chain(new).filter(|rs| spec_replicas(rs) > 0).collect();
    match active.len() {
        0 => new.or_else(|| old.first().copied()),
        1 => active.first().copied(),
        _ => None,
    }
}

/// `IsSaturated`: the new set holds every replica, all available.
fn is_saturated(d: &Deployment, rs: Option<&ReplicaSet>) -> bool {
    let n = replicas(d);
    rs.is_some_and(|rs| annotation(rs, DESIRED_REPLICAS) == Some(n) && spec_replicas(rs) == n && available(rs) == n)
}

/// `isScalingEvent`: an active set was sized for another replica count.
pub(crate) fn is_scaling_event(d: &Deployment, all: &[&ReplicaSet]) -> bool {
    let n = replicas(d);
    all.iter()
        .filter(|rs| spec_replicas(rs) > 0)
        .any(|rs| annotation(rs, DESIRED_REPLICAS).is_some_and(|want| want != n))
}

/// `getReplicaSetFraction`: how many a set gains or loses of a scaling, in proportion to
/// its size at the replica count it was sized for (`max-replicas`).
fn fraction(rs: &ReplicaSet, d: &Deployment) -> i32 {
    let n = replicas(d);
    if n == 0 {
        return -spec_replicas(rs);
    }
    let total = n + max_surge(d);
    let Some(annotated) = annotation(rs, MAX_REPLICAS).or_else(|| d.status.as_ref().and_then(|s| s.replicas)) else {
        return 0;
    };
    if annotated == 0 {
        return 0;
    }
    let size = f64::from(spec_replicas(rs)) * f64::from(total) / f64::from(annotated);
    // Rounded half away from zero, as Go's math.Round.
    let rounded = size.round();
    #[allow(clippy::cast_possible_truncation)]
    let rounded = rounded.clamp(f64::from(i32::MIN), f64::from(i32::MAX)) as i32;
    rounded - spec_replicas(rs)
}

/// `scale`: the sizes (by name) a scaling event or a paused Deployment gives its sets —
/// the one active set takes the new count; a saturated new set leaves the old at 0;
/// otherwise the change is spread in proportion (`GetProportion`), larger sets first, the
/// leftover to the first.
pub(crate) fn proportional(d: &Deployment, new: Option<&ReplicaSet>, old: &[&ReplicaSet]) -> Vec<(String, i32)> {
    let name = |rs: &ReplicaSet| rs.metadata.name.clone().unwrap_or_default();
    let n = replicas(d);
    if let Some(rs) = active_or_latest(new, old) {
        return if spec_replicas(rs) == n { Vec::new() } else { vec![(name(rs), n)] };
    }
    if is_saturated(d, new) {
        return old.iter().filter(|rs| spec_replicas(rs) > 0).map(|rs| (name(rs), 0)).collect();
    }
    if !is_rolling(d) {
        return Vec::new();
    }
    let mut active: Vec<&ReplicaSet> = old.iter().copied().chain(new).filter(|rs| spec_replicas(rs) > 0).collect();
    let current: i32 = active.iter().map(|rs| spec_replicas(rs)).sum();
    let allowed = if n > 0 { n + max_surge(d) } else { 0 };
    let to_add = allowed - current;
    // ReplicaSetsBySizeNewer when adding, BySizeOlder when removing: larger first.
    active.sort_by(|a, b| {
        spec_replicas(b)
            .cmp(&spec_replicas(a))
            .then_with(|| if to_add > 0 { oldest_first(b, a) } else { oldest_first(a, b) })
    });
    let mut sizes: Vec<(String, i32)> = Vec::new();
    let mut added = 0;
    for rs in &active {
        let mut proportion = 0;
        if to_add != 0 && added != to_add {
            let allowed = to_add - added;
            let f = fraction(rs, d);
            proportion = if to_add > 0 { f.min(allowed) } else { f.max(allowed) };
        }
        added += proportion;
        sizes.push((name(rs), spec_replicas(rs) + proportion));
    }
    if let Some(first) = sizes.first_mut() {
        first.1 = (first.1 + to_add - added).max(0);
    }
    // Every active set is written, so its replica annotations follow the new count.
    sizes
}

/// `cleanupDeployment`: the old sets the history limit removes — oldest revisions first,
/// beyond `revisionHistoryLimit`, never one with replicas, an unobserved generation, or
/// already being deleted.
pub(crate) fn beyond_history(d: &Deployment, old: &[&ReplicaSet]) -> Vec<String> {
    let Some(limit) = d.spec.as_ref().and_then(|s| s.revision_history_limit) else { return Vec::new() };
    let mut alive: Vec<&ReplicaSet> =
        old.iter().copied().filter(|rs| rs.metadata.deletion_timestamp.is_none()).collect();
    let excess = alive.len().saturating_sub(usize::try_from(limit.max(0)).unwrap_or(0));
    alive.sort_by(|a, b| {
        annotation(a, REVISION).unwrap_or(0).cmp(&annotation(b, REVISION).unwrap_or(0)).then_with(|| oldest_first(a, b))
    });
    alive
        .into_iter()
        .take(excess)
        .filter(|rs| {
            let observed = rs.status.as_ref().and_then(|s| s.observed_generation).unwrap_or(0);
            status_replicas(rs) == 0 && spec_replicas(rs) == 0 && rs.metadata.generation.unwrap_or(0) <= observed
        })
        .filter_map(|rs| rs.metadata.name.clone())
        .collect()
}

/// `MaxRevision`.
pub(crate) fn max_revision(sets: &[&ReplicaSet]) -> i64 {
    sets.iter()
        .filter_map(|rs| rs.metadata.annotations.as_ref().and_then(|a| a.get(REVISION)).and_then(|v| v.parse().ok()))
        .max()
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    pub(crate) fn deployment(replicas: i32, strategy: serde_json::Value) -> Deployment {
        serde_json::from_value(json!({"metadata": {"name": "web", "uid": "d-1", "generation": 1},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}}, "strategy": strategy,
                     "revisionHistoryLimit": 2,
                     "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "v2"}]}}}}))
        .unwrap_or_default()
    }

    pub(crate) fn rs(name: &str, age: i64, spec: i32, available: i32, annotations: serde_json::Value) -> ReplicaSet {
        let created = jiff::Timestamp::from_second(1_700_000_000 + age).unwrap_or_default().to_string();
        serde_json::from_value(json!({"metadata": {"name": name, "creationTimestamp": created, "annotations": annotations,
                "generation": 1},
            "spec": {"replicas": spec, "selector": {"matchLabels": {"app": "web"}},
                     "template": {"metadata": {"labels": {"app": "web", TEMPLATE_HASH: name}}, "spec": {"containers": [{"name": "c", "image": name}]}}},
            "status": {"replicas": spec, "availableReplicas": available, "observedGeneration": 1}}))
        .unwrap_or_default()
    }

    fn rolling(surge: serde_json::Value, unavailable: serde_json::Value) -> serde_json::Value {
        json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": surge, "maxUnavailable": unavailable}})
    }

    #[test]
    fn hashes_are_stable_safe_and_move_with_the_collision_count() {
        let d = deployment(3, rolling(json!("25%"), json!("25%")));
        let template = d.spec.clone().unwrap_or_default().template;
        let h = template_hash(&template, None);
        assert_eq!(h, template_hash(&template, None));
        assert!(!h.is_empty() && h.bytes().all(|b| SAFE_ALPHABET.contains(&b)), "{h}");
        assert_ne!(h, template_hash(&template, Some(1)));
        let mut labelled = template.clone();
        labelled.metadata.as_mut().and_then(|m| m.labels.as_mut()).map(|l| l.insert(TEMPLATE_HASH.into(), h.clone()));
        assert!(equal_ignore_hash(&template, &labelled));
        // What `kubectl rollout undo` writes back (Go's empty structs) is the same template.
        let mut undone = template.clone();
        if let Some(c) = undone.spec.as_mut().and_then(|s| s.containers.first_mut()) {
            c.resources = Some(Default::default());
            c.env = Some(Vec::new());
        }
        assert!(equal_ignore_hash(&template, &undone));
        assert_eq!(template_hash(&template, None), template_hash(&undone, None));
        let mut other = template.clone();
        if let Some(c) = other.spec.as_mut().and_then(|s| s.containers.first_mut()) {
            c.image = Some("v3".into());
        }
        assert!(!equal_ignore_hash(&template, &other));
    }

    #[test]
    fn surge_rounds_up_and_unavailability_down() {
        assert_eq!(fenceposts(&deployment(10, rolling(json!("25%"), json!("25%"))), 10), (3, 2));
        assert_eq!(fenceposts(&deployment(1, rolling(json!("25%"), json!("25%"))), 1), (1, 0));
        assert_eq!(
            fenceposts(&deployment(3, rolling(json!(0), json!("10%"))), 3),
            (0, 1),
            "both 0: one may be unavailable"
        );
        assert_eq!(max_unavailable(&deployment(2, rolling(json!(0), json!(5)))), 2, "clamped to the replicas");
        assert_eq!(max_unavailable(&deployment(0, rolling(json!(0), json!(5)))), 0);
        assert_eq!(max_surge(&deployment(4, json!({"type": "Recreate"}))), 0);
    }

    #[test]
    fn a_rolling_update_surges_then_scales_old_sets_down_to_the_minimum_available() {
        let d = deployment(4, rolling(json!(1), json!(1)));
        let old = rs("v1", 0, 4, 4, json!({}));
        // New set at 0: up by the surge (4 + 1 − 4).
        assert_eq!(new_rs_replicas(&d, &[&old], 0), 1);
        let new = rs("v2", 10, 1, 0, json!({}));
        assert_eq!(new_rs_replicas(&d, &[&old, &new], 1), 1, "no room past maxSurge");
        // 5 pods, 4 available, minimum 3, new set's 1 unavailable: one old replica goes.
        assert_eq!(scale_down_old(&d, &[&old, &new], &[&old], Some(&new)), [("v1".to_owned(), 3)]);
        // Unhealthy old replicas go first, even below what availability alone allows.
        let sick = rs("v1", 0, 4, 2, json!({}));
        let ready_new = rs("v2", 10, 1, 1, json!({}));
        assert_eq!(scale_down_old(&d, &[&sick, &ready_new], &[&sick], Some(&ready_new)), [("v1".to_owned(), 2)]);
        assert!(scale_down_old(&d, &[&new], &[], Some(&new)).is_empty());
        let recreate = deployment(4, json!({"type": "Recreate"}));
        assert_eq!(new_rs_replicas(&recreate, &[&old], 0), 4);
    }

    #[test]
    fn the_new_set_is_the_oldest_with_the_deployments_template() {
        let d = deployment(2, rolling(json!(1), json!(0)));
        let mut a = rs("later", 20, 0, 0, json!({}));
        let mut b = rs("first", 5, 0, 0, json!({}));
        let other = rs("v1", 0, 2, 2, json!({}));
        for set in [&mut a, &mut b] {
            let t = set.spec.as_mut().and_then(|s| s.template.as_mut());
            if let Some(c) = t.and_then(|t| t.spec.as_mut()).and_then(|s| s.containers.first_mut()) {
                c.image = Some("v2".into());
            }
        }
        assert_eq!(find_new(&d, &[&a, &other, &b]).and_then(|r| r.metadata.name.clone()).as_deref(), Some("first"));
        assert!(find_new(&d, &[&other]).is_none());
    }

    #[test]
    fn scaling_mid_rollout_is_shared_in_proportion() {
        // Sized for 10 (+3 surge = 13): old 8, new 5; scaled to 20 (+5 = 25): 12 more.
        let d = deployment(20, rolling(json!("25%"), json!("25%")));
        let sized = json!({DESIRED_REPLICAS: "10", MAX_REPLICAS: "13"});
        let old = rs("v1", 0, 8, 8, sized.clone());
        let new = rs("v2", 10, 5, 0, sized);
        assert!(is_scaling_event(&d, &[&old, &new]));
        let sizes = proportional(&d, Some(&new), &[&old]);
        let size = |n: &str| sizes.iter().find(|(name, _)| name == n).map(|(_, s)| *s);
        assert_eq!(size("v1"), Some(15), "8 × 25 / 13 rounded");
        assert_eq!(size("v2"), Some(10), "5 × 25 / 13 rounded");
        // One active set takes the new count alone.
        let only = rs("v2", 10, 10, 10, json!({DESIRED_REPLICAS: "10"}));
        assert_eq!(proportional(&d, Some(&only), &[&rs("v1", 0, 0, 0, json!({}))]), [("v2".to_owned(), 20)]);
    }

    #[test]
    fn history_beyond_the_limit_goes_oldest_revision_first() {
        let d = deployment(1, rolling(json!(1), json!(0)));
        let sets: Vec<ReplicaSet> =
            (1..=4).map(|i| rs(&format!("r{i}"), i, 0, 0, json!({REVISION: i.to_string()}))).collect();
        let mut busy = rs("r0", 0, 1, 1, json!({REVISION: "0"}));
        busy.metadata.name = Some("busy".into());
        let mut old: Vec<&ReplicaSet> = sets.iter().collect();
        old.push(&busy);
        // 5 old sets, a limit of 2: the three oldest revisions go, but not one with replicas.
        assert_eq!(beyond_history(&d, &old), ["r1", "r2"]);
        assert_eq!(max_revision(&old), 4);
    }
}
