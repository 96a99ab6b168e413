//! P4Program reconciler. Dereference: read the P4Info and artifacts
//! (inline or ConfigMaps, [`crate::artifacts`]). Validate and build
//! ([`build_status`], pure): check the P4Info and list its tables and
//! actions ([`p4fleet_model::p4info`]), compute the digest. Nothing is
//! applied to a device (VirtualSwitches load programs); the content in
//! force is recorded as a revision ([`crate::fleet::revisions`]: a
//! ControllerRevision and immutable snapshot ConfigMaps) and the history
//! past `spec.revisionHistoryLimit` pruned. Update status, with a
//! `DigestChanged` Event when the digest moves.

use std::sync::Arc;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::core::PartialObjectMeta;
use kube::runtime::controller::{Action, Controller};
use kube::{Api, ResourceExt};
use p4fleet_crds::condition_types::{RESOLVED_REFS, VALID};
use p4fleet_crds::{
    Condition, P4Program, P4ProgramSpec, P4ProgramStatus, RevisionRef, RolloutPhase,
    RolloutRevision, RolloutStrategy, Switch, TableEntrySet, TableInfo, VirtualSwitch,
    find_condition,
};
use p4fleet_model::p4info as model_p4info;

use super::{Error, namespace, scoped_api, update_status_noting, watch_related};
use crate::artifacts::{self, P4InfoError, Resolved};
use crate::context::Context;
use crate::fleet::revisions::{self, REVISION_RECORDED};
use crate::fleet::rollout;
use crate::fleet::{program_hold, program_plan};
use crate::reads::Reads;
use crate::retries::Gate;
use crate::status::{EventNote, ready_from};

/// Watches P4Programs and the ConfigMaps they reference. The ConfigMap
/// watch is metadata only: a reference is by name, and a full watch would
/// bring every ConfigMap of the cluster through this process, entry
/// sources included (27 MB per change of the fleet benchmark's 1,000).
/// A VirtualSwitch brings its program back only while a change is on its
/// way (current and update revision differ): its loaded digest moves the
/// current revision; a steady fleet wakes no program. A progressing
/// rollout is also woken by its VirtualSwitches, the TableEntrySets on
/// the ones it moved and their Switches (the gate's facts).
pub fn controller(ctx: &Context) -> Controller<P4Program> {
    let uses = |p: &P4Program, cm: &PartialObjectMeta<ConfigMap>| {
        p.namespace() == cm.namespace()
            && artifacts::referenced_config_maps(&p.spec).contains(&cm.name_any())
    };
    let c = watch_related(ctx.caches.programs.controller(), scoped_api(ctx), uses);
    let moving = |p: &P4Program, v: &VirtualSwitch| {
        p.namespace() == v.namespace()
            && v.spec.program_ref == p.name_any()
            && p.status.as_ref().is_some_and(|s| {
                let digest = |r: &Option<RevisionRef>| r.as_ref().map(|r| r.digest.clone());
                digest(&s.current_revision) != digest(&s.update_revision) || rolling(p).is_some()
            })
    };
    let c = ctx.caches.virtual_switches.watched_by(c, moving);
    // A progressing rollout's gate reads the sets on its moved
    // VirtualSwitches and their Switches: their changes wake it at once.
    let gated_set = |p: &P4Program, s: &TableEntrySet| {
        p.namespace() == s.namespace()
            && rolling(p).is_some_and(|r| {
                let targets = s.status.as_ref().map(|st| &st.targets[..]).unwrap_or(&[]);
                r.moved
                    .iter()
                    .any(|m| targets.iter().any(|t| t.virtual_switch == m.virtual_switch))
            })
    };
    let c = ctx.caches.entry_sets.watched_by(c, gated_set);
    let gated_switch = |p: &P4Program, sw: &Switch| {
        rolling(p).is_some_and(|r| {
            r.moved
                .iter()
                .any(|m| m.switch.as_deref() == Some(sw.name_any().as_str()))
        })
    };
    ctx.caches.switches.watched_by(c, gated_switch)
}

