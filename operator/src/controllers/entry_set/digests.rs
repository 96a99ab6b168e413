//! Apply stage for a TableEntrySet's digests and learning (after its
//! entries): `spec.digests` checked against each target's running P4Info
//! (names, durations) and, only when every one is valid everywhere,
//! written as the exact difference from the device's `DigestEntry`s and
//! read back; `spec.learn` resolved into a rule ([`p4fleet_model::learn`])
//! whose task ([`crate::learning`]) turns digest messages into entries;
//! learned entries counted from the devices' tables. [`fold`] (pure)
//! puts it into the status: `status.digests`, per-item errors, the
//! `DigestsSynced` and `Learning` conditions and `Ready`.
//!
//! Learned entries carry the set's *learned* tag
//! ([`p4fleet_model::sync::learned_tag`]), never the set's own: the
//! set's exact-difference sync does not see them as its entries (Merge
//! leaves them alone, and Exclusive's plan skips them, see
//! `apply::plan_target`), so drift repair never deletes what was learned.
//! They go when the device notifies their idle timeout, or with the set.
//!
//! Digest sinks (`spec.digests[].sink`) run in [`crate::digest_sink`]:
//! here their ConfigMaps are claimed, configured and deleted, and a
//! listener is started per target whose configs are confirmed.

use std::collections::BTreeSet;
use std::sync::Arc;

use kube::ResourceExt;
use p4fleet_client::Device;
use p4fleet_crds::entry_set::EntryError as StatusEntryError;
use p4fleet_crds::{Condition, DigestSinkKind, DigestsStatus, TableEntrySetStatus};
use p4fleet_model::learn::{self, DigestConfig, LearnError, LearnNames, LearnRule};
use p4fleet_model::sync;
use p4fleet_proto::p4info::P4Info;
use p4fleet_proto::p4runtime::{self as p4, entity::Entity};

use super::SetCtx;
use super::dereference::Target;
use super::set::Set;
use crate::digest_sink::{self, SinkJob, SinkRule};
use crate::learning::Job;

pub const DIGESTS_SYNCED: &str = "DigestsSynced";
pub const LEARNING: &str = "Learning";

/// What the digests and learning of a set came to.
#[derive(Debug, Default)]
pub struct Outcome {
    /// Names of the digests some target confirmed (desired or not yet
    /// deleted).
    pub configured: BTreeSet<String>,
    /// Targets that confirmed every desired config.
    pub synced_targets: usize,
    pub targets: usize,
    pub errors: Vec<StatusEntryError>,
    /// `DigestsSynced` reason when not synced.
    pub failure: Option<&'static str>,
    /// Learned entries read back, over all targets (`None`: no learning,
    /// or no target read).
    pub learned: Option<u64>,
    /// `Learning` reason when not learning (`LearnInvalid`,
    /// `LimitReached`, `DigestsNotSynced`).
    pub learn_failure: Option<&'static str>,
    pub learn_message: String,
    pub aged_out: Option<u64>,
    /// The sink ConfigMaps the set writes (or could not delete yet).
    pub sink_config_maps: BTreeSet<String>,
}

impl Outcome {
    fn fail(&mut self, reason: &'static str, source: String, why: String) {
        self.failure.get_or_insert(reason);
        let e = StatusEntryError {
            source,
            key: None,
            reason: why,
        };
        if !self.errors.contains(&e) {
            self.errors.push(e);
        }
    }
}

/// Whether the set asks for digests or learning, or still has configs to
/// remove.
pub fn wanted(set: &Set<'_>) -> bool {
    !set.spec.digests.is_empty()
        || set.spec.learn.is_some()
        || !released_names(set).is_empty()
        || !status_sinks(set).is_empty()
}

/// The sink ConfigMaps the set's status names (written, or to delete).
fn status_sinks(set: &Set<'_>) -> Vec<String> {
    set.status
        .as_ref()
        .and_then(|s| s.digests.as_ref())
        .map(|d| d.sink_config_maps.clone())
        .unwrap_or_default()
}

/// The sink ConfigMaps the spec asks for: `(index, name, digest, keep)`.
fn wanted_sinks(set: &Set<'_>) -> Vec<(usize, String, String, u32)> {
    let me = &set.name;
    set.spec
        .digests
        .iter()
        .enumerate()
        .filter_map(|(i, d)| {
            let sink = d.sink.as_ref()?;
            sink.to.contains(&DigestSinkKind::ConfigMap).then(|| {
                let name = digest_sink::config_map_name(me, &d.name);
                (i, name, d.name.clone(), sink.keep)
            })
        })
        .collect()
}

