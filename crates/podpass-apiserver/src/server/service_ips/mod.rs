//! Service cluster IPs, as kube-apiserver allocates them since 1.33 (KEP-1880,
//! pkg/registry/core/service/ipallocator): each allocated address is an `IPAddress` object
//! named by it and naming its Service, so two allocations of one address — on this replica
//! or another sharing the store — collide in the store, never in memory. A static request
//! takes the address asked for if it is in `--service-cluster-ip-range` and free; a dynamic
//! one tries the upper band from a random address, then the static band (KEP-3070).
//!
//! The repair loop (`RepairIPAddress`) puts the objects right while this replica leads:
//! an address whose Service is gone or holds another is released once it is older than
//! [`ORPHAN_GRACE`] (a create in flight is never taken for a leak), and a Service's address
//! with no object gets one (the `kubernetes` Service's, written by the server itself).

mod range;

pub use range::{DEFAULT_RANGE, ServiceIpRange};

use std::collections::{HashMap, HashSet};
use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use super::AppState;
use super::rest::objects::prepare_new;
use super::rest::resources::find;
use crate::field::Field;
use crate::store::{ListOptions, ObjectKey, StoreError};

/// The objects' `managed-by` label (`ipallocator.ControllerName`).
pub const MANAGED_BY: &str = "ipallocator.k8s.io";
/// How often the repair loop runs.
pub const REPAIR_INTERVAL: Duration = Duration::from_secs(30);
/// How old an address with no Service holding it must be before it is released.
pub const ORPHAN_GRACE: Duration = Duration::from_secs(60);
const RESOURCE: &str = "ipaddresses";

/// An allocation that failed, in upstream's words (the Service strategy names the field).
#[derive(Debug, thiserror::Error)]
pub enum AllocationError {
    /// `ErrNotInRange`.
    #[error("the provided IP ({ip}) is not in the valid range. The range of valid IPs is {range}")]
    NotInRange {
        /// The address asked for.
        ip: Ipv4Addr,
        /// The range.
        range: ServiceIpRange,
    },
    /// `ErrAllocated`.
    #[error("provided IP is already allocated")]
    Allocated,
    /// `ErrFull`.
    #[error("range is full")]
    Full,
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The object could not be made.
    #[error("{0}")]
    Object(String),
}

/// The Service an address belongs to.
#[derive(Debug, Clone, Copy)]
pub struct Parent<'a> {
    /// Its namespace.
    pub namespace: &'a str,
    /// Its name.
    pub name: &'a str,
}

fn key(ip: Ipv4Addr) -> ObjectKey {
    ObjectKey::cluster(RESOURCE, &ip.to_string())
}

/// The `IPAddress` object of `ip` for `parent`.
fn object(ip: Ipv4Addr, parent: Parent<'_>) -> Value {
    json!({
        "apiVersion": "networking.k8s.io/v1",
        "kind": "IPAddress",
        "metadata": {"name": ip.to_string(), "labels": {
            "ipaddress.kubernetes.io/ip-family": "IPv4",
            "ipaddress.kubernetes.io/managed-by": MANAGED_BY,
        }},
        "spec": {"parentRef": {"group": "", "resource": "services", "namespace": parent.namespace, "name": parent.name}},
    })
}

/// Creates `ip`'s object: `Allocated` when it exists.
async fn take(state: &AppState, ip: Ipv4Addr, parent: Parent<'_>) -> Result<ObjectKey, AllocationError> {
    let res = find("networking.k8s.io", RESOURCE).ok_or_else(|| AllocationError::Object("not served".into()))?;
    let mut made = object(ip, parent);
    prepare_new(res, None, &mut made, podpass_token::now_unix()).map_err(|e| AllocationError::Object(e.message))?;
    let k = key(ip);
    match state.store.create(&k, made).await {
        Ok(_) => Ok(k),
        Err(StoreError::AlreadyExists { .. }) => Err(AllocationError::Allocated),
        Err(e) => Err(e.into()),
    }
}

