//! Fenced leader failover: two `p4fleet operator` processes with leader
//! election against the real kube-apiserver, and an emulator that arbitrates
//! by the spec's rule (only the highest election id it has ever seen is
//! primary). The leader is frozen (SIGSTOP, like a long GC pause or a
//! partition: its device connections stay open) in the middle of a sync of
//! 30,000 entries; the standby takes the Lease, becomes primary with the next
//! term's election id and finishes the sync; the frozen leader, resumed,
//! stops (renew deadline passed, or the Lease is another's) and exits; what
//! it still writes meanwhile the device refuses. An independent read finds the 30,000
//! entries exactly (none lost, none duplicated), and a write with the old
//! leader's election id is refused PERMISSION_DENIED.
//!
//! The standby is started first, so with election ids from process start
//! times (the old scheme) it would have the lower id and stay a backup.

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use p4fleet::{LEASE_NAME, Term, identity_for_term};
use p4fleet_client::{Device, Identity, Target};
use p4fleet_crds::{P4Program, Switch, TableEntrySet, VirtualSwitch, find_condition};
use p4fleet_e2e::device_read::tagged;
use p4fleet_e2e::leaders::{LEASE, promise_lease, replica, wait_holder};
use p4fleet_e2e::processes::{EmulatorProc, build_binaries, spawn_emulator, stats_get};
use p4fleet_e2e::{ControlPlane, firewall_lines_with, repo_root, wait_for};
use p4fleet_model::entries::{Entry, LineParser, Style, TableSchema, format_entries};
use p4fleet_model::sync::{self, Ownership};
use p4fleet_proto::p4runtime as p4;
use serde_json::json;

const DEVICE: u64 = 1;
const ENTRIES: usize = 30_000;

fn firewall_p4info() -> String {
    std::fs::read_to_string(repo_root().join("examples/firewall/p4info.txt")).unwrap()
}

fn entries(schema: &TableSchema, n: usize) -> Vec<Entry> {
    let text = firewall_lines_with(0, n, "172.16.0.9", 0);
    let mut p = LineParser::new(schema);
    text.lines()
        .filter_map(|l| p.parse_line(l).unwrap())
        .collect()
}

/// The emulator's stats of `DEVICE` (HTTP side channel).
fn stats(emu: &EmulatorProc) -> serde_json::Value {
    stats_get(emu.stats, &format!("/stats/{DEVICE}")).expect("the emulator's stats")
}

fn primary(emu: &EmulatorProc) -> Option<u128> {
    stats(emu)["primaries"][""].as_str()?.parse().ok()
}

