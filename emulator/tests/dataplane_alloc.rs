//! The data plane's per-packet path allocates nothing: a counting global
//! allocator sees (almost) no allocation while hundreds of thousands of
//! packets go through Sync and Async externs (their mailboxes, and packets
//! waiting for a full context pool). Its own test binary, so the allocator
//! counts only this.

use std::sync::Arc;
use std::time::{Duration, Instant};

use p4fleet_emulator::dataplane::alloc::CountingAllocator;
use p4fleet_emulator::dataplane::packet::{self, TrafficConfig};
use p4fleet_emulator::dataplane::{
    ActionCall, Engine, EngineConfig, Executor, ExternPolicy, FieldValue, MemoryTableSource,
    SnapshotEntry, SuspendMethod,
};

#[global_allocator]
static GLOBAL: CountingAllocator = CountingAllocator::new();

#[test]
fn no_allocation_per_packet() {
    let source = Arc::new(MemoryTableSource::new());
    source.set_entries(
        44918510,
        (0..8)
            .map(|i| SnapshotEntry {
                matches: vec![(1, FieldValue::Exact(packet::dst_mac(i).to_vec()))],
                priority: 0,
                action: ActionCall {
                    action_id: 29683729,
                    params: vec![vec![i as u8 + 1]],
                },
            })
            .collect(),
    );
    let info = p4fleet_proto::p4info::parse_text(include_str!("../../examples/l2crypt/p4info.txt"))
        .unwrap();
    let engine = Engine::load(
        include_str!("../../examples/l2crypt/l2crypt_mailbox.spec"),
        &info,
        source,
        EngineConfig {
            traffic: TrafficConfig {
                flows: 8,
                ..TrafficConfig::default()
            },
            // No rate sampling (it allocates a little) during the test.
            stats_interval: Duration::from_secs(3600),
            ..EngineConfig::default()
        },
    )
    .unwrap();
    // Every path: async on a dedicated core with a coroutine context,
    // async on the inline device, and (below) sync.
    engine
        .set_policy(&[
            (
                "async_encrypt".into(),
                ExternPolicy {
                    suspend: Some(SuspendMethod::Context),
                    ..ExternPolicy::asynchronous(Executor::DedicatedCores)
                },
            ),
            (
                "async_decrypt".into(),
                ExternPolicy::asynchronous(Executor::InlineCryptoDevice),
            ),
        ])
        .unwrap();
    engine.start();
    let deadline = Instant::now() + Duration::from_secs(30);
    while engine.stats().tx_packets < 1_000 {
        assert!(Instant::now() < deadline, "no traffic");
        std::thread::sleep(Duration::from_millis(10));
    }
    let (allocs, packets) = measure(&engine);
    assert!(allocs < 10, "{allocs} allocations for {packets} packets");

    // Backpressure: a pool of 4 holds most of each rx burst back in the
    // extern's wait list.
    engine
        .set_policy(&[(
            "async_encrypt".into(),
            ExternPolicy {
                context_pool: 4,
                burst_size: 2,
                ..ExternPolicy::asynchronous(Executor::DedicatedCores)
            },
        )])
        .unwrap();
    let waits = engine.stats().externs[0].async_waits;
    let (allocs, packets) = measure(&engine);
    assert!(
        allocs < 10,
        "{allocs} allocations for {packets} packets (waiting)"
    );
    assert!(engine.stats().externs[0].async_waits > waits);

    engine
        .set_policy(&[("async_decrypt".into(), ExternPolicy::default())])
        .unwrap();
    let (allocs, packets) = measure(&engine);
    assert!(
        allocs < 10,
        "{allocs} allocations for {packets} packets (sync)"
    );
    engine.stop();
}

/// Allocations while at least 20,000 packets pass, however long that takes
/// on this machine: 1 s windows that never call into the engine (reading
/// stats allocates, so it happens between windows).
fn measure(engine: &Engine) -> (u64, u64) {
    let (mut allocs, mut packets) = (0, 0);
    let deadline = Instant::now() + Duration::from_secs(120);
    while packets < 20_000 {
        assert!(Instant::now() < deadline, "only {packets} packets in 120 s");
        let tx0 = engine.stats().tx_packets;
        let a0 = GLOBAL.count();
        std::thread::sleep(Duration::from_secs(1));
        allocs += GLOBAL.count() - a0;
        packets += engine.stats().tx_packets - tx0;
    }
    (allocs, packets)
}
