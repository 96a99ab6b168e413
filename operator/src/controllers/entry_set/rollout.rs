//! `spec.rollout` of a TableEntrySet: which entries revision each target
//! is to hold (docs/rollouts.md, "Rolling out entries"). The content read
//! now is kept as a revision ([`crate::fleet::entry_revisions`]); the
//! rollout's state machine ([`crate::fleet::rollout::advance`], the one
//! programs use) moves the targets to it step by step from the revision
//! they held, gated on what the set's last syncs confirmed there; a
//! failed gate sends the moved ones back to the previous entries, read
//! from that revision's ConfigMap. The sync then builds each target's
//! desired entries from the revision assigned to it.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, PostParams};
use kube::runtime::reflector::ObjectRef;
use p4fleet_crds::{
    Condition, RolloutPhase, RolloutRevision, RolloutStatus, RolloutStrategy, TableEntrySet,
    TableEntrySetStatus, TargetStatus, find_condition,
};

use super::SetCtx;
use super::dereference::Target;
use crate::entry_sources::Sources;
use crate::fleet::entry_revisions::{self as revisions, RevisionError, Snapshot};
use crate::fleet::revisions::Kept;
use crate::fleet::rollout::{self, ROLLOUT_VALID};
use crate::reads::Reads;
use crate::status::EventNote;

/// Condition type on a set whose entries could not be kept as a revision
/// or read back from one (present once that happened).
pub const REVISION_RECORDED: &str = crate::fleet::revisions::REVISION_RECORDED;
/// What the stage keeps between syncs, per set: the digest of the
/// content last read with its fingerprint (so an unchanged one is not
/// hashed again; the texts themselves are not kept), the revisions
/// loaded back (so a long rollout reads its previous revision once), and
/// whether parses of a kept revision are cached under its
/// [`revision_key`].
#[derive(Default)]
pub struct Memory {
    current: Mutex<HashMap<String, (String, String)>>,
    loaded: Mutex<HashMap<String, HashMap<String, Arc<Snapshot>>>>,
    revision_parses: Mutex<HashSet<String>>,
}

impl Memory {
    /// Forgets a set that has no rollout now. Whether its revisions'
    /// parses are cached stays: the next [`Memory::parses_revisions`]
    /// says to release them.
    pub fn no_rollout(&self, set: &str) {
        lock(&self.current).remove(set);
        lock(&self.loaded).remove(set);
    }

    /// Forgets a deleted set (whose parses the cleanup releases).
    pub fn forget(&self, set: &str) {
        self.no_rollout(set);
        lock(&self.revision_parses).remove(set);
    }

