//! BFRT `WriteRequest` bytes straight from the entry model (see
//! [`crate::entries::wire`]): p4fleet's one translation of entries into
//! BFRT (full-width values, explicit don't-cares, `$MATCH_PRIORITY`; see
//! the rules in [`super`]), done while encoding, so no P4Runtime message,
//! BFRT message or padded value `Vec` is built per entry. Reads come back
//! through [`BfrtTableMap::from_bfrt`](super::BfrtTableMap::from_bfrt); the
//! tests check the bytes against prost's encoding of what they decode to
//! and the round trip through it.

use p4fleet_proto::bfrt::{TargetDevice, update::Type as BfrtType};
use p4fleet_proto::p4runtime::update::Type as P4Type;

use super::super::entry::{EntryKey, MatchValue};
use super::super::error::EntryError;
use super::super::schema::MatchKind;
use super::super::wire::{Atomicity, Out, WriteOp, bytes_len, int32_len, msg_len, uint_len};
use super::{ActionMap, BfrtProgramMap, BfrtTableMap, FieldMap, conv, nbytes};

/// A BFRT value as written: exactly `ceil(width / 8)` bytes.
#[derive(Debug, Clone, Copy)]
enum Val<'a> {
    /// Significant bytes, right-aligned in `.1` bytes.
    Padded(&'a [u8], usize),
    Zeros(usize),
    /// The largest value of this many bits.
    Max(u32),
    U32(u32),
}

impl Val<'_> {
    fn len(&self) -> usize {
        match *self {
            Val::Padded(_, n) | Val::Zeros(n) => n,
            Val::Max(w) => nbytes(w),
            Val::U32(_) => 4,
        }
    }

    fn write(&self, out: &mut Vec<u8>) {
        match *self {
            Val::Padded(sig, n) => {
                out.resize(out.len() + n - sig.len(), 0);
                out.extend_from_slice(sig);
            }
            Val::Zeros(n) => out.resize(out.len() + n, 0),
            Val::Max(w) => {
                let n = nbytes(w);
                let spare = n as u32 * 8 - w;
                if n > 0 {
                    out.push(0xff >> spare);
                    out.resize(out.len() + n - 1, 0xff);
                }
            }
            Val::U32(v) => out.extend_from_slice(&v.to_be_bytes()),
        }
    }
}

/// `v` (canonical or padded) as exactly `ceil(width / 8)` bytes, without
/// allocating; refused when its significant bytes do not fit.
fn padded(v: &[u8], width: u32) -> Result<Val<'_>, EntryError> {
    let first = v.iter().position(|b| *b != 0).unwrap_or(v.len());
    let sig = &v[first..];
    let nb = nbytes(width);
    if sig.len() > nb {
        return Err(conv(format!(
            "value of {} bytes does not fit in {width} bits",
            sig.len()
        )));
    }
    Ok(Val::Padded(sig, nb))
}

