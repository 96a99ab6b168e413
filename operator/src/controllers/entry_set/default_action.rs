//! The set's `spec.defaultAction` on each target: checked against the
//! P4Info ([`plan`], pure: `@defaultonly` allowed, `@tableonly` and const
//! default actions refused), read back from the device's default entry and
//! set with a MODIFY only when it differs ([`sync_target`]); then folded
//! into the status ([`fold`], pure: the `DefaultAction` condition, Ready,
//! `status.defaultAction`, Events).
//!
//! Resets: a set whose status says it set a default (`status.defaultAction`)
//! and whose spec no longer asks for one resets the table to the
//! program's initial default (a MODIFY of the default entry with no
//! action, P4Runtime §9.1.3), and so does its deletion ([`reset`]).

use p4fleet_client::Device;
use p4fleet_crds::{Condition, DefaultAction, condition_types::READY};
use p4fleet_model::entries::{
    ActionCall, ActionParam, ByteStr, DefaultActionError, format_action, parse_default_action,
};
use p4fleet_proto::p4runtime::{TableAction, table_action};

use super::SetCtx;
use super::dereference::Target;
use super::set::Set;
use super::status::Report;
use crate::status::{EventNote, ready_from};

/// The condition this module adds (only to sets that set a default or did).
pub const DEFAULT_ACTION: &str = "DefaultAction";

/// What the spec asks of one target's default entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan {
    /// Nothing: the set never set a default action.
    Untouched,
    /// Set it to this action (if the device differs).
    Set(ActionCall),
    /// Return it to the program's initial default: the set set one before
    /// and its spec no longer does.
    Reset,
    /// Reset it only if the device holds this action: a target a rollout
    /// holds on (or rolled back to) a revision without a default action,
    /// while the content now sets this one, which may have reached it.
    ResetFrom(ActionCall),
    /// The spec's default action is not allowed for this table.
    Invalid(DefaultActionError),
    /// An older set sets this table's default action on this target
    /// ([`super::conflicts`]): nothing is written, not even a reset.
    Held { by: String },
}

/// What happened to one target's default entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Untouched,
    /// The device holds this action (read back); `written` when this sync
    /// had to set it.
    Confirmed {
        action: String,
        written: bool,
    },
    /// Reset to the program's initial default.
    Reset,
    Invalid(DefaultActionError),
    /// Left to the older set named (`Plan::Held`).
    Held {
        by: String,
    },
    /// The target cannot set default actions (a client error
    /// `Unsupported`).
    Unsupported(String),
    /// The device refused the MODIFY or the read (with its message).
    Failed(String),
}

/// What the spec asks of `t`'s default entry. Pure.
pub fn plan(set: &Set<'_>, t: &Target) -> Plan {
    match &set.spec.default_action {
        Some(d) => set_to(d, t),
        None if set.status.is_some_and(|s| s.default_action.is_some()) => Plan::Reset,
        None => Plan::Untouched,
    }
}

fn set_to(d: &DefaultAction, t: &Target) -> Plan {
    match parse_default_action(&t.schema, t.const_default_action, &d.action, &d.params) {
        Ok(call) => Plan::Set(call),
        Err(e) => Plan::Invalid(e),
    }
}

/// What a revision of the set's content asks of `t`'s default entry,
/// for a target a rollout holds on that revision (`then`: the revision's
/// default action; `set` as now; docs/rollouts.md, "Rolling out
/// entries"). Pure.
pub fn plan_held(set: &Set<'_>, then: Option<&DefaultAction>, t: &Target) -> Plan {
    match (then, &set.spec.default_action) {
        (Some(d), _) => set_to(d, t),
        (None, Some(now)) => match set_to(now, t) {
            Plan::Set(call) => Plan::ResetFrom(call),
            // Never written: there is nothing of it to take back.
            _ => Plan::Untouched,
        },
        (None, None) => plan(set, t),
    }
}

