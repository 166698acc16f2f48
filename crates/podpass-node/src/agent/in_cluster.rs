//! In-cluster access to the API server, as `rest.InClusterConfig()` expects it: every
//! container gets the `kubernetes` Service's environment (kubelet `getServiceEnvVarMap`:
//! `KUBERNETES_SERVICE_HOST`/`_PORT`/`_PORT_HTTPS` and the docker-link `KUBERNETES_PORT*`
//! variables), and the Service's address answers inside each pod's own network namespace.
//!
//! podpass has no kube-proxy and pods have loopback only, so the node does what kube-proxy
//! would for this one Service: it puts the cluster IP on the pod namespace's `lo` and listens
//! there on the Service's port, and every connection is relayed, byte for byte, to the API
//! server as the node reaches it. TLS runs end to end between the client and the API
//! server (whose certificate names the cluster IP and `kubernetes.default.svc`), so no
//! credential crosses the relay in clear and the relay can read nothing. The relay's
//! listener is bound before any container starts, so no container can take the address.
//!
//! The API server's own address (as the node reaches it) answers in the pod too, through the
//! same relay: it is the service-account issuer and its `jwks_uri` unless the API server is
//! told otherwise, and a token's `iss` must be reachable from the pod that holds it (upstream
//! conformance: "ServiceAccountIssuerDiscovery should support OIDC discovery of service
//! account issuer"). Inside the pod `https://127.0.0.1:<port>` would otherwise be the pod's
//! own loopback; so every verifier, in a pod or outside, reads the same `iss`, discovery
//! document and keys. That port of the pod's loopback is taken by the relay.
//!
//! A `hostNetwork` pod is in the node's namespace: its variables name the API server's own
//! address instead. A relay ends when its namespace is gone (the sandbox stopped).

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::Semaphore;

use crate::runtime::KeyValue;

/// Connections one pod may have relayed at once; more are closed at once.
pub(crate) const MAX_CONNECTIONS_PER_POD: usize = 64;
/// How often a relay checks that its namespace still exists.
const NETNS_CHECK: Duration = Duration::from_secs(5);
/// How long a relay waits after a failed accept.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);
/// How long connecting to the API server may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// The Service's name and namespace.
const SERVICE: (&str, &str) = ("default", "kubernetes");

/// Where clients reach the API server: the Service's address inside pods, the API server's
/// own for `hostNetwork` pods.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ServiceAddress {
    /// `spec.clusterIP`.
    pub ip: Ipv4Addr,
    /// The port named `https` (else the first).
    pub port: u16,
}

/// The node's in-cluster access: the Service (read once it exists) and one relay per
/// sandbox.
pub(crate) struct InCluster {
    client: kube::Client,
    /// The API server as the node reaches it.
    upstream: SocketAddr,
    service: tokio::sync::Mutex<Option<ServiceAddress>>,
    relays: Mutex<HashMap<String, tokio::task::JoinHandle<()>>>,
}

impl std::fmt::Debug for InCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InCluster").field("upstream", &self.upstream).finish_non_exhaustive()
    }
}

/// The variables kubelet's `FromServices` makes of one Service named `kubernetes`.
pub(crate) fn service_env(host: &str, port: u16) -> Vec<KeyValue> {
    let url = format!("tcp://{host}:{port}");
    let prefix = format!("KUBERNETES_PORT_{port}_TCP");
    [
        ("KUBERNETES_SERVICE_HOST".to_owned(), host.to_owned()),
        ("KUBERNETES_SERVICE_PORT".to_owned(), port.to_string()),
        ("KUBERNETES_SERVICE_PORT_HTTPS".to_owned(), port.to_string()),
        ("KUBERNETES_PORT".to_owned(), url.clone()),
        (prefix.clone(), url),
        (format!("{prefix}_PROTO"), "tcp".to_owned()),
        (format!("{prefix}_PORT"), port.to_string()),
        (format!("{prefix}_ADDR"), host.to_owned()),
    ]
    .into_iter()
    .map(|(key, value)| KeyValue { key, value })
    .collect()
}

