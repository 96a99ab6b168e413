//! Counters, meters and registers through the emulator's gRPC port: direct
//! counters counted by a Dpdk device's data plane, indirect counters,
//! meters and registers written and read back, and bad writes refused per
//! update in the spec's format.

mod common;

use std::time::{Duration, Instant};

use common::l2crypt::{DMAC, P4INFO, SPEC, dmac_key, packed, start_dpdk};
use p4fleet_emulator::dataplane::packet;
use p4fleet_proto::p4info;
use p4fleet_proto::p4runtime::{
    self as p4, entity::Entity, p4_runtime_client::P4RuntimeClient, update::Type,
};
use tonic::Code;
use tonic::transport::Channel;

const PORTS: u32 = 302000001;
const DMAC_COUNTER: u32 = 330000001;
const RATE: u32 = 335000001;
const DMAC_METER: u32 = 353000001;
const SEEN: u32 = 369000001;

/// l2crypt's P4Info plus a counter, a meter and a register array and a
/// direct counter and meter on `dmac`.
fn p4info() -> p4info::P4Info {
    let extra = format!(
        r#"
counters {{ preamble {{ id: {PORTS} name: "MyIngress.ports" }} spec {{ unit: BOTH }} size: 8 }}
direct_counters {{ preamble {{ id: {DMAC_COUNTER} name: "MyIngress.dmac_counter" }} spec {{ unit: BOTH }} direct_table_id: {DMAC} }}
meters {{ preamble {{ id: {RATE} name: "MyIngress.rate" }} spec {{ unit: BYTES }} size: 4 }}
direct_meters {{ preamble {{ id: {DMAC_METER} name: "MyIngress.dmac_meter" }} spec {{ unit: PACKETS }} direct_table_id: {DMAC} }}
registers {{ preamble {{ id: {SEEN} name: "MyIngress.seen" }} type_spec {{ bitstring {{ bit {{ bitwidth: 12 }} }} }} size: 16 }}
"#
    );
    p4info::parse_text(&format!("{P4INFO}{extra}")).unwrap()
}

/// Sets l2crypt with `info` on device 1.
async fn set_pipeline(
    c: &mut P4RuntimeClient<Channel>,
    info: p4info::P4Info,
) -> Result<(), tonic::Status> {
    let config = p4::ForwardingPipelineConfig {
        p4info: Some(info),
        p4_device_config: packed(SPEC),
        cookie: None,
    };
    common::set_pipeline(c, 1, config).await
}

/// `dmac`: `mac` -> forward(`port`).
fn forward(mac: [u8; 6], port: u8) -> Entity {
    Entity::TableEntry(common::l2crypt::forward(mac, port))
}

async fn write(
    c: &mut P4RuntimeClient<Channel>,
    updates: Vec<(Type, Entity)>,
) -> Result<(), tonic::Status> {
    common::write(c, 1, updates).await
}

async fn read(
    c: &mut P4RuntimeClient<Channel>,
    filter: Entity,
) -> Result<Vec<Entity>, tonic::Status> {
    common::read(c, 1, filter).await
}

