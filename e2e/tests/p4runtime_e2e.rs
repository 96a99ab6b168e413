//! The whole write path end to end: a real kube-apiserver + etcd, the
//! emulator and the operator as child processes. A firewall program, a
//! 30,000-entry TableEntrySet from two ConfigMaps, a 100-entry change, drift
//! repair, deletion, an Exclusive set, and bad input.
//!
//! Every scenario runs twice, on a Bmv2-kind Switch (P4Runtime, the
//! program's P4Info) and on a Tofino-kind Switch (BFRT, the program's
//! bfrt.json as its Tofino artifact): the same TableEntrySets and
//! VirtualSwitches, only the Switch and the P4Program's artifacts differ.
//!
//! Tests share one emulator (each uses its own device id; the emulator
//! serves P4Runtime and BFRT on two ports) and one operator.
//!
//! The Dpdk Switch scenarios (entries and policies, two policies on one
//! VirtualSwitch, a device restart) run on the emulator and on
//! p4fleet-dpdk-agent (a process of its own: a real DPDK 22.11 SWX
//! pipeline), the same body;
//! where the real pipeline differs (a full context pool parks packets
//! instead of dropping them) the step says so (docs/dpdk.md).

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Event};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::{Client, ResourceExt};
use p4fleet_crds::{
    P4Program, Switch, TableEntrySet, TableEntrySetStatus, VirtualSwitch, find_condition,
};
use p4fleet_e2e::dpdk::{TRAFFIC, l2crypt};
use p4fleet_e2e::firewall::Kind;
use p4fleet_e2e::processes::{
    Fleet, build_binaries, fleet, metric_sample, metrics_text, side_channel,
};
use p4fleet_e2e::{
    ControlPlane, TestNamespace, create_json, delete_and_wait_gone, firewall_lines_with, repo_root,
    switch_unreachable, wait_for,
};
use p4fleet_model::entries::{Entry, LineParser, Style, TableSchema, WriteOp, format_entries};
use serde_json::{Value, json};

/// The shared emulator and operator. Devices 21 and 22 are Dpdk targets
/// (this file's Dpdk scenarios): a bounded traffic rate and one extern core.
async fn env() -> (&'static ControlPlane, &'static Fleet) {
    let devices = [
        "--device-ids",
        "1,2,3,4,5,11,12,13,14,21,22",
        "--bfrt-addr",
        "127.0.0.1:0",
        "--dpdk-device-ids",
        "21,22",
    ];
    fleet(&[&devices[..], &TRAFFIC].concat(), "operator", 30).await
}

/// Resyncs answered by the read-back alone, by outcome.
const RECHECKS: &str = "p4fleet_entry_set_rechecks_total";

// --- the emulator's HTTP side channel --------------------------------------

fn http(addr: SocketAddr, method: &str, path: &str, body: &str) -> Value {
    let answer = side_channel(addr, method, path, body);
    serde_json::from_str(&answer).unwrap_or_else(|e| panic!("{method} {path}: {e}: {answer}"))
}

fn stats(env: &Fleet, device: u64) -> Value {
    http(env.stats, "GET", &format!("/stats/{device}"), "")
}

fn stat(env: &Fleet, device: u64, field: &str) -> u64 {
    stats(env, device)[field].as_u64().unwrap_or(0)
}

/// The operator counted one Write RPC for each the emulator received on
/// the Switch's slot 0 (device id `dev`).
fn write_requests_match_the_device(env: &Fleet, ns: &str, dev: u64) {
    let text = metrics_text(env.metrics);
    let counted = metric_sample(
        &text,
        "p4fleet_write_requests_total",
        &format!("switch=\"{ns}-sw\""),
    );
    // Only slot 0 is used: slot 1 (device `dev + 1`) is another test's device.
    let received = stat(env, dev, "write_rpcs");
    assert!(received > 0);
    assert_eq!(counted, Some(received as f64), "{text}");
    let latencies = "p4fleet_write_request_duration_seconds_count";
    let samples = metric_sample(&text, latencies, &format!("switch=\"{ns}-sw\""));
    assert_eq!(samples, Some(received as f64));
}

/// The set's gauges say what its status says.
fn set_gauges_match(env: &Fleet, ns: &str, name: &str, st: &TableEntrySetStatus) {
    let text = metrics_text(env.metrics);
    let labels = format!("namespace=\"{ns}\",name=\"{name}\"");
    let g = |what: &str| metric_sample(&text, &format!("p4fleet_table_entry_set_{what}"), &labels);
    assert_eq!(g("desired_entries"), st.desired.map(|d| d as f64), "{text}");
    assert_eq!(g("applied_entries"), Some(st.applied as f64));
    assert_eq!(g("failed_entries"), Some(st.failed as f64));
    assert_eq!(g("ready"), Some(1.0));
}

/// A deleted set has no series left.
fn set_series_gone(env: &Fleet, ns: &str, name: &str) {
    let text = metrics_text(env.metrics);
    let labels = format!("namespace=\"{ns}\",name=\"{name}\"");
    assert!(!text.contains(&labels), "{text}");
}

// --- resources --------------------------------------------------------------

fn firewall_p4info() -> String {
    std::fs::read_to_string(repo_root().join("examples/firewall/p4info.txt")).unwrap()
}

fn firewall_schema() -> TableSchema {
    let info = p4fleet_proto::p4info::parse_text(&firewall_p4info()).unwrap();
    TableSchema::from_p4info(&info, "firewall").unwrap()
}

fn firewall_bfrt_json() -> String {
    std::fs::read_to_string(repo_root().join("examples/firewall/bfrt.json")).unwrap()
}

/// A stand-in tofino.bin (the emulator keeps it, nothing reads it).
const TOFINO_BIN: &[u8] = &[0x7f, b'T', b'F', 0, 1, 2, 3];

/// The Tofino artifacts' ConfigMap: bfrt.json in `data`, tofino.bin in `binaryData`.
async fn tofino_artifacts(client: &Client, ns: &str) {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let cm = ConfigMap {
        metadata: kube::api::ObjectMeta {
            name: Some("firewall-tofino".into()),
            ..Default::default()
        },
        data: Some([("bfrt.json".to_string(), firewall_bfrt_json())].into()),
        binary_data: Some(
            [(
                "tofino.bin".to_string(),
                k8s_openapi::ByteString(TOFINO_BIN.to_vec()),
            )]
            .into(),
        ),
        ..Default::default()
    };
    api.create(&PostParams::default(), &cm).await.unwrap();
}

/// Creates a firewall P4Program (P4Info inline; for Tofino also its Tofino
/// artifacts: bfrt.json and binary from a ConfigMap, context.json inline), a
/// two-slot Switch of `kind` on the emulator's device `device` and a
/// VirtualSwitch in slot 0; returns the VirtualSwitch name.
async fn setup_target(client: &Client, env: &Fleet, ns: &str, kind: Kind, device: u64) -> String {
    let sw_name = format!("{ns}-sw");
    let progs: Api<P4Program> = Api::namespaced(client.clone(), ns);
    let mut spec = json!({"p4info": {"inline": firewall_p4info()}});
    if kind == Kind::Tofino {
        tofino_artifacts(client, ns).await;
        spec["artifacts"] = json!({"tofino": {
            "bfrtJson": {"configMapKeyRef": {"name": "firewall-tofino", "key": "bfrt.json"}},
            "contextJson": {"inline": "{}"},
            "binary": {"configMapKeyRef": {"name": "firewall-tofino", "key": "tofino.bin"}}
        }});
    }
    let p: P4Program = serde_json::from_value(json!({
        "apiVersion": "p4fleet.dev/v1alpha1", "kind": "P4Program",
        "metadata": {"name": "firewall"},
        "spec": spec
    }))
    .unwrap();
    progs.create(&PostParams::default(), &p).await.unwrap();
    let sws: Api<Switch> = Api::all(client.clone());
    let (target, endpoint) = match kind {
        Kind::Bmv2 => ("Bmv2", env.p4runtime),
        Kind::Tofino => ("Tofino", env.bfrt()),
    };
    let sw: Switch = serde_json::from_value(json!({
        "apiVersion": "p4fleet.dev/v1alpha1", "kind": "Switch",
        "metadata": {"name": sw_name},
        "spec": {"target": target, "endpoint": endpoint.to_string(), "deviceId": device, "slots": 2}
    }))
    .unwrap();
    sws.create(&PostParams::default(), &sw).await.unwrap();
    let vss: Api<VirtualSwitch> = Api::namespaced(client.clone(), ns);
    let vs: VirtualSwitch = serde_json::from_value(json!({
        "apiVersion": "p4fleet.dev/v1alpha1", "kind": "VirtualSwitch",
        "metadata": {"name": "fw"},
        "spec": {"programRef": "firewall", "switchRef": sw_name, "slot": 0}
    }))
    .unwrap();
    vss.create(&PostParams::default(), &vs).await.unwrap();
    "fw".into()
}

