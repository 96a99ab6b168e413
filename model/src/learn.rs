//! Digests and the learning loop as the operator handles them, without
//! I/O: durations as people write them (`10ms`, `5s`, `1m30s`), digest
//! configs resolved against a P4Info and diffed against what a device
//! reports, and learn rules that turn one digest message into one table
//! entry (and recognise the entries they made).

use std::collections::HashMap;

use p4fleet_proto::p4info::{
    self, P4Info, Preamble, match_field, p4_bitstring_like_type_spec, p4_data_type_spec,
};
use p4fleet_proto::p4runtime::{self as p4, entity::Entity, update::Type};

/// A duration that does not read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{text:?} is not a duration (like 500ms, 10s, 1m30s; units ns, us, ms, s, m, h)")]
pub struct DurationError {
    pub text: String,
}

/// `ns` in the largest unit that holds it exactly (`30s`, `1500ms`, `0`):
/// what [`parse_duration`] reads back to `ns`.
pub fn format_duration(ns: i64) -> String {
    if ns == 0 {
        return "0".into();
    }
    const UNITS: [(i64, &str); 6] = [
        (3_600_000_000_000, "h"),
        (60_000_000_000, "m"),
        (1_000_000_000, "s"),
        (1_000_000, "ms"),
        (1_000, "us"),
        (1, "ns"),
    ];
    let (scale, unit) = UNITS
        .into_iter()
        .find(|(scale, _)| ns % scale == 0)
        .unwrap_or((1, "ns"));
    format!("{}{unit}", ns / scale)
}

/// Nanoseconds of a duration like `500ms`, `10s`, `1m30s` or `0`.
pub fn parse_duration(text: &str) -> Result<i64, DurationError> {
    let bad = || DurationError {
        text: text.to_string(),
    };
    let t = text.trim();
    if t == "0" {
        return Ok(0);
    }
    let mut total: i64 = 0;
    let mut rest = t;
    if rest.is_empty() {
        return Err(bad());
    }
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
        if digits == 0 {
            return Err(bad());
        }
        let n: i64 = rest[..digits].parse().map_err(|_| bad())?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let scale: i64 = match &rest[..unit_len] {
            "ns" => 1,
            "us" | "µs" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            _ => return Err(bad()),
        };
        rest = &rest[unit_len..];
        total = n
            .checked_mul(scale)
            .and_then(|v| total.checked_add(v))
            .ok_or_else(bad)?;
    }
    Ok(total)
}

/// What a digest or learn rule gets wrong against a program; each says
/// which spec field it is about ([`LearnError::field`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LearnError {
    #[error("digest {name} is not in the program")]
    UnknownDigest { name: String },
    #[error("digest {name} is not a struct of bit<W> members")]
    DigestShape { name: String },
    #[error("table {name} is not in the program")]
    UnknownTable { name: String },
    #[error("action {action} is not an action of table {table}")]
    UnknownAction { table: String, action: String },
    #[error("table {table} has no match field {field}")]
    UnknownField { table: String, field: String },
    #[error("match field {field} of table {table} is not mapped to a digest member")]
    UnmappedField { table: String, field: String },
    #[error("match field {field} of table {table} is not EXACT (learned keys are exact)")]
    NotExact { table: String, field: String },
    /// `mapping`: the `learn` field that names the member (`key` or
    /// `params`).
    #[error("digest {digest} has no member {member}")]
    UnknownMember {
        digest: String,
        member: String,
        mapping: &'static str,
    },
    #[error("action {action} has no parameter {param}")]
    UnknownParam { action: String, param: String },
    #[error("parameter {param} of action {action} is not mapped to a digest member")]
    UnmappedParam { action: String, param: String },
    #[error("digest member {member} is bit<{width}>, wider than {target} (bit<{target_width}>)")]
    TooWide {
        member: String,
        width: i32,
        target: String,
        target_width: i32,
        mapping: &'static str,
    },
    #[error(
        "table {table} does not notify idle timeouts (its P4Info says NO_TIMEOUT; compile it with support_timeout = true)"
    )]
    NoIdleTimeout { table: String },
    #[error("{0}")]
    Duration(#[from] DurationError),
}

