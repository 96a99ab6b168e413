//! Why the slot service refuses a call: one variant per reason, each with
//! its gRPC code and a typed `p4fleet.fpga.v1.SlotError` in the status
//! details, so clients decide on the reason rather than the text.

use p4fleet_proto::fpga as pb;
use p4fleet_proto::rpc;
use prost::Message;
use tonic::{Code, Status};

use super::resources::Shortfall;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub(crate) enum SlotError {
    #[error("no slot {slot} (the board has slots 0 to {})", count.saturating_sub(1))]
    UnknownSlot { slot: u32, count: u32 },
    #[error("the board is being fully configured; try again once it is ready")]
    BoardConfiguring,
    #[error("slot {slot}: a load is already {}", if *queued { "queued for the configuration port" } else { "in progress" })]
    SlotBusy { slot: u32, queued: bool },
    #[error("slot {slot}: insufficient {}", shortfall_text(shortfalls))]
    InsufficientResources {
        slot: u32,
        shortfalls: Vec<Shortfall>,
    },
    #[error("slot {slot}: unknown resource {name:?} (the board has {known})")]
    UnknownResource {
        slot: u32,
        name: String,
        known: String,
    },
    #[error("{}received {received_bits} bits, the header declared {declared_bits}", prefix(*slot))]
    SizeMismatch {
        slot: Option<u32>,
        declared_bits: u64,
        received_bits: u64,
    },
    #[error("{}size_bits {bits}: {why}", prefix(*slot))]
    SizeRefused {
        slot: Option<u32>,
        bits: u64,
        why: String,
    },
    #[error("{}sha256 of the bitstream is {actual}, the header says {expected}", prefix(*slot))]
    ChecksumMismatch {
        slot: Option<u32>,
        expected: String,
        actual: String,
    },
    #[error("{}{msg}", prefix(*slot))]
    BadRequest { slot: Option<u32>, msg: String },
    #[error("slot {slot}: p4info: {msg}")]
    BadP4Info { slot: u32, msg: String },
    /// How long the load ran before it failed is the board's log and its
    /// slot state's, not this message's: a message that changes with
    /// every attempt reads as a new failure each time.
    #[error("{}configuration failed: {why}", prefix(*slot))]
    ConfigurationFailed { slot: Option<u32>, why: String },
    #[error("slot {slot}: Sid {sid} is already slot {other}'s")]
    SidInUse { slot: u32, other: u32, sid: String },
    #[error(
        "slot {slot}: slot {other} is in VLAN {vlan} too and uses physical port(s) {}; switches of one VLAN cannot share physical ports",
        join(ports)
    )]
    VlanPortShared {
        slot: u32,
        other: u32,
        vlan: u16,
        ports: Vec<u32>,
    },
    #[error("slot {slot}: no physical port {port} (the board has {known})")]
    UnknownPort { slot: u32, port: u32, known: String },
    #[error("slot {slot}: isolation: {msg}")]
    BadIsolation { slot: u32, msg: String },
    #[error("slot {slot}: port map: {msg}")]
    BadPortMap { slot: u32, msg: String },
}

fn prefix(slot: Option<u32>) -> String {
    slot.map(|s| format!("slot {s}: ")).unwrap_or_default()
}

