use super::*;
use p4fleet_proto::p4info;

const FABRIC: &str = include_str!("../../../../examples/fabric/p4info.txt");

fn fabric() -> (TableSchema, ProfileSchema) {
    let info = p4info::parse_text(FABRIC).unwrap();
    let schema = TableSchema::from_p4info(&info, "ecmp").unwrap();
    let profile = ProfileSchema::of_table(&info, schema.id).unwrap();
    (schema, profile)
}

fn params(port: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("dmac".to_string(), format!("00:00:00:00:00:0{port}")),
        ("port".to_string(), port.to_string()),
    ])
}

struct Spec {
    members: Vec<(String, BTreeMap<String, String>)>,
    groups: Vec<(String, Vec<(String, i32)>)>,
    entries: Vec<(BTreeMap<String, String>, Target)>,
}

/// `(action, params, weight)` of a one-shot set.
type SetAction = (String, BTreeMap<String, String>, i32);

#[derive(Clone)]
enum Target {
    Direct,
    Member(String),
    Group(String),
    Set(Vec<(String, i32)>),
}

fn dst(prefix: &str) -> BTreeMap<String, String> {
    BTreeMap::from([("hdr.ipv4.dstAddr".to_string(), prefix.to_string())])
}

impl Spec {
    fn ecmp(weights: &[i32]) -> Spec {
        let members = (1..=weights.len())
            .map(|i| (format!("nh{i}"), params(&i.to_string())))
            .collect();
        let group = weights
            .iter()
            .enumerate()
            .map(|(i, w)| (format!("nh{}", i + 1), *w))
            .collect();
        Spec {
            members,
            groups: vec![("ecmp1".into(), group)],
            entries: vec![(dst("10.0.0.0/8"), Target::Group("ecmp1".into()))],
        }
    }

    fn desired(&self) -> Desired {
        let (schema, profile) = fabric();
        self.desired_with(&schema, &profile)
    }

    fn member_and_group_specs(&self) -> (Vec<MemberSpec<'_>>, Vec<GroupSpec<'_>>) {
        let members = self
            .members
            .iter()
            .map(|(n, p)| MemberSpec {
                name: n,
                id: None,
                action: "set_nhop",
                params: p,
            })
            .collect();
        let groups = self
            .groups
            .iter()
            .map(|(n, m)| GroupSpec {
                name: n,
                id: None,
                max_size: None,
                members: m.iter().map(|(n, w)| (n.as_str(), *w)).collect(),
            })
            .collect();
        (members, groups)
    }

    fn desired_with(&self, schema: &TableSchema, profile: &ProfileSchema) -> Desired {
        let (members, groups) = self.member_and_group_specs();
        let sets: Vec<Vec<SetAction>> = self
            .entries
            .iter()
            .map(|(_, t)| match t {
                Target::Set(s) => s
                    .iter()
                    .map(|(port, w)| ("set_nhop".to_string(), params(port), *w))
                    .collect(),
                _ => Vec::new(),
            })
            .collect();
        let entries: Vec<_> = self
            .entries
            .iter()
            .enumerate()
            .map(|(i, (m, t))| EntrySpec {
                item: entry_item(i),
                key: KeySpec::Inline {
                    matches: m,
                    priority: None,
                },
                action: match t {
                    Target::Direct => ActionSpec::Direct,
                    Target::Member(n) => ActionSpec::Member(n),
                    Target::Group(n) => ActionSpec::Group(n),
                    Target::Set(_) => ActionSpec::ActionSet(
                        sets[i]
                            .iter()
                            .map(|(a, p, w)| (a.as_str(), p, *w))
                            .collect(),
                    ),
                },
            })
            .collect();
        desired(
            schema,
            profile,
            &members,
            &groups,
            &entries,
            ParseOptions::default(),
        )
    }
}

/// The device after every write of `plan` went through.
fn applied(d: &Desired, tag: u64) -> OnDevice {
    OnDevice {
        members: d.members.iter().map(|(_, m)| m.clone()).collect(),
        groups: d.groups.iter().map(|(_, g)| g.clone()).collect(),
        entries: d.entries.iter().map(|(_, e)| (e.clone(), tag)).collect(),
    }
}

