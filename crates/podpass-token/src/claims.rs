//! The service-account JWT claims layout (pkg/serviceaccount/claims.go `Claims`).
//!
//! Members serialise in the order upstream tokens carry them (go-jose merges claims into
//! a map, so keys come out sorted): `aud, exp, iat, iss, jti, kubernetes.io, nbf, sub`, and
//! inside `kubernetes.io`: `namespace, node, pod, secret, serviceaccount, warnafter`.

use aws_lc_rs::rand::{SecureRandom, SystemRandom};
use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize};
use thiserror::Error;

use crate::features::TokenFeatures;
use crate::user::make_username;

/// Injected bound-token expiration that triggers the extended-expiration path (3607 s).
pub const WARN_ONLY_BOUND_TOKEN_EXPIRATION_SECONDS: i64 = 60 * 60 + 7;
/// Extended expiration of such tokens: one year.
pub const EXPIRATION_EXTENSION_SECONDS: i64 = 24 * 365 * 60 * 60;

/// A reference to a named object with a UID, as carried in the private claims.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct ObjectRef {
    /// Object name.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// Object UID.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub uid: String,
}

impl ObjectRef {
    /// A reference from name and UID.
    pub fn new(name: impl Into<String>, uid: impl Into<String>) -> Self {
        Self { name: name.into(), uid: uid.into() }
    }
}

/// The private `kubernetes.io` claims.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct KubernetesClaims {
    /// Namespace of the service account.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    /// Node the token is bound to, or the node of the bound pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<ObjectRef>,
    /// Pod the token is bound to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<ObjectRef>,
    /// Secret the token is bound to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<ObjectRef>,
    /// The service account.
    #[serde(default)]
    pub serviceaccount: ObjectRef,
    /// After this time, using the token is reported as stale (extended-expiration tokens).
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "numeric_date")]
    pub warnafter: Option<i64>,
}

/// The full claim set of a service-account token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Claims {
    /// Audiences; always a JSON array when written, a string or array when read.
    #[serde(default, skip_serializing_if = "Vec::is_empty", deserialize_with = "audience")]
    pub aud: Vec<String>,
    /// Expiry (seconds since the epoch).
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "numeric_date")]
    pub exp: Option<i64>,
    /// Issued at.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "numeric_date")]
    pub iat: Option<i64>,
    /// Issuer.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub iss: String,
    /// Token id (UUID v4), the credential id of the audit trail.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jti: Option<String>,
    /// Private claims.
    #[serde(rename = "kubernetes.io", default, skip_serializing_if = "Option::is_none")]
    pub kubernetes: Option<KubernetesClaims>,
    /// Not before.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "numeric_date")]
    pub nbf: Option<i64>,
    /// Subject: `system:serviceaccount:<namespace>:<name>`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub sub: String,
}

/// What a token is requested for: the inputs of upstream `Claims(...)`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TokenRequest {
    /// Namespace of the service account.
    pub namespace: String,
    /// The service account (name and UID).
    pub service_account: ObjectRef,
    /// Audiences (already defaulted by the caller).
    pub audiences: Vec<String>,
    /// Lifetime written into `exp`.
    pub expiration_seconds: i64,
    /// Seconds after issue at which `warnafter` falls; 0 = no `warnafter`.
    pub warnafter_seconds: i64,
    /// Bound pod.
    pub pod: Option<ObjectRef>,
    /// Bound secret.
    pub secret: Option<ObjectRef>,
    /// Node: the bound pod's node, or the bound node of a node-bound token.
    pub node: Option<ObjectRef>,
}

/// A claim set could not be built.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum ClaimsError {
    /// Secret binding together with a pod or node (upstream message).
    #[error("internal error, token can only be bound to one object type")]
    MultipleBindings,
    /// Node-only binding while the gate is off (upstream message).
    #[error("token bound to Node object requested, but \"ServiceAccountTokenNodeBinding\" feature gate is disabled")]
    NodeBindingDisabled,
    /// A required field is empty.
    #[error("{0} must not be empty")]
    Empty(&'static str),
    /// Expiration is not positive.
    #[error("expirationSeconds must be positive, got {0}")]
    Expiration(i64),
    /// The system random source failed.
    #[error("random source failed")]
    Random,
}

