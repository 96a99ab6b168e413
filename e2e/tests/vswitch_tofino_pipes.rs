//! VirtualSwitches on pipe sets of one emulated Tofino, end to end: a real
//! kube-apiserver + etcd, the operator and the emulator as child processes
//! (`--tofino-pipes` default 4).
//!
//! - The Switch's status holds the pipe count the device reported and the
//!   capabilities that go with it.
//! - Two VirtualSwitches run on disjoint pipes of one device (pipes 0-1 and
//!   2-3), each bound by its own client; their TableEntrySets write through
//!   that client (the program's name), read back by a client that never
//!   wrote them.
//! - A hot swap of the second (router → l2switch on pipes 2-3) keeps the
//!   first's entries on the device; the swap is recorded in the second's
//!   `status.lastSwap` with the entries written into the new program, read
//!   back through its own client.
//! - A third that asks for pipes already held is Unschedulable with a
//!   scheduler-style message; deleting the second frees the pipes (the
//!   device drops its program) and the third runs.

use kube::Client;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use p4fleet_client::{Device, Identity, Target};
use p4fleet_crds::{P4Program, Switch, TableEntrySet, VirtualSwitch, find_condition};
use p4fleet_e2e::processes::{build_binaries, spawn_operator};
use p4fleet_e2e::{ControlPlane, firewall, repo_root, unique_name};
use serde_json::json;

#[path = "fpga_common/mod.rs"]
mod fpga_common;
use fpga_common::{claims, create_unschedulable, entry_set, ready, until, until_ready};

const DEVICE: u64 = 21;

fn example(path: &str) -> String {
    std::fs::read_to_string(repo_root().join("examples").join(path)).unwrap()
}

/// P4Program `name` running example `example` (P4Info and bfrt.json
/// inline) on the Tofino pipes `pipes`; waits until it is Ready.
async fn program(client: &Client, ns: &str, name: &str, example_dir: &str, pipes: &[&str]) {
    let p: P4Program = serde_json::from_value(json!({
        "apiVersion": "p4fleet.dev/v1alpha1", "kind": "P4Program",
        "metadata": {"name": name},
        "spec": {
            "p4info": {"inline": example(&format!("{example_dir}/p4info.txt"))},
            "artifacts": {"tofino": {
                "bfrtJson": {"inline": example(&format!("{example_dir}/bfrt.json"))},
                "pipes": pipes,
            }}
        }
    }))
    .unwrap();
    let api = Api::<P4Program>::namespaced(client.clone(), ns);
    api.create(&PostParams::default(), &p).await.unwrap();
    until(&format!("P4Program {name} Ready"), || async {
        let st = api.get(name).await.ok()?.status?;
        find_condition(&st.conditions, "Ready")
            .filter(|c| c.is_true())
            .map(|_| ())
    })
    .await;
}

fn vs(name: &str, program: &str, switch: &str) -> VirtualSwitch {
    serde_json::from_value(json!({
        "apiVersion": "p4fleet.dev/v1alpha1", "kind": "VirtualSwitch",
        "metadata": {"name": name},
        "spec": {"programRef": program, "switchRef": switch}
    }))
    .unwrap()
}

/// A BFRT client of the device at `bfrt` as `client_id` (election id 1)
/// that only looks.
fn observer(bfrt: std::net::SocketAddr, client_id: u32) -> Device {
    let identity = Identity {
        election_id: 1,
        client_id,
    };
    Device::connect(Target::bfrt(bfrt.to_string(), DEVICE), identity).unwrap()
}

/// Entries of `table_id` in program `p4_name` on the device, read by a
/// client of its own (client id 99) that never wrote any.
async fn read_back(
    bfrt: std::net::SocketAddr,
    p4_name: &str,
    p4info: &str,
    table_id: u32,
) -> usize {
    let dev = observer(bfrt, 99);
    let Device::Bfrt(d) = &dev else {
        panic!("a BFRT device")
    };
    let info = p4fleet_proto::p4info::parse_text(p4info).unwrap();
    d.attach(0, &info, Some(p4_name)).await.unwrap();
    dev.read_table(0, table_id).await.unwrap().len()
}

/// The programs the device runs, as its GetForwardingPipelineConfig says.
async fn programs_on_device(bfrt: std::net::SocketAddr) -> String {
    let dev = observer(bfrt, 98);
    dev.capabilities().await.unwrap().api_version
}

