//! Holding a P4Program change that would destroy state (pure): a new
//! content whose P4Info drops tables that TableEntrySets still fill (on a
//! VirtualSwitch running this program) is not rolled out. The status keeps
//! the digest and tables of the content in force, so VirtualSwitches do
//! not load the new one (`pipeline::ready_program`: `ProgramChangeHeld`),
//! and says which sets and tables hold it (`RolloutHeld=True`, reason
//! `TablesStillTargeted`, and an Event). The change goes out once those
//! sets are moved or deleted, or when the program carries the annotation
//! [`ALLOW_TABLE_REMOVAL`]` = "true"`.

use std::sync::Arc;

use kube::ResourceExt;
use p4fleet_crds::{Condition, P4Program, P4ProgramStatus, TableEntrySet, VirtualSwitch};

use super::fills::{fills, names_table};

/// Condition type on a P4Program whose change is held.
pub const ROLLOUT_HELD: &str = "RolloutHeld";
/// Annotation that confirms a change removing tables still in use.
pub const ALLOW_TABLE_REMOVAL: &str = "p4fleet.dev/allow-table-removal";
/// Uses listed in the condition message; the rest are counted.
const MAX_SHOWN: usize = 5;

/// A removed table that a set still fills through a VirtualSwitch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableUse {
    pub table: String,
    pub set: String,
    pub virtual_switch: String,
}

/// Whether the program's annotation confirms table removals.
pub fn removal_allowed(p: &P4Program) -> bool {
    p.annotations()
        .get(ALLOW_TABLE_REMOVAL)
        .is_some_and(|v| v == "true")
}

/// Tables of the content in force (`old`) that the new content lacks.
pub fn removed_tables(old: &P4ProgramStatus, new: &P4ProgramStatus) -> Vec<String> {
    if old.digest.is_none() || new.digest.is_none() || old.digest == new.digest {
        return Vec::new();
    }
    old.tables
        .iter()
        .filter(|t| !new.tables.iter().any(|n| n.name == t.name))
        .map(|t| t.name.clone())
        .collect()
}

/// The sets of the program's namespace that fill one of `removed` on a
/// VirtualSwitch running `program` (sets being deleted do not count).
pub fn still_used(
    program: &P4Program,
    removed: &[String],
    sets: &[Arc<TableEntrySet>],
    virtual_switches: &[Arc<VirtualSwitch>],
) -> Vec<TableUse> {
    let ns = program.namespace();
    let name = program.name_any();
    let mut uses = Vec::new();
    for vs in virtual_switches
        .iter()
        .filter(|v| v.namespace() == ns && v.spec.program_ref == name)
    {
        for s in sets.iter().filter(|s| {
            s.namespace() == ns && s.metadata.deletion_timestamp.is_none() && fills(s, vs)
        }) {
            if let Some(t) = removed.iter().find(|t| names_table(&s.spec.table, t)) {
                uses.push(TableUse {
                    table: t.clone(),
                    set: s.name_any(),
                    virtual_switch: vs.name_any(),
                });
            }
        }
    }
    uses.sort_by(|a, b| (&a.set, &a.virtual_switch).cmp(&(&b.set, &b.virtual_switch)));
    uses
}

/// The `RolloutHeld=True` condition naming the uses.
pub fn held_condition(uses: &[TableUse]) -> Condition {
    let mut shown: Vec<String> = uses
        .iter()
        .take(MAX_SHOWN)
        .map(|u| {
            format!(
                "table {} (TableEntrySet {} on VirtualSwitch {})",
                u.table, u.set, u.virtual_switch
            )
        })
        .collect();
    if uses.len() > MAX_SHOWN {
        shown.push(format!("and {} more", uses.len() - MAX_SHOWN));
    }
    Condition::new(
        ROLLOUT_HELD,
        true,
        "TablesStillTargeted",
        format!(
            "the new content removes tables still filled: {}; move or delete those TableEntrySets, or annotate the P4Program {ALLOW_TABLE_REMOVAL}=\"true\"",
            shown.join(", ")
        ),
    )
}

