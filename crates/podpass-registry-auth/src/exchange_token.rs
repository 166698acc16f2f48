//! Exchange tokens: what a service-account token is traded for when a client asks for an
//! offline token (`offline_token=true`, `access_type=offline`). Signed by this service with
//! its own key, they carry the verified identity (service account with its UID, pod, node,
//! the forwarded annotations) and are accepted back as a password or refresh token, so a
//! node can cache one per service account instead of calling per pull.
//!
//! An exchange token never outlives the service-account token it came from, and it can
//! never pass as a registry token: its `aud` is not the registry's service and it has no
//! `access` claim.

use podpass_token::{GenerateError, JwsSigner, VerificationKey, verify_compact};
use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::identity::Identity;
use crate::registry_token::random_id;

/// The claim holding the identity.
const IDENTITY_CLAIM: &str = "podpass.dev/exchange";

/// An exchange token was refused.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum ExchangeError {
    /// The signature does not verify under this service's key, or the token is malformed.
    #[error("exchange token signature does not verify")]
    Signature,
    /// Not an exchange token of this service (issuer, audience or shape).
    #[error("not an exchange token of this service")]
    NotExchange,
    /// Past its `exp`.
    #[error("exchange token has expired")]
    Expired,
}

#[derive(Serialize, Deserialize)]
struct Claims {
    iss: String,
    sub: String,
    aud: String,
    exp: i64,
    nbf: i64,
    iat: i64,
    jti: String,
    #[serde(rename = "podpass.dev/exchange")]
    identity: Identity,
}

/// A freshly signed exchange token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExchangeToken {
    /// The compact JWS.
    pub token: String,
    /// `exp`.
    pub expires_at: i64,
}

/// The audience of exchange tokens: this service, never a registry.
fn audience(issuer: &str) -> String {
    format!("{issuer}#exchange")
}

/// Signs an exchange token for `identity`, valid until `expires_at`.
pub fn sign(
    signer: &JwsSigner,
    issuer: &str,
    identity: &Identity,
    now: i64,
    expires_at: i64,
) -> Result<ExchangeToken, GenerateError> {
    let claims = Claims {
        iss: issuer.into(),
        sub: identity.username(),
        aud: audience(issuer),
        exp: expires_at,
        nbf: now,
        iat: now,
        jti: random_id()?,
        identity: identity.clone(),
    };
    Ok(ExchangeToken { token: signer.sign(&claims)?, expires_at })
}

/// Verifies an exchange token of `issuer` under `keys` at `now`; returns the identity and
/// the token's `exp`.
pub fn verify(token: &str, keys: &[VerificationKey], issuer: &str, now: i64) -> Result<(Identity, i64), ExchangeError> {
    let payload = verify_compact(token, keys).map_err(|_| ExchangeError::Signature)?;
    let claims: Claims = serde_json::from_slice(&payload).map_err(|_| ExchangeError::NotExchange)?;
    if claims.iss != issuer || claims.aud != audience(issuer) || claims.sub != claims.identity.username() {
        return Err(ExchangeError::NotExchange);
    }
    if now >= claims.exp {
        return Err(ExchangeError::Expired);
    }
    if claims.nbf > now + podpass_token::authenticator::LEEWAY_SECONDS {
        return Err(ExchangeError::NotExchange);
    }
    Ok((claims.identity, claims.exp))
}

/// Whether the unverified payload of `token` names the exchange claim (routing only: the
/// answer decides which verifier runs, never whether a token is accepted).
pub fn looks_like_exchange(token: &str) -> bool {
    token
        .split('.')
        .nth(1)
        .and_then(|p| data_encoding::BASE64URL_NOPAD.decode(p.as_bytes()).ok())
        .and_then(|bytes| serde_json::from_slice::<serde_json::Map<String, serde_json::Value>>(&bytes).ok())
        .is_some_and(|m| m.contains_key(IDENTITY_CLAIM))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use podpass_token::{Algorithm, JwsHeader, ObjectRef, SigningKey};

    fn identity() -> Identity {
        Identity {
            issuer: "https://cluster-a".into(),
            namespace: "team-a".into(),
            service_account: ObjectRef::new("builder", "uid-1"),
            pod: Some(ObjectRef::new("web", "pod-uid")),
            node: Some(ObjectRef::new("n1", "node-uid")),
            annotations: [("podpass.dev/team".to_owned(), "blue".to_owned())].into(),
            jti: Some("j".into()),
            secret: None,
        }
    }

    #[test]
    fn round_trips_and_refuses_other_issuers_keys_and_expired() {
        let key = SigningKey::generate(Algorithm::ES256).unwrap();
        let public = key.public_key().clone();
        let signer =
            JwsSigner::new(key, &JwsHeader { kid: Some(public.key_id().into()), ..Default::default() }).unwrap();
        let t = sign(&signer, "podpass-registry-auth", &identity(), 1000, 2000).unwrap();
        assert!(looks_like_exchange(&t.token));
        let keys = std::slice::from_ref(&public);
        assert_eq!(verify(&t.token, keys, "podpass-registry-auth", 1500).unwrap(), (identity(), 2000));
        assert_eq!(verify(&t.token, keys, "podpass-registry-auth", 2000), Err(ExchangeError::Expired));
        assert_eq!(verify(&t.token, keys, "another", 1500), Err(ExchangeError::NotExchange));
        let other = SigningKey::generate(Algorithm::ES256).unwrap().public_key().clone();
        assert_eq!(verify(&t.token, &[other], "podpass-registry-auth", 1500), Err(ExchangeError::Signature));
        assert!(!looks_like_exchange("a.e30.c"));
    }
}
