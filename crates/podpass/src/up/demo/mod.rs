//! `podpass up --demo`: the story of what podpass is for, on the running cluster, each step
//! a line a person can read and a check that fails loudly if the product misbehaves.
//!
//! 1. An image is pushed to `team-a/app` with a token registry-auth granted a service
//!    account (no registry password anywhere).
//! 2. A team-a pod without a pull secret is prepared: node-1 pulled the image with the
//!    pod's own service-account identity (registry-auth's audit names it); on a node that
//!    runs containers, its container prints its own token's claims (read via `pods/log`).
//! 3. A team-b pod on the same image is refused: the image is on the node, but team-b's
//!    credentials must prove access (ensure secret pulled images) and they cannot; its
//!    container never starts.
//! 4. The pod's token file on the node, and its claims (bound to the pod and the node).
//! 5. The pull record: who may use the image.
//! 6. Deleting the pods: volumes removed, no pull left in progress, the record kept.
//! 7. The same with Deployments ([`deployments`], steps 7–9): each replica pulls as its
//!    own service account, a new version rolls out under the same identity, and team-b's
//!    Deployment on team-a's image never runs a pod.

mod deployments;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};

use serde_json::{Value, json};

use super::files::{AUDIENCE, PUBLISHER, REGISTRY_SERVICE};
use super::{NODE, Running, checklist::Checklist, push};

/// How long a pod may take to be prepared, refused or removed.
const STEP_TIMEOUT: Duration = Duration::from_secs(90);
/// The demo's repository, tag and namespaces.
const REPO: &str = "team-a/app";
const TEAMS: [&str; 2] = ["team-a", "team-b"];

/// Runs the story; the first step that does not hold ends it with an error saying what.
pub async fn run(r: &Running, out: &mut Checklist) -> Result<()> {
    let image = format!("{}/{REPO}:v1", r.registry_host);
    out.say("demo: a pod pulls its image with its own identity; a neighbour cannot use it");
    setup(r).await?;
    let pushed = push_as_publisher(r, &image, out).await?;
    let a = team_a_pulls(r, &image, out).await?;
    team_b_is_refused(r, &image, out).await?;
    let uid = a["metadata"]["uid"].as_str().context("team-a's pod has no uid")?.to_owned();
    show_token(r, &uid, out)?;
    let record_path = show_record(r, &pushed, out).await?;
    delete_pods(r, &uid, &record_path, out).await?;
    deployments::run(r, out).await
}

/// Step 1: Pushes the demo image as the publisher service account.
async fn push_as_publisher(r: &Running, image: &str, out: &mut Checklist) -> Result<push::Pushed> {
    let sa_token = token_request(r, PUBLISHER.0, PUBLISHER.1).await?;
    let client = r.http.clone();
    let scope = format!("repository:{REPO}:pull,push");
    let bearer = push::registry_token(&client, &r.auth_url, REGISTRY_SERVICE, &scope, &sa_token).await?;
    let busybox = match r.runtime {
        Some(_) => Some(std::fs::read("/bin/busybox").context("reading /bin/busybox")?),
        None => None,
    };
    let pushed =
        push::push(&client, &r.registry_url, &bearer, REPO, "v1", "hello from team-a\n", busybox.as_deref()).await?;
    out.say(&format!("  1. pushed {image} as {}/{}: registry-auth traded its service-account token for a push token (no registry password)", PUBLISHER.0, PUBLISHER.1));
    out.say(&format!("       image {}  manifest {}", short(&pushed.image_id), short(&pushed.manifest_digest)));

    Ok(pushed)
}

