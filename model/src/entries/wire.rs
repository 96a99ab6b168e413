//! Protobuf wire encoding straight from the entry model. Pure logic, no I/O.
//!
//! Building a prost `Update` per entry (a `TableEntry`, a `FieldMatch` per
//! match, a `Param` per parameter, each value copied into its own `Vec`)
//! and then encoding it cost more than everything else p4fleet does on the
//! client side of a write. Here a [`WriteOp`] borrows the entry, and
//! [`p4rt_write_request`] writes the P4Runtime `WriteRequest` bytes from it
//! in two passes (exact size, then bytes) into one buffer allocated once per
//! request. The bytes are the ones prost would produce for the same
//! message (fields in tag order, proto3 defaults omitted, oneof members
//! always present), so a target cannot tell the two apart; the tests check
//! that byte for byte.
//!
//! The BFRT encoder ([`super::bfrt::bfrt_write_request`]) uses the same
//! primitives.

use p4fleet_proto::p4runtime::{Entity, Update, entity, update, write_request};

use super::bytes::ByteStr;
use super::entry::{ActionCall, Entry, EntryKey, FieldMatch, MatchValue};

/// One update to write: an entry (or, for DELETE, its key) with an update
/// type and optional entry metadata, borrowed from wherever the entries
/// live (desired set, read-back), so nothing per entry is built or cloned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteOp<'a> {
    ty: update::Type,
    key: &'a EntryKey,
    /// None for DELETE (the key alone identifies the entry).
    action: Option<&'a ActionCall>,
    metadata: Option<&'a [u8]>,
    /// `idle_timeout_ns` of an INSERT or MODIFY (0: none).
    idle_timeout_ns: i64,
}

impl<'a> WriteOp<'a> {
    /// An update of type `ty` for `entry`: INSERT and MODIFY carry the
    /// action, DELETE only the key (what P4Runtime expects).
    pub fn new(ty: update::Type, entry: &'a Entry) -> Self {
        WriteOp {
            ty,
            key: &entry.key,
            action: (ty != update::Type::Delete).then_some(&entry.action),
            metadata: None,
            idle_timeout_ns: if ty == update::Type::Delete {
                0
            } else {
                entry.idle_timeout_ns
            },
        }
    }

    pub fn insert(entry: &'a Entry) -> Self {
        Self::new(update::Type::Insert, entry)
    }

    pub fn modify(entry: &'a Entry) -> Self {
        Self::new(update::Type::Modify, entry)
    }

    pub fn delete(key: &'a EntryKey) -> Self {
        WriteOp {
            ty: update::Type::Delete,
            key,
            action: None,
            metadata: None,
            idle_timeout_ns: 0,
        }
    }

    /// Sets the entry's `metadata` bytes (e.g. the sync's ownership tag).
    pub fn with_metadata(mut self, metadata: &'a [u8]) -> Self {
        self.metadata = Some(metadata);
        self
    }

    pub fn ty(&self) -> update::Type {
        self.ty
    }

    pub fn key(&self) -> &'a EntryKey {
        self.key
    }

    pub fn action(&self) -> Option<&'a ActionCall> {
        self.action
    }

    /// The entry's idle timeout (0: none; always 0 for DELETE).
    pub fn idle_timeout_ns(&self) -> i64 {
        self.idle_timeout_ns
    }

    /// The metadata bytes; empty when none (the same on the wire).
    pub fn metadata(&self) -> &'a [u8] {
        self.metadata.unwrap_or(&[])
    }

    /// The prost `Update` this op stands for: what [`p4rt_write_request`]
    /// encodes, for callers that need messages (tests, tools, the
    /// Update-based write path).
    pub fn to_update(&self) -> Update {
        let mut te = self.key.to_proto();
        te.action = self.action.map(ActionCall::to_proto);
        te.metadata = self.metadata().to_vec();
        te.idle_timeout_ns = self.idle_timeout_ns;
        Update {
            r#type: self.ty as i32,
            entity: Some(Entity {
                entity: Some(entity::Entity::TableEntry(te)),
            }),
        }
    }
}

/// What a refused update does to the rest of its request: P4Runtime's and
/// BFRT's `WriteRequest.Atomicity`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum Atomicity {
    /// Apply what is valid, report each refused update.
    #[default]
    ContinueOnError,
    /// Undo the request if any update is refused.
    RollbackOnError,
    /// The request takes effect in the data plane at once.
    DataplaneAtomic,
}

