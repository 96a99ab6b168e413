//! Table contents of BFRT programs and the write/read semantics: full-width
//! big-endian values, missing key fields are zero, per-update errors, undo
//! for ROLLBACK_ON_ERROR. Pure logic; no locks or I/O here.

use std::collections::HashMap;

use p4fleet_proto::bfrt::{
    self, DataField, KeyField, TableData, data_field::Value as DValue, key_field::MatchType,
    update::Type,
};
use tonic::Code;

use super::schema::{BfrtSchema, DataDef, FieldType, KeyKind, TableDef};
use crate::entry::{UpdateError, err};

type Entries = HashMap<Box<[u8]>, TableData, foldhash::fast::RandomState>;

pub(crate) struct TableState {
    pub entries: Entries,
    pub default: TableData,
}

/// A loaded set of tables (one P4 program, or the fixed tables).
pub(crate) struct Program {
    pub schema: BfrtSchema,
    pub config: bfrt::ForwardingPipelineConfig,
    pub tables: HashMap<u32, TableState>,
}

/// How to take back one applied update.
pub(crate) enum Undo {
    Inserted(u32, Box<[u8]>),
    Replaced(u32, Box<[u8]>, TableData),
    Removed(u32, Box<[u8]>, TableData),
    Cleared(u32, Entries),
    Default(u32, TableData),
}

/// What an applied update did, for the counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Applied {
    Insert,
    Modify,
    Delete(u64),
    Other,
}

fn initial_default(t: &TableDef) -> TableData {
    TableData {
        action_id: t.initial_default,
        fields: vec![],
    }
}

impl Program {
    pub fn new(schema: BfrtSchema, config: bfrt::ForwardingPipelineConfig) -> Program {
        let tables = schema
            .tables
            .values()
            .map(|t| {
                (
                    t.id,
                    TableState {
                        entries: Entries::default(),
                        default: initial_default(t),
                    },
                )
            })
            .collect();
        Program {
            schema,
            config,
            tables,
        }
    }

    #[cfg(test)]
    pub fn entries(&self) -> usize {
        self.tables.values().map(|t| t.entries.len()).sum()
    }

    /// Moves the contents of tables whose definition did not change from
    /// `old` (warm init with reconcile).
    pub fn adopt(&mut self, mut old: Program) {
        for (id, state) in old.tables.drain() {
            if old.schema.tables.get(&id) == self.schema.tables.get(&id)
                && let Some(slot) = self.tables.get_mut(&id)
            {
                *slot = state;
            }
        }
    }

    pub fn undo(&mut self, log: Vec<Undo>) {
        for u in log.into_iter().rev() {
            match u {
                Undo::Inserted(t, k) => {
                    self.state(t).entries.remove(&k);
                }
                Undo::Replaced(t, k, d) | Undo::Removed(t, k, d) => {
                    self.state(t).entries.insert(k, d);
                }
                Undo::Cleared(t, e) => self.state(t).entries = e,
                Undo::Default(t, d) => self.state(t).default = d,
            }
        }
    }

    fn state(&mut self, table: u32) -> &mut TableState {
        self.tables.get_mut(&table).expect("one state per table")
    }

