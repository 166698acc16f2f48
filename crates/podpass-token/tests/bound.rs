//! Bound-object validation (claims.go `validator.Validate`): existence, UID, deletion
//! grace, node-bound tokens, user info, staleness, legacy tokens.

// Test helpers panic on failure by design; the lint targets library code.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;

use podpass_token::user::{CREDENTIAL_ID_KEY, NODE_NAME_KEY, NODE_UID_KEY, POD_NAME_KEY, POD_UID_KEY};
use podpass_token::{
    Algorithm, AuthError, Authenticator, BoundKind, BoundObject, BoundObjectLookup, Claims, Freshness, LookupError,
    ObjectRef, SigningKey, TokenFeatures, TokenGenerator, TokenRequest,
};

const ISSUER: &str = "https://issuer.test";
const AUD: &str = "https://issuer.test";
const NOW: i64 = 1_800_000_000;

/// In-memory objects keyed by "kind/namespace/name".
#[derive(Default)]
struct Objects(HashMap<String, BoundObject>);

impl Objects {
    fn put(&mut self, key: &str, uid: &str, deleted_at: Option<i64>) {
        self.0.insert(key.into(), BoundObject { uid: uid.into(), deletion_timestamp: deleted_at });
    }
    fn get(&self, key: String, resource: &'static str, name: &str) -> Result<BoundObject, LookupError> {
        self.0.get(&key).cloned().ok_or(LookupError::NotFound { resource, name: name.into() })
    }
}

impl BoundObjectLookup for Objects {
    async fn service_account(&self, ns: &str, name: &str) -> Result<BoundObject, LookupError> {
        self.get(format!("sa/{ns}/{name}"), "serviceaccounts", name)
    }
    async fn secret(&self, ns: &str, name: &str) -> Result<BoundObject, LookupError> {
        self.get(format!("secret/{ns}/{name}"), "secrets", name)
    }
    async fn pod(&self, ns: &str, name: &str) -> Result<BoundObject, LookupError> {
        self.get(format!("pod/{ns}/{name}"), "pods", name)
    }
    async fn node(&self, name: &str) -> Result<BoundObject, LookupError> {
        self.get(format!("node//{name}"), "nodes", name)
    }
}

fn world() -> Objects {
    let mut o = Objects::default();
    o.put("sa/ns/builder", "sa-uid", None);
    o.put("pod/ns/web", "pod-uid", None);
    o.put("secret/ns/tok", "secret-uid", None);
    o.put("node//n1", "node-uid", None);
    o
}

struct Setup {
    generator: TokenGenerator,
    verifier: Authenticator,
}

fn setup(features: TokenFeatures) -> Setup {
    let key = SigningKey::generate(Algorithm::ES256).unwrap();
    let verifier = Authenticator::new(vec![ISSUER.into()], vec![key.public_key().clone()], vec![AUD.into()], features);
    Setup { generator: TokenGenerator::new(ISSUER, key), verifier }
}

fn request() -> TokenRequest {
    TokenRequest {
        namespace: "ns".into(),
        service_account: ObjectRef::new("builder", "sa-uid"),
        audiences: vec![AUD.into()],
        expiration_seconds: 3600,
        ..TokenRequest::default()
    }
}

fn pod_bound() -> TokenRequest {
    TokenRequest {
        pod: Some(ObjectRef::new("web", "pod-uid")),
        node: Some(ObjectRef::new("n1", "node-uid")),
        ..request()
    }
}

async fn run(
    s: &Setup,
    req: &TokenRequest,
    objects: &Objects,
    at: i64,
) -> Result<podpass_token::Authenticated, AuthError> {
    let token = s.generator.mint(req, &TokenFeatures::default(), NOW).unwrap().token;
    s.verifier.authenticate(&token, None, objects, at).await
}

#[tokio::test]
async fn pod_bound_token_yields_upstream_user_info() {
    let s = setup(TokenFeatures::default());
    let minted = s.generator.mint(&pod_bound(), &TokenFeatures::default(), NOW).unwrap();
    let token = minted.token;
    let a = s.verifier.authenticate(&token, None, &world(), NOW).await.unwrap();
    assert_eq!(a.user.username, "system:serviceaccount:ns:builder");
    assert_eq!(a.user.uid, "sa-uid");
    assert_eq!(a.user.groups, ["system:serviceaccounts", "system:serviceaccounts:ns"]);
    assert_eq!(a.user.extra[POD_NAME_KEY], ["web"]);
    assert_eq!(a.user.extra[POD_UID_KEY], ["pod-uid"]);
    assert_eq!(a.user.extra[NODE_NAME_KEY], ["n1"]);
    assert_eq!(a.user.extra[NODE_UID_KEY], ["node-uid"]);
    assert_eq!(a.user.extra[CREDENTIAL_ID_KEY], [format!("JTI={}", minted.jti.unwrap())]);
    assert_eq!(a.freshness, Freshness::NotTracked);
    assert!(a.audit_annotations.is_empty());
}

#[tokio::test]
async fn pod_node_is_not_looked_up_for_pod_bound_tokens() {
    let s = setup(TokenFeatures::default());
    let mut objects = world();
    objects.0.remove("node//n1");
    assert!(run(&s, &pod_bound(), &objects, NOW).await.is_ok());
}