async fn create_set(client: &Client, ns: &str, spec: Value) -> Api<TableEntrySet> {
    let name = spec["name"].as_str().unwrap().to_string();
    let mut spec = spec;
    spec.as_object_mut().unwrap().remove("name");
    p4fleet_e2e::create_set(client, ns, &name, spec).await
}

async fn config_map(client: &Client, ns: &str, name: &str, text: String) {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let cm = ConfigMap {
        metadata: kube::api::ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        data: Some([("entries".to_string(), text)].into()),
        ..Default::default()
    };
    match api.get_opt(name).await.unwrap() {
        None => {
            api.create(&PostParams::default(), &cm).await.unwrap();
        }
        Some(old) => {
            let mut cm = cm;
            cm.metadata.resource_version = old.resource_version();
            api.replace(name, &PostParams::default(), &cm)
                .await
                .unwrap();
        }
    }
}

/// `n` distinct firewall entries starting at `start`, ports shifted by `shift`.
fn entries(schema: &TableSchema, start: usize, n: usize, shift: usize) -> Vec<Entry> {
    let text = firewall_lines_with(start, n, "172.16.0.1", shift);
    let mut p = LineParser::new(schema);
    text.lines()
        .filter_map(|l| p.parse_line(l).unwrap())
        .collect()
}

fn format(schema: &TableSchema, es: &[Entry]) -> String {
    format_entries(schema, es, Style::Compact).unwrap()
}

fn cond<'a>(st: &'a TableEntrySetStatus, t: &str) -> Option<&'a p4fleet_crds::Condition> {
    find_condition(&st.conditions, t)
}

fn is(st: &TableEntrySetStatus, t: &str, ok: bool) -> bool {
    cond(st, t)
        .is_some_and(|c| c.is_true() == ok && c.status != p4fleet_crds::ConditionStatus::Unknown)
}

/// Waits (60 s) until set `name` is Ready; returns its status.
async fn ready_within_60s(api: &Api<TableEntrySet>, name: &str) -> TableEntrySetStatus {
    let what = format!("{name} Ready");
    p4fleet_e2e::set_status_where(api, name, &what, Duration::from_secs(60), |s| {
        is(s, "Ready", true)
    })
    .await
}

/// Waits (60 s) until set `name`'s condition `type_` is False and `also`
/// holds of its status; asserts the condition's reason is `reason` and
/// returns the status and a copy of the condition.
async fn refused(
    api: &Api<TableEntrySet>,
    name: &str,
    type_: &str,
    reason: &str,
    also: impl Fn(&TableEntrySetStatus) -> bool,
) -> (TableEntrySetStatus, p4fleet_crds::Condition) {
    let st = p4fleet_e2e::set_status_where(api, name, reason, Duration::from_secs(60), |s| {
        is(s, type_, false) && also(s)
    })
    .await;
    let c = cond(&st, type_).unwrap().clone();
    assert_eq!(c.reason, reason);
    (st, c)
}

// --- tests ------------------------------------------------------------------

p4fleet_e2e::bmv2_and_tofino_tests! {
    thirty_thousand_entries_sync_change_repair_and_delete:
        thirty_thousand_entries_sync_change_repair_and_delete_bmv2 on 1,
        thirty_thousand_entries_sync_change_repair_and_delete_tofino on 11,
}

p4fleet_e2e::bmv2_and_tofino_tests! {
    exclusive_set_removes_a_foreign_entry:
        exclusive_set_removes_a_foreign_entry_bmv2 on 2,
        exclusive_set_removes_a_foreign_entry_tofino on 12,
}

p4fleet_e2e::bmv2_and_tofino_tests! {
    bad_input_gives_conditions_and_valid_entries_still_apply:
        bad_input_gives_conditions_and_valid_entries_still_apply_bmv2 on 3,
        bad_input_gives_conditions_and_valid_entries_still_apply_tofino on 13,
}

async fn thirty_thousand_entries_sync_change_repair_and_delete(kind: Kind, dev: u64) {
    let (cp, env) = env().await;
    let (client, ns) = cp.client_and_namespace().await;
    let ns = ns.name().to_string();
    let vs = setup_target(&client, env, &ns, kind, dev).await;
    let schema = firewall_schema();
    let all = entries(&schema, 0, 30_000, 0);
    config_map(&client, &ns, "fw-a", format(&schema, &all[..15_000])).await;
    config_map(&client, &ns, "fw-b", format(&schema, &all[15_000..])).await;
    let t0 = Instant::now();
    let api = create_set(
        &client,
        &ns,
        json!({
            "name": "fw30k", "virtualSwitchRef": vs, "table": "MyIngress.firewall",
            "entriesFrom": [{"configMap": "fw-a"}, {"configMap": "fw-b"}],
            "write": {"batchSize": 1000, "maxInFlight": 4},
            "resyncSeconds": 3
        }),
    )
    .await;
    let st = p4fleet_e2e::set_status_where(
        &api,
        "fw30k",
        "Ready with 30000 applied",
        Duration::from_secs(120),
        |s| is(s, "Ready", true) && s.applied == 30_000,
    )
    .await;
    eprintln!(
        "{kind:?}: 30000 entries Ready after {:?}: rate {:?}, {:?} entries/s, mean request latency {:?} us, lastSyncUpdates {:?}",
        t0.elapsed(),
        st.rate,
        st.entries_per_second,
        st.mean_request_latency_micros,
        st.last_sync_updates
    );
    assert_eq!(st.desired, Some(30_000));
    assert_eq!(st.failed, 0);
    assert!(st.rate.as_deref().is_some_and(|r| r.ends_with("/s")));
    assert_eq!(st.last_sync_updates, Some(30_000));
    assert_eq!(stat(env, dev, "entries"), 30_000);
    assert_eq!(stat(env, dev, "inserts"), 30_000);
    set_gauges_match(env, &ns, "fw30k", &st);
    write_requests_match_the_device(env, &ns, dev);
    let sync_time = st.last_sync_time.clone();

    // Idle resyncs (3 s) leave the status alone. On P4Runtime, once a
    // resync found the table as desired, the next ones are the read-back
    // alone (entry_set::recheck; BFRT sets always sync in full).
    let held = || {
        let text = metrics_text(env.metrics);
        metric_sample(&text, RECHECKS, "outcome=\"held\"").unwrap_or(0.0)
    };
    let before = held();
    tokio::time::sleep(Duration::from_secs(4)).await;
    if kind == Kind::Bmv2 {
        wait_for(
            "a resync that is a recheck",
            Duration::from_secs(30),
            || {
                let now = held();
                let grew = (now > before).then_some(()).ok_or(format!("{now} held"));
                std::future::ready(grew)
            },
        )
        .await;
    }
    let idle = api.get("fw30k").await.unwrap().status.unwrap();
    assert_eq!(idle.last_sync_time, sync_time);
    assert_eq!(idle.drift_corrected, 0);

    // Change 100 entries in fw-b: exactly 100 modifies.
    let before = stats(env, dev);
    let mut b = all[15_000..].to_vec();
    let changed = entries(&schema, 15_000, 100, 7);
    b[..100].clone_from_slice(&changed);
    config_map(&client, &ns, "fw-b", format(&schema, &b)).await;
    let st = p4fleet_e2e::set_status_where(
        &api,
        "fw30k",
        "100-entry sync",
        Duration::from_secs(60),
        |s| s.last_sync_updates == Some(100) && s.applied == 30_000,
    )
    .await;
    let after = stats(env, dev);
    let d = |f: &str| after[f].as_u64().unwrap() - before[f].as_u64().unwrap();
    assert_eq!((d("modifies"), d("inserts"), d("deletes")), (100, 0, 0));
    eprintln!("{kind:?}: 100 changed entries: rate {:?}", st.rate);

    // Drift: 50 entries vanish on the device; the next resync restores them.
    let r = http(
        env.stats,
        "POST",
        &format!(
            "/devices/{dev}/drop-entries?table_id={}&count=50",
            schema.id
        ),
        "",
    );
    assert_eq!(r["deleted"], 50);
    let t = Instant::now();
    let st = p4fleet_e2e::set_status_where(
        &api,
        "fw30k",
        "drift repaired",
        Duration::from_secs(30),
        |s| s.drift_corrected >= 50,
    )
    .await;
    eprintln!("{kind:?}: drift of 50 repaired after {:?}", t.elapsed());
    assert_eq!(st.drift_corrected, 50);
    assert_eq!(stat(env, dev, "entries"), 30_000);

    // Deleting the set removes its entries.
    delete_and_wait_gone(&api, "fw30k").await;
    assert_eq!(stat(env, dev, "entries"), 0);
    // The cleanup's deletes were counted too, and the set's series are gone.
    write_requests_match_the_device(env, &ns, dev);
    set_series_gone(env, &ns, "fw30k");

    let events: Api<Event> = Api::namespaced(client.clone(), &ns);
    let evs = events.list(&ListParams::default()).await.unwrap();
    let notes: Vec<String> = evs.items.iter().filter_map(|e| e.message.clone()).collect();
    assert!(
        notes
            .iter()
            .any(|n| n.starts_with("Synced 30000 entries at ")),
        "{notes:?}"
    );
}

