//! P4Runtime behaviour of the emulator, through a real tonic client.

mod common;

use std::time::Duration;

use common::eid;
use common::entity::{action, exact, lpm};
use common::test_info::{ACL, ALLOW, DROP, FIREWALL, ROUTE, test_p4info};
use p4fleet_emulator::{Emulator, EmulatorConfig, RunningEmulator};
use p4fleet_proto::p4info;
use p4fleet_proto::p4runtime::{
    self as p4, field_match::FieldMatchType, p4_runtime_client::P4RuntimeClient,
};
use tokio::sync::mpsc;
use tokio_stream::StreamExt;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Code;
use tonic::transport::Channel;

async fn start(devices: Vec<u64>, chunk: usize) -> RunningEmulator {
    Emulator::start(EmulatorConfig {
        device_ids: devices,
        read_chunk_size: chunk,
        stats_addr: Some("127.0.0.1:0".parse().unwrap()),
        ..Default::default()
    })
    .await
    .unwrap()
}

async fn client(emu: &RunningEmulator) -> P4RuntimeClient<Channel> {
    // Per-update errors travel in trailers: raise hyper's 16 KiB default.
    let channel = tonic::transport::Endpoint::from_shared(emu.p4runtime_url())
        .unwrap()
        .http2_max_header_list_size(64 << 20)
        .connect()
        .await
        .unwrap();
    P4RuntimeClient::new(channel)
        .max_decoding_message_size(256 << 20)
        .max_encoding_message_size(256 << 20)
}

/// An open StreamChannel: send arbitration, receive updates.
struct Stream {
    tx: mpsc::Sender<p4::StreamMessageRequest>,
    rx: tonic::Streaming<p4::StreamMessageResponse>,
}

impl Stream {
    async fn open(c: &mut P4RuntimeClient<Channel>, device: u64, election: u64) -> Stream {
        let (tx, rx) = mpsc::channel(8);
        let mut s = Stream {
            tx,
            rx: c
                .stream_channel(ReceiverStream::new(rx))
                .await
                .unwrap()
                .into_inner(),
        };
        s.arbitrate(device, election).await;
        s
    }

    async fn arbitrate(&mut self, device: u64, election: u64) {
        let request = common::arbitration(device, election);
        self.tx.send(request).await.unwrap();
    }

    /// Next arbitration update: (status code, election id shown).
    async fn next(&mut self) -> Result<(i32, u64), tonic::Status> {
        let msg = tokio::time::timeout(Duration::from_secs(5), self.rx.next())
            .await
            .expect("arbitration reply in time")
            .expect("stream open")?;
        match msg.update {
            Some(p4::stream_message_response::Update::Arbitration(a)) => Ok((
                a.status.unwrap().code,
                a.election_id.map(|e| e.low).unwrap_or(0),
            )),
            other => panic!("unexpected {other:?}"),
        }
    }
}

/// Opens a primary stream and sets the test pipeline on `device`.
async fn primary_with_pipeline(
    c: &mut P4RuntimeClient<Channel>,
    device: u64,
    cookie: u64,
) -> Stream {
    let mut s = Stream::open(c, device, 10).await;
    assert_eq!(s.next().await.unwrap().0, Code::Ok as i32);
    let config = p4::ForwardingPipelineConfig {
        p4info: Some(test_p4info()),
        p4_device_config: b"bmv2-json".to_vec(),
        cookie: Some(p4::forwarding_pipeline_config::Cookie { cookie }),
    };
    common::set_pipeline(c, device, config).await.unwrap();
    s
}

/// Device 1 with the test pipeline (cookie 1), reads answered in messages
/// of `chunk` entities: the emulator, a client and its primary stream.
async fn ready(chunk: usize) -> (RunningEmulator, P4RuntimeClient<Channel>, Stream) {
    let emu = start(vec![1], chunk).await;
    let mut c = client(&emu).await;
    let s = primary_with_pipeline(&mut c, 1, 1).await;
    (emu, c, s)
}