/// The program's rollout while it progresses (its gate is being watched).
fn rolling(p: &P4Program) -> Option<&p4fleet_crds::RolloutStatus> {
    p.status
        .as_ref()?
        .rollout
        .as_ref()
        .filter(|r| r.phase == RolloutPhase::Progressing)
}

/// A table of the model's P4Info summary as status lists it.
fn table_info(t: p4fleet_model::p4info::TableSummary) -> TableInfo {
    TableInfo {
        name: t.name,
        id: t.id,
        size: t.size,
        match_fields: t.match_fields,
        actions: t.actions,
    }
}

/// The pure middle of a reconcile (validate and build): resolved sources
/// of generation `generation` in, status out (conditions not yet merged
/// with the old ones).
pub fn build_status(
    spec: &P4ProgramSpec,
    resolved: &Resolved,
    generation: Option<i64>,
) -> P4ProgramStatus {
    let mut st = P4ProgramStatus {
        observed_generation: generation,
        targets: Some(artifacts::target_kinds(spec)),
        ..Default::default()
    };
    let unresolved: Vec<String> = resolved.problems().map(ToString::to_string).collect();
    // The first problem's reason (field order): SourceNotFound, or what a
    // URL source says (ArtifactDigestMismatch, ArtifactFetchFailed, …).
    let refs = match resolved.problems().next() {
        None => Condition::new(RESOLVED_REFS, true, "Resolved", "all sources resolved"),
        Some(first) => Condition::new(RESOLVED_REFS, false, first.reason(), unresolved.join("; ")),
    };
    let valid = match resolved.p4info() {
        Err(e @ P4InfoError::Unparsable { .. }) => {
            Condition::new(VALID, false, "InvalidP4Info", e.to_string())
        }
        Err(P4InfoError::Unreadable(_) | P4InfoError::NotResolved) => {
            Condition::unknown(VALID, "SourcesUnresolved", "spec.p4info could not be read")
        }
        Ok(p) => {
            let problems = model_p4info::validate(&p);
            st.tables = model_p4info::tables(&p)
                .into_iter()
                .map(table_info)
                .collect();
            st.table_count = Some(st.tables.len() as u32);
            st.actions = model_p4info::action_names(&p);
            if problems.is_empty() {
                Condition::new(
                    VALID,
                    true,
                    "Valid",
                    format!("{} tables, {} actions", st.tables.len(), st.actions.len()),
                )
            } else {
                Condition::new(
                    VALID,
                    false,
                    "InvalidP4Info",
                    format!(
                        "spec.p4info: {}",
                        problems
                            .iter()
                            .map(ToString::to_string)
                            .collect::<Vec<_>>()
                            .join("; ")
                    ),
                )
            }
        }
    };
    if refs.is_true() && valid.is_true() {
        let d = resolved.digest();
        st.short_digest = Some(artifacts::short_digest(&d));
        st.digest = Some(d);
    }
    let ready = ready_from(
        &[&refs, &valid],
        "Ready",
        "program is valid and its sources resolved",
    );
    st.conditions = vec![valid, refs, ready];
    st
}

/// The cause of a program's backoff in [`Context::retries`]: downloading
/// a `url` source.
const FETCH: &str = "fetch";

