//! The fleet benchmark at a small size (3 Switches × 100 entries), as a
//! correctness check of the operator and of the instrument: every object
//! Ready, the entries on the devices, only the changed entries written,
//! nothing written in an idle resync round. Times are not asserted
//! (`make bench-fleet` measures them, docs/fleet.md).

use std::time::Duration;

use p4fleet_bench::fleet::{self, ApplyMode, Config, Scenario};
use p4fleet_e2e::ControlPlane;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_small_fleet_gets_ready_writes_only_changes_and_idles_quietly() {
    let cp = ControlPlane::shared().await;
    let bin = tokio::task::spawn_blocking(|| p4fleet_e2e::workspace_binaries().to_path_buf())
        .await
        .unwrap();
    let work = tempfile::tempdir().unwrap();
    let cfg = Config {
        scenario: Scenario::Fleet { switches: 3 },
        entries: 100,
        change_every: 100,
        // Two emulator processes (2 + 1 devices), as the bench splits fleets.
        devices_per_emulator: 2,
        apply: ApplyMode::Kubectl,
        resync_seconds: 3,
        operator_log_level: "info".into(),
        timeout: Duration::from_secs(180),
        bin,
        work: work.path().to_path_buf(),
    };
    let run = fleet::run(cp, &cfg).await.expect("fleet run");
    assert_eq!(run.error, None, "{run:#?}");
    assert_eq!(run.emulators, 2);

    let create = run.phase("create").expect("create phase");
    assert_eq!(create.objects_applied, 1 + 3 * 4);
    assert_eq!(create.device.entries, 300, "entries on the devices");
    assert_eq!(create.device.inserts, 300);
    assert!(create.status_writes > 0.0 && create.reconcile_count() > 0.0);

    let idle = run.phase("idle").expect("idle phase");
    assert!(idle.device.read_rpcs >= 3, "every device read back");
    assert_eq!(idle.device.write_rpcs, 0, "device writes in an idle round");
    assert_eq!(idle.status_writes, 0.0, "status writes in an idle round");

    let change = run.phase("change").expect("change phase");
    assert_eq!(change.expected_writes, 3);
    assert_eq!(
        (
            change.device.modifies,
            change.device.inserts,
            change.device.deletes
        ),
        (3, 0, 0),
        "only the changed entries are written"
    );
    assert_eq!(change.device.entries, 300);
}