/// `device`'s pipeline config, the parts `rt` asks for.
async fn config(
    c: &mut P4RuntimeClient<Channel>,
    device: u64,
    rt: p4::get_forwarding_pipeline_config_request::ResponseType,
) -> p4::ForwardingPipelineConfig {
    let req = p4::GetForwardingPipelineConfigRequest {
        device_id: device,
        response_type: rt as i32,
    };
    let got = c.get_forwarding_pipeline_config(req).await.unwrap();
    got.into_inner().config.unwrap()
}

/// A read filter: every entry of table `id`.
fn table(id: u32) -> p4::TableEntry {
    p4::TableEntry {
        table_id: id,
        ..Default::default()
    }
}

fn fw_entry(src: u32, dst: u32, port: u16) -> p4::TableEntry {
    p4::TableEntry {
        table_id: FIREWALL,
        r#match: vec![exact(1, &src.to_be_bytes()), exact(2, &dst.to_be_bytes())],
        action: action(ALLOW, &[&port.to_be_bytes()]),
        ..Default::default()
    }
}

fn update(ty: p4::update::Type, te: p4::TableEntry) -> p4::Update {
    p4::Update {
        r#type: ty as i32,
        entity: Some(p4::Entity {
            entity: Some(p4::entity::Entity::TableEntry(te)),
        }),
    }
}

use p4::update::Type::{Delete, Insert, Modify};

async fn write(
    c: &mut P4RuntimeClient<Channel>,
    device: u64,
    election: u64,
    updates: Vec<p4::Update>,
) -> Result<(), tonic::Status> {
    c.write(p4::WriteRequest {
        device_id: device,
        election_id: eid(election),
        updates,
        ..Default::default()
    })
    .await
    .map(|_| ())
}

/// Per-update codes from a failed Write.
fn codes(status: &tonic::Status) -> Vec<Code> {
    common::update_errors(status)
        .into_iter()
        .map(|(c, _)| c)
        .collect()
}

/// The per-update codes of a Write of `updates` to device 1 that fails.
async fn refused(c: &mut P4RuntimeClient<Channel>, updates: Vec<p4::Update>) -> Vec<Code> {
    codes(&write(c, 1, 10, updates).await.unwrap_err())
}

async fn read(
    c: &mut P4RuntimeClient<Channel>,
    device: u64,
    filter: p4::TableEntry,
) -> Result<(usize, Vec<p4::TableEntry>), tonic::Status> {
    let mut stream = c
        .read(p4::ReadRequest {
            device_id: device,
            entities: vec![p4::Entity {
                entity: Some(p4::entity::Entity::TableEntry(filter)),
            }],
            ..Default::default()
        })
        .await?
        .into_inner();
    let mut out = Vec::new();
    let mut messages = 0;
    while let Some(r) = stream.next().await {
        messages += 1;
        for e in r?.entities {
            match e.entity {
                Some(p4::entity::Entity::TableEntry(te)) => out.push(te),
                other => panic!("{other:?}"),
            }
        }
    }
    Ok((messages, out))
}

#[tokio::test]
async fn capabilities_and_arbitration() {
    let emu = start(vec![1], 1000).await;
    let mut c = client(&emu).await;
    let caps = c
        .capabilities(p4::CapabilitiesRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(caps.p4runtime_api_version, "1.4.0");

    let mut a = Stream::open(&mut c, 1, 10).await;
    assert_eq!(a.next().await.unwrap(), (Code::Ok as i32, 10));
    let mut b = Stream::open(&mut c, 1, 5).await;
    assert_eq!(b.next().await.unwrap(), (Code::AlreadyExists as i32, 10));

    // The backup may not write; the primary may (and then fails on the
    // missing pipeline).
    let e = write(&mut c, 1, 5, vec![]).await.unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied);
    let e = write(&mut c, 1, 10, vec![update(Insert, fw_entry(1, 2, 3))])
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition);

    // A higher election id takes over and everyone hears about it.
    let mut d = Stream::open(&mut c, 1, 20).await;
    assert_eq!(d.next().await.unwrap(), (Code::Ok as i32, 20));
    assert_eq!(a.next().await.unwrap(), (Code::AlreadyExists as i32, 20));
    assert_eq!(b.next().await.unwrap(), (Code::AlreadyExists as i32, 20));
    assert_eq!(emu.stats(1).unwrap().primaries[""], "20");

    // Same election id as an active stream: refused.
    let mut dup = Stream::open(&mut c, 1, 20).await;
    assert_eq!(dup.next().await.unwrap_err().code(), Code::InvalidArgument);

    // Unknown device.
    let mut unknown = Stream::open(&mut c, 9, 1).await;
    assert_eq!(unknown.next().await.unwrap_err().code(), Code::NotFound);

    // The primary leaves: the next highest is elected.
    drop(d);
    assert_eq!(a.next().await.unwrap(), (Code::Ok as i32, 10));
    assert_eq!(b.next().await.unwrap(), (Code::AlreadyExists as i32, 10));
    emu.shutdown().await.unwrap();
}

