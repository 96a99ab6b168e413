//! TableEntrySet reconciler, one stage per file:
//!
//! - [`dereference`]: the VirtualSwitches down to Switch, slot and table
//!   schema; the ConfigMap texts. Reads only, through [`crate::reads`].
//! - [`desired`]: inline entries and the line format parsed into the
//!   desired entries, with sources and errors. Pure.
//! - [`parse`]: runs [`desired`] per schema off the async runtime, each
//!   ConfigMap text parsed once through [`crate::entry_sources`]; an
//!   unchanged assembly is reused ([`desired_cache`]).
//! - [`read_check`]: a target's read-back, compared as bytes with the
//!   desired entries before anything is decoded.
//! - [`recheck`]: an idle set's resyncs as that read-back alone, from a
//!   task of its own, while nothing it reads changes after a sync found
//!   it in sync.
//! - [`apply`]: per target, read back, infer ownership, plan, write, tally.
//!   Device I/O only; targets are independent of each other.
//! - [`status`]: conditions, counts, rates, per-target status, Events and
//!   the requeue, from the tallies and what dereference found. Pure.
//! - [`plan`]: `spec.plan`, what a sync would write as `status.plan`,
//!   nothing written; the Event of the apply after it. Pure.
//! - [`rollout`]: `spec.rollout`, the entries revision each target is to
//!   hold (the content read now, or a kept one during a Canary rollout).
//! - [`cleanup`]: on deletion, remove the set's entries (finalizer).
//!
//! Choices worth knowing:
//! - Ownership is recorded on the device (see [`p4fleet_model::sync`]):
//!   entries carry the set's tag in their P4Runtime `metadata`, so Merge
//!   deletes survive restarts. BFRT keeps no metadata: the set's
//!   ownership record ([`crate::ownership`]) holds the keys it wrote,
//!   grown before the device writes and shrunk after them
//!   ([`apply::infer_ownership`] reads it).
//! - While a required ConfigMap is missing, nothing is deleted (the
//!   entries it held are unknown, not undesired); inserts and modifies of
//!   the entries that did resolve still go out.
//! - Bad entries are reported (Valid=False, Event) and skipped; the others
//!   are written under the set's atomicity.
//! - Deletion goes through `kube::runtime::finalizer` with [`FINALIZER`].

pub mod apply;
pub mod cleanup;
pub mod conflicts;
pub mod default_action;
pub mod dereference;
pub mod desired;
pub mod desired_cache;
pub mod digests;
pub mod direct_meters;
pub mod idle;
pub mod memory;
pub mod parse;
pub mod plan;
pub mod profiles;
pub mod read_check;
pub mod recheck;
pub mod resources;
pub mod resync_due;
pub mod rollout;
pub mod set;
pub mod status;

use std::collections::HashSet;
use std::sync::Arc;

use kube::runtime::controller::{Action, Controller};
use kube::runtime::finalizer::{Event, finalizer};
use kube::runtime::reflector::ObjectRef;
use kube::{Api, ResourceExt};
use p4fleet_crds::TableEntrySet;

use super::written::StatusWriter;
use super::{
    Error, finalized, namespace, object_key, on_device_changes, scoped_api, watcher_config,
};
use crate::context::Context;
use crate::entry_sources;
use crate::fleet::fills::fills;
use crate::ownership::Record;
use crate::status::now_rfc3339;
pub use memory::SyncMemory;
use p4fleet_model::entries::EntryKey;
use resync_due::Touch;
use set::Set;

/// What the TableEntrySet controller keeps between reconciles.
pub struct EntrySets {
    /// What syncs remember between runs (drift, statuses, tuned writes).
    pub sync_memory: SyncMemory,
    /// When each set's next periodic resync is due.
    pub resync_due: Arc<resync_due::ResyncDue>,
    /// The sets whose next resync may be a read-back alone.
    pub rechecks: recheck::Rechecks,
    /// Durable ownership records (devices without entry metadata: BFRT).
    pub ownership: crate::ownership::Records,
    /// ConfigMap sources: watched, fetched and parsed once.
    pub entry_sources: entry_sources::EntrySources,
    /// Entry syncs in flight per device.
    pub permits: crate::limits::DevicePermits,
    /// The learning tasks of sets with `spec.learn`.
    pub learners: crate::learning::Learners,
    /// The digest sinks (log, ConfigMap) of sets.
    pub digest_sinks: crate::digest_sink::DigestSinks,
    /// Idle timeout notifications about sets' own entries.
    pub idle: Arc<crate::idle_reports::IdleReports>,
    /// Entry revisions read and loaded (`spec.rollout`).
    pub rollouts: rollout::Memory,
}

