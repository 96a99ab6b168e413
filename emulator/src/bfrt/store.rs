//! Table contents of BFRT programs and the write/read semantics: full-width
//! big-endian values, missing key fields are zero, per-update errors, undo
//! for ROLLBACK_ON_ERROR. Pure logic; no locks or I/O here.

use p4fleet_proto::bfrt::{self, TableData, update::Type};
use prost::Message;
use tonic::Code;

use super::schema::{ArrayKind, BfrtSchema, DataDef, FieldType, Stateful, TableDef};
use super::stateful;
use super::wire::{self, DataValue, DataView, KeyMatch, KeyView};
use crate::key::{Entries, Key, MatchKind};
use crate::update_error::{UpdateError, err, given_once, hex, malformed, not_an_action_of};
use crate::wire::{begin, end, put_bytes, put_uint};

// `Entries` hold each entry's encoded `TableData` as the client sent it
// (BFRT values are full width, so there is nothing to canonicalize).

/// Reusable buffers for the key and data fields of the entry parsed last.
#[derive(Default)]
pub(crate) struct Scratch<'a> {
    pub key: Vec<u8>,
    pub keys: Vec<KeyView<'a>>,
    pub data: Vec<DataView<'a>>,
}

pub(crate) struct TableState {
    pub entries: Entries,
    pub default: TableData,
}

/// A loaded set of tables (one P4 program, or the fixed tables).
pub(crate) struct Program {
    pub schema: BfrtSchema,
    pub config: bfrt::ForwardingPipelineConfig,
    pub tables: crate::key::IdMap<TableState>,
    /// Hardware pipes it runs on (its profiles' `pipe_scope`s).
    pub pipes: std::collections::BTreeSet<u32>,
}

/// How to take back one applied update.
pub(crate) enum Undo {
    Inserted(u32, Key),
    Replaced(u32, Key, Box<[u8]>),
    Removed(u32, Key, Box<[u8]>),
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
            pipes: Default::default(),
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
                    self.state(t).entries.remove(k.as_slice());
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

    /// Applies one table-entry update given as a prost message (drift
    /// helpers and tests; Writes use [`Self::apply_raw`]).
    pub fn apply_entry(
        &mut self,
        ty: Type,
        te: bfrt::TableEntry,
        log: Option<&mut Vec<Undo>>,
    ) -> Result<Applied, UpdateError> {
        let raw = te.encode_to_vec();
        let mut scratch = Scratch::default();
        let te = wire::parse_table_entry(&raw, &mut scratch.keys).map_err(malformed)?;
        self.apply_parsed(ty, te, &mut scratch, log)
    }

    /// Applies one parsed `TableEntry` update (its key fields in
    /// `scratch.keys`, see [`wire::parse_table_entry`]); `log` collects
    /// undo records when given.
    pub fn apply_parsed<'a>(
        &mut self,
        ty: Type,
        te: wire::EntryView<'a>,
        scratch: &mut Scratch<'a>,
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
        let data = te.data.unwrap_or_default();
        let action_id = wire::parse_data(data, &mut scratch.data).map_err(malformed)?;

