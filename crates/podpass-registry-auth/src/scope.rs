//! Scopes of the Docker registry token protocol: `type:name:action[,action…]`
//! (distribution `auth/token` "Requesting a Token"; `repository:team-a/app:pull,push`), and
//! the `access` claim entries a granted scope becomes.

use serde::Serialize;
use thiserror::Error;

/// Scope strings longer than this are refused.
pub const MAX_SCOPE_BYTES: usize = 512;
/// Scopes per request; more are refused.
pub const MAX_SCOPES: usize = 32;
/// distribution's `NameTotalLengthMax`.
const MAX_NAME_BYTES: usize = 255;

/// A scope is malformed.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum ScopeError {
    /// Not `type:name:actions`.
    #[error("scope {0:?} is not type:name:actions")]
    Shape(String),
    /// The resource type is not lower-case letters (with an optional `(class)`).
    #[error("scope {0:?}: invalid resource type")]
    Type(String),
    /// A repository name breaks distribution's grammar, or a name is empty or too long.
    #[error("scope {0:?}: invalid resource name")]
    Name(String),
    /// An action is empty or not lower-case letters or `*`.
    #[error("scope {0:?}: invalid action")]
    Action(String),
    /// Longer than [`MAX_SCOPE_BYTES`].
    #[error("scope longer than {MAX_SCOPE_BYTES} bytes")]
    TooLong,
    /// More than [`MAX_SCOPES`] in one request.
    #[error("more than {MAX_SCOPES} scopes in one request")]
    TooMany,
}

/// One requested or granted scope; also the wire shape of an `access` claim entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Scope {
    /// `repository`, `registry`, …
    #[serde(rename = "type")]
    pub resource_type: String,
    /// The repository (`team-a/app`) or other resource (`catalog`).
    pub name: String,
    /// `pull`, `push`, `delete`, `*`, …, in request order without duplicates.
    pub actions: Vec<String>,
}

impl std::fmt::Display for Scope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}:{}", self.resource_type, self.name, self.actions.join(","))
    }
}

impl Scope {
    /// Parses one scope. The name may hold `:` (a registry host with a port), so the type
    /// ends at the first colon and the actions start after the last.
    pub fn parse(text: &str) -> Result<Self, ScopeError> {
        if text.len() > MAX_SCOPE_BYTES {
            return Err(ScopeError::TooLong);
        }
        let shape = || ScopeError::Shape(text.to_owned());
        let (resource_type, rest) = text.split_once(':').ok_or_else(shape)?;
        let (name, actions) = rest.rsplit_once(':').ok_or_else(shape)?;
        if !valid_type(resource_type) {
            return Err(ScopeError::Type(text.to_owned()));
        }
        let name_ok = if resource_type == "repository" { valid_repository(name) } else { valid_other_name(name) };
        if !name_ok {
            return Err(ScopeError::Name(text.to_owned()));
        }
        let mut list: Vec<String> = Vec::new();
        for action in actions.split(',') {
            if action.is_empty() || !(action == "*" || action.bytes().all(|b| b.is_ascii_lowercase())) {
                return Err(ScopeError::Action(text.to_owned()));
            }
            if !list.iter().any(|a| a == action) {
                list.push(action.to_owned());
            }
        }
        Ok(Self { resource_type: resource_type.to_owned(), name: name.to_owned(), actions: list })
    }

    /// Parses every scope in `values` (each may hold several, space-separated, as the OAuth2
    /// POST form sends them), merging the actions of repeated resources.
    pub fn parse_all<'a>(values: impl IntoIterator<Item = &'a str>) -> Result<Vec<Self>, ScopeError> {
        let mut scopes: Vec<Self> = Vec::new();
        for text in values.into_iter().flat_map(|v| v.split(' ')).filter(|s| !s.is_empty()) {
            let scope = Self::parse(text)?;
            match scopes.iter_mut().find(|s| s.resource_type == scope.resource_type && s.name == scope.name) {
                Some(existing) => {
                    for a in scope.actions {
                        if !existing.actions.contains(&a) {
                            existing.actions.push(a);
                        }
                    }
                }
                None => {
                    if scopes.len() == MAX_SCOPES {
                        return Err(ScopeError::TooMany);
                    }
                    scopes.push(scope);
                }
            }
        }
        Ok(scopes)
    }
}

/// `[a-z0-9]+` optionally followed by `(class)` of the same characters.
fn valid_type(t: &str) -> bool {
    let word = |w: &str| !w.is_empty() && w.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
    match t.split_once('(') {
        None => word(t),
        Some((base, class)) => word(base) && class.strip_suffix(')').is_some_and(word),
    }
}

