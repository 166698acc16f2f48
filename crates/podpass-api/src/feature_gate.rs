//! `--feature-gates` as Kubernetes components parse it
//! (k8s.io/component-base/featuregate `featureGate.Set`).
//!
//! The value is `Name=bool[,Name=bool…]`; empty items are skipped, names and values are
//! trimmed, booleans follow Go's `strconv.ParseBool`, unknown names are refused. Later
//! settings of the same gate win.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use thiserror::Error;

/// A feature gate podpass knows, with the upstream default of the Kubernetes release
/// whose behaviour podpass matches (the 1.34 era).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Feature {
    /// Every service-account token carries a `jti`; credential ids in user info and audit.
    ServiceAccountTokenJTI,
    /// Pod-bound tokens carry the pod's node name and uid.
    ServiceAccountTokenPodNodeInfo,
    /// TokenRequests may bind a token to a Node alone.
    ServiceAccountTokenNodeBinding,
    /// Node-bound tokens are validated against the Node object.
    ServiceAccountTokenNodeBindingValidation,
    /// A TokenRequest whose `metadata.uid` differs from the service account's is refused (409).
    TokenRequestServiceAccountUIDValidation,
    /// Nodes may only request tokens for audiences the pod or RBAC allows.
    ServiceAccountNodeAudienceRestriction,
    /// Credential provider plugins may receive service-account tokens.
    KubeletServiceAccountTokenForCredentialProviders,
    /// The kubelet verifies pull credentials of images already on the node.
    KubeletEnsureSecretPulledImages,
}

impl Feature {
    /// Every known gate.
    pub const ALL: [Feature; 8] = [
        Self::ServiceAccountTokenJTI,
        Self::ServiceAccountTokenPodNodeInfo,
        Self::ServiceAccountTokenNodeBinding,
        Self::ServiceAccountTokenNodeBindingValidation,
        Self::TokenRequestServiceAccountUIDValidation,
        Self::ServiceAccountNodeAudienceRestriction,
        Self::KubeletServiceAccountTokenForCredentialProviders,
        Self::KubeletEnsureSecretPulledImages,
    ];

    /// The gate's name as written in `--feature-gates`.
    pub fn name(self) -> &'static str {
        match self {
            Self::ServiceAccountTokenJTI => "ServiceAccountTokenJTI",
            Self::ServiceAccountTokenPodNodeInfo => "ServiceAccountTokenPodNodeInfo",
            Self::ServiceAccountTokenNodeBinding => "ServiceAccountTokenNodeBinding",
            Self::ServiceAccountTokenNodeBindingValidation => "ServiceAccountTokenNodeBindingValidation",
            Self::TokenRequestServiceAccountUIDValidation => "TokenRequestServiceAccountUIDValidation",
            Self::ServiceAccountNodeAudienceRestriction => "ServiceAccountNodeAudienceRestriction",
            Self::KubeletServiceAccountTokenForCredentialProviders => {
                "KubeletServiceAccountTokenForCredentialProviders"
            }
            Self::KubeletEnsureSecretPulledImages => "KubeletEnsureSecretPulledImages",
        }
    }

    /// The upstream default (v1.35: every gate here is beta or GA and on;
    /// KubeletEnsureSecretPulledImages became beta, on by default, with the v1beta1 records
    /// this implementation writes).
    pub fn default_enabled(self) -> bool {
        true
    }
}

impl fmt::Display for Feature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A `--feature-gates` value could not be applied (upstream messages).
#[derive(Debug, Error, PartialEq, Eq)]
pub enum FeatureGateError {
    /// `Name` without `=value`.
    #[error("missing bool value for {0}")]
    MissingValue(String),
    /// The value is not a Go boolean.
    #[error("invalid value of {name}={value}, err: strconv.ParseBool: parsing {value:?}: invalid syntax")]
    InvalidValue {
        /// Gate name.
        name: String,
        /// Offending value.
        value: String,
    },
    /// The gate is not known.
    #[error("unrecognized feature gate: {0}")]
    Unrecognized(String),
}

/// The state of every known gate: upstream defaults plus explicit settings.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FeatureGates {
    explicit: BTreeMap<Feature, bool>,
}

impl FeatureGates {
    /// Whether `feature` is on.
    pub fn enabled(&self, feature: Feature) -> bool {
        self.explicit.get(&feature).copied().unwrap_or_else(|| feature.default_enabled())
    }

    /// Sets one gate.
    pub fn set(&mut self, feature: Feature, enabled: bool) {
        self.explicit.insert(feature, enabled);
    }

    /// Applies a `--feature-gates` value on top of the current state; nothing is applied
    /// when any item is refused.
    pub fn apply(&mut self, value: &str) -> Result<(), FeatureGateError> {
        let mut staged = Vec::new();
        for item in value.split(',').filter(|s| !s.is_empty()) {
            let (name, raw) = match item.split_once('=') {
                Some((n, v)) => (n.trim(), v.trim()),
                None => return Err(FeatureGateError::MissingValue(item.trim().to_owned())),
            };
            let enabled = parse_go_bool(raw)
                .ok_or_else(|| FeatureGateError::InvalidValue { name: name.to_owned(), value: raw.to_owned() })?;
            let feature = Feature::ALL
                .into_iter()
                .find(|f| f.name() == name)
                .ok_or_else(|| FeatureGateError::Unrecognized(name.to_owned()))?;
            staged.push((feature, enabled));
        }
        self.explicit.extend(staged);
        Ok(())
    }
}

impl FromStr for FeatureGates {
    type Err = FeatureGateError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut gates = Self::default();
        gates.apply(s)?;
        Ok(gates)
    }
}

/// Go's `strconv.ParseBool`.
fn parse_go_bool(s: &str) -> Option<bool> {
    match s {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_match_upstream() {
        let g = FeatureGates::default();
        assert!(g.enabled(Feature::ServiceAccountTokenJTI));
        assert!(g.enabled(Feature::ServiceAccountNodeAudienceRestriction));
        assert!(g.enabled(Feature::KubeletEnsureSecretPulledImages));
    }

    #[test]
    fn parses_like_component_base() {
        let g: FeatureGates =
            " ServiceAccountTokenJTI = false ,,KubeletEnsureSecretPulledImages=F,ServiceAccountTokenJTI=0"
                .parse()
                .unwrap();
        assert!(!g.enabled(Feature::ServiceAccountTokenJTI));
        assert!(!g.enabled(Feature::KubeletEnsureSecretPulledImages));
        assert_eq!("".parse::<FeatureGates>().unwrap(), FeatureGates::default());
    }

    #[test]
    fn refuses_with_upstream_messages_and_applies_nothing() {
        assert_eq!(
            "ServiceAccountTokenJTI".parse::<FeatureGates>().unwrap_err().to_string(),
            "missing bool value for ServiceAccountTokenJTI"
        );
        assert_eq!(
            "ServiceAccountTokenJTI=yes".parse::<FeatureGates>().unwrap_err().to_string(),
            r#"invalid value of ServiceAccountTokenJTI=yes, err: strconv.ParseBool: parsing "yes": invalid syntax"#
        );
        assert_eq!("Bogus=true".parse::<FeatureGates>().unwrap_err().to_string(), "unrecognized feature gate: Bogus");
        let mut g = FeatureGates::default();
        assert!(g.apply("ServiceAccountTokenJTI=false,Bogus=true").is_err());
        assert!(g.enabled(Feature::ServiceAccountTokenJTI), "a refused value changes nothing");
    }
}