impl Claims {
    /// Builds the claims of a token issued at `now` (seconds since the epoch), applying the
    /// upstream binding rules. `iss` is left for the generator to set.
    pub fn build(req: &TokenRequest, features: &TokenFeatures, now: i64) -> Result<Self, ClaimsError> {
        let jti = if features.jti { Some(new_uuid_v4()?) } else { None };
        Ok(ClaimsRef::bind(req, features, now, jti.as_deref(), "")?.to_owned_claims())
    }
}

/// The claims of a token being minted, borrowed from its [`TokenRequest`]: the one place
/// the binding rules live, and what the generator serialises (no copies of the request's
/// strings on the minting path). Serialises byte for byte as [`Claims`] does.
#[derive(Debug, Serialize)]
pub(crate) struct ClaimsRef<'a> {
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    aud: &'a [String],
    exp: i64,
    iat: i64,
    #[serde(skip_serializing_if = "str::is_empty")]
    iss: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    jti: Option<&'a str>,
    #[serde(rename = "kubernetes.io")]
    kubernetes: KubernetesRef<'a>,
    nbf: i64,
    sub: Subject<'a>,
}

#[derive(Debug, Serialize)]
struct KubernetesRef<'a> {
    #[serde(skip_serializing_if = "str::is_empty")]
    namespace: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    node: Option<&'a ObjectRef>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pod: Option<&'a ObjectRef>,
    #[serde(skip_serializing_if = "Option::is_none")]
    secret: Option<&'a ObjectRef>,
    serviceaccount: &'a ObjectRef,
    #[serde(skip_serializing_if = "Option::is_none")]
    warnafter: Option<i64>,
}

/// `system:serviceaccount:<namespace>:<name>`, written without building the string.
#[derive(Debug)]
struct Subject<'a>(&'a str, &'a str);

impl std::fmt::Display for Subject<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}{}:{}", crate::user::SERVICE_ACCOUNT_USERNAME_PREFIX, self.0, self.1)
    }
}

impl Serialize for Subject<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'a> ClaimsRef<'a> {
    /// Applies the upstream binding rules (claims.go `Claims`) to `req` issued at `now`.
    pub(crate) fn bind(
        req: &'a TokenRequest,
        features: &TokenFeatures,
        now: i64,
        jti: Option<&'a str>,
        iss: &'a str,
    ) -> Result<Self, ClaimsError> {
        if req.namespace.is_empty() {
            return Err(ClaimsError::Empty("namespace"));
        }
        if req.service_account.name.is_empty() {
            return Err(ClaimsError::Empty("service account name"));
        }
        if req.expiration_seconds <= 0 {
            return Err(ClaimsError::Expiration(req.expiration_seconds));
        }
        if req.secret.is_some() && (req.pod.is_some() || req.node.is_some()) {
            return Err(ClaimsError::MultipleBindings);
        }
        let mut private = KubernetesRef {
            namespace: &req.namespace,
            node: None,
            pod: None,
            secret: None,
            serviceaccount: &req.service_account,
            warnafter: (req.warnafter_seconds != 0).then_some(now + req.warnafter_seconds),
        };
        match (&req.pod, &req.secret, &req.node) {
            (Some(pod), _, node) => {
                private.pod = Some(pod);
                if features.pod_node_info {
                    private.node = node.as_ref();
                }
            }
            (None, Some(secret), _) => private.secret = Some(secret),
            (None, None, Some(node)) => {
                if !features.node_binding {
                    return Err(ClaimsError::NodeBindingDisabled);
                }
                private.node = Some(node);
            }
            (None, None, None) => {}
        }
        Ok(Self {
            aud: &req.audiences,
            exp: now + req.expiration_seconds,
            iat: now,
            iss,
            jti,
            kubernetes: private,
            nbf: now,
            sub: Subject(&req.namespace, &req.service_account.name),
        })
    }

    /// `exp`.
    pub(crate) fn expires_at(&self) -> i64 {
        self.exp
    }

    fn to_owned_claims(&self) -> Claims {
        let k = &self.kubernetes;
        Claims {
            aud: self.aud.to_vec(),
            exp: Some(self.exp),
            iat: Some(self.iat),
            iss: self.iss.to_owned(),
            jti: self.jti.map(str::to_owned),
            kubernetes: Some(KubernetesClaims {
                namespace: k.namespace.to_owned(),
                node: k.node.cloned(),
                pod: k.pod.cloned(),
                secret: k.secret.cloned(),
                serviceaccount: k.serviceaccount.clone(),
                warnafter: k.warnafter,
            }),
            nbf: Some(self.nbf),
            sub: make_username(self.sub.0, self.sub.1),
        }
    }
}