/// Digests the set configured before (its status says) and no longer
/// asks for.
fn released_names(set: &Set<'_>) -> Vec<String> {
    let before = set
        .status
        .and_then(|s| s.digests.as_ref())
        .map(|d| d.configured.clone())
        .unwrap_or_default();
    before
        .into_iter()
        .filter(|n| !set.spec.digests.iter().any(|d| &d.name == n))
        .collect()
}

/// The set's digest configs resolved against one program: `(name,
/// DigestEntry)`, and the invalid ones as errors naming item and field.
fn configs(
    set: &Set<'_>,
    info: &P4Info,
) -> (Vec<(String, p4::DigestEntry)>, Vec<StatusEntryError>) {
    let (mut ok, mut bad) = (Vec::new(), Vec::new());
    let refuse = |i: usize, field: &str, why: String| StatusEntryError {
        source: format!("digests[{i}]"),
        key: None,
        reason: format!("{field}: {why}"),
    };
    for (i, d) in set.spec.digests.iter().enumerate() {
        let digest = match learn::digest(info, &d.name) {
            Ok(x) => x,
            Err(e) => {
                bad.push(refuse(i, "name", e.to_string()));
                continue;
            }
        };
        if let Some(Err(e)) = d.sink.as_ref().map(digest_sink::check) {
            bad.push(refuse(i, e.field(), e.to_string()));
            continue;
        }
        let max_timeout_ns = learn::parse_duration(&d.max_timeout);
        let ack_timeout_ns = learn::parse_duration(&d.ack_timeout);
        match (max_timeout_ns, ack_timeout_ns) {
            (Ok(max_timeout_ns), Ok(ack_timeout_ns)) => {
                let c = DigestConfig {
                    max_timeout_ns,
                    max_list_size: d.max_list_size,
                    ack_timeout_ns,
                };
                ok.push((d.name.clone(), c.entry(digest.id)));
            }
            (Err(e), _) => bad.push(refuse(i, "maxTimeout", e.to_string())),
            (_, Err(e)) => bad.push(refuse(i, "ackTimeout", e.to_string())),
        }
    }
    (ok, bad)
}

/// The set's learn rule by names (the set's own table by default).
fn learn_names(set: &Set<'_>) -> Option<LearnNames> {
    let l = set.spec.learn.as_ref()?;
    Some(LearnNames {
        digest: l.digest.clone(),
        table: l.table.clone().unwrap_or_else(|| set.spec.table.clone()),
        action: l.action.clone(),
        key: l.key.clone().into_iter().collect(),
        params: l.params.clone().into_iter().collect(),
        idle_timeout: l.idle_timeout.clone(),
    })
}

/// The metadata of entries the set learned.
fn learned_metadata(set: &Set<'_>) -> Vec<u8> {
    sync::tag_metadata(sync::learned_tag(set.tag))
}

/// A learn rule error as a status error naming the field.
fn learn_error(e: &LearnError) -> StatusEntryError {
    StatusEntryError {
        source: format!("learn.{}", e.field()),
        key: None,
        reason: e.to_string(),
    }
}

/// Why a target's digests cannot be configured.
#[derive(Debug, thiserror::Error)]
enum TargetProblem {
    #[error(
        "Switch {switch}: digests and learning are P4Runtime only (BFRT digests are not modelled)"
    )]
    NotP4Runtime { switch: String },
    #[error("no pipeline loaded")]
    NoPipeline,
    #[error(transparent)]
    Device(#[from] p4fleet_client::Error),
}

impl TargetProblem {
    /// The `DigestsSynced` reason: the project's one reason for what a
    /// target cannot do, or a device that did not answer.
    fn reason(&self) -> &'static str {
        match self {
            TargetProblem::NotP4Runtime { .. }
            | TargetProblem::Device(p4fleet_client::Error::Unsupported(_)) => "UnsupportedOnTarget",
            TargetProblem::NoPipeline | TargetProblem::Device(_) => "DeviceUnavailable",
        }
    }
}

/// The target's P4Runtime device and running P4Info, or why not.
async fn program(ctx: &SetCtx, t: &Target) -> Result<(Arc<Device>, P4Info), TargetProblem> {
    let dev = ctx.devices.connect(&t.switch)?;
    let Device::P4Runtime(p) = dev.as_ref() else {
        return Err(TargetProblem::NotP4Runtime {
            switch: t.switch.name_any(),
        });
    };
    match p.running_p4info(t.slot).await? {
        Some(info) => Ok((dev.clone(), info)),
        None => Err(TargetProblem::NoPipeline),
    }
}

