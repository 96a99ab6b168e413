//! What the TableEntrySet controller remembers between syncs of a target,
//! held in the [`Context`](crate::context::Context) (no process-wide
//! state). In memory only: after an operator restart the first sync of a
//! target counts no drift. What a set owns on BFRT is durable, in its
//! ownership record ([`crate::ownership`]), not here.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

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
    /// Per set: the resourceVersion a sync started from and the status it
    /// wrote. A reconcile that starts from that same version again (the
    /// cache has not seen the write yet, e.g. right after a device-change
    /// trigger) builds on the written status instead of the stale one.
    written: Mutex<HashMap<String, (Vec<String>, TableEntrySetStatus)>>,
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

    /// Remembers that a sync wrote `status` over each of `replaced` (the
    /// resourceVersion it started from and those of its own intermediate
    /// status writes).
    pub fn remember_written(&self, set: &str, replaced: Vec<String>, status: TableEntrySetStatus) {
        self.written
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(set.to_string(), (replaced, status));
    }

    /// The status this process wrote for `set` if the object at hand is
    /// still the version that write started from (so its status is stale).
    pub fn written_over(&self, set: &str, resource_version: &str) -> Option<TableEntrySetStatus> {
        let w = self.written.lock().unwrap_or_else(|e| e.into_inner());
        w.get(set)
            .filter(|(replaced, _)| replaced.iter().any(|rv| rv == resource_version))
            .map(|(_, st)| st.clone())
    }

    /// Forgets a deleted set.
    pub fn forget_set(&self, set: &str) {
        self.seen
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(set);
        self.written
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(set);
        self.with(|m| m.retain(|k, _| k.set != set));
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
    fn a_status_written_over_a_version_replaces_only_that_version() {
        let m = SyncMemory::default();
        let st = TableEntrySetStatus {
            last_sync_updates: Some(3),
            ..Default::default()
        };
        assert_eq!(m.written_over("ns/s", "10"), None);
        // Started from 10, marked Syncing at 11, then wrote `st` (12).
        m.remember_written("ns/s", vec!["10".into(), "11".into()], st.clone());
        assert_eq!(m.written_over("ns/s", "10"), Some(st.clone()));
        assert_eq!(m.written_over("ns/s", "11"), Some(st));
        // The cache has caught up (or someone else wrote): trust it.
        assert_eq!(m.written_over("ns/s", "12"), None);
        m.forget_set("ns/s");
        assert_eq!(m.written_over("ns/s", "10"), None);
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
}