impl EntrySets {
    /// The state of a new process. Devices' notices (digest lists, idle
    /// timeouts) are counted in the metrics and idle timeouts of sets'
    /// own entries reported on the set from here on.
    pub fn new(shared: &Context) -> EntrySets {
        let n = shared.metrics.notices.clone();
        let idle = Arc::new(crate::idle_reports::IdleReports::new(
            n.idle_set_entries.clone(),
        ));
        let (reports, ev) = (idle.clone(), shared.events.clone());
        shared
            .devices
            .observe_notices(Arc::new(move |switch, event| match event {
                crate::devices::NoticeEvent::Notice(notice) => {
                    n.record(switch, notice);
                    if let p4fleet_client::Notice::IdleTimeout { notification, .. } = notice {
                        let now = tokio::time::Instant::now();
                        for (set, note) in reports.observe(notification, now) {
                            let ev = ev.clone();
                            tokio::spawn(async move { ev.publish_to(&set, &note).await });
                        }
                    }
                }
                crate::devices::NoticeEvent::Lost(k) => n.lost(switch, k),
            }));
        EntrySets {
            sync_memory: SyncMemory::default(),
            resync_due: Default::default(),
            rechecks: recheck::Rechecks::new(shared.config.resync),
            ownership: Default::default(),
            entry_sources: entry_sources::EntrySources::new(shared.metrics.entry_sources.clone()),
            permits: crate::limits::DevicePermits::new(shared.config.limits.syncs_per_device),
            learners: Default::default(),
            digest_sinks: Default::default(),
            idle,
            rollouts: Default::default(),
        }
    }
}

/// The TableEntrySet controller's context.
pub type SetCtx = super::Ctx<EntrySets>;

/// Forgets what syncs remembered of a Switch once it is deleted.
pub async fn forget_deleted_switches(ctx: Arc<SetCtx>, shutdown: super::Shutdown) {
    use crate::cache::Seen;
    use futures::StreamExt;
    let events = ctx.caches.switches.events().take_until(shutdown);
    let mut events = std::pin::pin!(events);
    while let Some(seen) = events.next().await {
        match seen {
            Seen::Deleted(sw) => ctx.own.sync_memory.forget_switch(&sw.name_any()),
            Seen::Relisted => {
                let store = ctx.caches.switches.store();
                let gone = |name: &str| store.get(&ObjectRef::new(name)).is_none();
                ctx.own.sync_memory.forget_switches_where(gone);
            }
            Seen::Applied(_) => {}
        }
    }
}

/// Finalizer that removes a deleted set's entries from its devices.
pub const FINALIZER: &str = "p4fleet.dev/table-entries";
/// Per-entry errors kept in status.
pub const MAX_ERRORS: usize = 10;

/// Watches TableEntrySets, the ConfigMaps and VirtualSwitches they use and
/// the devices they were synced to.
pub fn controller(ctx: &SetCtx) -> Controller<TableEntrySet> {
    // ConfigMaps: one metadata-only watch feeds the entry-source index and
    // requeues the sets reading what changed (by name or selector).
    let c = ctx.caches.entry_sets.controller();
    let sets = c.store();
    let config_maps = ctx
        .own
        .entry_sources
        .index
        .metadata_feed(scoped_api(ctx), watcher_config());
    let readers = ctx.own.entry_sources.readers();
    // Every trigger is noted as it happens (`resync_due`).
    let due = ctx.own.resync_due.clone();
    let c = c.watches_stream(config_maps, move |cm| {
        let (ns, name) = (cm.namespace().unwrap_or_default(), cm.name_any());
        // The sets that read it last (looked up, not a scan: a change of
        // 1,000 ConfigMaps would otherwise visit 1,000 sets each), and
        // those whose sources now name or select it.
        let selecting = sets
            .state()
            .into_iter()
            .filter(|s| entry_sources::reads_config_map(s, &cm))
            .map(|s| object_key(s.as_ref()));
        let version = cm.metadata.resource_version.as_deref();
        let hit = entry_sources::to_sync(readers.of(&ns, &name), selecting, version);
        let now = std::time::Instant::now();
        hit.iter()
            .filter_map(|key| {
                due.touched(key, now, Touch::ConfigMap);
                let (ns, name) = key.split_once('/')?;
                Some(ObjectRef::new(name).within(ns))
            })
            .collect::<Vec<_>>()
    });
    let due = ctx.own.resync_due.clone();
    let c = ctx.caches.virtual_switches.watched_by(c, move |s, vs| {
        let hit = fills(s, vs);
        if hit {
            due.touched(
                &object_key(s),
                std::time::Instant::now(),
                Touch::VirtualSwitch,
            );
        }
        hit
    });
    let due = ctx.own.resync_due.clone();
    // A recheck that found a difference (`recheck`).
    let c = super::on_named(c, ctx.own.rechecks.subscribe(), |key| {
        let (ns, name) = key.split_once('/')?;
        Some(ObjectRef::new(name).within(ns))
    });
    // A device lost, back (maybe empty) or given its pipeline again. A set
    // whose cached status names no target yet (never synced, or the first
    // sync's status not yet seen by the cache) may run there too.
    on_device_changes(c, ctx, move |s: &TableEntrySet, switch| {
        let targets = s.status.as_ref().map(|st| &st.targets[..]).unwrap_or(&[]);
        let hit = targets.is_empty() || targets.iter().any(|t| t.switch.as_deref() == Some(switch));
        if hit {
            due.touched(&object_key(s), std::time::Instant::now(), Touch::Device);
        }
        hit
    })
}

