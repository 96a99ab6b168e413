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

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Event};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::{Client, ResourceExt};
use p4fleet_crds::{
    P4Program, Switch, TableEntrySet, TableEntrySetStatus, VirtualSwitch, find_condition,
};
use p4fleet_e2e::processes::{build_binaries, target_dir};
use p4fleet_e2e::{ControlPlane, TestNamespace, repo_root, wait_for};
use p4fleet_model::entries::{Entry, LineParser, Style, TableSchema, WriteOp, format_entries};
use serde_json::{Value, json};

/// Addresses of the shared child processes.
struct Env {
    p4runtime: SocketAddr,
    bfrt: SocketAddr,
    stats: SocketAddr,
}

/// The kind of Switch a scenario runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Bmv2 target over P4Runtime.
    Bmv2,
    /// Tofino target over BFRT.
    Tofino,
}

fn with_pdeathsig(cmd: &mut Command) {
    // SAFETY: prctl is async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

fn start(kubeconfig: PathBuf) -> Env {
    let bin = build_binaries();
    let logs = target_dir().join("e2e-logs");
    std::fs::create_dir_all(&logs).unwrap();
    let tag = std::process::id();

    let mut emu = Command::new(bin.join("p4fleet-emulator"));
    emu.args(["--device-ids", "1,2,3,4,5,11,12,13,14"])
        .args(["--bfrt-addr", "127.0.0.1:0"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(logs.join(format!("emulator-{tag}.log"))).unwrap());
    with_pdeathsig(&mut emu);
    let mut emu = emu.spawn().expect("spawn p4fleet-emulator");
    let mut out = BufReader::new(emu.stdout.take().unwrap());
    let (mut p4runtime, mut bfrt, mut stats) = (None, None, None);
    while p4runtime.is_none() || bfrt.is_none() || stats.is_none() {
        let mut line = String::new();
        assert!(out.read_line(&mut line).unwrap() > 0, "emulator exited");
        if let Some(a) = line.trim().strip_prefix("p4runtime listening on ") {
            p4runtime = Some(a.parse().unwrap());
        }
        if let Some(a) = line.trim().strip_prefix("bfrt listening on ") {
            bfrt = Some(a.parse().unwrap());
        }
        if let Some(a) = line.trim().strip_prefix("stats listening on ") {
            stats = Some(a.parse().unwrap());
        }
    }
    std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));

    let log = std::fs::File::create(logs.join(format!("operator-{tag}.log"))).unwrap();
    let mut op = Command::new(bin.join("p4fleet"));
    op.args([
        "operator",
        "--listen-addr",
        "127.0.0.1:0",
        "--resync-seconds",
        "30",
        "--log-level",
        "info,p4fleet=debug",
    ])
    .env("KUBECONFIG", kubeconfig)
    .stdin(Stdio::null())
    .stdout(log.try_clone().unwrap())
    .stderr(log);
    with_pdeathsig(&mut op);
    let op = op.spawn().expect("spawn p4fleet operator");
    // Keep the children owned by this (parked) thread for PDEATHSIG.
    std::mem::forget((emu, op));
    Env {
        p4runtime: p4runtime.unwrap(),
        bfrt: bfrt.unwrap(),
        stats: stats.unwrap(),
    }
}

async fn env() -> (&'static ControlPlane, &'static Env) {
    static ENV: OnceLock<Env> = OnceLock::new();
    let cp = ControlPlane::shared().await;
    let kubeconfig = cp.kubeconfig_path().to_path_buf();
    // get_or_init blocks concurrent tests until the first has started the
    // children, so there is exactly one emulator and one operator.
    let env = tokio::task::spawn_blocking(move || {
        ENV.get_or_init(|| {
            let (tx, rx) = std::sync::mpsc::channel();
            // Children get PDEATHSIG when their spawning thread exits: spawn
            // them from a thread that lives as long as the process.
            std::thread::spawn(move || {
                let _ = tx.send(start(kubeconfig));
                loop {
                    std::thread::park();
                }
            });
            rx.recv().expect("emulator and operator started")
        })
    })
    .await
    .unwrap();
    (cp, env)
}

