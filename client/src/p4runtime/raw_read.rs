//! A table read kept as bytes (`ReadResponse`): the messages as they came
//! off the wire, each entity a slice of them, decoded only when asked.
//!
//! An idle resync reads back every entry of a set and finds nothing to do;
//! decoding each entity into a prost `TableEntry` (a vector per match
//! field, one per parameter, one per value) and converting it was most of
//! its cost. Instead the caller compares an [`EntitySum`] of the answer
//! with the sum of the encodings it expects, and decodes only when they
//! differ (the allocations it saves are counted in docs/dev/fleet-lab-notes.md).

use std::hash::BuildHasher;

use p4fleet_proto::p4runtime::{Entity, ReadRequest, TableEntry, entity};
use prost::Message;
use prost::bytes::{Buf, Bytes};
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::codegen::http::uri::PathAndQuery;

use super::P4RuntimeDevice;
use crate::Error;

/// The entities of one Read, undecoded.
#[derive(Debug, Default, Clone)]
pub struct RawEntities {
    /// One per `ReadResponse` of the stream.
    messages: Vec<Bytes>,
    /// Where each entity lies: message index, start, end.
    spans: Vec<(u32, u32, u32)>,
}

/// Why the bytes of an answer are not a `ReadResponse`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed ReadResponse at byte {at}: {what}")]
pub struct Malformed {
    pub at: usize,
    pub what: &'static str,
}

impl RawEntities {
    /// The entities of `messages` (each the bytes of one `ReadResponse`).
    pub fn parse(messages: Vec<Bytes>) -> Result<RawEntities, Malformed> {
        let mut spans = Vec::new();
        for (i, m) in messages.iter().enumerate() {
            for (start, end) in entity_spans(m)? {
                spans.push((i as u32, start as u32, end as u32));
            }
        }
        Ok(RawEntities { messages, spans })
    }

    /// How many entities the device returned.
    pub fn len(&self) -> usize {
        self.spans.len()
    }

    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    /// Bytes received (all messages).
    pub fn byte_len(&self) -> usize {
        self.messages.iter().map(Bytes::len).sum()
    }

    /// Each entity's encoding (an `Entity` message), in the device's order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = &[u8]> + '_ {
        self.spans
            .iter()
            .map(|&(m, s, e)| &self.messages[m as usize][s as usize..e as usize])
    }

    /// The [`EntitySum`] of the entities.
    pub fn sum(&self) -> EntitySum {
        let mut s = EntitySum::default();
        for e in self.iter() {
            s.add(e);
        }
        s
    }

    /// The table entries, decoded (other entities are left out), the way
    /// [`P4RuntimeDevice::read_table_each`] hands them over.
    pub fn table_entries(&self) -> Result<Vec<TableEntry>, prost::DecodeError> {
        let mut out = Vec::with_capacity(self.len());
        for e in self.iter() {
            if let Some(entity::Entity::TableEntry(t)) = Entity::decode(e)?.entity {
                out.push(t);
            }
        }
        Ok(out)
    }

    /// Each table entry decoded and handed to `f` in turn (never all
    /// decoded at once), an entity that does not decode being a protocol
    /// error of `device_id`.
    pub fn each_table_entry(
        &self,
        device_id: u64,
        mut f: impl FnMut(TableEntry),
    ) -> Result<(), Error> {
        for e in self.iter() {
            let entity = Entity::decode(e).map_err(|e| Error::Protocol {
                device_id,
                reason: format!("decoding a read entity: {e}"),
            })?;
            if let Some(entity::Entity::TableEntry(t)) = entity.entity {
                f(t);
            }
        }
        Ok(())
    }
}

/// An order-independent digest of a multiset of encoded entities: their
/// count and the wrapping sums of two independent 64-bit hashes of each.
/// Two reads with equal sums hold the same encodings, unless 128-bit hash
/// sums collide (the hashes are not keyed against an adversary: entries
/// on a device are not chosen to collide with a set's).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct EntitySum {
    count: u64,
    sums: [u64; 2],
}

