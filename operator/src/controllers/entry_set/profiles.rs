//! Apply stage for a table with an action profile or selector (ECMP):
//! `spec.actionProfile` (members, groups) and the entries that name them
//! (`member`, `group`, `actionSet`). Per target: the profile from the
//! running P4Info, the desired items from the spec
//! ([`p4fleet_model::entries::profile`], pure), the device's members,
//! groups and table entries read back, the difference written in the
//! order the device accepts (members, groups, entries; deletes the other
//! way round), then read back again: only what the read confirms is
//! counted. Such targets skip the direct-entry path (`apply`).
//!
//! [`fold`] (pure) puts the outcome into the status: the
//! `ActionProfilesSynced` condition with counts, `status.actionProfile`,
//! and Ready False when the condition is not True. A set that asks for
//! any of it on a table without a profile, or on a BFRT target (the
//! emulated BFRT model has no selectors), says so in the condition.

use std::collections::HashSet;

use kube::ResourceExt;
use p4fleet_client::Device;
use p4fleet_crds::entry_set::EntryError as StatusEntryError;
use p4fleet_crds::{
    ActionProfileStatus, Condition, Ownership, TableEntrySetSpec, condition_types::READY,
};
use p4fleet_model::entries::profile::{
    self as model, ActionSpec, EntrySpec, GroupSpec, IndirectEntry, Item, KeySpec, MemberSpec,
    OnDevice, Op, ProfileError, ProfileSchema,
};
use p4fleet_model::entries::{
    EntryError, EntryKey, LineParser, ParseOptions, ProfileRef, format_key,
};
use p4fleet_model::sync::{self, SyncTally};
use p4fleet_proto::p4runtime::{self as p4, entity::Entity, update::Type};

use super::SetCtx;
use super::apply::{self, DeviceError};
use super::cleanup::RemovalError;
use super::dereference::Target;
use super::set::Set;
use super::status::Report;
use crate::entry_sources::Sources;
use crate::status::{EventNote, ready_from};

/// The condition this module adds (only to sets that use action profiles
/// or whose table has one).
pub const ACTION_PROFILES_SYNCED: &str = "ActionProfilesSynced";

/// Whether the set names members, groups or action sets at all.
pub fn wanted(set: &Set<'_>) -> bool {
    set.spec.action_profile.is_some() || set.spec.entries.iter().any(|e| e.is_indirect())
}

/// What a target's profile came to, beside its entry [`apply::Outcome`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Profiled {
    /// What the read-back confirmed (None when nothing could be read).
    pub confirmed: Option<ActionProfileStatus>,
    /// Why the profile is not synced: `(reason, message)`.
    pub problem: Option<(&'static str, String)>,
    /// Members, groups and entries written by this sync.
    pub written: u64,
}

/// Both halves, while a target is synced.
struct TargetOutcome {
    outcome: apply::Outcome,
    profiled: Profiled,
}

impl TargetOutcome {
    /// The device of `t` could not be reached or written: nothing more
    /// of the target is synced.
    fn device_failed(&mut self, t: &Target, error: p4fleet_client::Error) {
        self.outcome.device_error = Some(DeviceError {
            switch: t.switch.name_any(),
            error,
        });
    }

    /// The set's profile cannot be synced on `t`, for `reason`.
    fn problem(&mut self, reason: &'static str, message: String) {
        self.profiled.problem = Some((reason, message));
    }

    fn done(mut self) -> (apply::Outcome, Profiled) {
        if self.profiled.problem.is_none()
            && let Some(e) = &self.outcome.device_error
        {
            self.profiled.problem = Some(("DeviceUnavailable", e.to_string()));
        }
        (self.outcome, self.profiled)
    }
}

fn outcome(t: &Target) -> apply::Outcome {
    apply::Outcome::of(t, SyncTally::default())
}

fn error(source: String, key: Option<String>, reason: String) -> StatusEntryError {
    StatusEntryError {
        source,
        key,
        reason,
    }
}

/// The spec's items in the model's terms.
struct SpecItems<'a> {
    members: Vec<MemberSpec<'a>>,
    groups: Vec<GroupSpec<'a>>,
    entries: Vec<EntrySpec<'a>>,
}

