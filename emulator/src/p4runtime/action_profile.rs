//! Action profiles of one pipeline: their P4Info ([`ProfileInfo`]), their
//! members and groups ([`ProfileState`]), and the table entries that use
//! them (a member, a group, or a one-shot action set). Pure logic with the
//! P4Runtime spec's error codes, applied per update; the caller holds the
//! device's pipeline lock.
//!
//! What is counted against what (P4Runtime 1.4, 9.2):
//! - a profile holds at most `size` members;
//! - a group's size is the sum of its members' weights (`sum_of_weights`,
//!   also when P4Info says nothing) or their number (`sum_of_members`, each
//!   weight at most `max_member_weight`); it is at most the group's
//!   `max_size`, which is at most the profile's `max_group_size` (when set);
//! - a member or group that a group or entry refers to cannot be deleted;
//! - a profile's tables take either members and groups or one-shot action
//!   sets, not both at once.

use std::collections::BTreeMap;

use p4fleet_proto::p4info::{P4Info, action_profile::SelectorSizeSemantics};
use p4fleet_proto::p4runtime::{self as p4, update::Type};
use prost::Message;
use tonic::Code;

use crate::key::IdMap;
use crate::p4runtime::entry::{canonicalize_action, check_action};
use crate::p4runtime::schema::{Schema, SchemaError, TableInfo};
use crate::p4runtime::wire::ParamView;
use crate::update_error::{UpdateError, err};

/// How a selector counts a group's size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SizeSemantics {
    SumOfWeights,
    SumOfMembers { max_member_weight: Option<i32> },
}

/// One `action_profiles` entry of a P4Info.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProfileInfo {
    pub id: u32,
    pub name: String,
    pub table_ids: Vec<u32>,
    pub with_selector: bool,
    /// Most members (`None`: P4Info says 0, no limit known).
    pub size: Option<u64>,
    /// Largest group (`None`: P4Info says 0, no limit known).
    pub max_group_size: Option<i32>,
    pub semantics: SizeSemantics,
}

/// The action profiles of a P4Info, checked against its tables: each
/// profile's tables exist and name it as their implementation.
pub fn profiles_from_p4info(
    info: &P4Info,
    tables: &IdMap<TableInfo>,
) -> Result<IdMap<ProfileInfo>, SchemaError> {
    let mut out = IdMap::default();
    for p in &info.action_profiles {
        let pre = p.preamble.clone().unwrap_or_default();
        if pre.id == 0 {
            return Err(SchemaError(format!(
                "action profile {:?} has id 0",
                pre.name
            )));
        }
        for t in &p.table_ids {
            match tables.get(t) {
                Some(table) if table.implementation_id == pre.id => {}
                Some(table) => {
                    return Err(SchemaError(format!(
                        "action profile {} lists table {} whose implementation_id is {}",
                        pre.name, table.name, table.implementation_id
                    )));
                }
                None => {
                    return Err(SchemaError(format!(
                        "action profile {} lists unknown table {t}",
                        pre.name
                    )));
                }
            }
        }
        if p.size < 0 || p.max_group_size < 0 {
            return Err(SchemaError(format!(
                "action profile {} has a negative size or max_group_size",
                pre.name
            )));
        }
        let semantics = match &p.selector_size_semantics {
            Some(SelectorSizeSemantics::SumOfMembers(m)) => SizeSemantics::SumOfMembers {
                max_member_weight: m.max_member_weight.filter(|w| *w > 0),
            },
            Some(SelectorSizeSemantics::SumOfWeights(_)) | None => SizeSemantics::SumOfWeights,
        };
        let profile = ProfileInfo {
            id: pre.id,
            name: pre.name.clone(),
            table_ids: p.table_ids.clone(),
            with_selector: p.with_selector,
            size: (p.size > 0).then_some(p.size as u64),
            max_group_size: (p.max_group_size > 0).then_some(p.max_group_size),
            semantics,
        };
        if out.insert(pre.id, profile).is_some() {
            return Err(SchemaError(format!(
                "duplicate action profile id {}",
                pre.id
            )));
        }
    }
    for t in tables.values() {
        if t.implementation_id != 0 && !out.contains_key(&t.implementation_id) {
            return Err(SchemaError(format!(
                "table {} has unknown implementation_id {}",
                t.name, t.implementation_id
            )));
        }
    }
    Ok(out)
}

#[derive(Debug, Clone, PartialEq)]
struct Member {
    action: p4::Action,
    /// Groups and table entries that refer to this member.
    refs: u32,
}

#[derive(Debug, Clone, PartialEq)]
struct Group {
    /// (member id, weight), as written.
    members: Vec<(u32, i32)>,
    max_size: i32,
    /// Size as the profile counts it (weights or members).
    size: u64,
    /// Table entries that refer to this group.
    refs: u32,
}

