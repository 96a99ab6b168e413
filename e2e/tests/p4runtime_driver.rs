//! The operator's device pool (p4fleet-client underneath) and sync planner
//! against an in-process emulator: pipeline push/skip by cookie, batched
//! pipelined writes of the sync's ops, per-update errors for a
//! 30,000-update batch (big trailer), read-back, arbitration and the diff
//! of a resync.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use p4fleet::DevicePool;
use p4fleet_client::{Atomicity, WriteOptions, WriteRpc};
use p4fleet_crds::switch::{Switch, SwitchSpec};
use p4fleet_e2e::device_read::tagged;
use p4fleet_emulator::{Emulator, EmulatorConfig};
use p4fleet_model::entries::{Entry, LineParser, TableSchema};
use p4fleet_model::sync::{self, Ownership};
use p4fleet_proto::p4info::{self, P4Info};

fn firewall() -> (P4Info, TableSchema) {
    let text =
        std::fs::read_to_string(p4fleet_e2e::repo_root().join("examples/firewall/p4info.txt"))
            .unwrap();
    let info = p4info::parse_text(&text).unwrap();
    let schema = TableSchema::from_p4info(&info, "firewall").unwrap();
    (info, schema)
}

/// `n` distinct firewall entries in the line format.
fn lines(n: usize, port_offset: usize) -> String {
    p4fleet_e2e::firewall_lines_with(0, n, "192.168.0.1", port_offset)
}

fn parse(schema: &TableSchema, text: &str) -> Vec<Entry> {
    let mut p = LineParser::new(schema);
    text.lines()
        .filter_map(|l| p.parse_line(l).unwrap())
        .collect()
}

