//! How a component runs (component-base's `app.Run` with client-go's `leaderelection.RunOrDie`):
//! a client from its kubeconfig, the election won first when there is one, then its work
//! until shutdown or until the lease is lost — the Lease released on a clean stop, an error
//! on a loss (the component exits, for its supervisor to start it again).

use std::future::Future;
use std::path::Path;

use kube::config::{KubeConfigOptions, Kubeconfig};

use crate::leader::{Election, ElectionError, Elector};

/// A component could not run.
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
    /// Leadership was lost.
    #[error(transparent)]
    Lost(#[from] ElectionError),
}

/// The client of `kubeconfig`, and the configuration it was made from (for clients of
/// other identities on the same server).
pub async fn client(kubeconfig: &Path) -> Result<(kube::Client, kube::Config), RunError> {
    let err = |reason: String| RunError::Kubeconfig { path: kubeconfig.display().to_string(), reason };
    let file = Kubeconfig::read_from(kubeconfig).map_err(|e| err(e.to_string()))?;
    let config = kube::Config::from_custom_kubeconfig(file, &KubeConfigOptions::default())
        .await
        .map_err(|e| err(e.to_string()))?;
    let client = kube::Client::try_from(config.clone()).map_err(|e| err(e.to_string()))?;
    Ok((client, config))
}

/// Runs `work` once `election` (if any) is won as `component`, until `shutdown` resolves,
/// `work` ends, or the lease is lost.
pub async fn lead<W: Future>(
    client: kube::Client,
    election: Option<Election>,
    component: &str,
    work: impl FnOnce() -> W,
    shutdown: impl Future<Output = ()>,
) -> Result<(), RunError> {
    tokio::pin!(shutdown);
    let mut elector = election.map(|e| Elector::new(client, e, component));
    if let Some(elector) = elector.as_mut() {
        tokio::select! {
            () = elector.acquire() => {}
            () = &mut shutdown => return Ok(()),
        }
    }
    let lost = async {
        match elector.as_mut() {
            Some(elector) => elector.renew_until_lost().await,
            None => std::future::pending().await,
        }
    };
    let outcome = tokio::select! {
        _ = work() => Ok(()),
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
