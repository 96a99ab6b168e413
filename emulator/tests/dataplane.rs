//! The emulated DPDK data plane end to end (in-process): generated traffic
//! through the l2crypt example, entries from a TableSource changing what it
//! forwards, extern policies changing what runs (externs that see only
//! their mailbox: l2crypt_mailbox.spec moves one payload block through
//! them), full context pools and queues holding packets back (dropping
//! only with T4P4S's Context method), and the ExternRuntime gRPC service.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::l2crypt::{
    DMAC, DROP, FLOOD, FORWARD, MAILBOX_SPEC, NO_ACTION, P4INFO, SMAC, SPEC, assert_l2crypt_externs,
};
use p4fleet_emulator::dataplane::externs::{CryptoKeys, ExternFn, ExternKind};
use p4fleet_emulator::dataplane::packet::{self, TrafficConfig};
use p4fleet_emulator::dataplane::service::policy_error_from_status;
use p4fleet_emulator::dataplane::{
    ActionCall, Engine, EngineConfig, EngineRegistry, EngineStats, Executor, ExternPolicy,
    ExternRuntimeService, FieldValue, MemoryTableSource, Mode, PolicyError, SnapshotEntry,
    SuspendMethod,
};
use p4fleet_proto::externs::{self as pb, extern_runtime_client::ExternRuntimeClient};
use p4fleet_proto::p4info;

/// After Ethernet + IPv4: the 16-byte block l2crypt_mailbox.spec moves
/// through the externs' mailboxes (UDP header and 8 bytes of data).
const BLOCK: std::ops::Range<usize> = 14 + 20..14 + 20 + 16;

fn engine(traffic: TrafficConfig, capture: usize) -> (Arc<MemoryTableSource>, Engine) {
    engine_of(SPEC, traffic, capture)
}

fn engine_of(
    spec: &str,
    traffic: TrafficConfig,
    capture: usize,
) -> (Arc<MemoryTableSource>, Engine) {
    let source = Arc::new(MemoryTableSource::new());
    let info = p4info::parse_text(P4INFO).unwrap();
    let engine = Engine::load(
        spec,
        &info,
        source.clone(),
        EngineConfig {
            pipeline: "l2crypt".into(),
            traffic,
            capture,
            stats_interval: Duration::from_millis(100),
            ..EngineConfig::default()
        },
    )
    .unwrap();
    (source, engine)
}

/// Traffic over 4 flows at `pps` until the engine stops.
fn endless(pps: u64) -> TrafficConfig {
    TrafficConfig {
        rate_pps: Some(pps),
        flows: 4,
        ..TrafficConfig::default()
    }
}

fn finite(total: u64, flows: u32) -> TrafficConfig {
    TrafficConfig {
        total_packets: Some(total),
        flows,
        sizes: vec![128],
        ..TrafficConfig::default()
    }
}

fn exact(mac: [u8; 6], action_id: u32, params: Vec<Vec<u8>>) -> SnapshotEntry {
    SnapshotEntry {
        matches: vec![(1, FieldValue::Exact(mac.to_vec()))],
        priority: 0,
        action: ActionCall { action_id, params },
    }
}

/// Polls stats until `done` holds; panics with the stats after 30 s.
fn wait(engine: &Engine, what: &str, done: impl Fn(&EngineStats) -> bool) -> EngineStats {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let s = engine.stats();
        if done(&s) {
            return s;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}: {s:#?}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Every received packet is accounted for: sent, dropped, or still parked.
/// The counters are read one by one while workers run, so a snapshot can
/// see a burst's tx total before its per-port counts: wait until they agree.
fn settled(total: u64) -> impl Fn(&EngineStats) -> bool {
    move |s| {
        s.rx_packets == total
            && s.tx_packets + s.drops.total() == total
            && s.tx_per_port.iter().map(|(_, n)| *n).sum::<u64>() == s.tx_packets
            && s.externs.iter().all(|x| x.in_flight == 0)
    }
}

fn port(s: &EngineStats, p: u32) -> u64 {
    s.tx_per_port
        .iter()
        .find(|(q, _)| *q == p)
        .map(|(_, n)| *n)
        .unwrap_or(0)
}

fn table<'a>(s: &'a EngineStats, name: &str) -> &'a p4fleet_emulator::dataplane::stats::TableStats {
    s.tables.iter().find(|t| t.name == name).unwrap()
}

fn action(t: &p4fleet_emulator::dataplane::stats::TableStats, name: &str) -> u64 {
    t.actions.iter().find(|a| a.0 == name).unwrap().2
}

