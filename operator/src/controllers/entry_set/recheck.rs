//! The idle fast path of a periodic resync: read back, compare, done.
//!
//! A set whose last sync found every target holding exactly its desired
//! entries, compared as bytes ([`super::read_check`]), and that keeps
//! nothing on its devices but entries (no default action, counters,
//! meters, registers, action profile, digests, learning, idle timeouts,
//! plan, or rollout in motion), needs at its next regular resync only
//! that read-back and comparison, as long as nothing the set reads has
//! changed since (no watch touched it, its spec and metadata are the same:
//! [`super::resync_due`], and each target's Switch is the one it read).
//! That skips the dereference, the parse lookups, the feature stages, the
//! status build and the ownership record: most of an idle set's cost
//! (docs/performance.md, "Idle cost").
//!
//! Any difference, failed read or doubt runs the full sync, which reads
//! again and repairs; so does every [`FULL_EVERY`]th resync, as a safety
//! net for what no watch reports. The notes live in memory only: a new
//! process starts with full syncs.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use kube::ResourceExt;
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use p4fleet_client::EntitySum;
use p4fleet_crds::TableEntrySet;

use super::SetCtx;
use super::apply::Outcome;
use super::dereference::Target;
use super::desired::PerTarget;
use super::resync_due::{self, Started};
use crate::controllers::object_key;
use crate::fleet::slot_claims;

/// One resync in this many runs the full sync even when the read-backs
/// match.
pub const FULL_EVERY: u32 = 10;

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
    pub checks: Vec<Check>,
    /// Rechecks since that sync.
    pub rechecks: u32,
}

/// The notes of the sets that may be rechecked, by `namespace/name`.
#[derive(Default)]
pub struct Rechecks {
    notes: Mutex<HashMap<String, Note>>,
}

impl Rechecks {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Note>> {
        self.notes.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// After a full sync of `key`: its note, or none (it may not be
    /// rechecked).
    pub fn noted(&self, key: &str, note: Option<Note>) {
        match note {
            Some(n) => self.lock().insert(key.to_string(), n),
            None => self.lock().remove(key),
        };
    }

    /// The checks of a recheck of `key` (as `fingerprint`) now, counted;
    /// None when it has no note, the set changed, or a full sync is due.
    pub fn take(&self, key: &str, fingerprint: u64) -> Option<(Vec<Check>, Duration)> {
        let mut g = self.lock();
        let n = g.get_mut(key)?;
        if n.fingerprint != fingerprint || n.rechecks + 1 >= FULL_EVERY {
            return None;
        }
        n.rechecks += 1;
        Some((n.checks.clone(), n.period))
    }

    /// Forgets `key` (deleted, or its recheck found a difference).
    pub fn forget(&self, key: &str) {
        self.lock().remove(key);
    }
}

/// Whether the set keeps nothing on its devices but its entries, so that
/// its read-back covers all of it.
pub fn entries_only(set: &TableEntrySet) -> bool {
    let s = &set.spec;
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
    pub set: &'a TableEntrySet,
    pub fingerprint: u64,
    /// The regular resync it asked for (None: a retry or none).
    pub period: Option<Duration>,
    /// Its direct targets and their desired entries, in order.
    pub targets: &'a [Target],
    pub desired: &'a PerTarget,
    /// One per direct target, then one per indirect target.
    pub outcomes: &'a [Outcome],
    /// Nothing else stands in the way: every target resolved (no
    /// problems, no conflicts, no indirect targets, no kept revisions),
    /// no feature reported anything, no ownership damage.
    pub plain: bool,
    pub tag: u64,
}

/// The note a sync leaves: Some when every target is a direct one that
/// held its desired entries byte for byte, nothing was written, and the
/// sync asked for its regular resync. Pure.
pub fn note(s: Synced<'_>) -> Option<Note> {
    let period = s.period?;
    let plain = s.plain && entries_only(s.set) && !s.targets.is_empty();
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
        checks: checks.collect::<Option<_>>()?,
        rechecks: 0,
    })
}

