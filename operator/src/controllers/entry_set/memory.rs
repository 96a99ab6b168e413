//! What the TableEntrySet controller remembers between syncs of a target,
//! held in the [`Context`](crate::context::Context) (no process-wide
//! state). In memory only: after an operator restart the first sync of a
//! target counts no drift. What a set owns on BFRT is durable, in its
//! ownership record ([`crate::ownership`]), not here.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

use p4fleet_client::tuning::Tuner;
use p4fleet_crds::TableEntrySetStatus;

/// One target of one set: the set's `namespace/name` and the VirtualSwitch.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TargetKey {
    pub set: String,
    pub virtual_switch: String,
}

#[derive(Default)]
struct Remembered {
    /// Digest of the desired entries at the last sync that ended with all
    /// of them applied.
    synced: Option<[u8; 32]>,
}

/// Per-target memory of every TableEntrySet in this process.
#[derive(Default)]
pub struct SyncMemory {
    targets: Mutex<HashMap<TargetKey, Remembered>>,
    /// Sets (`namespace/name`) reconciled by this process.
    seen: Mutex<HashSet<String>>,
    /// Per set: the resourceVersions a sync replaced and the status it
    /// wrote. A reconcile that starts from one of those versions again (the
    /// cache has not seen the write yet, e.g. right after a device-change
    /// trigger) builds on the written status instead of the stale one.
    pub written: crate::controllers::written::Written<TableEntrySetStatus>,
    /// `batchSize`/`maxInFlight: Auto`: per Switch and which of the two
    /// are Auto, what its writes have tuned them to.
    tuners: Mutex<HashMap<(String, bool, bool), Tuner>>,
    /// Each set's assembled desired entries, while their inputs hold.
    pub desired: super::desired_cache::DesiredCache,
}

/// Which write settings of a set are Auto.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Auto {
    pub batch: bool,
    pub in_flight: bool,
}

impl Auto {
    pub fn any(self) -> bool {
        self.batch || self.in_flight
    }
}

impl SyncMemory {
    fn with<T>(&self, f: impl FnOnce(&mut HashMap<TargetKey, Remembered>) -> T) -> T {
        f(&mut self.targets.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Records the end of a sync of desired entries with `digest`,
    /// `complete` when all of them were applied. Returns whether the
    /// previous sync had completed the same desired entries, so that the
    /// updates of this one repaired drift.
    pub fn record_sync(&self, key: &TargetKey, digest: [u8; 32], complete: bool) -> bool {
        self.with(|m| {
            let r = m.entry(key.clone()).or_default();
            let same = r.synced == Some(digest);
            r.synced = complete.then_some(digest);
            same
        })
    }

    /// Whether this is the first time this process reconciles `set`: its
    /// status was written by an earlier process (or none) and is not
    /// confirmed yet.
    pub fn first_sight(&self, set: &str) -> bool {
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        seen.insert(set.to_string())
    }

    /// The batch size and requests in flight Auto uses next on `switch`
    /// (`start` until its writes have tuned them; fixed values stay).
    pub fn tuned(&self, switch: &str, auto: Auto, start: (usize, usize)) -> (usize, usize) {
        let (b, k) = self.with_tuner(switch, auto, start, |t| t.current());
        (
            if auto.batch { b } else { start.0 },
            if auto.in_flight { k } else { start.1 },
        )
    }

    /// Whether Auto's climb on `switch` has settled (false before any
    /// write tuned it).
    pub fn settled(&self, switch: &str, auto: Auto) -> bool {
        let m = self.tuners.lock().unwrap_or_else(|e| e.into_inner());
        m.get(&(switch.to_string(), auto.batch, auto.in_flight))
            .is_some_and(Tuner::settled)
    }

    /// Records a write of `updates` to `switch` that took `elapsed`.
    pub fn observe_write(
        &self,
        switch: &str,
        auto: Auto,
        start: (usize, usize),
        updates: usize,
        elapsed: std::time::Duration,
    ) {
        self.with_tuner(switch, auto, start, |t| t.observe(updates, elapsed));
    }

    fn with_tuner<T>(
        &self,
        switch: &str,
        auto: Auto,
        start: (usize, usize),
        f: impl FnOnce(&mut Tuner) -> T,
    ) -> T {
        let mut m = self.tuners.lock().unwrap_or_else(|e| e.into_inner());
        let t = m
            .entry((switch.to_string(), auto.batch, auto.in_flight))
            .or_insert_with(|| Tuner::new(start.0, start.1, auto.batch, auto.in_flight));
        f(t)
    }

    /// Forgets a deleted Switch's batch tuners.
    pub fn forget_switch(&self, switch: &str) {
        self.tuners
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|(s, _, _), _| s != switch);
    }

    /// Forgets every Switch `gone` says is deleted (after the Switches'
    /// watch relisted: a deletion may have been missed).
    pub fn forget_switches_where(&self, gone: impl Fn(&str) -> bool) {
        self.tuners
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|(s, _, _), _| !gone(s));
    }

