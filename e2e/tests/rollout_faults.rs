//! A Canary rollout with an indefinite pause after the canary, across the
//! four Bmv2 Switches of [`p4fleet_e2e::rollout`] (issue 34, item 5): the
//! operator killed (SIGKILL) while paused and while the last step moves, a
//! new revision during the pause; no device reloads on a restart, none
//! moves twice, and none but the canary ever sees the abandoned revision.
//! (Its own binary: each operator here watches the whole control plane.)

use std::time::Duration;

use p4fleet_crds::RolloutPhase;
use p4fleet_e2e::firewall;
use p4fleet_e2e::processes::{
    build_binaries as bin, operator_http_addr, reconciled, spawn_operator,
};
use p4fleet_e2e::rollout::{
    DEVICES, Fleet, annotate_resume, cookies, paused_canary, phase_of, phase_of_while_others_stay,
    publish, pushes, resume_until_moving, set_ready, start, teardown,
};
use p4fleet_e2e::{ControlPlane, TestNamespace};

/// Starts an operator and waits until it serves /metrics and, when
/// `restart`, has reconciled the (existing) program at least once.
async fn operator(cp: &ControlPlane, log: &str, restart: bool) -> p4fleet_e2e::processes::Proc {
    let op = spawn_operator(&bin(), cp.kubeconfig_path(), log, &[]);
    let metrics = operator_http_addr(&op.log, Duration::from_secs(60));
    if !restart {
        return op;
    }
    reconciled(metrics, "P4Program", 1.0).await;
    op
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollout_survives_kill_9_and_a_new_revision_restarts_it() {
    let cp = ControlPlane::shared().await;
    let client = cp.client().await;
    let (_emu, addrs) = firewall::emulator(&bin(), "1,2,3,4", None);
    let op = operator(cp, "rollout-faults-operator-1", false).await;
    let ns = TestNamespace::new(&client).await;
    let Fleet {
        programs,
        cms,
        sets,
        c1,
    } = start(&client, ns.name(), [addrs.p4runtime; 4], paused_canary(120)).await;
    assert_eq!(cookies(addrs.stats), vec![Some(c1); 4]);
    let start = pushes(addrs.stats);

    // Revision 2 reaches the canary, then waits at the indefinite pause.
    let c2 = publish(&cms, &programs, 2).await;
    let paused = phase_of(&programs, RolloutPhase::Paused, |r| r.to.revision == 2).await;
    assert_eq!(paused.step, 1, "{paused:?}");
    assert_eq!(
        cookies(addrs.stats),
        vec![Some(c2), Some(c1), Some(c1), Some(c1)]
    );
    let one_load = pushes(addrs.stats)[0] - start[0];
    assert!(one_load > 0, "the canary was pushed its pipeline");
    assert_eq!(
        pushes(addrs.stats)[1..],
        start[1..],
        "only the canary moved"
    );

    // kill -9 while paused: the new operator resumes the pause from the
    // status and pushes nothing.
    let before = pushes(addrs.stats);
    drop(op);
    let op = operator(cp, "rollout-faults-operator-2", true).await;
    set_ready(&sets).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after = phase_of(&programs, RolloutPhase::Paused, |_| true).await;
    assert_eq!((after.to.revision, after.step), (2, 1), "{after:?}");
    assert_eq!(after.moved.len(), 1, "{after:?}");
    assert_eq!(pushes(addrs.stats), before, "a restart reloads nothing");
    assert_eq!(
        cookies(addrs.stats),
        vec![Some(c2), Some(c1), Some(c1), Some(c1)]
    );

    // Revision 3 during the pause: the rollout starts again from the first
    // step; the three others never see revision 2 or 3 before the pause.
    let c3 = publish(&cms, &programs, 3).await;
    let restarted = phase_of_while_others_stay(
        &programs,
        RolloutPhase::Paused,
        |r| r.to.revision == 3,
        || cookies(addrs.stats),
        (c1, c3),
    )
    .await;
    assert_eq!(restarted.step, 1, "{restarted:?}");
    assert_eq!(restarted.from.as_ref().map(|f| f.revision), Some(1));
    assert_eq!(cookies(addrs.stats)[0], Some(c3));

    // An annotation naming revision 2's pause passes nothing.
    annotate_resume(&programs, "2/1").await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    let still = phase_of(&programs, RolloutPhase::Paused, |_| true).await;
    assert_eq!((still.to.revision, still.step), (3, 1), "{still:?}");

    // Resumed: the last step moves the three others one at a time; the
    // operator is killed while it does, and the new one finishes the step.
    resume_until_moving(&programs, addrs.stats, "3/1").await;
    drop(op);
    let _op = operator(cp, "rollout-faults-operator-3", true).await;
    let done = phase_of(&programs, RolloutPhase::Completed, |r| r.to.revision == 3).await;
    assert_eq!(done.moved.len(), 4, "{done:?}");
    assert_eq!(cookies(addrs.stats), vec![Some(c3); 4]);
    let end = pushes(addrs.stats);
    for i in 1..DEVICES.len() {
        assert_eq!(
            end[i] - start[i],
            one_load,
            "vs-{i} moved once, from revision 1 to 3: {start:?} -> {end:?}"
        );
    }
    assert_eq!(end[0] - start[0], 2 * one_load, "the canary: 2, then 3");
    set_ready(&sets).await;
    teardown(&client, ns).await;
}