/// One `KeyField` match.
#[derive(Debug, Clone, Copy)]
enum Key<'a> {
    Exact(Val<'a>),
    Ternary(Val<'a>, Val<'a>),
    Lpm(Val<'a>, i32),
    Range(Val<'a>, Val<'a>),
    Optional(Val<'a>, bool),
}

impl Key<'_> {
    /// Oneof tag and content length.
    fn tag_len(&self) -> (u32, usize) {
        let b = |t, v: &Val| bytes_len(t, v.len());
        match self {
            Key::Exact(v) => (2, b(1, v)),
            Key::Ternary(v, m) => (3, b(1, v) + b(2, m)),
            Key::Lpm(v, p) => (4, b(1, v) + int32_len(2, *p)),
            Key::Range(l, h) => (5, b(1, l) + b(2, h)),
            Key::Optional(v, valid) => (6, b(1, v) + uint_len(2, u64::from(*valid))),
        }
    }

    fn write(&self, o: &mut Out) {
        let bytes = |o: &mut Out, t: u32, v: &Val| {
            let n = v.len();
            if n > 0 {
                o.msg(t, n);
                v.write(o.0);
            }
        };
        match self {
            Key::Exact(v) => bytes(o, 1, v),
            Key::Ternary(a, b) | Key::Range(a, b) => {
                bytes(o, 1, a);
                bytes(o, 2, b);
            }
            Key::Lpm(v, p) => {
                bytes(o, 1, v);
                o.int32(2, *p);
            }
            Key::Optional(v, valid) => {
                bytes(o, 1, v);
                o.uint(2, u64::from(*valid));
            }
        }
    }
}

/// The BFRT key of one P4Info field: omitted fields become explicit
/// don't-cares (an omitted exact field is refused); a field id the table
/// does not have is ignored.
fn key_of<'e>(f: &FieldMap, k: &'e EntryKey) -> Result<Key<'e>, EntryError> {
    let w = f.key.width;
    let nb = nbytes(w);
    let m = k
        .matches
        .iter()
        .find(|m| m.field_id == f.p4_id)
        .map(|m| &m.value);
    let p = |v: &'e super::super::bytes::ByteStr| padded(v.as_slice(), w);
    Ok(match (m, f.key.kind) {
        (Some(MatchValue::Exact(v)), MatchKind::Exact) => Key::Exact(p(v)?),
        (Some(MatchValue::Lpm { value, prefix_len }), MatchKind::Lpm) => {
            Key::Lpm(p(value)?, *prefix_len as i32)
        }
        (None, MatchKind::Lpm) => Key::Lpm(Val::Zeros(nb), 0),
        (Some(MatchValue::Ternary { value, mask }), MatchKind::Ternary) => {
            Key::Ternary(p(value)?, p(mask)?)
        }
        (Some(MatchValue::Optional(v)), MatchKind::Ternary) => Key::Ternary(p(v)?, Val::Max(w)),
        (None, MatchKind::Ternary) => Key::Ternary(Val::Zeros(nb), Val::Zeros(nb)),
        (Some(MatchValue::Range { low, high }), MatchKind::Range) => Key::Range(p(low)?, p(high)?),
        (None, MatchKind::Range) => Key::Range(Val::Zeros(nb), Val::Max(w)),
        (Some(MatchValue::Optional(v)), MatchKind::Optional) => Key::Optional(p(v)?, true),
        (None, MatchKind::Optional) => Key::Optional(Val::Zeros(nb), false),
        (None, MatchKind::Exact) => {
            return Err(conv(format!("exact field {} is missing", f.key.name)));
        }
        (Some(_), k) => {
            return Err(conv(format!(
                "field {} is a {k:?} match in bfrt.json",
                f.key.name
            )));
        }
    })
}

fn key_field_len(field_id: u32, k: &Key) -> usize {
    let (tag, n) = k.tag_len();
    uint_len(1, u64::from(field_id)) + msg_len(tag, n)
}

/// `$MATCH_PRIORITY`: lower wins in BFRT.
fn priority_key(priority: i32) -> Key<'static> {
    Key::Exact(Val::U32((i32::MAX - priority.max(0)) as u32))
}

fn data_field_len(data_id: u32, v: &Val) -> usize {
    // `stream` is a oneof member: present even when empty.
    uint_len(1, u64::from(data_id)) + msg_len(2, v.len())
}

/// The BFRT update type of a P4Runtime one, and whether it carries data.
fn update_type(ty: P4Type) -> Result<(BfrtType, bool), EntryError> {
    Ok(match ty {
        P4Type::Insert => (BfrtType::Insert, true),
        P4Type::Modify => (BfrtType::Modify, true),
        P4Type::Delete => (BfrtType::Delete, false),
        P4Type::Unspecified => return Err(conv("update type is unspecified")),
    })
}

/// An op's table and update type over BFRT.
#[derive(Clone, Copy)]
struct Resolved<'m> {
    tm: &'m BfrtTableMap,
    ty: BfrtType,
    /// INSERT / MODIFY carry the action's data.
    with_data: bool,
}