#[test]
fn the_fabric_ecmp_table_has_a_selector() {
    let (_, p) = fabric();
    assert_eq!(p.name, "MyIngress.ecmp_selector");
    assert!(p.with_selector);
    assert_eq!(
        (p.size, p.max_group_size, p.sum_of_members),
        (1024, 16, None)
    );
}

#[test]
fn an_ecmp_group_is_written_members_then_group_then_entry() {
    let d = Spec::ecmp(&[1, 2, 1]).desired();
    assert_eq!(d.errors, vec![]);
    assert_eq!(
        (d.members.len(), d.groups.len(), d.entries.len()),
        (3, 1, 1)
    );
    let g = &d.groups[0].1;
    assert_eq!(
        g.max_size, 16,
        "the profile's max_group_size when not given"
    );
    assert_eq!(g.members.len(), 3);
    assert!(matches!(d.entries[0].1.action, IndirectAction::Group(id) if id == g.id));
    let p = plan(&d, &OnDevice::default(), false, 7);
    let phases = p.phases();
    let kinds: Vec<Vec<(Op, &str)>> = phases
        .iter()
        .map(|ph| {
            ph.iter()
                .map(|(op, i)| {
                    let k = match i {
                        Item::Member(_) => "member",
                        Item::Group(_) => "group",
                        Item::Entry(_) => "entry",
                    };
                    (*op, k)
                })
                .collect()
        })
        .collect();
    assert_eq!(
        kinds,
        vec![
            vec![(Op::Insert, "member"); 3],
            vec![(Op::Insert, "group")],
            vec![(Op::Insert, "entry")],
        ]
    );
    // Once written, nothing is left to do.
    assert_eq!(plan(&d, &applied(&d, 7), false, 7).writes(), 0);
}

#[test]
fn ids_are_stable_per_name() {
    let a = Spec::ecmp(&[1, 1]).desired();
    let b = Spec::ecmp(&[1, 1, 1]).desired();
    assert_eq!(a.members[0].1.id, b.members[0].1.id);
    assert_eq!(a.groups[0].1.id, b.groups[0].1.id);
    assert_ne!(a.members[0].1.id, a.members[1].1.id);
    assert_eq!(id_for_name("member", "nh1"), a.members[0].1.id);
}

#[test]
fn changed_weights_modify_the_group_in_place_and_a_removed_member_goes_last() {
    let before = Spec::ecmp(&[1, 1, 1]).desired();
    let device = applied(&before, 7);
    let weights = Spec::ecmp(&[1, 3, 1]).desired();
    let p = plan(&weights, &device, false, 7);
    assert_eq!(p.phases(), vec![vec![(Op::Modify, Item::Group(0))]]);

    let fewer = Spec::ecmp(&[1, 1]).desired();
    let p = plan(&fewer, &device, false, 7);
    // The group drops nh3 before nh3 is deleted.
    assert_eq!(
        p.phases(),
        vec![
            vec![(Op::Modify, Item::Group(0))],
            vec![(Op::Delete, Item::Member(2))],
        ]
    );
}

#[test]
fn deleting_everything_goes_entries_then_groups_then_members() {
    let d = Spec::ecmp(&[1, 1]).desired();
    let device = applied(&d, 7);
    let empty = Desired::default();
    let p = plan(&empty, &device, false, 7);
    assert_eq!(
        p.phases(),
        vec![
            vec![(Op::Delete, Item::Entry(0))],
            vec![(Op::Delete, Item::Group(0))],
            vec![(Op::Delete, Item::Member(0)), (Op::Delete, Item::Member(1))],
        ]
    );
}

#[test]
fn a_member_deleted_behind_our_back_is_inserted_again() {
    let d = Spec::ecmp(&[1, 1]).desired();
    let mut device = applied(&d, 7);
    device.members.remove(1);
    let p = plan(&d, &device, false, 7);
    assert_eq!(p.phases(), vec![vec![(Op::Insert, Item::Member(1))]]);
}

