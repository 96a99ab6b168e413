//! p4fleet's columnar bulk write (`p4fleet.bulk.v1.BulkWrite`, see
//! docs/bulk.md), served next to P4Runtime on the same port.
//!
//! A request carries one table batch as columns. Columns are cut into rows
//! by slicing (no per-row protobuf decode); each row becomes the views a
//! parsed standard `p4.v1.TableEntry` would give and goes through the same
//! [`super::pipeline::Pipeline::apply_entry`], so validation, canonical keys,
//! table sizes, error codes and what Read returns afterwards are the
//! standard path's.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use p4fleet_proto::bulk::{
    self as bk, BulkCapabilitiesRequest, BulkCapabilitiesResponse, BulkWriteRequest,
    BulkWriteResponse, RowError, bulk_write_server::BulkWrite,
};
use p4fleet_proto::p4runtime::update::Type;
use tonic::{Request, Response, Status};

use super::arbitration::{check_primary, from_uint128};
use super::entry::{canonical, is_max};
use super::wire::{ActionView, FieldView, MatchView, ParamView, Scratch, TableEntryView};
use crate::key::MatchKind;
use crate::p4runtime::schema::TableInfo;
use crate::registry::Registry;
use crate::wire;

/// Format version reported by Capabilities.
pub const BULK_VERSION: &str = "1";

/// The tonic service; build with [`crate::Emulator::bulk_service`].
#[derive(Clone)]
pub struct BulkService {
    pub(crate) registry: Arc<Registry>,
}

/// `count` fixed-width values back to back.
#[derive(Clone, Copy)]
struct Col<'a> {
    width: usize,
    values: &'a [u8],
}

impl<'a> Col<'a> {
    fn new(c: Option<&'a bk::Column>, n: usize, what: &dyn Fn() -> String) -> Result<Self, Status> {
        let c = c.ok_or_else(|| Status::invalid_argument(format!("{}: no column", what())))?;
        let width = c.width as usize;
        if width == 0 || c.values.len() != width * n {
            return Err(Status::invalid_argument(format!(
                "{}: {} bytes for {n} values of width {width}",
                what(),
                c.values.len()
            )));
        }
        Ok(Col {
            width,
            values: &c.values,
        })
    }

    fn get(&self, i: usize) -> &'a [u8] {
        &self.values[i * self.width..(i + 1) * self.width]
    }
}

/// Checks that a per-row fixed-size side column has `n` elements.
fn side<'a>(b: &'a [u8], elem: usize, n: usize, what: &str) -> Result<&'a [u8], Status> {
    if b.len() != elem * n {
        return Err(Status::invalid_argument(format!(
            "{what}: {} bytes for {n} rows of {elem}",
            b.len()
        )));
    }
    Ok(b)
}

enum MatchCol<'a> {
    Exact(Col<'a>),
    Lpm(Col<'a>, &'a [u8]),
    Ternary(Col<'a>, Col<'a>),
    Range(Col<'a>, Col<'a>, u32),
    Optional(Col<'a>, &'a [u8]),
}

