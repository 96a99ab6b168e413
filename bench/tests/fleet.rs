//! The fleet benchmark at a small size (3 Switches × 100 entries), as a
//! correctness check of the operator and of the instrument: every object
//! Ready, the entries on the devices, only the changed entries written,
//! nothing written in an idle resync round. Times are not asserted
//! (`make bench-fleet` measures them, docs/fleet.md).

use std::time::Duration;

use p4fleet_bench::fleet::{self, ApplyMode, Config, Scenario, SetLayout};
use p4fleet_e2e::ControlPlane;

/// The operator's `--drift-seconds` here: the Switch probes (which check
/// the VirtualSwitches' pipelines too) run about three times in the idle
/// round (which lasts about one resync), the VirtualSwitches themselves at
/// most once per resync: a VirtualSwitch that still checked itself every
/// `--drift-seconds` would break the bound below.
const DRIFT_SECONDS: u64 = 1;

/// Runs 3 Switches × 100 entries, resync every 3 s, on two emulator
/// processes (2 + 1 devices, as the bench splits fleets).
/// Each layout on a control plane of its own: the runs use the same
/// namespace and cluster-scoped Switch names, and each runs an operator
/// that reconciles every Switch of its cluster.
async fn small_fleet(apply: ApplyMode, layout: SetLayout) -> fleet::Run {
    let cp = ControlPlane::private().await;
    let bin = tokio::task::spawn_blocking(|| p4fleet_e2e::workspace_binaries().to_path_buf())
        .await
        .unwrap();
    let work = tempfile::tempdir().unwrap();
    let cfg = Config {
        scenario: Scenario::Fleet { switches: 3 },
        entries: 100,
        change_every: 100,
        devices_per_emulator: 2,
        apply,
        layout,
        resync_seconds: 3,
        drift_seconds: DRIFT_SECONDS,
        operator_log_level: "info".into(),
        timeout: Duration::from_secs(180),
        bin,
        work: work.path().to_path_buf(),
    };
    fleet::run(&cp, &cfg).await.expect("fleet run")
}

/// The change phase expected `n` writes and the devices saw just those,
/// as modifies (no insert, no delete); `what` says which.
fn only_modified(change: &fleet::Phase, n: u64, what: &str) {
    assert_eq!(change.expected_writes, n);
    assert_eq!(
        (
            change.device.modifies,
            change.device.inserts,
            change.device.deletes
        ),
        (n, 0, 0),
        "{what}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_small_fleet_gets_ready_writes_only_changes_and_idles_quietly() {
    let run = small_fleet(ApplyMode::Kubectl, SetLayout::PerSwitch).await;
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
    idle_reconciles_are_the_periodic_checks_only(idle, 3.0, DRIFT_SECONDS, 3);
    // The probes of a steady device keep its Capabilities answer (asked
    // again only when its connection, stream or spec changes) and ask one
    // pipeline check each.
    assert!(
        idle.rpcs_of("P4Runtime/GetForwardingPipelineConfig") >= 3,
        "the probes ran: {:?}",
        idle.rpcs
    );
    assert_eq!(
        idle.rpcs_of("P4Runtime/Capabilities"),
        0,
        "Capabilities asked of steady devices: {:?}",
        idle.rpcs
    );

    let change = run.phase("change").expect("change phase");
    only_modified(change, 3, "only the changed entries are written");
    assert_eq!(change.device.entries, 300);
}

/// The other fleet shape (`--sets shared`): one selector set writing the
/// same entries to every Switch; its 1 % change is one ConfigMap and
/// writes the changed entry on each device, nothing else.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shared_set_fleet_writes_its_change_to_every_switch() {
    let run = small_fleet(ApplyMode::Api, SetLayout::Shared).await;
    assert_eq!(run.error, None, "{run:#?}");
    let create = run.phase("create").expect("create phase");
    // The program, 3 × (Switch, VirtualSwitch), the ConfigMap and the set.
    assert_eq!(create.objects_applied, 1 + 3 * 2 + 2);
    assert_eq!(create.device.entries, 300, "entries on the devices");
    assert_eq!(create.device.inserts, 300);
    let idle = run.phase("idle").expect("idle phase");
    assert_eq!(idle.device.write_rpcs, 0, "device writes in an idle round");
    assert_eq!(idle.status_writes, 0.0, "status writes in an idle round");
    let change = run.phase("change").expect("change phase");
    assert_eq!(change.objects_applied, 1, "one ConfigMap");
    only_modified(change, 3, "only the changed entry, on each device");
}

/// What the design says an idle round runs (docs/performance.md and
/// docs/reliability.md): each object's own periodic check and nothing else (no
/// watch event, no device change, no retry), each at most once per its
/// period, spread by up to a tenth below it: Switches every
/// `--drift-seconds` (their probe checks the VirtualSwitches' pipelines),
/// VirtualSwitches, TableEntrySets and P4Programs every `--resync-seconds`. Counted from the operator's
/// `p4fleet_reconcile_triggers_total`; an upper bound over the round as
/// long as it lasted, not a timing.
fn idle_reconciles_are_the_periodic_checks_only(
    idle: &fleet::Phase,
    switches: f64,
    drift_seconds: u64,
    resync_seconds: u64,
) {
    assert!(
        !idle.triggers.is_empty(),
        "no reconcile in the idle round: {idle:#?}"
    );
    for (key, n) in &idle.triggers {
        assert!(
            key.ends_with("/requeue"),
            "{key}: {n} reconciles in an idle round (all: {:?})",
            idle.triggers
        );
    }
    let per_object = |period: u64| (idle.seconds / (0.9 * period as f64)).floor() + 1.0;
    let count = |kind: &str| {
        idle.triggers
            .get(&format!("{kind}/requeue"))
            .copied()
            .unwrap_or(0.0)
    };
    for (kind, objects, period) in [
        ("Switch", switches, drift_seconds),
        ("VirtualSwitch", switches, resync_seconds),
        ("TableEntrySet", switches, resync_seconds),
        ("P4Program", 1.0, resync_seconds),
    ] {
        let bound = objects * per_object(period);
        assert!(
            count(kind) <= bound,
            "{kind}: {} reconciles in an idle round of {:.1} s, at most {bound} by design (all: {:?})",
            count(kind),
            idle.seconds,
            idle.triggers
        );
    }
}
