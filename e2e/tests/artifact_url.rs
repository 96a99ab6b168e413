//! A P4Program artifact larger than a ConfigMap, from a URL pinned by its
//! sha256 (issue 15, item 6): a loopback HTTP server in the test serves a
//! 3 MiB bmv2 JSON. The program becomes Ready with the same digest an
//! inline source of those bytes gives, and the device holds exactly those
//! bytes under that digest's cookie; resyncs do not download it again
//! (the server counts requests). A wrong sha256 and a 404 are conditions
//! and Events on their programs, and a VirtualSwitch of the wrong-digest
//! program pushes nothing to its device.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kube::api::Api;
use p4fleet_crds::{P4Program, VirtualSwitch, find_condition};
use p4fleet_e2e::firewall;
use p4fleet_e2e::{
    Bmv2Slot, TestNamespace, bmv2_virtual_switch, create_json, event_about, repo_root,
    status_until, wait_for,
};
use p4fleet_proto::p4runtime::p4_runtime_client::P4RuntimeClient;
use p4fleet_proto::p4runtime::{
    GetForwardingPipelineConfigRequest, get_forwarding_pipeline_config_request::ResponseType,
};
use serde_json::json;
use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Requests per path, as the server saw them.
type Hits = Arc<Mutex<HashMap<String, usize>>>;

/// A loopback HTTP/1.1 server: `files` by path, 404 for any other; one
/// request per connection.
async fn serve(files: HashMap<String, Vec<u8>>) -> (SocketAddr, Hits) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let hits: Hits = Arc::default();
    let files = Arc::new(files);
    let h = hits.clone();
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = listener.accept().await else {
                return;
            };
            let files = files.clone();
            let hits = h.clone();
            tokio::spawn(async move {
                let mut req = Vec::new();
                let mut buf = [0u8; 4096];
                while !req.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => req.extend_from_slice(&buf[..n]),
                    }
                }
                let line = String::from_utf8_lossy(&req);
                let path = line.split_whitespace().nth(1).unwrap_or("").to_string();
                *hits.lock().unwrap().entry(path.clone()).or_default() += 1;
                let (status, body) = match files.get(&path) {
                    Some(b) => ("200 OK", b.as_slice()),
                    None => ("404 Not Found", b"not found".as_slice()),
                };
                let head = format!(
                    "HTTP/1.1 {status}\r\nContent-Length: {}\r\nContent-Type: application/octet-stream\r\nConnection: close\r\n\r\n",
                    body.len()
                );
                let _ = s.write_all(head.as_bytes()).await;
                let _ = s.write_all(body).await;
                let _ = s.shutdown().await;
            });
        }
    });
    (addr, hits)
}

/// A bmv2-like JSON of about `size` bytes (what p4c writes for a large
/// program: mostly tables and actions).
fn big_bmv2_json(size: usize) -> Vec<u8> {
    let mut actions = Vec::new();
    let mut n = 0;
    let mut len = 0;
    while len < size {
        let a = json!({"name": format!("MyIngress.action_{n}"), "id": n, "runtime_data": [],
            "primitives": [{"op": "assign", "parameters": [{"type": "field", "value": ["meta", format!("f{n}")]},
                {"type": "hexstr", "value": format!("0x{n:08x}")}]}]});
        len += a.to_string().len() + 1;
        actions.push(a);
        n += 1;
    }
    serde_json::to_vec(
        &json!({"program": "firewall.p4", "__meta__": {"version": [2, 23]},
        "actions": actions}),
    )
    .unwrap()
}

fn sha256(b: &[u8]) -> String {
    hex::encode(Sha256::digest(b))
}

/// Waits until condition `type_` of P4Program `name` has `reason`;
/// returns its message.
async fn program_condition(
    programs: &Api<P4Program>,
    name: &str,
    type_: &str,
    reason: &str,
) -> String {
    p4fleet_e2e::program_condition(programs, name, type_, reason, Duration::from_secs(90)).await
}

