//! A plan before apply (issue 34, item 4) for entries: on a Bmv2
//! (P4Runtime) and a Tofino (BFRT) Switch, an Exclusive TableEntrySet of
//! 100 entries is synced, `spec.plan` is turned on and its ConfigMap
//! shifted by 50 entries. The plan in status must show 50 inserts and 50
//! deletes with their lines while an independent read shows the devices
//! untouched; turning `plan` off must write exactly that (Event
//! PlanApplied). A second plan, then an entry written behind the
//! operator's back, must be reported as outdated when applied (Event
//! PlanOutdated) and the device still end exact. `p4fleet plan -f` of the
//! changed ConfigMap, run first, must print the same plan and digest on
//! both Switches (on BFRT as a reader bound to the program, with a client
//! id no operator takes), and a set the API server refuses is named with
//! exit code 1.

use std::collections::HashSet;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;
use p4fleet_crds::{TableEntrySet, find_condition};
use p4fleet_e2e::firewall::{self, FirewallSet, Other};
use p4fleet_e2e::processes::p4fleet_plan;
use p4fleet_e2e::{ControlPlane, firewall_lines, merge_patch, set_status_where, wait_event};
use serde_json::json;

const ENTRIES: usize = 100;

async fn patch_set(sets: &Api<TableEntrySet>, plan: bool) {
    let patch = json!({"spec": {"plan": plan}});
    merge_patch(sets, "fw", patch).await;
}

async fn desire(cms: &Api<ConfigMap>, start: usize) {
    let patch = json!({"data": {"entries": firewall_lines(start, ENTRIES)}});
    merge_patch(cms, "fw", patch).await;
}

/// Waits for a plan of `(insert, modify, delete)` of the current
/// generation, with Ready False for PlanOnly; returns its digest.
async fn planned(sets: &Api<TableEntrySet>, want: (u64, u64, u64)) -> String {
    let st = set_status_where(
        sets,
        "fw",
        &format!("a plan of {want:?}"),
        Duration::from_secs(90),
        |st| {
            let not_ready = find_condition(&st.conditions, "Ready")
                .is_some_and(|c| !c.is_true() && c.reason == "PlanOnly");
            st.plan
                .as_ref()
                .is_some_and(|p| (p.insert, p.modify, p.delete) == want)
                && not_ready
        },
    )
    .await;
    let plan = st.plan.unwrap();
    assert_eq!(plan.targets.len(), 1, "{plan:?}");
    let t = &plan.targets[0];
    assert_eq!(t.virtual_switch, "fw");
    assert!(t.error.is_none(), "{t:?}");
    assert_eq!(t.changes.len(), 10, "the first updates as lines: {t:?}");
    let ops: HashSet<char> = t.changes.iter().filter_map(|l| l.chars().next()).collect();
    let expected: HashSet<char> = [(want.0, '+'), (want.1, '~'), (want.2, '-')]
        .into_iter()
        .filter(|(n, _)| *n > 0)
        .map(|(_, op)| op)
        .collect();
    assert!(ops.is_subset(&expected), "{:?}", t.changes);
    assert!(
        t.changes
            .iter()
            .all(|l| l.contains("hdr.ipv4.srcAddr=") && l.contains("=>")),
        "lines in the line format: {:?}",
        t.changes
    );
    plan.digest
}

/// Runs `p4fleet plan -f` on a manifest of ConfigMap `fw` in `ns` holding
/// `entries`; returns what it printed (it must exit 0).
fn plan_cli(cp: &ControlPlane, ns: &str, entries: &str) -> String {
    let manifest = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "fw", "namespace": ns}, "data": {"entries": entries}});
    run_plan(cp, &serde_yaml::to_string(&manifest).unwrap(), Some(0))
}

