//! Canonical entries: what a switch stores, independent of how it was written.

use std::collections::BTreeMap;

use super::bytes::ByteStr;
use super::error::{EntryError, ValueError};
use super::schema::{ActionSchema, ActionScope, MatchKind, ParamSchema, TableSchema};
use super::value::{self, parse_match, parse_match_masking_host_bits, parse_value};

/// One match field's value, canonical. Don't-care fields are absent from
/// the entry altogether (P4Runtime forbids sending them).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum MatchValue {
    Exact(ByteStr),
    Lpm { value: ByteStr, prefix_len: u32 },
    Ternary { value: ByteStr, mask: ByteStr },
    Range { low: ByteStr, high: ByteStr },
    Optional(ByteStr),
}

impl MatchValue {
    pub fn kind(&self) -> MatchKind {
        match self {
            MatchValue::Exact(_) => MatchKind::Exact,
            MatchValue::Lpm { .. } => MatchKind::Lpm,
            MatchValue::Ternary { .. } => MatchKind::Ternary,
            MatchValue::Range { .. } => MatchKind::Range,
            MatchValue::Optional(_) => MatchKind::Optional,
        }
    }
}

/// Shorthands for the tests' match values.
#[cfg(test)]
impl MatchValue {
    pub(crate) fn lpm(value: &[u8], prefix_len: u32) -> Self {
        MatchValue::Lpm {
            value: ByteStr::new(value),
            prefix_len,
        }
    }

    pub(crate) fn ternary(value: &[u8], mask: &[u8]) -> Self {
        MatchValue::Ternary {
            value: ByteStr::new(value),
            mask: ByteStr::new(mask),
        }
    }

