//! VirtualSwitch reconciler, one stage per file:
//!
//! - dereference: the program's FPGA resources (here), the program
//!   ([`pipeline::ready_program`]);
//! - validate: [`placement`], pure: filter and score the Switches like
//!   kube-scheduler;
//! - claim: [`claims`]: the chosen slot recorded on the Switch with its
//!   resourceVersion as a precondition (race-free, retried on 409);
//! - build and apply: [`slot_load`] for FPGA boards (LoadSlot streamed,
//!   isolation, port map, read-back of the digest), [`pipeline`] for the
//!   others (P4Runtime device config, cookie = digest; BFRT artifacts);
//! - [`status`], pure: where it runs, what is loaded, the last swap.
//!
//! Deletion goes through the [`FINALIZER`]: the slot is unloaded, then
//! the claim released.

pub mod claims;
pub mod hitless;
pub mod pipeline;
pub mod placement;
pub mod reapplied;
pub mod replication;
pub mod slot_load;
pub mod status;
pub mod triggers;
pub mod unreported;

use std::sync::Arc;

use kube::runtime::controller::{Action, Controller};
use kube::runtime::finalizer::{Event, finalizer};
use kube::{Api, ResourceExt};
use p4fleet_crds::{P4Program, Switch, SwitchTarget, VirtualSwitch};

use super::{Error, finalized, namespace, object_key, on_device_changes};
use crate::reads::Reads;
use crate::retries::Gate;
use crate::status::now_rfc3339;
use pipeline::LoadError;
use placement::{PlacementError, Request};
use status::{Outcome, Pipeline, Swap};
use std::time::Duration;

/// Held while a VirtualSwitch holds a slot: deleting it unloads the slot
/// and releases the claim first.
pub const FINALIZER: &str = "p4fleet.dev/slot";

/// What the VirtualSwitch controller keeps between reconciles.
#[derive(Default)]
pub struct VirtualSwitches {
    /// Ready programs resolved, by digest.
    pub programs: pipeline::ProgramCache,
    /// Swaps confirmed by a device that no status read shows yet.
    pub unreported_swaps: unreported::Unreported,
    /// Statuses this process wrote, until the cache has them.
    pub statuses: super::written::Written<p4fleet_crds::VirtualSwitchStatus>,
}

/// The VirtualSwitch controller's context.
pub type VsCtx = super::Ctx<VirtualSwitches>;

/// The steps that can fail, each on its own backoff
/// ([`crate::retries`]): placing, resolving the program, loading it.
const PLACEMENT: &str = "placement";
const PROGRAM: &str = "program";
const LOAD: &str = "load";

/// The key of a VirtualSwitch in [`Context::retries`].
fn retry_key(me: &str) -> String {
    format!("VirtualSwitch/{me}")
}

/// Watches VirtualSwitches, the P4Programs they run, the Switches they run
/// on and those Switches' devices.
pub fn controller(ctx: &VsCtx) -> Controller<VirtualSwitch> {
    let runs = |v: &VirtualSwitch, p: &P4Program| {
        v.namespace() == p.namespace() && v.spec.program_ref == p.name_any()
    };
    let runs_on = |v: &VirtualSwitch, sw: &Switch| {
        let name = sw.name_any();
        v.spec.switch_ref.as_deref() == Some(name.as_str())
            || v.status.as_ref().and_then(|s| s.switch.as_deref()) == Some(name.as_str())
            || v.spec
                .switch_selector
                .as_ref()
                .is_some_and(|s| s.matches(sw.labels()))
    };
    let c = ctx
        .caches
        .programs
        .watched_by(ctx.caches.virtual_switches.controller(), runs);
    // Claim writes on a Switch bring back only the unplaced (triggers.rs).
    let mapper = triggers::mapper(c.store(), runs_on);
    let c = c.watches_shared_stream(ctx.caches.switches.touched(), move |sw: Arc<Switch>| {
        mapper(Switch::clone(&sw))
    });
    // A device that went away or came back (maybe empty, maybe running
    // another pipeline): check and re-push now.
    let c = on_device_changes(c, ctx, |v: &VirtualSwitch, switch| {
        v.status.as_ref().and_then(|s| s.switch.as_deref()) == Some(switch)
    });
    on_lost_pipelines(c, ctx)
}

