//! The operator's entry path in process (bench/src/entry_path.rs) at a
//! small size, against an in-process emulator: every stage runs, every
//! entry of gzip-compressed ConfigMaps reaches the device, a resync writes
//! nothing, and `batchSize`/`maxInFlight: Auto` tunes itself from the
//! writes and settles while writing every entry. Correctness facts only;
//! speed is `make bench-batching`'s and `make bench-entry-path`'s.

use p4fleet_bench::batching::Setting;
use p4fleet_bench::entry_path::{self, EntryPath, MemReads, Stage};
use p4fleet_emulator::{Emulator, EmulatorConfig, RunningEmulator};

async fn emulator() -> RunningEmulator {
    Emulator::start(EmulatorConfig {
        device_ids: vec![1],
        ..Default::default()
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_entry_of_gzip_config_maps_reaches_the_device_through_every_stage() {
    let emu = emulator().await;
    let n = 12_000;
    let maps = entry_path::config_maps(n, 5_000);
    assert_eq!(maps.len(), 3);
    let path = EntryPath::new(
        MemReads::new(maps),
        &emu.p4runtime_addr().to_string(),
        1,
        entry_path::p4info(n).unwrap(),
        serde_json::json!({"batchSize": 1000, "maxInFlight": 4}),
    )
    .await
    .unwrap();
    let mut stages = Vec::new();
    let s = path.sync(&mut |st| stages.push(st)).await.unwrap();
    assert_eq!(
        stages,
        [
            Stage::Fetch,
            Stage::Parse,
            Stage::Plan,
            Stage::Write,
            Stage::Status
        ]
    );
    assert_eq!((s.desired, s.applied, s.written), (12_000, 12_000, 12_000));
    assert_eq!((s.status.desired, s.status.applied), (Some(12_000), 12_000));
    assert_eq!(emu.stats(1).unwrap().entries, 12_000);
    // A resync of the same texts: read back, nothing to write.
    let again = path.sync(&mut |_| {}).await.unwrap();
    assert_eq!((again.applied, again.written), (12_000, 0));
    // The cache holds the 3 parses (and the 3 fetched maps) it shares.
    assert_eq!(path.ctx.own.entry_sources.held(), (3, 3));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_tunes_from_the_writes_and_settles_writing_every_entry() {
    let emu = emulator().await;
    let n = 24_000;
    let mut path = EntryPath::new(
        MemReads::new(entry_path::config_maps(n, 8_000)),
        &emu.p4runtime_addr().to_string(),
        1,
        entry_path::p4info(n).unwrap(),
        Setting::Auto.write_spec(),
    )
    .await
    .unwrap();
    // Each sync is one write of 24,000 updates (one observation). The
    // climb ends well within 60 even when every move looks better.
    let mut used = Vec::new();
    for i in 0..60 {
        if i > 0 {
            path.clear().await.unwrap();
        }
        used.push(path.settings());
        let s = path.sync(&mut |_| {}).await.unwrap();
        assert_eq!((s.desired, s.applied), (24_000, 24_000), "sync {i}");
        assert_eq!(emu.stats(1).unwrap().entries, 24_000);
        if path.settled() {
            break;
        }
    }
    assert!(path.settled(), "{used:?}");
    assert_eq!(used[0], (1024, 4), "Auto starts at 1,000 × 4");
    assert_eq!(used[1], used[0], "the start is measured on two syncs");
    assert_ne!(used[2], used[0], "then the setting moved");
    // Where it settled, a write is at least two batches (measurable).
    let (batch, _) = path.settings();
    assert!(batch <= n / 2, "{used:?}");
}
