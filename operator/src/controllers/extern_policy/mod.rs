//! AsyncExternPolicy reconciler, in stages: dereference the VirtualSwitch
//! and the Switch it runs on ([`dereference`]); validate the policy
//! against them ([`validate`], pure: async externs exist only on Dpdk
//! targets); build the request ([`desired`], pure); apply it through the
//! target's extern runtime ([`runtime`]: the named externs must exist, the
//! policy is set and read back, stats are taken); build the status
//! ([`build_status`], pure: Ready only when the device reports the policy
//! in force). The policy is also rendered as T4P4S launch options
//! ([`t4p4s`], pure) into a ConfigMap ([`config_map`]). Requeued every
//! `--extern-stats-seconds` (`OperatorConfig::extern_stats`) to refresh
//! the measurements (rounded, so steady traffic does not rewrite status)
//! and to re-apply after a device restart. Deleting a policy restores the target's
//! defaults (every extern Sync) before the finalizer goes.

pub mod config_map;
pub mod desired;
pub mod runtime;
pub mod t4p4s;

use std::sync::Arc;

use kube::runtime::controller::{Action, Controller};
use kube::runtime::finalizer::{Event, finalizer};
use kube::{Api, ResourceExt};
use p4fleet_crds::condition_types::{RESOLVED_REFS, VALID};
use p4fleet_crds::{
    AsyncExternPolicy, AsyncExternPolicySpec, AsyncExternPolicyStatus, Condition, ExternMode,
    SwitchTarget, VirtualSwitch,
};

use super::{Error, finalized, namespace, update_status};
use crate::context::Context;
use crate::reads::Reads;
use crate::retries::{self, Gate};
use crate::status::ready_from;
use runtime::{Applied, RuntimeTarget};

/// The cause of a policy's backoff in [`Context::retries`]: applying it.
const APPLY: &str = "apply";

/// Finalizer: the target's externs go back to Sync before the policy goes.
pub const FINALIZER: &str = "p4fleet.dev/extern-policy";

/// Condition type: the device reports the policy in force.
pub const APPLIED: &str = "Applied";

/// Condition type: the policy is rendered as T4P4S launch options (not
/// part of Ready: it says what a T4P4S deployment would run, not what the
/// device runs).
pub const T4P4S_OPTIONS: &str = "T4P4SOptions";

/// Watches policies, the VirtualSwitches they name and the other policies
/// naming the same VirtualSwitch (one that goes or changes may leave the
/// extern policy to another).
pub fn controller(ctx: &Context) -> Controller<AsyncExternPolicy> {
    let names = |p: &AsyncExternPolicy, vs: &VirtualSwitch| {
        p.namespace() == vs.namespace() && p.spec.virtual_switch_ref == vs.name_any()
    };
    let c = ctx.caches.extern_policies.controller();
    let c = ctx.caches.virtual_switches.watched_by(c, names);
    let peers = |p: &AsyncExternPolicy, other: &AsyncExternPolicy| {
        p.namespace() == other.namespace()
            && p.name_any() != other.name_any()
            && p.spec.virtual_switch_ref == other.spec.virtual_switch_ref
    };
    ctx.caches.extern_policies.watched_by(c, peers)
}

/// Another policy naming the same VirtualSwitch: the device holds one
/// extern policy, so the older policy keeps it ([`crate::claimants`]) and
/// the other is held (nothing of it is applied). Both report it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the extern policy of VirtualSwitch {virtual_switch} is also set by AsyncExternPolicy {other}; {}; to resolve it, delete one of the two or merge them into one policy",
    if *keeps { format!("this policy is older and keeps it; {other} is not applied") }
    else { format!("{other} is older and keeps it, so this policy is held: nothing of it is applied") }
)]
pub struct Conflict {
    pub virtual_switch: String,
    pub other: String,
    /// Whether this policy keeps the device's extern policy.
    pub keeps: bool,
}