    pub(crate) fn range(low: &[u8], high: &[u8]) -> Self {
        MatchValue::Range {
            low: ByteStr::new(low),
            high: ByteStr::new(high),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FieldMatch {
    pub field_id: u32,
    pub value: MatchValue,
}

/// What identifies an entry in its table: two entries with equal keys are
/// the same entry (a second insert is ALREADY_EXISTS, a modify replaces
/// the action). `matches` is sorted by field id; priority is 0 for tables
/// without ternary/range/optional fields. A boxed slice, not a Vec: an
/// entry is never grown once built, and the capacity word it saves is
/// memory per desired entry.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EntryKey {
    pub table_id: u32,
    pub matches: Box<[FieldMatch]>,
    pub priority: i32,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ActionParam {
    pub param_id: u32,
    pub value: ByteStr,
}

/// A direct action call; `params` sorted by param id (a boxed slice, as
/// [`EntryKey::matches`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ActionCall {
    pub action_id: u32,
    pub params: Box<[ActionParam]>,
}

impl ActionCall {
    /// The value given for parameter `p` of action `a` (this call's).
    pub(crate) fn param(
        &self,
        a: &ActionSchema,
        p: &ParamSchema,
    ) -> Result<&ActionParam, EntryError> {
        self.params
            .iter()
            .find(|x| x.param_id == p.id)
            .ok_or_else(|| EntryError::MissingParam {
                action: a.name.clone(),
                param: p.name.clone(),
            })
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Entry {
    pub key: EntryKey,
    pub action: ActionCall,
    /// P4Runtime `idle_timeout_ns`: 0 is none; only on tables whose
    /// schema says [`TableSchema::idle_timeout`]. Not part of the key: a
    /// different timeout is a MODIFY, like a different action.
    pub idle_timeout_ns: i64,
}

#[cfg(test)]
impl Entry {
    /// A test entry: `matches` as `(field id, value)`, action
    /// `action_id` without params, no idle timeout.
    pub(crate) fn matching(
        table_id: u32,
        matches: Vec<(u32, MatchValue)>,
        priority: i32,
        action_id: u32,
    ) -> Entry {
        Entry {
            key: EntryKey {
                table_id,
                matches: matches
                    .into_iter()
                    .map(|(field_id, value)| FieldMatch { field_id, value })
                    .collect(),
                priority,
            },
            action: ActionCall {
                action_id,
                params: Box::default(),
            },
            idle_timeout_ns: 0,
        }
    }
}

impl EntryKey {
    /// The match of field `field_id`, if not don't care.
    pub fn get(&self, field_id: u32) -> Option<&MatchValue> {
        self.matches
            .binary_search_by_key(&field_id, |m| m.field_id)
            .ok()
            .map(|i| &self.matches[i].value)
    }
}

/// Collects one entry's parts by schema index, then validates and builds
/// it. Reused across lines so parsing many entries allocates only what the
/// entries themselves hold.
pub(crate) struct Builder<'s> {
    pub(crate) schema: &'s TableSchema,
    fields: Vec<Option<MatchValue>>,
    field_set: Vec<bool>,
    action: Option<usize>,
    params: Vec<Option<ByteStr>>,
    priority: Option<i64>,
    idle_timeout_ns: Option<i64>,
    options: ParseOptions,
}

/// How leniently entries are read. The default is strict: what P4Runtime
/// would refuse is an error that names the field.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ParseOptions {
    /// Clear LPM host bits and ternary bits outside the mask instead of
    /// rejecting them, as p4runtime-shell does (`spec.maskHostBits`).
    pub mask_host_bits: bool,
}

impl<'s> Builder<'s> {
    pub(crate) fn new(schema: &'s TableSchema) -> Self {
        Builder {
            schema,
            fields: vec![None; schema.match_fields.len()],
            field_set: vec![false; schema.match_fields.len()],
            action: None,
            params: vec![None; schema.max_params()],
            priority: None,
            idle_timeout_ns: None,
            options: ParseOptions::default(),
        }
    }

    pub(crate) fn with_options(schema: &'s TableSchema, options: ParseOptions) -> Self {
        Builder {
            options,
            ..Builder::new(schema)
        }
    }

    pub(crate) fn reset(&mut self) {
        self.fields.iter_mut().for_each(|f| *f = None);
        self.field_set.iter_mut().for_each(|f| *f = false);
        self.params.iter_mut().for_each(|p| *p = None);
        self.action = None;
        self.priority = None;
        self.idle_timeout_ns = None;
    }

    pub(crate) fn set_field(&mut self, idx: usize, text: &str) -> Result<(), EntryError> {
        let f = &self.schema.match_fields[idx];
        if self.field_set[idx] {
            return Err(EntryError::DuplicateField {
                field: f.name.clone(),
            });
        }
        self.field_set[idx] = true;
        let parsed = if self.options.mask_host_bits {
            parse_match_masking_host_bits(f.kind, text, f.bitwidth)
        } else {
            parse_match(f.kind, text, f.bitwidth)
        };
        self.fields[idx] = parsed.map_err(|reason| EntryError::InvalidMatch {
            field: f.name.clone(),
            reason,
        })?;
        Ok(())
    }

    pub(crate) fn set_field_by_name(&mut self, name: &str, text: &str) -> Result<(), EntryError> {
        let idx = self.schema.field_index(name)?;
        self.set_field(idx, text)
    }

    pub(crate) fn has_action(&self) -> bool {
        self.action.is_some()
    }

    pub(crate) fn set_action(&mut self, idx: usize) -> Result<(), EntryError> {
        let a = &self.schema.actions[idx];
        if a.scope == ActionScope::DefaultOnly {
            return Err(EntryError::DefaultOnlyAction {
                table: self.schema.name.clone(),
                action: a.name.clone(),
            });
        }
        self.action = Some(idx);
        Ok(())
    }

    pub(crate) fn set_action_by_name(&mut self, name: &str) -> Result<(), EntryError> {
        let idx = self.schema.action_index(name)?;
        self.set_action(idx)
    }

    /// Sets the action of the table's default entry: scope rules are the
    /// caller's ([`super::default_action`]), which allows default-only ones.
    pub(crate) fn set_default_action(&mut self, idx: usize) {
        self.action = Some(idx);
    }

    fn set_param(&mut self, idx: usize, text: &str) -> Result<(), EntryError> {
        let a = &self.schema.actions[self.action.expect("action set before params")];
        let p = &a.params[idx];
        if self.params[idx].is_some() {
            return Err(EntryError::DuplicateParam {
                action: a.name.clone(),
                param: p.name.clone(),
            });
        }
        let v = parse_value(text, p.bitwidth).map_err(|reason| EntryError::InvalidParam {
            action: a.name.clone(),
            param: p.name.clone(),
            reason,
        })?;
        self.params[idx] = Some(v);
        Ok(())
    }

    pub(crate) fn set_param_by_name(&mut self, name: &str, text: &str) -> Result<(), EntryError> {
        let a = &self.schema.actions[self.action.expect("action set before params")];
        let idx = a
            .param_index(name)
            .ok_or_else(|| EntryError::UnknownParam {
                action: a.name.clone(),
                param: value::excerpt(name),
            })?;
        self.set_param(idx, text)
    }

    /// Positional parameter number `pos` (0-based).
    pub(crate) fn set_param_at(&mut self, pos: usize, text: &str) -> Result<(), EntryError> {
        let a = &self.schema.actions[self.action.expect("action set before params")];
        if pos >= a.params.len() {
            return Err(EntryError::TooManyParams {
                action: a.name.clone(),
                expected: a.params.len(),
                got: pos + 1,
            });
        }
        self.set_param(pos, text)
    }

    pub(crate) fn set_priority(&mut self, p: i64) {
        self.priority = Some(p);
    }

    /// The entry's idle timeout (`@idle=30s`), checked by [`Self::finish`].
    pub(crate) fn set_idle_timeout(&mut self, ns: i64) {
        self.idle_timeout_ns = Some(ns);
    }

    pub(crate) fn finish(&mut self) -> Result<Entry, EntryError> {
        let key = self.finish_key()?;
        let action = self.finish_action()?;
        let idle_timeout_ns = check_idle_timeout(self.schema, self.idle_timeout_ns.take())?;
        Ok(Entry {
            key,
            action,
            idle_timeout_ns,
        })
    }

    /// The key of what was set: every exact field given, priority as the
    /// table requires.
    pub(crate) fn finish_key(&mut self) -> Result<EntryKey, EntryError> {
        let schema = self.schema;
        // Exactly the fields given (don't cares are left out), so that the
        // boxed slice below reuses this allocation.
        let given = self.fields.iter().filter(|f| f.is_some()).count();
        let mut matches = Vec::with_capacity(given);
        for (i, f) in schema.match_fields.iter().enumerate() {
            match self.fields[i].take() {
                Some(value) => matches.push(FieldMatch {
                    field_id: f.id,
                    value,
                }),
                None if f.kind == MatchKind::Exact && !self.field_set[i] => {
                    return Err(EntryError::MissingField {
                        field: f.name.clone(),
                    });
                }
                None => {}
            }
        }
        if !matches.is_sorted_by_key(|m| m.field_id) {
            matches.sort_unstable_by_key(|m| m.field_id);
        }
        let priority = check_priority(schema, self.priority)?;
        Ok(EntryKey {
            table_id: schema.id,
            matches: matches.into_boxed_slice(),
            priority,
        })
    }

    /// The action call of what was set: every parameter given.
    pub(crate) fn finish_action(&mut self) -> Result<ActionCall, EntryError> {
        let schema = self.schema;
        let aidx = self.action.ok_or(EntryError::MissingAction)?;
        let a = &schema.actions[aidx];
        let mut params = Vec::with_capacity(a.params.len());
        for (i, p) in a.params.iter().enumerate() {
            match self.params[i].take() {
                Some(value) => params.push(ActionParam {
                    param_id: p.id,
                    value,
                }),
                None => {
                    return Err(EntryError::MissingParam {
                        action: a.name.clone(),
                        param: p.name.clone(),
                    });
                }
            }
        }
        if !params.is_sorted_by_key(|p| p.param_id) {
            params.sort_unstable_by_key(|p| p.param_id);
        }
        // Every parameter given: the length is the capacity.
        Ok(ActionCall {
            action_id: a.id,
            params: params.into_boxed_slice(),
        })
    }
}

/// An idle timeout is allowed only on a table that notifies idle
/// entries (the device refuses it elsewhere); 0 means none.
fn check_idle_timeout(schema: &TableSchema, ns: Option<i64>) -> Result<i64, EntryError> {
    match ns {
        None | Some(0) => Ok(0),
        Some(ns) if ns < 0 => Err(EntryError::Syntax(format!("negative idle timeout {ns} ns"))),
        Some(_) if !schema.idle_timeout => Err(EntryError::NoIdleTimeout {
            table: schema.name.clone(),
        }),
        Some(ns) => Ok(ns),
    }
}

/// Gives `entry` an idle timeout of `ns` (0: none), checked against the
/// schema as a line's `@idle=` is: for the inline form's `idleTimeout`.
pub fn set_idle_timeout(
    schema: &TableSchema,
    entry: &mut Entry,
    ns: i64,
) -> Result<(), EntryError> {
    entry.idle_timeout_ns = check_idle_timeout(schema, Some(ns))?;
    Ok(())
}

fn check_priority(schema: &TableSchema, p: Option<i64>) -> Result<i32, EntryError> {
    match (schema.requires_priority(), p) {
        (true, None) => Err(EntryError::PriorityRequired {
            table: schema.name.clone(),
        }),
        (true, Some(p)) if p <= 0 || p > i32::MAX as i64 => Err(EntryError::InvalidPriority(p)),
        (true, Some(p)) => Ok(p as i32),
        (false, None) => Ok(0),
        (false, Some(_)) => Err(EntryError::PriorityNotAllowed {
            table: schema.name.clone(),
        }),
    }
}

/// Builds an entry from a TableEntrySet's inline form. Field and action
/// names may be full names, aliases or unique dotted suffixes.
pub fn parse_inline(
    schema: &TableSchema,
    matches: &BTreeMap<String, String>,
    action: &str,
    params: &BTreeMap<String, String>,
    priority: Option<i32>,
) -> Result<Entry, EntryError> {
    parse_inline_with(
        schema,
        matches,
        action,
        params,
        priority,
        ParseOptions::default(),
    )
}

/// [`parse_inline`] with [`ParseOptions`].
pub fn parse_inline_with(
    schema: &TableSchema,
    matches: &BTreeMap<String, String>,
    action: &str,
    params: &BTreeMap<String, String>,
    priority: Option<i32>,
    options: ParseOptions,
) -> Result<Entry, EntryError> {
    let mut b = Builder::with_options(schema, options);
    for (name, text) in matches {
        b.set_field_by_name(name, text)?;
    }
    b.set_action_by_name(action)?;
    for (name, text) in params {
        b.set_param_by_name(name, text)?;
    }
    if let Some(p) = priority {
        b.set_priority(p as i64);
    }
    b.finish()
}

/// Checks an entry that did not come from text (read back from a switch,
/// built by code) against the schema: known ids, kinds, widths, lpm host
/// bits, ternary masks, range order, no explicit don't-care, priority rule.
pub fn validate(schema: &TableSchema, e: &Entry) -> Result<(), EntryError> {
    if e.key.table_id != schema.id {
        return Err(EntryError::WrongTable {
            expected: schema.name.clone(),
            found: format!("id {}", e.key.table_id),
        });
    }
    let mut last = 0u32;
    for m in &e.key.matches {
        let (_, f) = schema
            .field_by_id(m.field_id)
            .ok_or_else(|| EntryError::UnknownField {
                table: schema.name.clone(),
                field: format!("id {}", m.field_id),
            })?;
        if m.field_id <= last && last != 0 {
            return Err(EntryError::DuplicateField {
                field: f.name.clone(),
            });
        }
        last = m.field_id;
        let bad = |reason| EntryError::InvalidMatch {
            field: f.name.clone(),
            reason,
        };
        if m.value.kind() != f.kind {
            return Err(EntryError::Unsupported(format!(
                "{}: {:?} match on a {:?} field",
                f.name,
                m.value.kind(),
                f.kind
            )));
        }
        let w = f.bitwidth;
        let fits = |v: &ByteStr| check_fits(v, w).map_err(bad);
        match &m.value {
            MatchValue::Exact(v) | MatchValue::Optional(v) => fits(v)?,
            MatchValue::Lpm { value, prefix_len } => {
                fits(value)?;
                if *prefix_len > w {
                    return Err(bad(ValueError::PrefixTooLong {
                        len: *prefix_len,
                        width: w,
                    }));
                }
                if *prefix_len == 0 {
                    return Err(bad(ValueError::Syntax(
                        "/0 is don't care and must be omitted".into(),
                    )));
                }
                if !value::lpm_host_bits_ok(value, *prefix_len, w) {
                    return Err(bad(ValueError::HostBitsSet {
                        value: value::format_value(value.as_slice(), w),
                        len: *prefix_len,
                    }));
                }
            }
            MatchValue::Ternary { value: v, mask } => {
                fits(v)?;
                fits(mask)?;
                if mask.is_zero() {
                    return Err(bad(ValueError::Syntax(
                        "an all-zero mask is don't care and must be omitted".into(),
                    )));
                }
                if !value::within_mask(v, mask) {
                    return Err(bad(ValueError::BitsOutsideMask {
                        value: value::format_value(v.as_slice(), w),
                        mask: value::format_value(mask.as_slice(), w),
                    }));
                }
            }
            MatchValue::Range { low, high } => {
                fits(low)?;
                fits(high)?;
                if !value::num_le(low, high) {
                    return Err(bad(ValueError::RangeReversed {
                        low: value::format_value(low.as_slice(), w),
                        high: value::format_value(high.as_slice(), w),
                    }));
                }
                if low.is_zero() && *high == value::all_ones(w) {
                    return Err(bad(ValueError::Syntax(
                        "the full range is don't care and must be omitted".into(),
                    )));
                }
            }
        }
    }
    for f in &schema.match_fields {
        if f.kind == MatchKind::Exact && e.key.get(f.id).is_none() {
            return Err(EntryError::MissingField {
                field: f.name.clone(),
            });
        }
    }
    let prio = (e.key.priority != 0).then_some(e.key.priority as i64);
    check_priority(schema, prio)?;
    check_idle_timeout(schema, Some(e.idle_timeout_ns))?;
    let (_, a) =
        schema
            .action_by_id(e.action.action_id)
            .ok_or_else(|| EntryError::UnknownAction {
                table: schema.name.clone(),
                action: format!("id {}", e.action.action_id),
            })?;
    if a.scope == ActionScope::DefaultOnly {
        return Err(EntryError::DefaultOnlyAction {
            table: schema.name.clone(),
            action: a.name.clone(),
        });
    }
    for p in &a.params {
        let given = e.action.param(a, p)?;
        check_fits(&given.value, p.bitwidth).map_err(|reason| EntryError::InvalidParam {
            action: a.name.clone(),
            param: p.name.clone(),
            reason,
        })?;
    }
    if e.action.params.len() != a.params.len() {
        let unknown = e
            .action
            .params
            .iter()
            .find(|x| !a.params.iter().any(|p| p.id == x.param_id));
        return Err(match unknown {
            Some(x) => EntryError::UnknownParam {
                action: a.name.clone(),
                param: format!("id {}", x.param_id),
            },
            None => EntryError::TooManyParams {
                action: a.name.clone(),
                expected: a.params.len(),
                got: e.action.params.len(),
            },
        });
    }
    Ok(())
}

fn check_fits(v: &ByteStr, width: u32) -> Result<(), ValueError> {
    value::check_canonical(v.as_slice(), width).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::super::schema::fixtures::*;
    use super::*;

    #[test]
    fn inline_firewall() {
        let t = firewall();
        let e = parse_inline(
            &t,
            &map(&[("hdr.ipv4.srcAddr", "10.0.0.1"), ("dstAddr", "10.0.0.2")]),
            "allow",
            &map(&[("port", "1")]),
            None,
        )
        .unwrap();
        assert_eq!(e.key.table_id, 39123287);
        assert_eq!(e.key.priority, 0);
        assert_eq!(e.key.matches.len(), 2);
        assert_eq!(e.key.matches[0].field_id, 1);
        assert_eq!(
            e.key.matches[0].value,
            MatchValue::Exact(ByteStr::new(&[10, 0, 0, 1]))
        );
        assert_eq!(e.action.action_id, 17724422);
        assert_eq!(
            *e.action.params,
            [ActionParam {
                param_id: 1,
                value: ByteStr::new(&[1])
            }]
        );
        validate(&t, &e).unwrap();
        let e2 = parse_inline(
            &t,
            &map(&[("srcAddr", "10.0.0.1"), ("dstAddr", "0x0a000002")]),
            "MyIngress.allow",
            &map(&[("port", "0x1")]),
            None,
        )
        .unwrap();
        assert_eq!(e, e2);
    }

    #[test]
    fn inline_errors_name_the_field() {
        let t = firewall();
        let err = parse_inline(
            &t,
            &map(&[("srcAddr", "10.0.0.1")]),
            "drop",
            &map(&[]),
            None,
        )
        .unwrap_err();
        assert_eq!(
            err,
            EntryError::MissingField {
                field: "hdr.ipv4.dstAddr".into()
            }
        );
        assert!(err.to_string().contains("hdr.ipv4.dstAddr"));

        let err = parse_inline(
            &t,
            &map(&[("srcAddr", "10.0.0.1"), ("dstAddr", "1"), ("ttl", "3")]),
            "drop",
            &map(&[]),
            None,
        )
        .unwrap_err();
        assert!(matches!(err, EntryError::UnknownField { ref field, .. } if field == "ttl"));

        let full = map(&[("srcAddr", "10.0.0.1"), ("dstAddr", "1")]);
        let err = parse_inline(&t, &full, "forward", &map(&[]), None).unwrap_err();
        assert!(matches!(err, EntryError::UnknownAction { ref action, .. } if action == "forward"));

        let err = parse_inline(&t, &full, "allow", &map(&[]), None).unwrap_err();
        assert_eq!(
            err,
            EntryError::MissingParam {
                action: "MyIngress.allow".into(),
                param: "port".into()
            }
        );
        let err = parse_inline(
            &t,
            &full,
            "allow",
            &map(&[("port", "1"), ("vlan", "2")]),
            None,
        )
        .unwrap_err();
        assert!(matches!(err, EntryError::UnknownParam { ref param, .. } if param == "vlan"));
        let err = parse_inline(&t, &full, "allow", &map(&[("port", "512")]), None).unwrap_err();
        assert!(matches!(
            err,
            EntryError::InvalidParam {
                reason: ValueError::TooWide { width: 9, .. },
                ..
            }
        ));
        assert!(
            err.to_string().starts_with("MyIngress.allow.port: "),
            "{err}"
        );

        let err = parse_inline(
            &t,
            &map(&[("srcAddr", "10.0.0.1.5"), ("dstAddr", "1")]),
            "drop",
            &map(&[]),
            None,
        )
        .unwrap_err();
        assert!(err.to_string().starts_with("hdr.ipv4.srcAddr: "), "{err}");

        let err = parse_inline(&t, &full, "drop", &map(&[]), Some(10)).unwrap_err();
        assert!(matches!(err, EntryError::PriorityNotAllowed { .. }));
    }

    #[test]
    fn inline_acl_priority() {
        let t = acl();
        let m = map(&[("srcAddr", "10.0.0.0/8"), ("l4_dst_port", "80..443")]);
        let err = parse_inline(&t, &m, "deny", &map(&[]), None).unwrap_err();
        assert!(matches!(err, EntryError::PriorityRequired { .. }));
        let err = parse_inline(&t, &m, "deny", &map(&[]), Some(0)).unwrap_err();
        assert_eq!(err, EntryError::InvalidPriority(0));
        let e = parse_inline(&t, &m, "deny", &map(&[]), Some(10)).unwrap();
        assert_eq!(e.key.priority, 10);
        // Don't-care fields are left out.
        assert_eq!(
            e.key.matches.iter().map(|m| m.field_id).collect::<Vec<_>>(),
            vec![1, 4]
        );
        validate(&t, &e).unwrap();
        // All don't care is a valid (catch-all) entry.
        let e = parse_inline(&t, &map(&[]), "permit", &map(&[]), Some(1)).unwrap();
        assert!(e.key.matches.is_empty());
        let err = parse_inline(&t, &map(&[]), "NoAction", &map(&[]), Some(1)).unwrap_err();
        assert!(matches!(err, EntryError::DefaultOnlyAction { .. }));
    }

    #[test]
    fn validate_catches_bad_entries() {
        let t = ipv4_lpm();
        let good = parse_inline(
            &t,
            &map(&[("dstAddr", "10.1.0.0/16")]),
            "set_nhop",
            &map(&[("dmac", "00:00:00:00:00:01"), ("port", "3")]),
            None,
        )
        .unwrap();
        validate(&t, &good).unwrap();
        let mut bad = good.clone();
        bad.key.matches[0].value = MatchValue::Lpm {
            value: ByteStr::new(&[10, 1, 0, 1]),
            prefix_len: 16,
        };
        assert!(matches!(
            validate(&t, &bad),
            Err(EntryError::InvalidMatch {
                reason: ValueError::HostBitsSet { .. },
                ..
            })
        ));
        let mut bad = good.clone();
        bad.action.params[1].value = ByteStr::new(&[2, 0]);
        assert!(validate(&t, &bad).is_err());
        let mut bad = good.clone();
        bad.key.priority = 3;
        assert!(matches!(
            validate(&t, &bad),
            Err(EntryError::PriorityNotAllowed { .. })
        ));
        let mut bad = good;
        bad.key.matches = Box::default();
        validate(&t, &bad).unwrap(); // lpm may be omitted (default route)
    }

    #[test]
    fn entry_size() {
        // Memory per desired entry: the operator holds a million of these.
        assert!(size_of::<Entry>() <= 56, "{}", size_of::<Entry>());
    }
}
