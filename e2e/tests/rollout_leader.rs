//! A leader change in the middle of a Canary rollout (issue 34, item 5):
//! two operator replicas with leader election. The leader ("a") is frozen
//! (SIGSTOP: a long pause or a partition) while the last step moves the
//! VirtualSwitches one at a time; the standby ("b") takes the Lease and
//! finishes the rollout from its status. Every device is pushed exactly
//! once per revision, and "a", resumed, pushes nothing more.
//! (Its own binary: its operators share one control plane.)

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;
use p4fleet_crds::RolloutPhase;
use p4fleet_e2e::firewall;
use p4fleet_e2e::leaders::{promise_lease, replica, wait_holder};
use p4fleet_e2e::processes::build_binaries as bin;
use p4fleet_e2e::rollout::{
    DEVICES, Fleet, cookies, paused_canary, phase_of, publish, pushes, resume_until_moving,
    set_ready, start, teardown,
};
use p4fleet_e2e::{ControlPlane, TestNamespace};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_change_mid_step_moves_nobody_twice() {
    let cp = ControlPlane::shared().await;
    let client = cp.client().await;
    let (_emu, addrs) = firewall::emulator(&bin(), "1,2,3,4", None);
    let ns = TestNamespace::new(&client).await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), ns.name());
    promise_lease(&leases, "a").await;
    let a = replica(&bin(), cp, ns.name(), "rollout-leader", "a");
    let _b = replica(&bin(), cp, ns.name(), "rollout-leader", "b");
    wait_holder(&leases, "a", 1, Duration::from_secs(60)).await;
    let Fleet {
        programs,
        cms,
        sets,
        c1,
    } = start(&client, ns.name(), [addrs.p4runtime; 4], paused_canary(120)).await;
    let start = pushes(addrs.stats);

    let c2 = publish(&cms, &programs, 2).await;
    phase_of(&programs, RolloutPhase::Paused, |r| r.to.revision == 2).await;
    assert_eq!(
        cookies(addrs.stats),
        vec![Some(c2), Some(c1), Some(c1), Some(c1)]
    );
    let one_load = pushes(addrs.stats)[0] - start[0];
    assert!(one_load > 0);

    // Resume; freeze the leader as soon as the last step moves one.
    resume_until_moving(&programs, addrs.stats, "2/1").await;
    a.signal(libc::SIGSTOP);

    // The standby takes over and finishes from the status.
    wait_holder(&leases, "b", 2, Duration::from_secs(60)).await;
    let done = phase_of(&programs, RolloutPhase::Completed, |r| r.to.revision == 2).await;
    assert_eq!(done.moved.len(), 4, "{done:?}");
    assert_eq!(cookies(addrs.stats), vec![Some(c2); 4]);
    set_ready(&sets).await;
    let end = pushes(addrs.stats);
    for i in 0..DEVICES.len() {
        assert_eq!(
            end[i] - start[i],
            one_load,
            "vs-{i} moved once, from revision 1 to 2: {start:?} -> {end:?}"
        );
    }

    // The old leader, resumed, finds the Lease another's and pushes nothing.
    a.signal(libc::SIGCONT);
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(pushes(addrs.stats), end, "the resumed old leader pushed");
    assert_eq!(cookies(addrs.stats), vec![Some(c2); 4]);
    teardown(&client, ns).await;
}
