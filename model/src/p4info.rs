//! Everything p4fleet reads from a P4Info, in one place: the
//! [`TableSchema`] of its tables (what entries are parsed, validated and
//! encoded against), the [`Problem`]s that would make writes fail, and the
//! summary a P4Program's status lists.

use std::collections::{BTreeMap, HashSet};

use p4fleet_proto::p4info::{self, P4Info, action_ref, match_field};

use crate::entries::{
    ActionSchema, ActionScope, EntryError, FieldSchema, MatchKind, ParamSchema, TableSchema,
    name_matches,
};

fn bad(msg: String) -> EntryError {
    EntryError::BadP4Info(msg)
}

fn preamble<'a>(
    p: &'a Option<p4info::Preamble>,
    what: &str,
) -> Result<&'a p4info::Preamble, EntryError> {
    p.as_ref()
        .ok_or_else(|| bad(format!("{what} without preamble")))
}

fn width(w: i32, what: &str) -> Result<u32, EntryError> {
    u32::try_from(w)
        .ok()
        .filter(|w| *w > 0)
        .ok_or_else(|| bad(format!("{what}: bitwidth {w}")))
}

impl TableSchema {
    /// The schema of one table of a P4Info. `table` is the full name
    /// (`MyIngress.firewall`), the alias (`firewall`) or a unique dotted
    /// suffix of the full name.
    pub fn from_p4info(p4info: &P4Info, table: &str) -> Result<TableSchema, EntryError> {
        let named = |t: &&p4info::Table, f: &dyn Fn(&p4info::Preamble) -> bool| {
            t.preamble.as_ref().is_some_and(f)
        };
        let mut found = p4info
            .tables
            .iter()
            .find(|t| named(t, &|p| p.name == table))
            .or_else(|| {
                p4info
                    .tables
                    .iter()
                    .find(|t| named(t, &|p| p.alias == table))
            });
        if found.is_none() {
            let mut it = p4info
                .tables
                .iter()
                .filter(|t| named(t, &|p| name_matches(&p.name, table)));
            found = it.next();
            if let Some(other) = it.next() {
                return Err(bad(format!(
                    "table name {table:?} is ambiguous: {} and {}",
                    found
                        .and_then(|t| t.preamble.as_ref())
                        .map_or("", |p| &p.name),
                    other.preamble.as_ref().map_or("", |p| &p.name)
                )));
            }
        }
        let t = found.ok_or_else(|| EntryError::UnknownTable(table.to_string()))?;
        table_schema(p4info, t)
    }

    /// Schemas of every table in a P4Info, in P4Info order; the first
    /// table that does not map fails the whole program.
    pub fn all_from_p4info(p4info: &P4Info) -> Result<Vec<TableSchema>, EntryError> {
        Self::each_from_p4info(p4info).collect()
    }

    /// The schema of each table in a P4Info, in P4Info order, or why that
    /// table does not map (for callers that can use the others).
    pub fn each_from_p4info(
        p4info: &P4Info,
    ) -> impl Iterator<Item = Result<TableSchema, EntryError>> + '_ {
        p4info.tables.iter().map(|t| table_schema(p4info, t))
    }
}