#[test]
fn entries_follow_the_sets_ownership() {
    let d = Spec::ecmp(&[1]).desired();
    let mut device = applied(&d, 7);
    let mut foreign = device.entries[0].0.clone();
    let (schema, _) = fabric();
    let other = EntrySpec {
        item: entry_item(0),
        key: KeySpec::Inline {
            matches: &dst("192.168.0.0/16"),
            priority: None,
        },
        action: ActionSpec::Direct,
    };
    foreign.key = entry_key(&schema, &other, ParseOptions::default()).unwrap();
    device.entries.push((foreign, 9));
    // Merge: another set's entry stays.
    assert_eq!(
        plan(&d, &device, false, 7).entry_deletes,
        Vec::<usize>::new()
    );
    // Exclusive: it goes.
    assert_eq!(plan(&d, &device, true, 7).entry_deletes, vec![1]);
    // Held by another set with another action: a conflict, not a write.
    device.entries[0].1 = 9;
    device.entries[0].0.action = IndirectAction::Member(d.members[0].1.id);
    let p = plan(&d, &device, false, 7);
    assert_eq!(p.entry_conflicts, vec![(0, 9)]);
    assert!(p.entry_modifies.is_empty());
}

#[test]
fn a_direct_action_on_an_indirect_table_names_the_entry_and_table() {
    let mut s = Spec::ecmp(&[1]);
    s.entries.push((dst("11.0.0.0/8"), Target::Direct));
    let d = s.desired();
    assert_eq!(d.entries.len(), 1);
    let e = d.errors[0].to_string();
    assert!(
        e.starts_with(
            "spec.entries[1]: table MyIngress.ecmp has action profile MyIngress.ecmp_selector"
        ),
        "{e}"
    );
}

#[test]
fn bad_members_groups_and_references_are_refused_by_name() {
    let mut s = Spec::ecmp(&[1, 1]);
    s.members
        .push(("bad".into(), BTreeMap::from([("port".into(), "1".into())])));
    s.groups.push(("g2".into(), vec![("nh9".into(), 1)]));
    s.groups
        .push(("g3".into(), vec![("nh1".into(), 1), ("nh1".into(), 2)]));
    s.groups
        .push(("heavy".into(), vec![("nh1".into(), 10), ("nh2".into(), 7)]));
    s.entries
        .push((dst("11.0.0.0/8"), Target::Group("nope".into())));
    s.entries
        .push((dst("12.0.0.0/8"), Target::Member("bad".into())));
    let d = s.desired();
    let errors: Vec<String> = d.errors.iter().map(ToString::to_string).collect();
    let expect = [
        "spec.actionProfile.members[bad]: action \"MyIngress.set_nhop\" parameter \"dmac\" is missing",
        "spec.actionProfile.groups[g2]: no member \"nh9\" in spec.actionProfile.members",
        "spec.actionProfile.groups[g3]: member \"nh1\" is listed twice",
        "spec.actionProfile.groups[heavy]: size 17 (sum_of_weights) is above its maximum 16",
        "spec.entries[1]: no group \"nope\" in spec.actionProfile.groups",
        "spec.entries[2]: no member \"bad\" in spec.actionProfile.members",
    ];
    assert_eq!(errors, expect);
    assert_eq!(
        (d.members.len(), d.groups.len(), d.entries.len()),
        (2, 1, 1)
    );
    assert!(matches!(d.errors[3], ProfileError::GroupTooLarge { .. }));
}

#[test]
fn profile_limits_come_from_the_p4info() {
    let (schema, mut profile) = fabric();
    profile.sum_of_members = Some(Some(2));
    let d = Spec::ecmp(&[1, 3]).desired_with(&schema, &profile);
    assert!(
        matches!(
            &d.errors[0],
            ProfileError::WeightTooLarge {
                weight: 3,
                max: 2,
                ..
            }
        ),
        "{:?}",
        d.errors
    );
    let mut profile = fabric().1;
    profile.size = 2;
    let d = Spec::ecmp(&[1, 1, 1]).desired_with(&schema, &profile);
    assert!(matches!(
        d.errors[0],
        ProfileError::TooMany { count: 3, .. }
    ));
    let mut profile = fabric().1;
    profile.with_selector = false;
    let d = Spec::ecmp(&[1]).desired_with(&schema, &profile);
    assert!(matches!(
        d.errors[0],
        ProfileError::NoSelector { what: "groups", .. }
    ));
    assert!(matches!(d.errors[1], ProfileError::UnknownGroup { .. }));
}

