//! Image references as the kubelet normalises them (distribution `ParseNormalizedNamed`,
//! `parsers.ParseImageName`): `nginx:1` is `docker.io/library/nginx` with tag `1`.

use thiserror::Error;

/// A reference that does not parse (distribution's messages).
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum ReferenceError {
    /// Empty or malformed.
    #[error("invalid reference format")]
    Format,
    /// Upper case in the repository path.
    #[error("invalid reference format: repository name ({0}) must be lowercase")]
    Uppercase(String),
    /// A 64-hex name that is an image ID.
    #[error("invalid repository name ({0}), cannot specify 64-byte hexadecimal strings")]
    HexName(String),
}

/// A parsed, normalised reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageReference {
    /// Registry host (and port), `docker.io` for Docker Hub.
    pub domain: String,
    /// Repository path (`library/nginx`).
    pub path: String,
    /// Tag, if given.
    pub tag: Option<String>,
    /// Digest (`sha256:…`), if given.
    pub digest: Option<String>,
}

impl ImageReference {
    /// `domain/path`: the normalised name without tag or digest.
    pub fn name(&self) -> String {
        format!("{}/{}", self.domain, self.path)
    }
}

fn is_path_component(c: &str) -> bool {
    // [a-z0-9]+ ((\.|_|__|-+)[a-z0-9]+)*
    let b = c.as_bytes();
    if b.is_empty() || !b[0].is_ascii_alphanumeric() || !b[b.len() - 1].is_ascii_alphanumeric() {
        return false;
    }
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'a'..=b'z' | b'0'..=b'9' => i += 1,
            b'.' => {
                if !b.get(i + 1).is_some_and(u8::is_ascii_alphanumeric) {
                    return false;
                }
                i += 1;
            }
            b'_' => {
                let n = if b.get(i + 1) == Some(&b'_') { 2 } else { 1 };
                if !b.get(i + n).is_some_and(u8::is_ascii_alphanumeric) {
                    return false;
                }
                i += n;
            }
            b'-' => {
                while b.get(i) == Some(&b'-') {
                    i += 1;
                }
                if !b.get(i).is_some_and(u8::is_ascii_alphanumeric) {
                    return false;
                }
            }
            _ => return false,
        }
    }
    true
}

fn is_tag(t: &str) -> bool {
    let b = t.as_bytes();
    !b.is_empty()
        && b.len() <= 128
        && (b[0].is_ascii_alphanumeric() || b[0] == b'_')
        && b.iter().all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.' | b'-'))
}

fn is_digest(d: &str) -> bool {
    let Some((algo, hex)) = d.split_once(':') else { return false };
    !algo.is_empty()
        && algo.bytes().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, b'+' | b'.' | b'_' | b'-'))
        && hex.len() >= 32
        && hex.bytes().all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
}

fn is_domain(d: &str) -> bool {
    let (host, port) = match d.rsplit_once(':') {
        Some((h, p)) if !h.contains(']') || h.ends_with(']') => (h, Some(p)),
        _ => (d, None),
    };
    if port.is_some_and(|p| p.is_empty() || !p.bytes().all(|c| c.is_ascii_digit())) {
        return false;
    }
    if host.starts_with('[') {
        return host.ends_with(']');
    }
    !host.is_empty()
        && host.split('.').all(|l| {
            let b = l.as_bytes();
            !b.is_empty()
                && b[0].is_ascii_alphanumeric()
                && b[b.len() - 1].is_ascii_alphanumeric()
                && b.iter().all(|c| c.is_ascii_alphanumeric() || *c == b'-')
        })
}