pub async fn reconcile(obj: Arc<P4Program>, ctx: Arc<super::Ctx<()>>) -> Result<Action, Error> {
    let ns = namespace(obj.as_ref())?;
    // A download that failed is not tried again for the same spec before
    // its backoff is due (1 s doubling to 5 min); its status already says
    // why, so a reconcile meanwhile (its own status write, a ConfigMap
    // event) has nothing to do. An edited spec tries at once.
    let key = format!("P4Program/{}", super::object_key(obj.as_ref()));
    let now = tokio::time::Instant::now();
    let inputs = crate::retries::inputs(&obj.metadata.generation);
    if let Gate::Wait { retry_in, .. } = ctx.retries.gate(&key, FETCH, inputs, now) {
        return Ok(Action::requeue(retry_in));
    }
    let resolved = artifacts::resolve(&ctx.reads, &ns, &obj.spec).await?;
    let fetch_failed = resolved.problems().find(
        |e| matches!(e, artifacts::SourceError::Url { error, .. } if error.is_download_failure()),
    );
    let fetch_retry = match fetch_failed {
        Some(e) => {
            let failed = crate::retries::Refusal {
                reason: e.reason(),
                message: e.to_string(),
            };
            Some(ctx.retries.failed(&key, FETCH, inputs, now, failed))
        }
        None => {
            ctx.retries.succeeded(&key, FETCH);
            None
        }
    };
    let mut new = build_status(&obj.spec, &resolved, obj.metadata.generation);
    let old = obj.status.clone().unwrap_or_default();
    let api: Api<P4Program> = Api::namespaced(ctx.client.clone(), &ns);
    if plan_only(&ctx, obj.as_ref(), &old, &mut new) {
        let notes: Vec<EventNote> = program_plan::planned_event(old.plan.as_ref(), &new)
            .into_iter()
            .collect();
        if update_status_noting(&ctx, &api, obj.as_ref(), &mut new, &notes).await? {
            for ev in &notes {
                ctx.events.publish(obj.as_ref(), ev).await;
            }
        }
        // The plan reads VirtualSwitches, Switches and sets from the
        // caches; this controller does not watch them all: look again.
        return Ok(Action::requeue(PLAN_POLL));
    }
    let held = hold(&ctx, obj.as_ref(), &old, &mut new);
    let old_digest = old.digest.clone();
    if let Some(ev) = held {
        let notes = std::slice::from_ref(&ev);
        if update_status_noting(&ctx, &api, obj.as_ref(), &mut new, notes).await? {
            ctx.events.publish(obj.as_ref(), &ev).await;
        }
        // Sets moving away or being deleted release it: look again soon.
        return Ok(Action::requeue(std::time::Duration::from_secs(5)));
    }
    let kept = record(&ctx, obj.as_ref(), &resolved, &old, &mut new).await?;
    let (rolled, rollout_requeue) = match &kept {
        Some(kept) => roll(&ctx, obj.as_ref(), kept, &mut new).await,
        None => (Vec::new(), None),
    };
    let digest = (new.digest.is_some() && new.digest != old_digest).then(|| {
        let revision = new
            .update_revision
            .as_ref()
            .map(|r| format!(", revision {}", r.revision))
            .unwrap_or_default();
        let note = format!(
            "pipeline digest is now {} ({} tables){revision}",
            new.short_digest.clone().unwrap_or_default(),
            new.table_count.unwrap_or(0)
        );
        EventNote::normal("DigestChanged", "Digest", note)
    });
    if let Some(c) = new
        .rollout
        .as_ref()
        .and_then(rollout::rolled_back_condition)
    {
        new.conditions.push(c);
    }
    let notes: Vec<EventNote> = digest.into_iter().chain(rolled).collect();
    let wrote = update_status_noting(&ctx, &api, obj.as_ref(), &mut new, &notes).await?;
    for ev in notes.iter().filter(|_| wrote) {
        ctx.events.publish(obj.as_ref(), ev).await;
        let ns = obj.namespace().unwrap_or_default();
        ctx.metrics.rollouts.noted(&ns, &obj.name_any(), &ev.reason);
    }
    let key = super::object_key(obj.as_ref());
    let resync = super::spread(ctx.config.resync, &key);
    let next = [fetch_retry, rollout_requeue]
        .into_iter()
        .flatten()
        .fold(resync, std::cmp::min);
    Ok(Action::requeue(next))
}