/// An entry of a ConfigMap line: where (`configmap/x/key:line n`), its
/// key and what it points at.
type LineEntry = (String, EntryKey, ProfileRef);

/// The entries of the set's ConfigMap texts for a table with an action
/// profile (`@member=` / `@group=` lines), and the bad lines, named by
/// ConfigMap, key and line. Pure.
pub fn line_entries(
    schema: &p4fleet_model::entries::TableSchema,
    options: ParseOptions,
    sources: &Sources,
) -> (Vec<LineEntry>, Vec<ProfileError>) {
    let (mut entries, mut errors) = (Vec::new(), Vec::new());
    for t in &sources.texts {
        let text = match t.text.get() {
            Ok(text) => text,
            Err(e) => {
                errors.push(ProfileError::Entry {
                    item: format!("configmap/{}/{}", t.config_map, t.key),
                    error: Box::new(EntryError::Syntax(e.to_string())),
                });
                continue;
            }
        };
        let mut p = LineParser::with_options(schema, options);
        for (i, line) in text.lines().enumerate() {
            let item = || format!("configmap/{}/{}:line {}", t.config_map, t.key, i + 1);
            match p.parse_indirect_line(line) {
                Ok(Some((key, r))) => entries.push((item(), key, r)),
                Ok(None) => {}
                Err(e) => errors.push(ProfileError::Entry {
                    item: item(),
                    error: Box::new(e),
                }),
            }
        }
    }
    (entries, errors)
}

fn spec_items<'a>(spec: &'a TableEntrySetSpec, lines: &'a [LineEntry]) -> SpecItems<'a> {
    let (members, groups) = (spec.action_profile.as_ref())
        .map(|p| (p.members.as_slice(), p.groups.as_slice()))
        .unwrap_or_default();
    let members = members
        .iter()
        .map(|m| MemberSpec {
            name: &m.name,
            id: m.id,
            action: &m.action,
            params: &m.params,
        })
        .collect();
    let groups = groups
        .iter()
        .map(|g| GroupSpec {
            name: &g.name,
            id: g.id,
            max_size: g.max_size,
            members: g
                .members
                .iter()
                .map(|m| (m.member.as_str(), m.weight.unwrap_or(1)))
                .collect(),
        })
        .collect();
    let entries = spec
        .entries
        .iter()
        .enumerate()
        .map(|(index, e)| EntrySpec {
            item: model::entry_item(index),
            key: KeySpec::Inline {
                matches: &e.match_,
                priority: e.priority,
            },
            action: if let Some(m) = &e.member {
                ActionSpec::Member(m)
            } else if let Some(g) = &e.group {
                ActionSpec::Group(g)
            } else if !e.action_set.is_empty() {
                ActionSpec::ActionSet(
                    e.action_set
                        .iter()
                        .map(|a| (a.action.as_str(), &a.params, a.weight.unwrap_or(1)))
                        .collect(),
                )
            } else {
                ActionSpec::Direct
            },
        })
        .chain(lines.iter().map(|(item, key, r)| EntrySpec {
            item: item.clone(),
            key: KeySpec::Parsed(key.clone()),
            action: match r {
                ProfileRef::Member(m) => ActionSpec::Member(m),
                ProfileRef::Group(g) => ActionSpec::Group(g),
            },
        }))
        .collect();
    SpecItems {
        members,
        groups,
        entries,
    }
}