/// Every DigestEntry configured on the target's device.
async fn read_configs(
    dev: &Device,
    slot: u32,
) -> Result<Vec<p4::DigestEntry>, p4fleet_client::Error> {
    let Device::P4Runtime(p) = dev else {
        return Ok(Vec::new());
    };
    let filter = p4::Entity {
        entity: Some(Entity::DigestEntry(p4::DigestEntry::default())),
    };
    let read = p.read_entities(slot, vec![filter]).await?;
    Ok(read
        .into_iter()
        .filter_map(|e| match e.entity {
            Some(Entity::DigestEntry(d)) => Some(d),
            _ => None,
        })
        .collect())
}

/// Applies the set's digest configs, reads them back, runs its learning
/// and counts what it learned, on every target.
pub async fn sync(
    ctx: &SetCtx,
    set: &Set<'_>,
    targets: &[Target],
    held: &[super::conflicts::Conflict],
) -> Outcome {
    let key = &set.key;
    let mut out = Outcome {
        targets: targets.len(),
        ..Outcome::default()
    };
    if !wanted(set) {
        ctx.own.learners.retain(key, &[]);
        ctx.own.digest_sinks.stop(key).await;
        return out;
    }
    let mut resolved = Vec::new();
    for t in targets {
        match program(ctx, t).await {
            Ok((dev, info)) => resolved.push((t, dev, info)),
            Err(e) => out.fail(
                e.reason(),
                format!("VirtualSwitch {}", t.virtual_switch),
                e.to_string(),
            ),
        }
    }
    // Every config and the rule checked on every target before any write.
    let mut planned = Vec::new();
    let mut invalid = false;
    for (_, _, info) in &resolved {
        let (ok, bad) = configs(set, info);
        invalid |= !bad.is_empty();
        for e in bad {
            out.fail("DigestInvalid", e.source, e.reason);
        }
        planned.push(ok);
    }
    let mut rules = Vec::new();
    if let Some(names) = learn_names(set) {
        for (_, _, info) in &resolved {
            match learn::resolve(info, &names, learned_metadata(set)) {
                Ok(r) => rules.push(Some(r)),
                Err(e) => {
                    let e = learn_error(&e);
                    out.learn_failure = Some("LearnInvalid");
                    out.learn_message = format!("{}: {}", e.source, e.reason);
                    if !out.errors.contains(&e) {
                        out.errors.push(e);
                    }
                    rules.push(None);
                }
            }
        }
    }
    if invalid {
        ctx.own.learners.retain(key, &[]);
        ctx.own.digest_sinks.retain(key, &[]);
        // Nothing changes while the spec is invalid: what was written stays.
        out.sink_config_maps.extend(status_sinks(set));
        if out.learn_failure.is_none() && set.spec.learn.is_some() {
            out.learn_failure = Some("DigestsNotSynced");
            out.learn_message = "the digest configs are invalid".into();
        }
        return out;
    }
    // A digest an older set configures on a target is left to it there.
    for ((t, _, _), ok) in resolved.iter().zip(planned.iter_mut()) {
        let vs = &t.virtual_switch;
        ok.retain(|(name, _)| {
            let claim = super::conflicts::Claim::Digest(name.clone());
            let Some(by) = super::conflicts::held_by(held, vs, &claim) else {
                return true;
            };
            let why = format!(
                "digest {name}: TableEntrySet {by} is older and configures it, so this set is held: it does not write it; configure the digest in one of the two sets only"
            );
            out.fail("OwnershipConflict", format!("VirtualSwitch {vs}"), why);
            false
        });
    }
    let released = released_names(set);
    let mut learning = Vec::new();
    let mut sinking = Vec::new();
    for (i, ((t, dev, info), ok)) in resolved.iter().zip(&planned).enumerate() {
        let synced = write_configs(t, dev, info, ok, &released, &mut out).await;
        if synced {
            out.synced_targets += 1;
            sinking.push((*t, dev.clone(), info));
        }
        if let Some(Some(rule)) = rules.get(i) {
            learning.push((*t, dev.clone(), rule.clone(), synced));
        }
    }
    sync_sinks(ctx, set, key, &sinking, &mut out).await;
    if set.spec.learn.is_some() {
        learn_targets(ctx, set, key, learning, &mut out).await;
    } else {
        ctx.own.learners.retain(key, &[]);
    }
    out
}