    /// Notes whether set `set` now has parses of kept revisions; true
    /// when it had some and has none now (they are to be released).
    pub fn parses_revisions(&self, set: &str, now: bool) -> bool {
        let mut held = lock(&self.revision_parses);
        if !now {
            return held.remove(set);
        }
        if !held.contains(set) {
            held.insert(set.to_string());
        }
        false
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The entries revision each target is to hold.
#[derive(Default)]
pub struct Rolled {
    /// The rollout's status (None: no rollout; every target holds the
    /// entries read now, as without one).
    pub status: Option<RolloutStatus>,
    /// Per VirtualSwitch, the digest it is to hold; absent: the content
    /// read now.
    pub assign: BTreeMap<String, String>,
    /// The digest of the content read now (None: not read completely).
    pub current: Option<String>,
    /// The snapshots of the assigned digests other than `current`.
    pub snapshots: HashMap<String, Arc<Snapshot>>,
    /// VirtualSwitches whose revision could not be read back: not written
    /// this sync (a condition says why).
    pub unreadable: HashSet<String>,
    pub notes: Vec<EventNote>,
    pub conditions: Vec<Condition>,
    pub requeue: Option<Duration>,
}

impl Rolled {
    /// The kept revision target `vs` is to hold, when it is not the
    /// content read now.
    pub fn held_on(&self, vs: &str) -> Option<(&String, &Arc<Snapshot>)> {
        let d = self.assign.get(vs)?;
        if Some(d) == self.current.as_ref() {
            return None;
        }
        self.snapshots.get_key_value(d)
    }

    /// The digest target `vs` holds after this sync, when a rollout runs.
    pub fn digest_of(&self, vs: &str) -> Option<&str> {
        self.status.as_ref()?;
        self.assign
            .get(vs)
            .map(String::as_str)
            .or(self.current.as_deref())
    }
}

/// The stage: the revision of each of `targets` (the set's direct ones),
/// from `set` with its freshest status.
pub async fn roll(
    ctx: &SetCtx,
    me: &str,
    set: &TableEntrySet,
    targets: &[Target],
    sources: &Sources,
    complete: bool,
) -> Result<Rolled, super::Error> {
    let spec = set.spec.rollout.clone().unwrap_or_default();
    if spec.strategy == RolloutStrategy::AllAtOnce && spec.pin_revision.is_none() {
        ctx.own.rollouts.no_rollout(me);
        return Ok(Rolled::default());
    }
    let ns = set.namespace().unwrap_or_default();
    let api: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &ns);
    let previous = set.status.as_ref().and_then(|s| s.rollout.clone());
    let mut out = Rolled::default();
    // The content read now, kept as a revision; without it (a source
    // missing, or too large to keep) nothing moves: each target keeps
    // the revision the rollout gave it.
    let now = match complete.then(|| content(&ctx.own.rollouts, me, set, sources)) {
        Some(Ok(c)) => Some(c),
        Some(Err(e)) => {
            out.conditions.push(not_recorded(&e));
            None
        }
        None => None,
    };
    let Some(digest) = now else {
        return hold(ctx, me, previous, targets, out).await;
    };
    let pinned = spec.pin_revision;
    let named = named_in(previous.as_ref()).any(|r| r.digest == digest);
    let pin_named = named_in(previous.as_ref()).any(|r| Some(r.revision) == pinned);
    let mut kept = Vec::new();
    if !named || (pinned.is_some() && !pin_named) {
        let uid = set.uid().unwrap_or_default();
        let cms = ctx.reads.entry_revisions(&ns, &uid).await?;
        kept = cms.iter().filter_map(revisions::kept).collect();
    }
    let (number, new) = revisions::numbered(&digest, previous.as_ref(), &kept);
    if new {
        let snapshot = revisions::snapshot(set, sources);
        let cm = snapshot.and_then(|s| revisions::config_map(set, number, &digest, &s));
        let cm = match cm {
            Ok(cm) => cm,
            Err(e) => {
                out.conditions.push(not_recorded(&e));
                return hold(ctx, me, previous, targets, out).await;
            }
        };
        create(&api, &cm).await?;
        kept.extend(revisions::kept(&cm));
        prune(&api, set, previous.as_ref(), &kept, &digest).await?;
    }
    let update = RolloutRevision {
        revision: number,
        digest: digest.clone(),
    };
    // The pinned revision, when it is one the status names.
    let mut known = kept.clone();
    for r in named_in(previous.as_ref()) {
        if !known.iter().any(|k| k.digest == r.digest) {
            known.push(Kept {
                name: revisions::config_map_name(&set.name_any(), &r.digest),
                revision: r.revision,
                digest: r.digest.clone(),
                parts: Vec::new(),
            });
        }
    }
    let target = rollout::target(&spec, &update, &known);
    let decided = match target {
        Ok(target) => decide(ctx, set, &spec, previous.as_ref(), targets, &digest, target).await,
        Err(e) => Err(e),
    };
    let (target, d) = match decided {
        Ok(td) => td,
        Err(e) => {
            let c = Condition::new(ROLLOUT_VALID, false, e.reason(), e.to_string());
            out.conditions.push(c);
            return hold(ctx, me, previous, targets, out).await;
        }
    };
    // At rest the status still names the revision the targets hold, so
    // the next change has one to go back to.
    let now = chrono::Utc::now();
    let rest = || rollout::completed(&target, None, targets.len(), now);
    out.status = d.status.or_else(|| Some(rest()));
    out.assign = d.assign.into_iter().map(|(vs, r)| (vs, r.digest)).collect();
    out.current = Some(digest.clone());
    out.notes = d.notes.into_iter().map(rollout::Note::event).collect();
    out.conditions
        .extend(out.status.as_ref().and_then(rollout::rolled_back_condition));
    out.requeue = rollout::wake(d.requeue, out.status.as_ref());
    load_assigned(ctx, me, &mut out).await?;
    Ok(out)
}

/// The revisions a rollout's status names (`from`, `to`).
fn named_in(p: Option<&RolloutStatus>) -> impl Iterator<Item = &RolloutRevision> {
    p.into_iter().flat_map(|p| p.from.iter().chain([&p.to]))
}

/// The cache key under which the parses of a set's kept revisions live
/// (apart from its live content's).
pub fn revision_key(me: &str) -> String {
    format!("{me}#revision")
}

/// The direct targets (indices of `targets`) that hold the content read
/// now, and per other digest those that hold it. Pure.
pub fn groups(rolled: &Rolled, targets: &[Target]) -> (Vec<usize>, Vec<(String, Vec<usize>)>) {
    let mut now = Vec::new();
    let mut kept: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for (i, t) in targets.iter().enumerate() {
        match rolled.held_on(&t.virtual_switch) {
            Some((d, _)) => kept.entry(d.clone()).or_default().push(i),
            None => now.push(i),
        }
    }
    (now, kept.into_iter().collect())
}

/// Puts the rollout into the set's new status (pure): `status.rollout`,
/// each target's `entriesDigest` where the sync reached its device, the
/// rollout's conditions (a problem once reported turns True when gone)
/// and Events.
pub fn fold(
    new: &mut TableEntrySetStatus,
    old: Option<&TableEntrySetStatus>,
    events: &mut Vec<EventNote>,
    rolled: &Rolled,
    outcomes: &[super::apply::Outcome],
) {
    new.rollout = rolled.status.clone();
    if rolled.status.is_some() {
        for t in &mut new.targets {
            let vs = t.virtual_switch.as_str();
            let reached = outcomes
                .iter()
                .any(|o| o.virtual_switch == vs && o.device_error.is_none());
            t.entries_digest = rolled.digest_of(vs).filter(|_| reached).map(str::to_string);
        }
    }
    let had = |ty: &str| old.is_some_and(|o| find_condition(&o.conditions, ty).is_some());
    for (ty, fine, said) in [
        (
            REVISION_RECORDED,
            "Recorded",
            "the entries are kept as revisions",
        ),
        (ROLLOUT_VALID, "Valid", "the rollout can be followed"),
    ] {
        match rolled.conditions.iter().find(|c| c.type_ == ty) {
            Some(c) => new.conditions.push(c.clone()),
            None if had(ty) => new.conditions.push(Condition::new(ty, true, fine, said)),
            None => {}
        }
    }
    new.conditions.extend(
        rolled
            .conditions
            .iter()
            .filter(|c| c.type_ == rollout::ROLLED_BACK)
            .cloned(),
    );
    events.extend(rolled.notes.iter().cloned());
}

/// The digest of the content read now (hashed again only when the spec
/// or a source's version changed).
fn content(
    memory: &Memory,
    me: &str,
    set: &TableEntrySet,
    sources: &Sources,
) -> Result<String, RevisionError> {
    let f = revisions::fingerprint(set, sources);
    if let Some((seen, digest)) = lock(&memory.current).get(me)
        && *seen == f
    {
        return Ok(digest.clone());
    }
    let digest = revisions::digest_of(set, sources)?;
    lock(&memory.current).insert(me.to_string(), (f, digest.clone()));
    Ok(digest)
}

/// The rollout's next move over `targets`, to `target` (the content read
/// now, `digest`, unless pinned), from what the set's last syncs
/// confirmed there.
async fn decide(
    ctx: &SetCtx,
    set: &TableEntrySet,
    spec: &p4fleet_crds::Rollout,
    previous: Option<&RolloutStatus>,
    targets: &[Target],
    digest: &str,
    target: RolloutRevision,
) -> Result<(RolloutRevision, rollout::Decision), rollout::SpecError> {
    let ns = set.namespace().unwrap_or_default();
    let statuses = set.status.as_ref().map(|s| &s.targets[..]).unwrap_or(&[]);
    let vss = ctx.caches.virtual_switches.store();
    let mut members: Vec<rollout::Member> = targets
        .iter()
        .map(|t| {
            let vs = vss.get(&ObjectRef::new(&t.virtual_switch).within(&ns));
            let order = vs.and_then(|v| v.labels().get(rollout::ORDER_LABEL).cloned());
            let here = statuses
                .iter()
                .find(|s| s.virtual_switch == t.virtual_switch);
            member(&set.name_any(), t, order, here)
        })
        .collect();
    let retry = set
        .annotations()
        .get(rollout::RETRY_ANNOTATION)
        .and_then(|v| rollout::retry(v));
    if rollout::gauges_throughput(spec, previous, &target.digest, retry.as_ref()) {
        let rates = throughputs(ctx, targets).await;
        for m in &mut members {
            m.observed.rate = rollout::Rate::sampled(rates.get(&m.name));
        }
    }
    let input = rollout::Input {
        spec,
        pinned: target.digest != *digest,
        target: target.clone(),
        stable: revisions::stable(previous),
        previous,
        members: &members,
        resume: set
            .annotations()
            .get(rollout::RESUME_ANNOTATION)
            .and_then(|v| rollout::resume(v)),
        retry,
        now: chrono::Utc::now(),
    };
    let d = rollout::advance(&input)?;
    Ok((target, d))
}

/// Nothing moves: each target holds what the rollout gave it (the
/// previous status stands); without a rollout yet, the content read now.
async fn hold(
    ctx: &SetCtx,
    me: &str,
    previous: Option<RolloutStatus>,
    targets: &[Target],
    mut out: Rolled,
) -> Result<Rolled, super::Error> {
    let Some(p) = previous else {
        return Ok(out);
    };
    out.assign = targets
        .iter()
        .map(|t| {
            let d = rollout::assigned_in(&p, &t.virtual_switch);
            (t.virtual_switch.clone(), d.to_string())
        })
        .collect();
    // A rollout in progress (or in a timed pause) keeps looking; one at
    // rest waits for the change that lets the content be read.
    let moving = matches!(p.phase, RolloutPhase::Progressing | RolloutPhase::Paused);
    out.requeue = moving.then_some(rollout::POLL);
    out.status = Some(p);
    load_assigned(ctx, me, &mut out).await?;
    Ok(out)
}

/// Reads back the snapshots of the assigned digests other than the
/// content read now; a target whose revision is gone is not written.
async fn load_assigned(ctx: &SetCtx, me: &str, out: &mut Rolled) -> Result<(), super::Error> {
    let set = me.split_once('/').map_or(me, |(_, n)| n);
    let wanted: HashSet<String> = out
        .assign
        .values()
        .filter(|d| Some(d.as_str()) != out.current.as_deref())
        .cloned()
        .collect();
    let held = lock(&ctx.own.rollouts.loaded)
        .get(me)
        .cloned()
        .unwrap_or_default();
    let mut loaded = HashMap::new();
    for d in &wanted {
        if let Some(s) = held.get(d) {
            loaded.insert(d.clone(), s.clone());
            continue;
        }
        let name = revisions::config_map_name(set, d);
        let ns = set_ns(me);
        let got = match ctx.reads.config_map(ns, &name).await? {
            Some(cm) => revisions::restore(&cm),
            None => Err(RevisionError::Missing { config_map: name }),
        };
        match got {
            Ok(s) => {
                loaded.insert(d.clone(), Arc::new(s));
            }
            Err(e) => {
                out.conditions.push(not_recorded(&e));
                let gone = out.assign.iter().filter(|(_, x)| *x == d);
                out.unreadable.extend(gone.map(|(vs, _)| vs.clone()));
            }
        }
    }
    lock(&ctx.own.rollouts.loaded).insert(me.to_string(), loaded.clone());
    out.snapshots = loaded;
    Ok(())
}

/// The namespace of set key `me` (`namespace/name`).
fn set_ns(me: &str) -> &str {
    me.split_once('/').map_or("", |(ns, _)| ns)
}

fn not_recorded(e: &RevisionError) -> Condition {
    Condition::new(REVISION_RECORDED, false, e.reason(), e.to_string())
}

async fn create(api: &Api<ConfigMap>, cm: &ConfigMap) -> Result<(), kube::Error> {
    match api.create(&PostParams::default(), cm).await {
        Ok(_) => Ok(()),
        // Kept already (a sync before this one, or another process).
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        Err(e) => Err(e),
    }
}

/// Deletes the oldest revisions beyond the history limit, but never the
/// rollout's own, the content read now or a pinned one.
async fn prune(
    api: &Api<ConfigMap>,
    set: &TableEntrySet,
    previous: Option<&RolloutStatus>,
    kept: &[Kept],
    current: &str,
) -> Result<(), kube::Error> {
    let pinned = set.spec.rollout.as_ref().and_then(|r| r.pin_revision);
    let mut in_use: HashSet<&str> = HashSet::from([current]);
    in_use.extend(crate::fleet::revisions::held_by_rollout(
        previous, pinned, kept,
    ));
    let limit = set
        .spec
        .revision_history_limit
        .unwrap_or(revisions::DEFAULT_HISTORY_LIMIT);
    for gone in crate::fleet::revisions::prune(kept, limit, &in_use) {
        match api.delete(&gone.name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// A target as the gate sees it: it "runs" the revision whose entries
/// the set's last sync there wrote and the device confirmed, with the
/// entries the device refused; its Switch's `Reachable`. Pure.
pub fn member(
    set: &str,
    t: &Target,
    order: Option<String>,
    here: Option<&TargetStatus>,
) -> rollout::Member {
    let held = here.and_then(|h| h.entries_digest.clone());
    rollout::Member {
        name: t.virtual_switch.clone(),
        order,
        switch: Some(t.switch.name_any()),
        observed: rollout::Observed {
            pipeline: rollout::PipelineFact::Loaded,
            sets: vec![rollout::SetFact {
                name: set.to_string(),
                ready: held.is_some(),
                // A refused delete leaves the target inexact too.
                failed: here.map_or(0, |h| h.failed + h.stale),
                reapplied: held.is_some(),
            }],
            loaded_digest: held,
            reachable: rollout::reachable(&t.switch),
            rate: rollout::Rate::NotReported,
        },
    }
}

/// The packets/s of each target whose device reports a rate.
async fn throughputs(ctx: &SetCtx, targets: &[Target]) -> HashMap<String, Option<u64>> {
    use crate::fleet::throughput;
    let asks = targets
        .iter()
        .filter_map(|t| {
            let vs = t.virtual_switch.clone();
            throughput::Ask::of(&ctx.devices, vs, &t.switch, Some(t.slot), t.first_pipe)
        })
        .collect();
    throughput::sample(&ctx.devices, asks).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use p4fleet_crds::condition_types::REACHABLE;
    use p4fleet_crds::{MovedState, MovedSwitch};
    use p4fleet_model::sync::SyncTally;

    fn target(vs: &str, reachable: Option<bool>) -> Target {
        let sw: p4fleet_crds::SwitchSpec =
            serde_json::from_value(serde_json::json!({"target": "Bmv2", "endpoint": "h:1"}))
                .unwrap();
        let mut switch = p4fleet_crds::Switch::new(&format!("sw-{vs}"), sw);
        if let Some(r) = reachable {
            switch.status = Some(p4fleet_crds::SwitchStatus {
                conditions: vec![Condition::new(REACHABLE, r, "Probe", "")],
                ..Default::default()
            });
        }
        Target {
            first_pipe: None,
            encoded_for: None,
            program: "fw".into(),
            p4info: Default::default(),
            virtual_switch: vs.into(),
            switch,
            slot: 0,
            schema: p4fleet_model::fixtures::firewall(),
            const_default_action: None,
            profile: None,
        }
    }

    fn status(vs: &str, digest: Option<&str>, failed: u64, stale: u64) -> TargetStatus {
        TargetStatus {
            virtual_switch: vs.into(),
            switch: None,
            applied: 20,
            failed,
            stale,
            entries_per_second: None,
            pipeline_digest: None,
            entries_digest: digest.map(str::to_string),
        }
    }

    #[test]
    fn a_target_holds_the_revision_its_last_confirmed_sync_wrote() {
        let t = target("vs-0", Some(true));
        let m = member(
            "fw",
            &t,
            Some("0".into()),
            Some(&status("vs-0", Some("d2"), 0, 0)),
        );
        assert_eq!(m.observed.loaded_digest.as_deref(), Some("d2"));
        assert_eq!(m.observed.reachable, Some(true));
        assert_eq!(
            (m.order.as_deref(), m.switch.as_deref()),
            (Some("0"), Some("sw-vs-0"))
        );
        let fact = &m.observed.sets[0];
        assert!(fact.ready && fact.reapplied && fact.failed == 0, "{fact:?}");
        // A refused delete counts as a failure there: the target is not exact.
        let m = member("fw", &t, None, Some(&status("vs-0", Some("d2"), 1, 24)));
        assert_eq!(m.observed.sets[0].failed, 25);
        // Not reached (or never synced): it holds nothing known.
        let m = member("fw", &target("vs-1", None), None, None);
        assert_eq!(
            (m.observed.loaded_digest, m.observed.reachable),
            (None, None)
        );
        assert!(!m.observed.sets[0].ready);
    }

    #[test]
    fn the_gate_fails_a_moved_target_whose_device_refused_the_entries() {
        let rev = |n: i64, d: &str| RolloutRevision {
            revision: n,
            digest: d.into(),
        };
        let spec: p4fleet_crds::Rollout = serde_json::from_value(serde_json::json!({
            "strategy": "Canary", "steps": [{"switches": 1}, {"percent": 100}]
        }))
        .unwrap();
        let now = chrono::Utc::now();
        let stamp = now.to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
        let previous = RolloutStatus {
            phase: RolloutPhase::Progressing,
            from: Some(rev(1, "d1")),
            to: rev(2, "d2"),
            step_started_at: stamp.clone(),
            started_at: stamp,
            moved: vec![MovedSwitch {
                virtual_switch: "vs-0".into(),
                switch: Some("sw-vs-0".into()),
                step: 0,
                state: MovedState::Moving,
                packets_per_second_before: None,
            }],
            ..Default::default()
        };
        let members = [
            member(
                "fw",
                &target("vs-0", Some(true)),
                Some("0".into()),
                Some(&status("vs-0", Some("d2"), 0, 3)),
            ),
            member(
                "fw",
                &target("vs-1", Some(true)),
                Some("1".into()),
                Some(&status("vs-1", Some("d1"), 0, 0)),
            ),
        ];
        let d = rollout::advance(&rollout::Input {
            spec: &spec,
            target: rev(2, "d2"),
            pinned: false,
            stable: Some(rev(1, "d1")),
            previous: Some(&previous),
            members: &members,
            resume: None,
            retry: None,
            now,
        })
        .unwrap();
        let st = d.status.unwrap();
        assert_eq!(st.phase, RolloutPhase::RolledBack);
        let f = st.failure.unwrap();
        assert_eq!(
            (f.check.as_str(), f.virtual_switch.as_str()),
            ("EntriesReapplied", "vs-0")
        );
        assert!(f.message.contains("fw: 3 entries failed"), "{}", f.message);
        // Both back on the entries before; vs-1 never moved.
        assert_eq!(d.assign["vs-0"].digest, "d1");
        assert_eq!(d.assign["vs-1"].digest, "d1");
    }

    fn rolled(assign: &[(&str, &str)], current: &str, kept: &[&str]) -> Rolled {
        Rolled {
            status: Some(RolloutStatus::default()),
            assign: assign
                .iter()
                .map(|(v, d)| (v.to_string(), d.to_string()))
                .collect(),
            current: Some(current.into()),
            snapshots: kept
                .iter()
                .map(|d| (d.to_string(), Arc::new(Snapshot::default())))
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn revision_parses_are_released_once_no_target_needs_them() {
        let m = Memory::default();
        assert!(!m.parses_revisions("ns/a", false), "never had any");
        assert!(!m.parses_revisions("ns/a", true));
        assert!(!m.parses_revisions("ns/a", true));
        assert!(m.parses_revisions("ns/a", false), "had some: release");
        assert!(!m.parses_revisions("ns/a", false), "released once");
        // Losing its rollout keeps the note until the release; deletion
        // drops it.
        m.parses_revisions("ns/a", true);
        m.no_rollout("ns/a");
        assert!(m.parses_revisions("ns/a", false), "still to release");
        m.parses_revisions("ns/a", true);
        m.forget("ns/a");
        assert!(!m.parses_revisions("ns/a", false), "forgotten with the set");
    }

    #[test]
    fn targets_are_grouped_by_the_revision_they_hold() {
        let ts: Vec<Target> = ["a", "b", "c", "d"]
            .iter()
            .map(|v| target(v, None))
            .collect();
        let r = rolled(
            &[("a", "d2"), ("b", "d1"), ("c", "d1"), ("d", "d9")],
            "d2",
            &["d1"],
        );
        let (now, kept) = groups(&r, &ts);
        // d9 has no snapshot: it is never assigned one (load_assigned
        // leaves such a target out), so it falls to the content read now.
        assert_eq!(now, [0, 3]);
        assert_eq!(kept, [("d1".to_string(), vec![1, 2])]);
    }

    #[test]
    fn status_names_the_revision_only_where_the_sync_reached_the_device() {
        use super::super::apply::Outcome;
        let r = rolled(&[("a", "d2"), ("b", "d1")], "d2", &["d1"]);
        let mut new = TableEntrySetStatus {
            targets: vec![
                status("a", None, 0, 0),
                status("b", None, 0, 0),
                status("c", None, 0, 0),
            ],
            ..Default::default()
        };
        let reached = |vs: &str| Outcome {
            virtual_switch: vs.into(),
            switch: "sw".into(),
            tally: SyncTally::default(),
            errors: vec![],
            device_error: None,
            drift: 0,
            owned: None,
            retry: None,
            pipeline_digest: None,
            byte_equal: false,
        };
        let mut events = Vec::new();
        fold(
            &mut new,
            None,
            &mut events,
            &r,
            &[reached("a"), reached("b")],
        );
        let held: Vec<Option<&str>> = new
            .targets
            .iter()
            .map(|t| t.entries_digest.as_deref())
            .collect();
        assert_eq!(held, [Some("d2"), Some("d1"), None]);
        assert!(new.rollout.is_some());
        // A problem reported before and gone now turns its condition True.
        let old = TableEntrySetStatus {
            conditions: vec![Condition::new(
                REVISION_RECORDED,
                false,
                "RevisionTooLarge",
                "x",
            )],
            ..Default::default()
        };
        let mut again = TableEntrySetStatus::default();
        fold(&mut again, Some(&old), &mut events, &r, &[]);
        let c = find_condition(&again.conditions, REVISION_RECORDED).unwrap();
        assert!(c.is_true());
        // Without a rollout nothing is added.
        let mut plain = TableEntrySetStatus {
            targets: vec![status("a", None, 0, 0)],
            ..Default::default()
        };
        fold(
            &mut plain,
            None,
            &mut events,
            &Rolled::default(),
            &[reached("a")],
        );
        assert_eq!(
            (plain.rollout, plain.targets[0].entries_digest.clone()),
            (None, None)
        );
    }
}