#[test]
fn entries_change_forwarding_and_counters() {
    let (source, engine) = engine(finite(400, 4), 0);
    engine.start();
    // No entries: smac misses (learn), dmac misses (broadcast to the
    // flood port).
    let s = wait(&engine, "the first 400 packets", settled(400));
    assert_eq!(port(&s, FLOOD), 400);
    let smac = table(&s, "MyIngress.smac");
    assert_eq!((smac.hits, smac.misses), (0, 400));
    assert_eq!(action(smac, "learn"), 400);
    assert_eq!(table(&s, "MyIngress.dmac").misses, 400);

    // Flow 0 -> port 1, flow 1 -> port 2, flow 2 dropped, flow 3 floods;
    // every source MAC known.
    source.set_entries(
        DMAC,
        vec![
            exact(packet::dst_mac(0), FORWARD, vec![vec![1]]),
            exact(packet::dst_mac(1), FORWARD, vec![vec![2]]),
            exact(packet::dst_mac(2), DROP, vec![]),
        ],
    );
    source.set_entries(
        SMAC,
        (0..4)
            .map(|i| exact(packet::src_mac(i), NO_ACTION, vec![]))
            .collect(),
    );
    assert!(engine.sync_tables().is_empty());
    engine.stop();
    engine.start();
    let s = wait(&engine, "400 more packets", settled(800));
    assert_eq!(port(&s, 1), 100);
    assert_eq!(port(&s, 2), 100);
    assert_eq!(port(&s, FLOOD), 500);
    assert_eq!(s.drops.program, 100);
    let dmac = table(&s, "MyIngress.dmac");
    assert_eq!((dmac.entries, dmac.hits, dmac.misses), (3, 300, 500));
    assert_eq!(action(dmac, "forward"), 200);
    assert_eq!(action(dmac, "drop"), 100);
    assert_eq!(action(dmac, "broadcast"), 500);
    let smac = table(&s, "MyIngress.smac");
    assert_eq!((smac.hits, smac.misses), (400, 400));
    assert_eq!(action(smac, "NoAction"), 400);
    // Dropped packets run no extern; the rest ran both (Sync by default).
    assert!(s.externs.iter().all(|x| x.sync_calls == 700), "{s:#?}");

    // The background thread follows the source too (no explicit sync).
    source.set_entries(
        DMAC,
        vec![exact(packet::dst_mac(3), FORWARD, vec![vec![9]])],
    );
    wait(&engine, "the background table sync", |s| {
        table(s, "MyIngress.dmac").entries == 1
    });
    engine.stop();
    engine.start();
    let s = wait(&engine, "400 more packets", settled(1200));
    assert_eq!(port(&s, 9), 100);
    assert_eq!(port(&s, FLOOD), 800);
}

#[test]
fn bad_entries_keep_the_previous_table() {
    let (source, engine) = engine(finite(10, 1), 0);
    source.set_entries(
        DMAC,
        vec![exact(packet::dst_mac(0), FORWARD, vec![vec![1]])],
    );
    assert!(engine.sync_tables().is_empty());
    // An action of the other table: refused, the previous entries stay.
    source.set_entries(DMAC, vec![exact(packet::dst_mac(0), NO_ACTION, vec![])]);
    let errs = engine.sync_tables();
    assert_eq!(errs.len(), 1);
    assert_eq!(errs[0].table, "MyIngress.dmac");
    let s = engine.stats();
    let dmac = table(&s, "MyIngress.dmac");
    assert_eq!(dmac.entries, 1);
    assert!(dmac.compile_error.as_deref().unwrap().contains("NoAction"));
    engine.start();
    let s = wait(&engine, "10 packets", settled(10));
    assert_eq!(port(&s, 1), 10);
}

/// A frame of flow 0 from the generator with `kinds` run on its block
/// (what l2crypt_mailbox.spec sends when those externs ran in that order).
fn expected_frame(kinds: &[ExternKind]) -> Vec<u8> {
    let mut f = packet::build_frame(128, false);
    let mut block: [u8; 16] = f[BLOCK].try_into().unwrap();
    for k in kinds {
        ExternFn::new(*k, &CryptoKeys::default()).call_block(&mut block);
    }
    f[BLOCK].copy_from_slice(&block);
    f
}

