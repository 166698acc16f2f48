//! Image references and `matchImages` patterns parsed as the kubelet parses them
//! (credentialprovider `ParseSchemelessURL` = Go `url.Parse("https://" + s)`), with Go's
//! error messages, plus the glob matching of keyring.go (`URLsMatch`).

use thiserror::Error;

/// A schemeless URL: host (with port) and path, unescaped, as Go's `url.URL` holds them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchemelessUrl {
    /// `Host` (may carry `:port`).
    pub host: String,
    /// `Path` (unescaped).
    pub path: String,
}

/// Go's `*url.Error` for `parse`, printed as `parse "<url>": <reason>`.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[error("parse {url}: {reason}", url = crate::validation::quote(url))]
pub struct UrlError {
    /// The URL as parsed (with the `https://` prefix).
    pub url: String,
    /// Why (`invalid URL escape "%in"`, `invalid character " " in host name`, ...).
    pub reason: String,
}

fn unhex(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

/// Go `url.unescape` for host (`host = true`) or path mode.
fn unescape(s: &str, host: bool) -> Result<String, String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' => {
                let (Some(h), Some(l)) = (b.get(i + 1).and_then(|c| unhex(*c)), b.get(i + 2).and_then(|c| unhex(*c)))
                else {
                    // Go quotes up to three *bytes*, which may end inside a UTF-8 character.
                    let end = (i + 3).min(b.len());
                    return Err(format!("invalid URL escape {}", go_quote_bytes(&b[i..end])));
                };
                // Go: in hosts, only %25 (zone) and non-ASCII escapes are allowed.
                let v = h * 16 + l;
                if host && v < 0x80 && &s[i..i + 3] != "%25" {
                    return Err(format!("invalid URL escape {}", crate::validation::quote(&s[i..i + 3])));
                }
                out.push(v);
                i += 3;
            }
            c => {
                if host && c < 0x80 && !host_char_allowed(c) {
                    return Err(format!(
                        "invalid character {} in host name",
                        crate::validation::quote(&(c as char).to_string())
                    ));
                }
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8(out).map_err(|_| "invalid UTF-8 after unescaping".to_owned())
}

