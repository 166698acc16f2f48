//! The flags of `podpass scheduler`, named as kube-scheduler's, and what they prepare.

use std::path::PathBuf;

use podpass_component::LeaderElectionFlags;
use podpass_component::leader::Election;
use podpass_serve::{ConfigErrors, Problems};

/// The Lease the schedulers elect their leader on.
pub const LEASE_NAME: &str = "kube-scheduler";

/// The flags of `podpass scheduler`: declared once here, parsed by the CLI.
#[derive(Debug, Clone, clap::Args)]
pub struct Config {
    /// Kubeconfig of the scheduler's identity (`system:kube-scheduler`).
    #[arg(long)]
    pub kubeconfig: PathBuf,
    /// Leader election (the Lease `kube-system/kube-scheduler` by default).
    #[command(flatten)]
    pub leader_election: LeaderElectionFlags,
}

/// A configuration checked whole, ready to run.
pub struct Prepared {
    pub(crate) kubeconfig: PathBuf,
    pub(crate) election: Option<Election>,
}

impl Config {
    /// Every problem at once; nothing is contacted yet.
    pub fn prepare(&self) -> Result<Prepared, ConfigErrors> {
        let mut problems = Problems::default();
        if !self.kubeconfig.is_file() {
            problems.push_value("--kubeconfig", self.kubeconfig.display(), "no such file");
        }
        let election = self.leader_election.prepare(LEASE_NAME, &mut problems);
        problems.finish()?;
        Ok(Prepared { kubeconfig: self.kubeconfig.clone(), election })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        config: Config,
    }

    fn parse(args: &[&str]) -> Config {
        let all = std::iter::once("scheduler").chain(args.iter().copied());
        Cli::try_parse_from(all).map(|c| c.config).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn every_problem_is_reported_with_its_flag_and_the_lease_is_kube_schedulers() {
        let bad = parse(&["--kubeconfig", "/nonexistent", "--leader-elect-renew-deadline", "1s"]).prepare();
        let Err(errors) = bad else { panic!("accepted") };
        for flag in ["--kubeconfig", "--leader-elect-renew-deadline"] {
            assert!(errors.names(flag), "{errors}");
        }
        let file = std::env::temp_dir().join(format!("sched-kubeconfig-{}", std::process::id()));
        std::fs::write(&file, "apiVersion: v1\nkind: Config\n").unwrap_or_else(|e| panic!("{e}"));
        let prepared =
            parse(&["--kubeconfig", &file.display().to_string()]).prepare().unwrap_or_else(|e| panic!("{e}"));
        let election = prepared.election.unwrap_or_else(|| panic!("elected by default"));
        assert_eq!((election.namespace.as_str(), election.name.as_str()), ("kube-system", LEASE_NAME));
        let _ = std::fs::remove_file(file);
    }
}