// --- the emulator's HTTP side channel --------------------------------------

fn http(addr: SocketAddr, method: &str, path: &str, body: &str) -> Value {
    let mut s = TcpStream::connect(addr).unwrap();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    let body = resp.split_once("\r\n\r\n").map(|x| x.1).unwrap_or("");
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{method} {path}: {e}: {resp}"))
}

fn stats(env: &Env, device: u64) -> Value {
    http(env.stats, "GET", &format!("/stats/{device}"), "")
}

fn stat(env: &Env, device: u64, field: &str) -> u64 {
    stats(env, device)[field].as_u64().unwrap_or(0)
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
async fn setup_target(client: &Client, env: &Env, ns: &str, kind: Kind, device: u64) -> String {
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
        Kind::Tofino => ("Tofino", env.bfrt),
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
    let api: Api<TableEntrySet> = Api::namespaced(client.clone(), ns);
    let name = spec["name"].as_str().unwrap().to_string();
    let mut spec = spec;
    spec.as_object_mut().unwrap().remove("name");
    let s: TableEntrySet = serde_json::from_value(json!({
        "apiVersion": "p4fleet.dev/v1alpha1", "kind": "TableEntrySet",
        "metadata": {"name": name}, "spec": spec
    }))
    .unwrap();
    api.create(&PostParams::default(), &s)
        .await
        .unwrap_or_else(|e| panic!("create TableEntrySet {name}: {e}"));
    api
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
    let mut text = String::from("#! fields hdr.ipv4.srcAddr hdr.ipv4.dstAddr\n#! action allow\n");
    for i in start..start + n {
        text.push_str(&format!(
            "10.{}.{}.{} 172.16.0.1 {}\n",
            (i >> 16) & 255,
            (i >> 8) & 255,
            i & 255,
            (i + shift) % 500
        ));
    }
    let mut p = LineParser::new(schema);
    text.lines()
        .filter_map(|l| p.parse_line(l).unwrap())
        .collect()
}

fn format(schema: &TableSchema, es: &[Entry]) -> String {
    format_entries(schema, es, Style::Compact).unwrap()
}

async fn status_where(
    api: &Api<TableEntrySet>,
    name: &str,
    what: &str,
    timeout: Duration,
    pred: impl Fn(&TableEntrySetStatus) -> bool,
) -> TableEntrySetStatus {
    wait_for(what, timeout, || async {
        let s = api.get(name).await.map_err(|e| e.to_string())?;
        let st = s.status.unwrap_or_default();
        if pred(&st) {
            Ok(st)
        } else {
            Err(format!("{st:?}"))
        }
    })
    .await
}

fn cond<'a>(st: &'a TableEntrySetStatus, t: &str) -> Option<&'a p4fleet_crds::Condition> {
    find_condition(&st.conditions, t)
}

fn is(st: &TableEntrySetStatus, t: &str, ok: bool) -> bool {
    cond(st, t)
        .is_some_and(|c| c.is_true() == ok && c.status != p4fleet_crds::ConditionStatus::Unknown)
}

