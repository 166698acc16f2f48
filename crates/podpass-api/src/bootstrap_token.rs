//! Bootstrap tokens (`k8s.io/cluster-bootstrap`): the `<id>.<secret>` tokens a new node
//! authenticates with before it has a certificate, kept as Secrets of type
//! `bootstrap.kubernetes.io/token` named `bootstrap-token-<id>` in `kube-system`, and the
//! detached JWS that signs `kube-public/cluster-info` with one. Pure: the API server's
//! authenticator, the controller manager's signer and cleaner, and `podpass token create`
//! read and write them through these.

use std::collections::BTreeMap;

use aws_lc_rs::hmac;
use serde_json::{Value, json};

/// The Secret type (`SecretTypeBootstrapToken`).
pub const SECRET_TYPE: &str = "bootstrap.kubernetes.io/token";
/// The Secrets' namespace.
pub const NAMESPACE: &str = "kube-system";
/// A token Secret's name is this and the token's id (`BootstrapTokenSecretPrefix`).
pub const SECRET_PREFIX: &str = "bootstrap-token-";
/// Data keys (`BootstrapToken*Key`).
pub const TOKEN_ID: &str = "token-id";
/// The secret half.
pub const TOKEN_SECRET: &str = "token-secret";
/// When it expires (RFC 3339).
pub const EXPIRATION: &str = "expiration";
/// What it is for, in words.
pub const DESCRIPTION: &str = "description";
/// `"true"`: it authenticates.
pub const USAGE_AUTHENTICATION: &str = "usage-bootstrap-authentication";
/// `"true"`: it signs `cluster-info`.
pub const USAGE_SIGNING: &str = "usage-bootstrap-signing";
/// Comma-separated groups beyond `system:bootstrappers`.
pub const EXTRA_GROUPS: &str = "auth-extra-groups";
/// Its user is this and its id (`BootstrapUserPrefix`).
pub const USER_PREFIX: &str = "system:bootstrap:";
/// The group of every bootstrap token (`BootstrapDefaultGroup`).
pub const GROUP: &str = "system:bootstrappers";
/// The group kubeadm gives the tokens it creates for nodes.
pub const NODE_GROUP: &str = "system:bootstrappers:kubeadm:default-node-token";
/// The public namespace and ConfigMap a joining node reads (`ConfigMapClusterInfo`).
pub const PUBLIC_NAMESPACE: &str = "kube-public";
/// The ConfigMap's name.
pub const CLUSTER_INFO: &str = "cluster-info";
/// Its kubeconfig key (`KubeConfigKey`).
pub const KUBECONFIG_KEY: &str = "kubeconfig";
/// Each signing token's signature key is this and its id (`JWSSignatureKeyPrefix`).
pub const SIGNATURE_PREFIX: &str = "jws-kubeconfig-";

const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";

fn lower_alnum(s: &str) -> bool {
    s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
}

/// A bootstrap token's id and secret (`ParseToken`: `\A([a-z0-9]{6})\.([a-z0-9]{16})\z`);
/// `None` for anything else (a JWT, a static token).
pub fn parse(token: &str) -> Option<(&str, &str)> {
    let (id, secret) = token.split_once('.')?;
    (id.len() == 6 && secret.len() == 16 && lower_alnum(id) && lower_alnum(secret)).then_some((id, secret))
}

/// A new random token (`GenerateBootstrapToken`).
pub fn generate() -> Result<String, aws_lc_rs::error::Unspecified> {
    let mut bytes = [0u8; 22];
    aws_lc_rs::rand::fill(&mut bytes)?;
    // 252 = 7 × 36: bytes past it are redrawn, so every character is equally likely.
    let mut chars = Vec::with_capacity(22);
    let mut pool = bytes.to_vec();
    while chars.len() < 22 {
        match pool.pop() {
            Some(b) if b < 252 => chars.push(ALPHABET[usize::from(b % 36)]),
            Some(_) => {}
            None => {
                let mut more = [0u8; 22];
                aws_lc_rs::rand::fill(&mut more)?;
                pool.extend_from_slice(&more);
            }
        }
    }
    let text = String::from_utf8_lossy(&chars).into_owned();
    Ok(format!("{}.{}", &text[..6], &text[6..]))
}

