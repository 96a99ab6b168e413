//! Counters, registers and meters over BFRT, through rbfrt (a real BFRT
//! client, unchanged): a match table's direct counter (`$COUNTER_SPEC_*`
//! data on each entry, kept by a MODIFY that leaves them out), an indirect
//! counter table, a register table read once per pipe, a meter table; and
//! the refusals a bf_switchd gives (index out of range, a register without
//! its data, a deleted cell, an unknown field). `examples/counted`.

mod common;

use p4fleet_emulator::{Emulator, EmulatorError, RunningEmulator};
use p4fleet_proto::bfrt::{
    self, DataField, KeyField, TableData, TableEntry, TableKey,
    data_field::Value,
    key_field::{Exact, MatchType},
    update::Type,
};
use rbfrt::SwitchConnection;
use rbfrt::register;
use rbfrt::table::{MatchValue, Request, ToBytes};
use tonic::Code;

const BFRT: &str = include_str!("../../examples/counted/bfrt.json");
const DMAC: &str = "MyIngress.dmac";
const PORT_COUNTER: &str = "MyIngress.port_counter";
const REGISTER: &str = "MyIngress.port_last_seen";
const F1: &str = "MyIngress.port_last_seen.f1";
const METER: &str = "MyIngress.port_meter";
const REGISTER_ID: u32 = 383189205;

/// The emulator with `counted` loaded through rbfrt's config file on
/// pipes 0 and 1 (so a register reads back twice), and rbfrt connected.
async fn start() -> (RunningEmulator, SwitchConnection, tempfile::TempDir) {
    let emu = Emulator::start(common::rbfrt::config(vec![0]))
        .await
        .unwrap();
    let addr = emu.bfrt_addr().unwrap();
    let (switch, dir) = common::rbfrt::load(addr, 1, "counted", BFRT, &[0, 1], &[0, 1]).await;
    (emu, switch, dir)
}

fn dmac(mac: u64) -> Request {
    Request::new(DMAC).match_key(
        "hdr.ethernet.dstAddr",
        MatchValue::exact(mac.to_be_bytes()[2..].to_vec()),
    )
}

/// `dmac`: `mac` -> forward(`port`).
fn forward(mac: u64, port: u32) -> Request {
    dmac(mac)
        .action("MyIngress.forward")
        .action_data("port", port)
}