fn table_id(p4info: &str, name: &str) -> u32 {
    let info = p4fleet_proto::p4info::parse_text(p4info).unwrap();
    info.tables
        .iter()
        .find(|t| t.preamble.as_ref().is_some_and(|p| p.name == name))
        .and_then(|t| t.preamble.as_ref())
        .unwrap()
        .id
}

#[tokio::test]
async fn two_virtual_switches_share_a_tofino_on_disjoint_pipes() {
    let cp = ControlPlane::shared().await;
    let bin = build_binaries();
    let _op = spawn_operator(
        &bin,
        cp.kubeconfig_path(),
        "operator-pipes",
        &["--resync-seconds", "30"],
    );
    let (_emu, addrs) = firewall::emulator(&bin, &DEVICE.to_string(), None);
    let (client, ns) = cp.client_and_namespace().await;
    let ns_name = ns.name();

    for (name, example, pipes) in [
        ("firewall", "firewall", ["pipe0", "pipe1"]),
        ("router", "router", ["pipe2", "pipe3"]),
        ("l2switch", "l2switch", ["pipe2", "pipe3"]),
        ("wide", "firewall", ["pipe2", "pipe3"]),
    ] {
        program(&client, ns_name, name, example, &pipes).await;
    }

    let sw_name = unique_name("tofino");
    let sw: Switch = serde_json::from_value(json!({
        "apiVersion": "p4fleet.dev/v1alpha1", "kind": "Switch",
        "metadata": {"name": sw_name},
        "spec": {"target": "Tofino", "endpoint": addrs.bfrt.to_string(), "deviceId": DEVICE}
    }))
    .unwrap();
    let switches = Api::<Switch>::all(client.clone());
    switches.create(&PostParams::default(), &sw).await.unwrap();
    // The pipe count is the device's; so are the capabilities.
    let st = until("Switch reports its pipes", || async {
        let st = switches.get(&sw_name).await.ok()?.status?;
        (st.pipes == Some(4)).then_some(st)
    })
    .await;
    assert_eq!(st.pipes_source.as_deref(), Some("Device"));
    let caps = st.capabilities.unwrap();
    assert!(caps.pipe_sets && caps.hot_swap, "{caps:?}");
    assert!(
        !caps.slot_service && !caps.isolation && !caps.resources_counted,
        "{caps:?}"
    );

    let api = Api::<VirtualSwitch>::namespaced(client.clone(), ns_name);
    api.create(&PostParams::default(), &vs("a", "firewall", &sw_name))
        .await
        .unwrap();
    api.create(&PostParams::default(), &vs("b", "router", &sw_name))
        .await
        .unwrap();
    let a = until_ready(&api, "a").await;
    let b = until_ready(&api, "b").await;
    // One device (slot 0), two pipe sets.
    assert_eq!(a.status.as_ref().unwrap().slot, Some(0));
    assert_eq!(b.status.as_ref().unwrap().slot, Some(0));
    let held = claims(&switches.get(&sw_name).await.unwrap());
    let pipes: Vec<(String, Vec<u32>)> = held
        .iter()
        .map(|c| (c.virtual_switch.clone(), c.pipes.clone()))
        .collect();
    assert_eq!(
        pipes,
        vec![
            (format!("{ns_name}/a"), vec![0, 1]),
            (format!("{ns_name}/b"), vec![2, 3]),
        ]
    );
    let on_device = programs_on_device(addrs.bfrt).await;
    assert!(
        on_device.contains("firewall") && on_device.contains("router"),
        "{on_device}"
    );
    until("Switch shows the pipes held", || async {
        let st = switches.get(&sw_name).await.ok()?.status?;
        (st.slot_summary.as_deref() == Some("1/1, pipes 4/4")).then_some(())
    })
    .await;

    // Entries for both, each through its program's own client.
    entry_set(
        &client,
        ns_name,
        "fw",
        "a",
        "MyIngress.firewall",
        "examples/firewall/entries.txt",
    )
    .await;
    entry_set(
        &client,
        ns_name,
        "lpm",
        "b",
        "MyIngress.ipv4_lpm",
        "examples/router/ipv4_lpm.entries.txt",
    )
    .await;
    let sets = Api::<TableEntrySet>::namespaced(client.clone(), ns_name);
    for (set, n) in [("fw", 8), ("lpm", 5)] {
        until(&format!("set {set} applied {n}"), || async {
            let st = sets.get(set).await.ok()?.status?;
            (st.applied == n).then_some(())
        })
        .await;
    }
    let fw_info = example("firewall/p4info.txt");
    let router_info = example("router/p4info.txt");
    let fw_table = table_id(&fw_info, "MyIngress.firewall");
    let lpm_table = table_id(&router_info, "MyIngress.ipv4_lpm");
    assert_eq!(
        read_back(addrs.bfrt, "firewall", &fw_info, fw_table).await,
        8
    );
    assert_eq!(
        read_back(addrs.bfrt, "router", &router_info, lpm_table).await,
        5
    );

    // A third on pipes 2-3 does not fit while b holds them.
    let msg = create_unschedulable(&api, &vs("c", "wide", &sw_name)).await;
    assert_eq!(msg, "0/1 switches: 1 no slot with pipes 2,3 free");

    // A set for l2switch's dmac table on b: its table is not in the
    // router, so it waits for the swap.
    entry_set(
        &client,
        ns_name,
        "dmac",
        "b",
        "MyIngress.dmac",
        "examples/l2switch/dmac.entries.txt",
    )
    .await;
    let before = api.get("b").await.unwrap().status.unwrap();
    assert!(before.last_swap.is_none(), "{:?}", before.last_swap);

    // Hot swap of b (router → l2switch on the same pipes): a keeps its
    // entries on the device.
    api.patch(
        "b",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"programRef": "l2switch"}})),
    )
    .await
    .unwrap();
    until("b runs l2switch", || async {
        let on = programs_on_device(addrs.bfrt).await;
        let v = api.get("b").await.ok()?;
        (on.contains("l2switch") && !on.contains("router") && ready(&v)).then_some(())
    })
    .await;
    assert_eq!(
        read_back(addrs.bfrt, "firewall", &fw_info, fw_table).await,
        8,
        "the other pipe set kept its entries"
    );
    let fw_set = sets.get("fw").await.unwrap().status.unwrap();
    assert_eq!(fw_set.applied, 8);
    // The swap in b's status: router → l2switch, the program replaced (BFRT
    // has no reconcile), and the 4 dmac entries written into it, counted
    // on the device through b's own client.
    let swap = until("b's lastSwap counts the re-applied entries", || async {
        let st = api.get("b").await.ok()?.status?;
        st.last_swap.filter(|s| s.entries_reapplied.is_some())
    })
    .await;
    assert_eq!(swap.from_digest, before.loaded_digest);
    assert_ne!(swap.from_digest.as_deref(), Some(swap.to_digest.as_str()));
    assert_eq!(swap.mode, Some(p4fleet_crds::ProgramUpdateMode::Replaced));
    assert_eq!(swap.entries_kept, Some(0));
    assert_eq!(swap.entries_reapplied, Some(4));
    assert_eq!(sets.get("dmac").await.unwrap().status.unwrap().applied, 4);
    // The router's table is not in l2switch: the set names the program
    // its VirtualSwitch runs now.
    until("lpm names the new program", || async {
        let s = sets.get("lpm").await.ok()?;
        fpga_common::set_problem(&s)
            .filter(|(r, m)| {
                r == "TableNotInProgram"
                    && m.contains("\"MyIngress.ipv4_lpm\" is not in P4Program l2switch, which VirtualSwitch b runs")
            })
            .map(|_| ())
    })
    .await;

    // Deleting b frees pipes 2-3: the device drops l2switch, c runs there.
    api.delete("b", &DeleteParams::default()).await.unwrap();
    let c = until_ready(&api, "c").await;
    assert_eq!(c.status.as_ref().unwrap().slot, Some(0));
    let on_device = programs_on_device(addrs.bfrt).await;
    assert!(
        on_device.contains("firewall")
            && on_device.contains("wide")
            && !on_device.contains("l2switch"),
        "{on_device}"
    );
    assert_eq!(
        read_back(addrs.bfrt, "firewall", &fw_info, fw_table).await,
        8
    );
    ns.delete(&client).await.unwrap();
}
