//! mTLS to switches end to end: the real kube-apiserver, emulators serving
//! TLS (certificates made here with rcgen) and the operator, all as
//! processes. A TLS Switch becomes Ready and its entries land; each bad
//! certificate and each bad Secret gives Reachable=False with its own
//! reason; rotating the Secret (new CA and certificates, the device
//! restarted with them) reconnects without restarting the operator. Also
//! the Primary condition: a device id the device does not serve and
//! another controller holding primary, named as the device said; and an
//! unreachable device's Reachable reason naming the cause (refused, DNS).

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use p4fleet_client::{Device, Identity, Target};
use p4fleet_crds::{Condition, Switch, TableEntrySet, find_condition};
use p4fleet_e2e::certs::{Pair, TestCa, Validity};
use p4fleet_e2e::processes::{
    EmulatorProc, Proc, build_binaries as bin, device_entries, spawn_emulator, spawn_operator,
    spawn_tls_emulator,
};
use p4fleet_e2e::{
    ControlPlane, TestNamespace, create_json, delete_switch, firewall_workload, wait_for,
};
use serde_json::{Value, json};

const V1: &str = "p4fleet.dev/v1alpha1";
const ENTRIES: usize = 100;

/// Each test runs its own operator against the binary's shared control
/// plane, and every operator reconciles every (cluster-scoped) Switch: two
/// at once would both arbitrate for the other test's devices and write
/// its status. One test with an operator at a time.
static ONE_OPERATOR: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn tls_emulator(
    dir: &Path,
    tag: &str,
    pair: &Pair,
    client_ca: &TestCa,
    addr: Option<SocketAddr>,
) -> EmulatorProc {
    spawn_tls_emulator(&bin(), dir, tag, pair, client_ca, addr, &[])
}

fn secret_data(ca: &TestCa, client: Option<&Pair>) -> Value {
    let mut data = json!({"ca.crt": ca.cert_pem});
    if let Some(c) = client {
        data["tls.crt"] = json!(c.cert_pem);
        data["tls.key"] = json!(c.key_pem);
    }
    data
}

async fn apply_secret(client: &Client, ns: &str, name: &str, string_data: Value) {
    let api: Api<Secret> = Api::namespaced(client.clone(), ns);
    let obj = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name},
        "type": "Opaque", "stringData": string_data});
    api.patch(
        name,
        &PatchParams::apply("p4fleet-e2e").force(),
        &Patch::Apply(obj),
    )
    .await
    .unwrap();
}

async fn switch(
    client: &Client,
    name: &str,
    endpoint: SocketAddr,
    device: u64,
    secret: Option<(&str, &str)>,
) {
    let mut spec = json!({"target": "Bmv2", "endpoint": endpoint.to_string(), "deviceId": device});
    if let Some((ns, s)) = secret {
        spec["tlsSecretRef"] = json!({"namespace": ns, "name": s});
    }
    create_json(
        &Api::<Switch>::all(client.clone()),
        json!({"apiVersion": V1, "kind": "Switch", "metadata": {"name": name}, "spec": spec}),
    )
    .await;
}