/// Step 2: team-a's pod, no pull secret, pulls with its own identity (and, on a node that runs
/// containers, prints its own token's claims); the pod.
async fn team_a_pulls(r: &Running, image: &str, out: &mut Checklist) -> Result<Value> {
    let audit_from = audit(&r.auth_audit).len();
    let a = create_pod(r, "team-a", image, "Always").await?;
    let pod = wait_pod(r, "team-a", |p| prepared(p) == Some("True") || refused(p).is_some()).await?;
    if let Some(why) = refused(&pod) {
        bail!("team-a's pod was refused its own image: {why}");
    }
    let reasons = event_reasons(r, "team-a", "app").await?;
    ensure!(reasons.iter().any(|x| x == "Pulled"), "no Pulled event for team-a/app (events: {reasons:?})");
    let grants: Vec<Value> = audit(&r.auth_audit)[audit_from..]
        .iter()
        .filter(|l| l["service_account"] == "team-a/app" && l["decision"] == "granted")
        .cloned()
        .collect();
    let grant = grants
        .iter()
        .find(|l| l["scope_granted"].as_str().is_some_and(|s| s.contains(&format!("repository:{REPO}:pull"))))
        .with_context(|| format!("registry-auth's audit shows no pull of {REPO} granted to team-a/app"))?;
    out.say(&format!(
        "  2. pod team-a/app (service account team-a/app, no pull secret) pulled {image} with its own identity"
    ));
    out.say(&format!(
        "       {NODE} ran podpass-credential-provider with the pod's service-account token (audience {AUDIENCE});"
    ));
    out.say(&format!(
        "       registry-auth granted {} to team-a/app (pod {}, node {})",
        grant["scope_granted"].as_str().unwrap_or_default(),
        grant["pod"].as_str().unwrap_or_default(),
        grant["node"].as_str().unwrap_or_default(),
    ));

    // 2b. On a node that runs containers: team-a's container runs, and prints its own
    // token's claims (read back as `kubectl logs` does, through the API server).
    if r.runtime.is_some() {
        wait_pod(r, "team-a", |p| p["status"]["phase"] == "Running").await?;
        let claims = container_claims(r).await?;
        ensure!(
            claims["kubernetes.io"]["pod"]["uid"] == a["metadata"]["uid"],
            "the container printed another pod's token: {claims}"
        );
        out.say(&format!(
            "       its container runs and printed its own token's claims (kubectl logs -n team-a app): sub {}, pod {}",
            claims["sub"].as_str().unwrap_or_default(),
            claims["kubernetes.io"]["pod"]["name"].as_str().unwrap_or_default(),
        ));
    }

    Ok(a)
}

/// Step 3: team-b's pod on the same image is refused; its container never starts.
async fn team_b_is_refused(r: &Running, image: &str, out: &mut Checklist) -> Result<()> {
    let audit_from = audit(&r.auth_audit).len();
    create_pod(r, "team-b", image, "IfNotPresent").await?;
    let pod = wait_pod(r, "team-b", |p| prepared(p) == Some("True") || refused(p).is_some()).await?;
    let Some(why) = refused(&pod) else {
        bail!("team-b's pod was allowed to use team-a's image: podpass let a neighbour in");
    };
    ensure!(
        pod["status"]["containerStatuses"][0]["containerID"].is_null(),
        "team-b's container was started on team-a's image: {}",
        pod["status"]
    );
    out.say(&format!("  3. pod team-b/app on the same image: refused — {why}; its container never started"));
    out.say(&format!(
        "       the image is on {NODE}, but its pull record does not name team-b: team-b's own credentials must prove access"
    ));
    let denied = audit(&r.auth_audit)[audit_from..]
        .iter()
        .find(|l| l["service_account"] == "team-b/app" && l["decision"] != "granted")
        .cloned();
    match denied {
        Some(l) => out.say(&format!(
            "       registry-auth gave team-b/app {} of {} (policy {}: each namespace pulls <namespace>/*)",
            if l["scope_granted"].as_str().unwrap_or_default().is_empty() { "nothing" } else { "less" },
            l["scope_asked"].as_str().unwrap_or_default(),
            "registry-auth/policy.yaml",
        )),
        None => bail!("registry-auth's audit shows no refusal for team-b/app"),
    }

    Ok(())
}

