//! What the P4Runtime device of an FPGA slot knows of its slot: which one
//! it is and its phase, so the P4Runtime front end can say why the tables
//! are not writable and why the pipeline cannot be set there. The board
//! updates the phase under its lock at every transition; it installs and
//! removes the device's pipeline itself.

use std::sync::atomic::{AtomicU8, Ordering};

use tonic::Status;

use super::state::Phase;

pub(crate) struct SlotLink {
    pub slot: u32,
    phase: AtomicU8,
}

impl SlotLink {
    pub fn new(slot: u32) -> SlotLink {
        SlotLink {
            slot,
            phase: AtomicU8::new(Phase::Empty as u8),
        }
    }

    pub fn set(&self, phase: Phase) {
        self.phase.store(phase as u8, Ordering::Release);
    }

    pub fn phase(&self) -> Phase {
        match self.phase.load(Ordering::Acquire) {
            x if x == Phase::Loading as u8 => Phase::Loading,
            x if x == Phase::Loaded as u8 => Phase::Loaded,
            x if x == Phase::Failed as u8 => Phase::Failed,
            _ => Phase::Empty,
        }
    }

    /// Why device `id` has no pipeline to write to or read from.
    pub fn no_pipeline(&self, id: u64) -> Status {
        let why = match self.phase() {
            Phase::Loading => {
                "Loading (partial reconfiguration in progress); its tables are writable once it is Loaded"
            }
            Phase::Empty => "Empty; load a program with p4fleet.fpga.v1.SlotService/LoadSlot first",
            Phase::Failed => {
                "Failed (its last load did not configure); load a program with p4fleet.fpga.v1.SlotService/LoadSlot"
            }
            Phase::Loaded => "Loaded but has no pipeline",
        };
        Status::failed_precondition(format!(
            "device {id} is FPGA slot {}, which is {why}",
            self.slot
        ))
    }

    /// Why SetForwardingPipelineConfig is refused on device `id`.
    pub fn pipeline_is_fixed(&self, id: u64) -> Status {
        Status::unimplemented(format!(
            "device {id} is FPGA slot {}: its pipeline is the P4Info loaded with its bitstream \
             (p4fleet.fpga.v1.SlotService/LoadSlot); SetForwardingPipelineConfig is not supported",
            self.slot
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phases_round_trip_and_messages_say_why() {
        let l = SlotLink::new(3);
        for p in [Phase::Loading, Phase::Loaded, Phase::Failed, Phase::Empty] {
            l.set(p);
            assert_eq!(l.phase(), p);
        }
        l.set(Phase::Loading);
        let s = l.no_pipeline(4);
        assert_eq!(s.code(), tonic::Code::FailedPrecondition);
        assert!(
            s.message()
                .starts_with("device 4 is FPGA slot 3, which is Loading"),
            "{}",
            s.message()
        );
        assert_eq!(l.pipeline_is_fixed(4).code(), tonic::Code::Unimplemented);
    }
}
