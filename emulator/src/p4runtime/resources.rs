//! Counters, meters and registers of a P4Runtime pipeline: what the P4Info
//! declares ([`ResourceSchema`], checked when a pipeline is set), their
//! state ([`Resources`]) and the Write/Read dispatch of their entities to
//! `counters`, `meters` and `registers`. Pure logic; the caller holds the
//! device's pipeline lock.
//!
//! Indirect arrays are sparse (an index nobody wrote reads as zero, or as
//! "not configured" for a meter), so a P4Info `size` of millions costs
//! nothing until written. Direct counters and meters live beside the table
//! entries, keyed by the entry's canonical key: an INSERT starts them at
//! zero / unconfigured, a DELETE drops them (`on_insert`, `on_delete`).

use std::collections::HashMap;
use std::sync::Arc;

use p4fleet_proto::p4info::{self, P4Info, counter_spec, meter_spec, p4_bitstring_like_type_spec};
use p4fleet_proto::p4runtime::{self as p4, entity::Entity, update::Type};
use prost::Message;
use tonic::Code;

use crate::dataplane::hits::CounterCell;
use crate::key::{IdMap, Key};
use crate::p4runtime::pipeline::{Pipeline, key_of};
use crate::p4runtime::schema::{SchemaError, TableInfo};
use crate::update_error::{UpdateError, err};

/// What a counter (or a meter's statistics) counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    Packets,
    Bytes,
    Both,
}

impl Unit {
    pub fn counts_packets(self) -> bool {
        self != Unit::Bytes
    }

    pub fn counts_bytes(self) -> bool {
        self != Unit::Packets
    }
}

/// An indexed counter, meter or register array.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArrayInfo {
    pub id: u32,
    pub name: String,
    /// Valid indices are `0..size`.
    pub size: i64,
    pub unit: Unit,
    /// Registers only: the bitstring width of one cell.
    pub bitwidth: u32,
}

/// Adds a direct resource of `info.table_id`; a table has at most one of
/// each kind (`kinds`, e.g. "direct counters").
fn one_per_table(
    map: &mut IdMap<DirectInfo>,
    info: DirectInfo,
    kinds: &str,
) -> Result<(), SchemaError> {
    let table_id = info.table_id;
    match map.insert(table_id, info) {
        Some(_) => Err(SchemaError(format!("table id {table_id} has two {kinds}"))),
        None => Ok(()),
    }
}

/// A direct counter or meter: one per entry of `table_id`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirectInfo {
    pub id: u32,
    pub name: String,
    pub table_id: u32,
    pub unit: Unit,
}

/// The counters, meters and registers of a P4Info.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResourceSchema {
    pub counters: IdMap<ArrayInfo>,
    pub meters: IdMap<ArrayInfo>,
    pub registers: IdMap<ArrayInfo>,
    /// By table id.
    pub direct_counters: IdMap<DirectInfo>,
    /// By table id.
    pub direct_meters: IdMap<DirectInfo>,
}

fn name_of(pre: &Option<p4info::Preamble>) -> (u32, String) {
    let pre = pre.clone().unwrap_or_default();
    (pre.id, pre.name)
}

fn counter_unit(spec: &Option<p4info::CounterSpec>) -> Unit {
    match spec.as_ref().map(|s| s.unit()) {
        Some(counter_spec::Unit::Bytes) => Unit::Bytes,
        Some(counter_spec::Unit::Packets) => Unit::Packets,
        // UNSPECIFIED: count both, as a target without the hint would.
        _ => Unit::Both,
    }
}

fn meter_unit(spec: &Option<p4info::MeterSpec>) -> Unit {
    match spec.as_ref().map(|s| s.unit()) {
        Some(meter_spec::Unit::Bytes) => Unit::Bytes,
        _ => Unit::Packets,
    }
}

