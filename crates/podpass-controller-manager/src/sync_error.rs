//! Why a controller's sync could not finish (it is tried again with the controller's
//! back-off): one error type for every controller, as their failures are the same.

use crate::credentials::CredentialError;

/// A sync could not finish.
#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    /// The controller's identity.
    #[error(transparent)]
    Credentials(#[from] CredentialError),
    /// An API call.
    #[error("{0}")]
    Api(#[from] kube::Error),
    /// Something of the controller's own failed (signing a token).
    #[error("{0}")]
    Internal(String),
    /// A cache the controller reads stopped (`pods`, `replicasets`).
    #[error("the {0} cache stopped")]
    CacheGone(&'static str),
    /// An object of another owner or template holds the name a Deployment's new
    /// ReplicaSet or a DaemonSet's new ControllerRevision hashes to (kind, name): the
    /// collision count was raised, the next sync hashes anew.
    #[error("{0} {1:?} exists and holds another template: hash collision, the collision count is raised")]
    Collision(&'static str, String),
}

impl SyncError {
    /// Whether the cache lagged the controller's own write (a 409): worth a quick retry on
    /// the fresh object rather than the full back-off.
    pub fn is_conflict(&self) -> bool {
        matches!(self, SyncError::Api(kube::Error::Api(s)) if s.code == 409) || matches!(self, SyncError::Collision(..))
    }
}
