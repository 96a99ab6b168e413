//! Action profiles and selectors (ECMP): the members, groups and indirect
//! entries of a table whose P4Info names an `implementation_id`, parsed
//! by name against the table's schema, checked against the profile's
//! P4Info (size, `max_group_size`, weights and the size semantics), diffed
//! against what a device holds and ordered for writing. Pure.
//!
//! Order (P4Runtime refuses a group naming a missing member, and deleting
//! a member or group that is in use): inserts and modifies of members,
//! then of groups, then of entries; then deletes of entries, groups,
//! members ([`Plan::phases`]).

use std::collections::{BTreeMap, HashMap, HashSet};

use p4fleet_proto::p4info::P4Info;
use p4fleet_proto::p4runtime::{self as p4rt, TableEntry, table_action};
use sha2::{Digest, Sha256};

use super::entry::Builder;
use super::schema::TableSchema;
use super::{ActionCall, EntryError, EntryKey, ParseOptions};

/// A table's action profile as its P4Info declares it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProfileSchema {
    pub id: u32,
    pub name: String,
    /// An action selector: groups and multi-action sets allowed.
    pub with_selector: bool,
    /// Members (and, with a selector, group slots) at most.
    pub size: i64,
    /// A group's size at most (0: no limit given).
    pub max_group_size: i32,
    /// `sum_of_members` with its `max_member_weight` (None: unlimited):
    /// a group's size is its number of members. Absent (the default,
    /// `sum_of_weights`): a group's size is the sum of its weights.
    pub sum_of_members: Option<Option<i32>>,
    /// How many tables the profile implements (P4Info `table_ids`). More
    /// than one: members and groups may be used by another table's
    /// entries, so a set deletes only those it lists ([`Plan::spare`]).
    pub tables: usize,
}

impl ProfileSchema {
    /// The action profile that implements table `table_id`, if any.
    pub fn of_table(info: &P4Info, table_id: u32) -> Option<ProfileSchema> {
        let t = info
            .tables
            .iter()
            .find(|t| t.preamble.as_ref().is_some_and(|p| p.id == table_id))?;
        if t.implementation_id == 0 {
            return None;
        }
        let p = info.action_profiles.iter().find(|p| {
            p.preamble
                .as_ref()
                .is_some_and(|p| p.id == t.implementation_id)
        })?;
        use p4fleet_proto::p4info::action_profile::SelectorSizeSemantics as S;
        Some(ProfileSchema {
            id: t.implementation_id,
            name: p
                .preamble
                .as_ref()
                .map(|p| p.name.clone())
                .unwrap_or_default(),
            with_selector: p.with_selector,
            size: p.size,
            max_group_size: p.max_group_size,
            sum_of_members: match &p.selector_size_semantics {
                Some(S::SumOfMembers(m)) => Some(m.max_member_weight),
                _ => None,
            },
            tables: p.table_ids.len(),
        })
    }
}

/// Why a member, group or entry of an action profile is refused. Each
/// names the item in the spec (`members[nh1]`, `groups[ecmp1]`,
/// `entries[3]`); the caller adds the set and table.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProfileError {
    #[error("{item}: {error}")]
    Entry {
        item: String,
        error: Box<EntryError>,
    },
    #[error(
        "{item}: table {table} has action profile {profile}: entries take a member, a group or an actionSet, not an action"
    )]
    DirectAction {
        item: String,
        table: String,
        profile: String,
    },
    #[error(
        "{item}: table {table} has no action profile: entries take an action, not a member, group or actionSet"
    )]
    NotIndirect { item: String, table: String },
    #[error("{item}: {profile} is an action profile without a selector: {what} need a selector")]
    NoSelector {
        item: String,
        profile: String,
        what: &'static str,
    },
    #[error("{item}: no member {name:?} in spec.actionProfile.members")]
    UnknownMember { item: String, name: String },
    #[error("{item}: no group {name:?} in spec.actionProfile.groups")]
    UnknownGroup { item: String, name: String },
    #[error("{item}: the name is given twice")]
    DuplicateName { item: String },
    #[error("{item}: id {id} is also the id of {other}")]
    DuplicateId {
        item: String,
        id: u32,
        other: String,
    },
    #[error("{item}: member {member:?} is listed twice")]
    DuplicateMember { item: String, member: String },
    #[error(
        "{item}: weight {weight} of member {member:?} is above the profile's max_member_weight {max}"
    )]
    WeightTooLarge {
        item: String,
        member: String,
        weight: i32,
        max: i32,
    },
    #[error("{item}: maxSize {max_size} is above the profile's max_group_size {max}")]
    MaxSizeTooLarge {
        item: String,
        max_size: i32,
        max: i32,
    },
    #[error("{item}: size {size} ({semantics}) is above its maximum {max}")]
    GroupTooLarge {
        item: String,
        size: i64,
        semantics: &'static str,
        max: i64,
    },
    #[error(
        "spec.actionProfile.{kind}: {count} are more than the profile {profile} holds ({size})"
    )]
    TooMany {
        kind: &'static str,
        count: usize,
        profile: String,
        size: i64,
    },
    #[error(
        "{item}: one-shot actionSets and members/groups cannot both be used in profile {profile} (P4Runtime programming modes)"
    )]
    MixedModes { item: String, profile: String },
}