fn table_schema(p4info: &P4Info, t: &p4info::Table) -> Result<TableSchema, EntryError> {
    let tp = preamble(&t.preamble, "table")?;
    let mut match_fields = Vec::with_capacity(t.match_fields.len());
    for f in &t.match_fields {
        let what = format!("{}: match field {}", tp.name, f.name);
        let kind = match &f.r#match {
            Some(match_field::Match::MatchType(k)) => match match_field::MatchType::try_from(*k) {
                Ok(match_field::MatchType::Exact) => MatchKind::Exact,
                Ok(match_field::MatchType::Lpm) => MatchKind::Lpm,
                Ok(match_field::MatchType::Ternary) => MatchKind::Ternary,
                Ok(match_field::MatchType::Range) => MatchKind::Range,
                Ok(match_field::MatchType::Optional) => MatchKind::Optional,
                _ => return Err(bad(format!("{what}: match type {k} not supported"))),
            },
            Some(match_field::Match::OtherMatchType(o)) => {
                return Err(EntryError::Unsupported(format!("{what}: match type {o:?}")));
            }
            None => return Err(bad(format!("{what}: no match type"))),
        };
        match_fields.push(FieldSchema {
            name: f.name.clone(),
            id: f.id,
            bitwidth: width(f.bitwidth, &what)?,
            kind,
        });
    }
    match_fields.sort_by_key(|f| f.id);
    let mut actions = Vec::with_capacity(t.action_refs.len());
    for r in &t.action_refs {
        let a = p4info
            .actions
            .iter()
            .find(|a| a.preamble.as_ref().is_some_and(|p| p.id == r.id))
            .ok_or_else(|| bad(format!("{}: action id {} not in P4Info", tp.name, r.id)))?;
        let ap = preamble(&a.preamble, "action")?;
        let scope = match action_ref::Scope::try_from(r.scope) {
            Ok(action_ref::Scope::TableOnly) => ActionScope::TableOnly,
            Ok(action_ref::Scope::DefaultOnly) => ActionScope::DefaultOnly,
            _ => ActionScope::TableAndDefault,
        };
        let mut params = Vec::with_capacity(a.params.len());
        for p in &a.params {
            params.push(ParamSchema {
                name: p.name.clone(),
                id: p.id,
                bitwidth: width(p.bitwidth, &format!("{}: param {}", ap.name, p.name))?,
            });
        }
        params.sort_by_key(|p| p.id);
        actions.push(ActionSchema {
            name: ap.name.clone(),
            alias: ap.alias.clone(),
            id: ap.id,
            params,
            scope,
        });
    }
    Ok(TableSchema {
        name: tp.name.clone(),
        alias: tp.alias.clone(),
        id: tp.id,
        size: u64::try_from(t.size).unwrap_or(0),
        match_fields,
        actions,
        is_const: t.is_const_table,
        idle_timeout: t.idle_timeout_behavior
            == p4info::table::IdleTimeoutBehavior::NotifyControl as i32,
    })
}