fn run_and_capture(engine: &Engine, total: u64, before: u64) -> (EngineStats, Vec<Vec<u8>>) {
    engine.clear_capture();
    engine.start();
    let s = wait(engine, "the phase's packets", settled(before + total));
    let caps = engine.captured().into_iter().map(|(_, b)| b).collect();
    (s, caps)
}

/// Runs the engine's finite traffic with the externs' (encrypt, decrypt)
/// `policies` until everything received, `total` in all, is accounted for.
fn run_with(
    engine: &Engine,
    policies: (ExternPolicy, ExternPolicy),
    what: &str,
    total: u64,
) -> EngineStats {
    set(engine, policies.0, policies.1);
    engine.start();
    wait(engine, what, settled(total))
}

/// Async on DedicatedCores with a pool of one context and bursts of one:
/// one call parked at a time.
fn one_context() -> ExternPolicy {
    ExternPolicy {
        context_pool: 1,
        burst_size: 1,
        ..ExternPolicy::asynchronous(Executor::DedicatedCores)
    }
}

/// `p` with T4P4S's coroutine contexts (Context, which DPDK SWX does not
/// have): what finds a pool or a queue full is dropped.
fn with_contexts(p: ExternPolicy) -> ExternPolicy {
    ExternPolicy {
        suspend: Some(SuspendMethod::Context),
        ..p
    }
}

/// Sets both externs' policies on a stopped engine (a running one would
/// restart its finite traffic source with the new run).
fn set(engine: &Engine, encrypt: ExternPolicy, decrypt: ExternPolicy) {
    engine.stop();
    engine
        .set_policy(&[
            ("async_encrypt".to_string(), encrypt),
            ("async_decrypt".to_string(), decrypt),
        ])
        .unwrap();
}

#[test]
fn sync_async_skip_change_what_runs() {
    // The mailbox variant: the block after IPv4 goes into async_encrypt's
    // mailbox, from there into async_decrypt's, and back into the packet,
    // as p4fleet-dpdk-agent runs it (dpdk-agent/tests/agent.rs).
    let (_source, engine) = engine_of(MAILBOX_SPEC, finite(200, 1), 8);
    let skip = ExternPolicy::with_mode(Mode::Skip);
    let sync = ExternPolicy::with_mode(Mode::Sync);
    let plain = expected_frame(&[]);
    let encrypted = expected_frame(&[ExternKind::Encrypt]);
    assert_ne!(plain, encrypted);
    assert_eq!(plain[BLOCK.end..], encrypted[BLOCK.end..]);

    // Sync encrypt, skip decrypt: the block leaves AES-128-CBC-encrypted,
    // the rest of the frame as it came.
    set(&engine, sync, skip);
    let (s, caps) = run_and_capture(&engine, 200, 0);
    assert_eq!(caps.len(), 8);
    assert!(caps.iter().all(|c| *c == encrypted), "{caps:02x?}");
    assert_eq!((s.externs[0].sync_calls, s.externs[1].skipped), (200, 200));

    // Both Sync: decrypted again, the frame leaves as it came.
    set(&engine, sync, sync);
    let (s, caps) = run_and_capture(&engine, 200, 200);
    assert_eq!(caps.len(), 8);
    assert!(caps.iter().all(|c| *c == plain), "{caps:02x?}");
    assert_eq!(s.externs[1].sync_calls, 200);

    // Both skipped: untouched.
    set(&engine, skip, skip);
    let (_, caps) = run_and_capture(&engine, 200, 400);
    assert!(caps.iter().all(|c| *c == plain));

    // Async encrypt on a dedicated core, async decrypt on the inline
    // crypto device: both ran on the mailboxes the packets carried while
    // parked, so the frame is back to plain, and no sync call was made.
    let dedicated = ExternPolicy::asynchronous(Executor::DedicatedCores);
    let device = ExternPolicy::asynchronous(Executor::InlineCryptoDevice);
    set(&engine, dedicated, device);
    let (s, caps) = run_and_capture(&engine, 200, 600);
    assert!(caps.iter().all(|c| *c == plain));
    for x in &s.externs {
        assert_eq!((x.async_submitted, x.async_completed), (200, 200), "{x:#?}");
        assert!(x.latency_p50_ns.is_some());
    }
    assert_eq!(s.externs[0].sync_calls, 400, "no new sync calls");
    assert_eq!(s.extern_cores, 1);

    // Async encrypt on the inline device, decrypt skipped: the device's
    // result reaches the packet.
    set(&engine, device, skip);
    let (_, caps) = run_and_capture(&engine, 200, 800);
    assert!(caps.iter().all(|c| *c == encrypted), "{caps:02x?}");

    // Async encrypt suspended as a coroutine context, decrypt skipped.
    let context = with_contexts(dedicated);
    set(&engine, context, skip);
    let (s, caps) = run_and_capture(&engine, 200, 1000);
    assert!(caps.iter().all(|c| *c == encrypted));
    assert_eq!(s.externs[0].async_completed, 600);
    assert_eq!(s.externs[0].policy.suspend, Some(SuspendMethod::Context));
    assert_eq!(s.tx_packets, 1200);
}