/// Go's `strconv.Quote` of a byte string: valid UTF-8 as text (JSON-style escapes for the
/// rest), each invalid byte as `\xNN`.
fn go_quote_bytes(bytes: &[u8]) -> String {
    let mut out = String::from("\"");
    for chunk in bytes.utf8_chunks() {
        let valid = crate::validation::quote(chunk.valid());
        out.push_str(&valid[1..valid.len() - 1]);
        for b in chunk.invalid() {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    out.push('"');
    out
}

/// Go `shouldEscape(c, encodeHost)` is false for these.
fn host_char_allowed(c: u8) -> bool {
    c.is_ascii_alphanumeric()
        || matches!(
            c,
            b'-' | b'_'
                | b'.'
                | b'~'
                | b'!'
                | b'$'
                | b'&'
                | b'\''
                | b'('
                | b')'
                | b'*'
                | b'+'
                | b','
                | b';'
                | b'='
                | b':'
                | b'['
                | b']'
                | b'<'
                | b'>'
                | b'"'
        )
}

/// Go `validOptionalPort`.
fn valid_optional_port(port: &str) -> bool {
    match port.strip_prefix(':') {
        None => port.is_empty(),
        Some(digits) => digits.bytes().all(|c| c.is_ascii_digit()),
    }
}

/// `ParseSchemelessURL(s)`: Go `url.Parse("https://" + s)` with the scheme dropped.
pub fn parse_schemeless(s: &str) -> Result<SchemelessUrl, UrlError> {
    let raw = format!("https://{s}");
    let err = |reason: String| UrlError { url: raw.clone(), reason };
    if raw.bytes().any(|c| c < 0x20 || c == 0x7f) {
        return Err(UrlError { url: raw.clone(), reason: "net/url: invalid control character in URL".into() });
    }
    let without_fragment = raw.split_once('#').map_or(raw.as_str(), |(u, _)| u);
    let rest = &without_fragment["https://".len()..];
    let rest = rest.split_once('?').map_or(rest, |(r, _)| r);
    let (authority, path) = match rest.find('/') {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    let host = match authority.rfind('@') {
        Some(i) => &authority[i + 1..],
        None => authority,
    };
    let host = if host.starts_with('[') {
        // IPv6 literal: `[addr]` optionally followed by `:port`.
        let close = host.find(']').ok_or_else(|| err("missing ']' in host".into()))?;
        let port = &host[close + 1..];
        if !valid_optional_port(port) {
            return Err(err(format!("invalid port {} after host", crate::validation::quote(port))));
        }
        host.to_owned()
    } else {
        if let Some(i) = host.rfind(':')
            && !valid_optional_port(&host[i..])
        {
            return Err(err(format!("invalid port {} after host", crate::validation::quote(&host[i..]))));
        }
        unescape(host, true).map_err(err)?
    };
    let path = unescape(path, false).map_err(err)?;
    Ok(SchemelessUrl { host, path })
}

/// Go `net.SplitHostPort` fallback as keyring.go `SplitURL` uses it: host parts split on
/// `.`, and the port (empty when there is none).
pub fn split_host(url: &SchemelessUrl) -> (Vec<&str>, &str) {
    let (host, port) = split_host_port(&url.host).unwrap_or((url.host.as_str(), ""));
    (host.split('.').collect(), port)
}

fn split_host_port(hostport: &str) -> Option<(&str, &str)> {
    if let Some(rest) = hostport.strip_prefix('[') {
        let (host, after) = rest.split_once(']')?;
        let port = after.strip_prefix(':')?;
        return Some((host, port));
    }
    let (host, port) = hostport.rsplit_once(':')?;
    if host.contains(':') {
        return None;
    }
    Some((host, port))
}

/// keyring.go `URLsMatch(glob, target)`: same port, same number of dot-separated host
/// parts each matching as a shell glob, and the target path starting with the glob's.
pub fn urls_match(glob: &SchemelessUrl, target: &SchemelessUrl) -> bool {
    let (glob_parts, glob_port) = split_host(glob);
    let (target_parts, target_port) = split_host(target);
    if glob_port != target_port || glob_parts.len() != target_parts.len() {
        return false;
    }
    if !target.path.starts_with(&glob.path) {
        return false;
    }
    glob_parts.iter().zip(&target_parts).all(|(g, t)| glob_match(g, t).unwrap_or(false))
}

/// `URLsMatchStr`: both sides parsed schemeless; a parse failure is no match.
pub fn urls_match_str(glob: &str, target: &str) -> bool {
    match (parse_schemeless(glob), parse_schemeless(target)) {
        (Ok(g), Ok(t)) => urls_match(&g, &t),
        _ => false,
    }
}

/// Go `path/filepath.Match` on one host part (separator `/`, never present here):
/// `*`, `?`, `[...]` classes with ranges and `^` negation, `\` escapes. `None` for a
/// malformed pattern (Go's `ErrBadPattern`).
pub fn glob_match(pattern: &str, name: &str) -> Option<bool> {
    let p: Vec<char> = pattern.chars().collect();
    let n: Vec<char> = name.chars().collect();
    let matched = match_from(&p, &n)?;
    if !matched {
        // Go reports a bad pattern even when an earlier part fails to match.
        validate_pattern(&p)?;
    }
    Some(matched)
}

fn validate_pattern(p: &[char]) -> Option<()> {
    let mut i = 0;
    while i < p.len() {
        match p[i] {
            '\\' => {
                p.get(i + 1)?;
                i += 2;
            }
            '[' => {
                let (_, next) = class_match(p, i, 'a')?;
                i = next;
            }
            _ => i += 1,
        }
    }
    Some(())
}

/// Go `getEsc`: one possibly escaped class character; never `-` or `]` unescaped, and the
/// class must continue after it.
fn get_esc(p: &[char], i: usize) -> Option<(char, usize)> {
    let c = *p.get(i)?;
    if c == '-' || c == ']' {
        return None;
    }
    let (ch, next) = if c == '\\' { (*p.get(i + 1)?, i + 2) } else { (c, i + 1) };
    if next >= p.len() {
        return None;
    }
    Some((ch, next))
}

/// Matches `[...]` starting at `p[start] == '['` against `c`; returns (matched, index after
/// `]`), or `None` for a malformed class.
fn class_match(p: &[char], start: usize, c: char) -> Option<(bool, usize)> {
    let mut i = start + 1;
    let negated = p.get(i) == Some(&'^');
    if negated {
        i += 1;
    }
    let mut matched = false;
    let mut ranges = 0;
    loop {
        if p.get(i) == Some(&']') && ranges > 0 {
            i += 1;
            break;
        }
        let (lo, next) = get_esc(p, i)?;
        i = next;
        let mut hi = lo;
        if p.get(i) == Some(&'-') {
            let (h, next) = get_esc(p, i + 1)?;
            hi = h;
            i = next;
        }
        if lo <= c && c <= hi {
            matched = true;
        }
        ranges += 1;
    }
    Some((matched != negated, i))
}

fn match_from(p: &[char], n: &[char]) -> Option<bool> {
    // Backtracking over `*` with the classic two-pointer algorithm.
    let (mut pi, mut ni) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    loop {
        if pi < p.len() {
            match p[pi] {
                '*' => {
                    star = Some((pi, ni));
                    pi += 1;
                    continue;
                }
                '?' if ni < n.len() => {
                    pi += 1;
                    ni += 1;
                    continue;
                }
                '[' if ni < n.len() => {
                    let (ok, next) = class_match(p, pi, n[ni])?;
                    if ok {
                        pi = next;
                        ni += 1;
                        continue;
                    }
                }
                '\\' if ni < n.len() => {
                    let lit = *p.get(pi + 1)?;
                    if lit == n[ni] {
                        pi += 2;
                        ni += 1;
                        continue;
                    }
                }
                c if ni < n.len() && c != '?' && c != '[' && c != '\\' && c == n[ni] => {
                    pi += 1;
                    ni += 1;
                    continue;
                }
                _ => {}
            }
        } else if ni == n.len() {
            return Some(true);
        }
        match star {
            Some((sp, sn)) if sn < n.len() => {
                star = Some((sp, sn + 1));
                pi = sp + 1;
                ni = sn + 1;
            }
            _ => return Some(false),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_like_go_url_parse() {
        let u = parse_schemeless("registry.example:5000/team/app:1").unwrap();
        assert_eq!(u, SchemelessUrl { host: "registry.example:5000".into(), path: "/team/app:1".into() });
        assert_eq!(parse_schemeless("ubuntu").unwrap().host, "ubuntu");
        assert_eq!(
            parse_schemeless("%invalid%").unwrap_err().to_string(),
            r#"parse "https://%invalid%": invalid URL escape "%in""#
        );
        assert_eq!(
            parse_schemeless("host:port/x").unwrap_err().to_string(),
            r#"parse "https://host:port/x": invalid port ":port" after host"#
        );
        assert_eq!(
            parse_schemeless("bad host/x").unwrap_err().to_string(),
            r#"parse "https://bad host/x": invalid character " " in host name"#
        );
        assert_eq!(parse_schemeless("h/p%2").unwrap_err().reason, r#"invalid URL escape "%2""#);
        // an escape cut inside a UTF-8 character (a tenant's pull-secret key) is an error,
        // worded as Go's, never a panic
        assert_eq!(parse_schemeless("registry.example/%aé").unwrap_err().reason, r#"invalid URL escape "%a\xc3""#);
        assert_eq!(parse_schemeless("%é").unwrap_err().reason, r#"invalid URL escape "%é""#);
        assert_eq!(parse_schemeless("r/%").unwrap_err().reason, r#"invalid URL escape "%""#);
        assert!(parse_schemeless("*.dkr.ecr.*.amazonaws.com").is_ok());
        assert!(parse_schemeless("[::1]:5000/x").is_ok());
    }

    #[test]
    fn urls_match_as_keyring_go() {
        let cases = [
            ("*.kubernetes.io", "prefix.kubernetes.io", true),
            ("*.kubernetes.io", "kubernetes.io", false),
            ("*.*.kubernetes.io", "prefix.kubernetes.io", false),
            ("prefix.*.io", "prefix.kubernetes.io", true),
            ("prefix.kubernetes.*", "prefix.kubernetes.io", true),
            ("*-good.kubernetes.io", "prefix-good.kubernetes.io", true),
            ("*-good.kubernetes.io", "prefix-bad.kubernetes.io", false),
            ("kubernetes.io/path", "kubernetes.io/path/image", true),
            ("kubernetes.io/foo", "kubernetes.io/foobar", true),
            ("kubernetes.io/path", "kubernetes.io/other", false),
            ("registry.io:8080", "registry.io:8080/x", true),
            ("registry.io", "registry.io:8080/x", false),
            ("registry.io:8080", "registry.io/x", false),
            ("*.io", "Registry.IO", false),
            // `?` starts the query in Go's url.Parse: the host is just "r".
            ("r?g.io", "reg.io", false),
            ("r[a-f]g.io", "reg.io", true),
            ("r[^a-f]g.io", "reg.io", false),
            ("r[a-g.io", "reg.io", false),
            ("gcr.io", "gcr.io/foo/bar", true),
            ("*", "ubuntu", true),
        ];
        for (glob, target, want) in cases {
            assert_eq!(urls_match_str(glob, target), want, "{glob} vs {target}");
        }
    }

    #[test]
    fn glob_reports_bad_patterns() {
        assert_eq!(glob_match("[a-", "a"), None);
        assert_eq!(glob_match("a[", "b"), None);
        assert_eq!(glob_match("\\", "a"), None);
        assert_eq!(glob_match("*x", "abx"), Some(true));
        assert_eq!(glob_match("a*b*c", "axxbyyc"), Some(true));
        assert_eq!(glob_match("a*b*c", "axxbyy"), Some(false));
    }
}
