//! The podpass controller manager (`podpass controller-manager`): kube-controller-manager's
//! controllers as clients of any Kubernetes API server. Each controller writes as its own
//! service account (`--use-service-account-credentials`), so its writes are authenticated,
//! authorized, admitted and audited as a user's; one manager at a time leads, through the
//! Lease `kube-system/kube-controller-manager` (client-go's election, [`leader`]).
//!
//! - [`Config`] → [`Config::prepare`] (every problem at once) → [`run`].
//! - The controllers: the Deployment, ReplicaSet, DaemonSet, Job and CronJob controllers (the Job
//!   controller also deletes finished Jobs past their TTL), the Endpoints and EndpointSlice
//!   controllers, the garbage collector, the service account controller (each namespace's
//!   `default`) and the root CA publisher (each namespace's `kube-root-ca.crt`), the node
//!   lifecycle controller (silent nodes turn `Unknown` and are tainted) and the taint
//!   eviction controller (pods leave nodes whose NoExecute taints they do not tolerate).

mod bootstrap;
mod cache;
mod certificates;
mod claim;
mod clusterrole_aggregation;
use podpass_component::events;
pub use podpass_component::leader;
mod config;
mod credentials;
mod cron_job;
mod daemon_set;
mod deployment;
mod endpoint_slice;
mod endpoints;
mod expectations;
mod garbage_collector;
mod job;
mod namespace;
mod node_lifecycle;
mod pod_gc;
mod replica_set;
mod resource_quota;
mod root_ca_publisher;
mod service_account;
mod service_account_token;
mod service_pods;
mod sync_error;
mod taint_eviction;

pub use config::{CONTROLLERS, Config, OFF_BY_DEFAULT, Prepared};
pub use credentials::{CONTROLLER_NAMESPACE, CredentialError, Credentials};
pub use sync_error::SyncError;

pub use podpass_component::RunError;

/// Runs the prepared manager until `shutdown` resolves or it stops leading.
pub async fn run(prepared: Prepared, shutdown: impl std::future::Future<Output = ()>) -> Result<(), RunError> {
    let (root, config) = podpass_component::client(&prepared.kubeconfig).await?;
    let root_ca = match prepared.root_ca {
        Some(pem) => pem,
        None => root_ca_publisher::pem_of(config.root_cert.as_deref().unwrap_or_default()),
    };
    let credentials = Credentials::new(root.clone(), config, prepared.per_controller);
    let mut signing_key = prepared.signing_key;
    let mut signing_ca = prepared.signing_ca;
    let controllers = prepared.controllers;
    let node_lifecycle = prepared.node_lifecycle;
    let work = move || {
        futures::future::join_all(controllers.into_iter().map(move |name| {
            let credentials = credentials.clone();
            let root_ca = root_ca.clone();
            let signer = (name == service_account_token::NAME).then(|| signing_key.take()).flatten().map(|key| {
                service_account_token::TokenSigner {
                    generator: podpass_token::TokenGenerator::new(podpass_token::LEGACY_ISSUER, key),
                    ca_pem: root_ca.clone(),
                }
            });
            let ca = (name == certificates::SIGNER).then(|| signing_ca.take()).flatten();
            async move {
                tracing::info!(controller = name, "starting controller");
                match name {
                    deployment::NAME => deployment::run(credentials).await,
                    replica_set::NAME => replica_set::run(credentials).await,
                    daemon_set::NAME => daemon_set::run(credentials).await,
                    job::NAME => job::run(credentials).await,
                    cron_job::NAME => cron_job::run(credentials).await,
                    garbage_collector::NAME => garbage_collector::run(credentials).await,
                    endpoints::NAME => endpoints::run(credentials).await,
                    endpoint_slice::NAME => endpoint_slice::run(credentials).await,
                    bootstrap::SIGNER => bootstrap::run_signer(credentials).await,
                    certificates::APPROVER => certificates::run_approver(credentials).await,
                    certificates::SIGNER => match ca {
                        Some(ca) => certificates::run_signer(credentials, ca).await,
                        None => tracing::warn!(
                            controller = name,
                            "not started: no --cluster-signing-cert-file and --cluster-signing-key-file to sign with"
                        ),
                    },
                    bootstrap::CLEANER => bootstrap::run_cleaner(credentials).await,
                    clusterrole_aggregation::NAME => clusterrole_aggregation::run(credentials).await,
                    namespace::NAME => namespace::run(credentials).await,
                    pod_gc::NAME => pod_gc::run(credentials).await,
                    node_lifecycle::NAME => node_lifecycle::run(credentials, node_lifecycle).await,
                    taint_eviction::NAME => taint_eviction::run(credentials).await,
                    resource_quota::NAME => resource_quota::run(credentials).await,
                    service_account::NAME => service_account::run(credentials).await,
                    root_ca_publisher::NAME => root_ca_publisher::run(credentials, root_ca).await,
                    service_account_token::NAME => match signer {
                        Some(signer) => service_account_token::run(credentials, signer).await,
                        None => tracing::warn!(
                            controller = name,
                            "not started: no --service-account-private-key-file to sign tokens with"
                        ),
                    },
                    _ => {}
                }
            }
        }))
    };
    podpass_component::lead(root, prepared.election, "kube-controller-manager", work, shutdown).await
}