impl InCluster {
    /// In-cluster access relaying to `upstream`, reading the Service through `client`.
    pub(crate) fn new(client: kube::Client, upstream: SocketAddr) -> Arc<Self> {
        Arc::new(Self { client, upstream, service: tokio::sync::Mutex::default(), relays: Mutex::default() })
    }

    /// The `kubernetes` Service's address, read once it exists (its cluster IP is fixed once
    /// set); `None` while it does not — pods then get no variables, as the kubelet's.
    pub(crate) async fn service(&self) -> Option<ServiceAddress> {
        let mut known = self.service.lock().await;
        if known.is_none() {
            let api: kube::Api<k8s_openapi::api::core::v1::Service> =
                kube::Api::namespaced(self.client.clone(), SERVICE.0);
            match api.get_opt(SERVICE.1).await {
                Ok(Some(svc)) => *known = address_of(&svc),
                Ok(None) => tracing::warn!(
                    "the default/kubernetes Service does not exist yet: pods get no KUBERNETES_SERVICE_HOST"
                ),
                Err(e) => tracing::warn!(error = %e, "reading the default/kubernetes Service"),
            }
        }
        *known
    }

    /// The variables of a container of a pod (`host_network`: the node's namespace).
    pub(crate) async fn env(&self, host_network: bool) -> Vec<KeyValue> {
        match (self.service().await, host_network) {
            (None, _) => Vec::new(),
            (Some(_), true) => service_env(&self.upstream.ip().to_string(), self.upstream.port()),
            (Some(s), false) => service_env(&s.ip.to_string(), s.port),
        }
    }

    /// Makes the Service's address and the API server's own answer inside sandbox
    /// `sandbox`'s namespace at `netns`, once: a relay already running for it is kept. An
    /// address that cannot answer is reported; the others still relay.
    pub(crate) async fn ensure_relay(self: &Arc<Self>, sandbox: &str, netns: PathBuf) -> Result<(), RelayError> {
        let Some(service) = self.service().await else { return Ok(()) };
        {
            let relays = self.relays.lock().unwrap_or_else(PoisonError::into_inner);
            if relays.get(sandbox).is_some_and(|r| !r.is_finished()) {
                return Ok(());
            }
        }
        let path = netns.clone();
        let addresses = relayed_addresses(service, self.upstream);
        let bound = tokio::task::spawn_blocking(move || listen_in(&path, &addresses))
            .await
            .map_err(|_| RelayError::Panicked)??;
        let mut listeners = Vec::new();
        let mut failed = None;
        for listener in bound {
            match listener.and_then(|l| tokio::net::TcpListener::from_std(l).map_err(RelayError::Register)) {
                Ok(l) => listeners.push(l),
                Err(e) => failed = failed.or(Some(e)),
            }
        }
        if !listeners.is_empty() {
            let this = Arc::clone(self);
            let id = sandbox.to_owned();
            let span = tracing::info_span!("in_cluster_relay", sandbox = %id);
            let task = tokio::spawn(tracing::Instrument::instrument(
                async move {
                    this.relay(listeners, &netns).await;
                    let mut relays = this.relays.lock().unwrap_or_else(PoisonError::into_inner);
                    if relays.get(&id).is_some_and(tokio::task::JoinHandle::is_finished) {
                        relays.remove(&id);
                    }
                },
                span,
            ));
            self.relays.lock().unwrap_or_else(PoisonError::into_inner).insert(sandbox.to_owned(), task);
        }
        failed.map_or(Ok(()), Err)
    }

    /// Accepts on every listener until the namespace is gone, relaying each connection to
    /// the API server; the pod's connections share one bound, whichever address they used.
    async fn relay(&self, listeners: Vec<tokio::net::TcpListener>, netns: &Path) {
        let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS_PER_POD));
        // Dropped on return, which stops every accept loop.
        let mut accepting = tokio::task::JoinSet::new();
        for listener in listeners {
            accepting.spawn(tracing::Instrument::in_current_span(accept(listener, self.upstream, Arc::clone(&slots))));
        }
        let mut check = tokio::time::interval(NETNS_CHECK);
        loop {
            check.tick().await;
            if !netns.exists() {
                return;
            }
        }
    }
}

