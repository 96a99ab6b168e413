//! Conflicting claims (pure): two TableEntrySets of a namespace that
//! claim something one VirtualSwitch's device holds once ([`Claim`]):
//! a table's entries (one of the two Exclusive: left alone, the Exclusive
//! set deletes the other's entries and the other writes them again, every
//! sync), a table's default action (both set `spec.defaultAction`), a
//! digest's configuration (both configure it in `spec.digests`).
//!
//! The older set keeps the claim ([`crate::claimants`]); the younger does
//! not write it while the conflict lasts: for a table, that target; for a
//! default action or a digest, only that. Both report it
//! (`ResolvedRefs=False`, reason `OwnershipConflict`, naming the other
//! set). Two Merge sets never conflict over entries: each owns only its own.

use std::sync::Arc;

use kube::ResourceExt;
use p4fleet_crds::entry_set::Ownership;
use p4fleet_crds::{TableEntrySet, VirtualSwitch};

pub use crate::claimants::older;
use crate::fleet::fills::{fills, names_table};

/// What two sets claim on one VirtualSwitch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// The table's entries: one of the two sets is Exclusive.
    Table,
    /// The table's default action: both set `spec.defaultAction`.
    DefaultAction,
    /// The configuration of this digest: both list it in `spec.digests`.
    Digest(String),
}

/// A claim this set and another make on one VirtualSwitch.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}; {}; to resolve it, {}",
    what(self),
    if *keeps { format!("this set is older and keeps it; {other} does not write it") }
    else { format!("{other} is older and keeps it, so this set is held: it writes nothing of it there") },
    remedy(claim),
)]
pub struct Conflict {
    pub virtual_switch: String,
    /// The table's full name.
    pub table: String,
    pub claim: Claim,
    /// The other set's name (same namespace).
    pub other: String,
    pub ownership: Ownership,
    pub other_ownership: Ownership,
    /// Whether this set keeps the claim (it is the older one).
    pub keeps: bool,
}

fn what(c: &Conflict) -> String {
    let (vs, table, other) = (&c.virtual_switch, &c.table, &c.other);
    match &c.claim {
        Claim::Table => format!(
            "table {table} of VirtualSwitch {vs} is also filled by TableEntrySet {other} ({:?}; this set: {:?})",
            c.other_ownership, c.ownership
        ),
        Claim::DefaultAction => format!(
            "the default action of table {table} of VirtualSwitch {vs} is also set by TableEntrySet {other} (spec.defaultAction)"
        ),
        Claim::Digest(d) => format!(
            "digest {d} of VirtualSwitch {vs} is also configured by TableEntrySet {other} (spec.digests)"
        ),
    }
}

fn remedy(claim: &Claim) -> &'static str {
    match claim {
        Claim::Table => "delete one of the two sets or make both Merge",
        Claim::DefaultAction => "remove spec.defaultAction from one of the two sets",
        Claim::Digest(_) => "configure the digest in one of the two sets only",
    }
}

/// What `me` and `o`, both filling table `table`, claim alike.
fn shared(me: &TableEntrySet, o: &TableEntrySet, table: &str) -> Vec<Claim> {
    let mut out = Vec::new();
    let same_table = names_table(&o.spec.table, table);
    if same_table
        && (me.spec.ownership == Ownership::Exclusive || o.spec.ownership == Ownership::Exclusive)
    {
        out.push(Claim::Table);
    }
    if same_table && me.spec.default_action.is_some() && o.spec.default_action.is_some() {
        out.push(Claim::DefaultAction);
    }
    for d in &me.spec.digests {
        if o.spec.digests.iter().any(|x| x.name == d.name) {
            out.push(Claim::Digest(d.name.clone()));
        }
    }
    out
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
        let mut rivals: Vec<(&Arc<TableEntrySet>, Vec<Claim>)> = others
            .iter()
            // Borrowed fields, cheapest test first: every sync runs this
            // over the sets that may fill its VirtualSwitches.
            .filter(|o| crate::claimants::rival(me, o.as_ref()))
            .map(|o| (o, shared(me, o, table)))
            .filter(|(o, claims)| !claims.is_empty() && fills(o, &vs))
            .collect();
        rivals.sort_by_key(|(o, _)| o.name_any());
        for (o, claims) in rivals {
            out.extend(claims.into_iter().map(|claim| Conflict {
                virtual_switch: vs_name.to_string(),
                table: table.to_string(),
                claim,
                other: o.name_any(),
                ownership: me.spec.ownership,
                other_ownership: o.spec.ownership,
                keeps: older(me, o),
            }));
        }
    }
    out
}