impl BfrtProgramMap {
    fn resolve(&self, op: &WriteOp) -> Result<Resolved<'_>, EntryError> {
        let table_id = op.key().table_id;
        let tm = self
            .table(table_id)
            .ok_or_else(|| conv(format!("table id {table_id} not in bfrt.json")))?;
        let (ty, with_data) = update_type(op.ty())?;
        Ok(Resolved { tm, ty, with_data })
    }

    /// Checks that the op can be written over BFRT: the op with its encoded
    /// length, or why not (unknown table, action or param, a value too
    /// wide, a missing exact field, a match of another kind).
    pub fn check<'a>(&self, op: WriteOp<'a>) -> Result<BfrtOp<'a>, EntryError> {
        if op.idle_timeout_ns() != 0 {
            // Tofino's entry TTL is not modelled (BFRT schemas refuse
            // idle timeouts when entries are parsed; this catches code).
            return Err(EntryError::Unsupported("idle timeouts over BFRT".into()));
        }
        let len = self.resolve(&op)?.lens(&op)?.update;
        Ok(BfrtOp { op, len })
    }
}

/// An op [`BfrtProgramMap::check`]ed for BFRT, with the length of its
/// `Update`, so encoding a request of them needs no size pass over the
/// entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BfrtOp<'a> {
    op: WriteOp<'a>,
    len: usize,
}

impl<'a> BfrtOp<'a> {
    pub fn op(&self) -> &WriteOp<'a> {
        &self.op
    }

    /// Encoded length of the BFRT `Update`.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// Content lengths of one update's nested messages.
struct Lens<'m> {
    update: usize,
    entity: usize,
    entry: usize,
    key: usize,
    data: usize,
    action: Option<&'m ActionMap>,
}

/// One update's key and data fields, translated and checked, reused from
/// update to update so writing needs no allocation and no second
/// translation.
#[derive(Default)]
struct Fields<'e> {
    /// `(field id, match, KeyField content length)`.
    keys: Vec<(u32, Key<'e>, usize)>,
    /// `(data id, value)`.
    data: Vec<(u32, Val<'e>)>,
}

impl<'m> Resolved<'m> {
    /// Content length of `TableKey`.
    fn key_len(&self, k: &EntryKey) -> Result<usize, EntryError> {
        let mut n = 0;
        for f in &self.tm.fields {
            n += msg_len(1, key_field_len(f.key.id, &key_of(f, k)?));
        }
        if let Some(pid) = self.tm.priority_id {
            n += msg_len(1, key_field_len(pid, &priority_key(k.priority)));
        }
        Ok(n)
    }

    /// The action's translation (INSERT / MODIFY only).
    fn action(&self, op: &WriteOp) -> Result<Option<&'m ActionMap>, EntryError> {
        if !self.with_data {
            return Ok(None);
        }
        let a = op.action().ok_or(EntryError::MissingAction)?;
        let tm: &'m BfrtTableMap = self.tm;
        tm.actions
            .iter()
            .find(|m| m.p4_id == a.action_id)
            .map(Some)
            .ok_or_else(|| conv(format!("action id {} not in bfrt.json", a.action_id)))
    }

    fn finish(&self, key: usize, action: Option<&'m ActionMap>, data: usize) -> Lens<'m> {
        let mut entry = uint_len(1, u64::from(self.tm.bfrt_table_id)) + msg_len(2, key);
        if action.is_some() {
            entry += msg_len(3, data);
        }
        let entity = msg_len(1, entry);
        Lens {
            update: uint_len(1, self.ty as u64) + msg_len(2, entity),
            entity,
            entry,
            key,
            data,
            action,
        }
    }

    /// Lengths only (no scratch): the check of [`BfrtProgramMap::check`].
    fn lens(&self, op: &WriteOp) -> Result<Lens<'m>, EntryError> {
        // Keys are checked before the action (the order of the reasons).
        let key = self.key_len(op.key())?;
        self.data_lens(op, key, |_, _| {})
    }

    /// Translates the op into `f` and returns its lengths.
    fn plan<'e>(&self, op: &WriteOp<'e>, f: &mut Fields<'e>) -> Result<Lens<'m>, EntryError> {
        f.keys.clear();
        f.data.clear();
        let k = op.key();
        let mut key = 0;
        let mut push = |id: u32, m: Key<'e>| {
            let n = key_field_len(id, &m);
            key += msg_len(1, n);
            f.keys.push((id, m, n));
        };
        for fm in &self.tm.fields {
            push(fm.key.id, key_of(fm, k)?);
        }
        if let Some(pid) = self.tm.priority_id {
            push(pid, priority_key(k.priority));
        }
        self.data_lens(op, key, |did, v| f.data.push((did, v)))
    }

    /// The lengths of the op with a key of `key` bytes, its action's data
    /// fields given to `field` on the way.
    fn data_lens<'e>(
        &self,
        op: &WriteOp<'e>,
        key: usize,
        mut field: impl FnMut(u32, Val<'e>),
    ) -> Result<Lens<'m>, EntryError> {
        let action = self.action(op)?;
        let mut data = 0;
        if let Some(am) = action {
            data = uint_len(1, u64::from(am.bfrt_id));
            for p in params(am, op) {
                let (did, v) = p?;
                data += msg_len(2, data_field_len(did, &v));
                field(did, v);
            }
        }
        Ok(self.finish(key, action, data))
    }

    /// Appends the planned update as field `tag`.
    fn write(&self, o: &mut Out, tag: u32, l: &Lens, f: &Fields) {
        o.msg(tag, l.update);
        o.uint(1, self.ty as u64);
        o.msg(2, l.entity);
        o.msg(1, l.entry); // Entity.table_entry
        o.uint(1, u64::from(self.tm.bfrt_table_id));
        o.msg(2, l.key); // TableEntry.key
        for (id, key, n) in &f.keys {
            let (t, inner) = key.tag_len();
            o.msg(1, *n);
            o.uint(1, u64::from(*id));
            o.msg(t, inner);
            key.write(o);
        }
        if let Some(am) = l.action {
            o.msg(3, l.data);
            o.uint(1, u64::from(am.bfrt_id));
            for (did, v) in &f.data {
                o.msg(2, data_field_len(*did, v));
                o.uint(1, u64::from(*did));
                o.msg(2, v.len());
                v.write(o.0);
            }
        }
    }
}

