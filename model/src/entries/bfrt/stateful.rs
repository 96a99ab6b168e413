//! Direct counters and registers of a BFRT program in P4Runtime's terms,
//! so that the rest of p4fleet reads and writes them the same way on every
//! target. Pure translation, no I/O.
//!
//! bfrt.json gives a match table with a direct counter the table-level
//! data `$COUNTER_SPEC_BYTES` / `$COUNTER_SPEC_PKTS` (`uint64`, 8 bytes),
//! and a P4 register a table of type `Register` with the key
//! `$REGISTER_INDEX` (`uint32`) and the data field `<name>.f1`, which a
//! read returns once per pipe.

use p4fleet_proto::bfrt::{self, data_field, key_field};
use p4fleet_proto::p4info::P4Info;
use p4fleet_proto::p4runtime as p4rt;

use super::{BfrtInfo, BfrtTable, BfrtTableMap, to_canonical};
use crate::entries::error::EntryError;

pub const COUNTER_SPEC_BYTES: &str = "$COUNTER_SPEC_BYTES";
pub const COUNTER_SPEC_PKTS: &str = "$COUNTER_SPEC_PKTS";
pub const REGISTER_INDEX: &str = "$REGISTER_INDEX";

/// The data field ids of a table's direct counter (one is absent when the
/// counter's unit does not count it).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CounterIds {
    pub bytes: Option<u32>,
    pub packets: Option<u32>,
}

impl CounterIds {
    pub fn of(t: &BfrtTable) -> CounterIds {
        let id = |name: &str| t.data.iter().find(|d| d.name == name).map(|d| d.id);
        CounterIds {
            bytes: id(COUNTER_SPEC_BYTES),
            packets: id(COUNTER_SPEC_PKTS),
        }
    }

    pub fn any(&self) -> bool {
        self.bytes.is_some() || self.packets.is_some()
    }
}

/// A big-endian unsigned value of at most 8 bytes; longer ones saturate
/// (a counter is 64 bits).
fn be_u64(v: &[u8]) -> u64 {
    if v.len() > 8 && v[..v.len() - 8].iter().any(|b| *b != 0) {
        return u64::MAX;
    }
    v.iter().fold(0u64, |acc, b| acc << 8 | u64::from(*b))
}

fn stream_of(te: &bfrt::TableEntry, id: u32) -> Option<&[u8]> {
    te.data
        .as_ref()?
        .fields
        .iter()
        .find_map(|f| match &f.value {
            Some(data_field::Value::Stream(v)) if f.field_id == id => Some(v.as_slice()),
            _ => None,
        })
}

impl BfrtTableMap {
    /// Whether bfrt.json gives the table a direct counter.
    pub fn has_direct_counter(&self) -> bool {
        self.counter.any()
    }

    /// The counts of an entry read over BFRT, as P4Runtime's
    /// `CounterData` (`None`: the table has no direct counter).
    pub fn counter_data(&self, te: &bfrt::TableEntry) -> Option<p4rt::CounterData> {
        if !self.counter.any() {
            return None;
        }
        let count = |id: Option<u32>| {
            id.and_then(|id| stream_of(te, id))
                .map_or(0, |v| be_u64(v).min(i64::MAX as u64) as i64)
        };
        Some(p4rt::CounterData {
            byte_count: count(self.counter.bytes),
            packet_count: count(self.counter.packets),
        })
    }
}

/// One P4Info register and its bfrt.json `Register` table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BfrtRegister {
    pub p4_id: u32,
    pub name: String,
    pub bfrt_table_id: u32,
    pub index_id: u32,
    pub field_id: u32,
    pub width: u32,
    pub size: u64,
}

/// The registers of a program that bfrt.json has as `Register` tables
/// (matched by name: `pipe.MyIngress.r` is P4Info's `MyIngress.r`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BfrtRegisters(Vec<BfrtRegister>);

impl BfrtRegisters {
    pub fn new(p4info: &P4Info, info: &BfrtInfo) -> BfrtRegisters {
        let mut out = Vec::new();
        for r in &p4info.registers {
            let Some(p) = &r.preamble else { continue };
            let Some(t) = info
                .tables
                .iter()
                .find(|t| t.table_type == "Register" && t.p4_name() == p.name)
            else {
                continue;
            };
            let (Some(index), [field]) = (t.keys.first(), t.data.as_slice()) else {
                continue;
            };
            if index.name != REGISTER_INDEX || t.keys.len() != 1 {
                continue;
            }
            out.push(BfrtRegister {
                p4_id: p.id,
                name: p.name.clone(),
                bfrt_table_id: t.id,
                index_id: index.id,
                field_id: field.id,
                width: field.width,
                size: t.size,
            });
        }
        BfrtRegisters(out)
    }

