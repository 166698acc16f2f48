//! `podpass registry-auth`: flags → [`podpass_registry_auth::Config`]; the library does the
//! rest.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use podpass_api::GoDuration;
use podpass_registry_auth::{Config, NodeBinding, RunError, TokenReviewKubeconfig};

/// Exit code for bad flags or inputs (EX_USAGE).
const EXIT_USAGE: u8 = 64;

/// Flags of `podpass registry-auth`.
#[derive(Debug, Args)]
pub struct RegistryAuthArgs {
    /// Address to serve on; without TLS flags only a loopback address is accepted.
    #[arg(long, default_value = "127.0.0.1:5003")]
    listen: SocketAddr,
    /// A trusted cluster's service-account issuer URL (repeatable).
    #[arg(long = "issuer", required = true)]
    issuers: Vec<String>,
    /// PEM bundle trusted for every issuer's HTTPS (else the platform's roots).
    #[arg(long)]
    issuer_ca: Option<PathBuf>,
    /// The audience pod tokens must carry (the provider's serviceAccountTokenAudience).
    #[arg(long)]
    audience: String,
    /// The access policy (YAML).
    #[arg(long)]
    policy: PathBuf,
    /// Private key signing registry tokens (PEM; its certificate goes into the registry's rootcertbundle).
    #[arg(long)]
    signing_key: PathBuf,
    /// Certificate chain of the signing key, leaf first: tokens then carry x5c.
    #[arg(long)]
    cert_chain: Option<PathBuf>,
    /// The registry's auth.token.service: the registry tokens' audience.
    #[arg(long)]
    registry_service: String,
    /// The registry's auth.token.issuer: the registry tokens' iss.
    #[arg(long, default_value = "podpass-registry-auth")]
    token_issuer: String,
    /// A pod token naming a node only from that node: require, prefer or off.
    #[arg(long, default_value = "prefer")]
    node_binding: NodeBinding,
    /// Serving certificate chain (PEM).
    #[arg(long)]
    tls_cert_file: Option<PathBuf>,
    /// Serving private key (PEM).
    #[arg(long)]
    tls_private_key_file: Option<PathBuf>,
    /// CA of node client certificates (CN=system:node:NAME, O=system:nodes), a node proof.
    #[arg(long)]
    client_ca_file: Option<PathBuf>,
    /// Lifetime of registry tokens (Go duration).
    #[arg(long, default_value = "5m")]
    token_ttl: GoDuration,
    /// Lifetime of exchange tokens, never past the token they came from (Go duration).
    #[arg(long, default_value = "1h")]
    exchange_token_ttl: GoDuration,
    /// Before granting, ask a cluster's TokenReview whether a pod token still authenticates
    /// (its pod still exists): `[ISSUER=]KUBECONFIG`, repeatable; the issuer may be left out
    /// when only one is trusted. The kubeconfig's user needs create on tokenreviews.
    #[arg(long = "token-review-kubeconfig", value_name = "[ISSUER=]PATH")]
    token_review_kubeconfig: Vec<TokenReviewKubeconfig>,
    /// Connections served at once; more wait in the listen backlog.
    #[arg(long, default_value_t = 1000)]
    max_connections: usize,
    /// Connections one client address may hold at once; its further connections are
    /// closed. Behind a proxy, raise it to --max-connections.
    #[arg(long, default_value_t = 250)]
    max_connections_per_client: usize,
    /// A request whose body has not arrived in full this long after its headers is
    /// answered 408 and its connection closed (Go duration).
    #[arg(long, default_value = "30s")]
    request_timeout: GoDuration,
    /// Minimum time between two issuer key fetches caused by an unknown kid (Go duration).
    #[arg(long, default_value = "10s")]
    jwks_min_refetch_interval: GoDuration,
    /// Period of the background issuer key refresh (Go duration).
    #[arg(long, default_value = "5m")]
    jwks_refresh_interval: GoDuration,
}

fn duration(flag: &str, d: GoDuration, errors: &mut Vec<String>) -> std::time::Duration {
    d.to_std().unwrap_or_else(|| {
        errors.push(format!("{flag}: must not be negative"));
        std::time::Duration::ZERO
    })
}

/// Runs the service until SIGINT/SIGTERM; exit 64 on bad configuration (nothing bound),
/// 1 when the address cannot be bound.
pub fn run(a: RegistryAuthArgs) -> ExitCode {
    let mut errors = Vec::new();
    let mut config = Config::new(a.listen, a.issuers, &a.audience, a.policy, a.signing_key, &a.registry_service);
    config.issuer_ca = a.issuer_ca;
    config.cert_chain = a.cert_chain;
    config.token_issuer = a.token_issuer;
    config.node_binding = a.node_binding;
    config.tls_cert_file = a.tls_cert_file;
    config.tls_private_key_file = a.tls_private_key_file;
    config.client_ca_file = a.client_ca_file;
    config.token_review = a.token_review_kubeconfig;
    config.token_ttl = duration("--token-ttl", a.token_ttl, &mut errors);
    config.exchange_token_ttl = duration("--exchange-token-ttl", a.exchange_token_ttl, &mut errors);
    config.timings.min_refetch_interval =
        duration("--jwks-min-refetch-interval", a.jwks_min_refetch_interval, &mut errors);
    config.timings.refresh_interval = duration("--jwks-refresh-interval", a.jwks_refresh_interval, &mut errors);
    config.serve_limits.max_connections = a.max_connections;
    config.serve_limits.max_connections_per_client = a.max_connections_per_client;
    config.serve_limits.request_timeout = duration("--request-timeout", a.request_timeout, &mut errors);
    let prepared = config.prepare();
    if let Err(e) = &prepared {
        errors.extend(e.0.iter().cloned());
    }
    let prepared = match prepared {
        Ok(p) if errors.is_empty() => p,
        _ => {
            for e in &errors {
                eprintln!("error: {e}");
            }
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let runtime = match crate::runtime() {
        Ok(r) => r,
        Err(code) => return code,
    };
    runtime.block_on(async move {
        let bound = match prepared.bind().await {
            Ok(b) => b,
            Err(e) => {
                eprintln!("error: {e}");
                let usage = matches!(e, RunError::TokenReview(_));
                return ExitCode::from(if usage { EXIT_USAGE } else { 1 });
            }
        };
        if let Some(addr) = bound.local_addr() {
            eprintln!("podpass registry-auth serving on {addr}");
        }
        bound.serve(crate::shutdown_signal()).await;
        ExitCode::SUCCESS
    })
}
