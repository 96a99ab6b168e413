//! AsyncExternPolicy reconciler. Dereference the VirtualSwitch and the
//! Switch it runs on ([`dereference`]); validate the policy against them
//! ([`validate`], pure: async externs exist only on Dpdk targets) and build
//! the status ([`build_status`], pure); update status. Nothing is applied
//! yet: the extern runtime is not driven, so the status has conditions
//! only.

use std::sync::Arc;

use kube::runtime::controller::{Action, Controller};
use kube::{Api, ResourceExt};
use p4fleet_crds::condition_types::{RESOLVED_REFS, VALID};
use p4fleet_crds::{
    AsyncExternPolicy, AsyncExternPolicySpec, AsyncExternPolicyStatus, Condition, ExternMode,
    SwitchTarget, VirtualSwitch,
};

use super::{Error, namespace, primary, scoped_api, update_status, watch_related};
use crate::context::Context;
use crate::reads::Reads;
use crate::status::ready_from;

/// Watches policies and the VirtualSwitches they name.
pub fn controller(ctx: &Context) -> Controller<AsyncExternPolicy> {
    let names = |p: &AsyncExternPolicy, vs: &VirtualSwitch| {
        p.namespace() == vs.namespace() && p.spec.virtual_switch_ref == vs.name_any()
    };
    watch_related(primary(ctx), scoped_api(ctx), names)
}

/// What the policy's references resolved to.
#[derive(Debug, Clone, PartialEq)]
pub enum Placement {
    VirtualSwitchNotFound,
    NotScheduled,
    SwitchNotFound(String),
    Switch { name: String, target: SwitchTarget },
}

/// Reads what the policy refers to: its VirtualSwitch and that one's Switch.
pub async fn dereference(
    reads: &impl Reads,
    ns: &str,
    spec: &AsyncExternPolicySpec,
) -> Result<Placement, kube::Error> {
    let Some(vs) = reads.virtual_switch(ns, &spec.virtual_switch_ref).await? else {
        return Ok(Placement::VirtualSwitchNotFound);
    };
    let Some(name) = vs.status.and_then(|s| s.switch) else {
        return Ok(Placement::NotScheduled);
    };
    Ok(match reads.switch(&name).await? {
        None => Placement::SwitchNotFound(name),
        Some(sw) => Placement::Switch {
            name,
            target: sw.spec.target,
        },
    })
}

/// What is wrong with a policy; the message names the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Problem {
    #[error(
        "spec.virtualSwitchRef: VirtualSwitch {vs} runs on {switch}, a {target:?} Switch; async externs need a Dpdk Switch"
    )]
    NotDpdkTarget {
        vs: String,
        switch: String,
        target: SwitchTarget,
    },
    #[error("spec.externs[{index}] ({name}): executor and suspend only apply to mode Async")]
    AsyncOnlySettings { index: usize, name: String },
    #[error("spec.externs[{index}] ({name}): burstSize {burst} exceeds queueDepth {depth}")]
    BurstExceedsQueue {
        index: usize,
        name: String,
        burst: u32,
        depth: u32,
    },
}

impl Problem {
    /// The `Valid` condition's reason when this is the first problem.
    pub fn reason(&self) -> &'static str {
        match self {
            Problem::NotDpdkTarget { .. } => "NotDpdkTarget",
            Problem::AsyncOnlySettings { .. } | Problem::BurstExceedsQueue { .. } => "InvalidSpec",
        }
    }
}

/// Problems of the policy against its target (when resolved) and those of
/// the spec the schema cannot express, the target's first.
pub fn validate(spec: &AsyncExternPolicySpec, target: &Placement) -> Vec<Problem> {
    let mut problems = Vec::new();
    if let Placement::Switch { name, target } = target
        && *target != SwitchTarget::Dpdk
    {
        problems.push(Problem::NotDpdkTarget {
            vs: spec.virtual_switch_ref.clone(),
            switch: name.clone(),
            target: *target,
        });
    }
    for (index, e) in spec.externs.iter().enumerate() {
        if e.mode != ExternMode::Async && (e.executor.is_some() || e.suspend.is_some()) {
            problems.push(Problem::AsyncOnlySettings {
                index,
                name: e.name.clone(),
            });
        }
        if e.burst_size > e.queue_depth {
            problems.push(Problem::BurstExceedsQueue {
                index,
                name: e.name.clone(),
                burst: e.burst_size,
                depth: e.queue_depth,
            });
        }
    }
    problems
}

/// The pure middle: spec of generation `generation` and resolved target
/// in, status out (conditions not yet merged).
pub fn build_status(
    spec: &AsyncExternPolicySpec,
    generation: Option<i64>,
    target: &Placement,
) -> AsyncExternPolicyStatus {
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
    let problems = validate(spec, target);
    let valid = if let Some(first) = problems.first() {
        let all: Vec<String> = problems.iter().map(ToString::to_string).collect();
        Condition::new(VALID, false, first.reason(), all.join("; "))
    } else if refs.is_true() {
        Condition::new(VALID, true, "Valid", "policy is valid for its target")
    } else {
        Condition::unknown(VALID, "RefsUnresolved", "the target could not be checked")
    };
    let ready = ready_from(&[&refs, &valid], "Configured", "policy accepted");
    AsyncExternPolicyStatus {
        observed_generation: generation,
        conditions: vec![valid, refs, ready],
        extern_count: Some(spec.externs.len() as u32),
        ..Default::default()
    }
}

pub async fn reconcile(obj: Arc<AsyncExternPolicy>, ctx: Arc<Context>) -> Result<Action, Error> {
    let ns = namespace(obj.as_ref())?;
    let target = dereference(&ctx.reads, &ns, &obj.spec).await?;
    let mut new = build_status(&obj.spec, obj.metadata.generation, &target);
    // Measurements are not taken yet; keep whatever a future writer set.
    if let Some(o) = obj.status.as_ref() {
        new.packets_per_second = o.packets_per_second;
        new.async_ops_per_second = o.async_ops_per_second;
        new.drops = o.drops;
    }
    let api: Api<AsyncExternPolicy> = Api::namespaced(ctx.client.clone(), &ns);
    update_status(&ctx, &api, obj.as_ref(), &mut new).await?;
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
            Some(1),
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
            Some(1),
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
        let st = build_status(&spec(), Some(1), &Placement::VirtualSwitchNotFound);
        let ready = p4fleet_crds::find_condition(&st.conditions, "Ready").unwrap();
        assert_eq!(ready.reason, "VirtualSwitchNotFound");
        assert!(ready.message.starts_with("spec.virtualSwitchRef"));
    }

    #[test]
    fn burst_larger_than_queue_is_invalid() {
        let mut s = spec();
        s.externs[0].burst_size = 512;
        s.externs[0].queue_depth = 256;
        let problems = validate(&s, &Placement::NotScheduled);
        assert!(problems[0].to_string().contains("burstSize 512"));
        assert_eq!(problems[0].reason(), "InvalidSpec");
    }
}