impl ProfileError {
    /// The spec item it names (`spec.actionProfile.members[nh1]`,
    /// `spec.entries[3]`, `spec.actionProfile.groups` for a count).
    pub fn item(&self) -> String {
        use ProfileError as E;
        match self {
            E::Entry { item, .. }
            | E::DirectAction { item, .. }
            | E::NotIndirect { item, .. }
            | E::NoSelector { item, .. }
            | E::UnknownMember { item, .. }
            | E::UnknownGroup { item, .. }
            | E::DuplicateName { item }
            | E::DuplicateId { item, .. }
            | E::DuplicateMember { item, .. }
            | E::WeightTooLarge { item, .. }
            | E::MaxSizeTooLarge { item, .. }
            | E::GroupTooLarge { item, .. }
            | E::MixedModes { item, .. } => item.clone(),
            E::TooMany { kind, .. } => format!("spec.actionProfile.{kind}"),
        }
    }

    /// What is wrong, without the item (status lists the two apart).
    pub fn reason(&self) -> String {
        let text = self.to_string();
        let item = self.item();
        match text.strip_prefix(&item).and_then(|r| r.strip_prefix(": ")) {
            Some(reason) => reason.to_string(),
            None => text,
        }
    }
}

/// A member as the device holds it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Member {
    pub id: u32,
    pub action: ActionCall,
}

/// A group as the device holds it: members sorted by id.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Group {
    pub id: u32,
    pub max_size: i32,
    /// `(member id, weight)`, sorted by member id.
    pub members: Vec<(u32, i32)>,
}

/// What an entry of an indirect table points at.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum IndirectAction {
    Member(u32),
    Group(u32),
    /// A one-shot action set: `(action, weight)`, sorted.
    ActionSet(Vec<(ActionCall, i32)>),
}

/// An entry of an indirect table.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct IndirectEntry {
    pub key: EntryKey,
    pub action: IndirectAction,
}

/// The P4Runtime id of the member or group `name`: stable per name, so
/// specs stay readable and a changed member is a MODIFY in place.
pub fn id_for_name(kind: &str, name: &str) -> u32 {
    let mut h = Sha256::new();
    h.update(kind.as_bytes());
    h.update(b"/");
    h.update(name.as_bytes());
    let d = h.finalize();
    (u32::from_be_bytes(d[..4].try_into().expect("4 bytes")) & 0x7fff_ffff).max(1)
}

/// The ids of the members and groups a spec lists (given, or from the
/// name), whether or not they are valid.
pub fn listed_ids(
    members: &[MemberSpec<'_>],
    groups: &[GroupSpec<'_>],
) -> (HashSet<u32>, HashSet<u32>) {
    (
        members.iter().map(MemberSpec::id).collect(),
        groups.iter().map(GroupSpec::id).collect(),
    )
}

/// A member as the spec gives it.
#[derive(Debug, Clone, Copy)]
pub struct MemberSpec<'a> {
    pub name: &'a str,
    pub id: Option<u32>,
    pub action: &'a str,
    pub params: &'a BTreeMap<String, String>,
}

impl MemberSpec<'_> {
    /// Its id: as given, else the one derived from its name.
    pub fn id(&self) -> u32 {
        self.id.unwrap_or_else(|| id_for_name("member", self.name))
    }
}