    /// Applies one table-entry update. `key` is a reusable buffer; `log`
    /// collects undo records when given.
    pub fn apply_entry(
        &mut self,
        ty: Type,
        te: bfrt::TableEntry,
        key: &mut Vec<u8>,
        log: Option<&mut Vec<Undo>>,
    ) -> Result<Applied, UpdateError> {
        let Some(table) = self.schema.tables.get(&te.table_id) else {
            return Err(err(
                Code::NotFound,
                format!("unknown table id {}", te.table_id),
            ));
        };
        if let Some(why) = &table.unsupported {
            return Err(err(Code::Unimplemented, why.clone()));
        }
        let state = self.tables.get_mut(&table.id).expect("one state per table");
        let tid = table.id;

        if te.is_default_entry {
            let next = match ty {
                Type::Modify | Type::InsertOrModify => {
                    let data = te.data.unwrap_or_default();
                    check_data(table, &data, true)?;
                    data
                }
                Type::Reset | Type::Delete => initial_default(table),
                _ => {
                    return Err(err(
                        Code::InvalidArgument,
                        format!(
                            "table {}: the default entry can only be modified or reset",
                            table.name
                        ),
                    ));
                }
            };
            let old = std::mem::replace(&mut state.default, next);
            if let Some(log) = log {
                log.push(Undo::Default(tid, old));
            }
            return Ok(Applied::Modify);
        }

        let fields = match te.value {
            Some(bfrt::table_entry::Value::Key(k)) => k.fields,
            Some(bfrt::table_entry::Value::HandleId(_)) => {
                return Err(err(
                    Code::Unimplemented,
                    "entries by handle are not emulated",
                ));
            }
            None => Vec::new(),
        };
        if fields.is_empty() && matches!(ty, Type::Delete) && !table.keys.is_empty() {
            // A delete without a key clears the table.
            let n = state.entries.len() as u64;
            let old = std::mem::take(&mut state.entries);
            if let Some(log) = log {
                log.push(Undo::Cleared(tid, old));
            }
            return Ok(Applied::Delete(n));
        }
        encode_key(table, &fields, key)?;
        match ty {
            Type::Insert | Type::Modify | Type::InsertOrModify => {
                let data = te.data.unwrap_or_default();
                check_data(table, &data, false)?;
                let exists = state.entries.contains_key(key.as_slice());
                let insert = match ty {
                    Type::Insert if exists => {
                        return Err(err(
                            Code::AlreadyExists,
                            format!("table {}: entry already exists", table.name),
                        ));
                    }
                    Type::Modify if !exists => {
                        return Err(err(
                            Code::NotFound,
                            format!("table {}: no such entry", table.name),
                        ));
                    }
                    _ => !exists,
                };
                if insert {
                    if table.size.is_some_and(|s| state.entries.len() >= s) {
                        return Err(err(
                            Code::ResourceExhausted,
                            format!(
                                "table {} is full ({} entries)",
                                table.name,
                                state.entries.len()
                            ),
                        ));
                    }
                    let k: Box<[u8]> = key.as_slice().into();
                    if let Some(log) = log {
                        log.push(Undo::Inserted(tid, k.clone()));
                    }
                    state.entries.insert(k, data);
                    Ok(Applied::Insert)
                } else {
                    let slot = state.entries.get_mut(key.as_slice()).expect("exists");
                    let old = std::mem::replace(slot, data);
                    if let Some(log) = log {
                        log.push(Undo::Replaced(tid, key.as_slice().into(), old));
                    }
                    Ok(Applied::Modify)
                }
            }
            Type::Delete => match state.entries.remove_entry(key.as_slice()) {
                Some((k, old)) => {
                    if let Some(log) = log {
                        log.push(Undo::Removed(tid, k, old));
                    }
                    Ok(Applied::Delete(1))
                }
                None => Err(err(
                    Code::NotFound,
                    format!("table {}: no such entry", table.name),
                )),
            },
            Type::Reset => Err(err(
                Code::InvalidArgument,
                "RESET applies to the default entry or table attributes",
            )),
            Type::ModifyInc => Err(err(Code::Unimplemented, "MODIFY_INC is not emulated")),
            Type::Unspecified => Err(err(Code::InvalidArgument, "update type is UNSPECIFIED")),
        }
    }

    /// Entries of one table (all, one key, or the default entry), to `emit`.
    pub fn read_entries(
        &self,
        filter: &bfrt::TableEntry,
        emit: &mut dyn FnMut(bfrt::TableEntry),
    ) -> Result<(), UpdateError> {
        let Some(table) = self.schema.tables.get(&filter.table_id) else {
            return Err(err(
                Code::NotFound,
                format!("unknown table id {}", filter.table_id),
            ));
        };
        let state = &self.tables[&table.id];
        if filter.is_default_entry {
            emit(bfrt::TableEntry {
                table_id: table.id,
                is_default_entry: true,
                data: Some(state.default.clone()),
                ..Default::default()
            });
            return Ok(());
        }
        let fields = match &filter.value {
            Some(bfrt::table_entry::Value::Key(k)) => k.fields.as_slice(),
            Some(bfrt::table_entry::Value::HandleId(_)) => {
                return Err(err(
                    Code::Unimplemented,
                    "entries by handle are not emulated",
                ));
            }
            None => &[],
        };
        if fields.is_empty() || table.keys.is_empty() {
            for (k, d) in &state.entries {
                emit(entry_out(table, k, d));
            }
            return Ok(());
        }
        let mut key = Vec::new();
        encode_key(table, fields, &mut key)?;
        match state.entries.get_key_value(key.as_slice()) {
            Some((k, d)) => {
                emit(entry_out(table, k, d));
                Ok(())
            }
            None => Err(err(
                Code::NotFound,
                format!("table {}: no such entry", table.name),
            )),
        }
    }

