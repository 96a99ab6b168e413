//! A table's default action (the action a miss takes), as a
//! TableEntrySet's `defaultAction` asks for it: parsed against the table's
//! schema and checked against what the P4Info allows. Pure.
//!
//! The rules are P4Runtime's (spec §9.1, "Default entry"):
//! - an action with `@defaultonly` scope (`DEFAULT_ONLY`) may be the
//!   default, and only that (entries refuse it: [`super::EntryError::DefaultOnlyAction`]);
//! - an action with `@tableonly` scope (`TABLE_ONLY`) can never be it;
//! - a table with a const default action (`const_default_action_id`)
//!   cannot have its default changed at all.

use std::collections::BTreeMap;

use p4fleet_proto::p4info::P4Info;

use super::entry::Builder;
use super::schema::{ActionScope, TableSchema};
use super::{ActionCall, EntryError};

/// Why a default action cannot be set.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DefaultActionError {
    /// The action is `@tableonly` in this table.
    #[error("action {action:?} is table-only in table {table:?}; it cannot be the default action")]
    TableOnly { table: String, action: String },
    /// The table's default action is fixed by the program.
    #[error(
        "table {table:?} has a const default action ({action}); its default action cannot be changed"
    )]
    ConstDefault { table: String, action: String },
    /// Unknown action, unknown or missing parameter, bad value.
    #[error(transparent)]
    Entry(#[from] EntryError),
}

/// The const default action id of the table with P4Info id `table_id`,
/// if it has one.
pub fn const_default_action(p4info: &P4Info, table_id: u32) -> Option<u32> {
    p4info
        .tables
        .iter()
        .find(|t| t.preamble.as_ref().is_some_and(|p| p.id == table_id))
        .map(|t| t.const_default_action_id)
        .filter(|id| *id != 0)
}

/// Parses `action(params)` as the default action of `schema`'s table,
/// whose const default action (if any) is `const_default`. Names may be
/// full names, aliases or unique dotted suffixes, as for entries.
pub fn parse_default_action(
    schema: &TableSchema,
    const_default: Option<u32>,
    action: &str,
    params: &BTreeMap<String, String>,
) -> Result<ActionCall, DefaultActionError> {
    if let Some(id) = const_default {
        let action = schema
            .action_by_id(id)
            .map_or_else(|| format!("action id {id}"), |(_, a)| a.name.clone());
        return Err(DefaultActionError::ConstDefault {
            table: schema.name.clone(),
            action,
        });
    }
    let idx = schema.action_index(action)?;
    let a = &schema.actions[idx];
    if a.scope == ActionScope::TableOnly {
        return Err(DefaultActionError::TableOnly {
            table: schema.name.clone(),
            action: a.name.clone(),
        });
    }
    let mut b = Builder::new(schema);
    b.set_default_action(idx);
    for (name, text) in params {
        b.set_param_by_name(name, text)?;
    }
    Ok(b.finish_action()?)
}

/// `action(p=v, ...)` for messages and status, with the schema's short
/// names; the action id when the schema does not know it.
pub fn format_action(schema: &TableSchema, call: &ActionCall) -> String {
    let Some((_, a)) = schema.action_by_id(call.action_id) else {
        return format!("action id {}", call.action_id);
    };
    let params: Vec<String> = call
        .params
        .iter()
        .map(|p| {
            let name = a
                .params
                .iter()
                .find(|s| s.id == p.param_id)
                .map_or_else(|| p.param_id.to_string(), |s| s.name.clone());
            let width = a
                .params
                .iter()
                .find(|s| s.id == p.param_id)
                .map_or(0, |s| s.bitwidth);
            format!("{name}={}", super::format_value(p.value.as_slice(), width))
        })
        .collect();
    format!("{}({})", a.short_name(), params.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::entries::ActionParam;
    use crate::entries::schema::fixtures::{action, map as params, table};

    fn schema() -> TableSchema {
        let port = &[("port", 9)];
        table(
            "MyIngress.fwd",
            7,
            16,
            Vec::new(),
            vec![
                action("MyIngress.forward", 1, port, ActionScope::TableAndDefault),
                action("MyIngress.punt", 2, port, ActionScope::DefaultOnly),
                action("MyIngress.mirror", 3, &[], ActionScope::TableOnly),
                action("MyIngress.drop", 4, &[], ActionScope::TableAndDefault),
            ],
        )
    }

    #[test]
    fn default_only_actions_may_be_the_default_and_table_only_ones_not() {
        let s = schema();
        let punt = parse_default_action(&s, None, "punt", &params(&[("port", "510")])).unwrap();
        assert_eq!(punt.action_id, 2);
        assert_eq!(punt.params[0].param_id, 1);
        assert_eq!(format_action(&s, &punt), "punt(port=510)");
        let e = parse_default_action(&s, None, "MyIngress.mirror", &params(&[])).unwrap_err();
        assert_eq!(
            e,
            DefaultActionError::TableOnly {
                table: "MyIngress.fwd".into(),
                action: "MyIngress.mirror".into()
            }
        );
        assert!(e.to_string().contains("table-only"), "{e}");
        let drop = parse_default_action(&s, None, "drop", &params(&[])).unwrap();
        assert_eq!((drop.action_id, drop.params.len()), (4, 0));
        assert_eq!(format_action(&s, &drop), "drop()");
    }

    #[test]
    fn a_const_default_cannot_be_changed_whatever_the_action() {
        let s = schema();
        let e = parse_default_action(&s, Some(4), "drop", &params(&[])).unwrap_err();
        assert_eq!(
            e,
            DefaultActionError::ConstDefault {
                table: "MyIngress.fwd".into(),
                action: "MyIngress.drop".into()
            }
        );
    }

    #[test]
    fn parameters_are_checked_like_an_entrys() {
        let s = schema();
        // The entry error of setting `action` with `ps`.
        let refused =
            |action, ps: &[(&str, &str)]| match parse_default_action(&s, None, action, &params(ps))
                .unwrap_err()
            {
                DefaultActionError::Entry(e) => e,
                other => panic!("not an entry error: {other:?}"),
            };
        let got = [
            refused("forward", &[]),
            refused("forward", &[("port", "512")]),
            refused("nope", &[]),
            refused("drop", &[("port", "1")]),
        ];
        assert!(
            matches!(
                got,
                [
                    EntryError::MissingParam { .. },
                    EntryError::InvalidParam { .. },
                    EntryError::UnknownAction { .. },
                    EntryError::UnknownParam { .. },
                ]
            ),
            "{got:?}"
        );
        let ok = parse_default_action(&s, None, "forward", &params(&[("port", "3")])).unwrap();
        assert_eq!(
            *ok.params,
            [ActionParam {
                param_id: 1,
                value: ok.params[0].value.clone()
            }]
        );
    }

    #[test]
    fn the_const_default_is_read_from_the_p4info() {
        let info = p4fleet_proto::p4info::parse_text(
            "tables { preamble { id: 1 name: \"a\" } const_default_action_id: 9 }\n\
             tables { preamble { id: 2 name: \"b\" } }\n",
        )
        .unwrap();
        assert_eq!(const_default_action(&info, 1), Some(9));
        assert_eq!(const_default_action(&info, 2), None);
        assert_eq!(const_default_action(&info, 3), None);
    }
}