/// Records the content in force (`new.digest`, read as `resolved`) as the
/// program's update revision, names in `new` the revision the fleet runs
/// (from its VirtualSwitches' loaded digests), and deletes the revisions
/// past the history limit that nothing runs. A content without digest
/// (invalid, unresolved) changes nothing: the revisions stay as they were.
/// A content that cannot be snapshotted is a `RevisionRecorded=False`
/// condition.
async fn record(
    ctx: &Context,
    obj: &P4Program,
    resolved: &Resolved,
    old: &P4ProgramStatus,
    new: &mut P4ProgramStatus,
) -> Result<Option<Vec<revisions::Kept>>, Error> {
    new.update_revision = old.update_revision.clone();
    new.current_revision = old.current_revision.clone();
    new.rollout = old.rollout.clone();
    let Some(digest) = new.digest.clone() else {
        return Ok(None);
    };
    let (ns, name) = (namespace(obj)?, obj.name_any());
    let kept: Vec<revisions::Kept> = ctx
        .reads
        .program_revisions(&ns, &name)
        .await?
        .iter()
        // Not those an earlier program of this name left behind (deleted,
        // not yet collected): this one's history starts afresh.
        .filter(|cr| revisions::store::owned_by(cr.owner_references(), obj))
        .filter_map(revisions::kept)
        .collect();
    let store = &ctx.caches.revisions;
    let recorded =
        revisions::store::record_content(&ctx.client, store, obj, resolved, &kept, &digest).await?;
    let was_refused = find_condition(&old.conditions, REVISION_RECORDED).is_some();
    let update = match recorded {
        Ok(r) => r.kept,
        Err(e) => {
            // The content still loads from its sources; only a later
            // rollback to it would have nothing to restore.
            // (Its Event is the condition's.)
            let c = Condition::new(REVISION_RECORDED, false, e.reason(), e.to_string());
            new.conditions.push(c);
            return Ok(None);
        }
    };
    if was_refused {
        let message = format!(
            "revision {} kept in ControllerRevision {}",
            update.revision, update.name
        );
        new.conditions
            .push(Condition::new(REVISION_RECORDED, true, "Recorded", message));
    }
    let vss = ctx.reads.virtual_switches(Some(&ns)).await?;
    let loaded: Vec<&str> = vss
        .iter()
        .filter(|v| v.spec.program_ref == name)
        .filter_map(|v| v.status.as_ref()?.loaded_digest.as_deref())
        .collect();
    let mut all: Vec<revisions::Kept> = kept
        .into_iter()
        .filter(|k| k.digest != update.digest)
        .collect();
    all.push(update.clone());
    let update = update.reference();
    let current = revisions::current(&update, old.current_revision.as_ref(), &loaded, &all);
    let mut in_use: std::collections::HashSet<&str> = loaded.iter().copied().collect();
    in_use.extend([update.digest.as_str(), current.digest.as_str()]);
    // A rollout's revisions, and a pinned one, are in use too.
    let pinned = obj.spec.rollout.as_ref().and_then(|r| r.pin_revision);
    in_use.extend(revisions::held_by_rollout(
        old.rollout.as_ref(),
        pinned,
        &all,
    ));
    let limit = obj
        .spec
        .revision_history_limit
        .unwrap_or(revisions::DEFAULT_HISTORY_LIMIT);
    let gone = revisions::prune(&all, limit, &in_use);
    revisions::store::delete(&ctx.client, &ns, &gone).await?;
    let gone: Vec<String> = gone.into_iter().map(|g| g.name.clone()).collect();
    new.update_revision = Some(update);
    new.current_revision = Some(current);
    Ok(Some(
        all.into_iter()
            .filter(|k| !gone.contains(&k.name))
            .collect(),
    ))
}

