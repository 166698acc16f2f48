//! Kubernetes service-account tokens, as kube-apiserver mints and verifies them.
//!
//! - [`keys`]: signing keys (ES256/ES384/ES512, RS256) from PEM, the upstream `kid`, the
//!   libtrust key id.
//! - [`claims`]: the upstream claim layout and binding rules.
//! - [`generator`]: minting ([`TokenGenerator`]).
//! - [`authenticator`]: verification in upstream order, with bound-object checks through
//!   [`BoundObjectLookup`].
//! - [`documents`]: JWKS and OIDC discovery documents.
//! - [`compact`]: JWS for other claim sets (registry tokens): [`JwsSigner`], [`verify_compact`].
//! - [`legacy`]: Secret-based legacy tokens, opt-in ([`LegacyAuthenticator`]).
//! - [`user`]: user names and user info.
//!
//! ```
//! use podpass_token::{Algorithm, Authenticator, ObjectRef, SigningKey, TokenFeatures,
//!     TokenGenerator, TokenRequest};
//!
//! let key = SigningKey::generate(Algorithm::ES256)?;
//! let verifier = Authenticator::new(
//!     vec!["https://issuer.example".into()],
//!     vec![key.public_key().clone()],
//!     vec!["registry.example".into()],
//!     TokenFeatures::default(),
//! );
//! let generator = TokenGenerator::new("https://issuer.example", key);
//! let request = TokenRequest {
//!     namespace: "team-a".into(),
//!     service_account: ObjectRef::new("builder", "5d2c6b1e-0000-4000-8000-000000000001"),
//!     audiences: vec!["registry.example".into()],
//!     expiration_seconds: 3600,
//!     ..TokenRequest::default()
//! };
//! let now = podpass_token::now_unix();
//! let token = generator.mint(&request, &TokenFeatures::default(), now)?.token;
//! let verified = verifier.verify(&token, None, now)?;
//! assert_eq!(verified.info.user_info().username, "system:serviceaccount:team-a:builder");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod authenticator;
pub mod claims;
pub mod compact;
mod der;
pub mod documents;
pub mod features;
pub mod generator;
mod jws;
pub mod keys;
pub mod legacy;
pub mod pem;
mod precheck;
pub mod user;
mod wire;

pub use authenticator::{
    AuthError, Authenticated, Authenticator, BoundKind, BoundObject, BoundObjectLookup, Freshness, LookupError,
    NotMine, VerifiedToken, now_unix,
};
pub use claims::{Claims, ClaimsError, KubernetesClaims, ObjectRef, TokenRequest};
pub use compact::{JwsError, JwsHeader, JwsSigner, verify_compact};
pub use documents::{Jwk, JwkError, Jwks, OidcDiscovery};
pub use features::TokenFeatures;
pub use generator::{GenerateError, MintedToken, TokenGenerator};
pub use keys::{Algorithm, KeyError, SignatureError, SigningKey, VerificationKey, key_id, libtrust_key_id};
pub use legacy::{
    LAST_USED_LABEL, LEGACY_ISSUER, LegacyAuthenticated, LegacyAuthenticator, LegacyClaims, LegacyError, LegacySecret,
    LegacyServiceAccount, LegacyTokenLookup,
};
pub use user::{ServiceAccountInfo, UserInfo};
