//! The P4Runtime pipeline of one device: its schema (from the P4Info), the
//! config it came with, and the table contents, with the Write semantics
//! applied per update and the Read filters. Pure logic; the caller holds
//! the device's pipeline lock.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use p4fleet_proto::p4runtime::{self as p4, update::Type};
use prost::Message;
use tonic::Code;

use crate::key::{Entries, IdMap, Key};
use crate::p4runtime::action_profile::{self, ProfileState};
use crate::p4runtime::digests::Digests;
use crate::p4runtime::entry::{canonicalize_action, canonicalize_entry, check_action, encode_key};
use crate::p4runtime::groups;
use crate::p4runtime::idle::IdleTable;
use crate::p4runtime::pre::PreState;
use crate::p4runtime::resources::Resources;
use crate::p4runtime::schema::{Schema, TableInfo};
use crate::p4runtime::wire::{self, ActionView, EntityView, Scratch, TableEntryView};
use crate::update_error::{UpdateError, err, malformed};

/// Encodes what a table keeps for an inserted or modified entry, from the
/// entry's parsed views.
pub(crate) type StoredEntry<'f> = dyn FnMut(&Scratch<'_>) -> Result<Box<[u8]>, UpdateError> + 'f;

/// Upper bound on a table's pre-sized capacity (entries), so a P4Info
/// `size` of millions does not reserve memory nobody writes.
const PRESIZE_MAX: usize = 1 << 15;

pub(crate) struct TableState {
    pub entries: Entries,
    pub default_action: Option<p4::Action>,
    /// Bumped (under the device's pipeline lock) whenever the entries or
    /// the default action change, so a data plane following the table
    /// (`crate::dpdk`) can poll it without the lock.
    version: Arc<AtomicU64>,
    /// Entries inserted into this table since it was created (kept across
    /// a RECONCILE_AND_COMMIT that keeps the table): what a hitless update
    /// is measured by (stats `table_inserts`).
    pub inserts: u64,
    /// When each entry with an idle timeout was last hit (`super::idle`).
    pub idle: IdleTable,
}

impl TableState {
    /// Records a change of the entries or the default action.
    #[inline]
    pub fn touch(&self) {
        // Only the lock holder writes: no locked instruction needed.
        let v = self.version.load(Ordering::Relaxed);
        self.version.store(v + 1, Ordering::Release);
    }
}

/// Distinguishes committed pipelines (a data plane follows one).
static GENERATION: AtomicU64 = AtomicU64::new(1);

/// A read-only view of one table as installed, for whatever looks entries
/// up rather than writing them (Read, stats, a data plane); writes go
/// through [`Pipeline::apply`]. Take it under the device's pipeline lock.
///
/// Keys are canonical (see [`encode_key`]): each match field of
/// `info.fields` at its `offset`, `kind.key_len(nbytes)` bytes (the value
/// right-aligned in `nbytes`; then a 2-byte prefix length for LPM, the mask
/// or high bound for ternary and range; optional fields start with a
/// validity byte), omitted fields all zero, then the 4-byte big-endian
/// priority when `info.needs_priority`.
#[derive(Clone, Copy)]
pub(crate) struct TableView<'a> {
    pub info: &'a TableInfo,
    state: &'a TableState,
}

impl<'a> TableView<'a> {
    /// Installed entries as (canonical key, canonical encoded
    /// `TableEntry`), in no particular order.
    pub fn entries(&self) -> impl Iterator<Item = (&'a [u8], &'a [u8])> + 'a {
        self.state
            .entries
            .iter()
            .map(|(k, e)| (k.as_slice(), &e[..]))
    }

    /// The entry with this canonical key, as its encoded `TableEntry`.
    pub fn get(&self, key: &[u8]) -> Option<&'a [u8]> {
        self.state.entries.get(key).map(|e| &e[..])
    }

    pub fn len(&self) -> usize {
        self.state.entries.len()
    }

    /// The action a miss takes (`None`: the table has no default action).
    pub fn default_action(&self) -> Option<&'a p4::Action> {
        self.state.default_action.as_ref()
    }

    /// Entries inserted since the table was created (see
    /// `TableState::inserts`).
    pub fn inserts(&self) -> u64 {
        self.state.inserts
    }

    /// The table's change counter (see `TableState::touch`), to read
    /// without the lock.
    pub fn version_counter(&self) -> Arc<AtomicU64> {
        self.state.version.clone()
    }
}