/// The status while held: what is in force stays (digest, tables,
/// actions, observed generation), the new content's conditions are shown,
/// plus [`held_condition`].
pub fn held_status(
    old: &P4ProgramStatus,
    new: P4ProgramStatus,
    uses: &[TableUse],
) -> P4ProgramStatus {
    let mut conditions = new.conditions;
    conditions.push(held_condition(uses));
    P4ProgramStatus {
        conditions,
        ..old.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use p4fleet_crds::TableInfo;

    fn status(digest: &str, tables: &[&str]) -> P4ProgramStatus {
        P4ProgramStatus {
            digest: Some(digest.into()),
            tables: tables
                .iter()
                .map(|t| TableInfo {
                    name: t.to_string(),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }
    }

    fn object<K: serde::de::DeserializeOwned>(v: serde_json::Value) -> Arc<K> {
        Arc::new(serde_json::from_value(v).unwrap())
    }

    fn program(annotations: serde_json::Value) -> P4Program {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "p4fleet.dev/v1alpha1", "kind": "P4Program",
            "metadata": {"name": "fw", "namespace": "ns", "annotations": annotations},
            "spec": {"p4info": {"inline": ""}}
        }))
        .unwrap()
    }

    fn vs(name: &str, program: &str) -> Arc<VirtualSwitch> {
        object(serde_json::json!({
            "apiVersion": "p4fleet.dev/v1alpha1", "kind": "VirtualSwitch",
            "metadata": {"name": name, "namespace": "ns"},
            "spec": {"programRef": program, "switchRef": "sw", "slot": 0}
        }))
    }

    fn set(name: &str, vs: &str, table: &str) -> Arc<TableEntrySet> {
        object(serde_json::json!({
            "apiVersion": "p4fleet.dev/v1alpha1", "kind": "TableEntrySet",
            "metadata": {"name": name, "namespace": "ns"},
            "spec": {"virtualSwitchRef": vs, "table": table, "ownership": "Exclusive"}
        }))
    }

    #[test]
    fn only_a_content_change_that_drops_tables_removes_any() {
        let old = status("a", &["MyIngress.acl", "MyIngress.fw"]);
        assert_eq!(
            removed_tables(&old, &status("b", &["MyIngress.fw"])),
            ["MyIngress.acl"]
        );
        assert!(
            removed_tables(&old, &status("b", &["MyIngress.fw", "MyIngress.acl", "x"])).is_empty()
        );
        assert!(
            removed_tables(&old, &status("a", &[])).is_empty(),
            "same digest"
        );
        let first = P4ProgramStatus::default();
        assert!(
            removed_tables(&first, &status("b", &[])).is_empty(),
            "nothing in force yet"
        );
        let invalid = P4ProgramStatus::default();
        assert!(
            removed_tables(&old, &invalid).is_empty(),
            "an invalid change loads nothing anyway"
        );
    }

    #[test]
    fn sets_filling_a_removed_table_on_this_programs_virtual_switches_hold_it() {
        let removed = vec!["MyIngress.acl".to_string()];
        let vss = [vs("edge", "fw"), vs("other", "router")];
        let sets = [
            set("acl", "edge", "acl"),
            set("fw-set", "edge", "MyIngress.fw"),
            set("elsewhere", "other", "MyIngress.acl"),
        ];
        let uses = still_used(&program(serde_json::json!({})), &removed, &sets, &vss);
        assert_eq!(
            uses,
            [TableUse {
                table: "MyIngress.acl".into(),
                set: "acl".into(),
                virtual_switch: "edge".into()
            }]
        );
        let c = held_condition(&uses);
        assert!(c.is_true());
        assert_eq!(c.reason, "TablesStillTargeted");
        assert!(
            c.message
                .contains("table MyIngress.acl (TableEntrySet acl on VirtualSwitch edge)")
                && c.message.contains(ALLOW_TABLE_REMOVAL),
            "{}",
            c.message
        );
        let old = status("a", &["MyIngress.acl", "MyIngress.fw"]);
        let st = held_status(&old, status("b", &["MyIngress.fw"]), &uses);
        assert_eq!(
            st.digest.as_deref(),
            Some("a"),
            "the content in force stays"
        );
        assert_eq!(st.tables.len(), 2);
    }

    #[test]
    fn the_annotation_confirms_the_removal() {
        assert!(!removal_allowed(&program(serde_json::json!({}))));
        assert!(!removal_allowed(&program(
            serde_json::json!({ALLOW_TABLE_REMOVAL: "yes"})
        )));
        assert!(removal_allowed(&program(
            serde_json::json!({ALLOW_TABLE_REMOVAL: "true"})
        )));
    }

    #[test]
    fn a_long_list_of_uses_is_cut() {
        let uses: Vec<TableUse> = (0..20)
            .map(|i| TableUse {
                table: "t".into(),
                set: format!("s{i}"),
                virtual_switch: "v".into(),
            })
            .collect();
        let c = held_condition(&uses);
        assert!(c.message.contains("and 15 more"), "{}", c.message);
    }
}
