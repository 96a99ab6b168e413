//! Borrowed views of P4Runtime Write requests and table entries (see
//! `crate::wire`): a Write is validated and applied straight from the
//! request bytes, and Read responses are written from the stored bytes.
//! Pure; no I/O.

use crate::wire::{Reader, WireError, put_bytes, put_varint, update_parts, value_pair, varint_len};

/// The parts of a P4Runtime `WriteRequest` the emulator uses; `updates`
/// are the encoded `Update` messages, in order.
#[derive(Debug, Default)]
pub struct WriteView<'a> {
    pub device_id: u64,
    pub role: &'a str,
    pub election_id: Option<u128>,
    pub atomicity: i32,
    pub updates: Vec<&'a [u8]>,
}

fn uint128(b: &[u8]) -> Result<u128, WireError> {
    let (mut high, mut low) = (0u64, 0u64);
    let mut r = Reader::new(b);
    while let Some((f, v)) = r.next_field()? {
        match f {
            1 => high = v.uint()?,
            2 => low = v.uint()?,
            _ => {}
        }
    }
    Ok((u128::from(high) << 64) | u128::from(low))
}

pub fn parse_write(buf: &[u8]) -> Result<WriteView<'_>, WireError> {
    let mut w = WriteView::default();
    let mut r = Reader::new(buf);
    while let Some((f, v)) = r.next_field()? {
        match f {
            1 => w.device_id = v.uint()?,
            3 => w.election_id = Some(uint128(v.bytes()?)?),
            4 => w.updates.push(v.bytes()?),
            5 => w.atomicity = v.int32()?,
            6 => {
                w.role =
                    std::str::from_utf8(v.bytes()?).map_err(|_| WireError("role is not UTF-8"))?
            }
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
    /// Any other entity kind (by its field number in `Entity`).
    Other(u32),
}

/// `(type, entity)` of one encoded P4Runtime `Update`.
pub fn parse_update(buf: &[u8]) -> Result<(i32, EntityView<'_>), WireError> {
    let (ty, entity) = update_parts(buf)?;
    let entity = match entity {
        None => EntityView::Missing,
        Some((2, v)) => EntityView::TableEntry(v.bytes()?),
        Some((f, _)) => EntityView::Other(f),
    };
    Ok((ty, entity))
}

/// One `FieldMatch`'s value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MatchView<'a> {
    /// No match type set.
    Missing,
    Exact(&'a [u8]),
    Lpm(&'a [u8], i32),
    Ternary(&'a [u8], &'a [u8]),
    Range(&'a [u8], &'a [u8]),
    Optional(&'a [u8]),
    /// The architecture-specific `other` match.
    Other,
}

impl MatchView<'_> {
    pub fn name(&self) -> &'static str {
        match self {
            MatchView::Missing => "nothing",
            MatchView::Exact(_) => "exact",
            MatchView::Lpm(..) => "lpm",
            MatchView::Ternary(..) => "ternary",
            MatchView::Range(..) => "range",
            MatchView::Optional(_) => "optional",
            MatchView::Other => "other",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FieldView<'a> {
    pub field_id: u32,
    pub m: MatchView<'a>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParamView<'a> {
    pub param_id: u32,
    pub value: &'a [u8],
}

/// A `TableAction`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ActionView {
    Missing,
    /// A direct action; its params are in [`Scratch::params`].
    Direct {
        action_id: u32,
    },
    /// An action profile member, group or action set.
    Profile,
}

/// The scalar parts of a `TableEntry`; its match fields and action params
/// are in the [`Scratch`] it was parsed with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TableEntryView {
    pub table_id: u32,
    pub priority: i32,
    pub is_default_action: bool,
    pub action: ActionView,
    pub idle_timeout_ns: i64,
}

/// Reusable buffers for the match fields and params of the entry parsed
/// last, so parsing many entries allocates once.
#[derive(Debug, Default)]
pub struct Scratch<'a> {
    pub matches: Vec<FieldView<'a>>,
    pub params: Vec<ParamView<'a>>,
    /// The encoded `TableAction` when it names an action profile member,
    /// group or action set.
    pub profile_action: Option<&'a [u8]>,
}

impl Scratch<'_> {
    /// Whether every byte string of the entry is already in P4Runtime's
    /// canonical form (no leading zero bytes, at least one byte), so the
    /// entry can be stored as it came.
    pub fn canonical(&self) -> bool {
        let c = |v: &[u8]| v.len() == 1 || v.first().is_some_and(|b| *b != 0);
        self.matches.iter().all(|f| match f.m {
            MatchView::Exact(v) | MatchView::Lpm(v, _) | MatchView::Optional(v) => c(v),
            MatchView::Ternary(a, b) | MatchView::Range(a, b) => c(a) && c(b),
            MatchView::Missing | MatchView::Other => true,
        }) && self.params.iter().all(|p| c(p.value))
            && self.profile_action.is_none()
    }
}

