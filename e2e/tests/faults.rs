//! The fault suite (issue 10, item 8): what a TableEntrySet does when the
//! device, the API server or the operator misbehaves in the middle of a
//! sync. Each case runs on a Bmv2 (P4Runtime) and a Tofino (BFRT) Switch
//! at once: a Merge set of 10,000 entries is Ready, the fault is set up,
//! the set's ConfigMap is changed to 8,000 other entries, and the set must
//! come back Ready with them. Throughout, a [`LieWatch`] compares status
//! with the emulator's own entry count (never Ready while the device is
//! not exact), and at the end an independent client reads each table: 0
//! entries lost, 0 stale.
//!
//! - device faults (the emulator's side channel, emulator/src/faults.rs):
//!   Writes answered UNAVAILABLE, a Read stream and a Write that stall
//!   3 s, Writes of which every 7th update fails (per-update errors);
//! - the kube-apiserver killed and restarted on the same port and etcd
//!   data in the middle of the sync (a control plane of its own);
//! - the operator `kill -9`ed in the middle of the sync and restarted.
//!
//! The operator's resync and drift periods are an hour: what recovers is
//! the operator's own retry, never a periodic pass. The times printed are
//! those in docs/reliability.md.

use std::path::Path;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use p4fleet_crds::TableEntrySet;
use p4fleet_e2e::firewall::{self, Addrs, FirewallSet, Kind, Other};
use p4fleet_e2e::lie_watch::LieWatch;
use p4fleet_e2e::processes::{
    Proc, build_binaries as bin, device_entries, shared_operator, spawn_operator,
};
use p4fleet_e2e::{ControlPlane, TestNamespace, firewall_lines, merge_patch};
use serde_json::json;

const ENTRIES: usize = 10_000;
/// The changed desired entries: `firewall_lines(CHANGED_FROM, CHANGED)`,
/// none of them in the first 10,000.
const CHANGED_FROM: usize = 20_000;
const CHANGED: usize = 8_000;

/// A client of the shared control plane, whose operator for these tests
/// (periodic passes off) is started by the first caller.
async fn client_of_shared_operator() -> Client {
    let cp = ControlPlane::shared().await;
    let log = "faults-operator";
    shared_operator(&bin(), cp.kubeconfig_path(), log, &firewall::LONG_PERIODS);
    cp.client().await
}

fn operator(kubeconfig: &Path, log: &str) -> Proc {
    spawn_operator(&bin(), kubeconfig, log, &firewall::LONG_PERIODS)
}

/// One Switch of `kind` (device `device` of the emulator at `addrs`) in a
/// namespace of its own, with set `fw` Ready with [`ENTRIES`] entries.
struct Rig {
    kind: Kind,
    device: u64,
    addrs: Addrs,
    ns: TestNamespace,
    other: Other,
}

impl Rig {
    async fn new(client: &Client, kind: Kind, device: u64, addrs: Addrs) -> Rig {
        let ns = TestNamespace::new(client).await;
        let set = FirewallSet::merge(ENTRIES);
        firewall::setup(client, ns.name(), kind, addrs, device, set).await;
        let sets: Api<TableEntrySet> = Api::namespaced(client.clone(), ns.name());
        firewall::ready_with(&sets, ENTRIES).await;
        let other = Other::connect(kind, addrs, device).await;
        Rig {
            kind,
            device,
            addrs,
            ns,
            other,
        }
    }

    fn sets(&self, client: &Client) -> Api<TableEntrySet> {
        Api::namespaced(client.clone(), self.ns.name())
    }

    /// Watches set `fw` against the device, expecting the changed entries.
    fn watch(&self, client: &Client) -> LieWatch {
        let w = LieWatch::start(
            self.sets(client),
            "fw",
            self.addrs.stats,
            self.device,
            ENTRIES as u64,
        );
        w.expect(CHANGED as u64);
        w.arm_when_written();
        w
    }

    /// Changes the set's entries to `firewall_lines(start, n)`.
    /// Harms the ownership record (`harm`) until the harm still stands
    /// (`stands`) half a second later, 5 tries, since the running operator
    /// may undo it at once (else panics with `undone`); then, while it
    /// stands, desires entries 5,000..5,000 + `n`.
    async fn desire_while_harmed(
        &self,
        client: &Client,
        n: usize,
        undone: &str,
        harm: impl AsyncFn(),
        stands: impl AsyncFn() -> bool,
    ) {
        for _ in 0..5 {
            harm().await;
            tokio::time::sleep(Duration::from_millis(500)).await;
            if stands().await {
                self.desire(client, 5_000, n).await;
                return;
            }
        }
        panic!("{undone}");
    }

