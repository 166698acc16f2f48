//! The store's background work (watch fan-out, the watch cache's loops) runs in a span
//! `task` naming it, as every podpass daemon's tasks do (podpass-serve's `spawn_named`):
//! each line it logs says which task wrote it.

use std::future::Future;

use tracing::Instrument;

/// Spawns `future` on the current runtime in a root span `task{task=<name>}`.
pub(crate) fn spawn_named<F>(name: &'static str, future: F) -> tokio::task::JoinHandle<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    let span = tracing::info_span!(parent: None, "task", task = name);
    tokio::spawn(future.instrument(span))
}