    /// Table usage (installed entries).
    pub fn usage(&self, table_id: u32) -> Option<u32> {
        self.tables.get(&table_id).map(|t| t.entries.len() as u32)
    }
}

fn hex(v: &[u8]) -> String {
    v.iter().map(|b| format!("{b:02x}")).collect()
}

/// Checks a full-width big-endian value: exactly `nbytes` bytes, no bits
/// above `width`.
fn check_width(v: &[u8], width: u32, what: &dyn Fn() -> String) -> Result<(), UpdateError> {
    let nb = width.div_ceil(8) as usize;
    if v.len() != nb {
        return Err(err(
            Code::InvalidArgument,
            format!(
                "{}: value 0x{} has {} bytes, expected {nb} (BFRT values are full width)",
                what(),
                hex(v),
                v.len()
            ),
        ));
    }
    let spare = nb as u32 * 8 - width;
    if spare != 0 && v[0] >> (8 - spare) != 0 {
        return Err(err(
            Code::OutOfRange,
            format!(
                "{}: value 0x{} does not fit in {width} bits",
                what(),
                hex(v)
            ),
        ));
    }
    Ok(())
}

/// Keeps the first `keep` bits of `buf` (the rest of the slot is padding
/// plus value bits; `pad` leading bits are always zero).
fn mask_prefix(buf: &mut [u8], pad: usize, prefix: usize) {
    let keep = pad + prefix;
    for (i, b) in buf.iter_mut().enumerate() {
        let start = i * 8;
        if start >= keep {
            *b = 0;
        } else if start + 8 > keep {
            *b &= 0xffu8 << (8 - (keep - start));
        }
    }
}