/// One target's configs: plan against the device, write, read back.
/// Whether every desired config is confirmed.
async fn write_configs(
    t: &Target,
    dev: &Device,
    info: &P4Info,
    ok: &[(String, p4::DigestEntry)],
    released: &[String],
    out: &mut Outcome,
) -> bool {
    let Device::P4Runtime(p) = dev else {
        return false;
    };
    let vs = &t.virtual_switch;
    let source = format!("VirtualSwitch {vs}");
    let on_device = match read_configs(dev, t.slot).await {
        Ok(v) => v,
        Err(e) => {
            out.fail("DeviceUnavailable", source, e.to_string());
            return false;
        }
    };
    let released: Vec<(String, u32)> = released
        .iter()
        .filter_map(|n| Some((n.clone(), learn::digest(info, n).ok()?.id)))
        .collect();
    let ids: Vec<u32> = released.iter().map(|(_, id)| *id).collect();
    let desired: Vec<p4::DigestEntry> = ok.iter().map(|(_, d)| *d).collect();
    let updates = learn::plan_configs(&desired, &on_device, &ids);
    if !updates.is_empty() {
        match p.write_entities(t.slot, updates).await {
            Ok(refused) => {
                for (_, code, message) in refused {
                    let why = format!(
                        "VirtualSwitch {vs} refused a digest config ({}): {message}",
                        tonic::Code::from_i32(code).description()
                    );
                    out.fail("DigestRefused", "digests".into(), why);
                }
            }
            Err(e) => {
                out.fail("DeviceUnavailable", source, e.to_string());
                return false;
            }
        }
    }
    // Status says only what the device reads back.
    let after = match read_configs(dev, t.slot).await {
        Ok(v) => v,
        Err(e) => {
            out.fail("DeviceUnavailable", source, e.to_string());
            return false;
        }
    };
    let confirmed = learn::confirmed(&desired, &after);
    for ((name, _), c) in ok.iter().zip(&confirmed) {
        if *c {
            out.configured.insert(name.clone());
        }
    }
    for (name, id) in &released {
        if after.iter().any(|d| d.digest_id == *id) {
            out.configured.insert(name.clone());
        }
    }
    confirmed.iter().all(|c| *c)
}

/// The set's digest sinks: its ConfigMaps claimed and buffered (those
/// that left the spec deleted), and a listener on each target whose
/// configs are confirmed (`targets`).
async fn sync_sinks(
    ctx: &SetCtx,
    set: &Set<'_>,
    key: &str,
    targets: &[(&Target, Arc<Device>, &P4Info)],
    out: &mut Outcome,
) {
    let mut books = Vec::new();
    for (i, name, digest, keep) in wanted_sinks(set) {
        match ctx
            .own
            .digest_sinks
            .claim(&ctx.client, key, &set.reference, &name)
            .await
        {
            Ok(()) => {
                out.sink_config_maps.insert(name.clone());
                books.push((name, digest, keep));
            }
            Err(e) => out.fail(e.reason(), format!("digests[{i}]"), format!("sink: {e}")),
        }
    }
    ctx.own
        .digest_sinks
        .configure(&ctx.client, key, &set.reference, set.owner.as_ref(), &books)
        .await;
    let (ns, me) = (&set.namespace, &set.name);
    for name in status_sinks(set) {
        if books.iter().any(|b| b.0 == name) {
            continue;
        }
        if let Err(e) = digest_sink::delete(&ctx.client, ns, me, &name).await {
            let why = format!("sink ConfigMap {name} not deleted: {e}");
            out.sink_config_maps.insert(name);
            out.fail("DigestSinkFailed", "digests".into(), why);
        }
    }
    let mut keep = Vec::new();
    for (t, dev, info) in targets {
        let rules: Vec<SinkRule> = set
            .spec
            .digests
            .iter()
            .filter_map(|d| {
                let sink = d.sink.as_ref()?;
                // Checked before any write: every name resolves here.
                let digest = learn::digest(info, &d.name).ok()?;
                // Its ConfigMap, when claimed (`books`, by digest name).
                let config_map = books.iter().find(|b| b.1 == d.name).map(|b| b.0.clone());
                let log = sink.to.contains(&DigestSinkKind::Log);
                (log || config_map.is_some()).then_some(SinkRule {
                    digest,
                    log,
                    config_map,
                })
            })
            .collect();
        if rules.is_empty() {
            continue;
        }
        keep.push(t.virtual_switch.as_str());
        let job = SinkJob {
            virtual_switch: t.virtual_switch.clone(),
            device: dev.clone(),
            slot: t.slot,
            rules,
        };
        ctx.own.digest_sinks.ensure(key, job);
    }
    ctx.own.digest_sinks.retain(key, &keep);
}

