//! The leader-election flags every component shares (component-base's
//! `LeaderElectionConfiguration`), checked as client-go's `NewLeaderElector` checks them.

use std::time::Duration;

use podpass_api::GoDuration;
use podpass_serve::Problems;

use crate::leader::{Election, identity};

/// `--leader-elect*`, flattened into a component's flags.
#[derive(Debug, Clone, clap::Args)]
pub struct LeaderElectionFlags {
    /// Elect one leader among the component's replicas through a Lease before working.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub leader_elect: bool,
    /// How long a non-leader waits after the last observed renewal before taking over.
    #[arg(long, default_value = "15s")]
    pub leader_elect_lease_duration: GoDuration,
    /// How long the leader keeps trying to renew before it stops leading.
    #[arg(long, default_value = "10s")]
    pub leader_elect_renew_deadline: GoDuration,
    /// How often candidates try to acquire or renew.
    #[arg(long, default_value = "2s")]
    pub leader_elect_retry_period: GoDuration,
    /// The Lease's namespace.
    #[arg(long, default_value = "kube-system")]
    pub leader_elect_resource_namespace: String,
    /// The Lease's name (default: the component's: `kube-controller-manager`,
    /// `kube-scheduler`).
    #[arg(long)]
    pub leader_elect_resource_name: Option<String>,
}

fn duration(flag: &str, value: GoDuration, problems: &mut Problems) -> Duration {
    match value.to_std().filter(|d| !d.is_zero()) {
        Some(d) => d,
        None => {
            problems.push(flag, "must be a positive duration");
            Duration::from_secs(1)
        }
    }
}

impl LeaderElectionFlags {
    /// The election (`None` without `--leader-elect`) on the Lease `default_name` unless
    /// another is named; each problem pushed with its flag.
    pub fn prepare(&self, default_name: &str, problems: &mut Problems) -> Option<Election> {
        let lease = duration("--leader-elect-lease-duration", self.leader_elect_lease_duration, problems);
        let renew = duration("--leader-elect-renew-deadline", self.leader_elect_renew_deadline, problems);
        let retry = duration("--leader-elect-retry-period", self.leader_elect_retry_period, problems);
        if lease <= renew {
            problems.push("--leader-elect-lease-duration", "must be greater than --leader-elect-renew-deadline");
        }
        if renew.as_secs_f64() <= retry.as_secs_f64() * 1.2 {
            problems.push("--leader-elect-renew-deadline", "must be greater than --leader-elect-retry-period × 1.2");
        }
        self.leader_elect.then(|| Election {
            namespace: self.leader_elect_resource_namespace.clone(),
            name: self.leader_elect_resource_name.clone().unwrap_or_else(|| default_name.to_owned()),
            identity: identity(),
            lease_duration: lease,
            renew_deadline: renew,
            retry_period: retry,
        })
    }
}
