//! The few DER structures a JOSE key needs: SubjectPublicKeyInfo (RFC 5280), the
//! RSAPublicKey inside it (RFC 8017), and the SPKI inside an X.509 certificate.
//!
//! aws-lc-rs parses and validates key material; this module only locates fields so that
//! JWKs can be written (`x`/`y`, `n`/`e`) and built (RSAPublicKey from `n`/`e`). It is a
//! strict reader: definite lengths only, minimal length encodings, no trailing bytes.

use thiserror::Error;

const TAG_INTEGER: u8 = 0x02;
const TAG_BIT_STRING: u8 = 0x03;
const TAG_NULL: u8 = 0x05;
const TAG_OID: u8 = 0x06;
const TAG_SEQUENCE: u8 = 0x30;

/// OID 1.2.840.10045.2.1 (id-ecPublicKey), content bytes.
pub(crate) const OID_EC_PUBLIC_KEY: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01];
/// OID 1.2.840.10045.3.1.7 (prime256v1 / P-256).
pub(crate) const OID_P256: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07];
/// OID 1.3.132.0.34 (secp384r1 / P-384).
pub(crate) const OID_P384: &[u8] = &[0x2b, 0x81, 0x04, 0x00, 0x22];
/// OID 1.3.132.0.35 (secp521r1 / P-521).
pub(crate) const OID_P521: &[u8] = &[0x2b, 0x81, 0x04, 0x00, 0x23];
/// OID 1.2.840.113549.1.1.1 (rsaEncryption).
pub(crate) const OID_RSA_ENCRYPTION: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x01];

/// A DER structure was not what the key format requires.
#[derive(Debug, Error, PartialEq, Eq)]
#[error("malformed DER: {0}")]
pub struct DerError(&'static str);

/// A cursor over DER bytes.
struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    fn new(input: &'a [u8]) -> Self {
        Self { rest: input }
    }

    fn is_empty(&self) -> bool {
        self.rest.is_empty()
    }

    /// Reads one TLV and returns (tag, contents).
    fn any(&mut self) -> Result<(u8, &'a [u8]), DerError> {
        let (&tag, rest) = self.rest.split_first().ok_or(DerError("truncated tag"))?;
        if tag & 0x1f == 0x1f {
            return Err(DerError("high tag numbers are not used here"));
        }
        let (&first, mut rest) = rest.split_first().ok_or(DerError("truncated length"))?;
        let len = if first < 0x80 {
            usize::from(first)
        } else {
            let n = usize::from(first & 0x7f);
            if n == 0 || n > 4 {
                return Err(DerError("unsupported length encoding"));
            }
            if rest.len() < n {
                return Err(DerError("truncated length"));
            }
            let (bytes, after) = rest.split_at(n);
            rest = after;
            if bytes[0] == 0 {
                return Err(DerError("non-minimal length"));
            }
            let len = bytes.iter().fold(0usize, |acc, b| (acc << 8) | usize::from(*b));
            if len < 0x80 {
                return Err(DerError("non-minimal length"));
            }
            len
        };
        if rest.len() < len {
            return Err(DerError("truncated contents"));
        }
        let (contents, after) = rest.split_at(len);
        self.rest = after;
        Ok((tag, contents))
    }

    fn expect(&mut self, tag: u8, what: &'static str) -> Result<&'a [u8], DerError> {
        match self.any()? {
            (t, contents) if t == tag => Ok(contents),
            _ => Err(DerError(what)),
        }
    }

    fn finish(&self, what: &'static str) -> Result<(), DerError> {
        if self.is_empty() { Ok(()) } else { Err(DerError(what)) }
    }
}

/// The fields of a SubjectPublicKeyInfo that pick the key type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Spki<'a> {
    /// Algorithm OID contents.
    pub algorithm: &'a [u8],
    /// Named-curve OID contents for EC keys; `None` for RSA (NULL parameters).
    pub curve: Option<&'a [u8]>,
    /// The subjectPublicKey bit string contents without the unused-bits octet.
    pub key: &'a [u8],
}