impl LearnError {
    /// The field of `learn` the error is about.
    pub fn field(&self) -> &'static str {
        match self {
            LearnError::UnknownDigest { .. } | LearnError::DigestShape { .. } => "digest",
            LearnError::UnknownTable { .. } => "table",
            LearnError::UnknownAction { .. } => "action",
            LearnError::UnknownField { .. }
            | LearnError::UnmappedField { .. }
            | LearnError::NotExact { .. } => "key",
            LearnError::UnknownParam { .. } | LearnError::UnmappedParam { .. } => "params",
            LearnError::UnknownMember { mapping, .. } | LearnError::TooWide { mapping, .. } => {
                mapping
            }
            LearnError::NoIdleTimeout { .. } | LearnError::Duration(_) => "idleTimeout",
        }
    }
}

/// A digest message that does not fit its rule (the device sent
/// something else than its P4Info says).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("digest message does not match the program's struct: {0}")]
pub struct DataError(pub String);

/// One member of a digest's struct.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub name: String,
    pub bitwidth: i32,
}

/// A digest of a program: its id and struct members, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DigestInfo {
    pub id: u32,
    pub name: String,
    pub members: Vec<Member>,
}

fn named(p: &Option<Preamble>, name: &str) -> bool {
    p.as_ref()
        .is_some_and(|p| p.name == name || (!p.alias.is_empty() && p.alias == name))
}

fn id_of(p: &Option<Preamble>) -> u32 {
    p.as_ref().map(|p| p.id).unwrap_or(0)
}

fn name_of(p: &Option<Preamble>) -> String {
    p.as_ref().map(|p| p.name.clone()).unwrap_or_default()
}

fn bit_width(t: &Option<p4info::P4DataTypeSpec>) -> Option<i32> {
    match t.as_ref()?.type_spec.as_ref()? {
        p4_data_type_spec::TypeSpec::Bitstring(b) => match b.type_spec.as_ref()? {
            p4_bitstring_like_type_spec::TypeSpec::Bit(b) => Some(b.bitwidth),
            _ => None,
        },
        _ => None,
    }
}

/// Digest `name` (name or alias) of `info`, with its members.
pub fn digest(info: &P4Info, name: &str) -> Result<DigestInfo, LearnError> {
    let d = info
        .digests
        .iter()
        .find(|d| named(&d.preamble, name))
        .ok_or_else(|| LearnError::UnknownDigest { name: name.into() })?;
    let shape = || LearnError::DigestShape { name: name.into() };
    let struct_name = match d.type_spec.as_ref().and_then(|t| t.type_spec.as_ref()) {
        Some(p4_data_type_spec::TypeSpec::Struct(s)) => &s.name,
        _ => return Err(shape()),
    };
    let spec = info
        .type_info
        .as_ref()
        .and_then(|t| t.structs.get(struct_name))
        .ok_or_else(shape)?;
    let members = spec
        .members
        .iter()
        .map(|m| {
            Ok(Member {
                name: m.name.clone(),
                bitwidth: bit_width(&m.type_spec).ok_or_else(shape)?,
            })
        })
        .collect::<Result<_, LearnError>>()?;
    Ok(DigestInfo {
        id: id_of(&d.preamble),
        name: d
            .preamble
            .as_ref()
            .map(|p| p.name.clone())
            .unwrap_or_default(),
        members,
    })
}