/// The recheck of a periodic reconcile, when the set may have one: the
/// next resync if every target still holds its entries, None to run the
/// full sync.
pub async fn run(ctx: &SetCtx, set: &TableEntrySet) -> Option<Action> {
    if set.metadata.deletion_timestamp.is_some() {
        return None;
    }
    let key = object_key(set);
    let due = &ctx.own.resync_due;
    let started = Started::of(crate::reconcile_triggers::current().as_deref());
    let fingerprint = resync_due::fingerprint(set);
    if !due.unchanged(&key, started, fingerprint) {
        return None;
    }
    let (checks, period) = ctx.own.rechecks.take(&key, fingerprint)?;
    let began = Instant::now();
    let switches = ctx.caches.switches.store();
    let mut reads = Vec::with_capacity(checks.len());
    for c in &checks {
        let sw = switches.get(&ObjectRef::new(&c.switch))?;
        if sw.resource_version() != c.switch_version {
            return None;
        }
        reads.push((c.switch.clone(), holds(ctx, sw, c)));
    }
    let parallel = ctx.config.limits.targets_per_set;
    let held = ctx.own.permits.each(parallel, reads).await;
    let held = held.iter().all(|h| *h);
    ctx.metrics.entry_set_recheck(held);
    if !held {
        tracing::debug!(set = %key, "recheck found a difference: full sync");
        ctx.own.rechecks.forget(&key);
        return None;
    }
    due.synced(&key, fingerprint, began, Instant::now(), Some(period));
    tracing::debug!(set = %key, targets = checks.len(), "rechecked");
    Some(Action::requeue(period))
}

/// Whether `c`'s table on `sw` holds exactly its entries (false on any
/// error, or a device that cannot answer as bytes).
async fn holds(ctx: &SetCtx, sw: std::sync::Arc<p4fleet_crds::Switch>, c: &Check) -> bool {
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

    fn noted(r: &Rechecks) {
        let n = Note {
            fingerprint: 5,
            period: Duration::from_secs(30),
            checks: vec![check("a")],
            rechecks: 0,
        };
        r.noted("ns/s", Some(n));
    }

    #[test]
    fn a_note_gives_rechecks_until_a_full_sync_is_due() {
        let r = Rechecks::default();
        noted(&r);
        for _ in 1..FULL_EVERY {
            let (checks, period) = r.take("ns/s", 5).expect("a recheck");
            assert_eq!(checks, vec![check("a")]);
            assert_eq!(period, Duration::from_secs(30));
        }
        assert!(r.take("ns/s", 5).is_none(), "the tenth is a full sync");
        // The full sync's note starts the count again.
        noted(&r);
        assert!(r.take("ns/s", 5).is_some());
    }

    #[test]
    fn a_changed_set_or_no_note_gets_no_recheck() {
        let r = Rechecks::default();
        assert!(r.take("ns/s", 5).is_none());
        noted(&r);
        assert!(r.take("ns/s", 6).is_none(), "another fingerprint");
        r.noted("ns/s", None);
        assert!(r.take("ns/s", 5).is_none(), "a sync that left no note");
        noted(&r);
        r.forget("ns/s");
        assert!(r.take("ns/s", 5).is_none());
    }

    #[test]
    fn a_sync_leaves_a_note_only_when_every_target_held_its_bytes() {
        use super::super::desired::tests::{set, target, texts};
        let s = set(vec![]);
        let targets = vec![target(None)];
        let d = super::super::desired::parse(&s, &targets[0].schema, &texts(&[]));
        let desired = PerTarget::from_parts(vec![std::sync::Arc::new(d)], vec![0]);
        let period = Some(Duration::from_secs(30));
        let synced = |outcomes, period, plain| Synced {
            set: &s,
            fingerprint: 5,
            period,
            targets: &targets,
            desired: &desired,
            outcomes,
            plain,
            tag: 9,
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
        assert!(entries_only(&yaml("")));
        for extra in [
            ", defaultAction: {action: drop}",
            ", counters: {}",
            ", digests: [{name: d}]",
            ", plan: true",
            ", learn: {digest: d, action: a, key: {}}",
        ] {
            assert!(!entries_only(&yaml(extra)), "{extra}");
        }
    }
}
