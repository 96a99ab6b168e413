//! Conversions between the entry model and P4Runtime messages (the schema
//! side of P4Info is [`crate::p4info`]).

use p4fleet_proto::p4runtime::{self as p4rt, TableEntry, field_match, table_action};

use super::bytes::ByteStr;
use super::entry::{ActionCall, ActionParam, Entry, EntryKey, FieldMatch, MatchValue, validate};
use super::error::{EntryError, ValueError};
use super::schema::TableSchema;
use super::value::check_canonical;

impl MatchValue {
    fn to_proto(&self) -> field_match::FieldMatchType {
        use field_match::FieldMatchType as T;
        match self {
            MatchValue::Exact(v) => T::Exact(field_match::Exact { value: v.to_vec() }),
            MatchValue::Lpm { value, prefix_len } => T::Lpm(field_match::Lpm {
                value: value.to_vec(),
                prefix_len: *prefix_len as i32,
            }),
            MatchValue::Ternary { value, mask } => T::Ternary(field_match::Ternary {
                value: value.to_vec(),
                mask: mask.to_vec(),
            }),
            MatchValue::Range { low, high } => T::Range(field_match::Range {
                low: low.to_vec(),
                high: high.to_vec(),
            }),
            MatchValue::Optional(v) => T::Optional(field_match::Optional { value: v.to_vec() }),
        }
    }
}

impl EntryKey {
    /// A TableEntry with only the key (match + priority): what DELETE and
    /// a per-entry READ send.
    pub fn to_proto(&self) -> TableEntry {
        TableEntry {
            table_id: self.table_id,
            r#match: self
                .matches
                .iter()
                .map(|m| p4rt::FieldMatch {
                    field_id: m.field_id,
                    field_match_type: Some(m.value.to_proto()),
                })
                .collect(),
            priority: self.priority,
            ..Default::default()
        }
    }
}

impl ActionCall {
    pub fn to_proto(&self) -> p4rt::TableAction {
        p4rt::TableAction {
            r#type: Some(table_action::Type::Action(p4rt::Action {
                action_id: self.action_id,
                params: self
                    .params
                    .iter()
                    .map(|p| p4rt::action::Param {
                        param_id: p.param_id,
                        value: p.value.to_vec(),
                    })
                    .collect(),
            })),
        }
    }
}

impl Entry {
    /// The P4Runtime TableEntry for INSERT / MODIFY.
    pub fn to_proto(&self) -> TableEntry {
        let mut t = self.key.to_proto();
        t.action = Some(self.action.to_proto());
        t.idle_timeout_ns = self.idle_timeout_ns;
        t
    }

    /// Reads an entry from P4Runtime (e.g. read back from a switch):
    /// accepts padded byte strings, canonicalises them, and checks the
    /// result against the schema like [`validate`].
    pub fn from_proto(schema: &TableSchema, t: &TableEntry) -> Result<Entry, EntryError> {
        if t.is_default_action {
            return Err(EntryError::Unsupported("default action entries".into()));
        }
        let key = EntryKey::from_proto(schema, t)?;
        let action = match t.action.as_ref().and_then(|a| a.r#type.as_ref()) {
            Some(table_action::Type::Action(a)) => ActionCall::from_proto(a),
            Some(_) => {
                return Err(EntryError::Unsupported(
                    "action profile members, groups and action sets".into(),
                ));
            }
            None => return Err(EntryError::MissingAction),
        };
        let e = Entry {
            key,
            action,
            idle_timeout_ns: t.idle_timeout_ns,
        };
        validate(schema, &e)?;
        Ok(e)
    }
}

impl ActionCall {
    /// A read-back action, canonicalised (widths are the caller's to check).
    pub fn from_proto(a: &p4rt::Action) -> ActionCall {
        // Collected from an exact-size iterator: one allocation, no shrink.
        let mut params: Box<[ActionParam]> = a
            .params
            .iter()
            .map(|p| ActionParam {
                param_id: p.param_id,
                // Width is checked by validate(); only canonicalise here.
                value: if p.value.is_empty() {
                    ByteStr::new(&[0])
                } else {
                    ByteStr::canonical(&p.value)
                },
            })
            .collect();
        params.sort_by_key(|p| p.param_id);
        ActionCall {
            action_id: a.action_id,
            params,
        }
    }
}