/// Something in a P4Info that would make every write of a table fail;
/// each names the table, field or action.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Problem {
    /// Empty, or tables only elsewhere: loading it removes every table
    /// (and entry) from the switches that run it.
    #[error("has no tables (an empty P4Info would remove every table from its switches)")]
    NoTables,
    #[error("{kind}[{index}] has no preamble")]
    NoPreamble { kind: &'static str, index: usize },
    #[error("{kind}[{index}] has no name")]
    NoName { kind: &'static str, index: usize },
    #[error("{kind} {name} has id 0")]
    ZeroId { kind: &'static str, name: String },
    #[error("id {id} is used by both {first} and {second}")]
    DuplicateId {
        id: u32,
        first: String,
        second: String,
    },
    #[error("action {action}: param id {id} is duplicated")]
    DuplicateParam { action: String, id: u32 },
    #[error("action {action}: param {param} has bitwidth {bitwidth}")]
    ParamWidth {
        action: String,
        param: String,
        bitwidth: i32,
    },
    #[error("table {table}: match field id {id} is duplicated")]
    DuplicateField { table: String, id: u32 },
    #[error("table {table}: match field {id} has no name")]
    FieldWithoutName { table: String, id: u32 },
    #[error("table {table}: match field {field} has bitwidth {bitwidth}")]
    FieldWidth {
        table: String,
        field: String,
        bitwidth: i32,
    },
    #[error("table {table}: match field {field} has no match type")]
    NoMatchType { table: String, field: String },
    #[error("table {table} has no actions")]
    NoActions { table: String },
    #[error("table {table} refers to unknown action id {id}")]
    UnknownAction { table: String, id: u32 },
    #[error("table {table} has negative size {size}")]
    NegativeSize { table: String, size: i64 },
}

/// A match field's kind as P4Info names it (`exact`, `lpm`, ..., an
/// architecture's own kind, or `unspecified`).
fn match_kind_name(f: &p4info::MatchField) -> String {
    use p4info::match_field::{Match, MatchType};
    match &f.r#match {
        Some(Match::MatchType(t)) => match MatchType::try_from(*t) {
            Ok(MatchType::Exact) => "exact".into(),
            Ok(MatchType::Lpm) => "lpm".into(),
            Ok(MatchType::Ternary) => "ternary".into(),
            Ok(MatchType::Range) => "range".into(),
            Ok(MatchType::Optional) => "optional".into(),
            _ => "unspecified".into(),
        },
        Some(Match::OtherMatchType(s)) => s.clone(),
        None => "unspecified".into(),
    }
}

fn name_of(p: &Option<p4info::Preamble>) -> &str {
    p.as_ref().map(|p| p.name.as_str()).unwrap_or("")
}

/// What in a P4Info would make table writes fail, in P4Info order.
pub fn validate(p: &P4Info) -> Vec<Problem> {
    let mut problems = Vec::new();
    if p.tables.is_empty() {
        problems.push(Problem::NoTables);
    }
    let mut ids: BTreeMap<u32, String> = BTreeMap::new();
    let mut check_preamble = |kind: &'static str,
                              index: usize,
                              pre: &Option<p4info::Preamble>,
                              problems: &mut Vec<Problem>| match pre {
        None => problems.push(Problem::NoPreamble { kind, index }),
        Some(pre) => {
            if pre.name.is_empty() {
                problems.push(Problem::NoName { kind, index });
            }
            if pre.id == 0 {
                problems.push(Problem::ZeroId {
                    kind,
                    name: pre.name.clone(),
                });
            } else if let Some(first) = ids.insert(pre.id, pre.name.clone()) {
                problems.push(Problem::DuplicateId {
                    id: pre.id,
                    first,
                    second: pre.name.clone(),
                });
            }
        }
    };
    for (i, a) in p.actions.iter().enumerate() {
        check_preamble("action", i, &a.preamble, &mut problems);
        let action = name_of(&a.preamble);
        let mut seen = HashSet::new();
        for prm in &a.params {
            let duplicate = !seen.insert(prm.id);
            problems.extend(
                [
                    duplicate.then(|| Problem::DuplicateParam {
                        action: action.into(),
                        id: prm.id,
                    }),
                    (prm.bitwidth <= 0).then(|| Problem::ParamWidth {
                        action: action.into(),
                        param: prm.name.clone(),
                        bitwidth: prm.bitwidth,
                    }),
                ]
                .into_iter()
                .flatten(),
            );
        }
    }
    let action_ids: HashSet<u32> = p
        .actions
        .iter()
        .filter_map(|a| a.preamble.as_ref().map(|p| p.id))
        .collect();
    for (i, t) in p.tables.iter().enumerate() {
        check_preamble("table", i, &t.preamble, &mut problems);
        let table = || name_of(&t.preamble).to_string();
        let mut fids = HashSet::new();
        for f in &t.match_fields {
            let duplicate = !fids.insert(f.id);
            let field = || f.name.clone();
            problems.extend(
                [
                    duplicate.then(|| Problem::DuplicateField {
                        table: table(),
                        id: f.id,
                    }),
                    f.name.is_empty().then(|| Problem::FieldWithoutName {
                        table: table(),
                        id: f.id,
                    }),
                    (f.bitwidth <= 0).then(|| Problem::FieldWidth {
                        table: table(),
                        field: field(),
                        bitwidth: f.bitwidth,
                    }),
                    (match_kind_name(f) == "unspecified").then(|| Problem::NoMatchType {
                        table: table(),
                        field: field(),
                    }),
                ]
                .into_iter()
                .flatten(),
            );
        }
        if t.action_refs.is_empty() {
            problems.push(Problem::NoActions { table: table() });
        }
        problems.extend(
            t.action_refs
                .iter()
                .filter(|r| !action_ids.contains(&r.id))
                .map(|r| Problem::UnknownAction {
                    table: table(),
                    id: r.id,
                }),
        );
        if t.size < 0 {
            problems.push(Problem::NegativeSize {
                table: table(),
                size: t.size,
            });
        }
    }
    problems
}

/// A table as a program's status lists it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TableSummary {
    pub name: String,
    pub id: u32,
    pub size: i64,
    /// `name:kind:bits` per match field.
    pub match_fields: Vec<String>,
    /// Names of the actions the table accepts (`#id` when unknown).
    pub actions: Vec<String>,
}

