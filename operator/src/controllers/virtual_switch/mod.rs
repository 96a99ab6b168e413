//! VirtualSwitch reconciler, one stage per file:
//!
//! - dereference: the Switches and the slots other VirtualSwitches hold
//!   (here), the program ([`pipeline::ready_program`]);
//! - validate: [`placement`], pure: which Switch slot it runs on;
//! - build and apply: [`pipeline`]: what the Switch loads (pure) and the
//!   push through p4fleet-client (P4Runtime: the target's device config,
//!   cookie = program digest; BFRT: the Tofino artifacts);
//! - [`status`], pure: where it runs, what is loaded, the push's Event.

pub mod pipeline;
pub mod placement;
pub mod status;

use std::sync::Arc;

use kube::runtime::controller::{Action, Controller};
use kube::{Api, ResourceExt};
use p4fleet_crds::{P4Program, Switch, VirtualSwitch};

use super::{
    Error, namespace, object_key, on_device_changes, primary, scoped_api, update_status,
    watch_related,
};
use crate::context::Context;
use crate::reads::Reads;
use placement::{PlacementError, occupied, place};
use status::{Outcome, Pipeline};

/// Watches VirtualSwitches, the P4Programs they run, the Switches they run
/// on and those Switches' devices.
pub fn controller(ctx: &Context) -> Controller<VirtualSwitch> {
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
    let c = watch_related(primary(ctx), scoped_api(ctx), runs);
    let c = watch_related(c, ctx.all(), runs_on);
    // A device that went away or came back (maybe empty, maybe running
    // another pipeline): check and re-push now.
    on_device_changes(c, ctx, |v: &VirtualSwitch, switch| {
        v.status.as_ref().and_then(|s| s.switch.as_deref()) == Some(switch)
    })
}

/// Reconciles one VirtualSwitch: place it, load its program, report.
pub async fn reconcile(obj: Arc<VirtualSwitch>, ctx: Arc<Context>) -> Result<Action, Error> {
    let ns = namespace(obj.as_ref())?;
    let me = object_key(obj.as_ref());
    let switches = ctx.reads.switches().await?;
    let mut others = ctx.reads.virtual_switches(None).await?;
    others.retain(|v| object_key(v) != me);
    let current = obj
        .status
        .as_ref()
        .and_then(|s| Some((s.switch.as_deref()?, s.slot?)));
    let placed = place(&me, &obj.spec, current, &switches, &occupied(&others));
    let outcome = match placed.and_then(|(name, slot)| Ok((placed_on(&switches, name)?, slot))) {
        Err(e) => Outcome::Unplaced(e),
        Ok((sw, slot)) => Outcome::Placed {
            switch: sw.name_any(),
            slot,
            pipeline: load_program(&ctx, &ns, &obj.spec.program_ref, sw, slot).await?,
        },
    };
    let report = status::report(&obj, &outcome, ctx.config.drift);
    let mut new = report.status;
    let api: Api<VirtualSwitch> = Api::namespaced(ctx.client.clone(), &ns);
    update_status(&ctx, &api, obj.as_ref(), &mut new).await?;
    if let Some(ev) = &report.event {
        ctx.events.publish(obj.as_ref(), ev).await;
    }
    Ok(Action::requeue(report.requeue))
}

/// The Switch `place` chose (one of `switches`).
fn placed_on(switches: &[Switch], name: String) -> Result<&Switch, PlacementError> {
    switches
        .iter()
        .find(|s| s.name_any() == name)
        .ok_or(PlacementError::SwitchNotFound(name))
}

/// Dereferences the program and, once it is ready, loads it into `slot`.
async fn load_program(
    ctx: &Context,
    ns: &str,
    program: &str,
    sw: &Switch,
    slot: u32,
) -> Result<Pipeline, Error> {
    let program = match pipeline::ready_program(&ctx.reads, ns, program).await? {
        Ok(p) => p,
        Err(not_ready) => return Ok(Pipeline::NotReady(not_ready)),
    };
    Ok(match pipeline::load(ctx, sw, slot, &program).await {
        Ok(pushed) => Pipeline::Loaded {
            digest: program.digest,
            pushed,
        },
        Err(e) => Pipeline::Failed(e),
    })
}
