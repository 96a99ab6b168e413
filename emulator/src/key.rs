//! Table keys and the maps both front ends store entries in.

use std::collections::HashMap;

/// Canonical key → the entry as stored (P4Runtime: its canonical encoded
/// `TableEntry`; BFRT: its encoded `TableData`): one allocation per entry,
/// and Read copies it out as it is.
pub(crate) type Entries = HashMap<Key, Box<[u8]>, foldhash::fast::RandomState>;

/// Maps keyed by table, action or field ids, looked up per update:
/// foldhash, not SipHash.
pub type IdMap<T> = HashMap<u32, T, foldhash::fast::RandomState>;

/// Match kinds both front ends implement (P4Info and bfrt.json name the
/// same five).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MatchKind {
    Exact,
    Lpm,
    Ternary,
    Range,
    Optional,
}

impl MatchKind {
    /// Bytes a field of this kind takes in a canonical key: the value,
    /// plus a 2-byte prefix length (LPM), a mask or high bound (ternary,
    /// range) or a validity byte (optional).
    pub fn key_len(self, nbytes: usize) -> usize {
        match self {
            MatchKind::Exact => nbytes,
            MatchKind::Lpm => nbytes + 2,
            MatchKind::Ternary | MatchKind::Range => 2 * nbytes,
            MatchKind::Optional => 1 + nbytes,
        }
    }
}

const KEY_INLINE: usize = 22;

/// A canonical key, stored inline when short (most tables' keys are a few
/// bytes): one allocation fewer per stored entry than a boxed slice.
/// Hashes and compares as its bytes, so maps are looked up by `&[u8]`.
#[derive(Clone)]
pub(crate) enum Key {
    Inline { len: u8, buf: [u8; KEY_INLINE] },
    Heap(Box<[u8]>),
}

impl Key {
    pub fn new(b: &[u8]) -> Key {
        if b.len() <= KEY_INLINE {
            let mut buf = [0u8; KEY_INLINE];
            buf[..b.len()].copy_from_slice(b);
            Key::Inline {
                len: b.len() as u8,
                buf,
            }
        } else {
            Key::Heap(b.into())
        }
    }

    pub fn as_slice(&self) -> &[u8] {
        match self {
            Key::Inline { len, buf } => &buf[..*len as usize],
            Key::Heap(b) => b,
        }
    }
}

impl std::borrow::Borrow<[u8]> for Key {
    fn borrow(&self) -> &[u8] {
        self.as_slice()
    }
}

impl std::hash::Hash for Key {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.as_slice().hash(state)
    }
}

impl PartialEq for Key {
    fn eq(&self, other: &Key) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl Eq for Key {}
