//! Start-up: [`Prepared::bind`] connects the store, binds, derives what depends on the
//! bound port (issuer default, OIDC documents, kubeconfig), builds the shared state and runs
//! the start-up reconcilers (system namespaces, bootstrap RBAC); [`Bound::serve`] then
//! serves until shutdown.

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use podpass_token::documents::JWKS_PATH;
use podpass_token::{Authenticator, Jwks, OidcDiscovery, TokenGenerator};
use tokio::net::TcpListener;

use super::config::{Prepared, StartError};
use super::{AppState, MAX_WATCHES_PER_USER, authz, metrics, rest, routing, serve, token_cache};
use crate::files::write_atomic;
use crate::store::Store;

/// A bound server: its state built, its start-up reconcilers done, not yet accepting.
pub struct Bound {
    /// Where it listens.
    pub local_addr: SocketAddr,
    /// `https://host:port` clients use.
    pub server_url: String,
    /// The admin kubeconfig written at start.
    pub admin_kubeconfig: PathBuf,
    listener: TcpListener,
    tls: tokio_rustls::TlsAcceptor,
    app: axum::Router,
    limits: serve::ServeLimits,
    state: Arc<AppState>,
    service_ip: std::net::Ipv4Addr,
    event_ttl: std::time::Duration,
}

impl std::fmt::Debug for Bound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bound").field("server_url", &self.server_url).finish_non_exhaustive()
    }
}

impl Bound {
    /// Serves, keeps Events within `--event-ttl`, revokes deleted objects' cached tokens,
    /// follows revoked `jti`s, and — while this replica holds the controller lease — runs the tokens controller, the
    /// root CA publisher, the `kubernetes` Service and its address repair, the quota
    /// controller, pod GC and the collection of expired revocations, until `shutdown`
    /// completes. The scheduler is a component of its own (`podpass scheduler`).
    pub async fn serve(self, shutdown: impl Future<Output = ()>) {
        let Bound { listener, tls, app, limits, state, event_ttl, service_ip, local_addr, .. } = self;
        let reaper = serve::spawn_named("event-ttl", super::event_ttl::reap_forever(Arc::clone(&state), event_ttl));
        let revocation = serve::spawn_named("token-revocation", super::token_revocation::run(Arc::clone(&state)));
        let revoked = serve::spawn_named("revoked-tokens", super::revoked_tokens::run(Arc::clone(&state)));
        let elector = Arc::new(super::leader::Elector::new());
        let election = serve::spawn_named("leader-election", {
            let (elector, state) = (Arc::clone(&elector), Arc::clone(&state));
            async move { elector.run(state).await }
        });
        // One replica at a time.
        let kubernetes_service = {
            // The address clients reach: a wildcard bind is reached on loopback.
            let ip =
                if local_addr.ip().is_unspecified() { std::net::IpAddr::from([127, 0, 0, 1]) } else { local_addr.ip() };
            let endpoint = SocketAddr::new(ip, local_addr.port());
            serve::spawn_named(
                "kubernetes-service",
                super::kubernetes_service::run(Arc::clone(&state), service_ip, endpoint, elector.subscribe()),
            )
        };
        let revoked_gc = elected("revoked-token-gc", &elector, &state, super::revoked_tokens::collect);
        let service_ip_repair = elected("service-ip-repair", &elector, &state, super::service_ips::repair_forever);
        let server = serve::spawn_named("accept", serve::accept_loop(listener, Some(tls), app, limits));
        shutdown.await;
        server.abort();
        reaper.abort();
        revocation.abort();
        revoked.abort();
        revoked_gc.abort();
        service_ip_repair.abort();
        kubernetes_service.abort();
        election.abort();
        elector.release(&state).await;
    }
}

/// Spawns controller `run` (named `name`) to run while this replica leads.
fn elected<Fut>(
    name: &'static str,
    elector: &super::leader::Elector,
    state: &Arc<AppState>,
    run: fn(Arc<AppState>) -> Fut,
) -> tokio::task::JoinHandle<()>
where
    Fut: Future<Output = ()> + Send + 'static,
{
    let state = Arc::clone(state);
    serve::spawn_named(name, super::leader::while_leading(elector.subscribe(), move || run(Arc::clone(&state))))
}

