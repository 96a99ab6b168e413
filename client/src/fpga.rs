//! A client of p4fleet's FPGA slot service (`p4fleet.fpga.v1.SlotService`,
//! docs/fpga.md): board info, partial-bitstream loads streamed in chunks
//! with their sha256, isolation, port maps, slot state and counters.
//!
//! The service shares the board's P4Runtime endpoint; a slot's table
//! entries go through P4Runtime device `base_device_id + slot`.
//! Refusals carry a typed `SlotError` detail: callers decide on
//! [`SlotCallError::reason`], never on the message.

use prost::Message;
use sha2::{Digest, Sha256};
use tonic::transport::Channel;

use crate::Target;
use p4fleet_proto::fpga as pb;
use p4fleet_proto::fpga::slot_service_client::SlotServiceClient;

/// Chunk size of a LoadSlot upload: well under the gRPC message limits.
pub const CHUNK_BYTES: usize = 1 << 20;

/// Why a slot-service call failed.
#[derive(Debug, thiserror::Error)]
pub enum SlotCallError {
    #[error(transparent)]
    Connect(#[from] crate::Error),
    #[error("slot service at {endpoint} is unreachable: {cause} ({reason})")]
    Unreachable {
        endpoint: String,
        cause: crate::ConnectCause,
        reason: String,
    },
    /// The endpoint does not serve the slot service (no FPGA host agent).
    #[error("{endpoint} does not serve the p4fleet.fpga.v1 slot service")]
    NotServed { endpoint: String },
    /// The endpoint is not a gRPC server at all: what it seems to be (an
    /// HTTP server, not HTTP/2), by [`crate::Found`].
    #[error(transparent)]
    WrongEndpoint(crate::WrongEndpoint),
    /// The board refused the call; `detail` is its typed reason.
    #[error("{rpc} refused: {message}")]
    Refused {
        rpc: &'static str,
        code: tonic::Code,
        message: String,
        detail: Option<pb::SlotError>,
    },
}

impl SlotCallError {
    /// The board's typed reason, when it gave one.
    pub fn reason(&self) -> Option<pb::Reason> {
        match self {
            SlotCallError::Refused {
                detail: Some(d), ..
            } => Some(d.reason()),
            _ => None,
        }
    }

    fn from_status(endpoint: &str, rpc: &'static str, status: tonic::Status) -> SlotCallError {
        match status.code() {
            tonic::Code::Unavailable if slot_error(&status).is_none() => {
                SlotCallError::Unreachable {
                    endpoint: endpoint.into(),
                    cause: crate::ConnectCause::of(&status),
                    reason: status.message().into(),
                }
            }
            tonic::Code::Unimplemented => SlotCallError::NotServed {
                endpoint: endpoint.into(),
            },
            code => SlotCallError::Refused {
                rpc,
                code,
                message: status.message().into(),
                detail: slot_error(&status),
            },
        }
    }
}

/// The `SlotError` packed in a status's `grpc-status-details-bin`.
fn slot_error(status: &tonic::Status) -> Option<pb::SlotError> {
    let st = p4fleet_proto::rpc::Status::decode(status.details()).ok()?;
    st.details
        .iter()
        .find(|a| a.type_url == pb::SLOT_ERROR_TYPE_URL)
        .and_then(|a| pb::SlotError::decode(a.value.as_slice()).ok())
}

/// A lazy connection to a board's slot service.
#[derive(Clone)]
pub struct SlotClient {
    client: SlotServiceClient<Channel>,
    /// The channel under `client`, for a look at what answered a failed
    /// call (`crate::endpoint`).
    channel: Channel,
    endpoint: String,
}

/// The messages of one LoadSlot stream: the header (its `size_bits` and
/// `sha256` filled in from `bitstream`), then the bitstream in chunks.
pub fn load_slot_messages(
    mut header: pb::LoadSlotHeader,
    bitstream: &[u8],
) -> Vec<pb::LoadSlotRequest> {
    use pb::load_slot_request::Part;
    header.size_bits = bitstream.len() as u64 * 8;
    header.sha256 = Sha256::digest(bitstream).to_vec();
    std::iter::once(Part::Header(header))
        .chain(
            bitstream
                .chunks(CHUNK_BYTES)
                .map(|c| Part::Chunk(c.to_vec())),
        )
        .map(|p| pb::LoadSlotRequest { part: Some(p) })
        .collect()
}

impl SlotClient {
    /// A client of the slot service at `target`'s endpoint; nothing is
    /// dialed until first use.
    pub fn connect(target: &Target) -> Result<SlotClient, crate::Error> {
        let channel = crate::channel::connect_lazy(target)?;
        Ok(SlotClient::on_channel(channel, &target.endpoint))
    }