/// The conflicts of `me` with the other policies naming its VirtualSwitch
/// (`named`, `me` may be among them), by name. Pure.
pub fn conflicts(me: &AsyncExternPolicy, named: &[Arc<AsyncExternPolicy>]) -> Vec<Conflict> {
    let mut out: Vec<Conflict> = named
        .iter()
        .filter(|o| {
            crate::claimants::rival(me, o.as_ref())
                && o.spec.virtual_switch_ref == me.spec.virtual_switch_ref
        })
        .map(|o| Conflict {
            virtual_switch: me.spec.virtual_switch_ref.clone(),
            other: o.name_any(),
            keeps: crate::claimants::older(me, o.as_ref()),
        })
        .collect();
    out.sort_by(|a, b| a.other.cmp(&b.other));
    out
}

/// The policies naming `spec`'s VirtualSwitch in namespace `ns`, from the cache.
fn named(ctx: &Context, ns: &str, spec: &AsyncExternPolicySpec) -> Vec<Arc<AsyncExternPolicy>> {
    let key = crate::cache::filled_key(ns, &spec.virtual_switch_ref);
    ctx.caches.extern_policies.filed_under(&key)
}

/// What the policy's references resolved to.
#[derive(Debug, Clone, PartialEq)]
pub enum Placement {
    VirtualSwitchNotFound,
    NotScheduled,
    SwitchNotFound(String),
    Switch {
        name: String,
        target: SwitchTarget,
        /// Where its extern runtime is (Switch endpoint, the
        /// VirtualSwitch's slot's device id).
        runtime: RuntimeTarget,
        /// What the T4P4S rendering needs (program, the Switch's cores).
        host: t4p4s::Host,
    },
}

impl Placement {
    /// The extern runtime to apply to, once resolved to a Dpdk Switch.
    pub fn runtime(&self) -> Option<&RuntimeTarget> {
        match self {
            Placement::Switch {
                target: SwitchTarget::Dpdk,
                runtime,
                ..
            } => Some(runtime),
            _ => None,
        }
    }
}

