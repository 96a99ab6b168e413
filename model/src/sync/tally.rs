//! What a sync did, as counters: computed from a [`Plan`] and what the
//! device refused, and added up across targets.

use std::time::Duration;

use super::{Origin, Plan};

/// Timing of a sync's write requests, as the device client reports it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WriteStats {
    /// Write requests sent.
    pub requests: u64,
    /// Wall time of the writes.
    pub elapsed: Duration,
    /// Sum of the per-request latencies (for the mean).
    pub request_latency: Duration,
}

impl WriteStats {
    pub fn add(&mut self, other: WriteStats) {
        self.requests += other.requests;
        self.elapsed += other.elapsed;
        self.request_latency += other.request_latency;
    }
}

/// The counters of one sync of one target, or the sum of several.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SyncTally {
    /// Entries the set desires.
    pub desired: u64,
    /// Desired entries on the device with the desired action afterwards.
    pub applied: u64,
    /// Desired entries that are not: refused by the device, not written
    /// (device unreachable), or held by another set (conflicts).
    pub failed: u64,
    /// Entries the set wanted gone that the device still holds: their
    /// delete was refused or not sent (the device is not exact).
    pub stale: u64,
    /// Updates the device accepted.
    pub written: u64,
    pub inserted: u64,
    pub modified: u64,
    pub deleted: u64,
    pub writes: WriteStats,
}

impl SyncTally {
    /// A sync that wrote nothing: `desired` entries, none known applied.
    pub fn unsynced(desired: usize) -> SyncTally {
        SyncTally {
            desired: desired as u64,
            ..SyncTally::default()
        }
    }

    /// The tally of a sync that wrote `plan`'s updates (all of them were
    /// attempted) and had those of `failed` refused or not sent. Only what
    /// the device accepted counts as written, inserted, modified, deleted
    /// or applied.
    pub fn of(plan: &Plan, failed: &[Origin], writes: WriteStats) -> SyncTally {
        let failed_set: std::collections::HashSet<Origin> = failed.iter().copied().collect();
        let ok = |o: Origin| !failed_set.contains(&o);
        let count = |v: &[usize], origin: fn(usize) -> Origin| {
            v.iter().filter(|&&i| ok(origin(i))).count() as u64
        };
        let (inserted, modified, deleted) = if failed.is_empty() {
            (
                plan.inserts.len() as u64,
                plan.modifies.len() as u64,
                plan.deletes.len() as u64,
            )
        } else {
            (
                count(&plan.inserts, Origin::Insert),
                count(&plan.modifies, Origin::Modify),
                count(&plan.deletes, Origin::Delete),
            )
        };
        let failed_desired = failed
            .iter()
            .filter(|o| matches!(o, Origin::Insert(_) | Origin::Modify(_)))
            .count() as u64;
        let stale = failed
            .iter()
            .filter(|o| matches!(o, Origin::Delete(_)))
            .count() as u64;
        let desired = plan.inserts.len() + plan.modifies.len() + plan.conflicts.len();
        SyncTally {
            desired: (desired + plan.unchanged) as u64,
            applied: plan.unchanged as u64 + inserted + modified,
            failed: plan.conflicts.len() as u64 + failed_desired,
            stale,
            written: (plan.writes() as u64).saturating_sub(failed.len() as u64),
            inserted,
            modified,
            deleted,
            writes,
        }
    }

    /// Adds another tally (e.g. the next target's).
    pub fn add(&mut self, other: &SyncTally) {
        self.desired += other.desired;
        self.applied += other.applied;
        self.failed += other.failed;
        self.stale += other.stale;
        self.written += other.written;
        self.inserted += other.inserted;
        self.modified += other.modified;
        self.deleted += other.deleted;
        self.writes.add(other.writes);
    }

    /// Updates that changed the device (inserted + modified + deleted).
    pub fn changes(&self) -> u64 {
        self.inserted + self.modified + self.deleted
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan() -> Plan {
        Plan {
            inserts: vec![0, 1, 2],
            modifies: vec![3, 4],
            deletes: vec![0, 7],
            conflicts: vec![(5, 9)],
            unchanged: 4,
        }
    }

    fn stats(ms: u64) -> WriteStats {
        WriteStats {
            requests: 2,
            elapsed: Duration::from_millis(ms),
            request_latency: Duration::from_millis(2 * ms),
        }
    }

    #[test]
    fn a_clean_sync_applies_everything_but_conflicts() {
        let t = SyncTally::of(&plan(), &[], stats(10));
        assert_eq!(
            t,
            SyncTally {
                desired: 10,
                applied: 9,
                failed: 1,
                stale: 0,
                written: 7,
                inserted: 3,
                modified: 2,
                deleted: 2,
                writes: stats(10),
            }
        );
        assert_eq!(t.changes(), 7);
    }

    #[test]
    fn refused_updates_count_neither_as_written_nor_applied() {
        let failed = [Origin::Insert(1), Origin::Modify(4), Origin::Delete(7)];
        let t = SyncTally::of(&plan(), &failed, stats(10));
        assert_eq!((t.inserted, t.modified, t.deleted), (2, 1, 1));
        assert_eq!(t.written, 4);
        assert_eq!(t.applied, 4 + 2 + 1);
        // A failed delete is no desired entry: only the insert and modify.
        assert_eq!(t.failed, 1 + 2);
        // ... but the entry it should have removed is still there.
        assert_eq!(t.stale, 1);
        assert_eq!(t.desired, 10);
    }

    #[test]
    fn tallies_add_up() {
        let mut sum = SyncTally::unsynced(5);
        assert_eq!(sum.applied + sum.written + sum.changes(), 0);
        sum.add(&SyncTally::of(&plan(), &[], stats(10)));
        sum.add(&SyncTally::of(&plan(), &[Origin::Insert(0)], stats(5)));
        assert_eq!(sum.desired, 25);
        assert_eq!(sum.written, 7 + 6);
        assert_eq!(sum.failed, 1 + 2);
        assert_eq!(sum.inserted, 3 + 2);
        assert_eq!(sum.writes.requests, 4);
        assert_eq!(sum.writes.elapsed, Duration::from_millis(15));
        assert_eq!(sum.writes.request_latency, Duration::from_millis(30));
    }
}
