//! Counters, meters and registers of a TableEntrySet through the real
//! kube-apiserver, with the emulator and the operator as child processes:
//! a Dpdk Switch's data plane forwards generated traffic through an entry
//! of the set, its direct counter's readout shows in status and /metrics,
//! meter configs and register values are written and read back at the
//! device, and bad settings are reported without writing any of them.

use std::time::Duration;

use kube::Api;
use p4fleet_crds::{TableEntrySet, TableEntrySetStatus, find_condition};
use p4fleet_e2e::device_read::read_entities;
use p4fleet_e2e::dpdk::l2crypt;
use p4fleet_e2e::processes::{Fleet, fleet, metrics_text};
use p4fleet_e2e::{
    ControlPlane, create_json, resources_refused, set_status_within_90s as status_where, wait_for,
};
use p4fleet_proto::p4runtime::{self as p4, entity::Entity};
use serde_json::json;

/// The Dpdk device the test's Switch drives.
const DEV: u64 = 31;
const RATE: u32 = 335000001;
const SEEN: u32 = 369000001;

async fn env() -> (&'static ControlPlane, &'static Fleet) {
    fleet(
        &[
            "--device-ids",
            "31",
            "--dpdk-device-ids",
            "31",
            "--dpdk-rate-pps",
            "20000",
            "--dpdk-flows",
            "4",
        ],
        "operator-counters",
        30,
    )
    .await
}

/// l2crypt's P4Info with a direct counter on `dmac`, a meter and a
/// register array.
fn p4info() -> String {
    format!(
        r#"{}
direct_counters {{ preamble {{ id: 330000001 name: "MyIngress.dmac_counter" alias: "dmac_counter" }} spec {{ unit: BOTH }} direct_table_id: 44918510 }}
meters {{ preamble {{ id: {RATE} name: "MyIngress.rate" alias: "rate" }} spec {{ unit: BYTES }} size: 4 }}
registers {{ preamble {{ id: {SEEN} name: "MyIngress.seen" alias: "seen" }} type_spec {{ bitstring {{ bit {{ bitwidth: 12 }} }} }} size: 16 }}
"#,
        l2crypt("p4info.txt")
    )
}

fn cond(st: &TableEntrySetStatus, t: &str) -> Option<(bool, String, String)> {
    find_condition(&st.conditions, t).map(|c| (c.is_true(), c.reason.clone(), c.message.clone()))
}

/// The Switch, program and VirtualSwitch `l2` in `ns`.
async fn setup(client: &kube::Client, env: &Fleet, ns: &str) {
    create_json(
        &Api::<p4fleet_crds::P4Program>::namespaced(client.clone(), ns),
        json!({
            "apiVersion": "p4fleet.dev/v1alpha1", "kind": "P4Program",
            "metadata": {"name": "l2crypt"},
            "spec": {"p4info": {"inline": p4info()}, "artifacts": {"dpdk": {
                "spec": {"inline": l2crypt("l2crypt.spec")},
                "context": {"inline": l2crypt("context.json")},
                "bfrtJson": {"inline": l2crypt("bfrt.json")}
            }}}
        }),
    )
    .await;
    create_json(
        &Api::<p4fleet_crds::Switch>::all(client.clone()),
        json!({
            "apiVersion": "p4fleet.dev/v1alpha1", "kind": "Switch",
            "metadata": {"name": format!("{ns}-dpdk")},
            "spec": {"target": "Dpdk", "endpoint": env.p4runtime.to_string(), "deviceId": DEV,
                     "slots": 1, "capacity": {"cores": 2}}
        }),
    )
    .await;
    create_json(
        &Api::<p4fleet_crds::VirtualSwitch>::namespaced(client.clone(), ns),
        json!({
            "apiVersion": "p4fleet.dev/v1alpha1", "kind": "VirtualSwitch",
            "metadata": {"name": "l2"},
            "spec": {"programRef": "l2crypt", "switchRef": format!("{ns}-dpdk"), "slot": 0}
        }),
    )
    .await;
}

async fn read(env: &Fleet, filter: Entity) -> Vec<Entity> {
    read_entities(env.p4runtime, DEV, filter).await
}

async fn meter_at(env: &Fleet, index: i64) -> Option<p4::MeterConfig> {
    let got = read(
        env,
        Entity::MeterEntry(p4::MeterEntry {
            meter_id: RATE,
            index: Some(p4::Index { index }),
            ..Default::default()
        }),
    )
    .await;
    match got.as_slice() {
        [Entity::MeterEntry(m)] => m.config,
        other => panic!("{other:?}"),
    }
}