impl EntitySum {
    const SEEDS: [u64; 2] = [0x243f_6a88_85a3_08d3, 0x1319_8a2e_0370_7344];

    /// Adds one entity's encoding.
    pub fn add(&mut self, entity: &[u8]) {
        self.count += 1;
        for (s, seed) in self.sums.iter_mut().zip(Self::SEEDS) {
            let h = foldhash::quality::FixedState::with_seed(seed).hash_one(entity);
            *s = s.wrapping_add(h);
        }
    }

    /// How many entities were added.
    pub fn count(&self) -> u64 {
        self.count
    }
}

/// Start and end of every field-1 (`entities`) value of a `ReadResponse`.
fn entity_spans(m: &[u8]) -> Result<Vec<(usize, usize)>, Malformed> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < m.len() {
        let key = varint(m, &mut at)?;
        let (field, wire_type) = (key >> 3, key & 7);
        match wire_type {
            0 => {
                varint(m, &mut at)?;
            }
            1 => at += 8,
            2 => {
                let n = varint(m, &mut at)?;
                let end = usize::try_from(n)
                    .ok()
                    .and_then(|n| at.checked_add(n))
                    .ok_or(Malformed {
                        at,
                        what: "length too large",
                    })?;
                if end > m.len() {
                    return Err(Malformed {
                        at,
                        what: "length past the end",
                    });
                }
                if field == 1 {
                    out.push((at, end));
                }
                at = end;
            }
            5 => at += 4,
            _ => {
                return Err(Malformed {
                    at,
                    what: "unknown wire type",
                });
            }
        }
        if at > m.len() {
            return Err(Malformed {
                at: m.len(),
                what: "field past the end",
            });
        }
    }
    Ok(out)
}

fn varint(m: &[u8], at: &mut usize) -> Result<u64, Malformed> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let Some(&b) = m.get(*at) else {
            return Err(Malformed {
                at: *at,
                what: "varint past the end",
            });
        };
        *at += 1;
        v |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Ok(v);
        }
    }
    Err(Malformed {
        at: *at,
        what: "varint too long",
    })
}

/// Encodes the request with prost, hands each answer over as its bytes.
#[derive(Default)]
struct RawReadCodec;

impl Codec for RawReadCodec {
    type Encode = ReadRequest;
    type Decode = Bytes;
    type Encoder = RequestEncoder;
    type Decoder = BytesDecoder;

    fn encoder(&mut self) -> Self::Encoder {
        RequestEncoder
    }

    fn decoder(&mut self) -> Self::Decoder {
        BytesDecoder
    }
}

struct RequestEncoder;

impl Encoder for RequestEncoder {
    type Item = ReadRequest;
    type Error = tonic::Status;

    fn encode(&mut self, item: ReadRequest, dst: &mut EncodeBuf<'_>) -> Result<(), Self::Error> {
        item.encode(dst)
            .map_err(|e| tonic::Status::internal(format!("encoding the request: {e}")))
    }
}

struct BytesDecoder;

impl Decoder for BytesDecoder {
    type Item = Bytes;
    type Error = tonic::Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<Bytes>, Self::Error> {
        // The frame's bytes are split off tonic's buffer, not copied.
        Ok(Some(buf.copy_to_bytes(buf.remaining())))
    }
}

