//! One emulated device: the state each front end keeps for it, and what
//! they share (counters, the latency profile's busy time). Everything here
//! is synchronous; callers never hold a lock across an await.
//!
//! A new kind of device part (e.g. an FPGA board's slots) goes here beside
//! the others, with the front end serving it in a module of its own.

use std::sync::Mutex;

use crate::bfrt::BfrtDevice;
use crate::p4runtime::P4RuntimeDevice;
use crate::profile::BusyUntil;
use crate::stats::Counters;

pub(crate) struct Device {
    pub id: u64,
    /// P4Runtime pipeline, table contents and arbitration (see
    /// `crate::p4runtime`).
    pub p4runtime: P4RuntimeDevice,
    /// BFRT programs, fixed tables and clients (see `crate::bfrt`).
    pub bfrt: Mutex<BfrtDevice>,
    pub counters: Counters,
    /// Serialized write work under a latency profile (`crate::profile`).
    pub busy: BusyUntil,
    /// A DPDK target's data plane settings and pipeline state
    /// (`crate::dpdk`); `None` for other devices.
    pub dpdk: Option<crate::dpdk::DpdkDevice>,
}

impl Device {
    /// A P4 switch serving P4Runtime and BFRT, with nothing loaded.
    pub fn new(id: u64) -> Device {
        Device {
            id,
            p4runtime: P4RuntimeDevice::default(),
            bfrt: Mutex::new(BfrtDevice::default()),
            counters: Counters::default(),
            busy: BusyUntil::default(),
            dpdk: None,
        }
    }
}