/// A group as the spec gives it: `(member name, weight)`.
#[derive(Debug, Clone)]
pub struct GroupSpec<'a> {
    pub name: &'a str,
    pub id: Option<u32>,
    pub max_size: Option<i32>,
    pub members: Vec<(&'a str, i32)>,
}

impl GroupSpec<'_> {
    /// Its id: as given, else the one derived from its name.
    pub fn id(&self) -> u32 {
        self.id.unwrap_or_else(|| id_for_name("group", self.name))
    }
}

/// What an entry of the spec points at, by name.
#[derive(Debug, Clone)]
pub enum ActionSpec<'a> {
    /// A direct action (refused on an indirect table).
    Direct,
    Member(&'a str),
    Group(&'a str),
    /// `(action, params, weight)`.
    ActionSet(Vec<(&'a str, &'a BTreeMap<String, String>, i32)>),
}

/// An entry's match as the spec gives it.
#[derive(Debug, Clone)]
pub enum KeySpec<'a> {
    /// Inline (`spec.entries[i]`): field names and values, and priority.
    Inline {
        matches: &'a BTreeMap<String, String>,
        priority: Option<i32>,
    },
    /// A ConfigMap line, parsed already ([`super::LineParser::parse_indirect_line`]).
    Parsed(EntryKey),
}

/// An entry as the spec gives it.
#[derive(Debug, Clone)]
pub struct EntrySpec<'a> {
    /// Where it is, as errors name it: `spec.entries[3]` or
    /// `configmap/ecmp/entries:line 4`.
    pub item: String,
    pub key: KeySpec<'a>,
    pub action: ActionSpec<'a>,
}

/// The desired members, groups and entries of one table, and what was
/// refused. An item refused is left out; an entry whose member or group
/// was refused is refused too.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Desired {
    /// `(name, member)` in spec order.
    pub members: Vec<(String, Member)>,
    pub groups: Vec<(String, Group)>,
    /// `(i, entry)`: `entries[i]` of those given to [`desired`].
    pub entries: Vec<(usize, IndirectEntry)>,
    pub errors: Vec<ProfileError>,
}

fn member_item(name: &str) -> String {
    format!("spec.actionProfile.members[{name}]")
}

fn group_item(name: &str) -> String {
    format!("spec.actionProfile.groups[{name}]")
}

/// How errors name inline entry `i`: `spec.entries[i]`.
pub fn entry_item(i: usize) -> String {
    format!("spec.entries[{i}]")
}