/// Starts (or keeps) each target's learning task and counts the learned
/// entries the devices hold.
async fn learn_targets(
    ctx: &SetCtx,
    set: &Set<'_>,
    key: &str,
    learning: Vec<(&Target, Arc<Device>, LearnRule, bool)>,
    out: &mut Outcome,
) {
    let Some(spec) = &set.spec.learn else {
        return;
    };
    let max = u64::from(spec.max_learned);
    let shared = Arc::new(set.reference.clone());
    let mut keep = Vec::new();
    let mut total = None;
    let mut full = Vec::new();
    for (t, dev, rule, synced) in learning {
        let held = match dev.read_table(t.slot, rule.table_id).await {
            Ok(entries) => entries.iter().filter(|e| rule.learned(e)).count() as u64,
            Err(e) => {
                out.fail(
                    "DeviceUnavailable",
                    format!("VirtualSwitch {}", t.virtual_switch),
                    e.to_string(),
                );
                continue;
            }
        };
        *total.get_or_insert(0) += held;
        if held >= max {
            full.push(t.virtual_switch.clone());
        }
        if !synced {
            continue;
        }
        keep.push(t.virtual_switch.as_str());
        let job = Job {
            set: shared.clone(),
            virtual_switch: t.virtual_switch.clone(),
            device: dev,
            slot: t.slot,
            rule,
            max_learned: max,
            learned: held,
        };
        ctx.own.learners.ensure(key, job, &ctx.events);
    }
    ctx.own.learners.retain(key, &keep);
    out.learned = total;
    out.aged_out = ctx.own.learners.aged_out(key);
    if out.learn_failure.is_some() {
        return;
    }
    if keep.len() < out.targets {
        out.learn_failure = Some("DigestsNotSynced");
        out.learn_message = format!(
            "learning on {} of {} VirtualSwitches (the others' digest configs are not confirmed)",
            keep.len(),
            out.targets
        );
    } else if !full.is_empty() {
        out.learn_failure = Some("LimitReached");
        out.learn_message = format!(
            "maxLearned ({max}) reached on {}: further digests are dropped",
            full.join(", ")
        );
    } else {
        out.learn_message = format!(
            "{} entries learned from {} (at most {max} per VirtualSwitch)",
            total.unwrap_or(0),
            spec.digest
        );
    }
}

/// How often a learning set comes back to count what it learned (a full
/// sync: read-back and repair of its own entries too).
pub const LEARN_REFRESH: std::time::Duration = std::time::Duration::from_secs(15);

/// The reconcile's requeue of a learning set: at most [`LEARN_REFRESH`]
/// away, unless a retry comes sooner.
pub fn requeue(
    set: &Set<'_>,
    action: kube::runtime::controller::Action,
) -> kube::runtime::controller::Action {
    use kube::runtime::controller::Action;
    if set.spec.learn.is_none() || action == Action::requeue(super::status::RETRY) {
        return action;
    }
    Action::requeue(LEARN_REFRESH)
}

/// On deletion of the set: its sinks stopped and their ConfigMaps
/// deleted (an API error fails the cleanup, which is retried: a bare
/// kube-apiserver has no garbage collector to follow the ownerReference);
/// its digest configs and learned entries off every target that
/// resolves, and its learning stopped. The device part is best effort: a
/// device that cannot be reached keeps them (the entries' cleanup
/// reports unreachable devices).
pub async fn cleanup(ctx: &SetCtx, set: &Set<'_>, targets: &[Target]) -> Result<(), kube::Error> {
    let key = &set.key;
    ctx.own.learners.retain(key, &[]);
    // The writer first, so no write lands after the delete.
    ctx.own.digest_sinks.stop(key).await;
    let ns = &set.namespace;
    let mut sinks: BTreeSet<String> = status_sinks(set).into_iter().collect();
    sinks.extend(wanted_sinks(set).into_iter().map(|s| s.1));
    // Only ConfigMaps labelled as this set's: a name another ConfigMap
    // held (DigestSinkTaken) is never deleted.
    for name in &sinks {
        digest_sink::delete(&ctx.client, ns, &set.name, name).await?;
    }
    let mut names: Vec<String> = set.spec.digests.iter().map(|d| d.name.clone()).collect();
    names.extend(released_names(set));
    let table = set
        .spec
        .learn
        .as_ref()
        .map(|l| l.table.clone().unwrap_or_else(|| set.spec.table.clone()));
    if names.is_empty() && table.is_none() {
        return Ok(());
    }
    let metadata = learned_metadata(set);
    for t in targets {
        let Ok((dev, info)) = program(ctx, t).await else {
            continue;
        };
        let Device::P4Runtime(p) = dev.as_ref() else {
            continue;
        };
        let mut updates = Vec::new();
        if let Some(table) = &table
            && let Some(tab) = info.tables.iter().find(|x| {
                x.preamble
                    .as_ref()
                    .is_some_and(|p| &p.name == table || &p.alias == table)
            })
        {
            let id = tab.preamble.as_ref().map(|p| p.id).unwrap_or(0);
            if let Ok(entries) = dev.read_table(t.slot, id).await {
                updates.extend(
                    entries
                        .iter()
                        .filter(|e| e.metadata == metadata)
                        .map(LearnRule::delete),
                );
            }
        }
        let on_device = read_configs(&dev, t.slot).await.unwrap_or_default();
        let ids: Vec<u32> = names
            .iter()
            .filter_map(|n| Some(learn::digest(&info, n).ok()?.id))
            .collect();
        updates.extend(learn::plan_configs(&[], &on_device, &ids));
        if updates.is_empty() {
            continue;
        }
        if let Err(e) = p.write_entities(t.slot, updates).await {
            tracing::warn!(set = %key, virtual_switch = %t.virtual_switch, error = %e, "digest configs and learned entries not removed");
        }
    }
    Ok(())
}

