//! `ByteStr`: an immutable byte string stored inline when short.
//!
//! Match values and action parameters are almost always short (MACs,
//! IPv4 addresses, ports; canonical form drops leading zeros); keeping them
//! inline avoids one heap allocation per value when hundreds of thousands
//! of entries are parsed and compared. `ByteStr` is 16 bytes: up to 15
//! bytes inline, longer values (e.g. a full IPv6 address) behind one thin
//! pointer. Operator memory per entry is dominated by these (docs/benchmarks.md).

use std::cmp::Ordering;
use std::fmt;
use std::hash::{Hash, Hasher};

const INLINE: usize = 15;

/// An immutable byte string; inline up to 15 bytes, boxed beyond.
#[derive(Clone)]
pub struct ByteStr(Repr);

/// Inline length. An enum (not a `u8`) so its unused values give the
/// compiler a niche for `Repr`'s tag: `Repr` is then 16 bytes, not 24.
#[derive(Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
enum Len {
    L0,
    L1,
    L2,
    L3,
    L4,
    L5,
    L6,
    L7,
    L8,
    L9,
    L10,
    L11,
    L12,
    L13,
    L14,
    L15,
}

const LENS: [Len; INLINE + 1] = [
    Len::L0,
    Len::L1,
    Len::L2,
    Len::L3,
    Len::L4,
    Len::L5,
    Len::L6,
    Len::L7,
    Len::L8,
    Len::L9,
    Len::L10,
    Len::L11,
    Len::L12,
    Len::L13,
    Len::L14,
    Len::L15,
];

#[derive(Clone)]
enum Repr {
    Inline { len: Len, buf: [u8; INLINE] },
    // A thin pointer (8 bytes) so the variant fits beside the niche.
    Heap(Box<Box<[u8]>>),
}

impl ByteStr {
    /// Copies `bytes` as they are (no canonicalisation).
    pub fn new(bytes: &[u8]) -> Self {
        if bytes.len() <= INLINE {
            let mut buf = [0u8; INLINE];
            buf[..bytes.len()].copy_from_slice(bytes);
            ByteStr(Repr::Inline {
                len: LENS[bytes.len()],
                buf,
            })
        } else {
            ByteStr(Repr::Heap(Box::new(bytes.into())))
        }
    }

    /// The canonical P4Runtime form of a big-endian number: leading zero
    /// bytes removed, but at least one byte (`\x00` for zero).
    pub fn canonical(bytes: &[u8]) -> Self {
        Self::new(canonical_slice(bytes))
    }

    pub fn as_slice(&self) -> &[u8] {
        match &self.0 {
            Repr::Inline { len, buf } => &buf[..*len as u8 as usize],
            Repr::Heap(b) => b,
        }
    }

    pub fn len(&self) -> usize {
        self.as_slice().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn to_vec(&self) -> Vec<u8> {
        self.as_slice().to_vec()
    }

    /// Whether the number is zero (any length, including empty).
    pub fn is_zero(&self) -> bool {
        self.as_slice().iter().all(|b| *b == 0)
    }

    /// Number of significant bits of the big-endian number (0 for zero).
    pub fn bit_len(&self) -> u32 {
        bit_len(self.as_slice())
    }
}

/// Strips leading zero bytes, keeping at least one byte if `bytes` is non-empty.
pub(crate) fn canonical_slice(bytes: &[u8]) -> &[u8] {
    let first = bytes.iter().position(|b| *b != 0);
    match first {
        Some(i) => &bytes[i..],
        None if bytes.is_empty() => bytes,
        None => &bytes[bytes.len() - 1..],
    }
}

/// Significant bits of a big-endian number.
pub(crate) fn bit_len(bytes: &[u8]) -> u32 {
    match bytes.iter().position(|b| *b != 0) {
        Some(i) => (bytes.len() - i - 1) as u32 * 8 + (8 - bytes[i].leading_zeros()),
        None => 0,
    }
}

impl From<&[u8]> for ByteStr {
    fn from(b: &[u8]) -> Self {
        ByteStr::new(b)
    }
}

impl From<Vec<u8>> for ByteStr {
    fn from(b: Vec<u8>) -> Self {
        if b.len() <= INLINE {
            ByteStr::new(&b)
        } else {
            ByteStr(Repr::Heap(Box::new(b.into_boxed_slice())))
        }
    }
}

impl AsRef<[u8]> for ByteStr {
    fn as_ref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl PartialEq for ByteStr {
    fn eq(&self, other: &Self) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl Eq for ByteStr {}

impl Hash for ByteStr {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_slice().hash(state)
    }
}

impl PartialOrd for ByteStr {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for ByteStr {
    fn cmp(&self, other: &Self) -> Ordering {
        self.as_slice().cmp(other.as_slice())
    }
}

impl fmt::Debug for ByteStr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("0x")?;
        for b in self.as_slice() {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inline_and_heap_compare_equal() {
        let long: Vec<u8> = (0..40).collect();
        assert_eq!(ByteStr::new(&long), ByteStr::from(long.clone()));
        assert_eq!(ByteStr::new(&long).as_slice(), &long[..]);
        assert_eq!(ByteStr::new(&[1, 2]).as_slice(), &[1, 2]);
    }

    #[test]
    fn sixteen_bytes_and_boundaries() {
        assert_eq!(std::mem::size_of::<ByteStr>(), 16);
        for n in [0, 1, 14, 15, 16, 17] {
            let v: Vec<u8> = (1..=n as u8).collect();
            assert_eq!(ByteStr::new(&v).as_slice(), &v[..]);
            assert_eq!(ByteStr::from(v.clone()).len(), n);
        }
    }

    #[test]
    fn canonical_strips_leading_zeros() {
        assert_eq!(ByteStr::canonical(&[0, 0, 1, 0]).as_slice(), &[1, 0]);
        assert_eq!(ByteStr::canonical(&[0, 0, 0]).as_slice(), &[0]);
        assert_eq!(ByteStr::canonical(&[]).as_slice(), &[] as &[u8]);
    }

    #[test]
    fn bit_lengths() {
        assert_eq!(bit_len(&[0]), 0);
        assert_eq!(bit_len(&[1]), 1);
        assert_eq!(bit_len(&[0, 0x80]), 8);
        assert_eq!(bit_len(&[1, 0xff]), 9);
        assert_eq!(bit_len(&[0xff; 4]), 32);
    }
}
