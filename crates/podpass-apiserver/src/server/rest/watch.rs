//! `?watch=true`: a store watch streamed as upstream's JSON watch events, one object per
//! line (`{"type":"ADDED","object":{…}}`), ending with an `ERROR` event carrying a Status
//! when the watcher must relist. A watch ends at its deadline (`timeoutSeconds`, else
//! kube-apiserver's randomized `--min-request-timeout` window); with `allowWatchBookmarks`
//! it sends `BOOKMARK` events as upstream's cacher does: roughly every minute and 2 s
//! before the deadline.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::response::Response;
use serde_json::json;

use tokio::time::{Instant, Sleep};

use crate::store::{EventType, StoreError, WatchStream};

/// Upstream's cacher: a bookmark roughly every minute.
pub const BOOKMARK_FREQUENCY: Duration = Duration::from_secs(60);
/// Upstream's cacher: the last bookmark this long before the deadline.
const PRE_TIMEOUT: Duration = Duration::from_secs(2);

/// How long a watch lives: `timeoutSeconds` when given and positive, else a random time in
/// `[min_request_timeout, 2 × min_request_timeout)` (kube-apiserver's ListResource).
pub fn watch_timeout(timeout_seconds: Option<u64>, min_request_timeout: Duration) -> Duration {
    // Beyond upstream, which takes any value: a year at most, so the deadline is a time
    // that exists.
    const LONGEST: Duration = Duration::from_secs(365 * 86_400);
    let timeout = match timeout_seconds {
        Some(s) if s > 0 => Duration::from_secs(s),
        _ => {
            let mut b = [0u8; 8];
            let fraction = if aws_lc_rs::rand::fill(&mut b).is_ok() {
                (u64::from_le_bytes(b) >> 11) as f64 / (1u64 << 53) as f64
            } else {
                0.5
            };
            min_request_timeout.mul_f64(1.0 + fraction)
        }
    };
    timeout.min(LONGEST)
}

/// The shape of a bookmark: the watched kind with only `metadata.resourceVersion`.
#[derive(Debug, Clone)]
pub struct BookmarkKind {
    /// `apiVersion` of the watched resource.
    pub api_version: String,
    /// `kind` of the watched resource.
    pub kind: String,
}

struct Bookmarks {
    kind: BookmarkKind,
    next: Pin<Box<Sleep>>,
    /// When the watch ends (bookmarks stop 2 s before).
    deadline: Instant,
}

impl Bookmarks {
    /// Upstream's nextBookmarkTime: a minute from now, but no later than 2 s before the
    /// deadline; `false` when that moment is not after `now`.
    fn schedule(&mut self, now: Instant) -> bool {
        let pre_timeout = self.deadline.checked_sub(PRE_TIMEOUT).unwrap_or(now);
        let at = (now + BOOKMARK_FREQUENCY).min(pre_timeout);
        // Strictly later: the bookmark due now is the one being sent.
        if at <= now {
            return false;
        }
        self.next.as_mut().reset(at);
        true
    }
}

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

/// Rewrites each event's object (e.g. into a one-row Table for `kubectl get -w`).
pub type Transform = Box<dyn FnMut(serde_json::Value) -> serde_json::Value + Send>;

/// The HTTP body of a watch.
pub struct WatchBody {
    stream: WatchStream,
    transform: Option<Transform>,
    done: bool,
    deadline: Pin<Box<Sleep>>,
    bookmarks: Option<Bookmarks>,
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
        if self.deadline.as_mut().poll(cx).is_ready() {
            // As upstream: the response simply ends; the client watches again from the
            // last resourceVersion it saw.
            self.done = true;
            return Poll::Ready(None);
        }
        // Read before polling: every event up to `progress` is then already in the channel
        // (see WatchProgress), so a bookmark sent when it is empty promises nothing false.
        let progress = self.stream.progress();
        match self.stream.poll_next(cx) {
            Poll::Pending => {
                let Some(b) = self.bookmarks.as_mut() else { return Poll::Pending };
                if b.next.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
                let object = json!({"kind": b.kind.kind, "apiVersion": b.kind.api_version,
                                    "metadata": {"resourceVersion": progress.to_string()}});
                if !b.schedule(Instant::now()) {
                    self.bookmarks = None;
                }
                if progress == 0 {
                    // Nothing delivered yet (initial state still loading): nothing to promise.
                    cx.waker().wake_by_ref();
                    return Poll::Pending;
                }
                Poll::Ready(Some(Ok(line(&json!({"type": "BOOKMARK", "object": object})))))
            }
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Ready(Some(Ok(event))) => {
                let kind = match event.kind {
                    EventType::Added => "ADDED",
                    EventType::Modified => "MODIFIED",
                    EventType::Deleted => "DELETED",
                };
                let object = match self.transform.as_mut() {
                    Some(t) => t(event.object),
                    None => event.object,
                };
                Poll::Ready(Some(Ok(line(&json!({"type": kind, "object": object})))))
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

/// The streaming response for a watch, holding `slot` until it ends at `timeout`;
/// `bookmarks` when the client allowed them; each event's object through `transform`.
pub fn response(
    stream: WatchStream,
    slot: Option<WatchSlot>,
    timeout: Duration,
    bookmarks: Option<BookmarkKind>,
    transform: Option<Transform>,
) -> Response {
    let now = Instant::now();
    let deadline = now + timeout;
    let bookmarks = bookmarks.and_then(|kind| {
        let mut b = Bookmarks { kind, next: Box::pin(tokio::time::sleep_until(now)), deadline };
        b.schedule(now).then_some(b)
    });
    let body = WatchBody {
        stream,
        transform,
        done: false,
        deadline: Box::pin(tokio::time::sleep_until(deadline)),
        bookmarks,
        _slot: slot,
    };
    let mut resp = Response::new(Body::from_stream(body));
    resp.headers_mut()
        .insert(axum::http::header::CONTENT_TYPE, axum::http::HeaderValue::from_static("application/json"));
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_are_the_clients_or_in_the_randomized_window() {
        let min = Duration::from_secs(1800);
        assert_eq!(watch_timeout(Some(2), min), Duration::from_secs(2));
        for given in [None, Some(0)] {
            let t = watch_timeout(given, min);
            assert!(t >= min && t < 2 * min, "{t:?}");
        }
        let spread: std::collections::HashSet<_> = (0..8).map(|_| watch_timeout(None, min)).collect();
        assert!(spread.len() > 1, "randomized");
        assert_eq!(watch_timeout(Some(u64::MAX), min), Duration::from_secs(365 * 86_400));
    }

    #[tokio::test]
    async fn bookmarks_come_every_minute_and_two_seconds_before_the_deadline() {
        let now = Instant::now();
        let kind = BookmarkKind { api_version: "v1".into(), kind: "Pod".into() };
        let mut b =
            Bookmarks { kind, next: Box::pin(tokio::time::sleep_until(now)), deadline: now + Duration::from_secs(150) };
        let mut at = vec![];
        let mut t = now;
        while b.schedule(t) {
            t = b.next.deadline();
            at.push((t - now).as_secs());
            if at.len() > 5 {
                break;
            }
        }
        assert_eq!(at, [60, 120, 148]);
    }

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