/// The members and groups of one action profile.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct ProfileState {
    members: BTreeMap<u32, Member>,
    groups: BTreeMap<u32, Group>,
    /// Sum of the groups' sizes (what `size` bounds for a selector).
    grouped: u64,
    /// Table entries that carry a one-shot action set.
    one_shot_entries: u64,
}

impl ProfileState {
    pub fn is_empty(&self) -> bool {
        self.members.is_empty() && self.groups.is_empty() && self.one_shot_entries == 0
    }
}

/// The action profile state of every profile of a pipeline.
pub(crate) fn new_states(schema: &Schema) -> IdMap<ProfileState> {
    schema
        .profiles
        .keys()
        .map(|id| (*id, ProfileState::default()))
        .collect()
}

fn params(a: &p4::Action) -> Vec<ParamView<'_>> {
    a.params
        .iter()
        .map(|p| ParamView {
            param_id: p.param_id,
            value: &p.value,
        })
        .collect()
}

/// Checks an action for a member (or a one-shot action) of `profile`: it
/// must be an entry action of every table the profile implements.
fn check_profile_action(
    schema: &Schema,
    profile: &ProfileInfo,
    action: Option<&p4::Action>,
) -> Result<p4::Action, UpdateError> {
    let Some(action) = action else {
        return Err(err(
            Code::InvalidArgument,
            format!("action profile {}: member has no action", profile.name),
        ));
    };
    for t in &profile.table_ids {
        let table = &schema.tables[t];
        check_action(schema, table, action.action_id, &params(action), false)?;
    }
    let mut a = action.clone();
    canonicalize_action(&mut a);
    Ok(a)
}

fn unknown_profile(id: u32) -> UpdateError {
    err(Code::NotFound, format!("unknown action profile id {id}"))
}

/// Profile `id`'s schema and state.
fn profile_state<'a>(
    schema: &'a Schema,
    states: &'a mut IdMap<ProfileState>,
    id: u32,
) -> Result<(&'a ProfileInfo, &'a mut ProfileState), UpdateError> {
    let info = schema
        .profiles
        .get(&id)
        .ok_or_else(|| unknown_profile(id))?;
    let state = states.get_mut(&info.id).expect("one state per profile");
    Ok((info, state))
}

/// Applies one ActionProfileMember update.
pub(crate) fn apply_member(
    schema: &Schema,
    states: &mut IdMap<ProfileState>,
    ty: Type,
    m: &p4::ActionProfileMember,
) -> Result<Type, UpdateError> {
    let (info, state) = profile_state(schema, states, m.action_profile_id)?;
    let what = || format!("action profile {} member {}", info.name, m.member_id);
    match ty {
        Type::Insert => {
            if state.one_shot_entries > 0 {
                return Err(err(
                    Code::FailedPrecondition,
                    format!("{}: the profile's tables use one-shot action sets", what()),
                ));
            }
            if state.members.contains_key(&m.member_id) {
                return Err(err(
                    Code::AlreadyExists,
                    format!("{}: already exists", what()),
                ));
            }
            let action = check_profile_action(schema, info, m.action.as_ref())?;
            if info.size.is_some_and(|s| state.members.len() as u64 >= s) {
                return Err(err(
                    Code::ResourceExhausted,
                    format!(
                        "{}: the profile is full ({} members)",
                        what(),
                        state.members.len()
                    ),
                ));
            }
            state
                .members
                .insert(m.member_id, Member { action, refs: 0 });
        }
        Type::Modify => {
            let action = check_profile_action(schema, info, m.action.as_ref())?;
            let Some(slot) = state.members.get_mut(&m.member_id) else {
                return Err(err(Code::NotFound, format!("{}: no such member", what())));
            };
            slot.action = action;
        }
        Type::Delete => {
            let Some(slot) = state.members.get(&m.member_id) else {
                return Err(err(Code::NotFound, format!("{}: no such member", what())));
            };
            if slot.refs > 0 {
                return Err(err(
                    Code::FailedPrecondition,
                    format!(
                        "{}: in use by {} group(s) or table entries",
                        what(),
                        slot.refs
                    ),
                ));
            }
            state.members.remove(&m.member_id);
        }
        Type::Unspecified => unreachable!("checked by the caller"),
    }
    Ok(ty)
}

/// A group's (or one-shot set's) size as `info` counts it, after checking
/// each weight.
fn group_size(
    info: &ProfileInfo,
    weights: impl Iterator<Item = i32>,
    what: &dyn Fn() -> String,
) -> Result<u64, UpdateError> {
    let mut size = 0u64;
    for w in weights {
        if w <= 0 {
            return Err(err(
                Code::InvalidArgument,
                format!("{}: weight {w} (weights are positive)", what()),
            ));
        }
        size += match info.semantics {
            SizeSemantics::SumOfWeights => w as u64,
            SizeSemantics::SumOfMembers { max_member_weight } => {
                if let Some(max) = max_member_weight
                    && w > max
                {
                    return Err(err(
                        Code::InvalidArgument,
                        format!("{}: weight {w} is over max_member_weight {max}", what()),
                    ));
                }
                1
            }
        };
    }
    Ok(size)
}