async fn exclusive_set_removes_a_foreign_entry(kind: Kind, dev: u64) {
    let (cp, env) = env().await;
    let (client, ns) = cp.client_and_namespace().await;
    let ns = ns.name().to_string();
    let vs = setup_target(&client, env, &ns, kind, dev).await;
    // Wait for the pipeline, then plant a foreign entry behind the operator.
    let vss: Api<VirtualSwitch> = Api::namespaced(client.clone(), &ns);
    wait_for("pipeline loaded", Duration::from_secs(60), || async {
        let v = vss.get(&vs).await.map_err(|e| e.to_string())?;
        let ok = v
            .status
            .as_ref()
            .and_then(|s| find_condition(&s.conditions, "PipelineLoaded"))
            .is_some_and(|c| c.is_true());
        if ok {
            Ok(())
        } else {
            Err(format!("{:?}", v.status))
        }
    })
    .await;
    plant_foreign_entry(env, kind, dev).await;
    assert_eq!(stat(env, dev, "entries"), 1);

    let api = create_set(
        &client,
        &ns,
        json!({
            "name": "owner", "virtualSwitchRef": vs, "table": "firewall", "ownership": "Exclusive",
            "entries": [
                {"match": {"hdr.ipv4.srcAddr": "10.0.0.1", "hdr.ipv4.dstAddr": "10.0.0.2"}, "action": "allow", "params": {"port": "1"}},
                {"match": {"srcAddr": "10.0.0.1", "dstAddr": "10.0.0.3"}, "action": "drop"}
            ]
        }),
    )
    .await;
    let st = ready_within_60s(&api, "owner").await;
    assert_eq!((st.applied, st.last_sync_updates), (2, Some(3)));
    assert_eq!(stat(env, dev, "entries"), 2);
    assert_eq!(stat(env, dev, "deletes"), 1);
}

async fn bad_input_gives_conditions_and_valid_entries_still_apply(kind: Kind, dev: u64) {
    let (cp, env) = env().await;
    let (client, ns) = cp.client_and_namespace().await;
    let ns = ns.name().to_string();
    let vs = setup_target(&client, env, &ns, kind, dev).await;
    let e = |src: &str, action: &str, params: Value| json!({"match": {"hdr.ipv4.srcAddr": src, "hdr.ipv4.dstAddr": "10.9.9.9"}, "action": action, "params": params});
    let api = create_set(
        &client,
        &ns,
        json!({
            "name": "bad", "virtualSwitchRef": vs, "table": "firewall",
            "entries": [
                e("10.0.0.1", "allow", json!({"port": "1"})),
                e("10.0.0.2", "allow", json!({"port": "4096"})),
                {"match": {"hdr.ipv4.srcAddr": "10.0.0.3", "nosuch": "1"}, "action": "drop"},
                e("10.0.0.4", "jump", json!({})),
                e("10.0.0.5", "allow", json!({"port": "1", "vlan": "3"})),
                e("10.0.0.1", "drop", json!({})),
                e("10.0.0.6", "allow", json!({"port": "2"}))
            ]
        }),
    )
    .await;
    let (st, valid) = refused(&api, "bad", "Valid", "InvalidEntries", |s| s.applied == 2).await;
    assert!(
        valid.message.contains(&format!("{ns}/bad")),
        "{}",
        valid.message
    );
    assert!(
        valid.message.contains("5 invalid entries"),
        "{}",
        valid.message
    );
    let sources: Vec<&str> = st.errors.iter().map(|e| e.source.as_str()).collect();
    assert_eq!(
        sources,
        [
            "entries[1]",
            "entries[2]",
            "entries[3]",
            "entries[4]",
            "entries[5]"
        ]
    );
    assert!(st.errors[0].reason.contains("port"), "{:?}", st.errors[0]);
    assert!(st.errors[1].reason.contains("nosuch"), "{:?}", st.errors[1]);
    assert!(st.errors[2].reason.contains("jump"), "{:?}", st.errors[2]);
    assert!(st.errors[3].reason.contains("vlan"), "{:?}", st.errors[3]);
    assert!(
        st.errors[4].reason.contains("entries[0]"),
        "{:?}",
        st.errors[4]
    );
    assert_eq!((st.desired, st.failed), (Some(2), 5));
    assert!(is(&st, "Ready", false));
    assert_eq!(stat(env, dev, "entries"), 2);

    // A missing ConfigMap: ResolvedRefs names it; the inline entry applies.
    let api = create_set(
        &client,
        &ns,
        json!({
            "name": "missing-cm", "virtualSwitchRef": vs, "table": "firewall",
            "entries": [e("10.1.0.1", "allow", json!({"port": "1"}))],
            "entriesFrom": [{"configMap": "nope"}, {"configMap": "maybe", "optional": true}]
        }),
    )
    .await;
    let also = |s: &TableEntrySetStatus| s.applied == 1;
    let (_, c) = refused(
        &api,
        "missing-cm",
        "ResolvedRefs",
        "ConfigMapNotFound",
        also,
    )
    .await;
    assert!(
        c.message.contains("ConfigMap nope not found"),
        "{}",
        c.message
    );
    assert!(!c.message.contains("maybe"), "{}", c.message);

    // A table the program does not have.
    let api = create_set(
        &client,
        &ns,
        json!({
            "name": "no-table", "virtualSwitchRef": vs, "table": "MyIngress.dmac",
            "entries": [{"match": {"hdr.ethernet.dstAddr": "aa:bb:cc:dd:ee:ff"}, "action": "forward", "params": {"port": "1"}}]
        }),
    )
    .await;
    let (_, c) = refused(&api, "no-table", "Valid", "UnknownTable", |_| true).await;
    assert!(c.message.contains("MyIngress.dmac"), "{}", c.message);

    // Events name the resource and entries.
    let events: Api<Event> = Api::namespaced(client.clone(), &ns);
    let evs = wait_for("events", Duration::from_secs(20), || async {
        let evs = events
            .list(&ListParams::default())
            .await
            .map_err(|e| e.to_string())?;
        let reasons: Vec<String> = evs.items.iter().filter_map(|e| e.reason.clone()).collect();
        if ["InvalidEntries", "ConfigMapNotFound", "UnknownTable"]
            .iter()
            .all(|r| reasons.iter().any(|x| x == r))
        {
            Ok(evs)
        } else {
            Err(format!("{reasons:?}"))
        }
    })
    .await;
    let invalid = evs
        .items
        .iter()
        .find(|e| e.reason.as_deref() == Some("InvalidEntries"))
        .unwrap();
    let note = invalid.message.clone().unwrap_or_default();
    assert!(note.contains("entries[1]"), "{note}");
    let _ = invalid.name_any();

    if kind == Kind::Tofino {
        // A program without Tofino artifacts cannot run on a Tofino Switch.
        let progs: Api<P4Program> = Api::namespaced(client.clone(), &ns);
        let p: P4Program = serde_json::from_value(json!({
            "apiVersion": "p4fleet.dev/v1alpha1", "kind": "P4Program",
            "metadata": {"name": "p4info-only"},
            "spec": {"p4info": {"inline": firewall_p4info()}}
        }))
        .unwrap();
        progs.create(&PostParams::default(), &p).await.unwrap();
        let vss: Api<VirtualSwitch> = Api::namespaced(client.clone(), &ns);
        let v: VirtualSwitch = serde_json::from_value(json!({
            "apiVersion": "p4fleet.dev/v1alpha1", "kind": "VirtualSwitch",
            "metadata": {"name": "no-artifacts"},
            "spec": {"programRef": "p4info-only", "switchRef": format!("{ns}-sw"), "slot": 1}
        }))
        .unwrap();
        vss.create(&PostParams::default(), &v).await.unwrap();
        let c = wait_for(
            "MissingTofinoArtifacts",
            Duration::from_secs(60),
            || async {
                let v = vss.get("no-artifacts").await.map_err(|e| e.to_string())?;
                let st = v.status.unwrap_or_default();
                match find_condition(&st.conditions, "PipelineLoaded") {
                    Some(c) if c.reason == "MissingTofinoArtifacts" => Ok(c.clone()),
                    c => Err(format!("{c:?}")),
                }
            },
        )
        .await;
        assert!(!c.is_true());
        assert!(
            c.message.starts_with("spec.artifacts.tofino.bfrtJson:"),
            "{}",
            c.message
        );
    }
}