#[tokio::test]
async fn service_account_lookup_error_is_passed_on() {
    let s = setup(TokenFeatures::default());
    let mut objects = world();
    objects.0.remove("sa/ns/builder");
    let err = run(&s, &request(), &objects, NOW).await.unwrap_err();
    assert_eq!(err.to_string(), r#"serviceaccounts "builder" not found"#);
}

#[tokio::test]
async fn recreated_service_account_is_refused_by_uid() {
    let s = setup(TokenFeatures::default());
    let mut objects = world();
    objects.put("sa/ns/builder", "new-uid", None);
    let err = run(&s, &request(), &objects, NOW).await.unwrap_err();
    assert_eq!(err.to_string(), "service account UID (new-uid) does not match claim (sa-uid)");
}

#[tokio::test]
async fn deleted_objects_get_a_60s_grace() {
    let s = setup(TokenFeatures::default());
    let mut objects = world();
    objects.put("sa/ns/builder", "sa-uid", Some(NOW - 60));
    assert!(run(&s, &request(), &objects, NOW).await.is_ok());
    objects.put("sa/ns/builder", "sa-uid", Some(NOW - 61));
    assert_eq!(
        run(&s, &request(), &objects, NOW).await.unwrap_err().to_string(),
        "service account ns/builder has been deleted"
    );

    let mut objects = world();
    objects.put("pod/ns/web", "pod-uid", Some(NOW - 61));
    assert_eq!(run(&s, &pod_bound(), &objects, NOW).await, Err(AuthError::Invalidated));
    objects.put("pod/ns/web", "pod-uid", Some(NOW - 30));
    assert!(run(&s, &pod_bound(), &objects, NOW).await.is_ok());
}

#[tokio::test]
async fn missing_or_recreated_pod_invalidates() {
    let s = setup(TokenFeatures::default());
    let mut objects = world();
    objects.put("pod/ns/web", "other-pod", None);
    let err = run(&s, &pod_bound(), &objects, NOW).await.unwrap_err();
    assert_eq!(
        err,
        AuthError::UidMismatch { kind: BoundKind::Pod, actual: "other-pod".into(), claim: "pod-uid".into() }
    );
    assert_eq!(err.to_string(), "pod UID (other-pod) does not match service account pod ref claim (pod-uid)");
    objects.0.remove("pod/ns/web");
    assert_eq!(
        run(&s, &pod_bound(), &objects, NOW).await.unwrap_err().to_string(),
        "service account token has been invalidated"
    );
}

#[tokio::test]
async fn secret_bound_tokens_check_the_secret() {
    let s = setup(TokenFeatures::default());
    let req = TokenRequest { secret: Some(ObjectRef::new("tok", "secret-uid")), ..request() };
    assert!(run(&s, &req, &world(), NOW).await.is_ok());
    let mut objects = world();
    objects.put("secret/ns/tok", "x", None);
    assert_eq!(
        run(&s, &req, &objects, NOW).await.unwrap_err().to_string(),
        "secret UID (x) does not match service account secret ref claim (secret-uid)"
    );
    objects.0.remove("secret/ns/tok");
    assert_eq!(run(&s, &req, &objects, NOW).await, Err(AuthError::Invalidated));
}

#[tokio::test]
async fn node_bound_tokens_check_the_node() {
    let s = setup(TokenFeatures::default());
    let req = TokenRequest { node: Some(ObjectRef::new("n1", "node-uid")), ..request() };
    let a = run(&s, &req, &world(), NOW).await.unwrap();
    assert_eq!(a.user.extra[NODE_NAME_KEY], ["n1"]);
    assert!(!a.user.extra.contains_key(POD_NAME_KEY));
    let mut objects = world();
    objects.put("node//n1", "replaced", None);
    assert_eq!(
        run(&s, &req, &objects, NOW).await.unwrap_err().to_string(),
        "node UID (replaced) does not match service account node ref claim (node-uid)"
    );
    objects.0.remove("node//n1");
    assert_eq!(run(&s, &req, &objects, NOW).await, Err(AuthError::Invalidated));

    let no_validation = setup(TokenFeatures { node_binding_validation: false, ..TokenFeatures::default() });
    assert_eq!(
        run(&no_validation, &req, &world(), NOW).await.unwrap_err().to_string(),
        "token is bound to a Node object but the ServiceAccountTokenNodeBindingValidation feature gate is disabled"
    );
}

#[tokio::test]
async fn warnafter_marks_stale_use_with_audit_annotation() {
    let s = setup(TokenFeatures::default());
    let req = TokenRequest { warnafter_seconds: 3607, expiration_seconds: 31_536_000, ..pod_bound() };
    let fresh = run(&s, &req, &world(), NOW + 10).await.unwrap();
    assert_eq!(fresh.freshness, Freshness::Valid);
    let stale = run(&s, &req, &world(), NOW + 3607 + 100).await.unwrap();
    assert_eq!(stale.freshness, Freshness::Stale(100));
    assert_eq!(
        stale.audit_annotations,
        [(
            "authentication.k8s.io/stale-token".to_owned(),
            "subject: system:serviceaccount:ns:builder, seconds after warning threshold: 100".to_owned()
        )]
    );
}

#[tokio::test]
async fn token_without_audience_is_legacy_and_gets_implicit_audiences() {
    let s = setup(TokenFeatures::default());
    let mut claims = Claims::build(&request(), &TokenFeatures::default(), NOW).unwrap();
    claims.aud.clear();
    let token = s.generator.sign(claims).unwrap();
    let a = s.verifier.authenticate(&token, None, &world(), NOW).await.unwrap();
    assert!(a.legacy);
    assert_eq!(a.audiences, [AUD]);
    assert_eq!(a.audit_annotations[0].0, "authentication.k8s.io/legacy-token");
}

#[tokio::test]
async fn credential_id_follows_the_jti_gate() {
    let s = setup(TokenFeatures { jti: false, ..TokenFeatures::default() });
    let a = run(&s, &request(), &world(), NOW).await.unwrap();
    assert!(!a.user.extra.contains_key(CREDENTIAL_ID_KEY));
    assert!(a.user.extra.is_empty());
}
