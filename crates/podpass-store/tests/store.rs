//! The embedded store through the `Store` trait: CRUD with resourceVersion semantics,
//! compare-and-swap, selectors, watches (resume, filtered transitions, compaction),
//! durability across restarts and across a killed writer.

// Test helpers panic on failure by design; the lint targets library code.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use podpass_store::{
    EmbeddedObjectStore, EventType, FieldSelector, LabelSelector, ListOptions, ObjectKey, Store, StoreError,
    WatchStream,
};
use serde_json::{Value, json};

fn pod(ns: &str, name: &str, node: &str, app: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": name, "namespace": ns, "labels": {"app": app}, "resourceVersion": "999"},
           "spec": {"nodeName": node}})
}

fn key(ns: &str, name: &str) -> ObjectKey {
    ObjectKey::namespaced("pods", ns, name)
}

fn open(dir: &tempfile::TempDir) -> EmbeddedObjectStore {
    EmbeddedObjectStore::open(&dir.path().join("store.redb")).unwrap()
}

async fn next(w: &mut WatchStream) -> (EventType, String, u64) {
    let e = tokio::time::timeout(Duration::from_secs(10), w.next()).await.expect("event in time").unwrap().unwrap();
    (e.kind, e.object["metadata"]["name"].as_str().unwrap().to_owned(), e.revision)
}

#[tokio::test]
async fn crud_with_resource_versions_and_compare_and_swap() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    let created = store.create(&key("ns", "web"), pod("ns", "web", "n1", "web")).await.unwrap();
    // the client's resourceVersion is never stored: the store's revision is
    assert_eq!(created.object["metadata"]["resourceVersion"], created.revision.to_string());
    assert_ne!(created.revision, 999);
    let got = store.get(&key("ns", "web")).await.unwrap();
    assert_eq!(got, created);

    let err = store.create(&key("ns", "web"), pod("ns", "web", "n1", "web")).await.unwrap_err();
    assert!(matches!(err, StoreError::AlreadyExists { .. }), "{err}");

    let mut changed = got.object.clone();
    changed["spec"]["nodeName"] = json!("n2");
    let updated = store.update(&key("ns", "web"), changed.clone(), Some(created.revision)).await.unwrap();
    assert!(updated.revision > created.revision);
    // a second writer holding the old revision loses
    let err = store.update(&key("ns", "web"), changed.clone(), Some(created.revision)).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        r#"Operation cannot be fulfilled on pods "web": the object has been modified; please apply your changes to the latest version and try again"#
    );
    let err = store.delete(&key("ns", "web"), Some(created.revision)).await.unwrap_err();
    assert!(matches!(err, StoreError::Conflict { .. }));

    let deleted = store.delete(&key("ns", "web"), Some(updated.revision)).await.unwrap();
    assert_eq!(deleted.object["spec"]["nodeName"], "n2");
    assert_eq!(store.get(&key("ns", "web")).await.unwrap_err().to_string(), r#"pods "web" not found"#);
    assert!(matches!(store.update(&key("ns", "web"), changed, None).await, Err(StoreError::NotFound { .. })));
    assert!(matches!(store.delete(&key("ns", "web"), None).await, Err(StoreError::NotFound { .. })));
    let no_meta = store.create(&key("ns", "x"), json!({"kind": "Pod"})).await.unwrap_err();
    assert!(matches!(no_meta, StoreError::Invalid(_)));
}

#[tokio::test]
async fn list_by_namespace_labels_and_fields() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    for (ns, name, node, app) in
        [("a", "p1", "n1", "web"), ("a", "p2", "n2", "web"), ("ab", "p3", "n1", "db"), ("b", "p4", "n1", "web")]
    {
        store.create(&key(ns, name), pod(ns, name, node, app)).await.unwrap();
    }
    store.create(&ObjectKey::cluster("nodes", "n1"), json!({"metadata": {"name": "n1"}})).await.unwrap();
    let names =
        |items: &[Value]| items.iter().map(|i| i["metadata"]["name"].as_str().unwrap().to_owned()).collect::<Vec<_>>();

    let all = store.list("pods", None, &ListOptions::default()).await.unwrap();
    assert_eq!(names(&all.items), ["p1", "p2", "p3", "p4"]);
    assert_eq!(all.revision, 5, "list revision is the store revision");
    // namespace "a" does not include "ab"
    let a = store.list("pods", Some("a"), &ListOptions::default()).await.unwrap();
    assert_eq!(names(&a.items), ["p1", "p2"]);
    let on_n1 = ListOptions { fields: FieldSelector::parse("spec.nodeName=n1").unwrap(), ..Default::default() };
    assert_eq!(names(&store.list("pods", None, &on_n1).await.unwrap().items), ["p1", "p3", "p4"]);
    let web_on_n1 = ListOptions { labels: LabelSelector::parse("app=web").unwrap(), ..on_n1 };
    assert_eq!(names(&store.list("pods", None, &web_on_n1).await.unwrap().items), ["p1", "p4"]);
    assert_eq!(names(&store.list("nodes", None, &ListOptions::default()).await.unwrap().items), ["n1"]);
}

