//! `?watch=true`: a store watch streamed as upstream's JSON watch events, one object per
//! line (`{"type":"ADDED","object":{…}}`), ending with an `ERROR` event carrying a Status
//! when the watcher must relist.

use std::pin::Pin;
use std::task::{Context, Poll};

use axum::body::{Body, Bytes};
use axum::response::Response;
use serde_json::json;

use crate::store::{EventType, StoreError, WatchStream};

/// The HTTP body of a watch.
pub struct WatchBody {
    stream: WatchStream,
    done: bool,
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
                    _ => (500, "InternalError"),
                };
                let status = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                                    "message": e.to_string(), "reason": reason, "code": code});
                Poll::Ready(Some(Ok(line(&json!({"type": "ERROR", "object": status})))))
            }
        }
    }
}

/// The streaming response for a watch.
pub fn response(stream: WatchStream) -> Response {
    let mut resp = Response::new(Body::from_stream(WatchBody { stream, done: false }));
    resp.headers_mut()
        .insert(axum::http::header::CONTENT_TYPE, axum::http::HeaderValue::from_static("application/json"));
    resp
}