/// Reads the profile's members and groups and the table's entries.
async fn read_back(
    p: &p4fleet_client::P4RuntimeDevice,
    t: &Target,
    profile: &ProfileSchema,
) -> Result<OnDevice, p4fleet_client::Error> {
    let mut filters = vec![Entity::ActionProfileMember(p4::ActionProfileMember {
        action_profile_id: profile.id,
        ..Default::default()
    })];
    if profile.with_selector {
        filters.push(Entity::ActionProfileGroup(p4::ActionProfileGroup {
            action_profile_id: profile.id,
            ..Default::default()
        }));
    }
    filters.push(Entity::TableEntry(p4::TableEntry {
        table_id: t.schema.id,
        ..Default::default()
    }));
    let filters = filters
        .into_iter()
        .map(|e| p4::Entity { entity: Some(e) })
        .collect();
    let mut out = OnDevice::default();
    for e in p.read_entities(t.slot, filters).await? {
        match e.entity {
            Some(Entity::ActionProfileMember(m)) if m.action_profile_id == profile.id => {
                out.members.push(model::Member::from_proto(&m))
            }
            Some(Entity::ActionProfileGroup(g)) if g.action_profile_id == profile.id => {
                out.groups.push(model::Group::from_proto(&g))
            }
            Some(Entity::TableEntry(te)) if te.table_id == t.schema.id => {
                // An entry this model cannot read (a direct action left by
                // someone else) is not ours to manage.
                if let Ok(Some(e)) = IndirectEntry::from_proto(&t.schema, &te) {
                    out.entries.push((e, sync::tag_of(&te.metadata)));
                }
            }
            _ => {}
        }
    }
    Ok(out)
}

/// The P4Runtime update of one planned write.
fn update(
    op: Op,
    item: Item,
    desired: &model::Desired,
    device: &OnDevice,
    profile: u32,
    tag: u64,
) -> p4::Update {
    let r#type = match op {
        Op::Insert => Type::Insert,
        Op::Modify => Type::Modify,
        Op::Delete => Type::Delete,
    };
    let delete = op == Op::Delete;
    let entity = match item {
        Item::Member(i) if delete => {
            Entity::ActionProfileMember(model::Member::to_proto(&device.members[i], profile))
        }
        Item::Member(i) => Entity::ActionProfileMember(desired.members[i].1.to_proto(profile)),
        Item::Group(i) if delete => Entity::ActionProfileGroup(device.groups[i].to_proto(profile)),
        Item::Group(i) => Entity::ActionProfileGroup(desired.groups[i].1.to_proto(profile)),
        Item::Entry(i) if delete => Entity::TableEntry(device.entries[i].0.key.to_proto()),
        Item::Entry(i) => {
            Entity::TableEntry(desired.entries[i].1.to_proto(sync::tag_metadata(tag)))
        }
    };
    p4::Update {
        r#type: r#type as i32,
        entity: Some(p4::Entity {
            entity: Some(entity),
        }),
    }
}

/// Where a planned write came from, for per-item errors.
fn source(
    t: &Target,
    op: Op,
    item: Item,
    (desired, entries): (&model::Desired, &[EntrySpec]),
    device: &OnDevice,
) -> (String, Option<String>) {
    let delete = op == Op::Delete;
    // A member or group the spec no longer lists is named by its id.
    let gone = |kind: &str, id: u32| (format!("{kind} id {id} (not in spec.actionProfile)"), None);
    let in_spec = |kinds: &str, name: &str| (format!("spec.actionProfile.{kinds}[{name}]"), None);
    match item {
        Item::Member(i) if delete => gone("member", device.members[i].id),
        Item::Member(i) => in_spec("members", &desired.members[i].0),
        Item::Group(i) if delete => gone("group", device.groups[i].id),
        Item::Group(i) => in_spec("groups", &desired.groups[i].0),
        Item::Entry(i) if delete => (
            "entry not in spec.entries".to_string(),
            Some(format_key(&t.schema, &device.entries[i].0.key)),
        ),
        Item::Entry(i) => (
            entries[desired.entries[i].0].item.clone(),
            Some(format_key(&t.schema, &desired.entries[i].1.key)),
        ),
    }
}

/// The spec's name of a member or group the set lists, for the device's
/// `item` (matched by id, given or derived from the name), e.g.
/// `spec.actionProfile.members[nh1] (id 7)`.
fn listed(items: &SpecItems<'_>, item: Item, device: &OnDevice) -> Option<String> {
    let (kind, id, name) = match item {
        Item::Member(i) => {
            let id = device.members[i].id;
            let m = items.members.iter().find(|m| m.id() == id)?;
            ("members", id, m.name)
        }
        Item::Group(i) => {
            let id = device.groups[i].id;
            let g = items.groups.iter().find(|g| g.id() == id)?;
            ("groups", id, g.name)
        }
        Item::Entry(_) => return None,
    };
    Some(format!("spec.actionProfile.{kind}[{name}] (id {id})"))
}