/// An address of the range, chosen (`requested: None`) or asked for, for `parent`: the
/// address and the object that holds it (`None` in a dry run, which takes nothing and
/// answers the network address for a dynamic allocation, as upstream's).
pub async fn allocate(
    state: &AppState,
    parent: Parent<'_>,
    requested: Option<Ipv4Addr>,
    dry_run: bool,
) -> Result<(Ipv4Addr, Option<ObjectKey>), AllocationError> {
    let range = state.service_ips;
    if let Some(ip) = requested {
        if !range.contains(ip) {
            return Err(AllocationError::NotInRange { ip, range });
        }
        if dry_run {
            return Ok((ip, None));
        }
        return Ok((ip, Some(take(state, ip, parent).await?)));
    }
    if dry_run {
        return Ok((range.network(), None));
    }
    let listed = state.store.list(RESOURCE, None, &ListOptions::default()).await?;
    let taken: HashSet<&str> = listed.items.iter().filter_map(|o| o.field("/metadata/name")?.as_str()).collect();
    let mut random = [0u8; 8];
    aws_lc_rs::rand::fill(&mut random).map_err(|_| AllocationError::Object("no randomness".into()))?;
    let upper = u32::from_le_bytes([random[0], random[1], random[2], random[3]]);
    let lower = u32::from_le_bytes([random[4], random[5], random[6], random[7]]);
    for ip in range.candidates(upper, lower).filter(|ip| !taken.contains(ip.to_string().as_str())) {
        match take(state, ip, parent).await {
            Ok(k) => return Ok((ip, Some(k))),
            // Taken since the list (another replica, another request): the next one.
            Err(AllocationError::Allocated) => continue,
            Err(e) => return Err(e),
        }
    }
    Err(AllocationError::Full)
}

/// Releases `ip` if its object still names `parent`; a failure is left to the repair loop.
pub async fn release(state: &AppState, parent: Parent<'_>, ip: Ipv4Addr) {
    let k = key(ip);
    let Ok(held) = state.store.get(&k).await else { return };
    let names = |field: &str, want: &str| {
        held.object.field(&format!("/spec/parentRef/{field}")).and_then(Value::as_str) == Some(want)
    };
    if !(names("resource", "services") && names("namespace", parent.namespace) && names("name", parent.name)) {
        return;
    }
    if let Err(e) = state.store.delete(&k, Some(held.revision)).await {
        tracing::info!(ip = %ip, error = %e, "service IP not released now; the repair loop will");
    }
}

/// The IPv4 cluster IPs a Service object holds.
pub fn held_by(service: &Value) -> Vec<Ipv4Addr> {
    let listed = service.field("/spec/clusterIPs").and_then(Value::as_array).into_iter().flatten();
    let mut ips: Vec<Ipv4Addr> = listed.filter_map(|ip| ip.as_str()?.parse().ok()).collect();
    if ips.is_empty()
        && let Some(ip) = service.field("/spec/clusterIP").and_then(Value::as_str).and_then(|s| s.parse().ok())
    {
        ips.push(ip);
    }
    ips
}

/// What one repair pass found to do.
#[derive(Debug, Default, PartialEq, Eq)]
struct Repairs {
    /// Addresses to release: (address, the object's revision).
    release: Vec<(Ipv4Addr, u64)>,
    /// Addresses a Service holds with no object: (address, namespace, name).
    record: Vec<(Ipv4Addr, String, String)>,
}

/// Compares the Services with the address objects (`RepairIPAddress.syncService` and
/// `syncIPAddress`), at `now`.
fn plan(range: ServiceIpRange, services: &[Value], addresses: &[(Value, u64)], now: i64) -> Repairs {
    let mut holders: HashMap<Ipv4Addr, (String, String)> = HashMap::new();
    for service in services {
        let text = |p: &str| service.field(p).and_then(Value::as_str).unwrap_or_default().to_owned();
        for ip in held_by(service).into_iter().filter(|ip| range.contains(*ip)) {
            holders.insert(ip, (text("/metadata/namespace"), text("/metadata/name")));
        }
    }
    let mut repairs = Repairs::default();
    let mut recorded = HashSet::new();
    for (address, revision) in addresses {
        let Some(ip) = address.field("/metadata/name").and_then(Value::as_str).and_then(|n| n.parse().ok()) else {
            continue;
        };
        let labels = address.field("/metadata/labels");
        let managed = labels.and_then(|l| l.get("ipaddress.kubernetes.io/managed-by")).and_then(Value::as_str);
        if managed != Some(MANAGED_BY) {
            continue;
        }
        let parent =
            |f: &str| address.field(&format!("/spec/parentRef/{f}")).and_then(Value::as_str).unwrap_or_default();
        let held = holders.get(&ip).is_some_and(|(ns, name)| parent("namespace") == ns && parent("name") == name);
        if held {
            recorded.insert(ip);
            continue;
        }
        let created = address.field("/metadata/creationTimestamp").and_then(Value::as_str);
        let age = created.and_then(crate::time::parse_rfc3339).map(|at| now - at).unwrap_or(i64::MAX);
        if age >= ORPHAN_GRACE.as_secs() as i64 {
            repairs.release.push((ip, *revision));
        } else {
            // Young: a create in flight; its Service is looked at in the next pass.
            recorded.insert(ip);
        }
    }
    for (ip, (ns, name)) in holders {
        if !recorded.contains(&ip) {
            repairs.record.push((ip, ns, name));
        }
    }
    repairs.record.sort();
    repairs
}

