//! Loading a program into an FPGA slot through the board's slot service
//! (docs/fpga.md): the partial bitstream streamed with its sha256 and the
//! P4Info in the LoadSlot header, then the slot's isolation and port map,
//! then a read-back of the slot: the load counts only when the device
//! reports the program's digest Loaded. A slot that already runs the
//! digest is not reloaded (a resync never swaps).

use std::time::{Duration, Instant};

use p4fleet_client::SlotCallError;
use p4fleet_crds::{Switch, UpdateStrategyType, VirtualSwitchSpec};
use p4fleet_proto::fpga as pb;

use super::pipeline::ReadyProgram;
use crate::artifacts::field;
use crate::devices;

/// Why a slot load failed; the message names the field or the device's reason.
#[derive(Debug, thiserror::Error)]
pub enum SlotLoadError {
    #[error("{field}: P4Program {0} has no FPGA bitstream, which an Fpga Switch loads", field = field::FPGA_BITSTREAM)]
    MissingBitstream(String),
    #[error(transparent)]
    Device(#[from] SlotCallError),
    #[error("spec.isolation.dstMac {0:?} is not a MAC address")]
    BadMac(String),
    /// The read-back does not show the program Loaded.
    #[error("slot {slot} reports {phase:?} with program {found:?} after loading {expected}")]
    NotConfirmed {
        slot: u32,
        phase: pb::SlotPhase,
        found: String,
        expected: String,
    },
}

impl SlotLoadError {
    /// The `PipelineLoaded` condition's reason.
    pub fn reason(&self) -> &'static str {
        match self {
            SlotLoadError::MissingBitstream(_) => "MissingFpgaBitstream",
            SlotLoadError::BadMac(_) => "InvalidIsolation",
            SlotLoadError::NotConfirmed { .. } => "NotConfirmed",
            SlotLoadError::Device(SlotCallError::NotServed { .. }) => "SlotServiceNotServed",
            SlotLoadError::Device(e) => match e.reason() {
                Some(pb::Reason::InsufficientResources) => "InsufficientResources",
                Some(pb::Reason::SidInUse) | Some(pb::Reason::VlanPortShared) => {
                    "IsolationConflict"
                }
                Some(pb::Reason::UnknownPort) | Some(pb::Reason::BadPortMap) => "InvalidPortMap",
                Some(pb::Reason::SlotBusy) | Some(pb::Reason::BoardConfiguring) => "SlotBusy",
                _ => "LoadFailed",
            },
        }
    }
}

/// What a slot load did.
#[derive(Debug, Clone, PartialEq)]
pub struct SlotLoad {
    /// Set when this reconcile loaded the program.
    pub loaded: Option<Loaded>,
}

/// A load this reconcile made.
#[derive(Debug, Clone, PartialEq)]
pub struct Loaded {
    /// The program it replaced (a swap), if the slot ran another one.
    pub from_digest: Option<String>,
    /// How the old program went: `Recreate` only when the slot was
    /// unloaded first (it ran a program and the spec asked for it).
    pub strategy: UpdateStrategyType,
    /// The slot's time in Loading, as the device measured it.
    pub device: Duration,
    /// Everything: upload, load, isolation, port map, read-back.
    pub total: Duration,
}

/// The `Isolation` of a spec, as the slot service takes it.
pub fn isolation(spec: &VirtualSwitchSpec) -> Result<Option<pb::Isolation>, SlotLoadError> {
    let Some(iso) = &spec.isolation else {
        return Ok(None);
    };
    let dst_mac = match &iso.dst_mac {
        None => Vec::new(),
        Some(m) => {
            let bytes: Result<Vec<u8>, _> =
                m.split(':').map(|b| u8::from_str_radix(b, 16)).collect();
            match bytes {
                Ok(b) if b.len() == 6 => b,
                _ => return Err(SlotLoadError::BadMac(m.clone())),
            }
        }
    };
    Ok(Some(pb::Isolation {
        vlan_id: u32::from(iso.vlan),
        dst_mac,
    }))
}

/// The port map of a spec, as the slot service takes it.
pub fn port_map(spec: &VirtualSwitchSpec) -> Vec<pb::PortMapping> {
    spec.port_map
        .iter()
        .map(|m| pb::PortMapping {
            physical_port: m.physical,
            virtual_port: m.virtual_port,
        })
        .collect()
}