/// A Canary rollout's next move ([`rollout::advance`]) from the facts in
/// the caches: `new.rollout` (which the VirtualSwitches follow), the
/// Events to publish, when to look again. `kept`: the program's revisions.
async fn roll(
    ctx: &Context,
    obj: &P4Program,
    kept: &[revisions::Kept],
    new: &mut P4ProgramStatus,
) -> (Vec<EventNote>, Option<std::time::Duration>) {
    let spec = obj.spec.rollout.clone().unwrap_or_default();
    let (Some(update), current) = (&new.update_revision, &new.current_revision) else {
        return (Vec::new(), None);
    };
    // All at once and unpinned, as before rollouts: nothing to gather.
    if spec.strategy == RolloutStrategy::AllAtOnce && spec.pin_revision.is_none() {
        new.rollout = None;
        return (Vec::new(), None);
    }
    let as_rev = |r: &RevisionRef| RolloutRevision {
        revision: r.revision,
        digest: r.digest.clone(),
    };
    let (ns, name) = (obj.namespace().unwrap_or_default(), obj.name_any());
    let vss: Vec<_> = ctx
        .caches
        .virtual_switches
        .store()
        .state()
        .into_iter()
        .filter(|v| v.namespace().as_deref() == Some(&ns) && v.spec.program_ref == name)
        .collect();
    let sets = &ctx.caches.entry_sets;
    let selecting = sets.filed_under(&crate::cache::selecting_key(&ns));
    let switches = ctx.caches.switches.store();
    let mut members: Vec<rollout::Member> = vss
        .iter()
        .map(|v| {
            // The sets naming it, and those selecting in its namespace.
            let named = sets.filed_under(&crate::cache::filled_key(&ns, &v.name_any()));
            let fill: Vec<&TableEntrySet> = named
                .iter()
                .chain(&selecting)
                .filter(|s| crate::fleet::fills::fills(s, v))
                .map(|s| s.as_ref())
                .collect();
            let on = v.status.as_ref().and_then(|s| s.switch.clone());
            let sw = on.and_then(|n| switches.get(&kube::runtime::reflector::ObjectRef::new(&n)));
            rollout::member(v, &fill, sw.as_deref())
        })
        .collect();
    let retry = obj
        .annotations()
        .get(rollout::RETRY_ANNOTATION)
        .and_then(|v| rollout::retry(v));
    let rolling = new.rollout.as_ref();
    if rollout::gauges_throughput(&spec, rolling, &update.digest, retry.as_ref()) {
        let rates = throughputs(ctx, &vss).await;
        for m in &mut members {
            m.observed.rate = rollout::Rate::sampled(rates.get(&m.name));
        }
    }
    let input = rollout::target(&spec, &as_rev(update), kept).map(|target| rollout::Input {
        spec: &spec,
        pinned: target.digest != update.digest,
        target,
        stable: current.as_ref().map(as_rev),
        previous: new.rollout.as_ref(),
        members: &members,
        resume: obj
            .annotations()
            .get(rollout::RESUME_ANNOTATION)
            .and_then(|v| rollout::resume(v)),
        retry,
        now: chrono::Utc::now(),
    });
    let decided = input.and_then(|i| rollout::advance(&i));
    // Once refused, the condition stays (True) so the fix is seen.
    let was_invalid = obj
        .status
        .as_ref()
        .is_some_and(|s| find_condition(&s.conditions, rollout::ROLLOUT_VALID).is_some());
    let d = match decided {
        Ok(d) => d,
        Err(e) => {
            // Nothing moves: the VirtualSwitches keep what they run.
            let c = Condition::new(rollout::ROLLOUT_VALID, false, e.reason(), e.to_string());
            new.conditions.push(c);
            return (Vec::new(), None);
        }
    };
    if was_invalid {
        new.conditions.push(Condition::new(
            rollout::ROLLOUT_VALID,
            true,
            "Valid",
            "the rollout can be followed",
        ));
    }
    new.rollout = d.status;
    let notes = d.notes.into_iter().map(rollout::Note::event).collect();
    (notes, rollout::wake(d.requeue, new.rollout.as_ref()))
}

