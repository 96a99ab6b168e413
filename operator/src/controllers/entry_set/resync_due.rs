//! Which reconciles of a TableEntrySet need no sync, because the set's
//! last sync already covers them:
//!
//! - a periodic resync left over from an older schedule. kube-runtime
//!   keeps the earlier of two times an object is scheduled for: a set
//!   synced by a change at t (which asks for its next resync at t +
//!   period) still has the resync its sync before asked for, due
//!   somewhere in (t, t + period). That resync would read the whole table
//!   back moments after the change did; at fleet size such leftovers ran
//!   beside a 1 % change of every set (docs/dev/fleet-lab-notes.md).
//! - the set's own status write, echoed back by its watch
//!   (`object_updated` with nothing changed but status): every sync that
//!   wrote status was followed by a second full read-back.
//!
//! Either is pushed out to the resync the last sync asked for (the echo
//! took that resync's place in kube-runtime's queue). Pure bookkeeping;
//! the reconcile decides (`entry_set::reconcile`).

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use kube::runtime::controller::Action;
use p4fleet_crds::TableEntrySet;

use super::super::object_key;

/// How early a periodic reconcile may come and still run (timers and the
/// scheduler's own granularity).
pub const SLACK: Duration = Duration::from_secs(1);

/// What started a reconcile, as far as skipping goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Started {
    /// The reconciler's own requeue (`requeue`).
    Periodic,
    /// A watch event of the set itself (`object_updated`).
    ObjectUpdated,
    /// Anything else (a source, a VirtualSwitch, a device, a retry, unknown).
    Other,
}

impl Started {
    /// From a trigger label of [`crate::reconcile_triggers::trigger_of`].
    pub fn of(trigger: Option<&str>) -> Started {
        match trigger {
            Some("requeue") => Started::Periodic,
            Some("object_updated") => Started::ObjectUpdated,
            _ => Started::Other,
        }
    }
}

/// What changed that a set reads (for the debug log: which watch made a
/// set sync again).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Touch {
    ConfigMap,
    VirtualSwitch,
    Device,
}

/// What the set's last completed sync saw and asked for.
#[derive(Debug, Clone, Copy)]
struct Last {
    /// When it started (what it read, it read after this).
    started: Instant,
    /// Its regular resync (None: it asked for a retry or for none).
    due: Option<Instant>,
    /// [`fingerprint`] of the set it synced.
    fingerprint: u64,
}

/// Each set's (`namespace/name`) last completed sync, and when a watch
/// last said that something the set reads changed.
#[derive(Default)]
pub struct ResyncDue {
    last: Mutex<HashMap<String, Last>>,
    /// kube-runtime folds triggers of an object that is already queued or
    /// running into the one it has (with that one's reason), so a source
    /// change can arrive as a "periodic" or "object_updated" reconcile:
    /// the watch mappers note every trigger here as it happens.
    touched: Mutex<HashMap<String, Instant>>,
}

/// Everything of a set a sync depends on but its status: generation
/// (spec), labels, annotations, finalizers, deletion. Equal fingerprints
/// mean the set changed only in status (and resourceVersion).
pub fn fingerprint(set: &TableEntrySet) -> u64 {
    let m = &set.metadata;
    let mut h = std::hash::DefaultHasher::new();
    m.generation.hash(&mut h);
    m.deletion_timestamp
        .as_ref()
        .map(|t| t.0.as_second())
        .hash(&mut h);
    m.labels.hash(&mut h);
    m.annotations.hash(&mut h);
    m.finalizers.hash(&mut h);
    h.finish()
}

impl ResyncDue {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Last>> {
        self.last.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A sync of the set `key` (as `fingerprint`) that started at
    /// `started` ended at `now` asking to run again after `periodic` (its
    /// regular resync), or at another time or never (None: a retry,
    /// `await_change`).
    pub fn synced(
        &self,
        key: &str,
        fingerprint: u64,
        started: Instant,
        now: Instant,
        periodic: Option<Duration>,
    ) {
        let last = Last {
            started,
            due: periodic.map(|d| now + d),
            fingerprint,
        };
        self.lock().insert(key.to_string(), last);
    }

    /// Something set `key` reads changed at `at` (a source, a
    /// VirtualSwitch, its device): its next reconcile syncs, whatever
    /// reason kube-runtime gives for it.
    pub fn touched(&self, key: &str, at: Instant, by: Touch) {
        tracing::debug!(set = %key, ?by, "touched");
        let mut g = self.touched.lock().unwrap_or_else(|p| p.into_inner());
        g.insert(key.to_string(), at);
    }