impl DigestInfo {
    /// One digest message as `member=value` pairs in the struct's order,
    /// each value as the line format writes it (MAC, IPv4, decimal, hex:
    /// [`crate::entries::write_value`]), e.g. `srcAddr=02:00:00:00:00:07
    /// ingress_port=3`.
    pub fn render(&self, data: &p4::P4Data) -> Result<String, DataError> {
        let Some(p4::p4_data::Data::Struct(s)) = &data.data else {
            return Err(DataError("not a struct".into()));
        };
        if s.members.len() != self.members.len() {
            return Err(DataError(format!(
                "{} members, the program says {}",
                s.members.len(),
                self.members.len()
            )));
        }
        let mut out = String::new();
        for (i, (m, d)) in self.members.iter().zip(&s.members).enumerate() {
            let Some(p4::p4_data::Data::Bitstring(b)) = &d.data else {
                return Err(DataError(format!("member {i} is not a bitstring")));
            };
            if i > 0 {
                out.push(' ');
            }
            out.push_str(&m.name);
            out.push('=');
            let width = u32::try_from(m.bitwidth).unwrap_or(0);
            crate::entries::write_value(&mut out, b, width);
        }
        Ok(out)
    }
}

/// A digest config as the spec asks for it (durations in ns).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DigestConfig {
    pub max_timeout_ns: i64,
    pub max_list_size: i32,
    pub ack_timeout_ns: i64,
}

impl DigestConfig {
    /// The `DigestEntry` of digest `id` with this config.
    pub fn entry(&self, id: u32) -> p4::DigestEntry {
        p4::DigestEntry {
            digest_id: id,
            config: Some(p4::digest_entry::Config {
                max_timeout_ns: self.max_timeout_ns,
                max_list_size: self.max_list_size,
                ack_timeout_ns: self.ack_timeout_ns,
            }),
        }
    }
}

/// The exact difference between the digest configs a set wants
/// (`desired`) and those the device reports (`on_device`): INSERT what is
/// missing, MODIFY what differs, DELETE the ids in `released` (the set
/// configured them before and no longer wants them) that the device still
/// has. Configs of other digests are left alone.
pub fn plan_configs(
    desired: &[p4::DigestEntry],
    on_device: &[p4::DigestEntry],
    released: &[u32],
) -> Vec<p4::Update> {
    let device: HashMap<u32, &p4::DigestEntry> =
        on_device.iter().map(|d| (d.digest_id, d)).collect();
    let update = |t: Type, e: p4::DigestEntry| p4::Update {
        r#type: t as i32,
        entity: Some(p4::Entity {
            entity: Some(Entity::DigestEntry(e)),
        }),
    };
    let mut out = Vec::new();
    for d in desired {
        match device.get(&d.digest_id) {
            None => out.push(update(Type::Insert, *d)),
            Some(have) if have.config != d.config => out.push(update(Type::Modify, *d)),
            Some(_) => {}
        }
    }
    for id in released {
        if device.contains_key(id) && !desired.iter().any(|d| d.digest_id == *id) {
            out.push(update(
                Type::Delete,
                p4::DigestEntry {
                    digest_id: *id,
                    config: None,
                },
            ));
        }
    }
    out
}

/// Which desired configs the device holds exactly as asked.
pub fn confirmed(desired: &[p4::DigestEntry], on_device: &[p4::DigestEntry]) -> Vec<bool> {
    desired
        .iter()
        .map(|d| on_device.iter().any(|o| o == d))
        .collect()
}

/// A learn rule by names, as the spec gives it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LearnNames {
    pub digest: String,
    pub table: String,
    pub action: String,
    /// Match field name to digest member name.
    pub key: Vec<(String, String)>,
    /// Action parameter name to digest member name.
    pub params: Vec<(String, String)>,
    /// `None`: learned entries never idle out.
    pub idle_timeout: Option<String>,
}

/// Where one value of a learned entry comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Slot {
    /// Match field id or action parameter id.
    pub id: u32,
    /// Index of the digest member.
    pub member: usize,
}

