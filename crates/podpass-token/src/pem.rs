//! PEM (RFC 7468) blocks: reading every block of a file, writing one block.
//!
//! Key files written by OpenSSL, Go's `encoding/pem` and kubeadm are accepted: text before,
//! between and after blocks is ignored (as Go does), headers such as `Proc-Type` are
//! refused (encrypted keys are not supported), base64 may be wrapped at any width.
//!
//! Why not `rustls-pki-types`' PEM reader (already a dependency, and used where only
//! certificates and private keys are read, e.g. podpass-serve's TLS): it yields only the
//! section kinds it knows and skips the rest silently, and kube-apiserver's
//! `--service-account-key-file` (client-go keyutil) also takes `RSA PUBLIC KEY` (PKCS#1)
//! blocks, which it would drop without a word; and it cannot say that a block is
//! encrypted rather than absent. Both are pinned by the tests below.

use data_encoding::BASE64;
use thiserror::Error;

/// One decoded PEM block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PemBlock {
    /// The label between `-----BEGIN ` and `-----`, e.g. `PRIVATE KEY`.
    pub label: String,
    /// The decoded DER contents.
    pub der: Vec<u8>,
}

/// A PEM file could not be read.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum PemError {
    /// A BEGIN line has no matching END line.
    #[error("PEM block {label:?} has no END line")]
    MissingEnd {
        /// Label of the unterminated block.
        label: String,
    },
    /// The END line names another label.
    #[error("PEM block {begin:?} ends with END {end:?}")]
    MismatchedEnd {
        /// Label of the BEGIN line.
        begin: String,
        /// Label of the END line.
        end: String,
    },
    /// The block carries RFC 1421 headers (encrypted PEM).
    #[error("PEM block {label:?} has headers (encrypted keys are not supported)")]
    Headers {
        /// Label of the block.
        label: String,
    },
    /// The body is not valid base64.
    #[error("PEM block {label:?} is not valid base64: {reason}")]
    Base64 {
        /// Label of the block.
        label: String,
        /// What the decoder reported.
        reason: String,
    },
    /// The input is not UTF-8 text.
    #[error("PEM data is not text")]
    NotText,
}

const BEGIN: &str = "-----BEGIN ";
const END: &str = "-----END ";
const DASHES: &str = "-----";

/// Decodes every PEM block in `input`, in order. Text outside blocks is ignored.
pub fn parse_all(input: &[u8]) -> Result<Vec<PemBlock>, PemError> {
    let text = std::str::from_utf8(input).map_err(|_| PemError::NotText)?;
    let mut blocks = Vec::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        let Some(label) = marker(line, BEGIN) else {
            continue;
        };
        let mut body = String::new();
        let mut ended = false;
        for line in lines.by_ref() {
            if let Some(end) = marker(line, END) {
                if end != label {
                    return Err(PemError::MismatchedEnd { begin: label.to_owned(), end: end.to_owned() });
                }
                ended = true;
                break;
            }
            if line.contains(':') {
                return Err(PemError::Headers { label: label.to_owned() });
            }
            body.extend(line.chars().filter(|c| !c.is_ascii_whitespace()));
        }
        if !ended {
            return Err(PemError::MissingEnd { label: label.to_owned() });
        }
        let der = BASE64
            .decode(body.as_bytes())
            .map_err(|e| PemError::Base64 { label: label.to_owned(), reason: e.to_string() })?;
        blocks.push(PemBlock { label: label.to_owned(), der });
    }
    Ok(blocks)
}

fn marker<'a>(line: &'a str, prefix: &str) -> Option<&'a str> {
    line.trim_end().strip_prefix(prefix)?.strip_suffix(DASHES)
}

/// Encodes one PEM block with 64-column lines, as OpenSSL and Go write them.
pub fn encode(label: &str, der: &[u8]) -> String {
    let b64 = BASE64.encode(der);
    let mut out = String::with_capacity(b64.len() + b64.len() / 64 + 2 * label.len() + 40);
    out.push_str(BEGIN);
    out.push_str(label);
    out.push_str(DASHES);
    out.push('\n');
    for chunk in b64.as_bytes().chunks(64) {
        // base64 output is ASCII, so every chunk is valid UTF-8
        out.extend(chunk.iter().map(|b| char::from(*b)));
        out.push('\n');
    }
    out.push_str(END);
    out.push_str(label);
    out.push_str(DASHES);
    out.push('\n');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_wraps_at_64_columns() {
        let der: Vec<u8> = (0..=255u8).collect();
        let text = encode("PUBLIC KEY", &der);
        assert!(text.lines().all(|l| l.len() <= 64));
        let blocks = parse_all(text.as_bytes()).unwrap();
        assert_eq!(blocks, vec![PemBlock { label: "PUBLIC KEY".into(), der }]);
    }

    #[test]
    fn reads_several_blocks_and_skips_surrounding_text() {
        let text =
            format!("comment\n{}between\r\n{}trailer", encode("CERTIFICATE", b"one"), encode("RSA PUBLIC KEY", b"two"));
        let blocks = parse_all(text.as_bytes()).unwrap();
        assert_eq!(blocks.len(), 2);
        assert_eq!(blocks[1].label, "RSA PUBLIC KEY");
        assert_eq!(blocks[1].der, b"two");
    }

    #[test]
    fn refuses_broken_blocks() {
        assert_eq!(parse_all(b"-----BEGIN A-----\nAAAA\n"), Err(PemError::MissingEnd { label: "A".into() }));
        assert!(matches!(
            parse_all(b"-----BEGIN A-----\nAAAA\n-----END B-----\n"),
            Err(PemError::MismatchedEnd { .. })
        ));
        assert!(matches!(
            parse_all(b"-----BEGIN A-----\nProc-Type: 4,ENCRYPTED\nAAAA\n-----END A-----\n"),
            Err(PemError::Headers { .. })
        ));
        assert!(matches!(parse_all(b"-----BEGIN A-----\nA!AA\n-----END A-----\n"), Err(PemError::Base64 { .. })));
        assert_eq!(parse_all(b"no pem here").unwrap(), vec![]);
    }
}