/// Adds the Switch probe's findings to `c`: a VirtualSwitch whose pipeline
/// the probe did not find on its device (`crate::loaded_pipelines`) is
/// reconciled at once; every one if findings were missed.
fn on_lost_pipelines(c: Controller<VirtualSwitch>, ctx: &VsCtx) -> Controller<VirtualSwitch> {
    use kube::runtime::reflector::ObjectRef;
    super::on_named(c, ctx.devices.pipelines().subscribe(), |key| {
        key.split_once('/')
            .map(|(ns, name)| ObjectRef::new(name).within(ns))
    })
}

/// Reconciles one VirtualSwitch: place and load it, or unload and release it.
pub async fn reconcile(obj: Arc<VirtualSwitch>, ctx: Arc<VsCtx>) -> Result<Action, Error> {
    let api: Api<VirtualSwitch> = Api::namespaced(ctx.client.clone(), &namespace(obj.as_ref())?);
    let res = finalizer(&api, FINALIZER, obj, |event| async {
        match event {
            Event::Apply(vs) => apply(&ctx, &api, &vs).await,
            Event::Cleanup(vs) => cleanup(&ctx, &vs).await,
        }
    })
    .await;
    finalized(res)
}

/// Claim a slot (placement with a resourceVersion precondition), load the
/// program into it, report.
async fn apply(
    ctx: &VsCtx,
    api: &Api<VirtualSwitch>,
    obj: &VirtualSwitch,
) -> Result<Action, Error> {
    let ns = namespace(obj)?;
    let me = object_key(obj);
    // Status writes go through the writer, which starts from this
    // process's last write while the cache still shows an older version.
    let cached = obj;
    let status = super::written::StatusWriter::start(&ctx.own.statuses, api, &me, cached);
    let obj = status.object();
    // Phase times, logged at debug (the swap benchmark's breakdown).
    let started = std::time::Instant::now();
    let program = ctx.reads.program(&ns, &obj.spec.program_ref).await?;
    let resources = program
        .as_ref()
        .map(|p| pipeline::fpga_resources(&p.spec))
        .unwrap_or_default();
    let mut req = Request::new(&me, &obj.spec, resources);
    let pipes = program
        .as_ref()
        .and_then(|p| p.spec.artifacts.tofino.as_ref())
        .map(|t| placement::tofino_pipes(&t.pipes))
        .transpose();
    let held = match pipes {
        Err(reason) => Err(PlacementError::InvalidPipes {
            program: obj.spec.program_ref.clone(),
            reason,
        }),
        Ok(pipes) => {
            req.pipes = pipes.flatten();
            match claims::claim(&ctx.all(), &ctx.caches.switches, &req).await {
                Ok(h) => h,
                Err(claims::ClaimError::Kube(e)) => return Err(e.into()),
                Err(e) => Err(PlacementError::ClaimFailed(e.to_string())),
            }
        }
    };
    let claimed = started.elapsed();
    let (outcome, placed_on, check) = match held {
        Err(e) => (Outcome::Unplaced(e), None, None),
        Ok(held) => {
            let (pipeline, program) =
                load_program(ctx, &ns, obj, &held.switch, &held.claim).await?;
            let check = match (&pipeline, &program) {
                (Pipeline::Loaded { .. }, Some(p)) => {
                    pipeline::drift_check(&held.switch, &held.claim, p, &obj.spec)
                }
                _ => None,
            };
            let outcome = Outcome::Placed {
                switch: held.switch.name_any(),
                slot: held.claim.slot,
                pipeline,
            };
            (
                outcome,
                program.map(|p| (held.switch, held.claim.slot, p)),
                check,
            )
        }
    };
    let loaded = started.elapsed();
    // A loaded pipeline is checked by its Switch's probe every
    // --drift-seconds, which brings this VirtualSwitch back at once when
    // the probe does not find it: it comes back on its own only to read its
    // replication entries back (--resync-seconds), or as a safety net
    // (`covered`). Otherwise it checks itself every --drift-seconds.
    let pipelines = ctx.devices.pipelines();
    let period = match (check, &placed_on) {
        (Some(check), Some((sw, _, _))) => {
            pipelines.record(&me, &sw.name_any(), check);
            match replicates(obj) {
                true => super::spread(ctx.config.resync, &me),
                false => super::covered(ctx.config.resync, &me),
            }
        }
        _ => {
            pipelines.forget(&me);
            super::spread(ctx.config.drift, &me)
        }
    };
    let retry = retry_after(ctx, &me, obj, &outcome);
    let report = status::report(obj, &outcome, period, retry);
    let mut new = report.status;
    let mut requeue = report.requeue;
    if let (
        Outcome::Placed {
            pipeline: Pipeline::Loaded { .. },
            ..
        },
        Some((sw, slot, program)),
    ) = (&outcome, &placed_on)
        && let Some(swap) = new.last_swap.as_ref()
        && swap.to_digest == program.digest
        && reapplied::waiting(Some(swap), chrono::Utc::now())
    {
        let (info, kept) = (&program.p4info, &swap.tables_kept);
        let counted = reapplied::count(ctx, obj, sw, *slot, info, &swap.at, kept).await?;
        match counted {
            Some(n) => new
                .last_swap
                .iter_mut()
                .for_each(|s| s.entries_reapplied = Some(hitless::reapplied(s, n))),
            None => requeue = requeue.min(reapplied::POLL),
        }
    }
    let mut notes: Vec<_> = report.event.into_iter().collect();
    if let Some(note) = sync_replication(ctx, obj, &outcome, &placed_on, &mut new).await {
        notes.push(note);
    }
    let counted = started.elapsed();
    ctx.own
        .unreported_swaps
        .carry(&me, obj.status.as_ref(), &mut new);
    status.finish(ctx, &mut new, &notes).await?;
    let obj = cached;
    tracing::debug!(virtual_switch = %me, claim_ms = claimed.as_millis() as u64,
        program_and_load_ms = (loaded - claimed).as_millis() as u64,
        reapplied_ms = (counted - loaded).as_millis() as u64,
        status_ms = (started.elapsed() - counted).as_millis() as u64, "virtual switch phases");
    for ev in &notes {
        ctx.events.publish(obj, ev).await;
    }
    Ok(Action::requeue(requeue))
}

