//! `podpass apiserver …`: the control plane.

use std::net::IpAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};
use podpass_api::{Feature, FeatureGates};
use podpass_apiserver::files::write_atomic;
use podpass_apiserver::server::{ApiServerConfig, kubeconfig, random_token};
use podpass_token::TokenFeatures;

use crate::EXIT_USAGE;

#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct ApiserverArgs {
    #[command(subcommand)]
    command: Option<ApiserverCommand>,
    #[command(flatten)]
    flags: ServerFlags,
}

#[derive(Debug, Subcommand)]
enum ApiserverCommand {
    /// Add a static token for an identity and print a kubeconfig using it.
    Kubeconfig(KubeconfigArgs),
}

#[derive(Debug, Args)]
struct KubeconfigArgs {
    /// The data directory of the running (or last run) server.
    #[arg(long, default_value = "./podpass-data")]
    data_dir: PathBuf,
    /// User name, e.g. `system:node:n1`.
    #[arg(long)]
    user: String,
    /// Group; repeat for several (e.g. `system:nodes`).
    #[arg(long = "group")]
    groups: Vec<String>,
}

#[derive(Debug, Args)]
struct ServerFlags {
    /// Embedded store, generated keys and certificates, kubeconfigs.
    #[arg(long, default_value = "./podpass-data")]
    data_dir: PathBuf,
    /// Address to serve HTTPS on.
    #[arg(long, default_value = "127.0.0.1")]
    bind_address: IpAddr,
    /// Port to serve HTTPS on (0: any free port).
    #[arg(long, default_value_t = 6443)]
    secure_port: u16,
    /// Serving certificate chain (PEM); generated in the data dir when absent.
    #[arg(long)]
    tls_cert_file: Option<PathBuf>,
    /// Serving private key (PEM).
    #[arg(long)]
    tls_private_key_file: Option<PathBuf>,
    /// Token issuer; repeatable (the first signs). Default: https://<bind>:<port>.
    #[arg(long = "service-account-issuer")]
    issuers: Vec<String>,
    /// Private key that signs service-account tokens; default: generated ES256 key.
    #[arg(long)]
    service_account_signing_key_file: Option<PathBuf>,
    /// Extra verification keys (rotation); repeatable.
    #[arg(long = "service-account-key-file")]
    service_account_key_files: Vec<PathBuf>,
    /// API audiences, comma-separated; default: the issuers.
    #[arg(long, value_delimiter = ',')]
    api_audiences: Vec<String>,
    /// Static token CSV (`token,user,uid,"groups"`); default <data-dir>/tokens.csv.
    #[arg(long)]
    token_auth_file: Option<PathBuf>,
    /// Feature gates, e.g. `ServiceAccountTokenJTI=false`.
    #[arg(long, default_value = "")]
    feature_gates: FeatureGates,
    /// Longest token lifetime a TokenRequest gets (Go duration, e.g. `48h`); longer requests are shortened.
    #[arg(long, value_parser = parse_go_duration)]
    service_account_max_token_expiration: Option<i64>,
    /// Append an audit.k8s.io/v1 event per request (Metadata level) to this file.
    #[arg(long)]
    audit_log_path: Option<PathBuf>,
    /// Issue the automounted 3607 s token with a one-year expiry and `warnafter` (upstream default).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    service_account_extend_token_expiration: bool,
    /// Authorizers in order (`Node`, `RBAC`, `AlwaysAllow`, `AlwaysDeny`); `system:masters`
    /// is always allowed.
    #[arg(long, default_value = "Node,RBAC", value_parser = parse_authorization_modes)]
    authorization_mode: AuthorizationModes,
    /// etcd endpoints, comma-separated (`http://127.0.0.1:2379`); default: the embedded store
    /// in the data dir. Replicas sharing one etcd need the same signing and verification keys.
    #[arg(long, value_delimiter = ',')]
    etcd_servers: Vec<String>,
    /// With etcd: serve reads and watches from memory kept current by an etcd watch
    /// (consistent reads wait for it to reach etcd's revision); false: every read goes to
    /// etcd.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    watch_cache: bool,
    /// Connections served at once; more wait in the listen backlog. Keep it below the open
    /// file limit (`ulimit -n`).
    #[arg(long, default_value_t = 1000)]
    max_connections: usize,
    /// Connections one client address may hold at once; its further connections are
    /// closed (default: --max-connections, i.e. no share, as kube-apiserver behind a load
    /// balancer).
    #[arg(long)]
    max_connections_per_client: Option<usize>,
    /// Longest a request (body upload included) may take before it is answered 504 (Go
    /// duration); watches are not cut by it.
    #[arg(long, default_value = "1m", value_parser = parse_go_duration_std)]
    request_timeout: std::time::Duration,
    /// Seconds: a watch that names no timeoutSeconds ends after a random time between this
    /// and twice this, as kube-apiserver's --min-request-timeout.
    #[arg(long, default_value_t = 1800, value_parser = clap::value_parser!(u64).range(1..))]
    min_request_timeout: u64,
}