    /// A client of the slot service on an existing channel to `endpoint`
    /// (one kept by the caller: no new connection per client).
    pub fn on_channel(channel: Channel, endpoint: &str) -> SlotClient {
        SlotClient {
            client: SlotServiceClient::new(channel.clone())
                .max_decoding_message_size(crate::channel::MAX_MESSAGE)
                .max_encoding_message_size(crate::channel::MAX_MESSAGE),
            channel,
            endpoint: endpoint.to_string(),
        }
    }

    /// The answer of call `rpc`, or why it failed: a gRPC server without
    /// the slot service is [`SlotCallError::NotServed`], an endpoint that
    /// is no gRPC server [`SlotCallError::WrongEndpoint`].
    async fn answer<T>(
        &self,
        rpc: &'static str,
        r: Result<tonic::Response<T>, tonic::Status>,
    ) -> Result<T, SlotCallError> {
        let status = match r {
            Ok(r) => return Ok(r.into_inner()),
            Err(s) => s,
        };
        // The board's typed refusal is the service's own answer.
        if slot_error(&status).is_some() {
            return Err(SlotCallError::from_status(&self.endpoint, rpc, status));
        }
        let expected = crate::Service::FpgaSlots;
        let found = crate::identify(&self.channel, &self.endpoint, expected, &status).await;
        Err(match found {
            Some(crate::Found::Serves(_) | crate::Found::OtherGrpc) => SlotCallError::NotServed {
                endpoint: self.endpoint.clone(),
            },
            Some(found) => SlotCallError::WrongEndpoint(crate::WrongEndpoint {
                endpoint: self.endpoint.clone(),
                expected,
                found,
            }),
            None => SlotCallError::from_status(&self.endpoint, rpc, status),
        })
    }

    /// What the board is: resources, configuration port, slots, ports.
    pub async fn board_info(&self) -> Result<pb::BoardInfo, SlotCallError> {
        let mut c = self.client.clone();
        let r = c.get_board_info(pb::GetBoardInfoRequest {}).await;
        self.answer("GetBoardInfo", r).await
    }

    /// Loads `bitstream` into `header.slot` (size and sha256 are computed
    /// here) and waits until the slot is Loaded.
    pub async fn load_slot(
        &self,
        header: pb::LoadSlotHeader,
        bitstream: &[u8],
    ) -> Result<pb::LoadSlotResponse, SlotCallError> {
        let msgs = load_slot_messages(header, bitstream);
        let mut c = self.client.clone();
        let r = c.load_slot(futures::stream::iter(msgs)).await;
        self.answer("LoadSlot", r).await
    }

    /// Empties `slot` (program, resources, isolation, port map).
    pub async fn unload_slot(&self, slot: u32) -> Result<(), SlotCallError> {
        let mut c = self.client.clone();
        let r = c.unload_slot(pb::UnloadSlotRequest { slot }).await;
        self.answer("UnloadSlot", r).await.map(drop)
    }

    /// Sets (or, with None, clears) the Sid that steers frames to `slot`.
    pub async fn set_isolation(
        &self,
        slot: u32,
        isolation: Option<pb::Isolation>,
    ) -> Result<(), SlotCallError> {
        let mut c = self.client.clone();
        let r = c
            .set_isolation(pb::SetIsolationRequest { slot, isolation })
            .await;
        self.answer("SetIsolation", r).await.map(drop)
    }

