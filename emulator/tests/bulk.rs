//! p4fleet's columnar BulkWrite on the emulator, through real tonic clients:
//! what it writes reads back through P4Runtime exactly as standard writes.

mod common;

use common::entity::exact;
use common::test_info::{ACL, ALLOW, DROP, FIREWALL, ROUTE, test_p4info};
use p4fleet_emulator::{Emulator, EmulatorConfig, RunningEmulator};
use p4fleet_proto::bulk::{self as bk, bulk_write_client::BulkWriteClient};
use p4fleet_proto::p4runtime::{
    self as p4, field_match::FieldMatchType, p4_runtime_client::P4RuntimeClient,
};
use tokio_stream::StreamExt;
use tonic::Code;
use tonic::transport::Channel;

async fn start() -> (
    RunningEmulator,
    P4RuntimeClient<Channel>,
    BulkWriteClient<Channel>,
) {
    let emu = Emulator::start(EmulatorConfig {
        device_ids: vec![1, 2],
        ..Default::default()
    })
    .await
    .unwrap();
    let ch = common::channel(&emu).await;
    (
        emu,
        P4RuntimeClient::new(ch.clone()).max_decoding_message_size(256 << 20),
        BulkWriteClient::new(ch),
    )
}

/// Becomes primary (election 10) on `device` and sets the test pipeline;
/// keep the returned stream alive to stay primary.
async fn primary(c: &mut P4RuntimeClient<Channel>, device: u64) -> common::Primary {
    let primary = common::arbitrate(c, device).await;
    let config = p4::ForwardingPipelineConfig {
        p4info: Some(test_p4info()),
        p4_device_config: b"x".to_vec(),
        cookie: Some(p4::forwarding_pipeline_config::Cookie { cookie: 1 }),
    };
    common::set_pipeline(c, device, config).await.unwrap();
    primary
}

fn col(width: u32, values: Vec<u8>) -> Option<bk::Column> {
    Some(bk::Column { width, values })
}

fn exact_col(field_id: u32, width: u32, values: Vec<u8>) -> bk::MatchColumn {
    bk::MatchColumn {
        field_id,
        values: col(width, values),
        ..Default::default()
    }
}

/// A write of `count` rows of `table` on `device` as the primary of
/// election 10; the columns are the caller's.
fn rows(device: u64, table: u32, ty: bk::UpdateType, count: u64) -> bk::BulkWriteRequest {
    bk::BulkWriteRequest {
        device_id: device,
        election_id: common::eid(10),
        table_id: table,
        r#type: ty as i32,
        count,
        ..Default::default()
    }
}

/// Firewall rows `ids`: src 10.0.0.i, dst 192.168.i, allow(port i % 512).
fn fw_bulk(device: u64, ty: bk::UpdateType, ids: &[u32]) -> bk::BulkWriteRequest {
    let src: Vec<u8> = ids
        .iter()
        .flat_map(|i| (0x0a00_0000 + i).to_be_bytes())
        .collect();
    let dst: Vec<u8> = ids
        .iter()
        .flat_map(|i| (0xc0a8_0000 + i).to_be_bytes())
        .collect();
    let port: Vec<u8> = ids
        .iter()
        .flat_map(|i| ((i % 512) as u16).to_be_bytes())
        .collect();
    bk::BulkWriteRequest {
        matches: vec![exact_col(1, 4, src), exact_col(2, 4, dst)],
        action_id: ALLOW,
        params: vec![bk::ParamColumn {
            action_id: 0,
            param_id: 1,
            values: col(2, port),
        }],
        metadata: ids
            .iter()
            .flat_map(|i| i.to_string().into_bytes())
            .collect(),
        metadata_lens: ids
            .iter()
            .flat_map(|i| (i.to_string().len() as u32).to_be_bytes())
            .collect(),
        ..rows(device, FIREWALL, ty, ids.len() as u64)
    }
}

fn fw_entry(i: u32) -> p4::TableEntry {
    p4::TableEntry {
        table_id: FIREWALL,
        r#match: vec![
            exact(1, &(0x0a00_0000 + i).to_be_bytes()),
            exact(2, &(0xc0a8_0000 + i).to_be_bytes()),
        ],
        action: Some(p4::TableAction {
            r#type: Some(p4::table_action::Type::Action(p4::Action {
                action_id: ALLOW,
                params: vec![p4::action::Param {
                    param_id: 1,
                    value: ((i % 512) as u16).to_be_bytes().to_vec(),
                }],
            })),
        }),
        metadata: i.to_string().into_bytes(),
        ..Default::default()
    }
}