/// A parsed `--authorization-mode`.
#[derive(Debug, Clone)]
struct AuthorizationModes(Vec<podpass_apiserver::server::authz::Mode>);

fn parse_authorization_modes(s: &str) -> Result<AuthorizationModes, String> {
    podpass_apiserver::server::authz::parse_modes(s).map(AuthorizationModes)
}

/// A Go `time.Duration` string as a positive [`std::time::Duration`].
fn parse_go_duration_std(s: &str) -> Result<std::time::Duration, String> {
    let nanos = podpass_api::GoDuration::parse(s).map_err(|e| format!("{e} (examples: 30s, 1m)"))?.0;
    u64::try_from(nanos)
        .ok()
        .filter(|n| *n > 0)
        .map(std::time::Duration::from_nanos)
        .ok_or_else(|| format!("{s:?}: must be positive"))
}

/// A Go `time.Duration` string (`1h30m`, `90s`, `2h`) in whole seconds.
fn parse_go_duration(s: &str) -> Result<i64, String> {
    podpass_api::GoDuration::parse(s)
        .map(|d| d.0 / 1_000_000_000)
        .map_err(|e| format!("{e} (examples: 1h, 90m, 3600s)"))
}

pub fn run(args: ApiserverArgs) -> ExitCode {
    match args.command {
        Some(ApiserverCommand::Kubeconfig(k)) => add_kubeconfig(k),
        None => serve(args.flags),
    }
}

fn add_kubeconfig(a: KubeconfigArgs) -> ExitCode {
    match add_identity(&a.data_dir, &a.user, &a.groups) {
        Ok(k) => {
            crate::write_stdout(format_args!("{k}"));
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(EXIT_USAGE)
        }
    }
}

/// Adds a static token for `user` in `groups` to the token file of the control plane whose
/// data dir is `data_dir` (the running server picks it up at once) and returns a kubeconfig
/// using it.
pub(crate) fn add_identity(data_dir: &std::path::Path, user: &str, groups: &[String]) -> anyhow::Result<String> {
    use anyhow::Context;
    let tokens = data_dir.join("tokens.csv");
    let mut text = std::fs::read_to_string(&tokens)
        .with_context(|| format!("reading {} (start `podpass apiserver` once first)", tokens.display()))?;
    let server = std::fs::read_to_string(data_dir.join("server-url")).context("reading server-url")?;
    let ca = std::fs::read_to_string(data_dir.join("pki/ca.crt")).context("reading pki/ca.crt")?;
    // The token file is CSV and the kubeconfig YAML: a comma, quote or line break in a
    // name would write another identity (or another group) than the one asked for.
    let bad = |v: &str| v.contains([',', '"']) || v.chars().any(char::is_control);
    if user.is_empty() || bad(user) {
        anyhow::bail!("--user {user:?}: must be non-empty and contain no ',', '\"' or control characters");
    }
    if let Some(g) = groups.iter().find(|g| g.is_empty() || bad(g)) {
        anyhow::bail!("--group {g:?}: must be non-empty and contain no ',', '\"' or control characters");
    }
    let token = random_token()?;
    let uid = podpass_token::claims::new_uuid_v4()?;
    let groups = groups.join(",");
    if !text.ends_with('\n') && !text.is_empty() {
        text.push('\n');
    }
    text.push_str(&format!("{token},{user},{uid},\"{groups}\"\n"));
    // The server re-reads the file when it changes: the token works at once.
    write_atomic(&tokens, text.as_bytes(), 0o600, true)?;
    Ok(kubeconfig(server.trim(), &ca, user, &token))
}