impl Atomicity {
    /// `p4.v1.WriteRequest.Atomicity`.
    pub fn p4runtime(self) -> i32 {
        (match self {
            Atomicity::ContinueOnError => write_request::Atomicity::ContinueOnError,
            Atomicity::RollbackOnError => write_request::Atomicity::RollbackOnError,
            Atomicity::DataplaneAtomic => write_request::Atomicity::DataplaneAtomic,
        }) as i32
    }

    /// `bfrt_proto.WriteRequest.Atomicity`.
    pub fn bfrt(self) -> i32 {
        use p4fleet_proto::bfrt::write_request::Atomicity as B;
        (match self {
            Atomicity::ContinueOnError => B::ContinueOnError,
            Atomicity::RollbackOnError => B::RollbackOnError,
            Atomicity::DataplaneAtomic => B::DataplaneAtomic,
        }) as i32
    }
}

// ---- protobuf primitives (shared with the BFRT encoder) ----

const VARINT: u32 = 0;
const LEN: u32 = 2;

/// Bytes of `v` as a varint (prost's formula).
#[inline]
pub(crate) fn varint_len(v: u64) -> usize {
    ((((v | 1).leading_zeros() ^ 63) * 9 + 73) / 64) as usize
}

#[inline]
fn key_len(tag: u32) -> usize {
    varint_len(u64::from(tag << 3))
}

/// A uint32/uint64/enum field (omitted when 0).
#[inline]
pub(crate) fn uint_len(tag: u32, v: u64) -> usize {
    if v == 0 {
        0
    } else {
        key_len(tag) + varint_len(v)
    }
}

/// An int32 field: negative values take ten bytes, as in protobuf.
#[inline]
pub(crate) fn int32_len(tag: u32, v: i32) -> usize {
    uint_len(tag, v as i64 as u64)
}

/// A bytes/string field (omitted when empty).
#[inline]
pub(crate) fn bytes_len(tag: u32, n: usize) -> usize {
    if n == 0 { 0 } else { msg_len(tag, n) }
}

/// A message (or oneof bytes) field of `n` bytes: always present.
#[inline]
pub(crate) fn msg_len(tag: u32, n: usize) -> usize {
    key_len(tag) + varint_len(n as u64) + n
}

/// Appends protobuf fields to a buffer reserved beforehand.
pub(crate) struct Out<'b>(pub(crate) &'b mut Vec<u8>);

impl Out<'_> {
    #[inline]
    pub(crate) fn varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.0.push(v as u8 | 0x80);
            v >>= 7;
        }
        self.0.push(v as u8);
    }

    #[inline]
    fn key(&mut self, tag: u32, wire_type: u32) {
        self.varint(u64::from(tag << 3 | wire_type));
    }

    #[inline]
    pub(crate) fn uint(&mut self, tag: u32, v: u64) {
        if v != 0 {
            self.key(tag, VARINT);
            self.varint(v);
        }
    }

    #[inline]
    pub(crate) fn int32(&mut self, tag: u32, v: i32) {
        self.uint(tag, v as i64 as u64);
    }

    #[inline]
    pub(crate) fn bytes(&mut self, tag: u32, b: &[u8]) {
        if !b.is_empty() {
            self.msg(tag, b.len());
            self.0.extend_from_slice(b);
        }
    }

    /// The key and length of a message field of `n` bytes; its content
    /// follows.
    #[inline]
    pub(crate) fn msg(&mut self, tag: u32, n: usize) {
        self.key(tag, LEN);
        self.varint(n as u64);
    }
}

// ---- P4Runtime ----

/// The request-level fields of a P4Runtime `WriteRequest`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct P4rtWriteHeader {
    pub device_id: u64,
    /// `(high, low)`.
    pub election_id: (u64, u64),
    pub atomicity: Atomicity,
}

/// `FieldMatch` oneof tag and content length of a match value.
fn match_value(v: &MatchValue) -> (u32, usize) {
    let b = |t: u32, v: &ByteStr| bytes_len(t, v.len());
    match v {
        MatchValue::Exact(v) => (2, b(1, v)),
        MatchValue::Ternary { value, mask } => (3, b(1, value) + b(2, mask)),
        MatchValue::Lpm { value, prefix_len } => {
            (4, b(1, value) + int32_len(2, *prefix_len as i32))
        }
        MatchValue::Range { low, high } => (6, b(1, low) + b(2, high)),
        MatchValue::Optional(v) => (7, b(1, v)),
    }
}

fn field_match_len(m: &FieldMatch) -> usize {
    let (tag, n) = match_value(&m.value);
    uint_len(1, u64::from(m.field_id)) + msg_len(tag, n)
}

fn param_len(p: &super::entry::ActionParam) -> usize {
    uint_len(2, u64::from(p.param_id)) + bytes_len(3, p.value.len())
}