#[test]
fn an_extern_sees_only_its_mailbox() {
    // l2crypt.spec moves nothing into the mailboxes: its externs run (and
    // are counted) but no byte of the packet changes, as on DPDK SWX.
    let (_source, engine) = engine(finite(200, 1), 8);
    let sync = ExternPolicy::with_mode(Mode::Sync);
    set(&engine, sync, ExternPolicy::with_mode(Mode::Skip));
    let (s, caps) = run_and_capture(&engine, 200, 0);
    assert_eq!(caps.len(), 8);
    assert!(
        caps.iter().all(|c| *c == expected_frame(&[])),
        "{caps:02x?}"
    );
    assert_eq!(s.externs[0].sync_calls, 200);
    set(
        &engine,
        ExternPolicy::asynchronous(Executor::DedicatedCores),
        ExternPolicy::asynchronous(Executor::InlineCryptoDevice),
    );
    let (s, caps) = run_and_capture(&engine, 200, 200);
    assert!(caps.iter().all(|c| *c == expected_frame(&[])));
    assert!(s.externs.iter().all(|x| x.async_completed == 200), "{s:#?}");
}

#[test]
fn policy_change_while_running_accounts_for_every_packet() {
    let (_source, engine) = engine(endless(50_000), 0);
    engine.start();
    wait(&engine, "traffic", |s| s.tx_packets > 1000);
    let dedicated = ExternPolicy::asynchronous(Executor::DedicatedCores);
    for _ in 0..3 {
        set(
            &engine,
            dedicated,
            ExternPolicy::asynchronous(Executor::InlineCryptoDevice),
        );
        set(
            &engine,
            ExternPolicy::default(),
            ExternPolicy::with_mode(Mode::Skip),
        );
    }
    engine.stop();
    let s = engine.stats();
    assert!(!s.running);
    // Every reconfiguration and the stop wait for parked packets:
    // everything received was sent or counted as dropped.
    assert_eq!(s.tx_packets + s.drops.total(), s.rx_packets, "{s:#?}");
    assert!(s.externs.iter().all(|x| x.in_flight == 0));
}

#[test]
fn a_full_context_pool_holds_packets_back_and_drops_none() {
    let (_source, engine) = engine(finite(5000, 4), 0);
    let tiny = one_context();
    // A 32-packet rx burst meets a pool of one: the rest of the burst
    // waits for the context (as DPDK SWX keeps a packet parked), and the
    // worker takes nothing more from rx meanwhile.
    let s = run_with(
        &engine,
        (tiny, ExternPolicy::default()),
        "all 5000 packets accounted",
        5000,
    );
    assert_eq!(s.drops.total(), 0, "{s:#?}");
    assert!(s.externs[0].async_waits > 0, "{s:#?}");
    assert_eq!(s.externs[0].drops_pool_exhausted, 0);
    assert_eq!(s.externs[0].async_completed, 5000, "{s:#?}");
    assert_eq!(s.tx_packets, 5000);

    // T4P4S's coroutine contexts (Context, which DPDK SWX does not have)
    // drop what finds the pool taken, and count it.
    let context = with_contexts(tiny);
    let s = run_with(
        &engine,
        (context, ExternPolicy::default()),
        "5000 more packets accounted",
        10_000,
    );
    assert!(s.drops.pool_exhausted > 0, "{s:#?}");
    assert_eq!(s.externs[0].drops_pool_exhausted, s.drops.pool_exhausted);
    assert_eq!(
        s.externs[0].async_completed + s.drops.pool_exhausted,
        10_000,
        "{s:#?}"
    );
    assert_eq!(s.tx_packets, s.externs[0].async_completed);
}