/// When to come back after `outcome`: each failed step on its own backoff
/// (a load's was recorded where it was tried, [`push`]); a loaded
/// VirtualSwitch starts every step's backoff afresh.
fn retry_after(ctx: &VsCtx, me: &str, obj: &VirtualSwitch, outcome: &Outcome) -> Duration {
    let key = retry_key(me);
    let now = tokio::time::Instant::now();
    // Placement and the program are read from the caches, whose changes
    // bring the VirtualSwitch back: their backoff only spaces the polls.
    let inputs = crate::retries::inputs(&obj.metadata.generation);
    let polled = |cause, e: &dyn std::fmt::Display| {
        let refusal = crate::retries::Refusal {
            reason: cause,
            message: e.to_string(),
        };
        ctx.retries.failed(&key, cause, inputs, now, refusal)
    };
    match outcome {
        Outcome::Unplaced(e) => polled(PLACEMENT, e),
        Outcome::Placed { pipeline, .. } => {
            ctx.retries.succeeded(&key, PLACEMENT);
            match pipeline {
                Pipeline::NotReady(n) => polled(PROGRAM, n),
                Pipeline::Failed(_) => {
                    ctx.retries.succeeded(&key, PROGRAM);
                    ctx.retries
                        .due_in(&key, LOAD, now)
                        .unwrap_or(crate::retries::Backoff::MIN)
                }
                Pipeline::Loaded { .. } => {
                    ctx.retries.succeeded(&key, PROGRAM);
                    ctx.retries.succeeded(&key, LOAD);
                    crate::retries::Backoff::MAX
                }
            }
        }
    }
}

