//! Binds a loaded `.spec` [`Program`] to the P4Info the control plane
//! writes against: spec table/action/extern names to P4Info ids, key
//! fields to match field ids (by position, as p4c-dpdk emits them), action
//! arguments to parameter ids. Pure.

use std::collections::HashMap;

use p4fleet_proto::p4info::{self, P4Info, Preamble};

use super::spec::{MatchKind, Program};

/// Why a program and a P4Info do not fit together.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BindError {
    #[error("spec table {0:?} has no P4Info table (by alias, name or name with '.' as '_')")]
    NoTable(String),
    #[error("table {table:?}: spec has {spec} key field(s), P4Info {p4info}")]
    KeyCount {
        table: String,
        spec: usize,
        p4info: usize,
    },
    #[error(
        "table {table:?} key field {field}: spec match kind {spec:?} does not fit P4Info {p4info}"
    )]
    KeyKind {
        table: String,
        field: usize,
        spec: MatchKind,
        p4info: String,
    },
    #[error(
        "table {table:?} key field {field}: P4Info width {p4info} bits exceeds the spec's {spec}"
    )]
    KeyWidth {
        table: String,
        field: usize,
        spec: u32,
        p4info: i32,
    },
    #[error("action {action:?}: spec has {spec} argument(s), P4Info {p4info}")]
    ArgCount {
        action: String,
        spec: usize,
        p4info: usize,
    },
    #[error("extern {0:?} is called by the spec but not declared in P4Info's externs")]
    UndeclaredExtern(String),
}

/// A spec table's P4Info identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableBinding {
    pub table_id: u32,
    /// P4Info name, e.g. `MyIngress.dmac`.
    pub name: String,
    /// Match field id of each spec key field, in key order.
    pub field_ids: Vec<u32>,
}

/// A loaded program with its P4Info ids.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Binding {
    /// Per spec table (same index).
    pub tables: Vec<TableBinding>,
    /// Per spec action: its P4Info id (0 when P4Info does not know it:
    /// then only a spec default can run it).
    pub action_ids: Vec<u32>,
    /// Per spec extern: its P4Info instance id (0 without an `externs`
    /// section).
    pub extern_ids: Vec<u32>,
    by_action_id: HashMap<u32, u8>,
}

impl Binding {
    /// The spec action index of a P4Info action id.
    pub fn action(&self, action_id: u32) -> Option<u8> {
        self.by_action_id.get(&action_id).copied()
    }

    /// The spec table index of a P4Info table id.
    pub fn table(&self, table_id: u32) -> Option<usize> {
        self.tables.iter().position(|t| t.table_id == table_id)
    }
}

/// Whether spec name `s` names the P4Info object `pre` (p4c-dpdk keeps the
/// local name or replaces '.' by '_').
fn names(s: &str, pre: Option<&Preamble>) -> bool {
    let Some(p) = pre else { return false };
    s == p.alias
        || s == p.name
        || s == p.name.replace('.', "_")
        || p.name.rsplit('.').next() == Some(s)
}

