//! Direct counters as the data plane counts them: one [`CounterCell`] per
//! table entry, shared (`Arc`) between the P4Runtime table store that owns
//! it (`p4runtime::resources`) and the compiled tables that count hits in
//! it, so a hit costs two relaxed atomic adds and no lock, and a table
//! recompile keeps the counts.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// One direct counter's packets and bytes.
#[derive(Debug, Default)]
pub struct CounterCell {
    pub packets: AtomicU64,
    pub bytes: AtomicU64,
}

impl CounterCell {
    /// One hit of a packet of `len` bytes.
    #[inline]
    pub fn count(&self, len: u64) {
        self.packets.fetch_add(1, Ordering::Relaxed);
        self.bytes.fetch_add(len, Ordering::Relaxed);
    }

    /// `(packets, bytes)`.
    pub fn load(&self) -> (u64, u64) {
        (
            self.packets.load(Ordering::Relaxed),
            self.bytes.load(Ordering::Relaxed),
        )
    }

    pub fn store(&self, packets: u64, bytes: u64) {
        self.packets.store(packets, Ordering::Relaxed);
        self.bytes.store(bytes, Ordering::Relaxed);
    }
}

/// The direct counter of each entry of a `TableSnapshot`, by entry index
/// (empty: the table has none). Two are equal when they share the same
/// cells.
#[derive(Debug, Clone, Default)]
pub struct DirectCounters(pub Vec<Option<Arc<CounterCell>>>);

impl PartialEq for DirectCounters {
    fn eq(&self, other: &DirectCounters) -> bool {
        self.0.len() == other.0.len()
            && self.0.iter().zip(&other.0).all(|(a, b)| match (a, b) {
                (Some(a), Some(b)) => Arc::ptr_eq(a, b),
                (None, None) => true,
                _ => false,
            })
    }
}

impl Eq for DirectCounters {}

impl DirectCounters {
    /// The cell of entry `i`, if it has one.
    pub fn get(&self, i: usize) -> Option<&Arc<CounterCell>> {
        self.0.get(i)?.as_ref()
    }
}
