//! The HTTPS floor of `bench apiserver`: podpass's own accept loop, TLS configuration and
//! HTTP stack with the API server's serving certificate, answering a real TokenRequest's
//! answer, byte for byte, on a route of the TokenRequest's shape — everything a
//! TokenRequest costs the server except the work of the API server itself (authentication,
//! authorization, admission, reads, signing, audit). What TokenRequests reach is reported
//! against it as well as against raw signing.

use std::path::Path;

use anyhow::{Context, Result, bail};
use axum::body::Bytes;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;

use super::{Api, TOKEN_PATH, token_body};

/// Largest body the floor's route reads (the API server's own cap is larger; a
/// TokenRequest body is a few hundred bytes).
const MAX_BODY: usize = 1 << 20;

/// Starts the floor beside the API server whose data dir is `data_dir` and returns how to
/// reach it; its answer is that of one real TokenRequest for `pod_uid` (pod `pod-0`).
pub(super) async fn start(data_dir: &Path, api: &Api, pod_uid: &str) -> Result<Api> {
    let mut conn = api.connect().await?;
    let real = conn.round_trip(&api.request(TOKEN_PATH, &token_body(0, pod_uid))).await?;
    if real.status != 201 {
        bail!("TokenRequest for the floor's answer: {}: {}", real.status, String::from_utf8_lossy(&real.body));
    }
    let answer = Bytes::from(real.body);
    let read = |name: &str| {
        let path = data_dir.join("pki").join(name);
        std::fs::read(&path).with_context(|| format!("reading {}", path.display()))
    };
    let tls = podpass_serve::tls_acceptor(&read("apiserver.crt")?, &read("apiserver.key")?, None)
        .context("the floor's TLS configuration")?;
    let app = axum::Router::new()
        .route(
            "/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token",
            axum::routing::post(move |body: Bytes| {
                let answer = answer.clone();
                async move {
                    if body.len() > MAX_BODY {
                        return StatusCode::PAYLOAD_TOO_LARGE.into_response();
                    }
                    (StatusCode::CREATED, [(header::CONTENT_TYPE, "application/json")], answer).into_response()
                }
            }),
        )
        .layer(axum::extract::DefaultBodyLimit::max(MAX_BODY));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.context("the floor's listener")?;
    let addr = listener.local_addr().context("the floor's address")?;
    tokio::spawn(podpass_serve::accept_loop(listener, Some(tls), app, podpass_serve::ServeLimits::default()));
    Ok(api.at(addr))
}