#[tokio::test]
async fn pipeline_config_and_cookie() {
    let emu = start(vec![1, 2], 1000).await;
    let mut c = client(&emu).await;
    let _s = primary_with_pipeline(&mut c, 1, 0xdead_beef).await;
    use p4::get_forwarding_pipeline_config_request::ResponseType;
    let all = config(&mut c, 1, ResponseType::All).await;
    assert_eq!(all.cookie.unwrap().cookie, 0xdead_beef);
    assert_eq!(all.p4info.unwrap(), test_p4info());
    assert_eq!(all.p4_device_config, b"bmv2-json");
    let cookie = config(&mut c, 1, ResponseType::CookieOnly).await;
    assert!(cookie.p4info.is_none() && cookie.p4_device_config.is_empty());
    assert_eq!(cookie.cookie.unwrap().cookie, 0xdead_beef);
    let dc = config(&mut c, 1, ResponseType::DeviceConfigAndCookie).await;
    assert!(dc.p4info.is_none());
    assert_eq!(dc.p4_device_config, b"bmv2-json");

    // Device 2 is independent: no pipeline, no cookie.
    let other = config(&mut c, 2, ResponseType::All).await;
    assert!(other.cookie.is_none());

    // Setting a pipeline needs the primary's election id.
    let e = c
        .set_forwarding_pipeline_config(p4::SetForwardingPipelineConfigRequest {
            device_id: 1,
            election_id: eid(3),
            action: 3,
            config: Some(p4::ForwardingPipelineConfig::default()),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied);

    // Replacing the pipeline clears the tables; reconcile keeps them.
    write(&mut c, 1, 10, vec![update(Insert, fw_entry(1, 2, 3))])
        .await
        .unwrap();
    let set = |action: i32, cookie: u64| p4::SetForwardingPipelineConfigRequest {
        device_id: 1,
        election_id: eid(10),
        action,
        config: Some(p4::ForwardingPipelineConfig {
            p4info: Some(test_p4info()),
            cookie: Some(p4::forwarding_pipeline_config::Cookie { cookie }),
            ..Default::default()
        }),
        ..Default::default()
    };
    c.set_forwarding_pipeline_config(set(5, 7)).await.unwrap();
    assert_eq!(emu.stats(1).unwrap().entries, 1);
    assert_eq!(emu.stats(1).unwrap().cookie, Some(7));
    c.set_forwarding_pipeline_config(set(1, 8)).await.unwrap(); // VERIFY only
    assert_eq!(emu.stats(1).unwrap().cookie, Some(7));
    c.set_forwarding_pipeline_config(set(3, 9)).await.unwrap();
    assert_eq!(emu.stats(1).unwrap().entries, 0);
    assert_eq!(emu.stats(1).unwrap().cookie, Some(9));

    // VERIFY_AND_SAVE then COMMIT.
    c.set_forwarding_pipeline_config(set(2, 11)).await.unwrap();
    assert_eq!(emu.stats(1).unwrap().cookie, Some(9));
    let mut commit = set(4, 0);
    commit.config = None;
    c.set_forwarding_pipeline_config(commit.clone())
        .await
        .unwrap();
    assert_eq!(emu.stats(1).unwrap().cookie, Some(11));
    let e = c.set_forwarding_pipeline_config(commit).await.unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition);

    // A P4Info that refers to an unknown action is refused.
    let mut bad = test_p4info();
    bad.actions.clear();
    let mut req = set(3, 1);
    req.config.as_mut().unwrap().p4info = Some(bad);
    let e = c.set_forwarding_pipeline_config(req).await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    emu.shutdown().await.unwrap();
}

