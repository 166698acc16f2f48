//! `podpass controller-manager`: the library's [`Config`] is the flag set; this runs it.

use std::process::ExitCode;

use podpass_controller_manager::{Config, RunError};

/// Runs the manager until SIGINT/SIGTERM; exit 64 with every configuration problem, 1 when
/// its kubeconfig cannot be used or it stops leading (as kube-controller-manager exits on
/// a lost election, for its supervisor to start it again).
pub fn run(config: Config) -> ExitCode {
    let prepared = match config.prepare() {
        Ok(p) => p,
        Err(e) => return crate::config_problems(&e),
    };
    let runtime = match crate::runtime() {
        Ok(r) => r,
        Err(code) => return code,
    };
    runtime.block_on(async move {
        match podpass_controller_manager::run(prepared, crate::shutdown_signal()).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(e @ RunError::Kubeconfig { .. }) => {
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