/// distribution's repository grammar: components of `[a-z0-9]+` joined by `.`, `_`, `__`
/// or runs of `-`, separated by `/`; the first component may be a registry host
/// (`localhost:5000`, `registry.example`), at most 255 bytes in all.
fn valid_repository(name: &str) -> bool {
    if name.is_empty() || name.len() > MAX_NAME_BYTES {
        return false;
    }
    let mut components = name.split('/').enumerate().peekable();
    while let Some((i, component)) = components.next() {
        let host = i == 0 && components.peek().is_some() && looks_like_host(component);
        let ok = if host { valid_host(component) } else { valid_path_component(component) };
        if !ok {
            return false;
        }
    }
    true
}

fn looks_like_host(c: &str) -> bool {
    c.contains('.') || c.contains(':') || c == "localhost" || c.bytes().any(|b| b.is_ascii_uppercase())
}

fn valid_host(c: &str) -> bool {
    let (host, port) = match c.rsplit_once(':') {
        Some((h, p)) => (h, Some(p)),
        None => (c, None),
    };
    port.is_none_or(|p| !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit()))
        && !host.is_empty()
        && host.split('.').all(|label| {
            !label.is_empty()
                && label.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

fn valid_path_component(c: &str) -> bool {
    let bytes = c.as_bytes();
    let alnum = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    if bytes.is_empty() || !alnum(bytes[0]) || !alnum(bytes[bytes.len() - 1]) {
        return false;
    }
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if alnum(b) {
            i += 1;
            continue;
        }
        // a separator: ".", "_", "__" or a run of "-", always between alphanumerics
        let start = i;
        match b {
            b'.' => i += 1,
            b'_' => i += if bytes.get(i + 1) == Some(&b'_') { 2 } else { 1 },
            b'-' => {
                while bytes.get(i) == Some(&b'-') {
                    i += 1;
                }
            }
            _ => return false,
        }
        if i == start || !bytes.get(i).copied().is_some_and(alnum) {
            return false;
        }
    }
    true
}

/// Names of other resource types (`catalog`): printable ASCII without spaces or colons
/// issues, bounded.
fn valid_other_name(name: &str) -> bool {
    !name.is_empty() && name.len() <= MAX_NAME_BYTES && name.bytes().all(|b| b.is_ascii_graphic())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn parses_the_forms_clients_send() {
        let s = Scope::parse("repository:team-a/app:pull,push").unwrap();
        assert_eq!((s.resource_type.as_str(), s.name.as_str()), ("repository", "team-a/app"));
        assert_eq!(s.actions, ["pull", "push"]);
        assert_eq!(s.to_string(), "repository:team-a/app:pull,push");
        let s = Scope::parse("repository:localhost:5000/team-a/app:pull").unwrap();
        assert_eq!(s.name, "localhost:5000/team-a/app");
        assert_eq!(Scope::parse("registry:catalog:*").unwrap().actions, ["*"]);
        assert_eq!(Scope::parse("repository(plugin):a/b:pull").unwrap().resource_type, "repository(plugin)");
        assert_eq!(Scope::parse("repository:a__b/c--d.e_f:pull,pull").unwrap().actions, ["pull"]);
    }

    #[test]
    fn refuses_what_breaks_the_grammar() {
        for bad in [
            "repository",
            "repository:app",
            "Repository:a:pull",
            "repository:team/App:pull",
            "repository:a//b:pull",
            "repository:-a:pull",
            "repository:a-:pull",
            "repository:a..b:pull",
            "repository:a___b:pull",
            "repository:../etc:pull",
            "repository::pull",
            "repository:a:",
            "repository:a:pull,",
            "repository:a:PULL",
            "repository:a b:pull",
            "repository(:a:pull",
        ] {
            assert!(Scope::parse(bad).is_err(), "{bad:?} accepted");
        }
        assert_eq!(Scope::parse(&"a".repeat(600)), Err(ScopeError::TooLong));
        let long = format!("repository:{}:pull", "a".repeat(256));
        assert!(matches!(Scope::parse(&long), Err(ScopeError::Name(_))));
    }

    #[test]
    fn parse_all_splits_on_spaces_and_merges_repeats() {
        let all = Scope::parse_all(["repository:a:pull repository:b:pull", "repository:a:push", ""]).unwrap();
        assert_eq!(all.len(), 2);
        assert_eq!(all[0].actions, ["pull", "push"]);
        let many: Vec<String> = (0..=MAX_SCOPES).map(|i| format!("repository:r{i}:pull")).collect();
        assert_eq!(Scope::parse_all(many.iter().map(String::as_str)), Err(ScopeError::TooMany));
    }
}
