//! Digests and the learning loop through the real kube-apiserver, with the
//! emulator and the operator as child processes: a TableEntrySet
//! configures the l2switch program's digest, a frame from an unknown
//! source sent through the emulator's side channel produces a digest, the
//! operator learns an entry from it (read back here over P4Runtime, with
//! the set's learned tag), and the entry's idle timeout removes it again.
//! A digest with sinks puts its messages into the operator's log and into
//! a ConfigMap owned by the set (the last `keep`, read here through the
//! API server), which goes with the set. Bad input (an unknown digest;
//! an idle timeout on a table without NOTIFY_CONTROL; a sink ConfigMap
//! name someone else's ConfigMap has) is a condition, a status error
//! naming the field, and an Event.

use p4fleet_e2e::set_status_within_90s as status_where;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::{Api, ResourceExt};
use p4fleet_crds::{TableEntrySet, TableEntrySetStatus, find_condition};
use p4fleet_e2e::device_read::read_entities;
use p4fleet_e2e::processes::{Fleet, fleet};
use p4fleet_e2e::{
    ControlPlane, create_json, delete_and_wait_gone, repo_root, wait_for, wait_gone,
};
use p4fleet_model::sync;
use p4fleet_proto::p4runtime::{self as p4, entity::Entity};
use serde_json::json;

/// The device the learning set runs on, and the one the bad sets use.
const DEV: u64 = 51;
const BAD_DEV: u64 = 52;
/// The device of the static idle timeout test.
const IDLE_DEV: u64 = 53;
/// The devices of the digest sink tests.
const SINK_DEV: u64 = 54;
const TAKEN_DEV: u64 = 55;
const SMAC: u32 = 41683160;
const DIGEST: u32 = 402184575;

async fn env() -> (&'static ControlPlane, &'static Fleet) {
    fleet(&["--device-ids", "51,52,53,54,55"], "operator-learning", 30).await
}

/// examples/l2switch's P4Info with `smac` compiled for idle timeouts
/// (`support_timeout = true`: NOTIFY_CONTROL).
fn p4info() -> String {
    let text = std::fs::read_to_string(repo_root().join("examples/l2switch/p4info.txt")).unwrap();
    let mut info = p4fleet_proto::p4info::parse_text(&text).unwrap();
    for t in &mut info.tables {
        if t.preamble.as_ref().unwrap().id == SMAC {
            t.idle_timeout_behavior =
                p4fleet_proto::p4info::table::IdleTimeoutBehavior::NotifyControl as i32;
        }
    }
    p4fleet_proto::p4info::to_text(&info)
}

fn cond(st: &TableEntrySetStatus, t: &str) -> Option<(bool, String, String)> {
    find_condition(&st.conditions, t).map(|c| (c.is_true(), c.reason.clone(), c.message.clone()))
}

/// Every entity matching `filter` on `device`, read over P4Runtime.
async fn read(env: &Fleet, device: u64, filter: Entity) -> Vec<Entity> {
    read_entities(env.p4runtime, device, filter).await
}

/// The `smac` entries of the learning test's device.
async fn smac(env: &Fleet) -> Vec<p4::TableEntry> {
    smac_of(env, DEV).await
}

/// The `smac` entries of `device`.
async fn smac_of(env: &Fleet, device: u64) -> Vec<p4::TableEntry> {
    let filter = Entity::TableEntry(p4::TableEntry {
        table_id: SMAC,
        ..Default::default()
    });
    read(env, device, filter)
        .await
        .into_iter()
        .filter_map(|e| match e {
            Entity::TableEntry(t) => Some(t),
            _ => None,
        })
        .collect()
}

/// One frame from `src` into port `port` of `device`, through the
/// emulator's side channel.
fn send_frame(env: &Fleet, device: u64, src: &str, port: u32) -> serde_json::Value {
    let body = json!([{"port": port, "src": src, "dst": "ff:ff:ff:ff:ff:ff"}]).to_string();
    let path = format!("/devices/{device}/frames");
    p4fleet_e2e::processes::stats_post(env.stats, &path, &body).expect("the side channel answers")
}