/// `ParseNormalizedNamed` + tag/digest.
pub fn parse(image: &str) -> Result<ImageReference, ReferenceError> {
    if image.is_empty() {
        return Err(ReferenceError::Format);
    }
    let (rest, digest) = match image.split_once('@') {
        Some((r, d)) => {
            if !is_digest(d) {
                return Err(ReferenceError::Format);
            }
            (r, Some(d.to_owned()))
        }
        None => (image, None),
    };
    // A tag is after the last ':' that follows the last '/'.
    let (name, tag) = match rest.rfind(':') {
        Some(i) if !rest[i..].contains('/') => (&rest[..i], Some(rest[i + 1..].to_owned())),
        _ => (rest, None),
    };
    if tag.as_deref().is_some_and(|t| !is_tag(t)) {
        return Err(ReferenceError::Format);
    }
    let (domain, path) = match name.split_once('/') {
        Some((first, remainder)) if first.contains('.') || first.contains(':') || first == "localhost" => {
            (first.to_owned(), remainder.to_owned())
        }
        Some(_) => ("docker.io".to_owned(), name.to_owned()),
        None => ("docker.io".to_owned(), format!("library/{name}")),
    };
    let (domain, path) = if domain == "index.docker.io" { ("docker.io".to_owned(), path) } else { (domain, path) };
    let path = if domain == "docker.io" && !path.contains('/') { format!("library/{path}") } else { path };
    if path.bytes().any(|c| c.is_ascii_uppercase()) {
        return Err(ReferenceError::Uppercase(path));
    }
    if !is_domain(&domain) || !path.split('/').all(is_path_component) {
        return Err(ReferenceError::Format);
    }
    if domain == "docker.io" && path.len() == 64 + "library/".len() && path.starts_with("library/") {
        let hex = &path["library/".len()..];
        if hex.bytes().all(|c| c.is_ascii_hexdigit()) {
            return Err(ReferenceError::HexName(hex.to_owned()));
        }
    }
    Ok(ImageReference { domain, path, tag, digest })
}

/// `trimImageTagDigest`: the normalised name (`nginx:1` → `docker.io/library/nginx`).
pub fn normalized_name(image: &str) -> Result<String, ReferenceError> {
    parse(image).map(|r| r.name())
}

/// `applyDefaultImageTag`: `:latest` appended textually when there is neither tag nor
/// digest.
pub fn apply_default_tag(image: &str) -> Result<String, ReferenceError> {
    let r = parse(image)?;
    if r.tag.is_none() && r.digest.is_none() { Ok(format!("{image}:latest")) } else { Ok(image.to_owned()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalises_like_distribution() {
        for (image, name) in [
            ("nginx", "docker.io/library/nginx"),
            ("nginx:1.25", "docker.io/library/nginx"),
            ("library/nginx", "docker.io/library/nginx"),
            ("docker.io/testing/test:latest", "docker.io/testing/test"),
            ("index.docker.io/nginx", "docker.io/library/nginx"),
            ("repo.repo/test/test:v1", "repo.repo/test/test"),
            ("localhost:5000/app", "localhost:5000/app"),
            ("localhost/app", "localhost/app"),
            (
                "registry.example:5000/team/app@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
                "registry.example:5000/team/app",
            ),
            ("a.io/x__y/z-1.2", "a.io/x__y/z-1.2"),
        ] {
            assert_eq!(normalized_name(image).as_deref(), Ok(name), "{image}");
        }
        for bad in ["", "UPPER", "a.io/Upper", "a.io/x:", "a.io/x@sha256:abc", "a.io/-x", "a.io//x", ":tag"] {
            assert!(parse(bad).is_err(), "{bad}");
        }
        assert_eq!(
            parse("Nginx").unwrap_err().to_string(),
            "invalid reference format: repository name (library/Nginx) must be lowercase"
        );
    }

    #[test]
    fn default_tag() {
        assert_eq!(apply_default_tag("nginx").unwrap(), "nginx:latest");
        assert_eq!(apply_default_tag("a.io/x:1").unwrap(), "a.io/x:1");
        let digest = "a.io/x@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
        assert_eq!(apply_default_tag(digest).unwrap(), digest);
    }
}