/// Installs `192.168.1.1 -> 192.168.1.2: drop` behind the operator's back,
/// after its pipeline is loaded: on Bmv2 through the emulator's
/// inject-entry, on Tofino as a second BFRT client bound to the program.
async fn plant_foreign_entry(env: &Fleet, kind: Kind, dev: u64) {
    match kind {
        Kind::Bmv2 => {
            let foreign = "table_id: 39123287\nmatch { field_id: 1 exact { value: \"\\xc0\\xa8\\x01\\x01\" } }\nmatch { field_id: 2 exact { value: \"\\xc0\\xa8\\x01\\x02\" } }\naction { action { action_id: 25652968 } }\n";
            let r = http(
                env.stats,
                "POST",
                &format!("/devices/{dev}/inject-entry"),
                foreign,
            );
            assert_eq!(r["inserted"], true, "{r}");
        }
        Kind::Tofino => {
            let schema = firewall_schema();
            let mut p = LineParser::new(&schema);
            let e = "#! fields hdr.ipv4.srcAddr hdr.ipv4.dstAddr\n#! action drop\n192.168.1.1 192.168.1.2"
                .lines()
                .find_map(|l| p.parse_line(l).unwrap())
                .unwrap();
            // The operator's BFRT client ids fit in 16 bits.
            let foreign = p4fleet_client::Device::connect(
                p4fleet_client::Target::bfrt(env.bfrt().to_string(), dev),
                p4fleet_client::Identity {
                    election_id: 1,
                    client_id: 0x1_0000 + dev as u32,
                },
            )
            .unwrap();
            let info = p4fleet_proto::p4info::parse_text(&firewall_p4info()).unwrap();
            let pipeline = p4fleet_client::TofinoPipeline {
                p4_name: "firewall".into(),
                bfrt_json: firewall_bfrt_json().into_bytes(),
                context_json: b"{}".to_vec(),
                binary: TOFINO_BIN.to_vec(),
            };
            let pushed = foreign
                .set_tofino_pipeline(0, &info, &pipeline)
                .await
                .unwrap();
            assert!(!pushed, "the operator has loaded the same program");
            let r = foreign
                .write_ops(0, &[WriteOp::insert(&e)], Default::default())
                .await
                .unwrap();
            assert!(r.failures.is_empty(), "{:?}", r.failures);
        }
    }
}

// --- a Dpdk Switch: the packed pipeline, its data plane, extern policies ----