pub(crate) struct Pipeline {
    pub schema: Schema,
    pub config: p4::ForwardingPipelineConfig,
    pub tables: IdMap<TableState>,
    /// Members and groups of each action profile.
    pub profiles: IdMap<ProfileState>,
    /// Multicast groups and clone sessions.
    pub pre: PreState,
    /// Unique per committed pipeline in this process.
    pub generation: u64,
    /// Counter, meter and register state (`super::resources`).
    pub(crate) resources: Resources,
    /// Digest configs and lists (`super::digests`).
    pub(crate) digests: Digests,
}

impl Pipeline {
    pub fn new(schema: Schema, config: p4::ForwardingPipelineConfig) -> Pipeline {
        let tables = schema
            .tables
            .values()
            .map(|t| {
                (
                    t.id,
                    TableState {
                        // Pre-sized (bounded) so bulk loads do not rehash
                        // repeatedly while the lock is held.
                        entries: Entries::with_capacity_and_hasher(
                            t.size.unwrap_or(0).min(PRESIZE_MAX),
                            Default::default(),
                        ),
                        default_action: t.initial_default.clone(),
                        version: Arc::default(),
                        inserts: 0,
                        idle: IdleTable::default(),
                    },
                )
            })
            .collect();
        Pipeline {
            profiles: action_profile::new_states(&schema),
            pre: PreState::default(),
            resources: Resources::new(&schema.resources),
            digests: Digests::new(&schema.digests),
            schema,
            config,
            tables,
            generation: GENERATION.fetch_add(1, Ordering::Relaxed),
        }
    }

