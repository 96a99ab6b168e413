//! The rollout gate's throughput check on DPDK targets (issue 34): three
//! Dpdk Switches on the emulator forward its generated traffic through
//! the l2crypt pipeline, and the program rolls out Canary
//! `{switches: 1}`, `{percent: 100}` with `minThroughputRatio: 0.5`.
//!
//! - A revision that forwards as before passes the check, which names the
//!   packets/s it compared, and completes on all three.
//! - A revision whose `dmac` default action drops every packet loads, and
//!   its Switch stays Reachable: only the data plane shows what is wrong.
//!   The gate fails on `Throughput` at the canary and rolls it back; the
//!   canary forwards again, and the two others never loaded the revision.

use std::net::SocketAddr;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;
use p4fleet_crds::{P4Program, RolloutPhase};
use p4fleet_e2e::dpdk::{self, DEVICES, forwarded_per_second, l2crypt};
use p4fleet_e2e::processes::device_stat;
use p4fleet_e2e::rollout::{moved_with_rates, program_phase, rolled_back_on_throughput};
use p4fleet_e2e::{TestNamespace, apply_json, create_json};
use serde_json::json;

/// The l2crypt program's sources: `spec` is its SWX pipeline.
async fn sources(cms: &Api<ConfigMap>, spec: &str) {
    apply_json(cms, dpdk::sources(spec)).await;
}

fn pushes(stats: SocketAddr) -> Vec<u64> {
    DEVICES
        .iter()
        .map(|d| device_stat(stats, *d, "set_pipeline_rpcs").expect("device stats"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revision_that_forwards_nothing_fails_the_throughput_check_and_rolls_back() {
    let (_cp, client, emu, _op) = dpdk::emulator_and_operator("rollout-throughput-operator").await;
    let ns = TestNamespace::new(&client).await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), ns.name());
    let v1 = l2crypt("l2crypt.spec");
    sources(&cms, &v1).await;
    let programs: Api<P4Program> = Api::namespaced(client.clone(), ns.name());
    let rollout = json!({"strategy": "Canary",
        "steps": [{"switches": 1}, {"percent": 100}],
        "maxUnavailable": 2,
        "analysis": {"seconds": 3, "minThroughputRatio": 0.5},
        "progressDeadlineSeconds": 60});
    create_json(&programs, dpdk::program(rollout)).await;
    dpdk::fleet(&client, ns.name(), emu.p4runtime).await;
    // Revision 1 forwards the generated traffic (dmac's default floods).
    for d in DEVICES {
        let pps = forwarded_per_second(emu.stats, d).await;
        assert!(pps > 5_000, "device {d} forwards {pps} packets/s on v1");
    }

    // A revision that forwards as before passes the check.
    sources(&cms, &format!("{v1}\n; revision 2: the same pipeline\n")).await;
    let done = program_phase(&programs, "l2crypt", RolloutPhase::Completed, |_| true).await;
    assert_eq!(done.to.revision, 2, "{done:?}");
    moved_with_rates(&done, 5_000);

    // A revision that drops every packet: it loads and nothing else
    // complains; the data plane's rate is what fails.
    let dropping = v1.replace(
        "default_action broadcast args none",
        "default_action drop args none",
    );
    assert_ne!(dropping, v1, "the pipeline's dmac default action changed");
    let before = pushes(emu.stats);
    sources(&cms, &dropping).await;
    let st = program_phase(&programs, "l2crypt", RolloutPhase::RolledBack, |_| true).await;
    assert_eq!(st.to.revision, 3, "{st:?}");
    rolled_back_on_throughput(&client, ns.name(), "l2crypt", &st, 5_000).await;
    // The canary is back on revision 2 and forwards again.
    dpdk::wait_forwarding(emu.stats, DEVICES[0]).await;
    let after = pushes(emu.stats);
    assert!(
        after[0] >= before[0] + 2,
        "the canary loaded v3, then v2 again: {before:?} -> {after:?}"
    );
    assert_eq!(
        after[1..],
        before[1..],
        "the others never loaded the revision that dropped everything"
    );
    for d in &DEVICES[1..] {
        let pps = forwarded_per_second(emu.stats, *d).await;
        assert!(pps > 5_000, "device {d} forwards {pps} packets/s");
    }
    dpdk::delete_switches(&client, ns.name()).await;
    ns.delete(&client).await.unwrap();
}
