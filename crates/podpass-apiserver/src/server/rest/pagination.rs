//! `limit` and `continue` on lists, with upstream's semantics: a page of at most `limit`
//! objects in key order, `metadata.continue` while more remain (and `remainingItemCount`
//! when no selector filters the list), and every page of one list read at the first page's
//! resourceVersion — a consistent list, as etcd serves it at a pinned revision.
//!
//! The first page's whole result is kept (bounded in count, size and age), and continue
//! tokens point into it. A token whose list is no longer kept is answered as upstream
//! answers one past etcd's compaction: 410 Expired, with an "inconsistent" token that
//! continues from the same place on the latest state. Tokens are upstream's shape
//! (base64url JSON `{"v","rv","start"}`) and grant nothing: the list they continue is the
//! one the request names and is authorized for.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::server::status::StatusError;

/// Lists kept for their continue tokens at most.
const MAX_LISTS: usize = 64;
/// Objects kept across those lists at most (the oldest lists go first).
const MAX_OBJECTS: usize = 200_000;
/// How long a list stays continuable (etcd's default compaction interval upstream).
const KEEP_FOR: Duration = Duration::from_secs(5 * 60);
/// Longest continue token accepted.
const MAX_TOKEN_BYTES: usize = 4096;

/// Upstream's expired-continue message (etcd3 store, compacted revision).
pub(crate) const EXPIRED_MESSAGE: &str = "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.";

/// A continue token's content (apiserver storage `continueToken`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Token {
    v: String,
    rv: i64,
    start: String,
}

/// A decoded `continue`: the list's revision (`None`: inconsistent, continue on the latest
/// state) and the key to start at (inclusive).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Continue {
    pub(crate) revision: Option<u64>,
    pub(crate) start: String,
}

/// Encodes a continue token for the list at `revision` (`None`: inconsistent) resuming
/// at `start`.
pub(crate) fn encode(revision: Option<u64>, start: &str) -> String {
    let rv = revision.and_then(|r| i64::try_from(r).ok()).unwrap_or(-1);
    let token = Token { v: "meta.k8s.io/v1".into(), rv, start: start.to_owned() };
    data_encoding::BASE64URL_NOPAD.encode(serde_json::to_string(&token).unwrap_or_default().as_bytes())
}

/// Decodes `continue`; a malformed one is upstream's 400.
pub(crate) fn decode(text: &str) -> Result<Continue, StatusError> {
    let bad = |why: &str| StatusError::bad_request(format!("invalid continue token: continue key is not valid: {why}"));
    if text.len() > MAX_TOKEN_BYTES {
        return Err(bad("too long"));
    }
    let raw = data_encoding::BASE64URL_NOPAD
        .decode(text.trim_end_matches('=').as_bytes())
        .map_err(|_| bad("illegal base64 data"))?;
    let token: Token = serde_json::from_slice(&raw).map_err(|e| bad(&e.to_string()))?;
    if token.v != "meta.k8s.io/v1" {
        return Err(bad("incorrect encoded start resourceVersion (version meta.k8s.io/v1)"));
    }
    if token.start.is_empty() || token.start.starts_with('/') || token.start.split('/').any(|p| p == "..") {
        return Err(bad("invalid start key"));
    }
    let revision = match token.rv {
        -1 => None,
        rv if rv > 0 => Some(u64::try_from(rv).map_err(|_| bad("invalid resourceVersion"))?),
        _ => return Err(bad("invalid resourceVersion")),
    };
    Ok(Continue { revision, start: token.start })
}

/// `limit` from the query: absent, non-positive or empty means no limit (upstream).
pub(crate) fn limit(query: &std::collections::HashMap<String, String>) -> Result<Option<usize>, StatusError> {
    match query.get("limit").map(String::as_str) {
        None | Some("") => Ok(None),
        Some(text) => {
            let n: i64 = text
                .parse()
                .map_err(|_| StatusError::bad_request(format!("limit: invalid value {text:?}: must be an integer")))?;
            Ok(usize::try_from(n).ok().filter(|n| *n > 0))
        }
    }
}

/// The key of an object within a list: `name` in a namespace or for a cluster-scoped
/// kind, `namespace/name` across namespaces (the order the store lists in).
pub(crate) fn relative_key(object: &Value, across_namespaces: bool) -> String {
    let meta = object.get("metadata");
    let field = |f: &str| meta.and_then(|m| m.get(f)).and_then(Value::as_str).unwrap_or("");
    if across_namespaces { format!("{}/{}", field("namespace"), field("name")) } else { field("name").to_owned() }
}

/// What identifies one list: resource, namespace and selectors.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct ListKey {
    pub(crate) resource: String,
    pub(crate) namespace: String,
    pub(crate) labels: String,
    pub(crate) fields: String,
}

struct Kept {
    key: ListKey,
    revision: u64,
    items: Arc<Vec<Value>>,
    at: Instant,
}

/// The lists kept for their continue tokens.
#[derive(Default)]
pub(crate) struct Snapshots {
    kept: Mutex<VecDeque<Kept>>,
}

impl std::fmt::Debug for Snapshots {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Snapshots").finish_non_exhaustive()
    }
}