    pub fn get(&self, p4_id: u32) -> Option<&BfrtRegister> {
        self.0.iter().find(|r| r.p4_id == p4_id)
    }

    pub fn by_bfrt_id(&self, bfrt_table_id: u32) -> Option<&BfrtRegister> {
        self.0.iter().find(|r| r.bfrt_table_id == bfrt_table_id)
    }
}

fn bad(msg: String) -> EntryError {
    EntryError::Unsupported(msg)
}

impl BfrtRegister {
    fn key(&self, index: u32) -> bfrt::table_entry::Value {
        bfrt::table_entry::Value::Key(bfrt::TableKey {
            fields: vec![bfrt::KeyField {
                field_id: self.index_id,
                match_type: Some(key_field::MatchType::Exact(key_field::Exact {
                    value: index.to_be_bytes().to_vec(),
                })),
            }],
        })
    }

    fn index(&self, r: &p4rt::RegisterEntry) -> Result<Option<u32>, EntryError> {
        let Some(i) = r.index.map(|i| i.index) else {
            return Ok(None);
        };
        if i < 0 || i as u64 >= self.size {
            return Err(bad(format!(
                "register {}: index {i} outside 0..{}",
                self.name, self.size
            )));
        }
        Ok(Some(i as u32))
    }

    /// The read filter of a register read (one cell, or every cell).
    pub fn filter(&self, r: &p4rt::RegisterEntry) -> Result<bfrt::TableEntry, EntryError> {
        Ok(bfrt::TableEntry {
            table_id: self.bfrt_table_id,
            value: self.index(r)?.map(|i| self.key(i)),
            ..Default::default()
        })
    }

    /// The BFRT cell write of a P4Runtime register write (no data: 0).
    pub fn write(&self, r: &p4rt::RegisterEntry) -> Result<bfrt::TableEntry, EntryError> {
        let index = self
            .index(r)?
            .ok_or_else(|| bad(format!("register {}: a write needs an index", self.name)))?;
        let value = match r.data.as_ref().and_then(|d| d.data.as_ref()) {
            None => Vec::new(),
            Some(p4rt::p4_data::Data::Bitstring(b)) => b.clone(),
            Some(_) => {
                return Err(bad(format!(
                    "register {}: only bitstring values map to BFRT",
                    self.name
                )));
            }
        };
        let nbytes = self.width.div_ceil(8) as usize;
        let first = value.iter().position(|b| *b != 0).unwrap_or(value.len());
        let significant = &value[first..];
        if significant.len() > nbytes
            || (significant.len() == nbytes
                && nbytes as u32 * 8 > self.width
                && significant[0] >> (self.width % 8) != 0)
        {
            return Err(bad(format!(
                "register {}: value does not fit in {} bits",
                self.name, self.width
            )));
        }
        let mut full = vec![0u8; nbytes - significant.len()];
        full.extend_from_slice(significant);
        Ok(bfrt::TableEntry {
            table_id: self.bfrt_table_id,
            value: Some(self.key(index)),
            data: Some(bfrt::TableData {
                action_id: 0,
                fields: vec![bfrt::DataField {
                    field_id: self.field_id,
                    value: Some(data_field::Value::Stream(full)),
                }],
            }),
            ..Default::default()
        })
    }

