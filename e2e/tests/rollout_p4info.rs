//! A rollout whose revision renumbers an action (issue 34): the four Bmv2
//! Switches of [`p4fleet_e2e::rollout`], `{switches: 1}`, `{pause: {}}`,
//! `{percent: 100}`. Revision 2 gives `MyIngress.allow` another P4Info
//! id, as a recompiled program may. While the rollout is paused after
//! the canary, the selector set's entries go to each device with the
//! action id of the revision it runs: the canary's under revision 2, the
//! three others' still under revision 1 (their pipelines refuse the new
//! id), so the set stays Ready with 0 failed on all four. After the
//! resume, all four run revision 2 with every entry. Before it is
//! applied, `p4fleet plan -f` of the source ConfigMap alone plans the
//! program that reads it.
//! (Its own binary: its operator watches the whole control plane.)

use std::time::Duration;

use p4fleet_crds::{RolloutPhase, find_condition};
use p4fleet_e2e::firewall;
use p4fleet_e2e::processes::{build_binaries as bin, device_entries, p4fleet_plan, spawn_operator};
use p4fleet_e2e::rollout::{
    DEVICES, ENTRIES, Fleet, cookies, p4info, paused_canary, phase_of, resume_until_moving,
    revision_cookie, source_text, start, teardown,
};
use p4fleet_e2e::{ControlPlane, TestNamespace, wait_for};
use serde_json::json;

/// `MyIngress.allow`'s P4Info id in examples/firewall, and the one
/// revision 2 gives it.
const ALLOW: &str = "17724422";
const RENUMBERED: &str = "17724499";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn entries_follow_the_p4info_of_the_revision_each_virtual_switch_runs() {
    let cp = ControlPlane::shared().await;
    let client = cp.client().await;
    let (_emu, addrs) = firewall::emulator(&bin(), "1,2,3,4", None);
    let _op = spawn_operator(&bin(), cp.kubeconfig_path(), "rollout-p4info-operator", &[]);
    let ns = TestNamespace::new(&client).await;
    let Fleet {
        programs,
        cms,
        sets,
        c1,
    } = start(&client, ns.name(), [addrs.p4runtime; 4], paused_canary(90)).await;

    let v2 = p4info("v2").replace(ALLOW, RENUMBERED);
    assert_eq!(v2.matches(RENUMBERED).count(), 2, "the action and its ref");
    // `p4fleet plan -f` of the ConfigMap alone plans the program that
    // reads it: every VirtualSwitch would reload, from revision 1.
    let manifest = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "fw-src", "namespace": ns.name()}, "data": {"p4info.txt": &v2}});
    let (exit, text, err) = p4fleet_plan(
        cp.kubeconfig_path(),
        &serde_yaml::to_string(&manifest).unwrap(),
    );
    assert_eq!(exit, Some(0), "{text}\n{err}");
    let head = format!("P4Program {}/firewall: ", ns.name());
    assert!(
        text.contains(&head) && text.contains("(revision 1) -> "),
        "{text}"
    );
    for i in 0..DEVICES.len() {
        assert!(text.contains(&format!("  vs-{i} on ")), "{text}");
    }
    assert_eq!(cookies(addrs.stats), [Some(c1); 4], "a plan writes nothing");
    source_text(&cms, &v2).await;
    let c2 = revision_cookie(&programs, 2).await;
    let paused = phase_of(&programs, RolloutPhase::Paused, |r| r.to.revision == 2).await;
    assert_eq!(paused.moved.len(), 1, "{paused:?}");
    assert_eq!(
        cookies(addrs.stats),
        [Some(c2), Some(c1), Some(c1), Some(c1)]
    );
    // Every device holds the set's entries, each under the id its own
    // pipeline knows, and the set says so.
    let ready_everywhere = || async {
        let s = sets.get("fw").await.map_err(|e| e.to_string())?;
        let st = s.status.unwrap_or_default();
        let ready = find_condition(&st.conditions, "Ready").is_some_and(|c| c.is_true());
        let failed: Vec<u64> = st.targets.iter().map(|t| t.failed).collect();
        let held: Vec<Option<u64>> = DEVICES
            .iter()
            .map(|d| device_entries(addrs.stats, *d))
            .collect();
        let all = held.iter().all(|n| *n == Some(ENTRIES as u64));
        (ready && all && failed.iter().all(|f| *f == 0) && st.targets.len() == DEVICES.len())
            .then_some(())
            .ok_or(format!(
                "ready {ready}, failed {failed:?}, held {held:?}: {:?}",
                st.conditions
            ))
    };
    wait_for(
        "the set Ready on all four, across two revisions",
        Duration::from_secs(60),
        ready_everywhere,
    )
    .await;

    resume_until_moving(&programs, addrs.stats, "2/1").await;
    let done = phase_of(&programs, RolloutPhase::Completed, |r| r.to.revision == 2).await;
    assert_eq!(done.moved.len(), DEVICES.len(), "{done:?}");
    assert_eq!(cookies(addrs.stats), [Some(c2); 4]);
    wait_for(
        "the set Ready on all four, on revision 2",
        Duration::from_secs(60),
        ready_everywhere,
    )
    .await;
    teardown(&client, ns).await;
}
