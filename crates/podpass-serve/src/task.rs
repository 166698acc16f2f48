//! Background tasks that say who they are: every long-lived task a daemon spawns
//! (controllers, heartbeats, the relist, log rotation, watches, accept loops) runs in a span
//! `task` naming it, so each line it logs says which task wrote it — not the request or
//! start-up step that happened to spawn it.

use std::future::Future;

use tokio::task::JoinHandle;
use tracing::Instrument;

/// Spawns `future` on the current runtime in a root span `task{task=<name>}`.
pub fn spawn_named<F>(name: &'static str, future: F) -> JoinHandle<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    let span = tracing::info_span!(parent: None, "task", task = name);
    tokio::spawn(future.instrument(span))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::sync::{Arc, Mutex};

    use super::*;

    /// Records, for each event, the names and `task` fields of the spans it was in.
    #[derive(Default, Clone)]
    struct Spans(Arc<Mutex<Vec<String>>>);

    struct Named(String);

    impl tracing::field::Visit for Named {
        fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
            if field.name() == "task" {
                self.0 = value.to_owned();
            }
        }
        fn record_debug(&mut self, _: &tracing::field::Field, _: &dyn std::fmt::Debug) {}
    }

    impl tracing::Subscriber for Spans {
        fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
            true
        }
        fn new_span(&self, attrs: &tracing::span::Attributes<'_>) -> tracing::span::Id {
            let mut named = Named(String::new());
            attrs.record(&mut named);
            let mut all = self.0.lock().unwrap();
            let root = if attrs.is_root() { "root" } else { "child" };
            all.push(format!("{}:{}:{root}", attrs.metadata().name(), named.0));
            tracing::span::Id::from_u64(all.len() as u64)
        }
        fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
        fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
        fn event(&self, _: &tracing::Event<'_>) {}
        fn enter(&self, _: &tracing::span::Id) {}
        fn exit(&self, _: &tracing::span::Id) {}
    }

    #[test]
    fn a_spawned_task_runs_in_a_span_naming_it() {
        let spans = Spans::default();
        let dispatch = tracing::Dispatch::new(spans.clone());
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        tracing::dispatcher::with_default(&dispatch, || {
            rt.block_on(async {
                let _request = tracing::info_span!("request").entered();
                spawn_named("heartbeat", async {}).await.unwrap();
            });
        });
        let seen = spans.0.lock().unwrap().clone();
        // Its own root span, not a child of the request that spawned it.
        assert!(seen.contains(&"task:heartbeat:root".to_owned()), "{seen:?}");
    }
}
