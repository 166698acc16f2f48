//! `kubeadm token create`: a bootstrap token Secret written through the API as an admin
//! writes it, its fields checked as kubeadm checks them first.

use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::PostParams;
use podpass_api::bootstrap_token::{self, NAMESPACE};

/// What to create.
#[derive(Debug, Clone)]
pub struct TokenCreate {
    /// The token (`<id>.<secret>`); a random one when `None`.
    pub token: Option<String>,
    /// How long it lives; `None` (kubeadm's `--ttl 0`): for ever.
    pub ttl: Option<Duration>,
    /// What it is for, in words.
    pub description: Option<String>,
    /// `signing`, `authentication`.
    pub usages: Vec<String>,
    /// Extra groups (`system:bootstrappers:…`), for an authenticating token.
    pub groups: Vec<String>,
}

/// A token could not be created.
#[derive(Debug, thiserror::Error)]
pub enum TokenCreateError {
    /// A field kubeadm would refuse.
    #[error("{field}: {message}")]
    Invalid {
        /// The flag.
        field: &'static str,
        /// Why.
        message: String,
    },
    /// No random token could be made.
    #[error("generating a token: the random source failed")]
    Random,
    /// The API refused or could not be reached.
    #[error("creating secret {NAMESPACE}/{name}: {source}")]
    Api {
        /// The Secret's name.
        name: String,
        /// Why.
        source: kube::Error,
    },
}

impl TokenCreate {
    /// kubeadm's checks (`ValidateBootstrapTokenUsages`, `ValidateBootstrapGroupName`, the
    /// token's format): every problem found is the first one's error.
    fn check(&self) -> Result<(), TokenCreateError> {
        let invalid = |field, message: String| Err(TokenCreateError::Invalid { field, message });
        if let Some(t) = &self.token
            && bootstrap_token::parse(t).is_none()
        {
            return invalid("token", format!("{t:?} is not of the form \"[a-z0-9]{{6}}.[a-z0-9]{{16}}\""));
        }
        for usage in &self.usages {
            if usage != "signing" && usage != "authentication" {
                return invalid(
                    "--usages",
                    format!("invalid bootstrap token usage {usage:?}: signing, authentication"),
                );
            }
        }
        for group in &self.groups {
            if !bootstrap_token::valid_extra_group(group) {
                return invalid(
                    "--groups",
                    format!("{group:?} must match \\Asystem:bootstrappers:[a-z0-9:-]{{0,255}}[a-z0-9]\\z"),
                );
            }
        }
        if !self.groups.is_empty() && !self.usages.iter().any(|u| u == "authentication") {
            return invalid("--groups", "extra groups need the \"authentication\" usage".into());
        }
        Ok(())
    }
}

/// Creates the token's Secret in `kube-system` through `client`; returns the token.
pub async fn create_bootstrap_token(client: &kube::Client, request: &TokenCreate) -> Result<String, TokenCreateError> {
    request.check()?;
    let token = match &request.token {
        Some(t) => t.clone(),
        None => bootstrap_token::generate().map_err(|_| TokenCreateError::Random)?,
    };
    let expires = request.ttl.map(|ttl| {
        let at = jiff::Timestamp::now().as_second().saturating_add(i64::try_from(ttl.as_secs()).unwrap_or(i64::MAX));
        jiff::Timestamp::from_second(at).map(|t| t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()).unwrap_or_default()
    });
    let usages: Vec<&str> = request.usages.iter().map(String::as_str).collect();
    let groups: Vec<&str> = request.groups.iter().map(String::as_str).collect();
    let object = bootstrap_token::secret(&token, expires.as_deref(), request.description.as_deref(), &usages, &groups)
        .ok_or(TokenCreateError::Random)?;
    let name = object.pointer("/metadata/name").and_then(|n| n.as_str()).unwrap_or_default().to_owned();
    let secret: Secret = serde_json::from_value(object)
        .map_err(|e| TokenCreateError::Invalid { field: "token", message: e.to_string() })?;
    Api::<Secret>::namespaced(client.clone(), NAMESPACE)
        .create(&PostParams::default(), &secret)
        .await
        .map_err(|source| TokenCreateError::Api { name, source })?;
    Ok(token)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(usages: &[&str], groups: &[&str]) -> TokenCreate {
        TokenCreate {
            token: None,
            ttl: None,
            description: None,
            usages: usages.iter().map(|u| (*u).to_owned()).collect(),
            groups: groups.iter().map(|g| (*g).to_owned()).collect(),
        }
    }

    #[test]
    fn kubeadms_checks_name_the_flag() {
        assert!(request(&["signing", "authentication"], &[bootstrap_token::NODE_GROUP]).check().is_ok());
        let field = |r: TokenCreate| match r.check() {
            Err(TokenCreateError::Invalid { field, .. }) => field,
            other => panic!("{other:?}"),
        };
        assert_eq!(field(request(&["signing", "sudo"], &[])), "--usages");
        assert_eq!(field(request(&["authentication"], &["system:masters"])), "--groups");
        assert_eq!(field(request(&["signing"], &[bootstrap_token::NODE_GROUP])), "--groups");
        let mut bad = request(&["signing"], &[]);
        bad.token = Some("short.token".into());
        assert_eq!(field(bad), "token");
    }
}