/// Reconciles one TableEntrySet: sync it, or clean up after it.
pub async fn reconcile(set: Arc<TableEntrySet>, ctx: Arc<SetCtx>) -> Result<Action, Error> {
    if let Some(wait) = resync_due::skip(&ctx.own.resync_due, &set) {
        return Ok(Action::requeue(wait));
    }
    let api: Api<TableEntrySet> = Api::namespaced(ctx.client.clone(), &namespace(set.as_ref())?);
    let res = finalizer(&api, FINALIZER, set, |event| async {
        match event {
            Event::Apply(set) => sync(&ctx, &api, &set).await,
            Event::Cleanup(set) => cleanup::cleanup(&ctx, &set).await,
        }
    })
    .await;
    finalized(res)
}

/// One sync, as a table of contents: each stage returns what the next
/// takes (docs/architecture.md, "One TableEntrySet, from apply to status").
///
/// Status never claims more than this process confirmed: a set first seen
/// by this process (operator restart) with an old Ready is marked
/// Unconfirmed before anything else, and a sync that is about to write
/// turns a Ready True False (Syncing) before its first write (a set not
/// Ready says Syncing only before a large write: `status::MARK_NEW_FROM`).
async fn sync(ctx: &SetCtx, api: &Api<TableEntrySet>, cr: &TableEntrySet) -> Result<Action, Error> {
    let mut phases = Phases::start();
    let set = Set::of(cr);
    let me = &set.key;
    let mut status = StatusWriter::start(&ctx.own.sync_memory.written, api, me, cr);
    ctx.own.rechecks.forget(me);
    if ctx.own.sync_memory.first_sight(me) {
        mark(ctx, &mut status, status::Pending::Unconfirmed).await?;
    }
    let mut refs = resolve(ctx, cr).await?;
    let rolled = roll(ctx, me, status.object(), &mut refs).await?;
    phases.at(Phase::Dereferenced);
    // From here on, every stage takes the value `set`, not the object.
    let desired = desired(ctx, &set, &refs, &rolled).await;
    phases.at(Phase::Parsed);
    if set.spec.plan {
        return plan_only(ctx, cr, &set, &refs, &desired, status).await;
    }
    let entries = write_entries(ctx, cr, &set, &refs, &desired, &mut status, &mut phases).await?;
    let latest = set.with_status_of(status.object());
    let features = sync_features(ctx, &latest, &refs, &desired, &rolled).await;
    let (mut new, mut events, asked) =
        build_status(ctx, &latest, &refs, &desired, &entries, &features);
    rollout::fold(
        &mut new,
        latest.status,
        &mut events,
        &rolled,
        &entries.outcomes,
    );
    let wrote = status.finish(ctx, &mut new, &events).await?;
    publish(ctx, &set, &new, &events, &features).await;
    for n in &rolled.notes {
        ctx.metrics
            .rollouts
            .noted_entries(&set.namespace, &set.name, &n.reason);
    }
    let asked = rolled.requeue.map_or(asked, Action::requeue);
    let (action, period) = requeue(ctx, cr, &set, &refs, &entries, asked, phases.started);
    phases.log(me, refs.all.targets.len(), entries.updates);
    let note = recheck::note(recheck::Synced {
        spec: set.spec,
        fingerprint: resync_due::fingerprint(cr),
        period,
        targets: &refs.direct,
        desired: &desired,
        outcomes: &entries.outcomes,
        // A sync that changed anything (a status, an Event: a feature
        // that just reset, a condition that clears on the next sync) is
        // followed by another full one.
        plain: !wrote && events.is_empty() && plain(ctx, &set, &refs, &rolled, &entries, &features),
        tag: set.tag,
        at: tokio::time::Instant::now(),
        full_every: ctx.config.full_resync_every,
    });
    Ok(hand_over(ctx, me, note, phases.started, action))
}

