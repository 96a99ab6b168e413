//! Conflicting ownership (issue 10, item 9): an Exclusive TableEntrySet
//! and a younger Merge set on the same table of the same VirtualSwitch,
//! on a Bmv2 and on a Tofino Switch. Both report the conflict naming the
//! other set and the table (`ResolvedRefs=False`, reason
//! `OwnershipConflict`, and an Event); the older Exclusive set keeps the
//! table, the younger does not write it, and the device stops churning:
//! an independent read shows exactly the older set's entries, and the
//! emulator counts no write over several seconds. `p4fleet plan -f` of a
//! change to the younger set plans nothing on the held table and says why.

use std::time::Duration;

use kube::api::{Api, DeleteParams};
use p4fleet_crds::{TableEntrySet, find_condition};
use p4fleet_e2e::firewall::{self, FirewallSet, Other};
use p4fleet_e2e::processes::{device_stat, p4fleet_plan};
use p4fleet_e2e::{create_json, event_about, wait_for};
use serde_json::json;

const ENTRIES: usize = 100;
/// The younger set: its name also sorts after `fw`, so the name would
/// decide the same way if both were created within one second.
const YOUNGER: &str = "zz-merge";

/// Waits until set `name`'s ResolvedRefs is False with reason
/// OwnershipConflict and a message containing each of `words`.
async fn conflict_reported(sets: &Api<TableEntrySet>, name: &str, words: &[&str]) -> String {
    wait_for(
        &format!("{name}: OwnershipConflict"),
        Duration::from_secs(60),
        || async {
            let s = sets.get(name).await.map_err(|e| e.to_string())?;
            let st = s.status.unwrap_or_default();
            let c = find_condition(&st.conditions, "ResolvedRefs").cloned();
            c.filter(|c| {
                !c.is_true()
                    && c.reason == "OwnershipConflict"
                    && words.iter().all(|w| c.message.contains(w))
            })
            .map(|c| c.message)
            .ok_or(format!("{:?}", st.conditions))
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exclusive_and_a_merge_set_on_one_table_are_reported_and_stop_churning() {
    let (cp, client, (_emu, addrs), _op) = firewall::emulator_and_operator(
        "1,11",
        "conflicts-operator",
        &["--resync-seconds", "2", "--drift-seconds", "3600"],
    )
    .await;
    let set = FirewallSet::exclusive(ENTRIES);
    let cases = firewall::setup_per_kind(&client, addrs, set).await;
    // The Exclusive set is synced first; then the younger Merge set.
    for (_, _, ns) in &cases {
        let sets: Api<TableEntrySet> = Api::namespaced(client.clone(), ns.name());
        wait_for("fw Ready", Duration::from_secs(120), || async {
            let s = sets.get("fw").await.map_err(|e| e.to_string())?;
            let st = s.status.unwrap_or_default();
            let ready = find_condition(&st.conditions, "Ready").is_some_and(|c| c.is_true());
            ready.then_some(()).ok_or(format!("{st:?}"))
        })
        .await;
    }
    tokio::time::sleep(Duration::from_millis(1100)).await;
    for (_, _, ns) in &cases {
        let sets: Api<TableEntrySet> = Api::namespaced(client.clone(), ns.name());
        create_json(
            &sets,
            json!({"apiVersion": "p4fleet.dev/v1alpha1", "kind": "TableEntrySet",
                "metadata": {"name": YOUNGER},
                "spec": {"virtualSwitchRef": "fw", "table": "firewall", "ownership": "Merge",
                    "entries": [{"match": {"hdr.ipv4.srcAddr": "10.200.0.1", "hdr.ipv4.dstAddr": "172.16.0.1"},
                        "action": "allow", "params": {"port": "1"}}]}}),
        )
        .await;
    }
    let expected = firewall::keys_of_lines(0, ENTRIES);
    for (kind, device, ns) in &cases {
        let sets: Api<TableEntrySet> = Api::namespaced(client.clone(), ns.name());
        let younger = conflict_reported(
            &sets,
            YOUNGER,
            &[
                "TableEntrySet fw (Exclusive",
                "MyIngress.firewall",
                "VirtualSwitch fw",
                "fw is older and keeps it",
            ],
        )
        .await;
        let older = conflict_reported(
            &sets,
            "fw",
            &[
                &format!("TableEntrySet {YOUNGER} (Merge"),
                "MyIngress.firewall",
                "this set is older and keeps it",
            ],
        )
        .await;
        eprintln!(
            "{kind:?}: the younger set says: {younger}\n{kind:?}: the older set says: {older}"
        );
        // The held set's Valid and Synced say it is held, by whom and what
        // to do (not "no resolved VirtualSwitch").
        let held = sets.get(YOUNGER).await.unwrap().status.unwrap_or_default();
        for t in ["Valid", "Synced"] {
            let c = find_condition(&held.conditions, t).expect(t);
            assert!(
                c.reason == "OwnershipConflict"
                    && c.message
                        .contains("fw is older and keeps it, so this set is held")
                    && c.message.contains("make both Merge"),
                "{kind:?}: {t}: {c:?}"
            );
        }
        for name in ["fw", YOUNGER] {
            event_about(&client, ns.name(), name, Some("OwnershipConflict")).await;
        }
        // `p4fleet plan -f` of a change to the younger set leaves the
        // table to the older one, as the operator does: nothing planned
        // there, and the conflict said.
        let change = json!({"apiVersion": "p4fleet.dev/v1alpha1", "kind": "TableEntrySet",
            "metadata": {"name": YOUNGER, "namespace": ns.name()},
            "spec": {"virtualSwitchRef": "fw", "table": "firewall", "ownership": "Merge",
                "entries": [{"match": {"hdr.ipv4.srcAddr": "10.200.0.2", "hdr.ipv4.dstAddr": "172.16.0.1"},
                    "action": "allow", "params": {"port": "2"}}]}});
        let (exit, text, err) = p4fleet_plan(
            cp.kubeconfig_path(),
            &serde_yaml::to_string(&change).unwrap(),
        );
        assert_eq!(exit, Some(0), "{kind:?}: {text}\n{err}");
        let head = format!(
            "TableEntrySet {}/{YOUNGER}: +0 ~0 -0 (0 unchanged) on 0 target(s)",
            ns.name()
        );
        assert!(text.contains(&head), "{kind:?}: {text}");
        assert!(
            text.contains("problem:") && text.contains("fw is older and keeps it"),
            "{kind:?}: {text}"
        );
        // No churn: with a 2 s resync, a fight would write every period.
        let writes = || device_stat(addrs.stats, *device, "write_rpcs").unwrap();
        let before = writes();
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert_eq!(writes(), before, "{kind:?}: writes went on");
        let other = Other::connect(*kind, addrs, *device).await;
        assert_eq!(
            other.keys().await,
            expected,
            "{kind:?}: only the older set's entries"
        );

        // The younger set deleted: the conflict is gone on the older set.
        sets.delete(YOUNGER, &DeleteParams::default())
            .await
            .unwrap();
        wait_for("fw Ready again", Duration::from_secs(60), || async {
            let s = sets.get("fw").await.map_err(|e| e.to_string())?;
            let st = s.status.unwrap_or_default();
            let ready = find_condition(&st.conditions, "Ready").is_some_and(|c| c.is_true());
            ready.then_some(()).ok_or(format!("{:?}", st.conditions))
        })
        .await;
        assert_eq!(other.keys().await, expected, "{kind:?}: unchanged");
    }
    for (_, _, ns) in cases {
        ns.delete(&client).await.unwrap();
    }
}