/// A request checked against the table's shape, ready to be cut into rows.
struct Plan<'a> {
    table_id: u32,
    n: usize,
    matches: Vec<(u32, MatchCol<'a>)>,
    action_id: u32,
    action_ids: Option<&'a [u8]>,
    /// (action id, param id, values).
    params: Vec<(u32, u32, Col<'a>)>,
    priorities: Option<&'a [u8]>,
    /// Start offsets of each row's metadata (n + 1 of them).
    metadata: Option<(Vec<usize>, &'a [u8])>,
}

impl<'a> Plan<'a> {
    fn new(req: &'a BulkWriteRequest, table: &TableInfo, n: usize) -> Result<Self, Status> {
        let mut matches = Vec::with_capacity(req.matches.len());
        for m in &req.matches {
            let Some((_, f)) = table.field(m.field_id) else {
                return Err(Status::invalid_argument(format!(
                    "table {}: unknown match field id {}",
                    table.name, m.field_id
                )));
            };
            if matches.iter().any(|(id, _)| *id == m.field_id) {
                return Err(Status::invalid_argument(format!(
                    "table {}: duplicate match column {}",
                    table.name, f.name
                )));
            }
            let what = || format!("table {} field {}", table.name, f.name);
            let values = Col::new(m.values.as_ref(), n, &what)?;
            let masks = || Col::new(m.masks.as_ref(), n, &|| format!("{} masks", what()));
            let col = match f.kind {
                MatchKind::Exact => MatchCol::Exact(values),
                MatchKind::Lpm => MatchCol::Lpm(values, side(&m.prefix_lens, 2, n, &what())?),
                MatchKind::Ternary => MatchCol::Ternary(values, masks()?),
                MatchKind::Range => MatchCol::Range(values, masks()?, f.bitwidth),
                MatchKind::Optional => MatchCol::Optional(values, side(&m.present, 1, n, &what())?),
            };
            matches.push((m.field_id, col));
        }
        let mut params = Vec::with_capacity(req.params.len());
        for p in &req.params {
            let action = if p.action_id == 0 {
                req.action_id
            } else {
                p.action_id
            };
            let values = Col::new(p.values.as_ref(), n, &|| {
                format!("action {action} param {}", p.param_id)
            })?;
            params.push((action, p.param_id, values));
        }
        let opt = |b: &'a [u8], elem, what| -> Result<Option<&'a [u8]>, Status> {
            if b.is_empty() {
                Ok(None)
            } else {
                side(b, elem, n, what).map(Some)
            }
        };
        let metadata = match opt(&req.metadata_lens, 4, "metadata_lens")? {
            None if req.metadata.is_empty() => None,
            None => return Err(Status::invalid_argument("metadata without metadata_lens")),
            Some(lens) => {
                let mut starts = Vec::with_capacity(n + 1);
                let mut at = 0usize;
                starts.push(0);
                for l in lens.chunks_exact(4) {
                    at += u32::from_be_bytes(l.try_into().expect("4 bytes")) as usize;
                    starts.push(at);
                }
                if at != req.metadata.len() {
                    return Err(Status::invalid_argument(format!(
                        "metadata_lens add up to {at}, metadata has {} bytes",
                        req.metadata.len()
                    )));
                }
                Some((starts, req.metadata.as_slice()))
            }
        };
        Ok(Plan {
            table_id: table.id,
            n,
            matches,
            action_id: req.action_id,
            action_ids: opt(&req.action_ids, 4, "action_ids")?,
            params,
            priorities: opt(&req.priorities, 4, "priorities")?,
            metadata,
        })
    }

    /// Row `i`'s match fields, don't-care ones left out (a zero prefix
    /// length or mask, a full range, an absent optional).
    fn matches(&self, i: usize) -> impl Iterator<Item = FieldView<'a>> + '_ {
        self.matches.iter().filter_map(move |(field_id, c)| {
            let m = match c {
                MatchCol::Exact(v) => MatchView::Exact(v.get(i)),
                MatchCol::Lpm(v, lens) => {
                    let len = u16::from_be_bytes([lens[2 * i], lens[2 * i + 1]]);
                    if len == 0 {
                        return None;
                    }
                    MatchView::Lpm(v.get(i), i32::from(len))
                }
                MatchCol::Ternary(v, m) => {
                    let mask = m.get(i);
                    if mask.iter().all(|b| *b == 0) {
                        return None;
                    }
                    MatchView::Ternary(v.get(i), mask)
                }
                MatchCol::Range(lo, hi, bits) => {
                    let (lo, hi) = (lo.get(i), hi.get(i));
                    if lo.iter().all(|b| *b == 0) && is_max(hi, *bits) {
                        return None;
                    }
                    MatchView::Range(lo, hi)
                }
                MatchCol::Optional(v, present) => {
                    if present[i] == 0 {
                        return None;
                    }
                    MatchView::Optional(v.get(i))
                }
            };
            Some(FieldView {
                field_id: *field_id,
                m,
            })
        })
    }

    fn action_id(&self, i: usize) -> u32 {
        self.action_ids
            .map(|a| u32::from_be_bytes(a[4 * i..4 * i + 4].try_into().expect("4 bytes")))
            .unwrap_or(self.action_id)
    }

    fn priority(&self, i: usize) -> i32 {
        self.priorities
            .map(|p| i32::from_be_bytes(p[4 * i..4 * i + 4].try_into().expect("4 bytes")))
            .unwrap_or(0)
    }

    /// Row `i` as the views a parsed standard Write would give
    /// ([`super::pipeline::Pipeline::apply_entry`]): no bytes copied.
    fn view(&self, i: usize, with_action: bool, scratch: &mut Scratch<'a>) -> TableEntryView {
        scratch.matches.clear();
        scratch.matches.extend(self.matches(i));
        scratch.params.clear();
        let action = if with_action {
            let action_id = self.action_id(i);
            scratch
                .params
                .extend(self.params.iter().filter(|(a, _, _)| *a == action_id).map(
                    |(_, id, v)| ParamView {
                        param_id: *id,
                        value: v.get(i),
                    },
                ));
            ActionView::Direct { action_id }
        } else {
            ActionView::Missing
        };
        TableEntryView {
            table_id: self.table_id,
            priority: self.priority(i),
            is_default_action: false,
            action,
            idle_timeout_ns: 0,
        }
    }

    /// Row `i` as the canonical encoded `TableEntry` the table stores.
    fn encode(&self, i: usize, scratch: &Scratch<'_>, out: &mut Vec<u8>) {
        wire::put_uint(out, 1, u64::from(self.table_id));
        for f in &scratch.matches {
            let (kind, a, b, prefix_len) = match f.m {
                MatchView::Exact(v) => (2, v, None, 0),
                MatchView::Lpm(v, len) => (4, v, None, len),
                MatchView::Ternary(v, m) => (3, v, Some(m), 0),
                MatchView::Range(lo, hi) => (6, lo, Some(hi), 0),
                MatchView::Optional(v) => (7, v, None, 0),
                MatchView::Missing | MatchView::Other => continue,
            };
            let fm = wire::begin(out, 2);
            wire::put_uint(out, 1, u64::from(f.field_id));
            let m = wire::begin(out, kind);
            wire::put_bytes(out, 1, canonical(a));
            if let Some(b) = b {
                wire::put_bytes(out, 2, canonical(b));
            }
            wire::put_uint(out, 2, prefix_len as u64);
            wire::end(out, m);
            wire::end(out, fm);
        }
        let ta = wire::begin(out, 3);
        let a = wire::begin(out, 1);
        wire::put_uint(out, 1, u64::from(self.action_id(i)));
        for p in &scratch.params {
            let pm = wire::begin(out, 4);
            wire::put_uint(out, 2, u64::from(p.param_id));
            wire::put_bytes(out, 3, canonical(p.value));
            wire::end(out, pm);
        }
        wire::end(out, a);
        wire::end(out, ta);
        // int32 on the wire: negative values sign-extend to 64 bits.
        wire::put_uint(out, 4, i64::from(self.priority(i)) as u64);
        if let Some((s, m)) = &self.metadata
            && s[i + 1] > s[i]
        {
            wire::put_bytes(out, 11, &m[s[i]..s[i + 1]]);
        }
    }
}

#[tonic::async_trait]
impl BulkWrite for BulkService {
    async fn write(
        &self,
        request: Request<BulkWriteRequest>,
    ) -> Result<Response<BulkWriteResponse>, Status> {
        let req = request.into_inner();
        let dev = self.registry.device(req.device_id)?;
        let c = &dev.counters;
        c.write_rpcs.fetch_add(1, Ordering::Relaxed);
        check_primary(dev, &req.role, req.election_id.as_ref().map(from_uint128))?;
        let fault = crate::faults::before_write(dev).await?;
        let ty = match bk::UpdateType::try_from(req.r#type) {
            Ok(bk::UpdateType::Insert) => Type::Insert,
            Ok(bk::UpdateType::Modify) => Type::Modify,
            Ok(bk::UpdateType::Delete) => Type::Delete,
            _ => return Err(Status::invalid_argument("update type is UNSPECIFIED")),
        };
        let n = usize::try_from(req.count)
            .map_err(|_| Status::invalid_argument("count does not fit in memory"))?;
        let mut errors = Vec::new();
        let mut ok = 0u64;
        {
            let mut state = dev.p4runtime.pipeline.lock().expect("pipeline lock");
            let pipeline = state.pipeline.as_mut().ok_or_else(|| dev.no_pipeline())?;
            let table =
                pipeline.schema.tables.get(&req.table_id).ok_or_else(|| {
                    Status::not_found(format!("unknown table id {}", req.table_id))
                })?;
            let plan = Plan::new(&req, table, n)?;
            if ty == Type::Insert {
                // At most one growth step for the whole batch, and few in a
                // whole load (`key::make_room`).
                if let Some(t) = pipeline.tables.get_mut(&req.table_id) {
                    crate::key::make_room(&mut t.entries, n, table.size);
                }
            }
            let mut key = Vec::with_capacity(64);
            let mut scratch = Scratch::default();
            let mut buf = Vec::with_capacity(256);
            for i in 0..plan.n {
                if let Some(e) = fault.and_then(|f| f.update_error(i)) {
                    errors.push(RowError {
                        index: i as u64,
                        code: e.code as i32,
                        message: e.message,
                    });
                    continue;
                }
                let te = plan.view(i, ty != Type::Delete, &mut scratch);
                let res = pipeline.apply_entry(ty, te, &scratch, &mut key, &mut |scratch| {
                    buf.clear();
                    plan.encode(i, scratch, &mut buf);
                    Ok(buf.as_slice().into())
                });
                match res {
                    Ok(_) => ok += 1,
                    Err(e) => errors.push(RowError {
                        index: i as u64,
                        code: e.code as i32,
                        message: e.message,
                    }),
                }
            }
        }
        match ty {
            Type::Insert => &c.inserts,
            Type::Modify => &c.modifies,
            _ => &c.deletes,
        }
        .fetch_add(ok, Ordering::Relaxed);
        c.failed_updates
            .fetch_add(errors.len() as u64, Ordering::Relaxed);
        // The same added latency as a standard Write of n entries.
        crate::profile::delay(self.registry.profile, &dev.busy, n).await;
        Ok(Response::new(BulkWriteResponse { errors }))
    }

    async fn capabilities(
        &self,
        _request: Request<BulkCapabilitiesRequest>,
    ) -> Result<Response<BulkCapabilitiesResponse>, Status> {
        Ok(Response::new(BulkCapabilitiesResponse {
            version: BULK_VERSION.to_string(),
            max_rows: 0,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_values_and_full_ranges() {
        assert_eq!(canonical(&[0, 0, 1, 0]), &[1, 0]);
        assert_eq!(canonical(&[0, 0]), &[0]);
        assert!(is_max(&[0x01, 0xff], 9));
        assert!(!is_max(&[0x00, 0xff], 9));
        assert!(is_max(&[0xff], 8));
    }

    #[test]
    fn columns_must_hold_count_values() {
        let c = bk::Column {
            width: 4,
            values: vec![0; 12],
        };
        let what = || "f".to_string();
        assert!(Col::new(Some(&c), 3, &what).is_ok());
        assert!(Col::new(Some(&c), 4, &what).is_err());
        assert!(Col::new(None, 3, &what).is_err());
        assert_eq!(Col::new(Some(&c), 3, &what).unwrap().get(2).len(), 4);
        assert!(side(&[0; 6], 2, 3, "p").is_ok());
        assert!(side(&[0; 5], 2, 3, "p").is_err());
    }
}
