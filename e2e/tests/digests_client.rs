//! p4fleet-client's notices against an in-process emulator: a DigestEntry
//! written through `write_entities`, learning digests produced by frames
//! from unknown sources (the emulator's L2 frame model), delivered to a
//! `notices()` subscriber and acked by the session (the device releases
//! the data only on the ack), and an idle timeout notification for an
//! entry of a NOTIFY_CONTROL table, on the same stream as arbitration.

use std::time::Duration;

use p4fleet_client::{Device, Identity, Notice, Target};
use p4fleet_emulator::{Emulator, EmulatorConfig, Frame, RunningEmulator};
use p4fleet_proto::p4info;
use p4fleet_proto::p4runtime::{self as p4, entity::Entity, update::Type};

const SMAC: u32 = 41683160;
const NO_ACTION: u32 = 21257015;
const DIGEST: u32 = 402184575;

fn l2switch() -> p4info::P4Info {
    let text =
        std::fs::read_to_string(p4fleet_e2e::repo_root().join("examples/l2switch/p4info.txt"))
            .unwrap();
    let mut info = p4info::parse_text(&text).unwrap();
    for t in &mut info.tables {
        if t.preamble.as_ref().unwrap().id == SMAC {
            t.idle_timeout_behavior = p4info::table::IdleTimeoutBehavior::NotifyControl as i32;
        }
    }
    info
}

fn frame(last: u8, port: u32) -> Frame {
    Frame {
        ingress_port: port,
        src: [2, 0, 0, 0, 0, last],
        dst: [0xff; 6],
        len: 64,
    }
}

async fn next(rx: &mut tokio::sync::broadcast::Receiver<Notice>) -> Notice {
    tokio::time::timeout(Duration::from_secs(10), rx.recv())
        .await
        .expect("a notice in time")
        .expect("channel open")
}

async fn wait_acks(emu: &RunningEmulator, n: u64) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while emu.stats(1).unwrap().digest_acks < n {
        assert!(
            tokio::time::Instant::now() < deadline,
            "acks never reached {n}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn digest_lists_reach_subscribers_and_are_acked_by_the_session() {
    let emu = Emulator::start(EmulatorConfig::default()).await.unwrap();
    let target = Target::p4runtime(emu.p4runtime_addr().to_string(), 1);
    let device = Device::connect(
        target,
        Identity {
            election_id: 10,
            client_id: 1,
        },
    )
    .unwrap();
    let Device::P4Runtime(p4rt) = &device else {
        panic!("a P4Runtime device")
    };
    let mut rx = p4rt.notices();
    device
        .set_pipeline(0, &l2switch(), Vec::new(), 1)
        .await
        .unwrap();
    let config = p4::DigestEntry {
        digest_id: DIGEST,
        config: Some(p4::digest_entry::Config {
            max_timeout_ns: 1_000_000,
            max_list_size: 16,
            ack_timeout_ns: 60_000_000_000,
        }),
    };
    let errors = device
        .write_entities(
            0,
            vec![p4::Update {
                r#type: Type::Insert as i32,
                entity: Some(p4::Entity {
                    entity: Some(Entity::DigestEntry(config)),
                }),
            }],
        )
        .await
        .unwrap();
    assert!(errors.is_empty(), "{errors:?}");
    let read = device
        .read_entities(
            0,
            vec![p4::Entity {
                entity: Some(Entity::DigestEntry(p4::DigestEntry::default())),
            }],
        )
        .await
        .unwrap();
    assert_eq!(read[0].entity, Some(Entity::DigestEntry(config)));

    emu.emulator().receive_frames(1, &[frame(1, 3)]).unwrap();
    let Notice::DigestList { device_id, list } = next(&mut rx).await else {
        panic!("expected a digest list")
    };
    assert_eq!((device_id, list.digest_id, list.data.len()), (1, DIGEST, 1));
    // The session acked it: the same source is reported again (with a
    // one-minute ack timeout, only an ack releases it).
    wait_acks(&emu, 1).await;
    let r = emu.emulator().receive_frames(1, &[frame(1, 3)]).unwrap();
    assert_eq!(r.digests_queued, 1, "{r:?}");
    let Notice::DigestList { list: again, .. } = next(&mut rx).await else {
        panic!("expected a digest list")
    };
    assert!(again.list_id > list.list_id);
    assert_eq!(again.data, list.data);

    // An entry with a 10 ms idle timeout idles out.
    let entry = p4::TableEntry {
        table_id: SMAC,
        r#match: vec![p4::FieldMatch {
            field_id: 1,
            field_match_type: Some(p4::field_match::FieldMatchType::Exact(
                p4::field_match::Exact {
                    value: vec![2, 0, 0, 0, 0, 1],
                },
            )),
        }],
        action: Some(p4::TableAction {
            r#type: Some(p4::table_action::Type::Action(p4::Action {
                action_id: NO_ACTION,
                params: vec![],
            })),
        }),
        idle_timeout_ns: 10_000_000,
        ..Default::default()
    };
    let errors = device
        .write_entities(
            0,
            vec![p4::Update {
                r#type: Type::Insert as i32,
                entity: Some(p4::Entity {
                    entity: Some(Entity::TableEntry(entry.clone())),
                }),
            }],
        )
        .await
        .unwrap();
    assert!(errors.is_empty(), "{errors:?}");
    let Notice::IdleTimeout {
        device_id,
        notification,
    } = next(&mut rx).await
    else {
        panic!("expected an idle timeout notification")
    };
    assert_eq!(device_id, 1);
    assert_eq!(notification.table_entry[0].r#match, entry.r#match);
    // Mastership is untouched by all this: still primary, writes go on.
    device.standing(0, Duration::from_secs(5)).await.unwrap();
}