#[tokio::test]
async fn insert_duplicate_modify_delete_with_per_update_errors() {
    let (emu, mut c, _s) = ready(1000).await;

    write(
        &mut c,
        1,
        10,
        vec![
            update(Insert, fw_entry(1, 2, 3)),
            update(Insert, fw_entry(1, 3, 3)),
        ],
    )
    .await
    .unwrap();

    let codes = refused(
        &mut c,
        vec![
            update(Insert, fw_entry(1, 2, 4)), // duplicate
            update(Modify, fw_entry(1, 2, 5)), // ok
            update(Modify, fw_entry(9, 9, 5)), // missing
            update(Delete, fw_entry(1, 3, 0)), // ok
            update(Delete, fw_entry(1, 3, 0)), // now missing
            update(Insert, fw_entry(7, 7, 7)), // ok
        ],
    )
    .await;
    assert_eq!(
        codes,
        vec![
            Code::AlreadyExists,
            Code::Ok,
            Code::NotFound,
            Code::Ok,
            Code::NotFound,
            Code::Ok
        ]
    );

    let (_, entries) = read(&mut c, 1, table(FIREWALL)).await.unwrap();
    let num = |v: &[u8]| v.iter().fold(0u64, |a, b| (a << 8) | *b as u64);
    let mut got: Vec<(u64, u64, u64)> = entries
        .iter()
        .map(|e| {
            let m = |i: usize| match &e.r#match[i].field_match_type {
                Some(FieldMatchType::Exact(x)) => num(&x.value),
                other => panic!("{other:?}"),
            };
            let port = match &e.action.as_ref().unwrap().r#type {
                Some(p4::table_action::Type::Action(a)) => num(&a.params[0].value),
                other => panic!("{other:?}"),
            };
            (m(0), m(1), port)
        })
        .collect();
    got.sort();
    assert_eq!(got, vec![(1, 2, 5), (7, 7, 7)]);

    let s = emu.stats(1).unwrap();
    assert_eq!((s.inserts, s.modifies, s.deletes), (3, 1, 1));
    assert_eq!(s.failed_updates, 3);
    assert_eq!(s.write_rpcs, 2);

    // Unsupported atomicity.
    let e = c
        .write(p4::WriteRequest {
            device_id: 1,
            election_id: eid(10),
            atomicity: 1,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::Unimplemented);
    emu.shutdown().await.unwrap();
}

#[tokio::test]
async fn value_widths_and_canonical_form() {
    let (emu, mut c, _s) = ready(1000).await;

    let padded = p4::TableEntry {
        table_id: FIREWALL,
        r#match: vec![exact(1, &[0, 0, 0, 10, 0, 0, 1]), exact(2, &[5])],
        action: action(ALLOW, &[&[0, 0, 1]]),
        ..Default::default()
    };
    let too_wide_param = p4::TableEntry {
        action: action(ALLOW, &[&[2, 0]]), // 512 needs 10 bits
        ..fw_entry(1, 1, 0)
    };
    let too_wide_match = p4::TableEntry {
        r#match: vec![exact(1, &[1, 0, 0, 0, 0]), exact(2, &[1])],
        ..fw_entry(0, 0, 1)
    };
    let empty = p4::TableEntry {
        r#match: vec![exact(1, &[]), exact(2, &[1])],
        ..fw_entry(0, 0, 1)
    };
    let missing_field = p4::TableEntry {
        r#match: vec![exact(1, &[1])],
        ..fw_entry(0, 0, 1)
    };
    let wrong_action = p4::TableEntry {
        action: action(ROUTE, &[]),
        ..fw_entry(2, 2, 1)
    };
    let missing_param = p4::TableEntry {
        action: action(ALLOW, &[]),
        ..fw_entry(3, 3, 1)
    };
    let codes = refused(
        &mut c,
        vec![
            update(Insert, padded),
            update(Insert, too_wide_param),
            update(Insert, too_wide_match),
            update(Insert, empty),
            update(Insert, missing_field),
            update(Insert, wrong_action),
            update(Insert, missing_param),
            update(
                Insert,
                p4::TableEntry {
                    table_id: 42,
                    ..Default::default()
                },
            ),
        ],
    )
    .await;
    assert_eq!(
        codes,
        vec![
            Code::Ok,
            Code::OutOfRange,
            Code::OutOfRange,
            Code::OutOfRange,
            Code::InvalidArgument,
            Code::InvalidArgument,
            Code::InvalidArgument,
            Code::NotFound,
        ]
    );

    // Read back in canonical form; the same key padded differently finds it.
    let (_, got) = read(
        &mut c,
        1,
        p4::TableEntry {
            table_id: FIREWALL,
            r#match: vec![exact(1, &[10, 0, 0, 1]), exact(2, &[0, 0, 0, 5])],
            ..Default::default()
        },
    )
    .await
    .unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].r#match[0], exact(1, &[10, 0, 0, 1]));
    assert_eq!(got[0].action, action(ALLOW, &[&[1]]));
    emu.shutdown().await.unwrap();
}

