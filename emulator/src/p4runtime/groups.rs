//! Where the pipeline hands action profile members and groups, one-shot
//! action sets and packet replication entries to [`super::action_profile`]
//! and [`super::pre`]: Write and Read of those entities, entries of tables
//! that an action profile implements, and what RECONCILE_AND_COMMIT keeps.

use p4fleet_proto::p4runtime::{self as p4, update::Type};
use prost::Message;
use tonic::{Code, Status};

use crate::key::IdMap;
use crate::p4runtime::action_profile::{self as ap, ProfileRef, ProfileState};
use crate::p4runtime::pipeline::Pipeline;
use crate::p4runtime::schema::{Schema, TableInfo};
use crate::p4runtime::wire::ActionView;
use crate::update_error::{UpdateError, err};

/// `Entity` field numbers handled here.
pub(crate) const MEMBER: u32 = 3;
pub(crate) const GROUP: u32 = 4;
pub(crate) const PRE: u32 = 9;

impl Pipeline {
    /// Applies one encoded `Update` whose entity is an action profile
    /// member or group or a packet replication engine entry.
    pub(crate) fn apply_groups_entity(
        &mut self,
        ty: Type,
        update: &[u8],
    ) -> Result<Type, UpdateError> {
        let u = p4::Update::decode(update)
            .map_err(|e| err(Code::InvalidArgument, format!("malformed update: {e}")))?;
        use p4::entity::Entity as E;
        match u.entity.and_then(|e| e.entity) {
            Some(E::ActionProfileMember(m)) => {
                ap::apply_member(&self.schema, &mut self.profiles, ty, &m)
            }
            Some(E::ActionProfileGroup(g)) => {
                ap::apply_group(&self.schema, &mut self.profiles, ty, &g)
            }
            Some(E::PacketReplicationEngineEntry(e)) => self.pre.apply(ty, &e),
            _ => Err(err(Code::InvalidArgument, "update has no entity")),
        }
    }

    /// Entities matching one read filter of the kinds handled here, as
    /// encoded `Entity`s; `Ok(false)` for other kinds.
    pub(crate) fn read_groups_entity(
        &self,
        filter: &p4::Entity,
        emit: &mut dyn FnMut(&[u8]),
    ) -> Result<bool, Status> {
        use p4::entity::Entity as E;
        match &filter.entity {
            Some(E::ActionProfileMember(f)) => {
                ap::read_members(&self.schema, &self.profiles, f, emit)?
            }
            Some(E::ActionProfileGroup(f)) => {
                ap::read_groups(&self.schema, &self.profiles, f, emit)?
            }
            Some(E::PacketReplicationEngineEntry(f)) => self.pre.read(f, emit),
            _ => return Ok(false),
        }
        Ok(true)
    }
}

/// Checks the action of an entry written to a table that an action profile
/// implements (`raw` is the entry's encoded `TableAction` when it names a
/// member, group or action set).
pub(crate) fn check_indirect_entry(
    schema: &Schema,
    profiles: &IdMap<ProfileState>,
    table: &TableInfo,
    action: ActionView,
    raw: Option<&[u8]>,
) -> Result<ProfileRef, UpdateError> {
    let decoded = match (action, raw) {
        (ActionView::Profile, Some(raw)) => Some(
            p4::TableAction::decode(raw)
                .map_err(|e| err(Code::InvalidArgument, format!("malformed action: {e}")))?,
        ),
        (ActionView::Direct { action_id }, _) => Some(p4::TableAction {
            r#type: Some(p4::table_action::Type::Action(p4::Action {
                action_id,
                params: vec![],
            })),
        }),
        _ => None,
    };
    ap::check_entry(schema, profiles, table, decoded.as_ref())
}

/// Fails when a profile with members, groups or one-shot entries would not
/// survive unchanged in `next` (RECONCILE_AND_COMMIT cannot keep it).
pub(crate) fn check_reconcile(old: &Pipeline, next: &Pipeline) -> Result<(), Status> {
    for (id, state) in &old.profiles {
        if !state.is_empty() && !ap::survives(&old.schema, &next.schema, *id) {
            return Err(Status::invalid_argument(format!(
                "cannot preserve the members and groups of action profile {} under the new config",
                old.schema.profiles[id].name
            )));
        }
    }
    Ok(())
}

/// Moves the profile states and the replication engine from `old` to
/// `next` (after [`check_reconcile`]).
pub(crate) fn carry_over(old: &mut Pipeline, next: &mut Pipeline) {
    for (id, state) in old.profiles.drain() {
        if let Some(slot) = next.profiles.get_mut(&id) {
            *slot = state;
        }
    }
    next.pre = std::mem::take(&mut old.pre);
}
