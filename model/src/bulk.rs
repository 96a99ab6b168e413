//! p4fleet's columnar bulk write (`p4fleet.bulk.v1.BulkWrite`, docs/bulk.md)
//! for P4Runtime targets that advertise it.
//!
//! [`P4RuntimeDevice::write_ops`](super::P4RuntimeDevice::write_ops) and
//! [`P4RuntimeDevice::write`](super::P4RuntimeDevice::write) hand every
//! write to [`BulkState::try_write`] first.
//! It is used when the target
//! answers `BulkWrite.Capabilities` (asked once per connection; UNIMPLEMENTED
//! = absent), the slot's P4Info is known, the atomicity is
//! CONTINUE_ON_ERROR, and the updates are plain entries of one table with one
//! update type that the columns represent exactly. Anything else (or any
//! value the columns could not carry unchanged) goes the standard way, so
//! the per-update results are always the standard path's.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use p4fleet_crds::entry_set::Atomicity;
use p4fleet_proto::bulk::{self as bk, bulk_write_client::BulkWriteClient};
use p4fleet_proto::p4info::{P4Info, match_field};
use p4fleet_proto::p4runtime::{
    self as p4rt, GetForwardingPipelineConfigRequest, Uint128, Update, field_match::FieldMatchType,
    get_forwarding_pipeline_config_request::ResponseType, p4_runtime_client::P4RuntimeClient,
    update::Type,
};
use tonic::transport::Channel;

use p4fleet_model::entries::{ActionCall, EntryKey, MatchValue, WriteOp};

use super::order::{self, OrderKey};
use super::{UpdateFailure, WriteOptions, WriteReport};

/// Match kinds, as the columns carry them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Exact,
    Lpm,
    Ternary,
    Range,
    Optional,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct FieldCol {
    id: u32,
    kind: Kind,
    bitwidth: u32,
    width: usize,
}

/// Column widths of every table and action of a P4Info: what the encoder
/// needs to pad values to ceil(bitwidth / 8) bytes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BulkSchema {
    tables: HashMap<u32, Vec<FieldCol>>,
    /// Action id -> (param id, width) in P4Info order.
    actions: HashMap<u32, Vec<(u32, usize)>>,
}

fn width(bitwidth: i32) -> usize {
    (bitwidth.max(1) as usize).div_ceil(8)
}

impl BulkSchema {
    pub fn from_p4info(info: &P4Info) -> BulkSchema {
        let mut s = BulkSchema::default();
        for t in &info.tables {
            let Some(pre) = &t.preamble else { continue };
            let mut cols = Vec::with_capacity(t.match_fields.len());
            let mut ok = true;
            for f in &t.match_fields {
                use match_field::MatchType as M;
                let kind = match &f.r#match {
                    Some(match_field::Match::MatchType(m)) => match M::try_from(*m) {
                        Ok(M::Exact) => Kind::Exact,
                        Ok(M::Lpm) => Kind::Lpm,
                        Ok(M::Ternary) => Kind::Ternary,
                        Ok(M::Range) => Kind::Range,
                        Ok(M::Optional) => Kind::Optional,
                        _ => {
                            ok = false;
                            break;
                        }
                    },
                    _ => {
                        ok = false;
                        break;
                    }
                };
                cols.push(FieldCol {
                    id: f.id,
                    kind,
                    bitwidth: f.bitwidth.max(1) as u32,
                    width: width(f.bitwidth),
                });
            }
            // Tables with match kinds the columns cannot carry stay on the
            // standard path.
            if ok {
                s.tables.insert(pre.id, cols);
            }
        }
        for a in &info.actions {
            let Some(pre) = &a.preamble else { continue };
            s.actions.insert(
                pre.id,
                a.params.iter().map(|p| (p.id, width(p.bitwidth))).collect(),
            );
        }
        s
    }
}