/// A noted set's resyncs go to the recheck task, and kube-runtime comes
/// back only for its full sync (`--full-resync-every` periods on).
fn hand_over(
    ctx: &SetCtx,
    me: &str,
    note: Option<recheck::Note>,
    started: std::time::Instant,
    action: Action,
) -> Action {
    let Some(n) = note else {
        return action;
    };
    let full = n.period * n.full_every;
    let now = std::time::Instant::now();
    let due = &ctx.own.resync_due;
    due.synced(me, n.fingerprint, started, now, Some(full));
    ctx.own.rechecks.noted(me, Some(n));
    Action::requeue(full)
}

/// Whether nothing but the entries' read-back stood in the sync's way
/// ([`recheck::Synced::plain`]).
fn plain(
    ctx: &SetCtx,
    set: &Set<'_>,
    refs: &Resolved,
    rolled: &rollout::Rolled,
    entries: &Entries,
    features: &Features,
) -> bool {
    refs.all.problems.is_empty()
        && refs.held.is_empty()
        && refs.indirect.is_empty()
        && rolled.snapshots.is_empty()
        && rolled.unreadable.is_empty()
        && rolled.requeue.is_none()
        && rolled.conditions.is_empty()
        && features.metered.is_empty()
        && features.idle.0.is_none()
        && !features.idle_timeouts
        && !entries.found_damage
        && ctx.own.ownership.recent_damage(&set.key).is_none()
}

/// What a set refers to, resolved, with what older sets keep of it.
struct Resolved {
    all: dereference::Dereferenced,
    /// The claims this set loses to older sets (default actions, digests).
    held: Vec<conflicts::Conflict>,
    /// Targets written entry by entry, and those with an action profile
    /// (written through `profiles`).
    direct: Vec<dereference::Target>,
    indirect: Vec<dereference::Target>,
}

/// Dereference: the VirtualSwitches, tables and sources of the set, less
/// the targets an older set keeps ([`settle_conflicts`]).
async fn resolve(ctx: &SetCtx, set: &TableEntrySet) -> Result<Resolved, Error> {
    let ns = namespace(set)?;
    let mut all = dereference::dereference(&ctx.reads, &ctx.own.entry_sources, &ns, set).await?;
    let held = settle_conflicts(ctx, set, &mut all);
    let (indirect, direct): (Vec<_>, Vec<_>) = all
        .targets
        .iter()
        .cloned()
        .partition(|t| t.profile.is_some());
    Ok(Resolved {
        all,
        held,
        direct,
        indirect,
    })
}

/// The entries revision of each direct target (`spec.rollout`); a
/// target whose revision cannot be read back is left alone this sync.
async fn roll(
    ctx: &SetCtx,
    me: &str,
    latest: &TableEntrySet,
    refs: &mut Resolved,
) -> Result<rollout::Rolled, Error> {
    let sources = &refs.all.sources;
    let complete = refs.all.sources_complete();
    let rolled = rollout::roll(ctx, me, latest, &refs.direct, sources, complete).await?;
    refs.direct
        .retain(|t| !rolled.unreadable.contains(&t.virtual_switch));
    Ok(rolled)
}

/// Build: the desired entries of each direct target, from the content
/// read now or, during a rollout, from the revision it is to hold.
async fn desired(
    ctx: &SetCtx,
    set: &Set<'_>,
    refs: &Resolved,
    rolled: &rollout::Rolled,
) -> desired::PerTarget {
    let me = &set.key;
    let (cache, assembled) = (&ctx.own.entry_sources, &ctx.own.sync_memory.desired);
    let sources = &refs.all.sources;
    let (now, kept) = rollout::groups(rolled, &refs.direct);
    // Revisions' parses are cached under a key of their own, so the live
    // content's stay as they are; released once no target needs them.
    if ctx.own.rollouts.parses_revisions(me, !kept.is_empty()) {
        cache.release(&rollout::revision_key(me));
    }
    if kept.is_empty() {
        // Every target holds the content read now (always, without a
        // rollout): no copy of the targets.
        return parse::per_target(cache, assembled, me, set, &refs.direct, sources).await;
    }
    let targets: Vec<_> = now.iter().map(|i| refs.direct[*i].clone()).collect();
    let mut groups = vec![(
        now,
        parse::per_target(cache, assembled, me, set, &targets, sources).await,
    )];
    let key = rollout::revision_key(me);
    for (digest, at) in kept {
        let snapshot = &rolled.snapshots[&digest];
        let spec = crate::fleet::entry_revisions::as_of(set.spec, snapshot);
        let then = set.at_revision(&spec);
        let sources = crate::fleet::entry_revisions::sources(snapshot);
        let targets: Vec<_> = at.iter().map(|i| refs.direct[*i].clone()).collect();
        let d = parse::per_target(cache, assembled, &key, &then, &targets, &sources).await;
        groups.push((at, d));
    }
    desired::PerTarget::gather(refs.direct.len(), groups)
}

