//! The documents a service-account issuer publishes: the JWKS (`/openid/v1/jwks`) and the
//! OIDC discovery document (`/.well-known/openid-configuration`), as upstream renders them
//! (pkg/serviceaccount/openidmetadata.go), and the JWKS reader verifiers use.

use data_encoding::BASE64URL_NOPAD;
use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::der;
use crate::keys::{Algorithm, KeyError, VerificationKey};

/// Path at which the issuer serves its OIDC discovery document.
pub const OPENID_CONFIG_PATH: &str = "/.well-known/openid-configuration";
/// Path at which the issuer serves its JWKS.
pub const JWKS_PATH: &str = "/openid/v1/jwks";

/// One JSON Web Key (RFC 7517), with members in the order go-jose writes them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Jwk {
    /// `use`: `sig` for signing keys.
    #[serde(rename = "use", default, skip_serializing_if = "Option::is_none")]
    pub use_: Option<String>,
    /// Key type: `EC` or `RSA`.
    pub kty: String,
    /// Key id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kid: Option<String>,
    /// EC curve name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub crv: Option<String>,
    /// JWS algorithm the key is used with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alg: Option<String>,
    /// EC x coordinate, base64url, padded to the curve size.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub x: Option<String>,
    /// EC y coordinate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub y: Option<String>,
    /// RSA modulus.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub n: Option<String>,
    /// RSA public exponent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub e: Option<String>,
}

/// A JSON Web Key Set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Jwks {
    /// The keys, in the order the issuer's verification keys are configured.
    pub keys: Vec<Jwk>,
}

/// A JWK or JWKS could not be turned into verification keys.
#[derive(Debug, Error)]
pub enum JwkError {
    /// The document is not a JWKS.
    #[error("invalid JWKS: {0}")]
    Json(#[from] serde_json::Error),
    /// A member is missing or malformed; `index` is the key's position in `keys`.
    #[error("keys[{index}].{field}: {reason}")]
    Field {
        /// Position in `keys`.
        index: usize,
        /// JWK member name.
        field: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// The key material was refused.
    #[error("keys[{index}]: {source}")]
    Key {
        /// Position in `keys`.
        index: usize,
        /// Why the key was refused.
        source: KeyError,
    },
    /// No key in the set can verify signatures.
    #[error("JWKS contains no usable signing keys")]
    Empty,
}

impl Jwk {
    /// The public JWK of a verification key: `use: sig`, `alg`, `kid`.
    pub fn from_key(key: &VerificationKey) -> Result<Self, KeyError> {
        let alg = key.algorithm();
        let info = der::parse_spki(key.spki_der())
            .map_err(|e| KeyError::Rejected { what: "public key", reason: e.to_string() })?;
        let mut jwk = Jwk {
            use_: Some("sig".into()),
            kid: Some(key.key_id().to_owned()),
            alg: Some(alg.as_str().into()),
            ..Jwk::default()
        };
        match alg.curve() {
            Some(crv) => {
                let size = alg.coordinate_len();
                // uncompressed point: 0x04 || x || y, each exactly `size` bytes
                if info.key.len() != 1 + 2 * size || info.key[0] != 0x04 {
                    return Err(KeyError::Rejected {
                        what: "EC public key",
                        reason: "not an uncompressed point".into(),
                    });
                }
                jwk.kty = "EC".into();
                jwk.crv = Some(crv.into());
                jwk.x = Some(BASE64URL_NOPAD.encode(&info.key[1..1 + size]));
                jwk.y = Some(BASE64URL_NOPAD.encode(&info.key[1 + size..]));
            }
            None => {
                let (n, e) = der::parse_rsa_public_key(info.key)
                    .map_err(|e| KeyError::Rejected { what: "RSA public key", reason: e.to_string() })?;
                jwk.kty = "RSA".into();
                jwk.n = Some(BASE64URL_NOPAD.encode(n));
                jwk.e = Some(BASE64URL_NOPAD.encode(e));
            }
        }
        Ok(jwk)
    }

    /// The verification key this JWK describes; `Ok(None)` for keys that cannot verify
    /// service-account tokens (`use` other than `sig`, or a key type other than EC/RSA).
    /// A JWK without `kid` gets the upstream-derived one.
    pub fn to_key(&self, index: usize) -> Result<Option<VerificationKey>, JwkError> {
        if self.use_.as_deref().is_some_and(|u| u != "sig") {
            return Ok(None);
        }
        let field = |field: &'static str, reason: &str| JwkError::Field { index, field, reason: reason.to_owned() };
        let b64 = |field: &'static str, value: &Option<String>| -> Result<Vec<u8>, JwkError> {
            let v = value.as_deref().ok_or_else(|| JwkError::Field { index, field, reason: "required".into() })?;
            BASE64URL_NOPAD.decode(v.as_bytes()).map_err(|e| JwkError::Field {
                index,
                field,
                reason: format!("not base64url: {e}"),
            })
        };
        let key = match self.kty.as_str() {
            "EC" => {
                let crv = self.crv.as_deref().ok_or_else(|| field("crv", "required"))?;
                let alg = Algorithm::ALL
                    .into_iter()
                    .find(|a| a.curve() == Some(crv))
                    .ok_or_else(|| field("crv", "must be P-256, P-384 or P-521"))?;
                let (x, y) = (b64("x", &self.x)?, b64("y", &self.y)?);
                let size = alg.coordinate_len();
                if x.len() != size {
                    return Err(field("x", &format!("must be {size} bytes for {crv}")));
                }
                if y.len() != size {
                    return Err(field("y", &format!("must be {size} bytes for {crv}")));
                }
                let mut point = Vec::with_capacity(1 + 2 * size);
                point.push(0x04);
                point.extend_from_slice(&x);
                point.extend_from_slice(&y);
                VerificationKey::from_ec_point(alg, &point).map_err(|source| JwkError::Key { index, source })?
            }
            "RSA" => {
                let (n, e) = (b64("n", &self.n)?, b64("e", &self.e)?);
                let pkcs1 = der::encode_rsa_public_key(&n, &e);
                VerificationKey::from_pkcs1_der(&pkcs1).map_err(|source| JwkError::Key { index, source })?
            }
            _ => return Ok(None),
        };
        if let Some(alg) = &self.alg
            && alg != key.algorithm().as_str()
        {
            return Err(field("alg", &format!("{alg} does not fit a {} key", key.algorithm())));
        }
        Ok(Some(match &self.kid {
            Some(kid) => key.with_key_id(kid.clone()),
            None => key,
        }))
    }
}

impl Jwks {
    /// The JWKS of a set of verification keys, in order (upstream does not de-duplicate).
    pub fn from_keys<'a>(keys: impl IntoIterator<Item = &'a VerificationKey>) -> Result<Self, KeyError> {
        Ok(Self { keys: keys.into_iter().map(Jwk::from_key).collect::<Result<_, _>>()? })
    }