    async fn desire(&self, client: &Client, start: usize, n: usize) {
        let patch = json!({"data": {"entries": firewall_lines(start, n)}});
        Api::<ConfigMap>::namespaced(client.clone(), self.ns.name())
            .patch("fw", &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
    }

    /// The device's entry count (the emulator's stats), 0 while it does
    /// not answer.
    fn entries(&self) -> u64 {
        device_entries(self.addrs.stats, self.device).unwrap_or(0)
    }

    /// Panics unless an independent read of the table shows exactly
    /// `firewall_lines(start, n)`.
    async fn assert_exact(&self, start: usize, n: usize, what: &str) {
        let on_device = self.other.keys().await;
        let expected = firewall::keys_of_lines(start, n);
        firewall::assert_exact(&on_device, &expected, &format!("{what} {:?}", self.kind));
    }
}

/// Waits (up to 60 s) until the device's entry count left [`ENTRIES`]: the
/// operator is writing the change, so it wrote Syncing before.
async fn until_writing(rig: &Rig) {
    let started = Instant::now();
    while rig.entries() == ENTRIES as u64 {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "{:?}: the change was never written",
            rig.kind
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The reasons of set `fw`'s Ready condition while not True, in every
/// status version written from the start on (a watch, not polls).
struct ReadyReasons {
    task: tokio::task::JoinHandle<()>,
    seen: std::sync::Arc<std::sync::Mutex<std::collections::BTreeSet<String>>>,
}

impl ReadyReasons {
    /// Returns once the watch has listed the set: later writes are seen.
    async fn start(sets: Api<TableEntrySet>) -> ReadyReasons {
        use futures::StreamExt;
        use kube::runtime::{WatchStreamExt, watcher};
        let seen = std::sync::Arc::new(std::sync::Mutex::new(std::collections::BTreeSet::new()));
        let into = seen.clone();
        let config = watcher::Config::default().fields("metadata.name=fw");
        let (listed, first) = tokio::sync::oneshot::channel();
        let task = tokio::spawn(async move {
            let mut listed = Some(listed);
            let mut events = std::pin::pin!(watcher(sets, config).applied_objects());
            while let Some(Ok(set)) = events.next().await {
                if let Some(l) = listed.take() {
                    let _ = l.send(());
                }
                let st = set.status.unwrap_or_default();
                if let Some(c) = p4fleet_crds::find_condition(&st.conditions, "Ready")
                    && !c.is_true()
                {
                    into.lock().unwrap().insert(c.reason.clone());
                }
            }
        });
        tokio::time::timeout(Duration::from_secs(30), first)
            .await
            .expect("the set listed by the watch")
            .expect("the watch task");
        ReadyReasons { task, seen }
    }

    fn finish(self) -> std::collections::BTreeSet<String> {
        self.task.abort();
        self.seen.lock().unwrap().clone()
    }
}

/// A device fault on each kind of Switch at once, through the operator
/// shared by this binary's device-fault tests: arms `faults` (side channel
/// queries), changes the entries, and checks the recovery. Returns what the
/// fault counters of each device said.
async fn device_fault(
    what: &str,
    faults: &[&str],
) -> Vec<(serde_json::Value, std::collections::BTreeSet<String>)> {
    let client = client_of_shared_operator().await;
    let run = |kind: Kind, device: u64| {
        let client = client.clone();
        async move {
            // An emulator per case: faults are per device, and nothing
            // else may use it.
            let (_emu, addrs) = firewall::emulator(&bin(), &device.to_string(), None);
            let rig = Rig::new(&client, kind, device, addrs).await;
            let watch = rig.watch(&client);
            let every = ReadyReasons::start(rig.sets(&client)).await;
            for q in faults {
                firewall::arm_fault(addrs.stats, device, q);
            }
            let changed = Instant::now();
            rig.desire(&client, CHANGED_FROM, CHANGED).await;
            firewall::ready_with(&rig.sets(&client), CHANGED).await;
            let recovered = changed.elapsed();
            let mut seen = watch.finish().await;
            // The polls can miss a Syncing mark shorter than their
            // interval; the watch sees every status written.
            seen.reasons.extend(every.finish());
            let fired = firewall::faults_fired(addrs.stats, device);
            eprintln!(
                "{what} {kind:?}: change to Ready with {CHANGED} in {recovered:?}; \
                 not Ready seen after {:?} with reasons {:?}; {} status polls; faults fired {fired}",
                seen.noticed, seen.reasons, seen.polls
            );
            seen.assert_truthful(&format!("{what} {kind:?}"));
            rig.assert_exact(CHANGED_FROM, CHANGED, what).await;
            rig.ns.delete(&client).await.unwrap();
            (fired, seen.reasons)
        }
    };
    let (bmv2, tofino) = tokio::join!(run(Kind::Bmv2, 1), run(Kind::Tofino, 11));
    for (kind, (_, reasons)) in [("Bmv2", &bmv2), ("Tofino", &tofino)] {
        assert!(
            reasons.contains("Syncing"),
            "{what} {kind}: the set said Syncing before writing: {reasons:?}"
        );
    }
    vec![bmv2, tofino]
}

/// Whether a failed write showed in status (not only Syncing).
fn failure_seen(reasons: &std::collections::BTreeSet<String>) -> bool {
    reasons.contains("EntriesFailed") || reasons.contains("DeviceUnavailable")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_answered_unavailable_are_retried_and_status_says_so() {
    // The 3rd to 5th Write RPCs of the sync fail as a whole.
    let fired = device_fault("unavailable", &["kind=unavailable&after=2&count=3"]).await;
    for (f, reasons) in fired {
        assert_eq!(f["unavailable"], 3, "{f}");
        assert!(failure_seen(&reasons), "{reasons:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_read_stream_and_a_stalled_write_delay_but_never_lie() {
    // The sync's read-back stalls 3 s after its first message, and its
    // 3rd Write 3 s before it is applied.
    let fired = device_fault(
        "stall",
        &[
            "kind=stall-read&count=1&ms=3000",
            "kind=stall-write&after=2&count=1&ms=3000",
        ],
    )
    .await;
    for (f, _) in fired {
        assert_eq!(
            (&f["stalled_reads"], &f["stalled_writes"]),
            (&json!(1), &json!(1)),
            "{f}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partly_failed_batch_is_reported_and_completed() {
    // Every 7th update of the 2nd and 3rd Write RPCs fails with
    // RESOURCE_EXHAUSTED; the others of those batches are applied.
    let fired = device_fault(
        "partial batch",
        &["kind=fail-updates&after=1&count=2&every=7"],
    )
    .await;
    for (f, reasons) in fired {
        assert_eq!(f["failed_updates_writes"], 2, "{f}");
        assert!(failure_seen(&reasons), "{reasons:?}");
    }
}

/// Both kinds on one emulator under a control plane and operator of their
/// own, each set watched and its entries changed.
struct Private {
    client: Client,
    rigs: Vec<Rig>,
    watches: Vec<LieWatch>,
    _emu: Proc,
    operator: Option<Proc>,
}

async fn private_change(cp: &ControlPlane, log: &str) -> Private {
    let client = cp.client().await;
    let (emu, addrs) = firewall::emulator(&bin(), "1,11", None);
    let op = operator(cp.kubeconfig_path(), log);
    let (bmv2, tofino) = tokio::join!(
        Rig::new(&client, Kind::Bmv2, 1, addrs),
        Rig::new(&client, Kind::Tofino, 11, addrs)
    );
    let rigs = vec![bmv2, tofino];
    let watches: Vec<_> = rigs.iter().map(|r| r.watch(&client)).collect();
    for r in &rigs {
        r.desire(&client, CHANGED_FROM, CHANGED).await;
    }
    Private {
        client,
        rigs,
        watches,
        _emu: emu,
        operator: Some(op),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kube_apiserver_restarted_mid_sync() {
    let cp = ControlPlane::private().await;
    let p = private_change(&cp, "apiserver-restart-operator").await;
    let (client, rigs, watches) = (&p.client, &p.rigs, p.watches);
    // Kill it once the operator writes the change (its Syncing is stored).
    until_writing(&rigs[0]).await;
    let at_kill: Vec<u64> = rigs.iter().map(Rig::entries).collect();
    let killed = Instant::now();
    cp.restart_apiserver(Duration::from_secs(2)).await;
    let back = killed.elapsed();
    for r in rigs {
        firewall::ready_with(&r.sets(client), CHANGED).await;
    }
    let recovered = killed.elapsed();
    eprintln!(
        "apiserver restart: killed with {at_kill:?} entries on the devices; answering again \
         {back:?} after the kill; both sets Ready with {CHANGED} {recovered:?} after it"
    );
    assert_truthful_and_changed(rigs, watches, "apiserver restart").await;
    // The operator's watches came back: a change made now is applied
    // (no periodic pass would, for an hour).
    let changed = Instant::now();
    for r in rigs {
        r.desire(client, 0, 3000).await;
    }
    for r in rigs {
        firewall::ready_with(&r.sets(client), 3000).await;
        r.assert_exact(0, 3000, "after the apiserver restart").await;
    }
    eprintln!(
        "apiserver restart: a later change Ready on both in {:?}",
        changed.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operator_killed_mid_sync_never_leaves_a_lie() {
    let cp = ControlPlane::private().await;
    let mut p = private_change(&cp, "kill-operator").await;
    let (client, rigs, watches) = (&p.client, &p.rigs, p.watches);
    // kill -9 once the Tofino device is being written (the Bmv2 one is
    // wherever it is then).
    until_writing(&rigs[1]).await;
    drop(p.operator.take());
    let at_kill: Vec<u64> = rigs.iter().map(Rig::entries).collect();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let _op = operator(cp.kubeconfig_path(), "kill-operator");
    let restarted = Instant::now();
    for r in rigs {
        firewall::ready_with(&r.sets(client), CHANGED).await;
    }
    eprintln!(
        "operator kill -9: killed with {at_kill:?} entries on the devices; both sets Ready \
         with {CHANGED} {:?} after the restart",
        restarted.elapsed()
    );
    assert_truthful_and_changed(rigs, watches, "operator kill -9").await;
}

/// Ends each rig's watch and asserts (naming the fault `what`) that its
/// set never lied and its device holds exactly the changed entries.
async fn assert_truthful_and_changed(rigs: &[Rig], watches: Vec<LieWatch>, what: &str) {
    for (r, w) in rigs.iter().zip(watches) {
        let seen = w.finish().await;
        eprintln!(
            "{what} {:?}: reasons seen {:?}, {} polls",
            r.kind, seen.reasons, seen.polls
        );
        seen.assert_truthful(&format!("{what} {:?}", r.kind));
        r.assert_exact(CHANGED_FROM, CHANGED, what).await;
    }
}

/// The head ConfigMap of set `fw`'s ownership record.
const RECORD: &str = "p4fleet-owned.fw";

/// Waits until set `fw` reports `OwnershipRecord` False with `reason`.
async fn record_condition(sets: &Api<TableEntrySet>, reason: &str) -> String {
    let st = p4fleet_e2e::set_status_where(
        sets,
        "fw",
        &format!("OwnershipRecord {reason}"),
        Duration::from_secs(60),
        |st| {
            p4fleet_crds::find_condition(&st.conditions, "OwnershipRecord")
                .is_some_and(|c| !c.is_true() && c.reason == reason)
        },
    )
    .await;
    p4fleet_crds::find_condition(&st.conditions, "OwnershipRecord")
        .unwrap()
        .message
        .clone()
}

/// Issue 10, item 2: an ownership record (BFRT: the keys a set wrote) that
/// is damaged or deleted is a condition and an Event, never a panic or a
/// wipe: a damaged one is replaced by an empty record (a Merge set then
/// owns only entries equal to desired ones, so it deletes nothing it
/// cannot prove it wrote), a deleted one is rewritten from memory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_or_deleted_ownership_record_is_reported_and_never_widens_deletes() {
    let client = client_of_shared_operator().await;
    let (_emu, addrs) = firewall::emulator(&bin(), "11", None);
    let rig = Rig::new(&client, Kind::Tofino, 11, addrs).await;
    let foreign = firewall::foreign_entry();
    rig.other.insert(&foreign, addrs.stats, 11).await;
    let sets = rig.sets(&client);
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), rig.ns.name());
    let ns = rig.ns.name().to_string();
    let with_foreign = |start: usize, n: usize| {
        let mut k = firewall::keys_of_lines(start, n);
        k.insert(foreign.key.clone());
        k
    };
    let assert_device = |expected: std::collections::HashSet<_>, what: &'static str| {
        let other = &rig.other;
        async move {
            firewall::assert_exact(&other.keys().await, &expected, what);
        }
    };

    // Damaged: garbage instead of gzip, and a digest that is not its own
    // (so the running operator reads it again). A sync of the set between
    // the damage and the change would replace the record by one built
    // from the then desired entries (all of them), so the change follows
    // only a damage no sync has repaired yet.
    let zeros = "00".repeat(32);
    let patch = json!({
        "metadata": {"annotations": {"p4fleet.dev/record-digest": zeros}},
        "binaryData": {"keys.gz": "bm90IGd6aXA="}
    });
    let digest_of = |cm: Option<ConfigMap>| {
        cm.and_then(|c| c.metadata.annotations)
            .and_then(|a| a.get("p4fleet.dev/record-digest").cloned())
    };
    // Desired: entries 5,000..14,000 instead of 0..10,000.
    rig.desire_while_harmed(
        &client,
        9_000,
        "the damaged record was always repaired at once",
        async || merge_patch(&cms, RECORD, patch.clone()).await,
        async || digest_of(cms.get_opt(RECORD).await.unwrap()).as_ref() == Some(&zeros),
    )
    .await;
    firewall::ready_with(&sets, 9_000).await;
    let message = record_condition(&sets, "RecordDamaged").await;
    assert!(message.contains(RECORD), "{message}");
    p4fleet_e2e::wait_event(&client, &ns, Some("RecordDamaged"), RECORD).await;
    // Entries 0..5,000 were the set's, but the damaged record cannot say
    // so: they stay (documented), unless a sync of the set ran between the
    // damage and the change (then they were still desired, so equal to
    // desired ones, and the new record has them). Either way the foreign
    // entry stays and no desired entry is missing.
    let after_damage = rig.other.keys().await;
    let desired = with_foreign(5_000, 9_000);
    let old = firewall::keys_of_lines(0, 5_000);
    let lost = desired.difference(&after_damage).count();
    let stale: Vec<_> = after_damage
        .difference(&desired)
        .filter(|k| !old.contains(k))
        .collect();
    let old_kept = after_damage.intersection(&old).count();
    eprintln!("damaged record: {old_kept} of the set's 5,000 old entries stayed");
    assert_eq!((stale.len(), lost), (0, 0), "after the damaged record");
    assert!(old_kept == 0 || old_kept == 5_000, "{old_kept}");
    let head = cms.get(RECORD).await.unwrap();
    let digest = &head.metadata.annotations.as_ref().unwrap()["p4fleet.dev/record-digest"];
    assert_ne!(digest, &"00".repeat(32), "a new record was written");

    // Deleted behind the operator's back: rewritten from memory, so the
    // next change still deletes what the set wrote.
    rig.desire_while_harmed(
        &client,
        8_000,
        "the deleted record was always rewritten at once",
        async || {
            cms.delete(RECORD, &Default::default()).await.unwrap();
        },
        async || cms.get_opt(RECORD).await.unwrap().is_none(),
    )
    .await;
    firewall::ready_with(&sets, 8_000).await;
    let message = record_condition(&sets, "RecordDeleted").await;
    assert!(message.contains("was deleted"), "{message}");
    p4fleet_e2e::wait_event(&client, &ns, Some("RecordDeleted"), RECORD).await;
    let removed = firewall::keys_of_lines(13_000, 1_000);
    let expected: std::collections::HashSet<_> =
        after_damage.difference(&removed).cloned().collect();
    assert_device(expected.clone(), "after the deleted record").await;
    wait_for_record(&cms).await;

    // Deleting the set removes what the record knows, nothing else.
    p4fleet_e2e::delete_and_wait_gone(&sets, "fw").await;
    let gone = firewall::keys_of_lines(5_000, 8_000);
    let expected = expected.difference(&gone).cloned().collect();
    assert_device(expected, "after the set's deletion").await;
    rig.ns.delete(&client).await.unwrap();
}

async fn wait_for_record(cms: &Api<ConfigMap>) {
    p4fleet_e2e::wait_for("record written again", Duration::from_secs(30), || async {
        match cms.get_opt(RECORD).await {
            Ok(Some(_)) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
}