async fn write_std(c: &mut P4RuntimeClient<Channel>, device: u64, entries: Vec<p4::TableEntry>) {
    c.write(p4::WriteRequest {
        device_id: device,
        election_id: common::eid(10),
        updates: entries
            .into_iter()
            .map(|te| p4::Update {
                r#type: p4::update::Type::Insert as i32,
                entity: Some(p4::Entity {
                    entity: Some(p4::entity::Entity::TableEntry(te)),
                }),
            })
            .collect(),
        ..Default::default()
    })
    .await
    .unwrap();
}

async fn read(c: &mut P4RuntimeClient<Channel>, device: u64, table_id: u32) -> Vec<p4::TableEntry> {
    let mut s = c
        .read(p4::ReadRequest {
            device_id: device,
            entities: vec![p4::Entity {
                entity: Some(p4::entity::Entity::TableEntry(p4::TableEntry {
                    table_id,
                    ..Default::default()
                })),
            }],
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let mut out = Vec::new();
    while let Some(r) = s.next().await {
        for e in r.unwrap().entities {
            if let Some(p4::entity::Entity::TableEntry(te)) = e.entity {
                out.push(te);
            }
        }
    }
    out.sort_by(|a, b| format!("{:?}", a.r#match).cmp(&format!("{:?}", b.r#match)));
    out
}

fn codes(r: &bk::BulkWriteResponse) -> Vec<(u64, Code)> {
    r.errors
        .iter()
        .map(|e| (e.index, Code::from_i32(e.code)))
        .collect()
}

#[tokio::test]
async fn bulk_insert_reads_back_like_standard_inserts() {
    let (emu, mut c, mut b) = start().await;
    let _p1 = primary(&mut c, 1).await;
    let _p2 = primary(&mut c, 2).await;
    let caps = b
        .capabilities(bk::BulkCapabilitiesRequest {})
        .await
        .unwrap();
    assert_eq!(caps.into_inner().version, p4fleet_emulator::BULK_VERSION);

    let ids: Vec<u32> = (0..2000).collect();
    let r = b
        .write(fw_bulk(1, bk::UpdateType::Insert, &ids))
        .await
        .unwrap()
        .into_inner();
    assert!(r.errors.is_empty(), "{r:?}");
    write_std(&mut c, 2, ids.iter().map(|i| fw_entry(*i)).collect()).await;
    let (bulk, std) = (
        read(&mut c, 1, FIREWALL).await,
        read(&mut c, 2, FIREWALL).await,
    );
    assert_eq!(bulk.len(), 2000);
    assert_eq!(bulk, std);
    assert_eq!(emu.stats(1).unwrap().inserts, 2000);

    // Duplicates fail per row with ALREADY_EXISTS; the others go in.
    let r = b
        .write(fw_bulk(1, bk::UpdateType::Insert, &[5, 2000, 7]))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        codes(&r),
        vec![(0, Code::AlreadyExists), (2, Code::AlreadyExists)]
    );
    // MODIFY and DELETE: missing rows are NOT_FOUND.
    let mut m = fw_bulk(1, bk::UpdateType::Modify, &[1, 5000]);
    m.params[0].values = col(2, vec![0, 9, 0, 9]);
    let r = b.write(m).await.unwrap().into_inner();
    assert_eq!(codes(&r), vec![(1, Code::NotFound)]);
    let r = b
        .write(fw_bulk(1, bk::UpdateType::Delete, &[2, 6000, 3]))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(codes(&r), vec![(1, Code::NotFound)]);
    assert_eq!(read(&mut c, 1, FIREWALL).await.len(), 1999);

    // A value too wide for its bitwidth (9-bit port) fails that row only.
    let mut w = fw_bulk(1, bk::UpdateType::Insert, &[7000, 7001]);
    w.params[0].values = col(2, vec![0, 1, 2, 0]);
    let r = b.write(w).await.unwrap().into_inner();
    assert_eq!(codes(&r), vec![(1, Code::OutOfRange)]);

    // Malformed columns fail the request as a whole.
    let mut bad = fw_bulk(1, bk::UpdateType::Insert, &[8000]);
    bad.count = 2;
    let e = b.write(bad).await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
}

#[tokio::test]
async fn arbitration_is_enforced() {
    let (_emu, mut c, mut b) = start().await;
    // No primary yet.
    let e = b
        .write(fw_bulk(1, bk::UpdateType::Insert, &[1]))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied);
    let _p = primary(&mut c, 1).await;
    let mut req = fw_bulk(1, bk::UpdateType::Insert, &[1]);
    req.election_id = common::eid(9);
    let e = b.write(req).await.unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied);
    let e = b
        .write(fw_bulk(99, bk::UpdateType::Insert, &[1]))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::NotFound);
}

