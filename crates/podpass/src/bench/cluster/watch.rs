//! The bench's own watch of every pod, as upstream's density test times pod startup: when
//! the watch first sees a pod (created) and first sees it Running (its node's report).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::Result;
use serde_json::Value;

use crate::up::api::Api;

/// The largest watch event line read.
const MAX_LINE: usize = 4 << 20;

/// When the watch saw one pod created, Running, gone.
#[derive(Debug, Clone, Copy)]
pub(super) struct PodTimes {
    created: Instant,
    running: Option<Instant>,
    gone: bool,
}

impl PodTimes {
    /// Created → Running, once it ran.
    pub(super) fn startup(&self) -> Option<Duration> {
        self.running.map(|r| r.duration_since(self.created))
    }
}

type Times = Arc<Mutex<HashMap<String, PodTimes>>>;

/// Pods Running now, and pods not gone.
pub(super) fn counts(times: &Times) -> (usize, usize) {
    let times = times.lock().unwrap_or_else(PoisonError::into_inner);
    let live = times.values().filter(|t| !t.gone);
    let running = live.clone().filter(|t| t.running.is_some()).count();
    (running, live.count())
}

/// Pods not gone.
pub(super) fn live(times: &Times) -> usize {
    counts(times).1
}

/// The watch's task and how many events it has read.
pub(super) struct Watcher {
    events: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl Watcher {
    /// Events read so far.
    pub(super) fn events(&self) -> u64 {
        self.events.load(Ordering::Relaxed)
    }

    pub(super) fn stop(self) {
        self.task.abort();
    }
}

fn record(times: &Times, event: &Value) {
    let object = &event["object"];
    let key = format!(
        "{}/{}/{}",
        object["metadata"]["namespace"].as_str().unwrap_or_default(),
        object["metadata"]["name"].as_str().unwrap_or_default(),
        object["metadata"]["uid"].as_str().unwrap_or_default()
    );
    let now = Instant::now();
    let mut times = times.lock().unwrap_or_else(PoisonError::into_inner);
    let entry = times.entry(key).or_insert(PodTimes { created: now, running: None, gone: false });
    match event["type"].as_str() {
        Some("DELETED") => entry.gone = true,
        _ if object["status"]["phase"] == "Running" && entry.running.is_none() => entry.running = Some(now),
        _ => {}
    }
}

/// Watches every pod from now on, recording into `times`; reconnects where it left off
/// (or from a new list, when that is too old).
pub(super) async fn spawn(api: &Api, times: Times) -> Result<Watcher> {
    let listed = api.get_ok("/api/v1/pods?limit=1").await?;
    let mut version = listed["metadata"]["resourceVersion"].as_str().unwrap_or_default().to_owned();
    let events = Arc::new(AtomicU64::new(0));
    let (api, counted) = (api.clone(), Arc::clone(&events));
    let task = tokio::spawn(async move {
        loop {
            let path = format!(
                "/api/v1/pods?watch=true&allowWatchBookmarks=true&timeoutSeconds=3600&resourceVersion={version}"
            );
            let Ok(mut answer) = api.stream(&path).await else {
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            };
            let mut pending: Vec<u8> = Vec::new();
            'read: while let Ok(Some(chunk)) = answer.chunk().await {
                pending.extend_from_slice(&chunk);
                while let Some(end) = pending.iter().position(|b| *b == b'\n') {
                    let line: Vec<u8> = pending.drain(..=end).collect();
                    let Ok(event) = serde_json::from_slice::<Value>(&line) else { continue };
                    if event["type"] == "ERROR" {
                        // Too old (410): start again from the present.
                        if let Ok(listed) = api.get_ok("/api/v1/pods?limit=1").await {
                            version = listed["metadata"]["resourceVersion"].as_str().unwrap_or_default().to_owned();
                        }
                        break 'read;
                    }
                    if let Some(v) = event["object"]["metadata"]["resourceVersion"].as_str() {
                        v.clone_into(&mut version);
                    }
                    if event["type"] != "BOOKMARK" {
                        counted.fetch_add(1, Ordering::Relaxed);
                        record(&times, &event);
                    }
                }
                if pending.len() > MAX_LINE {
                    break;
                }
            }
        }
    });
    Ok(Watcher { events, task })
}