/// Appends `v` right-aligned in `width` bytes; false when it cannot be
/// carried unchanged (empty, or longer than `width` after leading zeros).
fn push_padded(col: &mut Vec<u8>, v: &[u8], width: usize) -> bool {
    let first = v.iter().position(|b| *b != 0).unwrap_or(v.len());
    let sig = &v[first..];
    if v.is_empty() || sig.len() > width {
        return false;
    }
    col.resize(col.len() + width - sig.len(), 0);
    col.extend_from_slice(sig);
    true
}

fn is_zero(v: &[u8]) -> bool {
    v.iter().all(|b| *b == 0)
}

/// Whether `v` (any length) is the largest value of `bits` bits.
fn is_max(v: &[u8], bits: u32) -> bool {
    let first = v.iter().position(|b| *b != 0).unwrap_or(v.len());
    let sig = &v[first..];
    let nb = (bits as usize).div_ceil(8);
    let spare = (nb * 8) as u32 - bits;
    sig.len() == nb
        && sig
            .iter()
            .enumerate()
            .all(|(i, b)| *b == if i == 0 { 0xff >> spare } else { 0xff })
}

/// A match as the encoder reads it.
pub enum MatchRef<'a> {
    Exact(&'a [u8]),
    Lpm(&'a [u8], i64),
    Ternary(&'a [u8], &'a [u8]),
    Range(&'a [u8], &'a [u8]),
    Optional(&'a [u8]),
    /// A match the columns do not carry.
    Other,
}

/// One row to encode: a P4Runtime update, or a [`WriteOp`] of p4fleet's
/// entry model (which skips building the Update).
pub trait Row {
    fn update_type(&self) -> Type;
    /// The row's table, or None when it is not a plain table entry (default
    /// entry, counters, meters, idle timeout, ...).
    fn plain_table(&self) -> Option<u32>;
    fn matches(&self) -> impl Iterator<Item = (u32, MatchRef<'_>)>;
    fn priority(&self) -> i32;
    fn metadata(&self) -> &[u8];
    /// Direct action id and its number of params.
    fn action(&self) -> Option<(u32, usize)>;
    fn param(&self, param_id: u32) -> Option<&[u8]>;
}

fn table_entry(u: &Update) -> Option<&p4rt::TableEntry> {
    match u.entity.as_ref()?.entity.as_ref()? {
        p4rt::entity::Entity::TableEntry(te) => Some(te),
        _ => None,
    }
}

fn direct_action(te: &p4rt::TableEntry) -> Option<&p4rt::Action> {
    match te.action.as_ref()?.r#type.as_ref()? {
        p4rt::table_action::Type::Action(a) => Some(a),
        _ => None,
    }
}

impl Row for Update {
    fn update_type(&self) -> Type {
        Type::try_from(self.r#type).unwrap_or(Type::Unspecified)
    }

    fn plain_table(&self) -> Option<u32> {
        let te = table_entry(self)?;
        let plain = !te.is_default_action
            && te.idle_timeout_ns == 0
            && te.meter_config.is_none()
            && te.counter_data.is_none()
            && te.meter_counter_data.is_none()
            && te.time_since_last_hit.is_none()
            && !te.r#const;
        plain.then_some(te.table_id)
    }

    fn matches(&self) -> impl Iterator<Item = (u32, MatchRef<'_>)> {
        table_entry(self).into_iter().flat_map(|te| {
            te.r#match.iter().map(|m| {
                let r = match m.field_match_type.as_ref() {
                    Some(FieldMatchType::Exact(e)) => MatchRef::Exact(&e.value),
                    Some(FieldMatchType::Lpm(l)) => {
                        MatchRef::Lpm(&l.value, i64::from(l.prefix_len))
                    }
                    Some(FieldMatchType::Ternary(t)) => MatchRef::Ternary(&t.value, &t.mask),
                    Some(FieldMatchType::Range(r)) => MatchRef::Range(&r.low, &r.high),
                    Some(FieldMatchType::Optional(o)) => MatchRef::Optional(&o.value),
                    _ => MatchRef::Other,
                };
                (m.field_id, r)
            })
        })
    }

    fn priority(&self) -> i32 {
        table_entry(self).map(|te| te.priority).unwrap_or(0)
    }

    fn metadata(&self) -> &[u8] {
        table_entry(self)
            .map(|te| te.metadata.as_slice())
            .unwrap_or(&[])
    }

    fn action(&self) -> Option<(u32, usize)> {
        direct_action(table_entry(self)?).map(|a| (a.action_id, a.params.len()))
    }

    fn param(&self, param_id: u32) -> Option<&[u8]> {
        direct_action(table_entry(self)?)?
            .params
            .iter()
            .find(|p| p.param_id == param_id)
            .map(|p| p.value.as_slice())
    }
}

fn key_matches(k: &EntryKey) -> impl Iterator<Item = (u32, MatchRef<'_>)> {
    k.matches.iter().map(|m| {
        let r = match &m.value {
            MatchValue::Exact(v) => MatchRef::Exact(v.as_slice()),
            MatchValue::Lpm { value, prefix_len } => {
                MatchRef::Lpm(value.as_slice(), i64::from(*prefix_len))
            }
            MatchValue::Ternary { value, mask } => {
                MatchRef::Ternary(value.as_slice(), mask.as_slice())
            }
            MatchValue::Range { low, high } => MatchRef::Range(low.as_slice(), high.as_slice()),
            MatchValue::Optional(v) => MatchRef::Optional(v.as_slice()),
        };
        (m.field_id, r)
    })
}

fn call_param(a: &ActionCall, param_id: u32) -> Option<&[u8]> {
    a.params
        .iter()
        .find(|p| p.param_id == param_id)
        .map(|p| p.value.as_slice())
}

impl Row for WriteOp<'_> {
    fn update_type(&self) -> Type {
        self.ty()
    }

    fn plain_table(&self) -> Option<u32> {
        Some(self.key().table_id)
    }

    fn matches(&self) -> impl Iterator<Item = (u32, MatchRef<'_>)> {
        key_matches(self.key())
    }

    fn priority(&self) -> i32 {
        self.key().priority
    }

    fn metadata(&self) -> &[u8] {
        WriteOp::metadata(self)
    }

    fn action(&self) -> Option<(u32, usize)> {
        self.action().map(|a| (a.action_id, a.params.len()))
    }

    fn param(&self, param_id: u32) -> Option<&[u8]> {
        call_param(self.action()?, param_id)
    }
}