impl ResourceSchema {
    /// Reads and checks the P4Info's counters, meters and registers
    /// against its tables (ids unique and non-zero, sizes positive, direct
    /// resources on a known table, at most one of each kind per table,
    /// registers of `bit<W>`).
    pub fn from_p4info(
        info: &P4Info,
        tables: &IdMap<TableInfo>,
    ) -> Result<ResourceSchema, SchemaError> {
        let mut s = ResourceSchema::default();
        let mut ids: HashMap<u32, String> = HashMap::new();
        let mut claim = |id: u32, name: &str| {
            if id == 0 {
                return Err(SchemaError(format!("{name:?} has id 0")));
            }
            if let Some(prev) = ids.insert(id, name.to_string()) {
                return Err(SchemaError(format!("{name} and {prev} share the id {id}")));
            }
            Ok(())
        };
        let sized = |name: &str, size: i64| {
            if size <= 0 {
                return Err(SchemaError(format!("{name} has size {size}")));
            }
            Ok(size)
        };
        let direct = |kind: &str, name: &str, table_id: u32| {
            if !tables.contains_key(&table_id) {
                return Err(SchemaError(format!(
                    "{kind} {name} is on unknown table id {table_id}"
                )));
            }
            Ok(table_id)
        };
        // (preamble, size, unit, bitwidth) of each indexed array.
        let mut array = |pre: &Option<p4info::Preamble>, size: i64, unit, bitwidth| {
            let (id, name) = name_of(pre);
            claim(id, &name)?;
            let size = sized(&name, size)?;
            Ok::<_, SchemaError>(ArrayInfo {
                id,
                name,
                size,
                unit,
                bitwidth,
            })
        };
        for c in &info.counters {
            let a = array(&c.preamble, c.size, counter_unit(&c.spec), 0)?;
            s.counters.insert(a.id, a);
        }
        for m in &info.meters {
            let a = array(&m.preamble, m.size, meter_unit(&m.spec), 0)?;
            s.meters.insert(a.id, a);
        }
        for r in &info.registers {
            let (_, name) = name_of(&r.preamble);
            let bitwidth = register_width(r)
                .ok_or_else(|| SchemaError(format!("register {name} is not of type bit<W>")))?;
            let a = array(&r.preamble, r.size.into(), Unit::Both, bitwidth)?;
            s.registers.insert(a.id, a);
        }
        // (preamble, kind, table, unit) of each direct resource.
        let mut direct_info = |pre: &Option<p4info::Preamble>, kind: &str, table, unit| {
            let (id, name) = name_of(pre);
            claim(id, &name)?;
            let table_id = direct(kind, &name, table)?;
            Ok::<_, SchemaError>(DirectInfo {
                id,
                name,
                table_id,
                unit,
            })
        };
        for c in &info.direct_counters {
            let unit = counter_unit(&c.spec);
            let d = direct_info(&c.preamble, "direct counter", c.direct_table_id, unit)?;
            one_per_table(&mut s.direct_counters, d, "direct counters")?;
        }
        for m in &info.direct_meters {
            let unit = meter_unit(&m.spec);
            let d = direct_info(&m.preamble, "direct meter", m.direct_table_id, unit)?;
            one_per_table(&mut s.direct_meters, d, "direct meters")?;
        }
        Ok(s)
    }
}

/// `W` of a register of type `bit<W>` (or `int<W>`, same bytes).
fn register_width(r: &p4info::Register) -> Option<u32> {
    use p4fleet_proto::p4info::p4_data_type_spec::TypeSpec;
    let TypeSpec::Bitstring(b) = r.type_spec.as_ref()?.type_spec.as_ref()? else {
        return None;
    };
    let w = match b.type_spec.as_ref()? {
        p4_bitstring_like_type_spec::TypeSpec::Bit(b) => b.bitwidth,
        p4_bitstring_like_type_spec::TypeSpec::Int(i) => i.bitwidth,
        p4_bitstring_like_type_spec::TypeSpec::Varbit(_) => return None,
    };
    (w > 0).then_some(w as u32)
}

/// The direct counters and meters of one table's entries.
#[derive(Default)]
pub(crate) struct DirectState {
    /// `Some` when the table has a direct counter: one cell per entry.
    pub counters: Option<HashMap<Key, Arc<CounterCell>>>,
    /// Configured meters only; an entry without one is unmetered.
    pub meters: HashMap<Key, p4::MeterConfig>,
}

/// Counter, meter and register state of one committed pipeline.
#[derive(Default)]
pub(crate) struct Resources {
    /// Counter id -> index -> (packets, bytes).
    pub counters: IdMap<HashMap<i64, (u64, u64)>>,
    /// Meter id -> index -> config.
    pub meters: IdMap<HashMap<i64, p4::MeterConfig>>,
    /// Register id -> index -> canonical value.
    pub registers: IdMap<HashMap<i64, Vec<u8>>>,
    /// Table id -> its entries' direct resources (tables that have some).
    pub direct: IdMap<DirectState>,
}

