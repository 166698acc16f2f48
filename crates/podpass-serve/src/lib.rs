//! What every podpass server and writer shares, written once:
//!
//! - [`accept_loop`]: the accept loop with kube-apiserver's connection bounds
//!   ([`ServeLimits`]: TLS handshake and header timeouts, a connection cap and a share per
//!   client where the oldest idle connection makes room for a new one, back-off on accept
//!   errors), over TLS or — for loopback-only servers — plain TCP; each request
//!   carries the [`Peer`] it came from (address, verified client certificate chain).
//! - [`tls_acceptor`]: a rustls server configuration from PEM files, optionally asking
//!   for client certificates signed by a CA (mTLS, never required at the TLS layer: the
//!   application decides what an unauthenticated peer may do).
//! - [`audit`]: the one audit writer (JSON lines to a size-rotated file or standard out)
//!   every server uses ([`AuditFlags`], kube-apiserver's flag names).
//! - [`config`]: what every daemon's configuration shares — problems named by their flag
//!   and reported at once ([`ConfigErrors`], exit [`EXIT_USAGE`]), flags parsed with the
//!   daemon's own declarations ([`parse_flags`]).
//! - [`FairShare`]: work in flight bounded per identity and in total, refused at once
//!   past either (kube-apiserver's max-requests-inflight and fairness by user).
//! - [`spawn_named`]: background tasks in a span naming them.
//! - [`durable`]: atomic, durable file replacement and exclusive creation, and the
//!   clean-up of temporary files a killed writer left behind.

mod accept;
pub mod audit;
pub mod config;
mod connections;
pub mod durable;
mod error_chain;
mod inflight;
mod task;
mod tls;

pub use accept::{Peer, ServeLimits, accept_loop};
pub use audit::{AuditFlags, AuditTarget, AuditWriter, RotatingFile};
pub use config::{ConfigErrors, ConfigProblem, EXIT_USAGE, Problems, parse_flags};
pub use error_chain::error_chain;
pub use inflight::{FairShare, InFlightPermit, InFlightRefusal};
pub use task::spawn_named;
pub use tls::{TlsError, tls_acceptor, tls_acceptor_resolving};
