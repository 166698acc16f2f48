//! Levels, versions and a namespace's policy as Pod Security admission reads them
//! (upstream: `pod-security-admission/api`): the `pod-security.kubernetes.io/<mode>` labels
//! and their `-version`, over the configured defaults.

use std::collections::BTreeMap;
use std::fmt;

/// A Pod Security Standards level.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Level {
    /// Unrestricted.
    Privileged,
    /// Prevents known privilege escalations.
    Baseline,
    /// Hardening best practice.
    Restricted,
}

impl Level {
    /// The label value.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Level::Privileged => "privileged",
            Level::Baseline => "baseline",
            Level::Restricted => "restricted",
        }
    }

    /// `api.ParseLevel`.
    pub(crate) fn parse(s: &str) -> Result<Level, PolicyValueError> {
        match s {
            "privileged" => Ok(Level::Privileged),
            "baseline" => Ok(Level::Baseline),
            "restricted" => Ok(Level::Restricted),
            _ => Err(PolicyValueError::Level),
        }
    }
}

/// A policy level or version that does not parse (upstream's words).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum PolicyValueError {
    /// Not a level.
    #[error("must be one of privileged, baseline, restricted")]
    Level,
    /// Not a version.
    #[error("must be 'latest' or 'v1.x'")]
    Version,
}

/// The newest policy version podpass's checks know (its Kubernetes minor): `latest` and
/// anything newer evaluate as this.
pub(crate) const MAX_MINOR: u32 = 34;

/// A policy version: `latest` or `v1.<minor>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Version {
    /// `latest`.
    Latest,
    /// `v1.<minor>`.
    Minor(u32),
}

impl Version {
    /// `api.ParseVersion`: `latest` or `v1.<minor>` (no leading zeros).
    pub(crate) fn parse(s: &str) -> Result<Version, PolicyValueError> {
        if s == "latest" {
            return Ok(Version::Latest);
        }
        let bad = || PolicyValueError::Version;
        let minor = s.strip_prefix("v1.").ok_or_else(bad)?;
        if minor.is_empty() || !minor.bytes().all(|b| b.is_ascii_digit()) || (minor.len() > 1 && minor.starts_with('0'))
        {
            return Err(bad());
        }
        minor.parse().map(Version::Minor).map_err(|_| bad())
    }

    /// The minor the checks evaluate at.
    pub(crate) fn minor(self) -> u32 {
        match self {
            Version::Latest => MAX_MINOR,
            Version::Minor(m) => m.min(MAX_MINOR),
        }
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Version::Latest => f.write_str("latest"),
            Version::Minor(m) => write!(f, "v1.{m}"),
        }
    }
}

/// A level at a version (`baseline:latest`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LevelVersion {
    /// The level.
    pub level: Level,
    /// The version.
    pub version: Version,
}

impl fmt::Display for LevelVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.level.as_str(), self.version)
    }
}

/// The three modes of a namespace's policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Policy {
    /// Refused when violated.
    pub enforce: LevelVersion,
    /// Recorded in the audit event when violated.
    pub audit: LevelVersion,
    /// Answered as a warning when violated.
    pub warn: LevelVersion,
}

/// Upstream's own default: everything privileged at `latest`.
pub(crate) const PRIVILEGED_LATEST: LevelVersion = LevelVersion { level: Level::Privileged, version: Version::Latest };

impl Default for Policy {
    fn default() -> Self {
        Policy { enforce: PRIVILEGED_LATEST, audit: PRIVILEGED_LATEST, warn: PRIVILEGED_LATEST }
    }
}

/// The label prefix.
pub(crate) const LABEL_PREFIX: &str = "pod-security.kubernetes.io/";
/// The three modes, in the order upstream reports them.
pub(crate) const MODES: [&str; 3] = ["enforce", "audit", "warn"];

/// One problem with a namespace's labels: the label and why (`field.Invalid`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LabelError {
    /// The label key.
    pub key: String,
    /// Its value.
    pub value: String,
    /// Why it is invalid.
    pub reason: PolicyValueError,
}

impl fmt::Display for LabelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "metadata.labels[{}]: Invalid value: {:?}: {}", self.key, self.value, self.reason)
    }
}

/// `api.PolicyToEvaluate`: the namespace's labels over `defaults`. An invalid level is the
/// most restrictive (`restricted`) and an invalid version `latest`, as upstream, with the
/// problems returned beside.
pub(crate) fn policy_to_evaluate(labels: &BTreeMap<String, String>, defaults: &Policy) -> (Policy, Vec<LabelError>) {
    let mut policy = *defaults;
    let mut errors = Vec::new();
    for mode in MODES {
        let target = match mode {
            "enforce" => &mut policy.enforce,
            "audit" => &mut policy.audit,
            _ => &mut policy.warn,
        };
        let level_key = format!("{LABEL_PREFIX}{mode}");
        if let Some(value) = labels.get(&level_key) {
            match Level::parse(value) {
                Ok(level) => target.level = level,
                Err(reason) => {
                    target.level = Level::Restricted;
                    errors.push(LabelError { key: level_key, value: value.clone(), reason });
                }
            }
        }
        let version_key = format!("{LABEL_PREFIX}{mode}-version");
        if let Some(value) = labels.get(&version_key) {
            match Version::parse(value) {
                Ok(version) => target.version = version,
                Err(reason) => {
                    target.version = Version::Latest;
                    errors.push(LabelError { key: version_key, value: value.clone(), reason });
                }
            }
        }
    }
    (policy, errors)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_and_levels_parse_as_upstreams() {
        assert_eq!(Version::parse("latest"), Ok(Version::Latest));
        assert_eq!(Version::parse("v1.25"), Ok(Version::Minor(25)));
        assert_eq!(Version::parse("v1.0"), Ok(Version::Minor(0)));
        for bad in ["v1.025", "1.25", "v2.0", "v1.", "v1.x", ""] {
            assert!(Version::parse(bad).is_err(), "{bad}");
        }
        assert_eq!(Version::Minor(99).minor(), MAX_MINOR, "newer than known evaluates as latest");
        assert_eq!(
            Level::parse("Baseline").unwrap_err().to_string(),
            "must be one of privileged, baseline, restricted"
        );
    }

    #[test]
    fn labels_override_defaults_and_invalid_ones_are_the_most_restrictive() {
        let labels: BTreeMap<String, String> = [
            ("pod-security.kubernetes.io/enforce", "baseline"),
            ("pod-security.kubernetes.io/enforce-version", "v1.24"),
            ("pod-security.kubernetes.io/warn", "strict"),
            ("pod-security.kubernetes.io/audit-version", "v1"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        let (p, errors) = policy_to_evaluate(&labels, &Policy::default());
        assert_eq!(p.enforce.to_string(), "baseline:v1.24");
        assert_eq!(p.warn.to_string(), "restricted:latest");
        assert_eq!(p.audit.to_string(), "privileged:latest");
        assert_eq!(errors.len(), 2);
        assert_eq!(
            errors[0].to_string(),
            "metadata.labels[pod-security.kubernetes.io/audit-version]: Invalid value: \"v1\": must be 'latest' or 'v1.x'"
        );
    }
}