fn size_name(info: &ProfileInfo) -> &'static str {
    match info.semantics {
        SizeSemantics::SumOfWeights => "sum of weights",
        SizeSemantics::SumOfMembers { .. } => "number of members",
    }
}

/// Applies one ActionProfileGroup update.
pub(crate) fn apply_group(
    schema: &Schema,
    states: &mut IdMap<ProfileState>,
    ty: Type,
    g: &p4::ActionProfileGroup,
) -> Result<Type, UpdateError> {
    let (info, state) = profile_state(schema, states, g.action_profile_id)?;
    let what = || format!("action profile {} group {}", info.name, g.group_id);
    if !info.with_selector {
        return Err(err(
            Code::InvalidArgument,
            format!("{}: the profile has no selector (no groups)", what()),
        ));
    }
    if ty == Type::Delete {
        let Some(old) = state.groups.get(&g.group_id) else {
            return Err(err(Code::NotFound, format!("{}: no such group", what())));
        };
        if old.refs > 0 {
            return Err(err(
                Code::FailedPrecondition,
                format!("{}: in use by {} table entries", what(), old.refs),
            ));
        }
        let old = state.groups.remove(&g.group_id).expect("checked");
        release_members(state, &old);
        return Ok(ty);
    }
    match (ty, state.groups.contains_key(&g.group_id)) {
        (Type::Insert, true) => {
            return Err(err(
                Code::AlreadyExists,
                format!("{}: already exists", what()),
            ));
        }
        (Type::Modify, false) => {
            return Err(err(Code::NotFound, format!("{}: no such group", what())));
        }
        _ => {}
    }
    if g.max_size < 0 {
        return Err(err(
            Code::InvalidArgument,
            format!("{}: max_size {} is negative", what(), g.max_size),
        ));
    }
    if let Some(limit) = info.max_group_size
        && g.max_size > limit
    {
        return Err(err(
            Code::InvalidArgument,
            format!(
                "{}: max_size {} is over the profile's max_group_size {limit}",
                what(),
                g.max_size
            ),
        ));
    }
    let mut seen = Vec::with_capacity(g.members.len());
    for m in &g.members {
        if seen.contains(&m.member_id) {
            return Err(err(
                Code::InvalidArgument,
                format!("{}: member {} is listed twice", what(), m.member_id),
            ));
        }
        seen.push(m.member_id);
        if !state.members.contains_key(&m.member_id) {
            return Err(err(
                Code::NotFound,
                format!("{}: no member {}", what(), m.member_id),
            ));
        }
    }
    let size = group_size(info, g.members.iter().map(|m| m.weight), &what)?;
    let limit = if g.max_size > 0 {
        Some(g.max_size)
    } else {
        info.max_group_size
    };
    if let Some(limit) = limit
        && size > limit as u64
    {
        return Err(err(
            Code::ResourceExhausted,
            format!(
                "{}: size {size} ({}) is over the maximum group size {limit}",
                what(),
                size_name(info)
            ),
        ));
    }
    let old_size = state.groups.get(&g.group_id).map_or(0, |o| o.size);
    let grouped = state.grouped - old_size + size;
    if let Some(capacity) = info.size
        && grouped > capacity
    {
        return Err(err(
            Code::ResourceExhausted,
            format!(
                "{}: the profile's groups would hold {grouped} ({}), over its size {capacity}",
                what(),
                size_name(info)
            ),
        ));
    }
    // Checked: now replace.
    let refs = if let Some(old) = state.groups.remove(&g.group_id) {
        release_members(state, &old);
        old.refs
    } else {
        0
    };
    for m in &g.members {
        state.members.get_mut(&m.member_id).expect("checked").refs += 1;
    }
    state.grouped = grouped;
    state.groups.insert(
        g.group_id,
        Group {
            members: g.members.iter().map(|m| (m.member_id, m.weight)).collect(),
            max_size: g.max_size,
            size,
            refs,
        },
    );
    Ok(ty)
}

fn release_members(state: &mut ProfileState, old: &Group) {
    state.grouped -= old.size;
    for (id, _) in &old.members {
        if let Some(m) = state.members.get_mut(id) {
            m.refs -= 1;
        }
    }
}

/// What a table entry of an indirect table refers to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ProfileRef {
    Member(u32),
    Group(u32),
    OneShot,
}

