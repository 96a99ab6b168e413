//! Action profiles (ECMP) of a TableEntrySet end to end: a real
//! kube-apiserver + etcd, the emulator and the operator as child
//! processes, the fabric program (examples/fabric, `MyIngress.ecmp` behind
//! `MyIngress.ecmp_selector`) on a Bmv2 Switch. Every check reads the
//! device over P4Runtime itself: members, a group of them with weights
//! and the entries that use it are written; weights change in place; a
//! removed member leaves its group first; entries deleted behind the
//! operator's back come back; bad input is a condition naming set, table
//! and item; entries from a ConfigMap name the group and a member with
//! `@group=` / `@member=`, a bad line is named by ConfigMap, key and line;
//! deleting the set leaves nothing on the device.
//!
//! One selector shared by two tables (examples/shared_ecmp), one set per
//! table listing a common member: deleting one set removes only what it
//! lists, and waits while the other table's entries use the common
//! member, until that set stops using it.

use p4fleet_e2e::set_status_within_90s as status_of;
use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams};
use p4fleet_crds::{TableEntrySet, TableEntrySetStatus, find_condition};
use p4fleet_e2e::processes::{Fleet, fleet, side_channel};
use p4fleet_e2e::{
    Bmv2Slot, ControlPlane, bmv2_virtual_switch, create_json, merge_patch, p4info_program,
    program_on_bmv2, repo_root, wait_for, wait_gone,
};
use p4fleet_proto::p4info::{self, P4Info};
use p4fleet_proto::p4runtime::{self as p4, entity::Entity, p4_runtime_client::P4RuntimeClient};
use serde_json::json;

const DEVICE: u64 = 1;
/// The shared-profile test's device (each test its own: two Switches on
/// one device would be two connections with the operator's election id).
const SHARED_DEVICE: u64 = 2;

async fn env() -> (&'static ControlPlane, &'static Fleet) {
    fleet(&["--device-ids", "1,2"], "action-profiles-operator", 3).await
}

fn p4info_of(example: &str) -> String {
    std::fs::read_to_string(repo_root().join(format!("examples/{example}/p4info.txt"))).unwrap()
}

fn fabric_p4info() -> String {
    p4info_of("fabric")
}

/// Ids by name from the P4Info (the p4c helper may renumber them), and
/// the device they are read on.
struct Ids {
    device: u64,
    profile: u32,
    /// The tables behind the profile (entries of all are read).
    tables: Vec<u32>,
    set_nhop: u32,
}

fn ids_of(example: &str, device: u64, profile: &str, tables: &[&str]) -> Ids {
    let info: P4Info = p4info::parse_text(&p4info_of(example)).unwrap();
    let id = |name: &str,
              of: &mut dyn Iterator<Item = Option<&p4fleet_proto::p4info::Preamble>>| {
        of.flatten()
            .find(|p| p.name == name)
            .map(|p| p.id)
            .unwrap_or_else(|| panic!("{name} not in the {example} P4Info"))
    };
    Ids {
        device,
        profile: id(
            profile,
            &mut info.action_profiles.iter().map(|p| p.preamble.as_ref()),
        ),
        tables: tables
            .iter()
            .map(|t| id(t, &mut info.tables.iter().map(|t| t.preamble.as_ref())))
            .collect(),
        set_nhop: id(
            "MyIngress.set_nhop",
            &mut info.actions.iter().map(|a| a.preamble.as_ref()),
        ),
    }
}

fn ids() -> Ids {
    ids_of(
        "fabric",
        DEVICE,
        "MyIngress.ecmp_selector",
        &["MyIngress.ecmp"],
    )
}

/// What the device holds, by id: members (id → port), groups (id →
/// sorted (member id, weight)), entries of the tables (match value: the
/// prefix or exact value → what).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Held {
    members: BTreeMap<u32, Vec<u8>>,
    groups: BTreeMap<u32, Vec<(u32, i32)>>,
    entries: BTreeMap<Vec<u8>, String>,
}

