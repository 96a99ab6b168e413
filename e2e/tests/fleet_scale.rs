//! Fleet-scale behaviour of the operator (issue 14): a selector
//! TableEntrySet syncs its targets in parallel, a slow device stalls
//! neither the other targets of its set nor other sets, and reconciles read
//! Switches, VirtualSwitches and P4Programs from the shared caches (the API
//! server counts no LIST or GET of them during a burst of reconciles); a
//! deleted Switch's connection is forgotten.
//!
//! Two emulator processes: three fast devices, and one whose Writes answer
//! only after 12 s (`--profile custom:12000000:0`; a Write is applied at
//! once, its answer waits). One test function, so that nothing else in
//! this binary talks to the API server while requests are counted.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::Command;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Client;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use p4fleet_crds::{P4Program, Switch, TableEntrySet, VirtualSwitch, find_condition};
use p4fleet_e2e::processes::{Proc, build_binaries, log_file, spawn_emulator};
use p4fleet_e2e::{ControlPlane, TestNamespace, create_json, firewall_lines, repo_root, wait_for};
use serde_json::json;

/// Entries per target of the selector set.
const N: usize = 300;

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

/// HTTP/1.0 GET of `path` on `addr`: the body.
fn http_get(addr: SocketAddr, path: &str) -> Option<String> {
    let mut s = TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").ok()?;
    let mut resp = String::new();
    s.read_to_string(&mut resp).ok()?;
    resp.split_once("\r\n\r\n").map(|(_, b)| b.to_string())
}

/// Entries the emulator at `stats` holds on `device`.
fn entries_on(stats: SocketAddr, device: u64) -> u64 {
    let body = http_get(stats, &format!("/stats/{device}")).unwrap_or_default();
    let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
    v["entries"].as_u64().unwrap_or(0)
}

/// Sum of the Prometheus samples named `name` whose labels include every
/// `key="value"` of `labels`.
fn sample_sum(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")))
        .filter(|l| {
            labels
                .iter()
                .all(|(k, v)| l.contains(&format!("{k}=\"{v}\"")))
        })
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum::<f64>()
        // An empty f64 sum is -0.0; print 0.
        + 0.0
}