/// Whether `vs` has replication entries on its device to read back and
/// repair every resync: wanted by its spec, or written before (to be
/// removed).
fn replicates(vs: &VirtualSwitch) -> bool {
    let had = vs.status.as_ref().and_then(|s| s.replication.as_ref());
    !vs.spec.multicast_groups.is_empty()
        || !vs.spec.clone_sessions.is_empty()
        || had.is_some_and(|r| r.multicast_groups + r.clone_sessions > 0)
}

/// Once the pipeline is loaded: the spec's multicast groups and clone
/// sessions onto the device ([`replication`]), into `new` (status, the
/// ReplicationSynced condition); returns the Event to publish, if any.
async fn sync_replication(
    ctx: &VsCtx,
    obj: &VirtualSwitch,
    outcome: &Outcome,
    placed_on: &Option<(Switch, u32, pipeline::ReadyProgram)>,
    new: &mut p4fleet_crds::VirtualSwitchStatus,
) -> Option<crate::status::EventNote> {
    use p4fleet_crds::SwitchProtocol;
    let old = obj.status.as_ref().and_then(|s| s.replication.clone());
    new.replication = old.clone();
    let wanted = !obj.spec.multicast_groups.is_empty() || !obj.spec.clone_sessions.is_empty();
    let (
        Outcome::Placed {
            pipeline: Pipeline::Loaded { .. },
            ..
        },
        Some((sw, slot, program)),
    ) = (outcome, placed_on)
    else {
        return None;
    };
    let result = if sw.spec.target == SwitchTarget::Fpga
        || sw.spec.effective_protocol() != SwitchProtocol::P4Runtime
    {
        if !wanted {
            return None;
        }
        replication::Outcome::Unsupported(format!(
            "multicast groups and clone sessions are written over P4Runtime; switch {} is {:?} over {:?}",
            sw.name_any(),
            sw.spec.target,
            sw.spec.effective_protocol()
        ))
    } else {
        let had_any = old.is_some_and(|r| r.multicast_groups + r.clone_sessions > 0);
        match ctx.devices.connect(sw) {
            Ok(dev) => replication::sync(&dev, *slot, &obj.spec, &program.p4info, had_any).await,
            Err(e) => replication::Outcome::Failed(e.to_string()),
        }
    };
    let (st, cond, note) = replication::report(&result)?;
    new.replication = Some(st);
    new.conditions
        .retain(|c| c.type_ != replication::REPLICATION_SYNCED);
    // Ready means the device holds the whole spec, replication included.
    if !cond.is_true()
        && let Some(ready) = new
            .conditions
            .iter_mut()
            .find(|c| c.type_ == p4fleet_crds::condition_types::READY && c.is_true())
    {
        *ready = crate::status::ready_from(&[&cond], "", "");
    }
    new.conditions.push(cond);
    note
}