impl Held {
    /// The id of the member whose next hop is port `p`.
    fn member_on_port(&self, p: u8) -> Option<u32> {
        self.members
            .iter()
            .find(|(_, port)| port.as_slice() == [p])
            .map(|(id, _)| *id)
    }
}

async fn p4_client(emu: &Fleet) -> Result<P4RuntimeClient<tonic::transport::Channel>, String> {
    P4RuntimeClient::connect(format!("http://{}", emu.p4runtime))
        .await
        .map_err(|e| e.to_string())
}

async fn held(emu: &Fleet, ids: &Ids) -> Result<Held, String> {
    let mut c = p4_client(emu).await?;
    let mut filters = vec![
        Entity::ActionProfileMember(p4::ActionProfileMember {
            action_profile_id: ids.profile,
            ..Default::default()
        }),
        Entity::ActionProfileGroup(p4::ActionProfileGroup {
            action_profile_id: ids.profile,
            ..Default::default()
        }),
    ];
    filters.extend(ids.tables.iter().map(|&table_id| {
        Entity::TableEntry(p4::TableEntry {
            table_id,
            ..Default::default()
        })
    }));
    let req = p4::ReadRequest {
        device_id: ids.device,
        entities: filters
            .into_iter()
            .map(|e| p4::Entity { entity: Some(e) })
            .collect(),
        ..Default::default()
    };
    let mut stream = c.read(req).await.map_err(|e| e.to_string())?.into_inner();
    let mut out = Held::default();
    while let Some(r) = stream.message().await.map_err(|e| e.to_string())? {
        for e in r.entities.into_iter().filter_map(|e| e.entity) {
            match e {
                Entity::ActionProfileMember(m) => {
                    let a = m.action.unwrap_or_default();
                    assert_eq!(a.action_id, ids.set_nhop);
                    let port = a.params.iter().find(|p| p.param_id == 2).unwrap();
                    out.members.insert(m.member_id, port.value.clone());
                }
                Entity::ActionProfileGroup(g) => {
                    let mut ms: Vec<(u32, i32)> =
                        g.members.iter().map(|m| (m.member_id, m.weight)).collect();
                    ms.sort_unstable();
                    out.groups.insert(g.group_id, ms);
                }
                Entity::TableEntry(t) if !t.is_default_action => {
                    let prefix = match &t.r#match[0].field_match_type {
                        Some(p4::field_match::FieldMatchType::Lpm(l)) => l.value.clone(),
                        Some(p4::field_match::FieldMatchType::Exact(x)) => x.value.clone(),
                        other => panic!("{other:?}"),
                    };
                    use p4::table_action::Type;
                    let what = match t.action.and_then(|a| a.r#type) {
                        Some(Type::ActionProfileGroupId(g)) => format!("group {g}"),
                        Some(Type::ActionProfileMemberId(m)) => format!("member {m}"),
                        other => format!("{other:?}"),
                    };
                    out.entries.insert(prefix, what);
                }
                _ => {}
            }
        }
    }
    Ok(out)
}

async fn until(emu: &Fleet, ids: &Ids, what: &str, pred: impl Fn(&Held) -> bool) -> Held {
    wait_for(what, Duration::from_secs(60), || async {
        let got = held(emu, ids).await?;
        pred(&got).then_some(got.clone()).ok_or(format!("{got:?}"))
    })
    .await
}

/// `POST /devices/1/drop-entries` on the emulator's side channel: the
/// response body.
fn drop_entries(emu: &Fleet, table: u32, count: u32) -> String {
    let path = format!("/devices/{DEVICE}/drop-entries?table_id={table}&count={count}");
    side_channel(emu.stats, "POST", &path, "")
}

async fn status_where(
    api: &Api<TableEntrySet>,
    what: &str,
    pred: impl Fn(&TableEntrySetStatus) -> bool,
) -> TableEntrySetStatus {
    status_of(api, "ecmp", what, pred).await
}