/// The op's params with their BFRT data ids and full-width values, in the
/// op's order.
fn params<'e>(
    am: &ActionMap,
    op: &WriteOp<'e>,
) -> impl Iterator<Item = Result<(u32, Val<'e>), EntryError>> {
    op.action()
        .into_iter()
        .flat_map(|a| a.params.iter())
        .map(move |p| {
            let (_, did, w) = am
                .params
                .iter()
                .find(|(pid, _, _)| *pid == p.param_id)
                .ok_or_else(|| conv(format!("param id {} not in bfrt.json", p.param_id)))?;
            Ok((*did, padded(p.value.as_slice(), *w)?))
        })
}

/// The request-level fields of a BFRT `WriteRequest`.
#[derive(Debug, Clone, Copy)]
pub struct BfrtWriteHeader<'a> {
    pub target: TargetDevice,
    pub client_id: u32,
    pub atomicity: Atomicity,
    pub p4_name: &'a str,
}

fn target_len(t: &TargetDevice) -> usize {
    uint_len(1, u64::from(t.device_id))
        + uint_len(2, u64::from(t.pipe_id))
        + uint_len(3, u64::from(t.direction))
        + uint_len(4, u64::from(t.prsr_id))
}

/// The bytes of a BFRT `WriteRequest` with these (checked) updates, exactly
/// as prost would encode the translated message, in one allocation. Fails
/// only if an op no longer translates as it was checked (e.g. checked
/// against another map).
pub fn bfrt_write_request(
    map: &BfrtProgramMap,
    h: &BfrtWriteHeader,
    ops: &[BfrtOp],
) -> Result<Vec<u8>, EntryError> {
    let t = &h.target;
    let mut n = msg_len(1, target_len(t)) + uint_len(2, u64::from(h.client_id));
    for op in ops {
        n += msg_len(3, op.len);
    }
    n += int32_len(4, h.atomicity.bfrt()) + bytes_len(5, h.p4_name.len());
    let mut buf = Vec::with_capacity(n);
    let o = &mut Out(&mut buf);
    o.msg(1, target_len(t));
    o.uint(1, u64::from(t.device_id));
    o.uint(2, u64::from(t.pipe_id));
    o.uint(3, u64::from(t.direction));
    o.uint(4, u64::from(t.prsr_id));
    o.uint(2, u64::from(h.client_id));
    let mut fields = Fields::default();
    // Requests are mostly of one table: look it up once per run of ops.
    let mut last: Option<Resolved> = None;
    for BfrtOp { op, len } in ops {
        let r = match last {
            Some(r) if r.tm.p4_table_id == op.key().table_id => {
                let (ty, with_data) = update_type(op.ty())?;
                Resolved { ty, with_data, ..r }
            }
            _ => map.resolve(op)?,
        };
        last = Some(r);
        let l = r.plan(op, &mut fields)?;
        if l.update != *len {
            return Err(conv("an update changed after it was checked"));
        }
        r.write(o, 3, &l, &fields);
    }
    o.int32(4, h.atomicity.bfrt());
    o.bytes(5, h.p4_name.as_bytes());
    debug_assert_eq!(buf.len(), n, "size pass and write pass disagree");
    Ok(buf)
}

