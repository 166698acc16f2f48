//! `podpass scheduler`: the library's [`Config`] is the flag set; this runs it.

use std::process::ExitCode;

use podpass_scheduler::{Config, RunError};

/// Runs the scheduler until SIGINT/SIGTERM; exit 64 with every configuration problem or a
/// kubeconfig it cannot use, 1 when it stops leading (as kube-scheduler exits on a lost
/// election, for its supervisor to start it again).
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
        match podpass_scheduler::run(prepared, crate::shutdown_signal()).await {
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