fn switch(endpoint: String, device_id: u64) -> Switch {
    let spec: SwitchSpec = serde_json::from_value(serde_json::json!({
        "target": "Bmv2", "endpoint": endpoint, "deviceId": device_id, "slots": 2
    }))
    .unwrap();
    Switch::new("sw", spec)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn driver_writes_reads_and_reports_per_update_errors() {
    let running = Emulator::start(EmulatorConfig {
        device_ids: vec![7, 8],
        ..Default::default()
    })
    .await
    .unwrap();
    let (info, schema) = firewall();
    let pool = DevicePool::with_election_id(10);
    // Every Write RPC is observed once, named by its Switch.
    let seen: Arc<Mutex<Vec<(String, WriteRpc)>>> = Arc::default();
    let log = seen.clone();
    pool.observe_writes(Arc::new(move |sw, rpc| {
        log.lock().unwrap().push((sw.to_string(), rpc.clone()))
    }));
    let dev = pool
        .connect(&switch(running.p4runtime_addr().to_string(), 7))
        .unwrap();
    let caps = dev.capabilities().await.unwrap();
    assert!(!caps.api_version.is_empty());

    // Slot 1 is device 8; the pipeline is pushed once, then skipped.
    assert!(
        dev.set_pipeline(1, &info, b"cfg".to_vec(), 42)
            .await
            .unwrap()
    );
    assert!(
        !dev.set_pipeline(1, &info, b"cfg".to_vec(), 42)
            .await
            .unwrap()
    );
    assert_eq!(dev.pipeline_cookie(1).await.unwrap(), Some(42));
    assert_eq!(running.stats(8).unwrap().set_pipeline_rpcs, 1);

    // A replacement (Recreate) says what the device ran before it: nothing
    // (a first load), or another program (replaced, never reconciled).
    use p4fleet_client::PushMode;
    let replace = |cookie| dev.push_pipeline(0, &info, b"cfg".to_vec(), cookie, false);
    assert_eq!(replace(5).await.unwrap(), Some(PushMode::Loaded));
    assert_eq!(replace(5).await.unwrap(), None);
    assert_eq!(
        replace(6).await.unwrap(),
        Some(PushMode::Replaced { fallback: None })
    );
    assert_eq!(dev.pipeline_cookie(0).await.unwrap(), Some(6));
    assert_eq!(running.stats(7).unwrap().set_pipeline_rpcs, 2);

    let desired = parse(&schema, &lines(30_000, 0));
    let tag = sync::set_tag("ns", "fw");
    let plan = sync::plan(&desired, &[], Ownership::Merge, tag);
    assert_eq!(plan.inserts.len(), 30_000);
    let metadata = sync::tag_metadata(tag);
    let (_, phase) = sync::write_ops(&plan, &desired, &[], &metadata);
    let t = Instant::now();
    let rep = dev
        .write_ops(
            1,
            &phase.ops,
            WriteOptions {
                batch_size: 1000,
                max_in_flight: 4,
                atomicity: Atomicity::ContinueOnError,
                distinct_keys: false,
            },
        )
        .await
        .unwrap();
    eprintln!(
        "30000 inserts in {:?}: {:.0}/s, {} requests, mean {:?}",
        t.elapsed(),
        rep.updates_per_second(),
        rep.requests,
        rep.mean_request_latency()
    );
    assert_eq!(rep.failures, vec![]);
    assert_eq!(rep.requests, 30);
    assert_eq!(running.stats(8).unwrap().entries, 30_000);

    // Read back: everything is there with our tag; the diff is empty.
    let back = dev.read_table(1, schema.id).await.unwrap();
    assert_eq!(back.len(), 30_000);
    let on_device = tagged(&schema, &back);
    assert!(on_device.iter().all(|d| d.tag == tag));
    let again = sync::plan(&desired, &on_device, Ownership::Merge, tag);
    assert_eq!((again.writes(), again.unchanged), (0, 30_000));

    // The same 30,000 inserts in ONE request: every update fails with
    // ALREADY_EXISTS, all reported through the status-details trailer.
    let (_, phase) = sync::write_ops(&plan, &desired, &[], &metadata);
    let rep = dev
        .write_ops(
            1,
            &phase.ops,
            WriteOptions {
                batch_size: 30_000,
                max_in_flight: 1,
                atomicity: Atomicity::ContinueOnError,
                distinct_keys: false,
            },
        )
        .await
        .unwrap();
    assert_eq!(rep.requests, 1);
    assert_eq!(rep.failed_requests, 0, "{:?}", rep.failures.first());
    assert_eq!(rep.failures.len(), 30_000);
    assert_eq!(rep.failures[17].index, 17);
    assert_eq!(rep.failures[17].code(), tonic::Code::AlreadyExists);

    // Change 100 entries: exactly 100 modifies.
    let mut changed = desired.clone();
    let changed_text = lines(100, 7);
    for (i, e) in parse(&schema, &changed_text).into_iter().enumerate() {
        changed[i] = e;
    }
    let p = sync::plan(&changed, &on_device, Ownership::Merge, tag);
    assert_eq!(
        (p.modifies.len(), p.inserts.len(), p.deletes.len()),
        (100, 0, 0)
    );
    let before = running.stats(8).unwrap();
    let (_, phase) = sync::write_ops(&p, &changed, &on_device, &metadata);
    let rep = dev
        .write_ops(1, &phase.ops, WriteOptions::default())
        .await
        .unwrap();
    assert!(rep.failures.is_empty());
    let after = running.stats(8).unwrap();
    assert_eq!(after.modifies - before.modifies, 100);
    assert_eq!(after.inserts, before.inserts);

    // Slot 0 (device 7) is separate and has no pipeline: writes fail per update.
    assert_eq!(running.stats(7).unwrap().entries, 0);

    // One observation per Write RPC the device received, with its updates:
    // 30 + 1 + 1 requests; 30,000 + 30,000 inserts (the second all
    // refused) and 100 modifies.
    let seen = std::mem::take(&mut *seen.lock().unwrap());
    assert_eq!(seen.len() as u64, running.stats(8).unwrap().write_rpcs);
    assert_eq!(seen.len(), 32);
    assert!(seen.iter().all(|(sw, r)| sw == "sw" && r.device_id == 8));
    let sum = |f: fn(&WriteRpc) -> u64| seen.iter().map(|(_, r)| f(r)).sum::<u64>();
    assert_eq!(sum(|r| r.sent.insert), 60_000);
    assert_eq!(sum(|r| r.refused.insert), 30_000);
    assert_eq!(sum(|r| r.sent.modify), 100);
    assert_eq!(sum(|r| r.sent.delete + r.refused.modify), 0);
    assert!(seen.iter().all(|(_, r)| r.failed.is_none()));
    running.shutdown().await.unwrap();
}
