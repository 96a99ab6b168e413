//! The experiment's entries: the firewall table of examples/firewall, entry
//! `i` = (src 10.0.0.0 + i, dst 192.168.0.0 + (i·7919 mod 2¹⁶)) → allow(port
//! i mod 512). Every path (Rust, rbfrt, Python) writes exactly these.

use anyhow::{Context, anyhow};
use p4fleet_model::entries::bfrt::{BfrtInfo, BfrtProgramMap};
use p4fleet_model::entries::{
    ActionCall, ActionParam, ByteStr, Entry, EntryKey, FieldMatch, MatchValue, TableSchema, WriteOp,
};
use p4fleet_proto::p4info::{self, P4Info};
use p4fleet_proto::p4runtime::{self as p4rt, Update, entity, update};

pub const TABLE: &str = "MyIngress.firewall";
pub const ACTION: &str = "MyIngress.allow";

pub fn src(i: usize) -> u32 {
    0x0a00_0000 + i as u32
}

pub fn dst(i: usize) -> u32 {
    0xc0a8_0000 + ((i as u32).wrapping_mul(7919) % 65536)
}

pub fn port(i: usize) -> u32 {
    i as u32 % 512
}

/// P4Info ids the entries need.
#[derive(Debug, Clone, Copy)]
pub struct Ids {
    pub table: u32,
    pub src: u32,
    pub dst: u32,
    pub action: u32,
    pub port: u32,
}

/// The firewall P4Info, with table sizes lifted (0 = unlimited) so the
/// 100,000-entry reconcile fits.
pub fn firewall(path: &std::path::Path) -> anyhow::Result<(P4Info, Ids)> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {path:?}"))?;
    let mut info = p4info::parse_text(&text).map_err(|e| anyhow!("{path:?}: {e}"))?;
    for t in &mut info.tables {
        t.size = 0;
    }
    let table = info
        .tables
        .iter()
        .find(|t| t.preamble.as_ref().is_some_and(|p| p.name == TABLE))
        .ok_or_else(|| anyhow!("no table {TABLE}"))?;
    let field = |name: &str| {
        table
            .match_fields
            .iter()
            .find(|f| f.name == name)
            .map(|f| f.id)
            .ok_or_else(|| anyhow!("no field {name}"))
    };
    let action = info
        .actions
        .iter()
        .find(|a| a.preamble.as_ref().is_some_and(|p| p.name == ACTION))
        .ok_or_else(|| anyhow!("no action {ACTION}"))?;
    let ids = Ids {
        table: table.preamble.as_ref().map(|p| p.id).unwrap_or_default(),
        src: field("hdr.ipv4.srcAddr")?,
        dst: field("hdr.ipv4.dstAddr")?,
        action: action.preamble.as_ref().map(|p| p.id).unwrap_or_default(),
        port: action
            .params
            .first()
            .map(|p| p.id)
            .ok_or_else(|| anyhow!("{ACTION} has no param"))?,
    };
    Ok((info, ids))
}

/// Entry `i` in p4fleet's entry model (what the operator holds per desired
/// entry).
pub fn entry(ids: &Ids, i: usize) -> Entry {
    Entry {
        key: EntryKey {
            table_id: ids.table,
            matches: Box::new([
                FieldMatch {
                    field_id: ids.src,
                    value: MatchValue::Exact(ByteStr::canonical(&src(i).to_be_bytes())),
                },
                FieldMatch {
                    field_id: ids.dst,
                    value: MatchValue::Exact(ByteStr::canonical(&dst(i).to_be_bytes())),
                },
            ]),
            priority: 0,
        },
        action: ActionCall {
            action_id: ids.action,
            params: Box::new([ActionParam {
                param_id: ids.port,
                value: ByteStr::canonical(&port(i).to_be_bytes()),
            }]),
        },
        idle_timeout_ns: 0,
    }
}

/// The BFRT translation of the firewall program (what the BFRT client
/// builds in `set_tofino_pipeline`).
pub fn bfrt_map(info: &P4Info, bfrt_json: &[u8]) -> anyhow::Result<BfrtProgramMap> {
    let tables = TableSchema::all_from_p4info(info)?;
    Ok(BfrtProgramMap::new(&tables, &BfrtInfo::parse(bfrt_json)?)?)
}

pub fn entries(ids: &Ids, n: usize) -> Vec<Entry> {
    (0..n).map(|i| entry(ids, i)).collect()
}

/// INSERTs of the entries, as the operator's sync hands them to the client
/// (borrowed, no message built).
pub fn insert_ops(entries: &[Entry]) -> Vec<WriteOp<'_>> {
    entries.iter().map(WriteOp::insert).collect()
}

/// An INSERT of an entry as a prost Update (the reference series'
/// pre-encoded frames).
pub fn insert(e: &Entry) -> Update {
    Update {
        r#type: update::Type::Insert as i32,
        entity: Some(p4rt::Entity {
            entity: Some(entity::Entity::TableEntry(e.to_proto())),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_are_distinct() {
        let mut seen = std::collections::HashSet::new();
        for i in 0..30_000 {
            assert!(seen.insert((src(i), dst(i))));
        }
    }

    #[test]
    fn firewall_ids() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let (info, ids) = firewall(&root.join("examples/firewall/p4info.txt")).unwrap();
        assert_eq!(info.tables[0].size, 0);
        let e = entry(&ids, 1);
        assert_eq!(e.key.matches.len(), 2);
        assert_eq!(e.action.params[0].value.as_slice(), &[1]);
    }
}
