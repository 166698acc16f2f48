//! A part of the cluster as data: its name, program and command line (for podpass's own
//! daemons built from their flag types, [`super::command_line`]), its log, what it waits
//! for before it counts as up, its checklist line, its restart policy and the parts it
//! needs. `up` builds these from its flags and hands them to [`launch`], which starts each
//! under the supervisor; adding a node or a controller is adding an entry.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Result, bail};

use super::api::Api;
use super::checklist::Checklist;
use super::supervisor::Supervisor;
use super::wait;

/// What a part answers once it is up.
pub(super) enum Readiness {
    /// The control plane's `/readyz`, through the data dir's admin kubeconfig.
    ApiServer {
        /// The cluster's data directory.
        data: PathBuf,
    },
    /// `GET url` answers 200.
    Healthz {
        /// Its health URL.
        url: String,
    },
    /// `GET url` answers 401 with a Bearer challenge: a registry with token auth.
    TokenChallenge {
        /// Its `/v2/`.
        url: String,
    },
    /// containerd's CRI answers Version.
    Cri {
        /// The CRI endpoint.
        endpoint: String,
    },
    /// A Lease held, and renewed within its duration: a leader elected.
    Lease {
        /// The Lease's API path.
        path: String,
    },
    /// A node agent: its own `/healthz` first (its Node may still say Ready from an earlier
    /// run), then its Node's Ready condition.
    NodeReady {
        /// The agent's health URL.
        healthz: String,
        /// The Node's name.
        node: String,
    },
}

/// What probes run with: once the control plane is up (its CA written), the cluster's
/// HTTPS client and its API.
pub(super) struct Probes<'a> {
    /// Trusts the cluster CA.
    pub client: Option<&'a reqwest::Client>,
    /// The control plane (for a node's Ready condition).
    pub api: Option<&'a Api>,
}

impl Readiness {
    /// Whether the part is up, with what it said (containerd's name and version); `None`
    /// while it is not.
    pub(super) async fn probe(&self, p: &Probes<'_>) -> Option<String> {
        match self {
            Readiness::ApiServer { data } => {
                let api = Api::from_data_dir(data).ok()?;
                matches!(api.get("/readyz").await, Ok((200, _))).then(String::new)
            }
            Readiness::Healthz { url } => {
                let r = p.client?.get(url).send().await.ok()?;
                (r.status() == 200).then(String::new)
            }
            Readiness::TokenChallenge { url } => {
                let r = p.client?.get(url).send().await.ok()?;
                let challenge = r.headers().get("www-authenticate")?.to_str().ok()?.to_owned();
                (r.status() == 401 && challenge.starts_with("Bearer ")).then_some(challenge)
            }
            Readiness::Cri { endpoint } => {
                let cri = podpass_node::runtime::CriRuntime::connect(endpoint).await.ok()?;
                let v = cri.version().await.ok()?;
                Some(format!("{} {}", v.runtime_name, v.runtime_version))
            }
            Readiness::Lease { path } => {
                let (code, lease) = p.api?.get(path).await.ok()?;
                let holder = lease["spec"]["holderIdentity"].as_str().filter(|h| !h.is_empty())?;
                let renewed = lease["spec"]["renewTime"].as_str()?.parse::<jiff::Timestamp>().ok()?;
                let duration = lease["spec"]["leaseDurationSeconds"].as_i64().unwrap_or(15);
                let fresh = jiff::Timestamp::now().as_second() - renewed.as_second() <= duration;
                (code == 200 && fresh).then(|| holder.to_owned())
            }
            Readiness::NodeReady { healthz, node } => {
                let health = p.client?.get(healthz).send().await.ok()?;
                if health.status() != 200 {
                    return None;
                }
                let (code, n) = p.api?.get(&format!("/api/v1/nodes/{node}")).await.ok()?;
                let conditions = n["status"]["conditions"].as_array()?;
                let ready = conditions.iter().any(|c| c["type"] == "Ready" && c["status"] == "True");
                (code == 200 && ready).then(String::new)
            }
        }
    }
}

/// What the supervisor does when a part exits once the cluster is up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Restart {
    /// Start it again after a back-off, giving up after too many recent exits.
    Always,
    /// Stop the cluster: the part cannot be replaced (a one-shot).
    Never,
}

/// One part.
pub(super) struct Part {
    /// What the checklist and errors call it (`control plane`, `node node-1`).
    pub name: String,
    /// Its program.
    pub program: PathBuf,
    /// Its arguments.
    pub args: Vec<String>,
    /// Its log file.
    pub log: PathBuf,
    /// What it answers once up.
    pub ready: Readiness,
    /// The checklist's "waiting for …" while it comes up.
    pub waiting_for: String,
    /// Its restart policy.
    pub restart: Restart,
    /// The parts that must be up before it starts.
    pub after: Vec<String>,
}

/// Starts `part` under the supervisor once every part it needs runs, and waits until it is
/// up; what its probe said, and when it began (for the checklist's done line).
pub(super) async fn launch(
    part: &Part,
    parts: &mut Supervisor,
    out: &mut Checklist,
    probes: &Probes<'_>,
) -> Result<(String, Instant)> {
    let began = Instant::now();
    if let Some(missing) = part.after.iter().find(|needed| !parts.runs(needed)) {
        bail!("{} needs {missing}, which is not running", part.name);
    }
    parts.spawn_with(&part.name, &part.program, &part.args, part.log.clone(), part.restart)?;
    out.waiting(&part.name, &part.waiting_for);
    let said = wait(parts, &part.name, || part.ready.probe(probes)).await?;
    Ok((said, began))
}