/// How much of `desired` the device holds exactly.
fn confirmed(
    profile: &ProfileSchema,
    desired: &model::Desired,
    device: &OnDevice,
) -> ActionProfileStatus {
    let members: HashSet<&model::Member> = device.members.iter().collect();
    let groups: HashSet<&model::Group> = device.groups.iter().collect();
    let entries: HashSet<&IndirectEntry> = device.entries.iter().map(|(e, _)| e).collect();
    ActionProfileStatus {
        profile: profile.name.clone(),
        members: desired
            .members
            .iter()
            .filter(|(_, m)| members.contains(m))
            .count() as u64,
        groups: desired
            .groups
            .iter()
            .filter(|(_, g)| groups.contains(g))
            .count() as u64,
        entries: desired
            .entries
            .iter()
            .filter(|(_, e)| entries.contains(e))
            .count() as u64,
    }
}

/// Syncs the action profile and the entries of target `t`'s table: the
/// inline entries and the `@member=` / `@group=` lines of `sources`.
/// While a source could not be read (`sources_complete` false) no entry
/// is deleted: its entries may be among those on the device. Never an
/// error: a failure is in the outcome.
pub async fn sync_target(
    ctx: &SetCtx,
    set: &Set<'_>,
    t: &Target,
    sources: &Sources,
    sources_complete: bool,
) -> (apply::Outcome, Profiled) {
    let mut out = TargetOutcome {
        outcome: outcome(t),
        profiled: Profiled::default(),
    };
    sync_into(ctx, set, t, (sources, sources_complete), &mut out).await;
    out.done()
}

