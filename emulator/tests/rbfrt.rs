//! The `rbfrt` crate (a real BFRT client, crates.io) against the emulator,
//! unchanged: load a program through rbfrt's config file path or bind to a
//! preloaded one, write firewall entries in a batch, read them back, modify,
//! delete.

mod common;

use std::net::Ipv4Addr;

use p4fleet_emulator::{BfrtProgram, Emulator, EmulatorConfig, RunningEmulator};
use rbfrt::SwitchConnection;
use rbfrt::error::RBFRTError;
use rbfrt::table::{MatchValue, Request, ToBytes};

const FIREWALL_BFRT: &str = include_str!("../../examples/firewall/bfrt.json");
const TABLE: &str = "MyIngress.firewall";

async fn start(preload: bool) -> RunningEmulator {
    let bfrt_programs = if preload {
        vec![BfrtProgram {
            name: "firewall".into(),
            bfrt_json: FIREWALL_BFRT.as_bytes().to_vec(),
        }]
    } else {
        vec![]
    };
    Emulator::start(EmulatorConfig {
        bfrt_programs,
        ..common::rbfrt::config(vec![0, 1])
    })
    .await
    .unwrap()
}

fn entry(i: u32) -> Request {
    key(i)
        .action("MyIngress.allow")
        .action_data("port", i % 512)
}

/// Firewall key `i`: src 10.0.0.0 + i, dst 192.168.0.1.
fn key(i: u32) -> Request {
    Request::new(TABLE)
        .match_key(
            "hdr.ipv4.srcAddr",
            MatchValue::exact(Ipv4Addr::from(0x0a00_0000 + i)),
        )
        .match_key("hdr.ipv4.dstAddr", MatchValue::exact(0xc0a8_0001u32))
}

/// How many entries the firewall table holds.
async fn count(switch: &SwitchConnection) -> usize {
    let all = switch.get_table_entries(Request::new(TABLE)).await;
    all.unwrap().len()
}

/// rbfrt as client 1 of device 1, bound to the preloaded firewall.
async fn bind_firewall(emu: &RunningEmulator) -> Result<SwitchConnection, RBFRTError> {
    let addr = emu.bfrt_addr().unwrap();
    common::rbfrt::builder(addr, 1, 1)
        .p4_name("firewall")
        .connect()
        .await
}

async fn exercise(switch: &SwitchConnection, emu: &RunningEmulator, device: u64) {
    assert!(switch.has_table(TABLE));
    assert!(switch.has_table("$PORT"), "fixed tables are advertised");

    // One batch of 500 inserts.
    let batch: Vec<Request> = (0..500).map(entry).collect();
    switch.write_table_entries(batch).await.unwrap();
    assert_eq!(
        emu.stats(device).unwrap().tables[&format!("pipe.{TABLE}")],
        500
    );

    // Read the whole table back, full-width values.
    let all = switch.get_table_entries(Request::new(TABLE)).await.unwrap();
    assert_eq!(all.len(), 500);
    for e in &all {
        let src = e.get_key("hdr.ipv4.srcAddr").unwrap().get_exact_value();
        assert_eq!(src.len(), 4);
        let i = src.to_u32() - 0x0a00_0000;
        assert_eq!(e.get_action_name(), "MyIngress.allow");
        let port = e.get_action_data("port").unwrap();
        assert_eq!(port.get_data().len(), 2, "9-bit data is 2 bytes");
        assert_eq!(port.as_u32(), i % 512);
    }

    // One key.
    let one = switch.get_table_entries(key(7)).await.unwrap();
    assert_eq!(one.len(), 1);
    assert_eq!(one[0].get_action_data("port").unwrap().as_u32(), 7);

    // Modify, then read it again.
    switch
        .update_table_entry(key(7).action("MyIngress.allow").action_data("port", 300u32))
        .await
        .unwrap();
    let one = switch.get_table_entries(key(7)).await.unwrap();
    assert_eq!(one[0].get_action_data("port").unwrap().as_u32(), 300);
    switch
        .update_table_entry(key(8).action("MyIngress.drop"))
        .await
        .unwrap();
    let one = switch.get_table_entries(key(8)).await.unwrap();
    assert_eq!(one[0].get_action_name(), "MyIngress.drop");

    // A duplicate insert fails.
    assert!(switch.write_table_entry(entry(3)).await.is_err());

    // Delete half in one batch, clear the rest.
    let dels: Vec<Request> = (0..250).map(key).collect();
    switch.delete_table_entries(dels).await.unwrap();
    assert_eq!(count(switch).await, 250);
    assert!(
        switch.delete_table_entry(key(1)).await.is_err(),
        "already deleted"
    );
    switch.clear_table(TABLE).await.unwrap();
    assert_eq!(count(switch).await, 0);
    let s = emu.stats(device).unwrap();
    assert_eq!(s.inserts, 500);
    assert_eq!(s.deletes, 500);
    assert_eq!(s.entries, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rbfrt_binds_to_a_preloaded_program() {
    let emu = start(true).await;
    let switch = bind_firewall(&emu).await.unwrap();
    exercise(&switch, &emu, 1).await;
    emu.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rbfrt_loads_a_program_from_its_config_file() {
    let emu = start(false).await;
    let addr = emu.bfrt_addr().unwrap();
    let (switch, _dir) = common::rbfrt::load(
        addr,
        5,
        "firewall",
        FIREWALL_BFRT,
        &[0, 1, 2, 3],
        &[0, 1, 2, 3],
    )
    .await;
    assert_eq!(emu.stats(0).unwrap().bfrt_programs, vec!["firewall"]);
    assert!(emu.stats(1).unwrap().bfrt_programs.is_empty());
    exercise(&switch, &emu, 0).await;
    emu.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rbfrt_cannot_bind_to_a_missing_program() {
    let emu = start(false).await;
    assert!(bind_firewall(&emu).await.is_err());
    emu.shutdown().await.unwrap();
}