/// A learn rule resolved against a program: ids, and where each value of
/// a learned entry comes from.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LearnRule {
    pub digest_id: u32,
    pub members: usize,
    pub table_id: u32,
    pub action_id: u32,
    /// Match fields in id order.
    pub key: Vec<Slot>,
    /// Parameters in id order.
    pub params: Vec<Slot>,
    pub idle_timeout_ns: i64,
    /// The entry metadata that marks what this rule learned (the set's
    /// learned tag, [`crate::sync::learned_tag`]).
    pub metadata: Vec<u8>,
}

/// Resolves `names` against `info`; `metadata` marks the learned entries.
pub fn resolve(
    info: &P4Info,
    names: &LearnNames,
    metadata: Vec<u8>,
) -> Result<LearnRule, LearnError> {
    let d = digest(info, &names.digest)?;
    let member = |m: &str, mapping: &'static str| {
        d.members
            .iter()
            .position(|x| x.name == m)
            .ok_or_else(|| LearnError::UnknownMember {
                digest: d.name.clone(),
                member: m.into(),
                mapping,
            })
    };
    // The member `m` into the field or param `target` (of `id`, `width`
    // bits wide): no wider than it.
    let slot = |m: &String, mapping: &'static str, target: &String, id: u32, width: i32| {
        let i = member(m, mapping)?;
        if d.members[i].bitwidth > width {
            return Err(LearnError::TooWide {
                member: m.clone(),
                width: d.members[i].bitwidth,
                target: target.clone(),
                target_width: width,
                mapping,
            });
        }
        Ok(Slot { id, member: i })
    };
    let table = info
        .tables
        .iter()
        .find(|t| named(&t.preamble, &names.table))
        .ok_or_else(|| LearnError::UnknownTable {
            name: names.table.clone(),
        })?;
    let table_name = name_of(&table.preamble);
    let mut key = Vec::new();
    for (field, m) in &names.key {
        let f = table
            .match_fields
            .iter()
            .find(|f| &f.name == field)
            .ok_or_else(|| LearnError::UnknownField {
                table: table_name.clone(),
                field: field.clone(),
            })?;
        if f.r#match
            != Some(match_field::Match::MatchType(
                match_field::MatchType::Exact as i32,
            ))
        {
            return Err(LearnError::NotExact {
                table: table_name.clone(),
                field: field.clone(),
            });
        }
        key.push(slot(m, "key", field, f.id, f.bitwidth)?);
    }
    if let Some(f) = table
        .match_fields
        .iter()
        .find(|f| !key.iter().any(|s| s.id == f.id))
    {
        return Err(LearnError::UnmappedField {
            table: table_name,
            field: f.name.clone(),
        });
    }
    let action = info
        .actions
        .iter()
        .find(|a| named(&a.preamble, &names.action))
        .filter(|a| {
            let id = id_of(&a.preamble);
            table.action_refs.iter().any(|r| r.id == id)
        })
        .ok_or_else(|| LearnError::UnknownAction {
            table: table_name.clone(),
            action: names.action.clone(),
        })?;
    let action_name = name_of(&action.preamble);
    let mut params = Vec::new();
    for (param, m) in &names.params {
        let p = action
            .params
            .iter()
            .find(|p| &p.name == param)
            .ok_or_else(|| LearnError::UnknownParam {
                action: action_name.clone(),
                param: param.clone(),
            })?;
        params.push(slot(m, "params", param, p.id, p.bitwidth)?);
    }
    if let Some(p) = action
        .params
        .iter()
        .find(|p| !params.iter().any(|s| s.id == p.id))
    {
        return Err(LearnError::UnmappedParam {
            action: action_name,
            param: p.name.clone(),
        });
    }
    let idle_timeout_ns = match &names.idle_timeout {
        None => 0,
        Some(t) => parse_duration(t)?,
    };
    let notifies =
        table.idle_timeout_behavior == p4info::table::IdleTimeoutBehavior::NotifyControl as i32;
    if idle_timeout_ns > 0 && !notifies {
        return Err(LearnError::NoIdleTimeout { table: table_name });
    }
    key.sort_by_key(|s| s.id);
    params.sort_by_key(|s| s.id);
    Ok(LearnRule {
        digest_id: d.id,
        members: d.members.len(),
        table_id: id_of(&table.preamble),
        action_id: id_of(&action.preamble),
        key,
        params,
        idle_timeout_ns,
        metadata,
    })
}

