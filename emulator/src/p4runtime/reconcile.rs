//! RECONCILE_AND_COMMIT: which tables of the running pipeline keep their
//! state (entries, default action, the entries' direct counts and meter
//! configs) under a new P4Info. A table is kept
//! when the new P4Info defines it exactly as before: same id, name, match
//! fields, action refs (with scopes), size, const flags and action
//! profile, and each of its actions with the same parameters. Any other
//! table starts empty, as after VERIFY_AND_COMMIT. Pure logic; the caller
//! holds the device's pipeline lock.

use serde::{Deserialize, Serialize};

use super::pipeline::Pipeline;
use super::schema::Schema;

/// What one RECONCILE_AND_COMMIT kept and dropped (stats `last_reconcile`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reconciled {
    /// Tables whose state was kept, by name, sorted.
    pub kept_tables: Vec<String>,
    /// Tables of the old pipeline whose state was dropped (changed or
    /// gone), by name, sorted.
    pub dropped_tables: Vec<String>,
    /// Entries kept, over the kept tables.
    pub kept_entries: u64,
    /// Entries dropped with the dropped tables.
    pub dropped_entries: u64,
}

/// Whether table `id` of `old` is defined identically in `new`.
pub(crate) fn unchanged(old: &Schema, new: &Schema, id: u32) -> bool {
    let (Some(o), Some(n)) = (old.tables.get(&id), new.tables.get(&id)) else {
        return false;
    };
    o == n
        && o.actions
            .iter()
            .all(|(a, _)| old.actions.get(a) == new.actions.get(a))
}