#[test]
fn a_full_device_queue_holds_packets_back() {
    let (_source, engine) = engine(finite(3200, 4), 0);
    let shallow = ExternPolicy {
        queue_depth: 1,
        burst_size: 1,
        ..ExternPolicy::asynchronous(Executor::InlineCryptoDevice)
    };
    let s = run_with(
        &engine,
        (ExternPolicy::default(), shallow),
        "all 3200 packets accounted",
        3200,
    );
    // The device queue holds one call per poll; the rest of each rx burst
    // waits for it.
    assert_eq!(s.drops.total(), 0, "{s:#?}");
    assert!(s.externs[1].async_waits > 0, "{s:#?}");
    assert_eq!(s.externs[1].async_completed, 3200);
    assert_eq!(s.tx_packets, 3200);
    // The encrypt extern, Sync, ran on every packet first.
    assert_eq!(s.externs[0].sync_calls, 3200);

    // With the Context method (T4P4S) a full queue drops.
    let context = with_contexts(shallow);
    let s = run_with(
        &engine,
        (ExternPolicy::default(), context),
        "3200 more packets accounted",
        6400,
    );
    assert!(s.drops.queue_full > 0, "{s:#?}");
    assert_eq!(s.externs[1].drops_queue_full, s.drops.queue_full);
    assert_eq!(s.tx_packets + s.drops.queue_full, 6400);
}

#[test]
fn what_a_held_back_worker_cannot_take_is_lost_by_its_rx_queue() {
    // 5 Mpps offered to a worker whose extern parks one packet at a time:
    // far more than it takes. Its rx queue overflows (counted as the
    // port's rx_missed, never received), and no extern drops anything.
    let (_source, engine) = engine(endless(5_000_000), 0);
    let tiny = one_context();
    set(&engine, tiny, ExternPolicy::default());
    engine.start();
    wait(&engine, "rx queue losses", |s| {
        s.rx_missed > 0 && s.externs[0].async_waits > 0 && s.tx_packets > 100
    });
    engine.stop();
    let s = engine.stats();
    assert_eq!(s.drops.total(), 0, "{s:#?}");
    assert_eq!(s.tx_packets, s.rx_packets, "{s:#?}");
    assert_eq!(s.externs[0].async_completed, s.rx_packets);
}

#[test]
fn missing_extern_is_refused_by_name_and_nothing_changes() {
    let (_source, engine) = engine(finite(1, 1), 0);
    let before = engine.policy();
    let err = engine
        .set_policy(&[
            (
                "async_encrypt".to_string(),
                ExternPolicy::with_mode(Mode::Skip),
            ),
            ("compress".to_string(), ExternPolicy::default()),
        ])
        .unwrap_err();
    assert!(matches!(&err, PolicyError::UnknownExtern { name, .. } if name == "compress"));
    assert_eq!(err.extern_name(), "compress");
    assert_eq!(engine.policy(), before);
    // An accelerator the emulator does not have is refused the same way.
    let err = engine
        .set_policy(&[(
            "async_decrypt".to_string(),
            ExternPolicy::asynchronous(Executor::Accelerator),
        )])
        .unwrap_err();
    assert!(matches!(err, PolicyError::UnsupportedExecutor { .. }));
}

type Client = ExternRuntimeClient<tonic::transport::Channel>;

/// A policy of extern `name` in `mode`, the rest left to the target.
fn policy(name: &str, mode: pb::Mode) -> pb::ExternPolicy {
    pb::ExternPolicy {
        name: name.into(),
        mode: mode as i32,
        ..Default::default()
    }
}

/// SetPolicy of `externs` on `target`.
async fn set_policy(
    c: &mut Client,
    target: &Option<pb::Target>,
    externs: Vec<pb::ExternPolicy>,
) -> Result<pb::SetPolicyResponse, tonic::Status> {
    let req = pb::SetPolicyRequest {
        target: target.clone(),
        externs,
    };
    c.set_policy(req).await.map(|r| r.into_inner())
}