/// The columnar form of `updates` (all of `table_id`, all of type `ty`), or
/// None when some update cannot be carried exactly (then the standard path
/// must take them, to give the standard answers).
pub fn encode<R: Row>(
    schema: &BulkSchema,
    table_id: u32,
    ty: Type,
    updates: &[R],
) -> Option<bk::BulkWriteRequest> {
    let fields = schema.tables.get(&table_id)?;
    let n = updates.len();
    let mut values: Vec<Vec<u8>> = fields
        .iter()
        .map(|f| Vec::with_capacity(f.width * n))
        .collect();
    let mut masks: Vec<Vec<u8>> = fields
        .iter()
        .map(|f| match f.kind {
            Kind::Ternary | Kind::Range => Vec::with_capacity(f.width * n),
            _ => Vec::new(),
        })
        .collect();
    let mut side: Vec<Vec<u8>> = vec![Vec::new(); fields.len()];
    let mut priorities = Vec::new();
    let mut any_priority = false;
    let mut metadata = Vec::new();
    let mut metadata_lens = Vec::new();
    let mut action_ids: Vec<u32> = Vec::new();
    // (action id, param id) -> column.
    let mut params: Vec<(u32, u32, usize, Vec<u8>)> = Vec::new();
    let with_action = ty != Type::Delete;
    let mut seen: Vec<bool> = vec![false; fields.len()];

    for (row, u) in updates.iter().enumerate() {
        if u.plain_table() != Some(table_id) {
            return None;
        }
        seen.iter_mut().for_each(|s| *s = false);
        for (field_id, m) in u.matches() {
            let idx = fields.iter().position(|f| f.id == field_id)?;
            if std::mem::replace(&mut seen[idx], true) {
                return None;
            }
            let f = &fields[idx];
            let ok = match (f.kind, m) {
                (Kind::Exact, MatchRef::Exact(v)) => push_padded(&mut values[idx], v, f.width),
                (Kind::Lpm, MatchRef::Lpm(value, prefix_len)) => {
                    // prefix_len 0 encodes "omitted": an explicit 0 must get
                    // the standard path's error.
                    let len = u16::try_from(prefix_len).ok().filter(|l| *l > 0)?;
                    side[idx].extend_from_slice(&len.to_be_bytes());
                    push_padded(&mut values[idx], value, f.width)
                }
                (Kind::Ternary, MatchRef::Ternary(value, mask)) => {
                    !is_zero(mask)
                        && push_padded(&mut values[idx], value, f.width)
                        && push_padded(&mut masks[idx], mask, f.width)
                }
                (Kind::Range, MatchRef::Range(low, high)) => {
                    !(is_zero(low) && is_max(high, f.bitwidth))
                        && push_padded(&mut values[idx], low, f.width)
                        && push_padded(&mut masks[idx], high, f.width)
                }
                (Kind::Optional, MatchRef::Optional(v)) => {
                    side[idx].push(1);
                    push_padded(&mut values[idx], v, f.width)
                }
                _ => false,
            };
            if !ok {
                return None;
            }
        }
        // Omitted (don't-care) fields; an omitted exact field must get the
        // standard path's error.
        for (idx, f) in fields.iter().enumerate() {
            if seen[idx] {
                continue;
            }
            match f.kind {
                Kind::Exact => return None,
                Kind::Lpm => side[idx].extend_from_slice(&[0, 0]),
                Kind::Ternary => {
                    let m = &mut masks[idx];
                    m.resize(m.len() + f.width, 0)
                }
                Kind::Range => {
                    // Full range: low 0, high all ones.
                    let hi = &mut masks[idx];
                    let spare = (f.width * 8) as u32 - f.bitwidth;
                    hi.push(0xff >> spare);
                    hi.resize(hi.len() + f.width - 1, 0xff);
                }
                Kind::Optional => side[idx].push(0),
            }
            let v = &mut values[idx];
            v.resize(v.len() + f.width, 0);
        }
        let priority = u.priority();
        any_priority |= priority != 0;
        priorities.extend_from_slice(&priority.to_be_bytes());
        let md = u.metadata();
        metadata.extend_from_slice(md);
        metadata_lens.extend_from_slice(&u32::try_from(md.len()).ok()?.to_be_bytes());

        if with_action {
            let (action_id, nparams) = u.action()?;
            let declared = schema.actions.get(&action_id)?;
            // Every declared param exactly once (columns have no holes).
            if nparams != declared.len() {
                return None;
            }
            if action_ids.last() != Some(&action_id) {
                for &(pid, w) in declared {
                    if !params
                        .iter()
                        .any(|(aid, id, _, _)| *aid == action_id && *id == pid)
                    {
                        // Earlier rows of other actions leave zeros here.
                        params.push((action_id, pid, w, vec![0; w * row]));
                    }
                }
            }
            action_ids.push(action_id);
            for (aid, pid, w, col) in params.iter_mut() {
                if *aid != action_id {
                    col.resize(col.len() + *w, 0);
                    continue;
                }
                if !push_padded(col, u.param(*pid)?, *w) {
                    return None;
                }
            }
            // Duplicate or unknown param ids leave a column short.
            if params
                .iter()
                .any(|(_, _, w, col)| col.len() != w * (row + 1))
            {
                return None;
            }
        }
    }

    let single = action_ids.windows(2).all(|w| w[0] == w[1]);
    let batch_action = if single {
        action_ids.first().copied().unwrap_or(0)
    } else {
        0
    };
    let mut matches = Vec::with_capacity(fields.len());
    for ((f, v), (m, s)) in fields.iter().zip(values).zip(masks.into_iter().zip(side)) {
        let mut c = bk::MatchColumn {
            field_id: f.id,
            values: Some(bk::Column {
                width: f.width as u32,
                values: v,
            }),
            ..Default::default()
        };
        match f.kind {
            Kind::Exact => {}
            Kind::Lpm => c.prefix_lens = s,
            Kind::Ternary | Kind::Range => {
                c.masks = Some(bk::Column {
                    width: f.width as u32,
                    values: m,
                })
            }
            Kind::Optional => c.present = s,
        }
        matches.push(c);
    }
    let has_metadata = !metadata.is_empty();
    Some(bk::BulkWriteRequest {
        table_id,
        r#type: match ty {
            Type::Insert => bk::UpdateType::Insert,
            Type::Modify => bk::UpdateType::Modify,
            Type::Delete => bk::UpdateType::Delete,
            Type::Unspecified => return None,
        } as i32,
        count: n as u64,
        matches,
        action_id: batch_action,
        action_ids: if single {
            Vec::new()
        } else {
            action_ids.iter().flat_map(|a| a.to_be_bytes()).collect()
        },
        params: params
            .into_iter()
            .map(|(aid, pid, w, values)| bk::ParamColumn {
                action_id: if single { 0 } else { aid },
                param_id: pid,
                values: Some(bk::Column {
                    width: w as u32,
                    values,
                }),
            })
            .collect(),
        priorities: if any_priority { priorities } else { Vec::new() },
        metadata,
        metadata_lens: if has_metadata {
            metadata_lens
        } else {
            Vec::new()
        },
        ..Default::default()
    })
}