fn field_match(buf: &[u8]) -> Result<FieldView<'_>, WireError> {
    let mut out = FieldView {
        field_id: 0,
        m: MatchView::Missing,
    };
    let mut r = Reader::new(buf);
    while let Some((f, v)) = r.next_field()? {
        out.m = match f {
            1 => {
                out.field_id = v.uint()? as u32;
                continue;
            }
            2 => MatchView::Exact(value_pair(v.bytes()?)?.0),
            3 => {
                let (a, b, _) = value_pair(v.bytes()?)?;
                MatchView::Ternary(a, b)
            }
            4 => {
                let (a, _, n) = value_pair(v.bytes()?)?;
                MatchView::Lpm(a, n)
            }
            6 => {
                let (a, b, _) = value_pair(v.bytes()?)?;
                MatchView::Range(a, b)
            }
            7 => MatchView::Optional(value_pair(v.bytes()?)?.0),
            100 => MatchView::Other,
            _ => continue,
        };
    }
    Ok(out)
}

fn action<'a>(buf: &'a [u8], params: &mut Vec<ParamView<'a>>) -> Result<u32, WireError> {
    let mut action_id = 0;
    let mut r = Reader::new(buf);
    while let Some((f, v)) = r.next_field()? {
        match f {
            1 => action_id = v.uint()? as u32,
            4 => {
                let mut p = ParamView {
                    param_id: 0,
                    value: &[],
                };
                let mut pr = Reader::new(v.bytes()?);
                while let Some((pf, pv)) = pr.next_field()? {
                    match pf {
                        2 => p.param_id = pv.uint()? as u32,
                        3 => p.value = pv.bytes()?,
                        _ => {}
                    }
                }
                params.push(p);
            }
            _ => {}
        }
    }
    Ok(action_id)
}

/// Parses an encoded `TableEntry`; its match fields and params replace
/// the contents of `scratch`.
pub fn parse_table_entry<'a>(
    buf: &'a [u8],
    scratch: &mut Scratch<'a>,
) -> Result<TableEntryView, WireError> {
    scratch.matches.clear();
    scratch.params.clear();
    scratch.profile_action = None;
    let mut te = TableEntryView {
        table_id: 0,
        priority: 0,
        is_default_action: false,
        action: ActionView::Missing,
        idle_timeout_ns: 0,
    };
    let mut r = Reader::new(buf);
    while let Some((f, v)) = r.next_field()? {
        match f {
            1 => te.table_id = v.uint()? as u32,
            2 => scratch.matches.push(field_match(v.bytes()?)?),
            3 => {
                let raw = v.bytes()?;
                let mut ar = Reader::new(raw);
                while let Some((af, av)) = ar.next_field()? {
                    te.action = match af {
                        1 => {
                            scratch.params.clear();
                            ActionView::Direct {
                                action_id: action(av.bytes()?, &mut scratch.params)?,
                            }
                        }
                        2..=4 => {
                            scratch.profile_action = Some(raw);
                            ActionView::Profile
                        }
                        _ => continue,
                    };
                }
            }
            4 => te.priority = v.int32()?,
            8 => te.is_default_action = v.uint()? != 0,
            9 => te.idle_timeout_ns = v.uint()? as i64,
            _ => {}
        }
    }
    Ok(te)
}