/// The BFRT update the write path sends for `op` (one-update request,
/// decoded): what tests look at.
#[cfg(test)]
pub(super) fn sent(
    map: &BfrtProgramMap,
    op: WriteOp,
) -> Result<p4fleet_proto::bfrt::Update, EntryError> {
    use prost::Message;
    let h = BfrtWriteHeader {
        target: TargetDevice::default(),
        client_id: 0,
        atomicity: Atomicity::ContinueOnError,
        p4_name: "",
    };
    let bytes = bfrt_write_request(map, &h, &[map.check(op)?])?;
    let mut req = p4fleet_proto::bfrt::WriteRequest::decode(bytes.as_slice())
        .map_err(|e| conv(e.to_string()))?;
    Ok(req.updates.remove(0))
}

#[cfg(test)]
mod tests {
    use super::super::super::entry::{ActionParam, Entry, FieldMatch};
    use super::super::super::{ByteStr, TableSchema};
    use super::super::BfrtInfo;
    use super::*;
    use p4fleet_proto::bfrt::{self, key_field};
    use prost::Message;

    use crate::entries::fixtures::{FIREWALL_BFRT, FIREWALL_P4INFO, ROUTER_BFRT, ROUTER_P4INFO};

    fn map(p4info: &str, json: &str) -> BfrtProgramMap {
        let p4info = p4fleet_proto::p4info::parse_text(p4info).unwrap();
        let tables = TableSchema::all_from_p4info(&p4info).unwrap();
        BfrtProgramMap::new(&tables, &BfrtInfo::parse(json.as_bytes()).unwrap()).unwrap()
    }

    fn both() -> BfrtProgramMap {
        let mut m = map(ROUTER_P4INFO, ROUTER_BFRT);
        let fw = map(FIREWALL_P4INFO, FIREWALL_BFRT);
        m.by_p4.extend(fw.by_p4);
        m.by_bfrt.extend(fw.by_bfrt);
        m
    }

    fn b(v: &[u8]) -> ByteStr {
        ByteStr::new(v)
    }

    fn param(id: u32, v: &[u8]) -> ActionParam {
        ActionParam {
            param_id: id,
            value: b(v),
        }
    }