/// The table and update type shared by every row, if they share one (and
/// every row is a plain table entry).
fn single_table<R: Row>(rows: &[R]) -> Option<(u32, Type)> {
    let first = rows.first()?;
    let (table, ty) = (first.plain_table()?, first.update_type());
    rows.iter()
        .all(|r| r.update_type() == ty && r.plain_table() == Some(table))
        .then_some((table, ty))
}

/// Bulk state of one P4Runtime connection.
pub(crate) struct BulkState {
    client: BulkWriteClient<Channel>,
    enabled: AtomicBool,
    /// Whether the target serves BulkWrite: asked once, kept once known.
    supported: tokio::sync::Mutex<Option<bool>>,
    /// Column widths per slot, from the P4Info pushed or read back.
    schemas: Mutex<HashMap<u32, Arc<BulkSchema>>>,
}

impl BulkState {
    pub(crate) fn new(channel: Channel, max_message: usize) -> BulkState {
        BulkState {
            client: BulkWriteClient::new(channel)
                .max_decoding_message_size(max_message)
                .max_encoding_message_size(max_message),
            enabled: AtomicBool::new(true),
            supported: tokio::sync::Mutex::new(None),
            schemas: Mutex::new(HashMap::new()),
        }
    }

    pub(crate) fn set_enabled(&self, on: bool) {
        self.enabled.store(on, Ordering::Relaxed);
    }

