//! The examples' committed p4c output (P4Info and bmv2 JSON, see
//! examples/README.md) loads into the emulator's bmv2 as a pipeline, and
//! each example's entries file, parsed against that P4Info, is written and
//! read back: the ids p4c chose are the ones the whole path uses.

use std::path::PathBuf;

use p4fleet_emulator::{Emulator, EmulatorConfig, RunningEmulator};
use p4fleet_model::entries::{TableSchema, parse_text};
use p4fleet_proto::p4info;
use p4fleet_proto::p4runtime::{self as p4, p4_runtime_client::P4RuntimeClient};
use tokio::sync::mpsc;
use tokio_stream::StreamExt;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Channel;

fn example(path: &str) -> Vec<u8> {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../examples")
        .join(path);
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn eid(v: u64) -> Option<p4::Uint128> {
    Some(p4::Uint128 { high: 0, low: v })
}

async fn start() -> RunningEmulator {
    Emulator::start(EmulatorConfig {
        device_ids: vec![1],
        stats_addr: Some("127.0.0.1:0".parse().unwrap()),
        ..Default::default()
    })
    .await
    .unwrap()
}

/// Becomes primary on device 1; the stream stays open while `_tx` lives.
async fn primary(
    c: &mut P4RuntimeClient<Channel>,
) -> (
    mpsc::Sender<p4::StreamMessageRequest>,
    tonic::Streaming<p4::StreamMessageResponse>,
) {
    let (tx, rx) = mpsc::channel(4);
    tx.send(p4::StreamMessageRequest {
        update: Some(p4::stream_message_request::Update::Arbitration(
            p4::MasterArbitrationUpdate {
                device_id: 1,
                election_id: eid(10),
                ..Default::default()
            },
        )),
    })
    .await
    .unwrap();
    let mut s = c
        .stream_channel(ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    let first = s.next().await.unwrap().unwrap();
    match first.update {
        Some(p4::stream_message_response::Update::Arbitration(a)) => {
            assert_eq!(a.status.unwrap().code, tonic::Code::Ok as i32)
        }
        other => panic!("expected arbitration, got {other:?}"),
    }
    (tx, s)
}

#[tokio::test]
async fn p4c_output_of_every_example_loads_and_takes_its_entries() {
    let emu = start().await;
    let mut c = P4RuntimeClient::connect(emu.p4runtime_url()).await.unwrap();
    let _stream = primary(&mut c).await;
    // (example, [(table, entries file)]); fabric and shared_ecmp have no
    // entries file.
    let cases: [(&str, &[(&str, &str)]); 5] = [
        ("firewall", &[("firewall", "firewall/entries.txt")]),
        (
            "l2switch",
            &[
                ("smac", "l2switch/smac.entries.txt"),
                ("dmac", "l2switch/dmac.entries.txt"),
            ],
        ),
        (
            "router",
            &[
                ("ipv4_lpm", "router/ipv4_lpm.entries.txt"),
                ("acl", "router/acl.entries.txt"),
            ],
        ),
        ("fabric", &[]),
        ("shared_ecmp", &[]),
    ];
    for (name, tables) in cases {
        let text = String::from_utf8(example(&format!("{name}/p4info.txt"))).unwrap();
        let info = p4info::parse_text(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
        let json = example(&format!("{name}/{name}.json"));
        // p4c's bmv2 JSON, not a placeholder: it names the program's tables.
        let parsed: serde_json::Value = serde_json::from_slice(&json).unwrap();
        assert!(parsed["pipelines"].is_array(), "{name}.json is bmv2 JSON");
        c.set_forwarding_pipeline_config(p4::SetForwardingPipelineConfigRequest {
            device_id: 1,
            election_id: eid(10),
            action: p4::set_forwarding_pipeline_config_request::Action::VerifyAndCommit as i32,
            config: Some(p4::ForwardingPipelineConfig {
                p4info: Some(info.clone()),
                p4_device_config: json.clone(),
                cookie: Some(p4::forwarding_pipeline_config::Cookie { cookie: 7 }),
            }),
            ..Default::default()
        })
        .await
        .unwrap_or_else(|e| panic!("{name}: pipeline refused: {e}"));
        let got = c
            .get_forwarding_pipeline_config(p4::GetForwardingPipelineConfigRequest {
                device_id: 1,
                response_type: p4::get_forwarding_pipeline_config_request::ResponseType::All as i32,
            })
            .await
            .unwrap()
            .into_inner()
            .config
            .unwrap();
        assert_eq!(got.p4_device_config, json, "{name}: device config kept");

        for (table, file) in tables {
            let schema = TableSchema::from_p4info(&info, table).unwrap();
            let text = String::from_utf8(example(file)).unwrap();
            let entries = parse_text(&schema, &text).unwrap_or_else(|e| panic!("{file}: {e}"));
            assert!(!entries.is_empty(), "{file}");
            let updates = entries
                .iter()
                .map(|e| p4::Update {
                    r#type: p4::update::Type::Insert as i32,
                    entity: Some(p4::Entity {
                        entity: Some(p4::entity::Entity::TableEntry(e.to_proto())),
                    }),
                })
                .collect();
            c.write(p4::WriteRequest {
                device_id: 1,
                election_id: eid(10),
                updates,
                ..Default::default()
            })
            .await
            .unwrap_or_else(|e| panic!("{file}: write: {e}"));
            let mut read = c
                .read(p4::ReadRequest {
                    device_id: 1,
                    entities: vec![p4::Entity {
                        entity: Some(p4::entity::Entity::TableEntry(p4::TableEntry {
                            table_id: schema.id,
                            ..Default::default()
                        })),
                    }],
                    ..Default::default()
                })
                .await
                .unwrap()
                .into_inner();
            let mut n = 0;
            while let Some(r) = read.next().await {
                n += r.unwrap().entities.len();
            }
            assert_eq!(n, entries.len(), "{file}: read back");
        }
    }
}