/// A deleted VirtualSwitch: empty its FPGA slots, then release its claims
/// (in that order, so no one else is loaded into a slot it still runs).
async fn cleanup(ctx: &VsCtx, obj: &VirtualSwitch) -> Result<Action, Error> {
    let me = object_key(obj);
    ctx.retries.forget(&retry_key(&me));
    ctx.devices.pipelines().forget(&me);
    ctx.own.unreported_swaps.forget(&me);
    ctx.own.statuses.forget(&me);
    let api: Api<Switch> = ctx.all();
    for sw in ctx.reads.switches().await? {
        if sw.spec.effective_protocol() == p4fleet_crds::SwitchProtocol::Bfrt {
            remove_pipe_sets(ctx, &sw, &me).await;
            continue;
        }
        if sw.spec.target != SwitchTarget::Fpga {
            continue;
        }
        let mine = crate::fleet::slot_claims::read(&sw)
            .unwrap_or_default()
            .into_iter()
            .filter(|c| c.virtual_switch == me);
        for c in mine {
            if let Err(e) = slot_load::unload(&ctx.devices, &sw, c.slot).await {
                tracing::warn!(virtual_switch = %me, switch = %sw.name_any(), slot = c.slot,
                    error = %e, "could not unload the slot; releasing the claim anyway");
            }
        }
    }
    match claims::release(&api, &ctx.caches.switches, &me).await {
        Ok(_) => Ok(Action::await_change()),
        Err(claims::ClaimError::Kube(e)) => Err(e.into()),
        Err(e) => {
            tracing::warn!(virtual_switch = %me, error = %e, "slot claims not released");
            Ok(Action::await_change())
        }
    }
}

/// A deleted VirtualSwitch's programs on pipe sets of a BFRT Switch are
/// taken off the device (the others keep running and keep their entries),
/// so its pipes are free for the next. A device that cannot be reached is
/// logged and skipped, as for FPGA slots.
async fn remove_pipe_sets(ctx: &VsCtx, sw: &Switch, me: &str) {
    let mine = crate::fleet::slot_claims::read(sw)
        .unwrap_or_default()
        .into_iter()
        .filter(|c| c.virtual_switch == me && !c.pipes.is_empty());
    for c in mine {
        let removed = match ctx.devices.connect(sw) {
            Ok(dev) => dev.remove_tofino_pipes(c.slot, &c.pipes).await,
            Err(e) => Err(e),
        };
        match removed {
            Ok(names) => tracing::info!(virtual_switch = %me, switch = %sw.name_any(),
                slot = c.slot, pipes = ?c.pipes, removed = ?names, "pipe set freed"),
            Err(e) => tracing::warn!(virtual_switch = %me, switch = %sw.name_any(),
                slot = c.slot, error = %e, "could not remove the program from its pipes; releasing the claim anyway"),
        }
    }
}

/// Dereferences the program and, once it is ready, loads it into `slot`
/// (FPGA boards: through the slot service). Returns the program too when
/// it was ready.
async fn load_program(
    ctx: &VsCtx,
    ns: &str,
    obj: &VirtualSwitch,
    sw: &Switch,
    claim: &p4fleet_crds::SlotClaim,
) -> Result<(Pipeline, Option<pipeline::ReadyProgram>), Error> {
    let program = match pipeline::ready_program_cached(
        &ctx.reads,
        &ctx.own.programs,
        ns,
        &obj.spec.program_ref,
        &obj.name_any(),
    )
    .await?
    {
        Ok(p) => p,
        Err(not_ready) => return Ok((Pipeline::NotReady(not_ready), None)),
    };
    let pipeline = push(ctx, obj, sw, claim, &program).await;
    Ok((pipeline, Some(program)))
}