/// The packets/s of each VirtualSwitch in `vss` whose target reports a
/// rate, asked of its device now (`fleet::throughput`).
async fn throughputs(
    ctx: &Context,
    vss: &[Arc<VirtualSwitch>],
) -> std::collections::HashMap<String, Option<u64>> {
    use crate::fleet::throughput;
    let switches = ctx.caches.switches.store();
    let asks = vss
        .iter()
        .filter_map(|v| {
            let st = v.status.as_ref()?;
            let sw = switches.get(&kube::runtime::reflector::ObjectRef::new(
                st.switch.as_deref()?,
            ))?;
            let key = format!("{}/{}", v.namespace().unwrap_or_default(), v.name_any());
            let first_pipe = crate::fleet::slot_claims::first_pipe(&sw, &key);
            throughput::Ask::of(&ctx.devices, v.name_any(), &sw, st.slot, first_pipe)
        })
        .collect();
    throughput::sample(&ctx.devices, asks).await
}

/// How often a planned change looks at the fleet again.
const PLAN_POLL: std::time::Duration = std::time::Duration::from_secs(10);

/// Plan only (`spec.plan`, [`program_plan`]): a content that differs from
/// the one in force is held, and `new` says what rolling it out would do.
/// False when there is nothing to plan (no change, or nothing in force
/// yet: the first content loads as usual).
fn plan_only(
    ctx: &Context,
    obj: &P4Program,
    old: &P4ProgramStatus,
    new: &mut P4ProgramStatus,
) -> bool {
    let changed = old.digest.is_some() && new.digest.is_some() && old.digest != new.digest;
    if !obj.spec.plan || !changed {
        return false;
    }
    let plan = program_plan::of_fleet(
        obj,
        old,
        new,
        &ctx.caches.virtual_switches.store().state(),
        &ctx.caches.switches.store().state(),
        &ctx.caches.entry_sets.store().state(),
    );
    *new = program_plan::planned_status(old, std::mem::take(new), plan);
    true
}

