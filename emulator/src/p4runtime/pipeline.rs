//! One emulated device: its pipeline, table contents, arbitration state and
//! counters. Everything here is synchronous; callers never hold a lock across
//! an await.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use p4fleet_proto::p4runtime::{
    self as p4, set_forwarding_pipeline_config_request::Action as SetAction, update::Type,
};
use p4fleet_proto::rpc;
use prost::Message;
use serde::Serialize;
use tokio::sync::mpsc::UnboundedSender;
use tonic::{Code, Status};

use crate::key::Key;
use crate::p4runtime::entry::{
    UpdateError, canonicalize_action, canonicalize_entry, check_action, encode_key, err,
};
use crate::p4runtime::schema::{IdMap, Schema, TableInfo};
use crate::p4runtime::wire::{self, ActionView, EntityView, Scratch, TableEntryView};

/// Canonical key → the entry's encoded `TableEntry` (canonical byte
/// strings): one allocation per entry, and Read copies it out as it is.
type Entries = HashMap<Key, Box<[u8]>, foldhash::fast::RandomState>;

/// Encodes what a table keeps for an inserted or modified entry, from the
/// entry's parsed views.
pub(crate) type StoredEntry<'f> = dyn FnMut(&Scratch<'_>) -> Result<Box<[u8]>, UpdateError> + 'f;

/// Upper bound on a table's pre-sized capacity (entries), so a P4Info
/// `size` of millions does not reserve memory nobody writes.
const PRESIZE_MAX: usize = 1 << 15;

pub(crate) struct TableState {
    pub entries: Entries,
    pub default_action: Option<p4::Action>,
}

pub(crate) struct Pipeline {
    pub schema: Schema,
    pub config: p4::ForwardingPipelineConfig,
    pub tables: IdMap<TableState>,
}

impl Pipeline {
    fn new(schema: Schema, config: p4::ForwardingPipelineConfig) -> Pipeline {
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
                    },
                )
            })
            .collect();
        Pipeline {
            schema,
            config,
            tables,
        }
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
            EntityView::Other(_) => Err(err(
                Code::Unimplemented,
                "only table entries can be written to this emulator",
            )),
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
        if table.implementation_id != 0 {
            return Err(err(
                Code::Unimplemented,
                format!("table {} uses an action profile (not emulated)", table.name),
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
            return Ok(Type::Modify);
        }

        encode_key(table, &scratch.matches, te.priority, key)?;
        if ty != Type::Delete {
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
        match ty {
            Type::Insert => {
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
                    }
                }
            }
            Type::Modify => {
                let Some(slot) = state.entries.get_mut(key.as_slice()) else {
                    return Err(err(
                        Code::NotFound,
                        format!("table {}: no such entry", table.name),
                    ));
                };
                *slot = stored(scratch)?;
            }
            Type::Delete => {
                if state.entries.remove(key.as_slice()).is_none() {
                    return Err(err(
                        Code::NotFound,
                        format!("table {}: no such entry", table.name),
                    ));
                }
            }
            Type::Unspecified => unreachable!("checked above"),
        }
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
        for id in ids {
            let table = &self.schema.tables[&id];
            let state = &self.tables[&id];
            if filter.is_default_action {
                if let Some(a) = &state.default_action {
                    emit(
                        &p4::TableEntry {
                            table_id: id,
                            action: Some(p4::TableAction {
                                r#type: Some(p4::table_action::Type::Action(a.clone())),
                            }),
                            is_default_action: true,
                            r#const: table.const_default_action_id != 0,
                            ..Default::default()
                        }
                        .encode_to_vec(),
                    );
                }
            } else if filter.table_id != 0 && !filter.r#match.is_empty() {
                let mut key = Vec::new();
                key_of(table, filter, &mut key)?;
                if let Some(e) = state.entries.get(key.as_slice()) {
                    emit(e);
                }
            } else {
                for e in state.entries.values() {
                    emit(e);
                }
            }
        }
        Ok(())
    }
}

fn malformed(e: wire::WireError) -> UpdateError {
    err(Code::InvalidArgument, format!("update: {e}"))
}

