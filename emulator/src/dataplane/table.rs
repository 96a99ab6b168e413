//! Tables of the data plane: the seam to the control plane
//! ([`TableSource`]: versioned snapshots of what P4Runtime writes
//! installed, in P4Info ids and canonical bytes) and the lookup structures
//! the workers use, compiled from a snapshot and swapped in whole
//! (RCU-style, see `engine.rs`), so the per-packet path takes no lock.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use foldhash::fast::FixedState;
use p4fleet_proto::p4runtime as p4;

use super::bind::Binding;
use super::hits::{CounterCell, DirectCounters};
use super::spec::{MAX_ARGS, MatchKind, Program, TableDef};

/// One match field value of an entry, as P4Runtime carries it (canonical
/// big-endian bytes, leading zeros allowed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FieldValue {
    Exact(Vec<u8>),
    Lpm {
        value: Vec<u8>,
        prefix_len: u32,
    },
    Ternary {
        value: Vec<u8>,
        mask: Vec<u8>,
    },
    Optional(Vec<u8>),
    /// Match kinds the data plane does not execute (range); compiling a
    /// table with one fails and keeps the previous lookup structure.
    Unsupported(&'static str),
}

/// An action with its parameter values (P4Info param order).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ActionCall {
    pub action_id: u32,
    pub params: Vec<Vec<u8>>,
}

/// One installed entry. Fields the entry omits (don't-care ternary / lpm
/// /0 / optional) are absent from `matches`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SnapshotEntry {
    /// (match field id, value).
    pub matches: Vec<(u32, FieldValue)>,
    pub priority: i32,
    pub action: ActionCall,
}

impl SnapshotEntry {
    /// From a P4Runtime entry, e.g. one the front end stored. Action
    /// profile members / groups are not direct actions and come back as
    /// `None`.
    pub fn from_p4runtime(e: &p4::TableEntry) -> Option<SnapshotEntry> {
        use p4::field_match::FieldMatchType as F;
        let action = match e.action.as_ref()?.r#type.as_ref()? {
            p4::table_action::Type::Action(a) => ActionCall {
                action_id: a.action_id,
                params: a.params.iter().map(|p| p.value.clone()).collect(),
            },
            _ => return None,
        };
        let matches = e
            .r#match
            .iter()
            .map(|m| {
                let v = match &m.field_match_type {
                    Some(F::Exact(x)) => FieldValue::Exact(x.value.clone()),
                    Some(F::Lpm(x)) => FieldValue::Lpm {
                        value: x.value.clone(),
                        prefix_len: x.prefix_len as u32,
                    },
                    Some(F::Ternary(x)) => FieldValue::Ternary {
                        value: x.value.clone(),
                        mask: x.mask.clone(),
                    },
                    Some(F::Optional(x)) => FieldValue::Optional(x.value.clone()),
                    Some(F::Range(_)) => FieldValue::Unsupported("range"),
                    _ => FieldValue::Unsupported("other"),
                };
                (m.field_id, v)
            })
            .collect();
        Some(SnapshotEntry {
            matches,
            priority: e.priority,
            action,
        })
    }
}

/// What a table holds at one version.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TableSnapshot {
    pub version: u64,
    pub entries: Vec<SnapshotEntry>,
    /// `None` = the program's default action.
    pub default_action: Option<ActionCall>,
    /// The entries' direct counters, when the table has one.
    pub counters: DirectCounters,
}

/// The control plane's tables as the data plane follows them. The
/// P4Runtime table store implements it; `version` must change whenever a
/// table's contents (entries or default action) change, and is polled
/// (about every millisecond), so it should be cheap.
pub trait TableSource: Send + Sync + 'static {
    fn version(&self, table_id: u32) -> u64;
    fn snapshot(&self, table_id: u32) -> TableSnapshot;
}

/// An in-memory [`TableSource`] (tests, benchmarks, a device without a
/// P4Runtime store).
#[derive(Debug, Default)]
pub struct MemoryTableSource {
    tables: RwLock<HashMap<u32, TableSnapshot>>,
}

impl MemoryTableSource {
    pub fn new() -> MemoryTableSource {
        MemoryTableSource::default()
    }

    /// Replaces the entries of a table (bumps its version).
    pub fn set_entries(&self, table_id: u32, entries: Vec<SnapshotEntry>) {
        let mut t = self.tables.write().expect("tables lock");
        let s = t.entry(table_id).or_default();
        s.version += 1;
        s.entries = entries;
    }

