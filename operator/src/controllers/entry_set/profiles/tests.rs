use super::*;
use p4fleet_crds::TableEntrySet;
use p4fleet_crds::{TableEntrySetSpec, find_condition};

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
    Report::ready_only(Condition::new(READY, true, "Ready", "all entries applied"))
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
    assert!(wanted(&Set::of(&s)));
    let items = spec_items(&s.spec, &[]);
    assert_eq!(items.members.len(), 2);
    assert_eq!(items.groups[0].members, vec![("nh1", 1), ("nh2", 2)]);
    assert!(matches!(items.entries[0].action, ActionSpec::Group("g")));
    assert!(matches!(items.entries[1].action, ActionSpec::Member("nh1")));
    assert!(matches!(items.entries[2].action, ActionSpec::Direct));
    let plain = set("virtualSwitchRef: vs\ntable: t\nentries: [{match: {a: 1}, action: x}]\n");
    assert!(!wanted(&Set::of(&plain)));
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
        &Set::of(&s),
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
    fold(&mut r, &Set::of(&s), &[("tofino".into(), bfrt)], 0);
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
    fold(&mut r, &Set::of(&s), &[], 1);
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
    fold(&mut r, &Set::of(&plain), &[], 1);
    assert!(find_condition(&r.status.conditions, ACTION_PROFILES_SYNCED).is_none());
}

#[test]
fn config_map_lines_name_members_and_groups_and_bad_lines_their_place() {
    let info = p4fleet_proto::p4info::parse_text(include_str!(
        "../../../../../examples/fabric/p4info.txt"
    ))
    .unwrap();
    let schema = p4fleet_model::entries::TableSchema::from_p4info(&info, "ecmp").unwrap();
    let text = |config_map: &str, text: &str| crate::entry_sources::SourceText {
        config_map: config_map.into(),
        key: "entries".into(),
        resource_version: "1".into(),
        text: text.into(),
    };
    let sources = Sources {
        texts: vec![
            text(
                "ecmp-a",
                "#! fields hdr.ipv4.dstAddr\n20.0.0.0/8 @group=g\n# note\n21.0.0.0/8 @member=nh2\n",
            ),
            text(
                "ecmp-b",
                "hdr.ipv4.dstAddr=22.0.0.0/8 => set_nhop 1 1\nhdr.ipv4.dstAddr=23.0.0.0/8 => @group=g\n",
            ),
        ],
    };
    let (lines, bad) = line_entries(&schema, ParseOptions::default(), &sources);
    let places: Vec<&str> = lines.iter().map(|l| l.0.as_str()).collect();
    assert_eq!(
        places,
        [
            "configmap/ecmp-a/entries:line 2",
            "configmap/ecmp-a/entries:line 4",
            "configmap/ecmp-b/entries:line 2"
        ]
    );
    assert_eq!(lines[1].2, ProfileRef::Member("nh2".into()));
    assert_eq!(bad.len(), 1);
    assert_eq!(bad[0].item(), "configmap/ecmp-b/entries:line 1");
    assert!(
        bad[0]
            .reason()
            .contains("a line takes `@member=NAME` or `@group=NAME`"),
        "{}",
        bad[0]
    );
    // With the inline entries: inline first, then the lines, each named.
    let s = ecmp();
    let items = spec_items(&s.spec, &lines);
    assert_eq!(items.entries.len(), 6);
    assert_eq!(items.entries[3].item, "configmap/ecmp-a/entries:line 2");
    assert!(matches!(items.entries[3].action, ActionSpec::Group("g")));
    assert!(matches!(items.entries[4].action, ActionSpec::Member("nh2")));
}

#[test]
fn a_removal_refused_names_the_member_or_group_the_set_lists() {
    use p4fleet_model::entries::profile::{Group, Member};
    let s = ecmp();
    let member = |id| Member {
        id,
        action: p4fleet_model::entries::ActionCall {
            action_id: 1,
            params: Box::default(),
        },
    };
    let device = OnDevice {
        members: vec![member(model::id_for_name("member", "nh2")), member(7)],
        groups: vec![Group {
            id: model::id_for_name("group", "g"),
            max_size: 0,
            members: vec![],
        }],
        ..OnDevice::default()
    };
    let items = spec_items(&s.spec, &[]);
    let nh2 = model::id_for_name("member", "nh2");
    assert_eq!(
        listed(&items, Item::Member(0), &device),
        Some(format!("spec.actionProfile.members[nh2] (id {nh2})"))
    );
    let g = model::id_for_name("group", "g");
    assert_eq!(
        listed(&items, Item::Group(0), &device),
        Some(format!("spec.actionProfile.groups[g] (id {g})"))
    );
    // Not the set's: no name (the caller says "not in spec.actionProfile").
    assert_eq!(listed(&items, Item::Member(1), &device), None);
}
