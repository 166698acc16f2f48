//! Minting tokens (pkg/serviceaccount/jwt.go `JWTTokenGenerator`).

use thiserror::Error;

use serde::Serialize;

use crate::claims::{Claims, ClaimsError, ClaimsRef, TokenRequest, new_uuid_v4};
use crate::compact::{JwsHeader, JwsSigner};
use crate::features::TokenFeatures;
use crate::keys::{KeyError, SigningKey};

/// A token could not be minted.
#[derive(Debug, Error)]
pub enum GenerateError {
    /// The claims could not be built.
    #[error(transparent)]
    Claims(#[from] ClaimsError),
    /// Signing failed.
    #[error(transparent)]
    Key(#[from] KeyError),
    /// The claims could not be serialised.
    #[error("encoding claims: {0}")]
    Json(#[from] serde_json::Error),
}

/// A freshly minted token and what the caller needs to report about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MintedToken {
    /// The compact JWS.
    pub token: String,
    /// `exp`, seconds since the epoch.
    pub expires_at: i64,
    /// `iat` (= `nbf`).
    pub issued_at: i64,
    /// `jti`, when the `ServiceAccountTokenJTI` gate is on: the credential id of the audit
    /// trail (`JTI=<jti>`).
    pub jti: Option<String>,
}

/// Signs claim sets as one issuer with one key. The key is parsed once and the JOSE
/// header is encoded once; minting does claims serialisation, base64 and one signature.
#[derive(Debug)]
pub struct TokenGenerator {
    issuer: String,
    signer: JwsSigner,
}

impl TokenGenerator {
    /// A generator for `issuer` (written into every token's `iss`, overriding the claims).
    pub fn new(issuer: impl Into<String>, key: SigningKey) -> Self {
        let header = JwsHeader { kid: Some(key.key_id().to_owned()), ..JwsHeader::default() };
        // Encoding a header of plain strings cannot fail; the fallback keeps `new` infallible.
        let signer = JwsSigner::new(key, &header).unwrap_or_else(|_| unreachable!("header of plain strings"));
        Self { issuer: issuer.into(), signer }
    }

    /// The issuer this generator writes.
    pub fn issuer(&self) -> &str {
        &self.issuer
    }

    /// The signing key.
    pub fn key(&self) -> &SigningKey {
        self.signer.key()
    }

    /// Signs `claims` (its `iss` is replaced by the generator's) into a compact JWS.
    pub fn sign(&self, mut claims: Claims) -> Result<String, GenerateError> {
        claims.iss.clone_from(&self.issuer);
        self.sign_any(&claims)
    }

    /// Signs any claim set as is (its `iss` included).
    pub(crate) fn sign_any(&self, claims: &impl Serialize) -> Result<String, GenerateError> {
        self.signer.sign(claims)
    }

    /// Builds the claims for `req` at `now` (upstream binding rules) and signs them.
    pub fn mint(&self, req: &TokenRequest, features: &TokenFeatures, now: i64) -> Result<MintedToken, GenerateError> {
        let jti = if features.jti { Some(new_uuid_v4()?) } else { None };
        let claims = ClaimsRef::bind(req, features, now, jti.as_deref(), &self.issuer)?;
        let token = self.sign_any(&claims)?;
        Ok(MintedToken { token, expires_at: claims.expires_at(), issued_at: now, jti })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::claims::ObjectRef;
    use crate::keys::{Algorithm, SigningKey};
    use data_encoding::BASE64URL_NOPAD;

    fn payload(token: &str) -> Vec<u8> {
        BASE64URL_NOPAD.decode(token.split('.').nth(1).unwrap().as_bytes()).unwrap()
    }

    #[test]
    fn minted_payload_is_byte_identical_to_owned_claims() {
        let g = TokenGenerator::new("https://issuer", SigningKey::generate(Algorithm::ES256).unwrap());
        let with_pod = TokenRequest {
            namespace: "ns".into(),
            service_account: ObjectRef::new("sa", "sa-uid"),
            audiences: vec!["a".into(), "b\"quoted".into()],
            expiration_seconds: 3607,
            warnafter_seconds: 3607,
            pod: Some(ObjectRef::new("p", "pu")),
            secret: None,
            node: Some(ObjectRef::new("n", "")),
        };
        let secret_bound = TokenRequest {
            pod: None,
            node: None,
            secret: Some(ObjectRef::new("s", "su")),
            warnafter_seconds: 0,
            ..with_pod.clone()
        };
        for req in [with_pod, secret_bound] {
            for features in [
                TokenFeatures::default(),
                TokenFeatures { jti: false, pod_node_info: false, ..TokenFeatures::default() },
            ] {
                let minted = g.mint(&req, &features, 1000).unwrap();
                let bytes = payload(&minted.token);
                let parsed: Claims = serde_json::from_slice(&bytes).unwrap();
                assert_eq!(serde_json::to_vec(&parsed).unwrap(), bytes);
                assert_eq!(parsed.jti, minted.jti);
                assert_eq!(parsed.exp, Some(minted.expires_at));
                let mut expected = Claims::build(&req, &features, 1000).unwrap();
                expected.iss = "https://issuer".into();
                expected.jti.clone_from(&minted.jti);
                assert_eq!(parsed, expected);
            }
        }
    }
}
