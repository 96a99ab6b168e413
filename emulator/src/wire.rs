//! A minimal protobuf wire reader and writer for the emulator's hot paths
//! (P4Runtime and BFRT Write and Read, bulk rows): borrowed views over the
//! request bytes instead of owned prost messages, so applying a Write
//! allocates nothing per update but the stored entry. Pure; no I/O.
//!
//! The small helpers are `#[inline]`: each front end's views
//! (`p4runtime::wire`, `bfrt::wire`) call them once per field.

/// A request or update that is not valid protobuf (or has a known field
/// with the wrong wire type).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("malformed protobuf: {0}")]
pub struct WireError(pub &'static str);

/// One field's value as it appears on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Value<'a> {
    Varint(u64),
    I64(u64),
    Len(&'a [u8]),
    I32(u32),
}

impl<'a> Value<'a> {
    #[inline]
    pub fn uint(self) -> Result<u64, WireError> {
        match self {
            Value::Varint(v) => Ok(v),
            _ => Err(WireError("expected a varint field")),
        }
    }

    /// proto3 `int32`: negative values are sign-extended 64-bit varints.
    #[inline]
    pub fn int32(self) -> Result<i32, WireError> {
        self.uint().map(|v| v as i32)
    }

    #[inline]
    pub fn bytes(self) -> Result<&'a [u8], WireError> {
        match self {
            Value::Len(b) => Ok(b),
            _ => Err(WireError("expected a length-delimited field")),
        }
    }
}

/// Iterates the fields of one message.
pub struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    #[inline]
    pub fn new(buf: &'a [u8]) -> Self {
        Reader { buf }
    }

    #[inline]
    fn varint(&mut self) -> Result<u64, WireError> {
        // Tags, ids and lengths are mostly one byte.
        if let Some((&b, rest)) = self.buf.split_first()
            && b < 0x80
        {
            self.buf = rest;
            return Ok(u64::from(b));
        }
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let Some((&b, rest)) = self.buf.split_first() else {
                return Err(WireError("truncated varint"));
            };
            self.buf = rest;
            v |= u64::from(b & 0x7f) << shift;
            if b < 0x80 {
                return Ok(v);
            }
        }
        Err(WireError("varint longer than 10 bytes"))
    }

    /// Whether every field has been read.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// The next bare varint (an element of a packed repeated field).
    #[inline]
    pub fn varint_value(&mut self) -> Result<u64, WireError> {
        self.varint()
    }

    #[inline]
    fn take(&mut self, n: usize) -> Result<&'a [u8], WireError> {
        if n > self.buf.len() {
            return Err(WireError("truncated field"));
        }
        let (head, rest) = self.buf.split_at(n);
        self.buf = rest;
        Ok(head)
    }

    /// The next `(field number, value)`, or None at the end.
    #[inline]
    pub fn next_field(&mut self) -> Result<Option<(u32, Value<'a>)>, WireError> {
        if self.buf.is_empty() {
            return Ok(None);
        }
        let tag = self.varint()?;
        let field = u32::try_from(tag >> 3).map_err(|_| WireError("field number too large"))?;
        if field == 0 {
            return Err(WireError("field number 0"));
        }
        let v = match tag & 7 {
            0 => Value::Varint(self.varint()?),
            1 => Value::I64(u64::from_le_bytes(
                self.take(8)?.try_into().expect("8 bytes"),
            )),
            2 => {
                let n =
                    usize::try_from(self.varint()?).map_err(|_| WireError("length too large"))?;
                Value::Len(self.take(n)?)
            }
            5 => Value::I32(u32::from_le_bytes(
                self.take(4)?.try_into().expect("4 bytes"),
            )),
            _ => return Err(WireError("groups and unknown wire types are not supported")),
        };
        Ok(Some((field, v)))
    }
}

/// The type and the entity's set oneof member `(field number, value)` of
/// one encoded `Update` (P4Runtime and BFRT share this shape: type = 1,
/// entity = 2, the entity a oneof).
#[inline]
pub fn update_parts(buf: &[u8]) -> Result<(i32, Option<(u32, Value<'_>)>), WireError> {
    let (mut ty, mut entity) = (0, None);
    let mut r = Reader::new(buf);
    while let Some((f, v)) = r.next_field()? {
        match f {
            1 => ty = v.int32()?,
            2 => {
                let mut e = Reader::new(v.bytes()?);
                while let Some(member) = e.next_field()? {
                    entity = Some(member);
                }
            }
            _ => {}
        }
    }
    Ok((ty, entity))
}

/// The two fields of a match-value message (P4Runtime `FieldMatch.Exact`,
/// `Ternary`, `LPM`, `Range`, `Optional`; BFRT `KeyField`'s the same):
/// `(field 1 bytes, field 2 bytes, field 2 as int32)`. Field 2 is a
/// mask/high (bytes) or a prefix length / is_valid (varint).
#[inline]
pub(crate) fn value_pair(buf: &[u8]) -> Result<(&[u8], &[u8], i32), WireError> {
    let (mut a, mut b, mut n) = (&[][..], &[][..], 0);
    let mut r = Reader::new(buf);
    while let Some((f, v)) = r.next_field()? {
        match (f, v) {
            (1, v) => a = v.bytes()?,
            (2, Value::Varint(_)) => n = v.int32()?,
            (2, v) => b = v.bytes()?,
            _ => {}
        }
    }
    Ok((a, b, n))
}

#[inline]
pub fn varint_len(v: u64) -> usize {
    (64 - (v | 1).leading_zeros() as usize).div_ceil(7)
}

#[inline]
pub fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// A length-delimited field: tag, length, bytes.
#[inline]
pub fn put_bytes(out: &mut Vec<u8>, field: u32, b: &[u8]) {
    put_varint(out, u64::from(field) << 3 | 2);
    put_varint(out, b.len() as u64);
    out.extend_from_slice(b);
}

/// A varint field, omitted when zero (proto3 defaults are not sent).
#[inline]
pub fn put_uint(out: &mut Vec<u8>, field: u32, v: u64) {
    if v != 0 {
        put_varint(out, u64::from(field) << 3);
        put_varint(out, v);
    }
}

/// Starts a nested message field; finish it with [`end`]. The length is
/// patched in place (moving the body only when it is 128 bytes or more).
#[inline]
pub fn begin(out: &mut Vec<u8>, field: u32) -> usize {
    put_varint(out, u64::from(field) << 3 | 2);
    out.push(0);
    out.len()
}

#[inline]
pub fn end(out: &mut Vec<u8>, start: usize) {
    let len = out.len() - start;
    if len < 0x80 {
        out[start - 1] = len as u8;
    } else {
        let mut v = Vec::with_capacity(10);
        put_varint(&mut v, len as u64);
        out.splice(start - 1..start, v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use p4fleet_proto::p4runtime as p4;
    use prost::Message;

    #[test]
    fn writer_round_trips_through_prost() {
        for n in [0usize, 1, 127, 128, 300, 20000] {
            let mut out = Vec::new();
            put_uint(&mut out, 1, 77);
            let at = begin(&mut out, 11);
            out.extend(std::iter::repeat_n(7u8, n));
            end(&mut out, at);
            let te = p4::TableEntry::decode(out.as_slice()).unwrap();
            assert_eq!(te.table_id, 77);
            assert_eq!(te.metadata, vec![7u8; n]);
            assert_eq!(varint_len(n as u64), {
                let mut v = Vec::new();
                put_varint(&mut v, n as u64);
                v.len()
            });
        }
    }
}
