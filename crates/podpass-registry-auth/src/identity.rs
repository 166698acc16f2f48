//! Who a token request speaks for, once its credential verified: the same shape whether it
//! came as a service-account token or as an exchange token.

use std::collections::BTreeMap;

use podpass_token::ObjectRef;
use serde::{Deserialize, Serialize};

/// How the identity was presented.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Credential {
    /// A service-account token of a trusted issuer.
    ServiceAccountToken,
    /// An exchange token this service signed earlier (password or refresh token).
    ExchangeToken,
}

impl Credential {
    /// Label for metrics and audit lines.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ServiceAccountToken => "serviceaccount-token",
            Self::ExchangeToken => "exchange-token",
        }
    }
}

/// A verified service-account identity.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Identity {
    /// The issuer of the service-account token (directly or through the exchange).
    pub issuer: String,
    /// Namespace.
    pub namespace: String,
    /// Service account name and UID.
    pub service_account: ObjectRef,
    /// The pod the token was bound to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<ObjectRef>,
    /// The node the token names (a pod-bound token's node, or a node-bound token's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<ObjectRef>,
    /// Opted-in service-account annotations the node reported at exchange time.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    /// The service-account token's `jti`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jti: Option<String>,
    /// The Secret the token was bound to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<ObjectRef>,
}

impl Identity {
    /// `system:serviceaccount:<namespace>:<name>`.
    pub fn username(&self) -> String {
        format!("system:serviceaccount:{}:{}", self.namespace, self.service_account.name)
    }
}