    /// Forgets a deleted set.
    pub fn forget_set(&self, set: &str) {
        self.seen
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(set);
        self.written.forget(set);
        self.with(|m| m.retain(|k, _| k.set != set));
        self.desired.forget(set);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(set: &str, vs: &str) -> TargetKey {
        TargetKey {
            set: set.into(),
            virtual_switch: vs.into(),
        }
    }

    #[test]
    fn drift_counts_only_after_a_complete_sync_of_the_same_entries() {
        let m = SyncMemory::default();
        let a = key("ns/s", "vs");
        assert!(!m.record_sync(&a, [1; 32], true), "first sync");
        assert!(m.record_sync(&a, [1; 32], true), "same entries again");
        assert!(!m.record_sync(&a, [2; 32], false), "spec changed");
        assert!(
            !m.record_sync(&a, [2; 32], true),
            "the previous sync was incomplete"
        );
        assert!(m.record_sync(&a, [2; 32], true));
        assert!(!m.record_sync(&key("ns/s", "other"), [2; 32], true));
    }

    #[test]
    fn a_set_is_seen_first_once_per_process_and_again_after_it_is_forgotten() {
        let m = SyncMemory::default();
        assert!(m.first_sight("ns/s"));
        assert!(!m.first_sight("ns/s"));
        assert!(m.first_sight("ns/t"));
        m.forget_set("ns/s");
        assert!(m.first_sight("ns/s"));
    }

    #[test]
    fn auto_settings_are_tuned_per_switch_and_fixed_ones_kept() {
        let m = SyncMemory::default();
        let both = Auto {
            batch: true,
            in_flight: true,
        };
        let batch_only = Auto {
            batch: true,
            in_flight: false,
        };
        assert_eq!(m.tuned("a", both, (1000, 4)), (1024, 4));
        // Large writes that are much faster per entry at larger batches
        // (a fixed cost per request): the batch grows on "a" only.
        for _ in 0..6 {
            let (b, _) = m.tuned("a", both, (1000, 4));
            let secs = 1e-3 * (262_144 / b) as f64 + 1e-7 * 262_144.0;
            m.observe_write(
                "a",
                both,
                (1000, 4),
                262_144,
                std::time::Duration::from_secs_f64(secs),
            );
        }
        assert!(m.tuned("a", both, (1000, 4)).0 > 1024);
        assert!(!m.settled("a", both), "still climbing");
        assert!(!m.settled("c", both), "never written");
        assert_eq!(m.tuned("b", both, (1000, 4)), (1024, 4));
        m.forget_switch("a");
        assert_eq!(m.tuned("a", both, (1000, 4)), (1024, 4), "forgotten");
        assert_eq!(
            m.tuned("a", batch_only, (1000, 6)).1,
            6,
            "fixed in flight kept"
        );
    }
}