    /// Adds one entry (bumps the version).
    pub fn insert(&self, table_id: u32, entry: SnapshotEntry) {
        let mut t = self.tables.write().expect("tables lock");
        let s = t.entry(table_id).or_default();
        s.version += 1;
        s.entries.push(entry);
    }

    /// Sets the default action (`None` = the program's).
    pub fn set_default(&self, table_id: u32, action: Option<ActionCall>) {
        let mut t = self.tables.write().expect("tables lock");
        let s = t.entry(table_id).or_default();
        s.version += 1;
        s.default_action = action;
    }
}

impl TableSource for MemoryTableSource {
    fn version(&self, table_id: u32) -> u64 {
        self.tables
            .read()
            .expect("tables lock")
            .get(&table_id)
            .map(|s| s.version)
            .unwrap_or(0)
    }
    fn snapshot(&self, table_id: u32) -> TableSnapshot {
        self.tables
            .read()
            .expect("tables lock")
            .get(&table_id)
            .cloned()
            .unwrap_or_default()
    }
}

/// An action to run: its spec index and argument values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ActionEntry {
    pub action: u8,
    pub args: [u64; MAX_ARGS],
    /// Index of the entry's direct counter in `CompiledTable::counters`
    /// ([`NO_COUNTER`]: none).
    pub counter: u32,
}

/// `ActionEntry::counter` of an entry without a direct counter.
pub const NO_COUNTER: u32 = u32::MAX;

type FastMap<K, V> = HashMap<K, V, FixedState>;

#[derive(Debug)]
enum Lookup {
    Exact(FastMap<u128, ActionEntry>),
    /// (mask, masked key -> entry), longest mask first.
    Lpm(Vec<(u128, FastMap<u128, ActionEntry>)>),
    /// (value, mask, entry), highest priority first.
    Wildcard(Vec<(u128, u128, ActionEntry)>),
}

/// A table's lookup structure at one version.
#[derive(Debug)]
pub struct CompiledTable {
    pub version: u64,
    pub entries: usize,
    lookup: Lookup,
    default: ActionEntry,
    /// The direct counters hits count in (`ActionEntry::counter`).
    counters: Vec<Arc<CounterCell>>,
}

/// Why a snapshot does not compile (the previous version stays in force).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("table {table}, entry {entry}: {reason}")]
pub struct CompileError {
    pub table: String,
    /// Index in the snapshot (`None` for the default action).
    pub entry: DisplayIndex,
    pub reason: String,
}

/// An entry index or "default action", for messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DisplayIndex(pub Option<usize>);

impl std::fmt::Display for DisplayIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Some(i) => write!(f, "#{i}"),
            None => f.write_str("default"),
        }
    }
}

/// Big-endian bytes (leading zeros allowed) as a value of `bits` bits.
fn value(bytes: &[u8], bits: u32) -> Result<u128, String> {
    let mut v: u128 = 0;
    for (i, b) in bytes.iter().enumerate() {
        if i >= 16 && *b != 0 {
            return Err(format!("{} bytes do not fit {bits} bits", bytes.len()));
        }
        v = (v << 8) | *b as u128;
    }
    if bits < 128 && v >> bits != 0 {
        return Err(format!("value does not fit {bits} bits"));
    }
    Ok(v)
}

fn ones(bits: u32) -> u128 {
    if bits >= 128 {
        u128::MAX
    } else {
        (1u128 << bits) - 1
    }
}

impl CompiledTable {
    /// The empty table: every lookup runs the program's default action.
    pub fn empty(def: &TableDef) -> CompiledTable {
        let mut args = [0u64; MAX_ARGS];
        args[..def.default_args.len()].copy_from_slice(&def.default_args);
        CompiledTable {
            version: 0,
            entries: 0,
            lookup: Lookup::Exact(FastMap::default()),
            default: ActionEntry {
                action: def.default_action,
                args,
                counter: NO_COUNTER,
            },
            counters: Vec::new(),
        }
    }

