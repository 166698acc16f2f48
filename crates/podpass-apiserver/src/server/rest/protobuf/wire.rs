//! The protobuf wire format: a message is a sequence of (field number, wire value) pairs.

use super::DecodeError;

/// One field's value as the wire carries it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Wire<'a> {
    /// Wire type 0: int32, int64, bool.
    Varint(u64),
    /// Wire type 1: double, fixed64.
    Fixed64(u64),
    /// Wire type 2: string, bytes, an embedded message, a packed repeated scalar.
    Bytes(&'a [u8]),
    /// Wire type 5: float, fixed32.
    Fixed32(u32),
}

impl Wire<'_> {
    /// The wire's name in errors.
    pub(super) fn name(&self) -> &'static str {
        match self {
            Wire::Varint(_) => "varint",
            Wire::Fixed64(_) => "fixed64",
            Wire::Bytes(_) => "length-delimited",
            Wire::Fixed32(_) => "fixed32",
        }
    }
}

/// Reads a base-128 varint from the front of `buf`.
pub(super) fn varint(buf: &mut &[u8]) -> Result<u64, DecodeError> {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let (&b, rest) = buf.split_first().ok_or_else(|| DecodeError("truncated varint".into()))?;
        *buf = rest;
        value |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Ok(value);
        }
    }
    Err(DecodeError("varint too long".into()))
}

fn take<'a>(buf: &mut &'a [u8], n: usize, what: &str) -> Result<&'a [u8], DecodeError> {
    if buf.len() < n {
        return Err(DecodeError(format!("truncated {what}")));
    }
    let (value, rest) = buf.split_at(n);
    *buf = rest;
    Ok(value)
}

/// The fields of one message, in wire order; an error ends the iteration.
pub(super) struct Fields<'a> {
    buf: &'a [u8],
    failed: bool,
}

/// Iterates the fields of `msg`.
pub(super) fn fields(msg: &[u8]) -> Fields<'_> {
    Fields { buf: msg, failed: false }
}

impl<'a> Fields<'a> {
    fn read(&mut self) -> Result<(u64, Wire<'a>), DecodeError> {
        let tag = varint(&mut self.buf)?;
        let (number, wire) = (tag >> 3, tag & 7);
        if number == 0 {
            return Err(DecodeError("field number 0".into()));
        }
        let value = match wire {
            0 => Wire::Varint(varint(&mut self.buf)?),
            1 => {
                let b = take(&mut self.buf, 8, "fixed64")?;
                Wire::Fixed64(u64::from_le_bytes(b.try_into().map_err(|_| DecodeError("truncated fixed64".into()))?))
            }
            2 => {
                let len = usize::try_from(varint(&mut self.buf)?).map_err(|_| DecodeError("length overflow".into()))?;
                Wire::Bytes(take(&mut self.buf, len, "field")?)
            }
            5 => {
                let b = take(&mut self.buf, 4, "fixed32")?;
                Wire::Fixed32(u32::from_le_bytes(b.try_into().map_err(|_| DecodeError("truncated fixed32".into()))?))
            }
            other => return Err(DecodeError(format!("unsupported wire type {other}"))),
        };
        Ok((number, value))
    }
}

impl<'a> Iterator for Fields<'a> {
    type Item = Result<(u64, Wire<'a>), DecodeError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.buf.is_empty() {
            return None;
        }
        let item = self.read();
        self.failed = item.is_err();
        Some(item)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_each_wire_type_and_refuses_truncation() {
        let msg = [0x08, 0x96, 0x01, 0x11, 1, 0, 0, 0, 0, 0, 0, 0, 0x1a, 2, b'h', b'i', 0x25, 7, 0, 0, 0];
        let got: Vec<_> = fields(&msg).collect::<Result<_, _>>().unwrap();
        assert_eq!(
            got,
            vec![(1, Wire::Varint(150)), (2, Wire::Fixed64(1)), (3, Wire::Bytes(b"hi")), (4, Wire::Fixed32(7))]
        );
        for bad in [
            &[0x08][..],
            &[0x1a, 5, b'a'],
            &[0x11, 1, 2],
            &[0x0b],
            &[0x00, 0x01],
            &[0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01],
        ] {
            assert!(fields(bad).any(|f| f.is_err()), "{bad:?}");
        }
        // a length that does not fit in memory is refused, not allocated
        assert!(fields(&[0x1a, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f]).any(|f| f.is_err()));
    }
}
