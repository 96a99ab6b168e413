//! Borrowed views of BFRT Write requests (see `crate::wire`): a Write is
//! validated and applied straight from the request bytes. Pure; no I/O.

use crate::wire::{Reader, WireError, update_parts, value_pair};

/// The parts of a `bfrt_proto.WriteRequest` the emulator uses.
#[derive(Debug, Default)]
pub struct WriteView<'a> {
    pub device_id: u32,
    pub client_id: u32,
    pub atomicity: i32,
    pub p4_name: &'a str,
    /// Encoded `Update`s, in order.
    pub updates: Vec<&'a [u8]>,
}

fn utf8(b: &[u8]) -> Result<&str, WireError> {
    std::str::from_utf8(b).map_err(|_| WireError("string is not UTF-8"))
}

pub fn parse_write(buf: &[u8]) -> Result<WriteView<'_>, WireError> {
    let mut w = WriteView::default();
    let mut r = Reader::new(buf);
    while let Some((f, v)) = r.next_field()? {
        match f {
            1 => {
                let mut t = Reader::new(v.bytes()?);
                while let Some((tf, tv)) = t.next_field()? {
                    if tf == 1 {
                        w.device_id = tv.uint()? as u32;
                    }
                }
            }
            2 => w.client_id = v.uint()? as u32,
            3 => w.updates.push(v.bytes()?),
            4 => w.atomicity = v.int32()?,
            5 => w.p4_name = utf8(v.bytes()?)?,
            _ => {}
        }
    }
    Ok(w)
}

/// What an `Update`'s entity holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntityView<'a> {
    Missing,
    /// The encoded `TableEntry`.
    TableEntry(&'a [u8]),
    /// A `TableOperation` on this table id.
    TableOperation(u32),
    /// Another entity kind (its field number in `Entity`).
    Other(u32),
}

/// `(type, entity)` of one encoded BFRT `Update`.
pub fn parse_update(buf: &[u8]) -> Result<(i32, EntityView<'_>), WireError> {
    let (ty, entity) = update_parts(buf)?;
    let entity = match entity {
        None => EntityView::Missing,
        Some((1, v)) => EntityView::TableEntry(v.bytes()?),
        Some((4, v)) => {
            let mut table_id = 0;
            let mut o = Reader::new(v.bytes()?);
            while let Some((f, ov)) = o.next_field()? {
                if f == 1 {
                    table_id = ov.uint()? as u32;
                }
            }
            EntityView::TableOperation(table_id)
        }
        Some((f, _)) => EntityView::Other(f),
    };
    Ok((ty, entity))
}

/// One key field's match.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyMatch<'a> {
    Missing,
    Exact(&'a [u8]),
    Ternary(&'a [u8], &'a [u8]),
    Lpm(&'a [u8], i32),
    Range(&'a [u8], &'a [u8]),
    Optional(&'a [u8], bool),
}

impl KeyMatch<'_> {
    pub fn name(&self) -> &'static str {
        match self {
            KeyMatch::Missing => "nothing",
            KeyMatch::Exact(_) => "exact",
            KeyMatch::Ternary(..) => "ternary",
            KeyMatch::Lpm(..) => "lpm",
            KeyMatch::Range(..) => "range",
            KeyMatch::Optional(..) => "optional",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyView<'a> {
    pub field_id: u32,
    pub m: KeyMatch<'a>,
}

/// A `TableEntry`; its key fields are in the `keys` it was parsed with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EntryView<'a> {
    pub table_id: u32,
    /// Addressed by handle instead of key.
    pub by_handle: bool,
    /// The encoded `TableData`, if sent.
    pub data: Option<&'a [u8]>,
    pub is_default_entry: bool,
}

fn key_field(buf: &[u8]) -> Result<KeyView<'_>, WireError> {
    let mut out = KeyView {
        field_id: 0,
        m: KeyMatch::Missing,
    };
    let mut r = Reader::new(buf);
    while let Some((f, v)) = r.next_field()? {
        if f == 1 {
            out.field_id = v.uint()? as u32;
            continue;
        }
        if !(2..=6).contains(&f) {
            continue;
        }
        let (a, b, n) = value_pair(v.bytes()?)?;
        out.m = match f {
            2 => KeyMatch::Exact(a),
            3 => KeyMatch::Ternary(a, b),
            4 => KeyMatch::Lpm(a, n),
            5 => KeyMatch::Range(a, b),
            _ => KeyMatch::Optional(a, n != 0),
        };
    }
    Ok(out)
}

/// Parses an encoded `TableEntry`; its key fields replace `keys`.
pub fn parse_table_entry<'a>(
    buf: &'a [u8],
    keys: &mut Vec<KeyView<'a>>,
) -> Result<EntryView<'a>, WireError> {
    keys.clear();
    let mut e = EntryView {
        table_id: 0,
        by_handle: false,
        data: None,
        is_default_entry: false,
    };
    let mut r = Reader::new(buf);
    while let Some((f, v)) = r.next_field()? {
        match f {
            1 => e.table_id = v.uint()? as u32,
            2 => {
                keys.clear();
                e.by_handle = false;
                let mut k = Reader::new(v.bytes()?);
                while let Some((kf, kv)) = k.next_field()? {
                    if kf == 1 {
                        keys.push(key_field(kv.bytes()?)?);
                    }
                }
            }
            7 => {
                keys.clear();
                e.by_handle = true;
            }
            3 => e.data = Some(v.bytes()?),
            4 => e.is_default_entry = v.uint()? != 0,
            _ => {}
        }
    }
    Ok(e)
}

/// A data field's value kind (and bytes, for `stream`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DataValue<'a> {
    Missing,
    Stream(&'a [u8]),
    Float,
    Str,
    Bool,
    /// Arrays and containers.
    Other,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataView<'a> {
    pub field_id: u32,
    pub value: DataValue<'a>,
}