#[tokio::test]
async fn watch_resumes_from_a_revision_and_follows_live_changes() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    let first = store.create(&key("ns", "p1"), pod("ns", "p1", "n1", "web")).await.unwrap();
    store.create(&key("ns", "p2"), pod("ns", "p2", "n1", "web")).await.unwrap();
    store.create(&key("other", "p9"), pod("other", "p9", "n1", "web")).await.unwrap();

    let mut w = store.watch("pods", Some("ns"), ListOptions::default(), Some(first.revision)).await.unwrap();
    assert_eq!(next(&mut w).await.0, EventType::Added);
    let p3 = store.create(&key("ns", "p3"), pod("ns", "p3", "n1", "web")).await.unwrap();
    assert_eq!(next(&mut w).await, (EventType::Added, "p3".into(), p3.revision));
    let gone = store.delete(&key("ns", "p1"), None).await.unwrap();
    let (kind, name, rev) = next(&mut w).await;
    assert_eq!((kind, name.as_str()), (EventType::Deleted, "p1"));
    assert_eq!(rev, gone.revision, "a deletion carries its own revision");

    // from "now" (None): the current objects first, as ADDED
    let mut w = store.watch("pods", Some("ns"), ListOptions::default(), None).await.unwrap();
    let mut initial = vec![next(&mut w).await.1, next(&mut w).await.1];
    initial.sort();
    assert_eq!(initial, ["p2", "p3"]);
}

#[tokio::test]
async fn filtered_watch_reports_moves_in_and_out_of_the_selection() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    let on_n1 = ListOptions { fields: FieldSelector::parse("spec.nodeName=n1").unwrap(), ..Default::default() };
    let start = store.create(&key("ns", "p"), pod("ns", "p", "n2", "web")).await.unwrap();
    let mut w = store.watch("pods", None, on_n1, Some(start.revision)).await.unwrap();
    let mut obj = start.object.clone();
    obj["spec"]["nodeName"] = json!("n1");
    store.update(&key("ns", "p"), obj.clone(), None).await.unwrap();
    assert_eq!(next(&mut w).await.0, EventType::Added, "moved into the selection");
    obj["metadata"]["labels"]["x"] = json!("y");
    store.update(&key("ns", "p"), obj.clone(), None).await.unwrap();
    assert_eq!(next(&mut w).await.0, EventType::Modified);
    obj["spec"]["nodeName"] = json!("n3");
    store.update(&key("ns", "p"), obj, None).await.unwrap();
    assert_eq!(next(&mut w).await.0, EventType::Deleted, "moved out of the selection");
}

