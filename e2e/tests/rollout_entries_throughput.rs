//! The throughput check of an entries rollout (issue 34): three Dpdk
//! Switches on the emulator forward its generated traffic (four flows)
//! through l2crypt, whose `dmac` table a selector TableEntrySet fills,
//! rolled out Canary `{switches: 1}`, `{percent: 100}` with
//! `minThroughputRatio: 0.5`.
//!
//! Revision 2 sends the four flows' destinations to `drop`: the device
//! takes every entry (nothing is refused, the Switch stays Reachable), and
//! only the data plane shows what is wrong. The gate fails on
//! `Throughput` at the canary, whose entries go back to revision 1 and
//! which forwards again; the two others were never written to.
//! (Its own binary: its operator watches the whole control plane.)

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;
use p4fleet_crds::{P4Program, RolloutPhase, TableEntrySet};
use p4fleet_e2e::dpdk::{self, DEVICES, forwarded_per_second, l2crypt};
use p4fleet_e2e::processes::device_stat;
use p4fleet_e2e::rollout::{rolled_back_on_throughput, set_phase};
use p4fleet_e2e::{TestNamespace, apply_json, create_json, merge_patch};
use serde_json::{Value, json};

const V1: &str = "p4fleet.dev/v1alpha1";

/// `dmac` entries for the emulator's four flows (destinations
/// 02:00:00:01:00:0i), each to `action`.
fn entries(action: &str) -> Value {
    let params = match action {
        "MyIngress.forward" => json!({"port": 1}),
        _ => json!({}),
    };
    Value::Array(
        (0..4)
            .map(|i| {
                json!({"match": {"hdr.ethernet.dstAddr": format!("02:00:00:01:00:0{i}")},
                    "action": action, "params": params})
            })
            .collect(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn entries_that_drop_everything_fail_the_throughput_check_and_roll_back() {
    let (_cp, client, emu, _op) =
        dpdk::emulator_and_operator("rollout-entries-throughput-operator").await;
    let ns = TestNamespace::new(&client).await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), ns.name());
    apply_json(&cms, dpdk::sources(&l2crypt("l2crypt.spec"))).await;
    let programs: Api<P4Program> = Api::namespaced(client.clone(), ns.name());
    create_json(&programs, dpdk::program(Value::Null)).await;
    dpdk::fleet(&client, ns.name(), emu.p4runtime).await;
    let sets: Api<TableEntrySet> = Api::namespaced(client.clone(), ns.name());
    create_json(
        &sets,
        json!({"apiVersion": V1, "kind": "TableEntrySet", "metadata": {"name": "dmac"},
            "spec": {"virtualSwitchSelector": {"matchLabels": {"app": "l2"}},
                "table": "MyIngress.dmac", "entries": entries("MyIngress.forward"),
                "rollout": {"strategy": "Canary",
                    "steps": [{"switches": 1}, {"percent": 100}],
                    "maxUnavailable": 2,
                    "analysis": {"seconds": 3, "minThroughputRatio": 0.5},
                    "progressDeadlineSeconds": 60}}}),
    )
    .await;
    let r1 = set_phase(&sets, "dmac", RolloutPhase::Completed, |_| true).await;
    assert_eq!(r1.to.revision, 1, "{r1:?}");
    // Revision 1 forwards the generated traffic to port 1.
    for d in DEVICES {
        let pps = forwarded_per_second(emu.stats, d).await;
        assert!(
            pps > 5_000,
            "device {d} forwards {pps} packets/s on revision 1"
        );
    }

    // Revision 2 drops the four flows: every entry is taken.
    let writes = |d| device_stat(emu.stats, d, "write_rpcs").expect("device stats");
    let before: Vec<u64> = DEVICES[1..].iter().map(|d| writes(*d)).collect();
    let patch = json!({"spec": {"entries": entries("MyIngress.drop")}});
    merge_patch(&sets, "dmac", patch).await;
    let st = set_phase(&sets, "dmac", RolloutPhase::RolledBack, |_| true).await;
    assert_eq!(st.to.revision, 2, "{st:?}");
    rolled_back_on_throughput(&client, ns.name(), "dmac", &st, 5_000).await;
    // The canary's entries are revision 1's again: it forwards.
    dpdk::wait_forwarding(emu.stats, DEVICES[0]).await;
    let after: Vec<u64> = DEVICES[1..].iter().map(|d| writes(*d)).collect();
    assert_eq!(after, before, "the others were written to");
    for d in &DEVICES[1..] {
        let pps = forwarded_per_second(emu.stats, *d).await;
        assert!(pps > 5_000, "device {d} forwards {pps} packets/s");
    }
    dpdk::delete_switches(&client, ns.name()).await;
    ns.delete(&client).await.unwrap();
}