/// Whether the table `name` of `info` notifies idle timeouts (P4Info
/// `idle_timeout_behavior: NOTIFY_CONTROL`); `None` when there is no
/// such table.
pub fn notifies_idle_timeouts(info: &P4Info, name: &str) -> Option<bool> {
    let t = info.tables.iter().find(|t| named(&t.preamble, name))?;
    Some(t.idle_timeout_behavior == p4info::table::IdleTimeoutBehavior::NotifyControl as i32)
}

/// P4Runtime's canonical form of a bitstring: no leading zero bytes (one
/// byte for zero).
fn canonical(b: &[u8]) -> Vec<u8> {
    let first = b
        .iter()
        .position(|x| *x != 0)
        .unwrap_or(b.len().saturating_sub(1));
    b[first..].to_vec()
}

impl LearnRule {
    /// The members of one digest message, each a canonical bitstring.
    fn members(&self, data: &p4::P4Data) -> Result<Vec<Vec<u8>>, DataError> {
        let Some(p4::p4_data::Data::Struct(s)) = &data.data else {
            return Err(DataError("not a struct".into()));
        };
        if s.members.len() != self.members {
            return Err(DataError(format!(
                "{} members, the program says {}",
                s.members.len(),
                self.members
            )));
        }
        s.members
            .iter()
            .enumerate()
            .map(|(i, m)| match &m.data {
                Some(p4::p4_data::Data::Bitstring(b)) if !b.is_empty() => Ok(canonical(b)),
                _ => Err(DataError(format!("member {i} is not a bitstring"))),
            })
            .collect()
    }

