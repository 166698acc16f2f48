//! `podpass node …`: the node agent's tools.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};
use podpass_api::credential_provider::{read_config, validate};
use podpass_api::{Feature, FeatureGates};

/// `podpass node …`.
#[derive(Debug, Subcommand)]
pub enum NodeCommand {
    /// Read and validate a CredentialProviderConfig exactly as the kubelet does; prints
    /// `ok <hash>` or the kubelet's errors (exit 1).
    CheckConfig(CheckConfigArgs),
}

/// Flags of `podpass node check-config`.
#[derive(Debug, Args)]
pub struct CheckConfigArgs {
    /// A config file, or a directory of `.json`/`.yaml`/`.yml` files merged in name order.
    #[arg(long)]
    image_credential_provider_config: PathBuf,
    /// Feature gates, e.g. `KubeletServiceAccountTokenForCredentialProviders=false`.
    #[arg(long, default_value = "")]
    feature_gates: FeatureGates,
}

/// Runs a node subcommand.
pub fn run(cmd: NodeCommand) -> ExitCode {
    match cmd {
        NodeCommand::CheckConfig(a) => check_config(&a),
    }
}

fn check_config(a: &CheckConfigArgs) -> ExitCode {
    let (config, hash) = match read_config(&a.image_credential_provider_config) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(1);
        }
    };
    let errors = validate(&config, a.feature_gates.enabled(Feature::KubeletServiceAccountTokenForCredentialProviders));
    if !errors.is_empty() {
        eprintln!("failed to validate credential provider config: {errors}");
        return ExitCode::from(1);
    }
    println!("ok {hash}");
    ExitCode::SUCCESS
}
