//! A Canary rollout of one P4Program across twelve VirtualSwitches of all
//! four kinds (issue 34, "Tests"): three Bmv2, three Tofino (BFRT) and
//! three Dpdk Switches of one emulator and three slots of one emulated
//! NetFPGA-SUME ([`p4fleet_e2e::mixed`]), a selector TableEntrySet on all
//! twelve, the operator spawned here against the shared kube-apiserver.
//!
//! - A good revision in three steps, `{switches: 1}`, `{percent: 50}`,
//!   `{percent: 100}`, with an indefinite pause after the first two. After
//!   each step every device is read back, not through the operator (the
//!   pipeline cookie, the Tofino binary as pushed, the slot's digest):
//!   exactly the step's VirtualSwitches run the new build and were loaded,
//!   the others still run the old one and were not loaded. While a step
//!   runs, no device past it may move. At the end all twelve run it, and
//!   each table holds the set's entries (read back). With a
//!   `minThroughputRatio`, each Dpdk and FPGA VirtualSwitch moved with its
//!   packets/s recorded, and no Bmv2 or Tofino one (they report none).
//! - A revision whose entries fail on the canary's device (a Tofino; the
//!   emulator's injected fault): `RolledBack` with the failed check
//!   `EntriesReapplied` and the canary named, the canary back on the old
//!   build exactly, and the eleven others never loaded anything.

use std::time::{Duration, Instant};

use p4fleet_crds::{RolloutPhase, RolloutStatus, find_condition};
use p4fleet_e2e::firewall::{arm_fault, clear_faults, keys_of_lines};
use p4fleet_e2e::mixed::{Kind, Mixed};
use p4fleet_e2e::processes::{build_binaries as bin, spawn_operator};
use p4fleet_e2e::rollout::{ENTRIES, annotate_resume, current_revision};
use p4fleet_e2e::{ControlPlane, TestNamespace, event_about, wait_for};
use serde_json::json;

/// Waits until the rollout to revision `to` is in `phase` (at `step`, when
/// given), asserting on every poll that the members past the first
/// `moved` still run `old` on their devices.
async fn wait_step(
    fleet: &Mixed,
    to: i64,
    phase: RolloutPhase,
    step: Option<u32>,
    moved: usize,
    old: &str,
) -> RolloutStatus {
    wait_for(
        &format!("revision {to}'s rollout {phase:?} at step {step:?}"),
        Duration::from_secs(120),
        || async {
            let now = fleet.builds().await;
            for (m, b) in fleet.members[moved..].iter().zip(&now[moved..]) {
                assert_eq!(b, old, "{} left {old} before its step: {now:?}", m.vs);
            }
            let p = fleet
                .programs
                .get("firewall")
                .await
                .map_err(|e| e.to_string())?;
            let r = p.status.unwrap_or_default().rollout;
            r.clone()
                .filter(|r| r.to.revision == to && r.phase == phase)
                .filter(|r| step.is_none_or(|s| r.step == s))
                .ok_or(format!("{r:?}"))
        },
    )
    .await
}

/// After a step that moved the first `moved` members from `old` to `new`:
/// their devices run `new` and were loaded since `before`; the others run
/// `old` and were not. The status names the same VirtualSwitches, in order.
async fn after_step(
    fleet: &Mixed,
    st: &RolloutStatus,
    moved: usize,
    (old, new): (&str, &str),
    before: &[String],
) {
    let n = fleet.members.len();
    let want: Vec<&str> = (0..n).map(|i| if i < moved { new } else { old }).collect();
    assert_eq!(fleet.builds().await, want, "the builds on the devices");
    let now = fleet.loads().await;
    for (i, m) in fleet.members.iter().enumerate() {
        assert_eq!(
            now[i] != before[i],
            i < moved,
            "{} ({:?}) loaded: {} -> {}",
            m.vs,
            m.kind,
            before[i],
            now[i]
        );
    }
    let names: Vec<&str> = st.moved.iter().map(|m| m.virtual_switch.as_str()).collect();
    let first: Vec<&str> = fleet.members[..moved]
        .iter()
        .map(|m| m.vs.as_str())
        .collect();
    assert_eq!(names, first, "status.rollout.moved");
}

