//! `podpass registry-auth`: the library's [`Config`] is the flag set; this runs it.

use std::process::ExitCode;

use podpass_registry_auth::{Config, RunError};

/// Runs the service until SIGINT/SIGTERM; exit 64 with every configuration problem
/// (nothing bound), 1 when the address cannot be bound.
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
        let bound = match prepared.bind().await {
            Ok(b) => b,
            Err(e) => {
                eprintln!("error: {e}");
                let usage = matches!(e, RunError::TokenReview(_));
                return ExitCode::from(if usage { crate::EXIT_USAGE } else { 1 });
            }
        };
        if let Some(addr) = bound.local_addr() {
            eprintln!("podpass registry-auth serving on {addr}");
        }
        bound.serve(crate::shutdown_signal()).await;
        ExitCode::SUCCESS
    })
}
