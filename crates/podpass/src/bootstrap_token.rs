//! `podpass token create`: kubeadm's `token create`, through the library's
//! [`podpass_component::create_bootstrap_token`]; this parses flags and prints the token.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use podpass_api::GoDuration;
use podpass_component::{TokenCreate, TokenCreateError};

/// `podpass token create`'s flags (kubeadm's).
#[derive(Debug, Args)]
pub struct CreateArgs {
    /// The token to create (`[a-z0-9]{6}.[a-z0-9]{16}`); a random one when left out.
    pub token: Option<String>,
    /// Kubeconfig of an identity that may create Secrets in kube-system (an admin's).
    #[arg(long)]
    pub kubeconfig: PathBuf,
    /// How long the token lives (Go duration); `0`: it never expires.
    #[arg(long, default_value = "24h")]
    pub ttl: GoDuration,
    /// What the token is for.
    #[arg(long)]
    pub description: Option<String>,
    /// What the token may do: `signing` (cluster-info), `authentication`.
    #[arg(long, value_delimiter = ',', default_value = "signing,authentication")]
    pub usages: Vec<String>,
    /// Extra groups it authenticates as (each `system:bootstrappers:…`).
    #[arg(long, value_delimiter = ',', default_value = podpass_api::bootstrap_token::NODE_GROUP)]
    pub groups: Vec<String>,
    /// Print the whole `podpass node join` command for the token (the kubeconfig's server
    /// and its CA's pin), as kubeadm's `--print-join-command`.
    #[arg(long)]
    pub print_join_command: bool,
}

/// kubeadm's join command for `token` against the server `server`, whose CA (DER) is
/// `ca`: the pin is the `sha256:` of its SubjectPublicKeyInfo.
pub fn join_command(server: &str, ca: &[u8], token: &str) -> Result<String, podpass_node::join::DiscoveryError> {
    let pin = podpass_node::join::ca_cert_hash(ca)?;
    Ok(format!(
        "podpass node join --server {} --token {token} --discovery-token-ca-cert-hash {pin}",
        server.trim_end_matches('/')
    ))
}

/// Creates the token and prints it; exit 64 for a flag kubeadm would refuse, 1 when the API
/// refuses or cannot be reached.
pub fn create(args: CreateArgs) -> ExitCode {
    let ttl = match args.ttl.to_std() {
        Some(d) if d.is_zero() => None,
        Some(d) => Some(d),
        None => {
            eprintln!("error: --ttl {}: must not be negative", args.ttl);
            return ExitCode::from(crate::EXIT_USAGE);
        }
    };
    let request =
        TokenCreate { token: args.token, ttl, description: args.description, usages: args.usages, groups: args.groups };
    let runtime = match crate::runtime() {
        Ok(r) => r,
        Err(code) => return code,
    };
    runtime.block_on(async move {
        let (client, config) = match podpass_component::client(&args.kubeconfig).await {
            Ok(pair) => pair,
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::from(crate::EXIT_USAGE);
            }
        };
        match podpass_component::create_bootstrap_token(&client, &request).await {
            Ok(token) if args.print_join_command => {
                let server = config.cluster_url.to_string();
                let Some(ca) = config.root_cert.as_ref().and_then(|certs| certs.first()) else {
                    eprintln!("error: --print-join-command: --kubeconfig names no cluster CA to pin");
                    return ExitCode::FAILURE;
                };
                match join_command(&server, ca, &token) {
                    Ok(line) => {
                        println!("{line}");
                        ExitCode::SUCCESS
                    }
                    Err(e) => {
                        eprintln!("error: --print-join-command: {e}");
                        ExitCode::FAILURE
                    }
                }
            }
            Ok(token) => {
                println!("{token}");
                ExitCode::SUCCESS
            }
            Err(e @ TokenCreateError::Invalid { .. }) => {
                eprintln!("error: {e}");
                ExitCode::from(crate::EXIT_USAGE)
            }
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::FAILURE
            }
        }
    })
}