impl Resources {
    pub fn new(schema: &ResourceSchema) -> Resources {
        let mut direct: IdMap<DirectState> = IdMap::default();
        for t in schema.direct_counters.keys() {
            direct.entry(*t).or_default().counters = Some(HashMap::new());
        }
        for t in schema.direct_meters.keys() {
            direct.entry(*t).or_default();
        }
        Resources {
            direct,
            ..Resources::default()
        }
    }

    /// `table_id`'s direct resources, if it has any (no lookup at all while
    /// no table has: the common case on the write path).
    #[inline]
    fn direct_mut(&mut self, table_id: u32) -> Option<&mut DirectState> {
        if self.direct.is_empty() {
            return None;
        }
        self.direct.get_mut(&table_id)
    }

    /// An entry was inserted: its direct counter starts at zero, its meter
    /// unconfigured (also when a key comes back after a delete).
    #[inline]
    pub fn on_insert(&mut self, table_id: u32, key: &[u8]) {
        if let Some(d) = self.direct_mut(table_id) {
            if let Some(c) = &mut d.counters {
                c.insert(Key::new(key), Arc::default());
            }
            d.meters.remove(key);
        }
    }

    /// An entry was deleted: its direct resources go with it.
    #[inline]
    pub fn on_delete(&mut self, table_id: u32, key: &[u8]) {
        if let Some(d) = self.direct_mut(table_id) {
            if let Some(c) = &mut d.counters {
                c.remove(key);
            }
            d.meters.remove(key);
        }
    }

    /// RECONCILE_AND_COMMIT kept table `table_id` with the entries `keys`:
    /// as on a device, its entries keep their direct counts and meter
    /// configs (`old`: the table's state in the old pipeline) where the
    /// new pipeline still has a direct counter or meter on it (`metered`);
    /// a kept entry the old pipeline did not count starts at zero.
    pub fn carry_direct<'k>(
        &mut self,
        table_id: u32,
        old: Option<DirectState>,
        metered: bool,
        keys: impl Iterator<Item = &'k Key>,
    ) {
        let Some(d) = self.direct.get_mut(&table_id) else {
            return;
        };
        let old = old.unwrap_or_default();
        if let Some(c) = &mut d.counters {
            *c = old.counters.unwrap_or_default();
            for k in keys {
                c.entry(k.clone()).or_default();
            }
        }
        if metered {
            d.meters = old.meters;
        }
    }

    /// The direct counter cell of one entry (for the data plane).
    pub fn direct_counter(&self, table_id: u32, key: &[u8]) -> Option<Arc<CounterCell>> {
        self.direct
            .get(&table_id)?
            .counters
            .as_ref()?
            .get(key)
            .cloned()
    }
}

/// Checks an `Index` against an array: `Ok(None)` for "every index" (read
/// wildcards), an error naming the array when out of range.
pub(crate) fn index_of(
    index: &Option<p4::Index>,
    array: &ArrayInfo,
    kind: &str,
) -> Result<Option<i64>, UpdateError> {
    let Some(i) = index else { return Ok(None) };
    if i.index < 0 || i.index >= array.size {
        return Err(err(
            Code::OutOfRange,
            format!(
                "{kind} {}: index {} outside 0..{}",
                array.name, i.index, array.size
            ),
        ));
    }
    Ok(Some(i.index))
}

/// The array with id `id` (`0` = all, in id order) of `arrays`.
pub(crate) fn arrays_of<'a>(
    arrays: &'a IdMap<ArrayInfo>,
    id: u32,
    kind: &str,
) -> Result<Vec<&'a ArrayInfo>, UpdateError> {
    if id == 0 {
        let mut all: Vec<&ArrayInfo> = arrays.values().collect();
        all.sort_unstable_by_key(|a| a.id);
        return Ok(all);
    }
    arrays
        .get(&id)
        .map(|a| vec![a])
        .ok_or_else(|| err(Code::NotFound, format!("unknown {kind} id {id}")))
}

