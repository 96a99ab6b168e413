//! A Canary rollout of a P4Program across four Bmv2 Switches on the
//! emulator (issue 34, item 2, first wiring): a selector TableEntrySet
//! fills all four; the program rolls out `{switches: 1}` then
//! `{percent: 100}` with a 3 s analysis window.
//!
//! - A good revision: the canary (the VirtualSwitch with the lowest
//!   `p4fleet.dev/rollout-order`) runs it while the three others still run
//!   the old one (their devices' cookies); then all four, `Completed`.
//! - A revision whose entries fail on the canary's device (the emulator's
//!   injected fault): `RolledBack` with the failed check
//!   `EntriesReapplied` and the canary named, a Warning Event, the canary
//!   back on the last good revision, and the three others never loaded it.
//! - The sources reverted to the good revision: the rollout ends
//!   `Completed` from revision 3, the `RolledBack` condition goes, and no
//!   device is pushed.

use std::time::Duration;

use p4fleet_crds::{RolloutPhase, find_condition};
use p4fleet_e2e::firewall::{self, arm_fault};
use p4fleet_e2e::processes::{build_binaries as bin, operator_http_addr, spawn_operator};
use p4fleet_e2e::rollout::{
    DEVICES, Fleet, assert_rollout_metrics, cookies, current_revision, phase, phase_of,
    phase_of_while_others_stay, publish, pushes, set_ready, source, start, teardown,
};
use p4fleet_e2e::{ControlPlane, TestNamespace, event_about, wait_for};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_canary_rollout_moves_the_canary_first_and_a_failed_gate_rolls_it_back() {
    let cp = ControlPlane::shared().await;
    let client = cp.client().await;
    let (_emu, addrs) = firewall::emulator(&bin(), "1,2,3,4", None);
    let op = spawn_operator(&bin(), cp.kubeconfig_path(), "rollout-operator", &[]);
    let metrics = operator_http_addr(&op.log, Duration::from_secs(60));
    let ns = TestNamespace::new(&client).await;
    let rollout = json!({"strategy": "Canary",
        "steps": [{"switches": 1}, {"percent": 100}],
        "maxUnavailable": 2, "analysis": {"seconds": 3},
        "progressDeadlineSeconds": 60});
    let Fleet {
        programs,
        cms,
        sets,
        c1,
    } = start(&client, ns.name(), [addrs.p4runtime; 4], rollout).await;
    assert_eq!(cookies(addrs.stats), vec![Some(c1); 4]);

    // A good revision: the canary first, alone, then everyone.
    let c2 = publish(&cms, &programs, 2).await;
    let at_canary = wait_for(
        "the canary on revision 2",
        Duration::from_secs(60),
        || async {
            let now = cookies(addrs.stats);
            (now[0] == Some(c2))
                .then_some(now.clone())
                .ok_or(format!("{now:?}"))
        },
    )
    .await;
    assert_eq!(at_canary[1..], [Some(c1); 3], "only the canary moved first");
    let done = phase(&programs, RolloutPhase::Completed).await;
    assert_eq!(
        (done.to.revision, done.from.as_ref().map(|f| f.revision)),
        (2, Some(1))
    );
    assert_eq!(done.moved[0].virtual_switch, "vs-0");
    assert_eq!(cookies(addrs.stats), vec![Some(c2); 4]);
    set_ready(&sets).await;
    current_revision(&programs, 2).await;

    // A revision whose entries fail on the canary's device: rolled back.
    arm_fault(
        addrs.stats,
        DEVICES[0],
        "kind=fail-updates&every=1&count=1000",
    );
    let c3 = publish(&cms, &programs, 3).await;
    let back = phase_of_while_others_stay(
        &programs,
        RolloutPhase::RolledBack,
        |_| true,
        || cookies(addrs.stats),
        (c2, c3),
    )
    .await;
    let f = back.failure.clone().unwrap();
    assert_eq!(
        (f.check.as_str(), f.virtual_switch.as_str()),
        ("EntriesReapplied", "vs-0"),
        "{f:?}"
    );
    assert!(f.message.contains("entries failed"), "{}", f.message);
    assert_eq!(back.to.revision, 3);
    assert_eq!(back.rolled_back, 1);
    let ev = event_about(&client, ns.name(), "firewall", Some("RolledBack")).await;
    assert_eq!(ev.type_.as_deref(), Some("Warning"));
    let p = programs.get("firewall").await.unwrap();
    let c = find_condition(&p.status.unwrap().conditions, "RolledBack")
        .cloned()
        .expect("a RolledBack condition");
    assert!(c.is_true(), "{c:?}");
    assert!(
        c.message.contains("EntriesReapplied") && c.message.contains("vs-0"),
        "{}",
        c.message
    );
    let want = [
        ("phase", ",phase=\"RolledBack\"", 1.0),
        ("phase", ",phase=\"Completed\"", 0.0),
        ("revision", "", 3.0),
        ("rollbacks_total", "", 1.0),
        ("completed_total", "", 1.0),
    ];
    assert_rollout_metrics(metrics, "p4fleet_rollout_", ns.name(), "firewall", &want);
    wait_for(
        "the canary back on revision 2",
        Duration::from_secs(60),
        || async {
            let now = cookies(addrs.stats);
            (now == vec![Some(c2); 4])
                .then_some(())
                .ok_or(format!("{now:?}"))
        },
    )
    .await;
    // Once the device takes entries again, the set is whole again.
    firewall::clear_faults(addrs.stats, DEVICES[0]);
    set_ready(&sets).await;
    assert_eq!(
        programs
            .get("firewall")
            .await
            .unwrap()
            .status
            .unwrap()
            .rollout
            .unwrap()
            .phase,
        RolloutPhase::RolledBack,
        "a rolled back revision stays back"
    );

    // The sources reverted to what the fleet runs: the rollout of
    // revision 3 ends, Completed back on that content, and no device is
    // pushed for it.
    let before = pushes(addrs.stats);
    source(&cms, "v2").await;
    let reverted = phase_of(&programs, RolloutPhase::Completed, |r| {
        r.from.as_ref().is_some_and(|f| f.revision == 3)
    })
    .await;
    assert_eq!(
        u64::from_str_radix(&reverted.to.digest[..16], 16).unwrap(),
        c2,
        "{reverted:?}"
    );
    let p = programs.get("firewall").await.unwrap();
    let conditions = p.status.unwrap().conditions;
    assert!(
        find_condition(&conditions, "RolledBack").is_none(),
        "{conditions:?}"
    );
    assert_eq!(pushes(addrs.stats), before, "nothing to load");
    teardown(&client, ns).await;
}
