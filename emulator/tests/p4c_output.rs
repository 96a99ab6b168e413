//! The examples' committed p4c output (P4Info and bmv2 JSON, see
//! examples/README.md) loads into the emulator's bmv2 as a pipeline, and
//! each example's entries file, parsed against that P4Info, is written and
//! read back: the ids p4c chose are the ones the whole path uses.

mod common;

use std::path::PathBuf;

use p4fleet_emulator::{Emulator, EmulatorConfig, RunningEmulator};
use p4fleet_model::entries::{TableSchema, parse_text};
use p4fleet_proto::p4info;
use p4fleet_proto::p4runtime::{
    self as p4, entity::Entity, p4_runtime_client::P4RuntimeClient, update::Type,
};

fn example(path: &str) -> Vec<u8> {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../examples")
        .join(path);
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
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

#[tokio::test]
async fn p4c_output_of_every_example_loads_and_takes_its_entries() {
    let emu = start().await;
    let mut c = P4RuntimeClient::connect(emu.p4runtime_url()).await.unwrap();
    let _stream = common::arbitrate(&mut c, 1).await;
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
        let config = p4::ForwardingPipelineConfig {
            p4info: Some(info.clone()),
            p4_device_config: json.clone(),
            cookie: Some(p4::forwarding_pipeline_config::Cookie { cookie: 7 }),
        };
        common::set_pipeline(&mut c, 1, config)
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
            let inserts = entries
                .iter()
                .map(|e| (Type::Insert, Entity::TableEntry(e.to_proto())))
                .collect();
            common::write(&mut c, 1, inserts)
                .await
                .unwrap_or_else(|e| panic!("{file}: write: {e}"));
            let filter = Entity::TableEntry(p4::TableEntry {
                table_id: schema.id,
                ..Default::default()
            });
            let n = common::read(&mut c, 1, filter).await.unwrap().len();
            assert_eq!(n, entries.len(), "{file}: read back");
        }
    }
}