#[test]
fn one_shot_sets_are_sorted_and_cannot_mix_with_groups() {
    let s = Spec {
        members: vec![],
        groups: vec![],
        entries: vec![(
            dst("10.0.0.0/8"),
            Target::Set(vec![("2".into(), 1), ("1".into(), 2)]),
        )],
    };
    let d = s.desired();
    assert_eq!(d.errors, vec![]);
    let IndirectAction::ActionSet(set) = &d.entries[0].1.action else {
        panic!("{:?}", d.entries[0].1.action)
    };
    assert_eq!(set.len(), 2);
    assert!(set.is_sorted());
    // Written and read back the same.
    let t = d.entries[0].1.to_proto(vec![1, 2]);
    let (schema, _) = fabric();
    assert_eq!(
        IndirectEntry::from_proto(&schema, &t).unwrap().as_ref(),
        Some(&d.entries[0].1)
    );
    let mut mixed = Spec::ecmp(&[1]);
    mixed
        .entries
        .push((dst("11.0.0.0/8"), Target::Set(vec![("1".into(), 1)])));
    let d = mixed.desired();
    assert!(
        matches!(d.errors[0], ProfileError::MixedModes { .. }),
        "{:?}",
        d.errors
    );
}

#[test]
fn members_and_groups_read_back_as_written() {
    let d = Spec::ecmp(&[2, 1]).desired();
    let (_, m) = &d.members[1];
    assert_eq!(&Member::from_proto(&m.to_proto(5)), m);
    let (_, g) = &d.groups[0];
    let mut proto = g.to_proto(5);
    proto.members.reverse();
    assert_eq!(
        &Group::from_proto(&proto),
        g,
        "member order does not matter"
    );
    let e = &d.entries[0].1;
    let (schema, _) = fabric();
    assert_eq!(
        IndirectEntry::from_proto(&schema, &e.to_proto(Vec::new()))
            .unwrap()
            .as_ref(),
        Some(e)
    );
}

#[test]
fn errors_give_their_item_and_reason_apart_whatever_the_names_hold() {
    // A member name with ": " in it must not split the message there.
    let e = ProfileError::UnknownMember {
        item: "spec.actionProfile.groups[g: 1]".into(),
        name: "nh: 2".into(),
    };
    assert_eq!(e.item(), "spec.actionProfile.groups[g: 1]");
    assert_eq!(
        e.reason(),
        "no member \"nh: 2\" in spec.actionProfile.members"
    );
    let e = ProfileError::TooMany {
        kind: "members",
        count: 9,
        profile: "p".into(),
        size: 4,
    };
    assert_eq!(e.item(), "spec.actionProfile.members");
    assert_eq!(e.reason(), "9 are more than the profile p holds (4)");
}