/// One repair pass.
async fn repair(state: &AppState) -> Result<(), StoreError> {
    let services = state.store.list("services", None, &ListOptions::default()).await?.items;
    let listed = state.store.list(RESOURCE, None, &ListOptions::default()).await?.items;
    let addresses: Vec<(Value, u64)> = listed
        .into_iter()
        .map(|o| {
            let revision = crate::store::resource_version_of(&o).unwrap_or_default();
            (o, revision)
        })
        .collect();
    let repairs = plan(state.service_ips, &services, &addresses, podpass_token::now_unix());
    for (ip, revision) in repairs.release {
        match state.store.delete(&key(ip), Some(revision)).await {
            Ok(_) => tracing::info!(ip = %ip, "service IP repair: released an address no Service holds"),
            Err(StoreError::NotFound { .. } | StoreError::Conflict { .. }) => {}
            Err(e) => return Err(e),
        }
    }
    for (ip, namespace, name) in repairs.record {
        let parent = Parent { namespace: &namespace, name: &name };
        match take(state, ip, parent).await {
            Ok(_) => tracing::info!(ip = %ip, service = %format!("{namespace}/{name}"), "service IP repair: recorded"),
            // Held by an object naming another Service: the next pass releases it once old.
            Err(AllocationError::Allocated) => {}
            Err(e) => tracing::warn!(ip = %ip, error = %e, "service IP repair: could not record"),
        }
    }
    Ok(())
}

/// Repairs every [`REPAIR_INTERVAL`], for as long as it runs (while this replica leads).
pub async fn repair_forever(state: Arc<AppState>) {
    loop {
        if let Err(e) = repair(&state).await {
            tracing::warn!(error = %e, "service IP repair failed; trying again");
        }
        tokio::time::sleep(REPAIR_INTERVAL).await;
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn service(ns: &str, name: &str, ip: &str) -> Value {
        json!({"metadata": {"namespace": ns, "name": name}, "spec": {"clusterIP": ip, "clusterIPs": [ip]}})
    }

    fn address(ip: &str, ns: &str, name: &str, created: &str) -> Value {
        let mut o = object(ip.parse().unwrap(), Parent { namespace: ns, name });
        o["metadata"]["creationTimestamp"] = json!(created);
        o
    }

    #[test]
    fn repair_releases_old_orphans_keeps_young_ones_and_records_what_services_hold() {
        let range = ServiceIpRange::parse("10.96.0.0/12").unwrap();
        let now = crate::time::parse_rfc3339("2026-12-02T12:00:00Z").unwrap();
        let services = [
            service("default", "kubernetes", "10.96.0.1"),
            service("team", "web", "10.100.0.7"),
            service("team", "moved", "10.100.0.9"),
            service("team", "outside", "192.168.0.1"),
            json!({"metadata": {"namespace": "team", "name": "headless"}, "spec": {"clusterIP": "None", "clusterIPs": ["None"]}}),
        ];
        let addresses = [
            (address("10.100.0.7", "team", "web", "2026-12-02T11:00:00Z"), 5),
            // Its Service is gone: released, being old.
            (address("10.100.0.8", "team", "gone", "2026-12-02T11:58:00Z"), 6),
            // Names a Service that holds another address.
            (address("10.100.0.9", "team", "other", "2026-12-02T11:00:00Z"), 7),
            // Young: a create in flight.
            (address("10.100.0.10", "team", "new", "2026-12-02T11:59:30Z"), 8),
        ];
        let repairs = plan(range, &services, &addresses, now);
        assert_eq!(repairs.release, [("10.100.0.8".parse().unwrap(), 6), ("10.100.0.9".parse().unwrap(), 7)]);
        assert_eq!(
            repairs.record,
            [
                ("10.96.0.1".parse().unwrap(), "default".to_owned(), "kubernetes".to_owned()),
                ("10.100.0.9".parse().unwrap(), "team".to_owned(), "moved".to_owned()),
            ]
        );
    }

    #[test]
    fn the_errors_read_as_upstreams() {
        let range = ServiceIpRange::parse("10.96.0.0/12").unwrap();
        let e = AllocationError::NotInRange { ip: Ipv4Addr::new(1, 1, 1, 1), range };
        assert_eq!(
            e.to_string(),
            "the provided IP (1.1.1.1) is not in the valid range. The range of valid IPs is 10.96.0.0/12"
        );
        assert_eq!(AllocationError::Allocated.to_string(), "provided IP is already allocated");
        assert_eq!(held_by(&json!({"spec": {"clusterIP": "10.96.0.3"}})), [Ipv4Addr::new(10, 96, 0, 3)]);
        assert!(held_by(&json!({"spec": {"clusterIP": "None", "clusterIPs": ["None"]}})).is_empty());
    }
}
