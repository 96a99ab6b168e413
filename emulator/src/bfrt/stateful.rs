//! Counters, registers and meters in BFRT tables: a match table's direct
//! counter (the `$COUNTER_SPEC_BYTES` / `$COUNTER_SPEC_PKTS` data of each
//! entry) and indirect arrays (`Counter`, `Register`, `Meter` tables with
//! one `$..._INDEX` key). Pure logic on encoded `TableData`; the store
//! calls it for tables whose [`Stateful`] says so.
//!
//! Semantics follow BF Runtime: every array cell exists (an INSERT of a
//! cell is a MODIFY, a DELETE without key resets the table, a DELETE of
//! one cell is refused); a MODIFY of a match entry that leaves the counter
//! fields out keeps the counts; reads always return the counter fields,
//! and a register field once per pipe of the program.

use p4fleet_proto::bfrt::{DataField, TableData, data_field::Value};
use prost::Message;
use tonic::Code;

use super::schema::{ArrayKind, CounterFields, FieldType, TableDef};
use crate::update_error::{UpdateError, err};

fn decode(data: &[u8]) -> Result<TableData, UpdateError> {
    TableData::decode(data).map_err(|e| err(Code::InvalidArgument, format!("malformed data: {e}")))
}

fn stream(id: u32, v: Vec<u8>) -> DataField {
    DataField {
        field_id: id,
        value: Some(Value::Stream(v)),
    }
}

/// The value of field `id` in `data`, if it is a stream.
fn value_of(data: &TableData, id: u32) -> Option<&[u8]> {
    data.fields.iter().find_map(|f| match &f.value {
        Some(Value::Stream(v)) if f.field_id == id => Some(v.as_slice()),
        _ => None,
    })
}

/// The stored form of a match entry with a direct counter: the action's
/// fields as sent, then the counter fields: as sent, else the old entry's
/// counts (MODIFY keeps them), else zero (a new entry). Values were
/// checked against the schema (8-byte `uint64`) before.
pub fn counted_entry(
    c: CounterFields,
    sent: &[u8],
    old: Option<&[u8]>,
) -> Result<Vec<u8>, UpdateError> {
    let mut d = decode(sent)?;
    let old = old.map(decode).transpose()?;
    let mut out = TableData {
        action_id: d.action_id,
        fields: Vec::with_capacity(d.fields.len() + 2),
    };
    let mut sent_counts = Vec::new();
    for f in d.fields.drain(..) {
        if c.has(f.field_id) {
            sent_counts.push(f);
        } else {
            out.fields.push(f);
        }
    }
    for id in [c.bytes, c.packets].into_iter().flatten() {
        let given = sent_counts.iter().find_map(|f| match &f.value {
            Some(Value::Stream(v)) if f.field_id == id => Some(v.clone()),
            _ => None,
        });
        let kept = || {
            old.as_ref()
                .and_then(|o| value_of(o, id))
                .map(<[u8]>::to_vec)
        };
        out.fields.push(stream(
            id,
            given.or_else(kept).unwrap_or_else(|| vec![0; 8]),
        ));
    }
    Ok(out.encode_to_vec())
}

/// A cell's initial value for a field of `width` bits: counters and
/// registers start at zero, meters at the largest rate and burst (every
/// packet green, what bf-p4c writes as the fields' default).
fn initial_value(kind: ArrayKind, width: u32) -> Vec<u8> {
    let n = width.div_ceil(8) as usize;
    match kind {
        ArrayKind::Meter => {
            let mut v = vec![0xff; n];
            let spare = n as u32 * 8 - width;
            if spare > 0 {
                v[0] >>= spare;
            }
            v
        }
        ArrayKind::Counter(_) | ArrayKind::Register => vec![0; n],
    }
}

fn width(ty: FieldType) -> u32 {
    match ty {
        FieldType::Bytes { width } => width,
        _ => 64,
    }
}

/// The encoded data of a cell nobody wrote.
pub fn initial_cell(table: &TableDef, kind: ArrayKind) -> Vec<u8> {
    TableData {
        action_id: 0,
        fields: table
            .data
            .iter()
            .map(|d| stream(d.id, initial_value(kind, width(d.ty))))
            .collect(),
    }
    .encode_to_vec()
}

/// The cell index of an internal key (the one `uint32` index field).
pub fn index(key: &[u8]) -> u32 {
    u32::from_be_bytes([key[0], key[1], key[2], key[3]])
}

