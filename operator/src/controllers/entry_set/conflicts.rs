//! Conflicting ownership (pure): two TableEntrySets of a namespace that
//! fill one VirtualSwitch's table (so one table of one device), at least
//! one of them Exclusive. Left alone they fight: the Exclusive set deletes
//! the other's entries and the other writes them again, every sync.
//!
//! The older set keeps the table, decided the same way by both sets and
//! by every operator process: the earlier `creationTimestamp`, then the
//! name. The younger set does not write that target while the conflict
//! lasts. Both report it (`ResolvedRefs=False`, reason
//! `OwnershipConflict`, naming the other set and the table). Two Merge
//! sets never conflict: each owns only its own entries.

use std::sync::Arc;

use kube::ResourceExt;
use p4fleet_crds::entry_set::Ownership;
use p4fleet_crds::{TableEntrySet, VirtualSwitch};

/// A target this set and another claim, at least one Exclusive.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "table {table} of VirtualSwitch {virtual_switch} is also filled by TableEntrySet {other} ({other_ownership:?}; this set: {ownership:?}); {}",
    if *keeps { format!("this set is older and keeps it; {other} does not write it") }
    else { format!("{other} is older and keeps it; this set does not write it") }
)]
pub struct Conflict {
    pub virtual_switch: String,
    /// The table's full name.
    pub table: String,
    /// The other set's name (same namespace).
    pub other: String,
    pub ownership: Ownership,
    pub other_ownership: Ownership,
    /// Whether this set keeps the target (it is the older one).
    pub keeps: bool,
}

/// Whether a set's `spec.table` (full or short name) names `full`.
pub fn names_table(spec_table: &str, full: &str) -> bool {
    spec_table == full
        || full
            .strip_suffix(spec_table)
            .is_some_and(|p| p.ends_with('.'))
}

/// Whether `a` precedes `b`: created earlier, or at the same second with
/// the smaller name. A set without a creation time (never stored) comes last.
pub fn older(a: &TableEntrySet, b: &TableEntrySet) -> bool {
    let when = |s: &TableEntrySet| s.metadata.creation_timestamp.as_ref().map(|t| t.0);
    match (when(a), when(b)) {
        (Some(x), Some(y)) if x != y => x < y,
        (Some(_), None) => true,
        (None, Some(_)) => false,
        _ => a.name_any() < b.name_any(),
    }
}

/// The conflicts of `me` on its `targets` (VirtualSwitch, full table
/// name) with the other sets (`others` may include `me`; sets being
/// deleted are skipped: they only remove their own entries).
/// `virtual_switch` looks up a VirtualSwitch of the set's namespace.
pub fn find(
    me: &TableEntrySet,
    targets: &[(&str, &str)],
    others: &[Arc<TableEntrySet>],
    virtual_switch: impl Fn(&str) -> Option<Arc<VirtualSwitch>>,
) -> Vec<Conflict> {
    let mut out = Vec::new();
    for &(vs_name, table) in targets {
        let Some(vs) = virtual_switch(vs_name) else {
            continue;
        };
        let mut rivals: Vec<&Arc<TableEntrySet>> = others
            .iter()
            // Borrowed fields, cheapest test first: every sync runs this
            // over the sets that may fill its VirtualSwitches.
            .filter(|o| {
                (me.spec.ownership == Ownership::Exclusive
                    || o.spec.ownership == Ownership::Exclusive)
                    && o.metadata.namespace == me.metadata.namespace
                    && o.metadata.name != me.metadata.name
                    && o.metadata.deletion_timestamp.is_none()
                    && names_table(&o.spec.table, table)
                    && super::fills(o, &vs)
            })
            .collect();
        rivals.sort_by_key(|o| o.name_any());
        out.extend(rivals.into_iter().map(|o| Conflict {
            virtual_switch: vs_name.to_string(),
            table: table.to_string(),
            other: o.name_any(),
            ownership: me.spec.ownership,
            other_ownership: o.spec.ownership,
            keeps: older(me, o),
        }));
    }
    out
}

