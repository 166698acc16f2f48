//! The podpass scheduler (`podpass scheduler`): kube-scheduler's `default-scheduler` as a
//! client of any Kubernetes API server, as `system:kube-scheduler`. Every pod without a
//! node whose `schedulerName` is `default-scheduler` is bound through `pods/binding` to a
//! node it fits ([`fit`]: NodeResourcesFit, NodePorts aside, TaintToleration, NodeAffinity,
//! NodeUnschedulable, NodeName), preferring the node with the fewest pods; a pod no node
//! takes gets `PodScheduled=False` and upstream's FitError message. One scheduler at a
//! time leads, through the Lease `kube-system/kube-scheduler`.
//!
//! - [`Config`] → [`Config::prepare`] (every problem at once) → [`run`].

mod cluster;
mod config;
mod fit;
mod schedule;

pub use cluster::SCHEDULER_NAME;
pub use config::{Config, LEASE_NAME, Prepared};

use kube::config::{KubeConfigOptions, Kubeconfig};
use podpass_component::leader;

/// The scheduler could not run.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The kubeconfig could not be used.
    #[error("--kubeconfig {path}: {reason}")]
    Kubeconfig {
        /// Its path.
        path: String,
        /// Why.
        reason: String,
    },
    /// Leadership was lost (the scheduler exits, as kube-scheduler does).
    #[error(transparent)]
    Lost(#[from] leader::ElectionError),
}

/// Runs the prepared scheduler until `shutdown` resolves or it stops leading.
pub async fn run(prepared: Prepared, shutdown: impl std::future::Future<Output = ()>) -> Result<(), RunError> {
    let err = |reason: String| RunError::Kubeconfig { path: prepared.kubeconfig.display().to_string(), reason };
    let kubeconfig = Kubeconfig::read_from(&prepared.kubeconfig).map_err(|e| err(e.to_string()))?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .map_err(|e| err(e.to_string()))?;
    let client = kube::Client::try_from(config).map_err(|e| err(e.to_string()))?;
    tokio::pin!(shutdown);
    let mut elector = prepared.election.map(|e| leader::Elector::new(client.clone(), e, "default-scheduler"));
    if let Some(elector) = elector.as_mut() {
        tokio::select! {
            () = elector.acquire() => {}
            () = &mut shutdown => return Ok(()),
        }
    }
    tracing::info!("scheduling");
    let lost = async {
        match elector.as_mut() {
            Some(elector) => elector.renew_until_lost().await,
            None => std::future::pending().await,
        }
    };
    let outcome = tokio::select! {
        () = schedule::run(client) => Ok(()),
        lost = lost => Err(lost),
        () = &mut shutdown => Ok(()),
    };
    match outcome {
        Ok(()) => {
            if let Some(elector) = elector.as_mut() {
                elector.release().await;
            }
            Ok(())
        }
        Err(lost) => Err(lost.into()),
    }
}
