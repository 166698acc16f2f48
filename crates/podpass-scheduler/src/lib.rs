//! The podpass scheduler (`podpass scheduler`): kube-scheduler's `default-scheduler` as a
//! client of any Kubernetes API server, as `system:kube-scheduler`. Every pod without a
//! node whose `schedulerName` is `default-scheduler` is bound through `pods/binding` to a
//! node it fits ([`fit`]: NodeResourcesFit, NodePorts aside, TaintToleration, NodeAffinity,
//! NodeUnschedulable, NodeName) and scored by upstream's default plugins and weights
//! ([`score`]: TaintToleration, NodeAffinity, PodTopologySpread's system defaults,
//! NodeResourcesFit LeastAllocated, BalancedAllocation, ImageLocality); a pod no node
//! takes gets `PodScheduled=False` and upstream's FitError message. One scheduler at a
//! time leads, through the Lease `kube-system/kube-scheduler`.
//!
//! - [`Config`] → [`Config::prepare`] (every problem at once) → [`run`].

mod cluster;
mod config;
mod fit;
mod schedule;
mod score;

pub use cluster::SCHEDULER_NAME;
pub use config::{Config, LEASE_NAME, Prepared};

pub use podpass_component::RunError;

/// Runs the prepared scheduler until `shutdown` resolves or it stops leading.
pub async fn run(prepared: Prepared, shutdown: impl std::future::Future<Output = ()>) -> Result<(), RunError> {
    let (client, _) = podpass_component::client(&prepared.kubeconfig).await?;
    let work = || schedule::run(client.clone());
    podpass_component::lead(client.clone(), prepared.election, SCHEDULER_NAME, work, shutdown).await
}