async fn register_at(env: &Fleet, index: i64) -> Vec<u8> {
    let got = read(
        env,
        Entity::RegisterEntry(p4::RegisterEntry {
            register_id: SEEN,
            index: Some(p4::Index { index }),
            data: None,
        }),
    )
    .await;
    match got.as_slice() {
        [Entity::RegisterEntry(r)] => match r.data.clone().unwrap().data.unwrap() {
            p4::p4_data::Data::Bitstring(b) => b,
            other => panic!("{other:?}"),
        },
        other => panic!("{other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counters_show_in_status_and_metrics_and_settings_reach_the_device() {
    let (cp, env) = env().await;
    let (client, ns) = cp.client_and_namespace().await;
    let ns = ns.name().to_string();
    setup(&client, env, &ns).await;

    let mac = p4fleet_emulator::dataplane::packet::dst_mac(0);
    let hex: String = mac.iter().map(|b| format!("{b:02x}")).collect();
    let sets: Api<TableEntrySet> = Api::namespaced(client.clone(), &ns);
    create_json(
        &sets,
        json!({
            "apiVersion": "p4fleet.dev/v1alpha1", "kind": "TableEntrySet",
            "metadata": {"name": "dmac"},
            "spec": {
                "virtualSwitchRef": "l2", "table": "MyIngress.dmac",
                "entries": [
                    {"match": {"hdr.ethernet.dstAddr": format!("0x{hex}")}, "action": "forward", "params": {"port": "1"}},
                    {"match": {"hdr.ethernet.dstAddr": "0x02000000ffff"}, "action": "forward", "params": {"port": "2"}}
                ],
                "counters": {"intervalSeconds": 5, "topN": 1},
                "meters": [{"name": "rate", "index": 1, "cir": 1000, "cburst": 100, "pir": 2000, "pburst": 200}],
                "registers": [{"name": "MyIngress.seen", "index": 2, "value": "0xabc"}]
            }
        }),
    )
    .await;

    // Traffic hits the first entry: the readout counts it, and the busiest
    // entry is that one.
    let st = status_where(&sets, "dmac", "counted packets in status", |s| {
        s.counters.as_ref().is_some_and(|c| c.packets > 0)
            && cond(s, "ResourcesSynced").is_some_and(|c| c.0)
    })
    .await;
    let c = st.counters.clone().unwrap();
    assert_eq!(c.counter, "MyIngress.dmac_counter");
    assert_eq!(c.entries, 2);
    assert!(c.bytes >= c.packets * 14, "{c:?}");
    assert_eq!(c.top.len(), 1, "topN 1: {c:?}");
    let colons: Vec<String> = mac.iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(
        c.top[0].key,
        format!("hdr.ethernet.dstAddr={}", colons.join(":"))
    );
    assert!(cond(&st, "Ready").is_some_and(|c| c.0), "{st:?}");

    // The next readout (after the interval) shows more.
    let later = status_where(&sets, "dmac", "a later readout", |s| {
        s.counters
            .as_ref()
            .is_some_and(|n| n.read_at != c.read_at && n.packets > c.packets)
    })
    .await;
    let text = wait_for("counter metrics", Duration::from_secs(30), || async {
        let text = metrics_text(env.metrics);
        let series = format!(
            "p4fleet_direct_counter_packets{{namespace=\"{ns}\",name=\"dmac\",switch=\"{ns}-dpdk\",counter=\"MyIngress.dmac_counter\"}} "
        );
        match text.lines().find_map(|l| l.strip_prefix(&series)) {
            Some(v) if v.trim().parse::<f64>().unwrap() > 0.0 => Ok(text),
            _ => Err(text),
        }
    })
    .await;
    assert!(
        text.contains(&format!("p4fleet_direct_counter_top_packets{{namespace=\"{ns}\",name=\"dmac\",counter=\"MyIngress.dmac_counter\",rank=\"1\"}}")),
        "{text}"
    );
    assert!(!text.contains("rank=\"2\""), "top-N bounds the series");
    assert!(later.counters.unwrap().packets > 0);

    // The meter config and register value are on the device.
    assert_eq!(
        meter_at(env, 1).await,
        Some(p4::MeterConfig {
            cir: 1000,
            cburst: 100,
            pir: 2000,
            pburst: 200
        })
    );
    assert_eq!(register_at(env, 2).await, [0x0a, 0xbc]);

    // Bad settings next to good ones: each is named, none is written.
    let patch = json!({"spec": {
        "meters": [
            {"name": "rate", "index": 1, "cir": 1000, "cburst": 100, "pir": 2000, "pburst": 200},
            {"name": "rate", "index": 2, "cir": 5000, "cburst": 100, "pir": 1000, "pburst": 100}
        ],
        "registers": [
            {"name": "seen", "index": 2, "value": "0x123"},
            {"name": "seen", "index": 16, "value": "1"},
            {"name": "seen", "index": 3, "value": "4096"}
        ]
    }});
    let st = resources_refused(
        &sets,
        "dmac",
        patch,
        "bad settings reported",
        "SettingInvalid",
    )
    .await;
    let errors: Vec<(String, String)> = st
        .errors
        .iter()
        .map(|e| (e.source.clone(), e.reason.clone()))
        .collect();
    assert!(
        errors.contains(&("meters[1]".into(), "pir: pir 1000 is below cir 5000".into())),
        "{errors:?}"
    );
    assert!(
        errors.contains(&(
            "registers[1]".into(),
            "index: index 16 outside 0..16".into()
        )),
        "{errors:?}"
    );
    assert!(
        errors.contains(&(
            "registers[2]".into(),
            "value: value \"4096\" does not fit in 12 bits".into()
        )),
        "{errors:?}"
    );
    let ready = cond(&st, "Ready").unwrap();
    assert!(!ready.0 && ready.1 == "SettingInvalid", "{ready:?}");
    // Nothing of the new spec was half-applied: the valid new value of
    // register 2 waits for the spec to be valid as a whole.
    assert_eq!(register_at(env, 2).await, [0x0a, 0xbc]);
    assert_eq!(meter_at(env, 2).await, None);

    // The set's counter series go with it.
    sets.delete("dmac", &Default::default()).await.unwrap();
    wait_for("series removed", Duration::from_secs(60), || async {
        let text = metrics_text(env.metrics);
        if text.contains(&format!("namespace=\"{ns}\",name=\"dmac\",switch")) {
            Err(text)
        } else {
            Ok(())
        }
    })
    .await;
}
