//! JWS compact serialisation (RFC 7515): the strict splitting and base64url decoding
//! verifiers need (headers are written by [`crate::compact::JwsSigner`]).
//!
//! Hand-written rather than taken from a JOSE library: measured faster than jsonwebtoken,
//! which re-parses the key per signature; it is fuzzed (`fuzz/fuzz_targets/jwt_verify.rs`).

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
        (Some(header), Some(payload), Some(signature), None) => {
            Ok(Compact { header, payload, signature, signing_input: &token[..header.len() + 1 + payload.len()] })
        }
        _ => Err(token.split('.').count()),
    }
}

/// Decodes a base64url (no padding) segment.
pub(crate) fn decode_segment(segment: &str) -> Option<Vec<u8>> {
    let mut out = vec![0u8; segment.len() / 4 * 3 + 3];
    let n = decode_b64url(segment.as_bytes(), &mut out)?;
    out.truncate(n);
    Some(out)
}

/// Decodes a base64url segment into `buf`; `None` if it is not base64url or does not fit.
pub(crate) fn decode_segment_into<'b>(segment: &str, buf: &'b mut [u8]) -> Option<&'b [u8]> {
    let n = decode_b64url(segment.as_bytes(), buf)?;
    Some(&buf[..n])
}

const INVALID: u8 = 0xff;

/// base64url alphabet → 6-bit values; everything else (padding included) is invalid.
static DECODE: [u8; 256] = {
    let mut t = [INVALID; 256];
    let alphabet = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut i = 0;
    while i < 64 {
        t[alphabet[i] as usize] = i as u8;
        i += 1;
    }
    t
};

/// Strict unpadded base64url (RFC 4648 §5) decoding into `out`; returns the byte count.
///
/// Strict means canonical: a length of 1 mod 4, any character outside the alphabet, and
/// non-zero unused bits in the last character are refused, so that one token has exactly
/// one spelling (Go's `RawURLEncoding`, used by go-jose, tolerates the unused bits; a token
/// cache keyed by the token string must not see two spellings of one signature).
/// Table-driven because decoding dominated the parsing half of verification.
fn decode_b64url(input: &[u8], out: &mut [u8]) -> Option<usize> {
    let full = input.len() / 4;
    let tail = input.len() % 4;
    if tail == 1 {
        return None;
    }
    let needed = full * 3 + tail.saturating_sub(1);
    if out.len() < needed {
        return None;
    }
    // Eight characters (six bytes) per step, then one quad if left: zipped exact chunks
    // keep bounds checks out of the loop.
    let octets = full / 2;
    for (oct, out6) in input.chunks_exact(8).zip(out.chunks_exact_mut(6)) {
        let mut acc: u64 = 0;
        let mut bad: u8 = 0;
        for &ch in oct {
            let v = DECODE[usize::from(ch)];
            bad |= v;
            acc = (acc << 6) | u64::from(v);
        }
        // Valid values are 6 bits; an invalid character (0xff) sets the top two.
        if bad & 0xc0 != 0 {
            return None;
        }
        out6.copy_from_slice(&acc.to_be_bytes()[2..]);
    }
    if full % 2 == 1 {
        let quad = &input[octets * 8..octets * 8 + 4];
        let (a, b, c, d) = (
            DECODE[usize::from(quad[0])],
            DECODE[usize::from(quad[1])],
            DECODE[usize::from(quad[2])],
            DECODE[usize::from(quad[3])],
        );
        if (a | b | c | d) & 0xc0 != 0 {
            return None;
        }
        let v = (u32::from(a) << 18) | (u32::from(b) << 12) | (u32::from(c) << 6) | u32::from(d);
        let o = octets * 6;
        out[o] = (v >> 16) as u8;
        out[o + 1] = (v >> 8) as u8;
        out[o + 2] = v as u8;
    }
    let mut o = full * 3;
    let rest = &input[full * 4..];
    match *rest {
        [] => {}
        [x, y] => {
            let (a, b) = (DECODE[x as usize], DECODE[y as usize]);
            if (a | b) & 0xc0 != 0 || b & 0x0f != 0 {
                return None;
            }
            out[o] = (a << 2) | (b >> 4);
            o += 1;
        }
        [x, y, z] => {
            let (a, b, c) = (DECODE[x as usize], DECODE[y as usize], DECODE[z as usize]);
            if (a | b | c) & 0xc0 != 0 || c & 0x03 != 0 {
                return None;
            }
            out[o] = (a << 2) | (b >> 4);
            out[o + 1] = (b << 4) | (c >> 2);
            o += 2;
        }
        _ => return None,
    }
    Some(o)
}

#[cfg(test)]
mod tests {
    use super::*;
    use data_encoding::BASE64URL_NOPAD;

    #[test]
    fn split_requires_exactly_three_segments() {
        let c = split("a.b.c").unwrap();
        assert_eq!((c.header, c.payload, c.signature, c.signing_input), ("a", "b", "c", "a.b"));
        assert_eq!(split("a.b"), Err(2));
        assert_eq!(split("a.b.c.d"), Err(4));
        assert_eq!(split("a.b.c.d.e"), Err(5));
        assert_eq!(split("..").unwrap().signing_input, ".");
    }

    #[test]
    fn decoder_agrees_with_a_reference_implementation() {
        // every length 0..64 over pseudo-random bytes, and every single-character mutation
        // of a short input, must decode exactly as data-encoding's strict decoder does
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        };
        for len in 0..64 {
            let bytes: Vec<u8> = (0..len).map(|_| next()).collect();
            let text = BASE64URL_NOPAD.encode(&bytes);
            assert_eq!(decode_segment(&text), Some(bytes), "{text}");
        }
        let text = BASE64URL_NOPAD.encode(b"podpass!");
        for i in 0..text.len() {
            for c in (0u8..=255).filter(u8::is_ascii) {
                let mut m = text.clone().into_bytes();
                m[i] = c;
                let m = String::from_utf8(m).unwrap();
                assert_eq!(decode_segment(&m), BASE64URL_NOPAD.decode(m.as_bytes()).ok(), "{m:?}");
            }
        }
        for bad in ["A", "AAAAA", "AB==", "AB=", "A+B/", "AQ\n"] {
            assert_eq!(decode_segment(bad), None, "{bad}");
        }
    }

    #[test]
    fn decode_into_refuses_oversized_and_invalid_segments() {
        let mut buf = [0u8; 4];
        assert_eq!(decode_segment_into("AQID", &mut buf), Some(&[1u8, 2, 3][..]));
        assert_eq!(decode_segment_into("AQIDBAU", &mut buf), None);
        assert_eq!(decode_segment_into("A!", &mut buf), None);
    }
}