/// Parses and checks the members, groups and entries of `schema`'s table
/// against `profile`.
pub fn desired(
    schema: &TableSchema,
    profile: &ProfileSchema,
    members: &[MemberSpec<'_>],
    groups: &[GroupSpec<'_>],
    entries: &[EntrySpec<'_>],
    options: ParseOptions,
) -> Desired {
    let mut out = Desired::default();
    // Ids taken, with the item that took them.
    let mut ids: HashMap<(bool, u32), String> = HashMap::new();
    let mut member_ids: HashMap<&str, u32> = HashMap::new();
    for m in members {
        let item = member_item(m.name);
        if member_ids.contains_key(m.name) {
            out.errors.push(ProfileError::DuplicateName { item });
            continue;
        }
        let id = m.id();
        if let Some(other) = ids.get(&(false, id)) {
            out.errors.push(ProfileError::DuplicateId {
                item,
                id,
                other: other.clone(),
            });
            continue;
        }
        match parse_action(schema, m.action, m.params) {
            Ok(action) => {
                ids.insert((false, id), item);
                member_ids.insert(m.name, id);
                out.members
                    .push((m.name.to_string(), Member { id, action }));
            }
            Err(error) => out.errors.push(ProfileError::Entry {
                item,
                error: Box::new(error),
            }),
        }
    }
    if out.members.len() as i64 > profile.size && profile.size > 0 {
        out.errors.push(ProfileError::TooMany {
            kind: "members",
            count: out.members.len(),
            profile: profile.name.clone(),
            size: profile.size,
        });
    }
    let mut group_ids: HashMap<&str, u32> = HashMap::new();
    for g in groups {
        let item = group_item(g.name);
        if !profile.with_selector {
            out.errors.push(ProfileError::NoSelector {
                item,
                profile: profile.name.clone(),
                what: "groups",
            });
            continue;
        }
        if group_ids.contains_key(g.name) {
            out.errors.push(ProfileError::DuplicateName { item });
            continue;
        }
        let id = g.id();
        if let Some(other) = ids.get(&(true, id)) {
            out.errors.push(ProfileError::DuplicateId {
                item,
                id,
                other: other.clone(),
            });
            continue;
        }
        match group(profile, &member_ids, g, &item) {
            Ok(group) => {
                ids.insert((true, id), item);
                group_ids.insert(g.name, id);
                out.groups.push((g.name.to_string(), Group { id, ..group }));
            }
            Err(e) => out.errors.push(e),
        }
    }
    let mut one_shot = None;
    let mut by_reference = None;
    for (index, e) in entries.iter().enumerate() {
        let item = e.item.clone();
        let action = match &e.action {
            ActionSpec::Direct => Err(ProfileError::DirectAction {
                item: item.clone(),
                table: schema.name.clone(),
                profile: profile.name.clone(),
            }),
            ActionSpec::Member(name) => member_ids
                .get(name)
                .map(|id| IndirectAction::Member(*id))
                .ok_or_else(|| ProfileError::UnknownMember {
                    item: item.clone(),
                    name: name.to_string(),
                }),
            ActionSpec::Group(name) => group_ids
                .get(name)
                .map(|id| IndirectAction::Group(*id))
                .ok_or_else(|| ProfileError::UnknownGroup {
                    item: item.clone(),
                    name: name.to_string(),
                }),
            ActionSpec::ActionSet(set) => action_set(schema, profile, set, &item),
        };
        let action = action.and_then(|a| {
            let first = match a {
                IndirectAction::ActionSet(_) => &mut one_shot,
                _ => &mut by_reference,
            };
            first.get_or_insert(index);
            match (one_shot, by_reference) {
                (Some(_), Some(_)) => Err(ProfileError::MixedModes {
                    item: item.clone(),
                    profile: profile.name.clone(),
                }),
                _ => Ok(a),
            }
        });
        let key = entry_key(schema, e, options).map_err(|error| ProfileError::Entry {
            item: item.clone(),
            error: Box::new(error),
        });
        match (key, action) {
            (Ok(key), Ok(action)) => out.entries.push((index, IndirectEntry { key, action })),
            (Err(err), _) | (_, Err(err)) => out.errors.push(err),
        }
    }
    // An entry given twice: the first one wins, as for direct entries.
    let mut seen = HashSet::new();
    let mut kept = Vec::with_capacity(out.entries.len());
    for (i, e) in std::mem::take(&mut out.entries) {
        if seen.insert(e.key.clone()) {
            kept.push((i, e));
        } else {
            out.errors.push(ProfileError::Entry {
                item: entries[i].item.clone(),
                error: Box::new(EntryError::Unsupported(
                    "an entry with this match is given earlier".into(),
                )),
            });
        }
    }
    out.entries = kept;
    out
}

fn parse_action(
    schema: &TableSchema,
    action: &str,
    params: &BTreeMap<String, String>,
) -> Result<ActionCall, EntryError> {
    let mut b = Builder::new(schema);
    b.set_action_by_name(action)?;
    for (name, text) in params {
        b.set_param_by_name(name, text)?;
    }
    b.finish_action()
}

fn entry_key(
    schema: &TableSchema,
    e: &EntrySpec<'_>,
    options: ParseOptions,
) -> Result<EntryKey, EntryError> {
    let (matches, priority) = match &e.key {
        KeySpec::Parsed(k) => return Ok(k.clone()),
        KeySpec::Inline { matches, priority } => (matches, priority),
    };
    let mut b = Builder::with_options(schema, options);
    for (name, text) in *matches {
        b.set_field_by_name(name, text)?;
    }
    if let Some(p) = priority {
        b.set_priority(*p as i64);
    }
    b.finish_key()
}

/// A group's size under the profile's semantics, and the name of those.
fn group_size(profile: &ProfileSchema, weights: impl Iterator<Item = i32>) -> (i64, &'static str) {
    match profile.sum_of_members {
        Some(_) => (weights.count() as i64, "sum_of_members"),
        None => (weights.map(i64::from).sum(), "sum_of_weights"),
    }
}

fn group(
    profile: &ProfileSchema,
    member_ids: &HashMap<&str, u32>,
    g: &GroupSpec<'_>,
    item: &str,
) -> Result<Group, ProfileError> {
    let item = item.to_string();
    let mut members = Vec::with_capacity(g.members.len());
    let mut seen = HashSet::new();
    for &(name, weight) in &g.members {
        let Some(&id) = member_ids.get(name) else {
            return Err(ProfileError::UnknownMember {
                item,
                name: name.to_string(),
            });
        };
        if !seen.insert(name) {
            return Err(ProfileError::DuplicateMember {
                item,
                member: name.to_string(),
            });
        }
        if let Some(Some(max)) = profile.sum_of_members
            && weight > max
        {
            return Err(ProfileError::WeightTooLarge {
                item,
                member: name.to_string(),
                weight,
                max,
            });
        }
        members.push((id, weight));
    }
    members.sort_unstable();
    if let Some(m) = g.max_size
        && profile.max_group_size > 0
        && m > profile.max_group_size
    {
        return Err(ProfileError::MaxSizeTooLarge {
            item,
            max_size: m,
            max: profile.max_group_size,
        });
    }
    let max_size = g.max_size.unwrap_or(profile.max_group_size);
    let (size, semantics) = group_size(profile, members.iter().map(|m| m.1));
    if max_size > 0 && size > i64::from(max_size) {
        return Err(ProfileError::GroupTooLarge {
            item,
            size,
            semantics,
            max: max_size.into(),
        });
    }
    Ok(Group {
        id: 0,
        max_size,
        members,
    })
}

fn action_set(
    schema: &TableSchema,
    profile: &ProfileSchema,
    set: &[(&str, &BTreeMap<String, String>, i32)],
    item: &str,
) -> Result<IndirectAction, ProfileError> {
    if set.len() > 1 && !profile.with_selector {
        return Err(ProfileError::NoSelector {
            item: item.to_string(),
            profile: profile.name.clone(),
            what: "actionSets of more than one action",
        });
    }
    let mut actions = Vec::with_capacity(set.len());
    for (action, params, weight) in set {
        let call = parse_action(schema, action, params).map_err(|error| ProfileError::Entry {
            item: item.to_string(),
            error: Box::new(error),
        })?;
        actions.push((call, *weight));
    }
    actions.sort();
    let (size, semantics) = group_size(profile, actions.iter().map(|a| a.1));
    let max = i64::from(profile.max_group_size);
    if max > 0 && size > max {
        return Err(ProfileError::GroupTooLarge {
            item: item.to_string(),
            size,
            semantics,
            max,
        });
    }
    Ok(IndirectAction::ActionSet(actions))
}

/// What a device holds of the profile and its table.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OnDevice {
    pub members: Vec<Member>,
    pub groups: Vec<Group>,
    /// Entries with their ownership tag (0: untagged).
    pub entries: Vec<(IndirectEntry, u64)>,
}

/// What one sync of a profile has to write. Indices point into
/// [`Desired`] (inserts, modifies) and [`OnDevice`] (deletes).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    pub member_inserts: Vec<usize>,
    pub member_modifies: Vec<usize>,
    pub member_deletes: Vec<usize>,
    pub group_inserts: Vec<usize>,
    pub group_modifies: Vec<usize>,
    pub group_deletes: Vec<usize>,
    pub entry_inserts: Vec<usize>,
    pub entry_modifies: Vec<usize>,
    pub entry_deletes: Vec<usize>,
    /// Desired entries another set holds with another action (Merge):
    /// `(desired index, other tag)`.
    pub entry_conflicts: Vec<(usize, u64)>,
}

/// The kind of a write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Insert,
    Modify,
    Delete,
}

