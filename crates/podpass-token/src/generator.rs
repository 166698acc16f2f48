//! Minting tokens (pkg/serviceaccount/jwt.go `JWTTokenGenerator`).

use data_encoding::BASE64URL_NOPAD;
use thiserror::Error;

use crate::claims::{Claims, ClaimsError, TokenRequest};
use crate::features::TokenFeatures;
use crate::jws;
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

/// Signs claim sets as one issuer with one key. The key is parsed once and the JOSE
/// header is encoded once; minting does claims serialisation, base64 and one signature.
#[derive(Debug)]
pub struct TokenGenerator {
    issuer: String,
    key: SigningKey,
    header: String,
}

impl TokenGenerator {
    /// A generator for `issuer` (written into every token's `iss`, overriding the claims).
    pub fn new(issuer: impl Into<String>, key: SigningKey) -> Self {
        let header = jws::encode_header(key.algorithm(), key.key_id());
        Self { issuer: issuer.into(), key, header }
    }

    /// The issuer this generator writes.
    pub fn issuer(&self) -> &str {
        &self.issuer
    }

    /// The signing key.
    pub fn key(&self) -> &SigningKey {
        &self.key
    }

    /// Signs `claims` (its `iss` is replaced by the generator's) into a compact JWS.
    pub fn sign(&self, mut claims: Claims) -> Result<String, GenerateError> {
        claims.iss.clone_from(&self.issuer);
        self.sign_as_is(&claims)
    }

    fn sign_as_is(&self, claims: &Claims) -> Result<String, GenerateError> {
        let mut payload = Vec::with_capacity(1024);
        serde_json::to_writer(&mut payload, claims)?;
        let mut token = String::with_capacity(self.header.len() + payload.len() * 4 / 3 + 700);
        token.push_str(&self.header);
        token.push('.');
        BASE64URL_NOPAD.encode_append(&payload, &mut token);
        let signature = self.key.sign(token.as_bytes())?;
        token.push('.');
        BASE64URL_NOPAD.encode_append(&signature, &mut token);
        Ok(token)
    }

    /// Builds the claims for `req` at `now` and signs them; returns the token and claims.
    pub fn mint(
        &self,
        req: &TokenRequest,
        features: &TokenFeatures,
        now: i64,
    ) -> Result<(String, Claims), GenerateError> {
        let mut claims = Claims::build(req, features, now)?;
        claims.iss.clone_from(&self.issuer);
        let token = self.sign_as_is(&claims)?;
        Ok((token, claims))
    }
}
