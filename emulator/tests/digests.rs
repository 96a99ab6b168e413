//! Digests and idle timeouts through the emulator's gRPC port: the
//! l2switch example's learning digest produced by frames from unknown
//! source MACs, batched into DigestLists on the primary's StreamChannel
//! and held back until acked; entries of a NOTIFY_CONTROL table idling
//! out into IdleTimeoutNotifications, their time since the last hit read
//! back; bad configs refused per update.

mod common;

use std::time::Duration;

use common::l2crypt::{DMAC, FORWARD, NO_ACTION, SMAC};
use p4fleet_emulator::{Emulator, EmulatorConfig, Frame, RunningEmulator};
use p4fleet_proto::p4info;
use p4fleet_proto::p4runtime::{
    self as p4, entity::Entity, p4_runtime_client::P4RuntimeClient, stream_message_response,
    update::Type,
};
use tokio_stream::StreamExt;
use tonic::Code;
use tonic::transport::Channel;

const P4INFO: &str = include_str!("../../examples/l2switch/p4info.txt");
const DIGEST: u32 = 402184575;

/// The l2switch P4Info with `smac` notifying idle entries (what
/// `support_timeout = true` compiles to).
fn p4info() -> p4info::P4Info {
    let mut info = p4info::parse_text(P4INFO).unwrap();
    let smac = info
        .tables
        .iter_mut()
        .find(|t| t.preamble.as_ref().unwrap().id == SMAC)
        .unwrap();
    smac.idle_timeout_behavior = p4info::table::IdleTimeoutBehavior::NotifyControl as i32;
    info
}

async fn start() -> (RunningEmulator, P4RuntimeClient<Channel>, common::Primary) {
    let emu = Emulator::start(EmulatorConfig::default()).await.unwrap();
    let mut c = P4RuntimeClient::connect(emu.p4runtime_url()).await.unwrap();
    let primary = common::arbitrate(&mut c, 1).await;
    let config = p4::ForwardingPipelineConfig {
        p4info: Some(p4info()),
        ..Default::default()
    };
    common::set_pipeline(&mut c, 1, config).await.unwrap();
    (emu, c, primary)
}

/// Each update's code: all OK, or the failed Write's per-update codes.
async fn write(c: &mut P4RuntimeClient<Channel>, updates: Vec<(Type, Entity)>) -> Vec<Code> {
    let n = updates.len();
    match common::write(c, 1, updates).await {
        Ok(()) => vec![Code::Ok; n],
        Err(s) => common::error_details(&s)
            .into_iter()
            .map(|(c, _)| c)
            .collect(),
    }
}

fn digest_config(max_timeout_ns: i64, max_list_size: i32, ack_timeout_ns: i64) -> Entity {
    Entity::DigestEntry(p4::DigestEntry {
        digest_id: DIGEST,
        config: Some(p4::digest_entry::Config {
            max_timeout_ns,
            max_list_size,
            ack_timeout_ns,
        }),
    })
}

fn mac(last: u8) -> [u8; 6] {
    [2, 0, 0, 0, 0, last]
}

fn frame(src: u8, port: u32) -> Frame {
    Frame {
        ingress_port: port,
        src: mac(src),
        dst: mac(0xff),
        len: 64,
    }
}

/// Waits until the device's stats satisfy `ok` (they follow the stream
/// messages by a moment).
async fn wait_stats(emu: &RunningEmulator, ok: impl Fn(&p4fleet_emulator::DeviceStats) -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let s = emu.stats(1).unwrap();
        if ok(&s) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "stats never matched: {s:?}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The next stream message that is not an arbitration update.
async fn next_notice(
    s: &mut tonic::Streaming<p4::StreamMessageResponse>,
) -> stream_message_response::Update {
    loop {
        let m = tokio::time::timeout(Duration::from_secs(10), s.next())
            .await
            .expect("a notice in time")
            .expect("stream open")
            .unwrap();
        match m.update.unwrap() {
            stream_message_response::Update::Arbitration(_) => continue,
            other => return other,
        }
    }
}

/// (src MAC, port) of each message of a learning digest list.
fn learned(list: &p4::DigestList) -> Vec<([u8; 6], u8)> {
    list.data
        .iter()
        .map(|d| {
            let Some(p4::p4_data::Data::Struct(s)) = &d.data else {
                panic!("not a struct: {d:?}")
            };
            let bits = |i: usize| match &s.members[i].data {
                Some(p4::p4_data::Data::Bitstring(b)) => b.clone(),
                other => panic!("not a bitstring: {other:?}"),
            };
            let mut m = [0u8; 6];
            let b = bits(0);
            m[6 - b.len()..].copy_from_slice(&b);
            (m, *bits(1).last().unwrap())
        })
        .collect()
}

fn smac_entry(last: u8, idle_timeout_ns: i64) -> p4::TableEntry {
    p4::TableEntry {
        table_id: SMAC,
        r#match: vec![p4::FieldMatch {
            field_id: 1,
            field_match_type: Some(p4::field_match::FieldMatchType::Exact(
                p4::field_match::Exact {
                    value: mac(last).to_vec(),
                },
            )),
        }],
        action: Some(p4::TableAction {
            r#type: Some(p4::table_action::Type::Action(p4::Action {
                action_id: NO_ACTION,
                params: vec![],
            })),
        }),
        idle_timeout_ns,
        ..Default::default()
    }
}

