//! P4Info onto a built pipeline: which DPDK table, match field, action and
//! action argument each P4Info id is (names as p4c-dpdk writes them:
//! the P4Info alias or name, or the name with `.` as `_`; key fields and
//! arguments by position), and a validated P4Runtime entry as a line of
//! DPDK's own table entry text, which DPDK's control API parses
//! (`rte_swx_ctl_pipeline_table_entry_read`: it knows the key layout and
//! byte orders of header and metadata fields).

use std::collections::HashMap;
use std::fmt::Write as _;

use p4fleet_model::entries::{ActionCall, Entry, EntryKey, MatchKind, MatchValue, TableSchema};
use p4fleet_proto::p4info::P4Info;

use crate::ffi;
use crate::pipeline::Info;

/// Why a P4Info does not fit the pipeline built from the `.spec`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BindError {
    #[error("P4Info: {0}")]
    Schema(String),
    #[error("P4Info table {0} has no table in the .spec (by alias, name, or name with '.' as '_')")]
    NoTable(String),
    #[error("table {table}: the .spec's key has {spec} field(s), P4Info {p4info}")]
    KeyCount {
        table: String,
        spec: usize,
        p4info: usize,
    },
    #[error("table {table} key field {field}: the .spec matches it {spec}, P4Info {p4info:?}")]
    KeyKind {
        table: String,
        field: String,
        spec: &'static str,
        p4info: MatchKind,
    },
    #[error(
        "table {table} key field {field}: P4Info width {p4info} bits exceeds the .spec's {spec}"
    )]
    KeyWidth {
        table: String,
        field: String,
        spec: u32,
        p4info: u32,
    },
    #[error("table {table}: P4Info action {action} has no action of the table in the .spec")]
    NoAction { table: String, action: String },
    #[error("action {action}: the .spec has {spec} argument(s), P4Info {p4info}")]
    ArgCount {
        action: String,
        spec: usize,
        p4info: usize,
    },
    #[error(
        "action {action} parameter {param}: P4Info width {p4info} bits exceeds the .spec's {spec}"
    )]
    ArgWidth {
        action: String,
        param: String,
        spec: u32,
        p4info: u32,
    },
}

/// One P4Info action as a pipeline action.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActionBind {
    pub dpdk_name: String,
    /// Per P4Info parameter (in P4Info order): its id and the DPDK
    /// argument name.
    pub params: Vec<(u32, String)>,
    /// For entries / for the default (the .spec's table action list).
    pub for_entries: bool,
    pub for_default: bool,
}

/// One P4Info table as a pipeline table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableBind {
    pub schema: TableSchema,
    pub dpdk_name: String,
    /// P4Info match field ids in the .spec's key order.
    pub field_ids: Vec<u32>,
    /// Widths of the P4Info fields (same order).
    pub widths: Vec<u32>,
    /// DPDK match type per key field (ffi::MATCH_*).
    pub kinds: Vec<u32>,
    pub actions: HashMap<u32, ActionBind>,
    pub default_is_const: bool,
    pub size: u32,
}

impl TableBind {
    /// Whether the DPDK table orders overlapping entries by priority.
    pub fn wildcard(&self) -> bool {
        self.kinds.contains(&ffi::MATCH_WILDCARD)
    }
}

/// Every P4Info table's binding, by P4Info table id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Binding {
    pub tables: HashMap<u32, TableBind>,
}

fn names(spec: &str, name: &str, alias: &str) -> bool {
    spec == alias
        || spec == name
        || spec == name.replace('.', "_")
        || name.rsplit('.').next() == Some(spec)
}

fn kind_name(k: u32) -> &'static str {
    match k {
        ffi::MATCH_EXACT => "exact",
        ffi::MATCH_LPM => "lpm",
        _ => "wildcard",
    }
}