/// The `route` key of prefix `v`/`len`.
fn route_key(v: &[u8], len: i32) -> p4::TableEntry {
    p4::TableEntry {
        r#match: vec![lpm(v, len)],
        ..table(ROUTE)
    }
}

fn route(v: &[u8], len: i32) -> p4::TableEntry {
    p4::TableEntry {
        action: action(ALLOW, &[&[1]]),
        ..route_key(v, len)
    }
}

fn acl(
    proto: Option<(u8, u8)>,
    ports: Option<(u16, u16)>,
    vlan: Option<u16>,
    prio: i32,
) -> p4::TableEntry {
    let mut m = vec![];
    if let Some((v, mask)) = proto {
        m.push(p4::FieldMatch {
            field_id: 1,
            field_match_type: Some(FieldMatchType::Ternary(p4::field_match::Ternary {
                value: vec![v],
                mask: vec![mask],
            })),
        });
    }
    if let Some((lo, hi)) = ports {
        m.push(p4::FieldMatch {
            field_id: 2,
            field_match_type: Some(FieldMatchType::Range(p4::field_match::Range {
                low: lo.to_be_bytes().to_vec(),
                high: hi.to_be_bytes().to_vec(),
            })),
        });
    }
    if let Some(v) = vlan {
        m.push(p4::FieldMatch {
            field_id: 3,
            field_match_type: Some(FieldMatchType::Optional(p4::field_match::Optional {
                value: v.to_be_bytes().to_vec(),
            })),
        });
    }
    p4::TableEntry {
        table_id: ACL,
        r#match: m,
        action: action(DROP, &[]),
        priority: prio,
        ..Default::default()
    }
}