    /// Sets the physical-to-virtual port map of `slot` (empty: every port).
    pub async fn set_port_map(
        &self,
        slot: u32,
        mappings: Vec<pb::PortMapping>,
    ) -> Result<(), SlotCallError> {
        let mut c = self.client.clone();
        let r = c
            .set_port_map(pb::SetPortMapRequest { slot, mappings })
            .await;
        self.answer("SetPortMap", r).await.map(drop)
    }

    /// The state of one slot.
    pub async fn slot_state(&self, slot: u32) -> Result<pb::SlotState, SlotCallError> {
        let mut c = self.client.clone();
        let r = c
            .get_slot_state(pb::GetSlotStateRequest { slots: vec![slot] })
            .await;
        self.answer("GetSlotState", r)
            .await?
            .slots
            .into_iter()
            .find(|s| s.slot == slot)
            .ok_or_else(|| SlotCallError::Refused {
                rpc: "GetSlotState",
                code: tonic::Code::Internal,
                message: format!("the answer has no slot {slot}"),
                detail: None,
            })
    }

    /// Packet counters of `slots` (empty: every slot).
    pub async fn counters(
        &self,
        slots: Vec<u32>,
    ) -> Result<pb::GetSlotCountersResponse, SlotCallError> {
        let mut c = self.client.clone();
        let r = c
            .get_slot_counters(pb::GetSlotCountersRequest { slots })
            .await;
        self.answer("GetSlotCounters", r).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::bytes::Bytes;

    fn status_with(detail: pb::SlotError, code: tonic::Code) -> tonic::Status {
        let mut st = p4fleet_proto::rpc::Status {
            code: code as i32,
            message: "m".into(),
            details: vec![Default::default()],
        };
        st.details[0].type_url = pb::SLOT_ERROR_TYPE_URL.into();
        st.details[0].value = detail.encode_to_vec();
        tonic::Status::with_details(code, "m", Bytes::from(st.encode_to_vec()))
    }

    #[test]
    fn refusals_carry_the_typed_reason() {
        let d = pb::SlotError {
            reason: pb::Reason::InsufficientResources as i32,
            slot: Some(13),
            ..Default::default()
        };
        let e = SlotCallError::from_status(
            "h:1",
            "LoadSlot",
            status_with(d, tonic::Code::ResourceExhausted),
        );
        assert_eq!(e.reason(), Some(pb::Reason::InsufficientResources));
        let d = pb::SlotError {
            reason: pb::Reason::BoardConfiguring as i32,
            ..Default::default()
        };
        // UNAVAILABLE with a detail is the board's answer, not a lost connection.
        let e =
            SlotCallError::from_status("h:1", "LoadSlot", status_with(d, tonic::Code::Unavailable));
        assert_eq!(e.reason(), Some(pb::Reason::BoardConfiguring));
        let e = SlotCallError::from_status("h:1", "LoadSlot", tonic::Status::unavailable("down"));
        assert!(matches!(e, SlotCallError::Unreachable { .. }), "{e:?}");
        let e = SlotCallError::from_status("h:1", "GetBoardInfo", tonic::Status::unimplemented(""));
        assert!(matches!(e, SlotCallError::NotServed { .. }), "{e:?}");
    }

    #[test]
    fn the_header_gets_the_size_and_sha256() {
        let bits = vec![7u8; CHUNK_BYTES + 3];
        let msgs = load_slot_messages(pb::LoadSlotHeader::default(), &bits);
        assert_eq!(msgs.len(), 3);
        let Some(pb::load_slot_request::Part::Header(h)) = &msgs[0].part else {
            panic!("header first");
        };
        assert_eq!(h.size_bits, (CHUNK_BYTES as u64 + 3) * 8);
        assert_eq!(h.sha256, Sha256::digest(&bits).to_vec());
    }
}
