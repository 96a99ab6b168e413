//! The l2crypt example as the tests load it: its artifacts, its P4Info ids
//! (l2switch's too: l2crypt is l2switch with externs, and p4c gave both
//! the same ids), its packed Dpdk pipeline config and its entries.

use std::time::Duration;

use p4fleet_emulator::{DpdkConfig, Emulator, EmulatorConfig, RunningEmulator};
use p4fleet_model::pipeline_config::BfPipelineConfig;
use p4fleet_proto::externs as pb;
use p4fleet_proto::p4runtime as p4;

use super::entity::{action, exact};

pub const SPEC: &str = include_str!("../../../examples/l2crypt/l2crypt.spec");
pub const MAILBOX_SPEC: &str = include_str!("../../../examples/l2crypt/l2crypt_mailbox.spec");
pub const P4INFO: &str = include_str!("../../../examples/l2crypt/p4info.txt");
pub const BFRT: &str = include_str!("../../../examples/l2crypt/bfrt.json");
pub const CONTEXT: &str = include_str!("../../../examples/l2crypt/context.json");
pub const SMAC: u32 = 41683160;
pub const DMAC: u32 = 44918510;
pub const NO_ACTION: u32 = 21257015;
pub const FORWARD: u32 = 29683729;
pub const DROP: u32 = 25652968;
/// The port `dmac`'s default action floods to.
pub const FLOOD: u32 = 255;

/// An emulator with `devices`, of which `dpdk` are Dpdk targets whose
/// data plane samples its stats every 100 ms.
pub async fn start_dpdk(
    devices: Vec<u64>,
    dpdk: Vec<u64>,
    extern_cores: Option<u32>,
) -> RunningEmulator {
    Emulator::start(EmulatorConfig {
        device_ids: devices,
        dpdk: Some(DpdkConfig {
            device_ids: dpdk,
            extern_cores,
            stats_interval: Duration::from_millis(100),
            ..DpdkConfig::default()
        }),
        ..Default::default()
    })
    .await
    .unwrap()
}

/// `spec` packed with l2crypt's bfrt.json and context.json into the
/// `BfPipelineConfig` a Dpdk device takes.
pub fn packed(spec: &str) -> Vec<u8> {
    BfPipelineConfig::dpdk(
        "l2crypt",
        BFRT.as_bytes().to_vec(),
        CONTEXT.as_bytes().to_vec(),
        spec.as_bytes().to_vec(),
    )
    .pack()
}

/// The `dmac` key of `mac`.
pub fn dmac_key(mac: [u8; 6]) -> p4::TableEntry {
    p4::TableEntry {
        table_id: DMAC,
        r#match: vec![exact(1, &mac)],
        ..Default::default()
    }
}

/// `dmac`: `mac` -> forward(`port`).
pub fn forward(mac: [u8; 6], port: u8) -> p4::TableEntry {
    p4::TableEntry {
        action: action(FORWARD, &[&[port]]),
        ..dmac_key(mac)
    }
}

/// Asserts that `list` is l2crypt's: its two externs, in order.
pub fn assert_l2crypt_externs(list: &pb::ListExternsResponse) {
    assert_eq!(list.pipeline, "l2crypt");
    let names: Vec<_> = list.externs.iter().map(|x| x.name.as_str()).collect();
    assert_eq!(names, ["async_encrypt", "async_decrypt"]);
}
