//! JWS compact serialisation (RFC 7515) for service-account tokens: the header upstream
//! writes (`{"alg":…,"kid":…}`), and the strict splitting verifiers need.

use data_encoding::BASE64URL_NOPAD;
use serde::{Deserialize, Serialize};

use crate::keys::Algorithm;

/// A JOSE header as read from a token. Unknown members are ignored; `crit` is kept so
/// that a token demanding extensions we do not implement can be refused (RFC 7515 §4.1.11).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
pub struct Header {
    /// Signature algorithm.
    pub alg: String,
    /// Key id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kid: Option<String>,
    /// Critical extensions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub crit: Option<serde_json::Value>,
}

/// The base64url header of tokens signed with `alg` under `kid`, as go-jose writes it.
pub(crate) fn encode_header(alg: Algorithm, kid: &str) -> String {
    #[derive(Serialize)]
    struct Out<'a> {
        alg: &'a str,
        kid: &'a str,
    }
    // Serialising two plain strings cannot fail.
    let json = serde_json::to_vec(&Out { alg: alg.as_str(), kid }).unwrap_or_default();
    BASE64URL_NOPAD.encode(&json)
}

/// The three segments of a compact JWS.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Compact<'a> {
    pub header: &'a str,
    pub payload: &'a str,
    pub signature: &'a str,
    /// `header.payload`, the bytes the signature covers.
    pub signing_input: &'a str,
}

/// Splits a compact JWS into exactly three segments; `Err(n)` gives the segment count.
pub(crate) fn split(token: &str) -> Result<Compact<'_>, usize> {
    let mut it = token.splitn(4, '.');
    match (it.next(), it.next(), it.next(), it.next()) {
        (Some(header), Some(payload), Some(signature), None) => Ok(Compact {
            header,
            payload,
            signature,
            signing_input: &token[..header.len() + 1 + payload.len()],
        }),
        _ => Err(token.split('.').count()),
    }
}

/// Decodes a base64url (no padding) segment.
pub(crate) fn decode_segment(segment: &str) -> Option<Vec<u8>> {
    BASE64URL_NOPAD.decode(segment.as_bytes()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_matches_go_jose_layout() {
        let h = encode_header(Algorithm::ES256, "abc");
        assert_eq!(BASE64URL_NOPAD.decode(h.as_bytes()).unwrap(), br#"{"alg":"ES256","kid":"abc"}"#);
    }

    #[test]
    fn split_requires_exactly_three_segments() {
        let c = split("a.b.c").unwrap();
        assert_eq!((c.header, c.payload, c.signature, c.signing_input), ("a", "b", "c", "a.b"));
        assert_eq!(split("a.b"), Err(2));
        assert_eq!(split("a.b.c.d"), Err(4));
        assert_eq!(split("a.b.c.d.e"), Err(5));
        assert_eq!(split("..").unwrap().signing_input, ".");
    }
}