    /// Good and bad entries of the router (lpm, acl with ternary, optional,
    /// range, priority) and firewall (exact) tables.
    fn entries() -> Vec<Entry> {
        let (lpm, acl, fw) = (37375156, 37519123, 39123287);
        let mut route = Entry::matching(
            lpm,
            vec![(1, MatchValue::lpm(&[10, 0, 0, 0], 8))],
            0,
            24952588,
        );
        route.action.params = Box::new([param(1, &[1]), param(2, &[5])]);
        let mut default_route = Entry::matching(lpm, vec![], 0, 24952588);
        default_route.action.params = Box::new([param(1, &[0, 0, 0, 0, 0, 0, 0]), param(2, &[0])]);
        let acl_full = Entry::matching(
            acl,
            vec![
                (1, MatchValue::ternary(&[10], &[0xff])),
                (3, MatchValue::Optional(b(&[6]))),
                (4, MatchValue::range(&[80], &[1, 0xbb])),
            ],
            10,
            32656341,
        );
        let acl_any = Entry::matching(acl, vec![], -5, 32656341);
        let mut fw_ok = Entry::matching(
            fw,
            vec![
                (1, MatchValue::Exact(b(&[10, 0, 0, 1]))),
                (2, MatchValue::Exact(b(&[0]))),
            ],
            0,
            17724422,
        );
        fw_ok.action.params = Box::new([param(1, &[1, 0xff])]);
        let mut too_wide = route.clone();
        too_wide.key.matches[0].value = MatchValue::lpm(&[1, 0, 0, 0, 0], 8);
        let unknown_action = Entry::matching(lpm, vec![], 0, 1);
        let mut unknown_param = route.clone();
        let mut params = unknown_param.action.params.into_vec();
        params.push(param(9, &[1]));
        unknown_param.action.params = params.into();
        let mut wide_param = route.clone();
        wide_param.action.params[1].value = b(&[1, 2, 3]);
        let missing_exact = Entry::matching(fw, vec![(1, MatchValue::Exact(b(&[1])))], 0, 17724422);
        let mut wrong_kind = fw_ok.clone();
        wrong_kind.key.matches[1].value = MatchValue::Optional(b(&[1]));
        let unknown_table = Entry::matching(5, vec![], 0, 1);
        // A field id the table does not have is ignored.
        let mut extra_field = fw_ok.clone();
        let mut matches = extra_field.key.matches.into_vec();
        matches.push(FieldMatch {
            field_id: 99,
            value: MatchValue::Exact(b(&[1])),
        });
        extra_field.key.matches = matches.into();
        vec![
            route,
            default_route,
            acl_full,
            acl_any,
            fw_ok,
            too_wide,
            unknown_action,
            unknown_param,
            wide_param,
            missing_exact,
            wrong_kind,
            unknown_table,
            extra_field,
        ]
    }

    const TYPES: [P4Type; 4] = [
        P4Type::Insert,
        P4Type::Modify,
        P4Type::Delete,
        P4Type::Unspecified,
    ];

    /// Every update type of every entry (with metadata, which BFRT drops),
    /// and each key alone as a DELETE.
    fn ops(es: &[Entry]) -> Vec<(P4Type, WriteOp<'_>)> {
        let mut out = Vec::new();
        for e in es {
            for ty in TYPES {
                out.push((ty, WriteOp::new(ty, e).with_metadata(b"p4f1tag")));
            }
            out.push((P4Type::Delete, WriteOp::delete(&e.key)));
        }
        out
    }