fn u64_of(e: &rbfrt::table::TableEntry, name: &str) -> u64 {
    let v = e.get_action_data(name).unwrap().get_data();
    assert_eq!(v.len(), 8, "{name} is a full-width uint64");
    u64::from_be_bytes(v.as_slice().try_into().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn direct_counters_start_at_zero_are_set_and_kept_by_modify() {
    let (emu, switch, _dir) = start().await;
    switch.write_table_entry(forward(1, 3)).await.unwrap();
    let e = &switch.get_table_entries(dmac(1)).await.unwrap()[0];
    assert_eq!(u64_of(e, "$COUNTER_SPEC_PKTS"), 0);
    assert_eq!(u64_of(e, "$COUNTER_SPEC_BYTES"), 0);

    // A MODIFY with counter data sets the counts.
    switch
        .update_table_entry(
            forward(1, 3)
                .action_data("$COUNTER_SPEC_PKTS", 10u64)
                .action_data("$COUNTER_SPEC_BYTES", 640u64),
        )
        .await
        .unwrap();
    // One that changes the action only keeps them.
    switch.update_table_entry(forward(1, 4)).await.unwrap();
    let all = switch.get_table_entries(Request::new(DMAC)).await.unwrap();
    assert_eq!(all.len(), 1);
    assert_eq!(all[0].get_action_data("port").unwrap().as_u32(), 4);
    assert_eq!(u64_of(&all[0], "$COUNTER_SPEC_PKTS"), 10);
    assert_eq!(u64_of(&all[0], "$COUNTER_SPEC_BYTES"), 640);

    // Counter values are full width (8 bytes): a short one is refused.
    let data = TableData {
        action_id: 25652968,
        fields: vec![DataField {
            field_id: 65554,
            value: Some(Value::Stream(vec![1])),
        }],
    };
    let short = exact_entry(44918510, 1, vec![0, 0, 0, 0, 0, 1], data);
    assert_eq!(
        code(emu.emulator().bfrt_apply(0, "counted", Type::Modify, short)),
        Code::InvalidArgument
    );
    emu.shutdown().await.unwrap();
}

fn code(r: Result<(), EmulatorError>) -> Code {
    match r {
        Err(EmulatorError::Update(e)) => e.code,
        other => panic!("expected an update error, got {other:?}"),
    }
}

/// An entry of `table_id` keyed by one exact field, with `data`.
fn exact_entry(table_id: u32, field_id: u32, value: Vec<u8>, data: TableData) -> TableEntry {
    TableEntry {
        table_id,
        value: Some(bfrt::table_entry::Value::Key(TableKey {
            fields: vec![KeyField {
                field_id,
                match_type: Some(MatchType::Exact(Exact { value })),
            }],
        })),
        data: Some(data),
        ..Default::default()
    }
}

fn register_cell(index: u32, fields: Vec<DataField>) -> TableEntry {
    let data = TableData {
        action_id: 0,
        fields,
    };
    exact_entry(REGISTER_ID, 65557, index.to_be_bytes().to_vec(), data)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registers_are_written_by_index_and_read_once_per_pipe() {
    let (emu, switch, _dir) = start().await;
    switch
        .write_register_entry(
            register::Request::new(REGISTER)
                .index(7)
                .data(F1, 0xdeadu32),
        )
        .await
        .unwrap();
    let one = switch
        .get_register_entry(register::Request::new(REGISTER).index(7))
        .await
        .unwrap();
    let values = one.get(7).unwrap().get(F1).unwrap();
    assert_eq!(values.len(), 2, "one value per pipe of the program (0, 1)");
    assert!(values.iter().all(|v| v.to_u32() == 0xdead && v.len() == 4));

    // Every cell exists: the whole array reads back, unwritten cells 0.
    let all = switch
        .get_register_entry(register::Request::new(REGISTER))
        .await
        .unwrap();
    assert_eq!(all.entries().len(), 512);
    assert_eq!(all.get(8).unwrap().get(F1).unwrap()[0].to_u32(), 0);

    // Refusals, with bf_switchd's codes.
    let f1 = |v: Vec<u8>| DataField {
        field_id: 1,
        value: Some(Value::Stream(v)),
    };
    let apply = |ty, e| code(emu.emulator().bfrt_apply(0, "counted", ty, e));
    assert_eq!(
        apply(Type::Modify, register_cell(512, vec![f1(vec![0, 0, 0, 1])])),
        Code::InvalidArgument
    );
    assert_eq!(
        apply(Type::Modify, register_cell(1, vec![])),
        Code::InvalidArgument
    );
    assert_eq!(
        apply(Type::Modify, register_cell(1, vec![f1(vec![0, 1])])),
        Code::InvalidArgument
    );
    let unknown = DataField {
        field_id: 2,
        value: Some(Value::Stream(vec![0, 0, 0, 1])),
    };
    assert_eq!(
        apply(Type::Modify, register_cell(1, vec![unknown])),
        Code::InvalidArgument
    );
    assert_eq!(
        apply(Type::Delete, register_cell(7, vec![])),
        Code::Unimplemented
    );
    // INSERT of a cell is a MODIFY (every cell exists).
    emu.emulator()
        .bfrt_apply(
            0,
            "counted",
            Type::Insert,
            register_cell(7, vec![f1(vec![0, 0, 0, 9])]),
        )
        .unwrap();
    let one = switch
        .get_register_entry(register::Request::new(REGISTER).index(7))
        .await
        .unwrap();
    assert_eq!(one.get(7).unwrap().get(F1).unwrap()[1].to_u32(), 9);

    // A delete without key resets the array.
    switch.clear_table(REGISTER).await.unwrap();
    let one = switch
        .get_register_entry(register::Request::new(REGISTER).index(7))
        .await
        .unwrap();
    assert_eq!(one.get(7).unwrap().get(F1).unwrap()[0].to_u32(), 0);
    emu.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn indirect_counters_and_meters_are_arrays() {
    let (emu, switch, _dir) = start().await;
    let cell =
        |i: u32| Request::new(PORT_COUNTER).match_key("$COUNTER_INDEX", MatchValue::exact(i));
    switch
        .write_table_entry(cell(5).action_data("$COUNTER_SPEC_PKTS", 3u64))
        .await
        .unwrap();
    let e = &switch.get_table_entries(cell(5)).await.unwrap()[0];
    assert_eq!(u64_of(e, "$COUNTER_SPEC_PKTS"), 3);
    assert_eq!(u64_of(e, "$COUNTER_SPEC_BYTES"), 0);
    // Setting the bytes later keeps the packets.
    switch
        .update_table_entry(cell(5).action_data("$COUNTER_SPEC_BYTES", 300u64))
        .await
        .unwrap();
    let all = switch
        .get_table_entries(Request::new(PORT_COUNTER))
        .await
        .unwrap();
    assert_eq!(all.len(), 512);
    let five = all
        .iter()
        .find(|e| {
            e.get_key("$COUNTER_INDEX")
                .unwrap()
                .get_exact_value()
                .to_u32()
                == 5
        })
        .unwrap();
    assert_eq!(
        (
            u64_of(five, "$COUNTER_SPEC_PKTS"),
            u64_of(five, "$COUNTER_SPEC_BYTES")
        ),
        (3, 300)
    );
    assert!(
        switch.get_table_entries(cell(512)).await.is_err(),
        "index 512 of 512"
    );
    switch.clear_table(PORT_COUNTER).await.unwrap();
    let e = &switch.get_table_entries(cell(5)).await.unwrap()[0];
    assert_eq!(u64_of(e, "$COUNTER_SPEC_PKTS"), 0);

    // Meters: unset rates and bursts read back as the largest value.
    let m = |i: u32| Request::new(METER).match_key("$METER_INDEX", MatchValue::exact(i));
    switch
        .write_table_entry(
            m(2).action_data("$METER_SPEC_CIR_PPS", 1000u64)
                .action_data("$METER_SPEC_PIR_PPS", 2000u64),
        )
        .await
        .unwrap();
    let e = &switch.get_table_entries(m(2)).await.unwrap()[0];
    assert_eq!(u64_of(e, "$METER_SPEC_CIR_PPS"), 1000);
    assert_eq!(u64_of(e, "$METER_SPEC_PIR_PPS"), 2000);
    assert_eq!(u64_of(e, "$METER_SPEC_CBS_PKTS"), u64::MAX);
    emu.shutdown().await.unwrap();
}