/// Holds a change that removes tables sets still fill ([`program_hold`]):
/// replaces `new` with the held status and returns the Event to publish.
/// A released hold leaves `RolloutHeld=False` in `new`.
fn hold(
    ctx: &Context,
    obj: &P4Program,
    old: &P4ProgramStatus,
    new: &mut P4ProgramStatus,
) -> Option<EventNote> {
    let removed = program_hold::removed_tables(old, new);
    let uses = match removed.is_empty() || program_hold::removal_allowed(obj) {
        true => Vec::new(),
        false => program_hold::still_used(
            obj,
            &removed,
            &ctx.caches.entry_sets.store().state(),
            &ctx.caches.virtual_switches.store().state(),
        ),
    };
    if uses.is_empty() {
        // Once held, the condition stays (False) so the release is seen.
        let was_held = find_condition(&old.conditions, program_hold::ROLLOUT_HELD).is_some();
        if was_held {
            new.conditions.push(Condition::new(
                program_hold::ROLLOUT_HELD,
                false,
                "Released",
                "no TableEntrySet fills a removed table (or the removal was confirmed)",
            ));
        }
        return None;
    }
    *new = program_hold::held_status(old, std::mem::take(new), &uses);
    let message = find_condition(&new.conditions, program_hold::ROLLOUT_HELD)
        .map(|c| c.message.clone())
        .unwrap_or_default();
    Some(EventNote::warning("RolloutHeld", "Hold", message))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::artifacts::{SourceError, field};
    use p4fleet_crds::condition_types::READY;
    use p4fleet_crds::{ArtifactSource, ConfigMapKeyRef};
    use p4fleet_proto::p4info;
    use std::collections::HashSet;

    const FIREWALL: &str = include_str!("../../../examples/firewall/p4info.txt");

    fn spec_inline(text: &str) -> P4ProgramSpec {
        P4ProgramSpec {
            p4info: ArtifactSource {
                inline: Some(text.into()),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    fn resolved_of(spec: &P4ProgramSpec) -> Resolved {
        artifacts::sources(spec)
            .into_iter()
            .map(|(field, s)| {
                (
                    field,
                    s.inline
                        .clone()
                        .map(String::into_bytes)
                        .ok_or(SourceError::NoSource { field }),
                )
            })
            .collect()
    }

    #[test]
    fn firewall_is_valid_and_lists_its_table() {
        let spec = spec_inline(FIREWALL);
        let st = build_status(&spec, &resolved_of(&spec), Some(1));
        assert!(
            st.conditions.iter().all(|c| c.is_true()),
            "{:?}",
            st.conditions
        );
        assert_eq!(st.table_count, Some(1));
        let t = &st.tables[0];
        assert_eq!(t.name, "MyIngress.firewall");
        assert_eq!(t.size, 65536);
        assert_eq!(
            t.match_fields,
            ["hdr.ipv4.srcAddr:exact:32", "hdr.ipv4.dstAddr:exact:32"]
        );
        assert_eq!(t.actions, ["MyIngress.allow", "MyIngress.drop"]);
        assert_eq!(st.digest.as_ref().unwrap().len(), 64);
        assert_eq!(st.short_digest.as_ref().unwrap().len(), 12);
        assert_eq!(st.targets.as_deref(), Some("P4Info"));
    }

    #[test]
    fn unknown_action_ref_and_duplicate_ids_are_named() {
        let bad = FIREWALL
            .replace("id: 25652968\n  }\n  size", "id: 12345\n  }\n  size")
            .replace(
                "id: 17724422\n    name: \"MyIngress.allow\"",
                "id: 39123287\n    name: \"MyIngress.allow\"",
            );
        let p = p4info::parse_text(&bad).unwrap();
        let problems: Vec<String> = model_p4info::validate(&p)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert!(
            problems
                .iter()
                .any(|m| m.contains("unknown action id 12345")),
            "{problems:?}"
        );
        assert!(
            problems
                .iter()
                .any(|m| m.contains("id 39123287 is used by both")),
            "{problems:?}"
        );
        let spec = spec_inline(&bad);
        let st = build_status(&spec, &resolved_of(&spec), Some(1));
        let valid = p4fleet_crds::find_condition(&st.conditions, VALID).unwrap();
        assert!(!valid.is_true());
        assert!(valid.message.starts_with("spec.p4info:"));
        assert!(st.digest.is_none());
        assert!(
            !p4fleet_crds::find_condition(&st.conditions, READY)
                .unwrap()
                .is_true()
        );
    }

    #[test]
    fn unparsable_p4info_is_invalid() {
        let spec = spec_inline("tables { preamble { id: oops } }");
        let st = build_status(&spec, &resolved_of(&spec), Some(1));
        let valid = p4fleet_crds::find_condition(&st.conditions, VALID).unwrap();
        assert_eq!(valid.reason, "InvalidP4Info");
    }

    #[test]
    fn missing_config_map_is_a_resolved_refs_failure() {
        let spec = P4ProgramSpec {
            p4info: ArtifactSource {
                inline: None,
                config_map_key_ref: Some(ConfigMapKeyRef {
                    name: "fw".into(),
                    key: "p4info.txt".into(),
                }),
                url: None,
            },
            ..Default::default()
        };
        let mut r = Resolved::default();
        r.insert(
            field::P4INFO,
            Err(SourceError::ConfigMapNotFound {
                field: field::P4INFO,
                name: "fw".into(),
            }),
        );
        let st = build_status(&spec, &r, Some(1));
        let refs = p4fleet_crds::find_condition(&st.conditions, RESOLVED_REFS).unwrap();
        assert!(!refs.is_true());
        assert!(refs.message.contains("ConfigMap fw not found"));
        let ready = p4fleet_crds::find_condition(&st.conditions, READY).unwrap();
        assert_eq!(ready.reason, "SourceNotFound");
        assert_eq!(
            artifacts::referenced_config_maps(&spec),
            HashSet::from(["fw".to_string()])
        );
    }
}
