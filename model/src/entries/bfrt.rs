//! BFRT (Tofino) forms of table entries: bfrt.json parsing, a [`TableSchema`]
//! from bfrt.json, and the one mapping between canonical P4Runtime entries
//! (what the rest of p4fleet uses) and BFRT entries: [`BfrtTableMap`]
//! matches ids by name, the write encoder ([`bfrt_write_request`]) applies
//! the rules below while encoding, and [`BfrtTableMap::from_bfrt`] undoes
//! them for reads. Pure logic, no I/O.
//!
//! BFRT differs from P4Runtime in ways the translation hides:
//! - tables, fields, actions and data are looked up by name in bfrt.json
//!   (`pipe.MyIngress.firewall` for P4Info's `MyIngress.firewall`); ids differ;
//! - values are big-endian and exactly `ceil(width / 8)` bytes wide;
//! - don't-care fields are written explicitly (ternary mask 0, LPM prefix 0,
//!   range 0..max, optional not valid) and read back as omitted;
//! - the priority is the key field `$MATCH_PRIORITY`, where lower wins, so
//!   `$MATCH_PRIORITY = i32::MAX - priority` keeps P4Runtime's order;
//! - there is no entry metadata.

use std::collections::HashMap;

use p4fleet_proto::bfrt::{self, key_field};
use p4fleet_proto::p4runtime::{self as p4rt, field_match, table_action};
use serde::Deserialize;

use super::error::EntryError;
use super::schema::{
    ActionSchema, ActionScope, FieldSchema, MatchKind, ParamSchema, TableSchema, name_matches,
};

mod default_entry;
pub mod stateful;
mod wire;
pub use wire::{BfrtOp, BfrtWriteHeader, bfrt_write_request};

/// Name of the priority key field of ternary/range/optional tables.
pub const MATCH_PRIORITY: &str = "$MATCH_PRIORITY";

fn bad(msg: impl Into<String>) -> EntryError {
    EntryError::BadP4Info(format!("bfrt.json: {}", msg.into()))
}

#[derive(Deserialize)]
struct JInfo {
    #[serde(default)]
    tables: Vec<JTable>,
}

#[derive(Deserialize)]
struct JTable {
    name: String,
    id: u32,
    #[serde(default)]
    table_type: String,
    #[serde(default)]
    size: u64,
    /// Table-level data (singletons): a direct counter's
    /// `$COUNTER_SPEC_*`, a register's `<name>.f1`.
    #[serde(default)]
    data: Vec<JTableData>,
    #[serde(default)]
    key: Vec<JField>,
    #[serde(default)]
    action_specs: Vec<JAction>,
}

#[derive(Deserialize)]
struct JField {
    id: u32,
    name: String,
    #[serde(default)]
    match_type: String,
    r#type: Option<JType>,
}

#[derive(Deserialize)]
struct JTableData {
    singleton: Option<JField>,
}

#[derive(Deserialize)]
struct JType {
    r#type: String,
    #[serde(default)]
    width: Option<u32>,
}

#[derive(Deserialize)]
struct JAction {
    id: u32,
    name: String,
    #[serde(default)]
    action_scope: Option<String>,
    #[serde(default)]
    data: Vec<JField>,
}

fn type_width(t: &Option<JType>) -> Option<u32> {
    let t = t.as_ref()?;
    match t.r#type.as_str() {
        "bytes" => t.width,
        "uint8" => Some(8),
        "uint16" => Some(16),
        "uint32" => Some(32),
        "uint64" => Some(64),
        "bool" => Some(1),
        _ => None,
    }
}

/// One key field of a BFRT table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BfrtKey {
    pub id: u32,
    pub name: String,
    pub kind: MatchKind,
    pub width: u32,
}

/// One data field of a BFRT action.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BfrtData {
    pub id: u32,
    pub name: String,
    pub width: u32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BfrtAction {
    pub id: u32,
    pub name: String,
    pub scope: ActionScope,
    pub data: Vec<BfrtData>,
}

/// A P4 table as bfrt.json describes it (fixed tables and tables with
/// non-numeric fields are left out).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BfrtTable {
    /// Full name, e.g. `pipe.MyIngress.firewall`.
    pub name: String,
    pub id: u32,
    pub size: u64,
    /// Match fields, without `$MATCH_PRIORITY`.
    pub keys: Vec<BfrtKey>,
    /// Id of `$MATCH_PRIORITY`, if the table has it.
    pub priority_id: Option<u32>,
    pub actions: Vec<BfrtAction>,
    /// `MatchAction_Direct`, `Register`, `Counter`, ...
    pub table_type: String,
    /// Table-level data fields of a known width (direct counter fields,
    /// register fields).
    pub data: Vec<BfrtData>,
}