    /// One table, by P4Info id.
    pub fn table(&self, id: u32) -> Option<TableView<'_>> {
        Some(TableView {
            info: self.schema.tables.get(&id)?,
            state: self.tables.get(&id)?,
        })
    }

    /// Every table, in no particular order.
    pub fn table_views(&self) -> impl Iterator<Item = TableView<'_>> {
        self.schema.tables.values().map(|info| TableView {
            info,
            state: &self.tables[&info.id],
        })
    }

    /// Applies one encoded `Update` of a Write batch. `key` and `scratch`
    /// are reusable buffers.
    pub fn apply<'a>(
        &mut self,
        update: &'a [u8],
        key: &mut Vec<u8>,
        scratch: &mut Scratch<'a>,
    ) -> Result<Type, UpdateError> {
        let (ty, entity) = wire::parse_update(update).map_err(malformed)?;
        let ty = Type::try_from(ty).unwrap_or(Type::Unspecified);
        if ty == Type::Unspecified {
            return Err(err(Code::InvalidArgument, "update type is UNSPECIFIED"));
        }
        match entity {
            EntityView::TableEntry(raw) => {
                let te = wire::parse_table_entry(raw, scratch).map_err(malformed)?;
                // Stored as it came when already canonical (the common
                // case), so Read returns it byte for byte.
                self.apply_entry(ty, te, scratch, key, &mut |scratch| {
                    if scratch.canonical() {
                        return Ok(raw.into());
                    }
                    let mut te = p4::TableEntry::decode(raw)
                        .map_err(|e| err(Code::InvalidArgument, format!("malformed entry: {e}")))?;
                    canonicalize_entry(&mut te);
                    Ok(te.encode_to_vec().into_boxed_slice())
                })
            }
            EntityView::Other(groups::MEMBER | groups::GROUP | groups::PRE) => {
                self.apply_groups_entity(ty, update)
            }
            EntityView::Other(_) => {
                let entity = p4::Update::decode(update)
                    .map_err(|e| err(Code::InvalidArgument, format!("malformed update: {e}")))?
                    .entity
                    .and_then(|e| e.entity)
                    .ok_or_else(|| err(Code::InvalidArgument, "update has no entity"))?;
                self.apply_resource(ty, entity)
            }
            EntityView::Missing => Err(err(Code::InvalidArgument, "update has no entity")),
        }
    }

    /// Applies one table entry, parsed into `te` and `scratch` (match
    /// fields and params). `stored` encodes what the table keeps for an
    /// inserted or modified entry: its canonical encoded `TableEntry`.
    pub fn apply_entry(
        &mut self,
        ty: Type,
        te: TableEntryView,
        scratch: &Scratch<'_>,
        key: &mut Vec<u8>,
        stored: &mut StoredEntry<'_>,
    ) -> Result<Type, UpdateError> {
        let Some(table) = self.schema.tables.get(&te.table_id) else {
            return Err(err(
                Code::NotFound,
                format!("unknown table id {}", te.table_id),
            ));
        };
        if table.is_const {
            return Err(err(
                Code::PermissionDenied,
                format!("table {} is const", table.name),
            ));
        }
        let state = self.tables.get_mut(&table.id).expect("one state per table");

        if te.is_default_action {
            if ty != Type::Modify {
                return Err(err(
                    Code::InvalidArgument,
                    "the default entry can only be modified",
                ));
            }
            if !scratch.matches.is_empty() || te.priority != 0 {
                return Err(err(
                    Code::InvalidArgument,
                    "the default entry has no match fields and no priority",
                ));
            }
            if table.const_default_action_id != 0 {
                return Err(err(
                    Code::PermissionDenied,
                    format!("table {} has a const default action", table.name),
                ));
            }
            state.default_action = match te.action {
                ActionView::Missing => table.initial_default.clone(),
                ActionView::Direct { action_id } => {
                    check_action(&self.schema, table, action_id, &scratch.params, true)?;
                    let mut a = p4::Action {
                        action_id,
                        params: scratch
                            .params
                            .iter()
                            .map(|p| p4::action::Param {
                                param_id: p.param_id,
                                value: p.value.to_vec(),
                            })
                            .collect(),
                    };
                    canonicalize_action(&mut a);
                    Some(a)
                }
                ActionView::Profile => {
                    return Err(err(
                        Code::InvalidArgument,
                        format!("table {} is a direct table", table.name),
                    ));
                }
            };
            state.touch();
            return Ok(Type::Modify);
        }

        encode_key(table, &scratch.matches, te.priority, key)?;
        if ty != Type::Delete && te.idle_timeout_ns != 0 {
            if !table.idle_notify {
                return Err(err(
                    Code::InvalidArgument,
                    format!(
                        "table {} has no idle timeout (idle_timeout_behavior is not NOTIFY_CONTROL): idle_timeout_ns must be 0",
                        table.name
                    ),
                ));
            }
            if te.idle_timeout_ns < 0 {
                return Err(err(
                    Code::InvalidArgument,
                    format!("table {}: idle_timeout_ns is negative", table.name),
                ));
            }
        }
        let indirect = table.implementation_id != 0;
        let mut profile_ref = None;
        if ty != Type::Delete && indirect {
            profile_ref = Some(groups::check_indirect_entry(
                &self.schema,
                &self.profiles,
                table,
                te.action,
                scratch.profile_action,
            )?);
        } else if ty != Type::Delete {
            match te.action {
                ActionView::Direct { action_id } => {
                    check_action(&self.schema, table, action_id, &scratch.params, false)?
                }
                ActionView::Profile => {
                    return Err(err(
                        Code::InvalidArgument,
                        format!("table {} is a direct table", table.name),
                    ));
                }
                ActionView::Missing => {
                    return Err(err(Code::InvalidArgument, "entry has no action"));
                }
            }
        }
        let no_such_entry = || {
            err(
                Code::NotFound,
                format!("table {}: no such entry", table.name),
            )
        };
        match ty {
            Type::Insert => {
                crate::key::make_room(&mut state.entries, 1, table.size);
                // One hash and probe for the common (new key) case.
                let len = state.entries.len();
                match state.entries.entry(Key::new(key)) {
                    std::collections::hash_map::Entry::Occupied(_) => {
                        return Err(err(
                            Code::AlreadyExists,
                            format!("table {}: entry already exists", table.name),
                        ));
                    }
                    std::collections::hash_map::Entry::Vacant(v) => {
                        if table.size.is_some_and(|s| len >= s) {
                            return Err(err(
                                Code::ResourceExhausted,
                                format!("table {} is full ({len} entries)", table.name),
                            ));
                        }
                        v.insert(stored(scratch)?);
                        state.inserts += 1;
                        self.resources.on_insert(table.id, key);
                        if table.idle_notify {
                            state.idle.set(key, te.idle_timeout_ns, Instant::now());
                        }
                    }
                }
                if let Some(r) = profile_ref {
                    action_profile::add_ref(&mut self.profiles, table, r);
                }
            }
            Type::Modify => {
                let Some(slot) = state.entries.get_mut(key.as_slice()) else {
                    return Err(no_such_entry());
                };
                let old = std::mem::replace(slot, stored(scratch)?);
                if table.idle_notify {
                    state.idle.set(key, te.idle_timeout_ns, Instant::now());
                }
                if let Some(r) = profile_ref {
                    action_profile::release_entry(&mut self.profiles, table, &old);
                    action_profile::add_ref(&mut self.profiles, table, r);
                }
            }
            Type::Delete => {
                let Some(old) = state.entries.remove(key.as_slice()) else {
                    return Err(no_such_entry());
                };
                if indirect {
                    action_profile::release_entry(&mut self.profiles, table, &old);
                }
                self.resources.on_delete(table.id, key);
                state.idle.remove(key);
            }
            Type::Unspecified => unreachable!("checked above"),
        }
        state.touch();
        Ok(ty)
    }

    /// Encoded `TableEntry`s matching one table-entry read filter, passed
    /// to `emit`.
    pub fn read_table_entries(
        &self,
        filter: &p4::TableEntry,
        emit: &mut dyn FnMut(&[u8]),
    ) -> Result<(), UpdateError> {
        let mut ids: Vec<u32> = if filter.table_id == 0 {
            self.schema.tables.keys().copied().collect()
        } else if self.schema.tables.contains_key(&filter.table_id) {
            vec![filter.table_id]
        } else {
            return Err(err(
                Code::NotFound,
                format!("unknown table id {}", filter.table_id),
            ));
        };
        ids.sort_unstable();
        let now = Instant::now();
        let mut with_elapsed = Vec::new();
        for id in ids {
            let table = self.table(id).expect("one state per table");
            // `time_since_last_hit` in the filter asks for each entry's
            // (P4Runtime spec); appending the field to the stored bytes
            // is a valid encoding of the entry with it set.
            let mut emit_entry = |k: &[u8], e: &[u8]| match filter.time_since_last_hit {
                Some(_) if table.info.idle_notify => {
                    with_elapsed.clear();
                    with_elapsed.extend_from_slice(e);
                    let elapsed = table.state.idle.elapsed(k, now).unwrap_or_default();
                    with_elapsed.push(10 << 3 | 2);
                    p4::table_entry::IdleTimeout {
                        elapsed_ns: elapsed.as_nanos().min(i64::MAX as u128) as i64,
                    }
                    .encode_length_delimited(&mut with_elapsed)
                    .expect("a Vec grows");
                    emit(&with_elapsed);
                }
                _ => emit(e),
            };
            if filter.is_default_action {
                if let Some(a) = table.default_action() {
                    emit(
                        &p4::TableEntry {
                            table_id: id,
                            action: Some(p4::TableAction {
                                r#type: Some(p4::table_action::Type::Action(a.clone())),
                            }),
                            is_default_action: true,
                            r#const: table.info.const_default_action_id != 0,
                            ..Default::default()
                        }
                        .encode_to_vec(),
                    );
                }
            } else if filter.table_id != 0 && !filter.r#match.is_empty() {
                let mut key = Vec::new();
                key_of(table.info, filter, &mut key)?;
                if let Some(e) = table.get(&key) {
                    emit_entry(&key, e);
                }
            } else {
                for (k, e) in table.entries() {
                    emit_entry(k, e);
                }
            }
        }
        Ok(())
    }
}