async fn sync_into(
    ctx: &SetCtx,
    set: &Set<'_>,
    t: &Target,
    (sources, sources_complete): (&Sources, bool),
    out: &mut TargetOutcome,
) {
    let options = ParseOptions {
        mask_host_bits: set.spec.mask_host_bits,
    };
    let (lines, bad_lines) = line_entries(&t.schema, options, sources);
    out.outcome.tally.desired = (set.spec.entries.len() + lines.len() + bad_lines.len()) as u64;
    out.outcome.tally.failed = out.outcome.tally.desired;
    let dev = match t.device(&ctx.devices) {
        Ok(d) => d,
        Err(error) => return out.device_failed(t, error),
    };
    let Device::P4Runtime(p) = dev.as_ref() else {
        return out.problem(
            "UnsupportedOnTarget",
            format!(
                "Switch {} is a BFRT target: action profile members and groups are written over P4Runtime only",
                t.switch.name_any()
            ),
        );
    };
    // The program's P4Info (dereference): the VirtualSwitch runs it, as
    // for direct entries; no P4Info read from the device per sync.
    let Some(profile) = t.profile.clone() else {
        return out.problem(
            "NoActionProfile",
            format!(
                "table {} has no action profile: spec.actionProfile, member, group and actionSet do not apply",
                t.schema.name
            ),
        );
    };
    let items = spec_items(set.spec, &lines);
    let mut desired = model::desired(
        &t.schema,
        &profile,
        &items.members,
        &items.groups,
        &items.entries,
        options,
    );
    desired.errors.extend(bad_lines);
    let invalid = desired.errors.len();
    for e in &desired.errors {
        out.outcome.errors.push(error(e.item(), None, e.reason()));
    }
    let mut device = match read_back(p, t, &profile).await {
        Ok(d) => d,
        Err(error) => return out.device_failed(t, error),
    };
    let tag = set.tag;
    let exclusive = set.spec.ownership == Ownership::Exclusive;
    // Bad input writes nothing: a refused member would otherwise take
    // its group and entries off the device with it.
    let mut plan = match invalid {
        0 => model::plan(&desired, &device, exclusive, tag),
        _ => model::Plan::default(),
    };
    if !sources_complete {
        plan.entry_deletes.clear();
    }
    if profile.tables > 1 {
        // Another table's set may list (and use) what this one does not.
        let none = HashSet::new();
        plan.spare(&device, &none, &none);
    }
    for (i, other) in &plan.entry_conflicts {
        let (source, key) = source(
            t,
            Op::Modify,
            Item::Entry(*i),
            (&desired, &items.entries),
            &device,
        );
        out.outcome.errors.push(error(
            source,
            key,
            format!("held by another set (tag {other:#x}) with another action"),
        ));
    }
    for phase in plan.phases() {
        let updates = phase
            .iter()
            .map(|&(op, item)| update(op, item, &desired, &device, profile.id, tag))
            .collect();
        let refused = match p.write_entities(t.slot, updates).await {
            Ok(r) => r,
            Err(error) => return out.device_failed(t, error),
        };
        out.profiled.written += (phase.len() - refused.len()) as u64;
        let tally = &mut out.outcome.tally;
        for (j, &(op, _)) in phase.iter().enumerate() {
            if refused.iter().any(|r| r.0 == j) {
                continue;
            }
            match op {
                Op::Insert => tally.inserted += 1,
                Op::Modify => tally.modified += 1,
                Op::Delete => tally.deleted += 1,
            }
        }
        for (j, code, message) in refused {
            let (op, item) = phase[j];
            let (source, key) = source(t, op, item, (&desired, &items.entries), &device);
            let why = format!(
                "VirtualSwitch {} refused it ({}): {message}",
                t.virtual_switch,
                tonic::Code::from_i32(code).description()
            );
            out.outcome.errors.push(error(source, key, why));
        }
    }
    if plan.writes() > 0 {
        device = match read_back(p, t, &profile).await {
            Ok(d) => d,
            Err(error) => return out.device_failed(t, error),
        };
    }
    let c = confirmed(&profile, &desired, &device);
    let tally = &mut out.outcome.tally;
    tally.written = out.profiled.written;
    tally.applied = c.entries;
    tally.failed = tally.desired.saturating_sub(c.entries);
    // Writes to a set that was synced before repaired the device's side.
    if set
        .status
        .and_then(|s| s.observed_generation)
        .is_some_and(|g| Some(g) == set.generation)
    {
        out.outcome.drift = out.profiled.written;
    }
    let complete = c.members == desired.members.len() as u64
        && c.groups == desired.groups.len() as u64
        && c.entries == desired.entries.len() as u64;
    if invalid > 0 {
        out.profiled.problem = Some((
            "InvalidActionProfile",
            format!(
                "{invalid} items refused: {}",
                desired
                    .errors
                    .iter()
                    .take(3)
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join("; ")
            ),
        ));
    } else if !complete {
        let first = out
            .outcome
            .errors
            .first()
            .map(|e| format!(": {} {}", e.source, e.reason))
            .unwrap_or_default();
        out.profiled.problem = Some((
            "ActionProfileFailed",
            format!(
                "the device confirmed {}/{} members, {}/{} groups, {}/{} entries{first}",
                c.members,
                desired.members.len(),
                c.groups,
                desired.groups.len(),
                c.entries,
                desired.entries.len()
            ),
        ));
    }
    out.profiled.confirmed = Some(c);
}

