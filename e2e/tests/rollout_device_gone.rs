//! A device that goes away in the middle of a Canary rollout's first step
//! (issue 34, item 5): the canary's device runs in an emulator process of
//! its own, which is killed right after the new revision is recorded. The
//! step's gate fails (the device cannot load the revision, or its Switch
//! is no longer Reachable) instead of hanging: `RolledBack` naming the
//! canary, and the three other devices never see the revision. When the
//! device comes back (empty, at the same address) the canary runs the
//! revision before again, its entries re-applied; `p4fleet rollout retry`
//! then rolls the revision out again, to completion on all four.
//! (Its own binary: its operator watches the whole control plane.)

use std::net::SocketAddr;
use std::time::Duration;

use p4fleet_crds::RolloutPhase;
use p4fleet_e2e::firewall;
use p4fleet_e2e::processes::{build_binaries as bin, device_stat, p4fleet, spawn_operator};
use p4fleet_e2e::rollout::{
    DEVICES, Fleet, phase_of_while_others_stay, publish, set_ready, start, teardown,
};
use p4fleet_e2e::{ControlPlane, TestNamespace, wait_for};
use serde_json::json;

/// The cookie each device runs: device 1 on `canary`'s side channel, the
/// others on `rest`'s (None while a device does not answer).
fn cookies(canary: SocketAddr, rest: SocketAddr) -> Vec<Option<u64>> {
    DEVICES
        .iter()
        .map(|d| device_stat(if *d == 1 { canary } else { rest }, *d, "cookie"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_device_gone_mid_step_fails_the_gate_and_the_others_never_move() {
    let cp = ControlPlane::shared().await;
    let client = cp.client().await;
    let (canary_emu, canary) = firewall::emulator(&bin(), "1", None);
    let (_rest_emu, rest) = firewall::emulator(&bin(), "2,3,4", None);
    let _op = spawn_operator(&bin(), cp.kubeconfig_path(), "rollout-gone-operator", &[]);
    let ns = TestNamespace::new(&client).await;
    let rollout = json!({"strategy": "Canary",
        "steps": [{"switches": 1}, {"percent": 100}],
        "analysis": {"seconds": 3}, "progressDeadlineSeconds": 20});
    let endpoints = [
        canary.p4runtime,
        rest.p4runtime,
        rest.p4runtime,
        rest.p4runtime,
    ];
    let Fleet {
        programs,
        cms,
        sets,
        c1,
    } = start(&client, ns.name(), endpoints, rollout).await;
    assert_eq!(cookies(canary.stats, rest.stats), vec![Some(c1); 4]);

    // Revision 2; the canary's device goes away as it is recorded.
    let c2 = publish(&cms, &programs, 2).await;
    drop(canary_emu);
    let back = phase_of_while_others_stay(
        &programs,
        RolloutPhase::RolledBack,
        |r| r.to.revision == 2,
        || cookies(canary.stats, rest.stats),
        (c1, c2),
    )
    .await;
    let f = back.failure.clone().expect("a failure");
    assert_eq!(f.virtual_switch, "vs-0", "{f:?}");
    assert!(
        ["PipelineLoaded", "SwitchReachable", "ProgressDeadline"].contains(&f.check.as_str()),
        "{f:?}"
    );
    assert_eq!(back.moved.len(), 1, "{back:?}");

    // The device comes back empty at the same address: the canary runs
    // revision 1 again, and the set is whole on all four.
    let (_canary_emu, _) = firewall::emulator(&bin(), "1", Some(canary));
    wait_for(
        "the canary back on revision 1",
        Duration::from_secs(90),
        || async {
            let now = cookies(canary.stats, rest.stats);
            (now == vec![Some(c1); 4])
                .then_some(())
                .ok_or(format!("{now:?}"))
        },
    )
    .await;
    set_ready(&sets).await;
    let p = programs.get("firewall").await.unwrap();
    assert_eq!(
        p.status.unwrap().rollout.map(|r| r.phase),
        Some(RolloutPhase::RolledBack),
        "a rolled back revision stays back"
    );

    // The cause gone, a person retries the revision: it rolls out again
    // from its first step and completes on all four.
    let kubeconfig = cp.kubeconfig_path().to_path_buf();
    let args = ["rollout", "retry", "firewall", "-n", ns.name()].map(String::from);
    let out = tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        p4fleet(&kubeconfig, &args)
    })
    .await
    .unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{said}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(said.contains("p4fleet.dev/rollout-retry=2@"), "{said}");
    let done = wait_for(
        "the retried revision 2 on all four",
        Duration::from_secs(120),
        || async {
            let now = cookies(canary.stats, rest.stats);
            let p = programs.get("firewall").await.map_err(|e| e.to_string())?;
            let r = p.status.unwrap_or_default().rollout;
            r.clone()
                .filter(|r| r.phase == RolloutPhase::Completed && r.to.revision == 2)
                .filter(|_| now == vec![Some(c2); 4])
                .ok_or(format!("{now:?} {r:?}"))
        },
    )
    .await;
    assert_eq!(done.moved.len(), DEVICES.len(), "{done:?}");
    teardown(&client, ns).await;
}