#[tokio::test]
async fn lpm_ternary_range_optional_priorities_and_table_size() {
    let (_emu, mut c, mut b) = start().await;
    let _p1 = primary(&mut c, 1).await;
    let _p2 = primary(&mut c, 2).await;

    // Route (LPM, size 3): the 4th row does not fit.
    let req = bk::BulkWriteRequest {
        matches: vec![bk::MatchColumn {
            field_id: 1,
            values: col(4, vec![10, 0, 0, 0, 10, 1, 0, 0, 11, 0, 0, 0, 12, 0, 0, 0]),
            prefix_lens: vec![0, 8, 0, 16, 0, 8, 0, 8],
            ..Default::default()
        }],
        action_id: ALLOW,
        params: vec![bk::ParamColumn {
            action_id: 0,
            param_id: 1,
            values: col(2, vec![0, 1, 0, 1, 0, 1, 0, 1]),
        }],
        ..rows(1, ROUTE, bk::UpdateType::Insert, 4)
    };
    let r = b.write(req).await.unwrap().into_inner();
    assert_eq!(codes(&r), vec![(3, Code::ResourceExhausted)]);
    assert_eq!(read(&mut c, 1, ROUTE).await.len(), 3);

    // ACL: ternary proto, range ports, optional vlan, priorities; omitted
    // fields per row (zero mask, full range, not present).
    let req = bk::BulkWriteRequest {
        matches: vec![
            bk::MatchColumn {
                field_id: 1,
                values: col(1, vec![6, 0, 17]),
                masks: col(1, vec![0xff, 0, 0xff]),
                ..Default::default()
            },
            bk::MatchColumn {
                field_id: 2,
                values: col(2, vec![0, 80, 0, 0, 0, 0]),
                masks: col(2, vec![0, 90, 0xff, 0xff, 0xff, 0xff]),
                ..Default::default()
            },
            bk::MatchColumn {
                field_id: 3,
                values: col(2, vec![0, 5, 0, 0, 0, 7]),
                present: vec![1, 0, 1],
                ..Default::default()
            },
        ],
        action_id: DROP,
        priorities: [10i32, 20, 30]
            .iter()
            .flat_map(|p| p.to_be_bytes())
            .collect(),
        ..rows(1, ACL, bk::UpdateType::Insert, 3)
    };
    let r = b.write(req).await.unwrap().into_inner();
    assert!(r.errors.is_empty(), "{r:?}");

    let tern = |v: u8| p4::FieldMatch {
        field_id: 1,
        field_match_type: Some(FieldMatchType::Ternary(p4::field_match::Ternary {
            value: vec![v],
            mask: vec![0xff],
        })),
    };
    let opt = |v: u8| p4::FieldMatch {
        field_id: 3,
        field_match_type: Some(FieldMatchType::Optional(p4::field_match::Optional {
            value: vec![v],
        })),
    };
    let range = p4::FieldMatch {
        field_id: 2,
        field_match_type: Some(FieldMatchType::Range(p4::field_match::Range {
            low: vec![80],
            high: vec![90],
        })),
    };
    let drop = Some(p4::TableAction {
        r#type: Some(p4::table_action::Type::Action(p4::Action {
            action_id: DROP,
            params: vec![],
        })),
    });
    let std = vec![
        p4::TableEntry {
            table_id: ACL,
            r#match: vec![tern(6), range, opt(5)],
            action: drop.clone(),
            priority: 10,
            ..Default::default()
        },
        p4::TableEntry {
            table_id: ACL,
            r#match: vec![],
            action: drop.clone(),
            priority: 20,
            ..Default::default()
        },
        p4::TableEntry {
            table_id: ACL,
            r#match: vec![tern(17), opt(7)],
            action: drop,
            priority: 30,
            ..Default::default()
        },
    ];
    write_std(&mut c, 2, std).await;
    assert_eq!(read(&mut c, 1, ACL).await, read(&mut c, 2, ACL).await);
}