fn serve(f: ServerFlags) -> ExitCode {
    let gates = &f.feature_gates;
    let config = ApiServerConfig {
        data_dir: f.data_dir,
        bind_address: f.bind_address,
        secure_port: f.secure_port,
        tls_cert_file: f.tls_cert_file,
        tls_private_key_file: f.tls_private_key_file,
        issuers: f.issuers,
        signing_key_file: f.service_account_signing_key_file,
        key_files: f.service_account_key_files,
        api_audiences: f.api_audiences,
        token_auth_file: f.token_auth_file,
        extend_token_expiration: f.service_account_extend_token_expiration,
        audit_log_path: f.audit_log_path,
        token_request_uid_validation: gates.enabled(Feature::TokenRequestServiceAccountUIDValidation),
        authorization_modes: f.authorization_mode.0.clone(),
        node_audience_restriction: gates.enabled(Feature::ServiceAccountNodeAudienceRestriction),
        etcd_servers: f.etcd_servers.clone(),
        watch_cache: f.watch_cache,
        token_success_cache_ttl: podpass_apiserver::server::token_cache::DEFAULT_SUCCESS_TTL,
        serve_limits: podpass_apiserver::server::serve::ServeLimits {
            max_connections: f.max_connections,
            max_connections_per_client: f.max_connections_per_client.unwrap_or(f.max_connections),
            request_timeout: f.request_timeout,
            ..Default::default()
        },
        min_request_timeout: std::time::Duration::from_secs(f.min_request_timeout),
        max_token_expiration: f.service_account_max_token_expiration.filter(|s| *s > 0),
        features: TokenFeatures {
            jti: gates.enabled(Feature::ServiceAccountTokenJTI),
            pod_node_info: gates.enabled(Feature::ServiceAccountTokenPodNodeInfo),
            node_binding: gates.enabled(Feature::ServiceAccountTokenNodeBinding),
            node_binding_validation: gates.enabled(Feature::ServiceAccountTokenNodeBindingValidation),
        },
    };
    let runtime = match crate::runtime() {
        Ok(r) => r,
        Err(code) => return code,
    };
    runtime.block_on(async move {
        // Everything is validated and loaded before a port is bound.
        let prepared = match config.prepare() {
            Ok(p) => p,
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::from(EXIT_USAGE);
            }
        };
        let running = match prepared.start().await {
            Ok(r) => r,
            Err(e) => {
                eprintln!("error: listening: {e}");
                return ExitCode::from(1);
            }
        };
        eprintln!("podpass apiserver serving on {}", running.server_url);
        outln!("kubectl --kubeconfig {} get --raw /version", running.admin_kubeconfig.display());
        tokio::select! {
            _ = running.wait() => ExitCode::from(1),
            () = crate::shutdown_signal() => ExitCode::SUCCESS,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::parse_go_duration;

    #[test]
    fn go_durations() {
        assert_eq!(parse_go_duration("48h"), Ok(172_800));
        assert_eq!(parse_go_duration("1h30m"), Ok(5400));
        assert_eq!(parse_go_duration("90s"), Ok(90));
        assert_eq!(parse_go_duration("0"), Ok(0));
        assert!(parse_go_duration("10").is_err());
        assert!(parse_go_duration("5d").is_err());
    }
}
