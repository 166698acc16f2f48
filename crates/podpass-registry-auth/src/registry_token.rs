//! Registry bearer tokens as the CNCF distribution registry verifies them (interop.md §1b):
//! `aud` a single string (an array is a malformed token to registry 2.8), integer times,
//! the `access` claim, ES256/ES384/ES512 or RS256, and a libtrust `kid` (a key whose
//! certificate is in the registry's `rootcertbundle`) or an `x5c` chain to it.

use data_encoding::{BASE64, BASE64URL_NOPAD};
use podpass_token::{GenerateError, JwsHeader, JwsSigner, SigningKey};
use serde::Serialize;
use thiserror::Error;

use crate::scope::Scope;

/// A registry token could not be signed.
#[derive(Debug, Error)]
#[error("signing a registry token: {0}")]
pub struct SignError(#[from] GenerateError);

#[derive(Serialize)]
struct Claims<'a> {
    iss: &'a str,
    sub: &'a str,
    aud: &'a str,
    exp: i64,
    nbf: i64,
    iat: i64,
    jti: &'a str,
    access: &'a [Scope],
}

/// A signed registry token and what the token endpoint answers about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegistryToken {
    /// The compact JWS.
    pub token: String,
    /// Lifetime in seconds.
    pub expires_in: i64,
    /// `iat`, seconds since the epoch.
    pub issued_at: i64,
    /// `jti`.
    pub jti: String,
}

/// Signs registry tokens as one `iss` for one registry `service`.
#[derive(Debug)]
pub struct RegistryTokenSigner {
    signer: JwsSigner,
    issuer: String,
    service: String,
    ttl_seconds: i64,
}

impl RegistryTokenSigner {
    /// A signer with `key`, writing `kid` = the key's libtrust id and, when `chain_der` is
    /// given (leaf first; the leaf's key must be `key`'s), `x5c`.
    pub fn new(
        key: SigningKey,
        chain_der: &[Vec<u8>],
        issuer: &str,
        service: &str,
        ttl_seconds: i64,
    ) -> Result<Self, SignError> {
        let header = JwsHeader {
            kid: Some(key.public_key().libtrust_key_id()),
            typ: Some("JWT".into()),
            x5c: chain_der.iter().map(|der| BASE64.encode(der)).collect(),
        };
        Ok(Self { signer: JwsSigner::new(key, &header)?, issuer: issuer.into(), service: service.into(), ttl_seconds })
    }

    /// The key tokens are signed with.
    pub fn key(&self) -> &SigningKey {
        self.signer.key()
    }

    /// The registry `service` (the tokens' `aud`).
    pub fn service(&self) -> &str {
        &self.service
    }

    /// The `iss` of the tokens.
    pub fn issuer(&self) -> &str {
        &self.issuer
    }

    /// A token for `subject` granting `access` (possibly nothing: the registry then answers
    /// `insufficient_scope`), valid from `now` for the configured lifetime but never past
    /// `not_after` (the credential it was granted for).
    pub fn sign(&self, subject: &str, access: &[Scope], now: i64, not_after: i64) -> Result<RegistryToken, SignError> {
        let jti = random_id()?;
        let expires_in = self.ttl_seconds.min(not_after.saturating_sub(now)).max(0);
        let claims = Claims {
            iss: &self.issuer,
            sub: subject,
            aud: &self.service,
            exp: now + expires_in,
            nbf: now,
            iat: now,
            jti: &jti,
            access,
        };
        let token = self.signer.sign(&claims)?;
        Ok(RegistryToken { token, expires_in, issued_at: now, jti })
    }
}

/// 16 random bytes, base64url: a `jti`.
pub(crate) fn random_id() -> Result<String, GenerateError> {
    let mut bytes = [0u8; 16];
    aws_lc_rs::rand::fill(&mut bytes)
        .map_err(|_| GenerateError::Key(podpass_token::KeyError::Crypto("random source")))?;
    Ok(BASE64URL_NOPAD.encode(&bytes))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use podpass_token::Algorithm;

    fn decode(segment: &str) -> serde_json::Value {
        serde_json::from_slice(&BASE64URL_NOPAD.decode(segment.as_bytes()).unwrap()).unwrap()
    }

    #[test]
    fn claims_have_the_shape_registry_2_8_accepts() {
        let key = SigningKey::generate(Algorithm::ES256).unwrap();
        let libtrust = key.public_key().libtrust_key_id();
        let public = key.public_key().clone();
        let s = RegistryTokenSigner::new(key, &[], "podpass-registry-auth", "registry.local", 300).unwrap();
        let access = Scope::parse_all(["repository:team-a/app:pull"]).unwrap();
        let t = s.sign("system:serviceaccount:team-a:builder", &access, 1_800_000_000, i64::MAX).unwrap();
        let parts: Vec<&str> = t.token.split('.').collect();
        assert_eq!(decode(parts[0]), serde_json::json!({"alg": "ES256", "kid": libtrust, "typ": "JWT"}));
        let claims = decode(parts[1]);
        assert_eq!(claims["aud"], "registry.local", "a single string, never an array");
        assert_eq!(claims["iss"], "podpass-registry-auth");
        assert_eq!(claims["exp"], 1_800_000_300i64);
        assert!(claims["exp"].is_i64() && claims["nbf"].is_i64() && claims["iat"].is_i64());
        assert_eq!(
            claims["access"],
            serde_json::json!([{"type": "repository", "name": "team-a/app", "actions": ["pull"]}])
        );
        assert_eq!(t.jti.len(), 22);
        podpass_token::verify_compact(&t.token, &[public.with_key_id(libtrust)]).unwrap();
        // no access granted: an empty list, not a missing claim
        let t = s.sign("x", &[], 0, 100).unwrap();
        assert_eq!(decode(t.token.split('.').nth(1).unwrap())["access"], serde_json::json!([]));
        // never past the credential it was granted for
        assert_eq!((t.expires_in, decode(t.token.split('.').nth(1).unwrap())["exp"].as_i64()), (100, Some(100)));
    }

    #[test]
    fn a_chain_goes_into_x5c_as_standard_base64() {
        let key = SigningKey::generate(Algorithm::RS256).unwrap();
        let s = RegistryTokenSigner::new(key, &[vec![0xfb, 0xff], vec![1]], "i", "s", 60).unwrap();
        let t = s.sign("x", &[], 0, i64::MAX).unwrap();
        let header = decode(t.token.split('.').next().unwrap());
        assert_eq!(header["alg"], "RS256");
        assert_eq!(header["x5c"], serde_json::json!(["+/8=", "AQ=="]));
    }
}
