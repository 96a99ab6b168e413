//! The `p4fleet.fpga.v1.SlotService` gRPC service over one board: uploads
//! are received and verified here (header, size, sha256, resource fit,
//! P4Info) before the board is asked to load anything.

use std::sync::Arc;

use p4fleet_proto::fpga::{self as pb, slot_service_server::SlotService};
use tonic::{Request, Response, Status, Streaming};

use super::bitstream;
use super::board::Board;
use super::error::SlotError;
use super::isolation::Sid;
use super::resources::Resources;
use super::state::Program;
use crate::p4runtime::schema::Schema;

/// The slot service of one board; build with
/// [`crate::Emulator::slot_service`].
#[derive(Clone)]
pub struct BoardService {
    pub(crate) board: Arc<Board>,
}

/// One message of an upload stream.
enum Part<H> {
    Header(H),
    Chunk(Vec<u8>),
}

trait Upload: Send + 'static {
    type Header: Send;
    fn into_part(self) -> Option<Part<Self::Header>>;
}

impl Upload for pb::LoadSlotRequest {
    type Header = pb::LoadSlotHeader;
    fn into_part(self) -> Option<Part<pb::LoadSlotHeader>> {
        use pb::load_slot_request::Part as P;
        match self.part? {
            P::Header(h) => Some(Part::Header(h)),
            P::Chunk(c) => Some(Part::Chunk(c)),
        }
    }
}

impl Upload for pb::ConfigureBoardRequest {
    type Header = pb::ConfigureBoardHeader;
    fn into_part(self) -> Option<Part<pb::ConfigureBoardHeader>> {
        use pb::configure_board_request::Part as P;
        match self.part? {
            P::Header(h) => Some(Part::Header(h)),
            P::Chunk(c) => Some(Part::Chunk(c)),
        }
    }
}

/// What a header promises: size in bits and sha256.
struct Promise {
    slot: Option<u32>,
    bits: u64,
    sha256: [u8; 32],
}

/// Receives an upload: a header, which `check` turns into a [`Promise`]
/// (refusing it early), then chunks up to the promised size; verifies size
/// and sha256 at the end.
async fn receive<R: Upload, T>(
    stream: &mut Streaming<R>,
    check: impl FnOnce(R::Header) -> Result<(Promise, T), SlotError>,
) -> Result<(T, Vec<u8>), Status> {
    let bad = |slot, msg: &str| SlotError::BadRequest {
        slot,
        msg: msg.to_string(),
    };
    let header = match stream.message().await?.and_then(R::into_part) {
        Some(Part::Header(h)) => h,
        Some(Part::Chunk(_)) | None => {
            return Err(bad(None, "the first message must be the header").into());
        }
    };
    let (promise, value) = check(header)?;
    let want = usize::try_from(promise.bits / 8)
        .map_err(|_| bad(promise.slot, "size_bits does not fit in memory"))?;
    // Grown as chunks come, so a lying header cannot reserve memory.
    let mut bytes: Vec<u8> = Vec::new();
    while let Some(msg) = stream.message().await? {
        match msg.into_part() {
            Some(Part::Chunk(c)) => {
                if bytes.len() + c.len() > want {
                    return Err(SlotError::SizeMismatch {
                        slot: promise.slot,
                        declared_bits: promise.bits,
                        received_bits: 8 * (bytes.len() + c.len()) as u64,
                    }
                    .into());
                }
                bytes.extend_from_slice(&c);
            }
            Some(Part::Header(_)) => return Err(bad(promise.slot, "a second header").into()),
            None => return Err(bad(promise.slot, "a message with no part").into()),
        }
    }
    if bytes.len() != want {
        return Err(SlotError::SizeMismatch {
            slot: promise.slot,
            declared_bits: promise.bits,
            received_bits: 8 * bytes.len() as u64,
        }
        .into());
    }
    let actual = bitstream::sha256(&bytes);
    if actual != promise.sha256 {
        return Err(SlotError::ChecksumMismatch {
            slot: promise.slot,
            expected: bitstream::hex(&promise.sha256),
            actual: bitstream::hex(&actual),
        }
        .into());
    }
    Ok((value, bytes))
}

fn sha256_of(slot: Option<u32>, sha256: &[u8]) -> Result<[u8; 32], SlotError> {
    sha256.try_into().map_err(|_| SlotError::BadRequest {
        slot,
        msg: format!("sha256 has {} bytes, not 32", sha256.len()),
    })
}