    /// Compiles `snap` for spec table `index`.
    pub fn compile(
        program: &Program,
        binding: &Binding,
        index: usize,
        snap: &TableSnapshot,
    ) -> Result<CompiledTable, CompileError> {
        let def = &program.tables[index];
        let tb = &binding.tables[index];
        let fail = |entry: Option<usize>, reason: String| CompileError {
            table: tb.name.clone(),
            entry: DisplayIndex(entry),
            reason,
        };
        let action =
            |call: &ActionCall, entry: Option<usize>| -> Result<ActionEntry, CompileError> {
                let a = binding
                    .action(call.action_id)
                    .ok_or_else(|| fail(entry, format!("unknown action id {}", call.action_id)))?;
                if !def.actions.contains(&a) {
                    return Err(fail(
                        entry,
                        format!(
                            "action {} is not an action of the table",
                            program.actions[a as usize].name
                        ),
                    ));
                }
                let spec_args = &program.actions[a as usize].args;
                if call.params.len() != spec_args.len() {
                    return Err(fail(
                        entry,
                        format!(
                            "{} parameter(s), action takes {}",
                            call.params.len(),
                            spec_args.len()
                        ),
                    ));
                }
                let mut args = [0u64; MAX_ARGS];
                for (i, (p, (name, bits))) in call.params.iter().zip(spec_args).enumerate() {
                    args[i] = value(p, *bits)
                        .map_err(|e| fail(entry, format!("parameter {name}: {e}")))?
                        as u64;
                }
                Ok(ActionEntry {
                    action: a,
                    args,
                    counter: NO_COUNTER,
                })
            };
        let default = match &snap.default_action {
            Some(call) => action(call, None)?,
            None => CompiledTable::empty(def).default,
        };
        let kinds: Vec<MatchKind> = def.keys.iter().map(|k| k.kind).collect();
        let is_exact = kinds.iter().all(|k| *k == MatchKind::Exact);
        let is_lpm = kinds.contains(&MatchKind::Lpm);
        let mut exact: FastMap<u128, ActionEntry> = FastMap::default();
        let mut lpm: Vec<(u128, FastMap<u128, ActionEntry>)> = Vec::new();
        let mut wild: Vec<(i32, u128, u128, ActionEntry)> = Vec::new();
        let mut counters: Vec<Arc<CounterCell>> = Vec::new();
        for (ei, e) in snap.entries.iter().enumerate() {
            let mut key: u128 = 0;
            let mut mask: u128 = 0;
            for (k, fid) in def.keys.iter().zip(&tb.field_ids) {
                let (v, m) = match e.matches.iter().find(|(id, _)| id == fid).map(|(_, v)| v) {
                    None => {
                        if k.kind == MatchKind::Exact {
                            return Err(fail(Some(ei), format!("exact field {} missing", k.name)));
                        }
                        (0, 0)
                    }
                    Some(FieldValue::Exact(b)) | Some(FieldValue::Optional(b)) => (
                        value(b, k.bits).map_err(|r| fail(Some(ei), format!("{}: {r}", k.name)))?,
                        ones(k.bits),
                    ),
                    Some(FieldValue::Lpm {
                        value: b,
                        prefix_len,
                    }) => {
                        if *prefix_len > k.bits {
                            return Err(fail(
                                Some(ei),
                                format!("{}: prefix /{prefix_len}", k.name),
                            ));
                        }
                        let m = ones(k.bits) & !ones(k.bits - prefix_len);
                        (
                            value(b, k.bits)
                                .map_err(|r| fail(Some(ei), format!("{}: {r}", k.name)))?
                                & m,
                            m,
                        )
                    }
                    Some(FieldValue::Ternary { value: b, mask: mb }) => {
                        let m = value(mb, k.bits)
                            .map_err(|r| fail(Some(ei), format!("{}: mask {r}", k.name)))?;
                        (
                            value(b, k.bits)
                                .map_err(|r| fail(Some(ei), format!("{}: {r}", k.name)))?
                                & m,
                            m,
                        )
                    }
                    Some(FieldValue::Unsupported(kind)) => {
                        return Err(fail(
                            Some(ei),
                            format!("{}: {kind} matches are not executed", k.name),
                        ));
                    }
                };
                key = shl(key, k.bits) | v;
                mask = shl(mask, k.bits) | m;
            }
            let mut a = action(&e.action, Some(ei))?;
            if let Some(cell) = snap.counters.get(ei) {
                a.counter = counters.len() as u32;
                counters.push(cell.clone());
            }
            if is_exact {
                exact.insert(key, a);
            } else if is_lpm {
                match lpm.iter_mut().find(|(m, _)| *m == mask) {
                    Some((_, map)) => {
                        map.insert(key, a);
                    }
                    None => {
                        let mut map = FastMap::default();
                        map.insert(key, a);
                        lpm.push((mask, map));
                    }
                }
            } else {
                wild.push((e.priority, key, mask, a));
            }
        }
        let lookup = if is_exact {
            Lookup::Exact(exact)
        } else if is_lpm {
            lpm.sort_by_key(|(m, _)| std::cmp::Reverse(m.count_ones()));
            Lookup::Lpm(lpm)
        } else {
            wild.sort_by_key(|(p, ..)| std::cmp::Reverse(*p));
            Lookup::Wildcard(wild.into_iter().map(|(_, k, m, a)| (k, m, a)).collect())
        };
        Ok(CompiledTable {
            version: snap.version,
            entries: snap.entries.len(),
            lookup,
            default,
            counters,
        })
    }