#[tokio::test]
async fn learning_digests_are_batched_and_held_back_until_acked() {
    let (emu, mut c, (tx, mut rx)) = start().await;
    // Without a config, nothing is collected.
    let r = emu.emulator().receive_frames(1, &[frame(1, 3)]).unwrap();
    assert_eq!(r.digests_unconfigured, 1);

    // Lists of two, sent when full (the timeout is far away).
    let codes = write(
        &mut c,
        vec![(
            Type::Insert,
            digest_config(60_000_000_000, 2, 60_000_000_000),
        )],
    )
    .await;
    assert_eq!(codes, [Code::Ok]);
    let r = emu
        .emulator()
        .receive_frames(1, &[frame(1, 3), frame(1, 3), frame(2, 4), frame(3, 5)])
        .unwrap();
    assert_eq!((r.digests_queued, r.digests_duplicate), (3, 1));
    let stream_message_response::Update::Digest(first) = next_notice(&mut rx).await else {
        panic!("expected a digest list")
    };
    assert_eq!(first.digest_id, DIGEST);
    assert_eq!(learned(&first), [(mac(1), 3), (mac(2), 4)]);

    // Outstanding (not acked): the same source is held back.
    let r = emu.emulator().receive_frames(1, &[frame(1, 3)]).unwrap();
    assert_eq!(r.digests_duplicate, 1);
    // Acked: it may be reported again; with mac 3 waiting, it completes a list.
    tx.send(p4::StreamMessageRequest {
        update: Some(p4::stream_message_request::Update::DigestAck(
            p4::DigestListAck {
                digest_id: DIGEST,
                list_id: first.list_id,
            },
        )),
    })
    .await
    .unwrap();
    // The ack is processed in stream order; wait until the device saw it.
    wait_stats(&emu, |s| s.digest_acks == 1).await;
    let r = emu.emulator().receive_frames(1, &[frame(1, 3)]).unwrap();
    assert_eq!(r.digests_queued, 1);
    let stream_message_response::Update::Digest(second) = next_notice(&mut rx).await else {
        panic!("expected a digest list")
    };
    assert!(second.list_id > first.list_id);
    assert_eq!(learned(&second), [(mac(3), 5), (mac(1), 3)]);

    // A known source sends nothing.
    let mut known = smac_entry(9, 0);
    known.idle_timeout_ns = 0;
    assert_eq!(
        write(&mut c, vec![(Type::Insert, Entity::TableEntry(known))]).await,
        [Code::Ok]
    );
    let r = emu.emulator().receive_frames(1, &[frame(9, 1)]).unwrap();
    assert_eq!(r.digests_queued + r.digests_duplicate, 0);

    // Counted once sent (the count follows the send).
    wait_stats(&emu, |s| (s.digest_lists, s.digest_messages) == (2, 4)).await;
}

#[tokio::test]
async fn a_short_max_timeout_sends_a_partial_list() {
    let (emu, mut c, (_tx, mut rx)) = start().await;
    // 10 ms, lists of up to 100.
    write(
        &mut c,
        vec![(Type::Insert, digest_config(10_000_000, 100, 1_000_000_000))],
    )
    .await;
    emu.emulator().receive_frames(1, &[frame(7, 2)]).unwrap();
    let stream_message_response::Update::Digest(list) = next_notice(&mut rx).await else {
        panic!("expected a digest list")
    };
    assert_eq!(learned(&list), [(mac(7), 2)]);
}