/// Step 4: The pod's token on the node, and its claims.
fn show_token(r: &Running, uid: &str, out: &mut Checklist) -> Result<()> {
    let token_file = find_token(&r.node_root.join("pods").join(uid))
        .with_context(|| format!("no token file under {}/pods/{uid}", r.node_root.display()))?;
    let claims = unverified_claims(&std::fs::read_to_string(&token_file).context("reading the token file")?)?;
    let k = &claims["kubernetes.io"];
    ensure!(claims["sub"] == "system:serviceaccount:team-a:app", "token subject {}", claims["sub"]);
    ensure!(k["pod"]["uid"] == uid, "token bound to pod {} not {uid}", k["pod"]["uid"]);
    ensure!(k["node"]["name"] == NODE, "token names node {}", k["node"]["name"]);
    out.say(&format!("  4. the pod's token on {NODE}: {}", token_file.display()));
    out.say(&format!(
        "       sub {}  aud {}  valid {}  bound to pod team-a/app ({})  node {}  jti {}",
        claims["sub"].as_str().unwrap_or_default(),
        claims["aud"],
        validity(&claims),
        short(uid),
        k["node"]["name"].as_str().unwrap_or_default(),
        short(claims["jti"].as_str().unwrap_or_default()),
    ));

    Ok(())
}

/// Step 5: The pull record names team-a's service account, with its UID, and not team-b's; its
/// path.
async fn show_record(r: &Running, pushed: &push::Pushed, out: &mut Checklist) -> Result<std::path::PathBuf> {
    let sa = r.api.get_ok("/api/v1/namespaces/team-a/serviceaccounts/app").await?;
    let (record_path, record) = find_record(&r.node_root, &pushed.image_id)?;
    let key = format!("{}/{REPO}", r.registry_host);
    let accounts = &record["credentialMapping"][&key]["kubernetesServiceAccounts"];
    let names: Vec<String> = accounts
        .as_array()
        .map(|a| {
            a.iter()
                .map(|s| format!("{}/{}", s["namespace"].as_str().unwrap_or(""), s["name"].as_str().unwrap_or("")))
                .collect()
        })
        .unwrap_or_default();
    ensure!(
        accounts.as_array().is_some_and(|a| a
            .iter()
            .any(|s| s["namespace"] == "team-a" && s["name"] == "app" && s["uid"] == sa["metadata"]["uid"])),
        "the pull record does not name team-a/app with its UID: {record}"
    );
    ensure!(!names.iter().any(|n| n.starts_with("team-b/")), "the pull record names team-b: {record}");
    out.say(&format!("  5. the pull record {}:", record_path.display()));
    out.say(&format!(
        "       image {} may be used by service accounts {} (uid {}) — nobody else without proving access",
        short(&pushed.image_id),
        names.join(", "),
        short(sa["metadata"]["uid"].as_str().unwrap_or_default()),
    ));

    Ok(record_path)
}

/// Step 6: Deletes the pods: volumes and intents settle, the record stays.
async fn delete_pods(r: &Running, uid: &str, record_path: &std::path::Path, out: &mut Checklist) -> Result<()> {
    for ns in TEAMS {
        r.api.delete(&format!("/api/v1/namespaces/{ns}/pods/app")).await?;
    }
    for ns in TEAMS {
        wait_gone(r, ns).await?;
    }
    ensure!(!r.node_root.join("pods").join(uid).exists(), "team-a's pod volumes are still on the node");
    let pulling = count_files(&r.node_root.join("image_manager/pulling"));
    ensure!(pulling == 0, "{pulling} pull intents left on the node");
    ensure!(record_path.exists(), "the pull record went with the pods");
    out.say("  6. deleted both pods: their volumes are gone, no pull is left in progress, the record stays for team-a's next pod");
    Ok(())
}