/// The tables of a P4Info as listed in status, also for a P4Info with
/// [`Problem`]s (what is there is listed as it is).
pub fn tables(p: &P4Info) -> Vec<TableSummary> {
    let action_name = |id: u32| {
        p.actions
            .iter()
            .find(|a| a.preamble.as_ref().is_some_and(|p| p.id == id))
            .map(|a| name_of(&a.preamble).to_string())
            .unwrap_or_else(|| format!("#{id}"))
    };
    p.tables
        .iter()
        .map(|t| TableSummary {
            name: name_of(&t.preamble).to_string(),
            id: t.preamble.as_ref().map(|p| p.id).unwrap_or(0),
            size: t.size,
            match_fields: t
                .match_fields
                .iter()
                .map(|f| format!("{}:{}:{}", f.name, match_kind_name(f), f.bitwidth))
                .collect(),
            actions: t.action_refs.iter().map(|r| action_name(r.id)).collect(),
        })
        .collect()
}

/// Names of every action of a P4Info, in P4Info order.
pub fn action_names(p: &P4Info) -> Vec<String> {
    p.actions
        .iter()
        .map(|a| name_of(&a.preamble).to_string())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::entries::fixtures::{
        self, FIREWALL_P4INFO as FIREWALL, L2_P4INFO as L2, ROUTER_P4INFO as ROUTER, p4info as p4i,
    };

    #[test]
    fn example_p4infos_match_the_fixtures() {
        let (fw, r, l2) = (p4i(FIREWALL), p4i(ROUTER), p4i(L2));
        for (p, table, want) in [
            (&fw, "MyIngress.firewall", fixtures::firewall()),
            (&fw, "firewall", fixtures::firewall()),
            (&r, "ipv4_lpm", fixtures::ipv4_lpm()),
            (&r, "MyIngress.acl", fixtures::acl()),
            (&l2, "dmac", fixtures::dmac()),
        ] {
            assert_eq!(TableSchema::from_p4info(p, table).unwrap(), want, "{table}");
        }
        let smac = TableSchema::from_p4info(&l2, "smac").unwrap();
        assert_eq!(smac.match_fields[0].bitwidth, 48);
        assert_eq!(TableSchema::all_from_p4info(&l2).unwrap().len(), 2);
        assert!(matches!(
            TableSchema::from_p4info(&fw, "acl"),
            Err(EntryError::UnknownTable(_))
        ));
    }

    #[test]
    fn a_table_that_does_not_map_leaves_the_others() {
        let mut r = p4i(ROUTER);
        r.tables[0].match_fields[0].r#match =
            Some(match_field::Match::OtherMatchType("selector".into()));
        let each: Vec<_> = TableSchema::each_from_p4info(&r).collect();
        assert_eq!(each.len(), r.tables.len());
        assert!(matches!(each[0], Err(EntryError::Unsupported(_))));
        assert!(each[1..].iter().all(Result::is_ok));
        assert!(TableSchema::all_from_p4info(&r).is_err());
    }

    #[test]
    fn fabric_example_is_valid_and_every_table_maps() {
        let p = p4i(include_str!("../../examples/fabric/p4info.txt"));
        assert_eq!(validate(&p), vec![]);
        let schemas = TableSchema::all_from_p4info(&p).unwrap();
        let names: Vec<_> = schemas.iter().map(|t| t.alias.as_str()).collect();
        // p4c lists tables in declaration order.
        assert_eq!(names, ["smac", "l2_fwd", "ecmp", "acl"]);
        // The selector's key fields feed the hash only: one match field.
        assert_eq!(schemas[2].match_fields.len(), 1);
        let ecmp = &p.tables[2];
        let profile = &p.action_profiles[0];
        assert_eq!(
            ecmp.implementation_id,
            profile.preamble.as_ref().unwrap().id
        );
        assert_eq!(profile.table_ids, [ecmp.preamble.as_ref().unwrap().id]);
        assert!(profile.with_selector);
        assert_eq!((profile.size, profile.max_group_size), (1024, 16));
        // Every id carries its kind's P4Runtime prefix.
        let prefix = |id: u32| id >> 24;
        assert!(
            p.tables
                .iter()
                .all(|t| prefix(t.preamble.as_ref().unwrap().id) == 0x02)
        );
        assert!(
            p.actions
                .iter()
                .all(|a| prefix(a.preamble.as_ref().unwrap().id) == 0x01)
        );
        for (id, want) in [
            (profile.preamble.as_ref().unwrap().id, 0x11),
            (p.counters[0].preamble.as_ref().unwrap().id, 0x12),
            (p.direct_counters[0].preamble.as_ref().unwrap().id, 0x13),
            // P4Runtime's prefixes (p4info.proto, P4Ids.Prefix), as p4c sets them.
            (p.meters[0].preamble.as_ref().unwrap().id, 0x14),
            (p.direct_meters[0].preamble.as_ref().unwrap().id, 0x15),
            (p.registers[0].preamble.as_ref().unwrap().id, 0x16),
            (p.digests[0].preamble.as_ref().unwrap().id, 0x17),
        ] {
            assert_eq!(prefix(id), want, "{id}");
        }
        // Direct resources and their tables name each other.
        for (table, resource) in [
            (&p.tables[1], p.direct_counters[0].direct_table_id),
            (&p.tables[3], p.direct_meters[0].direct_table_id),
        ] {
            assert_eq!(table.preamble.as_ref().unwrap().id, resource);
        }
        assert_eq!(
            p.tables[1].direct_resource_ids,
            [p.direct_counters[0].preamble.as_ref().unwrap().id]
        );
        assert_eq!(
            p.tables[3].direct_resource_ids,
            [p.direct_meters[0].preamble.as_ref().unwrap().id]
        );
    }

    #[test]
    fn router_is_valid_and_summarised() {
        let p = p4i(ROUTER);
        assert_eq!(validate(&p), vec![]);
        let acl = &tables(&p)[0];
        assert_eq!(
            (acl.name.as_str(), acl.id, acl.size),
            ("MyIngress.acl", 37519123, 1024)
        );
        assert_eq!(
            acl.match_fields,
            [
                "hdr.ipv4.srcAddr:ternary:32",
                "hdr.ipv4.dstAddr:ternary:32",
                "hdr.ipv4.protocol:optional:8",
                "meta.l4_dst_port:range:16"
            ]
        );
        assert_eq!(
            acl.actions,
            ["MyIngress.permit", "MyIngress.deny", "NoAction"]
        );
        assert_eq!(tables(&p)[1].match_fields, ["hdr.ipv4.dstAddr:lpm:32"]);
        assert_eq!(action_names(&p).len(), 5);
        assert_eq!(action_names(&p)[0], "NoAction");
    }

    #[test]
    fn an_empty_or_table_less_p4info_is_a_problem() {
        assert_eq!(validate(&P4Info::default()), vec![Problem::NoTables]);
        let mut p = p4i(FIREWALL);
        p.tables.clear();
        assert_eq!(validate(&p), vec![Problem::NoTables]);
        assert!(Problem::NoTables.to_string().starts_with("has no tables"));
    }

    #[test]
    fn problems_name_what_is_wrong() {
        let mut p = p4i(FIREWALL);
        p.tables[0].action_refs[1].id = 12345;
        p.tables[0].match_fields[1].bitwidth = 0;
        p.tables[0].match_fields[1].r#match = None;
        p.tables[0].size = -1;
        // drop takes the table's id; allow declares its param twice.
        p.actions[0].preamble.as_mut().unwrap().id = 39123287;
        let port = p.actions[1].params[0].clone();
        p.actions[1].params.push(port);
        let problems = validate(&p);
        let t = || "MyIngress.firewall".to_string();
        assert_eq!(
            problems,
            vec![
                Problem::DuplicateParam {
                    action: "MyIngress.allow".into(),
                    id: 1
                },
                Problem::DuplicateId {
                    id: 39123287,
                    first: "MyIngress.drop".into(),
                    second: t()
                },
                Problem::FieldWidth {
                    table: t(),
                    field: "hdr.ipv4.dstAddr".into(),
                    bitwidth: 0
                },
                Problem::NoMatchType {
                    table: t(),
                    field: "hdr.ipv4.dstAddr".into()
                },
                Problem::UnknownAction {
                    table: t(),
                    id: 12345
                },
                Problem::NegativeSize {
                    table: t(),
                    size: -1
                },
            ]
        );
        assert_eq!(
            problems[1].to_string(),
            "id 39123287 is used by both MyIngress.drop and MyIngress.firewall"
        );
        assert_eq!(tables(&p)[0].actions[1], "#12345");
        assert_eq!(
            tables(&p)[0].match_fields[1],
            "hdr.ipv4.dstAddr:unspecified:0"
        );
    }
}