/// What a write is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Item {
    /// Index into [`Desired::members`] (insert, modify) or
    /// [`OnDevice::members`] (delete); likewise for the others.
    Member(usize),
    Group(usize),
    Entry(usize),
}

impl Plan {
    /// Keeps only the member and group deletes whose ids are in `members`
    /// and `groups` (`device` is what the plan was made against). For a
    /// profile shared by several tables: an item the set does not list
    /// may be another set's, in use by another table's entries.
    pub fn spare(&mut self, device: &OnDevice, members: &HashSet<u32>, groups: &HashSet<u32>) {
        self.member_deletes
            .retain(|&j| members.contains(&device.members[j].id));
        self.group_deletes
            .retain(|&j| groups.contains(&device.groups[j].id));
    }

    /// Updates to write.
    pub fn writes(&self) -> usize {
        self.phases().iter().map(|p| p.len()).sum()
    }

    /// The writes in the order the device accepts them: each phase is one
    /// request, written after the previous one succeeded.
    pub fn phases(&self) -> Vec<Vec<(Op, Item)>> {
        let ups = |ins: &[usize], mods: &[usize], item: fn(usize) -> Item| {
            let ins = ins.iter().map(move |&i| (Op::Insert, item(i)));
            ins.chain(mods.iter().map(move |&i| (Op::Modify, item(i))))
                .collect::<Vec<_>>()
        };
        let dels = |d: &[usize], item: fn(usize) -> Item| {
            d.iter().map(|&i| (Op::Delete, item(i))).collect::<Vec<_>>()
        };
        vec![
            ups(&self.member_inserts, &self.member_modifies, Item::Member),
            ups(&self.group_inserts, &self.group_modifies, Item::Group),
            ups(&self.entry_inserts, &self.entry_modifies, Item::Entry),
            dels(&self.entry_deletes, Item::Entry),
            dels(&self.group_deletes, Item::Group),
            dels(&self.member_deletes, Item::Member),
        ]
        .into_iter()
        .filter(|p| !p.is_empty())
        .collect()
    }
}