/// Parses an encoded `TableData`: returns its action id; its fields replace
/// `fields`.
pub fn parse_data<'a>(buf: &'a [u8], fields: &mut Vec<DataView<'a>>) -> Result<u32, WireError> {
    fields.clear();
    let mut action_id = 0;
    let mut r = Reader::new(buf);
    while let Some((f, v)) = r.next_field()? {
        match f {
            1 => action_id = v.uint()? as u32,
            2 => {
                let mut d = DataView {
                    field_id: 0,
                    value: DataValue::Missing,
                };
                let mut dr = Reader::new(v.bytes()?);
                while let Some((df, dv)) = dr.next_field()? {
                    d.value = match df {
                        1 => {
                            d.field_id = dv.uint()? as u32;
                            continue;
                        }
                        2 => DataValue::Stream(dv.bytes()?),
                        3 => DataValue::Float,
                        4 => {
                            utf8(dv.bytes()?)?;
                            DataValue::Str
                        }
                        8 => DataValue::Bool,
                        5..=7 | 9 => DataValue::Other,
                        _ => continue,
                    };
                }
                fields.push(d);
            }
            _ => {}
        }
    }
    Ok(action_id)
}

#[cfg(test)]
mod tests {
    use super::*;
    use p4fleet_proto::bfrt::{
        self, DataField, KeyField, TableData, data_field::Value as DValue, key_field,
        key_field::MatchType,
    };
    use prost::Message;

    fn entry() -> bfrt::TableEntry {
        let kf = |id, m| KeyField {
            field_id: id,
            match_type: Some(m),
        };
        bfrt::TableEntry {
            table_id: 5,
            value: Some(bfrt::table_entry::Value::Key(bfrt::TableKey {
                fields: vec![
                    kf(1, MatchType::Exact(key_field::Exact { value: vec![0, 1] })),
                    kf(
                        2,
                        MatchType::Ternary(key_field::Ternary {
                            value: vec![1],
                            mask: vec![3],
                        }),
                    ),
                    kf(
                        3,
                        MatchType::Lpm(key_field::Lpm {
                            value: vec![10, 0],
                            prefix_len: 9,
                        }),
                    ),
                    kf(
                        4,
                        MatchType::Range(key_field::Range {
                            low: vec![1],
                            high: vec![2],
                        }),
                    ),
                    kf(
                        5,
                        MatchType::Optional(key_field::Optional {
                            value: vec![7],
                            is_valid: true,
                        }),
                    ),
                ],
            })),
            data: Some(TableData {
                action_id: 9,
                fields: vec![
                    DataField {
                        field_id: 1,
                        value: Some(DValue::Stream(vec![0, 5])),
                    },
                    DataField {
                        field_id: 2,
                        value: Some(DValue::BoolVal(false)),
                    },
                    DataField {
                        field_id: 3,
                        value: Some(DValue::StrVal("x".into())),
                    },
                ],
            }),
            ..Default::default()
        }
    }

    #[test]
    fn views_match_prost() {
        let req = bfrt::WriteRequest {
            target: Some(bfrt::TargetDevice {
                device_id: 4,
                ..Default::default()
            }),
            client_id: 2,
            atomicity: 1,
            p4_name: "fw".into(),
            updates: vec![bfrt::Update {
                r#type: 5,
                entity: Some(bfrt::Entity {
                    entity: Some(bfrt::entity::Entity::TableEntry(entry())),
                }),
            }],
        };
        let bytes = req.encode_to_vec();
        let w = parse_write(&bytes).unwrap();
        assert_eq!(
            (w.device_id, w.client_id, w.atomicity, w.p4_name),
            (4, 2, 1, "fw")
        );
        let (ty, e) = parse_update(w.updates[0]).unwrap();
        assert_eq!(ty, 5);
        let EntityView::TableEntry(te) = e else {
            panic!("{e:?}")
        };
        let mut keys = Vec::new();
        let v = parse_table_entry(te, &mut keys).unwrap();
        assert_eq!(
            (v.table_id, v.by_handle, v.is_default_entry),
            (5, false, false)
        );
        assert_eq!(
            keys.iter().map(|k| k.m).collect::<Vec<_>>(),
            vec![
                KeyMatch::Exact(&[0, 1]),
                KeyMatch::Ternary(&[1], &[3]),
                KeyMatch::Lpm(&[10, 0], 9),
                KeyMatch::Range(&[1], &[2]),
                KeyMatch::Optional(&[7], true),
            ]
        );
        let data = v.data.unwrap();
        assert_eq!(data, entry().data.unwrap().encode_to_vec().as_slice());
        let mut fields = Vec::new();
        assert_eq!(parse_data(data, &mut fields).unwrap(), 9);
        assert_eq!(
            fields.iter().map(|f| f.value).collect::<Vec<_>>(),
            vec![DataValue::Stream(&[0, 5]), DataValue::Bool, DataValue::Str]
        );
    }

    #[test]
    fn table_operations_and_malformed_updates() {
        let u = bfrt::Update {
            r#type: 2,
            entity: Some(bfrt::Entity {
                entity: Some(bfrt::entity::Entity::TableOperation(bfrt::TableOperation {
                    table_id: 77,
                    table_operations_type: "Sync".into(),
                })),
            }),
        }
        .encode_to_vec();
        assert_eq!(
            parse_update(&u).unwrap(),
            (2, EntityView::TableOperation(77))
        );
        let mut keys = Vec::new();
        assert!(parse_table_entry(&[0x12, 4, 0x0a, 9], &mut keys).is_err());
        assert!(parse_write(&[0x2a, 1, 0xff]).is_err());
    }
}
