//! The client side of an upload: the messages of a LoadSlot or
//! ConfigureBoard stream (header first, then the bitstream in chunks), for
//! the benchmark and tests.

use p4fleet_proto::fpga as pb;

/// Chunk size of an upload: well under the gRPC message limits.
pub const CHUNK_BYTES: usize = 1 << 20;

/// The LoadSlot stream: the header, then `bytes` in chunks of `CHUNK_BYTES`.
pub fn load_slot_messages(header: pb::LoadSlotHeader, bytes: &[u8]) -> Vec<pb::LoadSlotRequest> {
    use pb::load_slot_request::Part;
    std::iter::once(Part::Header(header))
        .chain(bytes.chunks(CHUNK_BYTES).map(|c| Part::Chunk(c.to_vec())))
        .map(|p| pb::LoadSlotRequest { part: Some(p) })
        .collect()
}

/// The ConfigureBoard stream: the header, then `bytes` in chunks of `CHUNK_BYTES`.
pub fn configure_board_messages(
    header: pb::ConfigureBoardHeader,
    bytes: &[u8],
) -> Vec<pb::ConfigureBoardRequest> {
    use pb::configure_board_request::Part;
    std::iter::once(Part::Header(header))
        .chain(bytes.chunks(CHUNK_BYTES).map(|c| Part::Chunk(c.to_vec())))
        .map(|p| pb::ConfigureBoardRequest { part: Some(p) })
        .collect()
}
