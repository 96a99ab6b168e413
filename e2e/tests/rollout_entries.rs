//! A Canary rollout of a selector TableEntrySet's entries (issue 34): the
//! four Bmv2 Switches of [`p4fleet_e2e::rollout`], the set `fw` filling
//! all four with `{switches: 1}`, `{pause: {}}`, `{percent: 100}`.
//!
//! - Revision 2 of the entries (five more lines in the user's ConfigMap)
//!   reaches the canary alone: paused after it, the canary holds 25
//!   entries, the three others exactly revision 1's 20, and the set is
//!   Ready with 0 failed. The resume moves the other three.
//! - The operator killed (SIGKILL) during the pause: the new one resumes
//!   from the status, writes nothing and moves nobody. `p4fleet rollout
//!   resume tes/fw` passes the pause.
//! - Revision 3 replaces every line; the canary's device refuses the
//!   updates of its next Write (an injected fault), so it took only part
//!   of the change, if any. The gate fails on `EntriesReapplied` at
//!   `vs-0`: the set is `RolledBack` with a Warning Event, and the canary
//!   holds exactly revision 2's entries again, from the revision the
//!   operator kept (the user's ConfigMap holds revision 3 by then). The
//!   three others were never written to.
//! - Each revision is an immutable ConfigMap owned by the set.
//! - `p4fleet rollout history tes/fw` lists the three revisions, 2 the
//!   one the fleet holds and 3 the one rolled back; `status` names the
//!   failure; `p4fleet rollout undo tes/fw --to-revision 1` pins
//!   revision 1 (it refuses one not kept), which takes the fleet back to
//!   revision 1 (read from its
//!   ConfigMap) through the same steps.
//!
//! (Its own binary: its operator watches the whole control plane.)

use std::collections::HashSet;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams};
use p4fleet_crds::{RolloutPhase, find_condition};
use p4fleet_e2e::firewall::{self, Kind, Other, arm_fault, faults_fired, keys_of_lines};
use p4fleet_e2e::processes::{
    build_binaries as bin, device_stat, operator_http_addr, p4fleet, reconciled, spawn_operator,
};
use p4fleet_e2e::rollout::{
    DEVICES, ENTRIES, Fleet, assert_rollout_metrics, set_phase, start, teardown,
};
use p4fleet_e2e::{
    ControlPlane, TestNamespace, apply_json, event_about, firewall_lines, merge_patch, wait_for,
};
use p4fleet_model::entries::EntryKey;
use serde_json::json;

/// The user's ConfigMap `fw` with `n` lines from `start`.
async fn lines(cms: &Api<ConfigMap>, start: usize, n: usize) {
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "fw"},
        "data": {"entries": firewall_lines(start, n)}});
    apply_json(cms, cm).await;
}

/// Each device's firewall keys, read by another client.
/// `p4fleet rollout ARGS` against the control plane: exit code, stdout,
/// stderr.
async fn rollout_cli(cp: &ControlPlane, args: &[&str]) -> (Option<i32>, String, String) {
    let kubeconfig = cp.kubeconfig_path().to_path_buf();
    let args: Vec<String> = ["rollout"]
        .iter()
        .chain(args)
        .map(|a| a.to_string())
        .collect();
    let out = tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        p4fleet(&kubeconfig, &args)
    })
    .await
    .unwrap();
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.code(), text(&out.stdout), text(&out.stderr))
}

async fn held(readers: &[Other]) -> Vec<HashSet<EntryKey>> {
    let mut out = Vec::new();
    for r in readers {
        out.push(r.keys().await);
    }
    out
}

