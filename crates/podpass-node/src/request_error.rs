//! A request to the API server that failed, as every part of the node reports it: a leaf
//! module, so the token manager, the credential providers and the API client all name one
//! error without depending on each other.

use thiserror::Error;

/// A request to the API server failed.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum RequestError {
    /// The server answered with a failure `Status`; its message is shown as the API gave it.
    #[error("{message}")]
    Status {
        /// HTTP status code.
        code: u16,
        /// `reason` (`NotFound`, `Forbidden`, …).
        reason: String,
        /// `message`.
        message: String,
    },
    /// No usable answer: connection, TLS, timeout, or an answer that does not decode.
    #[error("{0}")]
    Transport(String),
}

impl From<&kube::Error> for RequestError {
    fn from(e: &kube::Error) -> Self {
        match e {
            kube::Error::Api(status) => {
                Self::Status { code: status.code, reason: status.reason.clone(), message: status.message.clone() }
            }
            other => Self::Transport(other.to_string()),
        }
    }
}

impl From<kube::Error> for RequestError {
    fn from(e: kube::Error) -> Self {
        Self::from(&e)
    }
}

impl From<&str> for RequestError {
    /// A failure described in words (fakes in tests; answers missing a field).
    fn from(s: &str) -> Self {
        Self::Transport(s.to_owned())
    }
}
