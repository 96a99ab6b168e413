//! TableEntrySet entry sources against a real kube-apiserver, the operator
//! binary and an emulated bmv2: ConfigMaps by list and by label selector,
//! gzip-compressed `binaryData`, a source change fetched and parsed once,
//! duplicates across sources, and the operator's /livez answering within
//! the chart's probe timeout while a ~1 MiB source is parsed and a
//! malformed one (a 300,000-digit value) is rejected. Events for objects
//! with names too long for kube's Recorder.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use flate2::Compression;
use flate2::write::GzEncoder;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ObjectMeta, PostParams};
use kube::{Client, ResourceExt};
use p4fleet_crds::{TableEntrySet, TableEntrySetStatus, find_condition};
use p4fleet_e2e::processes::{Fleet, fleet};
use p4fleet_e2e::{
    Bmv2Slot, ControlPlane, bmv2_virtual_switch, create_set, event_about, firewall_lines,
    p4info_program, repo_root, wait_for,
};
use serde_json::{Value, json};

async fn env() -> (&'static ControlPlane, &'static Fleet) {
    fleet(&["--device-ids", "1,2,3,4"], "operator-entry-sources", 3).await
}

/// GET over HTTP/1.0 with a deadline: (status, body).
fn http_get(addr: SocketAddr, path: &str, timeout: Duration) -> Result<(u16, String), String> {
    let mut s = TcpStream::connect_timeout(&addr, timeout).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(timeout))
        .map_err(|e| e.to_string())?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").map_err(|e| e.to_string())?;
    let mut resp = String::new();
    s.read_to_string(&mut resp).map_err(|e| e.to_string())?;
    let code = resp
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| format!("bad response {resp:?}"))?;
    let body = resp.split_once("\r\n\r\n").map(|x| x.1).unwrap_or("");
    Ok((code, body.to_string()))
}

/// A counter of the operator's /metrics for namespace `ns`.
fn metric(env: &Fleet, name: &str, ns: &str) -> u64 {
    let (_, body) = http_get(env.metrics, "/metrics", Duration::from_secs(5)).unwrap();
    let prefix = format!("{name}{{namespace=\"{ns}\"}} ");
    body.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .map(|v| v.trim().parse().unwrap())
        .unwrap_or(0)
}

fn device_entries(env: &Fleet, device: u64) -> u64 {
    let (_, body) = http_get(
        env.stats,
        &format!("/stats/{device}"),
        Duration::from_secs(5),
    )
    .unwrap();
    let v: Value = serde_json::from_str(&body).unwrap();
    v["entries"].as_u64().unwrap_or(0)
}

/// A firewall P4Program, a Switch on emulator device `device` and a
/// VirtualSwitch `fw` on it.
async fn setup_target(client: &Client, env: &Fleet, ns: &str, device: u64) {
    let p4info = std::fs::read_to_string(repo_root().join("examples/firewall/p4info.txt")).unwrap();
    p4info_program(client, ns, "firewall", &p4info).await;
    let sw = format!("{ns}-sw");
    let slot = Bmv2Slot {
        switch: &sw,
        virtual_switch: "fw",
        program: "firewall",
        endpoint: env.p4runtime,
        device,
    };
    bmv2_virtual_switch(client, ns, slot).await;
}

fn gzip(text: &str) -> Vec<u8> {
    let mut e = GzEncoder::new(Vec::new(), Compression::default());
    e.write_all(text.as_bytes()).unwrap();
    e.finish().unwrap()
}

/// Creates or replaces ConfigMap `name`.
async fn put_config_map(
    client: &Client,
    ns: &str,
    name: &str,
    labels: &[(&str, &str)],
    data: Option<&str>,
    gz: Option<Vec<u8>>,
) {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let mut cm = ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some(
                labels
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            ..Default::default()
        },
        data: data.map(|d| [("entries".to_string(), d.to_string())].into()),
        binary_data: gz
            .map(|b| [("entries.txt.gz".to_string(), k8s_openapi::ByteString(b))].into()),
        ..Default::default()
    };
    match api.get_opt(name).await.unwrap() {
        None => {
            api.create(&PostParams::default(), &cm).await.unwrap();
        }
        Some(old) => {
            cm.metadata.resource_version = old.resource_version();
            api.replace(name, &PostParams::default(), &cm)
                .await
                .unwrap();
        }
    }
}

