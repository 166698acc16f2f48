//! What both token authenticators (bound: [`crate::authenticator`], legacy: [`crate::legacy`])
//! check before any signature, in one place, so the two security paths cannot drift: the
//! size bound, the compact form, the three segments (kube-apiserver's jwt.go `Authenticate`
//! before it routes by issuer), and the audience rule of a token against the requested and
//! implicit audiences.

use crate::authenticator::{AuthError, MAX_TOKEN_BYTES, NotMine};
use crate::jws::{self, Compact};

/// The token's compact segments, or why it is not one of ours (size, JSON form, segments).
pub(crate) fn compact(token: &str) -> Result<Compact<'_>, AuthError> {
    if token.len() > MAX_TOKEN_BYTES {
        return Err(AuthError::NotMine(NotMine::TooLarge));
    }
    if token.trim_start().starts_with('{') {
        return Err(AuthError::NotMine(NotMine::NotCompact));
    }
    jws::split(token).map_err(|n| AuthError::NotMine(NotMine::Segments(n)))
}

/// The audiences a token is valid for among `requested` (or, absent, the implicit ones):
/// the token's own `aud` (`token_audiences`), or the implicit audiences for a token without
/// one (jwt.go's legacy branch). None left, with implicit audiences configured, is upstream's
/// audience error.
pub(crate) fn audiences(
    token_audiences: Option<&[&str]>,
    requested: Option<&[String]>,
    implicit: &[String],
) -> Result<Vec<String>, AuthError> {
    let target = requested.unwrap_or(implicit);
    let valid: Vec<String> = match token_audiences {
        None => target.iter().filter(|a| implicit.contains(a)).cloned().collect(),
        Some(aud) => target.iter().filter(|a| aud.contains(&a.as_str())).cloned().collect(),
    };
    if valid.is_empty() && !implicit.is_empty() {
        let token = match token_audiences {
            None => implicit.to_vec(),
            Some(aud) => aud.iter().map(|a| (*a).to_owned()).collect(),
        };
        return Err(AuthError::Audience { token, target: target.to_vec() });
    }
    Ok(valid)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostile_shapes_are_not_ours_before_anything_is_decoded() {
        let big = "a".repeat(MAX_TOKEN_BYTES + 1);
        assert!(matches!(compact(&big), Err(AuthError::NotMine(NotMine::TooLarge))));
        assert!(matches!(compact(" {\"alg\":1}"), Err(AuthError::NotMine(NotMine::NotCompact))));
        assert!(matches!(compact("a.b"), Err(AuthError::NotMine(NotMine::Segments(2)))));
        assert!(matches!(compact("a.b.c.d"), Err(AuthError::NotMine(NotMine::Segments(4)))));
        assert!(compact("a.b.c").is_ok());
    }

    #[test]
    fn audiences_follow_jwt_go() {
        let implicit = vec!["api".to_owned()];
        assert_eq!(audiences(None, None, &implicit).unwrap_or_default(), ["api"]);
        let asked = vec!["registry".to_owned()];
        assert_eq!(audiences(Some(&["registry"]), Some(&asked), &implicit).unwrap_or_default(), ["registry"]);
        assert!(matches!(audiences(None, Some(&asked), &implicit), Err(AuthError::Audience { .. })));
        assert!(matches!(audiences(Some(&["other"]), None, &implicit), Err(AuthError::Audience { .. })));
        // No implicit audiences configured: an empty intersection is not an error.
        assert_eq!(audiences(Some(&["other"]), Some(&asked), &[]).unwrap_or_default(), Vec::<String>::new());
    }
}