impl BfrtTable {
    /// The name without the pipe prefix (`MyIngress.firewall`), which is the
    /// P4Info name.
    pub fn p4_name(&self) -> &str {
        self.name
            .split_once('.')
            .filter(|(pipe, _)| *pipe == "pipe" || pipe.starts_with("pipe"))
            .map_or(&self.name, |(_, rest)| rest)
    }
}

/// The P4 tables of a bfrt.json.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BfrtInfo {
    pub tables: Vec<BfrtTable>,
}

fn kind(s: &str) -> Option<MatchKind> {
    Some(match s {
        "Exact" => MatchKind::Exact,
        "LPM" => MatchKind::Lpm,
        "Ternary" => MatchKind::Ternary,
        "Range" => MatchKind::Range,
        "Optional" => MatchKind::Optional,
        _ => return None,
    })
}

impl BfrtInfo {
    /// Parses a bfrt.json.
    pub fn parse(json: &[u8]) -> Result<BfrtInfo, EntryError> {
        let info: JInfo = serde_json::from_slice(json).map_err(|e| bad(e.to_string()))?;
        let mut tables = Vec::new();
        'tables: for t in info.tables {
            if t.name.starts_with('$') {
                continue;
            }
            let mut keys = Vec::new();
            let mut priority_id = None;
            for k in &t.key {
                if k.name == MATCH_PRIORITY {
                    priority_id = Some(k.id);
                    continue;
                }
                let (Some(kind), Some(width)) = (kind(&k.match_type), type_width(&k.r#type)) else {
                    continue 'tables;
                };
                keys.push(BfrtKey {
                    id: k.id,
                    name: k.name.clone(),
                    kind,
                    width,
                });
            }
            let mut actions = Vec::new();
            for a in &t.action_specs {
                let mut data = Vec::new();
                for d in &a.data {
                    let Some(width) = type_width(&d.r#type) else {
                        continue 'tables;
                    };
                    data.push(BfrtData {
                        id: d.id,
                        name: d.name.clone(),
                        width,
                    });
                }
                actions.push(BfrtAction {
                    id: a.id,
                    name: a.name.clone(),
                    scope: match a.action_scope.as_deref() {
                        Some("DefaultOnly") => ActionScope::DefaultOnly,
                        Some("TableOnly") => ActionScope::TableOnly,
                        _ => ActionScope::TableAndDefault,
                    },
                    data,
                });
            }
            let data = t
                .data
                .iter()
                .filter_map(|d| d.singleton.as_ref())
                .filter_map(|f| {
                    type_width(&f.r#type).map(|width| BfrtData {
                        id: f.id,
                        name: f.name.clone(),
                        width,
                    })
                })
                .collect();
            tables.push(BfrtTable {
                name: t.name,
                id: t.id,
                size: t.size,
                keys,
                priority_id,
                actions,
                table_type: t.table_type,
                data,
            });
        }
        Ok(BfrtInfo { tables })
    }

    /// A table by full name (`pipe.MyIngress.firewall`) or P4 name
    /// (`MyIngress.firewall`).
    pub fn table(&self, name: &str) -> Option<&BfrtTable> {
        self.tables
            .iter()
            .find(|t| t.name == name)
            .or_else(|| self.tables.iter().find(|t| t.p4_name() == name))
    }
}

