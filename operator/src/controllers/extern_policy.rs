//! AsyncExternPolicy reconciler: validate the policy against its
//! VirtualSwitch and Switch (async externs exist only on Dpdk targets).
//! Conditions only for now: the extern runtime is not driven yet.

use std::sync::Arc;

use kube::runtime::controller::{Action, Controller};
use kube::{Api, ResourceExt};
use p4fleet_crds::condition_types::{RESOLVED_REFS, VALID};
use p4fleet_crds::{
    AsyncExternPolicy, AsyncExternPolicySpec, AsyncExternPolicyStatus, Condition, ExternMode,
    Switch, SwitchTarget, VirtualSwitch,
};

use super::{Error, referrers, scoped_api, watcher_config, write_status};
use crate::context::Context;
use crate::status::{merge_conditions, now_rfc3339, ready_from};

/// Watches policies and the VirtualSwitches they name.
pub fn controller(ctx: &Context) -> Controller<AsyncExternPolicy> {
    let c = Controller::new(scoped_api::<AsyncExternPolicy>(ctx), watcher_config());
    let store = c.store();
    c.watches(
        scoped_api::<VirtualSwitch>(ctx),
        watcher_config(),
        referrers(store, |p: &AsyncExternPolicy, vs: &VirtualSwitch| {
            p.namespace() == vs.namespace() && p.spec.virtual_switch_ref == vs.name_any()
        }),
    )
}

/// What the policy's references resolved to.
#[derive(Debug, Clone, PartialEq)]
pub enum Placement {
    VirtualSwitchNotFound,
    NotScheduled,
    SwitchNotFound(String),
    Switch { name: String, target: SwitchTarget },
}

/// Spec problems the schema cannot express.
pub fn validate(spec: &AsyncExternPolicySpec) -> Vec<String> {
    let mut problems = Vec::new();
    for (i, e) in spec.externs.iter().enumerate() {
        if e.mode != ExternMode::Async && (e.executor.is_some() || e.suspend.is_some()) {
            problems.push(format!(
                "spec.externs[{i}] ({}): executor and suspend only apply to mode Async",
                e.name
            ));
        }
        if e.burst_size > e.queue_depth {
            problems.push(format!(
                "spec.externs[{i}] ({}): burstSize {} exceeds queueDepth {}",
                e.name, e.burst_size, e.queue_depth
            ));
        }
    }
    problems
}

/// The pure middle: spec and resolved target in, status out.
pub fn build_status(spec: &AsyncExternPolicySpec, target: &Placement) -> AsyncExternPolicyStatus {
    let vs = &spec.virtual_switch_ref;
    let refs = match target {
        Placement::VirtualSwitchNotFound => Condition::new(
            RESOLVED_REFS,
            false,
            "VirtualSwitchNotFound",
            format!("spec.virtualSwitchRef: VirtualSwitch {vs} not found"),
        ),
        Placement::NotScheduled => Condition::new(
            RESOLVED_REFS,
            false,
            "VirtualSwitchNotScheduled",
            format!("spec.virtualSwitchRef: VirtualSwitch {vs} is not placed on a Switch yet"),
        ),
        Placement::SwitchNotFound(s) => Condition::new(
            RESOLVED_REFS,
            false,
            "SwitchNotFound",
            format!("Switch {s} of VirtualSwitch {vs} not found"),
        ),
        Placement::Switch { name, .. } => Condition::new(
            RESOLVED_REFS,
            true,
            "Resolved",
            format!("VirtualSwitch {vs} runs on {name}"),
        ),
    };
    let mut problems = validate(spec);
    if let Placement::Switch { name, target } = target
        && *target != SwitchTarget::Dpdk
    {
        problems.insert(
            0,
            format!(
                "spec.virtualSwitchRef: VirtualSwitch {vs} runs on {name}, a {target:?} Switch; async externs need a Dpdk Switch"
            ),
        );
    }
    let valid = if !problems.is_empty() {
        let reason = if problems[0].contains("need a Dpdk") {
            "NotDpdkTarget"
        } else {
            "InvalidSpec"
        };
        Condition::new(VALID, false, reason, problems.join("; "))
    } else if refs.is_true() {
        Condition::new(VALID, true, "Valid", "policy is valid for its target")
    } else {
        Condition::unknown(VALID, "RefsUnresolved", "the target could not be checked")
    };
    let ready = ready_from(&[&refs, &valid], "Configured", "policy accepted");
    AsyncExternPolicyStatus {
        conditions: vec![valid, refs, ready],
        extern_count: Some(spec.externs.len() as u32),
        ..Default::default()
    }
}