#[tokio::test]
async fn watch_from_compacted_history_is_gone() {
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedObjectStore::open_with_history(&dir.path().join("s.redb"), 3).unwrap();
    for i in 0..6 {
        store.create(&key("ns", &format!("p{i}")), pod("ns", &format!("p{i}"), "n1", "web")).await.unwrap();
    }
    let err = store.watch("pods", None, ListOptions::default(), Some(1)).await.unwrap_err();
    assert_eq!(err, StoreError::Gone { requested: 1, oldest: 3 });
    assert_eq!(err.to_string(), "too old resource version: 1 (3)");
    // the retained window still resumes
    let mut w = store.watch("pods", None, ListOptions::default(), Some(4)).await.unwrap();
    assert_eq!(next(&mut w).await.1, "p4");
    assert_eq!(next(&mut w).await.1, "p5");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_compare_and_swap_loses_no_update() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(open(&dir));
    let k = ObjectKey::namespaced("configmaps", "ns", "counter");
    store.create(&k, json!({"metadata": {"name": "counter"}, "data": {"n": 0}})).await.unwrap();
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let (store, k) = (Arc::clone(&store), k.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..10 {
                loop {
                    let cur = store.get(&k).await.unwrap();
                    let mut obj = cur.object.clone();
                    obj["data"]["n"] = json!(cur.object["data"]["n"].as_u64().unwrap() + 1);
                    match store.update(&k, obj, Some(cur.revision)).await {
                        Ok(_) => break,
                        Err(StoreError::Conflict { .. }) => continue,
                        Err(e) => panic!("{e}"),
                    }
                }
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(store.get(&k).await.unwrap().object["data"]["n"], 80);
}

#[tokio::test]
async fn restart_keeps_objects_and_revisions_move_forward() {
    let dir = tempfile::tempdir().unwrap();
    let before = {
        let store = open(&dir);
        store.create(&key("ns", "p1"), pod("ns", "p1", "n1", "web")).await.unwrap();
        store.create(&key("ns", "p2"), pod("ns", "p2", "n1", "web")).await.unwrap()
    };
    let store = open(&dir);
    assert_eq!(store.get(&key("ns", "p2")).await.unwrap(), before);
    let after = store.create(&key("ns", "p3"), pod("ns", "p3", "n1", "web")).await.unwrap();
    assert!(after.revision > before.revision);
    // history survives the restart too: a watch resumes across it
    let mut w = store.watch("pods", None, ListOptions::default(), Some(before.revision - 1)).await.unwrap();
    assert_eq!(next(&mut w).await.1, "p2");
    assert_eq!(next(&mut w).await.1, "p3");
}

/// Child half of the kill test: writes objects forever, printing each acknowledged name.
#[tokio::test]
async fn child_writer() {
    let Ok(path) = std::env::var("PODPASS_STORE_CHILD") else { return };
    let store = EmbeddedObjectStore::open(std::path::Path::new(&path)).unwrap();
    for i in 0.. {
        let name = format!("p{i}");
        store.create(&key("ns", &name), pod("ns", &name, "n1", "web")).await.unwrap();
        println!("ACK {name}");
    }
}

#[tokio::test]
async fn every_acknowledged_write_survives_a_killed_writer() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kill.redb");
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_writer", "--nocapture", "--test-threads=1"])
        .env("PODPASS_STORE_CHILD", &path)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut acked = Vec::new();
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if let Some(name) = line.strip_prefix("ACK ") {
                acked.push(name.to_owned());
            }
            if acked.len() >= 40 {
                break;
            }
        }
        acked
    });
    let acked = tokio::task::spawn_blocking(move || reader.join().unwrap()).await.unwrap();
    child.kill().unwrap(); // SIGKILL mid-write
    child.wait().unwrap();
    assert_eq!(acked.len(), 40, "child wrote");
    let store = EmbeddedObjectStore::open(&path).unwrap();
    for name in &acked {
        store.get(&key("ns", name)).await.unwrap_or_else(|e| panic!("acknowledged {name} lost: {e}"));
    }
}

/// Many writers at once (group commit): every write is answered with its own revision, the
/// revisions have no gap, and a watcher sees each exactly once, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writers_get_distinct_gapless_revisions_in_watch_order() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(open(&dir));
    let base = store.create(&key("ns", "first"), pod("ns", "first", "n1", "a")).await.unwrap().revision;
    let mut w = store.watch("pods", Some("ns"), ListOptions::default(), Some(base)).await.unwrap();
    let mut tasks = Vec::new();
    for i in 0..64 {
        let store = Arc::clone(&store);
        tasks.push(tokio::spawn(async move {
            let name = format!("p{i}");
            let created = store.create(&key("ns", &name), pod("ns", &name, "n1", "a")).await.unwrap();
            let updated = store.update(&key("ns", &name), created.object, Some(created.revision)).await.unwrap();
            assert!(updated.revision > created.revision);
            // A second create of the same name is refused, whatever batch it lands in.
            let again = store.create(&key("ns", &name), pod("ns", &name, "n1", "a")).await;
            assert!(matches!(again, Err(StoreError::AlreadyExists { .. })), "{again:?}");
            [created.revision, updated.revision]
        }));
    }
    let mut revisions = Vec::new();
    for t in tasks {
        revisions.extend(t.await.unwrap());
    }
    revisions.sort_unstable();
    assert_eq!(revisions, ((base + 1)..=(base + 128)).collect::<Vec<_>>());
    for expected in (base + 1)..=(base + 128) {
        assert_eq!(next(&mut w).await.2, expected);
    }
}