/// `refs` less the targets an older set keeps (`others`: the sets that
/// may fill the same VirtualSwitches, looked up by `virtual_switch`),
/// each conflict a problem of `refs`; the claims `set` does not hold
/// (default actions and digests it does not write). The operator's sync
/// and `p4fleet plan -f` settle alike.
pub fn settle(
    set: &TableEntrySet,
    refs: &mut super::dereference::Dereferenced,
    others: &[Arc<TableEntrySet>],
    virtual_switch: impl Fn(&str) -> Option<Arc<VirtualSwitch>>,
) -> Vec<Conflict> {
    let targets: Vec<(&str, &str)> = refs
        .targets
        .iter()
        .map(|t| (t.virtual_switch.as_str(), t.schema.name.as_str()))
        .collect();
    let found = find(set, &targets, others, virtual_switch);
    let yielded: Vec<String> = yielded(&found).into_iter().map(str::to_string).collect();
    refs.targets
        .retain(|t| !yielded.contains(&t.virtual_switch));
    let lost = held(&found).cloned().collect();
    refs.problems.extend(
        found
            .into_iter()
            .map(super::dereference::Problem::OwnershipConflict),
    );
    lost
}

/// The conflicts this set loses: an older set keeps the claim.
pub fn held(conflicts: &[Conflict]) -> impl Iterator<Item = &Conflict> {
    conflicts.iter().filter(|c| !c.keeps)
}

/// The targets (VirtualSwitch names) this set must not write: those where
/// an older set keeps the table.
pub fn yielded(conflicts: &[Conflict]) -> Vec<&str> {
    held(conflicts)
        .filter(|c| c.claim == Claim::Table)
        .map(|c| c.virtual_switch.as_str())
        .collect()
}

/// Whether an older set keeps `claim` on VirtualSwitch `vs`: its holder.
pub fn held_by<'a>(conflicts: &'a [Conflict], vs: &str, claim: &Claim) -> Option<&'a str> {
    held(conflicts)
        .find(|c| c.virtual_switch == vs && &c.claim == claim)
        .map(|c| c.other.as_str())
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
                && msg.contains("a is older and keeps it, so this set is held")
                && msg.contains("delete one of the two sets or make both Merge"),
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

    /// A Merge set with a default action and a digest config.
    fn with_extras(name: &str, created: i64, digest: &str) -> Arc<TableEntrySet> {
        let mut s = (*set(name, "Merge", FW, Some(created))).clone();
        s.spec.default_action =
            Some(serde_json::from_value(serde_json::json!({"action": "drop"})).unwrap());
        s.spec.digests = vec![serde_json::from_value(serde_json::json!({"name": digest})).unwrap()];
        Arc::new(s)
    }

    #[test]
    fn two_merge_sets_conflict_over_a_default_action_and_a_shared_digest_only() {
        let a = with_extras("a", 100, "mac_learn");
        let b = with_extras("b", 200, "mac_learn");
        let all = [a.clone(), b.clone()];
        let of_b = find(&b, &[("edge1", FW)], &all, lookup);
        let claims: Vec<&Claim> = of_b.iter().map(|c| &c.claim).collect();
        assert_eq!(
            claims,
            [&Claim::DefaultAction, &Claim::Digest("mac_learn".into())]
        );
        assert!(of_b.iter().all(|c| !c.keeps && c.other == "a"));
        // Entries are not held: both Merge.
        assert!(yielded(&of_b).is_empty());
        assert_eq!(held_by(&of_b, "edge1", &Claim::DefaultAction), Some("a"));
        assert_eq!(held_by(&of_b, "core1", &Claim::DefaultAction), None);
        let of_a = find(&a, &[("edge1", FW)], &all, lookup);
        assert!(of_a.iter().all(|c| c.keeps));
        assert_eq!(held_by(&of_a, "edge1", &Claim::DefaultAction), None);
        let msg = of_b[0].to_string();
        assert!(
            msg.contains("the default action of table MyIngress.firewall of VirtualSwitch edge1 is also set by TableEntrySet a")
                && msg.contains("remove spec.defaultAction from one of the two sets"),
            "{msg}"
        );
        assert!(
            of_b[1]
                .to_string()
                .contains("digest mac_learn of VirtualSwitch edge1")
        );
        // Other digests, another table's default action: no conflict.
        let c = with_extras("c", 300, "other");
        let mut d = (*with_extras("d", 400, "third")).clone();
        d.spec.table = "MyIngress.acl".into();
        let all = [c.clone(), Arc::new(d)];
        assert!(find(&c, &[("edge1", FW)], &all, lookup).is_empty());
    }

    #[test]
    fn a_stored_set_precedes_one_without_a_creation_time() {
        let (a, b) = (set("z", "Merge", FW, Some(5)), set("a", "Merge", FW, None));
        assert!(older(a.as_ref(), b.as_ref()) && !older(b.as_ref(), a.as_ref()));
    }
}
