//! The fleet the rollout tests share (e2e/tests/rollout.rs,
//! rollout_faults.rs): four Bmv2 Switches on one emulator, a VirtualSwitch
//! on each (`vs-0` the canary, by `p4fleet.dev/rollout-order`), a selector
//! TableEntrySet filling all four, and a P4Program `firewall` whose
//! content changes by a comment in its P4Info.

use std::net::SocketAddr;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use p4fleet_crds::{
    P4Program, RolloutPhase, RolloutStatus, TableEntrySet, VirtualSwitch, find_condition,
};
use serde_json::json;

use crate::processes::device_stat;
use crate::{
    TestNamespace, apply_json, bmv2_switch, create_json, firewall_lines, repo_root, status_until,
    wait_for, wait_object_ready,
};

pub const V1: &str = "p4fleet.dev/v1alpha1";
pub const DEVICES: [u64; 4] = [1, 2, 3, 4];
pub const ENTRIES: usize = 20;

pub fn p4info(version: &str) -> String {
    let text = std::fs::read_to_string(repo_root().join("examples/firewall/p4info.txt")).unwrap();
    // A comment changes the digest, not the program.
    format!("{text}# {version}\n")
}

pub async fn source(cms: &Api<ConfigMap>, version: &str) {
    source_text(cms, &p4info(version)).await
}

/// The program's source ConfigMap with P4Info `text`.
pub async fn source_text(cms: &Api<ConfigMap>, text: &str) {
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "fw-src"},
        "data": {"p4info.txt": text}});
    apply_json(cms, cm).await;
}

/// The pipeline cookie each device runs.
pub fn cookies(stats: SocketAddr) -> Vec<Option<u64>> {
    DEVICES
        .iter()
        .map(|d| device_stat(stats, *d, "cookie"))
        .collect()
}

/// Waits until the program's update revision is `n`; returns its digest.
pub async fn revision_digest(programs: &Api<P4Program>, n: i64) -> String {
    let what = format!("update revision {n}");
    status_until(programs, "firewall", &what, Duration::from_secs(60), |st| {
        st.update_revision
            .filter(|r| r.revision == n)
            .map(|r| r.digest)
            .ok_or(format!("{:?}", st.conditions))
    })
    .await
}

/// Waits up to 30 s until the program's current revision is `n`.
pub async fn current_revision(programs: &Api<P4Program>, n: i64) {
    let what = format!("the current revision {n}");
    status_until(programs, "firewall", &what, Duration::from_secs(30), |st| {
        let cur = st.current_revision;
        cur.clone()
            .filter(|c| c.revision == n)
            .map(drop)
            .ok_or(format!("{cur:?}"))
    })
    .await;
}

/// Publishes content `v<n>` in the source ConfigMap and waits until it is
/// the program's update revision `n`; returns its cookie.
pub async fn publish(cms: &Api<ConfigMap>, programs: &Api<P4Program>, n: i64) -> u64 {
    source(cms, &format!("v{n}")).await;
    revision_cookie(programs, n).await
}

/// Waits until the program's update revision is `n`; returns its cookie.
pub async fn revision_cookie(programs: &Api<P4Program>, n: i64) -> u64 {
    let digest = revision_digest(programs, n).await;
    // The pipeline cookie is the digest's first 8 bytes (docs/resources.md).
    u64::from_str_radix(&digest[..16], 16).expect("a hex digest")
}

pub async fn phase(programs: &Api<P4Program>, want: RolloutPhase) -> p4fleet_crds::RolloutStatus {
    phase_of(programs, want, |_| true).await
}

/// Waits until the rollout is in `want` and `also` holds of it.
pub async fn phase_of(
    programs: &Api<P4Program>,
    want: RolloutPhase,
    also: impl Fn(&p4fleet_crds::RolloutStatus) -> bool,
) -> p4fleet_crds::RolloutStatus {
    program_phase(programs, "firewall", want, also).await
}

/// Waits until the rollout of program `name` is in `want` and `also`
/// holds of it.
pub async fn program_phase(
    programs: &Api<P4Program>,
    name: &str,
    want: RolloutPhase,
    also: impl Fn(&p4fleet_crds::RolloutStatus) -> bool,
) -> p4fleet_crds::RolloutStatus {
    let what = format!("rollout of {name} {want:?}");
    status_until(programs, name, &what, Duration::from_secs(120), |st| {
        in_phase(st.rollout, want, &also)
    })
    .await
}