/// Content length of `Action`.
fn action_len(a: &ActionCall) -> usize {
    uint_len(1, u64::from(a.action_id))
        + a.params
            .iter()
            .map(|p| msg_len(4, param_len(p)))
            .sum::<usize>()
}

/// Content length of the op's `TableEntry`.
fn table_entry_len(op: &WriteOp) -> usize {
    let k = op.key;
    let mut n = uint_len(1, u64::from(k.table_id));
    for m in &k.matches {
        n += msg_len(2, field_match_len(m));
    }
    if let Some(a) = op.action {
        // TableAction { action = 1 }.
        n += msg_len(3, msg_len(1, action_len(a)));
    }
    n + int32_len(4, k.priority)
        + uint_len(9, op.idle_timeout_ns as u64)
        + bytes_len(11, op.metadata().len())
}

/// Content lengths of the op's `Update` and of its `Entity`.
fn update_lens(op: &WriteOp) -> (usize, usize, usize) {
    let te = table_entry_len(op);
    let entity = msg_len(2, te);
    (int32_len(1, op.ty as i32) + msg_len(2, entity), entity, te)
}

/// Encoded length of the op's P4Runtime `Update` message.
pub fn p4rt_update_len(op: &WriteOp) -> usize {
    update_lens(op).0
}

fn write_field_match(o: &mut Out, m: &FieldMatch) {
    let (tag, n) = match_value(&m.value);
    o.msg(2, field_match_len(m));
    o.uint(1, u64::from(m.field_id));
    o.msg(tag, n);
    match &m.value {
        MatchValue::Exact(v) | MatchValue::Optional(v) => o.bytes(1, v.as_slice()),
        MatchValue::Ternary { value, mask } => {
            o.bytes(1, value.as_slice());
            o.bytes(2, mask.as_slice());
        }
        MatchValue::Lpm { value, prefix_len } => {
            o.bytes(1, value.as_slice());
            o.int32(2, *prefix_len as i32);
        }
        MatchValue::Range { low, high } => {
            o.bytes(1, low.as_slice());
            o.bytes(2, high.as_slice());
        }
    }
}

/// Appends the op's `Update` as field `tag` of the enclosing message.
fn write_update(o: &mut Out, tag: u32, op: &WriteOp) {
    let (update, entity, te) = update_lens(op);
    o.msg(tag, update);
    o.int32(1, op.ty as i32);
    o.msg(2, entity);
    write_entity(o, op, te);
}

/// Appends the content of the op's `Entity` (its table entry of `te`
/// bytes).
fn write_entity(o: &mut Out, op: &WriteOp, te: usize) {
    o.msg(2, te); // Entity.table_entry
    let k = op.key;
    o.uint(1, u64::from(k.table_id));
    for m in &k.matches {
        write_field_match(o, m);
    }
    if let Some(a) = op.action {
        let n = action_len(a);
        o.msg(3, msg_len(1, n));
        o.msg(1, n);
        o.uint(1, u64::from(a.action_id));
        for p in &a.params {
            o.msg(4, param_len(p));
            o.uint(2, u64::from(p.param_id));
            o.bytes(3, p.value.as_slice());
        }
    }
    o.int32(4, k.priority);
    o.uint(9, op.idle_timeout_ns as u64); // int64 idle_timeout_ns
    o.bytes(11, op.metadata());
}

/// Replaces `buf` with the bytes of the op's P4Runtime `Entity` message,
/// exactly as prost would encode it: what a device that keeps entries as
/// written answers a Read with, so a read-back can be compared as bytes.
pub fn p4rt_entity_into(op: &WriteOp, buf: &mut Vec<u8>) {
    let (_, entity, te) = update_lens(op);
    buf.clear();
    buf.reserve(entity);
    write_entity(&mut Out(buf), op, te);
    debug_assert_eq!(buf.len(), entity, "size pass and write pass disagree");
}

fn uint128_len(high: u64, low: u64) -> usize {
    uint_len(1, high) + uint_len(2, low)
}