/// The canonical key of a prost `TableEntry` (read filters and drift
/// helpers, off the hot path: it goes through the wire form).
fn key_of(table: &TableInfo, te: &p4::TableEntry, key: &mut Vec<u8>) -> Result<(), UpdateError> {
    let raw = te.encode_to_vec();
    let mut scratch = Scratch::default();
    let v = wire::parse_table_entry(&raw, &mut scratch).map_err(malformed)?;
    encode_key(table, &scratch.matches, v.priority, key)
}

/// Pipeline and table contents of a device.
#[derive(Default)]
pub(crate) struct DeviceState {
    pub pipeline: Option<Pipeline>,
    /// Saved by VERIFY_AND_SAVE, realized by COMMIT.
    pub saved: Option<(Schema, p4::ForwardingPipelineConfig)>,
}

impl DeviceState {
    pub fn set_pipeline(
        &mut self,
        action: SetAction,
        config: Option<p4::ForwardingPipelineConfig>,
    ) -> Result<(), Status> {
        let verify = |config: Option<p4::ForwardingPipelineConfig>| {
            let config = config.ok_or_else(|| Status::invalid_argument("config is required"))?;
            let p4info = config
                .p4info
                .as_ref()
                .ok_or_else(|| Status::invalid_argument("config has no p4info"))?;
            let schema =
                Schema::from_p4info(p4info).map_err(|e| Status::invalid_argument(e.to_string()))?;
            Ok::<_, Status>((schema, config))
        };
        match action {
            SetAction::Unspecified => {
                return Err(Status::invalid_argument("action is UNSPECIFIED"));
            }
            SetAction::Verify => {
                verify(config)?;
            }
            SetAction::VerifyAndSave => {
                self.saved = Some(verify(config)?);
            }
            SetAction::VerifyAndCommit => {
                let (schema, config) = verify(config)?;
                self.pipeline = Some(Pipeline::new(schema, config));
                self.saved = None;
            }
            SetAction::Commit => {
                if config.is_some() {
                    return Err(Status::invalid_argument(
                        "COMMIT takes no config (it realizes the saved one)",
                    ));
                }
                let (schema, config) = self
                    .saved
                    .take()
                    .ok_or_else(|| Status::failed_precondition("no saved config to commit"))?;
                self.pipeline = Some(Pipeline::new(schema, config));
            }
            SetAction::ReconcileAndCommit => {
                let (schema, config) = verify(config)?;
                let mut next = Pipeline::new(schema, config);
                if let Some(old) = self.pipeline.take() {
                    if let Err(e) = reconcile(&old, &mut next) {
                        self.pipeline = Some(old);
                        return Err(e);
                    }
                    let mut old = old;
                    for (id, state) in old.tables.drain() {
                        if let Some(slot) = next.tables.get_mut(&id) {
                            *slot = state;
                        }
                    }
                }
                self.pipeline = Some(next);
                self.saved = None;
            }
        }
        Ok(())
    }
}

/// Checks that every non-empty table of `old` survives unchanged in `next`.
fn reconcile(old: &Pipeline, next: &mut Pipeline) -> Result<(), Status> {
    for (id, state) in &old.tables {
        let old_t = &old.schema.tables[id];
        let modified = !state.entries.is_empty() || state.default_action != old_t.initial_default;
        if !modified {
            continue;
        }
        let same = next.schema.tables.get(id).is_some_and(|t| {
            t == old_t
                && t.actions
                    .iter()
                    .all(|(a, _)| old.schema.actions.get(a) == next.schema.actions.get(a))
        });
        if !same {
            return Err(Status::invalid_argument(format!(
                "cannot preserve the state of table {} under the new config",
                old_t.name
            )));
        }
    }
    Ok(())
}

pub(crate) type StreamTx = UnboundedSender<Result<p4::StreamMessageResponse, Status>>;

struct StreamSlot {
    stream_id: u64,
    election_id: Option<u128>,
    role: Option<p4::Role>,
    tx: StreamTx,
}

#[derive(Default)]
struct RoleState {
    streams: Vec<StreamSlot>,
    primary: Option<u64>,
    highest: Option<u128>,
}