fn join(ports: &[u32]) -> String {
    ports
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// `luts (need 28096, free 15253), ffs (need ..., free ...)`.
fn shortfall_text(s: &[Shortfall]) -> String {
    s.iter()
        .map(|s| format!("{} (need {}, free {})", s.resource, s.need, s.free))
        .collect::<Vec<_>>()
        .join(", ")
}

impl SlotError {
    pub fn code(&self) -> Code {
        use SlotError::*;
        match self {
            UnknownSlot { .. } => Code::NotFound,
            BoardConfiguring => Code::Unavailable,
            SlotBusy { .. } => Code::FailedPrecondition,
            InsufficientResources { .. } => Code::ResourceExhausted,
            ConfigurationFailed { .. } => Code::Aborted,
            SidInUse { .. } | VlanPortShared { .. } => Code::AlreadyExists,
            UnknownResource { .. }
            | SizeMismatch { .. }
            | SizeRefused { .. }
            | ChecksumMismatch { .. }
            | BadRequest { .. }
            | BadP4Info { .. }
            | UnknownPort { .. }
            | BadIsolation { .. }
            | BadPortMap { .. } => Code::InvalidArgument,
        }
    }

    /// The typed detail clients decide on.
    pub fn detail(&self) -> pb::SlotError {
        use SlotError::*;
        let mut d = pb::SlotError::default();
        let reason = match self {
            UnknownSlot { slot, .. } => {
                d.slot = Some(*slot);
                pb::Reason::UnknownSlot
            }
            BoardConfiguring => pb::Reason::BoardConfiguring,
            SlotBusy { slot, .. } => {
                d.slot = Some(*slot);
                pb::Reason::SlotBusy
            }
            InsufficientResources { slot, shortfalls } => {
                d.slot = Some(*slot);
                d.shortfalls = shortfalls
                    .iter()
                    .map(|s| pb::Shortfall {
                        resource: s.resource.clone(),
                        need: s.need,
                        free: s.free,
                    })
                    .collect();
                pb::Reason::InsufficientResources
            }
            UnknownResource { slot, .. } => {
                d.slot = Some(*slot);
                pb::Reason::UnknownResource
            }
            SizeMismatch { slot, .. } | SizeRefused { slot, .. } => {
                d.slot = *slot;
                pb::Reason::SizeMismatch
            }
            ChecksumMismatch { slot, .. } => {
                d.slot = *slot;
                pb::Reason::ChecksumMismatch
            }
            BadRequest { slot, .. } => {
                d.slot = *slot;
                pb::Reason::BadRequest
            }
            BadP4Info { slot, .. } => {
                d.slot = Some(*slot);
                pb::Reason::BadP4info
            }
            ConfigurationFailed { slot, .. } => {
                d.slot = *slot;
                pb::Reason::ConfigurationFailed
            }
            SidInUse { slot, other, .. } => {
                d.slot = Some(*slot);
                d.other_slot = Some(*other);
                pb::Reason::SidInUse
            }
            VlanPortShared {
                slot, other, ports, ..
            } => {
                d.slot = Some(*slot);
                d.other_slot = Some(*other);
                d.ports = ports.clone();
                pb::Reason::VlanPortShared
            }
            UnknownPort { slot, port, .. } => {
                d.slot = Some(*slot);
                d.ports = vec![*port];
                pb::Reason::UnknownPort
            }
            BadIsolation { slot, .. } => {
                d.slot = Some(*slot);
                pb::Reason::BadIsolation
            }
            BadPortMap { slot, .. } => {
                d.slot = Some(*slot);
                pb::Reason::BadPortMap
            }
        };
        d.reason = reason as i32;
        d
    }
}

impl From<SlotError> for Status {
    fn from(e: SlotError) -> Status {
        let code = e.code();
        let message = e.to_string();
        let details = rpc::Status {
            code: code as i32,
            message: message.clone(),
            details: vec![prost_types::Any {
                type_url: pb::SLOT_ERROR_TYPE_URL.to_string(),
                value: e.detail().encode_to_vec(),
            }],
        };
        Status::with_details(code, message, details.encode_to_vec().into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn insufficient_resources_names_need_and_free() {
        let e = SlotError::InsufficientResources {
            slot: 13,
            shortfalls: vec![Shortfall {
                resource: "luts".into(),
                need: 28_096,
                free: 15_253,
            }],
        };
        assert_eq!(
            e.to_string(),
            "slot 13: insufficient luts (need 28096, free 15253)"
        );
        let s = Status::from(e);
        assert_eq!(s.code(), Code::ResourceExhausted);
        let st = rpc::Status::decode(s.details()).unwrap();
        assert_eq!(st.details[0].type_url, pb::SLOT_ERROR_TYPE_URL);
        let d = pb::SlotError::decode(st.details[0].value.as_slice()).unwrap();
        assert_eq!(d.reason(), pb::Reason::InsufficientResources);
        assert_eq!(d.slot, Some(13));
        assert_eq!(d.shortfalls[0].need, 28_096);
    }

    #[test]
    fn clashes_name_the_other_slot() {
        let e = SlotError::VlanPortShared {
            slot: 2,
            other: 0,
            vlan: 10,
            ports: vec![0, 1],
        };
        assert_eq!(e.code(), Code::AlreadyExists);
        assert!(e.to_string().contains("slot 0 is in VLAN 10"), "{e}");
        assert_eq!(e.detail().other_slot, Some(0));
        let e = SlotError::UnknownSlot {
            slot: 16,
            count: 16,
        };
        assert_eq!(e.to_string(), "no slot 16 (the board has slots 0 to 15)");
    }
}