    /// The entry one digest message teaches, tagged with the rule's
    /// metadata and idle timeout.
    pub fn entry(&self, data: &p4::P4Data) -> Result<p4::TableEntry, DataError> {
        let m = self.members(data)?;
        let matches = self
            .key
            .iter()
            .map(|s| p4::FieldMatch {
                field_id: s.id,
                field_match_type: Some(p4::field_match::FieldMatchType::Exact(
                    p4::field_match::Exact {
                        value: m[s.member].clone(),
                    },
                )),
            })
            .collect();
        let params = self
            .params
            .iter()
            .map(|s| p4::action::Param {
                param_id: s.id,
                value: m[s.member].clone(),
            })
            .collect();
        Ok(p4::TableEntry {
            table_id: self.table_id,
            r#match: matches,
            action: Some(p4::TableAction {
                r#type: Some(p4::table_action::Type::Action(p4::Action {
                    action_id: self.action_id,
                    params,
                })),
            }),
            metadata: self.metadata.clone(),
            idle_timeout_ns: self.idle_timeout_ns,
            ..Default::default()
        })
    }

    /// Whether `e` (read back, or named by an idle timeout notification)
    /// is an entry this rule learned.
    pub fn learned(&self, e: &p4::TableEntry) -> bool {
        e.table_id == self.table_id && e.metadata == self.metadata
    }

    /// The DELETE of a learned entry (its key only).
    pub fn delete(e: &p4::TableEntry) -> p4::Update {
        p4::Update {
            r#type: Type::Delete as i32,
            entity: Some(p4::Entity {
                entity: Some(Entity::TableEntry(p4::TableEntry {
                    table_id: e.table_id,
                    r#match: e.r#match.clone(),
                    priority: e.priority,
                    ..Default::default()
                })),
            }),
        }
    }

    /// The INSERT of a learned entry.
    pub fn insert(e: p4::TableEntry) -> p4::Update {
        p4::Update {
            r#type: Type::Insert as i32,
            entity: Some(p4::Entity {
                entity: Some(Entity::TableEntry(e)),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn l2switch(notify: bool) -> P4Info {
        let text = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../examples/l2switch/p4info.txt"),
        )
        .unwrap();
        let mut info = p4info::parse_text(&text).unwrap();
        if notify {
            for t in &mut info.tables {
                t.idle_timeout_behavior = p4info::table::IdleTimeoutBehavior::NotifyControl as i32;
            }
        }
        info
    }

    fn names() -> LearnNames {
        LearnNames {
            digest: "mac_learn_digest_t".into(),
            table: "MyIngress.dmac".into(),
            action: "forward".into(),
            key: vec![("hdr.ethernet.dstAddr".into(), "srcAddr".into())],
            params: vec![("port".into(), "ingress_port".into())],
            idle_timeout: Some("10s".into()),
        }
    }

    fn message(mac: &[u8], port: &[u8]) -> p4::P4Data {
        let bits = |b: &[u8]| p4::P4Data {
            data: Some(p4::p4_data::Data::Bitstring(b.to_vec())),
        };
        p4::P4Data {
            data: Some(p4::p4_data::Data::Struct(p4::P4StructLike {
                members: vec![bits(mac), bits(port)],
            })),
        }
    }

    #[test]
    fn durations_format_back_to_what_they_read() {
        for (ns, text) in [
            (0, "0"),
            (30_000_000_000, "30s"),
            (90_000_000_000, "90s"),
            (1_500_000_000, "1500ms"),
            (7_200_000_000_000, "2h"),
            (1_001, "1001ns"),
        ] {
            assert_eq!(format_duration(ns), text);
            assert_eq!(parse_duration(text), Ok(ns));
        }
    }

    #[test]
    fn durations_read_like_kubernetes_ones() {
        assert_eq!(parse_duration("0"), Ok(0));
        assert_eq!(parse_duration("10ms"), Ok(10_000_000));
        assert_eq!(parse_duration("1m30s"), Ok(90_000_000_000));
        assert_eq!(parse_duration("2h"), Ok(7_200_000_000_000));
        for bad in ["", "10", "s", "1.5s", "-1s", "10 s", "3d", "99999999999h"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn digest_configs_are_written_as_the_exact_difference() {
        let c = |t| DigestConfig {
            max_timeout_ns: t,
            max_list_size: 8,
            ack_timeout_ns: 1_000,
        };
        let desired = [c(1).entry(1), c(2).entry(2), c(3).entry(3)];
        let device = [c(1).entry(1), c(9).entry(2), c(0).entry(4), c(0).entry(5)];
        // 4 was the set's and is no longer wanted; 5 is someone else's; 6
        // was the set's but is gone already.
        let plan = plan_configs(&desired, &device, &[4, 6]);
        let got: Vec<(i32, u32)> = plan
            .iter()
            .map(|u| match &u.entity.as_ref().unwrap().entity {
                Some(Entity::DigestEntry(d)) => (u.r#type, d.digest_id),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(
            got,
            [
                (Type::Modify as i32, 2),
                (Type::Insert as i32, 3),
                (Type::Delete as i32, 4)
            ]
        );
        assert_eq!(confirmed(&desired, &device), [true, false, false]);
        assert!(plan_configs(&desired, &desired, &[1, 2, 3]).is_empty());
    }

    #[test]
    fn a_rule_turns_a_message_into_a_tagged_entry() {
        let rule = resolve(&l2switch(true), &names(), b"mark".to_vec()).unwrap();
        assert_eq!(rule.digest_id, 402184575);
        let e = rule.entry(&message(&[2, 0, 0, 0, 0, 1], &[0, 3])).unwrap();
        assert_eq!(e.table_id, 44918510);
        assert_eq!(e.metadata, b"mark");
        assert_eq!(e.idle_timeout_ns, 10_000_000_000);
        let Some(p4::field_match::FieldMatchType::Exact(x)) = &e.r#match[0].field_match_type else {
            panic!()
        };
        assert_eq!(x.value, [2, 0, 0, 0, 0, 1]);
        let Some(p4::table_action::Type::Action(a)) = &e.action.as_ref().unwrap().r#type else {
            panic!()
        };
        // Canonical: the leading zero byte of the port is gone.
        assert_eq!(
            (a.action_id, a.params[0].value.clone()),
            (29683729, vec![3])
        );
        assert!(rule.learned(&e));
        let other = p4::TableEntry {
            metadata: b"else".to_vec(),
            ..e.clone()
        };
        assert!(!rule.learned(&other));
        assert!(rule.entry(&message(&[1], &[])).is_err());
        let one = p4::P4Data {
            data: Some(p4::p4_data::Data::Struct(p4::P4StructLike {
                members: vec![],
            })),
        };
        assert!(rule.entry(&one).is_err());
    }

    #[test]
    fn a_message_renders_by_member_name_like_the_line_format() {
        let d = digest(&l2switch(false), "mac_learn_digest_t").unwrap();
        assert_eq!(
            d.render(&message(&[2, 0, 0, 0, 0, 7], &[0, 3])).unwrap(),
            "srcAddr=02:00:00:00:00:07 ingress_port=3"
        );
        // A member that is not a bitstring, or a member missing, is an
        // error, not a line with a hole in it.
        let mut bad = message(&[2, 0, 0, 0, 0, 7], &[3]);
        if let Some(p4::p4_data::Data::Struct(s)) = &mut bad.data {
            s.members[1].data = Some(p4::p4_data::Data::Bool(true));
        }
        assert_eq!(
            d.render(&bad).unwrap_err(),
            DataError("member 1 is not a bitstring".into())
        );
        let short = p4::P4Data {
            data: Some(p4::p4_data::Data::Struct(p4::P4StructLike {
                members: vec![],
            })),
        };
        assert!(d.render(&short).is_err());
    }

    #[test]
    fn bad_rules_name_their_field() {
        let info = l2switch(false);
        let field = |n: LearnNames| resolve(&info, &n, vec![]).unwrap_err().field();
        let e = resolve(&info, &names(), vec![]).unwrap_err();
        assert_eq!(
            e,
            LearnError::NoIdleTimeout {
                table: "MyIngress.dmac".into()
            }
        );
        assert_eq!(e.field(), "idleTimeout");
        let n = || LearnNames {
            idle_timeout: None,
            ..names()
        };
        assert!(resolve(&info, &n(), vec![]).is_ok());
        assert_eq!(
            field(LearnNames {
                digest: "nope".into(),
                ..n()
            }),
            "digest"
        );
        assert_eq!(
            field(LearnNames {
                table: "nope".into(),
                ..n()
            }),
            "table"
        );
        assert_eq!(
            field(LearnNames {
                action: "learn".into(),
                ..n()
            }),
            "action"
        );
        assert_eq!(field(LearnNames { key: vec![], ..n() }), "key");
        assert_eq!(
            field(LearnNames {
                params: vec![],
                ..n()
            }),
            "params"
        );
        // bit<48> into bit<9>.
        let wide = resolve(
            &info,
            &LearnNames {
                params: vec![("port".into(), "srcAddr".into())],
                ..n()
            },
            vec![],
        )
        .unwrap_err();
        assert!(
            matches!(wide, LearnError::TooWide { width: 48, .. }),
            "{wide}"
        );
        assert_eq!(wide.field(), "params", "the member is a parameter's");
        assert_eq!(
            field(LearnNames {
                params: vec![("port".into(), "nope".into())],
                ..n()
            }),
            "params"
        );
        assert_eq!(
            field(LearnNames {
                key: vec![("hdr.ethernet.dstAddr".into(), "nope".into())],
                ..n()
            }),
            "key"
        );
        assert_eq!(notifies_idle_timeouts(&info, "MyIngress.smac"), Some(false));
        assert_eq!(notifies_idle_timeouts(&l2switch(true), "smac"), Some(true));
        assert_eq!(notifies_idle_timeouts(&info, "nope"), None);
    }
}