/// Waits until the devices hold `want` (in device order).
async fn wait_held(readers: &[Other], what: &str, want: Vec<HashSet<EntryKey>>) {
    wait_for(what, Duration::from_secs(60), || async {
        let now = held(readers).await;
        let sizes: Vec<usize> = now.iter().map(HashSet::len).collect();
        (now == want)
            .then_some(())
            .ok_or(format!("sizes {sizes:?}"))
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_selector_set_rolls_its_entries_out_in_steps_and_back_on_a_failed_gate() {
    let (cp, client, (_emu, addrs), op) =
        firewall::emulator_and_operator("1,2,3,4", "rollout-entries-operator", &[]).await;
    let ns = TestNamespace::new(&client).await;
    let Fleet { sets, cms, .. } = start(&client, ns.name(), [addrs.p4runtime; 4], json!({})).await;
    let mut readers = Vec::new();
    for d in DEVICES {
        readers.push(Other::connect(Kind::Bmv2, addrs, d).await);
    }
    let rollout = json!({"spec": {"rollout": {"strategy": "Canary",
        "steps": [{"switches": 1}, {"pause": {}}, {"percent": 100}],
        "analysis": {"seconds": 1}, "progressDeadlineSeconds": 90}}});
    merge_patch(&sets, "fw", rollout).await;
    // At rest, the status names the revision the fleet holds.
    let r1 = set_phase(&sets, "fw", RolloutPhase::Completed, |r| r.to.revision == 1).await;
    let rev1 = keys_of_lines(0, ENTRIES);
    assert_eq!(held(&readers).await, vec![rev1.clone(); 4]);

    // Revision 2: the canary alone, then paused.
    lines(&cms, 0, ENTRIES + 5).await;
    let rev2 = keys_of_lines(0, ENTRIES + 5);
    let paused = set_phase(&sets, "fw", RolloutPhase::Paused, |r| r.to.revision == 2).await;
    assert_eq!(paused.from.as_ref(), Some(&r1.to), "{paused:?}");
    let moved: Vec<&str> = paused
        .moved
        .iter()
        .map(|m| m.virtual_switch.as_str())
        .collect();
    assert_eq!(moved, ["vs-0"]);
    let canary = vec![rev2.clone(), rev1.clone(), rev1.clone(), rev1.clone()];
    wait_held(&readers, "revision 2 on the canary only", canary).await;
    let st = sets.get("fw").await.unwrap().status.unwrap();
    assert!(find_condition(&st.conditions, "Ready").is_some_and(|c| c.is_true()));
    assert_eq!(st.failed, 0);
    let on: Vec<(&str, Option<&str>)> = st
        .targets
        .iter()
        .map(|t| (t.virtual_switch.as_str(), t.entries_digest.as_deref()))
        .collect();
    let (d1, d2) = (r1.to.digest.as_str(), paused.to.digest.as_str());
    assert!(
        on.contains(&("vs-0", Some(d2))) && on.contains(&("vs-3", Some(d1))),
        "{on:?}"
    );

    // kill -9 while paused: the new operator resumes from the status,
    // writes nothing and moves nobody before the resume.
    let writes = |d| device_stat(addrs.stats, d, "write_rpcs").expect("device stats");
    let before: Vec<u64> = DEVICES.iter().map(|d| writes(*d)).collect();
    drop(op);
    let restarted = spawn_operator(
        &bin(),
        cp.kubeconfig_path(),
        "rollout-entries-operator-2",
        &[],
    );
    let metrics = operator_http_addr(&restarted.log, Duration::from_secs(60));
    reconciled(metrics, "TableEntrySet", 2.0).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let again = set_phase(&sets, "fw", RolloutPhase::Paused, |r| r.to.revision == 2).await;
    assert_eq!((again.step, again.moved.len()), (1, 1), "{again:?}");
    let after: Vec<u64> = DEVICES.iter().map(|d| writes(*d)).collect();
    assert_eq!(after, before, "a restart rewrote entries");
    let canary = vec![rev2.clone(), rev1.clone(), rev1.clone(), rev1.clone()];
    assert_eq!(held(&readers).await, canary);

    // Resumed by a person: the other three.
    let (code, out, _) = rollout_cli(cp, &["resume", "tes/fw", "-n", ns.name()]).await;
    assert_eq!(code, Some(0), "{out}");
    let said = format!("TableEntrySet {}/fw resumed: passes steps[1]", ns.name());
    assert!(out.starts_with(&said), "{out}");
    let done = set_phase(&sets, "fw", RolloutPhase::Completed, |r| r.to.revision == 2).await;
    assert_eq!(done.moved.len(), DEVICES.len(), "{done:?}");
    assert_eq!(held(&readers).await, vec![rev2.clone(); 4]);

    // Revision 3: the canary's device refuses the updates of its next
    // Write. Rolled back from the kept revision 2.
    let before: Vec<u64> = DEVICES[1..].iter().map(|d| writes(*d)).collect();
    arm_fault(addrs.stats, DEVICES[0], "kind=fail-updates&every=1&count=1");
    lines(&cms, 100, ENTRIES + 5).await;
    let back = set_phase(&sets, "fw", RolloutPhase::RolledBack, |r| {
        r.to.revision == 3
    })
    .await;
    let f = back.failure.clone().expect("a failure");
    assert_eq!(
        (f.check.as_str(), f.virtual_switch.as_str()),
        ("EntriesReapplied", "vs-0"),
        "{f:?}"
    );
    assert!(f.message.contains("entries failed"), "{}", f.message);
    assert_eq!(back.from.as_ref().map(|r| r.revision), Some(2));
    let exact = vec![rev2.clone(); 4];
    wait_held(&readers, "the canary exact on revision 2 again", exact).await;
    let after: Vec<u64> = DEVICES[1..].iter().map(|d| writes(*d)).collect();
    assert_eq!(after, before, "the untouched devices were written to");
    let fired = faults_fired(addrs.stats, DEVICES[0]);
    assert_eq!(fired["failed_updates_writes"], 1, "{fired}");
    let ev = event_about(&client, ns.name(), "fw", Some("RolledBack")).await;
    assert_eq!(ev.type_.as_deref(), Some("Warning"));
    let st = sets.get("fw").await.unwrap().status.unwrap();
    let c = find_condition(&st.conditions, "RolledBack").expect("a RolledBack condition");
    assert!(c.is_true() && c.message.contains("vs-0"), "{c:?}");

    // Three revisions kept, immutable, owned by the set.
    let uid = sets.get("fw").await.unwrap().metadata.uid.unwrap();
    let lp = ListParams::default().labels(&format!("p4fleet.dev/entry-set-uid={uid}"));
    let kept = cms.list(&lp).await.unwrap().items;
    let mut numbers: Vec<String> = kept
        .iter()
        .map(|c| c.metadata.labels.as_ref().unwrap()["p4fleet.dev/entries-revision"].clone())
        .collect();
    numbers.sort();
    assert_eq!(numbers, ["1", "2", "3"]);
    for c in &kept {
        assert_eq!(c.immutable, Some(true));
        let owner = &c.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.uid.as_str()),
            ("TableEntrySet", uid.as_str())
        );
    }

    // What a person sees of it.
    let (code, out, _) = rollout_cli(cp, &["history", "tes/fw", "-n", ns.name()]).await;
    assert_eq!(code, Some(0), "{out}");
    let rows: Vec<&str> = out.lines().skip(2).collect();
    assert_eq!(rows.len(), 3, "{out}");
    assert!(
        rows[1].ends_with("current, rollout from (RolledBack)"),
        "{out}"
    );
    assert!(
        rows[2].ends_with("update, rollout to (RolledBack)"),
        "{out}"
    );
    let (code, out, _) = rollout_cli(cp, &["status", "tes/fw", "-n", ns.name()]).await;
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("rollout: RolledBack"), "{out}");
    assert!(
        out.contains("failure: EntriesReapplied failed on VirtualSwitch vs-0"),
        "{out}"
    );

    // Undo: pin revision 1, kept only as a ConfigMap of the operator's by
    // now, through the same steps. A revision not kept is refused.
    let (code, _, err) = rollout_cli(
        cp,
        &["undo", "tes/fw", "-n", ns.name(), "--to-revision", "7"],
    )
    .await;
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("revision 7 is not kept (kept: 1, 2, 3)"),
        "{err}"
    );
    let (code, out, err) = rollout_cli(
        cp,
        &["undo", "tes/fw", "-n", ns.name(), "--to-revision", "1"],
    )
    .await;
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("spec.rollout.pinRevision=1"), "{out}");
    let pinned = set_phase(&sets, "fw", RolloutPhase::Paused, |r| r.to.revision == 1).await;
    assert_eq!(pinned.from.as_ref().map(|r| r.revision), Some(2));
    wait_held(
        &readers,
        "revision 1 on the canary only",
        vec![rev1.clone(), rev2.clone(), rev2.clone(), rev2.clone()],
    )
    .await;
    let resume = json!({"metadata": {"annotations": {"p4fleet.dev/rollout-resume": "1/1"}}});
    merge_patch(&sets, "fw", resume).await;
    set_phase(&sets, "fw", RolloutPhase::Completed, |r| r.to.revision == 1).await;
    assert_eq!(held(&readers).await, vec![rev1.clone(); 4]);
    // The (restarted) operator's metrics: one rollback, the pin done.
    let want = [
        ("rollbacks_total", "", 1.0),
        ("phase", ",phase=\"Completed\"", 1.0),
        ("revision", "", 1.0),
    ];
    assert_rollout_metrics(metrics, "p4fleet_entries_rollout_", ns.name(), "fw", &want);
    teardown(&client, ns).await;
}