#[test]
fn config_map_lines_resolve_members_and_groups_by_name() {
    let (schema, profile) = fabric();
    let spec = Spec::ecmp(&[1, 2]);
    let text = "hdr.ipv4.dstAddr=20.0.0.0/8 => @group=ecmp1\n\
                hdr.ipv4.dstAddr=21.0.0.0/8 => @member=nh2\n\
                hdr.ipv4.dstAddr=22.0.0.0/8 => @group=nope\n";
    let mut p = crate::entries::LineParser::new(&schema);
    let mut lines = Vec::new();
    for (i, l) in text.lines().enumerate() {
        let (k, r) = p.parse_indirect_line(l).unwrap().unwrap();
        lines.push((format!("configmap/ecmp/entries:line {}", i + 1), k, r));
    }
    let (members, groups) = spec.member_and_group_specs();
    let entries: Vec<_> = lines
        .iter()
        .map(|(item, k, r)| EntrySpec {
            item: item.clone(),
            key: KeySpec::Parsed(k.clone()),
            action: match r {
                crate::entries::ProfileRef::Member(n) => ActionSpec::Member(n),
                crate::entries::ProfileRef::Group(n) => ActionSpec::Group(n),
            },
        })
        .collect();
    let d = desired(
        &schema,
        &profile,
        &members,
        &groups,
        &entries,
        ParseOptions::default(),
    );
    assert_eq!(d.entries.len(), 2);
    assert_eq!(
        d.entries[0].1.action,
        IndirectAction::Group(id_for_name("group", "ecmp1"))
    );
    assert_eq!(
        d.entries[1].1.action,
        IndirectAction::Member(id_for_name("member", "nh2"))
    );
    assert_eq!(
        d.errors.iter().map(ToString::to_string).collect::<Vec<_>>(),
        ["configmap/ecmp/entries:line 3: no group \"nope\" in spec.actionProfile.groups"]
    );
    // An inline entry and a line with the same match: the first wins and
    // the second is named by its line.
    let dup = EntrySpec {
        item: entry_item(0),
        key: KeySpec::Parsed(lines[0].1.clone()),
        action: ActionSpec::Member("nh1"),
    };
    let both = [dup, entries[0].clone()];
    let d = desired(
        &schema,
        &profile,
        &members,
        &groups,
        &both,
        ParseOptions::default(),
    );
    assert_eq!(d.entries.len(), 1);
    assert_eq!(d.errors[0].item(), "configmap/ecmp/entries:line 1");
}

#[test]
fn a_profile_shared_by_two_tables_spares_what_the_set_does_not_list() {
    let info =
        p4info::parse_text(include_str!("../../../../examples/shared_ecmp/p4info.txt")).unwrap();
    let v4 = TableSchema::from_p4info(&info, "ecmp_v4").unwrap();
    let src = TableSchema::from_p4info(&info, "ecmp_src").unwrap();
    let p4 = ProfileSchema::of_table(&info, v4.id).unwrap();
    assert_eq!(p4, ProfileSchema::of_table(&info, src.id).unwrap());
    assert_eq!((p4.tables, fabric().1.tables), (2, 1));
    // The same member name in both tables' sets is the same member.
    let spec = Spec::ecmp(&[1, 1]);
    let a = spec.desired_with(&v4, &p4);
    assert!(a.errors.is_empty(), "{:?}", a.errors);
    // The device holds a's items and another set's member and group.
    let mut device = applied(&a, 7);
    device.members.push(Member {
        id: id_for_name("member", "other"),
        action: a.members[0].1.action.clone(),
    });
    device.groups.push(Group {
        id: id_for_name("group", "other"),
        max_size: 0,
        members: vec![(id_for_name("member", "other"), 1)],
    });
    let mut plan = plan(&a, &device, false, 7);
    assert_eq!(
        (plan.member_deletes.len(), plan.group_deletes.len()),
        (1, 1)
    );
    // Shared: a sync deletes none it does not list...
    plan.spare(&device, &HashSet::new(), &HashSet::new());
    assert_eq!(plan.writes(), 0);
    // ...and the finalizer only those it lists, after its entries.
    let none = Desired::default();
    let (members, groups) = spec.member_and_group_specs();
    let (m, g) = listed_ids(&members, &groups);
    let mut gone = super::plan(&none, &device, false, 7);
    gone.spare(&device, &m, &g);
    let phases = gone.phases();
    assert_eq!(phases.len(), 3, "{phases:?}");
    assert!(matches!(phases[0][0], (Op::Delete, Item::Entry(_))));
    assert_eq!(phases[1], vec![(Op::Delete, Item::Group(0))]);
    assert_eq!(phases[2].len(), 2);
    assert!(
        phases[2]
            .iter()
            .all(|(_, i)| matches!(i, Item::Member(j) if *j < 2))
    );
}
