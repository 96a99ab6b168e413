//! What the emulator needs from a P4Info, checked once when a pipeline is set
//! so that writes only do table lookups.

use p4fleet_proto::p4info::{self, P4Info, action_ref::Scope, match_field};
use p4fleet_proto::p4runtime as p4;

use crate::key::{IdMap, MatchKind};
use crate::p4runtime::resources::ResourceSchema;

/// A P4Info that cannot be realized.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid P4Info: {0}")]
pub struct SchemaError(pub String);

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldInfo {
    pub id: u32,
    pub name: String,
    pub bitwidth: u32,
    pub nbytes: usize,
    pub kind: MatchKind,
    /// Offset of this field in the canonical key.
    pub offset: usize,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParamInfo {
    pub id: u32,
    pub name: String,
    pub bitwidth: u32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActionInfo {
    pub id: u32,
    pub name: String,
    pub params: Vec<ParamInfo>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct TableInfo {
    pub id: u32,
    pub name: String,
    pub fields: Vec<FieldInfo>,
    /// Priority is part of the key (and required) iff a field is ternary,
    /// range or optional.
    pub needs_priority: bool,
    /// Total canonical key length, including 4 bytes of priority if needed.
    pub key_len: usize,
    /// `None` when P4Info says size 0 (no limit known).
    pub size: Option<usize>,
    /// Action id -> scope.
    pub actions: Vec<(u32, Scope)>,
    pub const_default_action_id: u32,
    pub is_const: bool,
    /// Non-zero for tables implemented by an action profile (entries take
    /// a member, a group or a one-shot action set).
    pub implementation_id: u32,
    /// Default action the table starts with (and returns to on reset).
    pub initial_default: Option<p4::Action>,
    /// `idle_timeout_behavior: NOTIFY_CONTROL`: entries may have an idle
    /// timeout (`super::idle`).
    pub idle_notify: bool,
}

impl TableInfo {
    pub fn field(&self, id: u32) -> Option<(usize, &FieldInfo)> {
        // Tables have a handful of fields: a linear scan beats hashing.
        self.fields.iter().enumerate().find(|(_, f)| f.id == id)
    }

    pub fn action_scope(&self, id: u32) -> Option<Scope> {
        self.actions.iter().find(|(a, _)| *a == id).map(|(_, s)| *s)
    }
}

/// The parts of a P4Info the emulator enforces.
#[derive(Debug, Clone, PartialEq)]
pub struct Schema {
    pub tables: IdMap<TableInfo>,
    pub actions: IdMap<ActionInfo>,
    pub profiles: IdMap<super::action_profile::ProfileInfo>,
    /// Counters, meters and registers.
    pub resources: ResourceSchema,
    /// Digests by id (`super::digests`).
    pub digests: IdMap<super::digests::DigestInfo>,
}

pub fn nbytes(bitwidth: u32) -> usize {
    bitwidth.div_ceil(8) as usize
}

impl Schema {
    pub fn from_p4info(info: &P4Info) -> Result<Schema, SchemaError> {
        let mut actions = IdMap::default();
        for a in &info.actions {
            let pre = a.preamble.clone().unwrap_or_default();
            if pre.id == 0 {
                return Err(SchemaError(format!("action {:?} has id 0", pre.name)));
            }
            let mut params: Vec<ParamInfo> = Vec::with_capacity(a.params.len());
            for p in &a.params {
                if p.bitwidth <= 0 {
                    return Err(SchemaError(format!(
                        "action {} param {} has bitwidth {}",
                        pre.name, p.name, p.bitwidth
                    )));
                }
                if params.iter().any(|q| q.id == p.id) {
                    return Err(SchemaError(format!(
                        "action {} has duplicate param id {}",
                        pre.name, p.id
                    )));
                }
                params.push(ParamInfo {
                    id: p.id,
                    name: p.name.clone(),
                    bitwidth: p.bitwidth as u32,
                });
            }
            let prev = actions.insert(
                pre.id,
                ActionInfo {
                    id: pre.id,
                    name: pre.name.clone(),
                    params,
                },
            );
            if prev.is_some() {
                return Err(SchemaError(format!("duplicate action id {}", pre.id)));
            }
        }

        let mut tables = IdMap::default();
        for t in &info.tables {
            let table = table_info(t, &actions)?;
            if tables.insert(table.id, table).is_some() {
                return Err(SchemaError(format!(
                    "duplicate table id {}",
                    t.preamble.as_ref().map(|p| p.id).unwrap_or_default()
                )));
            }
        }
        let profiles = super::action_profile::profiles_from_p4info(info, &tables)?;
        let resources = ResourceSchema::from_p4info(info, &tables)?;
        Ok(Schema {
            tables,
            actions,
            profiles,
            resources,
            digests: super::digests::digests_from_p4info(info),
        })
    }
}

fn table_info(t: &p4info::Table, actions: &IdMap<ActionInfo>) -> Result<TableInfo, SchemaError> {
    let pre = t.preamble.clone().unwrap_or_default();
    if pre.id == 0 {
        return Err(SchemaError(format!("table {:?} has id 0", pre.name)));
    }
    let mut fields: Vec<FieldInfo> = Vec::with_capacity(t.match_fields.len());
    let mut offset = 0;
    for mf in &t.match_fields {
        let kind = match &mf.r#match {
            Some(match_field::Match::MatchType(m)) => match match_field::MatchType::try_from(*m) {
                Ok(match_field::MatchType::Exact) => MatchKind::Exact,
                Ok(match_field::MatchType::Lpm) => MatchKind::Lpm,
                Ok(match_field::MatchType::Ternary) => MatchKind::Ternary,
                Ok(match_field::MatchType::Range) => MatchKind::Range,
                Ok(match_field::MatchType::Optional) => MatchKind::Optional,
                _ => {
                    return Err(SchemaError(format!(
                        "table {} field {} has unsupported match type {m}",
                        pre.name, mf.name
                    )));
                }
            },
            Some(match_field::Match::OtherMatchType(o)) => {
                return Err(SchemaError(format!(
                    "table {} field {} has unsupported match type {o:?}",
                    pre.name, mf.name
                )));
            }
            None => {
                return Err(SchemaError(format!(
                    "table {} field {} has no match type",
                    pre.name, mf.name
                )));
            }
        };
        if mf.bitwidth <= 0 {
            return Err(SchemaError(format!(
                "table {} field {} has bitwidth {}",
                pre.name, mf.name, mf.bitwidth
            )));
        }
        if mf.id == 0 || fields.iter().any(|f| f.id == mf.id) {
            return Err(SchemaError(format!(
                "table {} has invalid or duplicate field id {}",
                pre.name, mf.id
            )));
        }
        let bitwidth = mf.bitwidth as u32;
        let nb = nbytes(bitwidth);
        fields.push(FieldInfo {
            id: mf.id,
            name: mf.name.clone(),
            bitwidth,
            nbytes: nb,
            kind,
            offset,
        });
        offset += kind.key_len(nb);
    }
    let needs_priority = fields.iter().any(|f| {
        matches!(
            f.kind,
            MatchKind::Ternary | MatchKind::Range | MatchKind::Optional
        )
    });
    if needs_priority {
        offset += 4;
    }

    let mut table_actions = Vec::with_capacity(t.action_refs.len());
    for r in &t.action_refs {
        if !actions.contains_key(&r.id) {
            return Err(SchemaError(format!(
                "table {} refers to unknown action {}",
                pre.name, r.id
            )));
        }
        let scope = Scope::try_from(r.scope).unwrap_or(Scope::TableAndDefault);
        table_actions.push((r.id, scope));
    }
    if t.const_default_action_id != 0 && !actions.contains_key(&t.const_default_action_id) {
        return Err(SchemaError(format!(
            "table {} has unknown const default action {}",
            pre.name, t.const_default_action_id
        )));
    }

    // P4Info does not carry the initial default action (it lives in the
    // device config); start from the const one, else the first parameterless
    // action that may be a default (typically NoAction).
    let initial_default_id = if t.const_default_action_id != 0 {
        Some(t.const_default_action_id)
    } else {
        table_actions
            .iter()
            .find(|(id, scope)| {
                *scope != Scope::TableOnly && actions.get(id).is_some_and(|a| a.params.is_empty())
            })
            .map(|(id, _)| *id)
    };

    Ok(TableInfo {
        id: pre.id,
        name: pre.name.clone(),
        fields,
        needs_priority,
        key_len: offset,
        size: if t.size > 0 {
            Some(t.size as usize)
        } else {
            None
        },
        actions: table_actions,
        const_default_action_id: t.const_default_action_id,
        is_const: t.is_const_table,
        implementation_id: t.implementation_id,
        initial_default: initial_default_id.map(|id| p4::Action {
            action_id: id,
            params: vec![],
        }),
        idle_notify: t.idle_timeout_behavior
            == p4info::table::IdleTimeoutBehavior::NotifyControl as i32,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::testing::P4INFO as INFO;

    fn schema(text: &str) -> Result<Schema, SchemaError> {
        Schema::from_p4info(&p4fleet_proto::p4info::parse_text(text).unwrap())
    }

    #[test]
    fn key_layout_priority_and_default() {
        let s = schema(INFO).unwrap();
        let t = &s.tables[&1];
        // 2 (exact 9 bits) + 4+2 (lpm) + 1+1 (ternary) + 4 (priority)
        assert_eq!(t.key_len, 14);
        assert!(t.needs_priority);
        assert_eq!(t.fields[2].offset, 8);
        assert_eq!(t.size, None);
        assert_eq!(t.initial_default.as_ref().unwrap().action_id, 11);
        assert_eq!(t.action_scope(10), Some(Scope::TableOnly));
    }

    #[test]
    fn refuses_unknown_actions_and_bad_fields() {
        let no_actions: String = INFO.lines().filter(|l| !l.starts_with("actions")).collect();
        assert!(schema(&no_actions).is_err());
        assert!(schema(&INFO.replace("bitwidth: 9", "bitwidth: 0")).is_err());
        assert!(schema(&INFO.replace("id: 2 name", "id: 1 name")).is_err());
    }
}