/// GETs and LISTs of the cached kinds the API server has answered, by
/// `verb/resource`.
fn cached_kind_reads(cp: &ControlPlane) -> BTreeMap<String, f64> {
    let out = cp.kubectl(["get", "--raw", "/metrics"]);
    assert!(out.status.success(), "{}", p4fleet_e2e::output_text(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    let mut counts = BTreeMap::new();
    for resource in ["switches", "virtualswitches", "p4programs"] {
        for verb in ["LIST", "GET"] {
            let n = sample_sum(
                &text,
                "apiserver_request_total",
                &[("resource", resource), ("verb", verb), ("subresource", "")],
            );
            counts.insert(format!("{verb}/{resource}"), n);
        }
    }
    counts
}

/// The operator's `p4fleet_reconciles_total` per kind.
fn reconciles(metrics: SocketAddr, kind: &str) -> f64 {
    let text = http_get(metrics, "/metrics").unwrap_or_default();
    sample_sum(&text, "p4fleet_reconciles_total", &[("kind", kind)])
}

/// Ready condition of a set: (status, reason).
async fn ready(api: &Api<TableEntrySet>, name: &str) -> (bool, String) {
    let Ok(s) = api.get(name).await else {
        return (false, "not found".into());
    };
    let st = s.status.unwrap_or_default();
    match find_condition(&st.conditions, "Ready") {
        Some(c) => (c.is_true(), c.reason.clone()),
        None => (false, "no Ready".into()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn selector_sets_sync_in_parallel_past_a_slow_device_without_listing() {
    let cp = ControlPlane::shared().await;
    let client: Client = cp.client().await;
    let ns = TestNamespace::new(&client).await;
    let ns_name = ns.name().to_string();
    let bin = build_binaries();
    let fast = spawn_emulator(&bin, &["--device-ids", "1,2,3"]);
    let slow = spawn_emulator(
        &bin,
        &["--device-ids", "1", "--profile", "custom:12000000:0"],
    );
    let metrics: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let (log, file) = log_file("fleet-operator");
    let mut cmd = Command::new(bin.join("p4fleet"));
    cmd.args(["operator", "--listen-addr", &metrics.to_string()])
        .args([
            "--log-level",
            "info,p4fleet=debug",
            "--resync-seconds",
            "600",
        ])
        .env("KUBECONFIG", cp.kubeconfig_path())
        .stdout(file.try_clone().unwrap())
        .stderr(file);
    let _operator = Proc::spawn(cmd, log);

    // A program, four Switches (a-slow sorts first: a sequential sync
    // would wait for it before touching the others), a VirtualSwitch on
    // each, all labelled for the selector.
    let progs: Api<P4Program> = Api::namespaced(client.clone(), &ns_name);
    let p4info = std::fs::read_to_string(repo_root().join("examples/firewall/p4info.txt")).unwrap();
    create_json(
        &progs,
        json!({"apiVersion": "p4fleet.dev/v1alpha1", "kind": "P4Program",
            "metadata": {"name": "firewall"}, "spec": {"p4info": {"inline": p4info}}}),
    )
    .await;
    let sws: Api<Switch> = Api::all(client.clone());
    let vss: Api<VirtualSwitch> = Api::namespaced(client.clone(), &ns_name);
    let targets = [
        ("a-slow", slow.p4runtime, 1u64),
        ("b", fast.p4runtime, 1),
        ("c", fast.p4runtime, 2),
        ("d", fast.p4runtime, 3),
    ];
    for (name, endpoint, device) in targets {
        let sw = format!("{ns_name}-{name}");
        create_json(
            &sws,
            json!({"apiVersion": "p4fleet.dev/v1alpha1", "kind": "Switch",
                "metadata": {"name": sw},
                "spec": {"target": "Bmv2", "endpoint": endpoint.to_string(), "deviceId": device}}),
        )
        .await;
        create_json(
            &vss,
            json!({"apiVersion": "p4fleet.dev/v1alpha1", "kind": "VirtualSwitch",
                "metadata": {"name": name, "labels": {"fleet": "all"}},
                "spec": {"programRef": "firewall", "switchRef": sw, "slot": 0}}),
        )
        .await;
    }
    // Every target loaded first: a set created earlier could start a
    // sync with only some of them, and that sync may be the slow one.
    wait_for(
        "the four pipelines loaded",
        Duration::from_secs(90),
        || async {
            let mut waiting = Vec::new();
            for (name, _, _) in targets {
                let vs = vss.get(name).await.map_err(|e| e.to_string())?;
                let st = vs.status.unwrap_or_default();
                match find_condition(&st.conditions, "PipelineLoaded") {
                    Some(c) if c.is_true() => {}
                    _ => waiting.push(name),
                }
            }
            match waiting.is_empty() {
                true => Ok(()),
                false => Err(format!("not loaded: {waiting:?}")),
            }
        },
    )
    .await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns_name);
    for (name, text) in [
        ("spread", firewall_lines(0, N)),
        ("solo", firewall_lines(100_000, 50)),
    ] {
        let cm = ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            data: Some([("entries".to_string(), text)].into()),
            ..Default::default()
        };
        cms.create(&PostParams::default(), &cm).await.unwrap();
    }
    let sets: Api<TableEntrySet> = Api::namespaced(client.clone(), &ns_name);
    create_json(
        &sets,
        json!({"apiVersion": "p4fleet.dev/v1alpha1", "kind": "TableEntrySet",
            "metadata": {"name": "spread"},
            "spec": {"virtualSwitchSelector": {"matchLabels": {"fleet": "all"}},
                "table": "MyIngress.firewall", "entriesFrom": [{"configMap": "spread"}]}}),
    )
    .await;

    // The fast targets are filled while the slow one's write is still
    // unanswered: the set is not Ready yet, its other targets are done.
    wait_for(
        "fast devices filled while the selector set still waits for the slow one",
        Duration::from_secs(90),
        || async {
            let counts: Vec<u64> = (1..=3).map(|d| entries_on(fast.stats, d)).collect();
            let (is_ready, reason) = ready(&sets, "spread").await;
            if counts.iter().all(|&c| c == N as u64) && !is_ready {
                Ok(())
            } else {
                Err(format!(
                    "fast devices {counts:?}, spread Ready={is_ready} ({reason})"
                ))
            }
        },
    )
    .await;
    // Another set on a fast device becomes Ready meanwhile.
    create_json(
        &sets,
        json!({"apiVersion": "p4fleet.dev/v1alpha1", "kind": "TableEntrySet",
            "metadata": {"name": "solo"},
            "spec": {"virtualSwitchRef": "b", "table": "MyIngress.firewall",
                "entriesFrom": [{"configMap": "solo"}]}}),
    )
    .await;
    wait_for(
        "a set on a fast device Ready while the slow write is pending",
        Duration::from_secs(60),
        || async {
            let solo = ready(&sets, "solo").await;
            let spread = ready(&sets, "spread").await;
            match (solo.0, spread.0) {
                (true, false) => Ok(()),
                (true, true) => Err("spread became Ready first: the slow write is over".into()),
                _ => Err(format!("solo {solo:?}, spread {spread:?}")),
            }
        },
    )
    .await;
    // The slow device answers in the end and the selector set is Ready.
    wait_for("spread Ready", Duration::from_secs(90), || async {
        match ready(&sets, "spread").await {
            (true, _) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    assert_eq!(entries_on(slow.stats, 1), N as u64);
    assert_eq!(entries_on(fast.stats, 1), N as u64 + 50);

    // A burst of reconciles of every kind reads no Switch, VirtualSwitch
    // or P4Program from the API server.
    let before = cached_kind_reads(cp);
    assert!(
        before["LIST/switches"] >= 1.0,
        "the caches' initial LIST is counted: {before:?}"
    );
    let kinds = ["Switch", "VirtualSwitch", "TableEntrySet", "P4Program"];
    let reconciled: Vec<f64> = kinds.iter().map(|k| reconciles(metrics, k)).collect();
    let label = Patch::Merge(json!({"metadata": {"labels": {"burst": "1"}}}));
    let pp = PatchParams::default();
    for (name, _, _) in targets {
        sws.patch(&format!("{ns_name}-{name}"), &pp, &label)
            .await
            .unwrap();
        vss.patch(name, &pp, &label).await.unwrap();
    }
    progs.patch("firewall", &pp, &label).await.unwrap();
    for set in ["spread", "solo"] {
        sets.patch(set, &pp, &label).await.unwrap();
    }
    wait_for(
        "a reconcile of every kind after the burst",
        Duration::from_secs(60),
        || async {
            let now: Vec<f64> = kinds.iter().map(|k| reconciles(metrics, k)).collect();
            let moved = now.iter().zip(&reconciled).all(|(n, b)| n >= &(b + 1.0));
            if moved {
                Ok(())
            } else {
                Err(format!("{kinds:?}: {reconciled:?} -> {now:?}"))
            }
        },
    )
    .await;
    // Let the burst's follow-up reconciles (status writes) settle.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after = cached_kind_reads(cp);
    let now: Vec<f64> = kinds.iter().map(|k| reconciles(metrics, k)).collect();
    eprintln!(
        "reconciles during the burst {kinds:?}: {reconciled:?} -> {now:?}; API reads of cached kinds: {before:?} -> {after:?}"
    );
    assert_eq!(before, after, "GET/LIST of cached kinds during reconciles");

    // A deleted Switch's connection is closed and its metric series
    // dropped (forget_deleted reads the Switch cache's feed).
    let gone = format!("{ns_name}-d");
    let connected = || {
        let text = http_get(metrics, "/metrics").unwrap_or_default();
        let label = format!("switch=\"{gone}\"");
        text.lines()
            .any(|l| l.starts_with("p4fleet_switch_connected{") && l.contains(&label))
    };
    assert!(connected(), "a series for {gone} before its deletion");
    sws.delete(&gone, &Default::default()).await.unwrap();
    wait_for(
        "the deleted Switch forgotten",
        Duration::from_secs(30),
        || async {
            match connected() {
                false => Ok(()),
                true => Err("p4fleet_switch_connected still has it".to_string()),
            }
        },
    )
    .await;

    ns.delete(&client).await.ok();
}