pub async fn reconcile(obj: Arc<AsyncExternPolicy>, ctx: Arc<Context>) -> Result<Action, Error> {
    let ns = obj
        .namespace()
        .ok_or(Error::MissingObjectKey("namespace"))?;
    let vss: Api<VirtualSwitch> = Api::namespaced(ctx.client.clone(), &ns);
    let target = match vss.get_opt(&obj.spec.virtual_switch_ref).await? {
        None => Placement::VirtualSwitchNotFound,
        Some(vs) => match vs.status.and_then(|s| s.switch) {
            None => Placement::NotScheduled,
            Some(name) => match ctx.all::<Switch>().get_opt(&name).await? {
                None => Placement::SwitchNotFound(name),
                Some(sw) => Placement::Switch {
                    name,
                    target: sw.spec.target,
                },
            },
        },
    };
    let mut new = build_status(&obj.spec, &target);
    let old = obj.status.as_ref();
    // Measurements are not taken yet; keep whatever a future writer set.
    if let Some(o) = old {
        new.packets_per_second = o.packets_per_second;
        new.async_ops_per_second = o.async_ops_per_second;
        new.drops = o.drops;
    }
    let old_conditions = old.map(|s| s.conditions.as_slice()).unwrap_or_default();
    new.observed_generation = obj.metadata.generation;
    new.conditions = merge_conditions(
        old_conditions,
        new.conditions,
        obj.metadata.generation,
        &now_rfc3339(),
    );
    let api: Api<AsyncExternPolicy> = Api::namespaced(ctx.client.clone(), &ns);
    write_status(
        &ctx,
        &api,
        obj.as_ref(),
        old,
        &new,
        old_conditions,
        &new.conditions,
    )
    .await?;
    Ok(Action::requeue(ctx.config.resync))
}

#[cfg(test)]
mod tests {
    use super::*;
    use p4fleet_crds::ConditionStatus;

    fn spec() -> AsyncExternPolicySpec {
        serde_json::from_value(serde_json::json!({
            "virtualSwitchRef": "ipsec",
            "externs": [{"name": "ipsec_encrypt", "mode": "Async", "executor": "InlineCryptoDevice"}]
        }))
        .unwrap()
    }

    #[test]
    fn dpdk_target_is_ready() {
        let st = build_status(
            &spec(),
            &Placement::Switch {
                name: "dpdk-1".into(),
                target: SwitchTarget::Dpdk,
            },
        );
        assert!(
            st.conditions.iter().all(|c| c.is_true()),
            "{:?}",
            st.conditions
        );
        assert_eq!(st.extern_count, Some(1));
    }

    #[test]
    fn non_dpdk_target_is_not_ready_with_a_clear_reason() {
        let st = build_status(
            &spec(),
            &Placement::Switch {
                name: "tofino-1".into(),
                target: SwitchTarget::Tofino,
            },
        );
        let ready = p4fleet_crds::find_condition(&st.conditions, "Ready").unwrap();
        assert_eq!(ready.status, ConditionStatus::False);
        assert_eq!(ready.reason, "NotDpdkTarget");
        assert!(ready.message.contains("tofino-1"));
    }

    #[test]
    fn missing_virtual_switch_names_the_field() {
        let st = build_status(&spec(), &Placement::VirtualSwitchNotFound);
        let ready = p4fleet_crds::find_condition(&st.conditions, "Ready").unwrap();
        assert_eq!(ready.reason, "VirtualSwitchNotFound");
        assert!(ready.message.starts_with("spec.virtualSwitchRef"));
    }

    #[test]
    fn burst_larger_than_queue_is_invalid() {
        let mut s = spec();
        s.externs[0].burst_size = 512;
        s.externs[0].queue_depth = 256;
        assert!(validate(&s)[0].contains("burstSize 512"));
    }
}