/// Relays each connection `listener` accepts to `upstream`, while `slots` has room.
async fn accept(listener: tokio::net::TcpListener, upstream: SocketAddr, slots: Arc<Semaphore>) {
    loop {
        let Ok((mut inside, _)) = listener.accept().await else {
            // Out of descriptors, say: a pause, not a spin.
            tokio::time::sleep(ACCEPT_BACKOFF).await;
            continue;
        };
        // Past the bound the connection is closed at once: one pod cannot hold the node's
        // file descriptors.
        let Ok(slot) = Arc::clone(&slots).try_acquire_owned() else { continue };
        tokio::spawn(tracing::Instrument::in_current_span(async move {
            let _slot = slot;
            let connected = tokio::time::timeout(CONNECT_TIMEOUT, tokio::net::TcpStream::connect(upstream)).await;
            if let Ok(Ok(mut outside)) = connected {
                let _ = tokio::io::copy_bidirectional(&mut inside, &mut outside).await;
            }
        }));
    }
}

/// Where the relay answers in a pod: the Service's address, then the API server's own (the
/// default issuer's), unless that is no address a client could name.
fn relayed_addresses(service: ServiceAddress, upstream: SocketAddr) -> Vec<SocketAddr> {
    let service = SocketAddr::from((service.ip, service.port));
    let mut addresses = vec![service];
    if upstream != service && !upstream.ip().is_unspecified() {
        addresses.push(upstream);
    }
    addresses
}

/// The Service's address of a Service object.
fn address_of(svc: &k8s_openapi::api::core::v1::Service) -> Option<ServiceAddress> {
    let spec = svc.spec.as_ref()?;
    let ip: Ipv4Addr = spec.cluster_ip.as_deref()?.parse().ok()?;
    let ports = spec.ports.as_deref().unwrap_or_default();
    let port = ports.iter().find(|p| p.name.as_deref() == Some("https")).or_else(|| ports.first())?;
    Some(ServiceAddress { ip, port: u16::try_from(port.port).ok()? })
}

/// Why the Service's address could not answer in a pod's namespace.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RelayError {
    /// The runtime named no namespace for the sandbox.
    #[error("the runtime names no network namespace")]
    NoNamespace,
    /// The namespace could not be opened.
    #[error("opening {}: {source}", .netns.display())]
    Open { netns: PathBuf, source: std::io::Error },
    /// The namespace could not be entered.
    #[error("entering {}: {source}", .netns.display())]
    Enter { netns: PathBuf, source: rustix::io::Errno },
    /// The address did not bind (with why `ip address add` failed, when it did).
    #[error("listening on {address}: {source}{}", .added.as_ref().map(|why| format!(" (ip address add: {why})")).unwrap_or_default())]
    Bind { address: String, source: std::io::Error, added: Option<String> },
    /// The socket could not be handed to the runtime.
    #[error("listening in the pod's network namespace: {0}")]
    Register(std::io::Error),
    /// The namespace thread panicked.
    #[error("the namespace thread panicked")]
    Panicked,
}

/// On a thread of its own (a namespace is entered per thread): enters the namespace at
/// `netns`, puts each address on its `lo` (a loopback one is there already) and listens
/// there, answering one listener or why not per address. The sockets stay in that namespace
/// after the thread ends.
fn listen_in(
    netns: &Path,
    addresses: &[SocketAddr],
) -> Result<Vec<Result<std::net::TcpListener, RelayError>>, RelayError> {
    let (netns, addresses) = (netns.to_owned(), addresses.to_vec());
    std::thread::spawn(move || {
        let ns = std::fs::File::open(&netns).map_err(|source| RelayError::Open { netns: netns.clone(), source })?;
        rustix::thread::move_into_link_name_space(ns.as_fd(), Some(rustix::thread::LinkNameSpaceType::Network))
            .map_err(|source| RelayError::Enter { netns: netns.clone(), source })?;
        Ok(addresses.iter().map(|&address| listen_on(address)).collect())
    })
    .join()
    .map_err(|_| RelayError::Panicked)?
}