/// Puts `out` into `status` (pure): `status.digests`, the errors (after
/// the others, within `max_errors`), `DigestsSynced`, `Learning` and,
/// when either fails for a reason of the spec or the device, `Ready`
/// False.
pub fn fold(status: &mut TableEntrySetStatus, set: &Set<'_>, out: &Outcome, max_errors: usize) {
    if !wanted(set) {
        status.digests = None;
        return;
    }
    status.digests = Some(DigestsStatus {
        configured: out.configured.iter().cloned().collect(),
        learned: out.learned,
        aged_out: out.aged_out,
        sink_config_maps: out.sink_config_maps.iter().cloned().collect(),
    });
    for e in &out.errors {
        if status.errors.len() >= max_errors {
            break;
        }
        status.errors.push(e.clone());
    }
    let synced = match out.failure {
        // Nothing confirmed anything yet.
        None if out.targets == 0 => Condition::new(
            DIGESTS_SYNCED,
            false,
            "NoTarget",
            "no VirtualSwitch to configure yet",
        ),
        None if out.synced_targets == out.targets => Condition::new(
            DIGESTS_SYNCED,
            true,
            "Synced",
            format!(
                "{} digest configs confirmed on {} VirtualSwitches",
                set.spec.digests.len(),
                out.targets
            ),
        ),
        None => Condition::new(
            DIGESTS_SYNCED,
            false,
            "Unconfirmed",
            format!(
                "digest configs confirmed on {} of {} VirtualSwitches",
                out.synced_targets, out.targets
            ),
        ),
        Some(reason) => {
            let first = out
                .errors
                .iter()
                .find(|e| !e.source.starts_with("learn."))
                .map(|e| format!("{}: {}", e.source, e.reason))
                .unwrap_or_default();
            Condition::new(DIGESTS_SYNCED, false, reason, first)
        }
    };
    let learning = set.spec.learn.as_ref().map(|_| match out.learn_failure {
        None if out.targets == 0 => Condition::new(
            LEARNING,
            false,
            "NoTarget",
            "no VirtualSwitch to learn on yet",
        ),
        None => Condition::new(LEARNING, true, "Learning", out.learn_message.clone()),
        Some(reason) => Condition::new(LEARNING, false, reason, out.learn_message.clone()),
    });
    // A full table is the bound doing its job: Learning says so, the set
    // is still Ready.
    let breaks_ready = [Some(&synced), learning.as_ref()]
        .into_iter()
        .flatten()
        .find(|c| {
            !c.is_true()
                && !["LimitReached", "DigestsNotSynced", "NoTarget"].contains(&c.reason.as_str())
        });
    if let Some(c) = breaks_ready
        && let Some(ready) = status.conditions.iter_mut().find(|c| c.type_ == "Ready")
        && ready.is_true()
    {
        *ready = Condition::new("Ready", false, &c.reason, c.message.clone());
    }
    status.conditions.push(synced);
    status.conditions.extend(learning);
}

#[cfg(test)]
mod tests {
    use super::*;
    use p4fleet_crds::TableEntrySet;
    use p4fleet_crds::{DigestSetting, LearnSpec};