/// The targets (VirtualSwitch names) this set must not write: those where
/// an older set wins a conflict.
pub fn yielded(conflicts: &[Conflict]) -> Vec<&str> {
    conflicts
        .iter()
        .filter(|c| !c.keeps)
        .map(|c| c.virtual_switch.as_str())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::jiff::Timestamp;

    fn set(name: &str, ownership: &str, table: &str, created: Option<i64>) -> Arc<TableEntrySet> {
        let mut s: TableEntrySet = serde_json::from_value(serde_json::json!({
            "apiVersion": "p4fleet.dev/v1alpha1", "kind": "TableEntrySet",
            "metadata": {"name": name, "namespace": "ns"},
            "spec": {"virtualSwitchSelector": {"matchLabels": {"role": "edge"}},
                "table": table, "ownership": ownership,
                "entries": [{"match": {"a": "1"}, "action": "drop"}]}
        }))
        .unwrap();
        s.metadata.creation_timestamp = created.map(|t| Time(Timestamp::from_second(t).unwrap()));
        Arc::new(s)
    }

    fn vs(name: &str, role: &str) -> Arc<VirtualSwitch> {
        Arc::new(
            serde_json::from_value(serde_json::json!({
                "apiVersion": "p4fleet.dev/v1alpha1", "kind": "VirtualSwitch",
                "metadata": {"name": name, "namespace": "ns", "labels": {"role": role}},
                "spec": {"programRef": "p", "switchRef": "sw", "slot": 0}
            }))
            .unwrap(),
        )
    }

    fn lookup(name: &str) -> Option<Arc<VirtualSwitch>> {
        match name {
            "edge1" => Some(vs("edge1", "edge")),
            "core1" => Some(vs("core1", "core")),
            _ => None,
        }
    }

    const FW: &str = "MyIngress.firewall";

    #[test]
    fn an_exclusive_and_a_merge_set_conflict_and_the_older_keeps_the_table() {
        let a = set("a", "Exclusive", FW, Some(100));
        let b = set("b", "Merge", "firewall", Some(200));
        let all = [a.clone(), b.clone()];
        let of_a = find(&a, &[("edge1", FW)], &all, lookup);
        let of_b = find(&b, &[("edge1", FW)], &all, lookup);
        assert_eq!(of_a.len(), 1);
        assert_eq!(of_b.len(), 1);
        assert!(of_a[0].keeps && !of_b[0].keeps);
        assert_eq!((of_a[0].other.as_str(), of_b[0].other.as_str()), ("b", "a"));
        assert_eq!(yielded(&of_a), Vec::<&str>::new());
        assert_eq!(yielded(&of_b), ["edge1"]);
        let msg = of_b[0].to_string();
        assert!(
            msg.contains("TableEntrySet a (Exclusive; this set: Merge)")
                && msg.contains("table MyIngress.firewall of VirtualSwitch edge1")
                && msg.contains("a is older and keeps it"),
            "{msg}"
        );
    }

    #[test]
    fn two_exclusive_sets_conflict_two_merge_sets_do_not() {
        let a = set("a", "Exclusive", FW, Some(100));
        let b = set("b", "Exclusive", FW, Some(100));
        let all = [a.clone(), b.clone()];
        // Same second: the name decides, the same way for both.
        assert!(find(&a, &[("edge1", FW)], &all, lookup)[0].keeps);
        assert!(!find(&b, &[("edge1", FW)], &all, lookup)[0].keeps);
        let (c, d) = (
            set("c", "Merge", FW, Some(1)),
            set("d", "Merge", FW, Some(2)),
        );
        assert!(find(&c, &[("edge1", FW)], &[c.clone(), d], lookup).is_empty());
    }

    #[test]
    fn other_tables_targets_namespaces_and_deleted_sets_do_not_conflict() {
        let a = set("a", "Exclusive", FW, Some(100));
        let other_table = set("t", "Merge", "MyIngress.acl", Some(1));
        let suffix_only = set("u", "Merge", "wall", Some(1));
        let mut deleting = (*set("d", "Merge", FW, Some(1))).clone();
        deleting.metadata.deletion_timestamp = Some(Time(Timestamp::from_second(5).unwrap()));
        let mut elsewhere = (*set("e", "Merge", FW, Some(1))).clone();
        elsewhere.metadata.namespace = Some("other".into());
        let all = [
            a.clone(),
            other_table,
            suffix_only,
            Arc::new(deleting),
            Arc::new(elsewhere),
        ];
        assert!(find(&a, &[("edge1", FW)], &all, lookup).is_empty());
        // A VirtualSwitch the other set's selector does not match.
        let b = set("b", "Merge", FW, Some(1));
        assert!(find(&a, &[("core1", FW)], &[a.clone(), b], lookup).is_empty());
    }

    #[test]
    fn a_stored_set_precedes_one_without_a_creation_time() {
        let (a, b) = (set("z", "Merge", FW, Some(5)), set("a", "Merge", FW, None));
        assert!(older(&a, &b) && !older(&b, &a));
    }
}