/// Random bytes drawn from the system CSPRNG in batches: one `RAND_bytes` call per 32
/// UUIDs instead of one per token (the per-call cost dominated minting). Bytes are handed
/// out once and never reused; the pool is per thread, so no lock is taken.
const RANDOM_POOL_BYTES: usize = 512;

thread_local! {
    static RANDOM_POOL: std::cell::RefCell<([u8; RANDOM_POOL_BYTES], usize)> =
        const { std::cell::RefCell::new(([0; RANDOM_POOL_BYTES], RANDOM_POOL_BYTES)) };
}

fn random_16() -> Result<[u8; 16], ClaimsError> {
    RANDOM_POOL.with(|pool| {
        let mut pool = pool.borrow_mut();
        let (buf, used) = &mut *pool;
        if *used + 16 > RANDOM_POOL_BYTES {
            SystemRandom::new().fill(buf).map_err(|_| ClaimsError::Random)?;
            *used = 0;
        }
        let mut out = [0u8; 16];
        out.copy_from_slice(&buf[*used..*used + 16]);
        // Wipe what was handed out so the pool never holds a live value twice.
        buf[*used..*used + 16].fill(0);
        *used += 16;
        Ok(out)
    })
}

/// A random (version 4) UUID in its canonical lower-case form.
pub fn new_uuid_v4() -> Result<String, ClaimsError> {
    let mut b = random_16()?;
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(36);
    for (i, byte) in b.iter().enumerate() {
        if matches!(i, 4 | 6 | 8 | 10) {
            out.push('-');
        }
        out.push(char::from(HEX[usize::from(byte >> 4)]));
        out.push(char::from(HEX[usize::from(byte & 0x0f)]));
    }
    Ok(out)
}

/// go-jose `NumericDate`: a JSON number of seconds; fractions are truncated.
pub(crate) fn numeric_date<'de, D: Deserializer<'de>>(d: D) -> Result<Option<i64>, D::Error> {
    struct V;
    impl<'de> Visitor<'de> for V {
        type Value = Option<i64>;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a NumericDate (seconds since the epoch)")
        }
        fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
            Ok(Some(v))
        }
        fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
            i64::try_from(v).map(Some).map_err(|_| E::custom("NumericDate out of range"))
        }
        fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
            if v.is_finite() && v.abs() < 1e15 {
                Ok(Some(v.trunc() as i64))
            } else {
                Err(E::custom("NumericDate out of range"))
            }
        }
        fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_some<D2: Deserializer<'de>>(self, d: D2) -> Result<Self::Value, D2::Error> {
            d.deserialize_any(self)
        }
    }
    d.deserialize_option(V)
}