/// Binds `p4info` to the pipeline described by `info`.
pub fn bind(p4info: &P4Info, info: &Info) -> Result<Binding, BindError> {
    let schemas =
        TableSchema::all_from_p4info(p4info).map_err(|e| BindError::Schema(e.to_string()))?;
    let mut tables = HashMap::new();
    for s in schemas {
        let t = info
            .tables
            .iter()
            .find(|t| names(&t.name, &s.name, &s.alias))
            .ok_or_else(|| BindError::NoTable(s.name.clone()))?;
        if t.fields.len() != s.match_fields.len() {
            return Err(BindError::KeyCount {
                table: s.name.clone(),
                spec: t.fields.len(),
                p4info: s.match_fields.len(),
            });
        }
        for ((kind, bits, _), f) in t.fields.iter().zip(&s.match_fields) {
            let fits = matches!(
                (*kind, f.kind),
                (ffi::MATCH_EXACT, MatchKind::Exact)
                    | (ffi::MATCH_LPM, MatchKind::Lpm)
                    | (
                        ffi::MATCH_WILDCARD,
                        MatchKind::Ternary | MatchKind::Optional | MatchKind::Exact
                    )
            );
            if !fits {
                return Err(BindError::KeyKind {
                    table: s.name.clone(),
                    field: f.name.clone(),
                    spec: kind_name(*kind),
                    p4info: f.kind,
                });
            }
            if f.bitwidth > *bits {
                return Err(BindError::KeyWidth {
                    table: s.name.clone(),
                    field: f.name.clone(),
                    spec: *bits,
                    p4info: f.bitwidth,
                });
            }
        }
        let mut actions = HashMap::new();
        for a in &s.actions {
            let found = t
                .entry_actions
                .iter()
                .chain(&t.default_actions)
                .copied()
                .find(|id| names(&info.actions[*id as usize].name, &a.name, &a.alias));
            let Some(id) = found else {
                return Err(BindError::NoAction {
                    table: s.name.clone(),
                    action: a.name.clone(),
                });
            };
            let da = &info.actions[id as usize];
            if da.args.len() != a.params.len() {
                return Err(BindError::ArgCount {
                    action: a.name.clone(),
                    spec: da.args.len(),
                    p4info: a.params.len(),
                });
            }
            for (p, (_, bits)) in a.params.iter().zip(&da.args) {
                if p.bitwidth > *bits {
                    return Err(BindError::ArgWidth {
                        action: a.name.clone(),
                        param: p.name.clone(),
                        spec: *bits,
                        p4info: p.bitwidth,
                    });
                }
            }
            actions.insert(
                a.id,
                ActionBind {
                    dpdk_name: da.name.clone(),
                    params: a
                        .params
                        .iter()
                        .zip(&da.args)
                        .map(|(p, (n, _))| (p.id, n.clone()))
                        .collect(),
                    for_entries: t.entry_actions.contains(&id),
                    for_default: t.default_actions.contains(&id),
                },
            );
        }
        tables.insert(
            s.id,
            TableBind {
                dpdk_name: t.name.clone(),
                field_ids: s.match_fields.iter().map(|f| f.id).collect(),
                widths: s.match_fields.iter().map(|f| f.bitwidth).collect(),
                kinds: t.fields.iter().map(|f| f.0).collect(),
                actions,
                default_is_const: t.default_is_const,
                size: t.size,
                schema: s,
            },
        );
    }
    Ok(Binding { tables })
}

fn hex(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(2 + 2 * bytes.len());
    s.push_str("0x");
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

/// `width` bits, the top `len` of them ones, as bytes.
fn prefix_mask(width: u32, len: u32) -> Vec<u8> {
    let n = width.div_ceil(8) as usize;
    let mut m = vec![0u8; n];
    // Bit i counts from the field's most significant bit.
    let lead = n as u32 * 8 - width;
    for i in 0..len {
        let bit = lead + i;
        m[(bit / 8) as usize] |= 0x80 >> (bit % 8);
    }
    m
}

/// The highest match priority in DPDK is 0; in P4Runtime the highest
/// number wins. DPDK's priority = this minus P4Runtime's.
pub const PRIORITY_BASE: u32 = i32::MAX as u32;

/// The `match ... [priority P]` part of a DPDK entry line for `key`.
pub fn match_text(t: &TableBind, key: &EntryKey) -> String {
    let mut s = String::from("match");
    for (i, id) in t.field_ids.iter().enumerate() {
        let w = t.widths[i];
        s.push(' ');
        match key.get(*id) {
            Some(MatchValue::Exact(v)) => s.push_str(&hex(v.as_slice())),
            Some(MatchValue::Optional(v)) => {
                s.push_str(&hex(v.as_slice()));
                s.push('/');
                s.push_str(&hex(&prefix_mask(w, w)));
            }
            Some(MatchValue::Lpm { value, prefix_len }) => {
                s.push_str(&hex(value.as_slice()));
                s.push('/');
                s.push_str(&hex(&prefix_mask(w, *prefix_len)));
            }
            Some(MatchValue::Ternary { value, mask }) => {
                s.push_str(&hex(value.as_slice()));
                s.push('/');
                s.push_str(&hex(mask.as_slice()));
            }
            // A range cannot bind (no DPDK match kind); don't care.
            Some(MatchValue::Range { .. }) | None => s.push_str("0x0/0x0"),
        }
    }
    if t.wildcard() {
        let p = PRIORITY_BASE - key.priority.max(0) as u32;
        let _ = write!(s, " priority {p}");
    }
    s
}

/// The `action A [ARG V]...` part for `call` (an action of the table).
pub fn action_text(t: &TableBind, call: &ActionCall) -> Option<String> {
    let a = t.actions.get(&call.action_id)?;
    let mut s = format!("action {}", a.dpdk_name);
    for (id, arg) in &a.params {
        let v = call.params.iter().find(|p| p.param_id == *id)?;
        let _ = write!(s, " {arg} {}", hex(v.value.as_slice()));
    }
    Some(s)
}

/// A whole entry line (add / modify).
pub fn entry_text(t: &TableBind, e: &Entry) -> Option<String> {
    Some(format!(
        "{} {}",
        match_text(t, &e.key),
        action_text(t, &e.action)?
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_masks() {
        assert_eq!(prefix_mask(32, 8), [0xff, 0, 0, 0]);
        assert_eq!(prefix_mask(32, 12), [0xff, 0xf0, 0, 0]);
        // A 9-bit field: the top bit of the field is bit 0 of byte 0's
        // lowest position.
        assert_eq!(prefix_mask(9, 1), [0x01, 0x00]);
        assert_eq!(prefix_mask(9, 9), [0x01, 0xff]);
        assert_eq!(hex(&[0x02, 0, 0, 1, 0, 0]), "0x020000010000");
    }

    #[test]
    fn names_as_p4c_dpdk_writes_them() {
        assert!(names("dmac", "MyIngress.dmac", "dmac"));
        assert!(names("MyIngress_dmac", "MyIngress.dmac", ""));
        assert!(names("dmac", "MyIngress.dmac", ""));
        assert!(!names("smac", "MyIngress.dmac", "dmac"));
    }
}