impl RoleState {
    fn elect(&self) -> Option<u64> {
        self.streams
            .iter()
            .filter(|s| s.election_id.is_some())
            .max_by_key(|s| s.election_id)
            .map(|s| s.stream_id)
    }

    fn primary_election(&self) -> Option<u128> {
        let p = self.primary?;
        self.streams
            .iter()
            .find(|s| s.stream_id == p)
            .and_then(|s| s.election_id)
    }

    fn notify(&self, device_id: u64, only: Option<u64>) {
        let primary_eid = self.primary_election();
        let shown = primary_eid.or(self.highest);
        for s in &self.streams {
            if only.is_some_and(|o| o != s.stream_id) {
                continue;
            }
            let status = if Some(s.stream_id) == self.primary {
                rpc::Status {
                    code: Code::Ok as i32,
                    message: "you are the primary".into(),
                    details: vec![],
                }
            } else if self.primary.is_some() {
                rpc::Status {
                    code: Code::AlreadyExists as i32,
                    message: "a primary exists; you are a backup".into(),
                    details: vec![],
                }
            } else {
                rpc::Status {
                    code: Code::NotFound as i32,
                    message: "there is no primary".into(),
                    details: vec![],
                }
            };
            let msg = p4::StreamMessageResponse {
                update: Some(p4::stream_message_response::Update::Arbitration(
                    p4::MasterArbitrationUpdate {
                        device_id,
                        role: s.role.clone(),
                        election_id: shown.map(to_uint128),
                        status: Some(status),
                    },
                )),
            };
            // A closed receiver means the stream is going away; its removal
            // follows.
            let _ = s.tx.send(Ok(msg));
        }
    }
}

pub fn to_uint128(v: u128) -> p4::Uint128 {
    p4::Uint128 {
        high: (v >> 64) as u64,
        low: v as u64,
    }
}

pub fn from_uint128(v: &p4::Uint128) -> u128 {
    ((v.high as u128) << 64) | v.low as u128
}

/// Primary election per role (role name "" is the default role).
#[derive(Default)]
pub(crate) struct Arbitration {
    roles: HashMap<String, RoleState>,
}

impl Arbitration {
    /// Handles a MasterArbitrationUpdate from stream `stream_id`.
    pub fn arbitrate(
        &mut self,
        device_id: u64,
        stream_id: u64,
        role: Option<p4::Role>,
        election_id: Option<u128>,
        tx: &StreamTx,
    ) -> Result<(), Status> {
        let name = role.as_ref().map(|r| r.name.clone()).unwrap_or_default();
        let rs = self.roles.entry(name).or_default();
        if let Some(eid) = election_id
            && rs
                .streams
                .iter()
                .any(|s| s.stream_id != stream_id && s.election_id == Some(eid))
        {
            return Err(Status::invalid_argument(
                "election id already used by another controller of this role",
            ));
        }
        match rs.streams.iter_mut().find(|s| s.stream_id == stream_id) {
            Some(s) => {
                s.election_id = election_id;
                s.role = role;
            }
            None => rs.streams.push(StreamSlot {
                stream_id,
                election_id,
                role,
                tx: tx.clone(),
            }),
        }
        if election_id > rs.highest {
            rs.highest = election_id;
        }
        let elected = rs.elect();
        if elected != rs.primary {
            rs.primary = elected;
            rs.notify(device_id, None);
        } else {
            rs.notify(device_id, Some(stream_id));
        }
        Ok(())
    }

    /// Forgets a closed stream; elects a new primary if it was the primary.
    pub fn remove(&mut self, device_id: u64, role: &str, stream_id: u64) {
        let Some(rs) = self.roles.get_mut(role) else {
            return;
        };
        rs.streams.retain(|s| s.stream_id != stream_id);
        let elected = rs.elect();
        if elected != rs.primary {
            rs.primary = elected;
            rs.notify(device_id, None);
        }
    }

    /// The primary's election id for `role`, if there is a primary.
    pub fn primary_election(&self, role: &str) -> Option<u128> {
        self.roles.get(role).and_then(|r| r.primary_election())
    }

