//! Each controller's own identity, as kube-controller-manager's
//! `--use-service-account-credentials`: the service account `kube-system/<controller>`
//! (created when absent), whose token the manager's own identity requests through
//! TokenRequest and renews at 80% of its life. Its writes are then authenticated as
//! `system:serviceaccount:kube-system:<controller>`, authorized by upstream's
//! `system:controller:<controller>` role, admitted and audited as any client's.

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Api;
use kube::api::PostParams;
use tokio::sync::Mutex;

/// The namespace of the controllers' service accounts.
pub const CONTROLLER_NAMESPACE: &str = "kube-system";
/// How long a controller's token lives (the TokenRequest's expirationSeconds).
const TOKEN_SECONDS: i64 = 3600;

/// A controller's identity could not be had.
#[derive(Debug, thiserror::Error)]
pub enum CredentialError {
    /// The service account could not be read or created.
    #[error("service account {CONTROLLER_NAMESPACE}/{account}: {source}")]
    Account {
        /// Its name.
        account: String,
        /// Why.
        source: kube::Error,
    },
    /// Its token could not be requested.
    #[error("a token for {CONTROLLER_NAMESPACE}/{account}: {source}")]
    Token {
        /// Its name.
        account: String,
        /// Why.
        source: kube::Error,
    },
    /// A client could not be made with it.
    #[error("a client as {CONTROLLER_NAMESPACE}/{account}: {source}")]
    Client {
        /// Its name.
        account: String,
        /// Why.
        source: kube::Error,
    },
}

/// Where controllers get the client they write with.
#[derive(Clone)]
pub struct Credentials {
    root: kube::Client,
    root_config: kube::Config,
    /// Whether each controller writes as its own service account.
    per_controller: bool,
    cache: Arc<Mutex<std::collections::HashMap<String, (kube::Client, Instant)>>>,
}

impl Credentials {
    /// Controllers' clients from the manager's own (`root`, made from `root_config`); with
    /// `per_controller`, each its own service account's.
    pub fn new(root: kube::Client, root_config: kube::Config, per_controller: bool) -> Self {
        Self { root, root_config, per_controller, cache: Arc::default() }
    }

    /// The manager's own client (watches, the Lease).
    pub fn root(&self) -> kube::Client {
        self.root.clone()
    }

    /// The client controller `account` (`replicaset-controller`) writes with now.
    pub async fn client(&self, account: &str) -> Result<kube::Client, CredentialError> {
        if !self.per_controller {
            return Ok(self.root.clone());
        }
        let mut cache = self.cache.lock().await;
        if let Some((client, renew_at)) = cache.get(account)
            && Instant::now() < *renew_at
        {
            return Ok(client.clone());
        }
        let (client, renew_at) = self.issue(account).await?;
        cache.insert(account.to_owned(), (client.clone(), renew_at));
        Ok(client)
    }

    async fn issue(&self, account: &str) -> Result<(kube::Client, Instant), CredentialError> {
        let accounts: Api<ServiceAccount> = Api::namespaced(self.root.clone(), CONTROLLER_NAMESPACE);
        let err = |source| CredentialError::Account { account: account.to_owned(), source };
        if accounts.get_opt(account).await.map_err(err)?.is_none() {
            let sa = ServiceAccount {
                metadata: ObjectMeta { name: Some(account.to_owned()), ..Default::default() },
                ..Default::default()
            };
            match accounts.create(&PostParams::default(), &sa).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 409 => {}
                Err(e) => return Err(err(e)),
            }
        }
        let request = TokenRequest {
            spec: TokenRequestSpec { expiration_seconds: Some(TOKEN_SECONDS), ..Default::default() },
            ..Default::default()
        };
        let issued: TokenRequest = accounts
            .create_subresource("token", account, &PostParams::default(), &request)
            .await
            .map_err(|source| CredentialError::Token { account: account.to_owned(), source })?;
        let token = issued.status.map(|s| s.token).unwrap_or_default();
        let mut config = self.root_config.clone();
        config.auth_info = kube::config::AuthInfo { token: Some(token.into()), ..Default::default() };
        let client = kube::Client::try_from(config)
            .map_err(|source| CredentialError::Client { account: account.to_owned(), source })?;
        // Renewed at 80% of its life, as the kubelet's token manager does.
        let renew_at = Instant::now() + Duration::from_secs(u64::try_from(TOKEN_SECONDS * 8 / 10).unwrap_or(60));
        Ok((client, renew_at))
    }
}