/// The cookie and device config device `device` of the emulator at `addr`
/// runs (None: no pipeline).
async fn running(addr: SocketAddr, device: u64) -> Option<(u64, Vec<u8>)> {
    let mut c = P4RuntimeClient::connect(format!("http://{addr}"))
        .await
        .unwrap()
        .max_decoding_message_size(64 << 20);
    let r = c
        .get_forwarding_pipeline_config(GetForwardingPipelineConfigRequest {
            device_id: device,
            response_type: ResponseType::All as i32,
        })
        .await
        .ok()?
        .into_inner()
        .config?;
    Some((r.cookie?.cookie, r.p4_device_config))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_artifact_from_a_url_is_checked_loaded_and_downloaded_once() {
    let json = big_bmv2_json(3 << 20);
    assert!(json.len() > (3 << 20), "larger than any ConfigMap");
    let sha = sha256(&json);
    // The same bytes at a second path, for the wrong-digest program: the
    // first path's requests are the good program's alone.
    let files = HashMap::from([
        ("/artifacts/firewall.json".to_string(), json.clone()),
        ("/artifacts/copy.json".to_string(), json.clone()),
    ]);
    let (http, hits) = serve(files).await;
    let url = format!("http://{http}/artifacts/firewall.json");

    // Short resyncs: several happen while the test watches the server.
    let (_cp, client, (_emu, addrs), _op) = firewall::emulator_and_operator(
        "1,2",
        "artifact-url-operator",
        &["--resync-seconds", "2", "--drift-seconds", "2"],
    )
    .await;
    let ns = TestNamespace::new(&client).await;
    let p4info = std::fs::read_to_string(repo_root().join("examples/firewall/p4info.txt")).unwrap();
    let v1 = "p4fleet.dev/v1alpha1";
    let programs: Api<P4Program> = Api::namespaced(client.clone(), ns.name());
    let program = |name: &str, url: &str, sha: &str| {
        json!({"apiVersion": v1, "kind": "P4Program", "metadata": {"name": name},
            "spec": {"p4info": {"inline": p4info},
                "artifacts": {"bmv2": {"json": {"url": {"url": url, "sha256": sha}}}}}})
    };
    create_json(&programs, program("firewall", &url, &sha)).await;
    let wrong = sha256(b"not the artifact");
    let copy = format!("http://{http}/artifacts/copy.json");
    create_json(&programs, program("wrong-digest", &copy, &wrong)).await;
    let missing = format!("http://{http}/artifacts/missing.json");
    // Its own digest: the artifact's is kept, and a kept digest is used
    // wherever it is named (the bytes are what the spec pins).
    create_json(
        &programs,
        program("missing", &missing, &sha256(b"never served")),
    )
    .await;

    let vss: Api<VirtualSwitch> = Api::namespaced(client.clone(), ns.name());
    for (device, program) in [(1, "firewall"), (2, "wrong-digest")] {
        let sw = format!("{}-sw{device}", ns.name());
        let slot = Bmv2Slot {
            switch: &sw,
            virtual_switch: program,
            program,
            endpoint: addrs.p4runtime,
            device,
        };
        bmv2_virtual_switch(&client, ns.name(), slot).await;
    }

    // Ready, with the digest an inline source of the same bytes gives.
    program_condition(&programs, "firewall", "Ready", "Ready").await;
    let st = programs.get("firewall").await.unwrap().status.unwrap();
    let expected = p4fleet::digest(&[
        ("spec.artifacts.bmv2.json", json.as_slice()),
        ("spec.p4info", p4info.as_bytes()),
    ]);
    assert_eq!(st.digest.as_deref(), Some(expected.as_str()));
    let cookie = p4fleet::cookie(&expected);
    let loaded = wait_for(
        "the artifact on device 1",
        Duration::from_secs(90),
        || async {
            running(addrs.p4runtime, 1)
                .await
                .filter(|(c, _)| *c == cookie)
                .ok_or("not yet".to_string())
        },
    )
    .await;
    assert_eq!(
        sha256(&loaded.1),
        sha,
        "the device holds exactly the served bytes"
    );

    // A wrong digest: a condition naming field, host and both digests,
    // an Event, and nothing pushed to the VirtualSwitch's device.
    let msg = program_condition(
        &programs,
        "wrong-digest",
        "ResolvedRefs",
        "ArtifactDigestMismatch",
    )
    .await;
    for part in [
        "spec.artifacts.bmv2.json.url",
        &http.to_string(),
        &wrong,
        &sha,
    ] {
        assert!(msg.contains(part), "{part:?} not in {msg}");
    }
    program_condition(&programs, "wrong-digest", "Ready", "ArtifactDigestMismatch").await;
    event_about(
        &client,
        ns.name(),
        "wrong-digest",
        Some("ArtifactDigestMismatch"),
    )
    .await;

    // A 404: ArtifactFetchFailed naming the status.
    let msg = program_condition(&programs, "missing", "ResolvedRefs", "ArtifactFetchFailed").await;
    assert!(msg.contains("HTTP 404"), "{msg}");
    event_about(&client, ns.name(), "missing", Some("ArtifactFetchFailed")).await;

    let what = "VirtualSwitch wrong-digest waiting for its program";
    status_until(&vss, "wrong-digest", what, Duration::from_secs(60), |st| {
        find_condition(&st.conditions, "PipelineLoaded")
            .filter(|c| c.reason == "ProgramNotReady")
            .map(|_| ())
            .ok_or(format!("{:?}", st.conditions))
    })
    .await;
    assert!(
        running(addrs.p4runtime, 2).await.is_none(),
        "no pipeline pushed for a program whose digest does not match"
    );

    // Resyncs (every 2 s), the VirtualSwitch and the drift checks use the
    // kept bytes: one download in all. The wrong-digest program's bytes
    // are never kept, so its copy is requested again.
    let count = |path: &str| hits.lock().unwrap().get(path).copied().unwrap_or(0);
    let copies = count("/artifacts/copy.json");
    tokio::time::sleep(Duration::from_secs(8)).await;
    eprintln!(
        "requests: firewall.json {}, copy.json {} (then {copies})",
        count("/artifacts/firewall.json"),
        count("/artifacts/copy.json")
    );
    assert_eq!(count("/artifacts/firewall.json"), 1, "downloaded once");
    // A mismatching download is not kept: it is tried again, on the
    // backoff of a failed download (1 s doubling), not at every resync.
    wait_for(
        "copy.json requested again",
        Duration::from_secs(60),
        || async {
            let n = count("/artifacts/copy.json");
            (n > copies).then_some(()).ok_or(format!("{n} requests"))
        },
    )
    .await;
    assert_eq!(
        running(addrs.p4runtime, 1).await.map(|(c, _)| c),
        Some(cookie),
        "the pipeline stays"
    );
    ns.delete(&client).await.unwrap();
}
