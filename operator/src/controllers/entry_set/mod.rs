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
//! - [`apply`]: per target, read back, infer ownership, plan, write, tally.
//!   Device I/O only; targets are independent of each other.
//! - [`status`]: conditions, counts, rates, per-target status, Events and
//!   the requeue, from the tallies and what dereference found. Pure.
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
pub mod profiles;
pub mod read_check;
pub mod resources;
pub mod resync_due;
pub mod status;

use std::collections::HashSet;
use std::sync::Arc;

use kube::runtime::controller::{Action, Controller};
use kube::runtime::finalizer::{Event, finalizer};
use kube::runtime::reflector::ObjectRef;
use kube::{Api, ResourceExt};
use p4fleet_crds::TableEntrySet;

use super::{
    Error, finalized, namespace, object_key, on_device_changes, scoped_api, watcher_config,
    write_status_noting,
};
use crate::context::Context;
use crate::entry_sources;
use crate::fleet::fills::fills;
use crate::ownership::Record;
use crate::status::now_rfc3339;
pub use cleanup::DELETE_GRACE;
pub use memory::SyncMemory;
use p4fleet_model::entries::EntryKey;
use resync_due::Touch;

/// What the TableEntrySet controller keeps between reconciles.
pub struct EntrySets {
    /// What syncs remember between runs (drift, statuses, tuned writes).
    pub sync_memory: SyncMemory,
    /// When each set's next periodic resync is due.
    pub resync_due: Arc<resync_due::ResyncDue>,
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
                            tokio::spawn(async move { ev.publish(set.as_ref(), &note).await });
                        }
                    }
                }
                crate::devices::NoticeEvent::Lost(k) => n.lost(switch, k),
            }));
        EntrySets {
            sync_memory: SyncMemory::default(),
            resync_due: Default::default(),
            ownership: Default::default(),
            entry_sources: entry_sources::EntrySources::new(shared.metrics.entry_sources.clone()),
            permits: crate::limits::DevicePermits::new(shared.config.limits.syncs_per_device),
            learners: Default::default(),
            digest_sinks: Default::default(),
            idle,
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

/// One sync: dereference → desired → plan per target → (status says
/// Syncing) → write per target → status.
///
/// Status never claims more than this process confirmed: a set first seen
/// by this process (operator restart) with an old Ready is marked
/// Unconfirmed before anything else, and a sync that is about to write
/// turns a Ready True False (Syncing) before its first write (a set not
/// Ready says Syncing only before a large write: `status::MARK_NEW_FROM`).
async fn sync(
    ctx: &SetCtx,
    api: &Api<TableEntrySet>,
    set: &TableEntrySet,
) -> Result<Action, Error> {
    let me = object_key(set);
    let started = std::time::Instant::now();
    let start_version = set.resource_version().unwrap_or_default();
    // The set as last written by this sync (its status is what the next
    // write is compared with), starting from what this process last wrote
    // when the cached object predates that write.
    let mut written: Option<TableEntrySet> = ctx
        .own
        .sync_memory
        .written
        .over(&me, &start_version)
        .map(|status| TableEntrySet {
            status: Some(status),
            ..set.clone()
        });
    // Versions whose status this sync's final write replaces: the start and
    // each intermediate mark, so a cache that shows a mark (not yet the
    // final write) is not mistaken for the truth by the next reconcile.
    let mut replaced = vec![start_version];
    if ctx.own.sync_memory.first_sight(&me) {
        let marked = mark(ctx, api, set, &mut written, status::Pending::Unconfirmed).await?;
        replaced.extend(marked);
    }
    let ns = namespace(set)?;
    let mut refs = dereference::dereference(&ctx.reads, &ctx.own.entry_sources, &ns, set).await?;
    let dereferenced = started.elapsed();
    let held = settle_conflicts(ctx, set, &mut refs);
    // Tables with an action profile go through `profiles` instead.
    let (indirect, direct): (Vec<_>, Vec<_>) = refs
        .targets
        .iter()
        .cloned()
        .partition(|t| t.profile.is_some());
    let desired = parse::per_target(
        &ctx.own.entry_sources,
        &ctx.own.sync_memory.desired,
        &me,
        set,
        &direct,
        &refs.sources,
    )
    .await;
    let parsed = started.elapsed();
    let record = ctx.own.ownership.get(&ctx.client, set).await?;
    // A damaged record stands in as an empty one (see crate::ownership):
    // an Event when found, a condition for a while after.
    let found_damage = record.damage.is_some();
    // Targets in parallel, at most `syncs_per_device` per device over all
    // sets (`crate::limits`): a slow device delays only its own targets.
    let parallel = ctx.config.limits.targets_per_set;
    let switch_of = |t: &dereference::Target| t.switch.name_any();
    let jobs = direct.iter().enumerate().map(|(i, target)| {
        let job = apply::Job {
            set,
            set_key: &me,
            target,
            desired: desired.of(i),
            deletes: refs.sources_complete(),
            record: &record.record,
        };
        (switch_of(target), apply::plan_target(ctx, job))
    });
    let planned = ctx.own.permits.each(parallel, jobs).await;
    let updates: usize = planned.iter().flatten().map(apply::Planned::writes).sum();
    let planned_at = started.elapsed();
    // Before any device write: the record knows every entry the set may
    // own once the writes are done (a crash in between leaves none unknown).
    let at_most = planned
        .iter()
        .flatten()
        .filter_map(|p| Some((p.virtual_switch().to_string(), p.owned_at_most()?)));
    let grown = with_targets(&record.record, at_most);
    let record = ctx.own.ownership.put(&ctx.client, set, grown).await?;
    if updates > 0 {
        let syncing = status::Pending::Syncing { updates };
        replaced.extend(mark(ctx, api, set, &mut written, syncing).await?);
    }
    let writes = direct.iter().map(switch_of).zip(planned);
    let writes = writes.map(|(switch, p)| (switch, write_planned(ctx, p)));
    let mut outcomes = ctx.own.permits.each(parallel, writes).await;
    let written_at = started.elapsed();
    let mut profiled = Vec::with_capacity(indirect.len());
    let sources = (&refs.sources, refs.sources_complete());
    for (vs, (outcome, p)) in sync_profiles(ctx, set, &indirect, sources).await {
        outcomes.push(outcome);
        profiled.push((vs, p));
    }
    // After: only what the devices confirmed.
    let owned = outcomes
        .iter()
        .filter_map(|o| Some((o.virtual_switch.clone(), o.owned.clone()?)));
    ctx.own
        .ownership
        .put(&ctx.client, set, with_targets(&record.record, owned))
        .await?;
    let set = written.as_ref().unwrap_or(set);
    let defaults = sync_default_actions(ctx, set, &refs.targets, &held).await;
    let mut metered = sync_direct_meters(ctx, &direct, &desired).await;
    metered.extend(indirect.iter().filter_map(|t| {
        let o = direct_meters::on_indirect_table(set, t)?;
        Some((t.virtual_switch.clone(), o))
    }));
    let now = now_rfc3339();
    let extras = resources::sync(
        ctx,
        set,
        &refs.targets,
        chrono::Utc::now().timestamp(),
        &now,
    )
    .await;
    let learned = digests::sync(ctx, set, &refs.targets, &held).await;
    let mut report = status::report(&status::Input {
        set,
        problems: &refs.problems,
        parse: desired.first(),
        outcomes: &outcomes,
        default_resync: super::spread(ctx.config.resync, &me),
        now: &now,
    });
    default_action::fold(&mut report, set, &defaults);
    profiles::fold(&mut report, set, &profiled, direct.len());
    direct_meters::fold(&mut report, set, &metered);
    if let Some(d) = ctx.own.ownership.recent_damage(set) {
        let ownership = set.spec.ownership;
        let conditions = &mut report.status.conditions;
        conditions.push(crate::ownership::damage_condition(&d, ownership));
        if found_damage {
            let ev = crate::ownership::damage_event(&d, ownership);
            report.events.push(ev);
        }
    }
    let mut new = report.status;
    resources::finish(&mut new, &extras, resources::wanted(set), MAX_ERRORS);
    digests::finish(&mut new, set, &learned, MAX_ERRORS);
    let (idle, idle_event) = idle::sync(ctx, set, desired.first());
    new.idle = idle;
    let stored = write_status_noting(ctx, api, set, &mut new, &report.events).await?;
    let produced = stored.and_then(|s| s.resource_version());
    ctx.metrics
        .entry_set(&namespace(set)?, &set.name_any(), &new);
    if let Some(c) = new
        .counters
        .as_ref()
        .filter(|_| !extras.per_switch.is_empty())
    {
        let top: Vec<u64> = c.top.iter().map(|t| t.packets).collect();
        let (ns, name) = (namespace(set)?, set.name_any());
        ctx.metrics
            .counters
            .readout(&ns, &name, &c.counter, &extras.per_switch, &top);
    }
    ctx.own
        .sync_memory
        .written
        .remember(&me, replaced, produced, new.clone());
    for ev in report.events.iter().chain(&idle_event) {
        ctx.events.publish(set, ev).await;
    }
    let resync = super::spread(ctx.config.resync, &me);
    let action = resources::requeue(set, report.action, resync);
    let action = digests::requeue(set, action);
    let action = on_backoff(ctx, &me, set, &outcomes, &refs.problems, action);
    resync_due::after_sync(&ctx.own.resync_due, set, started, &action, resync);
    // Where a sync's time went, from its start (a large set's read-back
    // and write show here, and a sync that ran again shows twice).
    let ms = |d: std::time::Duration| d.as_millis() as u64;
    tracing::debug!(
        set = %me,
        targets = refs.targets.len(),
        updates,
        dereferenced_ms = ms(dereferenced),
        parsed_ms = ms(parsed),
        planned_ms = ms(planned_at),
        written_ms = ms(written_at),
        total_ms = ms(started.elapsed()),
        "synced"
    );
    Ok(action)
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
    me: &str,
    set: &TableEntrySet,
    outcomes: &[apply::Outcome],
    problems: &[dereference::Problem],
    action: Action,
) -> Action {
    let key = format!("TableEntrySet/{me}");
    let now = tokio::time::Instant::now();
    let inputs = crate::retries::inputs(&set.metadata.generation);
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

/// Each target's default entry (`spec.defaultAction`), one target after
/// the other: one small read (and at most a write and a read) each.
async fn sync_default_actions(
    ctx: &SetCtx,
    set: &TableEntrySet,
    targets: &[dereference::Target],
    held: &[conflicts::Conflict],
) -> Vec<(String, default_action::Outcome)> {
    let mut out = Vec::with_capacity(targets.len());
    for t in targets {
        let claim = conflicts::Claim::DefaultAction;
        let plan = match conflicts::held_by(held, &t.virtual_switch, &claim) {
            Some(by) => default_action::Plan::Held { by: by.into() },
            None => default_action::plan(set, t),
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
    set: &TableEntrySet,
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
    let targets: Vec<(&str, &str)> = refs
        .targets
        .iter()
        .map(|t| (t.virtual_switch.as_str(), t.schema.name.as_str()))
        .collect();
    let ns = set.namespace().unwrap_or_default();
    let vss = ctx.caches.virtual_switches.store();
    // Only sets that may fill the same VirtualSwitches can conflict: those
    // naming one of them, and those selecting by label.
    let sets = ctx.caches.entry_sets.filing();
    let mut others = sets.under(&crate::cache::selecting_key(&ns));
    let mut named: Vec<&str> = targets.iter().map(|(vs, _)| *vs).collect();
    named.sort_unstable();
    named.dedup();
    for vs in named {
        others.extend(sets.under(&crate::cache::filled_key(&ns, vs)));
    }
    // A set that names one and selects others is filed under both.
    others.sort_by(|a, b| crate::cache::list_order(a.as_ref(), b.as_ref()));
    others.dedup_by(|a, b| Arc::ptr_eq(a, b));
    let found = conflicts::find(set, &targets, &others, |vs| {
        vss.get(&ObjectRef::new(vs).within(&ns))
    });
    let yielded: Vec<String> = conflicts::yielded(&found)
        .into_iter()
        .map(str::to_string)
        .collect();
    refs.targets
        .retain(|t| !yielded.contains(&t.virtual_switch));
    let held = conflicts::held(&found).cloned().collect();
    refs.problems.extend(
        found
            .into_iter()
            .map(dereference::Problem::OwnershipConflict),
    );
    held
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

/// Writes the status [`status::pending`] gives (if any) and keeps the set
/// with it in `written`.
async fn mark(
    ctx: &SetCtx,
    api: &Api<TableEntrySet>,
    set: &TableEntrySet,
    written: &mut Option<TableEntrySet>,
    pending: status::Pending,
) -> Result<Option<String>, Error> {
    let current = written.as_ref().unwrap_or(set);
    let Some(mut new) = status::pending(current.status.as_ref(), pending) else {
        return Ok(None);
    };
    let stored = write_status_noting(ctx, api, current, &mut new, &[]).await?;
    let version = stored.as_ref().and_then(|s| s.resource_version());
    let mut next = current.clone();
    next.status = Some(new);
    *written = Some(next);
    Ok(version)
}