/// A kubeconfig for `user` with `token`, trusting `ca_pem`.
pub fn kubeconfig(server_url: &str, ca_pem: &str, user: &str, token: &str) -> String {
    let ca = data_encoding::BASE64.encode(ca_pem.as_bytes());
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: podpass\n  cluster:\n    server: {server_url}\n    certificate-authority-data: {ca}\nusers:\n- name: {user:?}\n  user:\n    token: {token:?}\ncontexts:\n- name: podpass\n  context:\n    cluster: podpass\n    user: {user:?}\ncurrent-context: podpass\n"
    )
}

impl Prepared {
    /// Connects the store, binds, writes the admin kubeconfig and runs the start-up
    /// reconcilers.
    pub async fn bind(self) -> Result<Bound, StartError> {
        let settings = self.settings;
        let store: Arc<dyn Store> = match self.store.clone() {
            Some(store) => store,
            None if self.config.watch_cache => Arc::new(
                crate::store::CachedStore::connect(
                    &self.config.etcd_servers,
                    crate::store::DEFAULT_WINDOW,
                    rest::resources::group_of,
                )
                .await
                .map_err(StartError::Etcd)?,
            ),
            None => {
                Arc::new(crate::store::EtcdStore::connect(&self.config.etcd_servers).await.map_err(StartError::Etcd)?)
            }
        };
        let addr = SocketAddr::new(self.config.bind_address, self.config.secure_port);
        let bind_err = |source| StartError::Bind { addr, source };
        let listener = TcpListener::bind(addr).await.map_err(bind_err)?;
        let local_addr = listener.local_addr().map_err(bind_err)?;
        let host = if local_addr.ip().is_unspecified() { IpAddr::from([127, 0, 0, 1]) } else { local_addr.ip() };
        let server_url = match host {
            IpAddr::V6(v6) => format!("https://[{v6}]:{}", local_addr.port()),
            IpAddr::V4(v4) => format!("https://{v4}:{}", local_addr.port()),
        };
        let issuers =
            if self.config.issuers.is_empty() { vec![server_url.clone()] } else { self.config.issuers.clone() };
        let audiences =
            if self.config.api_audiences.is_empty() { issuers.clone() } else { self.config.api_audiences.clone() };
        let mut keys = vec![self.signing_key.public_key().clone()];
        keys.extend(self.extra_keys.iter().cloned());
        let jwks = Jwks::from_keys(&keys)
            .map_err(|e| e.to_string())
            .and_then(|j| serde_json::to_vec(&j).map_err(|e| e.to_string()))
            .map_err(StartError::Documents)?;
        // OIDC discovery needs an https issuer; a non-https issuer simply gets no document.
        let oidc_config = OidcDiscovery::new(&issuers[0], &format!("{server_url}{JWKS_PATH}"), &keys)
            .ok()
            .and_then(|d| serde_json::to_vec(&d).ok())
            .unwrap_or_default();

        let admin_kubeconfig = self.config.data_dir.join("admin.kubeconfig");
        if let Some(admin) = admin_token(&self.token_file_path) {
            write_atomic(
                &admin_kubeconfig,
                kubeconfig(&server_url, &self.ca_pem, "admin", &admin).as_bytes(),
                0o600,
                true,
            )
            .map_err(|source| StartError::Write { path: admin_kubeconfig.clone(), source })?;
        }
        let url_file = self.config.data_dir.join("server-url");
        write_atomic(&url_file, server_url.as_bytes(), 0o644, true)
            .map_err(|source| StartError::Write { path: url_file.clone(), source })?;

        let metrics = metrics::ApiServerMetrics::with_store(store.as_ref());
        // Upstream without --kubelet-certificate-authority does not verify the kubelet's
        // serving certificate; its own client certificate is what the node checks. With it,
        // only that CA's certificates for the node's address are trusted.
        let kubelet_ca = self.kubelet_ca.clone();
        let kubelet_client = self.kubelet_client.as_ref().and_then(|(cert, key)| {
            let identity = reqwest::Identity::from_pem(format!("{cert}{key}").as_bytes()).ok()?;
            let builder = reqwest::Client::builder().identity(identity);
            let builder = match kubelet_ca {
                Some(certs) => builder.tls_certs_only(certs),
                None => builder.tls_danger_accept_invalid_certs(true),
            };
            builder.connect_timeout(std::time::Duration::from_secs(10)).build().ok()
        });
        let state = Arc::new(AppState {
            service_ips: settings.service_ips,
            kubelet_client,
            streams: Default::default(),
            rbac: super::informer::Informer::new(
                authz::rbac_index::RbacIndex::default(),
                &authz::rbac_index::RESOURCES,
            ),
            nodes: super::informer::Informer::new(
                authz::node_graph::NodeGraph::default(),
                &authz::node_graph::RESOURCES,
            ),
            store,
            legacy_authenticator: podpass_token::LegacyAuthenticator::new(keys.clone(), audiences.clone()),
            authenticator: Authenticator::new(issuers.clone(), keys, audiences.clone(), settings.features),
            features: settings.features,
            api_audiences: audiences,
            extend_expiration: self.config.extend_token_expiration,
            bootstrap_token_auth: self.config.enable_bootstrap_token_auth,
            max_token_expiration: settings.max_token_expiration,
            token_request_uid_validation: settings.token_request_uid_validation,
            authorization_modes: self.config.authorization_modes.0.clone(),
            node_audience_restriction: settings.node_audience_restriction,
            pod_security: settings.pod_security.clone(),
            quota_locks: Default::default(),
            inflight: Default::default(),
            audit: self.audit,
            metrics,
            watches: rest::watch::WatchLimiter::new(MAX_WATCHES_PER_USER),
            list_snapshots: rest::pagination::Snapshots::default(),
            request_timeout: settings.serve_limits.request_timeout,
            min_request_timeout: settings.min_request_timeout,
            token_cache: token_cache::TokenCache::new(self.config.token_success_cache_ttl)
                .map_err(|_| StartError::Reconcile { step: "token cache", message: "random source failed".into() })?,
            revoked: Default::default(),
            generator: TokenGenerator::new(issuers[0].clone(), self.signing_key),
            token_file: self.token_file,
            oidc_config,
            jwks,
            server_url: server_url.clone(),
        });
        let failed = |step: &'static str| {
            move |e: &dyn std::fmt::Display| StartError::Reconcile { step, message: e.to_string() }
        };
        rest::ensure_system_namespaces(&state).await.map_err(|e| failed("system namespaces")(&e.message))?;
        authz::bootstrap::ensure(&state).await.map_err(|e| failed("bootstrap RBAC")(&e.message))?;
        // After the bootstrap policy is written: the index starts with all of it.
        state.rbac.start(Arc::clone(&state.store)).await.map_err(|e| failed("RBAC informer")(&e))?;
        state.nodes.start(Arc::clone(&state.store)).await.map_err(|e| failed("node informer")(&e))?;
        let app = routing::router(Arc::clone(&state));
        // The router answers a request not done by --request-timeout with upstream's 504
        // Status (and drops its body, which closes the connection); the accept loop's body
        // deadline is the backstop a second later, for anything the router does not time.
        let limits = serve::ServeLimits {
            request_timeout: settings.serve_limits.request_timeout + std::time::Duration::from_secs(1),
            ..settings.serve_limits
        };
        let event_ttl = settings.event_ttl;
        let service_ip = settings.service_ips.first();
        Ok(Bound {
            local_addr,
            server_url,
            admin_kubeconfig,
            listener,
            tls: self.tls,
            app,
            limits,
            state,
            event_ttl,
            service_ip,
        })
    }
}

