//! The node agent's view of the Kubernetes API, through kube-rs with a kubeconfig: pods,
//! service accounts, and pod-bound TokenRequests through the [`TokenManager`]. The same code
//! works against `podpass apiserver` and a real cluster.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Pod, ServiceAccount};
use kube::api::{Api, ObjectMeta, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};

/// The API client the node uses (kube-rs), as returned by [`client_from_kubeconfig`].
pub use kube::Client;
use thiserror::Error;

use crate::credential::{PodIdentity, ProviderServiceAccount, ServiceAccountSource};
use crate::token::{RequestedToken, TokenFetcher, TokenKey, TokenManager};
use futures::future::BoxFuture;

/// The API could not be reached or refused.
#[derive(Debug, Error)]
pub enum ApiClientError {
    /// The kubeconfig is unusable.
    #[error("kubeconfig {path}: {reason}")]
    Kubeconfig {
        /// Its path.
        path: String,
        /// Why.
        reason: String,
    },
    /// A request for `object` failed; the message is the API's own (its `Status` message
    /// when there is one), and the client's error is kept as the source.
    #[error("{object}: {}", RequestError::from(source))]
    Request {
        /// What was asked for (`pod team/web`).
        object: String,
        /// The client's error.
        #[source]
        source: kube::Error,
    },
    /// An object could not be encoded as a manifest.
    #[error("encoding {object}: {source}")]
    Encode {
        /// Which.
        object: String,
        /// The encoder's error.
        #[source]
        source: serde_json::Error,
    },
}

impl ApiClientError {
    fn request(object: String) -> impl FnOnce(kube::Error) -> Self {
        move |source| Self::Request { object, source }
    }
}

/// A client for the cluster a kubeconfig names (its current context).
pub async fn client_from_kubeconfig(path: &Path) -> Result<kube::Client, ApiClientError> {
    let err = |reason: String| ApiClientError::Kubeconfig { path: path.display().to_string(), reason };
    let kubeconfig = Kubeconfig::read_from(path).map_err(|e| err(e.to_string()))?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .map_err(|e| err(e.to_string()))?;
    kube::Client::try_from(config).map_err(|e| err(e.to_string()))
}

/// The API server's address as a kubeconfig's `server` names it (its host resolved), for
/// what relays connections to it.
pub async fn api_server_address(path: &Path) -> Result<std::net::SocketAddr, ApiClientError> {
    let err = |reason: String| ApiClientError::Kubeconfig { path: path.display().to_string(), reason };
    let kubeconfig = Kubeconfig::read_from(path).map_err(|e| err(e.to_string()))?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .map_err(|e| err(e.to_string()))?;
    let url = &config.cluster_url;
    let host = url.host().ok_or_else(|| err(format!("server {url} names no host")))?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let port = url.port_u16().unwrap_or(if url.scheme_str() == Some("http") { 80 } else { 443 });
    let mut found = tokio::net::lookup_host((host, port)).await.map_err(|e| err(format!("resolving {host}: {e}")))?;
    found.next().ok_or_else(|| err(format!("{host} resolves to no address")))
}

pub use crate::request_error::RequestError;

/// The cluster CA of a kubeconfig (`certificate-authority-data` or `-authority`), as PEM:
/// the CA the node trusts for client certificates on its own server.
pub async fn cluster_ca_pem(path: &Path) -> Result<String, ApiClientError> {
    let err = |reason: String| ApiClientError::Kubeconfig { path: path.display().to_string(), reason };
    let kubeconfig = Kubeconfig::read_from(path).map_err(|e| err(e.to_string()))?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .map_err(|e| err(e.to_string()))?;
    let certs = config.root_cert.unwrap_or_default();
    if certs.is_empty() {
        return Err(err("no cluster CA: the node's server needs one to check client certificates".into()));
    }
    Ok(certs.iter().map(|der| podpass_token::pem::encode("CERTIFICATE", der)).collect())
}

/// A pod as the credential lookup needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodInfo {
    /// Identity (namespace, name, uid, service account).
    pub identity: PodIdentity,
    /// `spec.imagePullSecrets` names.
    pub pull_secrets: Vec<String>,
}

