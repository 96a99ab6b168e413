//! Counters and registers of a TableEntrySet on a Tofino (BFRT) Switch,
//! through the real kube-apiserver, with the emulator and the operator as
//! child processes: the table's direct counter (set at the device by an
//! independent BFRT client, as the data plane would count) shows in the
//! set's status; a register value is written and read back with plain
//! `bfrt_proto` messages; what BFRT does not take (meters) is a condition
//! naming the item, and a bad register index is refused before writing.

use p4fleet_e2e::set_status_within_90s as status_where;
use std::net::SocketAddr;
use std::time::Duration;

use kube::Api;
use p4fleet_crds::{TableEntrySet, TableEntrySetStatus, find_condition};
use p4fleet_e2e::processes::{Fleet, fleet};
use p4fleet_e2e::{ControlPlane, create_json, merge_patch, repo_root, resources_refused};
use p4fleet_proto::bfrt::{
    self, DataField, ForwardingPipelineConfig, KeyField, ReadRequest,
    SetForwardingPipelineConfigRequest, StreamMessageRequest, TableData, TableEntry, TableKey,
    TargetDevice, WriteRequest,
    bf_runtime_client::BfRuntimeClient,
    data_field::Value,
    key_field::{Exact, MatchType},
    set_forwarding_pipeline_config_request::Action as SetAction,
    stream_message_request, update,
};
use serde_json::json;
use tonic::transport::Channel;

const DEV: u64 = 41;
const DMAC: u32 = 44918510;
const FORWARD: u32 = 29683729;
const REGISTER: u32 = 383189205;

async fn env() -> (&'static ControlPlane, &'static Fleet) {
    fleet(
        &["--device-ids", "41", "--bfrt-addr", "127.0.0.1:0"],
        "operator-bfrt-counters",
        30,
    )
    .await
}

fn counted(file: &str) -> String {
    std::fs::read_to_string(repo_root().join("examples/counted").join(file)).unwrap()
}

fn cond(st: &TableEntrySetStatus, t: &str) -> Option<(bool, String, String)> {
    find_condition(&st.conditions, t).map(|c| (c.is_true(), c.reason.clone(), c.message.clone()))
}

/// A plain BFRT client (no p4fleet translation): subscribed as client 77
/// and bound to program `counted` of device 41. The stream's sender is
/// kept so the subscription lasts.
struct Raw {
    client: BfRuntimeClient<Channel>,
    _stream: tokio::sync::mpsc::Sender<StreamMessageRequest>,
}

const RAW_ID: u32 = 77;

impl Raw {
    async fn connect(addr: SocketAddr) -> Raw {
        let mut client = BfRuntimeClient::connect(format!("http://{addr}"))
            .await
            .unwrap();
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        tx.send(StreamMessageRequest {
            client_id: RAW_ID,
            update: Some(stream_message_request::Update::Subscribe(bfrt::Subscribe {
                device_id: DEV as u32,
                ..Default::default()
            })),
        })
        .await
        .unwrap();
        let mut answers = client
            .stream_channel(futures::stream::unfold(rx, |mut rx| async move {
                rx.recv().await.map(|m| (m, rx))
            }))
            .await
            .unwrap()
            .into_inner();
        answers.message().await.unwrap().expect("subscribe answer");
        tokio::spawn(async move { while let Ok(Some(_)) = answers.message().await {} });
        client
            .set_forwarding_pipeline_config(SetForwardingPipelineConfigRequest {
                device_id: DEV as u32,
                client_id: RAW_ID,
                action: SetAction::Bind as i32,
                config: vec![ForwardingPipelineConfig {
                    p4_name: "counted".into(),
                    ..Default::default()
                }],
                ..Default::default()
            })
            .await
            .unwrap();
        Raw {
            client,
            _stream: tx,
        }
    }

    fn target() -> TargetDevice {
        TargetDevice {
            device_id: DEV as u32,
            pipe_id: 0xffff,
            direction: 0xff,
            prsr_id: 0xff,
        }
    }