/// The array and index a write of one cell names: the array must exist and
/// the index be given and in range.
pub(crate) fn written_cell<'a>(
    arrays: &'a IdMap<ArrayInfo>,
    id: u32,
    index: &Option<p4::Index>,
    kind: &str,
) -> Result<(&'a ArrayInfo, i64), UpdateError> {
    let array = arrays
        .get(&id)
        .ok_or_else(|| err(Code::NotFound, format!("unknown {kind} id {id}")))?;
    let index = index_of(index, array, kind)?.ok_or_else(|| {
        err(
            Code::InvalidArgument,
            format!("{kind} {}: a write needs an index", array.name),
        )
    })?;
    Ok((array, index))
}

/// Emits `cell(array, index)` for each cell a read names: one index, or
/// every index, of array `id` or (`0`) of every array.
pub(crate) fn read_cells(
    arrays: &IdMap<ArrayInfo>,
    id: u32,
    index: &Option<p4::Index>,
    kind: &str,
    cell: impl Fn(&ArrayInfo, i64) -> Entity,
    emit: &mut dyn FnMut(Entity),
) -> Result<(), UpdateError> {
    for array in arrays_of(arrays, id, kind)? {
        match index_of(index, array, kind)? {
            Some(i) => emit(cell(array, i)),
            None => (0..array.size).for_each(|i| emit(cell(array, i))),
        }
    }
    Ok(())
}

/// Only MODIFY writes counters, meters and registers (P4Runtime spec:
/// their cells exist as long as the pipeline does).
pub(crate) fn modify_only(ty: Type, kind: &str) -> Result<(), UpdateError> {
    if ty != Type::Modify {
        return Err(err(
            Code::InvalidArgument,
            format!("{kind} can only be modified, not {}", ty.as_str_name()),
        ));
    }
    Ok(())
}

/// The table and canonical key a direct resource's `table_entry` names,
/// for a write: the table must have the resource and the entry must exist.
pub(crate) fn direct_target(
    p: &Pipeline,
    te: &Option<p4::TableEntry>,
    kind: &str,
) -> Result<(u32, Vec<u8>), UpdateError> {
    let te = te
        .as_ref()
        .ok_or_else(|| err(Code::InvalidArgument, format!("{kind} has no table_entry")))?;
    let table = p
        .table(te.table_id)
        .ok_or_else(|| err(Code::NotFound, format!("unknown table id {}", te.table_id)))?;
    if te.is_default_action {
        return Err(err(
            Code::Unimplemented,
            format!(
                "table {}: the default entry's {kind} is not emulated",
                table.info.name
            ),
        ));
    }
    let mut key = Vec::new();
    key_of(table.info, te, &mut key)?;
    if table.get(&key).is_none() {
        return Err(err(
            Code::NotFound,
            format!("table {}: no such entry", table.info.name),
        ));
    }
    Ok((te.table_id, key))
}

/// The table, canonical key and resource a write of a direct resource
/// names: as [`direct_target`], and the table must have the resource.
pub(crate) fn direct_written<'a>(
    p: &Pipeline,
    with: &'a IdMap<DirectInfo>,
    te: &Option<p4::TableEntry>,
    kind: &str,
) -> Result<(u32, Vec<u8>, &'a DirectInfo), UpdateError> {
    let (table_id, key) = direct_target(p, te, kind)?;
    let info = with.get(&table_id).ok_or_else(|| {
        err(
            Code::InvalidArgument,
            format!("table id {table_id} has no {kind}"),
        )
    })?;
    Ok((table_id, key, info))
}

/// Receives `(table id, canonical key, stored entry)` of each entry a
/// direct resource read names.
pub(crate) type DirectEmit<'a, 'f> = dyn FnMut(u32, &[u8], &'a [u8]) + 'f;

/// The entries a direct resource read names: `(table, key, stored entry)`
/// for the one entry of a full key, or every entry of the table (of every
/// table with the resource when `table_id` is 0).
pub(crate) fn direct_read_targets<'a>(
    p: &'a Pipeline,
    with: &IdMap<DirectInfo>,
    te: &Option<p4::TableEntry>,
    kind: &str,
    emit: &mut DirectEmit<'a, '_>,
) -> Result<(), UpdateError> {
    let filter = te.clone().unwrap_or_default();
    let mut ids: Vec<u32> = if filter.table_id == 0 {
        with.keys().copied().collect()
    } else if with.contains_key(&filter.table_id) {
        vec![filter.table_id]
    } else if p.table(filter.table_id).is_some() {
        return Err(err(
            Code::InvalidArgument,
            format!("table id {} has no {kind}", filter.table_id),
        ));
    } else {
        return Err(err(
            Code::NotFound,
            format!("unknown table id {}", filter.table_id),
        ));
    };
    ids.sort_unstable();
    for id in ids {
        let table = p.table(id).expect("direct resources are on known tables");
        if filter.table_id != 0 && !filter.r#match.is_empty() {
            let mut key = Vec::new();
            key_of(table.info, &filter, &mut key)?;
            if let Some(e) = table.get(&key) {
                emit(id, &key, e);
            }
        } else {
            for (k, e) in table.entries() {
                emit(id, k, e);
            }
        }
    }
    Ok(())
}

