//! Downloaded artifacts by sha256, bounded by their total size: the least
//! recently used go first. Only bytes whose digest was checked are put in,
//! so a hit is exactly what the spec pins (resyncs and every Switch running
//! the program share one download).

use std::collections::HashMap;
use std::sync::Arc;

/// The cache policy; no I/O, no locking (the caller holds it behind one).
#[derive(Debug, Default)]
pub struct DigestCache {
    capacity: u64,
    size: u64,
    /// Use counter; larger is more recent.
    clock: u64,
    entries: HashMap<String, (Arc<Vec<u8>>, u64)>,
}

impl DigestCache {
    /// A cache of at most `capacity` bytes (0: nothing is kept).
    pub fn new(capacity: u64) -> Self {
        DigestCache {
            capacity,
            ..Default::default()
        }
    }

    /// The bytes of `sha256`, marked as just used.
    pub fn get(&mut self, sha256: &str) -> Option<Arc<Vec<u8>>> {
        self.clock += 1;
        let clock = self.clock;
        self.entries.get_mut(sha256).map(|(b, used)| {
            *used = clock;
            b.clone()
        })
    }

    /// Keeps `bytes` as `sha256`, evicting the least recently used until
    /// they fit. An artifact larger than the whole cache is not kept.
    pub fn put(&mut self, sha256: &str, bytes: Arc<Vec<u8>>) {
        let len = bytes.len() as u64;
        if len > self.capacity {
            return;
        }
        if let Some((old, _)) = self.entries.remove(sha256) {
            self.size -= old.len() as u64;
        }
        while self.size + len > self.capacity {
            let Some(oldest) = self
                .entries
                .iter()
                .min_by_key(|(_, (_, used))| *used)
                .map(|(k, _)| k.clone())
            else {
                break;
            };
            if let Some((b, _)) = self.entries.remove(&oldest) {
                self.size -= b.len() as u64;
            }
        }
        self.clock += 1;
        self.size += len;
        self.entries.insert(sha256.into(), (bytes, self.clock));
    }

    /// Bytes held.
    #[cfg(test)]
    pub fn size(&self) -> u64 {
        self.size
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(n: usize) -> Arc<Vec<u8>> {
        Arc::new(vec![0; n])
    }

    #[test]
    fn least_recently_used_goes_first_and_the_size_stays_bounded() {
        let mut c = DigestCache::new(100);
        c.put("a", bytes(40));
        c.put("b", bytes(40));
        assert!(c.get("a").is_some(), "a is now more recent than b");
        c.put("c", bytes(40));
        assert!(c.get("b").is_none(), "b was the least recently used");
        assert!(c.get("a").is_some() && c.get("c").is_some());
        assert_eq!(c.size(), 80);

        // Replacing an entry does not count it twice.
        c.put("a", bytes(50));
        assert_eq!(c.size(), 90);
        // One larger than the cache is not kept, and evicts nothing.
        c.put("huge", bytes(101));
        assert!(c.get("huge").is_none());
        assert_eq!(c.size(), 90);
        // One that needs all the room evicts everything else.
        c.put("all", bytes(100));
        assert_eq!(c.size(), 100);
        assert!(c.get("a").is_none() && c.get("c").is_none());
        assert!(c.get("all").is_some());

        let mut off = DigestCache::new(0);
        off.put("a", bytes(1));
        assert!(off.get("a").is_none(), "capacity 0 keeps nothing");
    }
}
