//! What a TableEntrySet wrote survives the operator (issue 10, item 7): on
//! a Bmv2 (P4Runtime: ownership tags in entry metadata) and a Tofino
//! (BFRT: no metadata, so the set's ownership record) Switch, a Merge set
//! of 30,000 entries is synced, a foreign entry is written to the same
//! table behind the operator's back, the operator is `kill -9`ed, 500
//! entries are removed from the set's ConfigMap while it is down, and it
//! is restarted. An independent read of each device must then show
//! exactly the 29,500 desired entries and the foreign one. Then the
//! operator is killed in the middle of a sync that replaces every entry,
//! the desired entries change again while it is down, and after its
//! restart the devices hold exactly the new ones and the foreign entry.
//! Deleting the sets must leave only the foreign entry (and no record).

use std::collections::HashSet;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams};
use p4fleet_crds::TableEntrySet;
use p4fleet_e2e::firewall::{self, FirewallSet, Kind, Other};
use p4fleet_e2e::processes::{Proc, build_binaries as bin, device_entries, spawn_operator};
use p4fleet_e2e::{ControlPlane, TestNamespace, firewall_lines, merge_patch, wait_for};
use serde_json::json;

const ENTRIES: usize = 30_000;
const REMOVED: usize = 500;
const RECORD: &str = "p4fleet-owned.fw";

/// The operator, with periodic passes longer than the test: only its
/// first sync after a start can repair anything.
fn operator(kubeconfig: &std::path::Path) -> Proc {
    spawn_operator(
        &bin(),
        kubeconfig,
        "ownership-operator",
        &firewall::LONG_PERIODS,
    )
}

struct Case {
    kind: Kind,
    device: u64,
    ns: TestNamespace,
    other: Option<Other>,
}

impl Case {
    fn sets(&self, client: &kube::Client) -> Api<TableEntrySet> {
        Api::namespaced(client.clone(), self.ns.name())
    }
    fn config_maps(&self, client: &kube::Client) -> Api<ConfigMap> {
        Api::namespaced(client.clone(), self.ns.name())
    }
    /// Replaces the entries of the set's ConfigMap `fw` with `text`.
    async fn desire(&self, client: &kube::Client, text: String) {
        let patch = json!({"data": {"entries": text}});
        merge_patch(&self.config_maps(client), "fw", patch).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_operator_deletes_exactly_what_its_sets_wrote() {
    let cp = ControlPlane::shared().await;
    let client = cp.client().await;
    let kubeconfig = cp.kubeconfig_path().to_path_buf();
    let (_emu, addrs) = firewall::emulator(&bin(), "1,11", None);
    let op = operator(&kubeconfig);
    let set = FirewallSet::merge(ENTRIES);
    let mut cases: Vec<Case> = firewall::setup_per_kind(&client, addrs, set)
        .await
        .into_iter()
        .map(|(kind, device, ns)| Case {
            kind,
            device,
            ns,
            other: None,
        })
        .collect();
    let foreign = firewall::foreign_entry();
    for c in &mut cases {
        firewall::ready_with(&c.sets(&client), ENTRIES).await;
        let other = Other::connect(c.kind, addrs, c.device).await;
        other.insert(&foreign, addrs.stats, c.device).await;
        assert_eq!(other.keys().await.len(), ENTRIES + 1, "{:?}", c.kind);
        // Only the BFRT set needs (and has) a record.
        let record = c.config_maps(&client).get_opt(RECORD).await.unwrap();
        assert_eq!(record.is_some(), c.kind == Kind::Tofino, "{:?}", c.kind);
        c.other = Some(other);
    }

    // kill -9, and the desired entries change while the operator is down.
    drop(op);
    let kept = ENTRIES - REMOVED;
    for c in &cases {
        c.desire(&client, firewall_lines(0, kept)).await;
    }
    let op = operator(&kubeconfig);
    let restarted = Instant::now();
    let mut expected = firewall::keys_of_lines(0, kept);
    expected.insert(foreign.key.clone());
    for c in &cases {
        firewall::ready_with(&c.sets(&client), kept).await;
        let took = restarted.elapsed();
        let on_device = c.other.as_ref().unwrap().keys().await;
        let what = format!("{:?}, Ready with {kept} {took:?} after the restart", c.kind);
        firewall::assert_exact(&on_device, &expected, &what);
    }

    // kill -9 in the middle of a sync that replaces every entry (deletes,
    // then inserts of 30,000 others), then another change while down: the
    // entries written before the kill are in the record (written before
    // the device writes) and go away after the restart.
    drop(op);
    let op = operator(&kubeconfig);
    for c in &cases {
        firewall::ready_with(&c.sets(&client), kept).await;
    }
    let before = kept as u64 + 1;
    for c in &cases {
        c.desire(&client, firewall_lines(40_000, ENTRIES)).await;
    }
    // Aim at the Tofino set's insert phase (its deletes done, inserts
    // under way): without the record grown first, those inserts would be
    // unknown after the restart. The Bmv2 set is wherever it is then.
    let done = ENTRIES as u64 + 1;
    let tofino = cases
        .iter()
        .find(|c| c.kind == Kind::Tofino)
        .unwrap()
        .device;
    let started = Instant::now();
    let mut deleted = false;
    let at_kill = loop {
        let n = device_entries(addrs.stats, tofino).unwrap_or(0);
        deleted |= n <= 1;
        let inserting = deleted && n > 1 && n < done;
        if inserting || n == done || started.elapsed() > Duration::from_secs(60) {
            break cases
                .iter()
                .map(|c| device_entries(addrs.stats, c.device))
                .collect::<Vec<_>>();
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    };
    drop(op);
    eprintln!(
        "killed mid-sync: entries on the devices {at_kill:?} (before {before}, after {done})"
    );
    let small = 1000;
    for c in &cases {
        c.desire(&client, firewall_lines(0, small)).await;
    }
    let op = operator(&kubeconfig);
    let mut expected = firewall::keys_of_lines(0, small);
    expected.insert(foreign.key.clone());
    for c in &cases {
        firewall::ready_with(&c.sets(&client), small).await;
        let on_device = c.other.as_ref().unwrap().keys().await;
        let what = format!("{:?} after the kill mid-sync", c.kind);
        firewall::assert_exact(&on_device, &expected, &what);
    }

    // Deleting the sets removes their entries, not the foreign one.
    for c in &cases {
        c.sets(&client)
            .delete("fw", &DeleteParams::default())
            .await
            .unwrap();
    }
    for c in &cases {
        let sets = c.sets(&client);
        wait_for("set deleted", Duration::from_secs(60), || async {
            match sets.get_opt("fw").await {
                Ok(None) => Ok(()),
                other => Err(format!("{other:?}")),
            }
        })
        .await;
        let on_device = c.other.as_ref().unwrap().keys().await;
        assert_eq!(
            on_device,
            HashSet::from([foreign.key.clone()]),
            "{:?}: only the foreign entry stays",
            c.kind
        );
        let record = c.config_maps(&client).get_opt(RECORD).await.unwrap();
        assert!(
            record.is_none(),
            "{:?}: record deleted with the set",
            c.kind
        );
    }
    drop(op);
    for c in cases {
        c.ns.delete(&client).await.unwrap();
    }
}
