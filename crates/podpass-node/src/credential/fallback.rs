//! What a provider does when a pod's service account has not opted in to it (beyond
//! upstream): the pod has no service account and the provider requires one
//! (`requireServiceAccount`), or its service account lacks a
//! `requiredServiceAccountAnnotationKeys` annotation. The kubelet skips the provider then,
//! and the pull goes on with whatever else the keyring holds — the node-wide `config.json`
//! included, so such a pod may pull on the node's identity without anyone having chosen it.
//! Each peer picked one answer silently; here it is chosen per provider with
//! `--credential-provider-fallback NAME=MODE`, and `podpass node explain` says which applies.

use std::collections::BTreeMap;

/// One provider's fallback.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Fallback {
    /// The kubelet's: the provider is skipped, the rest of the keyring is tried (pull
    /// secrets, other providers, the node-wide credentials).
    #[default]
    Skip,
    /// The plugin runs as for a node-level pull: no token, no annotations, its answer
    /// counted node-wide (the node's identity).
    Node,
    /// Nothing of the node's: the provider yields nothing and the node-wide credentials are
    /// not used for the image either; the pod pulls with its own pull secrets or anonymously.
    Anonymous,
    /// The pull is refused (`ErrImagePull`), naming the provider and what the service account
    /// lacks.
    Fail,
}

impl Fallback {
    /// As the flag spells it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Skip => "skip",
            Self::Node => "node",
            Self::Anonymous => "anonymous",
            Self::Fail => "fail",
        }
    }
}

/// A fallback mode that is none of skip, node, anonymous and fail.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not one of skip, node, anonymous, fail")]
pub struct UnknownFallback(pub String);

impl std::str::FromStr for Fallback {
    type Err = UnknownFallback;
    fn from_str(s: &str) -> Result<Self, UnknownFallback> {
        match s {
            "skip" => Ok(Self::Skip),
            "node" => Ok(Self::Node),
            "anonymous" => Ok(Self::Anonymous),
            "fail" => Ok(Self::Fail),
            other => Err(UnknownFallback(other.to_owned())),
        }
    }
}

/// `--credential-provider-fallback` values by provider name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Fallbacks(BTreeMap<String, Fallback>);

impl Fallbacks {
    /// Parses `NAME=MODE` entries; every bad one is reported.
    pub fn parse(entries: &[String]) -> Result<Self, Vec<String>> {
        let mut map = BTreeMap::new();
        let mut errors = Vec::new();
        for entry in entries {
            match entry.split_once('=') {
                Some((name, mode)) if !name.is_empty() => match mode.parse::<Fallback>() {
                    Ok(m) => {
                        if map.insert(name.to_owned(), m).is_some() {
                            errors.push(format!("{entry:?}: provider {name:?} is given twice"));
                        }
                    }
                    Err(e) => errors.push(format!("{entry:?}: {e}")),
                },
                _ => errors.push(format!("{entry:?}: must be NAME=skip|node|anonymous|fail")),
            }
        }
        if errors.is_empty() { Ok(Self(map)) } else { Err(errors) }
    }

    /// The fallback of provider `name` (the kubelet's skip when not given).
    pub fn of(&self, name: &str) -> Fallback {
        self.0.get(name).copied().unwrap_or_default()
    }

    /// Names given that are not among `providers`.
    pub fn unknown<'a>(&'a self, providers: &'a [&str]) -> impl Iterator<Item = &'a str> + 'a {
        self.0.keys().map(String::as_str).filter(|n| !providers.contains(n))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_parse_and_every_bad_one_is_named() {
        let f = Fallbacks::parse(&["ecr=fail".into(), "gcr=anonymous".into()]).unwrap_or_default();
        assert_eq!((f.of("ecr"), f.of("gcr"), f.of("other")), (Fallback::Fail, Fallback::Anonymous, Fallback::Skip));
        assert_eq!(f.unknown(&["ecr"]).collect::<Vec<_>>(), ["gcr"]);
        let errors =
            Fallbacks::parse(&["ecr".into(), "a=maybe".into(), "b=node".into(), "b=fail".into(), "=fail".into()])
                .unwrap_err();
        assert_eq!(errors.len(), 4, "{errors:?}");
        assert!(errors[1].contains("not one of skip, node, anonymous, fail"));
    }
}