/// The stored entry as the `table_entry` of a read answer (its key and
/// action, as a table entry read returns them).
pub(crate) fn table_entry(stored: &[u8]) -> p4::TableEntry {
    p4::TableEntry::decode(stored).expect("stored entries are valid")
}

impl Pipeline {
    /// Applies one decoded counter, meter or register update.
    pub(crate) fn apply_resource(&mut self, ty: Type, entity: Entity) -> Result<Type, UpdateError> {
        match entity {
            Entity::CounterEntry(e) => self.write_counter(ty, e),
            Entity::DirectCounterEntry(e) => self.write_direct_counter(ty, e),
            Entity::MeterEntry(e) => self.write_meter(ty, e),
            Entity::DirectMeterEntry(e) => self.write_direct_meter(ty, e),
            Entity::RegisterEntry(e) => self.write_register(ty, e),
            Entity::DigestEntry(e) => self.digests.write(ty, e),
            _ => Err(err(
                Code::Unimplemented,
                "this entity kind is not emulated (table entries, counters, meters and registers are)",
            )),
        }?;
        Ok(ty)
    }

    /// Reads counter, meter or register entities matching `filter`; `None`
    /// when `filter` is not one of those kinds.
    pub(crate) fn read_resource(
        &self,
        filter: &Entity,
        emit: &mut dyn FnMut(Entity),
    ) -> Option<Result<(), UpdateError>> {
        Some(match filter {
            Entity::CounterEntry(f) => self.read_counters(f, emit),
            Entity::DirectCounterEntry(f) => self.read_direct_counters(f, emit),
            Entity::MeterEntry(f) => self.read_meters(f, emit),
            Entity::DirectMeterEntry(f) => self.read_direct_meters(f, emit),
            Entity::RegisterEntry(f) => self.read_registers(f, emit),
            Entity::DigestEntry(f) => self.digests.read(f.digest_id).map(|entries| {
                for e in entries {
                    emit(Entity::DigestEntry(e));
                }
            }),
            _ => return None,
        })
    }
}

/// Appends one encoded `Entity` to a `ReadResponse` being built (a
/// `ReadResponse` of one entity is exactly that field).
pub(crate) fn push_entity(out: &mut Vec<u8>, entity: Entity) {
    p4::ReadResponse {
        entities: vec![p4::Entity {
            entity: Some(entity),
        }],
    }
    .encode(out)
    .expect("a Vec grows");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::p4runtime::schema::Schema;

    #[test]
    fn the_fabric_example_resources_load() {
        let text = include_str!("../../../examples/fabric/p4info.txt");
        let info = p4fleet_proto::p4info::parse_text(text).unwrap();
        let r = Schema::from_p4info(&info).unwrap().resources;
        assert_eq!(r.counters[&318731500].size, 512);
        assert_eq!(
            r.direct_counters[&35786901].name,
            "MyIngress.l2_fwd_counter"
        );
        assert_eq!(r.meters[&350933998].unit, Unit::Packets);
        assert_eq!(r.direct_meters[&37519123].unit, Unit::Bytes);
        assert_eq!(r.registers[&383189205].bitwidth, 32);

        // A register that is not bit<W>, or a direct counter on no table,
        // is refused when the pipeline is set.
        let mut bad = info.clone();
        bad.registers[0].type_spec = None;
        assert!(Schema::from_p4info(&bad).is_err());
        let mut bad = info;
        bad.direct_counters[0].direct_table_id = 1;
        let e = Schema::from_p4info(&bad).unwrap_err();
        assert!(e.0.contains("unknown table id 1"), "{e}");
    }
}