/// Removes the set's entries of `t`'s table, then every member and group
/// of the profile (the set owns it); returns how many. NOT_FOUND counts
/// as removed.
pub async fn remove(ctx: &SetCtx, set: &Set<'_>, t: &Target) -> Result<usize, RemovalError> {
    let dev = t.device(&ctx.devices)?;
    let Device::P4Runtime(p) = dev.as_ref() else {
        return Ok(0);
    };
    let Some(profile) = &t.profile else {
        return Ok(0);
    };
    let device = read_back(p, t, profile).await?;
    let exclusive = set.spec.ownership == Ownership::Exclusive;
    let mut plan = model::plan(&model::Desired::default(), &device, exclusive, set.tag);
    let items = spec_items(set.spec, &[]);
    if profile.tables > 1 {
        // Shared with another table: only what this set lists is its own;
        // a member another table's entries still use is refused (in use)
        // and the deletion waits until those entries are gone.
        let (members, groups) = model::listed_ids(&items.members, &items.groups);
        plan.spare(&device, &members, &groups);
    }
    let nothing = model::Desired::default();
    let mut removed = 0;
    for phase in plan.phases() {
        let updates = phase
            .iter()
            .map(|&(op, item)| update(op, item, &nothing, &device, profile.id, 0))
            .collect();
        let refused = p.write_entities(t.slot, updates).await?;
        let failed: Vec<_> = refused
            .iter()
            .filter(|r| r.1 != tonic::Code::NotFound as i32)
            .collect();
        if let Some((j, code, message)) = failed.first() {
            let (op, item) = phase[*j];
            let (what, key) = match listed(&items, item, &device) {
                // The set's own member or group, by the name it lists.
                Some(name) => (name, None),
                None => source(t, op, item, (&nothing, &[]), &device),
            };
            return Err(RemovalError::Refused {
                count: failed.len(),
                first: format!(
                    "{what}{} ({}): {message}",
                    key.map(|k| format!(" {k}")).unwrap_or_default(),
                    tonic::Code::from_i32(*code).description()
                ),
            });
        }
        removed += phase.len();
    }
    Ok(removed)
}

/// Folds the targets' outcomes (`(virtual switch, outcome)`) into
/// `report`: the `ActionProfilesSynced` condition, `status.actionProfile`
/// (the least any target confirmed), Ready False when the condition is
/// not True, an Event for each target written to. Pure.
pub fn fold(
    report: &mut Report,
    set: &Set<'_>,
    outcomes: &[(String, Profiled)],
    direct_targets: usize,
) {
    let st = &mut report.status;
    st.action_profile = None;
    let used = wanted(set);
    if outcomes.is_empty() && !(used && direct_targets > 0) {
        return;
    }
    let me = &set.key;
    let table = &set.spec.table;
    let problem = if used && direct_targets > 0 {
        Some((
            "NoActionProfile",
            format!(
                "table {table} has no action profile: spec.actionProfile, member, group and actionSet do not apply"
            ),
            String::new(),
        ))
    } else {
        outcomes.iter().find_map(|(vs, o)| {
            let (reason, why) = o.problem.as_ref()?;
            Some((*reason, why.clone(), vs.clone()))
        })
    };
    let condition = match problem {
        Some((reason, why, vs)) => {
            let on = if vs.is_empty() {
                String::new()
            } else {
                format!(" on VirtualSwitch {vs}")
            };
            Condition::new(
                ACTION_PROFILES_SYNCED,
                false,
                reason,
                format!("TableEntrySet {me}: table {table}{on}: {why}"),
            )
        }
        None => {
            let least = outcomes
                .iter()
                .filter_map(|(_, o)| o.confirmed.clone())
                .min_by_key(|c| (c.members, c.groups, c.entries));
            let message = match &least {
                Some(c) => format!(
                    "{} members, {} groups, {} entries of {} on {} targets",
                    c.members,
                    c.groups,
                    c.entries,
                    c.profile,
                    outcomes.len()
                ),
                None => "nothing confirmed".into(),
            };
            Condition::new(ACTION_PROFILES_SYNCED, true, "Synced", message)
        }
    };
    st.action_profile = outcomes
        .iter()
        .map(|(_, o)| o.confirmed.clone())
        .collect::<Option<Vec<_>>>()
        .and_then(|all| {
            all.into_iter()
                .min_by_key(|c| (c.members, c.groups, c.entries))
        });
    for (vs, o) in outcomes {
        if o.written > 0 {
            report.events.push(EventNote::normal(
                "ActionProfileSynced",
                "Write",
                format!(
                    "table {table} on VirtualSwitch {vs}: {} members, groups and entries written",
                    o.written
                ),
            ));
        }
    }
    if !condition.is_true()
        && let Some(ready) = st.conditions.iter_mut().find(|c| c.type_ == READY)
        && ready.is_true()
    {
        *ready = ready_from(&[&condition], READY, "");
    }
    st.conditions.push(condition);
}

#[cfg(test)]
mod tests;
