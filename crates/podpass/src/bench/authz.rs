//! The authorization phase of `podpass bench apiserver`: SelfSubjectAccessReviews by a user
//! whose access comes from one RoleBinding, with 10 and with 10 000 RoleBindings in its
//! namespace. RBAC decisions come from an index by subject, so the two should cost the same
//! (upstream's authorizer walks every binding in scope).

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use serde_json::json;

use super::{Backing, Phase, run_phase, start};
use crate::bench::http;

const USER_TOKEN: &str = "bench-user-token-for-the-authorization-phase";
const SSAR_PATH: &str = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews";
/// Connections creating the bindings.
const WRITERS: usize = 16;

/// Starts a server whose namespace `bench` holds `bindings` RoleBindings, one of them
/// granting `bench-user` `get configmaps`; measures its SelfSubjectAccessReviews.
async fn with_bindings(
    data_dir: &std::path::Path,
    bindings: usize,
    clients: usize,
    phase: Duration,
    store: &Backing,
) -> Result<Phase> {
    let dir = data_dir.join(format!("authz-{bindings}"));
    // Private, as the server asks of its --data-dir (it warns otherwise).
    std::os::unix::fs::DirBuilderExt::mode(std::fs::DirBuilder::new().recursive(true), 0o700)
        .create(&dir)
        .with_context(|| format!("creating {}", dir.display()))?;
    let admin = format!("bench-admin-{}", std::process::id());
    std::fs::write(
        dir.join("tokens.csv"),
        format!("{admin},admin,admin-uid,\"system:masters\"\n{USER_TOKEN},bench-user,bench-user-uid,\"\"\n"),
    )
    .context("writing the bench token file")?;
    let (api, _) = start(&dir, 0, super::DEFAULT_TOKEN_SUCCESS_CACHE_TTL, store).await?;
    let mut conn = api.connect().await?;
    let role = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "reader"},
        "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}]});
    api.ensure(&mut conn, "/apis/rbac.authorization.k8s.io/v1/namespaces/bench/roles", &role).await?;
    // Bindings for other users, and the bench user's in the middle of them (by name).
    let api = Arc::new(api);
    let mut writers = Vec::new();
    for w in 0..WRITERS {
        let api = Arc::clone(&api);
        writers.push(tokio::spawn(async move {
            let mut conn = api.connect().await?;
            for i in (w..bindings).step_by(WRITERS) {
                let user = if i == bindings / 2 { "bench-user".to_owned() } else { format!("user-{i}") };
                let binding = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                    "metadata": {"name": format!("binding-{i:05}")},
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "reader"},
                    "subjects": [{"kind": "User", "name": user}]});
                api.ensure(&mut conn, "/apis/rbac.authorization.k8s.io/v1/namespaces/bench/rolebindings", &binding)
                    .await?;
            }
            anyhow::Ok(())
        }));
    }
    for w in writers {
        w.await.context("a binding writer panicked")??;
    }
    let user = api.as_user(USER_TOKEN);
    let review = json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
        "spec": {"resourceAttributes": {"namespace": "bench", "verb": "get", "resource": "configmaps", "name": "x"}}})
    .to_string();
    // The user really is allowed (and the answer says so) before anything is timed.
    let mut conn = user.connect().await?;
    let answer = conn.round_trip(&http::post(&user.host, SSAR_PATH, USER_TOKEN, &review)).await?;
    if !String::from_utf8_lossy(&answer.body).contains("\"allowed\":true") {
        bail!("SelfSubjectAccessReview of the bench user: {}", String::from_utf8_lossy(&answer.body));
    }
    run_phase(&user, clients, phase, |_| (SSAR_PATH, review.clone()), b"\"allowed\":true").await
}

/// Runs the phase with 10 and 10 000 RoleBindings and prints both and their ratio.
pub(super) async fn authz_phase(
    data_dir: &std::path::Path,
    clients: usize,
    phase: Duration,
    store: &Backing,
) -> Result<()> {
    let few = with_bindings(data_dir, 10, clients, phase, store).await?;
    let many = with_bindings(data_dir, 10_000, clients, phase, store).await?;
    for (n, p) in [(10, &few), (10_000, &many)] {
        outln!(
            "RBAC SelfSubjectAccessReview, {n:>6} RoleBindings {:>9.0} reviews/s  p50 {:.2} ms  p99 {:.2} ms",
            p.rate(),
            p.percentile_ms(0.50),
            p.percentile_ms(0.99)
        );
    }
    outln!("10 000 RoleBindings / 10: {:.2}x the throughput", many.rate() / few.rate());
    Ok(())
}