/// `p4fleet plan -f` on `manifest`: its output, once it exited with `code`.
fn run_plan(cp: &ControlPlane, manifest: &str, code: Option<i32>) -> String {
    let (exit, text, err) = p4fleet_plan(cp.kubeconfig_path(), manifest);
    assert_eq!(exit, code, "{text}\n{err}");
    text
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_shows_what_a_sync_would_write_and_applying_writes_it() {
    // Long periodic passes: only a change of the set or its sources
    // plans or writes.
    let (cp, client, (_emu, addrs), _op) =
        firewall::emulator_and_operator("1,11", "plans-operator", &firewall::LONG_PERIODS).await;
    let set = FirewallSet::exclusive(ENTRIES);
    let cases = firewall::setup_per_kind(&client, addrs, set).await;
    for (kind, device, ns) in &cases {
        let sets: Api<TableEntrySet> = Api::namespaced(client.clone(), ns.name());
        let cms: Api<ConfigMap> = Api::namespaced(client.clone(), ns.name());
        firewall::ready_with(&sets, ENTRIES).await;
        let other = Other::connect(*kind, addrs, *device).await;
        assert_eq!(other.keys().await, firewall::keys_of_lines(0, ENTRIES));

        // `p4fleet plan -f` of the changed ConfigMap, before anything is
        // applied: the set that reads it, planned against the device.
        let cli = plan_cli(cp, ns.name(), &firewall_lines(50, ENTRIES));
        let sw = format!("{}-sw", ns.name());
        // On BFRT too: its client binds to the program as a reader.
        assert!(
            cli.contains(&format!("  fw on {sw}: +50 ~0 -50 (50 unchanged)")),
            "{kind:?}: {cli}"
        );
        let head = format!("TableEntrySet {}/fw: +50 ~0 -50", ns.name());
        let line = cli.lines().find(|l| l.starts_with(&head)).expect(&cli);
        let cli_digest = line.rsplit(' ').next().unwrap().to_string();
        assert_eq!(other.keys().await, firewall::keys_of_lines(0, ENTRIES));

        // Plan: 50 entries go, 50 come; nothing is written.
        patch_set(&sets, true).await;
        desire(&cms, 50).await;
        let digest = planned(&sets, (50, 0, 50)).await;
        assert_eq!(
            cli_digest, digest,
            "{kind:?}: the command line planned what the operator plans"
        );
        // Events of one reason on one object form a series that keeps
        // its first note (events.k8s.io): the first plan may be the one
        // before the ConfigMap changed.
        wait_event(&client, ns.name(), Some("Planned"), "nothing written").await;
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(
            other.keys().await,
            firewall::keys_of_lines(0, ENTRIES),
            "{kind:?}: a plan writes nothing"
        );

        // Apply: exactly the plan.
        patch_set(&sets, false).await;
        firewall::ready_with(&sets, ENTRIES).await;
        wait_event(&client, ns.name(), Some("PlanApplied"), &digest).await;
        assert_eq!(other.keys().await, firewall::keys_of_lines(50, ENTRIES));
        let st = sets.get("fw").await.unwrap().status.unwrap();
        assert!(st.plan.is_none(), "{kind:?}: the plan is gone once applied");

        // A second plan, then the device changes behind it: the apply
        // says so, and the device still ends exact.
        patch_set(&sets, true).await;
        desire(&cms, 100).await;
        let second = planned(&sets, (50, 0, 50)).await;
        assert_ne!(second, digest);
        other
            .insert(&firewall::foreign_entry(), addrs.stats, *device)
            .await;
        patch_set(&sets, false).await;
        wait_event(&client, ns.name(), Some("PlanOutdated"), &second).await;
        firewall::ready_with(&sets, ENTRIES).await;
        assert_eq!(
            other.keys().await,
            firewall::keys_of_lines(100, ENTRIES),
            "{kind:?}: the Exclusive set removed the foreign entry too"
        );
    }
    // What the API server refuses is refused here too, named (exit 1).
    let ns = cases[0].2.name();
    let bad = json!({"apiVersion": "p4fleet.dev/v1alpha1", "kind": "TableEntrySet",
        "metadata": {"name": "bad", "namespace": ns},
        "spec": {"virtualSwitchRef": "fw", "table": "MyIngress.firewall",
            "entries": [{"match": {"hdr.ipv4.srcAddr": ""}, "action": "drop"}]}});
    let text = run_plan(cp, &serde_yaml::to_string(&bad).unwrap(), Some(1));
    assert!(
        text.contains(&format!("refused: TableEntrySet {ns}/bad: ")),
        "{text}"
    );
    for (_, _, ns) in cases {
        ns.delete(&client).await.unwrap();
    }
}
