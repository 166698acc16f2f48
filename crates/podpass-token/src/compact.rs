//! Compact JWS for claim sets other than service-account tokens (registry bearer tokens,
//! exchange tokens): a signer with a fixed header, and a verifier that returns the payload
//! once the signature checks out. Service-account tokens go through [`crate::TokenGenerator`]
//! and [`crate::Authenticator`], which build on the same pieces.

use data_encoding::BASE64URL_NOPAD;
use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::authenticator::MAX_TOKEN_BYTES;
use crate::generator::GenerateError;
use crate::jws;
use crate::keys::{Algorithm, SigningKey, VerificationKey};

/// The JOSE header fields a signer may add to `alg` (which always comes from the key).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JwsHeader {
    /// `kid`.
    pub kid: Option<String>,
    /// `typ` (e.g. `JWT`).
    pub typ: Option<String>,
    /// `x5c`: the certificate chain, leaf first, each standard base64 DER (RFC 7515 §4.1.6).
    pub x5c: Vec<String>,
}

#[derive(Serialize)]
struct WireOut<'a> {
    alg: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    kid: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    typ: Option<&'a str>,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    x5c: &'a [String],
}

/// Signs claim sets under one key and one header. The header is encoded once.
#[derive(Debug)]
pub struct JwsSigner {
    key: SigningKey,
    header: String,
}

impl JwsSigner {
    /// A signer writing `header` (with the key's `alg`).
    pub fn new(key: SigningKey, header: &JwsHeader) -> Result<Self, GenerateError> {
        let out = WireOut {
            alg: key.algorithm().as_str(),
            kid: header.kid.as_deref(),
            typ: header.typ.as_deref(),
            x5c: &header.x5c,
        };
        let header = BASE64URL_NOPAD.encode(&serde_json::to_vec(&out)?);
        Ok(Self { key, header })
    }

    /// The signing key.
    pub fn key(&self) -> &SigningKey {
        &self.key
    }

    /// `claims` serialised as JSON and signed into a compact JWS.
    pub fn sign(&self, claims: &impl Serialize) -> Result<String, GenerateError> {
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
}

/// A compact JWS did not verify.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum JwsError {
    /// Larger than [`MAX_TOKEN_BYTES`], not three segments, or a segment is not base64url.
    #[error("not a compact JWS")]
    Malformed,
    /// The header is not JSON with an `alg` this library signs with, or lists `crit`.
    #[error("unsupported JWS header")]
    Header,
    /// No key has the header's `kid`, or none verified the signature.
    #[error("signature does not verify")]
    Signature,
}

#[derive(Deserialize)]
struct WireIn {
    alg: String,
    #[serde(default)]
    kid: Option<String>,
    #[serde(default)]
    crit: Option<serde::de::IgnoredAny>,
}

/// Verifies `token` against `keys` (a key whose `kid` differs from the header's is not
/// tried) and returns the payload bytes: the caller decodes and checks the claims.
pub fn verify_compact(token: &str, keys: &[VerificationKey]) -> Result<Vec<u8>, JwsError> {
    if token.len() > MAX_TOKEN_BYTES {
        return Err(JwsError::Malformed);
    }
    let parts = jws::split(token).map_err(|_| JwsError::Malformed)?;
    let header = jws::decode_segment(parts.header).ok_or(JwsError::Malformed)?;
    let header: WireIn = serde_json::from_slice(&header).map_err(|_| JwsError::Header)?;
    let alg = Algorithm::from_name(&header.alg).ok_or(JwsError::Header)?;
    if header.crit.is_some() {
        return Err(JwsError::Header);
    }
    let signature = jws::decode_segment(parts.signature).ok_or(JwsError::Malformed)?;
    let kid = header.kid.as_deref().filter(|k| !k.is_empty());
    let verified = keys
        .iter()
        .filter(|k| kid.is_none_or(|kid| k.key_id() == kid))
        .any(|k| k.verify(alg, parts.signing_input.as_bytes(), &signature).is_ok());
    if !verified {
        return Err(JwsError::Signature);
    }
    jws::decode_segment(parts.payload).ok_or(JwsError::Malformed)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn service_account_header_matches_go_jose_layout() {
        let key = SigningKey::generate(Algorithm::ES256).unwrap();
        let signer = JwsSigner::new(key, &JwsHeader { kid: Some("abc".into()), ..JwsHeader::default() }).unwrap();
        assert_eq!(BASE64URL_NOPAD.decode(signer.header.as_bytes()).unwrap(), br#"{"alg":"ES256","kid":"abc"}"#);
    }

    #[test]
    fn signs_with_the_header_and_verifies_only_with_the_key() {
        let key = SigningKey::generate(Algorithm::ES256).unwrap();
        let public = key.public_key().clone();
        let header = JwsHeader { kid: Some(public.key_id().into()), typ: Some("JWT".into()), x5c: vec!["AAA=".into()] };
        let signer = JwsSigner::new(key, &header).unwrap();
        let token = signer.sign(&serde_json::json!({"a": 1})).unwrap();
        let head: serde_json::Value =
            serde_json::from_slice(&BASE64URL_NOPAD.decode(token.split('.').next().unwrap().as_bytes()).unwrap())
                .unwrap();
        assert_eq!(head, serde_json::json!({"alg": "ES256", "kid": public.key_id(), "typ": "JWT", "x5c": ["AAA="]}));
        assert_eq!(verify_compact(&token, std::slice::from_ref(&public)).unwrap(), br#"{"a":1}"#);

        let other = SigningKey::generate(Algorithm::ES256).unwrap().public_key().clone();
        assert_eq!(verify_compact(&token, std::slice::from_ref(&other)), Err(JwsError::Signature));
        // same key under another kid: not tried
        assert_eq!(verify_compact(&token, &[public.clone().with_key_id("x")]), Err(JwsError::Signature));
        // a flipped payload character
        let mut parts: Vec<String> = token.split('.').map(str::to_owned).collect();
        parts[1] = BASE64URL_NOPAD.encode(br#"{"a":2}"#);
        assert_eq!(verify_compact(&parts.join("."), std::slice::from_ref(&public)), Err(JwsError::Signature));
        // alg none
        parts[0] = BASE64URL_NOPAD.encode(br#"{"alg":"none"}"#);
        assert_eq!(verify_compact(&parts.join("."), &[public]), Err(JwsError::Header));
        assert_eq!(verify_compact("a.b", &[other]), Err(JwsError::Malformed));
    }
}