/// Loads `program` into `slot` of FPGA Switch `sw` unless it already runs
/// it, then sets its isolation and port map and reads the slot back.
pub async fn load(
    devices: &devices::DevicePool,
    sw: &Switch,
    slot: u32,
    spec: &VirtualSwitchSpec,
    program: &ReadyProgram,
) -> Result<SlotLoad, SlotLoadError> {
    let started = Instant::now();
    let client = devices.slot_client(sw).map_err(SlotCallError::from)?;
    let iso = isolation(spec)?;
    let ports = port_map(spec);
    let before = client.slot_state(slot).await?;
    let running =
        before.phase() == pb::SlotPhase::Loaded && before.program_digest == program.digest;
    let mut loaded = None;
    if !running {
        let bitstream = program
            .resolved
            .get(field::FPGA_BITSTREAM)
            .and_then(|r| r.as_ref().ok())
            .filter(|b| !b.is_empty())
            .ok_or_else(|| SlotLoadError::MissingBitstream(program.name.clone()))?;
        let from = (before.phase() == pb::SlotPhase::Loaded).then(|| before.program_digest.clone());
        let mut strategy = UpdateStrategyType::HotSwap;
        if spec.update_strategy.type_ == UpdateStrategyType::Recreate && from.is_some() {
            // Recreate: this slot (never the board) is emptied first, its
            // isolation and port map too, then loaded as new.
            client.unload_slot(slot).await?;
            strategy = UpdateStrategyType::Recreate;
        }
        let header = pb::LoadSlotHeader {
            slot,
            program_digest: program.digest.clone(),
            resources: program.fpga_resources.clone().into_iter().collect(),
            p4info: Some(program.p4info.clone()),
            ..Default::default()
        };
        let r = client.load_slot(header, bitstream).await?;
        loaded = Some(Loaded {
            from_digest: from,
            strategy,
            device: r
                .load_duration
                .map(|d| Duration::new(d.seconds.max(0) as u64, d.nanos.max(0) as u32))
                .unwrap_or_default(),
            total: Duration::ZERO,
        });
    }
    let state = if loaded.is_some() {
        client.slot_state(slot).await?
    } else {
        before
    };
    let mut changed = false;
    if state.isolation != iso {
        client.set_isolation(slot, iso).await?;
        changed = true;
    }
    if state.port_map != ports {
        client.set_port_map(slot, ports).await?;
        changed = true;
    }
    // Read back only what this call changed; the state it read is the
    // device's answer otherwise.
    let after = match changed {
        true => client.slot_state(slot).await?,
        false => state,
    };
    if after.phase() != pb::SlotPhase::Loaded || after.program_digest != program.digest {
        return Err(SlotLoadError::NotConfirmed {
            slot,
            phase: after.phase(),
            found: after.program_digest,
            expected: program.digest.clone(),
        });
    }
    if let Some(l) = loaded.as_mut() {
        l.total = started.elapsed();
    }
    Ok(SlotLoad { loaded })
}

/// Empties `slot` of FPGA Switch `sw` (a deleted VirtualSwitch's). A slot
/// the board no longer knows is already empty.
pub async fn unload(
    devices: &devices::DevicePool,
    sw: &Switch,
    slot: u32,
) -> Result<(), SlotCallError> {
    let client = devices.slot_client(sw)?;
    match client.unload_slot(slot).await {
        Err(e) if e.reason() == Some(pb::Reason::UnknownSlot) => Ok(()),
        r => r,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(v: serde_json::Value) -> VirtualSwitchSpec {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn isolation_and_port_map_as_the_board_takes_them() {
        let s = spec(serde_json::json!({"programRef": "p", "switchRef": "b",
            "isolation": {"vlan": 10, "dstMac": "02:00:00:00:00:0A"},
            "portMap": [{"physical": 1, "virtual": 0}]}));
        assert_eq!(
            isolation(&s).unwrap(),
            Some(pb::Isolation {
                vlan_id: 10,
                dst_mac: vec![2, 0, 0, 0, 0, 10]
            })
        );
        assert_eq!(port_map(&s)[0].physical_port, 1);
        let s = spec(serde_json::json!({"programRef": "p", "switchRef": "b",
            "isolation": {"vlan": 10, "dstMac": "02:00:00:00:00"}}));
        assert_eq!(isolation(&s).unwrap_err().reason(), "InvalidIsolation");
        let s = spec(serde_json::json!({"programRef": "p", "switchRef": "b"}));
        assert_eq!(isolation(&s).unwrap(), None);
    }
}
