//! The flags of `podpass controller-manager`, named as kube-controller-manager's, and
//! what they prepare.

use podpass_serve::{ConfigErrors, Problems};
use std::path::PathBuf;

use podpass_component::LeaderElectionFlags;

use crate::leader::Election;

/// The Lease the managers elect their leader on.
pub const LEASE_NAME: &str = "kube-controller-manager";

/// The controllers this manager runs (kube-controller-manager's names).
pub const CONTROLLERS: [&str; 19] = [
    crate::service_account_token::NAME,
    crate::service_account::NAME,
    crate::root_ca_publisher::NAME,
    crate::deployment::NAME,
    crate::replica_set::NAME,
    crate::daemon_set::NAME,
    crate::job::NAME,
    crate::cron_job::NAME,
    crate::endpoints::NAME,
    crate::endpoint_slice::NAME,
    crate::resource_quota::NAME,
    crate::namespace::NAME,
    crate::clusterrole_aggregation::NAME,
    crate::certificates::APPROVER,
    crate::certificates::SIGNER,
    crate::pod_gc::NAME,
    crate::garbage_collector::NAME,
    crate::node_lifecycle::NAME,
    crate::taint_eviction::NAME,
];

/// The controllers `*` leaves out, run only when named (kube-controller-manager's
/// disabled-by-default ones; kubeadm names them).
pub const OFF_BY_DEFAULT: [&str; 2] = [crate::bootstrap::SIGNER, crate::bootstrap::CLEANER];

/// A controller's old short name where it is not its name less `-controller`
/// (kube-controller-manager's aliases).
fn alias(controller: &str) -> Option<&'static str> {
    match controller {
        crate::bootstrap::SIGNER => Some("bootstrapsigner"),
        crate::certificates::APPROVER => Some("csrapproving"),
        crate::certificates::SIGNER => Some("csrsigning"),
        crate::bootstrap::CLEANER => Some("tokencleaner"),
        crate::endpoints::NAME => Some("endpoint"),
        crate::root_ca_publisher::NAME => Some("root-ca-cert-publisher"),
        crate::pod_gc::NAME => Some("podgc"),
        crate::node_lifecycle::NAME => Some("nodelifecycle"),
        crate::daemon_set::NAME => Some("daemonset"),
        _ => None,
    }
}

/// The flags of `podpass controller-manager`: declared once here, parsed by the CLI.
#[derive(Debug, Clone, clap::Args)]
pub struct Config {
    /// Kubeconfig of the manager's own identity (`system:kube-controller-manager`).
    #[arg(long)]
    pub kubeconfig: PathBuf,
    /// Leader election (the Lease `kube-system/kube-controller-manager` by default).
    #[command(flatten)]
    pub leader_election: LeaderElectionFlags,
    /// Each controller writes as its own service account `kube-system/<controller>` (as
    /// kubeadm runs kube-controller-manager); false: all as the manager's identity.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub use_service_account_credentials: bool,
    /// Controllers to run: `*` for all but the bootstrap signer and token cleaner, `name` to
    /// add one, `-name` to leave one out.
    #[arg(long, value_delimiter = ',', default_value = "*")]
    pub controllers: Vec<String>,
    /// The cluster CA (PEM) the root CA publisher puts in every namespace's
    /// `kube-root-ca.crt`; by default the CA the kubeconfig trusts.
    #[arg(long)]
    pub root_ca_file: Option<PathBuf>,
    /// The service-account key (PEM) the tokens controller signs legacy token Secrets with;
    /// without it that controller does not run, as kube-controller-manager's.
    #[arg(long)]
    pub service_account_private_key_file: Option<PathBuf>,
    /// The CA certificate (PEM) the certificate signer signs kubelet certificates with;
    /// without it and its key the signer does not run.
    #[arg(long)]
    pub cluster_signing_cert_file: Option<PathBuf>,
    /// That CA's private key (PEM).
    #[arg(long)]
    pub cluster_signing_key_file: Option<PathBuf>,
    /// The longest lifetime of a signed certificate (Go duration).
    #[arg(long, default_value = "8760h")]
    pub cluster_signing_duration: podpass_api::GoDuration,
    /// How often the node lifecycle controller looks at the nodes.
    #[arg(long, default_value = "5s")]
    pub node_monitor_period: podpass_api::GoDuration,
    /// How long a node may stop renewing its Lease and posting its status before it is
    /// marked `Unknown`; more than the node's renew interval (10 s) several times over.
    #[arg(long, default_value = "50s")]
    pub node_monitor_grace_period: podpass_api::GoDuration,
    /// The same for a node that never posted a Ready condition.
    #[arg(long, default_value = "1m")]
    pub node_startup_grace_period: podpass_api::GoDuration,
    /// Nodes per second whose pods are evicted (NoExecute-tainted) in a healthy zone.
    #[arg(long, default_value_t = 0.1)]
    pub node_eviction_rate: f64,
    /// The same in a large zone mostly not Ready.
    #[arg(long, default_value_t = 0.01)]
    pub secondary_node_eviction_rate: f64,
    /// A zone of more nodes than this is large (under it, a mostly down zone evicts nothing).
    #[arg(long, default_value_t = 50)]
    pub large_cluster_size_threshold: usize,
    /// The share of not-Ready nodes (of more than two) that makes a zone unhealthy.
    #[arg(long, default_value_t = 0.55)]
    pub unhealthy_zone_threshold: f64,
}

