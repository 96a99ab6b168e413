//! Direct meters per entry end to end: a real kube-apiserver + etcd, the
//! emulator and the operator as child processes, the fabric program
//! (examples/fabric: `MyIngress.acl` has the direct meter
//! `MyIngress.acl_meter`, `MyIngress.l2_fwd` has none) on a Bmv2 Switch.
//! Every check reads the device's `DirectMeterEntry`s over P4Runtime
//! itself: an inline `meter` and a ConfigMap line's `@meter=` are written
//! after their entries, an entry without one is left unconfigured, a
//! changed config is written in place; a meter on a table without a
//! direct meter and bad configs (inline and in a line) are errors naming
//! set, table and entry, and nothing of them reaches the device.

use p4fleet_e2e::set_status_within_90s as status_where;
use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;
use p4fleet_crds::{TableEntrySet, TableEntrySetStatus, find_condition};
use p4fleet_e2e::device_read::{read_entities, try_read_entities};
use p4fleet_e2e::processes::{Fleet, fleet};
use p4fleet_e2e::{ControlPlane, create_json, merge_patch, program_on_bmv2, repo_root, wait_for};
use p4fleet_proto::p4info::{self, P4Info};
use p4fleet_proto::p4runtime::{self as p4, entity::Entity};
use serde_json::json;

const DEVICE: u64 = 1;

async fn env() -> (&'static ControlPlane, &'static Fleet) {
    fleet(&["--device-ids", "1"], "direct-meters-operator", 3).await
}

fn fabric_p4info() -> String {
    std::fs::read_to_string(repo_root().join("examples/fabric/p4info.txt")).unwrap()
}

/// The id of table `name` in the fabric P4Info.
fn table_id(name: &str) -> u32 {
    let info: P4Info = p4info::parse_text(&fabric_p4info()).unwrap();
    info.tables
        .iter()
        .filter_map(|t| t.preamble.as_ref())
        .find(|p| p.name == name)
        .map(|p| p.id)
        .unwrap_or_else(|| panic!("{name} not in the fabric P4Info"))
}

type Config = (i64, i64, i64, i64);

/// The table's direct meter configs on the device, by the entry's first
/// match value (the srcAddr of the ACL's entries): None when unconfigured.
async fn meters(emu: &Fleet, table: u32) -> Result<BTreeMap<Vec<u8>, Option<Config>>, String> {
    let filter = Entity::DirectMeterEntry(p4::DirectMeterEntry {
        table_entry: Some(p4::TableEntry {
            table_id: table,
            ..Default::default()
        }),
        ..Default::default()
    });
    let mut out = BTreeMap::new();
    for e in try_read_entities(emu.p4runtime, DEVICE, filter).await? {
        if let Entity::DirectMeterEntry(d) = e {
            let te = d.table_entry.unwrap_or_default();
            let first = match te.r#match.first().and_then(|m| m.field_match_type.clone()) {
                Some(p4::field_match::FieldMatchType::Ternary(t)) => t.value,
                Some(p4::field_match::FieldMatchType::Exact(x)) => x.value,
                other => return Err(format!("unexpected match {other:?}")),
            };
            let config = d.config.map(|c| (c.cir, c.cburst, c.pir, c.pburst));
            out.insert(first, config);
        }
    }
    Ok(out)
}

async fn until(
    emu: &Fleet,
    table: u32,
    what: &str,
    pred: impl Fn(&BTreeMap<Vec<u8>, Option<Config>>) -> bool,
) -> BTreeMap<Vec<u8>, Option<Config>> {
    wait_for(what, Duration::from_secs(60), || async {
        let got = meters(emu, table).await?;
        pred(&got).then_some(got.clone()).ok_or(format!("{got:?}"))
    })
    .await
}

fn meters_synced(st: &TableEntrySetStatus, n: usize) -> bool {
    find_condition(&st.conditions, "DirectMetersSynced").is_some_and(|c| {
        c.is_true()
            && c.message
                .starts_with(&format!("{n} of {n} entry meters of MyIngress.acl_meter"))
    }) && find_condition(&st.conditions, "Ready").is_some_and(|c| c.is_true())
}