/// In the namespace this thread is in: `address` on `lo`, and a listener on it.
fn listen_on(address: SocketAddr) -> Result<std::net::TcpListener, RelayError> {
    // This thread is in the pod's namespace, so the child `ip` is too. An address already
    // there (a relay of an earlier agent) is no failure: the bind says whether the address
    // is usable, and only a failed bind reports why the add failed.
    let added = if address.ip().is_loopback() {
        Ok(())
    } else {
        let prefix = if address.is_ipv4() { 32 } else { 128 };
        std::process::Command::new("ip")
            .args(["address", "add", &format!("{}/{prefix}", address.ip()), "dev", "lo"])
            .output()
            .map_err(|e| format!("running ip: {e}"))
            .and_then(|out| {
                if out.status.success() { Ok(()) } else { Err(String::from_utf8_lossy(&out.stderr).trim().to_owned()) }
            })
    };
    let listener = std::net::TcpListener::bind(address).map_err(|source| RelayError::Bind {
        address: address.to_string(),
        source,
        added: added.err(),
    })?;
    listener.set_nonblocking(true).map_err(RelayError::Register)?;
    Ok(listener)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_variables_are_the_kubelets_for_the_kubernetes_service() {
        let env: Vec<(String, String)> =
            service_env("10.96.0.1", 443).into_iter().map(|kv| (kv.key, kv.value)).collect();
        let expected = [
            ("KUBERNETES_SERVICE_HOST", "10.96.0.1"),
            ("KUBERNETES_SERVICE_PORT", "443"),
            ("KUBERNETES_SERVICE_PORT_HTTPS", "443"),
            ("KUBERNETES_PORT", "tcp://10.96.0.1:443"),
            ("KUBERNETES_PORT_443_TCP", "tcp://10.96.0.1:443"),
            ("KUBERNETES_PORT_443_TCP_PROTO", "tcp"),
            ("KUBERNETES_PORT_443_TCP_PORT", "443"),
            ("KUBERNETES_PORT_443_TCP_ADDR", "10.96.0.1"),
        ];
        assert_eq!(env, expected.map(|(k, v)| (k.to_owned(), v.to_owned())));
    }

    #[test]
    fn the_api_servers_own_address_answers_in_the_pod_beside_the_service() {
        let service = ServiceAddress { ip: Ipv4Addr::new(10, 96, 0, 1), port: 443 };
        let api: SocketAddr = "127.0.0.1:6443".parse().unwrap_or_else(|_| unreachable!());
        assert_eq!(relayed_addresses(service, api), vec![SocketAddr::from(([10, 96, 0, 1], 443)), api]);
        // Nothing twice, and never the address that means "any".
        assert_eq!(relayed_addresses(service, "10.96.0.1:443".parse().unwrap_or(api)).len(), 1);
        assert_eq!(relayed_addresses(service, "0.0.0.0:6443".parse().unwrap_or(api)).len(), 1);
    }

    #[test]
    fn the_https_port_of_the_service_is_the_one_used() {
        let svc: k8s_openapi::api::core::v1::Service = serde_json::from_value(serde_json::json!({
            "spec": {"clusterIP": "10.96.0.1", "ports": [{"name": "metrics", "port": 8080}, {"name": "https", "port": 443}]}
        }))
        .unwrap_or_default();
        assert_eq!(address_of(&svc), Some(ServiceAddress { ip: Ipv4Addr::new(10, 96, 0, 1), port: 443 }));
        let headless: k8s_openapi::api::core::v1::Service =
            serde_json::from_value(serde_json::json!({"spec": {"clusterIP": "None", "ports": [{"port": 443}]}}))
                .unwrap_or_default();
        assert_eq!(address_of(&headless), None);
    }
}