/// [`phase_of`], asserting all the while that every device after the
/// canary (as `cookies` reads them) still runs the cookie `stay`, while
/// the rollout moves to the revision of cookie `to`.
pub async fn phase_of_while_others_stay(
    programs: &Api<P4Program>,
    want: RolloutPhase,
    also: impl Fn(&RolloutStatus) -> bool,
    cookies: impl Fn() -> Vec<Option<u64>>,
    (stay, to): (u64, u64),
) -> RolloutStatus {
    let what = format!("rollout of firewall {want:?}, the others staying");
    status_until(
        programs,
        "firewall",
        &what,
        Duration::from_secs(120),
        |st| {
            let now = cookies();
            assert!(
                now[1..].iter().all(|c| *c == Some(stay)),
                "an untouched Switch moved (the rollout's revision is {to}): {now:?}"
            );
            in_phase(st.rollout, want, &also)
        },
    )
    .await
}

/// Waits until the entries rollout of TableEntrySet `name` is in `want`
/// and `also` holds of it.
pub async fn set_phase(
    sets: &Api<TableEntrySet>,
    name: &str,
    want: RolloutPhase,
    also: impl Fn(&RolloutStatus) -> bool,
) -> RolloutStatus {
    let what = format!("the entries rollout of {name} {want:?}");
    status_until(sets, name, &what, Duration::from_secs(120), |st| {
        in_phase(st.rollout, want, &also)
    })
    .await
}

fn in_phase(
    r: Option<RolloutStatus>,
    want: RolloutPhase,
    also: &impl Fn(&RolloutStatus) -> bool,
) -> Result<RolloutStatus, String> {
    r.clone()
        .filter(|r| r.phase == want && also(r))
        .ok_or(format!("{r:?}"))
}

/// Asserts that every VirtualSwitch `st` moved had more than `floor`
/// packets/s recorded before its step.
pub fn moved_with_rates(st: &RolloutStatus, floor: u64) {
    for m in &st.moved {
        let before = m.packets_per_second_before.unwrap_or(0);
        assert!(
            before > floor,
            "{} moved with {before} packets/s recorded before its step",
            m.virtual_switch
        );
    }
}

/// Asserts the rollout metrics of object `name` in namespace `ns` in the
/// operator's /metrics at `metrics`: each `(metric, extra labels, value)`
/// of the family `prefix` (`p4fleet_rollout_`, `p4fleet_entries_rollout_`).
pub fn assert_rollout_metrics(
    metrics: SocketAddr,
    prefix: &str,
    ns: &str,
    name: &str,
    want: &[(&str, &str, f64)],
) {
    let text = crate::processes::metrics_text(metrics);
    let labels = |extra: &str| format!("namespace=\"{ns}\",name=\"{name}\"{extra}");
    for (metric, extra, want) in want {
        let metric = format!("{prefix}{metric}");
        let got = crate::processes::metric_sample(&text, &metric, &labels(extra));
        assert_eq!(
            got,
            Some(*want),
            "{metric}{{{}}} in /metrics:\n{text}",
            labels(extra)
        );
    }
}

/// [`failed_on_throughput`], and the rollback of object `name` in `ns`
/// said in a Warning Event.
pub async fn rolled_back_on_throughput(
    client: &Client,
    ns: &str,
    name: &str,
    st: &RolloutStatus,
    floor: u64,
) {
    failed_on_throughput(st, floor);
    let ev = crate::event_about(client, ns, name, Some("RolledBack")).await;
    assert_eq!(ev.type_.as_deref(), Some("Warning"));
}

/// Asserts that `st` failed its gate on `Throughput` at the canary
/// `vs-0`, saying what it compared, the canary having moved with more
/// than `floor` packets/s.
pub fn failed_on_throughput(st: &RolloutStatus, floor: u64) {
    let failure = st.failure.clone().expect("the failed check");
    assert_eq!(
        (failure.check.as_str(), failure.virtual_switch.as_str()),
        ("Throughput", "vs-0"),
        "{failure:?}"
    );
    assert!(
        failure.message.contains("packets/s before the step"),
        "the check says what it compared: {}",
        failure.message
    );
    let canary = &st.moved[0];
    let before = canary.packets_per_second_before.unwrap_or(0);
    assert!(before > floor, "{canary:?}");
}

pub async fn set_ready(sets: &Api<TableEntrySet>) {
    let what = "the set on all four, Ready";
    status_until(sets, "fw", what, Duration::from_secs(90), |st| {
        let ready = find_condition(&st.conditions, "Ready").is_some_and(|c| c.is_true());
        (ready && st.applied == (ENTRIES * DEVICES.len()) as u64)
            .then_some(())
            .ok_or(format!("applied {} {:?}", st.applied, st.conditions))
    })
    .await;
}