/// What writing the entries came to.
struct Entries {
    outcomes: Vec<apply::Outcome>,
    profiled: Vec<(String, profiles::Profiled)>,
    updates: usize,
    /// The ownership record was found damaged (an Event, once).
    found_damage: bool,
    /// The first apply after a plan: whether it wrote what was planned.
    after_plan: Option<crate::status::EventNote>,
}

/// Apply: each target planned against its read-back and written (targets
/// in parallel, at most `syncs_per_device` per device over all sets,
/// `crate::limits`: a slow device delays only its own targets); the
/// ownership record grown before the writes (a crash in between leaves no
/// entry unknown) and shrunk to what the devices confirmed after; the
/// status marked Syncing before a write.
async fn write_entries(
    ctx: &SetCtx,
    cr: &TableEntrySet,
    set: &Set<'_>,
    refs: &Resolved,
    desired: &desired::PerTarget,
    status: &mut StatusWriter<'_, TableEntrySet>,
    phases: &mut Phases,
) -> Result<Entries, Error> {
    let record = ctx.own.ownership.get(&ctx.client, cr).await?;
    // A damaged record stands in as an empty one (see crate::ownership):
    // an Event when found, a condition for a while after.
    let found_damage = record.damage.is_some();
    let parallel = ctx.config.limits.targets_per_set;
    let switch_of = |t: &dereference::Target| t.switch.name_any();
    let planned = plan_targets(ctx, set, refs, desired, &record.record).await;
    let updates: usize = planned.iter().flatten().map(apply::Planned::writes).sum();
    phases.at(Phase::Planned);
    // The first apply after a plan says whether it writes what was planned.
    let after_plan = set.status.and_then(|s| s.plan.as_ref()).map(|old| {
        let now = plan::of_targets(set.generation, &planned, &refs.indirect);
        plan::applied_event(old, &now.digest, &now)
    });
    let at_most = planned
        .iter()
        .flatten()
        .filter_map(|p| Some((p.virtual_switch().to_string(), p.owned_at_most()?)));
    let grown = with_targets(&record.record, at_most);
    let record = ctx.own.ownership.put(&ctx.client, cr, grown).await?;
    if updates > 0 {
        mark(ctx, status, status::Pending::Syncing { updates }).await?;
    }
    let writes = refs.direct.iter().map(switch_of).zip(planned);
    let writes = writes.map(|(switch, p)| (switch, write_planned(ctx, p)));
    let mut outcomes = ctx.own.permits.each(parallel, writes).await;
    phases.at(Phase::Written);
    let mut profiled = Vec::with_capacity(refs.indirect.len());
    let sources = (&refs.all.sources, refs.all.sources_complete());
    for (vs, (outcome, p)) in sync_profiles(ctx, set, &refs.indirect, sources).await {
        outcomes.push(outcome);
        profiled.push((vs, p));
    }
    let owned = outcomes
        .iter()
        .filter_map(|o| Some((o.virtual_switch.clone(), o.owned.clone()?)));
    ctx.own
        .ownership
        .put(&ctx.client, cr, with_targets(&record.record, owned))
        .await?;
    Ok(Entries {
        outcomes,
        profiled,
        updates,
        found_damage,
        after_plan,
    })
}

/// Each direct target read back and planned (targets in parallel, at
/// most `syncs_per_device` per device over all sets, `crate::limits`).
async fn plan_targets<'a>(
    ctx: &SetCtx,
    set: &'a Set<'a>,
    refs: &'a Resolved,
    desired: &'a desired::PerTarget,
    record: &'a Record,
) -> Vec<Result<apply::Planned<'a>, apply::Outcome>> {
    let jobs = refs.direct.iter().enumerate().map(|(i, target)| {
        let job = apply::Job {
            set,
            target,
            desired: desired.of(i),
            deletes: refs.all.sources_complete(),
            record,
        };
        (
            target.switch.name_any(),
            apply::plan_target(&ctx.devices, job),
        )
    });
    let parallel = ctx.config.limits.targets_per_set;
    ctx.own.permits.each(parallel, jobs).await
}