/// Carries out `plan` on `t`: read back, write only what differs, read
/// back what was written. Never an error: a failure is the outcome.
pub async fn sync_target(ctx: &SetCtx, t: &Target, plan: Plan) -> Outcome {
    let call = match plan {
        Plan::Untouched => return Outcome::Untouched,
        Plan::Invalid(e) => return Outcome::Invalid(e),
        Plan::Held { by } => return Outcome::Held { by },
        Plan::Reset => {
            return match t.device(&ctx.devices) {
                Ok(dev) => match reset_on(&dev, t).await {
                    Ok(()) => Outcome::Reset,
                    Err(e) => failure(e),
                },
                Err(e) => failure(e),
            };
        }
        Plan::ResetFrom(call) => return reset_from(ctx, t, &call).await,
        Plan::Set(call) => call,
    };
    let dev = match t.device(&ctx.devices) {
        Ok(d) => d,
        Err(e) => return failure(e),
    };
    let action = format_action(&t.schema, &call);
    let on_device = match dev.read_default_action(t.slot, t.schema.id).await {
        Ok(a) => a,
        Err(e) => return failure(e),
    };
    if on_device.as_ref().and_then(action_of).as_ref() == Some(&call) {
        return Outcome::Confirmed {
            action,
            written: false,
        };
    }
    if let Err(e) = dev
        .write_default_action(t.slot, t.schema.id, Some(&call))
        .await
    {
        return failure(e);
    }
    match dev.read_default_action(t.slot, t.schema.id).await {
        Ok(a) if a.as_ref().and_then(action_of).as_ref() == Some(&call) => Outcome::Confirmed {
            action,
            written: true,
        },
        Ok(a) => Outcome::Failed(format!(
            "the device accepted default action {action} but reads back {}",
            a.as_ref()
                .and_then(action_of)
                .map_or_else(|| "none".to_string(), |c| format_action(&t.schema, &c))
        )),
        Err(e) => failure(e),
    }
}

/// [`Plan::ResetFrom`]: one read, and a reset only where `call` is held.
async fn reset_from(ctx: &SetCtx, t: &Target, call: &ActionCall) -> Outcome {
    let dev = match t.device(&ctx.devices) {
        Ok(d) => d,
        Err(e) => return failure(e),
    };
    match dev.read_default_action(t.slot, t.schema.id).await {
        Ok(a) if a.as_ref().and_then(action_of).as_ref() == Some(call) => {
            match reset_on(&dev, t).await {
                Ok(()) => Outcome::Reset,
                Err(e) => failure(e),
            }
        }
        Ok(_) => Outcome::Untouched,
        Err(e) => failure(e),
    }
}

/// Resets the default entry of a deleted set's target if the set had set
/// one (its status says so); Ok when there was nothing to reset.
pub async fn reset(set: &Set<'_>, dev: &Device, t: &Target) -> Result<(), p4fleet_client::Error> {
    if set.status.is_some_and(|s| s.default_action.is_some()) {
        reset_on(dev, t).await?;
    }
    Ok(())
}

async fn reset_on(dev: &Device, t: &Target) -> Result<(), p4fleet_client::Error> {
    dev.write_default_action(t.slot, t.schema.id, None).await
}

fn failure(e: p4fleet_client::Error) -> Outcome {
    match e {
        p4fleet_client::Error::Unsupported(what) => Outcome::Unsupported(what.to_string()),
        e => Outcome::Failed(e.to_string()),
    }
}

/// The read-back default action as the model's canonical [`ActionCall`].
fn action_of(a: &TableAction) -> Option<ActionCall> {
    let Some(table_action::Type::Action(a)) = &a.r#type else {
        return None;
    };
    let mut params: Box<[ActionParam]> = a
        .params
        .iter()
        .map(|p| ActionParam {
            param_id: p.param_id,
            value: ByteStr::canonical(&p.value),
        })
        .collect();
    params.sort_by_key(|p| p.param_id);
    Some(ActionCall {
        action_id: a.action_id,
        params,
    })
}