impl P4RuntimeDevice {
    /// Every entry of one table in `slot`, undecoded ([`RawEntities`]).
    pub async fn read_table_raw(&self, slot: u32, table_id: u32) -> Result<RawEntities, Error> {
        let device_id = self.target.device_id(slot);
        let req = ReadRequest {
            device_id,
            entities: vec![Entity {
                entity: Some(entity::Entity::TableEntry(TableEntry {
                    table_id,
                    ..Default::default()
                })),
            }],
            ..Default::default()
        };
        let err = |s| self.rpc_error("Read", device_id, s);
        let mut grpc = self.raw.clone();
        grpc.ready().await.map_err(|e| {
            err(tonic::Status::unknown(format!(
                "Service was not ready: {e}"
            )))
        })?;
        let mut req = tonic::Request::new(req);
        req.extensions_mut()
            .insert(tonic::GrpcMethod::new("p4.v1.P4Runtime", "Read"));
        let path = PathAndQuery::from_static("/p4.v1.P4Runtime/Read");
        let call = grpc.server_streaming(req, path, RawReadCodec).await;
        let mut messages = Vec::new();
        crate::for_each_response(call, err, |m| {
            messages.push(m);
            Ok(())
        })
        .await?;
        RawEntities::parse(messages).map_err(|e| Error::Protocol {
            device_id,
            reason: e.to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use p4fleet_proto::p4runtime::{FieldMatch, ReadResponse, field_match};

    fn te(id: u32, value: u8, metadata: &[u8]) -> TableEntry {
        TableEntry {
            table_id: id,
            r#match: vec![FieldMatch {
                field_id: 1,
                field_match_type: Some(field_match::FieldMatchType::Exact(field_match::Exact {
                    value: vec![value],
                })),
            }],
            metadata: metadata.to_vec(),
            ..Default::default()
        }
    }

    fn entity(t: TableEntry) -> Entity {
        Entity {
            entity: Some(entity::Entity::TableEntry(t)),
        }
    }

    fn response(ts: Vec<TableEntry>) -> Bytes {
        ReadResponse {
            entities: ts.into_iter().map(entity).collect(),
        }
        .encode_to_vec()
        .into()
    }

    #[test]
    fn entities_are_the_slices_prost_would_decode() {
        let a = vec![te(7, 1, b"x"), te(7, 2, b"")];
        let b = vec![te(7, 3, b"yz")];
        let raw = RawEntities::parse(vec![
            response(a.clone()),
            response(vec![]),
            response(b.clone()),
        ])
        .unwrap();
        assert_eq!(raw.len(), 3);
        let want: Vec<TableEntry> = a.into_iter().chain(b).collect();
        assert_eq!(raw.table_entries().unwrap(), want);
        for (slice, t) in raw.iter().zip(&want) {
            assert_eq!(slice, entity(t.clone()).encode_to_vec());
        }
    }

    #[test]
    fn sums_ignore_order_and_see_every_difference() {
        let es: Vec<Vec<u8>> = (0..50u8)
            .map(|i| entity(te(7, i, b"tag")).encode_to_vec())
            .collect();
        let sum = |v: &[Vec<u8>]| {
            let mut s = EntitySum::default();
            v.iter().for_each(|e| s.add(e));
            s
        };
        let all = sum(&es);
        let mut reversed = es.clone();
        reversed.reverse();
        assert_eq!(sum(&reversed), all);
        // Missing, extra, changed, duplicated: each differs.
        assert_ne!(sum(&es[1..]), all);
        let mut extra = es.clone();
        extra.push(entity(te(7, 99, b"tag")).encode_to_vec());
        assert_ne!(sum(&extra), all);
        let mut changed = es.clone();
        changed[3] = entity(te(7, 3, b"other")).encode_to_vec();
        assert_ne!(sum(&changed), all);
        let mut swapped = es.clone();
        swapped[4] = es[5].clone();
        assert_ne!(sum(&swapped), all);
        assert_eq!(all.count(), 50);
    }

    #[test]
    fn malformed_answers_are_errors_not_panics() {
        let good = response(vec![te(7, 1, b"x")]);
        for cut in 1..good.len() {
            assert!(
                RawEntities::parse(vec![good.slice(..cut)]).is_err(),
                "{cut}"
            );
        }
        let unknown = Bytes::from_static(&[0x0b]); // field 1, wire type 3
        assert!(RawEntities::parse(vec![unknown]).is_err());
    }
}
