//! The `podpass` command: per-pod identity for image pulls.
//!
//! Subcommands wire the library crates together; errors get context here (`anyhow`).
//! Exit codes: 0 success, 1 the operation was refused (e.g. a token did not verify),
//! 64 bad usage or configuration (EX_USAGE), 70 internal failure.

/// `println!` for command output: when stdout is a closed pipe (`podpass … | head`) the
/// process ends quietly (exit 0) instead of panicking, as a reader that stopped reading
/// wants; any other write error is reported and exits 74 (EX_IOERR).
macro_rules! outln {
    () => {
        $crate::write_stdout(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::write_stdout(format_args!("{}\n", format_args!($($arg)*)))
    };
}

mod apiserver;
mod audit_images;
mod bench;
mod bootstrap_token;
mod controller_manager;
mod node;
mod node_explain;
mod node_images;
mod node_join;
mod pull_progress;
mod registry_auth;
mod scheduler;
mod token;
mod up;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// glibc's allocator cost a fifth of the API server's cycles under concurrent TokenRequests
/// (arena contention and consolidation across tokio workers); mimalloc's thread-local heaps
/// remove most of it (measured with `podpass bench apiserver`).
///
/// Built without its transparent-huge-page advice (`no_thp`): with it, memory mimalloc had
/// returned to the system came back as fresh 2 MiB pages, each zeroed whole on first touch,
/// so a burst after idle spent a fifth of the control plane's CPU zeroing pages, and the
/// node agent held 285–362 KiB per pod against 114–121 KiB without (`podpass bench node`).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Exit code for bad flags or configuration (sysexits EX_USAGE).
pub(crate) const EXIT_USAGE: u8 = podpass_serve::EXIT_USAGE;

/// Prints every problem of a daemon's configuration, one `error:` line each, and exits 64.
pub(crate) fn config_problems(errors: &podpass_serve::ConfigErrors) -> ExitCode {
    for problem in &errors.0 {
        eprintln!("error: {problem}");
    }
    ExitCode::from(EXIT_USAGE)
}

#[derive(Debug, Parser)]
#[command(
    name = "podpass",
    version = concat!(env!("CARGO_PKG_VERSION"), " (matches Kubernetes v1.", podpass_apiserver::kube_minor!(), ")"),
    about = "Per-pod identity for container image pulls"
)]
pub(crate) struct Cli {
    /// Log format on stderr: `text` or `json` (one object per line); `RUST_LOG` filters.
    #[arg(long, global = true, default_value = "text", value_parser = ["text", "json"])]
    log_format: String,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// The whole product on this machine: control plane, registry-auth, the CNCF registry
    /// and a node agent, supervised together; `--demo` tells the story.
    Up(up::UpArgs),
    /// The control plane: service accounts, TokenRequest, TokenReview, OIDC discovery.
    Apiserver(apiserver::ApiserverArgs),
    /// Service-account tokens: generate keys, mint, publish JWKS, verify, decode.
    #[command(subcommand)]
    Token(token::TokenCommand),
    /// Node agent tools: credential provider config checks and lookups.
    #[command(subcommand)]
    Node(node::NodeCommand),
    /// Registry token exchange: trades a pod's service-account token for a registry bearer
    /// token (Docker token protocol), for any self-hosted registry.
    RegistryAuth(podpass_registry_auth::Config),
    /// kube-controller-manager's controllers (ReplicaSets), each writing as its own service
    /// account, one leader at a time by Lease; against any API server, by kubeconfig.
    ControllerManager(podpass_controller_manager::Config),
    /// kube-scheduler's default scheduler as an API client, one leader by Lease.
    Scheduler(podpass_scheduler::Config),
    /// Benchmarks against the physical limit measured in the same run.
    #[command(subcommand)]
    Bench(bench::BenchCommand),
    /// Audit trails joined: who pulled which image, on whose credential.
    #[command(subcommand)]
    Audit(audit_images::AuditCommand),
}

/// The multi-threaded runtime a command runs on; failing to start one is reported and is
/// exit 70 (EX_SOFTWARE).
pub(crate) fn runtime() -> Result<tokio::runtime::Runtime, ExitCode> {
    tokio::runtime::Builder::new_multi_thread().enable_all().build().map_err(|e| {
        eprintln!("error: starting runtime: {e}");
        ExitCode::from(70)
    })
}

/// Resolves on SIGTERM or SIGINT: the end of a daemon's run.
pub(crate) async fn shutdown_signal() {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("warning: SIGTERM handler: {e}");
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}

/// Writes to stdout for [`outln!`].
pub(crate) fn write_stdout(args: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let result = std::io::stdout().lock().write_fmt(args);
    match result {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => std::process::exit(0),
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "error: writing to stdout: {e}");
            std::process::exit(74);
        }
    }
}

/// Library logs (`tracing`) reach the operator on stderr, as text or JSON lines;
/// `RUST_LOG` filters them (default `default`).
fn init_logging(format: &str, default: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    let _ = if format == "json" { builder.json().try_init() } else { builder.try_init() };
}

/// The CNI plugin: the network config on stdin (at most 1 MiB), the result or the spec's
/// error object on stdout.
fn cni_plugin(name: &str) -> ExitCode {
    use std::io::{Read, Write};
    let mut stdin = Vec::new();
    let _ = std::io::stdin().take(1 << 20).read_to_end(&mut stdin);
    let vars: std::collections::HashMap<String, String> = std::env::vars().collect();
    let (out, code) = match podpass_node::runtime::cni::run(name, &vars, &stdin) {
        Ok(result) => (result, 0),
        Err(e) => (e.to_json(), 1),
    };
    let _ = std::io::stdout().write_all(out.as_bytes());
    ExitCode::from(code)
}

fn main() -> ExitCode {
    // Run as `podpass-loopback` (a link in containerd's CNI bin dir), this binary is the
    // CNI plugin of podpass's pod network.
    let argv0 = std::env::args_os().next().unwrap_or_default();
    let name = std::path::Path::new(&argv0).file_name().and_then(|n| n.to_str()).unwrap_or_default();
    if let Some(plugin) = podpass_node::runtime::cni::PLUGINS.iter().find(|p| **p == name) {
        return cni_plugin(plugin);
    }
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let code = if e.use_stderr() { EXIT_USAGE } else { 0 };
            // Printing help or a usage error to a closed pipe is not worth a panic.
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    // A thousand hollow nodes in one process would drown the bench's own lines in theirs.
    let hollow = matches!(&cli.command, Command::Bench(bench::BenchCommand::Cluster(_)));
    init_logging(&cli.log_format, if hollow { "error" } else { "info" });
    match cli.command {
        Command::Up(args) => up::run(args),
        Command::Apiserver(args) => apiserver::run(args),
        Command::Token(cmd) => token::run(cmd),
        Command::Node(cmd) => node::run(cmd),
        Command::RegistryAuth(args) => registry_auth::run(args),
        Command::ControllerManager(args) => controller_manager::run(args),
        Command::Scheduler(args) => scheduler::run(args),
        Command::Audit(cmd) => match audit_images::run(cmd) {
            Ok(true) => ExitCode::SUCCESS,
            Ok(false) => ExitCode::from(1),
            Err(e) => {
                eprintln!("error: {e:#}");
                ExitCode::from(EXIT_USAGE)
            }
        },
        Command::Bench(cmd) => match bench::run(cmd) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("error: {e:#}");
                ExitCode::from(70)
            }
        },
    }
}