/// go-jose `Audience`: a single string or an array of strings (null = none); the one
/// visitor is the borrowed view's.
fn audience<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    Ok(crate::wire::audience(d)?.into_iter().map(|t| t.0.into_owned()).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request() -> TokenRequest {
        TokenRequest {
            namespace: "ns".into(),
            service_account: ObjectRef::new("builder", "sa-uid"),
            audiences: vec!["registry".into()],
            expiration_seconds: 3600,
            ..TokenRequest::default()
        }
    }

    #[test]
    fn pod_bound_claims_serialise_in_upstream_order() {
        let mut req = request();
        req.pod = Some(ObjectRef::new("p", "pod-uid"));
        req.node = Some(ObjectRef::new("n1", "node-uid"));
        req.warnafter_seconds = 3607;
        let mut claims = Claims::build(&req, &TokenFeatures::default(), 1000).unwrap();
        claims.iss = "https://issuer".into();
        claims.jti = Some("fixed".into());
        let json = serde_json::to_string(&claims).unwrap();
        assert_eq!(
            json,
            r#"{"aud":["registry"],"exp":4600,"iat":1000,"iss":"https://issuer","jti":"fixed","kubernetes.io":{"namespace":"ns","node":{"name":"n1","uid":"node-uid"},"pod":{"name":"p","uid":"pod-uid"},"serviceaccount":{"name":"builder","uid":"sa-uid"},"warnafter":4607},"nbf":1000,"sub":"system:serviceaccount:ns:builder"}"#
        );
        let back: Claims = serde_json::from_str(&json).unwrap();
        assert_eq!(back, claims);
    }

    #[test]
    fn node_info_of_pod_follows_gate() {
        let mut req = request();
        req.pod = Some(ObjectRef::new("p", "u"));
        req.node = Some(ObjectRef::new("n1", ""));
        let off = TokenFeatures { pod_node_info: false, ..TokenFeatures::default() };
        assert_eq!(Claims::build(&req, &off, 0).unwrap().kubernetes.unwrap().node, None);
        let on = Claims::build(&req, &TokenFeatures::default(), 0).unwrap();
        // node found without uid: name only, uid omitted
        let json = serde_json::to_string(&on).unwrap();
        assert!(json.contains(r#""node":{"name":"n1"}"#), "{json}");
    }

    #[test]
    fn binding_rules_match_upstream() {
        let mut req = request();
        req.secret = Some(ObjectRef::new("s", "u"));
        req.pod = Some(ObjectRef::new("p", "u"));
        assert_eq!(Claims::build(&req, &TokenFeatures::default(), 0), Err(ClaimsError::MultipleBindings));
        req.pod = None;
        req.node = Some(ObjectRef::new("n", "u"));
        assert_eq!(Claims::build(&req, &TokenFeatures::default(), 0), Err(ClaimsError::MultipleBindings));
        req.secret = None;
        let gated = TokenFeatures { node_binding: false, ..TokenFeatures::default() };
        assert_eq!(
            Claims::build(&req, &gated, 0).unwrap_err().to_string(),
            "token bound to Node object requested, but \"ServiceAccountTokenNodeBinding\" feature gate is disabled"
        );
        let node_bound = Claims::build(&req, &TokenFeatures::default(), 0).unwrap();
        assert_eq!(node_bound.kubernetes.unwrap().node, Some(ObjectRef::new("n", "u")));
    }

    #[test]
    fn jti_is_a_fresh_uuid_v4_when_gated_on() {
        let a = Claims::build(&request(), &TokenFeatures::default(), 0).unwrap().jti.unwrap();
        let b = Claims::build(&request(), &TokenFeatures::default(), 0).unwrap().jti.unwrap();
        assert_ne!(a, b);
        assert_eq!(a.len(), 36);
        assert_eq!(&a[14..15], "4");
        assert!(matches!(&a[19..20], "8" | "9" | "a" | "b"));
        let off = TokenFeatures { jti: false, ..TokenFeatures::default() };
        assert_eq!(Claims::build(&request(), &off, 0).unwrap().jti, None);
        // the pool refills across its boundary and never hands out a value twice
        let many: std::collections::HashSet<String> = (0..200).map(|_| new_uuid_v4().unwrap()).collect();
        assert_eq!(many.len(), 200);
        assert!(many.iter().all(|u| u.len() == 36 && u.as_bytes()[14] == b'4'));
    }

    #[test]
    fn reads_string_audience_and_fractional_dates() {
        let c: Claims = serde_json::from_str(r#"{"aud":"one","exp":12.9,"iss":"i","sub":"s"}"#).unwrap();
        assert_eq!(c.aud, ["one"]);
        assert_eq!(c.exp, Some(12));
        assert!(serde_json::from_str::<Claims>(r#"{"exp":"soon"}"#).is_err());
        assert!(serde_json::from_str::<Claims>(r#"{"exp":1e300}"#).is_err());
        // duplicate members are refused rather than resolved silently
        assert!(serde_json::from_str::<Claims>(r#"{"sub":"a","sub":"b"}"#).is_err());
        assert!(serde_json::from_str::<Claims>(r#"{"aud":[1]}"#).is_err());
        assert!(serde_json::from_str::<Claims>(r#"{"aud":null,"exp":null}"#).unwrap().aud.is_empty());
        assert_eq!(serde_json::from_str::<Claims>(r#"{"exp":-5}"#).unwrap().exp, Some(-5));
    }

    #[test]
    fn refuses_empty_identity_and_non_positive_expiry() {
        let mut req = request();
        req.expiration_seconds = 0;
        assert_eq!(Claims::build(&req, &TokenFeatures::default(), 0), Err(ClaimsError::Expiration(0)));
        let mut req = request();
        req.namespace.clear();
        assert_eq!(Claims::build(&req, &TokenFeatures::default(), 0), Err(ClaimsError::Empty("namespace")));
    }
}