/// The token of the first `system:masters` user named `admin` in the token file.
fn admin_token(path: &Path) -> Option<String> {
    let text = std::fs::read_to_string(path).ok()?;
    let users = crate::token_file::parse(path, &text).ok()?;
    let mut admins: Vec<_> = users
        .into_iter()
        .filter(|(_, u)| u.name == "admin" && u.groups.iter().any(|g| g == "system:masters"))
        .map(|(t, _)| t)
        .collect();
    admins.sort();
    admins.into_iter().next()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubeconfigs_quote_names_and_embed_the_ca() {
        let k = kubeconfig("https://127.0.0.1:6443", "CA PEM", "system:node:n1", "tok");
        assert!(k.contains("server: https://127.0.0.1:6443"));
        assert!(k.contains(&format!("certificate-authority-data: {}", data_encoding::BASE64.encode(b"CA PEM"))));
        assert!(k.contains(r#"- name: "system:node:n1""#) && k.contains(r#"token: "tok""#));
    }

    #[test]
    fn the_admin_kubeconfig_uses_the_first_masters_admin() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let p = dir.path().join("tokens.csv");
        std::fs::write(&p, "zz,admin,1,\"system:masters\"\naa,admin,2,\"system:masters\"\nbb,admin,3,dev\n")
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(admin_token(&p).as_deref(), Some("aa"));
        assert_eq!(admin_token(&dir.path().join("missing")), None);
    }
}