async fn create<K>(api: &Api<K>, v: serde_json::Value)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let obj: K = serde_json::from_value(v).unwrap();
    api.create(&PostParams::default(), &obj).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_leader_is_fenced_and_the_standby_finishes_the_sync() {
    let bin = build_binaries();
    let cp = ControlPlane::shared().await;
    let (client, ns) = cp.client_and_namespace().await;
    let ns = ns.name().to_string();
    // Slow writes (0.3 ms per entry: ~9 s for 30,000) leave time to stop
    // the leader in the middle of the sync.
    let emu = spawn_emulator(
        &bin,
        &[
            "--device-ids",
            "1",
            "--arbitration",
            "highest-ever-seen",
            "--profile",
            "custom:0:300",
        ],
    );

    // "a" is meant to lead first; the Lease says so before anyone starts, so
    // "b" (started first) waits.
    let leases: Api<Lease> = Api::namespaced(client.clone(), &ns);
    assert_eq!(LEASE, LEASE_NAME);
    promise_lease(&leases, "a").await;
    let mut b = replica(&bin, cp, &ns, "failover", "b");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let mut a = replica(&bin, cp, &ns, "failover", "a");
    // Its first acquisition by this process is a new term, though the
    // Lease already named it.
    wait_holder(&leases, "a", 1, Duration::from_secs(60)).await;
    let a_id: Identity = identity_for_term(Term(1));
    let b_id: Identity = identity_for_term(Term(2));

    // A firewall on device 1 and 30,000 entries for it.
    let schema = p4fleet_model::fixtures::firewall();
    let all = entries(&schema, ENTRIES);
    let sw_name = format!("{ns}-sw");
    create(
        &Api::<P4Program>::namespaced(client.clone(), &ns),
        json!({"apiVersion": "p4fleet.dev/v1alpha1", "kind": "P4Program",
               "metadata": {"name": "firewall"},
               "spec": {"p4info": {"inline": firewall_p4info()}}}),
    )
    .await;
    create(
        &Api::<Switch>::all(client.clone()),
        json!({"apiVersion": "p4fleet.dev/v1alpha1", "kind": "Switch",
               "metadata": {"name": sw_name},
               "spec": {"target": "Bmv2", "endpoint": emu.p4runtime.to_string(),
                        "deviceId": DEVICE, "slots": 1}}),
    )
    .await;
    create(
        &Api::<VirtualSwitch>::namespaced(client.clone(), &ns),
        json!({"apiVersion": "p4fleet.dev/v1alpha1", "kind": "VirtualSwitch",
               "metadata": {"name": "fw"},
               "spec": {"programRef": "firewall", "switchRef": sw_name, "slot": 0}}),
    )
    .await;
    let text = format_entries(&schema, &all, Style::Compact).unwrap();
    create(
        &Api::<ConfigMap>::namespaced(client.clone(), &ns),
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "fw-entries"}, "data": {"entries": text}}),
    )
    .await;
    let sets: Api<TableEntrySet> = Api::namespaced(client.clone(), &ns);
    create(
        &sets,
        json!({"apiVersion": "p4fleet.dev/v1alpha1", "kind": "TableEntrySet",
               "metadata": {"name": "fw30k"},
               "spec": {"virtualSwitchRef": "fw", "table": "MyIngress.firewall",
                        "entriesFrom": [{"configMap": "fw-entries"}],
                        "write": {"batchSize": 500, "maxInFlight": 2}}}),
    )
    .await;

    // Mid-sync: some entries are on the device, not all. Freeze the leader.
    let written = wait_for("the leader mid-sync", Duration::from_secs(120), || async {
        let st = stats(&emu);
        let n = st["entries"].as_u64().unwrap_or(0);
        if (1_000..ENTRIES as u64).contains(&n) {
            Ok(n)
        } else if n >= ENTRIES as u64 {
            panic!("the sync finished before the leader could be stopped");
        } else {
            Err(format!("{n} entries"))
        }
    })
    .await;
    assert_eq!(primary(&emu), Some(a_id.election_id), "a is primary");
    a.signal(libc::SIGSTOP);
    let stopped = Instant::now();
    eprintln!("froze leader a with {written} of {ENTRIES} entries on the device");

    // The standby takes the Lease, then the device, then finishes the sync.
    wait_holder(&leases, "b", 2, Duration::from_secs(60)).await;
    let lease_taken = stopped.elapsed();
    wait_for("b primary", Duration::from_secs(60), || async {
        match primary(&emu) {
            Some(id) if id == b_id.election_id => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    let primary_taken = stopped.elapsed();
    wait_for("fw30k Ready", Duration::from_secs(180), || async {
        let s = sets.get("fw30k").await.map_err(|e| e.to_string())?;
        let st = s.status.unwrap_or_default();
        match find_condition(&st.conditions, "Ready") {
            Some(c) if c.is_true() && st.applied == ENTRIES as u64 => Ok(()),
            other => Err(format!("applied {} {other:?}", st.applied)),
        }
    })
    .await;
    let synced = stopped.elapsed();

    // The old leader wakes up: its writes are refused and it stops.
    let refused_before = stats(&emu)["refused_writes"].as_u64().unwrap_or(0);
    a.signal(libc::SIGCONT);
    let exit = tokio::task::block_in_place(|| a.wait_exit(Duration::from_secs(30)))
        .expect("the old leader exits after losing the lease");
    assert!(
        !exit.success(),
        "the old leader exits with an error: {exit}"
    );
    let log = std::fs::read_to_string(&a.log).unwrap();
    assert!(
        log.contains("lost the lease") || log.contains("within the renew deadline"),
        "old leader's log: {log}"
    );
    let refused_after = stats(&emu)["refused_writes"].as_u64().unwrap_or(0);

    // Independent read: exactly the desired entries, each once.
    let reader = Device::connect(
        Target::p4runtime(emu.p4runtime.to_string(), DEVICE),
        Identity {
            election_id: 1,
            client_id: 1,
        },
    )
    .unwrap();
    let back = reader.read_table(0, schema.id).await.unwrap();
    assert_eq!(back.len(), ENTRIES, "entries on the device");
    let tag = sync::set_tag(&ns, "fw30k");
    let on_device = tagged(&schema, &back);
    let diff = sync::plan(&all, &on_device, Ownership::Exclusive, tag);
    assert_eq!(
        (diff.writes(), diff.unchanged),
        (0, ENTRIES),
        "device differs from the desired set"
    );

    // Fencing by the device: a write with the old leader's election id is
    // refused, and changes nothing.
    let mut raw =
        p4::p4_runtime_client::P4RuntimeClient::connect(format!("http://{}", emu.p4runtime))
            .await
            .unwrap();
    let stale = raw
        .write(p4::WriteRequest {
            device_id: DEVICE,
            election_id: Some(p4::Uint128 {
                high: (a_id.election_id >> 64) as u64,
                low: a_id.election_id as u64,
            }),
            updates: vec![p4::Update {
                r#type: p4::update::Type::Delete as i32,
                entity: Some(p4::Entity {
                    entity: Some(p4::entity::Entity::TableEntry(back[0].clone())),
                }),
            }],
            ..Default::default()
        })
        .await
        .expect_err("a stale leader's write");
    assert_eq!(stale.code(), tonic::Code::PermissionDenied, "{stale:?}");
    assert_eq!(stats(&emu)["entries"].as_u64(), Some(ENTRIES as u64));
    assert!(
        b.wait_exit(Duration::ZERO).is_none(),
        "the new leader runs on"
    );

    eprintln!(
        "failover: lease taken {:.2} s after the leader froze, device primary after {:.2} s, \
         30000 entries Ready after {:.2} s; writes refused when the old leader resumed: {}",
        lease_taken.as_secs_f64(),
        primary_taken.as_secs_f64(),
        synced.as_secs_f64(),
        refused_after - refused_before,
    );
}
