//! The rollout gate's throughput check from P4Runtime direct counters
//! (issue 34): three Bmv2 Switches on the emulator run examples/counted,
//! whose `dmac` table has a direct counter, and a selector TableEntrySet
//! fills `dmac`. A thread sends frames to four destinations into each
//! device's L2 frame model (the emulator's side channel, as a traffic
//! generator on a bmv2 port would), and the hit entries' counters count
//! them.
//!
//! - A program revision that forwards as before completes, each moved
//!   VirtualSwitch with the packets/s its direct counters showed before
//!   its step (without the direct-counter source a Bmv2 target reports no
//!   rate, and the check has nothing to compare).
//! - An entries revision with the four destinations mistyped and another
//!   default action: the devices take every entry and stay Reachable;
//!   only the counters show that the traffic no longer hits. The gate
//!   fails on `Throughput` at the canary, whose entries and default
//!   action go back to revision 1's (read back) and count again; the two
//!   others were never written to.
//!
//! (Its own binary: its operator watches the whole control plane.)

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use kube::api::Api;
use p4fleet_crds::{P4Program, RolloutPhase, TableEntrySet};
use p4fleet_e2e::device_read::read_entities;
use p4fleet_e2e::dpdk::rollout_ordered;
use p4fleet_e2e::processes::{
    build_binaries, device_stat, spawn_emulator, spawn_operator, stats_post,
};
use p4fleet_e2e::rollout::{moved_with_rates, program_phase, rolled_back_on_throughput, set_phase};
use p4fleet_e2e::{
    ControlPlane, TestNamespace, bmv2_switch, create_json, merge_patch, repo_root, wait_for,
};
use p4fleet_proto::p4runtime::{self as p4, entity::Entity};
use serde_json::{Value, json};

const V1: &str = "p4fleet.dev/v1alpha1";
const DEVICES: [u64; 3] = [1, 2, 3];
/// `MyIngress.dmac` in examples/counted/p4info.txt, and its actions.
const DMAC: u32 = 44918510;
const DROP: u32 = 25652968;
const FORWARD: u32 = 29683729;
/// The destinations the traffic is sent to.
const FLOWS: [&str; 4] = [
    "02:00:00:01:00:00",
    "02:00:00:01:00:01",
    "02:00:00:01:00:02",
    "02:00:00:01:00:03",
];

/// examples/counted's P4Info, `version` in a comment (a new digest, the
/// same program).
fn p4info(version: &str) -> String {
    let text = std::fs::read_to_string(repo_root().join("examples/counted/p4info.txt")).unwrap();
    format!("{text}# {version}\n")
}

/// `dmac` entries forwarding each of `macs` to port 1.
fn entries(macs: &[String]) -> Value {
    macs.iter()
        .map(|m| {
            json!({"match": {"hdr.ethernet.dstAddr": m},
                "action": "MyIngress.forward", "params": {"port": 1}})
        })
        .collect()
}

fn canary() -> Value {
    json!({"strategy": "Canary",
        "steps": [{"switches": 1}, {"percent": 100}],
        "maxUnavailable": 2,
        "analysis": {"seconds": 3, "minThroughputRatio": 0.2},
        "progressDeadlineSeconds": 60})
}

/// Frames to [`FLOWS`] into every device, 4 every 20 ms, until dropped.
struct Traffic(Arc<AtomicBool>);