/// GetPolicy of `target`.
async fn get_policy(
    c: &mut Client,
    target: &Option<pb::Target>,
) -> Result<pb::GetPolicyResponse, tonic::Status> {
    let req = pb::GetPolicyRequest {
        target: target.clone(),
    };
    c.get_policy(req).await.map(|r| r.into_inner())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extern_runtime_service_over_grpc() {
    let (_source, engine) = engine(endless(100_000), 0);
    let engine = Arc::new(engine);
    let registry = EngineRegistry::new();
    registry.insert(7, engine.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(ExternRuntimeService::new(registry).server())
            .serve_with_incoming_shutdown(
                tonic::transport::server::TcpIncoming::from(listener),
                async {
                    let _ = stop_rx.await;
                },
            ),
    );
    let mut client = ExternRuntimeClient::connect(format!("http://{addr}"))
        .await
        .unwrap();
    let target = Some(pb::Target {
        device_id: 7,
        pipeline: "l2crypt".into(),
    });

    let list = client
        .list_externs(pb::ListExternsRequest {
            target: target.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_l2crypt_externs(&list);
    assert_eq!(list.externs[0].p4info_id, 2166930795);
    assert_eq!(list.externs[0].kind, "aes128-cbc-encrypt");
    let caps = list.externs[0].capabilities.as_ref().unwrap();
    assert!(
        caps.executors
            .contains(&(pb::Executor::DedicatedCores as i32))
    );
    assert!(!caps.executors.contains(&(pb::Executor::Accelerator as i32)));
    assert!(caps.max_cores >= 1);

    // Async encrypt, defaults filled in by the target; decrypt unlisted
    // returns to Sync.
    let set = set_policy(
        &mut client,
        &target,
        vec![pb::ExternPolicy {
            executor: pb::Executor::DedicatedCores as i32,
            ..policy("async_encrypt", pb::Mode::Async)
        }],
    )
    .await
    .unwrap();
    assert_eq!(set.externs.len(), 2);
    let enc = &set.externs[0];
    assert_eq!(enc.mode, pb::Mode::Async as i32);
    assert_eq!(enc.suspend, pb::SuspendMethod::PacketDescriptor as i32);
    assert_eq!(
        (enc.cores, enc.burst_size, enc.context_pool, enc.queue_depth),
        (1, 64, 1023, 1024)
    );
    assert_eq!(set.externs[1].mode, pb::Mode::Sync as i32);
    let got = get_policy(&mut client, &target).await.unwrap();
    assert_eq!(got.externs, set.externs);

    engine.start();
    let deadline = Instant::now() + Duration::from_secs(30);
    let stats = loop {
        let s = client
            .get_stats(pb::GetStatsRequest {
                target: target.clone(),
            })
            .await
            .unwrap()
            .into_inner();
        if s.externs[0].async_completed > 1000 && s.externs[0].async_ops_per_second > 0.0 {
            break s;
        }
        assert!(Instant::now() < deadline, "no async ops: {s:#?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let p = stats.pipeline.as_ref().unwrap();
    assert!(p.running);
    assert!(p.packets_per_second > 0.0);
    assert_eq!(p.extern_cores, 1);
    assert!(stats.externs[0].latency_p99_ns >= stats.externs[0].latency_p50_ns);
    assert!(stats.externs[1].sync_calls > 0);
    assert_eq!(p.tables.len(), 2);

    // A policy naming an extern the pipeline does not have: NOT_FOUND with
    // a PolicyError naming it; nothing changes.
    let err = set_policy(
        &mut client,
        &target,
        vec![policy("compress", pb::Mode::Skip)],
    )
    .await
    .unwrap_err();
    assert_eq!(err.code(), tonic::Code::NotFound);
    let detail = policy_error_from_status(&err).unwrap();
    assert_eq!(detail.extern_name, "compress");
    assert_eq!(
        detail.reason,
        pb::policy_error::Reason::UnknownExtern as i32
    );
    let after = get_policy(&mut client, &target).await.unwrap();
    assert_eq!(after.externs, set.externs);

    // Out of range: INVALID_ARGUMENT naming the field.
    let err = set_policy(
        &mut client,
        &target,
        vec![pb::ExternPolicy {
            executor: pb::Executor::DedicatedCores as i32,
            cores: 1000,
            ..policy("async_decrypt", pb::Mode::Async)
        }],
    )
    .await
    .unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert_eq!(policy_error_from_status(&err).unwrap().field, "cores");

    // Unknown device / wrong pipeline.
    let elsewhere = |device_id, pipeline: &str| {
        Some(pb::Target {
            device_id,
            pipeline: pipeline.into(),
        })
    };
    let err = client
        .get_stats(pb::GetStatsRequest {
            target: elsewhere(8, ""),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::NotFound);
    let err = get_policy(&mut client, &elsewhere(7, "router"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::NotFound);

    // Deleting the policy (an empty set) restores the defaults.
    let reset = set_policy(&mut client, &target, vec![]).await.unwrap();
    assert!(
        reset
            .externs
            .iter()
            .all(|x| x.mode == pb::Mode::Sync as i32)
    );

    engine.stop();
    let _ = stop_tx.send(());
    let _ = server.await;
}