impl BoardService {
    /// Checks a LoadSlot header: slot, fit, digest, size, sha256, P4Info.
    fn program(&self, h: pb::LoadSlotHeader) -> Result<(Promise, (u32, Program)), SlotError> {
        let slot = h.slot;
        let resources: Resources = h.resources.into_iter().collect();
        self.board.check_load(slot, &resources)?;
        if h.program_digest.is_empty() {
            return Err(SlotError::BadRequest {
                slot: Some(slot),
                msg: "program_digest is empty".into(),
            });
        }
        let full = self.board.spec.full_bitstream_bits;
        let refuse = |why: String| SlotError::SizeRefused {
            slot: Some(slot),
            bits: h.size_bits,
            why,
        };
        if h.size_bits == 0 || !h.size_bits.is_multiple_of(8) {
            return Err(refuse("must be a positive multiple of 8".into()));
        }
        if h.size_bits > full {
            return Err(refuse(format!(
                "a partial bitstream cannot exceed the part's full bitstream ({full} bits)"
            )));
        }
        let sha256 = sha256_of(Some(slot), &h.sha256)?;
        let p4info = h.p4info.ok_or_else(|| SlotError::BadP4Info {
            slot,
            msg: "missing: a slot's tables are described by the P4Info built with its bitstream"
                .into(),
        })?;
        Schema::from_p4info(&p4info).map_err(|e| SlotError::BadP4Info {
            slot,
            msg: e.to_string(),
        })?;
        let promise = Promise {
            slot: Some(slot),
            bits: h.size_bits,
            sha256,
        };
        let program = Program {
            digest: h.program_digest,
            sha256,
            size_bits: h.size_bits,
            resources,
            p4info,
        };
        Ok((promise, (slot, program)))
    }
}

#[tonic::async_trait]
impl SlotService for BoardService {
    async fn get_board_info(
        &self,
        _request: Request<pb::GetBoardInfoRequest>,
    ) -> Result<Response<pb::BoardInfo>, Status> {
        Ok(Response::new(self.board.info()))
    }

    async fn configure_board(
        &self,
        request: Request<Streaming<pb::ConfigureBoardRequest>>,
    ) -> Result<Response<pb::ConfigureBoardResponse>, Status> {
        let mut stream = request.into_inner();
        let spec = self.board.spec.clone();
        let ((), bytes) = receive(&mut stream, |h: pb::ConfigureBoardHeader| {
            if h.size_bits != spec.full_bitstream_bits {
                return Err(SlotError::SizeRefused {
                    slot: None,
                    bits: h.size_bits,
                    why: format!(
                        "a full bitstream for {} is {} bits",
                        spec.part, spec.full_bitstream_bits
                    ),
                });
            }
            let sha256 = sha256_of(None, &h.sha256)?;
            let promise = Promise {
                slot: None,
                bits: h.size_bits,
                sha256,
            };
            Ok((promise, ()))
        })
        .await?;
        let done = self.board.configure(bytes).await?;
        Ok(Response::new(pb::ConfigureBoardResponse {
            load_duration: done.took.try_into().ok(),
            queued: done.queued.try_into().ok(),
        }))
    }

    async fn load_slot(
        &self,
        request: Request<Streaming<pb::LoadSlotRequest>>,
    ) -> Result<Response<pb::LoadSlotResponse>, Status> {
        let mut stream = request.into_inner();
        let ((slot, program), bytes) = receive(&mut stream, |h| self.program(h)).await?;
        let digest = program.digest.clone();
        let done = self.board.load(slot, program, bytes).await?;
        Ok(Response::new(pb::LoadSlotResponse {
            slot,
            device_id: self.board.spec.device_id(slot),
            program_digest: digest,
            load_duration: done.took.try_into().ok(),
            queued: done.queued.try_into().ok(),
            loaded_at: Some(done.at.into()),
        }))
    }

    async fn unload_slot(
        &self,
        request: Request<pb::UnloadSlotRequest>,
    ) -> Result<Response<pb::UnloadSlotResponse>, Status> {
        self.board.unload(request.into_inner().slot)?;
        Ok(Response::new(pb::UnloadSlotResponse {}))
    }

    async fn set_isolation(
        &self,
        request: Request<pb::SetIsolationRequest>,
    ) -> Result<Response<pb::SetIsolationResponse>, Status> {
        let req = request.into_inner();
        let sid = req
            .isolation
            .as_ref()
            .map(|i| Sid::from_proto(req.slot, i))
            .transpose()?;
        self.board.set_isolation(req.slot, sid)?;
        Ok(Response::new(pb::SetIsolationResponse {}))
    }

    async fn set_port_map(
        &self,
        request: Request<pb::SetPortMapRequest>,
    ) -> Result<Response<pb::SetPortMapResponse>, Status> {
        let req = request.into_inner();
        self.board.set_port_map(req.slot, &req.mappings)?;
        Ok(Response::new(pb::SetPortMapResponse {}))
    }

    async fn get_slot_state(
        &self,
        request: Request<pb::GetSlotStateRequest>,
    ) -> Result<Response<pb::GetSlotStateResponse>, Status> {
        let slots = self.board.slot_states(&request.into_inner().slots)?;
        Ok(Response::new(pb::GetSlotStateResponse { slots }))
    }

    async fn get_slot_counters(
        &self,
        request: Request<pb::GetSlotCountersRequest>,
    ) -> Result<Response<pb::GetSlotCountersResponse>, Status> {
        Ok(Response::new(
            self.board.counters(&request.into_inner().slots)?,
        ))
    }
}
