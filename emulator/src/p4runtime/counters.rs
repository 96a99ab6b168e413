//! Indirect (`CounterEntry`) and direct (`DirectCounterEntry`) counters:
//! MODIFY sets or resets them, Read returns them per the P4Info unit
//! (a PACKETS counter reads `byte_count` 0). The data plane counts direct
//! counters' hits through the shared cells (`resources::CounterCell`).

use p4fleet_proto::p4runtime::{self as p4, entity::Entity, update::Type};
use tonic::Code;

use crate::p4runtime::pipeline::Pipeline;
use crate::p4runtime::resources::{
    ArrayInfo, Unit, direct_read_targets, direct_written, modify_only, read_cells, table_entry,
    written_cell,
};
use crate::update_error::{UpdateError, err};

/// `(packets, bytes)` a write sets: absent data resets to zero; negative
/// counts, and counts of what the unit does not count, are refused.
pub(crate) fn counts(
    data: &Option<p4::CounterData>,
    unit: Unit,
    what: &str,
) -> Result<(u64, u64), UpdateError> {
    let Some(d) = data else { return Ok((0, 0)) };
    if d.packet_count < 0 || d.byte_count < 0 {
        return Err(err(
            Code::InvalidArgument,
            format!("{what}: counts cannot be negative"),
        ));
    }
    if !unit.counts_packets() && d.packet_count != 0 {
        return Err(err(
            Code::InvalidArgument,
            format!("{what} counts bytes only: packet_count must be 0"),
        ));
    }
    if !unit.counts_bytes() && d.byte_count != 0 {
        return Err(err(
            Code::InvalidArgument,
            format!("{what} counts packets only: byte_count must be 0"),
        ));
    }
    Ok((d.packet_count as u64, d.byte_count as u64))
}

/// Counts as read back: only what the unit counts, saturated to `i64`.
pub(crate) fn data(packets: u64, bytes: u64, unit: Unit) -> p4::CounterData {
    let clamp = |v: u64| v.min(i64::MAX as u64) as i64;
    p4::CounterData {
        packet_count: if unit.counts_packets() {
            clamp(packets)
        } else {
            0
        },
        byte_count: if unit.counts_bytes() { clamp(bytes) } else { 0 },
    }
}

impl Pipeline {
    pub(crate) fn write_counter(
        &mut self,
        ty: Type,
        e: p4::CounterEntry,
    ) -> Result<(), UpdateError> {
        modify_only(ty, "counter entries")?;
        let counters = &self.schema.resources.counters;
        let (array, index) = written_cell(counters, e.counter_id, &e.index, "counter")?;
        let (packets, bytes) = counts(&e.data, array.unit, &format!("counter {}", array.name))?;
        let cells = self.resources.counters.entry(e.counter_id).or_default();
        if packets == 0 && bytes == 0 {
            cells.remove(&index);
        } else {
            cells.insert(index, (packets, bytes));
        }
        Ok(())
    }

    pub(crate) fn read_counters(
        &self,
        f: &p4::CounterEntry,
        emit: &mut dyn FnMut(Entity),
    ) -> Result<(), UpdateError> {
        let cell = |array: &ArrayInfo, i: i64| {
            let cells = self.resources.counters.get(&array.id);
            let (p, b) = cells.and_then(|c| c.get(&i)).copied().unwrap_or_default();
            Entity::CounterEntry(p4::CounterEntry {
                counter_id: array.id,
                index: Some(p4::Index { index: i }),
                data: Some(data(p, b, array.unit)),
            })
        };
        let counters = &self.schema.resources.counters;
        read_cells(counters, f.counter_id, &f.index, "counter", cell, emit)
    }

    pub(crate) fn write_direct_counter(
        &mut self,
        ty: Type,
        e: p4::DirectCounterEntry,
    ) -> Result<(), UpdateError> {
        modify_only(ty, "direct counter entries")?;
        let with = &self.schema.resources.direct_counters;
        let (table_id, key, info) = direct_written(self, with, &e.table_entry, "direct counter")?;
        let (packets, bytes) =
            counts(&e.data, info.unit, &format!("direct counter {}", info.name))?;
        let cell = self
            .resources
            .direct_counter(table_id, &key)
            .expect("every entry of a table with a direct counter has a cell");
        cell.store(packets, bytes);
        Ok(())
    }

    pub(crate) fn read_direct_counters(
        &self,
        f: &p4::DirectCounterEntry,
        emit: &mut dyn FnMut(Entity),
    ) -> Result<(), UpdateError> {
        let with = &self.schema.resources.direct_counters;
        direct_read_targets(
            self,
            with,
            &f.table_entry,
            "direct counter",
            &mut |t, key, stored| {
                let (p, b) = self
                    .resources
                    .direct_counter(t, key)
                    .map(|c| c.load())
                    .unwrap_or_default();
                emit(Entity::DirectCounterEntry(p4::DirectCounterEntry {
                    table_entry: Some(table_entry(stored)),
                    data: Some(data(p, b, with[&t].unit)),
                }));
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_follow_the_unit() {
        let d = |packet_count, byte_count| {
            Some(p4::CounterData {
                packet_count,
                byte_count,
            })
        };
        assert_eq!(counts(&None, Unit::Both, "c"), Ok((0, 0)));
        assert_eq!(counts(&d(3, 300), Unit::Both, "c"), Ok((3, 300)));
        assert_eq!(counts(&d(3, 0), Unit::Packets, "c"), Ok((3, 0)));
        assert_eq!(
            counts(&d(3, 1), Unit::Packets, "c").unwrap_err().code,
            Code::InvalidArgument
        );
        assert_eq!(
            counts(&d(1, 0), Unit::Bytes, "c").unwrap_err().code,
            Code::InvalidArgument
        );
        assert_eq!(
            counts(&d(-1, 0), Unit::Both, "c").unwrap_err().code,
            Code::InvalidArgument
        );
        assert_eq!(data(5, 500, Unit::Packets).byte_count, 0);
        assert_eq!(data(5, 500, Unit::Bytes).packet_count, 0);
        assert_eq!(data(u64::MAX, 1, Unit::Both).packet_count, i64::MAX);
    }
}