/// The fleet in namespace `ns`: device `DEVICES[i]` at `endpoints[i]`.
pub async fn setup(
    client: &Client,
    ns: &str,
    endpoints: [SocketAddr; 4],
    rollout: serde_json::Value,
) {
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    source(&cms, "v1").await;
    create_json(
        &Api::<P4Program>::namespaced(client.clone(), ns),
        json!({"apiVersion": V1, "kind": "P4Program", "metadata": {"name": "firewall"},
            "spec": {"p4info": {"configMapKeyRef": {"name": "fw-src", "key": "p4info.txt"}},
                "rollout": rollout}}),
    )
    .await;
    for (i, d) in DEVICES.iter().enumerate() {
        let sw = format!("{ns}-sw{d}");
        bmv2_switch(client, &sw, endpoints[i], *d).await;
        // Recreate: every program change clears the tables, so the set's
        // entries are written again (and the canary's fail).
        create_json(
            &Api::<VirtualSwitch>::namespaced(client.clone(), ns),
            json!({"apiVersion": V1, "kind": "VirtualSwitch",
                "metadata": {"name": format!("vs-{i}"),
                    "labels": {"app": "fw", "p4fleet.dev/rollout-order": i.to_string()}},
                "spec": {"programRef": "firewall", "switchRef": sw, "slot": 0,
                    "updateStrategy": {"type": "Recreate"}}}),
        )
        .await;
    }
    selector_set(client, ns).await;
}

/// The selector TableEntrySet `fw` of the VirtualSwitches labelled
/// `app: fw`, with [`ENTRIES`] firewall lines from ConfigMap `fw`.
pub async fn selector_set(client: &Client, ns: &str) {
    create_json(
        &Api::<ConfigMap>::namespaced(client.clone(), ns),
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "fw"},
            "data": {"entries": firewall_lines(0, ENTRIES)}}),
    )
    .await;
    create_json(
        &Api::<TableEntrySet>::namespaced(client.clone(), ns),
        json!({"apiVersion": V1, "kind": "TableEntrySet", "metadata": {"name": "fw"},
            "spec": {"virtualSwitchSelector": {"matchLabels": {"app": "fw"}},
                "table": "MyIngress.firewall", "entriesFrom": [{"configMap": "fw"}]}}),
    )
    .await;
}

/// The Canary rollout of the tests that pause after the canary: the
/// canary, an indefinite pause, then all; a 2 s analysis window and
/// `deadline` seconds of progress deadline.
pub fn paused_canary(deadline: u64) -> serde_json::Value {
    json!({"strategy": "Canary",
        "steps": [{"switches": 1}, {"pause": {}}, {"percent": 100}],
        "analysis": {"seconds": 2}, "progressDeadlineSeconds": deadline})
}

/// Pipeline pushes each device received so far (`set_pipeline_rpcs`).
pub fn pushes(stats: SocketAddr) -> Vec<u64> {
    DEVICES
        .iter()
        .map(|d| device_stat(stats, *d, "set_pipeline_rpcs").expect("device stats"))
        .collect()
}

/// The fleet's objects as the tests read them, and revision 1's cookie.
pub struct Fleet {
    pub programs: Api<P4Program>,
    pub cms: Api<ConfigMap>,
    pub sets: Api<TableEntrySet>,
    pub c1: u64,
}

/// [`setup`], then waits until every VirtualSwitch and the set are Ready
/// on revision 1 (the first content: no rollout, nothing ran before it).
pub async fn start(
    client: &Client,
    ns: &str,
    endpoints: [SocketAddr; 4],
    rollout: serde_json::Value,
) -> Fleet {
    setup(client, ns, endpoints, rollout).await;
    let vss: Api<VirtualSwitch> = Api::namespaced(client.clone(), ns);
    for i in 0..DEVICES.len() {
        wait_object_ready(&vss, &format!("vs-{i}"), Duration::from_secs(90)).await;
    }
    let programs: Api<P4Program> = Api::namespaced(client.clone(), ns);
    let sets: Api<TableEntrySet> = Api::namespaced(client.clone(), ns);
    set_ready(&sets).await;
    let c1 = revision_cookie(&programs, 1).await;
    Fleet {
        programs,
        cms: Api::namespaced(client.clone(), ns),
        sets,
        c1,
    }
}

/// Deletes the fleet's Switches (cluster-scoped), then its namespace.
pub async fn teardown(client: &Client, ns: TestNamespace) {
    for d in DEVICES {
        crate::delete_switch(client, &format!("{}-sw{d}", ns.name())).await;
    }
    ns.delete(client).await.unwrap();
}

/// Annotates the program with the resume `value` (`<revision>/<step>`).
pub async fn annotate_resume(programs: &Api<P4Program>, value: &str) {
    let patch = json!({"metadata": {"annotations": {"p4fleet.dev/rollout-resume": value}}});
    programs
        .patch("firewall", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
}

/// Resumes the pause with `value` and waits until the next step has
/// pushed a pipeline to one of the devices after the canary.
pub async fn resume_until_moving(programs: &Api<P4Program>, stats: SocketAddr, value: &str) {
    let before = pushes(stats);
    annotate_resume(programs, value).await;
    wait_for(
        "the last step moving a VirtualSwitch",
        Duration::from_secs(60),
        || async {
            let now = pushes(stats);
            (now[1..] != before[1..])
                .then_some(())
                .ok_or(format!("{now:?}"))
        },
    )
    .await;
}
