//! The node's streaming endpoints, as the kubelet's `/exec/{namespace}/{pod}/{container}` and
//! `/attach/...`: the requester authorized for `nodes/proxy` (the API server's client
//! certificate, or an admin), the pod the node knows by that name and its running container
//! found, the runtime asked (CRI `Exec`/`Attach`), and the client's WebSocket
//! (`v5.channel.k8s.io`, with its close signal, or `v4.channel.k8s.io`) bridged to the
//! runtime's stream server over SPDY ([`crate::stream::remote_command`]). Streams are bounded
//! per pod and per node; nothing of a stream is logged but its metadata.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Path as UrlPath, RawQuery, State};
use axum::http::StatusCode;
use axum::response::Response;
use futures::{SinkExt, StreamExt};
use tokio::sync::mpsc;

use super::containers::{CONTAINER_NAME_LABEL, POD_UID_LABEL};
use super::exec_processes::{self, Process};
use super::server::{NodeServer, authorize, status};
use super::splice::{self, Activity};
use crate::runtime::CONTAINER_RUNNING;
use crate::stream::dial;
use crate::stream::remote_command::{self, Channels, RemoteCommand};

/// The channel protocols served, most preferred first.
const PROTOCOLS: [&str; 2] = ["v5.channel.k8s.io", "v4.channel.k8s.io"];
/// Streams one pod may have at once.
const MAX_STREAMS_PER_POD: usize = 16;
/// Streams the node serves at once.
const MAX_STREAMS: usize = 256;
/// The most a resize message may hold.
const MAX_RESIZE: usize = 1024;
/// The largest WebSocket message taken from the client.
const MAX_MESSAGE: usize = 1 << 20;

const STDIN: u8 = 0;
const STDOUT: u8 = 1;
const STDERR: u8 = 2;
const ERROR: u8 = 3;
const RESIZE: u8 = 4;
/// v5's close signal: `[255, channel]`.
const CLOSE: u8 = 255;

/// Streams open now, by pod UID; the exec'd processes they started; and, per container,
/// the exec starting now (one at a time, so the process that appears is that exec's own).
#[derive(Default)]
pub(crate) struct StreamSlots(
    Mutex<HashMap<String, usize>>,
    Arc<Mutex<HashSet<Process>>>,
    Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
);

impl StreamSlots {
    /// Waits for container `id`'s turn to start an exec.
    async fn start_turn(&self, id: &str) -> tokio::sync::OwnedMutexGuard<()> {
        let lock = {
            let mut turns = self.2.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            // Containers no exec waits on any more are forgotten.
            turns.retain(|_, l| Arc::strong_count(l) > 1);
            Arc::clone(turns.entry(id.to_owned()).or_default())
        };
        lock.lock_owned().await
    }
}

/// One stream's place, given back on drop.
pub(super) struct SlotGuard {
    slots: Arc<NodeServer>,
    uid: String,
}

impl Drop for SlotGuard {
    fn drop(&mut self) {
        let mut open = self.slots.streams.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(n) = open.get_mut(&self.uid) {
            *n -= 1;
            if *n == 0 {
                open.remove(&self.uid);
            }
        }
    }
}

/// The pod or the node has no room for another stream: answered 429, saying which bound.
pub(super) struct NoRoom;

impl axum::response::IntoResponse for NoRoom {
    fn into_response(self) -> Response {
        status(
            StatusCode::TOO_MANY_REQUESTS,
            format!("too many streams (at most {MAX_STREAMS_PER_POD} into one pod, {MAX_STREAMS} on this node)"),
        )
    }
}

/// A place for a stream into pod `uid`, unless the pod or the node has no room.
pub(super) fn take_slot(s: &Arc<NodeServer>, uid: &str) -> Result<SlotGuard, NoRoom> {
    let mut open = s.streams.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let total: usize = open.values().sum();
    let pod = open.get(uid).copied().unwrap_or(0);
    if pod >= MAX_STREAMS_PER_POD || total >= MAX_STREAMS {
        return Err(NoRoom);
    }
    *open.entry(uid.to_owned()).or_default() += 1;
    Ok(SlotGuard { slots: Arc::clone(s), uid: uid.to_owned() })
}

/// What a stream request asks (the kubelet's `streaming` options: `input`, `output`,
/// `error`, `tty` and repeated `command`; the API server's names `stdin`, `stdout`, `stderr`
/// too).
#[derive(Debug, Clone, PartialEq, Eq)]
struct StreamOptions {
    channels: Channels,
    command: Vec<String>,
}

/// A stream request that names no stream.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("you must specify at least 1 of stdin, stdout, stderr")]
struct NoStreams;