    async fn modify(&mut self, entry: TableEntry) {
        self.client
            .write(WriteRequest {
                target: Some(Self::target()),
                client_id: RAW_ID,
                updates: vec![bfrt::Update {
                    r#type: update::Type::Modify as i32,
                    entity: Some(bfrt::Entity {
                        entity: Some(bfrt::entity::Entity::TableEntry(entry)),
                    }),
                }],
                ..Default::default()
            })
            .await
            .unwrap();
    }

    async fn read(&self, filter: TableEntry) -> Vec<TableEntry> {
        let mut s = self
            .client
            .clone()
            .read(ReadRequest {
                target: Some(Self::target()),
                client_id: RAW_ID,
                entities: vec![bfrt::Entity {
                    entity: Some(bfrt::entity::Entity::TableEntry(filter)),
                }],
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        let mut out = Vec::new();
        while let Some(r) = s.message().await.unwrap() {
            out.extend(r.entities.into_iter().filter_map(|e| match e.entity {
                Some(bfrt::entity::Entity::TableEntry(t)) => Some(t),
                _ => None,
            }));
        }
        out
    }
}

/// The register cell the test writes (index 2), read with plain BFRT:
/// once per pipe, full width.
async fn register_cell(raw: &Raw) -> Vec<TableEntry> {
    raw.read(TableEntry {
        table_id: REGISTER,
        value: exact(65557, 2u32.to_be_bytes().to_vec()),
        ..Default::default()
    })
    .await
}

fn exact(field_id: u32, value: Vec<u8>) -> Option<bfrt::table_entry::Value> {
    Some(bfrt::table_entry::Value::Key(TableKey {
        fields: vec![KeyField {
            field_id,
            match_type: Some(MatchType::Exact(Exact { value })),
        }],
    }))
}

fn stream(field_id: u32, v: Vec<u8>) -> DataField {
    DataField {
        field_id,
        value: Some(Value::Stream(v)),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tofino_counters_and_registers_sync_over_bfrt() {
    let (cp, env) = env().await;
    let (client, ns) = cp.client_and_namespace().await;
    let ns = ns.name().to_string();
    let v1 = "p4fleet.dev/v1alpha1";
    create_json(
        &Api::<p4fleet_crds::P4Program>::namespaced(client.clone(), &ns),
        json!({"apiVersion": v1, "kind": "P4Program", "metadata": {"name": "counted"},
            "spec": {"p4info": {"inline": counted("p4info.txt")},
                "artifacts": {"tofino": {"bfrtJson": {"inline": counted("bfrt.json")},
                    "contextJson": {"inline": "{}"}}}}}),
    )
    .await;
    create_json(
        &Api::<p4fleet_crds::Switch>::all(client.clone()),
        json!({"apiVersion": v1, "kind": "Switch", "metadata": {"name": format!("{ns}-tofino")},
            "spec": {"target": "Tofino", "endpoint": env.bfrt().to_string(), "deviceId": DEV, "slots": 1}}),
    )
    .await;
    create_json(
        &Api::<p4fleet_crds::VirtualSwitch>::namespaced(client.clone(), &ns),
        json!({"apiVersion": v1, "kind": "VirtualSwitch", "metadata": {"name": "l2"},
            "spec": {"programRef": "counted", "switchRef": format!("{ns}-tofino"), "slot": 0}}),
    )
    .await;
    let sets: Api<TableEntrySet> = Api::namespaced(client.clone(), &ns);
    create_json(
        &sets,
        json!({"apiVersion": v1, "kind": "TableEntrySet", "metadata": {"name": "dmac"},
            "spec": {
                "virtualSwitchRef": "l2", "table": "MyIngress.dmac",
                "entries": [
                    {"match": {"hdr.ethernet.dstAddr": "0x020000000001"}, "action": "forward", "params": {"port": "1"}},
                    {"match": {"hdr.ethernet.dstAddr": "0x020000000002"}, "action": "forward", "params": {"port": "2"}}
                ],
                "counters": {"intervalSeconds": 5, "topN": 1},
                "registers": [{"name": "port_last_seen", "index": 2, "value": "0xabc"}]
            }}),
    )
    .await;

    let st = status_where(&sets, "dmac", "a zero readout, resources synced", |s| {
        s.counters.as_ref().is_some_and(|c| c.entries == 2)
            && cond(s, "ResourcesSynced").is_some_and(|c| c.0)
    })
    .await;
    assert_eq!(st.counters.as_ref().unwrap().packets, 0);
    assert_eq!(
        st.counters.as_ref().unwrap().counter,
        "MyIngress.dmac_counter"
    );

    // The register cell, read with plain BFRT: once per pipe, full width.
    let mut raw = Raw::connect(env.bfrt()).await;
    let cell = register_cell(&raw).await;
    assert_eq!(cell.len(), 1);
    let values = &cell[0].data.as_ref().unwrap().fields;
    assert_eq!(
        values.len(),
        4,
        "one value per pipe (the program has all 4)"
    );
    assert!(
        values
            .iter()
            .all(|f| *f == stream(1, vec![0, 0, 0x0a, 0xbc])),
        "{values:?}"
    );

    // The data plane counts (here: an independent client sets the counts of
    // the first entry); the next readout shows them.
    raw.modify(TableEntry {
        table_id: DMAC,
        value: exact(1, vec![2, 0, 0, 0, 0, 1]),
        data: Some(TableData {
            action_id: FORWARD,
            fields: vec![
                stream(1, vec![0, 1]),
                stream(65553, 2560u64.to_be_bytes().to_vec()),
                stream(65554, 40u64.to_be_bytes().to_vec()),
            ],
        }),
        ..Default::default()
    })
    .await;
    let st = status_where(&sets, "dmac", "the counted packets", |s| {
        s.counters.as_ref().is_some_and(|c| c.packets == 40)
    })
    .await;
    let c = st.counters.clone().unwrap();
    assert_eq!((c.bytes, c.entries), (2560, 2));
    assert_eq!(c.top.len(), 1);
    assert_eq!(c.top[0].key, "hdr.ethernet.dstAddr=02:00:00:00:00:01");
    assert!(cond(&st, "Ready").is_some_and(|c| c.0), "{st:?}");

    // A register set back at the device is written again at the next sync.
    raw.modify(TableEntry {
        table_id: REGISTER,
        value: exact(65557, 2u32.to_be_bytes().to_vec()),
        data: Some(TableData {
            action_id: 0,
            fields: vec![stream(1, vec![0, 0, 0, 7])],
        }),
        ..Default::default()
    })
    .await;
    merge_patch(&sets, "dmac", json!({"spec": {"resyncSeconds": 5}})).await;
    let raw = &raw;
    p4fleet_e2e::wait_for(
        "register written again",
        Duration::from_secs(60),
        || async move {
            let cell = register_cell(raw).await;
            let v = cell[0].data.as_ref().unwrap().fields[0].clone();
            if v == stream(1, vec![0, 0, 0x0a, 0xbc]) {
                Ok(())
            } else {
                Err(format!("{v:?}"))
            }
        },
    )
    .await;

    // A meter: valid, but not written over BFRT; said so, naming it. A
    // register index past the array: refused before anything is written.
    let patch = json!({"spec": {
        "meters": [{"name": "port_meter", "index": 1, "cir": 1000, "cburst": 100, "pir": 2000, "pburst": 200}]
    }});
    let st = resources_refused(
        &sets,
        "dmac",
        patch,
        "meters unsupported",
        "UnsupportedOnTarget",
    )
    .await;
    assert!(
        st.errors
            .iter()
            .any(|e| e.source == "meters[0]" && e.reason.contains("BFRT")),
        "{:?}",
        st.errors
    );
    let patch = json!({"spec": {
        "meters": null,
        "registers": [{"name": "port_last_seen", "index": 512, "value": "1"}]
    }});
    let st = resources_refused(&sets, "dmac", patch, "a bad index", "SettingInvalid").await;
    assert!(
        st.errors
            .iter()
            .any(|e| e.source == "registers[0]" && e.reason == "index: index 512 outside 0..512"),
        "{:?}",
        st.errors
    );
}