/// Folds the targets' outcomes (`(virtual switch, outcome)`, in target
/// order) into `report`: the `DefaultAction` condition (absent when every
/// target is untouched), Ready False when it is not True, the confirmed
/// action in `status.defaultAction` and a Normal Event for each target
/// where it was set. Pure.
pub fn fold(report: &mut Report, set: &Set<'_>, outcomes: &[(String, Outcome)]) {
    let me = &set.key;
    let table = &set.spec.table;
    let st = &mut report.status;
    st.default_action = None;
    if outcomes.iter().all(|(_, o)| *o == Outcome::Untouched) {
        // A reset that found no target keeps saying what was set, so
        // that it is retried when one comes back.
        if set.spec.default_action.is_none() {
            st.default_action = set.status.and_then(|s| s.default_action.clone());
        }
        return;
    }
    let field = "spec.defaultAction";
    let problem = outcomes.iter().find_map(|(vs, o)| {
        let (reason, why) = match o {
            Outcome::Invalid(e) => {
                let reason = match e {
                    DefaultActionError::ConstDefault { .. } => "ConstDefaultAction",
                    DefaultActionError::TableOnly { .. } => "TableOnlyAction",
                    DefaultActionError::Entry(_) => "InvalidDefaultAction",
                };
                (reason, e.to_string())
            }
            Outcome::Unsupported(what) => {
                ("UnsupportedOnTarget", format!("{what} is not supported"))
            }
            Outcome::Failed(m) => ("DefaultActionFailed", m.clone()),
            Outcome::Held { by } => (
                "OwnershipConflict",
                format!(
                    "TableEntrySet {by} is older and sets it, so this set is held: it does not write it; remove spec.defaultAction from one of the two sets"
                ),
            ),
            _ => return None,
        };
        Some(Condition::new(
            DEFAULT_ACTION,
            false,
            reason,
            format!("TableEntrySet {me}: {field} of table {table} on VirtualSwitch {vs}: {why}"),
        ))
    });
    let condition = match problem {
        Some(c) => c,
        None => {
            let confirmed: Vec<&str> = outcomes
                .iter()
                .filter_map(|(_, o)| match o {
                    Outcome::Confirmed { action, .. } => Some(action.as_str()),
                    _ => None,
                })
                .collect();
            if confirmed.len() == outcomes.len() {
                st.default_action = confirmed.first().map(|a| a.to_string());
            } else if set.spec.default_action.is_none() {
                // Reset everywhere: nothing of this set's is left to reset.
                st.default_action = None;
            }
            for (vs, o) in outcomes {
                if let Outcome::Confirmed {
                    action,
                    written: true,
                } = o
                {
                    report.events.push(EventNote::normal(
                        "DefaultActionSet",
                        "SetDefaultAction",
                        format!("table {table} on VirtualSwitch {vs}: default action {action}"),
                    ));
                }
            }
            let message = match &st.default_action {
                Some(a) => format!("default action {a} on {} targets", outcomes.len()),
                None => "default action reset to the program's initial default".to_string(),
            };
            Condition::new(DEFAULT_ACTION, true, "Applied", message)
        }
    };
    // A reset that did not happen everywhere keeps the old value, so that
    // the next sync tries again.
    if set.spec.default_action.is_none() && !condition.is_true() {
        st.default_action = set.status.and_then(|s| s.default_action.clone());
    }
    if !condition.is_true()
        && let Some(ready) = st.conditions.iter_mut().find(|c| c.type_ == READY)
        && ready.is_true()
    {
        *ready = ready_from(&[&condition], READY, "");
    }
    st.conditions.push(condition);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::entry_set::desired::tests::target;
    use p4fleet_crds::TableEntrySet;
    use p4fleet_crds::{DefaultAction, TableEntrySetSpec, TableEntrySetStatus, find_condition};

    fn set(default: Option<(&str, &[(&str, &str)])>, status: Option<&str>) -> TableEntrySet {
        let spec: TableEntrySetSpec = serde_json::from_value(serde_json::json!({
            "virtualSwitchRef": "vs", "table": "MyIngress.firewall", "ownership": "Exclusive"
        }))
        .unwrap();
        let mut s = TableEntrySet::new(
            "fw",
            TableEntrySetSpec {
                default_action: default.map(|(a, p)| DefaultAction {
                    action: a.into(),
                    params: p
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect(),
                }),
                ..spec
            },
        );
        s.metadata.namespace = Some("ns".into());
        s.status = status.map(|a| TableEntrySetStatus {
            default_action: Some(a.into()),
            ..Default::default()
        });
        s
    }

    fn report(ready: bool) -> Report {
        Report::ready_only(Condition::new(READY, ready, "Ready", "all entries applied"))
    }

    #[test]
    fn the_plan_follows_spec_and_what_status_says_was_set() {
        let drop = set(Some(("drop", &[])), None);
        assert!(
            matches!(plan(&Set::of(&drop), &target(None)), Plan::Set(c) if c.params.is_empty())
        );
        // A const default refuses any default action.
        assert!(matches!(
            plan(&Set::of(&drop), &target(Some(25652968))),
            Plan::Invalid(DefaultActionError::ConstDefault { .. })
        ));
        let bad = set(Some(("allow", &[("port", "999")])), None);
        assert!(matches!(
            plan(&Set::of(&bad), &target(None)),
            Plan::Invalid(_)
        ));
        // Removed from the spec after being set: reset; never set: untouched.
        assert_eq!(
            plan(&Set::of(&set(None, Some("drop()"))), &target(None)),
            Plan::Reset
        );
        assert_eq!(
            plan(&Set::of(&set(None, None)), &target(None)),
            Plan::Untouched
        );
    }

    #[test]
    fn a_target_held_on_a_revision_gets_that_revisions_default_action() {
        let t = target(None);
        let now = set(Some(("drop", &[])), None);
        let allow = set(Some(("allow", &[("port", "1")])), None);
        let allow = allow.spec.default_action.as_ref();
        // The revision's own default action, whatever the content now.
        assert!(
            matches!(plan_held(&Set::of(&now), allow, &t), Plan::Set(c) if !c.params.is_empty())
        );
        // None then, one now: taken back only where it reached.
        let none = set(None, None);
        assert!(
            matches!(plan_held(&Set::of(&now), None, &t), Plan::ResetFrom(c) if c.params.is_empty())
        );
        // One now that was refused never reached a device.
        let bad = set(Some(("allow", &[("port", "999")])), None);
        assert_eq!(plan_held(&Set::of(&bad), None, &t), Plan::Untouched);
        // None either way: as without a rollout.
        assert_eq!(plan_held(&Set::of(&none), None, &t), Plan::Untouched);
        let was = set(None, Some("drop()"));
        assert_eq!(plan_held(&Set::of(&was), None, &t), Plan::Reset);
    }

    #[test]
    fn a_refused_default_action_is_a_condition_that_names_set_field_and_table() {
        let s = set(Some(("drop", &[])), None);
        let mut r = report(true);
        let e = DefaultActionError::ConstDefault {
            table: "MyIngress.firewall".into(),
            action: "MyIngress.drop".into(),
        };
        fold(&mut r, &Set::of(&s), &[("vs".into(), Outcome::Invalid(e))]);
        let c = find_condition(&r.status.conditions, DEFAULT_ACTION).unwrap();
        assert_eq!(
            (c.is_true(), c.reason.as_str()),
            (false, "ConstDefaultAction")
        );
        for part in [
            "TableEntrySet ns/fw",
            "spec.defaultAction",
            "MyIngress.firewall",
            "const",
        ] {
            assert!(c.message.contains(part), "{part}: {}", c.message);
        }
        let ready = find_condition(&r.status.conditions, READY).unwrap();
        assert_eq!(
            (ready.is_true(), ready.reason.as_str()),
            (false, "ConstDefaultAction")
        );
        assert_eq!(r.status.default_action, None);

        let mut r = report(true);
        fold(
            &mut r,
            &Set::of(&s),
            &[("vs".into(), Outcome::Unsupported("setting X".into()))],
        );
        let c = find_condition(&r.status.conditions, DEFAULT_ACTION).unwrap();
        assert_eq!(c.reason, "UnsupportedOnTarget");
    }

    #[test]
    fn a_default_action_an_older_set_holds_is_left_to_it_and_said_so() {
        let s = set(Some(("drop", &[])), Some("drop()"));
        let mut r = report(true);
        let held = Outcome::Held { by: "older".into() };
        fold(&mut r, &Set::of(&s), &[("vs".into(), held)]);
        let c = find_condition(&r.status.conditions, DEFAULT_ACTION).unwrap();
        assert_eq!(
            (c.is_true(), c.reason.as_str()),
            (false, "OwnershipConflict")
        );
        assert!(
            c.message
                .contains("TableEntrySet older is older and sets it, so this set is held")
                && c.message.contains("VirtualSwitch vs"),
            "{}",
            c.message
        );
        assert_eq!(r.status.default_action, None, "this set set none");
        let ready = find_condition(&r.status.conditions, READY).unwrap();
        assert_eq!(ready.reason, "OwnershipConflict");
    }

    #[test]
    fn confirmed_everywhere_is_status_and_an_event_per_write() {
        let s = set(Some(("drop", &[])), None);
        let mut r = report(true);
        let ok = |written| Outcome::Confirmed {
            action: "drop()".into(),
            written,
        };
        fold(
            &mut r,
            &Set::of(&s),
            &[("a".into(), ok(true)), ("b".into(), ok(false))],
        );
        assert_eq!(r.status.default_action.as_deref(), Some("drop()"));
        let c = find_condition(&r.status.conditions, DEFAULT_ACTION).unwrap();
        assert!(c.is_true());
        assert!(
            find_condition(&r.status.conditions, READY)
                .unwrap()
                .is_true()
        );
        assert_eq!(r.events.len(), 1);
        assert!(r.events[0].note.contains("VirtualSwitch a"));

        // Untouched everywhere: no condition, nothing claimed.
        let mut r = report(true);
        fold(
            &mut r,
            &Set::of(&set(None, None)),
            &[("a".into(), Outcome::Untouched)],
        );
        assert!(find_condition(&r.status.conditions, DEFAULT_ACTION).is_none());
        assert_eq!(r.status.default_action, None);
    }

    #[test]
    fn a_reset_clears_status_only_once_done() {
        let s = set(None, Some("drop()"));
        let mut r = report(true);
        fold(&mut r, &Set::of(&s), &[("a".into(), Outcome::Reset)]);
        assert_eq!(r.status.default_action, None);
        let mut r = report(true);
        fold(
            &mut r,
            &Set::of(&s),
            &[("a".into(), Outcome::Failed("down".into()))],
        );
        assert_eq!(r.status.default_action.as_deref(), Some("drop()"));
        assert!(
            !find_condition(&r.status.conditions, READY)
                .unwrap()
                .is_true()
        );
    }
}
