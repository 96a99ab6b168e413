//! Plan only for a P4Program (`spec.plan`, pure): a changed content is held
//! like a removal hold ([`super::program_hold`]: the status keeps the
//! content in force, so no VirtualSwitch loads the new one), and
//! `status.plan` says what rolling it out would do: which tables keep
//! their entries, which VirtualSwitches reload and how, which sets would
//! lose their table.

use std::sync::Arc;

use kube::ResourceExt;
use p4fleet_crds::{
    Condition, P4Program, P4ProgramStatus, ProgramPlan, Switch, SwitchProtocol, SwitchTarget,
    TableEntrySet, TableInfo, UpdateStrategyType, VirtualSwitch, VirtualSwitchPlan,
};

use super::program_hold::{self, TableUse};
use crate::status::EventNote;

/// Condition type on a P4Program whose changed content is only planned.
pub const PLANNED: &str = "Planned";

/// A VirtualSwitch of the program and the Switch it is placed on.
pub struct Member<'a> {
    pub vs: &'a VirtualSwitch,
    pub switch: Option<&'a Switch>,
}

/// How a VirtualSwitch would load `to` (see [`VirtualSwitchPlan::load`]).
fn load(m: &Member, to: &str) -> &'static str {
    let st = m.vs.status.as_ref();
    let (Some(sw), Some(loaded)) = (m.switch, st.and_then(|s| s.loaded_digest.as_deref())) else {
        return "None";
    };
    if loaded == to {
        return "None";
    }
    let recreate = m.vs.spec.update_strategy.type_ == UpdateStrategyType::Recreate;
    match (sw.spec.target, sw.spec.effective_protocol(), recreate) {
        (_, _, true) | (_, SwitchProtocol::Bfrt, _) => "Replace",
        (SwitchTarget::Fpga, _, false) => "PartialReconfiguration",
        (_, SwitchProtocol::P4Runtime, false) => "Hitless",
    }
}

/// Same definition as far as status shows it: id, size, match fields and
/// actions.
fn same(a: &TableInfo, b: &TableInfo) -> bool {
    (a.id, a.size, &a.match_fields, &a.actions) == (b.id, b.size, &b.match_fields, &b.actions)
}

/// The plan of rolling out `new` over `old` (the content in force).
pub fn plan(
    old: &P4ProgramStatus,
    new: &P4ProgramStatus,
    members: &[Member],
    losing: &[TableUse],
) -> ProgramPlan {
    let to = new.digest.clone().unwrap_or_default();
    let find = |tables: &[TableInfo], name: &str| tables.iter().find(|t| t.name == name).cloned();
    let mut p = ProgramPlan {
        from: old.short_digest.clone().unwrap_or_default(),
        to: new.short_digest.clone().unwrap_or_default(),
        ..Default::default()
    };
    for t in &old.tables {
        match find(&new.tables, &t.name) {
            Some(n) if same(t, &n) => p.tables_kept.push(t.name.clone()),
            Some(_) => p.tables_changed.push(t.name.clone()),
            None => p.tables_removed.push(t.name.clone()),
        }
    }
    p.tables_added = new
        .tables
        .iter()
        .filter(|t| find(&old.tables, &t.name).is_none())
        .map(|t| t.name.clone())
        .collect();
    p.virtual_switches = members
        .iter()
        .map(|m| VirtualSwitchPlan {
            name: m.vs.name_any(),
            switch: m.switch.map(ResourceExt::name_any),
            load: load(m, &to).to_string(),
        })
        .collect();
    p.virtual_switches.sort_by(|a, b| a.name.cmp(&b.name));
    p.sets_losing_table = losing
        .iter()
        .map(|u| format!("{} ({} on {})", u.set, u.table, u.virtual_switch))
        .collect();
    p
}

/// The plan of `program` rolling `new` out over `old` (the content in
/// force), from the fleet's objects: the controller's caches, or what a
/// command line listed.
pub fn of_fleet(
    program: &P4Program,
    old: &P4ProgramStatus,
    new: &P4ProgramStatus,
    vss: &[Arc<VirtualSwitch>],
    switches: &[Arc<Switch>],
    sets: &[Arc<TableEntrySet>],
) -> ProgramPlan {
    let (ns, name) = (program.namespace(), program.name_any());
    let removed = program_hold::removed_tables(old, new);
    let losing = program_hold::still_used(program, &removed, sets, vss);
    let members: Vec<Member> = vss
        .iter()
        .filter(|v| v.namespace() == ns && v.spec.program_ref == name)
        .map(|vs| {
            let on = vs.status.as_ref().and_then(|s| s.switch.as_deref());
            let switch = on.and_then(|n| switches.iter().find(|s| s.name_any() == n));
            Member {
                vs,
                switch: switch.map(AsRef::as_ref),
            }
        })
        .collect();
    plan(old, new, &members, &losing)
}

/// The held status: the content in force stays (as in a removal hold),
/// the new content's conditions are shown with `Planned=True`, and the
/// plan. The generation counts as observed: the operator acted on it by
/// planning (Argo CD and `kubectl wait` see it settled, not pending).
pub fn planned_status(
    old: &P4ProgramStatus,
    new: P4ProgramStatus,
    plan: ProgramPlan,
) -> P4ProgramStatus {
    let reloads = plan
        .virtual_switches
        .iter()
        .filter(|v| v.load != "None")
        .count();
    let message = format!(
        "spec.plan is true: content {} is not rolled out ({} in force); {reloads} of {} VirtualSwitch(es) would reload, {} table(s) keep their entries, {} change, {} removed, {} TableEntrySet(s) would lose their table (status.plan); set spec.plan to false to roll it out",
        plan.to,
        plan.from,
        plan.virtual_switches.len(),
        plan.tables_kept.len(),
        plan.tables_changed.len(),
        plan.tables_removed.len(),
        plan.sets_losing_table.len(),
    );
    let mut conditions = new.conditions;
    conditions.push(Condition::new(PLANNED, true, "PlanOnly", message));
    P4ProgramStatus {
        conditions,
        observed_generation: new.observed_generation,
        plan: Some(plan),
        ..old.clone()
    }
}

