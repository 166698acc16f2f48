//! The attack suite: every token here must be refused, each for the named reason.

// Test helpers panic on failure by design; the lint targets library code.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use aws_lc_rs::hmac;
use data_encoding::BASE64URL_NOPAD as B64;
use podpass_token::{
    Algorithm, AuthError, Authenticator, Claims, NotMine, ObjectRef, SigningKey, TokenFeatures, TokenGenerator,
    TokenRequest,
};

const ISSUER: &str = "https://issuer.test";
const AUD: &str = "registry.test";
const NOW: i64 = 1_800_000_000;

struct Fixture {
    ec: TokenGenerator,
    rsa: TokenGenerator,
    verifier: Authenticator,
}

fn fixture() -> Fixture {
    let ec = SigningKey::generate(Algorithm::ES256).unwrap();
    let rsa = SigningKey::generate(Algorithm::RS256).unwrap();
    let verifier = Authenticator::new(
        vec![ISSUER.into()],
        vec![ec.public_key().clone(), rsa.public_key().clone()],
        vec![AUD.into()],
        TokenFeatures::default(),
    );
    Fixture { ec: TokenGenerator::new(ISSUER, ec), rsa: TokenGenerator::new(ISSUER, rsa), verifier }
}

fn claims(now: i64) -> Claims {
    let req = TokenRequest {
        namespace: "tenant-a".into(),
        service_account: ObjectRef::new("builder", "sa-uid"),
        audiences: vec![AUD.into()],
        expiration_seconds: 600,
        ..TokenRequest::default()
    };
    Claims::build(&req, &TokenFeatures::default(), now).unwrap()
}

/// A token with an arbitrary header and payload, signed by `key` over `header.payload`.
fn forge(header: &str, payload: &str, key: &SigningKey) -> String {
    let input = format!("{}.{}", B64.encode(header.as_bytes()), B64.encode(payload.as_bytes()));
    let sig = key.sign(input.as_bytes()).unwrap();
    format!("{input}.{}", B64.encode(&sig))
}

fn payload(c: &Claims) -> String {
    let mut c = c.clone();
    c.iss = ISSUER.into();
    serde_json::to_string(&c).unwrap()
}

fn verify(f: &Fixture, token: &str) -> Result<podpass_token::VerifiedToken, AuthError> {
    f.verifier.verify(token, None, NOW)
}

#[test]
fn genuine_tokens_of_both_key_types_verify() {
    let f = fixture();
    for g in [&f.ec, &f.rsa] {
        let token = g.sign(claims(NOW)).unwrap();
        let v = verify(&f, &token).unwrap();
        assert_eq!(v.audiences, [AUD]);
        assert!(!v.legacy);
    }
}