/// Namespaces, service accounts and the publisher; pods of an earlier demo removed.
async fn setup(r: &Running) -> Result<()> {
    // The tenants' namespaces hold their pods to the restricted Pod Security Standard (an
    // earlier run's namespaces are labelled too).
    let restricted = json!({"pod-security.kubernetes.io/enforce": "restricted"});
    for ns in TEAMS {
        r.api
            .ensure(
                "/api/v1/namespaces",
                &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns, "labels": restricted}}),
            )
            .await?;
        r.api.merge_patch(&format!("/api/v1/namespaces/{ns}"), &json!({"metadata": {"labels": restricted}})).await?;
        r.api
            .ensure(
                &format!("/api/v1/namespaces/{ns}/serviceaccounts"),
                &json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "app"}}),
            )
            .await?;
        r.api.delete(&format!("/api/v1/namespaces/{ns}/pods/app")).await?;
    }
    r.api
        .ensure(
            &format!("/api/v1/namespaces/{}/serviceaccounts", PUBLISHER.0),
            &json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": PUBLISHER.1}}),
        )
        .await?;
    for ns in TEAMS {
        wait_gone(r, ns).await?;
    }
    deployments::clean(r).await
}

async fn token_request(r: &Running, ns: &str, sa: &str) -> Result<String> {
    let answer = r
        .api
        .post(
            &format!("/api/v1/namespaces/{ns}/serviceaccounts/{sa}/token"),
            &json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                    "spec": {"audiences": [AUDIENCE], "expirationSeconds": 600}}),
        )
        .await?;
    Ok(answer["status"]["token"].as_str().context("TokenRequest answered no token")?.to_owned())
}

async fn create_pod(r: &Running, ns: &str, image: &str, pull_policy: &str) -> Result<Value> {
    r.api
        .post(
            &format!("/api/v1/namespaces/{ns}/pods"),
            &json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "app"},
                    "spec": {"nodeName": NODE, "serviceAccountName": "app", "terminationGracePeriodSeconds": 5,
                             // What the restricted standard asks of a pod.
                             "securityContext": {"runAsNonRoot": true, "runAsUser": 65534,
                                                 "seccompProfile": {"type": "RuntimeDefault"}},
                             "containers": [{"name": "app", "image": image, "imagePullPolicy": pull_policy,
                                             "securityContext": {"allowPrivilegeEscalation": false,
                                                                 "capabilities": {"drop": ["ALL"]}}}]}}),
        )
        .await
}

