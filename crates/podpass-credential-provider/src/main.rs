//! `podpass-credential-provider`: the kubelet credential-provider exec plugin
//! (credentialprovider.kubelet.k8s.io/v1). A thin main over the crate's library: the
//! request on stdin, the response on stdout, a clear
//! message on stderr and exit 1 on any failure (never a token).

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, ValueEnum};
use podpass_credential_provider::{self as plugin, ClientIdentity, ExchangeConfig, MAX_REQUEST_BYTES, PluginMode};

#[derive(Debug, Clone, Copy, ValueEnum)]
enum ModeFlag {
    /// The service-account token is the password (kubelet cacheType Token).
    Passthrough,
    /// Trade the token at registry-auth for an exchange token bound to the token's pod (kubelet
    /// cacheType Token).
    Exchange,
}

/// Kubelet credential-provider plugin: registry credentials from the pod's own
/// service-account token.
#[derive(Debug, Parser)]
#[command(version)]
struct Cli {
    /// What to answer: the token itself, or an exchange token from registry-auth.
    #[arg(long, value_enum)]
    mode: ModeFlag,
    /// registry-auth's base URL (exchange mode).
    #[arg(long, required_if_eq("mode", "exchange"))]
    exchange_url: Option<String>,
    /// PEM bundle trusted for --exchange-url.
    #[arg(long)]
    exchange_ca: Option<PathBuf>,
    /// The node's TLS client certificate (PEM, CN=system:node:<name>, O=system:nodes),
    /// presented to registry-auth as the node's proof (exchange mode).
    #[arg(long, requires = "client_key")]
    client_certificate: Option<PathBuf>,
    /// Its private key (PEM; may be the same file as --client-certificate).
    #[arg(long, requires = "client_certificate")]
    client_key: Option<PathBuf>,
}

fn fail(message: impl std::fmt::Display) -> ExitCode {
    eprintln!("podpass-credential-provider: {message}");
    ExitCode::from(1)
}

/// Seconds since the epoch (0 for a clock before it: every cache duration is then 0).
fn now_unix() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let mode = match cli.mode {
        ModeFlag::Passthrough => PluginMode::Passthrough,
        ModeFlag::Exchange => {
            let ca_pem = match cli.exchange_ca.as_ref().map(std::fs::read).transpose() {
                Ok(pem) => pem,
                Err(e) => return fail(format_args!("--exchange-ca: {e}")),
            };
            PluginMode::Exchange(ExchangeConfig {
                url: cli.exchange_url.unwrap_or_default(),
                ca_pem,
                client_identity: cli
                    .client_certificate
                    .zip(cli.client_key)
                    .map(|(certificate, key)| ClientIdentity { certificate, key }),
            })
        }
    };
    let mut input = Vec::new();
    if let Err(e) = std::io::stdin().take(MAX_REQUEST_BYTES as u64 + 1).read_to_end(&mut input) {
        return fail(format_args!("reading stdin: {e}"));
    }
    let request = match plugin::decode_request(&input) {
        Ok(r) => r,
        Err(e) => return fail(e),
    };
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => return fail(format_args!("starting runtime: {e}")),
    };
    let response = match runtime.block_on(plugin::respond(&mode, &request, now_unix())) {
        Ok(r) => r,
        Err(e) => return fail(e),
    };
    let json = match serde_json::to_string(&response) {
        Ok(j) => j,
        Err(e) => return fail(format_args!("encoding the response: {e}")),
    };
    let mut stdout = std::io::stdout().lock();
    if let Err(e) = writeln!(stdout, "{json}").and_then(|()| stdout.flush()) {
        return fail(format_args!("writing stdout: {e}"));
    }
    ExitCode::SUCCESS
}