/// Plan only (`spec.plan`): each target read back and planned like a
/// sync, the plan written into `status.plan`, nothing written to any
/// device (entries, ownership record or the set's other features).
async fn plan_only(
    ctx: &SetCtx,
    cr: &TableEntrySet,
    set: &Set<'_>,
    refs: &Resolved,
    desired: &desired::PerTarget,
    status: StatusWriter<'_, TableEntrySet>,
) -> Result<Action, Error> {
    let me = &set.key;
    let record = ctx.own.ownership.get(&ctx.client, cr).await?;
    let planned = plan_targets(ctx, set, refs, desired, &record.record).await;
    let the_plan = plan::of_targets(set.generation, &planned, &refs.indirect);
    let outcomes: Vec<apply::Outcome> = planned
        .into_iter()
        .map(|p| p.map_or_else(|o| o, apply::Planned::unwritten))
        .collect();
    let latest = set.with_status_of(status.object());
    let old = latest.status;
    let report = status::report(&status::Input {
        set: &latest,
        problems: &refs.all.problems,
        parse: desired.first(),
        outcomes: &outcomes,
        default_resync: super::spread(ctx.config.resync, me),
        now: &now_rfc3339(),
    });
    let mut new = report.status;
    // What the other stages last confirmed still stands: nothing of it
    // was written since.
    if let Some(old) = old {
        new.default_action = old.default_action.clone();
        new.counters = old.counters.clone();
        new.action_profile = old.action_profile.clone();
        new.digests = old.digests.clone();
        new.idle = old.idle.clone();
        new.rollout = old.rollout.clone();
    }
    let mut events = report.events;
    events.extend(plan::planned_event(
        old.and_then(|s| s.plan.as_ref()),
        &the_plan,
    ));
    plan::mark_plan_only(&mut new, the_plan);
    status.finish(ctx, &mut new, &events).await?;
    ctx.metrics.entry_set(&set.namespace, &set.name, &new);
    for ev in &events {
        ctx.events.publish_to(&set.reference, ev).await;
    }
    // An unreachable device is asked again on the set's backoff, as in a
    // sync, not every RETRY.
    let problems = &refs.all.problems;
    Ok(on_backoff(ctx, set, &outcomes, problems, report.action))
}

/// What the set's features beyond its entries found on the devices.
struct Features {
    defaults: Vec<(String, default_action::Outcome)>,
    metered: Vec<(String, direct_meters::Outcome)>,
    extras: resources::Outcome,
    learned: digests::Outcome,
    idle: (
        Option<p4fleet_crds::IdleStatus>,
        Option<crate::status::EventNote>,
    ),
    /// Some desired entry has an idle timeout (its notifications are
    /// followed, so its set is not left to rechecks).
    idle_timeouts: bool,
    now: String,
}

/// The features of the set beyond its entries, each on every target
/// (default action, direct meters, counters/meters/registers, digests and
/// learning, idle timeouts), on the set with its freshest status.
async fn sync_features(
    ctx: &SetCtx,
    set: &Set<'_>,
    refs: &Resolved,
    desired: &desired::PerTarget,
    rolled: &rollout::Rolled,
) -> Features {
    let targets = &refs.all.targets;
    let defaults = sync_default_actions(ctx, set, targets, &refs.held, rolled).await;
    let mut metered = sync_direct_meters(ctx, &refs.direct, desired).await;
    metered.extend(refs.indirect.iter().filter_map(|t| {
        let o = direct_meters::on_indirect_table(set, t)?;
        Some((t.virtual_switch.clone(), o))
    }));
    let now = now_rfc3339();
    let unix = chrono::Utc::now().timestamp();
    let extras = resources::sync(ctx, set, targets, unix, &now).await;
    let learned = digests::sync(ctx, set, targets, &refs.held).await;
    let idle = idle::sync(ctx, set, desired.first());
    let idle_timeouts = (desired.first()).is_some_and(|d| d.iter().any(|e| e.idle_timeout_ns != 0));
    Features {
        defaults,
        metered,
        extras,
        learned,
        idle,
        idle_timeouts,
        now,
    }
}

/// Status (pure but for the ownership record's recent damage): the
/// entries' report, then each feature folded into it.
fn build_status(
    ctx: &SetCtx,
    set: &Set<'_>,
    refs: &Resolved,
    desired: &desired::PerTarget,
    entries: &Entries,
    f: &Features,
) -> (
    p4fleet_crds::TableEntrySetStatus,
    Vec<crate::status::EventNote>,
    Action,
) {
    let mut report = status::report(&status::Input {
        set,
        problems: &refs.all.problems,
        parse: desired.first(),
        outcomes: &entries.outcomes,
        default_resync: super::spread(ctx.config.resync, &set.key),
        now: &f.now,
    });
    default_action::fold(&mut report, set, &f.defaults);
    profiles::fold(&mut report, set, &entries.profiled, refs.direct.len());
    direct_meters::fold(&mut report, set, &f.metered);
    if let Some(d) = ctx.own.ownership.recent_damage(&set.key) {
        let ownership = set.spec.ownership;
        let conditions = &mut report.status.conditions;
        conditions.push(crate::ownership::damage_condition(&d, ownership));
        if entries.found_damage {
            let ev = crate::ownership::damage_event(&d, ownership);
            report.events.push(ev);
        }
    }
    let mut new = report.status;
    resources::fold(&mut new, &f.extras, resources::wanted(set), MAX_ERRORS);
    digests::fold(&mut new, set, &f.learned, MAX_ERRORS);
    new.idle = f.idle.0.clone();
    let mut events = report.events;
    events.extend(f.idle.1.clone());
    events.extend(entries.after_plan.clone());
    (new, events, report.action)
}

