//! Drift helpers: changes made behind the clients' backs (an entry
//! deleted, entries dropped, a foreign writer's insert), for tests that
//! check that the operator notices and repairs them. Off the hot path.

use std::sync::atomic::Ordering;

use p4fleet_proto::p4runtime::{self as p4, update::Type};
use prost::Message;
use tonic::Code;

use crate::device::Device;
use crate::key::{Entries, IdMap, Key};
use crate::p4runtime::action_profile;
use crate::p4runtime::pipeline::key_of;
use crate::p4runtime::wire::Scratch;
use crate::update_error::{UpdateError, err};
use crate::{Emulator, EmulatorError};

impl Device {
    /// Drift helper: removes the entry with the key of `te`, bypassing
    /// arbitration. Returns whether an entry was removed.
    pub fn delete_entry(&self, te: &p4::TableEntry) -> Result<bool, UpdateError> {
        let mut state = self.p4runtime.pipeline.lock().expect("pipeline lock");
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
        let state = p.tables.get_mut(&te.table_id).expect("state per table");
        let old = state.entries.remove(key.as_slice());
        let removed = old.is_some();
        if let Some(old) = old {
            // An entry gone without a DELETE still lets go of its member
            // or group (or they could never be deleted again).
            action_profile::release_entry(&mut p.profiles, table, &old);
        }
        if removed {
            state.touch();
            self.counters.drift_deletes.fetch_add(1, Ordering::Relaxed);
        }
        Ok(removed)
    }

    /// Drift helper: removes up to `count` arbitrary entries of one table (or
    /// of all tables). Returns how many were removed.
    pub fn drop_entries(&self, table_id: Option<u32>, count: usize) -> usize {
        let mut state = self.p4runtime.pipeline.lock().expect("pipeline lock");
        let mut removed = 0;
        if let Some(p) = state.pipeline.as_mut() {
            // Every table it may take entries from counts as changed.
            let (schema, profiles) = (&p.schema, &mut p.profiles);
            removed = drop_from_tables(
                &mut p.tables,
                |t| {
                    t.touch();
                    &mut t.entries
                },
                table_id,
                count,
                |id, old| {
                    if let Some(table) = schema.tables.get(&id) {
                        action_profile::release_entry(profiles, table, old);
                    }
                },
            );
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
        let mut state = self.p4runtime.pipeline.lock().expect("pipeline lock");
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

/// Removes up to `count` arbitrary entries from `tables` (all of them, or
/// only `table_id`), in table id order; `entries` picks a table's entry
/// map. Returns how many were removed. Shared by both front ends' stores.
pub(crate) fn drop_from_tables<T>(
    tables: &mut IdMap<T>,
    entries: impl Fn(&mut T) -> &mut Entries,
    table_id: Option<u32>,
    count: usize,
    mut on_removed: impl FnMut(u32, &[u8]),
) -> usize {
    let mut removed = 0;
    let mut ids: Vec<u32> = tables.keys().copied().collect();
    ids.sort_unstable();
    for id in ids {
        if removed >= count {
            break;
        }
        if table_id.is_some_and(|t| t != id) {
            continue;
        }
        let entries = entries(tables.get_mut(&id).expect("listed"));
        let victims: Vec<Key> = entries.keys().take(count - removed).cloned().collect();
        for k in victims {
            if let Some(old) = entries.remove(&k) {
                on_removed(id, &old);
            }
            removed += 1;
        }
    }
    removed
}

impl Emulator {
    /// Drift helper for BFRT: applies one update to program `p4_name` of a
    /// device behind the clients' backs (validated, no binding needed), e.g.
    /// a DELETE of one entry or a foreign INSERT.
    pub fn bfrt_apply(
        &self,
        device_id: u64,
        p4_name: &str,
        ty: p4fleet_proto::bfrt::update::Type,
        entry: p4fleet_proto::bfrt::TableEntry,
    ) -> Result<(), EmulatorError> {
        let dev = self.device(device_id)?;
        let mut bf = dev.bfrt.lock().expect("bfrt lock");
        let p = bf
            .programs
            .get_mut(p4_name)
            .ok_or_else(|| EmulatorError::BfrtProgram(format!("{p4_name} is not loaded")))?;
        let applied = p.apply_entry(ty, entry, None)?;
        if let crate::bfrt::Applied::Delete(n) = applied {
            dev.counters.drift_deletes.fetch_add(n, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Drift helper: deletes the entry with the key (table, match, priority)
    /// of `entry` behind the controller's back. Returns whether it existed.
    pub fn delete_entry(
        &self,
        device_id: u64,
        entry: &p4::TableEntry,
    ) -> Result<bool, EmulatorError> {
        Ok(self.device(device_id)?.delete_entry(entry)?)
    }

    /// Drift helper: deletes up to `count` arbitrary entries of `table_id`
    /// (all tables if `None`). Returns how many were deleted.
    pub fn drop_entries(
        &self,
        device_id: u64,
        table_id: Option<u32>,
        count: usize,
    ) -> Result<usize, EmulatorError> {
        Ok(self.device(device_id)?.drop_entries(table_id, count))
    }

    /// Drift helper: inserts an entry as a foreign writer would (validated,
    /// no arbitration).
    pub fn inject_entry(&self, device_id: u64, entry: p4::TableEntry) -> Result<(), EmulatorError> {
        Ok(self.device(device_id)?.inject_entry(entry)?)
    }
}