/// Diffs `desired` against `device`. The set owns the profile: members
/// and groups it does not desire are deleted (unless `deletes` is false).
/// Entries follow the set's ownership like direct entries: `exclusive`
/// deletes every undesired entry of the table, else only those tagged
/// `tag`.
pub fn plan(desired: &Desired, device: &OnDevice, exclusive: bool, tag: u64) -> Plan {
    let mut p = Plan::default();
    let (ins, mods, dels) = diff_by(
        desired.members.iter().map(|(_, m)| m),
        &device.members,
        |m| m.id,
    );
    (p.member_inserts, p.member_modifies, p.member_deletes) = (ins, mods, dels);
    let (ins, mods, dels) = diff_by(desired.groups.iter().map(|(_, g)| g), &device.groups, |g| {
        g.id
    });
    (p.group_inserts, p.group_modifies, p.group_deletes) = (ins, mods, dels);
    let on_device: HashMap<&EntryKey, usize> = device
        .entries
        .iter()
        .enumerate()
        .map(|(j, (e, _))| (&e.key, j))
        .collect();
    let mut wanted = vec![false; device.entries.len()];
    for (i, (_, e)) in desired.entries.iter().enumerate() {
        match on_device.get(&e.key) {
            None => p.entry_inserts.push(i),
            Some(&j) => {
                wanted[j] = true;
                let (d, t) = &device.entries[j];
                if d.action == e.action {
                } else if !exclusive && *t != 0 && *t != tag {
                    p.entry_conflicts.push((i, *t));
                } else {
                    p.entry_modifies.push(i);
                }
            }
        }
    }
    p.entry_deletes = (0..device.entries.len())
        .filter(|&j| !wanted[j] && (exclusive || device.entries[j].1 == tag))
        .collect();
    p
}

/// Inserts (desired indices), modifies (desired indices) and deletes
/// (device indices) of items identified by `id`.
fn diff_by<'a, T: PartialEq + 'a>(
    desired: impl Iterator<Item = &'a T>,
    device: &[T],
    id: impl Fn(&T) -> u32,
) -> (Vec<usize>, Vec<usize>, Vec<usize>) {
    let on_device: HashMap<u32, usize> =
        device.iter().enumerate().map(|(j, d)| (id(d), j)).collect();
    let (mut ins, mut mods) = (Vec::new(), Vec::new());
    let mut wanted = HashSet::new();
    for (i, d) in desired.enumerate() {
        match on_device.get(&id(d)) {
            None => ins.push(i),
            Some(&j) => {
                wanted.insert(j);
                if device[j] != *d {
                    mods.push(i);
                }
            }
        }
    }
    let dels = (0..device.len()).filter(|j| !wanted.contains(j)).collect();
    (ins, mods, dels)
}

