//! Idle timeouts of table entries (P4Runtime `TableEntry.idle_timeout_ns`,
//! `time_since_last_hit`, `IdleTimeoutNotification`): per table whose
//! P4Info says `idle_timeout_behavior: NOTIFY_CONTROL`, when each entry
//! with a timeout was last hit. Pure logic over an `Instant` the caller
//! passes in; it lives in the table's state, so a RECONCILE_AND_COMMIT
//! that keeps the table keeps it.
//!
//! An entry that idles out is notified once; a hit (or a MODIFY, which
//! restarts its clock) arms it again. The entry stays in the table: what
//! to do about it is the controller's decision.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::key::Key;

#[derive(Debug, Clone, Copy)]
struct Cell {
    timeout: Duration,
    last_hit: Instant,
    notified: bool,
}

/// The entries of one table that have an idle timeout.
#[derive(Default)]
pub(crate) struct IdleTable {
    cells: HashMap<Key, Cell, foldhash::fast::RandomState>,
}

impl IdleTable {
    /// An INSERT or MODIFY with `timeout_ns` (0: the entry has none): the
    /// entry's clock starts now.
    pub fn set(&mut self, key: &[u8], timeout_ns: i64, now: Instant) {
        if timeout_ns <= 0 {
            self.cells.remove(key);
            return;
        }
        self.cells.insert(
            Key::new(key),
            Cell {
                timeout: Duration::from_nanos(timeout_ns as u64),
                last_hit: now,
                notified: false,
            },
        );
    }

    /// A DELETE.
    pub fn remove(&mut self, key: &[u8]) {
        self.cells.remove(key);
    }

    /// A data plane hit of the entry.
    pub fn hit(&mut self, key: &[u8], now: Instant) {
        if let Some(c) = self.cells.get_mut(key) {
            c.last_hit = now;
            c.notified = false;
        }
    }

    /// Time since the entry's last hit (or its insert); `None` when it has
    /// no idle timeout.
    pub fn elapsed(&self, key: &[u8], now: Instant) -> Option<Duration> {
        self.cells
            .get(key)
            .map(|c| now.saturating_duration_since(c.last_hit))
    }

    /// Keys of the entries that idled out since they were last notified,
    /// marked notified.
    pub fn expire(&mut self, now: Instant) -> Vec<Vec<u8>> {
        let mut out: Vec<Vec<u8>> = self
            .cells
            .iter_mut()
            .filter(|(_, c)| !c.notified && now.saturating_duration_since(c.last_hit) >= c.timeout)
            .map(|(k, c)| {
                c.notified = true;
                k.as_slice().to_vec()
            })
            .collect();
        out.sort();
        out
    }

    /// The next time [`IdleTable::expire`] finds something, if ever.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.cells
            .values()
            .filter(|c| !c.notified)
            .map(|c| c.last_hit + c.timeout)
            .min()
    }

    pub fn is_empty(&self) -> bool {
        self.cells.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_is_notified_once_per_idle_period() {
        let mut t = IdleTable::default();
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        t.set(b"a", 10_000_000, t0);
        t.set(b"b", 20_000_000, t0);
        t.set(b"none", 0, t0);
        assert_eq!(t.next_deadline(), Some(t0 + ms(10)));
        assert!(t.expire(t0 + ms(9)).is_empty());
        assert_eq!(t.expire(t0 + ms(10)), vec![b"a".to_vec()]);
        assert!(t.expire(t0 + ms(15)).is_empty(), "notified once");
        // A hit arms it again and restarts its clock.
        t.hit(b"a", t0 + ms(15));
        assert_eq!(t.elapsed(b"a", t0 + ms(16)), Some(ms(1)));
        assert_eq!(t.expire(t0 + ms(20)), vec![b"b".to_vec()]);
        assert_eq!(t.expire(t0 + ms(25)), vec![b"a".to_vec()]);
        assert_eq!(t.elapsed(b"none", t0), None);
        // Deleted entries are forgotten.
        t.remove(b"a");
        t.remove(b"b");
        assert!(t.is_empty());
        assert_eq!(t.next_deadline(), None);
    }
}