    /// Parses a JWKS document.
    pub fn from_json(json: &[u8]) -> Result<Self, JwkError> {
        Ok(serde_json::from_slice(json)?)
    }

    /// The keys usable for verifying service-account tokens; an error if a usable-looking
    /// key is malformed or if none is usable.
    pub fn verification_keys(&self) -> Result<Vec<VerificationKey>, JwkError> {
        let mut out = Vec::new();
        for (i, jwk) in self.keys.iter().enumerate() {
            if let Some(k) = jwk.to_key(i)? {
                out.push(k);
            }
        }
        if out.is_empty() {
            return Err(JwkError::Empty);
        }
        Ok(out)
    }
}

/// The OIDC discovery document (openidmetadata.go `openIDMetadata`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OidcDiscovery {
    /// The issuer URL, exactly as tokens carry it in `iss`.
    pub issuer: String,
    /// Where the JWKS is served.
    pub jwks_uri: String,
    /// Always `["id_token"]`: Kubernetes only produces ID tokens.
    pub response_types_supported: Vec<String>,
    /// Always `["public"]`.
    pub subject_types_supported: Vec<String>,
    /// The distinct `alg` values of the published keys, sorted.
    pub id_token_signing_alg_values_supported: Vec<String>,
}

/// Issuer or JWKS URI refused for OIDC discovery (upstream messages).
#[derive(Debug, Error, PartialEq, Eq)]
pub enum DiscoveryError {
    /// Issuer is empty.
    #[error("empty issuer URL")]
    EmptyIssuer,
    /// Issuer is not an https URL.
    #[error("issuer URL must use https scheme, got: {0}")]
    IssuerScheme(String),
    /// Issuer has a query.
    #[error("issuer URL may not include a query, got: {0}")]
    IssuerQuery(String),
    /// Issuer has a fragment.
    #[error("issuer URL may not include a fragment, got: {0}")]
    IssuerFragment(String),
    /// JWKS URI is not https.
    #[error("jwksURI requires https scheme, parsed as: {0}")]
    JwksScheme(String),
    /// No keys to publish.
    #[error("no keys provided for validating keyset")]
    NoKeys,
}