/// Whether `group` may be an extra group (`ValidateBootstrapGroupName`:
/// `\Asystem:bootstrappers:[a-z0-9:-]{0,255}[a-z0-9]\z`).
pub fn valid_extra_group(group: &str) -> bool {
    let Some(rest) = group.strip_prefix("system:bootstrappers:") else { return false };
    let (Some(last), true) = (rest.bytes().last(), rest.len() <= 256) else { return false };
    (last.is_ascii_lowercase() || last.is_ascii_digit())
        && rest.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b':' || b == b'-')
}

/// A token Secret's `expiration` that is no RFC 3339 time (the token counts as expired).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("expiration {0:?} is not an RFC 3339 time")]
pub struct BadExpiration(pub String);

/// A token Secret's data, decoded (values that are not base64 or not UTF-8 are left out).
#[derive(Debug, Clone, Default)]
pub struct TokenSecret {
    data: BTreeMap<String, String>,
    deleting: bool,
    typed: bool,
}

impl TokenSecret {
    /// Reads a Secret's JSON (its `data` base64, as the API serves it).
    pub fn from_secret(secret: &Value) -> Self {
        let data = secret
            .get("data")
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
            .filter_map(|(k, v)| {
                let bytes = data_encoding::BASE64.decode(v.as_str()?.as_bytes()).ok()?;
                Some((k.clone(), String::from_utf8(bytes).ok()?))
            })
            .collect();
        let deleting = secret.pointer("/metadata/deletionTimestamp").is_some_and(|t| !t.is_null());
        let typed = secret.get("type").and_then(Value::as_str) == Some(SECRET_TYPE);
        Self { data, deleting, typed }
    }

    /// A data value (`GetData`).
    pub fn get(&self, key: &str) -> Option<&str> {
        self.data.get(key).map(String::as_str)
    }

    /// Its expiry, seconds since the epoch (`None`: it never expires).
    pub fn expires_at(&self) -> Result<Option<i64>, BadExpiration> {
        match self.get(EXPIRATION) {
            None | Some("") => Ok(None),
            Some(t) => {
                t.parse::<jiff::Timestamp>().map(|t| Some(t.as_second())).map_err(|_| BadExpiration(t.to_owned()))
            }
        }
    }

    /// `HasExpired`: past its expiry at `now`, or with an expiry that does not parse.
    pub fn expired(&self, now: i64) -> bool {
        self.expires_at().map_or(true, |at| at.is_some_and(|at| now > at))
    }

    /// The groups it authenticates as (`GetGroups`): `system:bootstrappers` and its extra
    /// groups, sorted, each once; `Err` naming an extra group that is not allowed.
    pub fn groups(&self) -> Result<Vec<String>, String> {
        let mut groups = std::collections::BTreeSet::from([GROUP.to_owned()]);
        for group in self.get(EXTRA_GROUPS).unwrap_or_default().split(',').map(str::trim).filter(|g| !g.is_empty()) {
            if !valid_extra_group(group) {
                return Err(format!(
                    "bootstrap group {group:?} is invalid (must match \\Asystem:bootstrappers:[a-z0-9:-]{{0,255}}[a-z0-9]\\z)"
                ));
            }
            groups.insert(group.to_owned());
        }
        Ok(groups.into_iter().collect())
    }

    /// The user `token` authenticates as with this Secret (`AuthenticateToken`): its name and
    /// groups; `Err` says why not (logged, never shown to the caller).
    pub fn authenticate(&self, token: &str, now: i64) -> Result<(String, Vec<String>), &'static str> {
        let (id, secret) = parse(token).ok_or("not a bootstrap token")?;
        if self.deleting {
            return Err("is deleted and awaiting removal");
        }
        if !self.typed {
            return Err("is not a bootstrap token Secret");
        }
        let stored = self.get(TOKEN_SECRET).unwrap_or_default();
        if aws_lc_rs::constant_time::verify_slices_are_equal(stored.as_bytes(), secret.as_bytes()).is_err() {
            return Err("has another secret");
        }
        if self.get(TOKEN_ID) != Some(id) {
            return Err("has another token id");
        }
        if self.expired(now) {
            return Err("has expired");
        }
        if self.get(USAGE_AUTHENTICATION) != Some("true") {
            return Err("is not for authentication");
        }
        let groups = self.groups().map_err(|_| "has an invalid extra group")?;
        Ok((format!("{USER_PREFIX}{id}"), groups))
    }

    /// Whether it signs `cluster-info` at `now`: typed, not deleting or expired, for signing.
    pub fn signs(&self, now: i64) -> bool {
        self.typed && !self.deleting && !self.expired(now) && self.get(USAGE_SIGNING) == Some("true")
    }
}