impl TableSchema {
    /// The schema of one table of a bfrt.json (ids are BFRT's), for programs
    /// that come without a P4Info. `table` is the full or P4 name, or a
    /// unique dotted suffix of it.
    pub fn from_bfrt_json(json: &[u8], table: &str) -> Result<TableSchema, EntryError> {
        let info = BfrtInfo::parse(json)?;
        let t = match info.table(table) {
            Some(t) => t,
            None => {
                let mut it = info
                    .tables
                    .iter()
                    .filter(|t| name_matches(t.p4_name(), table));
                let first = it
                    .next()
                    .ok_or_else(|| EntryError::UnknownTable(table.to_string()))?;
                if let Some(other) = it.next() {
                    return Err(bad(format!(
                        "table name {table:?} is ambiguous: {} and {}",
                        first.name, other.name
                    )));
                }
                first
            }
        };
        let mut match_fields: Vec<FieldSchema> = t
            .keys
            .iter()
            .map(|k| FieldSchema {
                name: k.name.clone(),
                id: k.id,
                bitwidth: k.width,
                kind: k.kind,
            })
            .collect();
        match_fields.sort_by_key(|f| f.id);
        let actions = t
            .actions
            .iter()
            .map(|a| ActionSchema {
                name: a.name.clone(),
                alias: a.name.rsplit('.').next().unwrap_or_default().to_string(),
                id: a.id,
                params: a
                    .data
                    .iter()
                    .map(|d| ParamSchema {
                        name: d.name.clone(),
                        id: d.id,
                        bitwidth: d.width,
                    })
                    .collect(),
                scope: a.scope,
            })
            .collect();
        let p4_name = t.p4_name().to_string();
        Ok(TableSchema {
            alias: p4_name.rsplit('.').next().unwrap_or_default().to_string(),
            name: p4_name,
            id: t.id,
            size: t.size,
            match_fields,
            actions,
            is_const: false,
            idle_timeout: false,
        })
    }
}

/// Why an entry cannot be translated.
fn conv(msg: impl Into<String>) -> EntryError {
    EntryError::Unsupported(msg.into())
}

fn nbytes(width: u32) -> usize {
    width.div_ceil(8) as usize
}

/// Full-width bytes -> P4Runtime's canonical form (no leading zeros, at
/// least one byte).
pub fn to_canonical(v: &[u8]) -> Vec<u8> {
    let first = v.iter().position(|b| *b != 0).unwrap_or(v.len().max(1) - 1);
    v[first..].to_vec()
}

fn max_value(width: u32) -> Vec<u8> {
    let mut v = vec![0xffu8; nbytes(width)];
    let spare = nbytes(width) as u32 * 8 - width;
    if spare > 0 {
        v[0] = 0xff >> spare;
    }
    v
}

/// How one P4Info field maps to its BFRT key.
#[derive(Debug, Clone)]
struct FieldMap {
    p4_id: u32,
    p4_kind: MatchKind,
    key: BfrtKey,
}

#[derive(Debug, Clone)]
struct ActionMap {
    p4_id: u32,
    bfrt_id: u32,
    /// (P4Info param id, BFRT data id, width)
    params: Vec<(u32, u32, u32)>,
}

/// The translation of one table between its P4Info ids and its bfrt.json
/// ids, matched by names.
#[derive(Debug, Clone)]
pub struct BfrtTableMap {
    pub p4_table_id: u32,
    pub bfrt_table_id: u32,
    pub bfrt_name: String,
    fields: Vec<FieldMap>,
    priority_id: Option<u32>,
    actions: Vec<ActionMap>,
    /// The table's direct counter fields (`$COUNTER_SPEC_BYTES`,
    /// `$COUNTER_SPEC_PKTS`), when bfrt.json gives it one.
    counter: stateful::CounterIds,
}

impl BfrtTableMap {
    /// Matches a P4Info table with its bfrt.json table (fields, actions and
    /// params by name).
    pub fn new(p4: &TableSchema, t: &BfrtTable) -> Result<BfrtTableMap, EntryError> {
        let mut fields = Vec::with_capacity(p4.match_fields.len());
        for f in &p4.match_fields {
            let key = t
                .keys
                .iter()
                .find(|k| k.name == f.name)
                .ok_or_else(|| bad(format!("table {} has no key field {}", t.name, f.name)))?;
            let compatible = key.kind == f.kind
                || (f.kind == MatchKind::Optional && key.kind == MatchKind::Ternary);
            if !compatible || key.width != f.bitwidth {
                return Err(bad(format!(
                    "table {} key {}: {:?}/{} bits in bfrt.json, {:?}/{} in P4Info",
                    t.name, f.name, key.kind, key.width, f.kind, f.bitwidth
                )));
            }
            fields.push(FieldMap {
                p4_id: f.id,
                p4_kind: f.kind,
                key: key.clone(),
            });
        }
        if p4.requires_priority() && t.priority_id.is_none() {
            return Err(bad(format!("table {} has no {MATCH_PRIORITY}", t.name)));
        }
        let mut actions = Vec::with_capacity(p4.actions.len());
        for a in &p4.actions {
            let b = t
                .actions
                .iter()
                .find(|b| b.name == a.name)
                .ok_or_else(|| bad(format!("table {} has no action {}", t.name, a.name)))?;
            let mut params = Vec::with_capacity(a.params.len());
            for p in &a.params {
                let d = b.data.iter().find(|d| d.name == p.name).ok_or_else(|| {
                    bad(format!("action {} has no data field {}", b.name, p.name))
                })?;
                params.push((p.id, d.id, d.width));
            }
            actions.push(ActionMap {
                p4_id: a.id,
                bfrt_id: b.id,
                params,
            });
        }
        Ok(BfrtTableMap {
            p4_table_id: p4.id,
            bfrt_table_id: t.id,
            bfrt_name: t.name.clone(),
            fields,
            priority_id: t.priority_id,
            actions,
            counter: stateful::CounterIds::of(t),
        })
    }