#[tokio::test]
async fn lpm_ternary_range_optional_priorities_and_table_full() {
    let (emu, mut c, _s) = ready(1000).await;

    let codes = refused(
        &mut c,
        vec![
            update(Insert, route(&[10, 0, 0, 0], 8)),  // ok
            update(Insert, route(&[10, 1, 0, 0], 8)),  // bits past prefix
            update(Insert, route(&[10, 0, 0, 0], 0)),  // don't-care must be omitted
            update(Insert, route(&[10, 0, 0, 0], 33)), // too long
            update(Insert, route(&[10, 0, 0, 0], 16)), // ok (other key)
            update(Insert, route(&[11, 0, 0, 0], 8)),  // ok
            update(Insert, route(&[12, 0, 0, 0], 8)),  // table full (size 3)
            update(
                Insert,
                p4::TableEntry {
                    priority: 1,
                    ..route(&[13, 0, 0, 0], 8)
                },
            ),
            update(
                Insert,
                p4::TableEntry {
                    action: action(DROP, &[]),
                    ..route(&[14, 0, 0, 0], 8)
                },
            ),
        ],
    )
    .await;
    assert_eq!(
        codes,
        vec![
            Code::Ok,
            Code::InvalidArgument,
            Code::InvalidArgument,
            Code::InvalidArgument,
            Code::Ok,
            Code::Ok,
            Code::ResourceExhausted,
            Code::InvalidArgument, // priority on a non-ternary table
            Code::InvalidArgument, // DEFAULT_ONLY action in an entry
        ]
    );

    let codes = refused(
        &mut c,
        vec![
            update(Insert, acl(Some((6, 0xff)), Some((80, 90)), Some(7), 10)), // ok
            update(Insert, acl(Some((6, 0xff)), Some((80, 90)), Some(7), 20)), // ok: priority is key
            update(Insert, acl(Some((6, 0xff)), Some((80, 90)), Some(7), 10)), // duplicate
            update(Insert, acl(Some((6, 0xff)), None, None, 0)),               // priority missing
            update(Insert, acl(Some((0x17, 0x0f)), None, None, 5)),            // value outside mask
            update(Insert, acl(Some((0, 0)), None, None, 5)),                  // zero mask
            update(Insert, acl(None, Some((90, 80)), None, 5)),                // low > high
            update(Insert, acl(None, Some((0, 0xffff)), None, 5)),             // full range
            update(Insert, acl(None, None, Some(0x1000), 5)),                  // 13 bits in 12
            update(Insert, acl(None, None, None, 1)),                          // all don't-care: ok
        ],
    )
    .await;
    assert_eq!(
        codes,
        vec![
            Code::Ok,
            Code::Ok,
            Code::AlreadyExists,
            Code::InvalidArgument,
            Code::InvalidArgument,
            Code::InvalidArgument,
            Code::InvalidArgument,
            Code::InvalidArgument,
            Code::OutOfRange,
            Code::Ok,
        ]
    );
    let (_, got) = read(&mut c, 1, table(ACL)).await.unwrap();
    assert_eq!(got.len(), 3);
    emu.shutdown().await.unwrap();
}