        if te.is_default_entry {
            let next = match ty {
                Type::Modify | Type::InsertOrModify => {
                    check_data(table, action_id, &scratch.data, true)?;
                    TableData::decode(data)
                        .map_err(|e| err(Code::InvalidArgument, format!("malformed data: {e}")))?
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

        if te.by_handle {
            return Err(err(
                Code::Unimplemented,
                "entries by handle are not emulated",
            ));
        }
        if scratch.keys.is_empty() && matches!(ty, Type::Delete) && !table.keys.is_empty() {
            // A delete without a key clears the table.
            let n = state.entries.len() as u64;
            let old = std::mem::take(&mut state.entries);
            if let Some(log) = log {
                log.push(Undo::Cleared(tid, old));
            }
            return Ok(Applied::Delete(n));
        }
        let key = &mut scratch.key;
        if let Stateful::Array(kind) = table.stateful {
            return write_cell(table, kind, state, ty, &scratch.keys, key, data, log);
        }
        encode_key(table, &scratch.keys, key)?;
        match ty {
            Type::Insert | Type::Modify | Type::InsertOrModify => {
                check_data(table, action_id, &scratch.data, false)?;
                if ty != Type::Modify {
                    crate::key::make_room(&mut state.entries, 1, table.size);
                }
                let len = state.entries.len();
                match state.entries.entry(Key::new(key)) {
                    std::collections::hash_map::Entry::Occupied(_) if ty == Type::Insert => {
                        Err(err(
                            Code::AlreadyExists,
                            format!("table {}: entry already exists", table.name),
                        ))
                    }
                    std::collections::hash_map::Entry::Occupied(mut o) => {
                        let next = stored(table, data, Some(o.get()))?;
                        let old = std::mem::replace(o.get_mut(), next);
                        if let Some(log) = log {
                            log.push(Undo::Replaced(tid, o.key().clone(), old));
                        }
                        Ok(Applied::Modify)
                    }
                    std::collections::hash_map::Entry::Vacant(_) if ty == Type::Modify => Err(err(
                        Code::NotFound,
                        format!("table {}: no such entry", table.name),
                    )),
                    std::collections::hash_map::Entry::Vacant(_)
                        if table.size.is_some_and(|s| len >= s) =>
                    {
                        Err(err(
                            Code::ResourceExhausted,
                            format!("table {} is full ({len} entries)", table.name),
                        ))
                    }
                    std::collections::hash_map::Entry::Vacant(v) => {
                        let next = stored(table, data, None)?;
                        if let Some(log) = log {
                            log.push(Undo::Inserted(tid, v.key().clone()));
                        }
                        v.insert(next);
                        Ok(Applied::Insert)
                    }
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

    /// Encoded `TableEntry`s of one table (all, one key, or the default
    /// entry), to `emit`.
    pub fn read_entries(
        &self,
        filter: &bfrt::TableEntry,
        emit: &mut dyn FnMut(&[u8]),
    ) -> Result<(), UpdateError> {
        let Some(table) = self.schema.tables.get(&filter.table_id) else {
            return Err(err(
                Code::NotFound,
                format!("unknown table id {}", filter.table_id),
            ));
        };
        let state = &self.tables[&table.id];
        if filter.is_default_entry {
            emit(
                &bfrt::TableEntry {
                    table_id: table.id,
                    is_default_entry: true,
                    data: Some(state.default.clone()),
                    ..Default::default()
                }
                .encode_to_vec(),
            );
            return Ok(());
        }
        let raw = filter.encode_to_vec();
        let mut keys = Vec::new();
        let f = wire::parse_table_entry(&raw, &mut keys).map_err(malformed)?;
        if f.by_handle {
            return Err(err(
                Code::Unimplemented,
                "entries by handle are not emulated",
            ));
        }
        let mut buf = Vec::new();
        if let Stateful::Array(kind) = table.stateful {
            return self.read_cells(table, kind, &keys, emit);
        }
        if keys.is_empty() || table.keys.is_empty() {
            for (k, d) in &state.entries {
                buf.clear();
                entry_out(table, k.as_slice(), d, &mut buf);
                emit(&buf);
            }
            return Ok(());
        }
        let mut key = Vec::new();
        encode_key(table, &keys, &mut key)?;
        match state.entries.get_key_value(key.as_slice()) {
            Some((k, d)) => {
                entry_out(table, k.as_slice(), d, &mut buf);
                emit(&buf);
                Ok(())
            }
            None => Err(err(
                Code::NotFound,
                format!("table {}: no such entry", table.name),
            )),
        }
    }

    /// Table usage (installed entries; every cell of an array).
    pub fn usage(&self, table_id: u32) -> Option<u32> {
        let def = self.schema.tables.get(&table_id)?;
        if let Stateful::Array(_) = def.stateful {
            return def.size.map(|s| s as u32);
        }
        self.tables.get(&table_id).map(|t| t.entries.len() as u32)
    }

    /// Cells of an array table: one (`keys` given) or all of `0..size`,
    /// never-written cells with their initial value.
    fn read_cells(
        &self,
        table: &TableDef,
        kind: ArrayKind,
        keys: &[KeyView<'_>],
        emit: &mut dyn FnMut(&[u8]),
    ) -> Result<(), UpdateError> {
        let state = &self.tables[&table.id];
        let initial = stateful::initial_cell(table, kind);
        let pipes = self.pipes.len().max(1);
        let mut buf = Vec::new();
        let mut one = |index: u32, buf: &mut Vec<u8>| {
            let key = index.to_be_bytes();
            let data = state
                .entries
                .get(key.as_slice())
                .map_or(initial.as_slice(), |d| d);
            buf.clear();
            entry_out(table, &key, &stateful::cell_out(kind, data, pipes), buf);
            emit(buf);
        };
        if keys.is_empty() {
            for i in 0..table.size.unwrap_or(0) as u32 {
                one(i, &mut buf);
            }
            return Ok(());
        }
        let mut key = Vec::new();
        encode_key(table, keys, &mut key)?;
        let i = stateful::index(&key);
        stateful::check_index(table, kind, i)?;
        one(i, &mut buf);
        Ok(())
    }
}

/// What a match entry stores: the data as sent, with a direct counter's
/// fields completed ([`stateful::counted_entry`]).
fn stored(table: &TableDef, data: &[u8], old: Option<&[u8]>) -> Result<Box<[u8]>, UpdateError> {
    match table.stateful {
        Stateful::DirectCounter(c) => Ok(stateful::counted_entry(c, data, old)?.into()),
        _ => Ok(data.into()),
    }
}

/// A write to one cell of an array table: INSERT, MODIFY and
/// INSERT_OR_MODIFY all set the cell (every cell exists); deleting one cell
/// is refused (a DELETE without key, handled before, resets the table).
#[allow(clippy::too_many_arguments)]
fn write_cell(
    table: &TableDef,
    kind: ArrayKind,
    state: &mut TableState,
    ty: Type,
    keys: &[KeyView<'_>],
    key: &mut Vec<u8>,
    data: &[u8],
    log: Option<&mut Vec<Undo>>,
) -> Result<Applied, UpdateError> {
    match ty {
        Type::Insert | Type::Modify | Type::InsertOrModify => {}
        Type::Delete => {
            return Err(err(
                Code::Unimplemented,
                format!(
                    "table {} ({}): a cell cannot be deleted; modify it, or delete without a key to reset the table",
                    table.name,
                    kind.name()
                ),
            ));
        }
        Type::Reset => {
            return Err(err(
                Code::InvalidArgument,
                "RESET applies to the default entry or table attributes",
            ));
        }
        Type::ModifyInc => return Err(err(Code::Unimplemented, "MODIFY_INC is not emulated")),
        Type::Unspecified => {
            return Err(err(Code::InvalidArgument, "update type is UNSPECIFIED"));
        }
    }
    if keys.is_empty() {
        return Err(err(
            Code::InvalidArgument,
            format!("table {}: key {} is missing", table.name, kind.index_key()),
        ));
    }
    encode_key(table, keys, key)?;
    stateful::check_index(table, kind, stateful::index(key))?;
    let mut fields = Vec::new();
    let action_id = wire::parse_data(data, &mut fields).map_err(malformed)?;
    check_data(table, action_id, &fields, false)?;
    match state.entries.entry(Key::new(key)) {
        std::collections::hash_map::Entry::Occupied(mut o) => {
            let next = stateful::cell(table, kind, data, Some(o.get()))?;
            let old = std::mem::replace(o.get_mut(), next.into());
            if let Some(log) = log {
                log.push(Undo::Replaced(table.id, o.key().clone(), old));
            }
        }
        std::collections::hash_map::Entry::Vacant(v) => {
            let next = stateful::cell(table, kind, data, None)?;
            if let Some(log) = log {
                log.push(Undo::Inserted(table.id, v.key().clone()));
            }
            v.insert(next.into());
        }
    }
    Ok(Applied::Modify)
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
    fields: &[KeyView<'_>],
    key: &mut Vec<u8>,
) -> Result<(), UpdateError> {
    key.clear();
    key.resize(table.key_len, 0);
    let mut seen: u64 = 0;
    for f in fields {
        let k = given_once(
            &mut seen,
            table.key(f.field_id),
            || format!("table {}: unknown key field id {}", table.name, f.field_id),
            |k| format!("table {}: duplicate key field {}", table.name, k.name),
        )?;
        let what = || format!("table {} key {}", table.name, k.name);
        let nb = k.nbytes;
        let slot = &mut key[k.offset..k.offset + k.kind.key_len(nb)];
        match (k.kind, f.m) {
            (MatchKind::Exact, KeyMatch::Exact(value)) => {
                check_width(value, k.width, &what)?;
                slot.copy_from_slice(value);
            }
            (MatchKind::Lpm, KeyMatch::Lpm(value, prefix_len)) => {
                check_width(value, k.width, &what)?;
                if prefix_len < 0 || prefix_len as u32 > k.width {
                    return Err(err(
                        Code::InvalidArgument,
                        format!(
                            "{}: prefix_len {} not in 0..={}",
                            what(),
                            prefix_len,
                            k.width
                        ),
                    ));
                }
                slot[..nb].copy_from_slice(value);
                mask_prefix(
                    &mut slot[..nb],
                    nb * 8 - k.width as usize,
                    prefix_len as usize,
                );
                slot[nb..].copy_from_slice(&(prefix_len as u16).to_be_bytes());
            }
            (MatchKind::Ternary, KeyMatch::Ternary(value, mask)) => {
                check_width(value, k.width, &what)?;
                check_width(mask, k.width, &|| format!("{} mask", what()))?;
                let (v, m) = slot.split_at_mut(nb);
                for i in 0..nb {
                    v[i] = value[i] & mask[i];
                    m[i] = mask[i];
                }
            }
            (MatchKind::Range, KeyMatch::Range(low, high)) => {
                check_width(low, k.width, &|| format!("{} low", what()))?;
                check_width(high, k.width, &|| format!("{} high", what()))?;
                if low > high {
                    return Err(err(
                        Code::InvalidArgument,
                        format!("{}: low is greater than high", what()),
                    ));
                }
                slot[..nb].copy_from_slice(low);
                slot[nb..].copy_from_slice(high);
            }
            (MatchKind::Optional, KeyMatch::Optional(value, is_valid)) => {
                check_width(value, k.width, &what)?;
                slot[0] = is_valid as u8;
                slot[1..].copy_from_slice(value);
            }
            (kind, got) => {
                return Err(err(
                    Code::InvalidArgument,
                    format!("{}: expected a {kind:?} match, got {}", what(), got.name()),
                ));
            }
        }
    }
    Ok(())
}

/// Encodes an entry as a `TableEntry` into `out`: key fields rebuilt from
/// the internal key (full width, every field), data as stored.
fn entry_out(table: &TableDef, key: &[u8], data: &[u8], out: &mut Vec<u8>) {
    put_uint(out, 1, u64::from(table.id));
    let tk = begin(out, 2);
    for k in &table.keys {
        let nb = k.nbytes;
        let s = &key[k.offset..k.offset + k.kind.key_len(nb)];
        let kf = begin(out, 1);
        put_uint(out, 1, u64::from(k.id));
        match k.kind {
            MatchKind::Exact => {
                let m = begin(out, 2);
                put_bytes(out, 1, s);
                end(out, m);
            }
            MatchKind::Lpm => {
                let m = begin(out, 4);
                put_bytes(out, 1, &s[..nb]);
                put_uint(out, 2, u64::from(u16::from_be_bytes([s[nb], s[nb + 1]])));
                end(out, m);
            }
            MatchKind::Ternary | MatchKind::Range => {
                let m = begin(out, if k.kind == MatchKind::Ternary { 3 } else { 5 });
                put_bytes(out, 1, &s[..nb]);
                put_bytes(out, 2, &s[nb..]);
                end(out, m);
            }
            MatchKind::Optional => {
                let m = begin(out, 6);
                put_bytes(out, 1, &s[1..]);
                put_uint(out, 2, u64::from(s[0] != 0));
                end(out, m);
            }
        }
        end(out, kf);
    }
    end(out, tk);
    put_bytes(out, 3, data);
}

fn check_value(
    def: &DataDef,
    f: &DataView<'_>,
    what: &dyn Fn() -> String,
) -> Result<(), UpdateError> {
    match (def.ty, f.value) {
        (FieldType::Bytes { width }, DataValue::Stream(v)) => check_width(v, width, what),
        (FieldType::Bool, DataValue::Bool)
        | (FieldType::Str, DataValue::Str)
        | (FieldType::Float, DataValue::Float)
        | (
            FieldType::Other,
            DataValue::Stream(_)
            | DataValue::Bool
            | DataValue::Str
            | DataValue::Float
            | DataValue::Other,
        ) => Ok(()),
        (ty, _) => Err(err(
            Code::InvalidArgument,
            format!("{}: value does not match type {ty:?}", what()),
        )),
    }
}

/// Checks the data of an entry (`for_default` = as the table's default).
fn check_data(
    table: &TableDef,
    action_id: u32,
    fields: &[DataView<'_>],
    for_default: bool,
) -> Result<(), UpdateError> {
    let action = if table.actions.is_empty() {
        if action_id != 0 {
            return Err(err(
                Code::InvalidArgument,
                format!(
                    "table {} has no actions (action id {})",
                    table.name, action_id
                ),
            ));
        }
        None
    } else {
        let Some(a) = table.action(action_id) else {
            return Err(not_an_action_of(&table.name, action_id));
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
    for f in fields {
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
        let unknown = || {
            format!(
                "table {}{}: unknown data field id {}",
                table.name,
                action
                    .map(|a| format!(" action {}", a.name))
                    .unwrap_or_default(),
                f.field_id
            )
        };
        let def = given_once(&mut seen, found, unknown, |def| {
            format!("table {}: duplicate data field {}", table.name, def.name)
        })?;
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
    use bfrt::key_field::{Exact, Lpm, MatchType, Ternary};
    use bfrt::{DataField, KeyField, data_field::Value as DValue};

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
        let e = lpm_entry(&p, [10, 1, 2, 3], 16, vec![0, 5]);
        assert_eq!(
            p.apply_entry(Type::Insert, e.clone(), None).unwrap(),
            Applied::Insert
        );
        // Same /16 after masking: duplicate.
        let e2 = lpm_entry(&p, [10, 1, 9, 9], 16, vec![0, 5]);
        assert_eq!(
            p.apply_entry(Type::Insert, e2, None).unwrap_err().code,
            Code::AlreadyExists
        );
        let mut out = Vec::new();
        p.read_entries(
            &bfrt::TableEntry {
                table_id: e.table_id,
                ..Default::default()
            },
            &mut |t| out.push(bfrt::TableEntry::decode(t).unwrap()),
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
        // Port is 9 bits: 2 bytes, top 7 bits zero.
        let short = lpm_entry(&p, [10, 0, 0, 0], 8, vec![5]);
        assert_eq!(
            p.apply_entry(Type::Insert, short, None).unwrap_err().code,
            Code::InvalidArgument
        );
        let wide = lpm_entry(&p, [10, 0, 0, 0], 8, vec![2, 0]);
        assert_eq!(
            p.apply_entry(Type::Insert, wide, None).unwrap_err().code,
            Code::OutOfRange
        );
        let bad_len = lpm_entry(&p, [10, 0, 0, 0], 33, vec![0, 1]);
        assert_eq!(
            p.apply_entry(Type::Insert, bad_len, None).unwrap_err().code,
            Code::InvalidArgument
        );
    }

    #[test]
    fn undo_restores_everything() {
        let mut p = program();
        let a = lpm_entry(&p, [10, 0, 0, 0], 8, vec![0, 1]);
        p.apply_entry(Type::Insert, a.clone(), None).unwrap();
        let mut log = Vec::new();
        let b = lpm_entry(&p, [11, 0, 0, 0], 8, vec![0, 1]);
        p.apply_entry(Type::Insert, b, Some(&mut log)).unwrap();
        let a2 = lpm_entry(&p, [10, 0, 0, 0], 8, vec![0, 2]);
        p.apply_entry(Type::Modify, a2, Some(&mut log)).unwrap();
        let clear = bfrt::TableEntry {
            table_id: a.table_id,
            ..Default::default()
        };
        assert_eq!(
            p.apply_entry(Type::Delete, clear, Some(&mut log)).unwrap(),
            Applied::Delete(2)
        );
        assert_eq!(p.entries(), 0);
        p.undo(log);
        let mut out = Vec::new();
        p.read_entries(&a, &mut |t| out.push(bfrt::TableEntry::decode(t).unwrap()))
            .unwrap();
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].data, a.data);
        assert_eq!(p.entries(), 1);
    }

    #[test]
    fn ternary_priority_is_a_key_field_and_default_only_actions() {
        let mut p = program();
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
        p.apply_entry(Type::Insert, entry(1, permit), None).unwrap();
        p.apply_entry(Type::Insert, entry(2, permit), None).unwrap();
        assert_eq!(
            p.apply_entry(Type::Insert, entry(3, noaction), None)
                .unwrap_err()
                .code,
            Code::InvalidArgument
        );
        let mut def = entry(0, noaction);
        def.value = None;
        def.is_default_entry = true;
        p.apply_entry(Type::Modify, def, None).unwrap();
        assert_eq!(p.usage(t.id), Some(2));
    }

    #[test]
    fn mutated_updates_are_refused_or_applied_never_a_panic() {
        let mut p = program();
        let mut next = crate::testing::xorshift(0x2545_f491_4f6c_dd1d);
        let mut applied = 0;
        for i in 0..3000u32 {
            let mut raw = lpm_entry(&p, i.to_be_bytes(), 32, vec![0, 1]).encode_to_vec();
            match next() % 3 {
                0 => {}
                1 => {
                    let at = next() as usize % raw.len();
                    raw[at] ^= 1 << (next() % 8);
                }
                _ => raw.truncate(next() as usize % raw.len()),
            }
            let mut scratch = Scratch::default();
            let Ok(te) = wire::parse_table_entry(&raw, &mut scratch.keys) else {
                continue;
            };
            if p.apply_parsed(Type::Insert, te, &mut scratch, None).is_ok() {
                applied += 1;
            }
        }
        assert!(applied > 100 && applied < 3000, "{applied}");
        // Everything stored reads back as valid entries.
        let t = table(&p, "pipe.MyIngress.ipv4_lpm").id;
        let mut n = 0;
        p.read_entries(
            &bfrt::TableEntry {
                table_id: t,
                ..Default::default()
            },
            &mut |raw| {
                bfrt::TableEntry::decode(raw).expect("stored entries decode");
                n += 1;
            },
        )
        .unwrap();
        assert_eq!(n, p.usage(t).unwrap() as usize);
    }
}
