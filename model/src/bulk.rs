//! The columnar form of p4fleet's bulk write (`p4fleet.bulk.v1.BulkWrite`,
//! docs/bulk.md): one column per match field and action parameter instead
//! of one message per entry. Pure logic, no I/O; p4fleet-client sends it.
//!
//! [`encode`] carries a batch only when the columns represent it exactly:
//! ops of one table and one update type, every value fitting its column,
//! every declared parameter present. Anything else returns None and goes
//! the standard way, so a target's answers are always the standard path's.

use std::collections::HashMap;

use p4fleet_proto::bulk as bk;
use p4fleet_proto::p4info::P4Info;
use p4fleet_proto::p4runtime::update::Type;

use crate::entries::{MatchKind, MatchValue, TableSchema, WriteOp};

#[derive(Debug, Clone, PartialEq, Eq)]
struct FieldCol {
    id: u32,
    kind: MatchKind,
    bitwidth: u32,
    width: usize,
}

/// The columns of one table: its match fields, and per action its params
/// `(param id, width)`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct TableCols {
    fields: Vec<FieldCol>,
    actions: Vec<(u32, Vec<(u32, usize)>)>,
}

/// Column widths of a program's tables and their actions: what the encoder
/// needs to pad values to ceil(bitwidth / 8) bytes. Derived from the
/// model's [`TableSchema`]s, so a P4Info is read in one place.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BulkSchema {
    tables: HashMap<u32, TableCols>,
}

fn width(bitwidth: u32) -> usize {
    (bitwidth.max(1) as usize).div_ceil(8)
}

