//! The credential verification policy (pullmanager/image_pull_policies.go): which images
//! present on the node must be re-verified against the pod's credentials.

use std::collections::HashSet;

use thiserror::Error;

use super::reference::{normalized_name, parse};

/// `imagePullCredentialsVerificationPolicy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub enum VerificationPolicy {
    /// Never verify.
    NeverVerify,
    /// Verify only images the node itself pulled (the default).
    #[default]
    NeverVerifyPreloadedImages,
    /// Verify everything but allowlisted images.
    NeverVerifyAllowlistedImages,
    /// Verify everything.
    AlwaysVerify,
}

impl std::str::FromStr for VerificationPolicy {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "NeverVerify" => Ok(Self::NeverVerify),
            "NeverVerifyPreloadedImages" => Ok(Self::NeverVerifyPreloadedImages),
            "NeverVerifyAllowlistedImages" => Ok(Self::NeverVerifyAllowlistedImages),
            "AlwaysVerify" => Ok(Self::AlwaysVerify),
            other => Err(format!("unknown image pull credential verification policy: {other}")),
        }
    }
}

/// An allowlist entry that cannot be used (upstream messages).
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum AllowlistError {
    /// Surrounding whitespace.
    #[error("leading/trailing spaces are not allowed: {0}")]
    Spaces(String),
    /// Nothing left.
    #[error("the supplied pattern is too short: {0}")]
    TooShort(String),
    /// `*` other than a final `/*`.
    #[error("not a valid wildcard pattern, only patterns ending with '/*' are allowed: {0}")]
    Wildcard(String),
    /// `/*` alone.
    #[error("at least registry hostname is required")]
    NoHost,
    /// Not an image name.
    #[error("failed to parse as an image name: {0}")]
    Parse(String),
    /// A tag, digest, or a short (not fully qualified) name.
    #[error("neither tag nor digest is accepted in an image reference: {0}")]
    NotNormalized(String),
}

/// `getAllowlistImagePattern`: (pattern, is_wildcard prefix).
pub fn allowlist_pattern(entry: &str) -> Result<(String, bool), AllowlistError> {
    if entry.trim() != entry {
        return Err(AllowlistError::Spaces(entry.into()));
    }
    let (text, wildcard) = match entry.strip_suffix("/*") {
        Some(prefix) => (format!("{prefix}/"), true),
        None => (entry.to_owned(), false),
    };
    if text.is_empty() {
        return Err(AllowlistError::TooShort(entry.into()));
    }
    if text.contains('*') {
        return Err(AllowlistError::Wildcard(entry.into()));
    }
    if wildcard {
        if text == "/" {
            return Err(AllowlistError::NoHost);
        }
        return Ok((text, true));
    }
    let name = parse(&text).map_err(|e| AllowlistError::Parse(e.to_string()))?.name();
    if name != text {
        return Err(AllowlistError::NotNormalized(entry.into()));
    }
    Ok((text, false))
}

/// The policy with its allowlist, ready to answer.
#[derive(Debug, Clone, Default)]
pub struct PolicyEnforcer {
    policy: VerificationPolicy,
    exact: HashSet<String>,
    prefixes: Vec<String>,
}

impl PolicyEnforcer {
    /// Validates the allowlist (every entry's error, in order) and builds the enforcer.
    pub fn new(policy: VerificationPolicy, allowlist: &[String]) -> Result<Self, Vec<AllowlistError>> {
        let mut errors = Vec::new();
        let mut enforcer = Self { policy, ..Default::default() };
        for entry in allowlist {
            match allowlist_pattern(entry) {
                Ok((p, true)) => enforcer.prefixes.push(p),
                Ok((p, false)) => {
                    enforcer.exact.insert(p);
                }
                Err(e) => errors.push(e),
            }
        }
        if errors.is_empty() { Ok(enforcer) } else { Err(errors) }
    }

    /// The configured policy.
    pub fn policy(&self) -> VerificationPolicy {
        self.policy
    }

    fn allowlisted(&self, image: &str) -> bool {
        // A name that does not parse is not allowlisted: verification is required.
        let Ok(name) = normalized_name(image) else { return false };
        self.exact.contains(&name) || self.prefixes.iter().any(|p| name.starts_with(p.as_str()))
    }

    /// `RequireCredentialVerificationForImage`.
    pub fn requires_verification(&self, image: &str, pulled_by_node: bool) -> bool {
        match self.policy {
            VerificationPolicy::NeverVerify => false,
            VerificationPolicy::NeverVerifyPreloadedImages => pulled_by_node,
            VerificationPolicy::AlwaysVerify => true,
            VerificationPolicy::NeverVerifyAllowlistedImages => !self.allowlisted(image),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allowlist_entries_as_upstream_validates_them() {
        assert_eq!(allowlist_pattern("test.io/*"), Ok(("test.io/".into(), true)));
        assert_eq!(allowlist_pattern("docker.io/library/alpine"), Ok(("docker.io/library/alpine".into(), false)));
        let err = |e: &str| allowlist_pattern(e).unwrap_err().to_string();
        assert_eq!(err(" a.io/x"), "leading/trailing spaces are not allowed:  a.io/x");
        assert_eq!(err("/*"), "at least registry hostname is required");
        assert_eq!(
            err("image.repo/pokus*"),
            "not a valid wildcard pattern, only patterns ending with '/*' are allowed: image.repo/pokus*"
        );
        assert_eq!(
            err("image.repo/*/x"),
            "not a valid wildcard pattern, only patterns ending with '/*' are allowed: image.repo/*/x"
        );
        assert_eq!(err("alpine"), "neither tag nor digest is accepted in an image reference: alpine");
        assert_eq!(err("a.io/x:1"), "neither tag nor digest is accepted in an image reference: a.io/x:1");
        assert!(err("image.repo/").starts_with("failed to parse as an image name:"));
        assert_eq!(err(""), "the supplied pattern is too short: ");
        assert_eq!(
            "Sometimes".parse::<VerificationPolicy>().unwrap_err(),
            "unknown image pull credential verification policy: Sometimes"
        );
    }

    #[test]
    fn policies() {
        let allow = PolicyEnforcer::new(
            VerificationPolicy::NeverVerifyAllowlistedImages,
            &["docker.io/library/nginx".into(), "registry.example/base/*".into()],
        )
        .unwrap();
        assert!(!allow.requires_verification("nginx:1", true), "allowlisted even when the node pulled it");
        assert!(!allow.requires_verification("registry.example/base/os:1", true));
        assert!(allow.requires_verification("registry.example/team/app", false), "not allowlisted, even preloaded");
        assert!(allow.requires_verification("Bad Name", false));
        let default = PolicyEnforcer::new(VerificationPolicy::default(), &[]).unwrap();
        assert!(default.requires_verification("x", true) && !default.requires_verification("x", false));
        assert!(!PolicyEnforcer::new(VerificationPolicy::NeverVerify, &[]).unwrap().requires_verification("x", true));
        assert!(PolicyEnforcer::new(VerificationPolicy::AlwaysVerify, &[]).unwrap().requires_verification("x", false));
        let errors =
            PolicyEnforcer::new(VerificationPolicy::AlwaysVerify, &["/*".into(), "alpine".into()]).unwrap_err();
        assert_eq!(errors.len(), 2);
    }
}
