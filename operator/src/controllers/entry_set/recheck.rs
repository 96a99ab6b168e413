//! An idle set's periodic resync as its read-back alone, run by a task
//! of its own (`controllers::schedule`), outside kube-runtime's loop.
//!
//! A set whose last sync found every target holding exactly its desired
//! entries, compared as bytes ([`super::read_check`]), and that keeps
//! nothing on its devices but entries (no default action, counters,
//! meters, registers, action profile, digests, learning, idle timeouts,
//! plan, or rollout in motion), needs at its next resyncs only that
//! read-back and comparison, as long as nothing the set reads has changed
//! since (no watch touched it, its spec and metadata are the same:
//! [`super::resync_due`], and each target's Switch is the one it read).
//! Such a sync leaves a [`Note`]; its reconcile asks kube-runtime to come
//! back only after `--full-resync-every` periods (default
//! [`DEFAULT_FULL_EVERY`]), and this task rechecks the set every period in
//! between. That skips kube-runtime's scheduling, the
//! dereference, the parse lookups, the feature stages, the status build
//! and the ownership record: most of an idle set's cost
//! (docs/performance.md, "Idle cost").
//!
//! A difference or a failed read reconciles the set at once (the full
//! sync reads again and repairs); a change of the set or of what it reads
//! reconciles it through its watches, and this task lets it be. The notes
//! live in memory only: a new process starts with full syncs.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;
use p4fleet_client::EntitySum;
use p4fleet_crds::TableEntrySetSpec;
use tokio::sync::broadcast;
use tokio::time::Instant;

use super::SetCtx;
use super::apply::Outcome;
use super::dereference::Target;
use super::desired::PerTarget;
use super::resync_due;
use crate::controllers::Shutdown;
use crate::controllers::schedule::Queue;
use crate::fleet::slot_claims;

/// One resync in this many is the full sync (kube-runtime's requeue), the
/// others rechecks, unless `--full-resync-every` says otherwise (1: every
/// resync is a full sync, no rechecks).
pub const DEFAULT_FULL_EVERY: u32 = 10;

/// Rechecks in flight at once.
const IN_FLIGHT: usize = 64;

/// What one target's read-back must hold.
#[derive(Debug, Clone, PartialEq)]
pub struct Check {
    pub virtual_switch: String,
    pub switch: String,
    /// The Switch's resourceVersion the last sync read.
    pub switch_version: Option<String>,
    pub slot: u32,
    pub first_pipe: Option<u32>,
    pub table: u32,
    /// The desired entries' count and wire sum with the set's tag.
    pub entries: usize,
    pub sum: EntitySum,
}

/// A set's last full sync, as far as its rechecks go.
#[derive(Debug, Clone)]
pub struct Note {
    /// [`resync_due::fingerprint`] of the set it synced.
    pub fingerprint: u64,
    /// Its regular resync period.
    pub period: Duration,
    /// When it ended: the rechecks are due a period apart from here.
    pub synced_at: Instant,
    pub checks: Arc<[Check]>,
    /// Rechecks since that sync.
    pub rechecks: u32,
    /// One resync in this many is the full sync.
    pub full_every: u32,
}

impl Note {
    /// When the next recheck is due (None: the full sync is next).
    pub fn next_at(&self) -> Option<Instant> {
        let n = self.rechecks + 1;
        (n < self.full_every).then(|| self.synced_at + self.period * n)
    }
}

/// What a recheck found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Every target holds its entries: nothing to do.
    Held,
    /// A target does not, or could not be read, or its Switch changed:
    /// the set is reconciled.
    Differed,
    /// Not rechecked here (gone, changed, or its full sync is next).
    Dropped,
}

/// The notes of the sets that may be rechecked, by `namespace/name`, their
/// schedule, and who hears of differences.
pub struct Rechecks {
    notes: Mutex<HashMap<String, Note>>,
    queue: Queue,
    differed: broadcast::Sender<String>,
}