    /// How long a reconcile of `key` (now as `fingerprint`) that `started`
    /// at `now` should wait instead of syncing: until the resync the last
    /// sync asked for, when it is a periodic one that comes more than
    /// [`SLACK`] before it, or the set's own status write echoed back.
    /// None (sync now) for everything else, and whenever the last sync
    /// asked for no regular resync (its retry must not be lost).
    pub fn skip(
        &self,
        key: &str,
        started: Started,
        fingerprint: u64,
        now: Instant,
    ) -> Option<Duration> {
        let last = *self.lock().get(key)?;
        let touched = {
            let g = self.touched.lock().unwrap_or_else(|p| p.into_inner());
            g.get(key).copied()
        };
        if touched.is_some_and(|t| t >= last.started) {
            return None;
        }
        let left = last.due?.checked_duration_since(now)?;
        let skip = match started {
            Started::Periodic => left > SLACK,
            Started::ObjectUpdated => fingerprint == last.fingerprint,
            Started::Other => false,
        };
        skip.then_some(left)
    }

    /// Whether set `key` (now as `fingerprint`) is as its last sync left
    /// it, that sync asked for its regular resync, and nothing the set
    /// reads changed since that sync started: what [`super::recheck`] may
    /// answer alone.
    pub fn unchanged(&self, key: &str, fingerprint: u64) -> bool {
        let Some(last) = self.lock().get(key).copied() else {
            return false;
        };
        let g = self.touched.lock().unwrap_or_else(|p| p.into_inner());
        let touched = g.get(key).is_some_and(|t| *t >= last.started);
        last.due.is_some() && last.fingerprint == fingerprint && !touched
    }

    /// Forgets `key` (deleted).
    pub fn forget(&self, key: &str) {
        self.lock().remove(key);
        let mut g = self.touched.lock().unwrap_or_else(|p| p.into_inner());
        g.remove(key);
    }
}

/// For `entry_set::reconcile`: how long to wait instead of syncing `set`
/// ([`ResyncDue::skip`]; never for a set being deleted). Reads the
/// trigger from kube-runtime's span.
pub fn skip(due: &ResyncDue, set: &TableEntrySet) -> Option<Duration> {
    let key = object_key(set);
    if set.metadata.deletion_timestamp.is_some() {
        due.forget(&key);
        return None;
    }
    let started = Started::of(crate::reconcile_triggers::current().as_deref());
    let wait = due.skip(&key, started, fingerprint(set), Instant::now());
    if let Some(w) = wait {
        tracing::debug!(set = %key, ?started, wait = ?w, "covered by the last sync");
    }
    wait
}

/// For `entry_set::sync`: remembers the set as synced and the due time of
/// the resync `action` asks for, if it is the set's regular one
/// (`resync`, the set's own `resyncSeconds` or its counters' interval),
/// not a retry. Returns that regular period, if it is one.
pub fn after_sync(
    due: &ResyncDue,
    set: &TableEntrySet,
    started: Instant,
    action: &Action,
    resync: Duration,
) -> Option<Duration> {
    let own = set
        .spec
        .resync_seconds
        .map(|s| Duration::from_secs(s.into()));
    let counters = set
        .spec
        .counters
        .as_ref()
        .map(|c| Duration::from_secs(c.interval_seconds.into()));
    let regular = [own.or(Some(resync)), counters]
        .into_iter()
        .flatten()
        .filter(|d| !d.is_zero())
        .find(|d| *action == Action::requeue(*d));
    let now = Instant::now();
    due.synced(&object_key(set), fingerprint(set), started, now, regular);
    regular
}

#[cfg(test)]
mod tests {
    use super::*;

    const PERIOD: Duration = Duration::from_secs(30);
    const FP: u64 = 7;

    #[test]
    fn a_resync_left_over_from_before_a_change_waits_for_the_new_due_time() {
        let d = ResyncDue::default();
        let t0 = Instant::now();
        // Synced at t0 (resync due at t0+30), then by a change at t0+20
        // (due at t0+50); the old request fires at t0+30.
        d.synced("ns/a", FP, t0, t0, Some(PERIOD));
        d.synced(
            "ns/a",
            FP,
            t0 + Duration::from_secs(20),
            t0 + Duration::from_secs(20),
            Some(PERIOD),
        );
        let at = t0 + PERIOD;
        let left = Some(Duration::from_secs(20));
        assert_eq!(d.skip("ns/a", Started::Periodic, FP, at), left);
        // A change at that moment still runs.
        assert_eq!(d.skip("ns/a", Started::Other, FP, at), None);
    }

