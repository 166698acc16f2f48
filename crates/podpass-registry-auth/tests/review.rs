//! TokenReviewer through a kubeconfig against a loopback TokenReview endpoint whose answers
//! the test picks per token: what is granted, what is refused and why, the cache, one round
//! trip for concurrent reviews of one token, and failing closed when no answer comes.
//! (The real apiserver's answers are covered by the e2e suite.)

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use podpass_registry_auth::{ReviewError, TokenReviewer};

const AUDIENCE: &str = "registry.example";
const USER: &str = "system:serviceaccount:team-a:default";
const UID: &str = "0b5c2c46-0000-4000-8000-000000000001";

async fn tokenreviews(State(calls): State<Arc<AtomicUsize>>, body: axum::body::Bytes) -> Response {
    calls.fetch_add(1, Ordering::SeqCst);
    let review: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(review["spec"]["audiences"], serde_json::json!([AUDIENCE]), "the audience is asked");
    let token = review["spec"]["token"].as_str().unwrap().to_owned();
    // Long enough that concurrent reviews of one token overlap.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let user = |name: &str, uid: &str| serde_json::json!({"username": name, "uid": uid});
    let status = match token.as_str() {
        t if t.starts_with("alive") => {
            serde_json::json!({"authenticated": true, "user": user(USER, UID), "audiences": [AUDIENCE]})
        }
        "deleted-pod" => serde_json::json!({
            "authenticated": false,
            "error": "pod \"app\" (UID 1234) not found"
        }),
        "other-user" => serde_json::json!({"authenticated": true, "user": user("system:serviceaccount:team-b:x", UID)}),
        "other-uid" => serde_json::json!({"authenticated": true, "user": user(USER, "another-uid")}),
        "other-audience" => {
            serde_json::json!({"authenticated": true, "user": user(USER, UID), "audiences": ["elsewhere"]})
        }
        "forbidden" => {
            let status = serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                "message": "tokenreviews.authentication.k8s.io is forbidden", "reason": "Forbidden", "code": 403});
            return (StatusCode::FORBIDDEN, axum::Json(status)).into_response();
        }
        _ => return StatusCode::INTERNAL_SERVER_ERROR.into_response(),
    };
    let answer = serde_json::json!({
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
        "metadata": {}, "spec": review["spec"], "status": status,
    });
    (StatusCode::CREATED, axum::Json(answer)).into_response()
}

struct Cluster {
    calls: Arc<AtomicUsize>,
    kubeconfig: std::path::PathBuf,
    _dir: tempfile::TempDir,
    _task: tokio::task::JoinHandle<()>,
}