// ---- P4Runtime messages ----

fn action_proto(a: &ActionCall) -> p4rt::Action {
    match a.to_proto().r#type {
        Some(table_action::Type::Action(a)) => a,
        _ => unreachable!("ActionCall::to_proto gives an action"),
    }
}

impl Member {
    pub fn to_proto(&self, profile_id: u32) -> p4rt::ActionProfileMember {
        p4rt::ActionProfileMember {
            action_profile_id: profile_id,
            member_id: self.id,
            action: Some(action_proto(&self.action)),
        }
    }

    pub fn from_proto(m: &p4rt::ActionProfileMember) -> Member {
        Member {
            id: m.member_id,
            action: m
                .action
                .as_ref()
                .map(ActionCall::from_proto)
                .unwrap_or(ActionCall {
                    action_id: 0,
                    params: Box::default(),
                }),
        }
    }
}

impl Group {
    pub fn to_proto(&self, profile_id: u32) -> p4rt::ActionProfileGroup {
        p4rt::ActionProfileGroup {
            action_profile_id: profile_id,
            group_id: self.id,
            members: self
                .members
                .iter()
                .map(|&(member_id, weight)| p4rt::action_profile_group::Member {
                    member_id,
                    weight,
                    ..Default::default()
                })
                .collect(),
            max_size: self.max_size,
        }
    }

    pub fn from_proto(g: &p4rt::ActionProfileGroup) -> Group {
        let mut members: Vec<(u32, i32)> =
            g.members.iter().map(|m| (m.member_id, m.weight)).collect();
        members.sort_unstable();
        Group {
            id: g.group_id,
            max_size: g.max_size,
            members,
        }
    }
}

impl IndirectEntry {
    /// The TableEntry for INSERT / MODIFY, tagged with `metadata`.
    pub fn to_proto(&self, metadata: Vec<u8>) -> TableEntry {
        let r#type = match &self.action {
            IndirectAction::Member(id) => table_action::Type::ActionProfileMemberId(*id),
            IndirectAction::Group(id) => table_action::Type::ActionProfileGroupId(*id),
            IndirectAction::ActionSet(set) => {
                table_action::Type::ActionProfileActionSet(p4rt::ActionProfileActionSet {
                    action_profile_actions: set
                        .iter()
                        .map(|(a, weight)| p4rt::ActionProfileAction {
                            action: Some(action_proto(a)),
                            weight: *weight,
                            ..Default::default()
                        })
                        .collect(),
                })
            }
        };
        TableEntry {
            action: Some(p4rt::TableAction {
                r#type: Some(r#type),
            }),
            metadata,
            ..self.key.to_proto()
        }
    }

    /// A read-back entry of an indirect table; None for the default entry
    /// or one with a direct action (not this model's to manage).
    pub fn from_proto(
        schema: &TableSchema,
        t: &TableEntry,
    ) -> Result<Option<IndirectEntry>, EntryError> {
        if t.is_default_action {
            return Ok(None);
        }
        let action = match t.action.as_ref().and_then(|a| a.r#type.as_ref()) {
            Some(table_action::Type::ActionProfileMemberId(id)) => IndirectAction::Member(*id),
            Some(table_action::Type::ActionProfileGroupId(id)) => IndirectAction::Group(*id),
            Some(table_action::Type::ActionProfileActionSet(s)) => {
                let mut set: Vec<(ActionCall, i32)> = s
                    .action_profile_actions
                    .iter()
                    .filter_map(|a| Some((ActionCall::from_proto(a.action.as_ref()?), a.weight)))
                    .collect();
                set.sort();
                IndirectAction::ActionSet(set)
            }
            _ => return Ok(None),
        };
        Ok(Some(IndirectEntry {
            key: EntryKey::from_proto(schema, t)?,
            action,
        }))
    }
}

#[cfg(test)]
mod tests;