/// Moves the state of every unchanged table of `old` into `next` (whose
/// tables are fresh) and says what was kept and dropped.
pub(crate) fn carry_over(mut old: Pipeline, next: &mut Pipeline) -> Reconciled {
    let mut r = Reconciled::default();
    for (id, state) in old.tables.drain() {
        let name = old.schema.tables[&id].name.clone();
        let n = state.entries.len() as u64;
        if unchanged(&old.schema, &next.schema, id) {
            let metered = next.schema.resources.direct_meters.contains_key(&id);
            let direct = old.resources.direct.remove(&id);
            (next.resources).carry_direct(id, direct, metered, state.entries.keys());
            next.tables.insert(id, state);
            r.kept_tables.push(name);
            r.kept_entries += n;
        } else {
            r.dropped_tables.push(name);
            r.dropped_entries += n;
        }
    }
    r.kept_tables.sort();
    r.dropped_tables.sort();
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use p4fleet_proto::p4info::parse_text;

    const V1: &str = r#"
tables { preamble { id: 1 name: "a" } match_fields { id: 1 name: "k" bitwidth: 8 match_type: EXACT }
  action_refs { id: 10 } size: 16 }
tables { preamble { id: 2 name: "b" } match_fields { id: 1 name: "k" bitwidth: 8 match_type: EXACT }
  action_refs { id: 10 } size: 16 }
tables { preamble { id: 3 name: "c" } match_fields { id: 1 name: "k" bitwidth: 8 match_type: EXACT }
  action_refs { id: 11 } size: 16 }
actions { preamble { id: 10 name: "fwd" } params { id: 1 name: "port" bitwidth: 9 } }
actions { preamble { id: 11 name: "set" } params { id: 1 name: "v" bitwidth: 8 } }
"#;

    fn schema(text: &str) -> Schema {
        Schema::from_p4info(&parse_text(text).unwrap()).unwrap()
    }

    #[test]
    fn only_tables_defined_exactly_as_before_are_unchanged() {
        let v1 = schema(V1);
        assert!((1..=3).all(|id| unchanged(&v1, &v1, id)));
        // b's size, c's action's parameter width: changed; a: not.
        let v2 = schema(
            &V1.replace(
                "action_refs { id: 10 } size: 16 }\ntables { preamble { id: 3",
                "action_refs { id: 10 } size: 32 }\ntables { preamble { id: 3",
            )
            .replace("name: \"v\" bitwidth: 8", "name: \"v\" bitwidth: 16"),
        );
        assert!(unchanged(&v1, &v2, 1));
        assert!(!unchanged(&v1, &v2, 2));
        assert!(!unchanged(&v1, &v2, 3));
        // A match field's width, a table that is gone.
        let v3 = schema(&V1.replacen("bitwidth: 8 match_type", "bitwidth: 16 match_type", 1));
        assert!(!unchanged(&v1, &v3, 1));
        assert!(unchanged(&v1, &v3, 2));
        let mut v4 = parse_text(V1).unwrap();
        v4.tables.retain(|t| t.preamble.as_ref().unwrap().id != 2);
        let v4 = Schema::from_p4info(&v4).unwrap();
        assert!(!unchanged(&v1, &v4, 2));
        assert!(!unchanged(&v1, &v1, 9));
    }

    #[test]
    fn kept_tables_keep_their_state_and_others_start_empty() {
        use crate::p4runtime::wire::Scratch;
        use p4fleet_proto::p4runtime::{self as p4, update::Type};
        use prost::Message;
        // Table a counts its entries' hits.
        let v1 = V1.replacen(
            "action_refs { id: 10 } size: 16 }",
            "action_refs { id: 10 } direct_resource_ids: 300 size: 16 }",
            1,
        ) + "direct_counters { preamble { id: 300 name: \"a_hits\" } spec { unit: BOTH } direct_table_id: 1 }\n";
        let mut old = Pipeline::new(schema(&v1), Default::default());
        let insert = |table_id: u32, action_id: u32, k: u8| {
            p4::Update {
                r#type: Type::Insert as i32,
                entity: Some(p4::Entity {
                    entity: Some(p4::entity::Entity::TableEntry(p4::TableEntry {
                        table_id,
                        r#match: vec![p4::FieldMatch {
                            field_id: 1,
                            field_match_type: Some(p4::field_match::FieldMatchType::Exact(
                                p4::field_match::Exact { value: vec![k] },
                            )),
                        }],
                        action: Some(p4::TableAction {
                            r#type: Some(p4::table_action::Type::Action(p4::Action {
                                action_id,
                                params: vec![p4::action::Param {
                                    param_id: 1,
                                    value: vec![1],
                                }],
                            })),
                        }),
                        ..Default::default()
                    })),
                }),
            }
            .encode_to_vec()
        };
        let mut key = Vec::new();
        for (t, a) in [(1, 10), (1, 10), (2, 10), (3, 11)] {
            for k in 1..=2u8 {
                let u = insert(t, a, k + if t == 1 { 0 } else { 10 });
                let mut scratch = Scratch::default();
                let _ = old.apply(&u, &mut key, &mut scratch);
            }
        }
        assert_eq!(old.table(1).unwrap().inserts(), 2);
        old.resources.direct_counter(1, &[1]).unwrap().count(64);
        let v2 = v1.replace(
            "action_refs { id: 10 } size: 16 }\ntables { preamble { id: 3",
            "action_refs { id: 10 } size: 32 }\ntables { preamble { id: 3",
        );
        let mut next = Pipeline::new(schema(&v2), Default::default());
        let r = carry_over(old, &mut next);
        assert_eq!(r.kept_tables, ["a", "c"]);
        assert_eq!(r.dropped_tables, ["b"]);
        assert_eq!((r.kept_entries, r.dropped_entries), (4, 2));
        assert_eq!(next.table(1).unwrap().len(), 2);
        // Kept with its insert count: nothing was inserted again.
        assert_eq!(next.table(1).unwrap().inserts(), 2);
        // Its entries keep their direct counts, as on a device.
        let counted = |k: u8| next.resources.direct_counter(1, &[k]).map(|c| c.load());
        assert_eq!((counted(1), counted(2)), (Some((1, 64)), Some((0, 0))));
        assert_eq!(next.table(2).unwrap().len(), 0);
        assert_eq!(next.table(2).unwrap().inserts(), 0);
        assert_eq!(next.table(3).unwrap().len(), 2);
    }
}