impl OidcDiscovery {
    /// Builds the discovery document, validating the issuer as upstream does.
    pub fn new(issuer: &str, jwks_uri: &str, keys: &[VerificationKey]) -> Result<Self, DiscoveryError> {
        if issuer.is_empty() {
            return Err(DiscoveryError::EmptyIssuer);
        }
        if !issuer.starts_with("https://") {
            return Err(DiscoveryError::IssuerScheme(issuer.into()));
        }
        if issuer.contains('?') {
            return Err(DiscoveryError::IssuerQuery(issuer.into()));
        }
        if issuer.contains('#') {
            return Err(DiscoveryError::IssuerFragment(issuer.into()));
        }
        if !jwks_uri.starts_with("https://") {
            return Err(DiscoveryError::JwksScheme(jwks_uri.into()));
        }
        if keys.is_empty() {
            return Err(DiscoveryError::NoKeys);
        }
        let mut algs: Vec<String> = keys.iter().map(|k| k.algorithm().as_str().to_owned()).collect();
        algs.sort();
        algs.dedup();
        Ok(Self {
            issuer: issuer.into(),
            jwks_uri: jwks_uri.into(),
            response_types_supported: vec!["id_token".into()],
            subject_types_supported: vec!["public".into()],
            id_token_signing_alg_values_supported: algs,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::SigningKey;

    #[test]
    fn jwk_round_trips_every_algorithm_and_keeps_kid() {
        for alg in Algorithm::ALL {
            let key = SigningKey::generate(alg).unwrap();
            let jwk = Jwk::from_key(key.public_key()).unwrap();
            assert_eq!(jwk.use_.as_deref(), Some("sig"));
            assert_eq!(jwk.alg.as_deref(), Some(alg.as_str()));
            let back = jwk.to_key(0).unwrap().unwrap();
            assert_eq!(back.key_id(), key.key_id());
            assert_eq!(back.spki_der(), key.public_key().spki_der());
        }
    }

    #[test]
    fn jwks_json_has_upstream_member_order() {
        let key = SigningKey::generate(Algorithm::ES256).unwrap();
        let json = serde_json::to_string(&Jwks::from_keys([key.public_key()]).unwrap()).unwrap();
        let order: Vec<usize> = ["\"use\"", "\"kty\"", "\"kid\"", "\"crv\"", "\"alg\"", "\"x\"", "\"y\""]
            .iter()
            .map(|m| json.find(m).unwrap())
            .collect();
        assert!(order.windows(2).all(|w| w[0] < w[1]), "{json}");
        let rsa = SigningKey::generate(Algorithm::RS256).unwrap();
        let json = serde_json::to_string(&Jwk::from_key(rsa.public_key()).unwrap()).unwrap();
        assert!(json.ends_with(r#""e":"AQAB"}"#), "{json}");
    }

    #[test]
    fn malformed_jwks_name_the_field() {
        let key = SigningKey::generate(Algorithm::ES256).unwrap();
        let mut jwk = Jwk::from_key(key.public_key()).unwrap();
        jwk.x = Some("AAAA".into());
        let err = Jwks { keys: vec![jwk.clone()] }.verification_keys().unwrap_err();
        assert_eq!(err.to_string(), "keys[0].x: must be 32 bytes for P-256");
        jwk.x = None;
        assert_eq!(jwk.to_key(3).unwrap_err().to_string(), "keys[3].x: required");
        let mut wrong_alg = Jwk::from_key(key.public_key()).unwrap();
        wrong_alg.alg = Some("RS256".into());
        assert_eq!(wrong_alg.to_key(0).unwrap_err().to_string(), "keys[0].alg: RS256 does not fit a ES256 key");
    }

    #[test]
    fn point_not_on_curve_is_refused() {
        let key = SigningKey::generate(Algorithm::ES256).unwrap();
        let mut jwk = Jwk::from_key(key.public_key()).unwrap();
        jwk.y = Some(BASE64URL_NOPAD.encode(&[7u8; 32]));
        assert!(matches!(jwk.to_key(0), Err(JwkError::Key { index: 0, .. })));
    }

    #[test]
    fn encryption_and_unknown_keys_are_skipped_but_empty_sets_refused() {
        let enc = Jwk { use_: Some("enc".into()), kty: "RSA".into(), ..Jwk::default() };
        let okp = Jwk { kty: "OKP".into(), ..Jwk::default() };
        let err = Jwks { keys: vec![enc, okp] }.verification_keys().unwrap_err();
        assert!(matches!(err, JwkError::Empty));
    }

    #[test]
    fn discovery_lists_sorted_distinct_algorithms_and_validates_issuer() {
        let k1 = SigningKey::generate(Algorithm::RS256).unwrap();
        let k2 = SigningKey::generate(Algorithm::ES256).unwrap();
        let keys = [k1.public_key().clone(), k2.public_key().clone(), k2.public_key().clone()];
        let doc = OidcDiscovery::new("https://issuer", "https://issuer/openid/v1/jwks", &keys).unwrap();
        assert_eq!(doc.id_token_signing_alg_values_supported, ["ES256", "RS256"]);
        assert_eq!(doc.response_types_supported, ["id_token"]);
        assert_eq!(doc.subject_types_supported, ["public"]);
        assert_eq!(
            OidcDiscovery::new("http://x", "https://x/j", &keys).unwrap_err().to_string(),
            "issuer URL must use https scheme, got: http://x"
        );
        assert_eq!(
            OidcDiscovery::new("https://x?a", "https://x/j", &keys),
            Err(DiscoveryError::IssuerQuery("https://x?a".into()))
        );
        assert_eq!(OidcDiscovery::new("https://x", "https://x/j", &[]), Err(DiscoveryError::NoKeys));
    }
}
