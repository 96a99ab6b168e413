//! A device that restarts empty is noticed at once and made exact again,
//! and status never says Ready while it is not: the emulator (its own
//! process, so it can be killed) is `kill -9`ed under a Ready
//! 30,000-entry TableEntrySet and restarted empty on the same ports.
//!
//! The operator runs with resync and drift periods far longer than the
//! test, so recovery can only come from the broken and re-opened
//! arbitration / subscription stream. While the device is away or being
//! refilled, status is polled against the emulator's own entry count.
//! The times printed are those in docs/reliability.md.

use std::time::{Duration, Instant};

use kube::Client;
use kube::api::Api;
use p4fleet_crds::{
    Condition, Switch, TableEntrySet, TableEntrySetStatus, VirtualSwitch, find_condition,
};
use p4fleet_e2e::firewall::{self, Addrs, FirewallSet, Kind};
use p4fleet_e2e::lie_watch::LieWatch;
use p4fleet_e2e::processes::{Proc, build_binaries, device_entries, shared_operator};
use p4fleet_e2e::{ControlPlane, TestNamespace, status_until, switch_unreachable, wait_for};

const ENTRIES: usize = 30_000;

/// The emulator and operator binaries, built (debug) once per test binary.
/// The emulator with devices 1 (Bmv2) and 11 (Tofino).
fn emulator(addrs: Option<Addrs>) -> (Proc, Addrs) {
    firewall::emulator(&build_binaries(), "1,11", addrs)
}

/// Program, Switch, VirtualSwitch and a 30,000-entry TableEntrySet.
async fn setup(client: &Client, ns: &str, kind: Kind, addrs: Addrs, device: u64) -> String {
    let set = FirewallSet::merge(ENTRIES);
    firewall::setup(client, ns, kind, addrs, device, set).await
}

fn is_true(conditions: &[Condition], t: &str) -> bool {
    find_condition(conditions, t).is_some_and(Condition::is_true)
}

fn ready(st: &TableEntrySetStatus) -> bool {
    is_true(&st.conditions, "Ready") && st.applied == ENTRIES as u64
}

p4fleet_e2e::bmv2_and_tofino_tests! {
    restarted_empty_device:
        a_restarted_empty_device_is_refilled_at_once_bmv2 on 1,
        a_restarted_empty_device_is_refilled_at_once_tofino on 11,
}

/// One emulator per test: killing it must not disturb the other test.
async fn restarted_empty_device(kind: Kind, device: u64) {
    let cp = ControlPlane::shared().await;
    let client = cp.client().await;
    let kubeconfig = cp.kubeconfig_path().to_path_buf();
    shared_operator(
        &build_binaries(),
        &kubeconfig,
        "restart-operator",
        &firewall::LONG_PERIODS,
    );
    let (emu, addrs) = emulator(None);
    let ns = TestNamespace::new(&client).await;
    let ns = ns.name().to_string();
    let sw = setup(&client, &ns, kind, addrs, device).await;
    let sets: Api<TableEntrySet> = Api::namespaced(client.clone(), &ns);
    let switches: Api<Switch> = Api::all(client.clone());
    let vss: Api<VirtualSwitch> = Api::namespaced(client.clone(), &ns);
    let status_where = |what: &'static str, pred: fn(&TableEntrySetStatus) -> bool| {
        let sets = sets.clone();
        async move {
            wait_for(what, Duration::from_secs(120), || async {
                let st = sets.get("fw").await.map_err(|e| e.to_string())?;
                let st = st.status.unwrap_or_default();
                pred(&st).then_some(()).ok_or(format!("{st:?}"))
            })
            .await
        }
    };
    status_where("Ready with 30000 applied", ready).await;
    assert_eq!(device_entries(addrs.stats, device), Some(ENTRIES as u64));

    let watch = LieWatch::start(sets.clone(), "fw", addrs.stats, device, ENTRIES as u64);
    // kill -9: no goodbye on any stream.
    drop(emu);
    let killed = Instant::now();
    switch_unreachable(&switches, &sw).await;
    let noticed = killed.elapsed();
    status_where("set not Ready", |st| !is_true(&st.conditions, "Ready")).await;
    watch.arm();
    status_until(
        &vss,
        "fw",
        "VirtualSwitch not Ready",
        Duration::from_secs(30),
        |st| {
            (!is_true(&st.conditions, "Ready"))
                .then_some(())
                .ok_or(format!("{:?}", st.conditions))
        },
    )
    .await;
    // Away a while (the session backs off meanwhile), then back empty.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (_emu, again) = emulator(Some(addrs));
    let restarted = Instant::now();
    assert_eq!(
        device_entries(again.stats, device),
        Some(0),
        "restarted empty"
    );
    status_where("Ready again with 30000 applied", ready).await;
    let recovered = restarted.elapsed();
    let seen = watch.finish().await;
    eprintln!(
        "{kind:?}: after kill -9, Switch Reachable=False seen {noticed:?}, set not Ready seen {:?}; \
         pipeline + {ENTRIES} entries Ready {recovered:?} after the restart; {} status polls",
        seen.noticed, seen.polls
    );
    seen.assert_truthful(&format!("{kind:?}"));
    // Independently: the emulator holds exactly the set's entries.
    assert_eq!(device_entries(again.stats, device), Some(ENTRIES as u64));
    let s = switches.get(&sw).await.unwrap();
    assert!(is_true(
        &s.status.unwrap_or_default().conditions,
        "Reachable"
    ));
}
