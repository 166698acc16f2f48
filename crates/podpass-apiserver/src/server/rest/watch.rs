//! `?watch=true`: a store watch streamed as upstream's JSON watch events, one object per
//! line (`{"type":"ADDED","object":{…}}`), ending with an `ERROR` event carrying a Status
//! when the watcher must relist.

use std::pin::Pin;
use std::task::{Context, Poll};

use axum::body::{Body, Bytes};
use axum::response::Response;
use serde_json::json;

use crate::store::{EventType, StoreError, WatchStream};

/// Open watches per user, bounded: a client that opens watches and walks away must not
/// accumulate server tasks without limit.
#[derive(Debug)]
pub struct WatchLimiter {
    max_per_user: usize,
    open: std::sync::Arc<std::sync::Mutex<std::collections::HashMap<String, usize>>>,
}

/// One open watch; frees its slot (and its count in `apiserver_longrunning_requests`) when
/// dropped: the response body ends or the client goes.
#[derive(Debug)]
pub struct WatchSlot {
    user: String,
    open: std::sync::Arc<std::sync::Mutex<std::collections::HashMap<String, usize>>>,
    gauge: Option<prometheus_client::metrics::gauge::Gauge>,
}

impl WatchSlot {
    /// Counts this watch in `gauge` while it is open.
    pub fn counted_in(mut self, gauge: prometheus_client::metrics::gauge::Gauge) -> Self {
        gauge.inc();
        self.gauge = Some(gauge);
        self
    }
}

impl WatchLimiter {
    /// At most `max_per_user` open watches per user name.
    pub fn new(max_per_user: usize) -> Self {
        Self { max_per_user, open: Default::default() }
    }

    /// A slot for `user`, or `None` when the user already holds the maximum.
    pub fn acquire(&self, user: &str) -> Option<WatchSlot> {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        let count = open.entry(user.to_owned()).or_insert(0);
        if *count >= self.max_per_user {
            return None;
        }
        *count += 1;
        Some(WatchSlot { user: user.to_owned(), open: std::sync::Arc::clone(&self.open), gauge: None })
    }

    /// Watches `user` holds now.
    #[cfg(test)]
    pub fn open(&self, user: &str) -> usize {
        self.open.lock().unwrap_or_else(|p| p.into_inner()).get(user).copied().unwrap_or(0)
    }
}

impl Drop for WatchSlot {
    fn drop(&mut self) {
        if let Some(g) = &self.gauge {
            g.dec();
        }
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(count) = open.get_mut(&self.user) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                open.remove(&self.user);
            }
        }
    }
}

/// The HTTP body of a watch.
pub struct WatchBody {
    stream: WatchStream,
    done: bool,
    _slot: Option<WatchSlot>,
}

fn line(value: &serde_json::Value) -> Bytes {
    let mut bytes = serde_json::to_vec(value).unwrap_or_default();
    bytes.push(b'\n');
    Bytes::from(bytes)
}

impl futures_core::Stream for WatchBody {
    type Item = Result<Bytes, std::convert::Infallible>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if self.done {
            return Poll::Ready(None);
        }
        match self.stream.poll_next(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Ready(Some(Ok(event))) => {
                let kind = match event.kind {
                    EventType::Added => "ADDED",
                    EventType::Modified => "MODIFIED",
                    EventType::Deleted => "DELETED",
                };
                Poll::Ready(Some(Ok(line(&json!({"type": kind, "object": event.object})))))
            }
            Poll::Ready(Some(Err(e))) => {
                self.done = true;
                let (code, reason) = match e {
                    StoreError::Gone { .. } => (410, "Expired"),
                    StoreError::TooLargeResourceVersion { .. } => (504, "Timeout"),
                    _ => (500, "InternalError"),
                };
                let status = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                                    "message": e.to_string(), "reason": reason, "code": code});
                Poll::Ready(Some(Ok(line(&json!({"type": "ERROR", "object": status})))))
            }
        }
    }
}

/// The streaming response for a watch, holding `slot` until it ends.
pub fn response(stream: WatchStream, slot: Option<WatchSlot>) -> Response {
    let mut resp = Response::new(Body::from_stream(WatchBody { stream, done: false, _slot: slot }));
    resp.headers_mut()
        .insert(axum::http::header::CONTENT_TYPE, axum::http::HeaderValue::from_static("application/json"));
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_per_user_and_freed_on_drop() {
        let l = WatchLimiter::new(2);
        let a = l.acquire("alice").unwrap();
        let b = l.acquire("alice").unwrap();
        assert!(l.acquire("alice").is_none());
        assert!(l.acquire("bob").is_some(), "another user is not affected");
        drop(a);
        assert_eq!(l.open("alice"), 1);
        let _c = l.acquire("alice").unwrap();
        drop(b);
        assert_eq!(l.open("alice"), 1);
    }
}
