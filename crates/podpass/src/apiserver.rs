//! `podpass apiserver …`: the control plane.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};
use podpass_apiserver::write_atomic;
use podpass_apiserver::{ApiServerConfig, kubeconfig, random_token};

use crate::EXIT_USAGE;

#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct ApiserverArgs {
    #[command(subcommand)]
    command: Option<ApiserverCommand>,
    #[command(flatten)]
    flags: ApiServerConfig,
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

/// `podpass apiserver`: exit 64 with every configuration problem before anything is
/// bound, 1 when it cannot start, 0 after SIGINT/SIGTERM.
fn serve(config: ApiServerConfig) -> ExitCode {
    // Everything is checked and loaded before a port is bound.
    let prepared = match config.prepare() {
        Ok(p) => p,
        Err(e) => return crate::config_problems(&e),
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
                return ExitCode::from(1);
            }
        };
        eprintln!("podpass apiserver serving on {}", bound.server_url);
        outln!("kubectl --kubeconfig {} get --raw /version", bound.admin_kubeconfig.display());
        bound.serve(crate::shutdown_signal()).await;
        ExitCode::SUCCESS
    })
}