// --- tests ------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thirty_thousand_entries_sync_change_repair_and_delete_bmv2() {
    thirty_thousand_entries_sync_change_repair_and_delete(Kind::Bmv2, 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thirty_thousand_entries_sync_change_repair_and_delete_tofino() {
    thirty_thousand_entries_sync_change_repair_and_delete(Kind::Tofino, 11).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exclusive_set_removes_a_foreign_entry_bmv2() {
    exclusive_set_removes_a_foreign_entry(Kind::Bmv2, 2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exclusive_set_removes_a_foreign_entry_tofino() {
    exclusive_set_removes_a_foreign_entry(Kind::Tofino, 12).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gives_conditions_and_valid_entries_still_apply_bmv2() {
    bad_input_gives_conditions_and_valid_entries_still_apply(Kind::Bmv2, 3).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gives_conditions_and_valid_entries_still_apply_tofino() {
    bad_input_gives_conditions_and_valid_entries_still_apply(Kind::Tofino, 13).await;
}

async fn thirty_thousand_entries_sync_change_repair_and_delete(kind: Kind, dev: u64) {
    let (cp, env) = env().await;
    let client = cp.client().await;
    let ns = TestNamespace::new(&client).await;
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
    let st = status_where(
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
    assert_eq!(st.desired, 30_000);
    assert_eq!(st.failed, 0);
    assert!(st.rate.as_deref().is_some_and(|r| r.ends_with("/s")));
    assert_eq!(st.last_sync_updates, Some(30_000));
    assert_eq!(stat(env, dev, "entries"), 30_000);
    assert_eq!(stat(env, dev, "inserts"), 30_000);
    let sync_time = st.last_sync_time.clone();

    // Idle resyncs (3 s) leave the status alone.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let idle = api.get("fw30k").await.unwrap().status.unwrap();
    assert_eq!(idle.last_sync_time, sync_time);
    assert_eq!(idle.drift_corrected, 0);

    // Change 100 entries in fw-b: exactly 100 modifies.
    let before = stats(env, dev);
    let mut b = all[15_000..].to_vec();
    let changed = entries(&schema, 15_000, 100, 7);
    b[..100].clone_from_slice(&changed);
    config_map(&client, &ns, "fw-b", format(&schema, &b)).await;
    let st = status_where(
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
    let st = status_where(
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
    api.delete("fw30k", &DeleteParams::default()).await.unwrap();
    wait_for("set gone", Duration::from_secs(60), || async {
        match api.get_opt("fw30k").await.map_err(|e| e.to_string())? {
            None => Ok(()),
            Some(_) => Err("still there".into()),
        }
    })
    .await;
    assert_eq!(stat(env, dev, "entries"), 0);

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
    let client = cp.client().await;
    let ns = TestNamespace::new(&client).await;
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
    let st = status_where(
        &api,
        "owner",
        "Exclusive Ready",
        Duration::from_secs(60),
        |s| is(s, "Ready", true),
    )
    .await;
    assert_eq!((st.applied, st.last_sync_updates), (2, Some(3)));
    assert_eq!(stat(env, dev, "entries"), 2);
    assert_eq!(stat(env, dev, "deletes"), 1);
}

async fn bad_input_gives_conditions_and_valid_entries_still_apply(kind: Kind, dev: u64) {
    let (cp, env) = env().await;
    let client = cp.client().await;
    let ns = TestNamespace::new(&client).await;
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
    let st = status_where(
        &api,
        "bad",
        "InvalidEntries",
        Duration::from_secs(60),
        |s| is(s, "Valid", false) && s.applied == 2,
    )
    .await;
    let valid = cond(&st, "Valid").unwrap();
    assert_eq!(valid.reason, "InvalidEntries");
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
    assert_eq!((st.desired, st.failed), (2, 5));
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
    let st = status_where(
        &api,
        "missing-cm",
        "ConfigMapNotFound",
        Duration::from_secs(60),
        |s| is(s, "ResolvedRefs", false) && s.applied == 1,
    )
    .await;
    let c = cond(&st, "ResolvedRefs").unwrap();
    assert_eq!(c.reason, "ConfigMapNotFound");
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
    let st = status_where(
        &api,
        "no-table",
        "UnknownTable",
        Duration::from_secs(60),
        |s| is(s, "Valid", false),
    )
    .await;
    let c = cond(&st, "Valid").unwrap();
    assert_eq!(c.reason, "UnknownTable");
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
async fn plant_foreign_entry(env: &Env, kind: Kind, dev: u64) {
    match kind {
        Kind::Bmv2 => {
            let foreign = "table_id: 49661089\nmatch { field_id: 1 exact { value: \"\\xc0\\xa8\\x01\\x01\" } }\nmatch { field_id: 2 exact { value: \"\\xc0\\xa8\\x01\\x02\" } }\naction { action { action_id: 29481460 } }\n";
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
                p4fleet_client::Target::bfrt(env.bfrt.to_string(), dev),
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