/// The bytes of a P4Runtime `WriteRequest` with these updates, exactly as
/// prost would encode the equivalent message (one allocation).
pub fn p4rt_write_request(h: &P4rtWriteHeader, ops: &[WriteOp]) -> Vec<u8> {
    let (high, low) = h.election_id;
    let mut n = uint_len(1, h.device_id) + msg_len(3, uint128_len(high, low));
    for op in ops {
        n += msg_len(4, p4rt_update_len(op));
    }
    n += int32_len(5, h.atomicity.p4runtime());
    let mut buf = Vec::with_capacity(n);
    let o = &mut Out(&mut buf);
    o.uint(1, h.device_id);
    o.msg(3, uint128_len(high, low));
    o.uint(1, high);
    o.uint(2, low);
    for op in ops {
        write_update(o, 4, op);
    }
    o.int32(5, h.atomicity.p4runtime());
    debug_assert_eq!(buf.len(), n, "size pass and write pass disagree");
    buf
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::entries::ActionParam;
    use p4fleet_proto::p4runtime as p4rt;
    use prost::Message;

    /// The prost `WriteRequest` [`p4rt_write_request`] encodes.
    fn p4rt_write_request_message(h: &P4rtWriteHeader, ops: &[WriteOp]) -> p4rt::WriteRequest {
        p4rt::WriteRequest {
            device_id: h.device_id,
            election_id: Some(p4rt::Uint128 {
                high: h.election_id.0,
                low: h.election_id.1,
            }),
            updates: ops.iter().map(WriteOp::to_update).collect(),
            atomicity: h.atomicity.p4runtime(),
            ..Default::default()
        }
    }

    fn b(v: &[u8]) -> ByteStr {
        ByteStr::new(v)
    }

    fn entry(table_id: u32, matches: Vec<(u32, MatchValue)>, priority: i32) -> Entry {
        let mut e = Entry::matching(table_id, matches, priority, 17724422);
        e.action.params = Box::new([ActionParam {
            param_id: 1,
            value: b(&[1]),
        }]);
        e
    }

    /// Entries covering every match kind, zero and empty values, long
    /// (heap) values, several params, big ids and odd priorities.
    fn varied() -> Vec<Entry> {
        let long: Vec<u8> = (1..=16).collect();
        let mut es = vec![
            entry(
                39123287,
                vec![
                    (1, MatchValue::Exact(b(&[10, 0, 0, 1]))),
                    (2, MatchValue::Exact(b(&[0]))),
                ],
                0,
            ),
            entry(37375156, vec![(1, MatchValue::lpm(&[10, 0, 0, 0], 8))], 0),
            entry(
                37519123,
                vec![
                    (1, MatchValue::ternary(&[10], &[0xff])),
                    (3, MatchValue::Optional(b(&[6]))),
                    (4, MatchValue::range(&[0, 80], &[1, 0xbb])),
                ],
                10,
            ),
            // Empty values, zero ids and table, a huge prefix length (a
            // negative int32 on the wire), a negative priority.
            entry(
                0,
                vec![
                    (0, MatchValue::Exact(b(&[]))),
                    (5, MatchValue::lpm(&[], u32::MAX)),
                    (6, MatchValue::range(&[], &[])),
                ],
                -3,
            ),
            entry(
                u32::MAX,
                vec![(200, MatchValue::Exact(ByteStr::new(&long)))],
                i32::MAX,
            ),
            // No matches at all (catch-all).
            entry(7, vec![], 1),
        ];
        es[1].action = ActionCall {
            action_id: 24952588,
            params: Box::new([
                ActionParam {
                    param_id: 1,
                    value: b(&[0, 0, 0, 0, 0, 1]),
                },
                ActionParam {
                    param_id: 2,
                    value: b(&[5]),
                },
                ActionParam {
                    param_id: 0,
                    value: b(&[]),
                },
                ActionParam {
                    param_id: 300,
                    value: ByteStr::new(&long),
                },
            ]),
        };
        es[2].action.params = Box::default();
        es[3].action.action_id = 0;
        // Idle timeouts: small, large, and i64::MAX (a 9-byte varint).
        es[0].idle_timeout_ns = 30_000_000_000;
        es[2].idle_timeout_ns = 1;
        es[4].idle_timeout_ns = i64::MAX;
        es
    }

    fn header() -> P4rtWriteHeader {
        P4rtWriteHeader {
            device_id: 7,
            election_id: (1, 10),
            atomicity: Atomicity::ContinueOnError,
        }
    }

    fn ops<'a>(es: &'a [Entry], md: &'a [u8]) -> Vec<WriteOp<'a>> {
        use update::Type as T;
        let mut out = Vec::new();
        for (i, e) in es.iter().enumerate() {
            for ty in [T::Insert, T::Modify, T::Delete, T::Unspecified] {
                out.push(WriteOp::new(ty, e));
                if i % 2 == 0 {
                    out.push(WriteOp::new(ty, e).with_metadata(md));
                }
            }
            out.push(WriteOp::delete(&e.key));
            out.push(WriteOp::insert(e).with_metadata(&[]));
        }
        out
    }

    #[test]
    fn every_update_is_byte_equal_to_prost() {
        let es = varied();
        let md = crate::sync::tag_metadata(0x0123_4567_89ab_cdef);
        for op in ops(&es, &md) {
            let want = op.to_update();
            let mut got = Vec::new();
            write_update(&mut Out(&mut got), 4, &op);
            // Strip the enclosing field's key and length.
            let body = &got[1 + varint_len(p4rt_update_len(&op) as u64)..];
            assert_eq!(body.len(), p4rt_update_len(&op));
            assert_eq!(body, want.encode_to_vec(), "{op:?}");
            assert_eq!(Update::decode(body).unwrap(), want);
        }
    }

    #[test]
    fn every_entity_is_byte_equal_to_prost() {
        let es = varied();
        let md = crate::sync::tag_metadata(0x0123_4567_89ab_cdef);
        let mut got = vec![0xff; 3];
        for op in ops(&es, &md) {
            let want = op.to_update().entity.expect("an entity");
            p4rt_entity_into(&op, &mut got);
            assert_eq!(got, want.encode_to_vec(), "{op:?}");
        }
    }

    #[test]
    fn deletes_carry_only_the_key() {
        let es = varied();
        for op in [
            WriteOp::delete(&es[1].key),
            WriteOp::new(update::Type::Delete, &es[1]),
        ] {
            assert!(op.action().is_none());
            let u = op.to_update();
            let Some(entity::Entity::TableEntry(te)) = u.entity.and_then(|e| e.entity) else {
                panic!("table entry expected")
            };
            assert_eq!(te.action, None);
            assert_eq!(te, es[1].key.to_proto());
        }
        assert_eq!(
            WriteOp::new(update::Type::Delete, &es[0]).idle_timeout_ns(),
            0,
            "a DELETE carries no idle timeout"
        );
        // And the same update built the old way.
        let insert = WriteOp::insert(&es[2]).to_update();
        let Some(entity::Entity::TableEntry(te)) = insert.entity.and_then(|e| e.entity) else {
            panic!("table entry expected")
        };
        assert_eq!(te, es[2].to_proto());
    }

    #[test]
    fn requests_are_byte_equal_to_prost() {
        let es = varied();
        let md = crate::sync::tag_metadata(42);
        let all = ops(&es, &md);
        let headers = [
            header(),
            P4rtWriteHeader {
                device_id: 0,
                election_id: (0, 0),
                atomicity: Atomicity::DataplaneAtomic,
            },
            P4rtWriteHeader {
                device_id: u64::MAX,
                election_id: (u64::MAX, 1 << 40),
                atomicity: Atomicity::RollbackOnError,
            },
        ];
        for h in headers {
            for slice in [&all[..], &all[..1], &all[3..9], &[]] {
                let got = p4rt_write_request(&h, slice);
                let want = p4rt_write_request_message(&h, slice);
                assert_eq!(got, want.encode_to_vec());
                assert_eq!(p4rt::WriteRequest::decode(got.as_slice()).unwrap(), want);
            }
        }
        // Both atomicity numberings agree on the values.
        for a in [
            Atomicity::ContinueOnError,
            Atomicity::RollbackOnError,
            Atomicity::DataplaneAtomic,
        ] {
            assert_eq!(a.p4runtime(), a.bfrt());
        }
    }

    #[test]
    fn a_large_request_with_multibyte_lengths() {
        // 3,000 updates: the updates field and the request are far beyond
        // one-byte lengths.
        let es: Vec<Entry> = (0..3000u32)
            .map(|i| {
                entry(
                    39123287,
                    vec![
                        (1, MatchValue::Exact(ByteStr::canonical(&i.to_be_bytes()))),
                        (2, MatchValue::Exact(b(&[192, 168, 0, 1]))),
                    ],
                    0,
                )
            })
            .collect();
        let md = crate::sync::tag_metadata(9);
        let ops: Vec<WriteOp> = es
            .iter()
            .map(|e| WriteOp::insert(e).with_metadata(&md))
            .collect();
        let got = p4rt_write_request(&header(), &ops);
        assert!(got.len() > 100_000);
        assert_eq!(
            got,
            p4rt_write_request_message(&header(), &ops).encode_to_vec()
        );
    }

    #[test]
    fn varint_lengths_match_prost() {
        for v in [0u64, 1, 127, 128, 16383, 16384, u32::MAX as u64, u64::MAX] {
            assert_eq!(varint_len(v), prost::encoding::encoded_len_varint(v));
            let mut buf = Vec::new();
            Out(&mut buf).varint(v);
            let mut want = Vec::new();
            prost::encoding::encode_varint(v, &mut want);
            assert_eq!(buf, want);
        }
        assert_eq!(int32_len(1, -1), 11);
    }
}