/// After the write: metrics and Events.
async fn publish(
    ctx: &SetCtx,
    set: &Set<'_>,
    new: &p4fleet_crds::TableEntrySetStatus,
    events: &[crate::status::EventNote],
    f: &Features,
) {
    let (ns, name) = (&set.namespace, &set.name);
    ctx.metrics.entry_set(ns, name, new);
    if let Some(c) = new
        .counters
        .as_ref()
        .filter(|_| !f.extras.per_switch.is_empty())
    {
        let top: Vec<u64> = c.top.iter().map(|t| t.packets).collect();
        ctx.metrics
            .counters
            .readout(ns, name, &c.counter, &f.extras.per_switch, &top);
    }
    for ev in events {
        ctx.events.publish_to(&set.reference, ev).await;
    }
}

/// When to come back: the status stage's ask, bounded by the counters'
/// readout and learning's count, its retries on the backoff; noted for
/// the resync schedule (`resync_due`), with the regular period if that is
/// what it asks for.
fn requeue(
    ctx: &SetCtx,
    cr: &TableEntrySet,
    set: &Set<'_>,
    refs: &Resolved,
    entries: &Entries,
    asked: Action,
    started: std::time::Instant,
) -> (Action, Option<std::time::Duration>) {
    let resync = super::spread(ctx.config.resync, &set.key);
    let action = resources::requeue(set, asked, resync);
    let action = digests::requeue(set, action);
    let action = on_backoff(ctx, set, &entries.outcomes, &refs.all.problems, action);
    let period = resync_due::after_sync(&ctx.own.resync_due, cr, started, &action, resync);
    (action, period)
}

/// The stages of a sync, timed from its start (logged at debug: a large
/// set's read-back and write show here, and a sync that ran again shows
/// twice).
struct Phases {
    started: std::time::Instant,
    at: [std::time::Duration; 4],
}

#[derive(Clone, Copy)]
enum Phase {
    Dereferenced,
    Parsed,
    Planned,
    Written,
}

impl Phases {
    fn start() -> Phases {
        Phases {
            started: std::time::Instant::now(),
            at: Default::default(),
        }
    }

    fn at(&mut self, p: Phase) {
        self.at[p as usize] = self.started.elapsed();
    }

    fn log(&self, me: &str, targets: usize, updates: usize) {
        let ms = |d: std::time::Duration| d.as_millis() as u64;
        let [dereferenced, parsed, planned, written] = self.at.map(ms);
        tracing::debug!(set = %me, targets, updates, dereferenced_ms = dereferenced,
            parsed_ms = parsed, planned_ms = planned, written_ms = written,
            total_ms = ms(self.started.elapsed()), "synced");
    }
}

/// The causes of a set's retries ([`Context::retries`]): a device that
/// could not be written or answered a transient failure, and a device out
/// of room (RESOURCE_EXHAUSTED).
const DEVICE: &str = "device";
const FULL: &str = "full";

/// The sync's requeue with its retries on the backoff: a retry the status
/// stage asked for ([`status::RETRY`], [`status::RETRY_FULL`]) because a
/// device failed comes after that cause's backoff instead (1 s doubling
/// to 5 min per set and cause); a cause that did not fail this time starts
/// afresh. Waiting for a dependency (a VirtualSwitch not ready, a source
/// missing) keeps its poll: no device is asked meanwhile.
fn on_backoff(
    ctx: &SetCtx,
    set: &Set<'_>,
    outcomes: &[apply::Outcome],
    problems: &[dereference::Problem],
    action: Action,
) -> Action {
    let key = format!("TableEntrySet/{}", set.key);
    let now = tokio::time::Instant::now();
    let inputs = crate::retries::inputs(&set.generation);
    let failed = |cause| crate::retries::Refusal {
        reason: cause,
        message: String::new(),
    };
    let device = outcomes
        .iter()
        .any(|o| o.device_error.is_some() || o.retry == Some(status::RETRY));
    let full = outcomes.iter().any(|o| o.retry == Some(status::RETRY_FULL));
    let polls = problems.iter().any(dereference::Problem::polls);
    for (cause, hit) in [(DEVICE, device), (FULL, full)] {
        if !hit {
            ctx.retries.succeeded(&key, cause);
        }
    }
    if device && !polls && action == Action::requeue(status::RETRY) {
        return Action::requeue(
            ctx.retries
                .failed(&key, DEVICE, inputs, now, failed(DEVICE)),
        );
    }
    if full && action == Action::requeue(status::RETRY_FULL) {
        return Action::requeue(ctx.retries.failed(&key, FULL, inputs, now, failed(FULL)));
    }
    action
}