/// Polls `ns/app` until `done` holds.
async fn wait_pod(r: &Running, ns: &str, done: impl Fn(&Value) -> bool) -> Result<Value> {
    let deadline = Instant::now() + STEP_TIMEOUT;
    loop {
        let pod = r.api.get_ok(&format!("/api/v1/namespaces/{ns}/pods/app")).await?;
        if done(&pod) {
            return Ok(pod);
        }
        if Instant::now() >= deadline {
            bail!("pod {ns}/app did not settle in {} s: status {}", STEP_TIMEOUT.as_secs(), pod["status"]);
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

async fn wait_gone(r: &Running, ns: &str) -> Result<()> {
    let deadline = Instant::now() + STEP_TIMEOUT;
    while r.api.get(&format!("/api/v1/namespaces/{ns}/pods/app")).await?.0 != 404 {
        if Instant::now() >= deadline {
            bail!("pod {ns}/app was not removed in {} s", STEP_TIMEOUT.as_secs());
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    Ok(())
}

/// The claims team-a's container printed (its log's second line), read through the API
/// server's `pods/log`.
async fn container_claims(r: &Running) -> Result<Value> {
    let deadline = Instant::now() + STEP_TIMEOUT;
    loop {
        let text = r.api.get_text("/api/v1/namespaces/team-a/pods/app/log").await.unwrap_or_default();
        if let Some(payload) = text.lines().nth(1) {
            let bytes = data_encoding::BASE64URL_NOPAD
                .decode(payload.trim().as_bytes())
                .with_context(|| format!("the container printed {payload:?}, not a token's claims"))?;
            return serde_json::from_slice(&bytes).context("the token's claims");
        }
        if Instant::now() >= deadline {
            bail!("team-a's container printed no claims in {} s (its log: {text:?})", STEP_TIMEOUT.as_secs());
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The agent's `podpass.dev/Prepared` condition.
fn prepared(pod: &Value) -> Option<&str> {
    pod["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == podpass_node::PREPARED_CONDITION)
        .and_then(|c| c["status"].as_str())
}

/// `ErrImagePull: <message>` when the container waits on a failed pull.
fn refused(pod: &Value) -> Option<String> {
    let waiting = &pod["status"]["containerStatuses"].as_array()?.first()?["state"]["waiting"];
    let reason = waiting["reason"].as_str()?;
    matches!(reason, "ErrImagePull" | "ImagePullBackOff" | "ErrImageNeverPull")
        .then(|| format!("{reason}: {}", waiting["message"].as_str().unwrap_or_default()))
}

async fn event_reasons(r: &Running, ns: &str, pod: &str) -> Result<Vec<String>> {
    let list = r.api.get_ok(&format!("/api/v1/namespaces/{ns}/events")).await?;
    Ok(list["items"]
        .as_array()
        .map(|items| {
            items
                .iter()
                .filter(|e| e["involvedObject"]["name"] == pod)
                .filter_map(|e| e["reason"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default())
}

/// registry-auth's audit decisions (its audit log: one JSON object per line).
fn audit(log: &Path) -> Vec<Value> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .collect()
}

/// The first `token` file under `dir` (the projected service-account volume).
fn find_token(dir: &Path) -> Option<PathBuf> {
    let mut stack = vec![dir.to_path_buf()];
    let mut seen = 0;
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).ok()?.flatten() {
            seen += 1;
            if seen > 10_000 {
                return None;
            }
            let path = entry.path();
            let file_type = entry.file_type().ok()?;
            let name = entry.file_name();
            // `..data` is the atomic writer's current view; its timestamped dirs are the same files.
            if file_type.is_dir() && !name.to_string_lossy().starts_with("..") {
                stack.push(path);
            } else if name == "token" {
                return Some(path);
            }
        }
    }
    None
}

/// `3607 s`, or for a token kube-apiserver extended (`warnafter`), `365 d (extended; warnafter 3607 s)`.
fn validity(claims: &Value) -> String {
    let iat = claims["iat"].as_i64().unwrap_or(0);
    let span = |s: i64| if s >= 86_400 { format!("{} d", s / 86_400) } else { format!("{s} s") };
    let valid = span(claims["exp"].as_i64().unwrap_or(0) - iat);
    match claims["kubernetes.io"]["warnafter"].as_i64() {
        Some(w) => format!("{valid} (extended by kube-apiserver; warnafter {})", span(w - iat)),
        None => valid,
    }
}

/// The claims of a JWT, not verified (the demo shows what the node holds).
fn unverified_claims(token: &str) -> Result<Value> {
    let payload = token.trim().split('.').nth(1).context("the token file holds no JWT")?;
    let bytes = data_encoding::BASE64URL_NOPAD.decode(payload.as_bytes()).context("the token's claims")?;
    serde_json::from_slice(&bytes).context("the token's claims")
}

/// The pull record of `image_id` under the node's root.
fn find_record(root: &Path, image_id: &str) -> Result<(PathBuf, Value)> {
    let dir = root.join("image_manager/pulled");
    for entry in std::fs::read_dir(&dir).with_context(|| format!("reading {}", dir.display()))?.flatten() {
        let Ok(bytes) = std::fs::read(entry.path()) else { continue };
        let Ok(record) = serde_json::from_slice::<Value>(&bytes) else { continue };
        if record["imageRef"] == image_id {
            return Ok((entry.path(), record));
        }
    }
    bail!("no pull record of {image_id} in {}", dir.display())
}

fn count_files(dir: &Path) -> usize {
    std::fs::read_dir(dir).map(|d| d.flatten().count()).unwrap_or(0)
}

/// `sha256:0123456789ab…` → `sha256:0123456789ab`, a UUID → its first group.
fn short(s: &str) -> String {
    match s.strip_prefix("sha256:") {
        Some(hex) => format!("sha256:{}", &hex[..hex.len().min(12)]),
        None => s.split('-').next().unwrap_or(s).to_owned(),
    }
}
