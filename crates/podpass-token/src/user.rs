//! Service-account user names and the user info a token authenticates as
//! (staging/src/k8s.io/apiserver/pkg/authentication/serviceaccount/util.go).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// Prefix of every service-account user name.
pub const SERVICE_ACCOUNT_USERNAME_PREFIX: &str = "system:serviceaccount:";
/// Group every service account belongs to.
pub const ALL_SERVICE_ACCOUNTS_GROUP: &str = "system:serviceaccounts";
/// Extra key: name of the pod the token is bound to.
pub const POD_NAME_KEY: &str = "authentication.kubernetes.io/pod-name";
/// Extra key: UID of the pod the token is bound to.
pub const POD_UID_KEY: &str = "authentication.kubernetes.io/pod-uid";
/// Extra key: name of the node.
pub const NODE_NAME_KEY: &str = "authentication.kubernetes.io/node-name";
/// Extra key: UID of the node.
pub const NODE_UID_KEY: &str = "authentication.kubernetes.io/node-uid";
/// Extra key: credential id (`JTI=<jti>`).
pub const CREDENTIAL_ID_KEY: &str = "authentication.kubernetes.io/credential-id";

/// `system:serviceaccount:<namespace>:<name>` (upstream MakeUsername).
pub fn make_username(namespace: &str, name: &str) -> String {
    format!("{SERVICE_ACCOUNT_USERNAME_PREFIX}{namespace}:{name}")
}

/// A user name is not a valid service-account user name.
#[derive(Debug, Error, PartialEq, Eq)]
#[error("Username must be in the form system:serviceaccount:namespace:name")]
pub struct UsernameError;

/// Splits a service-account user name into (namespace, name) (upstream SplitUsername):
/// the namespace must be a DNS label and the name a DNS subdomain.
pub fn split_username(username: &str) -> Result<(&str, &str), UsernameError> {
    let rest = username.strip_prefix(SERVICE_ACCOUNT_USERNAME_PREFIX).ok_or(UsernameError)?;
    let mut parts = rest.split(':');
    let (Some(ns), Some(name), None) = (parts.next(), parts.next(), parts.next()) else {
        return Err(UsernameError);
    };
    if !is_dns1123_label(ns) || !is_dns1123_subdomain(name) {
        return Err(UsernameError);
    }
    Ok((ns, name))
}

/// RFC 1123 label: 1–63 of `[a-z0-9-]`, alphanumeric at both ends.
pub fn is_dns1123_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b.iter().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

/// RFC 1123 subdomain: at most 253 characters of dot-separated labels.
pub fn is_dns1123_subdomain(s: &str) -> bool {
    // IsDNS1123Subdomain: 253 bytes in all; its parts follow the label pattern, with no
    // label length limit of their own.
    let part = |p: &str| {
        let b = p.as_bytes();
        let ok = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
        match b {
            [] => false,
            [one] => ok(one),
            [first, middle @ .., last] => ok(first) && ok(last) && middle.iter().all(|c| ok(c) || *c == b'-'),
        }
    };
    s.len() <= 253 && s.split('.').all(part)
}

/// authentication.k8s.io/v1 `UserInfo`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct UserInfo {
    /// User name.
    pub username: String,
    /// UID (the service account's).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub uid: String,
    /// Groups.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<String>,
    /// Extra attributes; absent when there are none.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub extra: BTreeMap<String, Vec<String>>,
}

/// What a validated service-account token says about its holder
/// (upstream `ServiceAccountInfo`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ServiceAccountInfo {
    /// Namespace.
    pub namespace: String,
    /// Service account name.
    pub name: String,
    /// Service account UID.
    pub uid: String,
    /// Bound pod name.
    pub pod_name: String,
    /// Bound pod UID.
    pub pod_uid: String,
    /// Node name (of the bound pod, or of a node-bound token).
    pub node_name: String,
    /// Node UID.
    pub node_uid: String,
    /// `JTI=<jti>` or empty.
    pub credential_id: String,
}

impl ServiceAccountInfo {
    /// The user info, with extra keys exactly as upstream sets them.
    pub fn user_info(&self) -> UserInfo {
        let mut extra = BTreeMap::new();
        if !self.pod_name.is_empty() && !self.pod_uid.is_empty() {
            extra.insert(POD_NAME_KEY.to_owned(), vec![self.pod_name.clone()]);
            extra.insert(POD_UID_KEY.to_owned(), vec![self.pod_uid.clone()]);
        }
        if !self.credential_id.is_empty() {
            extra.insert(CREDENTIAL_ID_KEY.to_owned(), vec![self.credential_id.clone()]);
        }
        if !self.node_name.is_empty() {
            extra.insert(NODE_NAME_KEY.to_owned(), vec![self.node_name.clone()]);
            if !self.node_uid.is_empty() {
                extra.insert(NODE_UID_KEY.to_owned(), vec![self.node_uid.clone()]);
            }
        }
        UserInfo {
            username: make_username(&self.namespace, &self.name),
            uid: self.uid.clone(),
            groups: vec![
                ALL_SERVICE_ACCOUNTS_GROUP.to_owned(),
                format!("{ALL_SERVICE_ACCOUNTS_GROUP}:{}", self.namespace),
            ],
            extra,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subdomains_are_253_bytes_with_no_label_limit_as_upstream() {
        assert!(is_dns1123_subdomain(&"a".repeat(100)), "a 100-character name without dots");
        assert!(is_dns1123_subdomain(&format!("{}.{}", "a".repeat(200), "b".repeat(52))));
        assert!(!is_dns1123_subdomain(&"a".repeat(254)));
        assert!(!is_dns1123_subdomain("a..b") && !is_dns1123_subdomain("-a") && !is_dns1123_subdomain("A"));
    }

    #[test]
    fn split_username_validates_both_parts() {
        assert_eq!(split_username("system:serviceaccount:ns:sa.name"), Ok(("ns", "sa.name")));
        for bad in [
            "system:serviceaccount:ns",
            "system:serviceaccount:ns:a:b",
            "system:serviceaccount:Ns:a",
            "system:serviceaccount:ns.x:a",
            "system:serviceaccount::a",
            "system:node:n1",
        ] {
            assert_eq!(split_username(bad), Err(UsernameError), "{bad}");
        }
    }

    #[test]
    fn extra_keys_follow_upstream_rules() {
        let mut info = ServiceAccountInfo {
            namespace: "ns".into(),
            name: "sa".into(),
            uid: "u".into(),
            pod_name: "p".into(),
            ..Default::default()
        };
        // pod name without uid: no pod keys; nothing else set: no extra at all
        let user = info.user_info();
        assert!(user.extra.is_empty());
        assert_eq!(
            serde_json::to_string(&user).unwrap(),
            r#"{"username":"system:serviceaccount:ns:sa","uid":"u","groups":["system:serviceaccounts","system:serviceaccounts:ns"]}"#
        );
        info.pod_uid = "pu".into();
        info.node_name = "n1".into();
        info.credential_id = "JTI=x".into();
        let user = info.user_info();
        assert_eq!(user.extra.len(), 4);
        assert!(!user.extra.contains_key(NODE_UID_KEY));
        info.node_uid = "nu".into();
        assert_eq!(info.user_info().extra[NODE_UID_KEY], ["nu"]);
    }
}