fn options(query: &str) -> Result<StreamOptions, NoStreams> {
    let pairs: Vec<(String, String)> =
        url::form_urlencoded::parse(query.as_bytes()).map(|(k, v)| (k.into_owned(), v.into_owned())).collect();
    let flag = |names: &[&str]| pairs.iter().any(|(k, v)| names.contains(&k.as_str()) && (v == "1" || v == "true"));
    let channels = Channels {
        stdin: flag(&["input", "stdin"]),
        stdout: flag(&["output", "stdout"]),
        stderr: flag(&["error", "stderr"]),
        tty: flag(&["tty"]),
    };
    if !(channels.stdin || channels.stdout || channels.stderr) {
        return Err(NoStreams);
    }
    let command: Vec<String> = pairs.into_iter().filter(|(k, _)| k == "command").map(|(_, v)| v).collect();
    Ok(StreamOptions { channels, command })
}

/// GET `/exec/{namespace}/{pod}/{container}` (kubelet `getExec`) and `/attach/…` (kubelet
/// `getAttach`): which one, the path's first segment says.
pub(super) async fn stream(
    State(s): State<Arc<NodeServer>>,
    UrlPath((ns, pod, container)): UrlPath<(String, String, String)>,
    uri: axum::http::Uri,
    RawQuery(query): RawQuery,
    axum::Extension(peer): axum::Extension<podpass_serve::Peer>,
    headers: axum::http::HeaderMap,
    request: axum::extract::Request,
) -> Response {
    let (mut parts, _) = request.into_parts();
    let is_exec = uri.path().starts_with("/exec/");
    // The kubelet authorizes a stream as `create nodes/proxy` (its verb for a POST; a
    // WebSocket's GET asks the same).
    if let Err(refused) = authorize(&s, &peer, &headers, "create", "proxy").await {
        return refused;
    }
    let opts = match options(query.as_deref().unwrap_or_default()) {
        Ok(o) => o,
        Err(e) => return status(StatusCode::BAD_REQUEST, e.to_string()),
    };
    if is_exec && opts.command.is_empty() {
        return status(StatusCode::BAD_REQUEST, "you must specify at least one command for the container");
    }
    let Some(known) = s.pods.get(&ns, &pod) else {
        return status(StatusCode::NOT_FOUND, format!("pod {pod:?} does not exist"));
    };
    let uid = known.metadata.uid.clone().unwrap_or_default();
    let Some(rt) = s.runtime.clone() else {
        return status(StatusCode::NOT_FOUND, format!("node {} runs no containers", s.node));
    };
    let labels =
        HashMap::from([(POD_UID_LABEL.to_owned(), uid.clone()), (CONTAINER_NAME_LABEL.to_owned(), container.clone())]);
    let id = match rt.cri.list_containers(labels).await {
        Ok(cs) => cs.into_iter().find(|c| c.state == CONTAINER_RUNNING).map(|c| c.id),
        Err(e) => return status(StatusCode::INTERNAL_SERVER_ERROR, format!("listing the pod's containers: {e}")),
    };
    let Some(id) = id else {
        return status(
            StatusCode::BAD_REQUEST,
            format!("container {container} is not running in pod {pod}: unable to upgrade connection"),
        );
    };
    let slot = match take_slot(&s, &uid) {
        Ok(slot) => slot,
        Err(full) => return axum::response::IntoResponse::into_response(full),
    };
    // After the bounds, so a client that cannot switch hears why.
    let client = if is_spdy(&headers) {
        match parts.extensions.remove::<hyper::upgrade::OnUpgrade>() {
            Some(upgrade) => Client::Spdy(upgrade),
            None => return status(StatusCode::BAD_REQUEST, "Upgrade request required"),
        }
    } else {
        match <WebSocketUpgrade as axum::extract::FromRequestParts<()>>::from_request_parts(&mut parts, &()).await {
            Ok(ws) => Client::WebSocket(ws),
            Err(e) => {
                return status(
                    StatusCode::BAD_REQUEST,
                    format!(
                        "podpass serves streams over WebSocket (v5.channel.k8s.io, v4.channel.k8s.io) or SPDY/3.1 ({e})"
                    ),
                );
            }
        }
    };
    // The container's processes before: the exec's own is the one that appears after
    // (no other exec of the container starting meanwhile).
    let turn = if is_exec { Some(s.streams.start_turn(&id).await) } else { None };
    let before = if is_exec {
        let id = id.clone();
        tokio::task::spawn_blocking(move || exec_processes::roots(&id)).await.unwrap_or_default()
    } else {
        HashSet::new()
    };
    let asked = if is_exec {
        rt.cri.exec(&id, opts.command.clone(), opts.channels).await
    } else {
        rt.cri.attach(&id, opts.channels).await
    };
    let url = match asked {
        Ok(url) => url,
        Err(e) => return status(StatusCode::INTERNAL_SERVER_ERROR, format!("asking the runtime for the stream: {e}")),
    };
    let idle_timeout = s.stream_idle_timeout;
    // Found while the stream starts (the process appears once its streams are open).
    let claims = Arc::clone(&s.streams.1);
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let track = || Finish {
        started: is_exec.then(|| {
            let (id, claims, done) = (id.clone(), Arc::clone(&claims), Arc::clone(&done));
            tokio::task::spawn_blocking(move || {
                let found = exec_processes::new_root(&id, &before, &claims, &done, std::time::Duration::from_secs(30));
                drop(turn);
                found
            })
        }),
        slot,
        done: Arc::clone(&done),
        claims: Arc::clone(&claims),
        id: id.clone(),
    };
    let spdy = matches!(client, Client::Spdy(_));
    let opened = || {
        tracing::info!(
            namespace = %ns, pod = %pod, container = %container, exec = is_exec, tty = opts.channels.tty, spdy,
            "stream opened"
        );
    };
    match client {
        // The client's channels bridged to the runtime's, over podpass's own SPDY client.
        Client::WebSocket(ws) => {
            let command = match remote_command::connect(&url, opts.channels).await {
                Ok(c) => c,
                Err(e) => return status(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
            };
            opened();
            let finish = track();
            ws.protocols(PROTOCOLS).max_message_size(MAX_MESSAGE).on_upgrade(move |socket| async move {
                let v5 = socket.protocol().and_then(|p| p.to_str().ok()) == Some(PROTOCOLS[0]);
                let finished = bridge(socket, command, v5, idle_timeout).await;
                tracing::info!(namespace = %ns, pod = %pod, container = %container, finished, "stream closed");
                finish.run(finished).await;
            })
        }
        // SPDY is the runtime's own protocol (kubectl before 1.30, and kubectl's fallback):
        // the client's connection is passed whole, the protocol version the runtime's choice
        // among the client's, as the kubelet's redirect-less proxy does.
        Client::Spdy(upgrade) => {
            let url = match dial::loopback_url(&url) {
                Ok(u) => u,
                Err(e) => return status(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
            };
            let upgraded = match splice::upgrade_runtime(&url, axum::http::Method::POST, &headers).await {
                Ok(u) => u,
                Err(e) => return splice::refusal(e),
            };
            opened();
            let finish = track();
            let response = splice::switching(&upgraded);
            podpass_serve::spawn_named("stream-spdy", async move {
                // The runtime ends the connection once the command is done and its Status
                // sent; the client ending first (or quiet) leaves the command to be killed.
                let ended = match upgrade.await {
                    Ok(io) => Some(splice::splice(hyper_util::rt::TokioIo::new(io), upgraded.io, idle_timeout).await),
                    Err(_) => None,
                };
                let finished = ended == Some(splice::Ended::Runtime);
                tracing::info!(namespace = %ns, pod = %pod, container = %container, finished, "stream closed");
                finish.run(finished).await;
            });
            response
        }
    }
}

/// How the client asked for its stream.
enum Client {
    /// A WebSocket of [`PROTOCOLS`].
    WebSocket(WebSocketUpgrade),
    /// `Upgrade: SPDY/3.1`.
    Spdy(hyper::upgrade::OnUpgrade),
}

/// Whether the request asks for SPDY.
fn is_spdy(headers: &axum::http::HeaderMap) -> bool {
    headers
        .get(axum::http::header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case(crate::stream::spdy::UPGRADE))
}

/// What is left once a stream ends: its place freed, and an exec's process found and,
/// when the client went first, killed.
struct Finish {
    slot: SlotGuard,
    started: Option<tokio::task::JoinHandle<Option<Process>>>,
    done: Arc<std::sync::atomic::AtomicBool>,
    claims: Arc<Mutex<HashSet<Process>>>,
    /// The container.
    id: String,
}

impl Finish {
    async fn run(self, finished: bool) {
        drop(self.slot);
        // A command that ended needs no search (it may never have been seen, so brief was
        // it); one whose client went away is found, if it is still starting, and killed.
        if finished {
            self.done.store(true, std::sync::atomic::Ordering::Relaxed);
        }
        let Some(found) = self.started else { return };
        let Ok(Some(root)) = found.await else {
            tracing::debug!(finished, "exec process not found");
            return;
        };
        tracing::debug!(finished, ?root, "exec process found");
        if !finished {
            let id = self.id;
            let _ = tokio::task::spawn_blocking(move || exec_processes::kill_tree(&id, root)).await;
        }
        self.claims.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(&root);
    }
}

/// Relays the client's channels and the runtime's streams until the command ends (its
/// output drained, its Status sent on the error channel: `true`) or the client goes away or
/// nothing crosses for `idle_timeout` (`false`; the runtime's connection is closed, which
/// ends the command's streams).
async fn bridge(socket: WebSocket, mut command: RemoteCommand, v5: bool, idle_timeout: std::time::Duration) -> bool {
    let (mut sink, mut source) = socket.split();
    let activity = Arc::new(Activity::new());
    let touch = {
        let activity = Arc::clone(&activity);
        move || activity.touch()
    };
    let idle = {
        let activity = Arc::clone(&activity);
        async move { activity.idle(idle_timeout).await }
    };
    let (tx, mut rx) = mpsc::channel::<Message>(16);
    let writer = podpass_serve::spawn_named("stream-ws-write", async move {
        while let Some(message) = rx.recv().await {
            let closing = matches!(message, Message::Close(_));
            if sink.send(message).await.is_err() || closing {
                break;
            }
        }
    });
    let pump = |reader: Option<crate::stream::spdy::StreamReader>, channel: u8, tx: mpsc::Sender<Message>| {
        let touch = touch.clone();
        async move {
            let Some(mut reader) = reader else { return };
            while let Some(chunk) = reader.next().await {
                touch();
                let mut message = Vec::with_capacity(chunk.len() + 1);
                message.push(channel);
                message.extend(chunk);
                if tx.send(Message::Binary(message.into())).await.is_err() {
                    return;
                }
            }
        }
    };
    let output = {
        let (stdout, stderr) = (command.stdout.take(), command.stderr.take());
        let (a, b) = (tx.clone(), tx.clone());
        async move {
            tokio::join!(pump(stdout, STDOUT, a), pump(stderr, STDERR, b));
        }
    };
    let (stdin, resize) = (command.stdin.take(), command.resize.take());
    let touch_input = touch.clone();
    let input = async move {
        let touch = touch_input;
        while let Some(Ok(message)) = source.next().await {
            touch();
            let data = match message {
                Message::Binary(d) => d,
                Message::Close(_) => break,
                _ => continue,
            };
            let Some((&channel, payload)) = data.split_first() else { continue };
            match channel {
                STDIN => {
                    if let Some(w) = &stdin
                        && w.write(payload).await.is_err()
                    {
                        break;
                    }
                }
                RESIZE if payload.len() <= MAX_RESIZE => {
                    if let Some(w) = &resize {
                        let _ = w.write(payload).await;
                    }
                }
                CLOSE if v5 && payload.first() == Some(&STDIN) => {
                    if let Some(w) = &stdin {
                        let _ = w.close().await;
                    }
                }
                _ => {}
            }
        }
    };
    tokio::pin!(input);
    let ended = tokio::select! {
        () = output => true,
        () = &mut input => false,
        () = idle => {
            tracing::info!(idle_seconds = idle_timeout.as_secs(), "stream idle for streamingConnectionIdleTimeout: closed");
            false
        }
    };
    if ended {
        // The command's output is done: its Status follows on the error channel.
        let mut status = Vec::new();
        while let Some(chunk) = command.error.next().await {
            status.extend(chunk);
            if status.len() > MAX_MESSAGE {
                break;
            }
        }
        if !status.is_empty() {
            let mut message = vec![ERROR];
            message.extend(status);
            let _ = tx.send(Message::Binary(message.into())).await;
        }
        let _ = tx.send(Message::Close(Some(CloseFrame { code: 1000, reason: "".into() }))).await;
    }
    // The client gone (or the command done): the runtime's connection goes with it.
    command.connection.go_away().await;
    drop(command);
    drop(tx);
    let _ = writer.await;
    ended
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_options_are_read_as_the_kubelet_and_the_api_server_name_them() {
        let o =
            options("command=sh&command=-c&command=echo%20hi&input=1&output=1&tty=1").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(o.command, ["sh", "-c", "echo hi"]);
        assert_eq!(o.channels, Channels { stdin: true, stdout: true, stderr: false, tty: true });
        let o = options("stdout=true&stderr=true&command=ls").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(o.channels, Channels { stdin: false, stdout: true, stderr: true, tty: false });
        assert_eq!(
            options("command=ls").err().map(|e| e.to_string()).as_deref(),
            Some("you must specify at least 1 of stdin, stdout, stderr")
        );
    }
}