#[test]
fn alg_none_is_refused() {
    let f = fixture();
    let header = B64.encode(br#"{"alg":"none"}"#);
    let token = format!("{header}.{}.", B64.encode(payload(&claims(NOW)).as_bytes()));
    assert_eq!(verify(&f, &token), Err(AuthError::NotMine(NotMine::Algorithm("none".into()))));
    // and with a (meaningless) signature segment
    let token = format!("{header}.{}.AAAA", B64.encode(payload(&claims(NOW)).as_bytes()));
    assert!(verify(&f, &token).unwrap_err().is_not_mine());
}

#[test]
fn hs256_keyed_with_the_public_key_is_refused() {
    let f = fixture();
    for public in [f.ec.key().public_key().spki_der().to_vec(), f.ec.key().public_key().to_pem().into_bytes()] {
        let input = format!(
            "{}.{}",
            B64.encode(format!(r#"{{"alg":"HS256","kid":"{}"}}"#, f.ec.key().key_id()).as_bytes()),
            B64.encode(payload(&claims(NOW)).as_bytes())
        );
        let tag = hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, &public), input.as_bytes());
        let token = format!("{input}.{}", B64.encode(tag.as_ref()));
        assert_eq!(verify(&f, &token), Err(AuthError::NotMine(NotMine::Algorithm("HS256".into()))));
    }
}

#[test]
fn rs256_header_on_an_ec_key_is_refused() {
    let f = fixture();
    let kid = f.ec.key().key_id();
    let token = forge(&format!(r#"{{"alg":"RS256","kid":"{kid}"}}"#), &payload(&claims(NOW)), f.ec.key());
    let err = verify(&f, &token).unwrap_err();
    assert!(matches!(&err, AuthError::Signature(e) if e.len() == 1), "{err:?}");
    assert!(err.to_string().contains("unexpected signature algorithm RS256 for a ES256 key"), "{err}");
}

#[test]
fn es256_header_on_an_rsa_key_is_refused() {
    let f = fixture();
    let kid = f.rsa.key().key_id();
    let token = forge(&format!(r#"{{"alg":"ES256","kid":"{kid}"}}"#), &payload(&claims(NOW)), f.rsa.key());
    assert!(matches!(verify(&f, &token), Err(AuthError::Signature(_))));
}

#[test]
fn unknown_kid_is_refused_with_upstream_message() {
    let f = fixture();
    let token = forge(r#"{"alg":"ES256","kid":"no-such-key"}"#, &payload(&claims(NOW)), f.ec.key());
    let err = verify(&f, &token).unwrap_err();
    assert_eq!(err, AuthError::NoKeys);
    assert_eq!(err.to_string(), "invalid signature, no keys found");
}

#[test]
fn token_signed_by_a_key_outside_the_set_is_refused() {
    let f = fixture();
    let stranger = TokenGenerator::new(ISSUER, SigningKey::generate(Algorithm::ES256).unwrap());
    // with its own kid: no key found
    assert_eq!(verify(&f, &stranger.sign(claims(NOW)).unwrap()), Err(AuthError::NoKeys));
    // claiming the kid of a trusted key: the trusted key does not verify it
    let kid = f.ec.key().key_id();
    let token = forge(&format!(r#"{{"alg":"ES256","kid":"{kid}"}}"#), &payload(&claims(NOW)), stranger.key());
    let err = verify(&f, &token).unwrap_err();
    assert_eq!(err.to_string(), "go-jose/go-jose: error in cryptographic primitive");
    // with no kid: every key is tried and all errors are reported
    let token = forge(r#"{"alg":"ES256"}"#, &payload(&claims(NOW)), stranger.key());
    let err = verify(&f, &token).unwrap_err();
    assert!(matches!(&err, AuthError::Signature(e) if e.len() == 2), "{err:?}");
    assert!(err.to_string().starts_with('['), "{err}");
}

#[test]
fn rotation_without_kid_tries_every_key() {
    let f = fixture();
    let token = forge(r#"{"alg":"RS256"}"#, &payload(&claims(NOW)), f.rsa.key());
    assert!(verify(&f, &token).is_ok());
}

#[test]
fn expiry_is_enforced_beyond_the_60s_leeway() {
    let f = fixture();
    let token = f.ec.sign(claims(NOW - 600)).unwrap(); // exp == NOW
    assert!(f.verifier.verify(&token, None, NOW + 60).is_ok());
    assert_eq!(f.verifier.verify(&token, None, NOW + 61).unwrap_err().to_string(), "service account token has expired");
}

#[test]
fn nbf_in_the_future_is_refused() {
    let f = fixture();
    let mut c = claims(NOW);
    c.nbf = Some(NOW + 61);
    c.iat = Some(NOW);
    let token = f.ec.sign(c.clone()).unwrap();
    assert_eq!(verify(&f, &token).unwrap_err().to_string(), "service account token is not valid yet");
    c.nbf = Some(NOW + 60);
    assert!(verify(&f, &f.ec.sign(c).unwrap()).is_ok());
}

#[test]
fn iat_in_the_future_is_refused() {
    let f = fixture();
    let mut c = claims(NOW);
    c.iat = Some(NOW + 61);
    let token = f.ec.sign(c).unwrap();
    assert_eq!(verify(&f, &token).unwrap_err().to_string(), "service account token is issued in the future");
}

#[test]
fn wrong_issuer_is_not_mine() {
    let f = fixture();
    let other = TokenGenerator::new("https://evil.test", SigningKey::generate(Algorithm::ES256).unwrap());
    let err = verify(&f, &other.sign(claims(NOW)).unwrap()).unwrap_err();
    assert_eq!(err, AuthError::NotMine(NotMine::Issuer("https://evil.test".into())));
    // a trusted key signing for another issuer is refused too
    let confused = TokenGenerator::new(
        "https://evil.test",
        SigningKey::from_pem(f.ec.key().to_pkcs8_pem().unwrap().as_bytes()).unwrap(),
    );
    assert!(verify(&f, &confused.sign(claims(NOW)).unwrap()).unwrap_err().is_not_mine());
}

#[test]
fn no_audience_overlap_is_refused_with_upstream_message() {
    let f = fixture();
    let mut c = claims(NOW);
    c.aud = vec!["other".into(), "another".into()];
    let err = verify(&f, &f.ec.sign(c).unwrap()).unwrap_err();
    assert_eq!(
        err.to_string(),
        r#"token audiences ["other" "another"] is invalid for the target audiences ["registry.test"]"#
    );
    // a caller asking for one of the token's audiences accepts it
    let mut c = claims(NOW);
    c.aud = vec!["other".into(), AUD.into()];
    let v = f.verifier.verify(&f.ec.sign(c).unwrap(), Some(&[AUD.to_owned(), "x".into()]), NOW).unwrap();
    assert_eq!(v.audiences, [AUD]);
}

#[test]
fn tampered_payload_is_refused() {
    let f = fixture();
    let token = f.ec.sign(claims(NOW)).unwrap();
    let parts: Vec<&str> = token.split('.').collect();
    let mut c = claims(NOW);
    c.kubernetes.as_mut().unwrap().namespace = "tenant-b".into();
    c.sub = "system:serviceaccount:tenant-b:builder".into();
    let forged = format!("{}.{}.{}", parts[0], B64.encode(payload(&c).as_bytes()), parts[2]);
    assert!(matches!(verify(&f, &forged), Err(AuthError::Signature(_))));
}

#[test]
fn truncated_signature_is_refused() {
    let f = fixture();
    for g in [&f.ec, &f.rsa] {
        let token = g.sign(claims(NOW)).unwrap();
        let (input, sig) = token.rsplit_once('.').unwrap();
        let sig = B64.decode(sig.as_bytes()).unwrap();
        let cut = format!("{input}.{}", B64.encode(&sig[..sig.len() - 1]));
        assert!(matches!(verify(&f, &cut), Err(AuthError::Signature(_))), "{cut}");
        // cutting base64 characters leaves non-canonical base64 or a short signature
        assert!(verify(&f, &token[..token.len() - 3]).is_err());
        let empty_sig = &token[..token.rfind('.').unwrap() + 1];
        assert!(matches!(verify(&f, empty_sig), Err(AuthError::Signature(_))));
    }
}

#[test]
fn two_or_four_segments_are_refused() {
    let f = fixture();
    let token = f.ec.sign(claims(NOW)).unwrap();
    let two = &token[..token.rfind('.').unwrap()];
    assert_eq!(verify(&f, two), Err(AuthError::NotMine(NotMine::Segments(2))));
    let four = format!("{token}.AAAA");
    assert_eq!(verify(&f, &four), Err(AuthError::NotMine(NotMine::Segments(4))));
}

#[test]
fn payload_that_is_not_json_is_refused() {
    let f = fixture();
    let token = forge(r#"{"alg":"ES256"}"#, "not json at all", f.ec.key());
    assert_eq!(verify(&f, &token), Err(AuthError::NotMine(NotMine::Payload)));
    let json_serialisation = r#"{"payload":"e30","signatures":[]}"#;
    assert_eq!(verify(&f, json_serialisation), Err(AuthError::NotMine(NotMine::NotCompact)));
    // signed, right issuer, but the claims do not have the right types
    let token = forge(r#"{"alg":"ES256"}"#, &format!(r#"{{"iss":"{ISSUER}","exp":"tomorrow"}}"#), f.ec.key());
    assert!(matches!(verify(&f, &token), Err(AuthError::Malformed(_))));
}

#[test]
fn sub_that_disagrees_with_private_claims_is_refused() {
    let f = fixture();
    let mut c = claims(NOW);
    c.sub = "system:serviceaccount:kube-system:admin".into();
    let err = verify(&f, &f.ec.sign(c).unwrap()).unwrap_err();
    assert!(matches!(err, AuthError::Malformed(_)));
    assert!(err.to_string().contains("does not match kubernetes.io claims"), "{err}");
    let mut c = claims(NOW);
    c.kubernetes = None;
    assert!(matches!(verify(&f, &f.ec.sign(c).unwrap()), Err(AuthError::Malformed(_))));
}

#[test]
fn oversized_token_is_refused_before_parsing() {
    let f = fixture();
    let mut c = claims(NOW);
    c.aud.push("x".repeat(64 * 1024));
    let token = f.ec.sign(c).unwrap();
    assert_eq!(verify(&f, &token), Err(AuthError::NotMine(NotMine::TooLarge)));
    // garbage of the same size is refused by size, not by a parser
    assert_eq!(verify(&f, &"a".repeat(64 * 1024 + 1)), Err(AuthError::NotMine(NotMine::TooLarge)));
}

#[test]
fn critical_header_extensions_are_refused() {
    let f = fixture();
    let token = forge(r#"{"alg":"ES256","crit":["b64"],"b64":false}"#, &payload(&claims(NOW)), f.ec.key());
    assert_eq!(verify(&f, &token), Err(AuthError::NotMine(NotMine::Critical)));
}

#[test]
fn p384_signature_cannot_pass_as_es256() {
    let f = fixture();
    let p384 = SigningKey::generate(Algorithm::ES384).unwrap();
    let verifier = Authenticator::new(
        vec![ISSUER.into()],
        vec![p384.public_key().clone()],
        vec![AUD.into()],
        TokenFeatures::default(),
    );
    let token = forge(&format!(r#"{{"alg":"ES256","kid":"{}"}}"#, p384.key_id()), &payload(&claims(NOW)), &p384);
    assert!(matches!(verifier.verify(&token, None, NOW), Err(AuthError::Signature(_))));
    drop(f);
}