/// The Event of a new or changed plan.
pub fn planned_event(old: Option<&ProgramPlan>, new: &P4ProgramStatus) -> Option<EventNote> {
    let plan = new.plan.as_ref()?;
    if old == Some(plan) {
        return None;
    }
    let message = p4fleet_crds::find_condition(&new.conditions, PLANNED)?
        .message
        .clone();
    Some(EventNote::normal("Planned", "Plan", message))
}

#[cfg(test)]
mod tests {
    use super::*;
    use p4fleet_crds::{SwitchSpec, VirtualSwitchSpec, VirtualSwitchStatus};

    fn table(name: &str, size: i64) -> TableInfo {
        TableInfo {
            name: name.into(),
            id: name.len() as u32,
            size,
            match_fields: vec!["hdr.ipv4.dstAddr:exact:32".into()],
            actions: vec!["forward".into()],
        }
    }

    fn status(digest: &str, tables: Vec<TableInfo>) -> P4ProgramStatus {
        P4ProgramStatus {
            digest: Some(digest.into()),
            short_digest: Some(digest[..3].into()),
            tables,
            ..Default::default()
        }
    }

    fn switch(name: &str, target: SwitchTarget) -> Switch {
        let spec: SwitchSpec = serde_json::from_value(serde_json::json!({
            "target": target, "endpoint": "127.0.0.1:1", "deviceId": 1, "slots": 1
        }))
        .unwrap();
        Switch::new(name, spec)
    }

    fn vs(name: &str, loaded: Option<&str>, recreate: bool) -> VirtualSwitch {
        let mut spec: VirtualSwitchSpec =
            serde_json::from_value(serde_json::json!({"programRef": "p"})).unwrap();
        if recreate {
            spec.update_strategy.type_ = UpdateStrategyType::Recreate;
        }
        let mut v = VirtualSwitch::new(name, spec);
        v.status = Some(VirtualSwitchStatus {
            loaded_digest: loaded.map(Into::into),
            ..Default::default()
        });
        v
    }

    #[test]
    fn tables_are_kept_changed_added_or_removed_by_their_definition() {
        let old = status(
            "aaaa",
            vec![table("acl", 16), table("nexthop", 1024), table("gone", 8)],
        );
        let new = status(
            "bbbb",
            vec![table("acl", 16), table("nexthop", 2048), table("new", 8)],
        );
        let p = plan(&old, &new, &[], &[]);
        assert_eq!(p.tables_kept, ["acl"]);
        assert_eq!(p.tables_changed, ["nexthop"]);
        assert_eq!(p.tables_removed, ["gone"]);
        assert_eq!(p.tables_added, ["new"]);
        assert_eq!((p.from.as_str(), p.to.as_str()), ("aaa", "bbb"));
    }

    #[test]
    fn each_virtual_switch_says_how_it_would_load() {
        let old = status("aaaa", vec![]);
        let new = status("bbbb", vec![]);
        let (bmv2, tofino, fpga) = (
            switch("b", SwitchTarget::Bmv2),
            switch("t", SwitchTarget::Tofino),
            switch("f", SwitchTarget::Fpga),
        );
        let vss = [
            vs("hot", Some("aaaa"), false),
            vs("recreate", Some("aaaa"), true),
            vs("tofino", Some("aaaa"), false),
            vs("fpga", Some("aaaa"), false),
            vs("current", Some("bbbb"), false),
            vs("unplaced", None, false),
        ];
        let on = [
            Some(&bmv2),
            Some(&bmv2),
            Some(&tofino),
            Some(&fpga),
            Some(&bmv2),
            None,
        ];
        let members: Vec<Member> = vss
            .iter()
            .zip(on)
            .map(|(vs, switch)| Member { vs, switch })
            .collect();
        let p = plan(&old, &new, &members, &[]);
        let loads: Vec<(&str, &str)> = p
            .virtual_switches
            .iter()
            .map(|v| (v.name.as_str(), v.load.as_str()))
            .collect();
        assert_eq!(
            loads,
            [
                ("current", "None"),
                ("fpga", "PartialReconfiguration"),
                ("hot", "Hitless"),
                ("recreate", "Replace"),
                ("tofino", "Replace"),
                ("unplaced", "None"),
            ]
        );
    }

    #[test]
    fn the_held_status_keeps_the_content_in_force_and_says_planned() {
        let old = status("aaaa", vec![table("acl", 16)]);
        let new = status("bbbb", vec![]);
        let losing = [TableUse {
            table: "acl".into(),
            set: "acl-set".into(),
            virtual_switch: "vs".into(),
        }];
        let p = plan(&old, &new, &[], &losing);
        assert_eq!(p.sets_losing_table, ["acl-set (acl on vs)"]);
        let held = planned_status(&old, new, p);
        assert_eq!(
            held.digest.as_deref(),
            Some("aaaa"),
            "in force: not rolled out"
        );
        let c = p4fleet_crds::find_condition(&held.conditions, PLANNED).unwrap();
        assert!(c.is_true() && c.message.contains("1 TableEntrySet(s) would lose"));
        assert!(planned_event(None, &held).is_some());
        assert!(planned_event(held.plan.as_ref(), &held).is_none());
    }
}