/// The two tests of a Dpdk scenario `scenario(target)`: `$emulator` on the
/// shared emulator's device, `$agent` on a p4fleet-dpdk-agent, each with
/// its attributes (docs).
macro_rules! emulator_and_agent_tests {
    ($scenario:ident: $(#[$e:meta])* $emulator:ident, $(#[$a:meta])* $agent:ident $(,)?) => {
        $(#[$e])*
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $emulator() {
            $scenario(DpdkTarget::Emulator).await;
        }

        $(#[$a])*
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $agent() {
            $scenario(DpdkTarget::Agent).await;
        }
    };
}

/// Where a Dpdk scenario's device runs: one of the emulator's devices, or
/// a p4fleet-dpdk-agent process of its own (a real DPDK 22.11 SWX
/// pipeline, docs/dpdk.md "The DPDK host agent"). The scenario's body is
/// the same; only where the data plane's counters are read differs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DpdkTarget {
    Emulator,
    Agent,
}

/// The Dpdk device of a scenario: its P4Runtime endpoint and where its
/// data plane's counters come from.
struct DpdkDevice {
    endpoint: SocketAddr,
    device: u64,
    target: DpdkTarget,
    /// The emulator's HTTP side channel (Emulator).
    stats: Option<SocketAddr>,
    /// The scenario's own process serving the device (the agent, or an
    /// emulator of its own that [`DpdkDevice::restart`] may kill), killed on
    /// drop, and its temp dir.
    own: Option<(p4fleet_e2e::processes::Proc, tempfile::TempDir)>,
    /// The temp dir of the process [`DpdkDevice::stop`] killed.
    stopped: Option<tempfile::TempDir>,
}

/// Starts p4fleet-dpdk-agent for `device` on `addr` with the emulator's
/// traffic settings here (4 flows at 20,000 packets/s from a pcap source
/// in `dir`, one extern core; no hugepages, counting sinks); returns it
/// and its P4Runtime endpoint.
fn spawn_agent(
    dir: &std::path::Path,
    device: u64,
    addr: &str,
) -> (p4fleet_e2e::processes::Proc, SocketAddr) {
    let pcap = dir.join("flows.pcap");
    if !pcap.exists() {
        flows_pcap(&pcap, 4);
    }
    let (log, file) = p4fleet_e2e::processes::log_file(&format!("dpdk-agent-{device}"));
    let mut cmd = Command::new(build_binaries().join("p4fleet-dpdk-agent"));
    cmd.args(["--addr", addr, "--device-id", &device.to_string()])
        .arg("--port-in")
        .arg(format!("source:{}", pcap.display()))
        .args(["--rate-pps", "20000", "--extern-cores", "1"])
        .arg("--workdir")
        .arg(dir.join("work"))
        .stdout(Stdio::piped())
        .stderr(file);
    let mut agent = p4fleet_e2e::processes::Proc::spawn(cmd, log);
    let out = agent.stdout().unwrap();
    let mut out = BufReader::new(out);
    let endpoint = loop {
        let mut line = String::new();
        assert!(
            out.read_line(&mut line).unwrap() > 0,
            "the DPDK agent exited: {}",
            std::fs::read_to_string(&agent.log).unwrap_or_default()
        );
        if let Some(a) = line.trim().strip_prefix("p4runtime listening on ") {
            break a.parse().unwrap();
        }
    };
    std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
    (agent, endpoint)
}

/// An emulator serving Dpdk device `device` alone, with the shared one's
/// traffic settings, on `addrs` (P4Runtime, side channel; None: free
/// ports).
fn spawn_dpdk_emulator(
    device: u64,
    addrs: Option<(SocketAddr, SocketAddr)>,
) -> (p4fleet_e2e::processes::Proc, SocketAddr, SocketAddr) {
    let (p4rt, stats) = addrs.map_or(
        ("127.0.0.1:0".to_string(), "127.0.0.1:0".to_string()),
        |(a, b)| (a.to_string(), b.to_string()),
    );
    let id = device.to_string();
    let emu = p4fleet_e2e::processes::spawn_emulator(
        &build_binaries(),
        &[
            &["--device-ids", &id, "--dpdk-device-ids", &id][..],
            &TRAFFIC,
            &["--p4runtime-addr", &p4rt, "--stats-addr", &stats],
        ]
        .concat(),
    );
    (emu.proc, emu.p4runtime, emu.stats)
}

/// 60-byte frames of `flows` flows as the emulator generates them (flow i:
/// `src_mac(i)` -> `dst_mac(i)`, IPv4/UDP), as a pcap file.
fn flows_pcap(path: &std::path::Path, flows: u32) {
    use p4fleet_emulator::dataplane::packet;
    let mut b = Vec::new();
    b.extend_from_slice(&0xa1b2_c3d4u32.to_le_bytes());
    b.extend_from_slice(&[2, 0, 4, 0]);
    for v in [0u32, 0, 65535, 1] {
        b.extend_from_slice(&v.to_le_bytes());
    }
    for i in 0..flows {
        let mut f = packet::build_frame(60, false);
        f[..6].copy_from_slice(&packet::dst_mac(i));
        f[6..12].copy_from_slice(&packet::src_mac(i));
        for v in [0u32, 0, f.len() as u32, f.len() as u32] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        b.extend_from_slice(&f);
    }
    std::fs::write(path, b).unwrap();
}

impl DpdkDevice {
    /// The shared emulator's Dpdk device `device`, or a new agent serving
    /// it ([`spawn_agent`]).
    async fn new(target: DpdkTarget, device: u64) -> DpdkDevice {
        let (_, env) = env().await;
        if target == DpdkTarget::Emulator {
            return DpdkDevice {
                endpoint: env.p4runtime,
                device,
                target,
                stats: Some(env.stats),
                own: None,
                stopped: None,
            };
        }
        DpdkDevice::own(target, device)
    }

    /// Device `device` served by a process of the scenario's own, so that
    /// it can be restarted: an agent, or an emulator serving it alone.
    fn own(target: DpdkTarget, device: u64) -> DpdkDevice {
        let dir = tempfile::tempdir().unwrap();
        let (proc, endpoint, stats) = match target {
            DpdkTarget::Agent => {
                let (p, e) = spawn_agent(dir.path(), device, "127.0.0.1:0");
                (p, e, None)
            }
            DpdkTarget::Emulator => {
                let (p, e, s) = spawn_dpdk_emulator(device, None);
                (p, e, Some(s))
            }
        };
        DpdkDevice {
            endpoint,
            device,
            target,
            stats,
            own: Some((proc, dir)),
            stopped: None,
        }
    }

    /// Kills the device's process (kill -9: no goodbye on any stream).
    fn stop(&mut self) {
        let (proc, dir) = self.own.take().expect("a device of the scenario's own");
        drop(proc);
        self.stopped = Some(dir);
    }

    /// Starts the stopped device again on the same addresses, empty (no
    /// pipeline, no entries, every extern Sync).
    fn start_again(&mut self) {
        let dir = self.stopped.take().expect("a stopped device");
        let proc = match self.target {
            DpdkTarget::Agent => spawn_agent(dir.path(), self.device, &self.endpoint.to_string()).0,
            DpdkTarget::Emulator => {
                let addrs = (self.endpoint, self.stats.expect("side channel"));
                spawn_dpdk_emulator(self.device, Some(addrs)).0
            }
        };
        self.own = Some((proc, dir));
    }

    /// The data plane's stats in the emulator's `/stats/{device}/dataplane`
    /// shape (the fields these scenarios read); `None` until it runs a
    /// pipeline. From the agent: ExternRuntime GetStats, the real
    /// pipeline's own counters.
    async fn dataplane(&self) -> Option<Value> {
        use p4fleet_proto::externs as xpb;
        if let Some(stats) = self.stats {
            let v = http(
                stats,
                "GET",
                &format!("/stats/{}/dataplane", self.device),
                "",
            );
            return v.get("stats").cloned();
        }
        let mut c = xpb::extern_runtime_client::ExternRuntimeClient::connect(format!(
            "http://{}",
            self.endpoint
        ))
        .await
        .ok()?;
        let s = c
            .get_stats(xpb::GetStatsRequest {
                target: Some(xpb::Target {
                    device_id: self.device,
                    pipeline: String::new(),
                }),
            })
            .await
            .ok()?
            .into_inner();
        let p = s.pipeline?;
        let mode = |m: i32| match xpb::Mode::try_from(m) {
            Ok(xpb::Mode::Sync) => "Sync",
            Ok(xpb::Mode::Async) => "Async",
            Ok(xpb::Mode::Skip) => "Skip",
            _ => "",
        };
        Some(json!({
            "policy_sets": p.policy_sets,
            "tx_per_port": p.tx_ports.iter().map(|t| json!([t.port, t.packets])).collect::<Vec<_>>(),
            "tables": p.tables.iter().map(|t| json!({
                "name": t.name, "entries": t.entries,
                "actions": t.actions.iter().map(|a| json!([a.name, a.action_id, a.packets])).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
            "externs": s.externs.iter().map(|x| json!({
                "name": x.name,
                "policy": {"mode": mode(x.policy.as_ref().map_or(0, |p| p.mode))},
                "async_completed": x.async_completed,
                "drops_pool_exhausted": x.drops_pool_exhausted,
                "drops_queue_full": x.drops_queue_full,
            })).collect::<Vec<_>>(),
        }))
    }
}

/// A new namespace with the l2crypt program and its DPDK artifacts,
/// Switch `<ns>-dpdk` for `dp`'s device, and VirtualSwitch `l2` on it, for
/// the shared operator: a client, the namespace and the Switch's name.
async fn l2crypt_on_dpdk(dp: &DpdkDevice) -> (Client, TestNamespace, String) {
    let (cp, _) = env().await;
    let (client, test_ns) = cp.client_and_namespace().await;
    let ns = test_ns.name();
    let sw_name = format!("{ns}-dpdk");
    let (endpoint, dev) = (dp.endpoint, dp.device);
    create_json(
        &Api::<P4Program>::namespaced(client.clone(), ns),
        json!({
            "apiVersion": "p4fleet.dev/v1alpha1", "kind": "P4Program",
            "metadata": {"name": "l2crypt"},
            "spec": {"p4info": {"inline": l2crypt("p4info.txt")}, "artifacts": {"dpdk": {
                "spec": {"inline": l2crypt("l2crypt.spec")},
                "context": {"inline": l2crypt("context.json")},
                "bfrtJson": {"inline": l2crypt("bfrt.json")}
            }}}
        }),
    )
    .await;
    create_json(
        &Api::<Switch>::all(client.clone()),
        json!({
            "apiVersion": "p4fleet.dev/v1alpha1", "kind": "Switch",
            "metadata": {"name": sw_name},
            "spec": {"target": "Dpdk", "endpoint": endpoint.to_string(), "deviceId": dev, "slots": 1,
                     "capacity": {"cores": 2}}
        }),
    )
    .await;
    create_json(
        &Api::<VirtualSwitch>::namespaced(client.clone(), ns),
        json!({
            "apiVersion": "p4fleet.dev/v1alpha1", "kind": "VirtualSwitch",
            "metadata": {"name": "l2"},
            "spec": {"programRef": "l2crypt", "switchRef": sw_name, "slot": 0}
        }),
    )
    .await;
    (client, test_ns, sw_name)
}

fn tx_port(stats: &Value, port: u64) -> u64 {
    stats["tx_per_port"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|p| p[0].as_u64() == Some(port))
        .and_then(|p| p[1].as_u64())
        .unwrap_or(0)
}

/// The data plane's mode of each extern, by name.
/// A counter of extern `name` in a data plane view (`dataplane()`'s
/// field names, the emulator's EngineStats); 0 when absent.
fn extern_field(stats: &Value, name: &str, field: &str) -> u64 {
    stats["externs"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|x| x["name"] == name)
        .and_then(|x| x[field].as_u64())
        .unwrap_or(0)
}

fn extern_modes(stats: &Value) -> Vec<(String, String)> {
    stats["externs"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|x| {
            (
                x["name"].as_str().unwrap_or("").to_string(),
                x["policy"]["mode"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

async fn policy_where(
    api: &Api<p4fleet_crds::AsyncExternPolicy>,
    what: &str,
    pred: impl Fn(&p4fleet_crds::AsyncExternPolicyStatus) -> bool,
) -> p4fleet_crds::AsyncExternPolicyStatus {
    p4fleet_e2e::status_where(api, "l2", what, Duration::from_secs(60), pred).await
}

/// The `T4P4S_ARGS` of the policy's rendered ConfigMap once it holds
/// `want` (None: until the ConfigMap is gone).
async fn t4p4s_args(cms: &Api<ConfigMap>, want: Option<&str>) -> Option<ConfigMap> {
    wait_for("the T4P4S ConfigMap", Duration::from_secs(60), || async {
        let cm = cms.get_opt("l2-t4p4s").await.map_err(|e| e.to_string())?;
        let args = cm
            .as_ref()
            .and_then(|c| c.data.as_ref())
            .and_then(|d| d.get("T4P4S_ARGS"))
            .cloned();
        if args.as_deref() == want {
            Ok(cm)
        } else {
            Err(format!("T4P4S_ARGS: {args:?}"))
        }
    })
    .await
}

fn ready_reason(st: &p4fleet_crds::AsyncExternPolicyStatus) -> (bool, String) {
    find_condition(&st.conditions, "Ready")
        .map(|c| (c.is_true(), c.reason.clone()))
        .unwrap_or_default()
}

emulator_and_agent_tests! {
    dpdk_switch_scenario:
        dpdk_switch_entries_steer_the_data_plane_and_policies_change_what_runs,
        /// The same scenario on p4fleet-dpdk-agent: the operator, unchanged,
        /// against a real DPDK SWX pipeline.
        dpdk_switch_entries_steer_the_data_plane_and_policies_change_what_runs_on_the_dpdk_agent,
}

async fn dpdk_switch_scenario(target: DpdkTarget) {
    const DEV: u64 = 21;
    let dp = DpdkDevice::new(target, DEV).await;
    // The l2crypt program with its DPDK artifacts, a Dpdk Switch, a
    // VirtualSwitch on it.
    let (client, ns, sw_name) = l2crypt_on_dpdk(&dp).await;
    let ns = ns.name().to_string();

    // The packed config was accepted: the data plane runs and, without
    // entries, floods.
    let s = wait_for("the Dpdk data plane", Duration::from_secs(60), || async {
        match dp.dataplane().await {
            Some(s) if tx_port(&s, 255) > 0 => Ok(s),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    assert_eq!(tx_port(&s, 1), 0);
    // The Switch's asyncExterns capability is the device's answer.
    let sws: Api<Switch> = Api::all(client.clone());
    wait_for("asyncExterns reported", Duration::from_secs(60), || async {
        let sw = sws.get(&sw_name).await.map_err(|e| e.to_string())?;
        let caps = sw.status.and_then(|s| s.capabilities);
        match &caps {
            Some(c) if c.async_externs => Ok(()),
            _ => Err(format!("{caps:?}")),
        }
    })
    .await;

    // An entry through a TableEntrySet changes what it forwards.
    let mac = p4fleet_emulator::dataplane::packet::dst_mac(0);
    let hex: String = mac.iter().map(|b| format!("{b:02x}")).collect();
    let sets = create_set(
        &client,
        &ns,
        json!({
            "name": "dmac", "virtualSwitchRef": "l2", "table": "MyIngress.dmac",
            "entries": [{"match": {"hdr.ethernet.dstAddr": format!("0x{hex}")},
                         "action": "forward", "params": {"port": "1"}}]
        }),
    )
    .await;
    ready_within_60s(&sets, "dmac").await;
    let s = wait_for(
        "flow 0 forwarded to port 1",
        Duration::from_secs(30),
        || async {
            match dp.dataplane().await {
                Some(s) if tx_port(&s, 1) > 0 => Ok(s),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    let dmac = s["tables"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "MyIngress.dmac")
        .unwrap()
        .clone();
    assert_eq!(dmac["entries"], 1);
    let forward = dmac["actions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a[0] == "forward")
        .unwrap();
    assert!(forward[2].as_u64().unwrap() > 0, "{dmac}");

    // Sync -> Async -> Skip: the device runs it, status shows it.
    let policies: Api<p4fleet_crds::AsyncExternPolicy> = Api::namespaced(client.clone(), &ns);
    let policy = |externs: Value| -> p4fleet_crds::AsyncExternPolicy {
        serde_json::from_value(json!({
            "apiVersion": "p4fleet.dev/v1alpha1", "kind": "AsyncExternPolicy",
            "metadata": {"name": "l2"},
            "spec": {"virtualSwitchRef": "l2", "externs": externs}
        }))
        .unwrap()
    };
    // A merge patch of the spec: no conflict with the operator's status writes.
    let replace = |externs: Value| {
        let policies = policies.clone();
        async move {
            policies
                .patch(
                    "l2",
                    &kube::api::PatchParams::default(),
                    &kube::api::Patch::Merge(json!({"spec": {"externs": externs}})),
                )
                .await
                .unwrap();
        }
    };
    policies
        .create(
            &PostParams::default(),
            &policy(json!([{"name": "async_encrypt", "mode": "Sync"}])),
        )
        .await
        .unwrap();
    // The first rate sample comes a second after the data plane starts,
    // the next poll brings it.
    policy_where(&policies, "Sync in force and packets/s measured", |s| {
        ready_reason(s) == (true, "InForce".into())
            && s.mode.as_deref() == Some("Sync")
            && s.packets_per_second.is_some_and(|p| p > 0)
    })
    .await;
    // Rendered as T4P4S launch options into a ConfigMap the policy owns.
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let owner = policies.get("l2").await.unwrap();
    let cm = t4p4s_args(&cms, Some(":l2crypt x_crypto async=off cores=2"))
        .await
        .unwrap();
    let refs = cm.metadata.owner_references.unwrap_or_default();
    assert!(
        refs.iter()
            .any(|r| r.uid == owner.uid().unwrap() && r.controller == Some(true)),
        "{refs:?}"
    );
    let cfg = &cm.data.as_ref().unwrap()["examples.cfg"];
    assert!(
        cfg.lines()
            .any(|l| l == "l2crypt x_crypto async=off cores=2"),
        "{cfg}"
    );
    let st = policies.get("l2").await.unwrap().status.unwrap();
    assert_eq!(st.t4p4s_config_map.as_deref(), Some("l2-t4p4s"));

    replace(json!([
        {"name": "async_encrypt", "mode": "Async", "executor": "DedicatedCores", "cores": 1},
        {"name": "async_decrypt", "mode": "Async", "executor": "InlineCryptoDevice"}
    ]))
    .await;
    let st = policy_where(&policies, "Async in force and measured", |s| {
        ready_reason(s).0
            && s.mode.as_deref() == Some("Async")
            && s.async_ops_per_second.is_some_and(|o| o > 0)
    })
    .await;
    assert_eq!(
        st.modes.as_deref(),
        Some("async_encrypt=Async,async_decrypt=Async")
    );
    let modes = extern_modes(&dp.dataplane().await.unwrap());
    assert!(modes.iter().all(|(_, m)| m == "Async"), "{modes:?}");
    // One extern on a crypto node, one on the inline device: T4P4S has one
    // executor for all, so no rendering, the reason named, the ConfigMap
    // gone (Ready stays: the device runs it).
    t4p4s_args(&cms, None).await;
    let st = policy_where(&policies, "T4P4SOptions False", |s| {
        find_condition(&s.conditions, "T4P4SOptions")
            .is_some_and(|c| c.reason == "NoT4P4SEquivalent")
    })
    .await;
    let msg = &find_condition(&st.conditions, "T4P4SOptions")
        .unwrap()
        .message;
    assert!(msg.contains("spec.externs[*].executor"), "{msg}");
    assert_eq!(st.t4p4s_config_map, None);
    assert!(ready_reason(&st).0);

    replace(json!([
        {"name": "async_encrypt", "mode": "Skip"},
        {"name": "async_decrypt", "mode": "Skip"}
    ]))
    .await;
    policy_where(&policies, "Skip in force", |s| {
        ready_reason(s).0 && s.mode.as_deref() == Some("Skip")
    })
    .await;
    let modes = extern_modes(&dp.dataplane().await.unwrap());
    assert!(modes.iter().all(|(_, m)| m == "Skip"), "{modes:?}");
    t4p4s_args(&cms, Some(":l2crypt x_crypto async=skip cores=2")).await;

    // A context pool of one: a DPDK SWX extern cannot drop its packet, so
    // a packet that finds the pool taken waits (the agent keeps it parked,
    // the emulator's worker holds it and takes fewer packets from rx).
    // Same check on both targets: in force, async calls still completing,
    // nothing dropped.
    replace(json!([{
        "name": "async_encrypt", "mode": "Async", "executor": "DedicatedCores",
        "burstSize": 1, "contextPool": 1, "queueDepth": 1
    }]))
    .await;
    policy_where(
        &policies,
        "pool of one in force, async ops, no drops",
        |s| {
            ready_reason(s).0
                && s.modes
                    .as_deref()
                    .is_some_and(|m| m.contains("async_encrypt=Async"))
                && s.async_ops_per_second.is_some_and(|o| o > 0)
                && s.drops == Some(0)
        },
    )
    .await;
    // The data plane's own view: the pool of one runs, its calls keep
    // completing, and no extern drop is counted.
    let completed = |v: &Value| extern_field(v, "async_encrypt", "async_completed");
    let before = completed(&dp.dataplane().await.unwrap());
    wait_for(
        "async_encrypt completing with a pool of one, no extern drops",
        Duration::from_secs(60),
        || async {
            let v = dp
                .dataplane()
                .await
                .ok_or_else(|| "no data plane stats".to_string())?;
            let drops = extern_field(&v, "async_encrypt", "drops_pool_exhausted")
                + extern_field(&v, "async_encrypt", "drops_queue_full");
            if completed(&v) > before + 100 && drops == 0 {
                Ok(())
            } else {
                Err(format!("{v}"))
            }
        },
    )
    .await;
    t4p4s_args(
        &cms,
        Some(
            ":l2crypt x_crypto async=pd crypto_burst_size=1 crypto_context_pool_size=1 \
             crypto_node=openssl macro=FAKE_CRYPTO_COMMAND_RING_SIZE=1 cores=2",
        ),
    )
    .await;

    // An extern the program does not have: refused, named, nothing changes
    // on the device.
    replace(json!([{"name": "ipsec_encrypt", "mode": "Skip"}])).await;
    let st = policy_where(&policies, "ExternNotFound", |s| {
        ready_reason(s) == (false, "ExternNotFound".into())
    })
    .await;
    let msg = &find_condition(&st.conditions, "Ready").unwrap().message;
    assert!(msg.contains("ipsec_encrypt"), "{msg}");
    let modes = extern_modes(&dp.dataplane().await.unwrap());
    assert!(
        modes.contains(&("async_encrypt".into(), "Async".into())),
        "{modes:?}"
    );
    p4fleet_e2e::wait_event(&client, &ns, None, "ipsec_encrypt").await;

    // Deleting the policy restores the defaults (every extern Sync).
    policies
        .delete("l2", &DeleteParams::default())
        .await
        .unwrap();
    wait_for("the defaults restored", Duration::from_secs(60), || async {
        let modes = extern_modes(&dp.dataplane().await.unwrap());
        let gone = policies
            .get_opt("l2")
            .await
            .map_err(|e| e.to_string())?
            .is_none();
        if gone && modes.iter().all(|(_, m)| m == "Sync") {
            Ok(())
        } else {
            Err(format!("{modes:?}, policy gone: {gone}"))
        }
    })
    .await;
}

/// The `(status, reason, message)` of condition `t` of policy `name`, once
/// `pred` holds for it.
async fn policy_condition(
    api: &Api<p4fleet_crds::AsyncExternPolicy>,
    name: &str,
    t: &str,
    pred: impl Fn(bool, &str, &str) -> bool,
) -> String {
    wait_for(&format!("{name}: {t}"), Duration::from_secs(60), || async {
        let p = api.get(name).await.map_err(|e| e.to_string())?;
        let st = p.status.unwrap_or_default();
        match find_condition(&st.conditions, t) {
            Some(c) if pred(c.is_true(), &c.reason, &c.message) => Ok(c.message.clone()),
            other => Err(format!("{other:?}")),
        }
    })
    .await
}

emulator_and_agent_tests! {
    dpdk_restart_scenario:
        /// A Dpdk device that restarts empty (its process killed and started
        /// again on the same address) gets its pipeline, its entries and its
        /// extern policy back from the operator, without anyone touching the
        /// objects: on the emulator and on p4fleet-dpdk-agent.
        a_restarted_dpdk_device_gets_pipeline_entries_and_policy_back,
        a_restarted_dpdk_agent_gets_pipeline_entries_and_policy_back,
}

/// Entries of `MyIngress.dmac` in the data plane, and the mode it runs
/// `async_encrypt` in, once it runs a pipeline.
async fn dmac_entries_and_encrypt_mode(dp: &DpdkDevice) -> Option<(u64, String)> {
    let s = dp.dataplane().await?;
    let dmac = s["tables"]
        .as_array()?
        .iter()
        .find(|t| t["name"] == "MyIngress.dmac")?["entries"]
        .as_u64()?;
    let mode = extern_modes(&s)
        .into_iter()
        .find(|(n, _)| n == "async_encrypt")?
        .1;
    Some((dmac, mode))
}

/// Waits until the data plane holds the 3 dmac entries of
/// [`dpdk_restart_scenario`] and runs `async_encrypt` Async.
async fn in_force(dp: &DpdkDevice, what: &str) {
    wait_for(what, Duration::from_secs(90), || async {
        match dmac_entries_and_encrypt_mode(dp).await {
            Some((3, mode)) if mode == "Async" => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
}

async fn dpdk_restart_scenario(target: DpdkTarget) {
    // A device of its own: the shared emulator is not restarted.
    const DEV: u64 = 23;
    let mut dp = DpdkDevice::own(target, DEV);
    let (client, ns, sw_name) = l2crypt_on_dpdk(&dp).await;
    let ns = ns.name().to_string();
    let entries: Vec<Value> = (0..3u32)
        .map(|i| {
            let mac = p4fleet_emulator::dataplane::packet::dst_mac(i);
            let hex: String = mac.iter().map(|b| format!("{b:02x}")).collect();
            json!({"match": {"hdr.ethernet.dstAddr": format!("0x{hex}")},
                   "action": "forward", "params": {"port": "1"}})
        })
        .collect();
    let sets = create_set(
        &client,
        &ns,
        json!({"name": "dmac", "virtualSwitchRef": "l2", "table": "MyIngress.dmac",
               "entries": entries}),
    )
    .await;
    let policies: Api<p4fleet_crds::AsyncExternPolicy> = Api::namespaced(client.clone(), &ns);
    let policy: p4fleet_crds::AsyncExternPolicy = serde_json::from_value(json!({
        "apiVersion": "p4fleet.dev/v1alpha1", "kind": "AsyncExternPolicy",
        "metadata": {"name": "l2"},
        "spec": {"virtualSwitchRef": "l2", "externs": [
            {"name": "async_encrypt", "mode": "Async", "executor": "DedicatedCores", "cores": 1}]}
    }))
    .unwrap();
    policies
        .create(&PostParams::default(), &policy)
        .await
        .unwrap();
    in_force(&dp, "3 dmac entries and async_encrypt Async").await;
    p4fleet_e2e::set_status_where(&sets, "dmac", "dmac Ready", Duration::from_secs(60), |s| {
        is(s, "Ready", true)
    })
    .await;

    dp.stop();
    let sws: Api<Switch> = Api::all(client.clone());
    switch_unreachable(&sws, &sw_name).await;
    dp.start_again();
    let restarted = Instant::now();
    assert_eq!(
        dmac_entries_and_encrypt_mode(&dp).await,
        None,
        "{target:?}: restarted empty, no pipeline"
    );
    in_force(
        &dp,
        "3 dmac entries and async_encrypt Async again after the restart",
    )
    .await;
    eprintln!(
        "{target:?}: pipeline, entries and policy back {:?} after the restart",
        restarted.elapsed()
    );
    policy_where(&policies, "the policy Ready, async_encrypt Async", |s| {
        let modes = s.modes.as_deref().unwrap_or_default();
        ready_reason(s).0 && modes.contains("async_encrypt=Async")
    })
    .await;
    p4fleet_e2e::set_status_where(&sets, "dmac", "dmac Ready", Duration::from_secs(60), |s| {
        is(s, "Ready", true) && s.applied == 3
    })
    .await;
    Api::<Switch>::all(client.clone())
        .delete(&sw_name, &DeleteParams::default())
        .await
        .unwrap();
}

emulator_and_agent_tests! {
    two_policies_scenario:
        /// Two AsyncExternPolicies naming one VirtualSwitch: its device holds one
        /// extern policy. The older keeps it and is applied, the younger is held
        /// and says by whom, both name each other, and the device is left alone
        /// (no SetPolicy back and forth). Deleting the held one changes nothing
        /// on the device; deleting the holder hands the device to the other.
        two_policies_of_one_virtual_switch_one_holds_it_and_the_device_is_left_alone,
        /// The same on p4fleet-dpdk-agent: SetPolicy calls counted by the agent.
        two_policies_of_one_virtual_switch_on_the_dpdk_agent,
}

/// The mode the data plane runs `async_encrypt` in.
async fn mode_of_encrypt(dp: &DpdkDevice) -> Option<String> {
    let modes = dp
        .dataplane()
        .await
        .map(|s| extern_modes(&s))
        .unwrap_or_default();
    modes
        .into_iter()
        .find(|(n, _)| n == "async_encrypt")
        .map(|(_, m)| m)
}

/// SetPolicy calls the data plane applied.
async fn policy_sets(dp: &DpdkDevice) -> u64 {
    dp.dataplane().await.expect("a running pipeline")["policy_sets"]
        .as_u64()
        .unwrap()
}

async fn two_policies_scenario(target: DpdkTarget) {
    const DEV: u64 = 22;
    let dp = DpdkDevice::new(target, DEV).await;
    let (client, ns, _) = l2crypt_on_dpdk(&dp).await;
    let ns = ns.name().to_string();
    let policies: Api<p4fleet_crds::AsyncExternPolicy> = Api::namespaced(client.clone(), &ns);
    let policy = |name: &str, mode: &str| -> p4fleet_crds::AsyncExternPolicy {
        let mut e = json!({"name": "async_encrypt", "mode": mode});
        if mode == "Async" {
            e["executor"] = json!("DedicatedCores");
            e["cores"] = json!(1);
        }
        serde_json::from_value(json!({
            "apiVersion": "p4fleet.dev/v1alpha1", "kind": "AsyncExternPolicy",
            "metadata": {"name": name},
            "spec": {"virtualSwitchRef": "l2", "externs": [e]}
        }))
        .unwrap()
    };
    policies
        .create(&PostParams::default(), &policy("first", "Skip"))
        .await
        .unwrap();
    policy_condition(&policies, "first", "Ready", |ok, _, _| ok).await;
    assert_eq!(mode_of_encrypt(&dp).await.as_deref(), Some("Skip"));
    // A second later (creation times have seconds): the younger.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    policies
        .create(&PostParams::default(), &policy("second", "Sync"))
        .await
        .unwrap();
    let held = policy_condition(&policies, "second", "Applied", |ok, reason, _| {
        !ok && reason == "OwnershipConflict"
    })
    .await;
    assert!(
        held.contains("also set by AsyncExternPolicy first")
            && held.contains("first is older and keeps it, so this policy is held"),
        "{held}"
    );
    let holder = policy_condition(&policies, "first", "ResolvedRefs", |ok, reason, _| {
        !ok && reason == "OwnershipConflict"
    })
    .await;
    assert!(
        holder.contains("AsyncExternPolicy second; this policy is older and keeps it"),
        "{holder}"
    );
    policy_condition(&policies, "first", "Applied", |ok, _, _| ok).await;
    // Left alone: no SetPolicy, the holder's mode throughout.
    let before = policy_sets(&dp).await;
    for _ in 0..8 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(mode_of_encrypt(&dp).await.as_deref(), Some("Skip"));
    }
    assert_eq!(
        policy_sets(&dp).await,
        before,
        "SetPolicy calls while both claim the device"
    );
    // The held one goes: the device keeps the holder's policy.
    policies
        .delete("second", &DeleteParams::default())
        .await
        .unwrap();
    policy_condition(&policies, "first", "ResolvedRefs", |ok, _, _| ok).await;
    wait_for("second gone", Duration::from_secs(60), || async {
        match policies.get_opt("second").await {
            Ok(None) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    assert_eq!(mode_of_encrypt(&dp).await.as_deref(), Some("Skip"));
    assert_eq!(
        policy_sets(&dp).await,
        before,
        "deleting the held policy touched the device"
    );
    // The holder goes while another waits: the other takes the device.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    policies
        .create(&PostParams::default(), &policy("third", "Async"))
        .await
        .unwrap();
    policy_condition(&policies, "third", "Applied", |ok, reason, _| {
        !ok && reason == "OwnershipConflict"
    })
    .await;
    policies
        .delete("first", &DeleteParams::default())
        .await
        .unwrap();
    policy_condition(&policies, "third", "Ready", |ok, _, _| ok).await;
    assert_eq!(mode_of_encrypt(&dp).await.as_deref(), Some("Async"));
}