    /// Counts a hit of `entry` (from [`CompiledTable::lookup`]) by a
    /// packet of `len` bytes in its direct counter, if it has one.
    #[inline]
    pub fn count_hit(&self, entry: &ActionEntry, len: u64) {
        if let Some(c) = self.counters.get(entry.counter as usize) {
            c.count(len);
        }
    }

    /// The entry for `key` (fields concatenated big-endian), and whether it
    /// hit.
    #[inline]
    pub fn lookup(&self, key: u128) -> (&ActionEntry, bool) {
        let hit = match &self.lookup {
            Lookup::Exact(m) => m.get(&key),
            Lookup::Lpm(groups) => groups.iter().find_map(|(mask, m)| m.get(&(key & mask))),
            Lookup::Wildcard(v) => v.iter().find(|(k, m, _)| key & m == *k).map(|(.., a)| a),
        };
        match hit {
            Some(a) => (a, true),
            None => (&self.default, false),
        }
    }
}

#[inline]
fn shl(v: u128, bits: u32) -> u128 {
    if bits >= 128 { 0 } else { v << bits }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataplane::{bind, spec};
    use p4fleet_proto::p4info;

    use crate::testing::l2crypt::{P4INFO, SPEC};
    const DMAC: u32 = 44918510;
    const FORWARD: u32 = 29683729;
    const DROP: u32 = 25652968;

    fn setup(spec_text: &str) -> (Program, Binding) {
        let p = spec::load(spec_text).unwrap();
        let mut info = p4info::parse_text(P4INFO).unwrap();
        // Let tests re-type dmac's key.
        let kind = p.tables[1].keys[0].kind;
        use p4info::match_field::{Match, MatchType};
        let mt = match kind {
            MatchKind::Exact => MatchType::Exact,
            MatchKind::Lpm => MatchType::Lpm,
            MatchKind::Wildcard => MatchType::Ternary,
        };
        info.tables[1].match_fields[0].r#match = Some(Match::MatchType(mt as i32));
        let b = bind::bind(&p, &info).unwrap();
        (p, b)
    }

    fn fwd(port: u8) -> ActionCall {
        ActionCall {
            action_id: FORWARD,
            params: vec![vec![port]],
        }
    }

    /// An exact entry on dmac's key (field 1).
    fn exact(mac: Vec<u8>, action: ActionCall) -> SnapshotEntry {
        SnapshotEntry {
            matches: vec![(1, FieldValue::Exact(mac))],
            priority: 0,
            action,
        }
    }

    /// A snapshot without default action or counters.
    fn snapshot(version: u64, entries: Vec<SnapshotEntry>) -> TableSnapshot {
        TableSnapshot {
            version,
            entries,
            default_action: None,
            counters: Default::default(),
        }
    }

    #[test]
    fn exact_hit_miss_and_default() {
        let (p, b) = setup(SPEC);
        let snap = snapshot(3, vec![exact(vec![0, 0, 0, 0, 0, 2], fwd(2))]);
        let t = CompiledTable::compile(&p, &b, 1, &snap).unwrap();
        assert_eq!(t.version, 3);
        let forward = p.action_index("forward").unwrap() as u8;
        let (a, hit) = t.lookup(2);
        assert!(hit);
        assert_eq!((a.action, a.args[0]), (forward, 2));
        let (a, hit) = t.lookup(3);
        assert!(!hit);
        assert_eq!(a.action, p.action_index("broadcast").unwrap() as u8);
        // Leading zeros are fine; a too-wide value is not.
        let snap2 = TableSnapshot {
            default_action: Some(ActionCall {
                action_id: DROP,
                params: vec![],
            }),
            ..snapshot(4, vec![exact(vec![1, 0, 0, 0, 0, 0, 2], fwd(2))])
        };
        let e = CompiledTable::compile(&p, &b, 1, &snap2).unwrap_err();
        assert_eq!(e.entry, DisplayIndex(Some(0)));
        assert_eq!(e.table, "MyIngress.dmac");
    }

    #[test]
    fn hits_count_in_the_entry_direct_counter_and_misses_nowhere() {
        let (p, b) = setup(SPEC);
        let cell = Arc::new(CounterCell::default());
        let entry = |mac: u8| exact(vec![mac], fwd(mac));
        let snap = TableSnapshot {
            // Entry 0 has no cell (another table's counters are empty).
            counters: DirectCounters(vec![None, Some(cell.clone())]),
            ..snapshot(1, vec![entry(1), entry(2)])
        };
        let t = CompiledTable::compile(&p, &b, 1, &snap).unwrap();
        for (key, len) in [(2, 64), (2, 100), (1, 64), (3, 64)] {
            let (a, _) = t.lookup(key);
            t.count_hit(a, len);
        }
        assert_eq!(cell.load(), (2, 164));
        // A recompile with the same cells keeps counting into them.
        let t2 = CompiledTable::compile(&p, &b, 1, &TableSnapshot { version: 2, ..snap }).unwrap();
        let (a, hit) = t2.lookup(2);
        assert!(hit);
        t2.count_hit(a, 1);
        assert_eq!(cell.load(), (3, 165));
    }

    #[test]
    fn wrong_action_for_table_is_refused() {
        let (p, b) = setup(SPEC);
        let snap = snapshot(
            1,
            vec![exact(
                vec![1],
                ActionCall {
                    action_id: 21257015, // NoAction: smac's, not dmac's
                    params: vec![],
                },
            )],
        );
        let e = CompiledTable::compile(&p, &b, 1, &snap).unwrap_err();
        assert!(e.reason.contains("NoAction"), "{e}");
    }

    #[test]
    fn lpm_longest_prefix_wins() {
        let (p, b) = setup(&SPEC.replace("h.ethernet.dstAddr exact", "h.ethernet.dstAddr lpm"));
        let e = |v: Vec<u8>, len: u32, port: u8| SnapshotEntry {
            matches: vec![(
                1,
                FieldValue::Lpm {
                    value: v,
                    prefix_len: len,
                },
            )],
            priority: 0,
            action: fwd(port),
        };
        let snap = snapshot(
            1,
            vec![
                e(vec![0x0a, 0, 0, 0, 0, 0], 8, 1),
                e(vec![0x0a, 0x01, 0, 0, 0, 0], 16, 2),
            ],
        );
        let t = CompiledTable::compile(&p, &b, 1, &snap).unwrap();
        assert_eq!(t.lookup(0x0a01_0000_0001).0.args[0], 2);
        assert_eq!(t.lookup(0x0a02_0000_0001).0.args[0], 1);
        assert!(!t.lookup(0x0b00_0000_0000).1);
    }

    #[test]
    fn wildcard_priority_order() {
        let (p, b) =
            setup(&SPEC.replace("h.ethernet.dstAddr exact", "h.ethernet.dstAddr wildcard"));
        let e = |v: u8, m: u8, prio: i32, port: u8| SnapshotEntry {
            matches: vec![(
                1,
                FieldValue::Ternary {
                    value: vec![v],
                    mask: vec![m],
                },
            )],
            priority: prio,
            action: fwd(port),
        };
        let snap = snapshot(1, vec![e(0x00, 0x00, 1, 1), e(0x05, 0x0f, 10, 2)]);
        let t = CompiledTable::compile(&p, &b, 1, &snap).unwrap();
        assert_eq!(t.lookup(0x15).0.args[0], 2);
        assert_eq!(t.lookup(0x16).0.args[0], 1);
    }

    #[test]
    fn from_p4runtime_entry() {
        let te = p4::TableEntry {
            table_id: DMAC,
            r#match: vec![p4::FieldMatch {
                field_id: 1,
                field_match_type: Some(p4::field_match::FieldMatchType::Exact(
                    p4::field_match::Exact { value: vec![1] },
                )),
            }],
            action: Some(p4::TableAction {
                r#type: Some(p4::table_action::Type::Action(p4::Action {
                    action_id: FORWARD,
                    params: vec![p4::action::Param {
                        param_id: 1,
                        value: vec![3],
                    }],
                })),
            }),
            ..Default::default()
        };
        let s = SnapshotEntry::from_p4runtime(&te).unwrap();
        assert_eq!(s.matches, vec![(1, FieldValue::Exact(vec![1]))]);
        assert_eq!(s.action, fwd(3));
    }

    #[test]
    fn memory_source_versions() {
        let src = MemoryTableSource::new();
        assert_eq!(src.version(DMAC), 0);
        src.insert(DMAC, SnapshotEntry::default());
        src.set_default(DMAC, Some(fwd(1)));
        assert_eq!(src.version(DMAC), 2);
        let s = src.snapshot(DMAC);
        assert_eq!((s.version, s.entries.len()), (2, 1));
    }
}
