//! A P4Program change that would remove a table TableEntrySets still fill
//! is held (issue 10, item 9): on a Bmv2 Switch with a synced set, the
//! program's P4Info is changed so that its table is renamed. The program
//! says `RolloutHeld=True` naming the set and the table (and an Event),
//! the VirtualSwitch keeps its pipeline and the device keeps every entry.
//! The device then restarts empty: the VirtualSwitch loads the content in
//! force again, from its revision's snapshot (the program's spec no
//! longer holds those bytes). The annotation
//! `p4fleet.dev/allow-table-removal: "true"` then lets the change out.

use std::time::Duration;

use kube::api::Api;
use p4fleet_crds::{P4Program, VirtualSwitch, find_condition};
use p4fleet_e2e::firewall::{self, FirewallSet, Kind};
use p4fleet_e2e::processes::{build_binaries as bin, device_entries, device_stat};
use p4fleet_e2e::{TestNamespace, event_about, merge_patch, repo_root, status_until, wait_for};
use serde_json::json;

const ENTRIES: usize = 100;

/// Waits until condition `type_` of P4Program `firewall` has `reason`;
/// returns its message.
async fn program_condition(programs: &Api<P4Program>, type_: &str, reason: &str) -> String {
    let timeout = Duration::from_secs(60);
    p4fleet_e2e::program_condition(programs, "firewall", type_, reason, timeout).await
}

async fn pipeline_loaded(vss: &Api<VirtualSwitch>, reason: &str) {
    let what = format!("VirtualSwitch PipelineLoaded: {reason}");
    status_until(vss, "fw", &what, Duration::from_secs(60), |st| {
        find_condition(&st.conditions, "PipelineLoaded")
            .filter(|c| c.reason == reason)
            .map(|_| ())
            .ok_or(format!("{:?}", st.conditions))
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_removing_a_filled_table_is_held_until_confirmed() {
    let (_cp, client, (emu, addrs), _op) =
        firewall::emulator_and_operator("1", "hold-operator", &firewall::LONG_PERIODS).await;
    let ns = TestNamespace::new(&client).await;
    let set = FirewallSet::merge(ENTRIES);
    firewall::setup(&client, ns.name(), Kind::Bmv2, addrs, 1, set).await;
    let programs: Api<P4Program> = Api::namespaced(client.clone(), ns.name());
    let vss: Api<VirtualSwitch> = Api::namespaced(client.clone(), ns.name());
    wait_for(
        "entries on the device",
        Duration::from_secs(120),
        || async {
            (device_entries(addrs.stats, 1) == Some(ENTRIES as u64))
                .then_some(())
                .ok_or("not yet".to_string())
        },
    )
    .await;
    pipeline_loaded(&vss, "Loaded").await;
    let digest = || async {
        let p = programs.get("firewall").await.unwrap();
        p.status.unwrap_or_default().digest
    };
    let in_force = digest().await;

    // The table renamed: MyIngress.firewall would go away.
    let p4info = std::fs::read_to_string(repo_root().join("examples/firewall/p4info.txt"))
        .unwrap()
        .replace("\"MyIngress.firewall\"", "\"MyIngress.firewall_v2\"")
        .replace("alias: \"firewall\"", "alias: \"firewall_v2\"");
    let patch = json!({"spec": {"p4info": {"inline": p4info}}});
    merge_patch(&programs, "firewall", patch).await;
    let held = program_condition(&programs, "RolloutHeld", "TablesStillTargeted").await;
    eprintln!("held: {held}");
    assert!(
        held.contains("table MyIngress.firewall (TableEntrySet fw on VirtualSwitch fw)"),
        "{held}"
    );
    event_about(&client, ns.name(), "firewall", Some("RolloutHeld")).await;
    assert_eq!(digest().await, in_force, "the content in force stays");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        device_entries(addrs.stats, 1),
        Some(ENTRIES as u64),
        "the device keeps the set's entries"
    );
    let v = vss.get("fw").await.unwrap().status.unwrap_or_default();
    assert_eq!(v.loaded_digest, in_force, "the pipeline in force stays");

    // The device restarts empty while the change is held: the content in
    // force is loaded again from its revision's snapshot (before
    // revisions, the VirtualSwitch waited with ProgramChangeHeld and the
    // device stayed empty).
    drop(emu);
    let (_emu, _) = firewall::emulator(&bin(), "1", Some(addrs));
    let cookie = p4fleet::cookie(in_force.as_deref().unwrap());
    wait_for(
        "the pipeline in force back on the device",
        Duration::from_secs(60),
        || async {
            let got = device_stat(addrs.stats, 1, "cookie");
            (got == Some(cookie))
                .then_some(())
                .ok_or(format!("cookie {got:?}, want {cookie}"))
        },
    )
    .await;
    pipeline_loaded(&vss, "Loaded").await;

    // Confirmed: the change goes out (the emulator empties the table with
    // the new pipeline) and the hold is released.
    let confirm = json!({"metadata": {"annotations": {"p4fleet.dev/allow-table-removal": "true"}}});
    merge_patch(&programs, "firewall", confirm).await;
    program_condition(&programs, "RolloutHeld", "Released").await;
    pipeline_loaded(&vss, "Loaded").await;
    assert_ne!(digest().await, in_force, "the new content is in force");
    ns.delete(&client).await.unwrap();
}