/// Builds the internal key: every field at a fixed offset; fields the
/// client left out are zero (BFRT's defaults). LPM values and ternary
/// values are masked, as the device does.
pub(crate) fn encode_key(
    table: &TableDef,
    fields: &[KeyField],
    key: &mut Vec<u8>,
) -> Result<(), UpdateError> {
    key.clear();
    key.resize(table.key_len, 0);
    let mut seen: u64 = 0;
    for f in fields {
        let Some((idx, k)) = table.key(f.field_id) else {
            return Err(err(
                Code::InvalidArgument,
                format!("table {}: unknown key field id {}", table.name, f.field_id),
            ));
        };
        if idx < 64 {
            if seen & (1 << idx) != 0 {
                return Err(err(
                    Code::InvalidArgument,
                    format!("table {}: duplicate key field {}", table.name, k.name),
                ));
            }
            seen |= 1 << idx;
        }
        let what = || format!("table {} key {}", table.name, k.name);
        let nb = k.nbytes;
        let slot = &mut key[k.offset..k.offset + k.kind.key_len(nb)];
        match (k.kind, &f.match_type) {
            (KeyKind::Exact, Some(MatchType::Exact(e))) => {
                check_width(&e.value, k.width, &what)?;
                slot.copy_from_slice(&e.value);
            }
            (KeyKind::Lpm, Some(MatchType::Lpm(l))) => {
                check_width(&l.value, k.width, &what)?;
                if l.prefix_len < 0 || l.prefix_len as u32 > k.width {
                    return Err(err(
                        Code::InvalidArgument,
                        format!(
                            "{}: prefix_len {} not in 0..={}",
                            what(),
                            l.prefix_len,
                            k.width
                        ),
                    ));
                }
                slot[..nb].copy_from_slice(&l.value);
                mask_prefix(
                    &mut slot[..nb],
                    nb * 8 - k.width as usize,
                    l.prefix_len as usize,
                );
                slot[nb..].copy_from_slice(&(l.prefix_len as u16).to_be_bytes());
            }
            (KeyKind::Ternary, Some(MatchType::Ternary(t))) => {
                check_width(&t.value, k.width, &what)?;
                check_width(&t.mask, k.width, &|| format!("{} mask", what()))?;
                let (v, m) = slot.split_at_mut(nb);
                for i in 0..nb {
                    v[i] = t.value[i] & t.mask[i];
                    m[i] = t.mask[i];
                }
            }
            (KeyKind::Range, Some(MatchType::Range(r))) => {
                check_width(&r.low, k.width, &|| format!("{} low", what()))?;
                check_width(&r.high, k.width, &|| format!("{} high", what()))?;
                if r.low > r.high {
                    return Err(err(
                        Code::InvalidArgument,
                        format!("{}: low is greater than high", what()),
                    ));
                }
                slot[..nb].copy_from_slice(&r.low);
                slot[nb..].copy_from_slice(&r.high);
            }
            (KeyKind::Optional, Some(MatchType::Optional(o))) => {
                check_width(&o.value, k.width, &what)?;
                slot[0] = o.is_valid as u8;
                slot[1..].copy_from_slice(&o.value);
            }
            (kind, got) => {
                return Err(err(
                    Code::InvalidArgument,
                    format!(
                        "{}: expected a {kind:?} match, got {}",
                        what(),
                        match got {
                            Some(MatchType::Exact(_)) => "exact",
                            Some(MatchType::Lpm(_)) => "lpm",
                            Some(MatchType::Ternary(_)) => "ternary",
                            Some(MatchType::Range(_)) => "range",
                            Some(MatchType::Optional(_)) => "optional",
                            None => "nothing",
                        }
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// Rebuilds the key fields of an entry from its internal key.
pub(crate) fn decode_key(table: &TableDef, key: &[u8]) -> Vec<KeyField> {
    table
        .keys
        .iter()
        .map(|k| {
            let nb = k.nbytes;
            let s = &key[k.offset..k.offset + k.kind.key_len(nb)];
            let m = match k.kind {
                KeyKind::Exact => MatchType::Exact(bfrt::key_field::Exact { value: s.to_vec() }),
                KeyKind::Lpm => MatchType::Lpm(bfrt::key_field::Lpm {
                    value: s[..nb].to_vec(),
                    prefix_len: u16::from_be_bytes([s[nb], s[nb + 1]]) as i32,
                }),
                KeyKind::Ternary => MatchType::Ternary(bfrt::key_field::Ternary {
                    value: s[..nb].to_vec(),
                    mask: s[nb..].to_vec(),
                }),
                KeyKind::Range => MatchType::Range(bfrt::key_field::Range {
                    low: s[..nb].to_vec(),
                    high: s[nb..].to_vec(),
                }),
                KeyKind::Optional => MatchType::Optional(bfrt::key_field::Optional {
                    value: s[1..].to_vec(),
                    is_valid: s[0] != 0,
                }),
            };
            KeyField {
                field_id: k.id,
                match_type: Some(m),
            }
        })
        .collect()
}

fn entry_out(table: &TableDef, key: &[u8], data: &TableData) -> bfrt::TableEntry {
    bfrt::TableEntry {
        table_id: table.id,
        value: Some(bfrt::table_entry::Value::Key(bfrt::TableKey {
            fields: decode_key(table, key),
        })),
        data: Some(data.clone()),
        ..Default::default()
    }
}

fn check_value(def: &DataDef, f: &DataField, what: &dyn Fn() -> String) -> Result<(), UpdateError> {
    match (def.ty, &f.value) {
        (FieldType::Bytes { width }, Some(DValue::Stream(v))) => check_width(v, width, what),
        (FieldType::Bool, Some(DValue::BoolVal(_)))
        | (FieldType::Str, Some(DValue::StrVal(_)))
        | (FieldType::Float, Some(DValue::FloatVal(_)))
        | (FieldType::Other, Some(_)) => Ok(()),
        (ty, _) => Err(err(
            Code::InvalidArgument,
            format!("{}: value does not match type {ty:?}", what()),
        )),
    }
}

/// Checks the data of an entry (`for_default` = as the table's default).
fn check_data(table: &TableDef, data: &TableData, for_default: bool) -> Result<(), UpdateError> {
    let action = if table.actions.is_empty() {
        if data.action_id != 0 {
            return Err(err(
                Code::InvalidArgument,
                format!(
                    "table {} has no actions (action id {})",
                    table.name, data.action_id
                ),
            ));
        }
        None
    } else {
        let Some(a) = table.action(data.action_id) else {
            return Err(err(
                Code::InvalidArgument,
                format!(
                    "table {}: action id {} is not an action of this table",
                    table.name, data.action_id
                ),
            ));
        };
        if a.default_only && !for_default {
            return Err(err(
                Code::InvalidArgument,
                format!(
                    "table {}: action {} may only be the default action",
                    table.name, a.name
                ),
            ));
        }
        if a.table_only && for_default {
            return Err(err(
                Code::InvalidArgument,
                format!(
                    "table {}: action {} cannot be the default action",
                    table.name, a.name
                ),
            ));
        }
        Some(a)
    };
    let mut seen: u64 = 0;
    for f in &data.fields {
        let found = action
            .and_then(|a| a.data.iter().enumerate().find(|(_, d)| d.id == f.field_id))
            .or_else(|| {
                table
                    .data
                    .iter()
                    .enumerate()
                    .find(|(_, d)| d.id == f.field_id)
                    .map(|(i, d)| (i + 32, d))
            });
        let Some((idx, def)) = found else {
            return Err(err(
                Code::InvalidArgument,
                format!(
                    "table {}{}: unknown data field id {}",
                    table.name,
                    action
                        .map(|a| format!(" action {}", a.name))
                        .unwrap_or_default(),
                    f.field_id
                ),
            ));
        };
        if idx < 64 {
            if seen & (1 << idx) != 0 {
                return Err(err(
                    Code::InvalidArgument,
                    format!("table {}: duplicate data field {}", table.name, def.name),
                ));
            }
            seen |= 1 << idx;
        }
        check_value(def, f, &|| {
            format!("table {} data {}", table.name, def.name)
        })?;
    }
    if let Some(a) = action {
        for (i, d) in a.data.iter().enumerate() {
            if d.mandatory && i < 32 && seen & (1 << i) == 0 {
                return Err(err(
                    Code::InvalidArgument,
                    format!("action {}: missing data field {}", a.name, d.name),
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use bfrt::key_field::{Exact, Lpm, Ternary};

    const ROUTER: &str = include_str!("../../../examples/router/bfrt.json");

    fn program() -> Program {
        Program::new(
            BfrtSchema::from_json(ROUTER.as_bytes()).unwrap(),
            Default::default(),
        )
    }

    fn table<'a>(p: &'a Program, name: &str) -> &'a TableDef {
        p.schema.tables.values().find(|t| t.name == name).unwrap()
    }

    fn lpm_entry(p: &Program, value: [u8; 4], len: i32, port: Vec<u8>) -> bfrt::TableEntry {
        let t = table(p, "pipe.MyIngress.ipv4_lpm");
        let a = t
            .actions
            .iter()
            .find(|a| a.name == "MyIngress.set_nhop")
            .unwrap();
        bfrt::TableEntry {
            table_id: t.id,
            value: Some(bfrt::table_entry::Value::Key(bfrt::TableKey {
                fields: vec![KeyField {
                    field_id: 1,
                    match_type: Some(MatchType::Lpm(Lpm {
                        value: value.to_vec(),
                        prefix_len: len,
                    })),
                }],
            })),
            data: Some(TableData {
                action_id: a.id,
                fields: vec![
                    DataField {
                        field_id: 1,
                        value: Some(DValue::Stream(vec![0, 0, 0, 0, 0, 1])),
                    },
                    DataField {
                        field_id: 2,
                        value: Some(DValue::Stream(port)),
                    },
                ],
            }),
            ..Default::default()
        }
    }

    #[test]
    fn lpm_masks_and_reads_back_full_width() {
        let mut p = program();
        let mut key = Vec::new();
        let e = lpm_entry(&p, [10, 1, 2, 3], 16, vec![0, 5]);
        assert_eq!(
            p.apply_entry(Type::Insert, e.clone(), &mut key, None)
                .unwrap(),
            Applied::Insert
        );
        // Same /16 after masking: duplicate.
        let e2 = lpm_entry(&p, [10, 1, 9, 9], 16, vec![0, 5]);
        assert_eq!(
            p.apply_entry(Type::Insert, e2, &mut key, None)
                .unwrap_err()
                .code,
            Code::AlreadyExists
        );
        let mut out = Vec::new();
        p.read_entries(
            &bfrt::TableEntry {
                table_id: e.table_id,
                ..Default::default()
            },
            &mut |t| out.push(t),
        )
        .unwrap();
        assert_eq!(out.len(), 1);
        let Some(bfrt::table_entry::Value::Key(k)) = &out[0].value else {
            panic!()
        };
        assert_eq!(
            k.fields[0].match_type,
            Some(MatchType::Lpm(Lpm {
                value: vec![10, 1, 0, 0],
                prefix_len: 16
            }))
        );
    }

    #[test]
    fn widths_are_full_and_checked() {
        let mut p = program();
        let mut key = Vec::new();
        // Port is 9 bits: 2 bytes, top 7 bits zero.
        let short = lpm_entry(&p, [10, 0, 0, 0], 8, vec![5]);
        assert_eq!(
            p.apply_entry(Type::Insert, short, &mut key, None)
                .unwrap_err()
                .code,
            Code::InvalidArgument
        );
        let wide = lpm_entry(&p, [10, 0, 0, 0], 8, vec![2, 0]);
        assert_eq!(
            p.apply_entry(Type::Insert, wide, &mut key, None)
                .unwrap_err()
                .code,
            Code::OutOfRange
        );
        let bad_len = lpm_entry(&p, [10, 0, 0, 0], 33, vec![0, 1]);
        assert_eq!(
            p.apply_entry(Type::Insert, bad_len, &mut key, None)
                .unwrap_err()
                .code,
            Code::InvalidArgument
        );
    }

    #[test]
    fn undo_restores_everything() {
        let mut p = program();
        let mut key = Vec::new();
        let a = lpm_entry(&p, [10, 0, 0, 0], 8, vec![0, 1]);
        p.apply_entry(Type::Insert, a.clone(), &mut key, None)
            .unwrap();
        let mut log = Vec::new();
        let b = lpm_entry(&p, [11, 0, 0, 0], 8, vec![0, 1]);
        p.apply_entry(Type::Insert, b, &mut key, Some(&mut log))
            .unwrap();
        let a2 = lpm_entry(&p, [10, 0, 0, 0], 8, vec![0, 2]);
        p.apply_entry(Type::Modify, a2, &mut key, Some(&mut log))
            .unwrap();
        let clear = bfrt::TableEntry {
            table_id: a.table_id,
            ..Default::default()
        };
        assert_eq!(
            p.apply_entry(Type::Delete, clear, &mut key, Some(&mut log))
                .unwrap(),
            Applied::Delete(2)
        );
        assert_eq!(p.entries(), 0);
        p.undo(log);
        let mut out = Vec::new();
        p.read_entries(&a, &mut |t| out.push(t)).unwrap();
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].data, a.data);
        assert_eq!(p.entries(), 1);
    }

    #[test]
    fn ternary_priority_is_a_key_field_and_default_only_actions() {
        let mut p = program();
        let mut key = Vec::new();
        let t = table(&p, "pipe.MyIngress.acl").clone();
        let permit = t
            .actions
            .iter()
            .find(|a| a.name == "MyIngress.permit")
            .unwrap()
            .id;
        let noaction = t.actions.iter().find(|a| a.name == "NoAction").unwrap().id;
        let entry = |prio: u32, action: u32| bfrt::TableEntry {
            table_id: t.id,
            value: Some(bfrt::table_entry::Value::Key(bfrt::TableKey {
                fields: vec![
                    KeyField {
                        field_id: 1,
                        match_type: Some(MatchType::Ternary(Ternary {
                            value: vec![10, 0, 0, 1],
                            mask: vec![255, 255, 255, 255],
                        })),
                    },
                    KeyField {
                        field_id: 65537,
                        match_type: Some(MatchType::Exact(Exact {
                            value: prio.to_be_bytes().to_vec(),
                        })),
                    },
                ],
            })),
            data: Some(TableData {
                action_id: action,
                fields: vec![],
            }),
            ..Default::default()
        };
        p.apply_entry(Type::Insert, entry(1, permit), &mut key, None)
            .unwrap();
        p.apply_entry(Type::Insert, entry(2, permit), &mut key, None)
            .unwrap();
        assert_eq!(
            p.apply_entry(Type::Insert, entry(3, noaction), &mut key, None)
                .unwrap_err()
                .code,
            Code::InvalidArgument
        );
        let mut def = entry(0, noaction);
        def.value = None;
        def.is_default_entry = true;
        p.apply_entry(Type::Modify, def, &mut key, None).unwrap();
        assert_eq!(p.usage(t.id), Some(2));
    }
}