/// The profile reference of a stored (or written) `TableEntry`'s action.
pub(crate) fn entry_ref(action: Option<&p4::TableAction>) -> Option<ProfileRef> {
    use p4::table_action::Type as A;
    match action?.r#type.as_ref()? {
        A::ActionProfileMemberId(id) => Some(ProfileRef::Member(*id)),
        A::ActionProfileGroupId(id) => Some(ProfileRef::Group(*id)),
        A::ActionProfileActionSet(_) => Some(ProfileRef::OneShot),
        A::Action(_) => None,
    }
}

/// Checks the action of an entry written to `table`, which an action
/// profile implements; returns what the entry will refer to. Nothing is
/// changed: [`add_ref`] records the reference once the entry is stored.
pub(crate) fn check_entry(
    schema: &Schema,
    states: &IdMap<ProfileState>,
    table: &TableInfo,
    action: Option<&p4::TableAction>,
) -> Result<ProfileRef, UpdateError> {
    use p4::table_action::Type as A;
    let info = &schema.profiles[&table.implementation_id];
    let state = &states[&info.id];
    let what = || format!("table {} (action profile {})", table.name, info.name);
    match action.and_then(|a| a.r#type.as_ref()) {
        None => Err(err(Code::InvalidArgument, "entry has no action")),
        Some(A::Action(_)) => Err(err(
            Code::InvalidArgument,
            format!(
                "{}: entries take a member, a group or an action set, not an action",
                what()
            ),
        )),
        Some(A::ActionProfileMemberId(id)) => {
            if !state.members.contains_key(id) {
                return Err(err(Code::NotFound, format!("{}: no member {id}", what())));
            }
            Ok(ProfileRef::Member(*id))
        }
        Some(A::ActionProfileGroupId(id)) => {
            if !info.with_selector {
                return Err(err(
                    Code::InvalidArgument,
                    format!("{}: the profile has no selector (no groups)", what()),
                ));
            }
            if !state.groups.contains_key(id) {
                return Err(err(Code::NotFound, format!("{}: no group {id}", what())));
            }
            Ok(ProfileRef::Group(*id))
        }
        Some(A::ActionProfileActionSet(set)) => {
            if !state.members.is_empty() || !state.groups.is_empty() {
                return Err(err(
                    Code::FailedPrecondition,
                    format!(
                        "{}: the profile is programmed with members and groups, \
                         not one-shot action sets",
                        what()
                    ),
                ));
            }
            let actions = &set.action_profile_actions;
            if actions.is_empty() {
                return Err(err(
                    Code::InvalidArgument,
                    format!("{}: empty action set", what()),
                ));
            }
            if !info.with_selector && actions.len() > 1 {
                return Err(err(
                    Code::InvalidArgument,
                    format!(
                        "{}: the profile has no selector: an action set holds one action",
                        what()
                    ),
                ));
            }
            for a in actions {
                check_profile_action(schema, info, a.action.as_ref())?;
            }
            let size = group_size(info, actions.iter().map(|a| a.weight), &what)?;
            if let Some(limit) = info.max_group_size
                && size > limit as u64
            {
                return Err(err(
                    Code::ResourceExhausted,
                    format!(
                        "{}: action set size {size} ({}) is over max_group_size {limit}",
                        what(),
                        size_name(info)
                    ),
                ));
            }
            Ok(ProfileRef::OneShot)
        }
    }
}

/// Records that a stored entry of `table` refers to `r`.
pub(crate) fn add_ref(states: &mut IdMap<ProfileState>, table: &TableInfo, r: ProfileRef) {
    let state = states
        .get_mut(&table.implementation_id)
        .expect("one state per profile");
    match r {
        ProfileRef::Member(id) => state.members.get_mut(&id).expect("checked").refs += 1,
        ProfileRef::Group(id) => state.groups.get_mut(&id).expect("checked").refs += 1,
        ProfileRef::OneShot => state.one_shot_entries += 1,
    }
}

/// Forgets the reference of an entry of `table` that was replaced or
/// deleted (`stored` is its encoded `TableEntry`).
pub(crate) fn release_entry(states: &mut IdMap<ProfileState>, table: &TableInfo, stored: &[u8]) {
    let Ok(te) = p4::TableEntry::decode(stored) else {
        return;
    };
    let Some(state) = states.get_mut(&table.implementation_id) else {
        return;
    };
    match entry_ref(te.action.as_ref()) {
        Some(ProfileRef::Member(id)) => {
            if let Some(m) = state.members.get_mut(&id) {
                m.refs -= 1;
            }
        }
        Some(ProfileRef::Group(id)) => {
            if let Some(g) = state.groups.get_mut(&id) {
                g.refs -= 1;
            }
        }
        Some(ProfileRef::OneShot) => state.one_shot_entries -= 1,
        None => {}
    }
}

/// Canonical form of a one-shot action set's params (what Read returns).
pub(crate) fn canonicalize_action_set(e: &mut p4::TableEntry) {
    if let Some(p4::TableAction {
        r#type: Some(p4::table_action::Type::ActionProfileActionSet(set)),
    }) = &mut e.action
    {
        for a in &mut set.action_profile_actions {
            if let Some(action) = &mut a.action {
                canonicalize_action(action);
            }
        }
    }
}

