//! The demo's workloads (steps 7–9): the same story told with Deployments, which the
//! controller manager runs as its own service accounts.
//!
//! 7. team-a's Deployment of 2 replicas: each replica's pod pulls the image with team-a's
//!    own service-account identity (registry-auth's audit names each pod).
//! 8. Rolled to a new image version (what `kubectl set image` does): a new ReplicaSet,
//!    revision 2, whose pods pull the new version under the same identity.
//! 9. team-b's Deployment on team-a's image, on a node where a team-a replica pulled it,
//!    never has a running pod: its ReplicaSet keeps its pods, the node refuses each one the
//!    image (its pull record names no team-b credential), and the events say why.
//!
//! On several nodes (`--nodes`), team-a's replicas are spread over two of them.

use std::time::Instant;

use anyhow::{Context, Result, bail, ensure};
use serde_json::{Value, json};

use super::{NODE, REPO, Running, STEP_TIMEOUT, audit, push, refused, short, token_request};
use crate::up::checklist::Checklist;
use crate::up::files::{PUBLISHER, REGISTRY_SERVICE};

/// The Deployments' name, in both namespaces, and their pods' label.
const NAME: &str = "web";
const SELECTOR: &str = "app%3Dweb";

/// A Deployment of `replicas` pods of `image` as service account `app`, as the restricted
/// Pod Security Standard asks.
fn deployment(image: &str, replicas: i64, pull_policy: &str) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": NAME},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": NAME}},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
            "template": {"metadata": {"labels": {"app": NAME}}, "spec": container_spec(image, pull_policy)}}})
}