/// The program, and one Switch and VirtualSwitch per `(name, device)` in
/// `ns`. The tests of this binary run in parallel against one emulator
/// and one operator: each names only its own device, because two Switches
/// on one device are two connections with the operator's one election id,
/// and the device refuses the second ("election id already used").
async fn setup(client: &kube::Client, env: &Fleet, ns: &str, switches: &[(&str, u64)]) {
    p4fleet_e2e::p4info_program(client, ns, "l2switch", &p4info()).await;
    for &(vs, dev) in switches {
        let sw = format!("{ns}-{vs}");
        let slot = p4fleet_e2e::Bmv2Slot {
            switch: &sw,
            virtual_switch: vs,
            program: "l2switch",
            endpoint: env.p4runtime,
            device: dev,
        };
        p4fleet_e2e::bmv2_virtual_switch(client, ns, slot).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_digest_teaches_an_entry_and_its_idle_timeout_removes_it() {
    let (cp, env) = env().await;
    let (client, ns) = cp.client_and_namespace().await;
    let ns = ns.name().to_string();
    setup(&client, env, &ns, &[("l2", DEV)]).await;
    let sets: Api<TableEntrySet> = Api::namespaced(client.clone(), &ns);
    create_json(
        &sets,
        json!({"apiVersion": "p4fleet.dev/v1alpha1", "kind": "TableEntrySet",
        "metadata": {"name": "learner"},
        "spec": {
            "virtualSwitchRef": "l2", "table": "MyIngress.smac",
            "digests": [{"name": "mac_learn_digest_t", "maxTimeout": "1ms",
                         "maxListSize": 16, "ackTimeout": "5s"}],
            "learn": {"digest": "mac_learn_digest_t", "action": "NoAction",
                      "key": {"hdr.ethernet.srcAddr": "srcAddr"},
                      "idleTimeout": "2s", "maxLearned": 100}
        }}),
    )
    .await;

    // The config is on the device, and status says so.
    let st = status_where(&sets, "learner", "DigestsSynced and Learning", |s| {
        cond(s, "DigestsSynced").is_some_and(|c| c.0) && cond(s, "Learning").is_some_and(|c| c.0)
    })
    .await;
    assert_eq!(
        st.digests.as_ref().unwrap().configured,
        ["mac_learn_digest_t"]
    );
    let configs = read(env, DEV, Entity::DigestEntry(p4::DigestEntry::default())).await;
    assert_eq!(
        configs,
        [Entity::DigestEntry(p4::DigestEntry {
            digest_id: DIGEST,
            config: Some(p4::digest_entry::Config {
                max_timeout_ns: 1_000_000,
                max_list_size: 16,
                ack_timeout_ns: 5_000_000_000,
            }),
        })]
    );
    assert!(smac(env).await.is_empty());

    // A frame from an unknown source: a digest, and the operator learns
    // its MAC (read back here, independently of the operator).
    let report = send_frame(env, DEV, "02:00:00:00:00:07", 3);
    assert_eq!(report["digests_queued"], 1, "{report}");
    let tag = sync::learned_tag(sync::set_tag(&ns, "learner"));
    let learned = wait_for("the learned entry", Duration::from_secs(30), || async {
        let entries = smac(env).await;
        match entries.as_slice() {
            [e] => Ok(e.clone()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    let Some(p4::field_match::FieldMatchType::Exact(key)) = &learned.r#match[0].field_match_type
    else {
        panic!("{learned:?}")
    };
    assert_eq!(key.value, [2, 0, 0, 0, 0, 7]);
    assert_eq!(sync::tag_of(&learned.metadata), tag);
    assert_eq!(learned.idle_timeout_ns, 2_000_000_000);
    p4fleet_e2e::wait_event(&client, &ns, Some("Learned"), "entries learned").await;

    // No traffic: it idles out and the operator removes it.
    wait_for("the entry aged out", Duration::from_secs(30), || async {
        let entries = smac(env).await;
        if entries.is_empty() {
            Ok(())
        } else {
            Err(format!("{entries:?}"))
        }
    })
    .await;
    let st = status_where(&sets, "learner", "the aged-out entry counted", |s| {
        s.digests
            .as_ref()
            .is_some_and(|d| d.aged_out == Some(1) && d.learned == Some(0))
    })
    .await;
    assert!(cond(&st, "Ready").is_some_and(|c| c.0), "{st:?}");

    // Deleting the set removes its digest config.
    sets.delete("learner", &Default::default()).await.unwrap();
    wait_for("the config removed", Duration::from_secs(60), || async {
        let configs = read(env, DEV, Entity::DigestEntry(p4::DigestEntry::default())).await;
        if configs.is_empty() {
            Ok(())
        } else {
            Err(format!("{configs:?}"))
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_digests_and_idle_timeouts_are_conditions_and_events() {
    let (cp, env) = env().await;
    let (client, ns) = cp.client_and_namespace().await;
    let ns = ns.name().to_string();
    setup(&client, env, &ns, &[("spare", BAD_DEV)]).await;
    let sets: Api<TableEntrySet> = Api::namespaced(client.clone(), &ns);
    create_json(
        &sets,
        json!({"apiVersion": "p4fleet.dev/v1alpha1", "kind": "TableEntrySet",
            "metadata": {"name": "unknown-digest"},
            "spec": {
                "virtualSwitchRef": "spare", "table": "MyIngress.smac",
                "entries": [{"match": {"hdr.ethernet.srcAddr": "02:00:00:00:00:01"}, "action": "NoAction"}],
                "digests": [{"name": "no_such_digest"}]
            }}),
    )
    .await;
    let st = status_where(&sets, "unknown-digest", "DigestInvalid", |s| {
        cond(s, "DigestsSynced").is_some_and(|c| !c.0 && c.1 == "DigestInvalid")
    })
    .await;
    let (_, _, message) = cond(&st, "DigestsSynced").unwrap();
    assert_eq!(
        message,
        "digests[0]: name: digest no_such_digest is not in the program"
    );
    assert!(
        cond(&st, "Ready").is_some_and(|c| !c.0 && c.1 == "DigestInvalid"),
        "{st:?}"
    );
    p4fleet_e2e::wait_event(&client, &ns, Some("DigestInvalid"), "no_such_digest").await;
    // Nothing was configured.
    let configs = read(
        env,
        BAD_DEV,
        Entity::DigestEntry(p4::DigestEntry::default()),
    )
    .await;
    assert!(configs.is_empty(), "{configs:?}");

    // dmac has no idle timeouts in this program.
    create_json(
        &sets,
        json!({"apiVersion": "p4fleet.dev/v1alpha1", "kind": "TableEntrySet",
        "metadata": {"name": "no-timeouts"},
        "spec": {
            "virtualSwitchRef": "spare", "table": "MyIngress.dmac",
            "digests": [{"name": "mac_learn_digest_t"}],
            "learn": {"digest": "mac_learn_digest_t", "action": "forward",
                      "key": {"hdr.ethernet.dstAddr": "srcAddr"},
                      "params": {"port": "ingress_port"}, "idleTimeout": "1s"}
        }}),
    )
    .await;
    let st = status_where(&sets, "no-timeouts", "LearnInvalid", |s| {
        cond(s, "Learning").is_some_and(|c| !c.0 && c.1 == "LearnInvalid")
    })
    .await;
    let e = st
        .errors
        .iter()
        .find(|e| e.source == "learn.idleTimeout")
        .unwrap_or_else(|| panic!("{st:?}"));
    assert!(
        e.reason
            .contains("table MyIngress.dmac does not notify idle timeouts"),
        "{e:?}"
    );
    p4fleet_e2e::wait_event(&client, &ns, Some("LearnInvalid"), "MyIngress.dmac").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn static_idle_timeouts_are_written_and_reported_not_removed() {
    let (cp, env) = env().await;
    let (client, ns) = cp.client_and_namespace().await;
    let ns = ns.name().to_string();
    setup(&client, env, &ns, &[("idle", IDLE_DEV)]).await;
    let sets: Api<TableEntrySet> = Api::namespaced(client.clone(), &ns);
    create_json(
        &sets,
        json!({"apiVersion": "p4fleet.dev/v1alpha1", "kind": "TableEntrySet",
        "metadata": {"name": "static-idle"},
        "spec": {
            "virtualSwitchRef": "idle", "table": "MyIngress.smac",
            "entries": [{"match": {"hdr.ethernet.srcAddr": "02:00:00:00:00:09"},
                         "action": "NoAction", "idleTimeout": "1s"}]
        }}),
    )
    .await;
    // Written with its idle timeout and the set's own tag (read here once
    // the set says it applied it: before, the device has no pipeline).
    status_where(&sets, "static-idle", "applied", |s| s.applied == 1).await;
    let entries = smac_of(env, IDLE_DEV).await;
    let [entry] = entries.as_slice() else {
        panic!("{entries:?}")
    };
    assert_eq!(entry.idle_timeout_ns, 1_000_000_000);
    assert_eq!(
        sync::tag_of(&entry.metadata),
        sync::set_tag(&ns, "static-idle")
    );
    // No traffic: the device notifies it; the set reports it and keeps it.
    let st = status_where(&sets, "static-idle", "status.idle", |s| {
        s.idle.as_ref().is_some_and(|i| i.notified >= 1)
    })
    .await;
    assert_eq!(
        st.idle.as_ref().unwrap().recent[0],
        "hdr.ethernet.srcAddr=02:00:00:00:00:09"
    );
    p4fleet_e2e::wait_event(&client, &ns, Some("EntriesIdle"), "entries idle").await;
    let st = status_where(&sets, "static-idle", "Ready", |s| {
        cond(s, "Ready").is_some_and(|c| c.0)
    })
    .await;
    assert_eq!(st.applied, 1, "{st:?}");
    let still = smac_of(env, IDLE_DEV).await;
    assert_eq!(still.len(), 1, "a static entry is not removed: {still:?}");
    assert_eq!(still[0].idle_timeout_ns, 1_000_000_000);

    // dmac has no idle timeouts: the entry is refused before any write,
    // naming set, entry and table.
    create_json(
        &sets,
        json!({"apiVersion": "p4fleet.dev/v1alpha1", "kind": "TableEntrySet",
        "metadata": {"name": "no-timeouts"},
        "spec": {
            "virtualSwitchRef": "idle", "table": "MyIngress.dmac",
            "entries": [{"match": {"hdr.ethernet.dstAddr": "02:00:00:00:00:09"},
                         "action": "forward", "params": {"port": 1}, "idleTimeout": "1s"}]
        }}),
    )
    .await;
    let st = status_where(&sets, "no-timeouts", "InvalidEntries", |s| {
        cond(s, "Valid").is_some_and(|c| !c.0 && c.1 == "InvalidEntries")
    })
    .await;
    let (_, _, message) = cond(&st, "Valid").unwrap();
    assert!(
        message.contains("no-timeouts")
            && message.contains("entries[0]")
            && message.contains("MyIngress.dmac")
            && message.contains("does not notify idle timeouts"),
        "{message}"
    );
    p4fleet_e2e::wait_event(&client, &ns, Some("InvalidEntries"), "MyIngress.dmac").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn digest_sinks_log_each_list_and_keep_the_last_messages_in_a_config_map() {
    let (cp, env) = env().await;
    let (client, ns) = cp.client_and_namespace().await;
    let ns = ns.name().to_string();
    setup(&client, env, &ns, &[("sinkvs", SINK_DEV)]).await;
    let sets: Api<TableEntrySet> = Api::namespaced(client.clone(), &ns);
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    // No learning: every frame from an unknown source is a digest.
    create_json(
        &sets,
        json!({"apiVersion": "p4fleet.dev/v1alpha1", "kind": "TableEntrySet",
        "metadata": {"name": "sink"},
        "spec": {
            "virtualSwitchRef": "sinkvs", "table": "MyIngress.smac",
            "entries": [{"match": {"hdr.ethernet.srcAddr": "02:00:00:00:00:ff"}, "action": "NoAction"}],
            "digests": [{"name": "mac_learn_digest_t", "maxTimeout": "1ms",
                         "maxListSize": 16, "ackTimeout": "5s",
                         "sink": {"to": ["Log", "ConfigMap"], "keep": 2}}]
        }}),
    )
    .await;
    let cm_name = "sink-digest-mac-learn-digest-t";
    let st = status_where(&sets, "sink", "DigestsSynced", |s| {
        cond(s, "DigestsSynced").is_some_and(|c| c.0)
    })
    .await;
    assert_eq!(st.digests.as_ref().unwrap().sink_config_maps, [cm_name]);

    // One frame: one message, in the ConfigMap by member name.
    let report = send_frame(env, SINK_DEV, "02:00:00:00:00:01", 3);
    assert_eq!(report["digests_queued"], 1, "{report}");
    let first = config_map_where(&cms, cm_name, "the first message", |d| {
        d.get("received").map(String::as_str) == Some("1")
    })
    .await;
    let data = first.data.clone().unwrap();
    assert_eq!(data["digest"], "mac_learn_digest_t");
    let lines: Vec<&str> = data["messages"].lines().collect();
    let [line] = lines.as_slice() else {
        panic!("{lines:?}")
    };
    assert!(
        line.contains(" sinkvs list=")
            && line.ends_with(" srcAddr=02:00:00:00:00:01 ingress_port=3"),
        "{line}"
    );
    // Owned by the set and labelled with it.
    let set = sets.get("sink").await.unwrap();
    let owners = first.metadata.owner_references.clone().unwrap_or_default();
    assert_eq!(owners.len(), 1, "{owners:?}");
    assert_eq!(
        (owners[0].kind.as_str(), owners[0].uid.as_str()),
        ("TableEntrySet", set.uid().unwrap().as_str())
    );
    assert_eq!(first.labels()["p4fleet.dev/digest-sink"], "sink");

    // Three more: the ConfigMap keeps the newest two, and counts all.
    for (i, mac) in [
        "02:00:00:00:00:02",
        "02:00:00:00:00:03",
        "02:00:00:00:00:04",
    ]
    .into_iter()
    .enumerate()
    {
        let report = send_frame(env, SINK_DEV, mac, 4 + i as u32);
        assert_eq!(report["digests_queued"], 1, "{report}");
    }
    let last = config_map_where(&cms, cm_name, "four messages received", |d| {
        d.get("received").map(String::as_str) == Some("4")
    })
    .await;
    let data = last.data.unwrap();
    let lines: Vec<&str> = data["messages"].lines().collect();
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(
        lines[0].ends_with("srcAddr=02:00:00:00:00:03 ingress_port=5"),
        "{lines:?}"
    );
    assert!(
        lines[1].ends_with("srcAddr=02:00:00:00:00:04 ingress_port=6"),
        "{lines:?}"
    );

    // The log sink: one structured line per list, values by member name.
    let set_key = format!("{ns}/sink");
    wait_for(
        "the digest list in the operator log",
        Duration::from_secs(30),
        || async {
            let log = std::fs::read_to_string(&env.operator_log).map_err(|e| e.to_string())?;
            log.lines()
                .find(|l| {
                    l.contains("digest list")
                        && l.contains(&set_key)
                        && l.contains("srcAddr=02:00:00:00:00:01 ingress_port=3")
                })
                .map(|_| ())
                .ok_or_else(|| "not yet".to_string())
        },
    )
    .await;

    // Deleting the set deletes its ConfigMap (a bare kube-apiserver runs
    // no garbage collector: the finalizer does it).
    sets.delete("sink", &Default::default()).await.unwrap();
    wait_gone(&cms, cm_name, Duration::from_secs(60)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sink_never_writes_over_someone_elses_config_map() {
    let (cp, env) = env().await;
    let (client, ns) = cp.client_and_namespace().await;
    let ns = ns.name().to_string();
    setup(&client, env, &ns, &[("taken", TAKEN_DEV)]).await;
    let sets: Api<TableEntrySet> = Api::namespaced(client.clone(), &ns);
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let cm_name = "taken-digest-mac-learn-digest-t";
    create_json(
        &cms,
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": cm_name},
            "data": {"mine": "yes"}}),
    )
    .await;
    create_json(
        &sets,
        json!({"apiVersion": "p4fleet.dev/v1alpha1", "kind": "TableEntrySet",
        "metadata": {"name": "taken"},
        "spec": {
            "virtualSwitchRef": "taken", "table": "MyIngress.smac",
            "entries": [{"match": {"hdr.ethernet.srcAddr": "02:00:00:00:00:01"}, "action": "NoAction"}],
            "digests": [{"name": "mac_learn_digest_t", "sink": {"to": ["ConfigMap"]}}]
        }}),
    )
    .await;
    // Ready says it too once the entries are in (before the VirtualSwitch
    // has its pipeline, Ready's reason is that).
    let st = status_where(&sets, "taken", "DigestSinkTaken", |s| {
        cond(s, "DigestsSynced").is_some_and(|c| !c.0 && c.1 == "DigestSinkTaken")
            && cond(s, "Ready").is_some_and(|c| c.1 == "DigestSinkTaken")
    })
    .await;
    let (_, _, message) = cond(&st, "DigestsSynced").unwrap();
    assert!(
        message.starts_with(&format!("digests[0]: sink: ConfigMap {cm_name} exists")),
        "{message}"
    );
    assert!(cond(&st, "Ready").is_some_and(|c| !c.0), "{st:?}");
    assert_eq!(st.applied, 1, "the entries are written all the same");
    assert!(st.digests.unwrap().sink_config_maps.is_empty());
    p4fleet_e2e::wait_event(&client, &ns, Some("DigestSinkTaken"), cm_name).await;
    // Deleting the set leaves the other ConfigMap alone.
    delete_and_wait_gone(&sets, "taken").await;
    let cm = cms.get(cm_name).await.unwrap();
    assert_eq!(cm.data.unwrap()["mine"], "yes");
    assert!(cm.metadata.owner_references.is_none());
}

/// Waits until ConfigMap `name`'s data satisfies `pred`.
async fn config_map_where(
    cms: &Api<ConfigMap>,
    name: &str,
    what: &str,
    pred: impl Fn(&std::collections::BTreeMap<String, String>) -> bool,
) -> ConfigMap {
    wait_for(what, Duration::from_secs(60), || async {
        let cm = cms
            .get_opt(name)
            .await
            .map_err(|e| e.to_string())?
            .ok_or("no ConfigMap yet")?;
        let data = cm.data.clone().unwrap_or_default();
        if pred(&data) {
            Ok(cm)
        } else {
            Err(format!("{data:?}"))
        }
    })
    .await
}