    pub(crate) fn enabled(&self) -> bool {
        self.enabled.load(Ordering::Relaxed)
    }

    /// Whether the target advertises BulkWrite (asked on first use; a
    /// transient failure is asked again next time).
    pub(crate) async fn supported(&self) -> bool {
        let mut s = self.supported.lock().await;
        if let Some(known) = *s {
            return known;
        }
        match self
            .client
            .clone()
            .capabilities(bk::BulkCapabilitiesRequest {})
            .await
        {
            Ok(_) => {
                *s = Some(true);
                true
            }
            Err(st) if st.code() == tonic::Code::Unimplemented => {
                *s = Some(false);
                false
            }
            Err(st) => {
                tracing::debug!(status = %st, "BulkWrite.Capabilities failed; asking again later");
                false
            }
        }
    }

    /// Records the P4Info of a slot (on every set_pipeline).
    pub(crate) fn set_schema(&self, slot: u32, p4info: &P4Info) {
        let s = Arc::new(BulkSchema::from_p4info(p4info));
        self.schemas
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(slot, s);
    }

    /// The slot's column widths, reading its P4Info back once if this
    /// connection did not push it.
    async fn schema(
        &self,
        slot: u32,
        device_id: u64,
        p4: &P4RuntimeClient<Channel>,
    ) -> Option<Arc<BulkSchema>> {
        if let Some(s) = self
            .schemas
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&slot)
        {
            return Some(s.clone());
        }
        let resp = p4
            .clone()
            .get_forwarding_pipeline_config(GetForwardingPipelineConfigRequest {
                device_id,
                response_type: ResponseType::P4infoAndCookie as i32,
            })
            .await
            .ok()?;
        let info = resp.into_inner().config?.p4info?;
        self.set_schema(slot, &info);
        self.schemas
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&slot)
            .cloned()
    }

    /// Writes `rows` with BulkWrite when it applies (see the module docs)
    /// and returns true; false means nothing was sent and the caller takes
    /// the standard path.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn try_write<R: Row + OrderKey>(
        &self,
        p4: &P4RuntimeClient<Channel>,
        slot: u32,
        device_id: u64,
        election_id: Uint128,
        rows: &[R],
        opts: WriteOptions,
        report: &mut WriteReport,
    ) -> bool {
        if !self.enabled() || opts.atomicity != Atomicity::ContinueOnError {
            return false;
        }
        let Some((table_id, ty)) = single_table(rows) else {
            return false;
        };
        self.send_rows(
            p4,
            slot,
            device_id,
            election_id,
            table_id,
            ty,
            rows,
            opts,
            report,
        )
        .await
    }

    #[allow(clippy::too_many_arguments)]
    async fn send_rows<R: Row + OrderKey>(
        &self,
        p4: &P4RuntimeClient<Channel>,
        slot: u32,
        device_id: u64,
        election_id: Uint128,
        table_id: u32,
        ty: Type,
        updates: &[R],
        opts: WriteOptions,
        report: &mut WriteReport,
    ) -> bool {
        if ty == Type::Unspecified || !self.supported().await {
            return false;
        }
        let Some(schema) = self.schema(slot, device_id, p4).await else {
            return false;
        };
        let batch = opts.batch_size.max(1);
        // Encode every request up front: one that cannot be carried exactly
        // sends the whole write the standard way.
        let mut reqs = Vec::with_capacity(updates.len().div_ceil(batch));
        for (i, chunk) in updates.chunks(batch).enumerate() {
            let Some(mut r) = encode(&schema, table_id, ty, chunk) else {
                return false;
            };
            r.device_id = device_id;
            r.election_id = Some(election_id);
            reqs.push((i * batch, chunk.len(), r));
        }
        report.requests = reqs.len();
        // Same-key order across requests in flight (see `order`).
        let deps = order::batch_dependencies(updates.chunks(batch), opts.max_in_flight);
        let start = Instant::now();
        let client = &self.client;
        order::run(
            reqs,
            &deps,
            opts.max_in_flight,
            |(offset, n, req)| {
                let mut client = client.clone();
                async move {
                    let t = Instant::now();
                    let r = client.write(req).await;
                    (offset, n, t.elapsed(), r)
                }
            },
            |(offset, n, latency, r)| {
                report.total_request_latency += latency;
                match r {
                    Ok(resp) => report
                        .failures
                        .extend(resp.into_inner().errors.into_iter().map(|e| UpdateFailure {
                            index: offset + e.index as usize,
                            code: e.code,
                            message: e.message,
                        })),
                    Err(status) => {
                        report.failed_requests += 1;
                        let msg = format!("{:?}: {}", status.code(), status.message());
                        report.failures.extend((0..n).map(|i| UpdateFailure {
                            index: offset + i,
                            code: status.code() as i32,
                            message: msg.clone(),
                        }));
                    }
                }
            },
        )
        .await;
        report.elapsed = start.elapsed();
        report.failures.sort_by_key(|f| f.index);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use p4fleet_model::entries::Entry;

    const INFO: &str = r#"
tables {
  preamble { id: 1 name: "t" }
  match_fields { id: 1 name: "a" bitwidth: 9 match_type: EXACT }
  match_fields { id: 2 name: "b" bitwidth: 32 match_type: LPM }
  match_fields { id: 3 name: "c" bitwidth: 12 match_type: RANGE }
  action_refs { id: 10 }
  action_refs { id: 11 }
}
actions { preamble { id: 10 name: "set" } params { id: 1 name: "p" bitwidth: 4 } params { id: 2 name: "q" bitwidth: 16 } }
actions { preamble { id: 11 name: "NoAction" } }
"#;

    fn schema() -> BulkSchema {
        BulkSchema::from_p4info(&p4fleet_proto::p4info::parse_text(INFO).unwrap())
    }

    fn fm(id: u32, t: FieldMatchType) -> p4rt::FieldMatch {
        p4rt::FieldMatch {
            field_id: id,
            field_match_type: Some(t),
        }
    }

    fn exact(v: &[u8]) -> p4rt::FieldMatch {
        fm(
            1,
            FieldMatchType::Exact(p4rt::field_match::Exact { value: v.to_vec() }),
        )
    }

    fn upd(matches: Vec<p4rt::FieldMatch>, action: u32, params: &[(u32, &[u8])]) -> Update {
        Update {
            r#type: Type::Insert as i32,
            entity: Some(p4rt::Entity {
                entity: Some(p4rt::entity::Entity::TableEntry(p4rt::TableEntry {
                    table_id: 1,
                    r#match: matches,
                    action: Some(p4rt::TableAction {
                        r#type: Some(p4rt::table_action::Type::Action(p4rt::Action {
                            action_id: action,
                            params: params
                                .iter()
                                .map(|(id, v)| p4rt::action::Param {
                                    param_id: *id,
                                    value: v.to_vec(),
                                })
                                .collect(),
                        })),
                    }),
                    priority: 3,
                    ..Default::default()
                })),
            }),
        }
    }

    #[test]
    fn pads_values_and_encodes_omitted_fields() {
        let s = schema();
        let lpm = fm(
            2,
            FieldMatchType::Lpm(p4rt::field_match::Lpm {
                value: vec![10, 0, 0, 0],
                prefix_len: 8,
            }),
        );
        let us = vec![
            upd(vec![exact(&[1, 2]), lpm], 10, &[(2, &[7]), (1, &[1])]),
            upd(vec![exact(&[0, 0, 5])], 10, &[(1, &[2]), (2, &[1, 0])]),
        ];
        let r = encode(&s, 1, Type::Insert, &us).unwrap();
        assert_eq!(r.count, 2);
        assert_eq!(r.action_id, 10);
        assert!(r.action_ids.is_empty());
        let a = &r.matches[0];
        assert_eq!(a.values.as_ref().unwrap().values, vec![1, 2, 0, 5]);
        let b = &r.matches[1];
        assert_eq!(
            b.values.as_ref().unwrap().values,
            vec![10, 0, 0, 0, 0, 0, 0, 0]
        );
        assert_eq!(b.prefix_lens, vec![0, 8, 0, 0]);
        let c = &r.matches[2];
        assert_eq!(c.values.as_ref().unwrap().values, vec![0; 4]);
        assert_eq!(
            c.masks.as_ref().unwrap().values,
            vec![0x0f, 0xff, 0x0f, 0xff]
        );
        assert_eq!(r.params.len(), 2);
        assert_eq!(r.params[0].values.as_ref().unwrap().values, vec![1, 2]);
        assert_eq!(
            r.params[1].values.as_ref().unwrap().values,
            vec![0, 7, 1, 0]
        );
        assert_eq!(r.priorities, vec![0, 0, 0, 3, 0, 0, 0, 3]);
        assert!(r.metadata_lens.is_empty());
    }

    #[test]
    fn entries_encode_like_their_updates() {
        use p4fleet_model::entries::{ActionCall, ActionParam, ByteStr, EntryKey, FieldMatch};
        let e = Entry {
            key: EntryKey {
                table_id: 1,
                matches: vec![
                    FieldMatch {
                        field_id: 1,
                        value: MatchValue::Exact(ByteStr::canonical(&[1, 2])),
                    },
                    FieldMatch {
                        field_id: 3,
                        value: MatchValue::Range {
                            low: ByteStr::canonical(&[1]),
                            high: ByteStr::canonical(&[2]),
                        },
                    },
                ],
                priority: 3,
            },
            action: ActionCall {
                action_id: 10,
                params: vec![
                    ActionParam {
                        param_id: 1,
                        value: ByteStr::canonical(&[1]),
                    },
                    ActionParam {
                        param_id: 2,
                        value: ByteStr::canonical(&[1, 0]),
                    },
                ],
            },
        };
        let u = Update {
            r#type: Type::Insert as i32,
            entity: Some(p4rt::Entity {
                entity: Some(p4rt::entity::Entity::TableEntry(e.to_proto())),
            }),
        };
        let s = schema();
        let from_entry = encode(&s, 1, Type::Insert, &[WriteOp::insert(&e)]).unwrap();
        assert_eq!(Some(from_entry), encode(&s, 1, Type::Insert, &[u]));
    }

    #[test]
    fn mixed_actions_use_an_action_id_column() {
        let us = vec![
            upd(vec![exact(&[1])], 11, &[]),
            upd(vec![exact(&[2])], 10, &[(1, &[1]), (2, &[2])]),
        ];
        let r = encode(&schema(), 1, Type::Insert, &us).unwrap();
        assert_eq!(r.action_id, 0);
        assert_eq!(r.action_ids, vec![0, 0, 0, 11, 0, 0, 0, 10]);
        assert_eq!(r.params[0].action_id, 10);
        assert_eq!(r.params[0].values.as_ref().unwrap().values, vec![0, 1]);
    }

    #[test]
    fn what_columns_cannot_carry_goes_the_standard_way() {
        let s = schema();
        let ok = |u: Update| encode(&s, 1, Type::Insert, &[u]).is_some();
        // Too wide for the column, empty, missing exact field, explicit
        // don't-care LPM, missing or unknown param, unknown field.
        assert!(!ok(upd(vec![exact(&[1, 2, 3])], 11, &[])));
        assert!(!ok(upd(vec![exact(&[])], 11, &[])));
        assert!(!ok(upd(vec![], 11, &[])));
        let lpm0 = fm(
            2,
            FieldMatchType::Lpm(p4rt::field_match::Lpm {
                value: vec![0],
                prefix_len: 0,
            }),
        );
        assert!(!ok(upd(vec![exact(&[1]), lpm0], 11, &[])));
        assert!(!ok(upd(vec![exact(&[1])], 10, &[(1, &[1])])));
        assert!(!ok(upd(vec![exact(&[1])], 10, &[(1, &[1]), (3, &[1])])));
        assert!(!ok(upd(vec![exact(&[1])], 12, &[])));
        let other = fm(
            9,
            FieldMatchType::Exact(p4rt::field_match::Exact { value: vec![1] }),
        );
        assert!(!ok(upd(vec![exact(&[1]), other], 11, &[])));
        // A value wider than its bitwidth but within the column goes bulk
        // (the target refuses it per row, as it would a standard write).
        assert!(ok(upd(vec![exact(&[2, 0])], 11, &[])));
    }

    #[test]
    fn single_table_and_type() {
        let a = upd(vec![exact(&[1])], 11, &[]);
        let mut b = a.clone();
        assert_eq!(
            single_table(&[a.clone(), b.clone()]),
            Some((1, Type::Insert))
        );
        b.r#type = Type::Delete as i32;
        assert_eq!(single_table(&[a, b]), None);
        assert_eq!(single_table::<Update>(&[]), None);
    }
}