impl EntryKey {
    /// The key of a read-back TableEntry, canonicalised and checked
    /// against the schema's fields (not its priority rule).
    pub fn from_proto(schema: &TableSchema, t: &TableEntry) -> Result<EntryKey, EntryError> {
        // One push per match or an error: the boxed slice below reuses
        // this allocation.
        let mut matches = Vec::with_capacity(t.r#match.len());
        for m in &t.r#match {
            let (_, f) =
                schema
                    .field_by_id(m.field_id)
                    .ok_or_else(|| EntryError::UnknownField {
                        table: schema.name.clone(),
                        field: format!("id {}", m.field_id),
                    })?;
            let w = f.bitwidth;
            let c = |v: &[u8]| {
                check_canonical(v, w).map_err(|reason| EntryError::InvalidMatch {
                    field: f.name.clone(),
                    reason,
                })
            };
            use field_match::FieldMatchType as T;
            let value = match &m.field_match_type {
                Some(T::Exact(x)) => MatchValue::Exact(c(&x.value)?),
                Some(T::Lpm(x)) => MatchValue::Lpm {
                    value: c(&x.value)?,
                    prefix_len: u32::try_from(x.prefix_len).map_err(|_| {
                        EntryError::InvalidMatch {
                            field: f.name.clone(),
                            reason: ValueError::BadPrefixLength(x.prefix_len.to_string()),
                        }
                    })?,
                },
                Some(T::Ternary(x)) => MatchValue::Ternary {
                    value: c(&x.value)?,
                    mask: c(&x.mask)?,
                },
                Some(T::Range(x)) => MatchValue::Range {
                    low: c(&x.low)?,
                    high: c(&x.high)?,
                },
                Some(T::Optional(x)) => MatchValue::Optional(c(&x.value)?),
                Some(T::Other(_)) | None => {
                    return Err(EntryError::Unsupported(format!(
                        "{}: match without a standard kind",
                        f.name
                    )));
                }
            };
            matches.push(FieldMatch {
                field_id: m.field_id,
                value,
            });
        }
        matches.sort_by_key(|m| m.field_id);
        Ok(EntryKey {
            table_id: t.table_id,
            matches: matches.into_boxed_slice(),
            priority: t.priority,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::{
        FIREWALL_P4INFO as FIREWALL, L2_P4INFO as L2, ROUTER_P4INFO as ROUTER, p4info as p4i,
    };
    use super::super::line::{Style, format_entries, parse_text};
    use super::*;

    #[test]
    fn proto_round_trip_every_kind() {
        let r = p4i(ROUTER);
        let acl = TableSchema::from_p4info(&r, "acl").unwrap();
        let es = parse_text(
            &acl,
            "#! fields srcAddr dstAddr protocol l4_dst_port\n10.0.0.0/8 * 6 80..443 deny @10\n* 1.2.3.4 * 0 permit @3\n",
        )
        .unwrap();
        let lpm = TableSchema::from_p4info(&r, "ipv4_lpm").unwrap();
        let es2 = parse_text(
            &lpm,
            "dstAddr=10.0.0.0/8 => set_nhop dmac=00:00:00:00:00:01 port=0\n",
        )
        .unwrap();
        for (s, es) in [(&acl, es), (&lpm, es2)] {
            for e in es {
                let t = e.to_proto();
                assert_eq!(Entry::from_proto(s, &t).unwrap(), e);
            }
        }
    }

    #[test]
    fn to_proto_is_canonical() {
        let fw = p4i(FIREWALL);
        let s = TableSchema::from_p4info(&fw, "firewall").unwrap();
        let e = &parse_text(&s, "srcAddr=0.0.0.0 dstAddr=0.0.1.2 => allow port=0\n").unwrap()[0];
        let t = e.to_proto();
        assert_eq!(t.table_id, 39123287);
        assert_eq!(t.priority, 0);
        let vals: Vec<_> = t
            .r#match
            .iter()
            .map(|m| match &m.field_match_type {
                Some(field_match::FieldMatchType::Exact(x)) => x.value.clone(),
                _ => panic!(),
            })
            .collect();
        assert_eq!(vals, vec![vec![0u8], vec![1, 2]]);
        match t.action.unwrap().r#type.unwrap() {
            table_action::Type::Action(a) => {
                assert_eq!(a.action_id, 17724422);
                assert_eq!(a.params[0].value, vec![0u8]);
            }
            _ => panic!(),
        }
    }

    #[test]
    fn from_proto_canonicalises_and_validates() {
        let fw = p4i(FIREWALL);
        let s = TableSchema::from_p4info(&fw, "firewall").unwrap();
        let e = &parse_text(&s, "srcAddr=10.0.0.1 dstAddr=0.0.0.2 => allow port=1\n").unwrap()[0];
        let mut t = e.to_proto();
        // Padded to full width, as older clients send.
        if let Some(field_match::FieldMatchType::Exact(x)) = &mut t.r#match[1].field_match_type {
            x.value = vec![0, 0, 0, 2];
        }
        assert_eq!(&Entry::from_proto(&s, &t).unwrap(), e);
        if let Some(field_match::FieldMatchType::Exact(x)) = &mut t.r#match[1].field_match_type {
            x.value = vec![1, 0, 0, 0, 2];
        }
        assert!(matches!(
            Entry::from_proto(&s, &t),
            Err(EntryError::InvalidMatch { ref field, reason: ValueError::TooWide { .. } }) if field == "hdr.ipv4.dstAddr"
        ));
        let mut t = e.to_proto();
        t.r#match.pop();
        assert!(matches!(
            Entry::from_proto(&s, &t),
            Err(EntryError::MissingField { .. })
        ));
        let mut t = e.to_proto();
        t.action = Some(p4rt::TableAction {
            r#type: Some(table_action::Type::ActionProfileMemberId(1)),
        });
        assert!(matches!(
            Entry::from_proto(&s, &t),
            Err(EntryError::Unsupported(_))
        ));
    }

    #[test]
    fn example_entry_files_parse() {
        let (fw, r, l2) = (p4i(FIREWALL), p4i(ROUTER), p4i(L2));
        // (P4Info, table, file, whether it must survive a format round trip)
        for (info, t, text, round_trip) in [
            (
                &fw,
                "firewall",
                include_str!("../../../examples/firewall/entries.txt"),
                false,
            ),
            (
                &r,
                "ipv4_lpm",
                include_str!("../../../examples/router/ipv4_lpm.entries.txt"),
                true,
            ),
            (
                &r,
                "acl",
                include_str!("../../../examples/router/acl.entries.txt"),
                true,
            ),
            (
                &l2,
                "smac",
                include_str!("../../../examples/l2switch/smac.entries.txt"),
                false,
            ),
            (
                &l2,
                "dmac",
                include_str!("../../../examples/l2switch/dmac.entries.txt"),
                false,
            ),
        ] {
            let s = TableSchema::from_p4info(info, t).unwrap();
            let es = parse_text(&s, text).unwrap();
            if round_trip {
                assert_eq!(
                    parse_text(&s, &format_entries(&s, &es, Style::Named).unwrap()).unwrap(),
                    es
                );
            } else {
                assert!(!es.is_empty());
            }
        }
    }
}