/// Pushes a ready program into the slot (and, on BFRT, the pipes) of
/// `claim` on `sw`.
async fn push(
    ctx: &VsCtx,
    obj: &VirtualSwitch,
    sw: &Switch,
    claim: &p4fleet_crds::SlotClaim,
    program: &pipeline::ReadyProgram,
) -> Pipeline {
    let slot = claim.slot;
    if let Some(u) = pipeline::unsupported(&obj.spec, sw) {
        return Pipeline::Failed(LoadError::from(u).refusal());
    }
    // The Switch probe found this very pipeline on the same device
    // connection, epoch and Switch generation within the last
    // --drift-seconds: asking again here would only repeat it (a thousand
    // device round trips per resync round at 1,000 Switches). A restarted
    // device (new epoch) or an edited Switch is asked again.
    if let Some(check) = pipeline::drift_check(sw, claim, program, &obj.spec)
        && let Some(dev) = ctx.devices.get(&sw.name_any())
        && ctx.devices.pipelines().confirmed_within(
            &object_key(obj),
            &check,
            crate::devices::Asked::of(sw, &dev),
            ctx.config.drift,
        )
    {
        return Pipeline::Loaded {
            digest: program.digest.clone(),
            pushed: None,
            swap: None,
        };
    }
    // A load the device refused is not tried again with the same inputs
    // before its backoff is due: the refusal is reported again instead
    // (nothing is written, so nothing brings this reconcile back).
    let key = retry_key(&object_key(obj));
    let epoch = ctx
        .devices
        .get(&sw.name_any())
        .map(|d| *d.changes().borrow());
    let inputs = crate::retries::inputs(&(
        &program.digest,
        obj.metadata.generation,
        sw.name_any(),
        sw.metadata.generation,
        slot,
        epoch,
    ));
    let now = tokio::time::Instant::now();
    if let Gate::Wait { last, .. } = ctx.retries.gate(&key, LOAD, inputs, now) {
        return Pipeline::Failed(last);
    }
    let pipeline = load(ctx, obj, sw, claim, program).await;
    if let Pipeline::Failed(refusal) = &pipeline {
        ctx.retries.failed(&key, LOAD, inputs, now, refusal.clone());
    }
    pipeline
}

/// Loads `program` into `claim`'s slot on `sw`: through the slot service
/// on an FPGA board, as a device config elsewhere.
async fn load(
    ctx: &VsCtx,
    obj: &VirtualSwitch,
    sw: &Switch,
    claim: &p4fleet_crds::SlotClaim,
    program: &pipeline::ReadyProgram,
) -> Pipeline {
    let slot = claim.slot;
    if sw.spec.target == SwitchTarget::Fpga {
        return match slot_load::load(&ctx.devices, sw, slot, &obj.spec, program).await {
            Ok(l) => Pipeline::Loaded {
                digest: program.digest.clone(),
                pushed: l.loaded.as_ref().map(|l| l.total),
                // A first load is not a swap.
                swap: l.loaded.filter(|l| l.from_digest.is_some()).map(|l| Swap {
                    from_digest: l.from_digest,
                    strategy: l.strategy,
                    device: l.device,
                    at: now_rfc3339(),
                    update: None,
                }),
            },
            Err(e) => Pipeline::Failed(LoadError::from(e).refusal()),
        };
    }
    let strategy = obj.spec.update_strategy.type_;
    match pipeline::load(ctx, sw, claim, program, strategy).await {
        Ok(pushed) => Pipeline::Loaded {
            digest: program.digest.clone(),
            pushed: pushed.as_ref().map(|p| p.took),
            // A P4Runtime program change (not a first load) is a swap too:
            // its status says what the device kept.
            // A P4Runtime device tells a first load (no update) from a
            // change, since the status this reconcile started from may not
            // show the previous load yet (and a change missed here would
            // never be recorded: the next push finds the cookie in place).
            // A BFRT load does not say (other programs may run on other
            // pipes): without a program before in the status, it is a
            // first load.
            swap: pushed.and_then(|p| {
                let update = p.update?;
                let from_digest = obj.status.as_ref().and_then(|s| s.loaded_digest.clone());
                if from_digest.is_none()
                    && sw.spec.effective_protocol() == p4fleet_crds::SwitchProtocol::Bfrt
                {
                    return None;
                }
                Some(Swap {
                    from_digest,
                    // HotSwap: reconciled where the target could; Recreate:
                    // replaced, every table cleared (`update.mode`).
                    strategy,
                    device: p.took,
                    at: now_rfc3339(),
                    update: Some(update),
                })
            }),
        },
        Err(e) => Pipeline::Failed(e.refusal()),
    }
}