/// Binds `program` to `info`.
pub fn bind(program: &Program, info: &P4Info) -> Result<Binding, BindError> {
    let mut tables = Vec::new();
    for t in &program.tables {
        let pt = info
            .tables
            .iter()
            .find(|pt| names(&t.name, pt.preamble.as_ref()))
            .ok_or_else(|| BindError::NoTable(t.name.clone()))?;
        let pre = pt.preamble.as_ref().expect("matched by preamble");
        if pt.match_fields.len() != t.keys.len() {
            return Err(BindError::KeyCount {
                table: t.name.clone(),
                spec: t.keys.len(),
                p4info: pt.match_fields.len(),
            });
        }
        for (i, (k, mf)) in t.keys.iter().zip(&pt.match_fields).enumerate() {
            use p4info::match_field::{Match, MatchType};
            let p4_kind = match mf.r#match {
                Some(Match::MatchType(m)) => {
                    MatchType::try_from(m).unwrap_or(MatchType::Unspecified)
                }
                _ => MatchType::Unspecified,
            };
            let fits = matches!(
                (k.kind, p4_kind),
                (MatchKind::Exact, MatchType::Exact)
                    | (MatchKind::Lpm, MatchType::Lpm)
                    | (
                        MatchKind::Wildcard,
                        MatchType::Ternary | MatchType::Optional
                    )
            );
            if !fits {
                return Err(BindError::KeyKind {
                    table: t.name.clone(),
                    field: i + 1,
                    spec: k.kind,
                    p4info: p4_kind.as_str_name().to_string(),
                });
            }
            if mf.bitwidth as u32 > k.bits {
                return Err(BindError::KeyWidth {
                    table: t.name.clone(),
                    field: i + 1,
                    spec: k.bits,
                    p4info: mf.bitwidth,
                });
            }
        }
        tables.push(TableBinding {
            table_id: pre.id,
            name: pre.name.clone(),
            field_ids: pt.match_fields.iter().map(|m| m.id).collect(),
        });
    }
    let mut action_ids = Vec::new();
    let mut by_action_id = HashMap::new();
    for (i, a) in program.actions.iter().enumerate() {
        let id = match info
            .actions
            .iter()
            .find(|pa| names(&a.name, pa.preamble.as_ref()))
        {
            Some(pa) => {
                if pa.params.len() != a.args.len() {
                    return Err(BindError::ArgCount {
                        action: a.name.clone(),
                        spec: a.args.len(),
                        p4info: pa.params.len(),
                    });
                }
                let id = pa.preamble.as_ref().map(|p| p.id).unwrap_or(0);
                by_action_id.insert(id, i as u8);
                id
            }
            None => 0,
        };
        action_ids.push(id);
    }
    let instances: Vec<&Preamble> = info
        .externs
        .iter()
        .flat_map(|e| e.instances.iter().filter_map(|i| i.preamble.as_ref()))
        .collect();
    let mut extern_ids = Vec::new();
    for e in &program.externs {
        if instances.is_empty() {
            extern_ids.push(0);
            continue;
        }
        let p = instances
            .iter()
            .find(|p| names(e, Some(p)))
            .ok_or_else(|| BindError::UndeclaredExtern(e.clone()))?;
        extern_ids.push(p.id);
    }
    Ok(Binding {
        tables,
        action_ids,
        extern_ids,
        by_action_id,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataplane::spec;

    use crate::testing::l2crypt::{P4INFO, SPEC};

    #[test]
    fn binds_the_l2crypt_example() {
        let p = spec::load(SPEC).unwrap();
        let info = p4info::parse_text(P4INFO).unwrap();
        let b = bind(&p, &info).unwrap();
        let dmac = &b.tables[p.table_index("dmac").unwrap()];
        assert_eq!(dmac.table_id, 44918510);
        assert_eq!(dmac.name, "MyIngress.dmac");
        assert_eq!(dmac.field_ids, [1]);
        assert_eq!(
            b.action(29683729),
            p.action_index("forward").map(|i| i as u8)
        );
        assert_eq!(
            b.action(21257015),
            p.action_index("NoAction").map(|i| i as u8)
        );
        assert_eq!(b.extern_ids, [2166930795, 2171481740]);
        assert_eq!(b.table(41683160), p.table_index("smac"));
    }

    #[test]
    fn binds_the_firewall_example() {
        // The DPDK artifact of the firewall (e2e/tests/rollout_mixed.rs
        // rolls it out next to its bmv2, Tofino and FPGA artifacts).
        let p = spec::load(include_str!("../../../examples/firewall/firewall.spec")).unwrap();
        let info =
            p4info::parse_text(include_str!("../../../examples/firewall/p4info.txt")).unwrap();
        let b = bind(&p, &info).unwrap();
        let fw = &b.tables[p.table_index("firewall").unwrap()];
        assert_eq!(
            (fw.table_id, fw.name.as_str(), &fw.field_ids[..]),
            (39123287, "MyIngress.firewall", &[1, 2][..])
        );
        assert_eq!(b.action(17724422), p.action_index("allow").map(|i| i as u8));
        assert_eq!(b.action(25652968), p.action_index("drop").map(|i| i as u8));
    }

    #[test]
    fn undeclared_extern_is_named() {
        let text = SPEC.replace("extern f.async_decrypt", "extern f.compress");
        let p = spec::load(&text).unwrap();
        let info = p4info::parse_text(P4INFO).unwrap();
        assert_eq!(
            bind(&p, &info).unwrap_err(),
            BindError::UndeclaredExtern("compress".into())
        );
    }

    #[test]
    fn key_kind_mismatch() {
        let text = SPEC.replace("h.ethernet.dstAddr exact", "h.ethernet.dstAddr lpm");
        let p = spec::load(&text).unwrap();
        let info = p4info::parse_text(P4INFO).unwrap();
        assert!(matches!(
            bind(&p, &info).unwrap_err(),
            BindError::KeyKind { field: 1, .. }
        ));
    }

    #[test]
    fn unknown_table() {
        let text = SPEC
            .replace("table dmac {", "table l2fwd {")
            .replace("table dmac\n", "table l2fwd\n");
        let p = spec::load(&text).unwrap();
        let info = p4info::parse_text(P4INFO).unwrap();
        assert_eq!(
            bind(&p, &info).unwrap_err(),
            BindError::NoTable("l2fwd".into())
        );
    }
}