/// The profile ids a read filter names (0: all), in id order.
fn profile_ids(schema: &Schema, id: u32) -> Result<Vec<u32>, UpdateError> {
    let mut ids: Vec<u32> = if id == 0 {
        schema.profiles.keys().copied().collect()
    } else if schema.profiles.contains_key(&id) {
        vec![id]
    } else {
        return Err(unknown_profile(id));
    };
    ids.sort_unstable();
    Ok(ids)
}

/// Members matching a read filter (profile 0: all profiles; member 0: all
/// members), as encoded `Entity`s.
pub(crate) fn read_members(
    schema: &Schema,
    states: &IdMap<ProfileState>,
    filter: &p4::ActionProfileMember,
    emit: &mut dyn FnMut(&[u8]),
) -> Result<(), UpdateError> {
    let wanted = (filter.action_profile_id, filter.member_id);
    read_matching(
        schema,
        states,
        wanted,
        |s| &s.members,
        emit,
        |id, mid, m| {
            p4::entity::Entity::ActionProfileMember(p4::ActionProfileMember {
                action_profile_id: id,
                member_id: mid,
                action: Some(m.action.clone()),
            })
        },
    )
}

/// Groups matching a read filter (profile 0: all; group 0: all), as
/// encoded `Entity`s.
pub(crate) fn read_groups(
    schema: &Schema,
    states: &IdMap<ProfileState>,
    filter: &p4::ActionProfileGroup,
    emit: &mut dyn FnMut(&[u8]),
) -> Result<(), UpdateError> {
    let wanted = (filter.action_profile_id, filter.group_id);
    read_matching(
        schema,
        states,
        wanted,
        |s| &s.groups,
        emit,
        |id, gid, g| {
            p4::entity::Entity::ActionProfileGroup(p4::ActionProfileGroup {
                action_profile_id: id,
                group_id: gid,
                members: g
                    .members
                    .iter()
                    .map(|(member_id, weight)| p4::action_profile_group::Member {
                        member_id: *member_id,
                        weight: *weight,
                        watch_kind: None,
                    })
                    .collect(),
                max_size: g.max_size,
            })
        },
    )
}

/// Emits, encoded, the entity `entity` makes of each item (of those
/// `items` picks from a profile's state) that `(profile, id)` names (0:
/// all profiles, all ids).
fn read_matching<T>(
    schema: &Schema,
    states: &IdMap<ProfileState>,
    (profile, id): (u32, u32),
    items: impl Fn(&ProfileState) -> &BTreeMap<u32, T>,
    emit: &mut dyn FnMut(&[u8]),
    entity: impl Fn(u32, u32, &T) -> p4::entity::Entity,
) -> Result<(), UpdateError> {
    for pid in profile_ids(schema, profile)? {
        for (iid, item) in items(&states[&pid]) {
            if id != 0 && id != *iid {
                continue;
            }
            let e = p4::Entity {
                entity: Some(entity(pid, *iid, item)),
            };
            emit(&e.encode_to_vec());
        }
    }
    Ok(())
}