#[tokio::test]
async fn default_actions() {
    let (emu, mut c, _s) = ready(1000).await;
    let default = |table_id, action| p4::TableEntry {
        table_id,
        action,
        is_default_action: true,
        ..Default::default()
    };
    let codes = refused(
        &mut c,
        vec![
            update(Modify, default(ROUTE, action(DROP, &[]))), // ok (DEFAULT_ONLY)
            update(Modify, default(ACL, action(ALLOW, &[&[1]]))), // const default
            update(Insert, default(FIREWALL, action(DROP, &[]))), // must be MODIFY
            update(Modify, default(FIREWALL, action(ALLOW, &[&[2]]))), // ok
        ],
    )
    .await;
    assert_eq!(
        codes,
        vec![
            Code::Ok,
            Code::PermissionDenied,
            Code::InvalidArgument,
            Code::Ok
        ]
    );
    let (_, got) = read(&mut c, 1, default(FIREWALL, None)).await.unwrap();
    assert_eq!(got, vec![default(FIREWALL, action(ALLOW, &[&[2]]))]);
    let (_, got) = read(&mut c, 1, default(ACL, None)).await.unwrap();
    assert_eq!(got[0].action, action(DROP, &[]));
    assert!(got[0].r#const);
    emu.shutdown().await.unwrap();
}

#[tokio::test]
async fn reads_wildcard_per_table_and_chunked() {
    let (emu, mut c, _s) = ready(10).await;
    let updates = (0..25).map(|i| update(Insert, fw_entry(i, i, 1))).collect();
    write(&mut c, 1, 10, updates).await.unwrap();
    write(
        &mut c,
        1,
        10,
        vec![update(Insert, route(&[10, 0, 0, 0], 8))],
    )
    .await
    .unwrap();

    let (messages, all) = read(&mut c, 1, p4::TableEntry::default()).await.unwrap();
    assert_eq!(all.len(), 26);
    assert_eq!(messages, 3);
    let (_, fw) = read(&mut c, 1, table(FIREWALL)).await.unwrap();
    assert_eq!(fw.len(), 25);
    let (_, one) = read(&mut c, 1, route_key(&[10, 0, 0, 0], 8)).await.unwrap();
    assert_eq!(one.len(), 1);
    let (messages, none) = read(&mut c, 1, route_key(&[11, 0, 0, 0], 8)).await.unwrap();
    assert_eq!((messages, none.len()), (1, 0));
    let e = read(&mut c, 1, table(5)).await.unwrap_err();
    assert_eq!(e.code(), Code::NotFound);
    assert_eq!(emu.stats(1).unwrap().read_rpcs, 5);
    emu.shutdown().await.unwrap();
}

#[tokio::test]
async fn stats_and_drift_helpers_over_http() {
    let emu = start(vec![1, 2], 1000).await;
    let side = common::SideChannel {
        addr: emu.stats_addr().unwrap(),
        content_type: "text/plain",
    };
    let mut c = client(&emu).await;
    let _s = primary_with_pipeline(&mut c, 1, 77).await;
    let updates = (0..10).map(|i| update(Insert, fw_entry(i, i, 1))).collect();
    write(&mut c, 1, 10, updates).await.unwrap();

    let (code, all) = side.call("GET", "/stats", "").await;
    assert_eq!(code, 200);
    assert_eq!(all["devices"].as_array().unwrap().len(), 2);
    // Calls by method, over every device: the one Write, the stream, and
    // a Capabilities (which names no device).
    assert_eq!(all["rpcs"]["/p4.v1.P4Runtime/Write"], 1);
    assert_eq!(all["rpcs"]["/p4.v1.P4Runtime/StreamChannel"], 1);
    assert!(all["rpcs"]["/p4.v1.P4Runtime/Capabilities"].is_null());
    c.capabilities(p4::CapabilitiesRequest {}).await.unwrap();
    let (_, all) = side.call("GET", "/stats", "").await;
    assert_eq!(all["rpcs"]["/p4.v1.P4Runtime/Capabilities"], 1);
    let (_, one) = side.call("GET", "/stats/1", "").await;
    assert_eq!(one["inserts"], 10);
    assert_eq!(one["entries"], 10);
    assert_eq!(one["cookie"], 77);
    assert_eq!(one["tables"][FIREWALL.to_string()], 10);

    let text = format!(
        "table_id: {FIREWALL} match {{ field_id: 1 exact {{ value: \"\\x03\" }} }} match {{ field_id: 2 exact {{ value: \"\\x03\" }} }}"
    );
    let (code, r) = side.call("POST", "/devices/1/delete-entry", &text).await;
    assert_eq!((code, &r["deleted"]), (200, &serde_json::json!(true)));
    let (_, r) = side.call("POST", "/devices/1/delete-entry", &text).await;
    assert_eq!(r["deleted"], false);
    let (_, r) = side
        .call(
            "POST",
            &format!("/devices/1/drop-entries?table_id={FIREWALL}&count=4"),
            "",
        )
        .await;
    assert_eq!(r["deleted"], 4);
    let inject = format!(
        "table_id: {FIREWALL} match {{ field_id: 1 exact {{ value: \"\\x63\" }} }} match {{ field_id: 2 exact {{ value: \"\\x63\" }} }} action {{ action {{ action_id: {DROP} }} }}"
    );
    let (code, _) = side.call("POST", "/devices/1/inject-entry", &inject).await;
    assert_eq!(code, 200);
    let (code, _) = side.call("POST", "/devices/1/inject-entry", &inject).await;
    assert_eq!(code, 400);
    let (code, _) = side.call("GET", "/stats/9", "").await;
    assert_eq!(code, 404);

    let s = emu.stats(1).unwrap();
    assert_eq!(s.entries, 6);
    assert_eq!(s.drift_deletes, 5);

    // In-process helpers too.
    assert!(
        emu.emulator().delete_entry(1, &fw_entry(9, 9, 0)).unwrap()
            || emu.stats(1).unwrap().entries == 6
    );
    emu.shutdown().await.unwrap();
}

#[tokio::test]
async fn example_firewall_p4info_if_present() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../examples/firewall/p4info.txt"
    );
    let Ok(text) = std::fs::read_to_string(path) else {
        return;
    };
    let info = p4info::parse_text(&text).unwrap();
    let emu = start(vec![1], 1000).await;
    let mut c = client(&emu).await;
    let mut s = Stream::open(&mut c, 1, 1).await;
    s.next().await.unwrap();
    c.set_forwarding_pipeline_config(p4::SetForwardingPipelineConfigRequest {
        device_id: 1,
        election_id: eid(1),
        action: 3,
        config: Some(p4::ForwardingPipelineConfig {
            p4info: Some(info),
            ..Default::default()
        }),
        ..Default::default()
    })
    .await
    .unwrap();
    emu.shutdown().await.unwrap();
}