    pub fn primaries(&self) -> HashMap<String, String> {
        self.roles
            .iter()
            .filter_map(|(k, r)| r.primary_election().map(|e| (k.clone(), e.to_string())))
            .collect()
    }
}

/// Monotonic counters of one device.
#[derive(Default)]
pub(crate) struct Counters {
    pub write_rpcs: AtomicU64,
    pub read_rpcs: AtomicU64,
    pub set_pipeline_rpcs: AtomicU64,
    pub get_pipeline_rpcs: AtomicU64,
    pub stream_channels: AtomicU64,
    pub inserts: AtomicU64,
    pub modifies: AtomicU64,
    pub deletes: AtomicU64,
    pub failed_updates: AtomicU64,
    pub entities_read: AtomicU64,
    pub drift_deletes: AtomicU64,
}

/// Snapshot of a device's counters and contents (the stats JSON).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct DeviceStats {
    pub device_id: u64,
    /// Successful Write RPCs and failed ones alike.
    pub write_rpcs: u64,
    pub read_rpcs: u64,
    pub set_pipeline_rpcs: u64,
    pub get_pipeline_rpcs: u64,
    pub stream_channels: u64,
    /// Successful updates by type.
    pub inserts: u64,
    pub modifies: u64,
    pub deletes: u64,
    /// Updates refused with a per-update error.
    pub failed_updates: u64,
    pub entities_read: u64,
    /// Entries removed through the drift helpers.
    pub drift_deletes: u64,
    pub pipeline_set: bool,
    /// Cookie of the committed pipeline config, if any.
    pub cookie: Option<u64>,
    /// Entries installed now, over all tables.
    pub entries: u64,
    /// Entries installed now per table id (as a decimal string).
    pub tables: std::collections::BTreeMap<String, u64>,
    /// Current primary election id (decimal u128) per role ("" = default role).
    pub primaries: HashMap<String, String>,
    /// BFRT programs loaded (their tables count in `entries` and appear in
    /// `tables` under their bfrt.json names).
    #[serde(default)]
    pub bfrt_programs: Vec<String>,
}

pub(crate) struct Device {
    pub id: u64,
    pub state: Mutex<DeviceState>,
    pub arb: Mutex<Arbitration>,
    pub counters: Counters,
    /// BFRT programs, fixed tables and clients (see `crate::bfrt`).
    pub bfrt: Mutex<crate::bfrt::BfrtDevice>,
    /// Serialized write work under a latency profile (`crate::profile`).
    pub busy: crate::profile::BusyUntil,
}

impl Device {
    pub fn new(id: u64) -> Device {
        Device {
            id,
            state: Mutex::new(DeviceState::default()),
            arb: Mutex::new(Arbitration::default()),
            counters: Counters::default(),
            bfrt: Mutex::new(crate::bfrt::BfrtDevice::default()),
            busy: Default::default(),
        }
    }

    pub fn stats(&self) -> DeviceStats {
        let c = &self.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let mut s = DeviceStats {
            device_id: self.id,
            write_rpcs: get(&c.write_rpcs),
            read_rpcs: get(&c.read_rpcs),
            set_pipeline_rpcs: get(&c.set_pipeline_rpcs),
            get_pipeline_rpcs: get(&c.get_pipeline_rpcs),
            stream_channels: get(&c.stream_channels),
            inserts: get(&c.inserts),
            modifies: get(&c.modifies),
            deletes: get(&c.deletes),
            failed_updates: get(&c.failed_updates),
            entities_read: get(&c.entities_read),
            drift_deletes: get(&c.drift_deletes),
            primaries: self.arb.lock().expect("arb lock").primaries(),
            ..Default::default()
        };
        let state = self.state.lock().expect("state lock");
        if let Some(p) = &state.pipeline {
            s.pipeline_set = true;
            s.cookie = p.config.cookie.as_ref().map(|c| c.cookie);
            for (id, t) in &p.tables {
                s.entries += t.entries.len() as u64;
                s.tables.insert(id.to_string(), t.entries.len() as u64);
            }
        }
        drop(state);
        let bf = self.bfrt.lock().expect("bfrt lock");
        s.bfrt_programs = bf.programs.keys().cloned().collect();
        s.pipeline_set |= !bf.programs.is_empty();
        for (name, n) in bf.table_counts() {
            s.entries += n;
            s.tables.insert(name, n);
        }
        s
    }

