//! Tables and pipeline, end to end (real kube-apiserver + etcd, emulators
//! and the operator as child processes), with the hitless example program
//! (examples/hitless/: tables acl, nexthop, fixed):
//!
//! - `defaultAction`: set, read back from the device, changed, removed
//!   (reset to the initial default), reset when the set is deleted; bad
//!   input: a `@tableonly` action, a table with a const default action, an
//!   entry with a `@defaultonly` action.
//! - Hitless program updates: v1 → v2 changes only nexthop's size; on an
//!   emulator with RECONCILE_AND_COMMIT acl's entries stay (0 re-inserts
//!   counted at the emulator) and nexthop's are re-applied; on one
//!   started with `--no-reconcile` the operator falls back, says so, and
//!   everything is re-applied. With `spec.plan` the update is held and
//!   its plan names the tables the emulator then keeps.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

use k8s_openapi::api::core::v1::Event;
use kube::Client;
use kube::api::{Api, ListParams, Patch, PatchParams};
use p4fleet_crds::{
    ProgramUpdateMode, TableEntrySet, TableEntrySetStatus, VirtualSwitch, find_condition,
};
use p4fleet_e2e::device_read::read_entities;
use p4fleet_e2e::processes::{
    build_binaries, once_per_binary, operator_http_addr, p4fleet_plan, spawn_emulator,
    spawn_operator,
};
use p4fleet_e2e::{
    ControlPlane, bmv2_switch, create_json, create_set, delete_and_wait_gone, merge_patch,
    repo_root, wait_for,
};
use p4fleet_proto::p4runtime as p4;
use serde_json::{Value, json};

const ACL: u32 = 33554433;
const FORWARD: u32 = 16777217;
const DROP: u32 = 16777218;
const PUNT: u32 = 16777219;

struct Env {
    /// Takes RECONCILE_AND_COMMIT.
    reconciling: Emu,
    /// Started with `--no-reconcile`.
    plain: Emu,
}

#[derive(Clone, Copy)]
struct Emu {
    p4runtime: SocketAddr,
    stats: SocketAddr,
    /// BFRT (device 3 of the reconciling emulator is the Tofino test's).
    bfrt: Option<SocketAddr>,
}

fn start(kubeconfig: PathBuf) -> Env {
    let bin = build_binaries();
    let a = spawn_emulator(
        &bin,
        &["--device-ids", "1,2,3,4,5", "--bfrt-addr", "127.0.0.1:0"],
    );
    let b = spawn_emulator(&bin, &["--device-ids", "1", "--no-reconcile"]);
    let env = Env {
        reconciling: Emu {
            p4runtime: a.p4runtime,
            stats: a.stats,
            bfrt: a.bfrt,
        },
        plain: Emu {
            p4runtime: b.p4runtime,
            stats: b.stats,
            bfrt: None,
        },
    };
    let op = spawn_operator(
        &bin,
        &kubeconfig,
        "operator-tables",
        &["--resync-seconds", "30"],
    );
    operator_http_addr(&op.log, Duration::from_secs(60));
    // Owned by the parked start thread (PDEATHSIG).
    std::mem::forget((a, b, op));
    env
}

async fn env() -> (&'static ControlPlane, &'static Env) {
    static ENV: OnceLock<Env> = OnceLock::new();
    let cp = ControlPlane::shared().await;
    let kubeconfig = cp.kubeconfig_path().to_path_buf();
    let env = once_per_binary(&ENV, move || start(kubeconfig)).await;
    (cp, env)
}

fn p4info(version: &str) -> String {
    std::fs::read_to_string(repo_root().join(format!("examples/hitless/{version}.p4info.txt")))
        .unwrap()
}

/// The emulator's stats of `device`.
fn stats(emu: Emu, device: u64) -> Value {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(emu.stats).unwrap();
    write!(
        s,
        "GET /stats/{device} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
        emu.stats
    )
    .unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    serde_json::from_str(resp.split_once("\r\n\r\n").unwrap().1).unwrap()
}