/// Every member's table holds the set's entries, read from the device.
async fn entries_on_every_device(fleet: &Mixed) {
    let want = keys_of_lines(0, ENTRIES);
    for m in &fleet.members {
        assert_eq!(fleet.keys(m).await, want, "{}'s table", m.vs);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_canary_across_twelve_switches_of_four_kinds_moves_step_by_step_and_rolls_back() {
    let t0 = Instant::now();
    let cp = ControlPlane::shared().await;
    let client = cp.client().await;
    let _op = spawn_operator(&bin(), cp.kubeconfig_path(), "rollout-mixed-operator", &[]);
    let ns = TestNamespace::new(&client).await;
    let rollout = json!({"strategy": "Canary",
        "steps": [{"switches": 1}, {"pause": {}}, {"percent": 50}, {"pause": {}},
            {"percent": 100}],
        "maxUnavailable": 3, "analysis": {"seconds": 2, "minThroughputRatio": 0.1},
        "progressDeadlineSeconds": 120});
    let fleet = Mixed::start(&client, ns.name(), rollout).await;
    assert_eq!(fleet.builds().await, vec!["v1"; 12]);
    entries_on_every_device(&fleet).await;
    eprintln!("twelve on v1 with their entries: {:?}", t0.elapsed());

    // Revision 2 in three steps, the devices read after each.
    let t = Instant::now();
    let before = fleet.loads().await;
    fleet.source("v2").await;
    fleet.record(2, "v2").await;
    let st = wait_step(&fleet, 2, RolloutPhase::Paused, Some(1), 1, "v1").await;
    after_step(&fleet, &st, 1, ("v1", "v2"), &before).await;
    annotate_resume(&fleet.programs, "2/1").await;
    let st = wait_step(&fleet, 2, RolloutPhase::Paused, Some(3), 6, "v1").await;
    after_step(&fleet, &st, 6, ("v1", "v2"), &before).await;
    annotate_resume(&fleet.programs, "2/3").await;
    let done = wait_step(&fleet, 2, RolloutPhase::Completed, None, 12, "v1").await;
    after_step(&fleet, &done, 12, ("v1", "v2"), &before).await;
    assert_eq!(done.from.as_ref().map(|f| f.revision), Some(1));
    // The throughput check had figures where the target reports them (a
    // DPDK pipeline's packets/s, an FPGA slot's sent packets), and none
    // on Bmv2 and Tofino: the firewall program has no direct counter.
    for m in &fleet.members {
        let moved = done.moved.iter().find(|x| x.virtual_switch == m.vs);
        let before = moved.expect(&m.vs).packets_per_second_before;
        let reports = matches!(m.kind, Kind::Dpdk | Kind::Fpga);
        assert_eq!(before.is_some(), reports, "{}: {before:?}", m.vs);
    }
    fleet.set_ready().await;
    entries_on_every_device(&fleet).await;
    current_revision(&fleet.programs, 2).await;
    eprintln!("revision 2 rolled out in three steps: {:?}", t.elapsed());

    // Revision 3: the canary's device refuses its entries. It rolls back,
    // and the eleven others are never loaded.
    let t = Instant::now();
    let canary = fleet.members[0].clone();
    arm_fault(
        fleet.stats,
        canary.device,
        "kind=fail-updates&every=1&count=1000",
    );
    let before = fleet.loads().await;
    fleet.source("v3").await;
    fleet.record(3, "v3").await;
    let back = wait_step(&fleet, 3, RolloutPhase::RolledBack, None, 1, "v2").await;
    let f = back.failure.clone().expect("a failure");
    assert_eq!(
        (
            f.check.as_str(),
            f.virtual_switch.as_str(),
            f.switch.as_deref()
        ),
        ("EntriesReapplied", "tofino-0", Some(canary.switch.as_str())),
        "{f:?}"
    );
    assert!(f.message.contains("entries failed"), "{}", f.message);
    assert_eq!((back.moved.len(), back.rolled_back), (1, 1), "{back:?}");
    wait_for("the canary back on v2", Duration::from_secs(60), || async {
        let now = fleet.builds().await;
        (now == vec!["v2"; 12])
            .then_some(())
            .ok_or(format!("{now:?}"))
    })
    .await;
    let now = fleet.loads().await;
    assert_ne!(now[0], before[0], "the canary loaded 3, then 2 again");
    assert_eq!(now[1..], before[1..], "the eleven others were not loaded");
    let ev = event_about(&client, ns.name(), "firewall", Some("RolledBack")).await;
    assert_eq!(ev.type_.as_deref(), Some("Warning"));
    let p = fleet.programs.get("firewall").await.unwrap();
    let c = find_condition(&p.status.unwrap().conditions, "RolledBack")
        .cloned()
        .expect("a RolledBack condition");
    assert!(c.is_true() && c.message.contains("tofino-0"), "{c:?}");
    // Once the device takes entries again, the canary's table is whole.
    clear_faults(fleet.stats, canary.device);
    fleet.set_ready().await;
    assert_eq!(fleet.keys(&canary).await, keys_of_lines(0, ENTRIES));
    assert_eq!(fleet.builds().await, vec!["v2"; 12]);
    eprintln!("revision 3 rolled back: {:?}", t.elapsed());
    fleet.teardown(&client, ns).await;
    eprintln!("the whole test: {:?}", t0.elapsed());
}