    /// A cell read over BFRT as P4Runtime's `RegisterEntry`: the value
    /// canonical when every pipe holds the same one; no data when pipes
    /// disagree (so it never equals a desired value and is written again).
    pub fn from_bfrt(&self, te: &bfrt::TableEntry) -> Option<p4rt::RegisterEntry> {
        let Some(bfrt::table_entry::Value::Key(k)) = &te.value else {
            return None;
        };
        let index = k.fields.iter().find_map(|f| match &f.match_type {
            Some(key_field::MatchType::Exact(e)) if f.field_id == self.index_id => {
                Some(be_u64(&e.value) as i64)
            }
            _ => None,
        })?;
        let values: Vec<&[u8]> = te
            .data
            .iter()
            .flat_map(|d| &d.fields)
            .filter(|f| f.field_id == self.field_id)
            .filter_map(|f| match &f.value {
                Some(data_field::Value::Stream(v)) => Some(v.as_slice()),
                _ => None,
            })
            .collect();
        let same = values.windows(2).all(|w| w[0] == w[1]);
        let data = match values.first() {
            Some(v) if same => Some(p4rt::P4Data {
                data: Some(p4rt::p4_data::Data::Bitstring(to_canonical(v))),
            }),
            _ => None,
        };
        Some(p4rt::RegisterEntry {
            register_id: self.p4_id,
            index: Some(p4rt::Index { index }),
            data,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const COUNTED_P4INFO: &str = include_str!("../../../../examples/counted/p4info.txt");
    const COUNTED_BFRT: &str = include_str!("../../../../examples/counted/bfrt.json");

    fn parts() -> (P4Info, BfrtInfo) {
        (
            p4fleet_proto::p4info::parse_text(COUNTED_P4INFO).unwrap(),
            BfrtInfo::parse(COUNTED_BFRT.as_bytes()).unwrap(),
        )
    }

    fn reg(index: i64, value: Option<Vec<u8>>) -> p4rt::RegisterEntry {
        p4rt::RegisterEntry {
            register_id: 383189205,
            index: Some(p4rt::Index { index }),
            data: value.map(|v| p4rt::P4Data {
                data: Some(p4rt::p4_data::Data::Bitstring(v)),
            }),
        }
    }

    #[test]
    fn registers_write_full_width_and_read_back_canonical() {
        let (p4info, info) = parts();
        let regs = BfrtRegisters::new(&p4info, &info);
        let r = regs.get(383189205).unwrap();
        assert_eq!((r.width, r.size, r.index_id), (32, 512, 65557));
        let w = r.write(&reg(7, Some(vec![0, 0xde, 0xad]))).unwrap();
        let d = &w.data.as_ref().unwrap().fields[0];
        assert_eq!(
            d.value,
            Some(data_field::Value::Stream(vec![0, 0, 0xde, 0xad]))
        );
        assert!(
            r.write(&reg(7, Some(vec![1, 0, 0, 0, 0]))).is_err(),
            "33 bits"
        );
        assert!(
            r.write(&reg(512, Some(vec![1]))).is_err(),
            "index 512 of 512"
        );

        // Read back from two pipes.
        let mut te = w.clone();
        te.data.as_mut().unwrap().fields.push(d.clone());
        let back = r.from_bfrt(&te).unwrap();
        assert_eq!(back, reg(7, Some(vec![0xde, 0xad])));
        // Pipes that disagree give no value.
        te.data.as_mut().unwrap().fields[1].value = Some(data_field::Value::Stream(vec![0; 4]));
        assert_eq!(r.from_bfrt(&te).unwrap().data, None);
    }

    #[test]
    fn direct_counter_fields_are_found_and_read() {
        let (p4info, info) = parts();
        let tables = crate::entries::TableSchema::all_from_p4info(&p4info).unwrap();
        let map = super::super::BfrtProgramMap::new(&tables, &info).unwrap();
        let dmac = map.table(44918510).unwrap();
        assert!(dmac.has_direct_counter());
        let te = bfrt::TableEntry {
            data: Some(bfrt::TableData {
                action_id: 25652968,
                fields: vec![
                    bfrt::DataField {
                        field_id: 65553,
                        value: Some(data_field::Value::Stream(640u64.to_be_bytes().to_vec())),
                    },
                    bfrt::DataField {
                        field_id: 65554,
                        value: Some(data_field::Value::Stream(10u64.to_be_bytes().to_vec())),
                    },
                ],
            }),
            ..Default::default()
        };
        assert_eq!(
            dmac.counter_data(&te),
            Some(p4rt::CounterData {
                byte_count: 640,
                packet_count: 10
            })
        );
        // The counter fields are not action data: the entry reads back
        // as `drop()`.
        let canonical = dmac.from_bfrt(&te).unwrap();
        let Some(p4rt::table_action::Type::Action(a)) = canonical.action.unwrap().r#type else {
            panic!()
        };
        assert!(a.params.is_empty());
    }
}