fn inserts(emu: Emu, device: u64, table: &str) -> u64 {
    stats(emu, device)["table_inserts"][table]
        .as_u64()
        .unwrap_or(0)
}

/// The default action of the acl table as the device reports it.
async fn device_default(emu: Emu, device: u64, table_id: u32) -> Option<p4::Action> {
    let filter = p4::entity::Entity::TableEntry(p4::TableEntry {
        table_id,
        is_default_action: true,
        ..Default::default()
    });
    let mut found = None;
    for e in read_entities(emu.p4runtime, device, filter).await {
        if let p4::entity::Entity::TableEntry(t) = e
            && let Some(p4::table_action::Type::Action(a)) = t.action.and_then(|a| a.r#type)
        {
            found = Some(a);
        }
    }
    found
}

/// A P4Program `hitless` (v1), a Switch on `device` of `emu` and a
/// VirtualSwitch `vs` on its slot 0.
/// `strategy`: the VirtualSwitch's `updateStrategy.type`.
async fn setup(client: &Client, ns: &str, emu: Emu, device: u64, strategy: &str) {
    let progs: Api<p4fleet_crds::P4Program> = Api::namespaced(client.clone(), ns);
    create_json(
        &progs,
        json!({"apiVersion": "p4fleet.dev/v1alpha1", "kind": "P4Program",
            "metadata": {"name": "hitless"},
            "spec": {"p4info": {"inline": p4info("v1")}}}),
    )
    .await;
    bmv2_switch(client, &format!("{ns}-sw"), emu.p4runtime, device).await;
    let vss: Api<VirtualSwitch> = Api::namespaced(client.clone(), ns);
    create_json(
        &vss,
        json!({"apiVersion": "p4fleet.dev/v1alpha1", "kind": "VirtualSwitch",
            "metadata": {"name": "vs"},
            "spec": {"programRef": "hitless", "switchRef": format!("{ns}-sw"), "slot": 0,
                     "updateStrategy": {"type": strategy}}}),
    )
    .await;
}

fn dst_entries(first: u8, n: u8) -> Value {
    (0..n)
        .map(|i| {
            json!({"match": {"hdr.ipv4.dstAddr": format!("10.0.0.{}", first + i)},
                   "action": "forward", "params": {"port": 1 + i as u32}})
        })
        .collect()
}

async fn status_where(
    api: &Api<TableEntrySet>,
    name: &str,
    what: &str,
    pred: impl Fn(&TableEntrySetStatus) -> bool,
) -> TableEntrySetStatus {
    let timeout = Duration::from_secs(60);
    p4fleet_e2e::set_status_where(api, name, what, timeout, pred).await
}

fn ready(st: &TableEntrySetStatus) -> Option<(bool, String)> {
    find_condition(&st.conditions, "Ready").map(|c| (c.is_true(), c.reason.clone()))
}

async fn event_reasons(client: &Client, ns: &str) -> Vec<(String, String)> {
    let events: Api<Event> = Api::namespaced(client.clone(), ns);
    events
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|e| (e.reason.unwrap_or_default(), e.message.unwrap_or_default()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn default_action_is_set_read_back_changed_and_reset() {
    let (cp, env) = env().await;
    let emu = env.reconciling;
    let (client, ns) = cp.client_and_namespace().await;
    let ns = ns.name().to_string();
    setup(&client, &ns, emu, 1, "HotSwap").await;
    // The initial default: the first parameterless action that may be one.
    wait_for("the pipeline", Duration::from_secs(60), || async {
        match stats(emu, 1)["pipeline_set"].as_bool() {
            Some(true) => Ok(()),
            _ => Err("no pipeline yet".to_string()),
        }
    })
    .await;
    assert_eq!(device_default(emu, 1, ACL).await.unwrap().action_id, DROP);

    // A @defaultonly action is allowed as the default.
    let api = create_set(
        &client,
        &ns,
        "acl",
        json!({"virtualSwitchRef": "vs", "table": "acl", "entries": dst_entries(1, 2),
               "defaultAction": {"action": "punt", "params": {"port": 510}}}),
    )
    .await;
    let st = status_where(&api, "acl", "acl Ready with its default", |st| {
        ready(st).is_some_and(|(ok, _)| ok) && st.default_action.is_some()
    })
    .await;
    assert_eq!(st.default_action.as_deref(), Some("punt(port=510)"));
    assert_eq!(st.applied, 2);
    let a = device_default(emu, 1, ACL).await.unwrap();
    assert_eq!(
        (a.action_id, a.params[0].value.clone()),
        (PUNT, vec![1, 0xfe])
    );

    // Changed: a MODIFY of the default entry.
    let pp = PatchParams::default();
    let change = json!({"spec": {"defaultAction": {"action": "forward", "params": {"port": 7}}}});
    api.patch("acl", &pp, &Patch::Merge(&change)).await.unwrap();
    status_where(&api, "acl", "the new default", |st| {
        st.default_action.as_deref() == Some("forward(port=7)")
    })
    .await;
    assert_eq!(
        device_default(emu, 1, ACL).await.unwrap().action_id,
        FORWARD
    );

    // Removed from the spec: back to the initial default; no condition left.
    let remove = json!({"spec": {"defaultAction": null}});
    api.patch("acl", &pp, &Patch::Merge(&remove)).await.unwrap();
    let st = status_where(&api, "acl", "the default reset", |st| {
        st.default_action.is_none() && find_condition(&st.conditions, "DefaultAction").is_none()
    })
    .await;
    assert!(ready(&st).unwrap().0);
    assert_eq!(device_default(emu, 1, ACL).await.unwrap().action_id, DROP);

    // Set again, then the set deleted: reset with its entries.
    api.patch("acl", &pp, &Patch::Merge(&change)).await.unwrap();
    status_where(&api, "acl", "the default set again", |st| {
        st.default_action.as_deref() == Some("forward(port=7)")
    })
    .await;
    delete_and_wait_gone(&api, "acl").await;
    assert_eq!(device_default(emu, 1, ACL).await.unwrap().action_id, DROP);
    assert_eq!(stats(emu, 1)["tables"][ACL.to_string()].as_u64(), Some(0));

    // Bad input, each a condition and an Event naming set, field and table:
    // a @tableonly action as the default, a const default, and an entry
    // with a @defaultonly action.
    let api = create_set(
        &client,
        &ns,
        "mirror",
        json!({"virtualSwitchRef": "vs", "table": "acl", "entries": dst_entries(1, 1),
               "defaultAction": {"action": "mirror"}}),
    )
    .await;
    let st = status_where(&api, "mirror", "TableOnlyAction", |st| {
        ready(st).is_some_and(|(ok, r)| !ok && r == "TableOnlyAction")
    })
    .await;
    let c = find_condition(&st.conditions, "DefaultAction").unwrap();
    for part in [
        "mirror",
        "spec.defaultAction",
        "MyIngress.acl",
        "table-only",
    ] {
        assert!(c.message.contains(part), "{part}: {}", c.message);
    }
    // The valid entry is still written; the device's default is untouched.
    assert_eq!(st.applied, 1);
    assert_eq!(device_default(emu, 1, ACL).await.unwrap().action_id, DROP);

    let api = create_set(
        &client,
        &ns,
        "fixed",
        json!({"virtualSwitchRef": "vs", "table": "fixed",
               "defaultAction": {"action": "forward", "params": {"port": 1}}}),
    )
    .await;
    let st = status_where(&api, "fixed", "ConstDefaultAction", |st| {
        ready(st).is_some_and(|(ok, r)| !ok && r == "ConstDefaultAction")
    })
    .await;
    let c = find_condition(&st.conditions, "DefaultAction").unwrap();
    assert!(
        c.message.contains("MyIngress.fixed") && c.message.contains("const"),
        "{}",
        c.message
    );

    let api = create_set(
        &client,
        &ns,
        "punt-entry",
        json!({"virtualSwitchRef": "vs", "table": "acl",
               "entries": [{"match": {"hdr.ipv4.dstAddr": "10.0.0.9"}, "action": "punt",
                            "params": {"port": 1}}]}),
    )
    .await;
    let st = status_where(&api, "punt-entry", "InvalidEntries", |st| {
        find_condition(&st.conditions, "Valid").is_some_and(|c| !c.is_true())
    })
    .await;
    assert!(
        st.errors.iter().any(|e| e.reason.contains("default-only")),
        "{:?}",
        st.errors
    );
    wait_for("the Events", Duration::from_secs(30), || async {
        let evs = event_reasons(&client, &ns).await;
        let has = |r: &str, part: &str| evs.iter().any(|(x, m)| x == r && m.contains(part));
        if has("TableOnlyAction", "spec.defaultAction")
            && has("ConstDefaultAction", "MyIngress.fixed")
            && has("DefaultActionSet", "table acl on VirtualSwitch vs")
        {
            Ok(())
        } else {
            Err(format!("{evs:?}"))
        }
    })
    .await;
}

/// What a program update did, seen by the operator and the emulator.
struct Updated {
    /// The VirtualSwitch's last swap, once its re-applied count is in.
    swap: p4fleet_crds::LastSwap,
    /// Inserts the device took during the update and the re-sync.
    device_inserts: u64,
    /// Inserts counted by acl's table since it was created, before and
    /// after (a table the update kept keeps its count).
    acl_before: u64,
    acl_after: u64,
}

/// v1 with entries in acl and nexthop, then v2 (nexthop's size changed),
/// planned first (`spec.plan`, [`plan_v2`]) when `plan` is true.
async fn update_program(
    client: &Client,
    ns: &str,
    emu: Emu,
    device: u64,
    strategy: &str,
    plan: bool,
) -> Updated {
    setup(client, ns, emu, device, strategy).await;
    let acl = create_set(
        client,
        ns,
        "acl",
        json!({"virtualSwitchRef": "vs", "table": "acl", "entries": dst_entries(1, 3)}),
    )
    .await;
    let nexthop = create_set(
        client,
        ns,
        "nexthop",
        json!({"virtualSwitchRef": "vs", "table": "nexthop", "entries": dst_entries(20, 2)}),
    )
    .await;
    for (api, name) in [(&acl, "acl"), (&nexthop, "nexthop")] {
        status_where(api, name, "Ready on v1", |st| {
            ready(st).is_some_and(|(ok, _)| ok)
        })
        .await;
    }
    let acl_before = inserts(emu, device, "MyIngress.acl");
    assert_eq!(acl_before, 3);
    assert_eq!(inserts(emu, device, "MyIngress.nexthop"), 2);
    let device_before = stats(emu, device)["inserts"].as_u64().unwrap();

    let progs: Api<p4fleet_crds::P4Program> = Api::namespaced(client.clone(), ns);
    if plan {
        plan_v2(&progs, ns, emu, device).await;
    }
    let v2 = json!({"spec": {"p4info": {"inline": p4info("v2")}, "plan": false}});
    merge_patch(&progs, "hitless", v2).await;
    let vss: Api<VirtualSwitch> = Api::namespaced(client.clone(), ns);
    let swap = wait_for("the swap counted", Duration::from_secs(90), || async {
        let vs = vss.get("vs").await.map_err(|e| e.to_string())?;
        let st = vs.status.unwrap_or_default();
        match &st.last_swap {
            Some(s) if s.entries_reapplied.is_some() => Ok(s.clone()),
            // What the VirtualSwitch says besides, should it never come.
            swap => Err(format!(
                "{swap:?}; loaded {:?}; {:?}",
                st.loaded_short_digest, st.conditions
            )),
        }
    })
    .await;
    for (api, name) in [(&acl, "acl"), (&nexthop, "nexthop")] {
        status_where(api, name, "Ready on v2", |st| {
            ready(st).is_some_and(|(ok, _)| ok) && st.applied > 0
        })
        .await;
    }
    assert_eq!(inserts(emu, device, "MyIngress.nexthop"), 2);
    Updated {
        swap,
        device_inserts: stats(emu, device)["inserts"].as_u64().unwrap() - device_before,
        acl_before,
        acl_after: inserts(emu, device, "MyIngress.acl"),
    }
}

/// `p4fleet plan -f` on a manifest of program `hitless` in `ns` with
/// `p4info`; what it printed (it must exit 0).
async fn plan_cli(ns: &str, p4info: &str) -> String {
    let cp = ControlPlane::shared().await;
    let manifest = json!({"apiVersion": "p4fleet.dev/v1alpha1", "kind": "P4Program",
        "metadata": {"name": "hitless", "namespace": ns},
        "spec": {"p4info": {"inline": p4info}}});
    let manifest = serde_yaml::to_string(&manifest).unwrap();
    let (exit, text, err) = p4fleet_plan(cp.kubeconfig_path(), &manifest);
    assert_eq!(exit, Some(0), "{text}{err}");
    text
}

/// v2 with `spec.plan`: the change is held (v1 stays in force, the device
/// is not pushed) and the plan says what the update will do.
async fn plan_v2(progs: &Api<p4fleet_crds::P4Program>, ns: &str, emu: Emu, device: u64) {
    let in_force = progs.get("hitless").await.unwrap().status.unwrap().digest;
    // `p4fleet plan -f` of the v2 manifest says the same before anything
    // is applied.
    let cli = plan_cli(ns, &p4info("v2")).await;
    for line in [
        "  tables kept: MyIngress.acl, MyIngress.fixed\n",
        "  tables changed: MyIngress.nexthop\n",
        &format!("  vs on {ns}-sw: Hitless\n"),
    ] {
        assert!(cli.contains(line), "{line:?} not in:\n{cli}");
    }
    let v2 = json!({"spec": {"p4info": {"inline": p4info("v2")}, "plan": true}});
    merge_patch(progs, "hitless", v2).await;
    let plan = wait_for("the program's plan", Duration::from_secs(60), || async {
        let p = progs.get("hitless").await.map_err(|e| e.to_string())?;
        let st = p.status.unwrap_or_default();
        st.plan.ok_or(format!("{:?}", st.conditions))
    })
    .await;
    assert_eq!(plan.tables_kept, ["MyIngress.acl", "MyIngress.fixed"]);
    assert_eq!(plan.tables_changed, ["MyIngress.nexthop"]);
    assert!(plan.tables_removed.is_empty() && plan.sets_losing_table.is_empty());
    let vs = &plan.virtual_switches;
    assert_eq!(vs.len(), 1, "{plan:?}");
    assert_eq!(
        (
            vs[0].name.as_str(),
            vs[0].switch.clone(),
            vs[0].load.as_str()
        ),
        ("vs", Some(format!("{ns}-sw")), "Hitless")
    );
    // Held: v1 stays in force and on the device.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let st = progs.get("hitless").await.unwrap().status.unwrap();
    assert_eq!(st.digest, in_force, "a planned change is not rolled out");
    let planned = find_condition(&st.conditions, "Planned").expect("Planned");
    assert!(planned.is_true(), "{planned:?}");
    assert!(
        stats(emu, device)["last_reconcile"].is_null(),
        "the device was not pushed"
    );
    let vss: Api<VirtualSwitch> = Api::namespaced(progs.clone().into_client(), ns);
    let loaded = vss.get("vs").await.unwrap().status.unwrap().loaded_digest;
    assert_eq!(loaded, in_force);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_program_update_keeps_the_entries_of_unchanged_tables() {
    let (cp, env) = env().await;
    let (client, ns) = cp.client_and_namespace().await;
    let ns = ns.name().to_string();
    let emu = env.reconciling;
    let u = update_program(&client, &ns, emu, 2, "HotSwap", false).await;
    let swap = &u.swap;
    assert_eq!(swap.mode, Some(ProgramUpdateMode::Reconciled), "{swap:?}");
    assert_eq!(swap.entries_kept, Some(3), "{swap:?}");
    assert_eq!(swap.tables_kept, ["MyIngress.acl"], "{swap:?}");
    assert_eq!(swap.entries_reapplied, Some(2), "{swap:?}");
    assert_eq!(swap.fallback_reason, None);
    // Counted at the emulator: acl kept its entries and its count (0
    // re-inserts); only nexthop's two entries (a new table in v2) were
    // inserted again.
    assert_eq!(u.acl_after, u.acl_before);
    assert_eq!(u.device_inserts, 2);
    let last = &stats(emu, 2)["last_reconcile"];
    assert_eq!(
        last["kept_tables"],
        json!(["MyIngress.acl", "MyIngress.fixed"])
    );
    assert_eq!(last["dropped_tables"], json!(["MyIngress.nexthop"]));
    assert_eq!(
        (
            last["kept_entries"].as_u64(),
            last["dropped_entries"].as_u64()
        ),
        (Some(3), Some(2))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_reconcile_the_update_falls_back_and_says_so() {
    let (cp, env) = env().await;
    let (client, ns) = cp.client_and_namespace().await;
    let ns = ns.name().to_string();
    let emu = env.plain;
    let u = update_program(&client, &ns, emu, 1, "HotSwap", false).await;
    let swap = &u.swap;
    assert_eq!(swap.mode, Some(ProgramUpdateMode::Replaced), "{swap:?}");
    assert_eq!(swap.entries_kept, Some(0));
    assert_eq!(swap.entries_reapplied, Some(5), "{swap:?}");
    let why = swap.fallback_reason.clone().unwrap_or_default();
    assert!(why.contains("Unimplemented"), "{why}");
    // Every entry inserted again, acl's into a new table.
    assert_eq!(u.device_inserts, 5);
    assert_eq!(u.acl_after, 3);
    wait_for("the fallback Event", Duration::from_secs(30), || async {
        let evs = event_reasons(&client, &ns).await;
        if evs
            .iter()
            .any(|(r, m)| r == "ReconcileUnsupported" && m.contains("VERIFY_AND_COMMIT"))
        {
            Ok(())
        } else {
            Err(format!("{evs:?}"))
        }
    })
    .await;
}

/// A planned update (`spec.plan`) is held until the plan is turned off,
/// then does what the plan said: the tables it called kept are those the
/// emulator kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_planned_program_update_waits_then_does_what_the_plan_said() {
    let (cp, env) = env().await;
    let (client, ns) = cp.client_and_namespace().await;
    let ns = ns.name().to_string();
    let emu = env.reconciling;
    let u = update_program(&client, &ns, emu, 5, "HotSwap", true).await;
    assert_eq!(
        u.swap.mode,
        Some(ProgramUpdateMode::Reconciled),
        "{:?}",
        u.swap
    );
    assert_eq!(u.acl_after, u.acl_before, "acl kept its entries");
    let last = &stats(emu, 5)["last_reconcile"];
    assert_eq!(
        last["kept_tables"],
        json!(["MyIngress.acl", "MyIngress.fixed"])
    );
    let progs: Api<p4fleet_crds::P4Program> = Api::namespaced(client.clone(), &ns);
    let st = progs.get("hitless").await.unwrap().status.unwrap();
    assert!(st.plan.is_none(), "the plan is gone once rolled out");
}

/// `updateStrategy: Recreate` on a target that could reconcile: the
/// program is replaced (VERIFY_AND_COMMIT), every entry written again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recreate_replaces_the_program_though_the_target_could_reconcile() {
    let (cp, env) = env().await;
    let (client, ns) = cp.client_and_namespace().await;
    let ns = ns.name().to_string();
    let emu = env.reconciling;
    let u = update_program(&client, &ns, emu, 4, "Recreate", false).await;
    let swap = &u.swap;
    assert_eq!(swap.strategy, p4fleet_crds::UpdateStrategyType::Recreate);
    assert_eq!(swap.mode, Some(ProgramUpdateMode::Replaced), "{swap:?}");
    assert_eq!(swap.entries_kept, Some(0), "{swap:?}");
    assert_eq!(swap.fallback_reason, None, "asked for, not a fallback");
    assert_eq!(swap.entries_reapplied, Some(5), "{swap:?}");
    // At the emulator: no reconcile, every entry inserted again.
    assert_eq!(u.device_inserts, 5);
    assert_eq!(u.acl_after, 3);
    assert!(stats(emu, 4)["last_reconcile"].is_null());
}

/// The same on a Tofino target: the default entry over BFRT (MODIFY with
/// the action's data, RESET to return to the initial default), with the
/// firewall example's bfrt.json.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn default_action_on_a_tofino_target() {
    let (cp, env) = env().await;
    let emu = env.reconciling;
    let (client, ns) = cp.client_and_namespace().await;
    let ns = ns.name().to_string();
    let file =
        |f: &str| std::fs::read_to_string(repo_root().join("examples/firewall").join(f)).unwrap();
    let progs: Api<p4fleet_crds::P4Program> = Api::namespaced(client.clone(), &ns);
    create_json(
        &progs,
        json!({"apiVersion": "p4fleet.dev/v1alpha1", "kind": "P4Program",
            "metadata": {"name": "firewall"},
            "spec": {"p4info": {"inline": file("p4info.txt")},
                     "artifacts": {"tofino": {"bfrtJson": {"inline": file("bfrt.json")}}}}}),
    )
    .await;
    let sws: Api<p4fleet_crds::Switch> = Api::all(client.clone());
    create_json(
        &sws,
        json!({"apiVersion": "p4fleet.dev/v1alpha1", "kind": "Switch",
            "metadata": {"name": format!("{ns}-tofino")},
            "spec": {"target": "Tofino", "endpoint": emu.bfrt.unwrap().to_string(),
                     "deviceId": 3, "slots": 1}}),
    )
    .await;
    let vss: Api<VirtualSwitch> = Api::namespaced(client.clone(), &ns);
    create_json(
        &vss,
        json!({"apiVersion": "p4fleet.dev/v1alpha1", "kind": "VirtualSwitch",
            "metadata": {"name": "fw"},
            "spec": {"programRef": "firewall", "switchRef": format!("{ns}-tofino"), "slot": 0}}),
    )
    .await;
    let api = create_set(
        &client,
        &ns,
        "fw",
        json!({"virtualSwitchRef": "fw", "table": "firewall",
               "entries": [{"match": {"hdr.ipv4.srcAddr": "10.0.0.1", "hdr.ipv4.dstAddr": "10.0.0.2"},
                            "action": "drop"}],
               "defaultAction": {"action": "allow", "params": {"port": 3}}}),
    )
    .await;
    let st = status_where(&api, "fw", "Ready with the default", |st| {
        ready(st).is_some_and(|(ok, _)| ok) && st.default_action.is_some()
    })
    .await;
    assert_eq!(st.default_action.as_deref(), Some("allow(port=3)"));
    assert_eq!(st.applied, 1);
    let remove = json!({"spec": {"defaultAction": null}});
    merge_patch(&api, "fw", remove).await;
    let st = status_where(&api, "fw", "the default reset", |st| {
        st.default_action.is_none() && find_condition(&st.conditions, "DefaultAction").is_none()
    })
    .await;
    assert!(ready(&st).unwrap().0);
}