    /// The canonical P4Runtime form of an entry read over BFRT.
    pub fn from_bfrt(&self, te: &bfrt::TableEntry) -> Result<p4rt::TableEntry, EntryError> {
        use field_match::FieldMatchType as F;
        use key_field::MatchType as K;
        let mut out = p4rt::TableEntry {
            table_id: self.p4_table_id,
            is_default_action: te.is_default_entry,
            ..Default::default()
        };
        if let Some(bfrt::table_entry::Value::Key(k)) = &te.value {
            for kf in &k.fields {
                if Some(kf.field_id) == self.priority_id {
                    if let Some(K::Exact(e)) = &kf.match_type {
                        let mut b = [0u8; 4];
                        let n = e.value.len().min(4);
                        b[4 - n..].copy_from_slice(&e.value[e.value.len() - n..]);
                        out.priority =
                            i32::MAX - (u32::from_be_bytes(b).min(i32::MAX as u32) as i32);
                    }
                    continue;
                }
                let Some(f) = self.fields.iter().find(|f| f.key.id == kf.field_id) else {
                    return Err(conv(format!("unknown key field id {}", kf.field_id)));
                };
                let w = f.key.width;
                let fm = match &kf.match_type {
                    Some(K::Exact(e)) => Some(F::Exact(field_match::Exact {
                        value: to_canonical(&e.value),
                    })),
                    Some(K::Lpm(l)) if l.prefix_len == 0 => None,
                    Some(K::Lpm(l)) => Some(F::Lpm(field_match::Lpm {
                        value: to_canonical(&l.value),
                        prefix_len: l.prefix_len,
                    })),
                    Some(K::Ternary(t)) if t.mask.iter().all(|b| *b == 0) => None,
                    Some(K::Ternary(t)) if f.p4_kind == MatchKind::Optional => {
                        Some(F::Optional(field_match::Optional {
                            value: to_canonical(&t.value),
                        }))
                    }
                    Some(K::Ternary(t)) => Some(F::Ternary(field_match::Ternary {
                        value: to_canonical(&t.value),
                        mask: to_canonical(&t.mask),
                    })),
                    Some(K::Range(r))
                        if r.low.iter().all(|b| *b == 0) && r.high == max_value(w) =>
                    {
                        None
                    }
                    Some(K::Range(r)) => Some(F::Range(field_match::Range {
                        low: to_canonical(&r.low),
                        high: to_canonical(&r.high),
                    })),
                    Some(K::Optional(o)) if !o.is_valid => None,
                    Some(K::Optional(o)) => Some(F::Optional(field_match::Optional {
                        value: to_canonical(&o.value),
                    })),
                    None => None,
                };
                if let Some(fm) = fm {
                    out.r#match.push(p4rt::FieldMatch {
                        field_id: f.p4_id,
                        field_match_type: Some(fm),
                    });
                }
            }
            out.r#match.sort_by_key(|m| m.field_id);
        }
        if let Some(d) = &te.data
            && d.action_id != 0
        {
            let am = self
                .actions
                .iter()
                .find(|a| a.bfrt_id == d.action_id)
                .ok_or_else(|| conv(format!("unknown BFRT action id {}", d.action_id)))?;
            let mut params = Vec::with_capacity(d.fields.len());
            for f in &d.fields {
                let Some((pid, _, _)) = am.params.iter().find(|(_, did, _)| *did == f.field_id)
                else {
                    continue;
                };
                let Some(bfrt::data_field::Value::Stream(v)) = &f.value else {
                    return Err(conv(format!("data field {} is not bytes", f.field_id)));
                };
                params.push(p4rt::action::Param {
                    param_id: *pid,
                    value: to_canonical(v),
                });
            }
            params.sort_by_key(|p| p.param_id);
            out.action = Some(p4rt::TableAction {
                r#type: Some(table_action::Type::Action(p4rt::Action {
                    action_id: am.p4_id,
                    params,
                })),
            });
        }
        Ok(out)
    }
}

