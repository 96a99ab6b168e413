//! An emulated FPGA board virtualized the P4VBox way: a static region and
//! N slots, each a reconfigurable region running one P4 program loaded as
//! a partial bitstream, served over p4fleet's slot service
//! (`p4fleet.fpga.v1`, on the P4Runtime port) and, per slot, as a
//! P4Runtime device (`base_device_id + slot`) for its table entries.
//! docs/fpga.md has the contract and the timing model.
//!
//! | module | job |
//! |---|---|
//! | `spec` | what a board is; presets; configuration-time arithmetic |
//! | `resources` | resource amounts and what does not fit |
//! | `isolation` | Sids (VLAN + dst MAC), port maps, clash checks, steering |
//! | `traffic` | the built-in traffic source and its time-based counters |
//! | `bitstream` | synthetic bitstreams, the sync-word check, sha256 |
//! | `state` | the board's state machine (pure) |
//! | `board` | the board at run time: lock, configuration port, devices |
//! | `slot_link` | what a slot's P4Runtime device knows of its slot |
//! | `service` | the gRPC slot service (uploads verified here) |
//! | `error` | why a call is refused: gRPC code plus typed detail |
//! | `http` | board, slots, counters and traffic on the side channel |
//! | `cli` | the binary's `--fpga*` flags and `fpga-*` subcommands |
//! | `p4vbox` | P4VBox's programs: example P4Info and Table I resources |
//! | `bench` | the swap benchmark (`p4fleet-emulator fpga-bench`) |
//! | `upload` | the messages of an upload stream (client side) |

mod bench;
pub mod bitstream;
mod board;
pub mod cli;
mod error;
mod http;
mod isolation;
pub mod p4vbox;
mod resources;
mod service;
mod slot_link;
mod spec;
mod state;
mod traffic;
pub mod upload;

use std::sync::Arc;

use p4fleet_proto::fpga::slot_service_server::SlotServiceServer;

pub(crate) use board::Board;
pub use isolation::Sid;
pub use service::BoardService;
pub(crate) use slot_link::SlotLink;
pub use spec::{
    BoardSpec, ConfigPort, EthernetPort, FpgaConfig, JTAG_NOMINAL_BPS, P4VBOX_JTAG_BPS,
    ResourceSpec, UnknownPreset, XC7VX690T_FULL_BITS, p4vbox_effective,
};
pub use traffic::{FlowSpec, Target};

use crate::Emulator;
use crate::device::Device;

/// Why an FPGA configuration cannot run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FpgaConfigError {
    #[error("fpga: {0}")]
    Invalid(String),
    #[error("device id {0} is both an FPGA slot and a plain device")]
    DuplicateDevice(u64),
}

impl FpgaConfig {
    /// Checks that the board can run, and that no slot's device id is one
    /// of `device_ids`.
    pub fn validate(&self, device_ids: &[u64]) -> Result<(), FpgaConfigError> {
        let b = &self.board;
        let invalid = |m: &str| Err(FpgaConfigError::Invalid(m.to_string()));
        if b.slots == 0 {
            return invalid("a board needs at least one slot");
        }
        if b.config_port.bps == 0 {
            return invalid("the configuration port's speed must be above 0 bits/s");
        }
        if b.full_bitstream_bits == 0 {
            return invalid("the full bitstream size must be above 0 bits");
        }
        if b.base_device_id.checked_add(u64::from(b.slots)).is_none() {
            return invalid("slot device ids overflow");
        }
        for (i, r) in b.resources.iter().enumerate() {
            if r.static_region > r.capacity {
                return Err(FpgaConfigError::Invalid(format!(
                    "resource {}: static region {} exceeds capacity {}",
                    r.name, r.static_region, r.capacity
                )));
            }
            if b.resources[..i].iter().any(|o| o.name == r.name) {
                return Err(FpgaConfigError::Invalid(format!(
                    "resource {} is listed twice",
                    r.name
                )));
            }
        }
        if let Some(id) = b.device_ids().find(|id| device_ids.contains(id)) {
            return Err(FpgaConfigError::DuplicateDevice(id));
        }
        Ok(())
    }
}

/// The P4Runtime devices of the board's slots, in slot order.
pub(crate) fn slot_devices(config: &FpgaConfig) -> Vec<Device> {
    (0..config.board.slots)
        .map(|s| Device::fpga_slot(config.board.device_id(s), Arc::new(SlotLink::new(s))))
        .collect()
}

impl Emulator {
    /// The slot service of the FPGA board, if the emulator has one.
    pub fn slot_service(&self) -> Option<SlotServiceServer<BoardService>> {
        let board = self.fpga.clone()?;
        Some(
            SlotServiceServer::new(BoardService { board })
                .max_decoding_message_size(self.max_message_size)
                .max_encoding_message_size(self.max_message_size),
        )
    }

    /// The FPGA board's spec, if the emulator has one.
    pub fn fpga_board(&self) -> Option<&BoardSpec> {
        self.fpga.as_deref().map(|b| &*b.spec)
    }

    /// Routes of the FPGA side channel (empty without a board).
    pub(crate) fn fpga_routes(&self) -> axum::Router {
        match &self.fpga {
            Some(board) => http::router(board.clone()),
            None => axum::Router::new(),
        }
    }
}