/// Each target's default entry (`spec.defaultAction`, or that of the
/// revision a rollout holds it on), one target after the other: one
/// small read (and at most a write and a read) each.
async fn sync_default_actions(
    ctx: &SetCtx,
    set: &Set<'_>,
    targets: &[dereference::Target],
    held: &[conflicts::Conflict],
    rolled: &rollout::Rolled,
) -> Vec<(String, default_action::Outcome)> {
    let mut out = Vec::with_capacity(targets.len());
    for t in targets {
        let claim = conflicts::Claim::DefaultAction;
        let on = rolled.held_on(&t.virtual_switch);
        let plan = match (conflicts::held_by(held, &t.virtual_switch, &claim), on) {
            (Some(by), _) => default_action::Plan::Held { by: by.into() },
            (None, Some((_, snapshot))) => {
                default_action::plan_held(set, snapshot.default_action.as_ref(), t)
            }
            (None, None) => default_action::plan(set, t),
        };
        let outcome = default_action::sync_target(ctx, t, plan).await;
        out.push((t.virtual_switch.clone(), outcome));
    }
    out
}

/// Each direct target's entry meters, one target after the other (two
/// small reads and at most one write each, only for sets that set one).
async fn sync_direct_meters(
    ctx: &SetCtx,
    targets: &[dereference::Target],
    desired: &desired::PerTarget,
) -> Vec<(String, direct_meters::Outcome)> {
    let mut out = Vec::new();
    for (i, t) in targets.iter().enumerate() {
        if let Some(o) = direct_meters::sync_target(ctx, t, desired.of(i)).await {
            out.push((t.virtual_switch.clone(), o));
        }
    }
    out
}

/// Each target with an action profile, one after the other (they are few
/// and small: members, groups and the entries that use them).
async fn sync_profiles(
    ctx: &SetCtx,
    set: &Set<'_>,
    targets: &[dereference::Target],
    (sources, complete): (&crate::entry_sources::Sources, bool),
) -> Vec<(String, (apply::Outcome, profiles::Profiled))> {
    let mut out = Vec::with_capacity(targets.len());
    for t in targets {
        let outcome = profiles::sync_target(ctx, set, t, sources, complete).await;
        out.push((t.virtual_switch.clone(), outcome));
    }
    out
}

/// Reports conflicting claims with other sets (on both sides: the other
/// set finds the same conflict), drops the targets whose table an older
/// set keeps, and returns the conflicts this set loses (the default
/// actions and digests it must leave alone).
fn settle_conflicts(
    ctx: &SetCtx,
    set: &TableEntrySet,
    refs: &mut dereference::Dereferenced,
) -> Vec<conflicts::Conflict> {
    let ns = set.namespace().unwrap_or_default();
    let vss = ctx.caches.virtual_switches.store();
    // Only sets that may fill the same VirtualSwitches can conflict: those
    // naming one of them, and those selecting by label.
    let sets = ctx.caches.entry_sets.filing();
    let mut others = sets.under(&crate::cache::selecting_key(&ns));
    let mut named: Vec<&str> = refs
        .targets
        .iter()
        .map(|t| t.virtual_switch.as_str())
        .collect();
    named.sort_unstable();
    named.dedup();
    for vs in named {
        others.extend(sets.under(&crate::cache::filled_key(&ns, vs)));
    }
    // A set that names one and selects others is filed under both.
    others.sort_by(|a, b| crate::cache::list_order(a.as_ref(), b.as_ref()));
    others.dedup_by(|a, b| Arc::ptr_eq(a, b));
    conflicts::settle(set, refs, &others, |vs| {
        vss.get(&ObjectRef::new(vs).within(&ns))
    })
}

/// `record` with the keys of `targets` replaced; other targets (not
/// planned, or no longer selected) keep theirs.
fn with_targets(
    record: &Record,
    targets: impl Iterator<Item = (String, HashSet<EntryKey>)>,
) -> Record {
    let mut r = record.clone();
    for (vs, keys) in targets {
        if keys.is_empty() {
            r.targets.remove(&vs);
        } else {
            r.targets.insert(vs, Arc::new(keys));
        }
    }
    r
}

/// Writes a planned target; one that could not be planned is its outcome.
async fn write_planned(
    ctx: &SetCtx,
    p: Result<apply::Planned<'_>, apply::Outcome>,
) -> apply::Outcome {
    match p {
        Ok(p) => apply::write_target(ctx, p).await,
        Err(outcome) => outcome,
    }
}

/// Marks the set's status with what [`status::pending`] gives (if
/// anything) before the sync goes on.
async fn mark(
    ctx: &SetCtx,
    status: &mut StatusWriter<'_, TableEntrySet>,
    pending: status::Pending,
) -> Result<(), Error> {
    match status::pending(status.object().status.as_ref(), pending) {
        Some(new) => status.mark(ctx, new).await,
        None => Ok(()),
    }
}