/// Hashes a u32 id with one multiplication: the table lookup happens once
/// per written entry, where SipHash showed up in profiles.
#[derive(Default, Clone, Copy)]
struct IdHasher(u64);

impl std::hash::Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0 << 8 | u64::from(*b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }

    fn write_u32(&mut self, v: u32) {
        // Fibonacci hashing: spreads ids into the high bits SwissTable uses.
        self.0 = u64::from(v).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

type IdMap<V> = HashMap<u32, V, std::hash::BuildHasherDefault<IdHasher>>;

/// Translations for every table of a program, by P4Info and BFRT table id.
#[derive(Debug, Clone, Default)]
pub struct BfrtProgramMap {
    by_p4: IdMap<BfrtTableMap>,
    by_bfrt: IdMap<u32>,
}

impl BfrtProgramMap {
    /// Matches every P4Info table with its bfrt.json table.
    pub fn new(tables: &[TableSchema], info: &BfrtInfo) -> Result<BfrtProgramMap, EntryError> {
        let mut m = BfrtProgramMap::default();
        for t in tables {
            let b = info
                .table(&t.name)
                .ok_or_else(|| bad(format!("no table for {}", t.name)))?;
            let tm = BfrtTableMap::new(t, b)?;
            m.by_bfrt.insert(tm.bfrt_table_id, t.id);
            m.by_p4.insert(t.id, tm);
        }
        Ok(m)
    }

    pub fn table(&self, p4_table_id: u32) -> Option<&BfrtTableMap> {
        self.by_p4.get(&p4_table_id)
    }

    /// Every table's translation.
    pub fn tables(&self) -> impl Iterator<Item = &BfrtTableMap> {
        self.by_p4.values()
    }

    pub fn table_by_bfrt_id(&self, bfrt_table_id: u32) -> Option<&BfrtTableMap> {
        self.by_bfrt
            .get(&bfrt_table_id)
            .and_then(|id| self.by_p4.get(id))
    }
}

#[cfg(test)]
mod tests {
    use super::wire::sent;
    use super::*;
    use crate::entries::{ActionCall, ByteStr, Entry, EntryKey, FieldMatch, MatchValue, WriteOp};

    use crate::entries::fixtures::{FIREWALL_BFRT, ROUTER_BFRT, ROUTER_P4INFO};

    fn router_tables() -> Vec<TableSchema> {
        let p4info = p4fleet_proto::p4info::parse_text(ROUTER_P4INFO).unwrap();
        TableSchema::all_from_p4info(&p4info).unwrap()
    }

    fn router() -> BfrtProgramMap {
        let tables = router_tables();
        BfrtProgramMap::new(&tables, &BfrtInfo::parse(ROUTER_BFRT.as_bytes()).unwrap()).unwrap()
    }

    fn text(s: &str) -> p4rt::TableEntry {
        p4fleet_proto::text::parse("p4.v1.TableEntry", s).unwrap()
    }

    /// A router entry in the model, from its P4Runtime text.
    fn entry(te: &p4rt::TableEntry) -> Entry {
        let tables = router_tables();
        let schema = tables.iter().find(|t| t.id == te.table_id).unwrap();
        Entry::from_proto(schema, te).unwrap()
    }

    fn table_entry(u: &bfrt::Update) -> &bfrt::TableEntry {
        match u.entity.as_ref().and_then(|e| e.entity.as_ref()) {
            Some(bfrt::entity::Entity::TableEntry(t)) => t,
            _ => panic!("table entry expected"),
        }
    }

    #[test]
    fn schema_from_bfrt_json() {
        let s = TableSchema::from_bfrt_json(FIREWALL_BFRT.as_bytes(), "firewall").unwrap();
        assert_eq!(s.name, "MyIngress.firewall");
        assert_eq!(s.match_fields.len(), 2);
        assert_eq!(s.size, 65536);
        let allow = &s.actions[s.action_index("allow").unwrap()];
        assert_eq!(allow.params[0].bitwidth, 9);
        let acl = TableSchema::from_bfrt_json(ROUTER_BFRT.as_bytes(), "MyIngress.acl").unwrap();
        assert!(acl.requires_priority());
        assert!(acl.match_fields.iter().all(|f| f.name != MATCH_PRIORITY));
        assert!(TableSchema::from_bfrt_json(FIREWALL_BFRT.as_bytes(), "nope").is_err());
    }

    #[test]
    fn lpm_round_trip_is_full_width() {
        let m = router();
        let te = text(
            r#"table_id: 37375156
               match { field_id: 1 lpm { value: "\n\000\000\000" prefix_len: 8 } }
               action { action { action_id: 24952588
                 params { param_id: 1 value: "\001" }
                 params { param_id: 2 value: "\005" } } }"#,
        );
        let tm = m.table(37375156).unwrap();
        let e = entry(&te);
        let u = sent(&m, WriteOp::insert(&e)).unwrap();
        let b = table_entry(&u);
        let Some(bfrt::table_entry::Value::Key(k)) = &b.value else {
            panic!()
        };
        assert_eq!(
            k.fields[0].match_type,
            Some(key_field::MatchType::Lpm(key_field::Lpm {
                value: vec![10, 0, 0, 0],
                prefix_len: 8
            }))
        );
        let d = b.data.as_ref().unwrap();
        assert_eq!(
            d.fields[0].value,
            Some(bfrt::data_field::Value::Stream(vec![0, 0, 0, 0, 0, 1]))
        );
        assert_eq!(
            d.fields[1].value,
            Some(bfrt::data_field::Value::Stream(vec![0, 5]))
        );
        assert_eq!(tm.from_bfrt(b).unwrap(), te);
    }

    #[test]
    fn acl_dont_cares_optional_and_priority() {
        let m = router();
        // Only srcAddr ternary and protocol optional set.
        let te = text(
            r#"table_id: 37519123
               match { field_id: 1 ternary { value: "\n" mask: "\377" } }
               match { field_id: 3 optional { value: "\006" } }
               action { action { action_id: 32656341 } }
               priority: 10"#,
        );
        let tm = m.table(37519123).unwrap();
        let e = entry(&te);
        let u = sent(&m, WriteOp::insert(&e)).unwrap();
        let b = table_entry(&u);
        let Some(bfrt::table_entry::Value::Key(k)) = &b.value else {
            panic!()
        };
        // 4 fields + $MATCH_PRIORITY, every one explicit.
        assert_eq!(k.fields.len(), 5);
        let prio = k.fields.iter().find(|f| f.field_id == 65537).unwrap();
        assert_eq!(
            prio.match_type,
            Some(key_field::MatchType::Exact(key_field::Exact {
                value: ((i32::MAX - 10) as u32).to_be_bytes().to_vec()
            }))
        );
        let range = k.fields.iter().find(|f| f.field_id == 4).unwrap();
        assert_eq!(
            range.match_type,
            Some(key_field::MatchType::Range(key_field::Range {
                low: vec![0, 0],
                high: vec![0xff, 0xff]
            }))
        );
        assert_eq!(tm.from_bfrt(b).unwrap(), te);
    }

    #[test]
    fn values_too_wide_and_unknown_actions_fail() {
        let m = router();
        let lpm = |value: &[u8], action_id| Entry {
            key: EntryKey {
                table_id: 37375156,
                matches: Box::new([FieldMatch {
                    field_id: 1,
                    value: MatchValue::Lpm {
                        value: ByteStr::new(value),
                        prefix_len: 8,
                    },
                }]),
                priority: 0,
            },
            action: ActionCall {
                action_id,
                params: Box::default(),
            },
            idle_timeout_ns: 0,
        };
        let wide = lpm(&[1, 0, 0, 0, 0], 25652968);
        assert!(m.check(WriteOp::insert(&wide)).is_err());
        let unknown = lpm(&[10], 1);
        assert!(m.check(WriteOp::insert(&unknown)).is_err());
        // Deletes carry no data.
        let u = sent(&m, WriteOp::delete(&unknown.key)).unwrap();
        assert_eq!(u.r#type, bfrt::update::Type::Delete as i32);
        assert!(table_entry(&u).data.is_none());
    }

    #[test]
    fn canonical_values() {
        assert_eq!(to_canonical(&[0, 0, 0]), vec![0]);
        assert_eq!(to_canonical(&[0, 1, 0]), vec![1, 0]);
        assert_eq!(max_value(9), vec![1, 0xff]);
    }
}