fn container_spec(image: &str, pull_policy: &str) -> Value {
    json!({"serviceAccountName": "app", "terminationGracePeriodSeconds": 5,
        "securityContext": {"runAsNonRoot": true, "runAsUser": 65534, "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [{"name": "app", "image": image, "imagePullPolicy": pull_policy,
                        "securityContext": {"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}}}]})
}

/// Deletes an earlier run's Deployments and waits until their pods are gone.
pub(super) async fn clean(r: &Running) -> Result<()> {
    for ns in super::TEAMS {
        r.api.delete(&format!("/apis/apps/v1/namespaces/{ns}/deployments/{NAME}")).await?;
    }
    for ns in super::TEAMS {
        wait(&format!("the pods of {ns}/{NAME} gone"), || async { Ok(pods(r, ns).await?.is_empty().then_some(())) })
            .await?;
    }
    Ok(())
}

/// Polls `check` until it answers, for at most [`STEP_TIMEOUT`].
async fn wait<T, F, Fut>(what: &str, mut check: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Option<T>>>,
{
    let deadline = Instant::now() + STEP_TIMEOUT;
    loop {
        if let Some(v) = check().await? {
            return Ok(v);
        }
        if Instant::now() >= deadline {
            bail!("{what}: not within {} s", STEP_TIMEOUT.as_secs());
        }
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
}

/// The Deployment's pods in `ns` (not being deleted).
async fn pods(r: &Running, ns: &str) -> Result<Vec<Value>> {
    let list = r.api.get_ok(&format!("/api/v1/namespaces/{ns}/pods?labelSelector={SELECTOR}")).await?;
    let items = list["items"].as_array().cloned().unwrap_or_default();
    Ok(items.into_iter().filter(|p| p["metadata"]["deletionTimestamp"].is_null()).collect())
}

/// Waits until team-a's Deployment has rolled out (every replica updated and available,
/// its generation observed), as `kubectl rollout status` waits.
async fn rolled_out(r: &Running) -> Result<Value> {
    let path = format!("/apis/apps/v1/namespaces/team-a/deployments/{NAME}");
    wait("team-a's Deployment rolled out", || async {
        let d = r.api.get_ok(&path).await?;
        let (spec, status) = (&d["spec"], &d["status"]);
        let done = status["observedGeneration"].as_i64() >= d["metadata"]["generation"].as_i64()
            && status["updatedReplicas"] == spec["replicas"]
            && status["availableReplicas"] == spec["replicas"]
            && status["replicas"] == spec["replicas"];
        Ok(done.then_some(d))
    })
    .await
}

/// The running pods of the ReplicaSet named in the rolled-out Deployment's `Progressing`
/// condition, and that set's name.
async fn new_set_pods(r: &Running, d: &Value) -> Result<(String, Vec<Value>)> {
    let conditions = d["status"]["conditions"].as_array().cloned().unwrap_or_default();
    let progressing = conditions.iter().find(|c| c["type"] == "Progressing").context("no Progressing condition")?;
    let message = progressing["message"].as_str().unwrap_or_default();
    let set = message.split('"').nth(1).context("the Progressing condition names no ReplicaSet")?.to_owned();
    let owned: Vec<Value> = pods(r, "team-a")
        .await?
        .into_iter()
        .filter(|p| p["metadata"]["ownerReferences"][0]["name"] == set.as_str() && p["status"]["phase"] == "Running")
        .collect();
    Ok((set, owned))
}

/// registry-auth's grants of team-a's repository to team-a/app for each of `pods`, from
/// audit line `from` on.
fn grants_for(r: &Running, from: usize, pods: &[Value]) -> Result<Vec<String>> {
    let lines = audit(&r.auth_audit);
    let mut shown = Vec::new();
    for pod in pods {
        let name = pod["metadata"]["name"].as_str().unwrap_or_default();
        let grant = lines.get(from..).unwrap_or_default().iter().find(|l| {
            l["service_account"] == "team-a/app"
                && l["decision"] == "granted"
                && l["pod"] == format!("team-a/{name}")
                && l["scope_granted"].as_str().is_some_and(|s| s.contains(&format!("repository:{REPO}:pull")))
        });
        ensure!(grant.is_some(), "registry-auth's audit shows no pull of {REPO} granted to team-a/app for pod {name}");
        shown.push(name.to_owned());
    }
    Ok(shown)
}

/// Steps 7–9.
pub(super) async fn run(r: &Running, out: &mut Checklist) -> Result<()> {
    let v1 = format!("{}/{REPO}:v1", r.registry_host);
    let v2 = format!("{}/{REPO}:v2", r.registry_host);
    // 7. team-a's Deployment: each replica pulls as team-a/app.
    let from = audit(&r.auth_audit).len();
    let api_from = audit(&r.api_audit).len();
    r.api.post("/apis/apps/v1/namespaces/team-a/deployments", &deployment(&v1, 2, "Always")).await?;
    let d = rolled_out(r).await?;
    let (first_set, first_pods) = new_set_pods(r, &d).await?;
    ensure!(first_pods.len() == 2, "team-a's Deployment runs {} pods, not 2", first_pods.len());
    let names = grants_for(r, from, &first_pods)?;
    let node_of = |p: &Value| p["spec"]["nodeName"].as_str().unwrap_or_default().to_owned();
    let first_nodes: Vec<String> = first_pods.iter().map(node_of).collect();
    // More than one node: the scheduler spreads a ReplicaSet's pods (PodTopologySpread's
    // system defaults), so the two replicas pull on two nodes, each as itself.
    if r.nodes.len() > 1 {
        ensure!(first_nodes[0] != first_nodes[1], "both of team-a's replicas went to {}", first_nodes[0]);
    }
    // The pods were created by the ReplicaSet controller's own identity (the API server's
    // audit), so they passed authentication, RBAC and admission as anyone's.
    let creators: Vec<String> = audit(&r.api_audit)
        .get(api_from..)
        .unwrap_or_default()
        .iter()
        .filter(|e| e["verb"] == "create" && e["stage"] == "ResponseComplete" && e["responseStatus"]["code"] == 201)
        .filter(|e| e["objectRef"]["resource"] == "pods" && e["objectRef"]["namespace"] == "team-a")
        .filter_map(|e| e["user"]["username"].as_str().map(str::to_owned))
        .collect();
    let controller = "system:serviceaccount:kube-system:replicaset-controller";
    ensure!(
        creators.iter().filter(|u| *u == controller).count() >= 2,
        "the API server's audit shows team-a's pods created by {creators:?}, not {controller}"
    );
    out.say(&format!(
        "  7. deployment team-a/{NAME} (2 replicas, service account team-a/app): ReplicaSet {first_set}, whose pods {controller} created (logs/apiserver-audit.log)"
    ));
    let placed: Vec<String> = names.iter().zip(&first_nodes).map(|(pod, node)| format!("{pod} (on {node})")).collect();
    out.say(&format!(
        "       each replica's pod pulled {v1} with team-a's own identity: registry-auth granted repository:{REPO}:pull to team-a/app for pods {}",
        placed.join(" and ")
    ));

    // 8. A new version, rolled out as `kubectl set image` does; the same identity pulls it.
    let sa_token = token_request(r, PUBLISHER.0, PUBLISHER.1).await?;
    let scope = format!("repository:{REPO}:pull,push");
    let bearer = push::registry_token(&r.http, &r.auth_url, REGISTRY_SERVICE, &scope, &sa_token).await?;
    let busybox = match r.runtime {
        Some(_) => Some(std::fs::read("/bin/busybox").context("reading /bin/busybox")?),
        None => None,
    };
    let pushed =
        push::push(&r.http, &r.registry_url, &bearer, REPO, "v2", "hello from team-a, v2\n", busybox.as_deref())
            .await?;
    let from = audit(&r.auth_audit).len();
    let patch = json!({"spec": {"template": {"spec": container_spec(&v2, "Always")}}});
    r.api.merge_patch(&format!("/apis/apps/v1/namespaces/team-a/deployments/{NAME}"), &patch).await?;
    let d = rolled_out(r).await?;
    let (second_set, second_pods) = new_set_pods(r, &d).await?;
    ensure!(second_set != first_set, "the new image made no new ReplicaSet");
    ensure!(second_pods.len() == 2, "the rolled-out Deployment runs {} pods, not 2", second_pods.len());
    let revision =
        d["metadata"]["annotations"]["deployment.kubernetes.io/revision"].as_str().unwrap_or_default().to_owned();
    ensure!(revision == "2", "the rollout is revision {revision:?}, not 2");
    let names = grants_for(r, from, &second_pods)?;
    let left = pods(r, "team-a").await?;
    ensure!(
        left.iter().all(|p| p["metadata"]["ownerReferences"][0]["name"] != first_set.as_str()),
        "pods of the old ReplicaSet {first_set} are still running"
    );
    out.say(&format!(
        "  8. rolled to {v2} (image {}): ReplicaSet {second_set}, revision 2 (kubectl rollout history deployment/{NAME} -n team-a)",
        short(&pushed.image_id)
    ));
    out.say(&format!("       its pods {} pulled v2 as team-a/app too; the old pods are gone", names.join(" and ")));

    // 9. team-b's Deployment on team-a's image, on a node where that image already is:
    // never a running pod.
    // Another node than node-1 (where steps 2–3 told it) when there is one.
    let target =
        first_nodes.iter().find(|n| *n != NODE).or(first_nodes.first()).cloned().unwrap_or_else(|| NODE.to_owned());
    let mut team_b = deployment(&v1, 1, "IfNotPresent");
    team_b["spec"]["template"]["spec"]["nodeSelector"] = json!({"kubernetes.io/hostname": target});
    r.api.post("/apis/apps/v1/namespaces/team-b/deployments", &team_b).await?;
    let (pod, why) = wait("team-b's Deployment's pod refused its image", || async {
        let pods = pods(r, "team-b").await?;
        Ok(pods.into_iter().find_map(|p| refused(&p).map(|why| (p, why))))
    })
    .await?;
    let all = pods(r, "team-b").await?;
    ensure!(
        all.iter().all(|p| p["status"]["containerStatuses"][0]["containerID"].is_null()),
        "a container of team-b's Deployment was started on team-a's image"
    );
    let d = r.api.get_ok(&format!("/apis/apps/v1/namespaces/team-b/deployments/{NAME}")).await?;
    ensure!(
        d["status"]["availableReplicas"].as_i64().unwrap_or(0) == 0,
        "team-b's Deployment has an available replica"
    );
    let name = pod["metadata"]["name"].as_str().unwrap_or_default();
    let on = pod["spec"]["nodeName"].as_str().unwrap_or_default();
    ensure!(on == target, "team-b's pod ran on {on}, not {target}");
    out.say(&format!(
        "  9. deployment team-b/{NAME} on {v1}, on {on} where team-a's replica pulled it: its ReplicaSet keeps pod {name}, which never runs — {why}"
    ));
    out.say("       (kubectl describe deployment/web -n team-b: 0 available; the pod's events say why)");
    clean(r).await
}