/// The operator's device pool hands each connection's notices to its
/// observer (the operator's metrics), lists already acked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_device_pool_forwards_notices_to_its_observer() {
    use p4fleet::{DevicePool, DigestLabels, NoticeEvent, NoticeMetrics};
    use p4fleet_crds::switch::{Switch, SwitchSpec};

    let emu = Emulator::start(EmulatorConfig::default()).await.unwrap();
    let spec: SwitchSpec = serde_json::from_value(serde_json::json!({
        "target": "Bmv2", "endpoint": emu.p4runtime_addr().to_string(), "deviceId": 1
    }))
    .unwrap();
    let pool = DevicePool::with_election_id(10);
    let metrics = NoticeMetrics::default();
    let m = metrics.clone();
    pool.observe_notices(std::sync::Arc::new(move |switch, event| {
        if let NoticeEvent::Notice(n) = event {
            m.record(switch, n);
        }
    }));
    let device = pool.connect(&Switch::new("leaf1", spec)).unwrap();
    device
        .set_pipeline(0, &l2switch(), Vec::new(), 1)
        .await
        .unwrap();
    let errors = device
        .write_entities(
            0,
            vec![p4::Update {
                r#type: Type::Insert as i32,
                entity: Some(p4::Entity {
                    entity: Some(Entity::DigestEntry(p4::DigestEntry {
                        digest_id: DIGEST,
                        config: Some(p4::digest_entry::Config {
                            max_timeout_ns: 0,
                            max_list_size: 2,
                            ack_timeout_ns: 60_000_000_000,
                        }),
                    })),
                }),
            }],
        )
        .await
        .unwrap();
    assert!(errors.is_empty(), "{errors:?}");
    emu.emulator()
        .receive_frames(1, &[frame(1, 1), frame(2, 2), frame(3, 3)])
        .unwrap();
    let labels = DigestLabels {
        switch: "leaf1".into(),
        digest_id: DIGEST.to_string(),
    };
    // Lists of at most two, sent at once: [1, 2] and [3].
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while metrics.digest_messages.get_or_create(&labels).get() < 3 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "messages not counted"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(metrics.digest_lists.get_or_create(&labels).get(), 2);
    wait_acks(&emu, 2).await;
}