/// Waits until condition `t` of Switch `name` has `reason` (and is True
/// exactly when `reason` is the healthy one); returns it.
async fn switch_condition(client: &Client, name: &str, t: &str, reason: &str) -> Condition {
    let api: Api<Switch> = Api::all(client.clone());
    wait_for(
        &format!("Switch {name} {t} reason {reason}"),
        Duration::from_secs(60),
        || async {
            let sw = api.get(name).await.map_err(|e| e.to_string())?;
            let cs = sw.status.unwrap_or_default().conditions;
            match find_condition(&cs, t) {
                Some(c) if c.reason == reason => Ok(c.clone()),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await
}

/// Firewall program, VirtualSwitch and a 100-entry TableEntrySet on `sw`.
async fn workload(client: &Client, ns: &str, sw: &str) {
    let mut text = String::from("#! fields hdr.ipv4.srcAddr hdr.ipv4.dstAddr\n#! action allow\n");
    for i in 0..ENTRIES {
        text.push_str(&format!("10.0.0.{i} 172.16.0.1 {i}\n"));
    }
    firewall_workload(client, ns, sw, &text).await;
}

async fn set_ready_on(client: &Client, ns: &str, stats: SocketAddr) {
    let sets: Api<TableEntrySet> = Api::namespaced(client.clone(), ns);
    wait_for("TableEntrySet Ready", Duration::from_secs(90), || async {
        let st = sets.get("fw").await.map_err(|e| e.to_string())?;
        let st = st.status.unwrap_or_default();
        let ready = find_condition(&st.conditions, "Ready").is_some_and(Condition::is_true);
        (ready && st.applied == ENTRIES as u64)
            .then_some(())
            .ok_or(format!("{:?}", st.conditions))
    })
    .await;
    let held = tokio::task::spawn_blocking(move || device_entries(stats, 1))
        .await
        .unwrap();
    assert_eq!(held, Some(ENTRIES as u64), "entries on the device");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_switches_connect_fail_with_reasons_and_follow_rotation() {
    let _one = ONE_OPERATOR.lock().await;
    let _ = rustls::crypto::ring::default_provider().install_default();
    let cp = ControlPlane::shared().await;
    let client = cp.client().await;
    let tmp = tempfile::tempdir().unwrap();
    let ns = TestNamespace::new(&client).await;
    let ns = ns.name().to_string();
    let _operator = spawn_operator(
        &bin(),
        cp.kubeconfig_path(),
        "tls-operator",
        &["--drift-seconds", "3"],
    );

    let ca = TestCa::new("switch CA");
    let other_ca = TestCa::new("another CA");
    let op = ca.client();
    // An emulator serving a certificate of `ca` for `names`.
    let serving = |tag: &str, names: &[&str], validity| {
        tls_emulator(tmp.path(), tag, &ca.server(names, validity), &ca, None)
    };
    let good = serving("good", &["127.0.0.1"], Validity::Current);
    let expired = serving("expired", &["127.0.0.1"], Validity::Expired);
    let wrong_name = serving("name", &["switch.example"], Validity::Current);

    apply_secret(&client, &ns, "good", secret_data(&ca, Some(&op))).await;
    apply_secret(&client, &ns, "other-ca", secret_data(&other_ca, Some(&op))).await;
    apply_secret(&client, &ns, "ca-only", secret_data(&ca, None)).await;
    let mut bad_key = secret_data(&ca, Some(&op));
    bad_key["tls.key"] = json!("not a key");
    apply_secret(&client, &ns, "bad-key", bad_key).await;

    let name = |s: &str| format!("{ns}-{s}");
    let cases: [(&str, SocketAddr, &str, &str); 7] = [
        ("good", good.p4runtime, "good", "Connected"),
        ("wrong-ca", good.p4runtime, "other-ca", "TlsUnknownCA"),
        (
            "no-client-cert",
            good.p4runtime,
            "ca-only",
            "TlsClientCertificateRequired",
        ),
        (
            "expired",
            expired.p4runtime,
            "good",
            "TlsCertificateExpired",
        ),
        (
            "wrong-name",
            wrong_name.p4runtime,
            "good",
            "TlsWrongServerName",
        ),
        ("no-secret", good.p4runtime, "absent", "TlsSecretNotFound"),
        ("bad-key", good.p4runtime, "bad-key", "TlsSecretKeyInvalid"),
    ];
    for (sw, addr, secret, _) in &cases {
        switch(&client, &name(sw), *addr, 1, Some((&ns, secret))).await;
    }
    for (sw, _, secret, reason) in &cases {
        let c = switch_condition(&client, &name(sw), "Reachable", reason).await;
        assert_eq!(c.is_true(), *reason == "Connected", "{sw}: {c:?}");
        if reason.starts_with("TlsSecret") {
            assert!(c.message.contains(&format!("{ns}/{secret}")), "{sw}: {c:?}");
        }
        if *sw == "bad-key" {
            assert!(c.message.contains("tls.key"), "{c:?}");
        }
    }
    switch_condition(&client, &name("good"), "Ready", "Ready").await;

    // Entries over TLS, then rotation: a new CA and certificates.
    workload(&client, &ns, &name("good")).await;
    set_ready_on(&client, &ns, good.stats).await;
    let new_ca = TestCa::new("rotated CA");
    apply_secret(
        &client,
        &ns,
        "good",
        secret_data(&new_ca, Some(&new_ca.client())),
    )
    .await;
    // The operator took the new Secret: the device still shows the old
    // certificate, which the new CA did not sign.
    switch_condition(&client, &name("good"), "Reachable", "TlsUnknownCA").await;
    let addr = good.p4runtime;
    drop(good);
    let rotated = tls_emulator(
        tmp.path(),
        "rotated",
        &new_ca.server(&["127.0.0.1"], Validity::Current),
        &new_ca,
        Some(addr),
    );
    switch_condition(&client, &name("good"), "Reachable", "Connected").await;
    // The restarted device was empty: pipeline and entries came back.
    set_ready_on(&client, &ns, rotated.stats).await;

    for (sw, ..) in &cases {
        delete_switch(&client, &name(sw)).await;
    }
    drop((expired, wrong_name, rotated));
}

/// A test namespace (kept while the guard lives) and an operator probing
/// Switches every 3 s, logging to `log`.
async fn namespace_and_operator(log: &str) -> (Client, TestNamespace, String, Proc) {
    let cp = ControlPlane::shared().await;
    let (client, guard) = cp.client_and_namespace().await;
    let ns = guard.name().to_string();
    let operator = spawn_operator(&bin(), cp.kubeconfig_path(), log, &["--drift-seconds", "3"]);
    (client, guard, ns, operator)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_primary_condition_says_what_the_device_said() {
    let _one = ONE_OPERATOR.lock().await;
    let (client, _ns, ns, _operator) = namespace_and_operator("primary-operator").await;
    let emu = spawn_emulator(&bin(), &["--device-ids", "1,2"]);
    let unknown = format!("{ns}-unknown-id");
    switch(&client, &unknown, emu.p4runtime, 9, None).await;
    let c = switch_condition(&client, &unknown, "Primary", "UnknownDeviceId").await;
    assert!(
        c.message.contains("NOT_FOUND") && c.message.contains("device id 9"),
        "{c:?}"
    );
    assert!(!c.is_true());

    let taken = format!("{ns}-taken");
    switch(&client, &taken, emu.p4runtime, 2, None).await;
    switch_condition(&client, &taken, "Primary", "Primary").await;
    // Another controller with a higher election id takes device 2.
    let other = Device::connect(
        Target::p4runtime(emu.p4runtime.to_string(), 2),
        Identity {
            election_id: u128::MAX - 1,
            client_id: 9,
        },
    )
    .unwrap();
    other.standing(0, Duration::from_secs(5)).await.unwrap();
    let c = switch_condition(&client, &taken, "Primary", "NotPrimary").await;
    let high = (u128::MAX - 1) >> 64;
    assert!(c.message.contains(&format!("high {high}")), "{c:?}");
    // It leaves: this operator is primary again.
    drop(other);
    switch_condition(&client, &taken, "Primary", "Primary").await;
    for sw in [&unknown, &taken] {
        delete_switch(&client, sw).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_switch_names_the_cause() {
    let _one = ONE_OPERATOR.lock().await;
    let (client, _ns, ns, _operator) = namespace_and_operator("unreachable-operator").await;
    // A loopback port nothing listens on, and a name that never resolves
    // (RFC 6761), through the Switch's own endpoint field.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let cases = [
        (
            format!("{ns}-refused"),
            closed.to_string(),
            "ConnectionRefused",
            "connection refused",
        ),
        (
            format!("{ns}-no-name"),
            "nonexistent.invalid:9559".to_string(),
            "DnsNameNotResolved",
            "DNS: name not resolved",
        ),
    ];
    for (name, endpoint, _, _) in &cases {
        let spec = json!({"target": "Bmv2", "endpoint": endpoint, "deviceId": 1});
        create_json(
            &Api::<Switch>::all(client.clone()),
            json!({"apiVersion": V1, "kind": "Switch", "metadata": {"name": name}, "spec": spec}),
        )
        .await;
    }
    for (name, endpoint, reason, words) in &cases {
        let c = switch_condition(&client, name, "Reachable", reason).await;
        assert!(!c.is_true());
        assert!(
            c.message.contains(words) && c.message.contains(endpoint.as_str()),
            "{c:?}"
        );
        let ready = switch_condition(&client, name, "Ready", reason).await;
        assert_eq!(ready.message, c.message);
    }
    for (name, ..) in &cases {
        delete_switch(&client, name).await;
    }
}

/// The FPGA slot service shares the board's P4Runtime port, so it takes
/// the Switch's TLS Secret too (issue 10): a board serving mTLS only is
/// probed through it (slots and capacity from GetBoardInfo, `SlotService`
/// True). Before, a TLS Switch's slot service was refused before dialing.
/// A Secret without a client certificate is refused by the board.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fpga_slot_service_takes_the_switch_tls_secret() {
    let _one = ONE_OPERATOR.lock().await;
    let _ = rustls::crypto::ring::default_provider().install_default();
    let (client, _ns, ns, _operator) = namespace_and_operator("tls-fpga-operator").await;
    let tmp = tempfile::tempdir().unwrap();
    let ca = TestCa::new("board CA");
    let board = spawn_tls_emulator(
        &bin(),
        tmp.path(),
        "board",
        &ca.server(&["127.0.0.1"], Validity::Current),
        &ca,
        None,
        &["--fpga", "netfpga-sume"],
    );
    apply_secret(&client, &ns, "board", secret_data(&ca, Some(&ca.client()))).await;
    apply_secret(&client, &ns, "ca-only", secret_data(&ca, None)).await;
    let api = Api::<Switch>::all(client.clone());
    let name = |s: &str| format!("{ns}-{s}");
    for (sw, secret) in [("board", "board"), ("no-client-cert", "ca-only")] {
        create_json(
            &api,
            json!({"apiVersion": V1, "kind": "Switch", "metadata": {"name": name(sw)},
                "spec": {"target": "Fpga", "endpoint": board.p4runtime.to_string(), "deviceId": 1,
                    "ports": [{"id": 0}, {"id": 1}],
                    "tlsSecretRef": {"namespace": ns, "name": secret}}}),
        )
        .await;
    }
    let slot_service = switch_condition(&client, &name("board"), "SlotService", "BoardInfo").await;
    assert!(slot_service.is_true(), "{slot_service:?}");
    let st = api.get(&name("board")).await.unwrap().status.unwrap();
    assert_eq!(
        (st.slots, st.capacity_source.as_deref()),
        (Some(16), Some("Device")),
        "the board's own slots and capacity"
    );
    switch_condition(
        &client,
        &name("no-client-cert"),
        "Reachable",
        "TlsClientCertificateRequired",
    )
    .await;
    let sw = api.get(&name("no-client-cert")).await.unwrap();
    let cs = sw.status.unwrap_or_default().conditions;
    assert!(
        !find_condition(&cs, "SlotService").is_some_and(Condition::is_true),
        "{cs:?}"
    );
    for sw in ["board", "no-client-cert"] {
        api.delete(&name(sw), &Default::default()).await.unwrap();
    }
}
