//! Issuer trust against a real HTTPS issuer on loopback whose documents the test changes:
//! what is refused (another issuer's discovery, a JWKS off the issuer's origin, a redirect
//! to another origin, an oversized JWKS), failing closed, the retired-key grace, and the
//! unknown-kid refetch interval.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use podpass_registry_auth::{DocumentFetcher, IssuerTrust, RegistryAuthMetrics, TrustError, TrustTimings};
use podpass_token::{Algorithm, Jwks, ObjectRef, SigningKey, TokenFeatures, TokenGenerator, TokenRequest};

/// What the fake issuer serves; the test edits it between calls.
#[derive(Clone, Default)]
struct Docs {
    /// The discovery document's `issuer` (None: the server's own URL).
    issuer: Option<String>,
    /// `jwks_uri` (None: `<url>/jwks`).
    jwks_uri: Option<String>,
    /// The JWKS body.
    jwks: String,
    /// Answer discovery with a redirect to this URL instead.
    redirect: Option<String>,
    /// Answer everything with 500.
    broken: bool,
}

struct Issuer {
    url: String,
    ca: Vec<u8>,
    docs: Arc<Mutex<Docs>>,
    _task: tokio::task::JoinHandle<()>,
}

async fn discovery(State((url, docs)): State<(String, Arc<Mutex<Docs>>)>) -> Response {
    let d = docs.lock().unwrap().clone();
    if d.broken {
        return StatusCode::INTERNAL_SERVER_ERROR.into_response();
    }
    if let Some(to) = d.redirect {
        let mut h = HeaderMap::new();
        h.insert(header::LOCATION, to.parse().unwrap());
        return (StatusCode::FOUND, h).into_response();
    }
    let body = serde_json::json!({
        "issuer": d.issuer.unwrap_or_else(|| url.clone()),
        "jwks_uri": d.jwks_uri.unwrap_or_else(|| format!("{url}/jwks")),
    });
    axum::Json(body).into_response()
}

async fn jwks(State((_, docs)): State<(String, Arc<Mutex<Docs>>)>) -> Response {
    let d = docs.lock().unwrap().clone();
    if d.broken { StatusCode::INTERNAL_SERVER_ERROR.into_response() } else { d.jwks.into_response() }
}

async fn issuer() -> Issuer {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params.subject_alt_names = vec![rcgen::SanType::IpAddress([127, 0, 0, 1].into())];
    let cert = params.self_signed(&key).unwrap();
    let tls = podpass_serve::tls_acceptor(cert.pem().as_bytes(), key.serialize_pem().as_bytes(), None).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("https://{}", listener.local_addr().unwrap());
    let docs = Arc::new(Mutex::new(Docs::default()));
    let app = Router::new()
        .route("/.well-known/openid-configuration", get(discovery))
        .route("/jwks", get(jwks))
        .with_state((url.clone(), Arc::clone(&docs)));
    let task = tokio::spawn(podpass_serve::accept_loop(listener, Some(tls), app, Default::default()));
    Issuer { url, ca: cert.pem().into_bytes(), docs, _task: task }
}

fn jwks_of(keys: &[&SigningKey]) -> String {
    serde_json::to_string(&Jwks::from_keys(keys.iter().map(|k| k.public_key())).unwrap()).unwrap()
}

fn mint(issuer: &str, key: SigningKey) -> String {
    let request = TokenRequest {
        namespace: "team-a".into(),
        service_account: ObjectRef::new("builder", "uid"),
        audiences: vec!["registry-auth".into()],
        expiration_seconds: 600,
        ..TokenRequest::default()
    };
    TokenGenerator::new(issuer, key).mint(&request, &TokenFeatures::default(), podpass_token::now_unix()).unwrap().token
}

fn trust(i: &Issuer, timings: TrustTimings) -> IssuerTrust {
    let fetcher = DocumentFetcher::new(Some(&i.ca), Duration::from_secs(5)).unwrap();
    IssuerTrust::new(&i.url, "registry-auth", fetcher, timings, Arc::new(RegistryAuthMetrics::default()))
}

fn pem_pair() -> (SigningKey, SigningKey) {
    let k = SigningKey::generate(Algorithm::ES256).unwrap();
    let again = SigningKey::from_pem(k.to_pkcs8_pem().unwrap().as_bytes()).unwrap();
    (k, again)
}