/// Checks `index` against the array's size.
pub fn check_index(table: &TableDef, kind: ArrayKind, index: u32) -> Result<(), UpdateError> {
    let size = table.size.unwrap_or(0);
    if index as usize >= size {
        return Err(err(
            Code::InvalidArgument,
            format!(
                "table {}: {} {index} is outside 0..{size}",
                table.name,
                kind.index_key()
            ),
        ));
    }
    Ok(())
}

/// The stored form of a written cell: every data field of the table in
/// bfrt.json order; a register needs all of them (they are mandatory),
/// counter and meter fields left out keep `old` (else the initial value).
pub fn cell(
    table: &TableDef,
    kind: ArrayKind,
    sent: &[u8],
    old: Option<&[u8]>,
) -> Result<Vec<u8>, UpdateError> {
    let d = decode(sent)?;
    let old = old.map(decode).transpose()?;
    let mut out = TableData {
        action_id: 0,
        fields: Vec::with_capacity(table.data.len()),
    };
    for def in &table.data {
        let v = match value_of(&d, def.id) {
            Some(v) => v.to_vec(),
            None if kind == ArrayKind::Register && def.mandatory => {
                return Err(err(
                    Code::InvalidArgument,
                    format!("table {}: missing data field {}", table.name, def.name),
                ));
            }
            None => old
                .as_ref()
                .and_then(|o| value_of(o, def.id))
                .map(<[u8]>::to_vec)
                .unwrap_or_else(|| initial_value(kind, width(def.ty))),
        };
        out.fields.push(stream(def.id, v));
    }
    Ok(out.encode_to_vec())
}

/// A stored cell as read: a register's fields once per pipe (`pipes`, at
/// least one), as bf_switchd returns them; other cells as stored.
pub fn cell_out(kind: ArrayKind, stored: &[u8], pipes: usize) -> Vec<u8> {
    if kind != ArrayKind::Register || pipes <= 1 {
        return stored.to_vec();
    }
    let Ok(d) = TableData::decode(stored) else {
        return stored.to_vec();
    };
    let mut out = TableData {
        action_id: d.action_id,
        fields: Vec::with_capacity(d.fields.len() * pipes),
    };
    for f in &d.fields {
        for _ in 0..pipes {
            out.fields.push(f.clone());
        }
    }
    out.encode_to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn u64f(id: u32, v: u64) -> DataField {
        stream(id, v.to_be_bytes().to_vec())
    }

    const C: CounterFields = CounterFields {
        bytes: Some(65553),
        packets: Some(65554),
    };

    #[test]
    fn modify_without_counts_keeps_them_and_insert_starts_at_zero() {
        let action = TableData {
            action_id: 7,
            fields: vec![stream(1, vec![0, 3])],
        };
        let new = TableData::decode(
            counted_entry(C, &action.encode_to_vec(), None)
                .unwrap()
                .as_slice(),
        )
        .unwrap();
        assert_eq!(new.fields[1..], [u64f(65553, 0), u64f(65554, 0)]);

        let mut with_counts = action.clone();
        with_counts.fields.push(u64f(65554, 9));
        let old = counted_entry(C, &with_counts.encode_to_vec(), None).unwrap();
        let kept = TableData::decode(
            counted_entry(C, &action.encode_to_vec(), Some(&old))
                .unwrap()
                .as_slice(),
        )
        .unwrap();
        assert_eq!(kept.action_id, 7);
        assert_eq!(
            kept.fields,
            [stream(1, vec![0, 3]), u64f(65553, 0), u64f(65554, 9)]
        );
    }

    #[test]
    fn registers_read_once_per_pipe() {
        let d = TableData {
            action_id: 0,
            fields: vec![stream(1, vec![0, 0, 0, 5])],
        }
        .encode_to_vec();
        let out = TableData::decode(cell_out(ArrayKind::Register, &d, 4).as_slice()).unwrap();
        assert_eq!(out.fields.len(), 4);
        assert!(out.fields.iter().all(|f| f == &stream(1, vec![0, 0, 0, 5])));
        assert_eq!(cell_out(ArrayKind::Counter(C), &d, 4), d);
        assert_eq!(initial_value(ArrayKind::Meter, 12), vec![0x0f, 0xff]);
    }
}