#[tokio::test]
async fn hundred_thousand_entries() {
    let (emu, mut c, _s) = ready(1000).await;
    for batch in 0..10u32 {
        let updates = (0..10_000u32)
            .map(|i| update(Insert, fw_entry(batch, i, 1)))
            .collect();
        write(&mut c, 1, 10, updates).await.unwrap();
    }
    let (messages, all) = read(&mut c, 1, p4::TableEntry::default()).await.unwrap();
    assert_eq!(all.len(), 100_000);
    assert_eq!(messages, 100);
    emu.shutdown().await.unwrap();
}

#[tokio::test]
async fn large_failing_batch_reports_every_update() {
    let (emu, mut c, _s) = ready(1000).await;
    let batch = |n: u32| {
        (0..n)
            .map(|i| update(Insert, fw_entry(1, i, 1)))
            .collect::<Vec<_>>()
    };
    write(&mut c, 1, 10, batch(10_000)).await.unwrap();
    // Half duplicates, half new: 30k per-update statuses in the trailer.
    let mut updates = batch(15_000);
    updates.extend((0..15_000).map(|i| update(Insert, fw_entry(2, i, 1))));
    let e = write(&mut c, 1, 10, updates).await.unwrap_err();
    let codes = codes(&e);
    assert_eq!(codes.len(), 30_000);
    assert_eq!(
        codes.iter().filter(|c| **c == Code::AlreadyExists).count(),
        10_000
    );
    assert_eq!(emu.stats(1).unwrap().entries, 30_000);
    emu.shutdown().await.unwrap();
}

/// A latency profile delays answers (per request overlapping, per entry
/// serialized per device) without blocking other requests.
#[tokio::test]
async fn latency_profile_overlaps_requests_and_serializes_entries() {
    use p4fleet_emulator::LatencyProfile;
    use std::time::{Duration, Instant};
    let emu = Emulator::start(EmulatorConfig {
        device_ids: vec![1],
        profile: LatencyProfile::Custom {
            per_request: Duration::from_millis(200),
            per_entry: Duration::from_millis(1),
        },
        ..Default::default()
    })
    .await
    .unwrap();
    let mut c = client(&emu).await;
    let _s = primary_with_pipeline(&mut c, 1, 1).await;

    let t = Instant::now();
    write(&mut c, 1, 10, vec![update(Insert, fw_entry(1, 1, 1))])
        .await
        .unwrap();
    assert!(
        t.elapsed() >= Duration::from_millis(200),
        "{:?}",
        t.elapsed()
    );

    // Four requests in flight: the per-request costs overlap.
    let t = Instant::now();
    let writes = (0..4u32).map(|i| {
        let mut c = c.clone();
        async move { write(&mut c, 1, 10, vec![update(Insert, fw_entry(2, i, 1))]).await }
    });
    for r in futures::future::join_all(writes).await {
        r.unwrap();
    }
    let four = t.elapsed();
    assert!(four >= Duration::from_millis(200), "{four:?}");
    assert!(
        four < Duration::from_millis(700),
        "not overlapped: {four:?}"
    );

    // 300 entries: 200 ms + 300 × 1 ms, serialized.
    let t = Instant::now();
    let ups = (0..300u32)
        .map(|i| update(Insert, fw_entry(3, i, 1)))
        .collect();
    write(&mut c, 1, 10, ups).await.unwrap();
    assert!(
        t.elapsed() >= Duration::from_millis(500),
        "{:?}",
        t.elapsed()
    );
    emu.shutdown().await.unwrap();
}