/// Whether a profile's state can be kept under a new pipeline: the
/// profile, its tables and their actions are unchanged.
pub(crate) fn survives(old: &Schema, next: &Schema, id: u32) -> bool {
    let same_action = |a: &u32| old.actions.get(a) == next.actions.get(a);
    old.profiles.get(&id).is_some_and(|p| {
        next.profiles.get(&id) == Some(p)
            && p.table_ids.iter().all(|t| {
                old.tables.get(t) == next.tables.get(t)
                    && old.tables[t].actions.iter().all(|(a, _)| same_action(a))
            })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A selector (max group 4, size 6) on table 1 with actions 10 (one
    /// 4-bit param) and 11; a plain profile on table 2.
    pub const P4INFO: &str = r#"
tables {
  preamble { id: 1 name: "ecmp" }
  match_fields { id: 1 name: "a" bitwidth: 8 match_type: EXACT }
  action_refs { id: 10 }
  action_refs { id: 11 }
  action_refs { id: 12 scope: DEFAULT_ONLY }
  implementation_id: 100
}
tables {
  preamble { id: 2 name: "plain" }
  match_fields { id: 1 name: "a" bitwidth: 8 match_type: EXACT }
  action_refs { id: 10 }
  implementation_id: 101
}
actions { preamble { id: 10 name: "set" } params { id: 1 name: "p" bitwidth: 4 } }
actions { preamble { id: 11 name: "drop" } }
actions { preamble { id: 12 name: "NoAction" } }
action_profiles { preamble { id: 100 name: "sel" } table_ids: 1 with_selector: true size: 6 max_group_size: 4 }
action_profiles { preamble { id: 101 name: "prof" } table_ids: 2 size: 2 }
"#;

    fn schema(text: &str) -> Schema {
        Schema::from_p4info(&p4fleet_proto::p4info::parse_text(text).unwrap()).unwrap()
    }

    fn set(p: u8) -> p4::Action {
        crate::testing::action(10, &[&[0, p]])
    }

    fn member(profile: u32, id: u32, action: p4::Action) -> p4::ActionProfileMember {
        p4::ActionProfileMember {
            action_profile_id: profile,
            member_id: id,
            action: Some(action),
        }
    }

    fn group(id: u32, members: &[(u32, i32)], max_size: i32) -> p4::ActionProfileGroup {
        p4::ActionProfileGroup {
            action_profile_id: 100,
            group_id: id,
            members: members
                .iter()
                .map(|(m, w)| p4::action_profile_group::Member {
                    member_id: *m,
                    weight: *w,
                    watch_kind: None,
                })
                .collect(),
            max_size,
        }
    }

    fn code<T: std::fmt::Debug>(r: Result<T, UpdateError>) -> Code {
        r.unwrap_err().code
    }

    #[test]
    fn schema_links_profiles_and_tables() {
        let s = schema(P4INFO);
        let sel = &s.profiles[&100];
        assert_eq!(
            (sel.size, sel.max_group_size, sel.semantics),
            (Some(6), Some(4), SizeSemantics::SumOfWeights)
        );
        assert!(!s.profiles[&101].with_selector);
        let info = |t: &str| Schema::from_p4info(&p4fleet_proto::p4info::parse_text(t).unwrap());
        assert!(info(&P4INFO.replace("implementation_id: 101", "implementation_id: 7")).is_err());
        assert!(info(&P4INFO.replace("table_ids: 2", "table_ids: 1")).is_err());
        let fabric = info(include_str!("../../../examples/fabric/p4info.txt")).unwrap();
        assert_eq!(fabric.profiles.len(), 1);
    }

    #[test]
    fn members_are_checked_counted_and_protected() {
        let s = schema(P4INFO);
        let mut st = new_states(&s);
        let ins = |st: &mut IdMap<ProfileState>, m| apply_member(&s, st, Type::Insert, &m);
        assert_eq!(ins(&mut st, member(100, 1, set(1))), Ok(Type::Insert));
        assert_eq!(
            code(ins(&mut st, member(100, 1, set(2)))),
            Code::AlreadyExists
        );
        assert_eq!(code(ins(&mut st, member(9, 1, set(2)))), Code::NotFound);
        // Width, unknown action, default-only action.
        assert_eq!(
            code(ins(&mut st, member(100, 2, set(16)))),
            Code::OutOfRange
        );
        let unknown = p4::Action {
            action_id: 99,
            params: vec![],
        };
        assert_eq!(
            code(ins(&mut st, member(100, 2, unknown))),
            Code::InvalidArgument
        );
        let noaction = p4::Action {
            action_id: 12,
            params: vec![],
        };
        assert_eq!(
            code(ins(&mut st, member(100, 2, noaction))),
            Code::InvalidArgument
        );
        // The plain profile holds two members.
        assert!(ins(&mut st, member(101, 1, set(1))).is_ok());
        assert!(ins(&mut st, member(101, 2, set(2))).is_ok());
        assert_eq!(
            code(ins(&mut st, member(101, 3, set(3)))),
            Code::ResourceExhausted
        );
        // Modify keeps the id; stored params are canonical.
        assert!(apply_member(&s, &mut st, Type::Modify, &member(100, 1, set(5))).is_ok());
        let mut read = Vec::new();
        let filter = p4::ActionProfileMember {
            action_profile_id: 100,
            ..Default::default()
        };
        read_members(&s, &st, &filter, &mut |e| read.push(e.to_vec())).unwrap();
        let e = p4::Entity::decode(read[0].as_slice()).unwrap();
        let Some(p4::entity::Entity::ActionProfileMember(m)) = e.entity else {
            panic!("member")
        };
        assert_eq!(m.action.unwrap().params[0].value, vec![5]);
        assert_eq!(
            code(apply_member(
                &s,
                &mut st,
                Type::Modify,
                &member(100, 9, set(5))
            )),
            Code::NotFound
        );
        // In a group: not deletable until the group goes.
        assert!(apply_group(&s, &mut st, Type::Insert, &group(1, &[(1, 1)], 0)).is_ok());
        let del = member(100, 1, set(5));
        assert_eq!(
            code(apply_member(&s, &mut st, Type::Delete, &del)),
            Code::FailedPrecondition
        );
        assert!(apply_group(&s, &mut st, Type::Delete, &group(1, &[], 0)).is_ok());
        assert_eq!(
            apply_member(&s, &mut st, Type::Delete, &del),
            Ok(Type::Delete)
        );
        assert_eq!(
            code(apply_member(&s, &mut st, Type::Delete, &del)),
            Code::NotFound
        );
    }

    #[test]
    fn group_sizes_follow_weights_max_size_and_profile_size() {
        let s = schema(P4INFO);
        let mut st = new_states(&s);
        for id in 1..=5 {
            apply_member(&s, &mut st, Type::Insert, &member(100, id, set(id as u8))).unwrap();
        }
        let g = |st: &mut IdMap<ProfileState>, ty, grp| apply_group(&s, st, ty, &grp);
        // Sum of weights 5 > max_group_size 4.
        assert_eq!(
            code(g(&mut st, Type::Insert, group(1, &[(1, 2), (2, 3)], 0))),
            Code::ResourceExhausted
        );
        // Four members of weight 1 fit; a fifth does not.
        assert!(
            g(
                &mut st,
                Type::Insert,
                group(1, &[(1, 1), (2, 1), (3, 1), (4, 1)], 0)
            )
            .is_ok()
        );
        assert_eq!(
            code(g(
                &mut st,
                Type::Modify,
                group(1, &[(1, 1), (2, 1), (3, 1), (4, 1), (5, 1)], 0)
            )),
            Code::ResourceExhausted
        );
        // max_size over the profile's max_group_size; under the group's own.
        assert_eq!(
            code(g(&mut st, Type::Insert, group(2, &[(5, 1)], 5))),
            Code::InvalidArgument
        );
        assert_eq!(
            code(g(&mut st, Type::Insert, group(2, &[(5, 1), (1, 1)], 1))),
            Code::ResourceExhausted
        );
        // Profile size 6: 4 already grouped, 3 more do not fit.
        assert_eq!(
            code(g(&mut st, Type::Insert, group(2, &[(5, 3)], 0))),
            Code::ResourceExhausted
        );
        assert!(g(&mut st, Type::Insert, group(2, &[(5, 2)], 0)).is_ok());
        // Bad members: unknown, twice, weight 0.
        for bad in [
            group(3, &[(9, 1)], 0),
            group(3, &[(1, 1), (1, 1)], 0),
            group(3, &[(1, 0)], 0),
        ] {
            assert!(g(&mut st, Type::Insert, bad).is_err());
        }
        assert_eq!(
            code(g(&mut st, Type::Insert, group(2, &[], 0))),
            Code::AlreadyExists
        );
        assert_eq!(
            code(g(&mut st, Type::Modify, group(7, &[], 0))),
            Code::NotFound
        );
        // A group on a profile without a selector.
        let mut plain = group(1, &[], 0);
        plain.action_profile_id = 101;
        assert_eq!(code(g(&mut st, Type::Insert, plain)), Code::InvalidArgument);
        // Shrinking group 1 frees room in the profile.
        assert!(g(&mut st, Type::Modify, group(1, &[(1, 1)], 0)).is_ok());
        assert_eq!(st[&100].grouped, 3);
        assert!(g(&mut st, Type::Insert, group(3, &[(3, 3)], 0)).is_ok());
    }

    #[test]
    fn sum_of_members_counts_members_and_bounds_weights() {
        let text = P4INFO.replace(
            "size: 6 max_group_size: 4",
            "size: 6 max_group_size: 2 sum_of_members { max_member_weight: 10 }",
        );
        let s = schema(&text);
        let mut st = new_states(&s);
        for id in 1..=3 {
            apply_member(&s, &mut st, Type::Insert, &member(100, id, set(1))).unwrap();
        }
        assert!(apply_group(&s, &mut st, Type::Insert, &group(1, &[(1, 10), (2, 7)], 0)).is_ok());
        assert_eq!(
            code(apply_group(
                &s,
                &mut st,
                Type::Insert,
                &group(2, &[(1, 11)], 0)
            )),
            Code::InvalidArgument
        );
        assert_eq!(
            code(apply_group(
                &s,
                &mut st,
                Type::Insert,
                &group(2, &[(1, 1), (2, 1), (3, 1)], 0)
            )),
            Code::ResourceExhausted
        );
    }

    #[test]
    fn entries_refer_to_members_groups_or_one_shot_sets() {
        use p4::table_action::Type as A;
        let s = schema(P4INFO);
        let mut st = new_states(&s);
        let table = &s.tables[&1];
        let action = |t: A| p4::TableAction { r#type: Some(t) };
        let one_shot = |weights: &[i32]| {
            action(A::ActionProfileActionSet(p4::ActionProfileActionSet {
                action_profile_actions: weights
                    .iter()
                    .map(|w| p4::ActionProfileAction {
                        action: Some(set(1)),
                        weight: *w,
                        watch_kind: None,
                    })
                    .collect(),
            }))
        };
        // One-shot first: members are then refused until it is gone.
        let r = check_entry(&s, &st, table, Some(&one_shot(&[1, 3]))).unwrap();
        assert_eq!(r, ProfileRef::OneShot);
        assert_eq!(
            code(check_entry(&s, &st, table, Some(&one_shot(&[4, 1])))),
            Code::ResourceExhausted
        );
        assert_eq!(
            code(check_entry(&s, &st, table, Some(&one_shot(&[])))),
            Code::InvalidArgument
        );
        add_ref(&mut st, table, r);
        assert_eq!(
            code(apply_member(
                &s,
                &mut st,
                Type::Insert,
                &member(100, 1, set(1))
            )),
            Code::FailedPrecondition
        );
        let stored = p4::TableEntry {
            table_id: 1,
            action: Some(one_shot(&[1])),
            ..Default::default()
        }
        .encode_to_vec();
        release_entry(&mut st, table, &stored);
        assert!(st[&100].is_empty());
        // Members and groups.
        apply_member(&s, &mut st, Type::Insert, &member(100, 1, set(1))).unwrap();
        apply_group(&s, &mut st, Type::Insert, &group(5, &[(1, 1)], 0)).unwrap();
        assert_eq!(
            code(check_entry(&s, &st, table, Some(&one_shot(&[1])))),
            Code::FailedPrecondition
        );
        assert_eq!(
            code(check_entry(
                &s,
                &st,
                table,
                Some(&action(A::ActionProfileMemberId(2)))
            )),
            Code::NotFound
        );
        assert_eq!(
            code(check_entry(
                &s,
                &st,
                table,
                Some(&action(A::Action(set(1))))
            )),
            Code::InvalidArgument
        );
        assert_eq!(
            code(check_entry(&s, &st, table, None)),
            Code::InvalidArgument
        );
        let r = check_entry(&s, &st, table, Some(&action(A::ActionProfileGroupId(5)))).unwrap();
        add_ref(&mut st, table, r);
        assert_eq!(
            code(apply_group(&s, &mut st, Type::Delete, &group(5, &[], 0))),
            Code::FailedPrecondition
        );
        // A group keeps its entries' references across a modify.
        apply_group(&s, &mut st, Type::Modify, &group(5, &[(1, 2)], 0)).unwrap();
        assert_eq!(st[&100].groups[&5].refs, 1);
        let stored = p4::TableEntry {
            table_id: 1,
            action: Some(action(A::ActionProfileGroupId(5))),
            ..Default::default()
        }
        .encode_to_vec();
        release_entry(&mut st, table, &stored);
        assert!(apply_group(&s, &mut st, Type::Delete, &group(5, &[], 0)).is_ok());
        // Groups on a profile without a selector.
        assert_eq!(
            code(check_entry(
                &s,
                &st,
                &s.tables[&2],
                Some(&action(A::ActionProfileGroupId(5)))
            )),
            Code::InvalidArgument
        );
    }

    /// examples/shared_ecmp: one selector behind two tables. A member
    /// used by entries of both tables stays until neither uses it; the
    /// entries of one table going is not enough.
    #[test]
    fn a_member_shared_by_two_tables_is_protected_by_either() {
        use p4::table_action::Type as A;
        let s = schema(include_str!("../../../examples/shared_ecmp/p4info.txt"));
        let (profile, v4, src) = (297885383, 36238520, 36663472);
        assert_eq!(s.tables[&v4].implementation_id, profile);
        assert_eq!(s.tables[&src].implementation_id, profile);
        let mut st = new_states(&s);
        let nhop = crate::testing::action(24952588, &[&[1], &[1]]);
        apply_member(&s, &mut st, Type::Insert, &member(profile, 7, nhop)).unwrap();
        let by_member = p4::TableAction {
            r#type: Some(A::ActionProfileMemberId(7)),
        };
        let stored = |table: u32| {
            p4::TableEntry {
                table_id: table,
                action: Some(by_member.clone()),
                ..Default::default()
            }
            .encode_to_vec()
        };
        for t in [v4, src] {
            let r = check_entry(&s, &st, &s.tables[&t], Some(&by_member)).unwrap();
            add_ref(&mut st, &s.tables[&t], r);
        }
        assert_eq!(st[&profile].members[&7].refs, 2);
        let delete = member(profile, 7, p4::Action::default());
        let del = |st: &mut IdMap<ProfileState>| apply_member(&s, st, Type::Delete, &delete);
        assert_eq!(code(del(&mut st)), Code::FailedPrecondition);
        // ecmp_v4's entry goes: ecmp_src's still holds the member.
        release_entry(&mut st, &s.tables[&v4], &stored(v4));
        assert_eq!(code(del(&mut st)), Code::FailedPrecondition);
        release_entry(&mut st, &s.tables[&src], &stored(src));
        assert_eq!(del(&mut st), Ok(Type::Delete));
    }
}