fn acl_spec(meter_a: Config) -> serde_json::Value {
    let (cir, cburst, pir, pburst) = meter_a;
    json!({
        "virtualSwitchRef": "fabric",
        "table": "MyIngress.acl",
        "entries": [
            {"match": {"hdr.ipv4.srcAddr": "10.0.0.1"}, "action": "permit", "priority": 10,
             "meter": {"cir": cir, "cburst": cburst, "pir": pir, "pburst": pburst}},
            {"match": {"hdr.ipv4.srcAddr": "10.0.0.2"}, "action": "deny", "priority": 10}
        ],
        "entriesFrom": [{"configMap": "acl-lines"}]
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn entry_meters_are_written_read_back_changed_in_place_and_bad_ones_named() {
    let (cp, emu) = env().await;
    let acl = table_id("MyIngress.acl");
    let l2 = table_id("MyIngress.l2_fwd");
    let (client, ns) = cp.client_and_namespace().await;
    let ns = ns.name().to_string();
    let v1 = "p4fleet.dev/v1alpha1";
    let p4info = fabric_p4info();
    program_on_bmv2(&client, &ns, "fabric", &p4info, emu.p4runtime, DEVICE).await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    create_json(
        &cms,
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "acl-lines"},
            "data": {"entries": "#! table MyIngress.acl\nsrcAddr=10.0.0.3 => deny @20 @meter=3000:300:6000:600\n"}}),
    )
    .await;
    let sets: Api<TableEntrySet> = Api::namespaced(client.clone(), &ns);
    create_json(
        &sets,
        json!({"apiVersion": v1, "kind": "TableEntrySet", "metadata": {"name": "acl"},
            "spec": acl_spec((1000, 100, 2000, 200))}),
    )
    .await;

    // Three entries; the inline one and the line's with their configs,
    // the third unconfigured.
    let first = until(emu, acl, "3 ACL entries, 2 metered", |m| {
        m.len() == 3 && m.values().filter(|c| c.is_some()).count() == 2
    })
    .await;
    assert_eq!(first[&vec![10u8, 0, 0, 1]], Some((1000, 100, 2000, 200)));
    assert_eq!(first[&vec![10u8, 0, 0, 2]], None);
    assert_eq!(first[&vec![10u8, 0, 0, 3]], Some((3000, 300, 6000, 600)));
    status_where(&sets, "acl", "DirectMetersSynced 2 of 2", |s| {
        meters_synced(s, 2)
    })
    .await;

    // A changed config: a MODIFY of the meter, the entry kept.
    let patch = json!({"spec": acl_spec((5000, 500, 8000, 800))});
    merge_patch(&sets, "acl", patch).await;
    let changed = until(emu, acl, "the new config", |m| {
        m.get(&vec![10u8, 0, 0, 1]) == Some(&Some((5000, 500, 8000, 800)))
    })
    .await;
    assert_eq!(changed.len(), 3);
    assert_eq!(changed[&vec![10u8, 0, 0, 3]], Some((3000, 300, 6000, 600)));
    status_where(&sets, "acl", "DirectMetersSynced after the change", |s| {
        meters_synced(s, 2)
    })
    .await;

    // Bad input, on the table without a direct meter: a meter there (the
    // entry is written, its meter refused by name), a config with PIR
    // below CIR inline and a short one in a line (those entries refused).
    create_json(
        &cms,
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "l2-lines"},
            "data": {"entries": "dstAddr=00:00:00:00:00:09 => forward 9 @meter=1:2:3\n"}}),
    )
    .await;
    create_json(
        &sets,
        json!({"apiVersion": v1, "kind": "TableEntrySet", "metadata": {"name": "l2-bad"},
            "spec": {
                "virtualSwitchRef": "fabric",
                "table": "MyIngress.l2_fwd",
                "entries": [
                    {"match": {"hdr.ethernet.dstAddr": "00:00:00:00:00:01"}, "action": "forward",
                     "params": {"port": 1}, "meter": {"cir": 1, "cburst": 1, "pir": 1, "pburst": 1}},
                    {"match": {"hdr.ethernet.dstAddr": "00:00:00:00:00:02"}, "action": "forward",
                     "params": {"port": 2}, "meter": {"cir": 5000, "cburst": 100, "pir": 1000, "pburst": 200}}
                ],
                "entriesFrom": [{"configMap": "l2-lines"}]
            }}),
    )
    .await;
    let st = status_where(&sets, "l2-bad", "DirectMetersSynced False", |s| {
        find_condition(&s.conditions, "DirectMetersSynced").is_some_and(|c| !c.is_true())
            && s.errors.len() >= 3
    })
    .await;
    let c = find_condition(&st.conditions, "DirectMetersSynced").unwrap();
    assert_eq!(c.reason, "NoDirectMeter", "{c:?}");
    assert!(
        c.message.contains(&format!("TableEntrySet {ns}/l2-bad"))
            && c.message
                .contains("table MyIngress.l2_fwd has no direct meter"),
        "{}",
        c.message
    );
    assert!(!find_condition(&st.conditions, "Ready").unwrap().is_true());
    let errors: Vec<String> = st
        .errors
        .iter()
        .map(|e| format!("{}: {}", e.source, e.reason))
        .collect();
    let has = |needle: &str| errors.iter().any(|e| e.contains(needle));
    assert!(
        has("entries[0]: meter: table MyIngress.l2_fwd has no direct meter"),
        "{errors:?}"
    );
    assert!(
        has("entries[1]: meter \"5000:100:1000:200\": pir 1000 is below cir 5000"),
        "{errors:?}"
    );
    assert!(
        has("configmap/l2-lines/entries:line 1: meter \"1:2:3\": expected cir:cburst:pir:pburst"),
        "{errors:?}"
    );
    // Only the valid entry reached the device; the table has no meters to
    // read, so the entry is checked through a table read.
    let filter = Entity::TableEntry(p4::TableEntry {
        table_id: l2,
        ..Default::default()
    });
    let l2_entries = read_entities(emu.p4runtime, DEVICE, filter)
        .await
        .into_iter()
        .filter(|e| matches!(e, Entity::TableEntry(t) if !t.is_default_action))
        .count();
    assert_eq!(l2_entries, 1);
    // The ACL set is untouched by the other set's errors.
    assert_eq!(meters(emu, acl).await.unwrap(), changed);
}
