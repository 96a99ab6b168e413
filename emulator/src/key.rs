//! Table keys and the maps both front ends store entries in.

use std::collections::HashMap;

/// Canonical key → the entry as stored (P4Runtime: its canonical encoded
/// `TableEntry`; BFRT: its encoded `TableData`): one allocation per entry,
/// and Read copies it out as it is.
pub(crate) type Entries = HashMap<Key, Box<[u8]>, foldhash::fast::RandomState>;

/// How much a table grows at once when inserts outgrow it.
const GROWTH: usize = 4;

/// Entries to reserve before inserting `n` into a table holding `len`
/// with room for `capacity`: none while they fit; else room for
/// [`GROWTH`] times what the table will hold, within its `size` (P4Info,
/// bfrt.json). Doubling (the map's own growth) rehashed a million-entry
/// bulk load five times, and the kernel zeroed each larger table's fresh
/// pages: a quarter of the emulator's time in that load. Growing fourfold
/// took about a tenth off its CPU there (the last table's pages are zeroed
/// either way; docs/dev/fleet-lab-notes.md). A device's table is sized by
/// its program; growing by four keeps the memory of a table that stops
/// short of its size within four times its entries.
fn reservation(len: usize, capacity: usize, n: usize, size: Option<usize>) -> usize {
    let need = len.saturating_add(n);
    if need <= capacity {
        return 0;
    }
    let target = need.saturating_mul(GROWTH);
    let target = size.map_or(target, |s| target.min(s.max(need)));
    target - len
}

/// Makes room in `entries` (a table of `size`) for `n` more, growing it
/// by [`reservation`]: every insert path of both front ends calls this
/// first, a batch once for all its rows.
pub(crate) fn make_room(entries: &mut Entries, n: usize, size: Option<usize>) {
    entries.reserve(reservation(entries.len(), entries.capacity(), n, size));
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_outgrown_table_grows_by_four_within_its_size() {
        // Fits: nothing reserved.
        assert_eq!(reservation(10, 100, 50, Some(1000)), 0);
        // Outgrown: room for four times what it will hold...
        assert_eq!(
            reservation(30_000, 32_768, 10_000, Some(1 << 20)),
            160_000 - 30_000
        );
        // ...but never past the P4Info size...
        assert_eq!(
            reservation(300_000, 305_000, 10_000, Some(1_000_000)),
            700_000
        );
        // ...unless the batch itself needs more (the inserts past the size
        // are refused one by one, as before).
        assert_eq!(
            reservation(990_000, 1_000_000, 20_000, Some(1_000_000)),
            20_000
        );
        // No size known: four times.
        assert_eq!(reservation(0, 0, 10, None), 40);
    }

    #[test]
    fn one_insert_into_a_full_table_grows_it_fourfold() {
        let mut e = Entries::default();
        make_room(&mut e, 1, Some(1 << 20));
        let first = e.capacity();
        assert!(first >= 4, "{first}");
        for i in 0..=first as u32 {
            make_room(&mut e, 1, Some(1 << 20));
            e.insert(Key::new(&i.to_be_bytes()), Box::default());
        }
        // One step past the first capacity: four times what it then held
        // (doubling would leave it at about twice).
        assert!(
            e.capacity() >= 4 * (first + 1),
            "{first} -> {}",
            e.capacity()
        );
    }
}