#[tokio::test]
async fn nothing_verifies_before_keys_are_known_and_bad_documents_are_refused() {
    let i = issuer().await;
    let (key, signer) = pem_pair();
    let token = mint(&i.url, signer);
    let t = trust(&i, TrustTimings { min_refetch_interval: Duration::ZERO, ..Default::default() });

    i.docs.lock().unwrap().broken = true;
    let err = t.verify(&token, podpass_token::now_unix()).await.unwrap_err();
    assert!(matches!(err, TrustError::Unavailable { .. }), "{err}");
    assert!(err.to_string().contains("HTTP 500"), "{err}");

    type Change = Box<dyn Fn(&mut Docs)>;
    let cases: [(&str, Change); 4] = [
        ("names issuer", Box::new(|d: &mut Docs| d.issuer = Some("https://elsewhere.example".into()))),
        (
            "is not on the issuer's origin",
            Box::new(|d: &mut Docs| d.jwks_uri = Some("https://127.0.0.2:1/jwks".into())),
        ),
        (
            "redirect to another origin refused",
            Box::new(|d: &mut Docs| d.redirect = Some("https://127.0.0.2:1/x".into())),
        ),
        ("larger than", Box::new(|d: &mut Docs| d.jwks = " ".repeat(2 * 1024 * 1024))),
    ];
    for (expected, change) in cases {
        let mut docs = Docs { jwks: jwks_of(&[&key]), ..Docs::default() };
        change(&mut docs);
        *i.docs.lock().unwrap() = docs;
        let err = t.refresh().await.unwrap_err().to_string();
        assert!(err.contains(expected), "{expected:?} not in {err}");
        assert!(t.verify(&token, podpass_token::now_unix()).await.is_err(), "{expected}: verified anyway");
    }

    // Sound documents: the token verifies.
    *i.docs.lock().unwrap() = Docs { jwks: jwks_of(&[&key]), ..Docs::default() };
    assert_eq!(t.refresh().await.unwrap(), 1);
    let verified = t.verify(&token, podpass_token::now_unix()).await.unwrap();
    assert_eq!(verified.info.name, "builder");
    // A later outage keeps the last good keys.
    i.docs.lock().unwrap().broken = true;
    assert!(t.refresh().await.is_err());
    assert!(t.verify(&token, podpass_token::now_unix()).await.is_ok());
}

#[tokio::test]
async fn keys_that_left_the_jwks_verify_only_within_the_grace() {
    let i = issuer().await;
    let (old, old_signer) = pem_pair();
    let (new, _) = pem_pair();
    let old_token = mint(&i.url, old_signer);
    for (grace, still_valid) in [(Duration::from_secs(600), true), (Duration::ZERO, false)] {
        let t = trust(
            &i,
            TrustTimings {
                retired_key_grace: grace,
                min_refetch_interval: Duration::from_secs(3600),
                ..Default::default()
            },
        );
        *i.docs.lock().unwrap() = Docs { jwks: jwks_of(&[&old]), ..Docs::default() };
        t.refresh().await.unwrap();
        assert!(t.verify(&old_token, podpass_token::now_unix()).await.is_ok());
        i.docs.lock().unwrap().jwks = jwks_of(&[&new]);
        t.refresh().await.unwrap();
        tokio::time::sleep(Duration::from_millis(5)).await;
        assert_eq!(t.verify(&old_token, podpass_token::now_unix()).await.is_ok(), still_valid, "grace {grace:?}");
    }
}

#[tokio::test]
async fn an_unknown_kid_refetches_at_most_once_per_interval() {
    let i = issuer().await;
    let (old, _) = pem_pair();
    let (new, new_signer) = pem_pair();
    let new_token = mint(&i.url, new_signer);
    *i.docs.lock().unwrap() = Docs { jwks: jwks_of(&[&old]), ..Docs::default() };
    let t = trust(&i, TrustTimings { min_refetch_interval: Duration::from_millis(300), ..Default::default() });
    t.refresh().await.unwrap();
    // The issuer rotates; right after a fetch the unknown kid is refused without fetching.
    i.docs.lock().unwrap().jwks = jwks_of(&[&old, &new]);
    assert!(t.verify(&new_token, podpass_token::now_unix()).await.is_err());
    // Once the interval has passed, the unknown kid fetches and verifies.
    tokio::time::sleep(Duration::from_millis(350)).await;
    assert!(t.verify(&new_token, podpass_token::now_unix()).await.is_ok());
    assert_eq!(t.status().0, 2);
}