impl Traffic {
    fn start(stats: SocketAddr) -> Traffic {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let body = Value::Array(
            FLOWS
                .iter()
                .map(|dst| json!({"port": 2, "src": "02:00:00:00:00:aa", "dst": dst}))
                .collect(),
        )
        .to_string();
        std::thread::spawn(move || {
            while !flag.load(Ordering::Relaxed) {
                for d in DEVICES {
                    stats_post(stats, &format!("/devices/{d}/frames"), &body);
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        Traffic(stop)
    }
}

impl Drop for Traffic {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// Packets counted by device `d`'s `dmac` direct counter, read as any
/// P4Runtime client would.
async fn counted(p4runtime: SocketAddr, d: u64) -> u64 {
    let filter = Entity::DirectCounterEntry(p4::DirectCounterEntry {
        table_entry: Some(p4::TableEntry {
            table_id: DMAC,
            ..Default::default()
        }),
        data: None,
    });
    read_entities(p4runtime, d, filter)
        .await
        .into_iter()
        .filter_map(|e| match e {
            Entity::DirectCounterEntry(c) => c.data,
            _ => None,
        })
        .map(|c| c.packet_count as u64)
        .sum()
}

/// Waits until device `d`'s counters count the traffic.
async fn counting(p4runtime: SocketAddr, d: u64) {
    wait_for(
        &format!("device {d} counting the traffic"),
        Duration::from_secs(60),
        || async {
            let a = counted(p4runtime, d).await;
            tokio::time::sleep(Duration::from_millis(500)).await;
            let b = counted(p4runtime, d).await;
            (b > a).then_some(()).ok_or(format!("{a} then {b} packets"))
        },
    )
    .await
}

/// The destination MACs of device `d`'s `dmac` entries, sorted.
async fn destinations(p4runtime: SocketAddr, d: u64) -> Vec<String> {
    let filter = Entity::TableEntry(p4::TableEntry {
        table_id: DMAC,
        ..Default::default()
    });
    let mut macs: Vec<String> = read_entities(p4runtime, d, filter)
        .await
        .into_iter()
        .filter_map(|e| match e {
            Entity::TableEntry(t) => t.r#match.into_iter().next(),
            _ => None,
        })
        .filter_map(|m| match m.field_match_type? {
            p4::field_match::FieldMatchType::Exact(e) => Some(e.value),
            _ => None,
        })
        .map(|v| {
            let mut full = vec![0u8; 6usize.saturating_sub(v.len())];
            full.extend(v);
            full.iter()
                .map(|b| format!("{b:02x}"))
                .collect::<Vec<_>>()
                .join(":")
        })
        .collect();
    macs.sort();
    macs
}

/// The action of device `d`'s `dmac` default entry.
async fn default_action(p4runtime: SocketAddr, d: u64) -> Option<u32> {
    let filter = Entity::TableEntry(p4::TableEntry {
        table_id: DMAC,
        is_default_action: true,
        ..Default::default()
    });
    read_entities(p4runtime, d, filter)
        .await
        .into_iter()
        .find_map(|e| match e {
            Entity::TableEntry(t) => match t.action?.r#type? {
                p4::table_action::Type::Action(a) => Some(a.action_id),
                _ => None,
            },
            _ => None,
        })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn direct_counters_gate_bmv2_rollouts_and_mistyped_entries_roll_back() {
    let t0 = std::time::Instant::now();
    let cp = ControlPlane::shared().await;
    let client = cp.client().await;
    let bins = build_binaries();
    let emu = spawn_emulator(&bins, &["--device-ids", "1,2,3"]);
    let _op = spawn_operator(
        &bins,
        cp.kubeconfig_path(),
        "rollout-counters-throughput-operator",
        &[],
    );
    let ns = TestNamespace::new(&client).await;
    let programs: Api<P4Program> = Api::namespaced(client.clone(), ns.name());
    create_json(
        &programs,
        json!({"apiVersion": V1, "kind": "P4Program", "metadata": {"name": "counted"},
            "spec": {"p4info": {"inline": p4info("v1")}, "rollout": canary()}}),
    )
    .await;
    let mut switches = Vec::new();
    for d in DEVICES {
        let sw = format!("{}-bsw{d}", ns.name());
        bmv2_switch(&client, &sw, emu.p4runtime, d).await;
        switches.push(sw);
    }
    rollout_ordered(&client, ns.name(), "counted", &switches).await;
    let sets: Api<TableEntrySet> = Api::namespaced(client.clone(), ns.name());
    let flows: Vec<String> = FLOWS.iter().map(|m| m.to_string()).collect();
    create_json(
        &sets,
        json!({"apiVersion": V1, "kind": "TableEntrySet", "metadata": {"name": "dmac"},
            "spec": {"virtualSwitchSelector": {"matchLabels": {"app": "l2"}},
                "table": "MyIngress.dmac", "entries": entries(&flows),
                "defaultAction": {"action": "MyIngress.drop"},
                "rollout": canary()}}),
    )
    .await;
    eprintln!("three VirtualSwitches Ready: {:?}", t0.elapsed());
    let r1 = set_phase(&sets, "dmac", RolloutPhase::Completed, |_| true).await;
    assert_eq!(r1.to.revision, 1, "{r1:?}");
    let _traffic = Traffic::start(emu.stats);
    for d in DEVICES {
        counting(emu.p4runtime, d).await;
    }

    eprintln!("entries revision 1 counting: {:?}", t0.elapsed());
    // A program revision that forwards as before: Bmv2 now reports a
    // rate, and each moved VirtualSwitch had one before its step.
    let patch = json!({"spec": {"p4info": {"inline": p4info("v2")}}});
    merge_patch(&programs, "counted", patch).await;
    let done = program_phase(&programs, "counted", RolloutPhase::Completed, |r| {
        r.to.revision == 2
    })
    .await;
    assert_eq!(done.moved.len(), DEVICES.len(), "{done:?}");
    moved_with_rates(&done, 20);
    for d in DEVICES {
        counting(emu.p4runtime, d).await;
    }

    eprintln!("program revision 2 completed: {:?}", t0.elapsed());
    // Entries with the destinations mistyped: every one is taken, and the
    // traffic no longer hits.
    let writes = |d| device_stat(emu.stats, d, "write_rpcs").expect("device stats");
    let before: Vec<u64> = DEVICES[1..].iter().map(|d| writes(*d)).collect();
    let typo: Vec<String> = flows.iter().map(|m| m.replace(":01:", ":10:")).collect();
    let forward = json!({"action": "MyIngress.forward", "params": {"port": 2}});
    let patch = json!({"spec": {"entries": entries(&typo), "defaultAction": forward}});
    merge_patch(&sets, "dmac", patch).await;
    let st = set_phase(&sets, "dmac", RolloutPhase::RolledBack, |_| true).await;
    assert_eq!(st.to.revision, 2, "{st:?}");
    rolled_back_on_throughput(&client, ns.name(), "dmac", &st, 20).await;
    eprintln!("entries revision 2 rolled back: {:?}", t0.elapsed());
    // The canary holds revision 1's destinations and default action
    // again (it had revision 2's), and counts.
    wait_for(
        "the canary's entries back on revision 1",
        Duration::from_secs(60),
        || async {
            let on = destinations(emu.p4runtime, DEVICES[0]).await;
            let default = default_action(emu.p4runtime, DEVICES[0]).await;
            (on == flows && default == Some(DROP))
                .then_some(())
                .ok_or(format!("{on:?}, default action {default:?}"))
        },
    )
    .await;
    counting(emu.p4runtime, DEVICES[0]).await;
    let after: Vec<u64> = DEVICES[1..].iter().map(|d| writes(*d)).collect();
    assert_eq!(after, before, "the others were written to");
    for d in &DEVICES[1..] {
        assert_eq!(destinations(emu.p4runtime, *d).await, flows, "device {d}");
        let default = default_action(emu.p4runtime, *d).await;
        assert_eq!(default, Some(DROP), "device {d}: never {FORWARD}");
    }
    for d in DEVICES {
        let _ = Api::<p4fleet_crds::Switch>::all(client.clone())
            .delete(&format!("{}-bsw{d}", ns.name()), &Default::default())
            .await;
    }
    ns.delete(&client).await.unwrap();
}