/// Reads `namespace/name`.
pub async fn get_pod(client: &kube::Client, namespace: &str, name: &str) -> Result<PodInfo, ApiClientError> {
    let pod = Api::<Pod>::namespaced(client.clone(), namespace)
        .get(name)
        .await
        .map_err(ApiClientError::request(format!("pod {namespace}/{name}")))?;
    let spec = pod.spec.unwrap_or_default();
    Ok(PodInfo {
        identity: PodIdentity {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            uid: pod.metadata.uid.unwrap_or_default(),
            service_account: spec.service_account_name.unwrap_or_default(),
        },
        pull_secrets: spec.image_pull_secrets.unwrap_or_default().into_iter().map(|r| r.name).collect(),
    })
}

/// A container of a pod, as an explanation of its image needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodContainer {
    /// The container's name.
    pub name: String,
    /// Its image.
    pub image: String,
    /// `imagePullPolicy` as set (None: the API default applies).
    pub image_pull_policy: Option<String>,
    /// An init container (ensured first, in order).
    pub init: bool,
    /// Its state per the pod's status, as `kubectl describe` words it: the reason it is
    /// waiting with (`ContainerCreating`, `ErrImagePull`, `CrashLoopBackOff`) and the
    /// message, `Running` and since when, or `Terminated` with its reason and exit code.
    pub state: Option<(String, String)>,
}

/// The containers of `namespace/name` (init containers first, in order) and its node.
pub async fn get_pod_containers(
    client: &kube::Client,
    namespace: &str,
    name: &str,
) -> Result<(Option<String>, Vec<PodContainer>), ApiClientError> {
    let pod = Api::<Pod>::namespaced(client.clone(), namespace)
        .get(name)
        .await
        .map_err(ApiClientError::request(format!("pod {namespace}/{name}")))?;
    let spec = pod.spec.unwrap_or_default();
    let status = pod.status.unwrap_or_default();
    let state = |name: &str, statuses: &Option<Vec<k8s_openapi::api::core::v1::ContainerStatus>>| {
        let s = statuses.as_ref()?.iter().find(|s| s.name == name)?;
        let state = s.state.as_ref()?;
        if let Some(w) = &state.waiting {
            return Some((w.reason.clone().unwrap_or_default(), w.message.clone().unwrap_or_default()));
        }
        if let Some(r) = &state.running {
            let since = r.started_at.as_ref().map(|t| format!("started {}", t.0)).unwrap_or_default();
            return Some(("Running".to_owned(), since));
        }
        let t = state.terminated.as_ref()?;
        let reason = t.reason.clone().unwrap_or_default();
        Some(("Terminated".to_owned(), format!("{reason}, exit code {}", t.exit_code)))
    };
    let mut out = Vec::new();
    for (init, containers) in [(true, spec.init_containers.unwrap_or_default()), (false, spec.containers)] {
        let statuses = if init { &status.init_container_statuses } else { &status.container_statuses };
        for c in containers {
            out.push(PodContainer {
                state: state(&c.name, statuses),
                image: c.image.unwrap_or_default(),
                image_pull_policy: c.image_pull_policy,
                init,
                name: c.name,
            });
        }
    }
    Ok((spec.node_name, out))
}

/// Reads a Secret as the manifest text `kubectl get secret -o json` prints.
pub async fn get_secret_manifest(
    client: &kube::Client,
    namespace: &str,
    name: &str,
) -> Result<Vec<u8>, ApiClientError> {
    let secret = Api::<k8s_openapi::api::core::v1::Secret>::namespaced(client.clone(), namespace)
        .get(name)
        .await
        .map_err(ApiClientError::request(format!("secret {namespace}/{name}")))?;
    let encode = |source| ApiClientError::Encode { object: format!("secret {namespace}/{name}"), source };
    let mut value = serde_json::to_value(&secret).map_err(encode)?;
    value["kind"] = "Secret".into();
    serde_json::to_vec(&value).map_err(encode)
}

/// The pull secrets `names` of a pod in `namespace`, as the kubelet reads them
/// (`getPullSecretsForPod`): one that cannot be read or parsed is skipped, and returned
/// with why so the caller can warn (the kubelet's `FailedToRetrieveImagePullSecret`).
pub async fn pull_secrets(
    client: &kube::Client,
    namespace: &str,
    names: &[String],
) -> (Vec<crate::credential::PullSecret>, Vec<(String, String)>) {
    let mut found = Vec::with_capacity(names.len());
    let mut skipped = Vec::new();
    for name in names {
        let read = get_secret_manifest(client, namespace, name)
            .await
            .map_err(|e| e.to_string())
            .and_then(|m| crate::credential::parse_pull_secret(&m).map_err(|e| e.to_string()));
        match read {
            Ok(s) => found.push(s),
            Err(e) => skipped.push((name.clone(), e)),
        }
    }
    (found, skipped)
}