fn kubeconfig(dir: &std::path::Path, server: &str) -> std::path::PathBuf {
    let path = dir.join("kubeconfig");
    let text = format!(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\nclusters:\n- name: k\n  cluster: {{server: \"{server}\"}}\n\
         users:\n- name: u\n  user: {{token: reviewer-token}}\ncontexts:\n- name: c\n  context: {{cluster: k, user: u}}\n"
    );
    std::fs::write(&path, text).unwrap();
    path
}

async fn cluster() -> Cluster {
    let calls = Arc::new(AtomicUsize::new(0));
    let app = Router::new()
        .route("/apis/authentication.k8s.io/v1/tokenreviews", post(tokenreviews))
        .with_state(Arc::clone(&calls));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = kubeconfig(dir.path(), &format!("http://{addr}"));
    Cluster { calls, kubeconfig, _dir: dir, _task: task }
}

async fn reviewer(c: &Cluster) -> TokenReviewer {
    TokenReviewer::from_kubeconfig("https://issuer.example", AUDIENCE, &c.kubeconfig).await.unwrap()
}

#[tokio::test]
async fn an_authenticated_token_is_granted_once_then_from_the_cache() {
    let c = cluster().await;
    let r = reviewer(&c).await;
    assert_eq!(r.review("alive-1", USER, UID, true).await, Ok(false));
    assert_eq!(r.review("alive-1", USER, UID, true).await, Ok(true));
    assert_eq!(c.calls.load(Ordering::SeqCst), 1);
    // Uncached (a token bound to a Secret, whose deletion registry-auth does not see): the
    // cluster is asked every time, and nothing is kept.
    assert_eq!(r.review("alive-x", USER, UID, false).await, Ok(false));
    assert_eq!(r.review("alive-x", USER, UID, false).await, Ok(false));
    assert_eq!(c.calls.load(Ordering::SeqCst), 3);

    // Sixteen concurrent reviews of a new token: one round trip.
    let r = Arc::new(r);
    let tasks: Vec<_> = (0..16)
        .map(|_| {
            let r = Arc::clone(&r);
            tokio::spawn(async move { r.review("alive-2", USER, UID, true).await })
        })
        .collect();
    for t in tasks {
        assert!(t.await.unwrap().is_ok());
    }
    assert_eq!(c.calls.load(Ordering::SeqCst), 4);
}

#[tokio::test]
async fn what_the_cluster_does_not_vouch_for_is_rejected_with_its_reason() {
    let c = cluster().await;
    let r = reviewer(&c).await;
    let rejected = |token: &'static str, expected: &'static str| {
        let r = &r;
        async move {
            match r.review(token, USER, UID, true).await {
                Err(ReviewError::Rejected(m)) => assert!(m.contains(expected), "{token}: {m}"),
                other => panic!("{token}: {other:?}"),
            }
        }
    };
    rejected("deleted-pod", "not found").await;
    rejected("other-user", "team-b").await;
    rejected("other-uid", "another-uid").await;
    rejected("other-audience", "elsewhere").await;
    // A rejection is cached too: the cluster is not asked again for the same token.
    let before = c.calls.load(Ordering::SeqCst);
    rejected("deleted-pod", "not found").await;
    assert_eq!(c.calls.load(Ordering::SeqCst), before);
}

#[tokio::test]
async fn no_answer_fails_closed_and_is_not_cached() {
    let c = cluster().await;
    let r = reviewer(&c).await;
    for _ in 0..2 {
        match r.review("forbidden", USER, UID, true).await {
            Err(ReviewError::Unavailable(m)) => assert!(m.contains("403") && m.contains("auth-delegator"), "{m}"),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(c.calls.load(Ordering::SeqCst), 2, "failures are asked again");
    assert!(matches!(r.review("server-error", USER, UID, true).await, Err(ReviewError::Unavailable(_))));

    // Nobody listening.
    let dir = tempfile::tempdir().unwrap();
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let path = kubeconfig(dir.path(), &format!("http://{closed}"));
    let r = TokenReviewer::from_kubeconfig("https://issuer.example", AUDIENCE, &path).await.unwrap();
    assert!(matches!(r.review("alive-3", USER, UID, true).await, Err(ReviewError::Unavailable(_))));
}

#[tokio::test]
async fn a_kubeconfig_without_a_usable_context_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        ("current-context: c\ncontexts: []\nclusters: []\nusers: []\n", "current-context \"c\": no such context"),
        ("contexts:\n- name: c\n  context: {cluster: k}\n", "current-context: not set"),
        (
            "current-context: c\ncontexts:\n- name: c\n  context: {cluster: k, user: u}\nclusters: []\n",
            "cluster \"k\": no such cluster",
        ),
        ("current-context: [", ""),
    ];
    for (i, (text, expected)) in cases.iter().enumerate() {
        let path = dir.path().join(format!("k{i}"));
        std::fs::write(&path, text).unwrap();
        let err = TokenReviewer::from_kubeconfig("https://issuer.example", AUDIENCE, &path).await.unwrap_err();
        let err = err.to_string();
        assert!(err.starts_with("--token-review-kubeconfig ") && err.contains(expected), "{text}: {err}");
    }
}