/// A configuration checked whole, ready to run.
pub struct Prepared {
    pub(crate) kubeconfig: PathBuf,
    pub(crate) election: Option<Election>,
    pub(crate) per_controller: bool,
    pub(crate) controllers: Vec<&'static str>,
    /// `--root-ca-file`'s PEM, when given.
    pub(crate) root_ca: Option<String>,
    /// `--service-account-private-key-file`'s key, when given.
    pub(crate) signing_key: Option<podpass_token::SigningKey>,
    /// The signer's CA, when both its files are given.
    pub(crate) signing_ca: Option<crate::certificates::SigningCa>,
    pub(crate) node_lifecycle: crate::node_lifecycle::Settings,
}

impl Config {
    /// Every problem at once (client-go's `NewLeaderElector` checks included); nothing is
    /// contacted yet.
    pub fn prepare(&self) -> Result<Prepared, ConfigErrors> {
        let mut problems = Problems::default();
        if !self.kubeconfig.is_file() {
            problems.push_value("--kubeconfig", self.kubeconfig.display(), "no such file");
        }
        let election = self.leader_election.prepare(LEASE_NAME, &mut problems);
        let mut controllers = Vec::new();
        for name in &self.controllers {
            let (off, bare) = name.strip_prefix('-').map_or((false, name.as_str()), |n| (true, n));
            if bare == "*" {
                controllers.extend(CONTROLLERS);
            } else if let Some(known) = CONTROLLERS
                .iter()
                .chain(OFF_BY_DEFAULT.iter())
                .find(|c| **c == bare || c.trim_end_matches("-controller") == bare || alias(c) == Some(bare))
            {
                if off {
                    controllers.retain(|c| c != known);
                } else {
                    controllers.push(known);
                }
            } else {
                problems.push_value(
                    "--controllers",
                    name,
                    format_args!(
                        "unknown controller (known: {}, {})",
                        CONTROLLERS.join(", "),
                        OFF_BY_DEFAULT.join(", ")
                    ),
                );
            }
        }
        controllers.dedup();
        let root_ca = self.root_ca_file.as_ref().and_then(|path| match std::fs::read_to_string(path) {
            Ok(pem) if pem.contains("-----BEGIN CERTIFICATE-----") => Some(pem),
            Ok(_) => {
                problems.push_value("--root-ca-file", path.display(), "holds no PEM certificate");
                None
            }
            Err(e) => {
                problems.push_value("--root-ca-file", path.display(), e);
                None
            }
        });
        let flag = "--service-account-private-key-file";
        let signing_key = self.service_account_private_key_file.as_ref().and_then(|path| {
            let pem = problems.check_value(flag, path.display(), std::fs::read(path))?;
            problems.check_value(flag, path.display(), podpass_token::SigningKey::from_pem(&pem))
        });
        let signing_ca = self.signing_ca(&mut problems);
        let node_lifecycle = self.node_lifecycle(&mut problems);
        problems.finish()?;
        Ok(Prepared {
            kubeconfig: self.kubeconfig.clone(),
            election,
            per_controller: self.use_service_account_credentials,
            controllers,
            root_ca,
            signing_key,
            signing_ca,
            node_lifecycle,
        })
    }
}