async fn status_where(
    api: &Api<TableEntrySet>,
    name: &str,
    what: &str,
    pred: impl Fn(&TableEntrySetStatus) -> bool,
) -> TableEntrySetStatus {
    let timeout = Duration::from_secs(120);
    p4fleet_e2e::set_status_where(api, name, what, timeout, pred).await
}

fn ready(st: &TableEntrySetStatus) -> bool {
    find_condition(&st.conditions, "Ready").is_some_and(|c| c.is_true())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sources_by_list_selector_and_gzip_are_parsed_once_per_version() {
    let (cp, env) = env().await;
    let (client, ns) = cp.client_and_namespace().await;
    let ns = ns.name().to_string();
    setup_target(&client, env, &ns, 1).await;
    put_config_map(
        &client,
        &ns,
        "fw-list",
        &[],
        Some(&firewall_lines(0, 1000)),
        None,
    )
    .await;
    let sel = [("p4fleet.dev/set", "fw")];
    for (name, start) in [("part-1", 1000), ("part-2", 2000)] {
        let gz = gzip(&firewall_lines(start, 1000));
        put_config_map(&client, &ns, name, &sel, None, Some(gz)).await;
    }
    // Not selected: another label.
    put_config_map(
        &client,
        &ns,
        "other",
        &[("p4fleet.dev/set", "x")],
        Some(&firewall_lines(9000, 10)),
        None,
    )
    .await;
    let api = create_set(
        &client,
        &ns,
        "fw",
        json!({"virtualSwitchRef": "fw", "table": "firewall", "entriesFrom": [
            {"configMap": "fw-list"},
            {"configMapSelector": {"matchLabels": {"p4fleet.dev/set": "fw"}}}
        ]}),
    )
    .await;
    let st = status_where(&api, "fw", "3,000 entries Ready", |st| {
        ready(st) && st.applied == 3000
    })
    .await;
    assert_eq!((st.desired, st.failed), (Some(3000), 0));
    assert_eq!(device_entries(env, 1), 3000);
    let parses = |env| metric(env, "p4fleet_entry_source_parses_total", &ns);
    let fetches = |env| metric(env, "p4fleet_entry_source_fetches_total", &ns);
    assert_eq!((fetches(env), parses(env)), (3, 3));

    // Resyncs (every 3 s) read the cached parses: no fetch, no parse.
    tokio::time::sleep(Duration::from_secs(8)).await;
    assert_eq!((fetches(env), parses(env)), (3, 3));

    // One source changes: that one is fetched and parsed again, once.
    put_config_map(
        &client,
        &ns,
        "part-2",
        &sel,
        None,
        Some(gzip(&firewall_lines(2000, 1500))),
    )
    .await;
    status_where(&api, "fw", "3,500 entries Ready", |st| {
        ready(st) && st.applied == 3500
    })
    .await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!((fetches(env), parses(env)), (4, 4));
    assert_eq!(device_entries(env, 1), 3500);

    // A new labelled ConfigMap is selected; an entry it repeats is an
    // error naming both places, and the rest still applies.
    let mut dup = firewall_lines(5000, 100);
    dup.push_str("10.0.0.7 172.16.0.1 7\n");
    put_config_map(&client, &ns, "part-3", &sel, None, Some(gzip(&dup))).await;
    let st = status_where(&api, "fw", "3,600 entries and a duplicate", |st| {
        st.applied == 3600 && !st.errors.is_empty()
    })
    .await;
    assert_eq!(
        st.errors[0].source,
        "configmap/part-3/entries.txt.gz:line 103"
    );
    assert_eq!(
        st.errors[0].reason,
        "duplicate entry: same key as configmap/fw-list/entries:line 10"
    );
    let valid = find_condition(&st.conditions, "Valid").unwrap();
    assert_eq!(valid.reason, "InvalidEntries");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn livez_answers_while_a_large_source_parses_and_a_malformed_one_is_rejected() {
    let (cp, env) = env().await;
    let (client, ns) = cp.client_and_namespace().await;
    let ns = ns.name().to_string();
    setup_target(&client, env, &ns, 2).await;

    // The chart's liveness probe timeout is the bound.
    let values: serde_yaml::Value = serde_yaml::from_str(
        &std::fs::read_to_string(repo_root().join("charts/p4fleet/values.yaml")).unwrap(),
    )
    .unwrap();
    let timeout = Duration::from_secs(values["livenessProbe"]["timeoutSeconds"].as_u64().unwrap());

    // Once the operator is ready, poll /livez and /readyz every 50 ms from
    // a thread of its own until told to stop.
    wait_for("/readyz", Duration::from_secs(60), || async {
        match http_get(env.metrics, "/readyz", timeout) {
            Ok((200, _)) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    let stop = Arc::new(AtomicBool::new(false));
    let slowest = Arc::new(Mutex::new((Duration::ZERO, 0usize, Vec::<String>::new())));
    let poller = {
        let (stop, slowest, addr) = (stop.clone(), slowest.clone(), env.metrics);
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                for probe in ["/livez", "/readyz"] {
                    let t = Instant::now();
                    let r = http_get(addr, probe, timeout);
                    let took = t.elapsed();
                    let mut g = slowest.lock().unwrap();
                    g.0 = g.0.max(took);
                    g.1 += 1;
                    match r {
                        Ok((200, _)) => {}
                        other => g.2.push(format!("{probe}: {other:?} after {took:?}")),
                    }
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        })
    };

    // ~1 MiB of entries (the most one ConfigMap holds).
    let big = firewall_lines(0, 36_000);
    assert!(
        big.len() > 900_000 && big.len() < 1_000_000,
        "{}",
        big.len()
    );
    put_config_map(&client, &ns, "big", &[], Some(&big), None).await;
    let api = create_set(
        &client,
        &ns,
        "big",
        json!({"virtualSwitchRef": "fw", "table": "firewall", "entriesFrom": [{"configMap": "big"}]}),
    )
    .await;
    status_where(&api, "big", "36,000 entries Ready", |st| {
        ready(st) && st.applied == 36_000
    })
    .await;

    // A 300,000-digit value (and a 700 kB one) among good lines: refused
    // early, with short messages, and the good lines still apply.
    let mut bad = firewall_lines(100_000, 100);
    bad.push_str(&format!("10.9.9.9 172.16.0.1 {}\n", "9".repeat(300_000)));
    bad.push_str(&format!("10.9.9.8 172.16.0.{} 1\n", "7".repeat(500_000)));
    put_config_map(&client, &ns, "bad", &[], Some(&bad), None).await;
    create_set(
        &client,
        &ns,
        "bad",
        json!({"virtualSwitchRef": "fw", "table": "firewall", "entriesFrom": [{"configMap": "bad"}]}),
    )
    .await;
    let st = status_where(&api, "bad", "the malformed set reported", |st| {
        st.applied == 100 && st.errors.len() == 2
    })
    .await;
    assert_eq!(st.failed, 2);
    assert_eq!(st.errors[0].source, "configmap/bad/entries:line 103");
    for e in &st.errors {
        assert!(e.reason.len() < 300, "{}", e.reason);
    }
    assert!(
        st.errors[0].reason.contains("300000 characters"),
        "{}",
        st.errors[0].reason
    );
    let valid = find_condition(&st.conditions, "Valid").unwrap();
    assert!(!valid.is_true() && valid.message.len() < 2000, "{valid:?}");
    // And it has its Event.
    event_about(&client, &ns, "bad", Some("InvalidEntries")).await;

    stop.store(true, Ordering::Relaxed);
    poller.join().unwrap();
    let (max, polls, failures) = slowest.lock().unwrap().clone();
    eprintln!("probes: {polls} answers, the slowest in {max:?} (limit {timeout:?})");
    assert!(failures.is_empty(), "probes failed: {failures:?}");
    assert!(polls > 10, "{polls} polls");
    assert!(
        max < timeout,
        "a probe took {max:?}, the kubelet gives up after {timeout:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_with_names_too_long_for_the_recorder_get_events() {
    let (cp, env) = env().await;
    let (client, ns) = cp.client_and_namespace().await;
    let ns = ns.name().to_string();
    let _ = env;
    // 250 characters: labels of 62 joined by dots.
    let label = "a".repeat(62);
    let name = format!("{label}.{label}.{label}.{}", "b".repeat(61));
    assert_eq!(name.len(), 250);
    create_set(
        &client,
        &ns,
        &name,
        json!({"virtualSwitchRef": "missing", "table": "firewall", "entries": [
            {"match": {"hdr.ipv4.srcAddr": "10.0.0.1", "hdr.ipv4.dstAddr": "10.0.0.2"}, "action": "drop"}
        ]}),
    )
    .await;
    let ev = event_about(&client, &ns, &name, None).await;
    assert!(ev.name_any().len() <= 253, "{}", ev.name_any());
}