/// Parses a DER SubjectPublicKeyInfo.
pub(crate) fn parse_spki(input: &[u8]) -> Result<Spki<'_>, DerError> {
    let mut outer = Reader::new(input);
    let seq = outer.expect(TAG_SEQUENCE, "SubjectPublicKeyInfo is not a SEQUENCE")?;
    outer.finish("trailing bytes after SubjectPublicKeyInfo")?;
    let mut spki = Reader::new(seq);
    let alg_seq = spki.expect(TAG_SEQUENCE, "AlgorithmIdentifier is not a SEQUENCE")?;
    let bits = spki.expect(TAG_BIT_STRING, "subjectPublicKey is not a BIT STRING")?;
    spki.finish("trailing fields in SubjectPublicKeyInfo")?;

    let mut alg = Reader::new(alg_seq);
    let algorithm = alg.expect(TAG_OID, "algorithm is not an OID")?;
    let curve = if alg.is_empty() {
        None
    } else {
        match alg.any()? {
            (TAG_OID, oid) => Some(oid),
            (TAG_NULL, []) => None,
            _ => return Err(DerError("unsupported algorithm parameters")),
        }
    };
    alg.finish("trailing fields in AlgorithmIdentifier")?;

    match bits.split_first() {
        Some((0, key)) => Ok(Spki { algorithm, curve, key }),
        _ => Err(DerError("subjectPublicKey has unused bits")),
    }
}

/// Parses an RSAPublicKey (RFC 8017) and returns (modulus, exponent) as unsigned
/// big-endian bytes without leading zeros.
pub(crate) fn parse_rsa_public_key(input: &[u8]) -> Result<(&[u8], &[u8]), DerError> {
    let mut outer = Reader::new(input);
    let seq = outer.expect(TAG_SEQUENCE, "RSAPublicKey is not a SEQUENCE")?;
    outer.finish("trailing bytes after RSAPublicKey")?;
    let mut r = Reader::new(seq);
    let n = unsigned(r.expect(TAG_INTEGER, "modulus is not an INTEGER")?)?;
    let e = unsigned(r.expect(TAG_INTEGER, "exponent is not an INTEGER")?)?;
    r.finish("trailing fields in RSAPublicKey")?;
    Ok((n, e))
}

/// Returns the DER SubjectPublicKeyInfo inside an X.509 certificate.
pub(crate) fn certificate_spki(cert: &[u8]) -> Result<&[u8], DerError> {
    let mut outer = Reader::new(cert);
    let cert_seq = outer.expect(TAG_SEQUENCE, "Certificate is not a SEQUENCE")?;
    outer.finish("trailing bytes after Certificate")?;
    let mut c = Reader::new(cert_seq);
    let tbs = c.expect(TAG_SEQUENCE, "TBSCertificate is not a SEQUENCE")?;
    let mut t = Reader::new(tbs);
    // version [0] EXPLICIT is optional; serialNumber, signature, issuer, validity, subject.
    let mut fields_before_spki = 5;
    let (tag, _) = t.any()?;
    if tag != 0xa0 {
        fields_before_spki -= 1;
    }
    for _ in 0..fields_before_spki {
        t.any()?;
    }
    let start = t.rest;
    let (tag, _) = t.any()?;
    if tag != TAG_SEQUENCE {
        return Err(DerError("subjectPublicKeyInfo is not a SEQUENCE"));
    }
    Ok(&start[..start.len() - t.rest.len()])
}

/// Returns (algorithm OID, named-curve OID if any) of a PKCS#8 PrivateKeyInfo (RFC 5208).
pub(crate) fn pkcs8_algorithm(input: &[u8]) -> Result<(&[u8], Option<&[u8]>), DerError> {
    let mut outer = Reader::new(input);
    let seq = outer.expect(TAG_SEQUENCE, "PrivateKeyInfo is not a SEQUENCE")?;
    let mut r = Reader::new(seq);
    r.expect(TAG_INTEGER, "PrivateKeyInfo version is not an INTEGER")?;
    let alg_seq = r.expect(TAG_SEQUENCE, "AlgorithmIdentifier is not a SEQUENCE")?;
    let mut alg = Reader::new(alg_seq);
    let algorithm = alg.expect(TAG_OID, "algorithm is not an OID")?;
    let curve = match alg.any() {
        Ok((TAG_OID, oid)) => Some(oid),
        _ => None,
    };
    Ok((algorithm, curve))
}