/// Appends one `Entity { table_entry }` to a `ReadResponse` being built.
pub fn push_read_entity(out: &mut Vec<u8>, table_entry: &[u8]) {
    let inner = 1 + varint_len(table_entry.len() as u64) + table_entry.len();
    out.push(1 << 3 | 2);
    put_varint(out, inner as u64);
    put_bytes(out, 2, table_entry);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::action;
    use p4fleet_proto::p4runtime::{self as p4, field_match::FieldMatchType as T};
    use prost::Message;

    fn entry() -> p4::TableEntry {
        p4::TableEntry {
            table_id: 7,
            r#match: vec![
                p4::FieldMatch {
                    field_id: 1,
                    field_match_type: Some(T::Exact(p4::field_match::Exact {
                        value: vec![10, 0, 0, 1],
                    })),
                },
                p4::FieldMatch {
                    field_id: 2,
                    field_match_type: Some(T::Lpm(p4::field_match::Lpm {
                        value: vec![10, 0, 0, 0],
                        prefix_len: 8,
                    })),
                },
                p4::FieldMatch {
                    field_id: 3,
                    field_match_type: Some(T::Ternary(p4::field_match::Ternary {
                        value: vec![0, 1],
                        mask: vec![0xff; 300],
                    })),
                },
                p4::FieldMatch {
                    field_id: 4,
                    field_match_type: Some(T::Range(p4::field_match::Range {
                        low: vec![1],
                        high: vec![2],
                    })),
                },
                p4::FieldMatch {
                    field_id: 5,
                    field_match_type: Some(T::Optional(p4::field_match::Optional {
                        value: vec![3],
                    })),
                },
            ],
            action: Some(p4::TableAction {
                r#type: Some(p4::table_action::Type::Action(action(9, &[&[5], &[]]))),
            }),
            priority: -3,
            metadata: vec![1, 2, 3],
            ..Default::default()
        }
    }

    #[test]
    fn table_entry_view_matches_prost() {
        let bytes = entry().encode_to_vec();
        let mut s = Scratch::default();
        let v = parse_table_entry(&bytes, &mut s).unwrap();
        assert_eq!(v.table_id, 7);
        assert_eq!(v.priority, -3);
        assert!(!v.is_default_action);
        assert_eq!(v.action, ActionView::Direct { action_id: 9 });
        assert_eq!(
            s.matches.iter().map(|f| f.m).collect::<Vec<_>>(),
            vec![
                MatchView::Exact(&[10, 0, 0, 1]),
                MatchView::Lpm(&[10, 0, 0, 0], 8),
                MatchView::Ternary(&[0, 1], &[0xff; 300]),
                MatchView::Range(&[1], &[2]),
                MatchView::Optional(&[3]),
            ]
        );
        assert_eq!(s.params.len(), 2);
        assert_eq!(s.params[1].value, &[] as &[u8]);
        // [0, 1] and the empty param are not canonical.
        assert!(!s.canonical());
    }

    #[test]
    fn write_and_update_views() {
        let req = p4::WriteRequest {
            device_id: 3,
            election_id: Some(p4::Uint128 { high: 1, low: 2 }),
            role: "r".into(),
            atomicity: 1,
            updates: vec![
                p4::Update {
                    r#type: 1,
                    entity: Some(p4::Entity {
                        entity: Some(p4::entity::Entity::TableEntry(entry())),
                    }),
                },
                p4::Update {
                    r#type: 3,
                    entity: None,
                },
            ],
            ..Default::default()
        };
        let bytes = req.encode_to_vec();
        let w = parse_write(&bytes).unwrap();
        assert_eq!(w.device_id, 3);
        assert_eq!(w.election_id, Some((1u128 << 64) | 2));
        assert_eq!((w.role, w.atomicity, w.updates.len()), ("r", 1, 2));
        let (ty, e) = parse_update(w.updates[0]).unwrap();
        assert_eq!(ty, 1);
        assert_eq!(e, EntityView::TableEntry(&entry().encode_to_vec()[..]));
        assert_eq!(
            parse_update(w.updates[1]).unwrap(),
            (3, EntityView::Missing)
        );
    }

    #[test]
    fn malformed_input_is_an_error_not_a_panic() {
        let bytes = entry().encode_to_vec();
        let mut s = Scratch::default();
        for cut in 0..bytes.len() {
            // Every prefix either parses (a field boundary) or errors.
            let _ = parse_table_entry(&bytes[..cut], &mut s);
        }
        assert!(parse_table_entry(&[0x0a, 5, 1], &mut s).is_err());
        assert!(parse_write(&[0xff; 11]).is_err());
        // Field 1 of TableEntry (table_id) sent as bytes: wrong wire type.
        assert!(parse_table_entry(&[0x0a, 0], &mut s).is_err());
    }

    #[test]
    fn read_entities_decode_with_prost() {
        let raw = entry().encode_to_vec();
        let mut resp = Vec::new();
        push_read_entity(&mut resp, &raw);
        push_read_entity(&mut resp, &raw);
        let decoded = p4::ReadResponse::decode(resp.as_slice()).unwrap();
        assert_eq!(decoded.entities.len(), 2);
        assert_eq!(
            decoded.entities[1].entity,
            Some(p4::entity::Entity::TableEntry(entry()))
        );
    }
}