/// TokenRequests through kube-rs.
#[derive(Clone)]
pub struct KubeTokenFetcher {
    client: kube::Client,
}

impl KubeTokenFetcher {
    /// Requests tokens through `client`.
    pub fn new(client: kube::Client) -> Self {
        Self { client }
    }
}

impl TokenFetcher for KubeTokenFetcher {
    fn fetch<'a>(&'a self, key: &'a TokenKey) -> BoxFuture<'a, Result<RequestedToken, RequestError>> {
        Box::pin(async move {
            let request = TokenRequest {
                metadata: ObjectMeta {
                    uid: (!key.service_account_uid.is_empty()).then(|| key.service_account_uid.clone()),
                    ..Default::default()
                },
                spec: TokenRequestSpec {
                    audiences: key.audiences.clone(),
                    expiration_seconds: (key.expiration_seconds > 0).then_some(key.expiration_seconds),
                    bound_object_ref: key.bound.as_ref().map(|b| BoundObjectReference {
                        api_version: Some("v1".into()),
                        kind: Some(b.kind.clone()),
                        name: Some(b.name.clone()),
                        uid: Some(b.uid.clone()),
                    }),
                },
                status: None,
            };
            let answer = Api::<ServiceAccount>::namespaced(self.client.clone(), &key.namespace)
                .create_token_request(&key.service_account, &PostParams::default(), &request)
                .await
                .map_err(RequestError::from)?;
            let status = answer.status.ok_or(RequestError::from("TokenRequest answer without status"))?;
            Ok(RequestedToken {
                token: status.token,
                expires_at: status.expiration_timestamp.0.as_second(),
                expiration_seconds: answer.spec.expiration_seconds,
            })
        })
    }
}

/// Service accounts and pod-bound tokens from the API, tokens through the node's token manager.
pub struct KubeServiceAccounts {
    client: kube::Client,
    tokens: Arc<TokenManager<KubeTokenFetcher>>,
}

impl KubeServiceAccounts {
    /// Uses `client` for reads and TokenRequests, with a token manager of its own (a
    /// one-shot command's).
    pub fn new(client: kube::Client) -> Arc<Self> {
        let tokens = Arc::new(TokenManager::new(KubeTokenFetcher { client: client.clone() }));
        Self::with_tokens(client, tokens)
    }

    /// Uses `client` for reads, and `tokens` — shared with the projected volumes, so a node
    /// holds one cache of tokens, one set of metrics, one clean-up.
    pub fn with_tokens(client: kube::Client, tokens: Arc<TokenManager<KubeTokenFetcher>>) -> Arc<Self> {
        Arc::new(Self { client, tokens })
    }

    /// The token manager (for garbage collection and pod deletion).
    pub fn tokens(&self) -> &TokenManager<KubeTokenFetcher> {
        &self.tokens
    }
}

impl ServiceAccountSource for KubeServiceAccounts {
    fn service_account<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<ProviderServiceAccount, RequestError>> {
        Box::pin(async move {
            let sa = Api::<ServiceAccount>::namespaced(self.client.clone(), namespace)
                .get(name)
                .await
                .map_err(RequestError::from)?;
            Ok(ProviderServiceAccount {
                uid: sa.metadata.uid.unwrap_or_default(),
                annotations: sa.metadata.annotations.unwrap_or_default().into_iter().collect::<BTreeMap<_, _>>(),
            })
        })
    }

    fn token<'a>(
        &'a self,
        pod: &'a PodIdentity,
        service_account_uid: &'a str,
        audience: &'a str,
    ) -> BoxFuture<'a, Result<String, crate::token::TokenError>> {
        Box::pin(async move {
            let key = TokenKey {
                namespace: pod.namespace.clone(),
                service_account: pod.service_account.clone(),
                service_account_uid: service_account_uid.to_owned(),
                audiences: vec![audience.to_owned()],
                expiration_seconds: 0,
                bound: Some(crate::BoundObjectRef::pod(&pod.name, &pod.uid)),
            };
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
            self.tokens.get(&key, now).await.map(|t| t.token)
        })
    }
}
