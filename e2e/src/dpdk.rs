//! The Dpdk fleet the data-plane rollout tests share
//! (e2e/tests/rollout_throughput.rs, rollout_entries_throughput.rs): the
//! emulator's three Dpdk devices forwarding its generated traffic (four
//! flows, 20,000 packets/s) through examples/l2crypt, a Switch and a
//! VirtualSwitch `vs-<i>` on each (in rollout order), and the devices' own
//! tx counters to tell what they forward.

use std::net::SocketAddr;
use std::time::Duration;

use kube::Client;
use kube::api::Api;
use p4fleet_crds::{Switch, VirtualSwitch};
use serde_json::{Value, json};

use crate::processes::{
    EmulatorProc, Proc, build_binaries, spawn_emulator, spawn_operator, stats_get,
};
use crate::{ControlPlane, create_json, repo_root, wait_object_ready};

pub const DEVICES: [u64; 3] = [1, 2, 3];
const V1: &str = "p4fleet.dev/v1alpha1";

/// A file of examples/l2crypt.
pub fn l2crypt(file: &str) -> String {
    std::fs::read_to_string(repo_root().join("examples/l2crypt").join(file)).unwrap()
}

/// The ConfigMap `l2-src` with l2crypt's sources, `spec` its SWX pipeline.
pub fn sources(spec: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "l2-src"},
        "data": {"p4info.txt": l2crypt("p4info.txt"), "pipeline.spec": spec,
            "context.json": l2crypt("context.json"), "bfrt.json": l2crypt("bfrt.json")}})
}

/// The P4Program `l2crypt` reading [`sources`], with `rollout` (Null:
/// none).
pub fn program(rollout: Value) -> Value {
    let src = |key: &str| json!({"configMapKeyRef": {"name": "l2-src", "key": key}});
    let mut spec = json!({"p4info": src("p4info.txt"),
        "artifacts": {"dpdk": {"spec": src("pipeline.spec"),
            "context": src("context.json"), "bfrtJson": src("bfrt.json")}}});
    if !rollout.is_null() {
        spec["rollout"] = rollout;
    }
    json!({"apiVersion": V1, "kind": "P4Program", "metadata": {"name": "l2crypt"}, "spec": spec})
}

/// The emulator's flags for the Dpdk devices' generated traffic: four
/// flows at 20,000 packets/s, one extern core.
pub const TRAFFIC: [&str; 6] = [
    "--dpdk-extern-cores",
    "1",
    "--dpdk-rate-pps",
    "20000",
    "--dpdk-flows",
    "4",
];

/// The shared control plane, a client of it, [`emulator`] and an operator
/// logging to `log` with no flags, started in that order.
pub async fn emulator_and_operator(
    log: &str,
) -> (&'static ControlPlane, Client, EmulatorProc, Proc) {
    let cp = ControlPlane::shared().await;
    let client = cp.client().await;
    let emu = emulator();
    let op = spawn_operator(&build_binaries(), cp.kubeconfig_path(), log, &[]);
    (cp, client, emu, op)
}

/// The emulator with [`DEVICES`] as Dpdk devices and their [`TRAFFIC`].
pub fn emulator() -> EmulatorProc {
    let devices = ["--device-ids", "1,2,3", "--dpdk-device-ids", "1,2,3"];
    spawn_emulator(&build_binaries(), &[&devices[..], &TRAFFIC].concat())
}

/// A Dpdk Switch per device at `endpoint` and a VirtualSwitch `vs-<i>` of
/// `l2crypt` on each (labelled `app: l2` and in rollout order `i`), then
/// waits until every one is Ready.
pub async fn fleet(client: &Client, ns: &str, endpoint: SocketAddr) {
    let mut switches = Vec::new();
    for d in DEVICES {
        let sw = format!("{ns}-dsw{d}");
        create_json(
            &Api::<Switch>::all(client.clone()),
            json!({"apiVersion": V1, "kind": "Switch", "metadata": {"name": sw},
                "spec": {"target": "Dpdk", "endpoint": endpoint.to_string(),
                    "deviceId": d, "slots": 1, "capacity": {"cores": 2}}}),
        )
        .await;
        switches.push(sw);
    }
    rollout_ordered(client, ns, "l2crypt", &switches).await;
}

/// A VirtualSwitch `vs-<i>` of `program` on slot 0 of each Switch
/// `switches[i]` (labelled `app: l2` and in rollout order `i`), then waits
/// until every one is Ready.
pub async fn rollout_ordered(client: &Client, ns: &str, program: &str, switches: &[String]) {
    let vss: Api<VirtualSwitch> = Api::namespaced(client.clone(), ns);
    for (i, sw) in switches.iter().enumerate() {
        create_json(
            &vss,
            json!({"apiVersion": V1, "kind": "VirtualSwitch",
                "metadata": {"name": format!("vs-{i}"),
                    "labels": {"app": "l2", "p4fleet.dev/rollout-order": i.to_string()}},
                "spec": {"programRef": program, "switchRef": sw, "slot": 0}}),
        )
        .await;
    }
    for i in 0..switches.len() {
        wait_object_ready(&vss, &format!("vs-{i}"), Duration::from_secs(90)).await;
    }
}

/// Deletes the fleet's Switches (cluster-scoped).
pub async fn delete_switches(client: &Client, ns: &str) {
    for d in DEVICES {
        crate::delete_switch(client, &format!("{ns}-dsw{d}")).await;
    }
}

/// Packets device `d` sent per second, from its data plane's counter over
/// one second (not the operator's figure).
pub async fn forwarded_per_second(stats: SocketAddr, d: u64) -> u64 {
    let tx = || {
        stats_get(stats, &format!("/stats/{d}/dataplane"))
            .and_then(|v| v["stats"]["tx_packets"].as_u64())
            .unwrap_or(0)
    };
    let a = tx();
    tokio::time::sleep(Duration::from_secs(1)).await;
    tx().saturating_sub(a)
}

/// Waits up to 60 s until device `d` forwards more than 5,000 packets/s
/// (a quarter of the generated rate).
pub async fn wait_forwarding(stats: SocketAddr, d: u64) {
    crate::wait_for(
        &format!("device {d} forwarding"),
        Duration::from_secs(60),
        || async {
            let pps = forwarded_per_second(stats, d).await;
            (pps > 5_000)
                .then_some(())
                .ok_or(format!("{pps} packets/s"))
        },
    )
    .await
}