/// Returns the named-curve OID of a SEC1 ECPrivateKey (RFC 5915), if it names one.
pub(crate) fn sec1_curve(input: &[u8]) -> Result<Option<&[u8]>, DerError> {
    let mut outer = Reader::new(input);
    let seq = outer.expect(TAG_SEQUENCE, "ECPrivateKey is not a SEQUENCE")?;
    let mut r = Reader::new(seq);
    r.expect(TAG_INTEGER, "ECPrivateKey version is not an INTEGER")?;
    r.expect(0x04, "ECPrivateKey privateKey is not an OCTET STRING")?;
    while !r.is_empty() {
        if let (0xa0, params) = r.any()? {
            let mut p = Reader::new(params);
            return Ok(Some(p.expect(TAG_OID, "ECPrivateKey parameters are not a named curve")?));
        }
    }
    Ok(None)
}

/// Strips the sign octet of a DER INTEGER known to be positive.
fn unsigned(int: &[u8]) -> Result<&[u8], DerError> {
    match int {
        [] => Err(DerError("empty INTEGER")),
        [b, ..] if b & 0x80 != 0 => Err(DerError("negative INTEGER")),
        [0, rest @ ..] if !rest.is_empty() && rest[0] & 0x80 == 0 => Err(DerError("non-minimal INTEGER")),
        [0, rest @ ..] if !rest.is_empty() => Ok(rest),
        _ => Ok(int),
    }
}

/// Encodes an RSAPublicKey (RFC 8017) from unsigned big-endian modulus and exponent.
pub(crate) fn encode_rsa_public_key(n: &[u8], e: &[u8]) -> Vec<u8> {
    let mut body = Vec::with_capacity(n.len() + e.len() + 16);
    push_integer(&mut body, n);
    push_integer(&mut body, e);
    let mut out = Vec::with_capacity(body.len() + 5);
    push_tlv(&mut out, TAG_SEQUENCE, &body);
    out
}

fn push_integer(out: &mut Vec<u8>, unsigned_be: &[u8]) {
    let trimmed = match unsigned_be.iter().position(|b| *b != 0) {
        Some(i) => &unsigned_be[i..],
        None => &[0u8][..],
    };
    if trimmed[0] & 0x80 != 0 {
        let mut v = Vec::with_capacity(trimmed.len() + 1);
        v.push(0);
        v.extend_from_slice(trimmed);
        push_tlv(out, TAG_INTEGER, &v);
    } else {
        push_tlv(out, TAG_INTEGER, trimmed);
    }
}

fn push_tlv(out: &mut Vec<u8>, tag: u8, contents: &[u8]) {
    out.push(tag);
    let len = contents.len();
    if len < 0x80 {
        out.push(len as u8);
    } else {
        let bytes = len.to_be_bytes();
        let skip = bytes.iter().take_while(|b| **b == 0).count();
        out.push(0x80 | (bytes.len() - skip) as u8);
        out.extend_from_slice(&bytes[skip..]);
    }
    out.extend_from_slice(contents);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rsa_public_key_round_trips_through_encoder_and_parser() {
        let n = [0x80u8; 256];
        let e = [0x01, 0x00, 0x01];
        let der = encode_rsa_public_key(&n, &e);
        // modulus with the high bit set gains a sign octet and a long-form length
        assert_eq!(&der[..4], &[0x30, 0x82, 0x01, 0x0a]);
        let (pn, pe) = parse_rsa_public_key(&der).unwrap();
        assert_eq!(pn, &n[..]);
        assert_eq!(pe, &e[..]);
    }

    #[test]
    fn rejects_truncated_and_trailing_input() {
        let der = encode_rsa_public_key(&[0x7f; 8], &[3]);
        assert!(parse_rsa_public_key(&der[..der.len() - 1]).is_err());
        let mut extra = der.clone();
        extra.push(0);
        assert_eq!(parse_rsa_public_key(&extra), Err(DerError("trailing bytes after RSAPublicKey")));
    }

    #[test]
    fn rejects_non_minimal_lengths() {
        // SEQUENCE with a long-form length for 3 bytes
        let der = [0x30, 0x81, 0x03, 0x02, 0x01, 0x03];
        assert_eq!(parse_rsa_public_key(&der), Err(DerError("non-minimal length")));
    }

    #[test]
    fn rejects_negative_and_padded_integers() {
        assert_eq!(unsigned(&[0x80]), Err(DerError("negative INTEGER")));
        assert_eq!(unsigned(&[0x00, 0x01]), Err(DerError("non-minimal INTEGER")));
        assert_eq!(unsigned(&[0x00, 0x80]).unwrap(), &[0x80]);
        assert_eq!(unsigned(&[0x00]).unwrap(), &[0x00]);
    }
}