/// Reads what the policy refers to: its VirtualSwitch and that one's Switch.
pub async fn dereference(
    reads: &impl Reads,
    devices: &crate::devices::DevicePool,
    ns: &str,
    spec: &AsyncExternPolicySpec,
) -> Result<Placement, kube::Error> {
    let Some(vs) = reads.virtual_switch(ns, &spec.virtual_switch_ref).await? else {
        return Ok(Placement::VirtualSwitchNotFound);
    };
    let st = vs.status.unwrap_or_default();
    let Some(name) = st.switch else {
        return Ok(Placement::NotScheduled);
    };
    Ok(match reads.switch(&name).await? {
        None => Placement::SwitchNotFound(name),
        Some(sw) => Placement::Switch {
            name,
            target: sw.spec.target,
            runtime: crate::fleet::extern_runtime::target(devices, &sw, st.slot),
            host: t4p4s::Host {
                program: vs.spec.program_ref.clone(),
                cores: sw.spec.capacity.get("cores").copied(),
            },
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
    if let Placement::Switch { name, target, .. } = target
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

/// The `Applied` condition and the measured fields for what applying found.
fn applied_condition(applied: &Applied) -> Condition {
    let reason = applied.reason();
    let (ok, message) = match applied {
        Applied::Held(r) => (false, r.message.clone()),
        Applied::WrongEndpoint(w) => (false, format!("extern runtime: {w}")),
        Applied::MissingExterns { missing, available } => (
            false,
            format!(
                "spec.externs: the target has no extern {} (it has: {})",
                missing.join(", "),
                if available.is_empty() {
                    "none".to_string()
                } else {
                    available.join(", ")
                }
            ),
        ),
        Applied::Refused(m) => (false, format!("the target refused the policy: {m}")),
        Applied::Unavailable { code, message } => {
            (false, format!("extern runtime: {code:?}: {message}"))
        }
        Applied::Reported { in_force: true, .. } => {
            (true, "the device reports the policy in force".to_string())
        }
        Applied::Reported { effective, .. } => (
            false,
            format!(
                "the device reports another policy: {}",
                desired::mode_summary(effective).1
            ),
        ),
    };
    Condition::new(APPLIED, ok, reason, message)
}

/// The policy's T4P4S rendering, when its target is resolved and valid
/// (the rendering needs the program and the Switch's cores).
pub fn rendering(
    policy: &str,
    spec: &AsyncExternPolicySpec,
    target: &Placement,
) -> Option<t4p4s::Rendering> {
    match target {
        Placement::Switch { host, .. } if validate(spec, target).is_empty() => {
            Some(t4p4s::render(policy, spec, host))
        }
        _ => None,
    }
}

/// The `T4P4SOptions` condition for a rendering (None: not rendered).
fn t4p4s_condition(rendered: Option<&t4p4s::Rendering>) -> Condition {
    match rendered {
        None => Condition::unknown(
            T4P4S_OPTIONS,
            "NotRendered",
            "not rendered: see the other conditions",
        ),
        Some(Ok(l)) => {
            let mut msg = format!("ConfigMap {}: {}", l.config_map, l.option_line());
            for n in &l.notes {
                msg.push_str(&format!("; note: {n}"));
            }
            Condition::new(T4P4S_OPTIONS, true, "Rendered", msg)
        }
        Some(Err(problems)) => {
            let all: Vec<String> = problems.iter().map(ToString::to_string).collect();
            Condition::new(T4P4S_OPTIONS, false, "NoT4P4SEquivalent", all.join("; "))
        }
    }
}

/// The pure end: spec of generation `generation`, resolved target, what
/// applying found (None: not applied, refs or spec are wrong) and the
/// T4P4S rendering in, status out (conditions not yet merged).
pub fn build_status(
    spec: &AsyncExternPolicySpec,
    generation: Option<i64>,
    target: &Placement,
    conflicts: &[Conflict],
    applied: Option<&Applied>,
    rendered: Option<&t4p4s::Rendering>,
) -> AsyncExternPolicyStatus {
    let vs = &spec.virtual_switch_ref;
    let refs = match target {
        _ if !conflicts.is_empty() => {
            let all: Vec<String> = conflicts.iter().map(ToString::to_string).collect();
            Condition::new(RESOLVED_REFS, false, "OwnershipConflict", all.join("; "))
        }
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
    let held = conflicts.iter().find(|c| !c.keeps);
    let applied_cond = match (applied, held) {
        (_, Some(c)) => Condition::new(APPLIED, false, "OwnershipConflict", c.to_string()),
        (Some(a), None) => applied_condition(a),
        (None, None) => Condition::unknown(
            APPLIED,
            "NotApplied",
            "not applied: see the other conditions",
        ),
    };
    let ready = ready_from(
        &[&refs, &valid, &applied_cond],
        "InForce",
        "the device reports the policy in force",
    );
    let mut st = AsyncExternPolicyStatus {
        observed_generation: generation,
        conditions: vec![valid, refs, applied_cond, t4p4s_condition(rendered), ready],
        extern_count: Some(spec.externs.len() as u32),
        t4p4s_config_map: rendered
            .and_then(|r| r.as_ref().ok())
            .map(|l| l.config_map.clone()),
        ..Default::default()
    };
    // Only a policy in force: a failure is reported in words that a held
    // retry repeats exactly (the device's other policy is in the message).
    if let Some(Applied::Reported {
        effective,
        measured,
        in_force: true,
    }) = applied
    {
        let (mode, modes) = desired::mode_summary(effective);
        st.mode = Some(mode);
        st.modes = Some(modes);
        if let Some(m) = measured {
            st.packets_per_second = Some(m.packets_per_second);
            st.async_ops_per_second = Some(m.async_ops_per_second);
            st.drops = Some(m.drops);
        }
    }
    st
}

/// Reconciles one policy: apply it, or restore the defaults after it.
pub async fn reconcile(
    obj: Arc<AsyncExternPolicy>,
    ctx: Arc<super::Ctx<()>>,
) -> Result<Action, Error> {
    let ns = namespace(obj.as_ref())?;
    let api: Api<AsyncExternPolicy> = Api::namespaced(ctx.client.clone(), &ns);
    let res = finalizer(&api, FINALIZER, obj, |event| async {
        match event {
            Event::Apply(p) => sync(&ctx, &api, &ns, &p).await,
            Event::Cleanup(p) => cleanup(&ctx, &ns, &p).await,
        }
    })
    .await;
    finalized(res)
}

async fn sync(
    ctx: &Context,
    api: &Api<AsyncExternPolicy>,
    ns: &str,
    obj: &AsyncExternPolicy,
) -> Result<Action, Error> {
    let target = dereference(&ctx.reads, &ctx.devices, ns, &obj.spec).await?;
    let conflicts = conflicts(obj, &named(ctx, ns, &obj.spec));
    let held = conflicts.iter().any(|c| !c.keeps);
    let key = format!("AsyncExternPolicy/{}", super::object_key(obj));
    let mut retry = None;
    let applied = match (target.runtime(), &target) {
        (Some(rt), Placement::Switch { name, .. })
            if !held && validate(&obj.spec, &target).is_empty() =>
        {
            // A policy the target did not take is not set again with the
            // same inputs before its backoff is due (`crate::retries`).
            let epoch = ctx.devices.get(name).map(|d| *d.changes().borrow());
            let inputs = retries::inputs(&(obj.metadata.generation, name, rt.device_id, epoch));
            let now = tokio::time::Instant::now();
            match ctx.retries.gate(&key, APPLY, inputs, now) {
                Gate::Wait { retry_in, last } => {
                    retry = Some(retry_in);
                    Some(Applied::Held(last))
                }
                Gate::Go => {
                    let wanted = desired::desired(&obj.spec);
                    let a = runtime::apply(&ctx.devices, name, rt, &wanted).await;
                    match a.failure() {
                        None => ctx.retries.succeeded(&key, APPLY),
                        Some(why) => {
                            retry = Some(ctx.retries.failed(&key, APPLY, inputs, now, why));
                        }
                    }
                    Some(a)
                }
            }
        }
        _ => None,
    };
    let rendered = rendering(&obj.name_any(), &obj.spec, &target);
    if let Some(r) = &rendered {
        config_map::publish(&ctx.client, ns, obj, r).await?;
    }
    let mut new = build_status(
        &obj.spec,
        obj.metadata.generation,
        &target,
        &conflicts,
        applied.as_ref(),
        rendered.as_ref(),
    );
    update_status(ctx, api, obj, &mut new).await?;
    Ok(match (applied, retry) {
        (_, Some(backoff)) => Action::requeue(backoff),
        (Some(_), None) => Action::requeue(ctx.config.extern_stats),
        (None, None) => Action::requeue(ctx.config.resync),
    })
}

/// Restores the target's defaults. A policy whose target is gone (or
/// never resolved) has nothing to restore, and neither has one while
/// another policy names its VirtualSwitch: the device runs, or is about
/// to run, that one's policy.
async fn cleanup(ctx: &Context, ns: &str, obj: &AsyncExternPolicy) -> Result<Action, Error> {
    ctx.retries
        .forget(&format!("AsyncExternPolicy/{}", super::object_key(obj)));
    if !conflicts(obj, &named(ctx, ns, &obj.spec)).is_empty() {
        return Ok(Action::await_change());
    }
    let target = dereference(&ctx.reads, &ctx.devices, ns, &obj.spec).await?;
    if let (Some(rt), Placement::Switch { name, .. }) = (target.runtime(), &target) {
        runtime::restore_defaults(&ctx.devices, name, rt)
            .await
            .map_err(|s| Error::PolicyNotRestored(format!("{}: {}", rt.endpoint, s.message())))?;
    }
    Ok(Action::await_change())
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

    fn on(target: SwitchTarget) -> Placement {
        Placement::Switch {
            name: "dpdk-1".into(),
            target,
            runtime: RuntimeTarget::p4runtime("127.0.0.1:9559", 1),
            host: t4p4s::Host {
                program: "ipsec".into(),
                cores: None,
            },
        }
    }

    fn reported(in_force: bool) -> Applied {
        Applied::Reported {
            effective: vec![p4fleet_proto::externs::ExternPolicy {
                name: "ipsec_encrypt".into(),
                mode: p4fleet_proto::externs::Mode::Async as i32,
                ..Default::default()
            }],
            in_force,
            measured: Some(desired::Measured {
                packets_per_second: 99_000,
                async_ops_per_second: 98_000,
                drops: 3,
            }),
        }
    }

    fn ready(st: &AsyncExternPolicyStatus) -> &Condition {
        p4fleet_crds::find_condition(&st.conditions, "Ready").unwrap()
    }

    /// The status of the test policy on a DPDK Switch, `applied` there.
    fn on_dpdk(applied: Option<&Applied>) -> AsyncExternPolicyStatus {
        build_status(
            &spec(),
            Some(1),
            &on(SwitchTarget::Dpdk),
            &[],
            applied,
            None,
        )
    }

    #[test]
    fn ready_only_when_the_device_reports_the_policy_in_force() {
        let target = on(SwitchTarget::Dpdk);
        let rendered = rendering("ipsec", &spec(), &target);
        let st = build_status(
            &spec(),
            Some(1),
            &target,
            &[],
            Some(&reported(true)),
            rendered.as_ref(),
        );
        assert!(
            st.conditions.iter().all(|c| c.is_true()),
            "{:?}",
            st.conditions
        );
        assert_eq!(ready(&st).reason, "InForce");
        assert_eq!(st.extern_count, Some(1));
        assert_eq!(st.mode.as_deref(), Some("Async"));
        assert_eq!(st.modes.as_deref(), Some("ipsec_encrypt=Async"));
        assert_eq!(
            (st.packets_per_second, st.async_ops_per_second, st.drops),
            (Some(99_000), Some(98_000), Some(3))
        );
        assert_eq!(st.t4p4s_config_map.as_deref(), Some("ipsec-t4p4s"));
        let t = p4fleet_crds::find_condition(&st.conditions, T4P4S_OPTIONS).unwrap();
        assert!(
            t.message
                .starts_with("ConfigMap ipsec-t4p4s: x_crypto async=pd"),
            "{}",
            t.message
        );

        // Resolved and valid, but nothing confirmed: not Ready.
        let st = on_dpdk(None);
        assert_ne!(ready(&st).status, ConditionStatus::True);
        let st = on_dpdk(Some(&reported(false)));
        assert_eq!(ready(&st).status, ConditionStatus::False);
        assert_eq!(ready(&st).reason, "NotInForce");
        let down = Applied::Unavailable {
            code: tonic::Code::Unavailable,
            message: "connection refused".into(),
        };
        let st = on_dpdk(Some(&down));
        assert_eq!(ready(&st).reason, "ExternRuntimeUnavailable");
        assert_eq!(st.packets_per_second, None);
    }

    fn policy(name: &str, vs: &str, created: i64) -> Arc<AsyncExternPolicy> {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
        let mut p = AsyncExternPolicy::new(
            name,
            AsyncExternPolicySpec {
                virtual_switch_ref: vs.into(),
                ..spec()
            },
        );
        p.metadata.namespace = Some("ns".into());
        p.metadata.creation_timestamp = Some(Time(
            k8s_openapi::jiff::Timestamp::from_second(created).unwrap(),
        ));
        Arc::new(p)
    }

    #[test]
    fn two_policies_of_one_virtual_switch_the_older_keeps_it_both_say_so() {
        let (a, b) = (policy("a", "ipsec", 100), policy("b", "ipsec", 200));
        let other_vs = policy("c", "elsewhere", 1);
        let all = [a.clone(), b.clone(), other_vs];
        let of_a = conflicts(&a, &all);
        let of_b = conflicts(&b, &all);
        assert_eq!(of_a.len(), 1);
        assert_eq!(of_b.len(), 1);
        assert!(of_a[0].keeps && !of_b[0].keeps);
        assert_eq!((of_a[0].other.as_str(), of_b[0].other.as_str()), ("b", "a"));
        let target = on(SwitchTarget::Dpdk);
        // The holder applies and is told of the other.
        let st = build_status(
            &spec(),
            Some(1),
            &target,
            &of_a,
            Some(&reported(true)),
            None,
        );
        let refs = p4fleet_crds::find_condition(&st.conditions, RESOLVED_REFS).unwrap();
        assert_eq!(refs.reason, "OwnershipConflict");
        assert!(
            refs.message
                .contains("also set by AsyncExternPolicy b; this policy is older and keeps it"),
            "{}",
            refs.message
        );
        let applied = p4fleet_crds::find_condition(&st.conditions, APPLIED).unwrap();
        assert_eq!(applied.reason, "InForce");
        // The held one applies nothing and says who holds it.
        let st = build_status(&spec(), Some(1), &target, &of_b, None, None);
        let applied = p4fleet_crds::find_condition(&st.conditions, APPLIED).unwrap();
        assert_eq!(
            (applied.status, applied.reason.as_str()),
            (ConditionStatus::False, "OwnershipConflict")
        );
        assert!(
            applied
                .message
                .contains("a is older and keeps it, so this policy is held")
                && applied.message.contains("delete one of the two"),
            "{}",
            applied.message
        );
        assert_eq!(ready(&st).status, ConditionStatus::False);
    }

    #[test]
    fn an_endpoint_that_is_no_extern_runtime_says_what_it_is() {
        let wrong = Applied::WrongEndpoint(p4fleet_client::WrongEndpoint {
            endpoint: "10.0.0.5:50052".into(),
            expected: p4fleet_client::Service::ExternRuntime,
            found: p4fleet_client::Found::Http1 { status: 404 },
        });
        let st = on_dpdk(Some(&wrong));
        let applied = p4fleet_crds::find_condition(&st.conditions, APPLIED).unwrap();
        assert_eq!(applied.reason, "Http1Server");
        assert!(
            applied.message.contains("10.0.0.5:50052"),
            "{}",
            applied.message
        );
        assert_eq!(wrong.failure().map(|f| f.reason), Some("Http1Server"));
    }

    #[test]
    fn a_missing_extern_is_named() {
        let missing = Applied::MissingExterns {
            missing: vec!["ipsec_encrypt".into()],
            available: vec!["async_encrypt".into(), "async_decrypt".into()],
        };
        let st = on_dpdk(Some(&missing));
        let r = ready(&st);
        assert_eq!(
            (r.status, r.reason.as_str()),
            (ConditionStatus::False, "ExternNotFound")
        );
        assert!(
            r.message.contains("no extern ipsec_encrypt"),
            "{}",
            r.message
        );
        assert!(
            r.message.contains("async_encrypt, async_decrypt"),
            "{}",
            r.message
        );
    }

    #[test]
    fn non_dpdk_target_is_not_ready_with_a_clear_reason() {
        let mut tofino = on(SwitchTarget::Tofino);
        if let Placement::Switch { name, .. } = &mut tofino {
            *name = "tofino-1".into();
        }
        assert!(tofino.runtime().is_none());
        let st = build_status(&spec(), Some(1), &tofino, &[], None, None);
        let ready = p4fleet_crds::find_condition(&st.conditions, "Ready").unwrap();
        assert_eq!(ready.status, ConditionStatus::False);
        assert_eq!(ready.reason, "NotDpdkTarget");
        assert!(ready.message.contains("tofino-1"));
    }

    #[test]
    fn missing_virtual_switch_names_the_field() {
        let st = build_status(
            &spec(),
            Some(1),
            &Placement::VirtualSwitchNotFound,
            &[],
            None,
            None,
        );
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

    #[test]
    fn a_policy_t4p4s_cannot_express_names_why_and_stays_ready() {
        let mut s = spec();
        s.externs.push(
            serde_json::from_value(serde_json::json!({"name": "ipsec_decrypt", "mode": "Skip"}))
                .unwrap(),
        );
        let target = on(SwitchTarget::Dpdk);
        let rendered = rendering("ipsec", &s, &target);
        let st = build_status(
            &s,
            Some(1),
            &target,
            &[],
            Some(&reported(true)),
            rendered.as_ref(),
        );
        let t = p4fleet_crds::find_condition(&st.conditions, T4P4S_OPTIONS).unwrap();
        assert_eq!(
            (t.status, t.reason.as_str()),
            (ConditionStatus::False, "NoT4P4SEquivalent")
        );
        assert!(
            t.message
                .contains("ipsec_encrypt=Async, ipsec_decrypt=Skip"),
            "{}",
            t.message
        );
        assert_eq!(st.t4p4s_config_map, None);
        // Ready is about the device, which runs the policy.
        assert_eq!(ready(&st).status, ConditionStatus::True);
        // Unresolved or invalid: nothing rendered.
        assert!(rendering("ipsec", &s, &Placement::NotScheduled).is_none());
        assert!(rendering("ipsec", &s, &on(SwitchTarget::Tofino)).is_none());
    }
}