async fn direct_count(c: &mut P4RuntimeClient<Channel>, mac: [u8; 6]) -> p4::CounterData {
    let got = read(
        c,
        Entity::DirectCounterEntry(p4::DirectCounterEntry {
            table_entry: Some(dmac_key(mac)),
            data: None,
        }),
    )
    .await
    .unwrap();
    let [Entity::DirectCounterEntry(e)] = got.as_slice() else {
        panic!("one direct counter entry: {got:?}")
    };
    e.data.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_data_plane_counts_hits_in_direct_counters() {
    let emu = start_dpdk(vec![1], vec![1], None).await;
    let mut c = P4RuntimeClient::connect(emu.p4runtime_url()).await.unwrap();
    let _stream = common::arbitrate(&mut c, 1).await;
    set_pipeline(&mut c, p4info()).await.unwrap();
    let (hit, idle) = (packet::dst_mac(0), [0x02, 0, 0, 0, 0x7f, 0x7f]);
    write(
        &mut c,
        vec![
            (Type::Insert, forward(hit, 1)),
            (Type::Insert, forward(idle, 2)),
        ],
    )
    .await
    .unwrap();

    let deadline = Instant::now() + Duration::from_secs(30);
    let counted = loop {
        let d = direct_count(&mut c, hit).await;
        if d.packet_count > 10 {
            break d;
        }
        assert!(Instant::now() < deadline, "no hits counted: {d:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(
        counted.byte_count >= counted.packet_count * 14,
        "bytes count whole frames: {counted:?}"
    );
    assert_eq!(direct_count(&mut c, idle).await, p4::CounterData::default());

    // A wildcard read returns every entry of the table with its counts.
    let all = read(
        &mut c,
        Entity::DirectCounterEntry(p4::DirectCounterEntry {
            table_entry: Some(p4::TableEntry {
                table_id: DMAC,
                ..Default::default()
            }),
            data: None,
        }),
    )
    .await
    .unwrap();
    assert_eq!(all.len(), 2);

    // MODIFY sets a counter (on the entry no traffic hits, so it holds
    // still), and MODIFY without data resets it.
    let set = |data| {
        vec![(
            Type::Modify,
            Entity::DirectCounterEntry(p4::DirectCounterEntry {
                table_entry: Some(dmac_key(idle)),
                data,
            }),
        )]
    };
    let five = p4::CounterData {
        packet_count: 5,
        byte_count: 500,
    };
    write(&mut c, set(Some(five))).await.unwrap();
    assert_eq!(direct_count(&mut c, idle).await, five);
    write(&mut c, set(None)).await.unwrap();
    assert_eq!(direct_count(&mut c, idle).await, p4::CounterData::default());
    write(&mut c, set(Some(five))).await.unwrap();
    // A deleted and re-inserted entry starts again at zero.
    write(&mut c, vec![(Type::Delete, forward(idle, 2))])
        .await
        .unwrap();
    write(&mut c, vec![(Type::Insert, forward(idle, 2))])
        .await
        .unwrap();
    assert_eq!(direct_count(&mut c, idle).await, p4::CounterData::default());
}

fn meter(index: i64, config: Option<p4::MeterConfig>) -> Entity {
    Entity::MeterEntry(p4::MeterEntry {
        meter_id: RATE,
        index: Some(p4::Index { index }),
        config,
        counter_data: None,
    })
}

fn register(index: i64, value: &[u8]) -> Entity {
    Entity::RegisterEntry(p4::RegisterEntry {
        register_id: SEEN,
        index: Some(p4::Index { index }),
        data: Some(p4::P4Data {
            data: Some(p4::p4_data::Data::Bitstring(value.to_vec())),
        }),
    })
}

fn cfg(cir: i64, cburst: i64, pir: i64, pburst: i64) -> Option<p4::MeterConfig> {
    Some(p4::MeterConfig {
        cir,
        cburst,
        pir,
        pburst,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counters_meters_and_registers_are_written_checked_and_read_back() {
    let emu = start_dpdk(vec![1], vec![1], None).await;
    let mut c = P4RuntimeClient::connect(emu.p4runtime_url()).await.unwrap();
    let _stream = common::arbitrate(&mut c, 1).await;

    // The P4Info's resources are checked when the pipeline is set.
    let mut bad = p4info();
    bad.direct_counters[0].direct_table_id = 7;
    let e = set_pipeline(&mut c, bad).await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(e.message().contains("unknown table id 7"), "{e:?}");
    set_pipeline(&mut c, p4info()).await.unwrap();
    let mac = [0x02, 0, 0, 0, 0x7f, 0x7f];
    write(&mut c, vec![(Type::Insert, forward(mac, 2))])
        .await
        .unwrap();

    // Good writes of every kind.
    write(
        &mut c,
        vec![
            (
                Type::Modify,
                Entity::CounterEntry(p4::CounterEntry {
                    counter_id: PORTS,
                    index: Some(p4::Index { index: 3 }),
                    data: Some(p4::CounterData {
                        byte_count: 640,
                        packet_count: 10,
                    }),
                }),
            ),
            (Type::Modify, meter(1, cfg(1000, 100, 2000, 200))),
            (
                Type::Modify,
                Entity::DirectMeterEntry(p4::DirectMeterEntry {
                    table_entry: Some(dmac_key(mac)),
                    config: cfg(10, 5, 20, 5),
                    counter_data: None,
                }),
            ),
            (Type::Modify, register(2, &[0, 0x0a, 0xbc])),
        ],
    )
    .await
    .unwrap();

    // One batch of bad writes: each refused with its own code, the good
    // one in the middle applied.
    let e = write(
        &mut c,
        vec![
            (Type::Modify, meter(0, cfg(2000, 100, 1000, 100))),
            (Type::Modify, register(16, &[1])),
            (Type::Modify, register(3, &[0x10, 0x00])),
            (Type::Modify, register(4, &[0x0f, 0xff])),
            (Type::Insert, meter(2, cfg(1, 1, 1, 1))),
            (
                Type::Modify,
                Entity::DirectCounterEntry(p4::DirectCounterEntry {
                    table_entry: Some(dmac_key([9; 6])),
                    data: None,
                }),
            ),
            (
                Type::Modify,
                Entity::CounterEntry(p4::CounterEntry {
                    counter_id: 42,
                    index: Some(p4::Index { index: 0 }),
                    data: None,
                }),
            ),
        ],
    )
    .await
    .unwrap_err();
    let errors = common::update_errors(&e);
    let codes: Vec<Code> = errors.iter().map(|(c, _)| *c).collect();
    assert_eq!(
        codes,
        [
            Code::InvalidArgument,
            Code::OutOfRange,
            Code::OutOfRange,
            Code::Ok,
            Code::InvalidArgument,
            Code::NotFound,
            Code::NotFound,
        ],
        "{errors:?}"
    );
    assert!(
        errors[0].1.contains("pir 1000 is below cir 2000"),
        "{errors:?}"
    );
    assert!(errors[1].1.contains("index 16 outside 0..16"), "{errors:?}");
    assert!(
        errors[2].1.contains("does not fit in 12 bits"),
        "{errors:?}"
    );

    // Read back: one index, and a wildcard over the whole array.
    let every_port = Entity::CounterEntry(p4::CounterEntry {
        counter_id: PORTS,
        ..Default::default()
    });
    let got = read(&mut c, every_port).await.unwrap();
    assert_eq!(got.len(), 8);
    let Entity::CounterEntry(three) = &got[3] else {
        panic!()
    };
    assert_eq!(three.data.as_ref().unwrap().packet_count, 10);
    assert_eq!(three.data.as_ref().unwrap().byte_count, 640);

    let got = read(&mut c, meter(1, None)).await.unwrap();
    let [Entity::MeterEntry(m)] = got.as_slice() else {
        panic!("{got:?}")
    };
    assert_eq!(m.config, cfg(1000, 100, 2000, 200));
    let got = read(&mut c, meter(0, None)).await.unwrap();
    let [Entity::MeterEntry(m)] = got.as_slice() else {
        panic!("{got:?}")
    };
    assert_eq!(
        m.config, None,
        "the refused config left meter 0 unconfigured"
    );

    let got = read(
        &mut c,
        Entity::DirectMeterEntry(p4::DirectMeterEntry {
            table_entry: Some(dmac_key(mac)),
            config: None,
            counter_data: None,
        }),
    )
    .await
    .unwrap();
    let [Entity::DirectMeterEntry(m)] = got.as_slice() else {
        panic!("{got:?}")
    };
    assert_eq!(m.config, cfg(10, 5, 20, 5));

    let value = |e: &Entity| match e {
        Entity::RegisterEntry(r) => match r.data.as_ref().unwrap().data.as_ref().unwrap() {
            p4::p4_data::Data::Bitstring(b) => b.clone(),
            other => panic!("{other:?}"),
        },
        other => panic!("{other:?}"),
    };
    let every_cell = Entity::RegisterEntry(p4::RegisterEntry {
        register_id: SEEN,
        ..Default::default()
    });
    let got = read(&mut c, every_cell).await.unwrap();
    assert_eq!(got.len(), 16);
    assert_eq!(value(&got[2]), [0x0a, 0xbc], "canonical: padding dropped");
    assert_eq!(value(&got[3]), [0], "the refused value left it at zero");
    assert_eq!(value(&got[4]), [0x0f, 0xff]);

    // A read of an index out of range fails the read.
    let e = read(&mut c, register(99, &[0])).await.unwrap_err();
    assert_eq!(e.code(), Code::OutOfRange);
}