    /// Why an op of `entries()[i]` with `ty` cannot be written, if it cannot.
    fn refusal(i: usize, ty: P4Type) -> Option<&'static str> {
        let key = match i {
            5 => Some("value of 5 bytes does not fit in 32 bits"),
            9 => Some("exact field hdr.ipv4.dstAddr is missing"),
            10 => Some("field hdr.ipv4.dstAddr is a Exact match in bfrt.json"),
            11 => return Some("table id 5 not in bfrt.json"),
            _ => None,
        };
        if ty == P4Type::Unspecified {
            return Some("update type is unspecified");
        }
        let with_data = ty != P4Type::Delete;
        key.or(match (i, with_data) {
            (6, true) => Some("action id 1 not in bfrt.json"),
            (7, true) => Some("param id 9 not in bfrt.json"),
            (8, true) => Some("value of 3 bytes does not fit in 9 bits"),
            _ => None,
        })
    }

    fn header() -> BfrtWriteHeader<'static> {
        BfrtWriteHeader {
            target: TargetDevice {
                device_id: 3,
                pipe_id: 0xffff,
                direction: 0xff,
                prsr_id: 0xff,
            },
            client_id: 2,
            atomicity: Atomicity::ContinueOnError,
            p4_name: "router",
        }
    }

    fn entry_of(u: &bfrt::Update) -> (&bfrt::TableEntry, &[bfrt::KeyField]) {
        let Some(bfrt::entity::Entity::TableEntry(t)) =
            u.entity.as_ref().and_then(|e| e.entity.as_ref())
        else {
            panic!("table entry expected")
        };
        let Some(bfrt::table_entry::Value::Key(k)) = &t.value else {
            panic!("key expected")
        };
        (t, &k.fields)
    }

    #[test]
    fn every_op_is_encoded_or_refused_with_its_reason() {
        let m = both();
        let es = entries();
        let (mut ok, mut refused) = (0, 0);
        for (n, (ty, op)) in ops(&es).into_iter().enumerate() {
            let i = n / (TYPES.len() + 1);
            match (m.check(op), refusal(i, ty)) {
                (Ok(c), None) => {
                    ok += 1;
                    let r = m.resolve(&op).unwrap();
                    let mut f = Fields::default();
                    let l = r.plan(&op, &mut f).unwrap();
                    assert_eq!(l.update, c.len());
                    let mut got = Vec::new();
                    r.write(&mut Out(&mut got), 3, &l, &f);
                    let body = &got[1 + super::super::super::wire::varint_len(c.len() as u64)..];
                    // Exactly prost's bytes for what they decode to.
                    let u = bfrt::Update::decode(body).unwrap();
                    assert_eq!(body, u.encode_to_vec(), "{op:?}");
                    assert_eq!(u, sent(&m, op).unwrap());
                    let bty = match ty {
                        P4Type::Insert => bfrt::update::Type::Insert,
                        P4Type::Modify => bfrt::update::Type::Modify,
                        _ => bfrt::update::Type::Delete,
                    };
                    assert_eq!(u.r#type, bty as i32);
                    let (t, keys) = entry_of(&u);
                    let tm = m.table(op.key().table_id).unwrap();
                    assert_eq!(t.table_id, tm.bfrt_table_id);
                    // Every key field explicit, $MATCH_PRIORITY included.
                    let fields = tm.fields.len() + usize::from(tm.priority_id.is_some());
                    assert_eq!(keys.len(), fields, "{op:?}");
                    assert_eq!(t.data.is_some(), ty != P4Type::Delete, "{op:?}");
                }
                (Err(got), Some(want)) => {
                    refused += 1;
                    assert_eq!(got.to_string(), conv(want).to_string(), "{op:?}");
                    // The encoder's own translation refuses it the same way.
                    let planned = m
                        .resolve(&op)
                        .and_then(|r| r.plan(&op, &mut Fields::default()).map(|_| ()));
                    assert_eq!(planned.unwrap_err().to_string(), got.to_string());
                }
                (got, want) => panic!("{op:?}: {got:?}, expected refusal {want:?}"),
            }
        }
        // Both outcomes are exercised.
        assert!(ok >= 20 && refused >= 20, "{ok} ok, {refused} refused");
    }

    #[test]
    fn canonical_entries_read_back_as_written() {
        let m = both();
        let es = entries();
        // route, acl_full, fw_ok: canonical values, non-negative priority.
        for e in [&es[0], &es[2], &es[4]] {
            let tm = m.table(e.key.table_id).unwrap();
            for op in [WriteOp::insert(e), WriteOp::delete(&e.key)] {
                let u = sent(&m, op).unwrap();
                let (t, _) = entry_of(&u);
                let Some(p4fleet_proto::p4runtime::entity::Entity::TableEntry(want)) =
                    op.to_update().entity.and_then(|e| e.entity)
                else {
                    panic!("table entry expected")
                };
                assert_eq!(tm.from_bfrt(t).unwrap(), want, "{op:?}");
            }
        }
    }

    #[test]
    fn dont_cares_priorities_and_unknown_fields() {
        let m = both();
        let es = entries();
        // An omitted LPM field is prefix 0 over a zero value; data is full
        // width whatever the value's length.
        let u = sent(&m, WriteOp::insert(&es[1])).unwrap();
        let (t, keys) = entry_of(&u);
        assert_eq!(
            keys[0].match_type,
            Some(key_field::MatchType::Lpm(key_field::Lpm {
                value: vec![0; 4],
                prefix_len: 0
            }))
        );
        let d = t.data.as_ref().unwrap();
        assert_eq!(
            d.fields[0].value,
            Some(bfrt::data_field::Value::Stream(vec![0; 6]))
        );
        // A negative priority is the lowest: $MATCH_PRIORITY i32::MAX.
        let u = sent(&m, WriteOp::insert(&es[3])).unwrap();
        let (_, keys) = entry_of(&u);
        assert_eq!(
            keys.last().unwrap().match_type,
            Some(key_field::MatchType::Exact(key_field::Exact {
                value: (i32::MAX as u32).to_be_bytes().to_vec()
            }))
        );
        // A field id the table does not have changes nothing.
        assert_eq!(
            sent(&m, WriteOp::insert(&es[12])).unwrap(),
            sent(&m, WriteOp::insert(&es[4])).unwrap()
        );
    }

    #[test]
    fn requests_are_byte_equal_to_prost() {
        let m = both();
        let es = entries();
        let good: Vec<BfrtOp> = ops(&es)
            .into_iter()
            .filter_map(|(_, op)| m.check(op).ok())
            .collect();
        for h in [
            header(),
            BfrtWriteHeader {
                target: TargetDevice::default(),
                client_id: 0,
                atomicity: Atomicity::RollbackOnError,
                p4_name: "",
            },
        ] {
            for slice in [&good[..], &good[..1], &[]] {
                let got = bfrt_write_request(&m, &h, slice).unwrap();
                let want = bfrt::WriteRequest {
                    target: Some(h.target),
                    client_id: h.client_id,
                    updates: slice.iter().map(|op| sent(&m, *op.op()).unwrap()).collect(),
                    atomicity: h.atomicity.bfrt(),
                    p4_name: h.p4_name.into(),
                };
                assert_eq!(got, want.encode_to_vec());
            }
        }
        // An op checked against another map is refused, not mis-encoded.
        let route = m.check(WriteOp::insert(&es[0])).unwrap();
        let fw_only = map(FIREWALL_P4INFO, FIREWALL_BFRT);
        assert!(bfrt_write_request(&fw_only, &header(), &[route]).is_err());
        let mut other = both();
        other
            .by_p4
            .values_mut()
            .for_each(|t| t.bfrt_table_id = 1 << 30);
        let err = bfrt_write_request(&other, &header(), &[good[0], route]).unwrap_err();
        assert!(err.to_string().contains("changed"), "{err}");
    }

    #[test]
    fn full_width_values() {
        let mut out = Vec::new();
        Val::Max(9).write(&mut out);
        Val::Padded(&[7], 3).write(&mut out);
        Val::Zeros(2).write(&mut out);
        Val::Max(0).write(&mut out);
        Val::U32(1).write(&mut out);
        assert_eq!(out, vec![1, 0xff, 0, 0, 7, 0, 0, 0, 0, 0, 1]);
        assert_eq!(Val::Max(0).len(), 0);
        assert!(padded(&[0, 0, 1, 2], 9).is_ok());
        assert!(padded(&[2, 0], 9).is_ok()); // width is checked by bytes
        assert!(padded(&[1, 2, 3], 16).is_err());
        let full = |v: &[u8], w| {
            padded(v, w).map(|v| {
                let mut out = Vec::new();
                v.write(&mut out);
                out
            })
        };
        assert_eq!(full(&[0, 0, 1], 9).unwrap(), vec![0, 1]);
        assert_eq!(full(&[0], 32).unwrap(), vec![0, 0, 0, 0]);
        assert!(full(&[1, 0, 0], 16).is_err());
    }
}
