//! A VirtualSwitch's multicast groups and clone sessions end to end: a real
//! kube-apiserver + etcd, the emulator and the operator as child
//! processes, the fabric program (examples/fabric) on a Bmv2 Switch. The
//! device is read back over P4Runtime; a change writes only the difference;
//! bad input is reported (condition, status, Event) without touching what
//! the device holds.

use std::time::Duration;

use kube::api::Api;
use p4fleet_crds::{VirtualSwitch, find_condition};
use p4fleet_e2e::device_read::try_read_entities;
use p4fleet_e2e::processes::{Fleet, fleet};
use p4fleet_e2e::{
    ControlPlane, bmv2_switch, create_json, merge_patch, p4info_program, repo_root, status_until,
    wait_for,
};
use p4fleet_proto::p4runtime::{self as p4, packet_replication_engine_entry::Type as Pre};
use serde_json::json;

const DEVICE: u64 = 1;

async fn env() -> (&'static ControlPlane, &'static Fleet) {
    fleet(&["--device-ids", "1"], "replication-operator", 30).await
}

/// (multicast groups as (id, sorted ports)), (clone sessions as (id, ports,
/// cos, truncation)) on the device, read over P4Runtime.
type Held = (Vec<(u32, Vec<u32>)>, Vec<(u32, Vec<u32>, u32, i32)>);

async fn held(emu: &Fleet) -> Result<Held, String> {
    let filter =
        p4::entity::Entity::PacketReplicationEngineEntry(p4::PacketReplicationEngineEntry {
            r#type: None,
        });
    let read = try_read_entities(emu.p4runtime, DEVICE, filter).await?;
    #[allow(deprecated)]
    let ports = |r: &[p4::Replica]| {
        let mut v: Vec<u32> = r
            .iter()
            .map(|r| match &r.port_kind {
                Some(p4::replica::PortKind::Port(b)) => {
                    b.iter().fold(0u32, |n, x| n << 8 | u32::from(*x))
                }
                Some(p4::replica::PortKind::EgressPort(p)) => *p,
                None => u32::MAX,
            })
            .collect();
        v.sort_unstable();
        v
    };
    let mut out: Held = Default::default();
    for e in read {
        match e {
            p4::entity::Entity::PacketReplicationEngineEntry(p) => match p.r#type {
                Some(Pre::MulticastGroupEntry(g)) => {
                    out.0.push((g.multicast_group_id, ports(&g.replicas)))
                }
                Some(Pre::CloneSessionEntry(s)) => out.1.push((
                    s.session_id,
                    ports(&s.replicas),
                    s.class_of_service,
                    s.packet_length_bytes,
                )),
                None => {}
            },
            other => return Err(format!("unexpected entity {other:?}")),
        }
    }
    Ok(out)
}