impl Rechecks {
    /// Rechecks of sets resynced about every `period` (`--resync-seconds`).
    pub fn new(period: Duration) -> Rechecks {
        Rechecks {
            notes: Mutex::default(),
            queue: Queue::new(period),
            differed: broadcast::channel(4096).0,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Note>> {
        self.notes.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Keys of sets whose recheck found a difference, from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<String> {
        self.differed.subscribe()
    }

    /// After a full sync of `key`: its note, queued for its first
    /// recheck, or none (it may not be rechecked).
    pub fn noted(&self, key: &str, note: Option<Note>) {
        let Some(n) = note else {
            self.forget(key);
            return;
        };
        let at = n.next_at();
        self.lock().insert(key.to_string(), n);
        if let Some(at) = at {
            self.queue.add(key, at);
        }
    }

    /// Takes `key`'s turn now: its checks when the set is `unchanged`
    /// and still as its note saw it (`fingerprint`). The turn counts
    /// either way, so a set that waits for its sync (touched, its
    /// reconcile not yet started) comes up again a period later rather
    /// than at once. None when it has no note or its full sync is next.
    pub fn take(&self, key: &str, fingerprint: Option<u64>) -> Option<Arc<[Check]>> {
        let mut g = self.lock();
        let n = g.get_mut(key)?;
        n.next_at()?;
        n.rechecks += 1;
        (fingerprint == Some(n.fingerprint)).then(|| n.checks.clone())
    }

    /// Forgets `key` (deleted, or a full sync began).
    pub fn forget(&self, key: &str) {
        self.lock().remove(key);
    }

    fn next_at(&self, key: &str) -> Option<Instant> {
        self.lock().get(key).and_then(Note::next_at)
    }

    /// Ends a recheck of `key`: queued again while its note has rechecks
    /// left; a difference forgets the note and reconciles the set.
    fn settle(&self, key: &str, verdict: Verdict) {
        if verdict == Verdict::Differed {
            self.forget(key);
        }
        let again = self.next_at(key);
        self.queue.finish(key, again);
        // A sync that noted the set while this recheck held its place in
        // the queue could not queue it: it is queued now.
        if again.is_none()
            && let Some(at) = self.next_at(key)
        {
            self.queue.add(key, at);
        }
        if verdict == Verdict::Differed {
            let _ = self.differed.send(key.to_string());
        }
    }

    /// Rechecks the noted sets as they come due, until `shutdown`.
    pub async fn run(ctx: Arc<SetCtx>, shutdown: Shutdown) {
        let this = &ctx.own.rechecks;
        let check = |key: String| {
            let ctx = ctx.clone();
            async move {
                let verdict = recheck(&ctx, &key).await;
                (key, verdict)
            }
        };
        let settle = |key: String, verdict| {
            if verdict != Verdict::Dropped {
                ctx.metrics.entry_set_recheck(verdict == Verdict::Held);
            }
            tracing::debug!(set = %key, ?verdict, "recheck");
            this.settle(&key, verdict);
        };
        this.queue.run(IN_FLIGHT, shutdown, check, settle).await;
    }
}

/// Whether the set keeps nothing on its devices but its entries, so that
/// its read-back covers all of it.
pub fn entries_only(s: &TableEntrySetSpec) -> bool {
    s.default_action.is_none()
        && s.counters.is_none()
        && s.meters.is_empty()
        && s.registers.is_empty()
        && s.action_profile.is_none()
        && s.digests.is_empty()
        && s.learn.is_none()
        && !s.plan
}

/// What a full sync found, for [`note`].
pub struct Synced<'a> {
    pub spec: &'a TableEntrySetSpec,
    pub fingerprint: u64,
    /// The regular resync it asked for (None: a retry or none).
    pub period: Option<Duration>,
    /// Its direct targets and their desired entries, in order.
    pub targets: &'a [Target],
    pub desired: &'a PerTarget,
    /// One per direct target, then one per indirect target.
    pub outcomes: &'a [Outcome],
    /// Nothing else stands in the way: the sync wrote no status and no
    /// Event, every target resolved (no problems, no conflicts, no
    /// indirect targets, no kept revisions), no feature reported anything,
    /// no ownership damage.
    pub plain: bool,
    pub tag: u64,
    /// When it ended.
    pub at: Instant,
    /// `--full-resync-every`: below 2, no note (every resync is full).
    pub full_every: u32,
}

/// The note a sync leaves: Some when every target is a direct one that
/// held its desired entries byte for byte, nothing was written, and the
/// sync asked for its regular resync. Pure.
pub fn note(s: Synced<'_>) -> Option<Note> {
    let period = s.period?;
    if s.full_every < 2 {
        return None;
    }
    let plain = s.plain && entries_only(s.spec) && !s.targets.is_empty();
    if !plain || s.outcomes.len() != s.targets.len() {
        return None;
    }
    let checks = s
        .targets
        .iter()
        .zip(s.outcomes)
        .enumerate()
        .map(|(i, (t, o))| {
            let clean = o.byte_equal && o.errors.is_empty() && o.device_error.is_none();
            clean.then(|| {
                let d = s.desired.of(i);
                Check {
                    virtual_switch: t.virtual_switch.clone(),
                    switch: t.switch.name_any(),
                    switch_version: t.switch.resource_version(),
                    slot: t.slot,
                    first_pipe: t.first_pipe,
                    table: t.schema.id,
                    entries: d.len(),
                    sum: d.wire_sum(s.tag),
                }
            })
        });
    Some(Note {
        fingerprint: s.fingerprint,
        period,
        synced_at: s.at,
        checks: checks.collect::<Option<Vec<_>>>()?.into(),
        rechecks: 0,
        full_every: s.full_every,
    })
}

/// One recheck of set `key` (`namespace/name`).
async fn recheck(ctx: &SetCtx, key: &str) -> Verdict {
    let Some((ns, name)) = key.split_once('/') else {
        return Verdict::Dropped;
    };
    let sets = ctx.caches.entry_sets.store();
    let set = sets.get(&ObjectRef::new(name).within(ns));
    let fingerprint = set
        .filter(|s| s.metadata.deletion_timestamp.is_none())
        .map(|s| resync_due::fingerprint(&s))
        .filter(|fp| ctx.own.resync_due.unchanged(key, *fp));
    let Some(checks) = ctx.own.rechecks.take(key, fingerprint) else {
        // Its watches reconcile it, or its full sync is next.
        return Verdict::Dropped;
    };
    let switches = ctx.caches.switches.store();
    let mut reads = Vec::with_capacity(checks.len());
    for c in checks.iter() {
        let sw = switches.get(&ObjectRef::new(&c.switch));
        match sw.filter(|sw| sw.resource_version() == c.switch_version) {
            Some(sw) => reads.push((c.switch.clone(), holds(ctx, sw, c))),
            None => return Verdict::Differed,
        }
    }
    let parallel = ctx.config.limits.targets_per_set;
    let held = ctx.own.permits.each(parallel, reads).await;
    if held.iter().all(|h| *h) {
        Verdict::Held
    } else {
        Verdict::Differed
    }
}

/// Whether `c`'s table on `sw` holds exactly its entries (false on any
/// error, or a device that cannot answer as bytes).
async fn holds(ctx: &SetCtx, sw: Arc<p4fleet_crds::Switch>, c: &Check) -> bool {
    let dev =
        slot_claims::program_device(&ctx.devices, &sw, c.slot, c.first_pipe, &c.virtual_switch);
    let Ok(dev) = dev else { return false };
    match dev.read_table_raw(c.slot, c.table).await {
        Ok(Some(raw)) => raw.len() == c.entries && raw.sum() == c.sum,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use p4fleet_crds::TableEntrySet;

    fn check(name: &str) -> Check {
        Check {
            virtual_switch: name.into(),
            switch: format!("sw-{name}"),
            switch_version: Some("1".into()),
            slot: 0,
            first_pipe: None,
            table: 7,
            entries: 3,
            sum: EntitySum::default(),
        }
    }

    const PERIOD: Duration = Duration::from_secs(30);

    fn a_note(at: Instant) -> Note {
        Note {
            fingerprint: 5,
            period: PERIOD,
            synced_at: at,
            checks: vec![check("a")].into(),
            rechecks: 0,
            full_every: DEFAULT_FULL_EVERY,
        }
    }

    fn noted(r: &Rechecks) {
        r.noted("ns/s", Some(a_note(Instant::now())));
    }

    #[tokio::test]
    async fn a_note_gives_rechecks_a_period_apart_until_the_full_sync() {
        let r = Rechecks::new(PERIOD);
        let t0 = Instant::now();
        r.noted("ns/s", Some(a_note(t0)));
        for i in 1..DEFAULT_FULL_EVERY {
            assert_eq!(r.next_at("ns/s"), Some(t0 + PERIOD * i));
            let checks = r.take("ns/s", Some(5)).expect("a recheck");
            assert_eq!(&checks[..], [check("a")]);
        }
        assert_eq!(r.next_at("ns/s"), None, "the full sync is next");
        assert!(r.take("ns/s", Some(5)).is_none());
        // The full sync's note starts the count again.
        noted(&r);
        assert!(r.take("ns/s", Some(5)).is_some());
    }

    #[tokio::test]
    async fn a_difference_forgets_the_note_and_names_the_set() {
        let r = Rechecks::new(PERIOD);
        let mut differed = r.subscribe();
        noted(&r);
        r.settle("ns/s", Verdict::Held);
        assert!(differed.try_recv().is_err());
        assert!(r.next_at("ns/s").is_some());
        r.settle("ns/s", Verdict::Differed);
        assert_eq!(differed.try_recv().unwrap(), "ns/s");
        assert!(
            r.take("ns/s", Some(5)).is_none(),
            "no recheck before a full sync"
        );
    }

    #[tokio::test]
    async fn a_changed_set_or_no_note_gets_no_recheck() {
        let r = Rechecks::new(PERIOD);
        assert!(r.take("ns/s", Some(5)).is_none());
        let t0 = Instant::now();
        r.noted("ns/s", Some(a_note(t0)));
        assert!(r.take("ns/s", Some(6)).is_none(), "another fingerprint");
        // A skipped turn counts: the next is a period later, not at once
        // (the set waits for the sync its change started).
        assert_eq!(r.next_at("ns/s"), Some(t0 + PERIOD * 2));
        assert!(r.take("ns/s", None).is_none(), "touched since its sync");
        assert_eq!(r.next_at("ns/s"), Some(t0 + PERIOD * 3));
        r.noted("ns/s", None);
        assert!(
            r.take("ns/s", Some(5)).is_none(),
            "a sync that left no note"
        );
        noted(&r);
        r.forget("ns/s");
        assert!(r.take("ns/s", Some(5)).is_none());
    }

    #[test]
    fn a_sync_leaves_a_note_only_when_every_target_held_its_bytes() {
        use super::super::desired::tests::{set, target, texts};
        let s = set(vec![]);
        let targets = vec![target(None)];
        let d = super::super::desired::parse(&s.spec, &targets[0].schema, &texts(&[]));
        let desired = PerTarget::from_parts(vec![std::sync::Arc::new(d)], vec![0]);
        let period = Some(Duration::from_secs(30));
        let synced = |outcomes, period, plain| Synced {
            spec: &s.spec,
            fingerprint: 5,
            period,
            targets: &targets,
            desired: &desired,
            outcomes,
            plain,
            tag: 9,
            at: Instant::now(),
            full_every: DEFAULT_FULL_EVERY,
        };
        let outcome = |byte_equal| Outcome {
            byte_equal,
            ..Outcome::of(&targets[0], Default::default())
        };
        let (held, decoded) = ([outcome(true)], [outcome(false)]);
        let n = note(synced(&held, period, true)).expect("a note");
        assert_eq!(n.checks.len(), 1);
        let c = &n.checks[0];
        assert_eq!((c.switch.as_str(), c.table), ("s1", targets[0].schema.id));
        assert_eq!(c.sum, desired.of(0).wire_sum(9));
        assert_eq!(n.period, Duration::from_secs(30));
        // Decoded (drift, or a device encoding otherwise), a retry asked
        // for, or something else in the way: no note.
        assert!(note(synced(&decoded, period, true)).is_none());
        assert!(note(synced(&held, None, true)).is_none());
        assert!(note(synced(&held, period, false)).is_none());
        let mut failed = outcome(true);
        failed.device_error = Some(super::super::apply::DeviceError {
            switch: "s1".into(),
            error: p4fleet_client::Error::Protocol {
                device_id: 1,
                reason: "gone".into(),
            },
        });
        let failed = [failed];
        assert!(note(synced(&failed, period, true)).is_none());
        // `--full-resync-every 1`: every resync is a full sync.
        let all_full = Synced {
            full_every: 1,
            ..synced(&held, period, true)
        };
        assert!(note(all_full).is_none());
    }

    #[test]
    fn only_a_set_of_entries_alone_is_rechecked() {
        let yaml = |extra: &str| -> TableEntrySet {
            serde_yaml::from_str(&format!(
                "apiVersion: p4fleet.dev/v1alpha1\nkind: TableEntrySet\n\
                 metadata: {{name: s, namespace: ns}}\n\
                 spec: {{virtualSwitchRef: vs, table: t{extra}}}"
            ))
            .expect("a set")
        };
        assert!(entries_only(&yaml("").spec));
        for extra in [
            ", defaultAction: {action: drop}",
            ", counters: {}",
            ", digests: [{name: d}]",
            ", plan: true",
            ", learn: {digest: d, action: a, key: {}}",
        ] {
            assert!(!entries_only(&yaml(extra).spec), "{extra}");
        }
    }
}