fn synced(st: &TableEntrySetStatus, members: u64, groups: u64, entries: u64) -> bool {
    find_condition(&st.conditions, "ActionProfilesSynced").is_some_and(|c| c.is_true())
        && st
            .action_profile
            .as_ref()
            .is_some_and(|a| (a.members, a.groups, a.entries) == (members, groups, entries))
        && find_condition(&st.conditions, "Ready").is_some_and(|c| c.is_true())
}

fn member(i: u32) -> serde_json::Value {
    json!({"name": format!("nh{i}"), "action": "set_nhop",
           "params": {"dmac": format!("00:00:00:00:00:0{i}"), "port": i}})
}

fn spec(members: &[u32], weights: &[(u32, i32)]) -> serde_json::Value {
    json!({
        "virtualSwitchRef": "fabric",
        "table": "MyIngress.ecmp",
        "actionProfile": {
            "members": members.iter().map(|&i| member(i)).collect::<Vec<_>>(),
            "groups": [{"name": "ecmp1", "members": weights.iter()
                .map(|(m, w)| json!({"member": format!("nh{m}"), "weight": w}))
                .collect::<Vec<_>>()}]
        },
        "entries": [
            {"match": {"hdr.ipv4.dstAddr": "10.0.0.0/8"}, "group": "ecmp1"},
            {"match": {"hdr.ipv4.dstAddr": "11.0.0.0/8"}, "member": "nh1"}
        ]
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ecmp_group_syncs_changes_in_place_repairs_drift_and_leaves_nothing_when_deleted() {
    let (cp, emu) = env().await;
    let ids = ids();
    let (client, ns) = cp.client_and_namespace().await;
    let ns = ns.name().to_string();
    let v1 = "p4fleet.dev/v1alpha1";
    let p4info = fabric_p4info();
    program_on_bmv2(&client, &ns, "fabric", &p4info, emu.p4runtime, DEVICE).await;
    let sets: Api<TableEntrySet> = Api::namespaced(client.clone(), &ns);
    create_json(
        &sets,
        json!({"apiVersion": v1, "kind": "TableEntrySet", "metadata": {"name": "ecmp"},
            "spec": spec(&[1, 2, 3, 4], &[(1, 1), (2, 1), (3, 2), (4, 1)])}),
    )
    .await;

    // Four members, one group of them, two entries: on the device.
    let first = until(emu, &ids, "4 members, 1 group, 2 entries", |h| {
        h.members.len() == 4 && h.groups.len() == 1 && h.entries.len() == 2
    })
    .await;
    let (&group, in_group) = first.groups.iter().next().unwrap();
    let weights: Vec<i32> = in_group.iter().map(|m| m.1).collect();
    assert_eq!(weights.iter().sum::<i32>(), 5, "{first:?}");
    assert_eq!(
        first.entries[&vec![10u8, 0, 0, 0]],
        format!("group {group}")
    );
    let nh1 = first.member_on_port(1).unwrap();
    assert_eq!(first.entries[&vec![11u8, 0, 0, 0]], format!("member {nh1}"));
    let st = status_where(&sets, "ActionProfilesSynced 4/1/2", |s| synced(s, 4, 1, 2)).await;
    assert_eq!(st.applied, 2);
    // kubectl shows the group count (wide).
    let out = cp.kubectl(["get", "tes", "ecmp", "-n", &ns, "-o", "wide"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("GROUPS"), "{text}");

    // New weights: the same group id, modified in place.
    let patch = json!({"spec": spec(&[1, 2, 3, 4], &[(1, 3), (2, 1), (3, 1), (4, 1)])});
    merge_patch(&sets, "ecmp", patch).await;
    let reweighted = until(emu, &ids, "the weights changed", |h| {
        h.groups
            .get(&group)
            .is_some_and(|g| g.iter().map(|m| m.1).sum::<i32>() == 6)
    })
    .await;
    assert_eq!(reweighted.members, first.members);
    assert_eq!(reweighted.groups.len(), 1);

    // nh4 removed: out of the group and off the device.
    let patch = json!({"spec": spec(&[1, 2, 3], &[(1, 3), (2, 1), (3, 1)])});
    merge_patch(&sets, "ecmp", patch).await;
    let three = until(emu, &ids, "3 members in the group", |h| {
        h.members.len() == 3 && h.groups.get(&group).is_some_and(|g| g.len() == 3)
    })
    .await;
    assert!(three.members.values().all(|port| port.as_slice() != [4]));
    status_where(&sets, "ActionProfilesSynced 3/1/2", |s| synced(s, 3, 1, 2)).await;

    // Drift: the table's entries vanish on the device (the emulator's
    // side channel); the next resync puts them back, pointing at the
    // same group and member. (A member deleted behind the operator's back
    // is re-inserted the same way: the unit test
    // a_member_deleted_behind_our_back_is_inserted_again.)
    let dropped = drop_entries(emu, ids.tables[0], 2);
    assert!(dropped.contains("\"deleted\":2"), "{dropped}");
    let repaired = until(emu, &ids, "the entries re-created", |h| {
        h.entries.len() == 2
    })
    .await;
    assert_eq!(repaired, three);
    status_where(&sets, "drift counted", |s| {
        s.drift_corrected >= 2 && synced(s, 3, 1, 2)
    })
    .await;

    // Bad input: a group naming a member that does not exist, and an
    // entry with a direct action: refused by name, the device untouched.
    let mut bad = spec(&[1, 2, 3], &[(1, 3), (2, 1), (3, 1), (9, 1)]);
    bad["entries"]
        .as_array_mut()
        .unwrap()
        .push(json!({"match": {"hdr.ipv4.dstAddr": "12.0.0.0/8"}, "action": "drop"}));
    merge_patch(&sets, "ecmp", json!({"spec": bad})).await;
    let st = status_where(&sets, "InvalidActionProfile", |s| {
        find_condition(&s.conditions, "ActionProfilesSynced")
            .is_some_and(|c| c.reason == "InvalidActionProfile")
    })
    .await;
    let c = find_condition(&st.conditions, "ActionProfilesSynced").unwrap();
    assert!(
        c.message
            .contains(&format!("TableEntrySet {ns}/ecmp: table MyIngress.ecmp"))
            && c.message
                .contains("spec.actionProfile.groups[ecmp1]: no member \"nh9\""),
        "{}",
        c.message
    );
    assert!(
        st.errors.iter().any(|e| e.source == "spec.entries[2]"
            && e.reason
                .contains("entries take a member, a group or an actionSet")),
        "{:?}",
        st.errors
    );
    assert!(!find_condition(&st.conditions, "Ready").unwrap().is_true());
    // Nothing was written for the bad spec: the device holds what it held.
    assert_eq!(held(emu, &ids).await.unwrap(), three);

    // Entries from a ConfigMap: lines that name the group and a member.
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let lines = "#! fields hdr.ipv4.dstAddr\n12.0.0.0/8 @group=ecmp1\n\
                 hdr.ipv4.dstAddr=13.0.0.0/8 => @member=nh2\n";
    create_json(
        &cms,
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ecmp-lines"},
            "data": {"entries": lines}}),
    )
    .await;
    let mut from = spec(&[1, 2, 3], &[(1, 3), (2, 1), (3, 1)]);
    from["entriesFrom"] = json!([{"configMap": "ecmp-lines"}]);
    merge_patch(&sets, "ecmp", json!({"spec": from})).await;
    let four = until(emu, &ids, "4 entries, 2 from the ConfigMap", |h| {
        h.entries.len() == 4
    })
    .await;
    let nh2 = four.member_on_port(2).unwrap();
    assert_eq!(four.entries[&vec![12u8, 0, 0, 0]], format!("group {group}"));
    assert_eq!(four.entries[&vec![13u8, 0, 0, 0]], format!("member {nh2}"));
    assert_eq!((four.members, four.groups), (three.members, three.groups));
    let st = status_where(&sets, "ActionProfilesSynced 3/1/4", |s| synced(s, 3, 1, 4)).await;
    assert_eq!(st.applied, 4);

    // A line naming a group the set does not have: refused by its place,
    // nothing written (the other lines' entries stay as they are).
    let bad_lines = format!("{lines}14.0.0.0/8 @group=nope\n");
    merge_patch(&cms, "ecmp-lines", json!({"data": {"entries": bad_lines}})).await;
    let st = status_where(&sets, "InvalidActionProfile from a line", |s| {
        find_condition(&s.conditions, "ActionProfilesSynced")
            .is_some_and(|c| c.reason == "InvalidActionProfile")
    })
    .await;
    assert!(
        st.errors
            .iter()
            .any(|e| e.source == "configmap/ecmp-lines/entries:line 4"
                && e.reason == "no group \"nope\" in spec.actionProfile.groups"),
        "{:?}",
        st.errors
    );
    assert_eq!(held(emu, &ids).await.unwrap().entries.len(), 4);

    // Deleting the set removes its entries, the group and the members.
    sets.delete("ecmp", &DeleteParams::default()).await.unwrap();
    until(emu, &ids, "nothing left", |h| *h == Held::default()).await;
}

/// A set of one table behind examples/shared_ecmp's selector: `members`
/// (nh<i>: port i), an optional group of all of them, and entries (match
/// value, member or group name).
fn shared_spec(
    table: &str,
    field: &str,
    members: &[u32],
    group: bool,
    entries: &[(&str, &str)],
) -> serde_json::Value {
    let groups = match group {
        true => json!([{"name": "g1", "members": members.iter()
            .map(|m| json!({"member": format!("nh{m}"), "weight": 1}))
            .collect::<Vec<_>>()}]),
        false => json!([]),
    };
    json!({
        "virtualSwitchRef": "shared",
        "table": table,
        "actionProfile": {
            "members": members.iter().map(|&i| member(i)).collect::<Vec<_>>(),
            "groups": groups,
        },
        "entries": entries.iter().map(|(value, to)| {
            let kind = if to.starts_with("nh") { "member" } else { "group" };
            json!({"match": {field: value}, kind: to})
        }).collect::<Vec<_>>(),
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_profile_shared_by_two_sets_keeps_what_the_other_set_uses() {
    let (cp, emu) = env().await;
    let ids = ids_of(
        "shared_ecmp",
        SHARED_DEVICE,
        "MyIngress.nhop_selector",
        &["MyIngress.ecmp_v4", "MyIngress.ecmp_src"],
    );
    let (client, ns) = cp.client_and_namespace().await;
    let ns = ns.name().to_string();
    p4info_program(&client, &ns, "shared", &p4info_of("shared_ecmp")).await;
    let sw = format!("{ns}-shared");
    let slot = Bmv2Slot {
        switch: &sw,
        virtual_switch: "shared",
        program: "shared",
        endpoint: emu.p4runtime,
        device: SHARED_DEVICE,
    };
    bmv2_virtual_switch(&client, &ns, slot).await;
    let v1 = "p4fleet.dev/v1alpha1";
    let sets: Api<TableEntrySet> = Api::namespaced(client.clone(), &ns);
    // ecmp_v4: nh1 and nh2 in group g1, one entry on the group.
    let v4 = shared_spec(
        "MyIngress.ecmp_v4",
        "hdr.ipv4.dstAddr",
        &[1, 2],
        true,
        &[("10.0.0.0/8", "g1")],
    );
    // ecmp_src: nh1 too (same name, action and parameters: the same
    // member) and nh3, one entry on each.
    let src = |members: &[u32], entries: &[(&str, &str)]| {
        shared_spec(
            "MyIngress.ecmp_src",
            "hdr.ipv4.srcAddr",
            members,
            false,
            entries,
        )
    };
    create_json(
        &sets,
        json!({"apiVersion": v1, "kind": "TableEntrySet", "metadata": {"name": "v4"}, "spec": v4}),
    )
    .await;
    create_json(
        &sets,
        json!({"apiVersion": v1, "kind": "TableEntrySet", "metadata": {"name": "src"},
            "spec": src(&[1, 3], &[("1.1.1.1", "nh1"), ("3.3.3.3", "nh3")])}),
    )
    .await;
    let both = until(emu, &ids, "3 members, 1 group, 3 entries", |h| {
        h.members.len() == 3 && h.groups.len() == 1 && h.entries.len() == 3
    })
    .await;
    status_of(&sets, "v4", "v4 synced 2/1/1", |s| synced(s, 2, 1, 1)).await;
    status_of(&sets, "src", "src synced 2/0/2", |s| synced(s, 2, 0, 2)).await;
    let (nh1, nh2, nh3) = (
        both.member_on_port(1).unwrap(),
        both.member_on_port(2).unwrap(),
        both.member_on_port(3).unwrap(),
    );
    assert_eq!(both.entries[&vec![1u8, 1, 1, 1]], format!("member {nh1}"));
    assert_eq!(both.entries[&vec![3u8, 3, 3, 3]], format!("member {nh3}"));

    // Deleting v4: its entry, its group and nh2 go; nh1, which the
    // other table's entry uses, is refused by the device, and nh3, which
    // v4 does not list, is not touched.
    sets.delete("v4", &DeleteParams::default()).await.unwrap();
    let after = until(emu, &ids, "v4's entry, group and nh2 gone", |h| {
        h.groups.is_empty()
            && h.member_on_port(2).is_none()
            && !h.entries.contains_key(&vec![10u8, 0, 0, 0])
    })
    .await;
    assert_eq!(after.member_on_port(1), Some(nh1), "{after:?}");
    assert_eq!(after.member_on_port(3), Some(nh3), "{after:?}");
    assert_eq!(after.entries.len(), 2, "{after:?}");
    assert!(!after.members.contains_key(&nh2));
    // The pass that deleted nh2 was refused nh1 in the same write, so
    // the finalizer is still there: the set waits.
    let waiting = sets.get("v4").await.unwrap();
    assert!(
        waiting.metadata.deletion_timestamp.is_some(),
        "{:?}",
        waiting.metadata
    );
    status_of(&sets, "src", "src still synced 2/0/2", |s| {
        synced(s, 2, 0, 2)
    })
    .await;
    // The refusal that keeps it waiting names the member as v4 lists it
    // (the operator's log: a reconcile error).
    let set_key = format!("{ns}/v4");
    wait_for("the refusal logged", Duration::from_secs(30), || async {
        let log = std::fs::read_to_string(&emu.operator_log).map_err(|e| e.to_string())?;
        log.lines()
            .find(|l| {
                l.contains(&set_key)
                    && l.contains(&format!("spec.actionProfile.members[nh1] (id {nh1})"))
                    && l.contains("in use")
            })
            .map(|_| ())
            .ok_or_else(|| "not yet".to_string())
    })
    .await;

    // src stops using nh1 (its entry moves to nh3, nh1 leaves its spec):
    // src does not delete nh1 (shared, and no longer its own), v4's
    // finalizer does, and v4 is gone.
    let patch = json!({"spec": src(&[3], &[("1.1.1.1", "nh3"), ("3.3.3.3", "nh3")])});
    merge_patch(&sets, "src", patch).await;
    wait_gone(&sets, "v4", Duration::from_secs(90)).await;
    let left = until(emu, &ids, "only nh3 and src's entries", |h| {
        h.members.len() == 1 && h.entries.len() == 2
    })
    .await;
    assert_eq!(left.member_on_port(3), Some(nh3));
    assert!(left.groups.is_empty());
    assert!(
        left.entries.values().all(|w| *w == format!("member {nh3}")),
        "{left:?}"
    );
    status_of(&sets, "src", "src synced 1/0/2", |s| synced(s, 1, 0, 2)).await;

    // Deleting the last set leaves nothing.
    sets.delete("src", &DeleteParams::default()).await.unwrap();
    until(emu, &ids, "nothing left", |h| *h == Held::default()).await;
}
