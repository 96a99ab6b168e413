use super::*;
use kube::runtime::controller::Action;
use p4fleet_crds::{TableEntrySetSpec, TableEntrySetStatus, find_condition};

fn set(yaml: &str) -> TableEntrySet {
    let spec: TableEntrySetSpec = serde_yaml::from_str(yaml).unwrap();
    let mut s = TableEntrySet::new("ecmp", spec);
    s.metadata.namespace = Some("ns".into());
    s
}

fn ecmp() -> TableEntrySet {
    set("virtualSwitchRef: vs\n\
         table: MyIngress.ecmp\n\
         actionProfile:\n\
         \x20 members:\n\
         \x20 - {name: nh1, action: set_nhop, params: {dmac: 1, port: 1}}\n\
         \x20 - {name: nh2, action: set_nhop, params: {dmac: 2, port: 2}}\n\
         \x20 groups:\n\
         \x20 - {name: g, members: [{member: nh1}, {member: nh2, weight: 2}]}\n\
         entries:\n\
         - {match: {hdr.ipv4.dstAddr: 10.0.0.0/8}, group: g}\n\
         - {match: {hdr.ipv4.dstAddr: 11.0.0.0/8}, member: nh1}\n\
         - {match: {hdr.ipv4.dstAddr: 12.0.0.0/8}, action: drop}\n")
}

fn report() -> Report {
    Report {
        status: TableEntrySetStatus {
            conditions: vec![Condition::new(READY, true, "Ready", "all entries applied")],
            ..Default::default()
        },
        events: Vec::new(),
        action: Action::await_change(),
    }
}

fn confirmed(members: u64, groups: u64, entries: u64) -> Option<ActionProfileStatus> {
    Some(ActionProfileStatus {
        profile: "MyIngress.ecmp_selector".into(),
        members,
        groups,
        entries,
    })
}

#[test]
fn the_spec_names_members_groups_and_the_action_of_each_entry() {
    let s = ecmp();
    assert!(wanted(&s));
    let items = spec_items(&s);
    assert_eq!(items.members.len(), 2);
    assert_eq!(items.groups[0].members, vec![("nh1", 1), ("nh2", 2)]);
    assert!(matches!(items.entries[0].action, ActionSpec::Group("g")));
    assert!(matches!(items.entries[1].action, ActionSpec::Member("nh1")));
    assert!(matches!(items.entries[2].action, ActionSpec::Direct));
    let plain = set("virtualSwitchRef: vs\ntable: t\nentries: [{match: {a: 1}, action: x}]\n");
    assert!(!wanted(&plain));
}

#[test]
fn confirmed_counts_go_to_status_and_the_least_target_wins() {
    let s = ecmp();
    let mut r = report();
    let written = Profiled {
        confirmed: confirmed(2, 1, 2),
        problem: None,
        written: 5,
    };
    let behind = Profiled {
        confirmed: confirmed(2, 1, 1),
        ..written.clone()
    };
    fold(
        &mut r,
        &s,
        &[("a".into(), written), ("b".into(), behind)],
        0,
    );
    let c = find_condition(&r.status.conditions, ACTION_PROFILES_SYNCED).unwrap();
    assert!(c.is_true(), "{c:?}");
    assert_eq!(
        c.message,
        "2 members, 1 groups, 1 entries of MyIngress.ecmp_selector on 2 targets"
    );
    assert_eq!(r.status.action_profile, confirmed(2, 1, 1));
    assert_eq!(r.events.len(), 2);
    assert!(
        find_condition(&r.status.conditions, READY)
            .unwrap()
            .is_true()
    );
}

#[test]
fn a_problem_turns_ready_false_and_names_set_table_and_target() {
    let s = ecmp();
    let mut r = report();
    let bfrt = Profiled {
        problem: Some(("UnsupportedOnTarget", "Switch t1 is a BFRT target".into())),
        ..Profiled::default()
    };
    fold(&mut r, &s, &[("tofino".into(), bfrt)], 0);
    let c = find_condition(&r.status.conditions, ACTION_PROFILES_SYNCED).unwrap();
    assert_eq!(
        (c.is_true(), c.reason.as_str()),
        (false, "UnsupportedOnTarget")
    );
    assert_eq!(
        c.message,
        "TableEntrySet ns/ecmp: table MyIngress.ecmp on VirtualSwitch tofino: Switch t1 is a BFRT target"
    );
    assert_eq!(
        r.status.action_profile, None,
        "nothing confirmed, nothing claimed"
    );
    let ready = find_condition(&r.status.conditions, READY).unwrap();
    assert!(!ready.is_true());
}

#[test]
fn members_and_groups_on_a_table_without_a_profile_are_a_condition() {
    let s = ecmp();
    let mut r = report();
    fold(&mut r, &s, &[], 1);
    let c = find_condition(&r.status.conditions, ACTION_PROFILES_SYNCED).unwrap();
    assert_eq!((c.is_true(), c.reason.as_str()), (false, "NoActionProfile"));
    assert!(
        c.message
            .contains("table MyIngress.ecmp has no action profile"),
        "{}",
        c.message
    );
    // A plain set on a plain table gets no such condition.
    let plain = set("virtualSwitchRef: vs\ntable: t\nentries: [{match: {a: 1}, action: x}]\n");
    let mut r = report();
    fold(&mut r, &plain, &[], 1);
    assert!(find_condition(&r.status.conditions, ACTION_PROFILES_SYNCED).is_none());
}

#[test]
fn entries_from_on_a_profile_table_is_said_not_ignored() {
    assert_eq!(
        entries_from_problem(&ecmp(), "MyIngress.ecmp", "MyIngress.ecmp_selector"),
        None
    );
    let mut s = ecmp();
    s.spec.entries_from = serde_yaml::from_str("[{configMap: ecmp-lines}]").unwrap();
    let (reason, message) =
        entries_from_problem(&s, "MyIngress.ecmp", "MyIngress.ecmp_selector").unwrap();
    assert_eq!(reason, "EntriesFromNotRead");
    assert!(
        message.starts_with(
            "spec.entriesFrom is not read for table MyIngress.ecmp with action profile MyIngress.ecmp_selector"
        ),
        "{message}"
    );
}