impl Config {
    /// The node lifecycle flags: positive periods, a grace period longer than the period
    /// (else every node would blink `Unknown` between two looks), rates and a share that
    /// mean something.
    fn node_lifecycle(&self, problems: &mut Problems) -> crate::node_lifecycle::Settings {
        let mut positive = |flag: &str, d: podpass_api::GoDuration| match d.to_std() {
            Some(d) if !d.is_zero() => d,
            _ => {
                problems.push_value(flag, d, "must be positive");
                std::time::Duration::from_secs(1)
            }
        };
        let period = positive("--node-monitor-period", self.node_monitor_period);
        let monitor = positive("--node-monitor-grace-period", self.node_monitor_grace_period);
        let startup = positive("--node-startup-grace-period", self.node_startup_grace_period);
        if monitor <= period {
            problems.push_value(
                "--node-monitor-grace-period",
                self.node_monitor_grace_period,
                format_args!("must be longer than --node-monitor-period ({})", self.node_monitor_period),
            );
        }
        for (flag, rate) in [
            ("--node-eviction-rate", self.node_eviction_rate),
            ("--secondary-node-eviction-rate", self.secondary_node_eviction_rate),
        ] {
            if !rate.is_finite() || rate < 0.0 {
                problems.push_value(flag, rate, "must be a number of nodes per second, 0 or more");
            }
        }
        if !(self.unhealthy_zone_threshold > 0.0 && self.unhealthy_zone_threshold <= 1.0) {
            problems.push_value("--unhealthy-zone-threshold", self.unhealthy_zone_threshold, "must be in (0, 1]");
        }
        crate::node_lifecycle::Settings {
            period,
            grace: crate::node_lifecycle::Grace { monitor, startup },
            rates: crate::node_lifecycle::Rates {
                primary: self.node_eviction_rate,
                secondary: self.secondary_node_eviction_rate,
                large_zone: self.large_cluster_size_threshold,
                unhealthy: self.unhealthy_zone_threshold,
            },
        }
    }
}