/// The Secret `kubeadm token create` writes for `token` (`<id>.<secret>`): its expiry,
/// description, usages and extra groups.
pub fn secret(
    token: &str,
    expires: Option<&str>,
    description: Option<&str>,
    usages: &[&str],
    groups: &[&str],
) -> Option<Value> {
    let (id, secret) = parse(token)?;
    let mut data = serde_json::Map::new();
    let mut put = |k: &str, v: &str| {
        data.insert(k.to_owned(), json!(data_encoding::BASE64.encode(v.as_bytes())));
    };
    put(TOKEN_ID, id);
    put(TOKEN_SECRET, secret);
    if let Some(at) = expires {
        put(EXPIRATION, at);
    }
    if let Some(d) = description {
        put(DESCRIPTION, d);
    }
    for usage in usages {
        put(&format!("usage-bootstrap-{usage}"), "true");
    }
    if !groups.is_empty() {
        put(EXTRA_GROUPS, &groups.join(","));
    }
    Some(json!({"apiVersion": "v1", "kind": "Secret", "type": SECRET_TYPE,
                "metadata": {"name": format!("{SECRET_PREFIX}{id}"), "namespace": NAMESPACE},
                "data": data}))
}

/// `ComputeDetachedSignature`: the HS256 JWS of `content` keyed by the token's secret, its
/// payload left out (`<header>..<signature>`), with go-jose's header bytes.
pub fn detached_signature(content: &str, id: &str, secret: &str) -> String {
    let header = data_encoding::BASE64URL_NOPAD.encode(format!(r#"{{"alg":"HS256","kid":"{id}"}}"#).as_bytes());
    let payload = data_encoding::BASE64URL_NOPAD.encode(content.as_bytes());
    let key = hmac::Key::new(hmac::HMAC_SHA256, secret.as_bytes());
    let tag = hmac::sign(&key, format!("{header}.{payload}").as_bytes());
    format!("{header}..{}", data_encoding::BASE64URL_NOPAD.encode(tag.as_ref()))
}

/// `DetachedTokenIsValid`: whether `signature` is `content`'s for the token.
pub fn signature_is_valid(signature: &str, content: &str, id: &str, secret: &str) -> bool {
    let want = detached_signature(content, id, secret);
    aws_lc_rs::constant_time::verify_slices_are_equal(want.as_bytes(), signature.as_bytes()).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOKEN: &str = "abcdef.0123456789abcdef";

    fn stored(extra: &[(&str, &str)]) -> TokenSecret {
        let mut secret = secret(TOKEN, None, None, &["authentication", "signing"], &[]).unwrap_or_default();
        for (k, v) in extra {
            secret["data"][*k] = json!(data_encoding::BASE64.encode(v.as_bytes()));
        }
        TokenSecret::from_secret(&secret)
    }

    #[test]
    fn tokens_are_six_and_sixteen_lowercase_alphanumerics() {
        assert_eq!(parse(TOKEN), Some(("abcdef", "0123456789abcdef")));
        for bad in [
            "ABCDEF.0123456789abcdef",
            "abcde.0123456789abcdef",
            "abcdef.0123456789abcde",
            "abcdef0123456789abcdef",
            "a.b.c",
        ] {
            assert_eq!(parse(bad), None, "{bad}");
        }
        for _ in 0..20 {
            let t = generate().unwrap_or_default();
            assert!(parse(&t).is_some(), "{t}");
        }
        assert_ne!(generate().ok(), generate().ok());
    }

    #[test]
    fn a_token_authenticates_as_its_bootstrap_user_while_its_secret_allows() {
        let now = 1_800_000_000;
        let groups = "system:bootstrappers:kubeadm:default-node-token,system:bootstrappers:a";
        let good = stored(&[(EXTRA_GROUPS, groups)]);
        assert_eq!(
            good.authenticate(TOKEN, now),
            Ok((
                "system:bootstrap:abcdef".to_owned(),
                vec![
                    "system:bootstrappers".to_owned(),
                    "system:bootstrappers:a".to_owned(),
                    "system:bootstrappers:kubeadm:default-node-token".to_owned()
                ]
            ))
        );
        assert_eq!(good.authenticate("abcdef.0123456789abcdee", now), Err("has another secret"));
        assert_eq!(stored(&[(EXPIRATION, "2020-01-01T00:00:00Z")]).authenticate(TOKEN, now), Err("has expired"));
        assert_eq!(stored(&[(EXPIRATION, "soon")]).authenticate(TOKEN, now), Err("has expired"), "unparseable");
        assert!(stored(&[(EXPIRATION, "2099-01-01T00:00:00Z")]).authenticate(TOKEN, now).is_ok());
        assert_eq!(
            stored(&[(USAGE_AUTHENTICATION, "false")]).authenticate(TOKEN, now),
            Err("is not for authentication")
        );
        assert_eq!(
            stored(&[(EXTRA_GROUPS, "system:masters")]).authenticate(TOKEN, now),
            Err("has an invalid extra group")
        );
        assert_eq!(stored(&[(TOKEN_ID, "zzzzzz")]).authenticate(TOKEN, now), Err("has another token id"));
        let mut deleting = secret(TOKEN, None, None, &["authentication"], &[]).unwrap_or_default();
        deleting["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        assert_eq!(
            TokenSecret::from_secret(&deleting).authenticate(TOKEN, now),
            Err("is deleted and awaiting removal")
        );
        let mut opaque = secret(TOKEN, None, None, &["authentication"], &[]).unwrap_or_default();
        opaque["type"] = json!("Opaque");
        assert_eq!(TokenSecret::from_secret(&opaque).authenticate(TOKEN, now), Err("is not a bootstrap token Secret"));
    }

    #[test]
    fn extra_groups_are_bootstrappers_subgroups_only() {
        assert!(valid_extra_group("system:bootstrappers:kubeadm:default-node-token"));
        assert!(valid_extra_group("system:bootstrappers:x"));
        for bad in ["system:bootstrappers:", "system:bootstrappers:x-", "system:nodes", "system:bootstrappers:X"] {
            assert!(!valid_extra_group(bad), "{bad}");
        }
        assert!(!valid_extra_group(&format!("system:bootstrappers:{}", "a".repeat(257))));
    }

    #[test]
    fn the_detached_signature_is_hs256_with_go_joses_header_and_no_payload() {
        let sig = detached_signature("content", "abcdef", "0123456789abcdef");
        let (header, rest) = sig.split_once("..").unwrap_or_default();
        assert_eq!(
            data_encoding::BASE64URL_NOPAD.decode(header.as_bytes()).ok().as_deref(),
            Some(br#"{"alg":"HS256","kid":"abcdef"}"#.as_slice())
        );
        assert_eq!(data_encoding::BASE64URL_NOPAD.decode(rest.as_bytes()).map(|t| t.len()).ok(), Some(32));
        assert!(signature_is_valid(&sig, "content", "abcdef", "0123456789abcdef"));
        assert!(!signature_is_valid(&sig, "contents", "abcdef", "0123456789abcdef"));
        assert!(!signature_is_valid(&sig, "content", "abcdef", "0123456789abcdee"));
    }

    #[test]
    fn signatures_match_cluster_bootstraps_own_vectors() {
        let content = "Hello from the other side. I must have called a thousand times.";
        assert_eq!(
            detached_signature(content, "joshua", "my voice is my passcode"),
            "eyJhbGciOiJIUzI1NiIsImtpZCI6Impvc2h1YSJ9..VShe2taLd-YTrmWuRkcL_8QTNDHYxQIEBsAYYiIj1_8"
        );
        let longer = "my voice is my passcode. my voice is my passcode";
        assert_eq!(
            detached_signature(content, "joshua", longer),
            "eyJhbGciOiJIUzI1NiIsImtpZCI6Impvc2h1YSJ9..SFoKn0-YxqnvpSExt4LuCZ_7pvIBdX3SoUO_NsTpkdg"
        );
        assert_eq!(
            detached_signature("", "joshua", longer),
            "eyJhbGciOiJIUzI1NiIsImtpZCI6Impvc2h1YSJ9..kzZha466Sbz_vFhUBjjYp2rl3F7yHgdDdUIBGxQg4js"
        );
    }

    #[test]
    fn only_signing_tokens_in_force_sign() {
        assert!(stored(&[]).signs(0));
        assert!(!stored(&[(USAGE_SIGNING, "false")]).signs(0));
        assert!(!stored(&[(EXPIRATION, "2020-01-01T00:00:00Z")]).signs(1_800_000_000));
    }
}
