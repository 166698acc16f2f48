//! The embedded store's group commit holds one thread, however many writes arrive at once.
//! Alone in its test binary: it counts the process's threads, which other tests running
//! beside it would change.

// Test helpers panic on failure by design; the lint targets library code.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use podpass_store::{EmbeddedObjectStore, ObjectKey, Store};
use serde_json::json;

/// The process's threads, from `/proc/self/status`.
fn threads() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("Threads:")).unwrap();
    line["Threads:".len()..].trim().parse().unwrap()
}

/// 200 creates at once are all committed, and the process gains no thread per write: a
/// thread each (their creation and a fresh allocator heap apiece) cost more CPU in a burst
/// than the writes themselves.
#[test]
fn a_burst_of_writes_starts_no_thread_per_write() {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    runtime.block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let store = EmbeddedObjectStore::open(&dir.path().join("store.redb")).unwrap();
        let key = |i: usize| ObjectKey::namespaced("configmaps", "ns", &format!("c{i}"));
        // The committer's thread exists (and stays, idle, for the pool's keep-alive).
        store.create(&key(0), json!({"metadata": {"name": "c0"}})).await.unwrap();
        let before = threads();
        let writes: Vec<_> = (1..=200)
            .map(|i| {
                let store = store.clone();
                tokio::spawn(async move { store.create(&key(i), json!({"metadata": {"name": format!("c{i}")}})).await })
            })
            .collect();
        for w in writes {
            w.await.unwrap().unwrap();
        }
        // Blocking threads outlive their task by the pool's keep-alive (10 s): any started
        // for the burst are still counted here.
        let after = threads();
        assert!(after <= before + 2, "{before} threads before the burst, {after} after");
    });
}