impl BulkSchema {
    pub fn from_tables<'a>(tables: impl IntoIterator<Item = &'a TableSchema>) -> BulkSchema {
        let tables = tables
            .into_iter()
            .map(|t| {
                let fields = t
                    .match_fields
                    .iter()
                    .map(|f| FieldCol {
                        id: f.id,
                        kind: f.kind,
                        bitwidth: f.bitwidth,
                        width: width(f.bitwidth),
                    })
                    .collect();
                let actions = t
                    .actions
                    .iter()
                    .map(|a| {
                        let params = a.params.iter().map(|p| (p.id, width(p.bitwidth)));
                        (a.id, params.collect())
                    })
                    .collect();
                (t.id, TableCols { fields, actions })
            })
            .collect();
        BulkSchema { tables }
    }

    /// The columns of every table of a P4Info that maps to a schema;
    /// tables that do not (e.g. with a match kind the columns cannot
    /// carry) stay on the standard path.
    pub fn from_p4info(info: &P4Info) -> BulkSchema {
        let tables: Vec<TableSchema> = TableSchema::each_from_p4info(info)
            .filter_map(Result::ok)
            .collect();
        BulkSchema::from_tables(&tables)
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

/// The columnar form of `ops` (all of `table_id`, all of type `ty`), or
/// None when some op cannot be carried exactly (then the standard path
/// must take them, to give the standard answers).
pub fn encode(
    schema: &BulkSchema,
    table_id: u32,
    ty: Type,
    ops: &[WriteOp],
) -> Option<bk::BulkWriteRequest> {
    let TableCols { fields, actions } = schema.tables.get(&table_id)?;
    // The columns have no idle timeout: such entries go the standard way.
    if ops.iter().any(|o| o.idle_timeout_ns() != 0) {
        return None;
    }
    let n = ops.len();
    let mut values: Vec<Vec<u8>> = fields
        .iter()
        .map(|f| Vec::with_capacity(f.width * n))
        .collect();
    let mut masks: Vec<Vec<u8>> = fields
        .iter()
        .map(|f| match f.kind {
            MatchKind::Ternary | MatchKind::Range => Vec::with_capacity(f.width * n),
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

    for (row, op) in ops.iter().enumerate() {
        let key = op.key();
        if key.table_id != table_id {
            return None;
        }
        seen.iter_mut().for_each(|s| *s = false);
        for m in &key.matches {
            let idx = fields.iter().position(|f| f.id == m.field_id)?;
            if std::mem::replace(&mut seen[idx], true) {
                return None;
            }
            let f = &fields[idx];
            let ok = match (f.kind, &m.value) {
                (MatchKind::Exact, MatchValue::Exact(v)) => {
                    push_padded(&mut values[idx], v.as_slice(), f.width)
                }
                (MatchKind::Lpm, MatchValue::Lpm { value, prefix_len }) => {
                    // prefix_len 0 encodes "omitted": an explicit 0 must get
                    // the standard path's error.
                    let len = u16::try_from(*prefix_len).ok().filter(|l| *l > 0)?;
                    side[idx].extend_from_slice(&len.to_be_bytes());
                    push_padded(&mut values[idx], value.as_slice(), f.width)
                }
                (MatchKind::Ternary, MatchValue::Ternary { value, mask }) => {
                    !mask.is_zero()
                        && push_padded(&mut values[idx], value.as_slice(), f.width)
                        && push_padded(&mut masks[idx], mask.as_slice(), f.width)
                }
                (MatchKind::Range, MatchValue::Range { low, high }) => {
                    !(low.is_zero() && is_max(high.as_slice(), f.bitwidth))
                        && push_padded(&mut values[idx], low.as_slice(), f.width)
                        && push_padded(&mut masks[idx], high.as_slice(), f.width)
                }
                (MatchKind::Optional, MatchValue::Optional(v)) => {
                    side[idx].push(1);
                    push_padded(&mut values[idx], v.as_slice(), f.width)
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
                MatchKind::Exact => return None,
                MatchKind::Lpm => side[idx].extend_from_slice(&[0, 0]),
                MatchKind::Ternary => {
                    let m = &mut masks[idx];
                    m.resize(m.len() + f.width, 0)
                }
                MatchKind::Range => {
                    // Full range: low 0, high all ones.
                    let hi = &mut masks[idx];
                    let spare = (f.width * 8) as u32 - f.bitwidth;
                    hi.push(0xff >> spare);
                    hi.resize(hi.len() + f.width - 1, 0xff);
                }
                MatchKind::Optional => side[idx].push(0),
            }
            let v = &mut values[idx];
            v.resize(v.len() + f.width, 0);
        }
        let priority = key.priority;
        any_priority |= priority != 0;
        priorities.extend_from_slice(&priority.to_be_bytes());
        let md = op.metadata();
        metadata.extend_from_slice(md);
        metadata_lens.extend_from_slice(&u32::try_from(md.len()).ok()?.to_be_bytes());

        if with_action {
            let action = op.action()?;
            let action_id = action.action_id;
            let (_, declared) = actions.iter().find(|(id, _)| *id == action_id)?;
            // Every declared param exactly once (columns have no holes).
            if action.params.len() != declared.len() {
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
                let value = action.params.iter().find(|p| p.param_id == *pid)?;
                if !push_padded(col, value.value.as_slice(), *w) {
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
            MatchKind::Exact => {}
            MatchKind::Lpm => c.prefix_lens = s,
            MatchKind::Ternary | MatchKind::Range => {
                c.masks = Some(bk::Column {
                    width: f.width as u32,
                    values: m,
                })
            }
            MatchKind::Optional => c.present = s,
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

/// The table and update type shared by every op, if they share one.
pub fn single_table(ops: &[WriteOp]) -> Option<(u32, Type)> {
    let first = ops.first()?;
    let (table, ty) = (first.key().table_id, first.ty());
    ops.iter()
        .all(|o| o.ty() == ty && o.key().table_id == table)
        .then_some((table, ty))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::entries::{ActionCall, ActionParam, ByteStr, Entry, EntryKey, FieldMatch};

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

    fn fm(id: u32, value: MatchValue) -> FieldMatch {
        FieldMatch {
            field_id: id,
            value,
        }
    }

    /// Bytes as given (not canonicalised), like a client may send them.
    fn b(v: &[u8]) -> ByteStr {
        ByteStr::new(v)
    }

    fn exact(v: &[u8]) -> FieldMatch {
        fm(1, MatchValue::Exact(b(v)))
    }

    fn entry(matches: Vec<FieldMatch>, action: u32, params: &[(u32, &[u8])]) -> Entry {
        Entry {
            key: EntryKey {
                table_id: 1,
                matches: matches.into(),
                priority: 3,
            },
            action: ActionCall {
                action_id: action,
                params: params
                    .iter()
                    .map(|(id, v)| ActionParam {
                        param_id: *id,
                        value: b(v),
                    })
                    .collect(),
            },
            idle_timeout_ns: 0,
        }
    }

    fn inserts(es: &[Entry]) -> Vec<WriteOp<'_>> {
        es.iter().map(WriteOp::insert).collect()
    }

    #[test]
    fn pads_values_and_encodes_omitted_fields() {
        let s = schema();
        let lpm = fm(
            2,
            MatchValue::Lpm {
                value: b(&[10, 0, 0, 0]),
                prefix_len: 8,
            },
        );
        let es = vec![
            entry(vec![exact(&[1, 2]), lpm], 10, &[(2, &[7]), (1, &[1])]),
            entry(vec![exact(&[0, 0, 5])], 10, &[(1, &[2]), (2, &[1, 0])]),
        ];
        let r = encode(&s, 1, Type::Insert, &inserts(&es)).unwrap();
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
    fn ranges_and_metadata_get_their_columns() {
        let e = Entry {
            key: EntryKey {
                table_id: 1,
                matches: Box::new([
                    fm(1, MatchValue::Exact(ByteStr::canonical(&[1, 2]))),
                    fm(
                        3,
                        MatchValue::Range {
                            low: ByteStr::canonical(&[1]),
                            high: ByteStr::canonical(&[2]),
                        },
                    ),
                ]),
                priority: 3,
            },
            action: ActionCall {
                action_id: 10,
                params: Box::new([
                    ActionParam {
                        param_id: 1,
                        value: ByteStr::canonical(&[1]),
                    },
                    ActionParam {
                        param_id: 2,
                        value: ByteStr::canonical(&[1, 0]),
                    },
                ]),
            },
            idle_timeout_ns: 0,
        };
        let ops = [WriteOp::insert(&e).with_metadata(b"tag")];
        let r = encode(&schema(), 1, Type::Insert, &ops).unwrap();
        let range = &r.matches[2];
        assert_eq!(range.values.as_ref().unwrap().values, vec![0, 1]);
        assert_eq!(range.masks.as_ref().unwrap().values, vec![0, 2]);
        assert_eq!(r.matches[1].prefix_lens, vec![0, 0]);
        assert_eq!(r.metadata, b"tag");
        assert_eq!(r.metadata_lens, vec![0, 0, 0, 3]);
        // Deletes carry keys only.
        let del = encode(&schema(), 1, Type::Delete, &[WriteOp::delete(&e.key)]).unwrap();
        assert_eq!(del.r#type, bk::UpdateType::Delete as i32);
        assert!(del.params.is_empty() && del.action_id == 0);
    }

    #[test]
    fn mixed_actions_use_an_action_id_column() {
        let es = vec![
            entry(vec![exact(&[1])], 11, &[]),
            entry(vec![exact(&[2])], 10, &[(1, &[1]), (2, &[2])]),
        ];
        let r = encode(&schema(), 1, Type::Insert, &inserts(&es)).unwrap();
        assert_eq!(r.action_id, 0);
        assert_eq!(r.action_ids, vec![0, 0, 0, 11, 0, 0, 0, 10]);
        assert_eq!(r.params[0].action_id, 10);
        assert_eq!(r.params[0].values.as_ref().unwrap().values, vec![0, 1]);
    }

    #[test]
    fn what_columns_cannot_carry_goes_the_standard_way() {
        let s = schema();
        let ok = |e: Entry| encode(&s, 1, Type::Insert, &[WriteOp::insert(&e)]).is_some();
        // Too wide for the column, empty, missing exact field, explicit
        // don't-care LPM, missing or unknown param, unknown action, unknown
        // field.
        assert!(!ok(entry(vec![exact(&[1, 2, 3])], 11, &[])));
        assert!(!ok(entry(vec![exact(&[])], 11, &[])));
        assert!(!ok(entry(vec![], 11, &[])));
        let lpm0 = fm(
            2,
            MatchValue::Lpm {
                value: b(&[0]),
                prefix_len: 0,
            },
        );
        assert!(!ok(entry(vec![exact(&[1]), lpm0], 11, &[])));
        assert!(!ok(entry(vec![exact(&[1])], 10, &[(1, &[1])])));
        assert!(!ok(entry(vec![exact(&[1])], 10, &[(1, &[1]), (3, &[1])])));
        assert!(!ok(entry(vec![exact(&[1])], 12, &[])));
        let other = fm(9, MatchValue::Exact(b(&[1])));
        assert!(!ok(entry(vec![exact(&[1]), other], 11, &[])));
        // A value wider than its bitwidth but within the column goes bulk
        // (the target refuses it per row, as it would a standard write).
        assert!(ok(entry(vec![exact(&[2, 0])], 11, &[])));
        // Another table than the batch's.
        let mut elsewhere = entry(vec![exact(&[1])], 11, &[]);
        elsewhere.key.table_id = 2;
        assert!(!ok(elsewhere));
    }

    #[test]
    fn single_table_and_type() {
        let es = [entry(vec![exact(&[1])], 11, &[])];
        let a = WriteOp::insert(&es[0]);
        assert_eq!(single_table(&[a, a]), Some((1, Type::Insert)));
        let b = WriteOp::delete(&es[0].key);
        assert_eq!(single_table(&[a, b]), None);
        assert_eq!(single_table(&[]), None);
    }

    #[test]
    fn schema_comes_from_the_table_schemas() {
        let info = p4fleet_proto::p4info::parse_text(INFO).unwrap();
        let tables = TableSchema::all_from_p4info(&info).unwrap();
        assert_eq!(BulkSchema::from_tables(&tables), schema());
        let cols = &schema().tables[&1];
        assert_eq!(cols.fields[0].kind, MatchKind::Exact);
        assert_eq!(cols.fields[0].width, 2);
        assert_eq!(cols.actions, vec![(10, vec![(1, 1), (2, 2)]), (11, vec![])]);
    }
}
