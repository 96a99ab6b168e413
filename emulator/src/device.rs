//! One emulated device: the state each front end keeps for it, and what
//! they share (counters, the latency profile's busy time). Everything here
//! is synchronous; callers never hold a lock across an await.
//!
//! A new kind of device part (e.g. an FPGA board's slots) goes here beside
//! the others, with the front end serving it in a module of its own.

use std::sync::{Arc, Mutex};

use tonic::Status;

use crate::bfrt::BfrtDevice;
use crate::fpga::SlotLink;
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
    /// The FPGA slot this device is, if it is one (`crate::fpga`): the
    /// board installs and removes its pipeline.
    pub fpga_slot: Option<Arc<SlotLink>>,
    /// Faults armed through the side channel (`crate::faults`).
    pub faults: crate::faults::Faults,
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
            fpga_slot: None,
            faults: Default::default(),
        }
    }

    /// The P4Runtime device of an FPGA slot.
    pub fn fpga_slot(id: u64, link: Arc<SlotLink>) -> Device {
        Device {
            fpga_slot: Some(link),
            ..Device::new(id)
        }
    }

    /// The device with P4Runtime arbitration under `mode`.
    pub fn with_arbitration(self, mode: crate::ArbitrationMode) -> Device {
        *self.p4runtime.arbitration.lock().expect("arbitration lock") =
            crate::p4runtime::arbitration::Arbitration::with_mode(mode);
        self
    }

    /// The device with RECONCILE_AND_COMMIT taken (`on`) or answered
    /// UNIMPLEMENTED.
    /// The device with a Tofino chip of `pipes` hardware pipes (BFRT).
    pub fn with_tofino_pipes(self, pipes: u32) -> Device {
        self.bfrt.lock().expect("bfrt lock").pipes = pipes;
        self
    }

    pub fn with_reconcile(self, on: bool) -> Device {
        self.p4runtime
            .pipeline
            .lock()
            .expect("pipeline lock")
            .reconcile_disabled = !on;
        self
    }

    /// Why a Write or Read finds no pipeline.
    pub fn no_pipeline(&self) -> Status {
        match &self.fpga_slot {
            Some(link) => link.no_pipeline(self.id),
            None => Status::failed_precondition("no forwarding pipeline config"),
        }
    }

    /// SetForwardingPipelineConfig is refused on FPGA slots: their
    /// pipeline comes with their bitstream.
    pub fn check_pipeline_settable(&self) -> Result<(), Status> {
        match &self.fpga_slot {
            Some(link) => Err(link.pipeline_is_fixed(self.id)),
            None => Ok(()),
        }
    }
}