    /// Drift helper: removes the entry with the key of `te`, bypassing
    /// arbitration. Returns whether an entry was removed.
    pub fn delete_entry(&self, te: &p4::TableEntry) -> Result<bool, UpdateError> {
        let mut state = self.state.lock().expect("state lock");
        let p = state
            .pipeline
            .as_mut()
            .ok_or_else(|| err(Code::FailedPrecondition, "no pipeline"))?;
        let table = p
            .schema
            .tables
            .get(&te.table_id)
            .ok_or_else(|| err(Code::NotFound, format!("unknown table {}", te.table_id)))?;
        let mut key = Vec::new();
        key_of(table, te, &mut key)?;
        let removed = p
            .tables
            .get_mut(&te.table_id)
            .expect("state per table")
            .entries
            .remove(key.as_slice())
            .is_some();
        if removed {
            self.counters.drift_deletes.fetch_add(1, Ordering::Relaxed);
        }
        Ok(removed)
    }

    /// Drift helper: removes up to `count` arbitrary entries of one table (or
    /// of all tables). Returns how many were removed.
    pub fn drop_entries(&self, table_id: Option<u32>, count: usize) -> usize {
        let mut state = self.state.lock().expect("state lock");
        let mut removed = 0;
        if let Some(p) = state.pipeline.as_mut() {
            let mut ids: Vec<u32> = p.tables.keys().copied().collect();
            ids.sort_unstable();
            for id in ids {
                if removed >= count {
                    break;
                }
                if table_id.is_some_and(|t| t != id) {
                    continue;
                }
                let entries = &mut p.tables.get_mut(&id).expect("listed").entries;
                let victims: Vec<Key> = entries.keys().take(count - removed).cloned().collect();
                for k in victims {
                    entries.remove(&k);
                    removed += 1;
                }
            }
        }
        drop(state);
        if removed < count {
            // BFRT programs (whose table ids are often the P4Info ones).
            removed += self
                .bfrt
                .lock()
                .expect("bfrt lock")
                .drop_entries(table_id, count - removed);
        }
        self.counters
            .drift_deletes
            .fetch_add(removed as u64, Ordering::Relaxed);
        removed
    }

    /// Drift helper: installs an entry bypassing arbitration (a "foreign"
    /// writer), with the usual validation.
    pub fn inject_entry(&self, te: p4::TableEntry) -> Result<(), UpdateError> {
        let mut state = self.state.lock().expect("state lock");
        let p = state
            .pipeline
            .as_mut()
            .ok_or_else(|| err(Code::FailedPrecondition, "no pipeline"))?;
        let update = p4::Update {
            r#type: Type::Insert as i32,
            entity: Some(p4::Entity {
                entity: Some(p4::entity::Entity::TableEntry(te)),
            }),
        }
        .encode_to_vec();
        p.apply(&update, &mut Vec::new(), &mut Scratch::default())
            .map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const INFO: &str = r#"
tables {
  preamble { id: 1 name: "t" }
  match_fields { id: 1 name: "a" bitwidth: 9 match_type: EXACT }
  match_fields { id: 2 name: "b" bitwidth: 32 match_type: LPM }
  match_fields { id: 3 name: "c" bitwidth: 8 match_type: TERNARY }
  action_refs { id: 10 }
  size: 0
}
actions { preamble { id: 10 name: "set" } params { id: 1 name: "p" bitwidth: 4 } }
"#;

    fn pipeline() -> Pipeline {
        let info = p4fleet_proto::p4info::parse_text(INFO).unwrap();
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
    fn mutated_updates_are_refused_or_applied_never_a_panic() {
        let mut p = pipeline();
        let mut key = Vec::new();
        // A small deterministic generator (no dependency): xorshift.
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
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