impl Config {
    /// `--cluster-signing-*`: both files or neither, each readable PEM, a positive duration.
    fn signing_ca(&self, problems: &mut Problems) -> Option<crate::certificates::SigningCa> {
        let duration = match self.cluster_signing_duration.to_std() {
            Some(d) if !d.is_zero() => Some(d),
            _ => {
                problems.push_value("--cluster-signing-duration", self.cluster_signing_duration, "must be positive");
                None
            }
        };
        let (cert, key) = match (&self.cluster_signing_cert_file, &self.cluster_signing_key_file) {
            (None, None) => return None,
            (Some(cert), Some(key)) => (cert, key),
            (Some(_), None) => {
                problems.push("--cluster-signing-key-file", "required with --cluster-signing-cert-file");
                return None;
            }
            (None, Some(_)) => {
                problems.push("--cluster-signing-cert-file", "required with --cluster-signing-key-file");
                return None;
            }
        };
        let cert_pem =
            problems.check_value("--cluster-signing-cert-file", cert.display(), std::fs::read_to_string(cert))?;
        if rcgen::Issuer::from_ca_cert_pem(&cert_pem, rcgen::KeyPair::generate().ok()?).is_err() {
            problems.push_value("--cluster-signing-cert-file", cert.display(), "holds no PEM CA certificate");
            return None;
        }
        let key_pem =
            problems.check_value("--cluster-signing-key-file", key.display(), std::fs::read_to_string(key))?;
        let key =
            problems.check_value("--cluster-signing-key-file", key.display(), rcgen::KeyPair::from_pem(&key_pem))?;
        Some(crate::certificates::SigningCa { cert_pem, key, duration: duration? })
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
        let all = std::iter::once("cm").chain(args.iter().copied());
        Cli::try_parse_from(all).map(|c| c.config).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn every_problem_is_reported_at_once_with_its_flag() {
        let c = parse(&[
            "--kubeconfig",
            "/nonexistent",
            "--leader-elect-lease-duration",
            "5s",
            "--leader-elect-renew-deadline",
            "10s",
            "--controllers",
            "*,widgets",
            "--root-ca-file",
            "/nonexistent/ca.crt",
            "--service-account-private-key-file",
            "/nonexistent/sa.key",
            "--node-monitor-grace-period",
            "5s",
            "--node-eviction-rate=-1",
            "--unhealthy-zone-threshold",
            "2",
        ]);
        let Err(errors) = c.prepare() else { panic!("a bad configuration was prepared") };
        for flag in [
            "--kubeconfig",
            "--leader-elect-lease-duration",
            "--controllers",
            "--root-ca-file",
            "--service-account-private-key-file",
            "--node-monitor-grace-period",
            "--node-eviction-rate",
            "--unhealthy-zone-threshold",
        ] {
            assert!(errors.names(flag), "{errors}");
        }
    }

    #[test]
    fn a_ca_without_a_certificate_and_a_key_that_is_none_are_refused() {
        let dir = std::env::temp_dir().join(format!("cm-files-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
        let (kubeconfig, ca, key) = (dir.join("kubeconfig"), dir.join("ca.crt"), dir.join("sa.key"));
        std::fs::write(&kubeconfig, "apiVersion: v1\nkind: Config\n").unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(&ca, "not a certificate").unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(&key, "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n")
            .unwrap_or_else(|e| panic!("{e}"));
        let path = |p: &std::path::Path| p.display().to_string();
        let c = parse(&[
            "--kubeconfig",
            &path(&kubeconfig),
            "--root-ca-file",
            &path(&ca),
            "--service-account-private-key-file",
            &path(&key),
        ]);
        let Err(errors) = c.prepare() else { panic!("a bad CA and key were taken") };
        assert!(errors.names("--root-ca-file") && errors.names("--service-account-private-key-file"), "{errors}");
        assert!(errors.to_string().contains("holds no PEM certificate"), "{errors}");
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn controllers_are_chosen_as_kube_controller_managers() {
        let file = std::env::temp_dir().join(format!("cm-kubeconfig-{}", std::process::id()));
        std::fs::write(&file, "apiVersion: v1\nkind: Config\n").unwrap_or_else(|e| panic!("{e}"));
        let path = file.display().to_string();
        let prepared = parse(&["--kubeconfig", &path]).prepare().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(prepared.controllers, CONTROLLERS);
        assert_eq!(prepared.election.as_ref().map(|e| e.lease_duration), Some(crate::leader::DEFAULT_LEASE_DURATION));
        let gc_only = parse(&[
            "--kubeconfig",
            &path,
            "--controllers",
            "*,-replicaset,-deployment,-job,-cronjob,-endpoint,-endpointslice,-serviceaccount,-root-ca-cert-publisher,-serviceaccount-token,-resourcequota,-podgc,-namespace,-clusterrole-aggregation,-csrapproving,-csrsigning,-nodelifecycle,-taint-eviction,-daemonset",
        ])
        .prepare();
        assert_eq!(gc_only.map(|p| p.controllers).unwrap_or_else(|e| panic!("{e}")), [crate::garbage_collector::NAME]);
        // kubeadm's line: the bootstrap controllers only when named.
        let kubeadm = parse(&["--kubeconfig", &path, "--controllers", "*,bootstrapsigner,tokencleaner"]).prepare();
        let kubeadm = kubeadm.map(|p| p.controllers).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(kubeadm.len(), CONTROLLERS.len() + 2);
        assert!(kubeadm.ends_with(&[crate::bootstrap::SIGNER, crate::bootstrap::CLEANER]), "{kubeadm:?}");
        let unelected = parse(&["--kubeconfig", &path, "--leader-elect=false"]).prepare();
        assert!(unelected.is_ok_and(|p| p.election.is_none()));
        let _ = std::fs::remove_file(file);
    }
}