impl Snapshots {
    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<Kept>> {
        self.kept.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Keeps `items` (the whole list at `revision`) for the pages after the first.
    pub(crate) fn keep(&self, key: ListKey, revision: u64, items: Arc<Vec<Value>>, now: Instant) {
        let mut kept = self.lock();
        kept.retain(|k| now.duration_since(k.at) < KEEP_FOR && !(k.key == key && k.revision == revision));
        if items.len() > MAX_OBJECTS {
            return;
        }
        kept.push_back(Kept { key, revision, items, at: now });
        while kept.len() > MAX_LISTS || kept.iter().map(|k| k.items.len()).sum::<usize>() > MAX_OBJECTS {
            kept.pop_front();
        }
    }

    /// The list `key` at `revision`, if it is still kept.
    pub(crate) fn get(&self, key: &ListKey, revision: u64, now: Instant) -> Option<Arc<Vec<Value>>> {
        let kept = self.lock();
        kept.iter()
            .find(|k| k.key == *key && k.revision == revision && now.duration_since(k.at) < KEEP_FOR)
            .map(|k| Arc::clone(&k.items))
    }
}

/// One page of `items` (in key order) from `start` (inclusive): the objects, the start of
/// the next page if any, and how many objects follow this page.
pub(crate) fn page<'a>(
    items: &'a [Value],
    start: Option<&str>,
    limit: usize,
    across_namespaces: bool,
) -> (&'a [Value], Option<String>, usize) {
    let from = match start {
        Some(s) => items.partition_point(|o| relative_key(o, across_namespaces).as_str() < s),
        None => 0,
    };
    let rest = &items[from..];
    let taken = rest.len().min(limit);
    let next = rest.get(taken).map(|o| relative_key(o, across_namespaces));
    (&rest[..taken], next, rest.len() - taken)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    fn objects(names: &[&str]) -> Vec<Value> {
        names.iter().map(|n| json!({"metadata": {"name": n, "namespace": "ns"}})).collect()
    }

    #[test]
    fn tokens_round_trip_in_upstreams_shape_and_garbage_is_a_400() {
        let t = encode(Some(42), "web-2");
        let raw = data_encoding::BASE64URL_NOPAD.decode(t.as_bytes()).unwrap();
        let v: Value = serde_json::from_slice(&raw).unwrap();
        assert_eq!(v, json!({"v": "meta.k8s.io/v1", "rv": 42, "start": "web-2"}));
        assert_eq!(decode(&t).unwrap(), Continue { revision: Some(42), start: "web-2".into() });
        assert_eq!(decode(&encode(None, "a")).unwrap().revision, None, "inconsistent: rv -1");
        for bad in [
            "",
            "!!!",
            &"A".repeat(5000),
            &data_encoding::BASE64URL_NOPAD.encode(b"{\"v\":\"x\",\"rv\":1,\"start\":\"a\"}"),
        ] {
            let e = decode(bad).unwrap_err();
            assert_eq!(e.code, axum::http::StatusCode::BAD_REQUEST, "{bad}");
            assert!(e.message.starts_with("invalid continue token"), "{}", e.message);
        }
        let escape = data_encoding::BASE64URL_NOPAD.encode(br#"{"v":"meta.k8s.io/v1","rv":1,"start":"../x"}"#);
        assert!(decode(&escape).is_err());
        let zero = data_encoding::BASE64URL_NOPAD.encode(br#"{"v":"meta.k8s.io/v1","rv":0,"start":"x"}"#);
        assert!(decode(&zero).is_err());
    }

    #[test]
    fn pages_follow_key_order_and_count_what_remains() {
        let items = objects(&["a", "b", "c", "d", "e"]);
        let (p, next, rest) = page(&items, None, 2, false);
        assert_eq!((p.len(), next.as_deref(), rest), (2, Some("c"), 3));
        let (p, next, rest) = page(&items, Some("c"), 2, false);
        assert_eq!((p[0]["metadata"]["name"].as_str(), next.as_deref(), rest), (Some("c"), Some("e"), 1));
        let (p, next, rest) = page(&items, Some("e"), 2, false);
        assert_eq!((p.len(), next, rest), (1, None, 0));
        let (p, _, _) = page(&items, Some("bb"), 10, false);
        assert_eq!(p[0]["metadata"]["name"], "c", "a start between keys resumes at the next");
        assert_eq!(relative_key(&items[0], true), "ns/a");
    }

    #[test]
    fn kept_lists_are_bounded_and_found_by_list_and_revision() {
        let s = Snapshots::default();
        let now = Instant::now();
        let key = |r: &str| ListKey {
            resource: r.into(),
            namespace: "ns".into(),
            labels: String::new(),
            fields: String::new(),
        };
        s.keep(key("pods"), 7, Arc::new(objects(&["a"])), now);
        assert!(s.get(&key("pods"), 7, now).is_some());
        assert!(s.get(&key("pods"), 8, now).is_none(), "another revision");
        assert!(s.get(&key("secrets"), 7, now).is_none(), "another list");
        assert!(s.get(&key("pods"), 7, now + KEEP_FOR).is_none(), "expired");
        for i in 0..(MAX_LISTS as u64 + 5) {
            s.keep(key("cm"), 100 + i, Arc::new(objects(&["x"])), now);
        }
        assert!(s.get(&key("pods"), 7, now).is_none(), "the oldest went first");
        assert_eq!(s.lock().len(), MAX_LISTS);
    }
}