/// The canonical key of a prost `TableEntry` (read filters and drift
/// helpers, off the hot path: it goes through the wire form).
pub(crate) fn key_of(
    table: &TableInfo,
    te: &p4::TableEntry,
    key: &mut Vec<u8>,
) -> Result<(), UpdateError> {
    let raw = te.encode_to_vec();
    let mut scratch = Scratch::default();
    let v = wire::parse_table_entry(&raw, &mut scratch).map_err(malformed)?;
    encode_key(table, &scratch.matches, v.priority, key)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{P4INFO, xorshift};

    fn pipeline() -> Pipeline {
        let info = p4fleet_proto::p4info::parse_text(P4INFO).unwrap();
        Pipeline::new(Schema::from_p4info(&info).unwrap(), Default::default())
    }

    fn update(a: Vec<u8>, prefix_len: i32, priority: i32) -> Vec<u8> {
        use p4::field_match::{Exact, FieldMatchType as T, Lpm, Ternary};
        let fm = |id, t| p4::FieldMatch {
            field_id: id,
            field_match_type: Some(t),
        };
        p4::Update {
            r#type: Type::Insert as i32,
            entity: Some(p4::Entity {
                entity: Some(p4::entity::Entity::TableEntry(p4::TableEntry {
                    table_id: 1,
                    r#match: vec![
                        fm(1, T::Exact(Exact { value: a })),
                        fm(
                            2,
                            T::Lpm(Lpm {
                                value: vec![10, 0, 0, 0],
                                prefix_len,
                            }),
                        ),
                        fm(
                            3,
                            T::Ternary(Ternary {
                                value: vec![1],
                                mask: vec![0xff],
                            }),
                        ),
                    ],
                    action: Some(p4::TableAction {
                        r#type: Some(p4::table_action::Type::Action(p4::Action {
                            action_id: 10,
                            params: vec![p4::action::Param {
                                param_id: 1,
                                value: vec![0, 3],
                            }],
                        })),
                    }),
                    priority,
                    metadata: vec![7; 3],
                    ..Default::default()
                })),
            }),
        }
        .encode_to_vec()
    }

    /// Every stored entry is a valid, canonical `TableEntry` (what Read
    /// returns), whatever was written.
    fn stored_entries_decode(p: &Pipeline) -> usize {
        let filter = p4::TableEntry::default();
        let mut n = 0;
        p.read_table_entries(&filter, &mut |raw| {
            let te = p4::TableEntry::decode(raw).expect("stored entries decode");
            let mut canonical = te.clone();
            canonicalize_entry(&mut canonical);
            assert_eq!(te, canonical, "stored entries are canonical");
            n += 1;
        })
        .unwrap();
        n
    }

    #[test]
    fn padded_values_are_stored_canonical_and_keys_ignore_padding() {
        let mut p = pipeline();
        let (mut key, mut scratch) = (Vec::new(), Scratch::default());
        let padded = update(vec![0, 0, 1], 8, 5);
        assert_eq!(p.apply(&padded, &mut key, &mut scratch), Ok(Type::Insert));
        // Same key without the padding: a duplicate.
        let plain = update(vec![1], 8, 5);
        let mut scratch = Scratch::default();
        assert_eq!(
            p.apply(&plain, &mut key, &mut scratch).unwrap_err().code,
            Code::AlreadyExists
        );
        assert_eq!(stored_entries_decode(&p), 1);
    }

    #[test]
    fn table_views_look_entries_up_by_canonical_key() {
        let mut p = pipeline();
        let mut key = Vec::new();
        for a in 1..=3u8 {
            let u = update(vec![0, a], 8, 5);
            let mut scratch = Scratch::default();
            assert_eq!(p.apply(&u, &mut key, &mut scratch), Ok(Type::Insert));
        }
        assert!(p.table(2).is_none());
        assert_eq!(p.table_views().count(), 1);
        let t = p.table(1).unwrap();
        assert_eq!(t.len(), 3);
        // NoAction, the first parameterless action that may be a default.
        assert_eq!(t.default_action().map(|a| a.action_id), Some(11));
        let mut seen = Vec::new();
        for (k, e) in t.entries() {
            let te = p4::TableEntry::decode(e).unwrap();
            // The key is the entry's canonical key: field a (9 bits, two
            // bytes) right-aligned at offset 0, priority last.
            let mut expected = Vec::new();
            key_of(t.info, &te, &mut expected).unwrap();
            assert_eq!(k, expected.as_slice());
            assert_eq!(&k[k.len() - 4..], &5i32.to_be_bytes());
            assert_eq!(t.get(k), Some(e));
            seen.push(k[1]);
        }
        seen.sort_unstable();
        assert_eq!(seen, [1, 2, 3]);
        assert_eq!(t.get(&[0; 14]), None);
    }

    /// The default entry: MODIFY only, @defaultonly allowed, @tableonly
    /// and a const default refused, no action resets it.
    #[test]
    fn the_default_entry_follows_the_p4info_scopes_and_const_default() {
        let info = p4fleet_proto::p4info::parse_text(
            r#"
tables { preamble { id: 1 name: "t" }
  match_fields { id: 1 name: "a" bitwidth: 8 match_type: EXACT }
  action_refs { id: 10 } action_refs { id: 11 scope: DEFAULT_ONLY }
  action_refs { id: 12 scope: TABLE_ONLY } size: 4 }
tables { preamble { id: 2 name: "c" }
  match_fields { id: 1 name: "a" bitwidth: 8 match_type: EXACT }
  action_refs { id: 10 } const_default_action_id: 10 size: 4 }
actions { preamble { id: 10 name: "drop" } }
actions { preamble { id: 11 name: "punt" } params { id: 1 name: "p" bitwidth: 9 } }
actions { preamble { id: 12 name: "mirror" } }
"#,
        )
        .unwrap();
        let mut p = Pipeline::new(Schema::from_p4info(&info).unwrap(), Default::default());
        let default = |ty: Type, table_id: u32, action: Option<(u32, Vec<u8>)>| {
            p4::Update {
                r#type: ty as i32,
                entity: Some(p4::Entity {
                    entity: Some(p4::entity::Entity::TableEntry(p4::TableEntry {
                        table_id,
                        is_default_action: true,
                        action: action.map(|(action_id, v)| p4::TableAction {
                            r#type: Some(p4::table_action::Type::Action(p4::Action {
                                action_id,
                                params: if v.is_empty() {
                                    Vec::new()
                                } else {
                                    vec![p4::action::Param {
                                        param_id: 1,
                                        value: v,
                                    }]
                                },
                            })),
                        }),
                        ..Default::default()
                    })),
                }),
            }
            .encode_to_vec()
        };
        let mut key = Vec::new();
        let mut apply = |p: &mut Pipeline, u: Vec<u8>| {
            let mut scratch = Scratch::default();
            p.apply(&u, &mut key, &mut scratch).map_err(|e| e.code)
        };
        let punt = Some((11, vec![1, 0xfe]));
        // (update, table, action, answer, table 1's default action after)
        let steps = [
            (
                Type::Insert,
                1,
                punt.clone(),
                Err(Code::InvalidArgument),
                None,
            ),
            (Type::Modify, 1, punt, Ok(Type::Modify), Some(11)),
            (
                Type::Modify,
                1,
                Some((12, Vec::new())),
                Err(Code::InvalidArgument),
                None,
            ),
            // No action: back to the initial default.
            (Type::Modify, 1, None, Ok(Type::Modify), Some(10)),
            (
                Type::Modify,
                2,
                Some((10, Vec::new())),
                Err(Code::PermissionDenied),
                None,
            ),
            (Type::Modify, 2, None, Err(Code::PermissionDenied), None),
        ];
        for (ty, table, action, answer, default_after) in steps {
            let what = format!("{ty:?} of table {table}'s default to {action:?}");
            assert_eq!(apply(&mut p, default(ty, table, action)), answer, "{what}");
            if let Some(id) = default_after {
                let now = p.table(1).unwrap().default_action().unwrap().action_id;
                assert_eq!(now, id, "{what}");
            }
        }
    }

    #[test]
    fn mutated_updates_are_refused_or_applied_never_a_panic() {
        let mut p = pipeline();
        let mut key = Vec::new();
        let mut next = xorshift(0x9e37_79b9_7f4a_7c15);
        let mut applied = 0;
        for i in 0..3000u32 {
            let mut u = update(
                (i % 512).to_be_bytes()[2..].to_vec(),
                8 + (i % 3) as i32,
                1 + (i % 4) as i32,
            );
            match next() % 4 {
                0 => {}
                1 => {
                    let at = next() as usize % u.len();
                    u[at] ^= 1 << (next() % 8);
                }
                2 => u.truncate(next() as usize % u.len()),
                _ => {
                    let at = next() as usize % u.len();
                    u[at] = next() as u8;
                }
            }
            let mut scratch = Scratch::default();
            if p.apply(&u, &mut key, &mut scratch).is_ok() {
                applied += 1;
            }
        }
        assert!(applied > 100, "some updates apply: {applied}");
        assert!(applied < 3000, "some are refused: {applied}");
        stored_entries_decode(&p);
    }
}