async fn until_held(emu: &Fleet, want: &Held, what: &str) {
    wait_for(what, Duration::from_secs(60), || async {
        let got = held(emu).await?;
        (&got == want).then_some(()).ok_or(format!("{got:?}"))
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn virtual_switch_multicast_groups_and_clone_sessions_sync_change_and_refuse_bad_input() {
    let (cp, emu) = env().await;
    let (client, ns) = cp.client_and_namespace().await;
    let ns = ns.name().to_string();
    let v1 = "p4fleet.dev/v1alpha1";
    let p4info = std::fs::read_to_string(repo_root().join("examples/fabric/p4info.txt")).unwrap();
    p4info_program(&client, &ns, "fabric", &p4info).await;
    let sw = format!("{ns}-sw");
    bmv2_switch(&client, &sw, emu.p4runtime, DEVICE).await;
    let vss: Api<VirtualSwitch> = Api::namespaced(client.clone(), &ns);
    create_json(
        &vss,
        json!({"apiVersion": v1, "kind": "VirtualSwitch", "metadata": {"name": "fabric"},
            "spec": {"programRef": "fabric", "switchRef": sw, "slot": 0,
                "multicastGroups": [
                    {"id": 1, "replicas": [{"port": 1}, {"port": 2}, {"port": 3}, {"port": 4}]},
                    {"id": 2, "replicas": [{"port": 5}, {"port": 5, "instance": 1}]}],
                "cloneSessions": [
                    {"id": 5, "replicas": [{"port": 7}], "classOfService": 1,
                     "packetLengthBytes": 128}]}}),
    )
    .await;

    let first: Held = (
        vec![(1, vec![1, 2, 3, 4]), (2, vec![5, 5])],
        vec![(5, vec![7], 1, 128)],
    );
    until_held(emu, &first, "the groups and session on the device").await;
    let synced = |mc: u32, cs: u32| {
        let vss = vss.clone();
        async move {
            let vs = vss.get("fabric").await.map_err(|e| e.to_string())?;
            let st = vs.status.unwrap_or_default();
            let cond = find_condition(&st.conditions, "ReplicationSynced");
            let rep = st.replication.unwrap_or_default();
            (cond.is_some_and(|c| c.is_true())
                && (rep.multicast_groups, rep.clone_sessions) == (mc, cs))
                .then_some(())
                .ok_or(format!("{cond:?} {rep:?}"))
        }
    };
    wait_for(
        "ReplicationSynced with 2 groups, 1 session",
        Duration::from_secs(60),
        || synced(2, 1),
    )
    .await;

    // kubectl shows the counts (wide columns).
    let out = cp.kubectl(["get", "vsw", "fabric", "-n", &ns, "-o", "wide"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("MCAST") && text.contains("CLONES"), "{text}");

    // A change: group 2 loses a copy, session 5 goes, session 6 comes.
    let patch = json!({"spec": {
        "multicastGroups": [
            {"id": 1, "replicas": [{"port": 1}, {"port": 2}, {"port": 3}, {"port": 4}]},
            {"id": 2, "replicas": [{"port": 5}]}],
        "cloneSessions": [{"id": 6, "replicas": [{"port": 8}]}]}});
    merge_patch(&vss, "fabric", patch).await;
    let second: Held = (
        vec![(1, vec![1, 2, 3, 4]), (2, vec![5])],
        vec![(6, vec![8], 0, 0)],
    );
    until_held(emu, &second, "the changed groups and session").await;

    // Bad input: a port v1model cannot have. Nothing is written.
    let bad = json!({"spec": {"multicastGroups": [
        {"id": 1, "replicas": [{"port": 1}]},
        {"id": 2, "replicas": [{"port": 600}]}]}});
    merge_patch(&vss, "fabric", bad).await;
    let what = "ReplicationSynced False InvalidReplication";
    status_until(&vss, "fabric", what, Duration::from_secs(60), |st| {
        let cond = find_condition(&st.conditions, "ReplicationSynced").cloned();
        let errors = st.replication.map(|r| r.errors).unwrap_or_default();
        (cond
            .as_ref()
            .is_some_and(|c| c.reason == "InvalidReplication")
            && errors
                .iter()
                .any(|e| e.starts_with("spec.multicastGroups[id=2]: replicas[0]: port 600")))
        .then_some(())
        .ok_or(format!("{cond:?} {errors:?}"))
    })
    .await;
    p4fleet_e2e::wait_event(&client, &ns, Some("InvalidReplication"), "port 600").await;
    // Not half-applied: group 1 still has its four copies.
    assert_eq!(held(emu).await.unwrap(), second);

    // Fixed, and the sessions list emptied: the device follows.
    let fixed = json!({"spec": {
        "multicastGroups": [{"id": 1, "replicas": [{"port": 1}]}],
        "cloneSessions": null}});
    merge_patch(&vss, "fabric", fixed).await;
    until_held(emu, &(vec![(1, vec![1])], vec![]), "the fixed group only").await;
    wait_for(
        "ReplicationSynced with 1 group",
        Duration::from_secs(60),
        || synced(1, 0),
    )
    .await;
}