#[tokio::test]
async fn digest_configs_are_checked_and_read_back() {
    let (_emu, mut c, _primary) = start().await;
    let unknown = Entity::DigestEntry(p4::DigestEntry {
        digest_id: 5,
        config: Some(Default::default()),
    });
    let codes = write(
        &mut c,
        vec![
            (Type::Modify, digest_config(1, 1, 1)),
            (Type::Insert, digest_config(-1, 1, 1)),
            (Type::Insert, unknown),
            (Type::Insert, digest_config(1000, 4, 2000)),
            (Type::Insert, digest_config(1000, 4, 2000)),
        ],
    )
    .await;
    assert_eq!(
        codes,
        [
            Code::NotFound,
            Code::InvalidArgument,
            Code::NotFound,
            Code::Ok,
            Code::AlreadyExists
        ]
    );
    let read = common::read(&mut c, 1, Entity::DigestEntry(p4::DigestEntry::default()))
        .await
        .unwrap();
    assert_eq!(read, vec![digest_config(1000, 4, 2000)]);
}

#[tokio::test]
async fn idle_entries_are_notified_and_hits_restart_their_clock() {
    let (emu, mut c, (_tx, mut rx)) = start().await;
    // An idle timeout on a table without NOTIFY_CONTROL is refused.
    let mut dmac = smac_entry(1, 1_000_000);
    dmac.table_id = DMAC;
    dmac.action = Some(p4::TableAction {
        r#type: Some(p4::table_action::Type::Action(p4::Action {
            action_id: FORWARD,
            params: vec![p4::action::Param {
                param_id: 1,
                value: vec![1],
            }],
        })),
    });
    let codes = write(
        &mut c,
        vec![
            (Type::Insert, Entity::TableEntry(dmac)),
            (Type::Insert, Entity::TableEntry(smac_entry(1, -5))),
            // 20 ms: idles out soon.
            (Type::Insert, Entity::TableEntry(smac_entry(1, 20_000_000))),
            // An hour: never in this test.
            (
                Type::Insert,
                Entity::TableEntry(smac_entry(2, 3_600_000_000_000)),
            ),
        ],
    )
    .await;
    assert_eq!(
        codes,
        [
            Code::InvalidArgument,
            Code::InvalidArgument,
            Code::Ok,
            Code::Ok
        ]
    );
    let stream_message_response::Update::IdleTimeoutNotification(n) = next_notice(&mut rx).await
    else {
        panic!("expected an idle timeout notification")
    };
    assert_eq!(n.table_entry.len(), 1);
    assert_eq!(n.table_entry[0].r#match, smac_entry(1, 0).r#match);
    assert_eq!(n.table_entry[0].idle_timeout_ns, 20_000_000);

    // Read back with time_since_last_hit: the idle one has been idle at
    // least its timeout; a hit brings it back under.
    let elapsed = |c: &mut P4RuntimeClient<Channel>| {
        let mut c = c.clone();
        async move {
            let filter = Entity::TableEntry(p4::TableEntry {
                table_id: SMAC,
                time_since_last_hit: Some(Default::default()),
                ..Default::default()
            });
            common::read(&mut c, 1, filter)
                .await
                .unwrap()
                .into_iter()
                .map(|e| match e {
                    Entity::TableEntry(te) => {
                        let last = te.r#match[0].clone();
                        let Some(p4::field_match::FieldMatchType::Exact(v)) = last.field_match_type
                        else {
                            panic!("exact")
                        };
                        (
                            *v.value.last().unwrap(),
                            te.time_since_last_hit.unwrap().elapsed_ns,
                        )
                    }
                    other => panic!("not a table entry: {other:?}"),
                })
                .collect::<std::collections::BTreeMap<u8, i64>>()
        }
    };
    let before = elapsed(&mut c).await;
    assert!(before[&1] >= 20_000_000, "{before:?}");
    let r = emu.emulator().receive_frames(1, &[frame(1, 3)]).unwrap();
    assert_eq!(
        r.digests_queued + r.digests_unconfigured,
        0,
        "a known source"
    );
    let after = elapsed(&mut c).await;
    assert!(after[&1] < before[&1], "{before:?} then {after:?}");
    // Hit again, it idles out again and is notified again.
    let stream_message_response::Update::IdleTimeoutNotification(again) =
        next_notice(&mut rx).await
    else {
        panic!("expected an idle timeout notification")
    };
    assert_eq!(again.table_entry[0].r#match, smac_entry(1, 0).r#match);
    wait_stats(&emu, |s| {
        (s.idle_notifications, s.idle_entries_notified) == (2, 2)
    })
    .await;
}