    #[test]
    fn only_an_untouched_unchanged_set_on_its_regular_resync_is_unchanged() {
        let d = ResyncDue::default();
        let t0 = Instant::now();
        assert!(!d.unchanged("ns/a", FP), "never synced");
        d.synced("ns/a", FP, t0, t0, Some(PERIOD));
        assert!(d.unchanged("ns/a", FP));
        assert!(!d.unchanged("ns/a", FP + 1), "spec");
        d.touched("ns/a", t0 + SLACK, Touch::ConfigMap);
        assert!(!d.unchanged("ns/a", FP), "a source");
        // The sync after the touch covers it; a retry is not regular.
        d.synced("ns/a", FP, t0 + PERIOD, t0 + PERIOD, Some(PERIOD));
        assert!(d.unchanged("ns/a", FP));
        d.synced("ns/a", FP, t0 + PERIOD, t0 + PERIOD, None);
        assert!(!d.unchanged("ns/a", FP));
    }

    #[test]
    fn a_resync_on_time_runs() {
        let d = ResyncDue::default();
        let t0 = Instant::now();
        d.synced("ns/a", FP, t0, t0, Some(PERIOD));
        assert_eq!(d.skip("ns/a", Started::Periodic, FP, t0 + PERIOD), None);
        // Within the slack of the due time, or late.
        let nearly = t0 + PERIOD - SLACK / 2;
        assert_eq!(d.skip("ns/a", Started::Periodic, FP, nearly), None);
        let late = t0 + PERIOD * 2;
        assert_eq!(d.skip("ns/a", Started::Periodic, FP, late), None);
    }

    #[test]
    fn the_sets_own_status_write_is_an_echo_a_spec_change_is_not() {
        let d = ResyncDue::default();
        let t0 = Instant::now();
        d.synced("ns/a", FP, t0, t0, Some(PERIOD));
        let soon = t0 + Duration::from_secs(1);
        assert_eq!(
            d.skip("ns/a", Started::ObjectUpdated, FP, soon),
            Some(PERIOD - Duration::from_secs(1)),
            "waits for the resync it displaced"
        );
        assert_eq!(d.skip("ns/a", Started::ObjectUpdated, FP + 1, soon), None);
    }

    #[test]
    fn unknown_retrying_and_forgotten_sets_run() {
        let d = ResyncDue::default();
        let t0 = Instant::now();
        assert_eq!(d.skip("ns/new", Started::Periodic, FP, t0), None);
        // A sync that asked for a retry (device unavailable): the retry
        // comes early by design and runs, and an echo must not take its
        // place.
        d.synced("ns/a", FP, t0, t0, Some(PERIOD));
        d.synced("ns/a", FP, t0, t0, None);
        assert_eq!(d.skip("ns/a", Started::Periodic, FP, t0), None);
        assert_eq!(d.skip("ns/a", Started::ObjectUpdated, FP, t0), None);
        d.synced("ns/b", FP, t0, t0, Some(PERIOD));
        d.forget("ns/b");
        assert_eq!(d.skip("ns/b", Started::Periodic, FP, t0), None);
    }

    #[test]
    fn a_change_folded_into_a_periodic_or_echo_reconcile_still_syncs() {
        let d = ResyncDue::default();
        let t0 = Instant::now();
        let end = t0 + Duration::from_secs(2);
        d.synced("ns/a", FP, t0, end, Some(PERIOD));
        // A source changed while that sync ran (after it read it); the
        // reconcile kube-runtime runs next says "requeue" or
        // "object_updated".
        d.touched("ns/a", t0 + Duration::from_secs(1), Touch::ConfigMap);
        let soon = end + Duration::from_secs(1);
        assert_eq!(d.skip("ns/a", Started::Periodic, FP, soon), None);
        assert_eq!(d.skip("ns/a", Started::ObjectUpdated, FP, soon), None);
        // A touch before the next sync started is covered by it.
        let t1 = end + Duration::from_secs(5);
        d.synced("ns/a", FP, t1, t1, Some(PERIOD));
        let later = t1 + Duration::from_secs(1);
        assert!(d.skip("ns/a", Started::ObjectUpdated, FP, later).is_some());
    }

    #[test]
    fn triggers_map_to_what_started_the_reconcile() {
        assert_eq!(Started::of(Some("requeue")), Started::Periodic);
        assert_eq!(Started::of(Some("object_updated")), Started::ObjectUpdated);
        for t in [
            Some("related:ConfigMap"),
            Some("device_change"),
            Some("error_retry"),
            None,
        ] {
            assert_eq!(Started::of(t), Started::Other, "{t:?}");
        }
    }

    #[test]
    fn a_fingerprint_ignores_status_and_version_only() {
        let mut a = crate::controllers::entry_set::desired::tests::set(Vec::new());
        a.metadata.generation = Some(1);
        let mut b = a.clone();
        b.metadata.resource_version = Some("42".into());
        b.status = Some(Default::default());
        assert_eq!(fingerprint(&a), fingerprint(&b));
        b.metadata.generation = Some(2);
        assert_ne!(fingerprint(&a), fingerprint(&b));
        let mut c = a.clone();
        c.metadata.finalizers = Some(vec!["x".into()]);
        assert_ne!(fingerprint(&a), fingerprint(&c));
    }
}
