//! Why a pod's sync could not make a container run, typed: each variant is one of the
//! kubelet's reason codes, which the container's waiting state and the pod's events are
//! written from (kubelet `kubecontainer` errors: `ErrCreateContainerConfig`,
//! `ErrCreateContainer`, `ErrRunContainer`, `ErrCrashLoopBackOff`, the image manager's
//! `ErrImagePull`/`ImagePullBackOff`/…, and `FailedCreatePodSandBox`).

use crate::images::EnsureError;
use crate::runtime::RuntimeError;

use super::status::RunPhase;

/// Why a container (or the pod's sandbox) could not be made to run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SyncError {
    /// The container's configuration could not be made (a missing config map or secret,
    /// an environment past its bound, a resource it cannot have): `CreateContainerConfigError`.
    #[error("{0}")]
    CreateContainerConfig(String),
    /// The runtime did not create it: `CreateContainerError`.
    #[error("{0}")]
    CreateContainer(String),
    /// The runtime did not start it: `RunContainerError`.
    #[error("{0}")]
    RunContainer(String),
    /// Its restart waits out a back-off: `CrashLoopBackOff`.
    #[error("{0}")]
    CrashLoopBackOff(String),
    /// EnsureImageExists did not allow its image for this pod: the image manager's reason.
    #[error("{message}")]
    Image {
        /// Which refusal (`ErrImagePull`, `ImagePullBackOff`, `ErrImageNeverPull`, …).
        error: EnsureError,
        /// The kubelet's message.
        message: String,
    },
    /// The pod's sandbox (or its log directory) could not be made:
    /// `FailedCreatePodSandBox`.
    #[error("{0}")]
    CreatePodSandbox(String),
    /// A runtime call the sync needed failed.
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
}

impl SyncError {
    /// The reason code, as the kubelet writes it into a waiting container's state.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::CreateContainerConfig(_) => "CreateContainerConfigError",
            Self::CreateContainer(_) => "CreateContainerError",
            Self::RunContainer(_) => "RunContainerError",
            Self::CrashLoopBackOff(_) => "CrashLoopBackOff",
            Self::Image { error, .. } => error.reason(),
            Self::CreatePodSandbox(_) => "FailedCreatePodSandBox",
            Self::Runtime(_) => "FailedSync",
        }
    }

    /// The reason of the pod's event when the whole sync failed with it.
    pub fn event_reason(&self) -> &'static str {
        match self {
            Self::CreatePodSandbox(_) => "FailedCreatePodSandBox",
            _ => "FailedSync",
        }
    }

    /// The container's waiting state for this error.
    pub fn waiting(&self) -> RunPhase {
        RunPhase::Waiting { reason: self.reason().to_owned(), message: Some(self.to_string()) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_error_is_written_with_the_kubelets_reason() {
        let cases = [
            (SyncError::CreateContainerConfig("secret \"x\" not found".into()), "CreateContainerConfigError"),
            (SyncError::CreateContainer("no space".into()), "CreateContainerError"),
            (SyncError::RunContainer("exec: not found".into()), "RunContainerError"),
            (SyncError::CrashLoopBackOff("back-off 10s".into()), "CrashLoopBackOff"),
            (SyncError::Image { error: EnsureError::ImagePullBackOff, message: "Back-off".into() }, "ImagePullBackOff"),
            (SyncError::Image { error: EnsureError::ErrImageNeverPull, message: "never".into() }, "ErrImageNeverPull"),
            (SyncError::CreatePodSandbox("netns".into()), "FailedCreatePodSandBox"),
        ];
        for (error, reason) in cases {
            let RunPhase::Waiting { reason: written, message } = error.waiting() else { panic!("{error:?}") };
            assert_eq!(written, reason);
            assert_eq!(message.as_deref(), Some(error.to_string().as_str()));
        }
        let runtime = SyncError::from(RuntimeError::Connect { endpoint: "unix:///x".into(), reason: "gone".into() });
        assert_eq!((runtime.reason(), runtime.event_reason()), ("FailedSync", "FailedSync"));
        assert_eq!(SyncError::CreatePodSandbox("x".into()).event_reason(), "FailedCreatePodSandBox");
    }
}