    fn info() -> P4Info {
        let text = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../examples/l2switch/p4info.txt"),
        )
        .unwrap();
        p4fleet_proto::p4info::parse_text(&text).unwrap()
    }

    fn set(digests: Vec<DigestSetting>, learn: Option<LearnSpec>) -> TableEntrySet {
        let mut spec: p4fleet_crds::TableEntrySetSpec = serde_json::from_value(
            serde_json::json!({"virtualSwitchRef": "b", "table": "MyIngress.smac"}),
        )
        .unwrap();
        spec.digests = digests;
        spec.learn = learn;
        let mut s = TableEntrySet::new("s", spec);
        s.metadata.namespace = Some("ns".into());
        s
    }

    fn digest(name: &str, max_timeout: &str) -> DigestSetting {
        DigestSetting {
            name: name.into(),
            max_timeout: max_timeout.into(),
            max_list_size: 4,
            ack_timeout: "1s".into(),
            sink: None,
        }
    }

    fn sunk(name: &str, to: Vec<DigestSinkKind>, keep: u32) -> DigestSetting {
        DigestSetting {
            sink: Some(p4fleet_crds::DigestSink { to, keep }),
            ..digest(name, "10ms")
        }
    }

    #[test]
    fn a_bad_sink_is_named_with_its_field_and_nothing_is_configured() {
        use DigestSinkKind::*;
        let s = set(
            vec![
                sunk("mac_learn_digest_t", vec![Log, ConfigMap], 20),
                sunk("mac_learn_digest_t", vec![], 20),
                sunk("mac_learn_digest_t", vec![ConfigMap], 0),
            ],
            None,
        );
        let (ok, bad) = configs(&Set::of(&s), &info());
        assert_eq!(ok.len(), 1);
        let got: Vec<(String, String)> = bad.into_iter().map(|e| (e.source, e.reason)).collect();
        assert_eq!(
            got,
            [
                (
                    "digests[1]".to_string(),
                    "sink.to: no sink given (Log, ConfigMap or both)".to_string()
                ),
                (
                    "digests[2]".to_string(),
                    "sink.keep: 0 is out of range (1 to 500)".to_string()
                ),
            ]
        );
        // Only the ConfigMap sinks have a ConfigMap, named after set and
        // digest.
        let wanted: Vec<(usize, String)> = wanted_sinks(&Set::of(&s))
            .into_iter()
            .map(|(i, name, _, _)| (i, name))
            .collect();
        assert_eq!(
            wanted,
            [
                (0, "s-digest-mac-learn-digest-t".to_string()),
                (2, "s-digest-mac-learn-digest-t".to_string())
            ]
        );
    }

    #[test]
    fn a_target_that_cannot_do_digests_is_unsupported_on_target() {
        let p = TargetProblem::NotP4Runtime {
            switch: "tofino-1".into(),
        };
        assert_eq!(p.reason(), "UnsupportedOnTarget");
        assert!(p.to_string().contains("tofino-1"), "{p}");
        assert_eq!(TargetProblem::NoPipeline.reason(), "DeviceUnavailable");
        let client = TargetProblem::Device(p4fleet_client::Error::Unsupported("x"));
        assert_eq!(client.reason(), "UnsupportedOnTarget");
        let mut out = Outcome {
            targets: 1,
            ..Default::default()
        };
        out.fail(p.reason(), "VirtualSwitch t".into(), p.to_string());
        let mut st = TableEntrySetStatus {
            conditions: vec![Condition::new("Ready", true, "Synced", "")],
            ..Default::default()
        };
        fold(
            &mut st,
            &Set::of(&set(vec![digest("mac_learn_digest_t", "0")], None)),
            &out,
            10,
        );
        let c = st
            .conditions
            .iter()
            .find(|c| c.type_ == DIGESTS_SYNCED)
            .unwrap();
        assert_eq!(
            (c.is_true(), c.reason.as_str()),
            (false, "UnsupportedOnTarget")
        );
    }

    /// A set of no digests whose status still reports `digests`.
    fn with_digests(digests: DigestsStatus) -> TableEntrySet {
        let mut s = set(vec![], None);
        s.status = Some(TableEntrySetStatus {
            digests: Some(digests),
            ..Default::default()
        });
        s
    }

    #[test]
    fn sink_config_maps_are_reported_and_kept_until_deleted() {
        let s = with_digests(DigestsStatus {
            sink_config_maps: vec!["s-digest-mac-learn-digest-t".into()],
            ..Default::default()
        });
        assert!(
            wanted(&Set::of(&s)),
            "a sink ConfigMap to delete is still work"
        );
        let out = Outcome {
            targets: 1,
            synced_targets: 1,
            sink_config_maps: ["s-digest-mac-learn-digest-t".to_string()].into(),
            ..Default::default()
        };
        let mut st = TableEntrySetStatus::default();
        fold(&mut st, &Set::of(&s), &out, 10);
        assert_eq!(
            st.digests.unwrap().sink_config_maps,
            ["s-digest-mac-learn-digest-t"]
        );
    }

    #[test]
    fn each_bad_digest_is_named_with_its_field() {
        let s = set(
            vec![
                digest("mac_learn_digest_t", "10ms"),
                digest("nope", "10ms"),
                digest("mac_learn_digest_t", "soon"),
            ],
            None,
        );
        let (ok, bad) = configs(&Set::of(&s), &info());
        assert_eq!(ok.len(), 1);
        assert_eq!(ok[0].1.digest_id, 402184575);
        assert_eq!(ok[0].1.config.unwrap().max_timeout_ns, 10_000_000);
        let got: Vec<(String, String)> = bad.into_iter().map(|e| (e.source, e.reason)).collect();
        assert_eq!(
            got[0],
            (
                "digests[1]".into(),
                "name: digest nope is not in the program".into()
            )
        );
        assert_eq!(got[1].0, "digests[2]");
        assert!(got[1].1.starts_with("maxTimeout: \"soon\""), "{}", got[1].1);
    }

    #[test]
    fn status_says_what_the_devices_confirmed() {
        let learn = LearnSpec {
            digest: "mac_learn_digest_t".into(),
            action: "NoAction".into(),
            key: [("hdr.ethernet.srcAddr".to_string(), "srcAddr".to_string())].into(),
            max_learned: 10,
            ..Default::default()
        };
        let s = set(vec![digest("mac_learn_digest_t", "10ms")], Some(learn));
        let ready = || TableEntrySetStatus {
            conditions: vec![Condition::new("Ready", true, "Synced", "")],
            ..Default::default()
        };
        // One of two targets confirmed: not synced, so not Ready.
        let out = Outcome {
            configured: ["mac_learn_digest_t".to_string()].into(),
            synced_targets: 1,
            targets: 2,
            learned: Some(3),
            learn_failure: Some("DigestsNotSynced"),
            ..Default::default()
        };
        let mut st = ready();
        fold(&mut st, &Set::of(&s), &out, 10);
        let c = |st: &TableEntrySetStatus, t: &str| {
            let c = st.conditions.iter().find(|c| c.type_ == t).unwrap();
            (c.is_true(), c.reason.clone())
        };
        assert_eq!(c(&st, DIGESTS_SYNCED), (false, "Unconfirmed".into()));
        assert_eq!(c(&st, LEARNING), (false, "DigestsNotSynced".into()));
        assert_eq!(c(&st, "Ready"), (false, "Unconfirmed".into()));
        assert_eq!(st.digests.as_ref().unwrap().learned, Some(3));
        // A bad learn rule: Ready False with its reason, the error named.
        let mut out = Outcome {
            synced_targets: 1,
            targets: 1,
            ..Default::default()
        };
        out.learn_failure = Some("LearnInvalid");
        out.learn_message = "learn.idleTimeout: no".into();
        out.errors.push(learn_error(&LearnError::NoIdleTimeout {
            table: "MyIngress.smac".into(),
        }));
        let mut st = ready();
        fold(&mut st, &Set::of(&s), &out, 10);
        assert_eq!(c(&st, DIGESTS_SYNCED), (true, "Synced".into()));
        assert_eq!(c(&st, "Ready"), (false, "LearnInvalid".into()));
        assert_eq!(st.errors[0].source, "learn.idleTimeout");
        // No target yet: nothing is claimed.
        let mut st = ready();
        fold(&mut st, &Set::of(&s), &Outcome::default(), 10);
        assert_eq!(c(&st, DIGESTS_SYNCED), (false, "NoTarget".into()));
        assert_eq!(c(&st, LEARNING), (false, "NoTarget".into()));
        // Nothing asked and nothing configured before: no status at all.
        let mut st = ready();
        fold(
            &mut st,
            &Set::of(&set(vec![], None)),
            &Outcome::default(),
            10,
        );
        assert!(st.digests.is_none());
        assert_eq!(st.conditions.len(), 1);
    }

    #[test]
    fn configs_leaving_the_spec_are_released() {
        let mut s = with_digests(DigestsStatus {
            configured: vec!["mac_learn_digest_t".into()],
            ..Default::default()
        });
        assert!(wanted(&Set::of(&s)), "a config to delete is still work");
        assert_eq!(released_names(&Set::of(&s)), ["mac_learn_digest_t"]);
        s.spec.digests = vec![digest("mac_learn_digest_t", "0")];
        assert!(released_names(&Set::of(&s)).is_empty());
    }
}
