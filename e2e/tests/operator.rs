//! The `p4fleet operator` binary against the real API server: probes and
//! metrics answer, P4Programs (inline and from a ConfigMap) become Ready
//! with their tables listed, idle resyncs leave status alone, SIGTERM
//! stops it cleanly.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{ObjectMeta, PostParams};
use p4fleet_crds::{P4Program, find_condition};
use p4fleet_e2e::{ControlPlane, merge_patch, repo_root, wait_for};

/// The operator binary, built with the workspace (a no-op when up to date).
fn operator_binary() -> PathBuf {
    let bin = p4fleet_e2e::workspace_binaries().join("p4fleet");
    assert!(bin.is_file(), "{} missing after build", bin.display());
    bin
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

/// Minimal HTTP/1.0 GET: (status code, body).
fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").ok()?;
    let mut resp = String::new();
    s.read_to_string(&mut resp).ok()?;
    let code = resp.split_whitespace().nth(1)?.parse().ok()?;
    let body = resp.split_once("\r\n\r\n").map(|(_, b)| b.to_string())?;
    Some((code, body))
}

/// Kills the operator if the test fails before stopping it.
struct Operator(Option<Child>);

impl Drop for Operator {
    fn drop(&mut self) {
        if let Some(c) = self.0.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

async fn ready_program(api: &Api<P4Program>, name: &str) -> Result<P4Program, String> {
    let p = api.get(name).await.map_err(|e| e.to_string())?;
    let st = p.status.clone().ok_or("no status")?;
    match find_condition(&st.conditions, "Ready") {
        Some(c) if c.is_true() && st.observed_generation == p.metadata.generation => Ok(p),
        other => Err(format!("{other:?}")),
    }
}

#[tokio::test]
async fn operator_reconciles_programs_and_serves_probes() {
    let bin = operator_binary();
    let cp = ControlPlane::shared().await;
    let (client, ns) = cp.client_and_namespace().await;
    let port = free_port();

    let child = Command::new(&bin)
        .args([
            "operator",
            &format!("--listen-addr=127.0.0.1:{port}"),
            "--log-format=json",
            &format!(
                "--log-level={}",
                std::env::var("P4FLEET_E2E_OPERATOR_LOG").unwrap_or_else(|_| "info".into())
            ),
            "--resync-seconds=3",
            &format!("--watch-namespace={}", ns.name()),
        ])
        .env("KUBECONFIG", cp.kubeconfig_path())
        .stdin(Stdio::null())
        .spawn()
        .expect("start p4fleet operator");
    let mut op = Operator(Some(child));

    wait_for("/livez", Duration::from_secs(30), || async {
        match http_get(port, "/livez") {
            Some((200, _)) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    wait_for("/readyz", Duration::from_secs(60), || async {
        match http_get(port, "/readyz") {
            Some((200, b)) => Ok(b),
            other => Err(format!("{other:?}")),
        }
    })
    .await;

    // Inline P4Info sample.
    let sample = repo_root().join("config/samples/p4program-firewall.yaml");
    let out = cp.kubectl([
        "apply",
        "--server-side",
        "-n",
        ns.name(),
        "-f",
        &sample.to_string_lossy(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let api: Api<P4Program> = Api::namespaced(client.clone(), ns.name());
    let fw = wait_for("firewall Ready", Duration::from_secs(60), || {
        ready_program(&api, "firewall")
    })
    .await;
    let st = fw.status.clone().unwrap();
    assert!(find_condition(&st.conditions, "Valid").unwrap().is_true());
    assert!(
        find_condition(&st.conditions, "ResolvedRefs")
            .unwrap()
            .is_true()
    );
    assert_eq!(st.table_count, Some(1));
    assert_eq!(st.tables[0].name, "MyIngress.firewall");
    assert_eq!(
        st.tables[0].match_fields,
        ["hdr.ipv4.srcAddr:exact:32", "hdr.ipv4.dstAddr:exact:32"]
    );
    assert_eq!(st.digest.as_ref().map(String::len), Some(64));

    // Idle resyncs (every 3 s) must not rewrite status.
    let rv = fw.metadata.resource_version.clone();
    tokio::time::sleep(Duration::from_secs(7)).await;
    let again = api.get("firewall").await.unwrap();
    assert_eq!(
        again.metadata.resource_version, rv,
        "status changed on an idle resync"
    );

    // A program whose ConfigMap is missing, then created: the ConfigMap watch re-reconciles it.
    let p4info = std::fs::read_to_string(repo_root().join("examples/firewall/p4info.txt")).unwrap();
    let late: P4Program = serde_json::from_value(serde_json::json!({
        "apiVersion": "p4fleet.dev/v1alpha1",
        "kind": "P4Program",
        "metadata": {"name": "late"},
        "spec": {"p4info": {"configMapKeyRef": {"name": "late-p4info", "key": "p4info.txt"}}}
    }))
    .unwrap();
    api.create(&PostParams::default(), &late).await.unwrap();
    wait_for(
        "late ResolvedRefs=False",
        Duration::from_secs(60),
        || async {
            let p = api.get("late").await.map_err(|e| e.to_string())?;
            let st = p.status.ok_or("no status")?;
            match find_condition(&st.conditions, "ResolvedRefs") {
                Some(c)
                    if !c.is_true() && c.message.contains("ConfigMap late-p4info not found") =>
                {
                    Ok(())
                }
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), ns.name());
    let cm = ConfigMap {
        metadata: ObjectMeta {
            name: Some("late-p4info".into()),
            ..Default::default()
        },
        data: Some([("p4info.txt".to_string(), p4info)].into()),
        ..Default::default()
    };
    cms.create(&PostParams::default(), &cm).await.unwrap();
    let late = wait_for("late Ready", Duration::from_secs(60), || {
        ready_program(&api, "late")
    })
    .await;
    let late_st = late.status.unwrap();
    assert_eq!(late_st.table_count, Some(1));
    assert_eq!(late_st.digest.as_ref().map(String::len), Some(64));

    let (code, metrics) = http_get(port, "/metrics").expect("/metrics");
    assert_eq!(code, 200);
    assert!(
        metrics.contains("p4fleet_reconciles_total{kind=\"P4Program\"}"),
        "{metrics}"
    );
    assert!(metrics.contains("p4fleet_status_writes_total{kind=\"P4Program\"}"));

    // SIGTERM: controllers shut down gracefully and the process exits 0.
    let mut child = op.0.take().unwrap();
    unsafe {
        libc::kill(child.id() as i32, libc::SIGTERM);
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("operator did not exit within 20 s of SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(status.success(), "operator exit status {status}");
}

/// A finalizer patch built on an object that someone else changed
/// meanwhile (kube's helper tests the finalizer list it read) is refused
/// by the real API server, and the operator reads that refusal as a lost
/// race (a quiet retry), not as a failed reconcile.
#[tokio::test]
async fn a_finalizer_patch_that_lost_a_race_is_a_conflict_not_a_failure() {
    use kube::api::{Patch, PatchParams};
    use kube::runtime::controller::Action;
    use p4fleet::{Error, finalized, lost_race};
    use p4fleet_crds::TableEntrySet;

    let cp = ControlPlane::shared().await;
    let (client, ns) = cp.client_and_namespace().await;
    let sets: Api<TableEntrySet> = Api::namespaced(client.clone(), ns.name());
    let set: TableEntrySet = serde_json::from_value(serde_json::json!({
        "apiVersion": "p4fleet.dev/v1alpha1", "kind": "TableEntrySet",
        "metadata": {"name": "raced"},
        "spec": {"virtualSwitchRef": "vs", "table": "t",
            "entries": [{"match": {"f": "1"}, "action": "a"}]}
    }))
    .unwrap();
    let stale = sets.create(&PostParams::default(), &set).await.unwrap();
    // Another writer adds its finalizer after our read.
    let theirs = serde_json::json!({"metadata": {"finalizers": ["example.com/theirs"]}});
    merge_patch(&sets, "raced", theirs).await;
    let res = kube::runtime::finalizer::finalizer(
        &sets,
        "p4fleet.dev/table-entries",
        std::sync::Arc::new(stale),
        |_| async { Ok::<_, Error>(Action::await_change()) },
    )
    .await;
    match finalized(res) {
        Err(Error::Conflict(e)) => assert!(lost_race(&e)),
        other => panic!("expected a conflict, got {other:?}"),
    }
    let now = sets.get("raced").await.unwrap();
    assert_eq!(
        now.metadata.finalizers,
        Some(vec!["example.com/theirs".into()])
    );
    sets.patch(
        "raced",
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    ns.delete(&client).await.unwrap();
}
