//! A table's default entry over P4Runtime: read it (`is_default_action`
//! read filter) and set or reset it (a MODIFY of the default entry; with
//! no action it returns to the program's initial default, P4Runtime spec
//! §9.1.3). One update per request: a default entry is one per table, so
//! it takes no part in the batched entry path.

use p4fleet_model::entries::ActionCall;
use p4fleet_proto::p4runtime::{Entity, TableAction, TableEntry, Update, entity, update};

use super::P4RuntimeDevice;
use crate::Error;

impl P4RuntimeDevice {
    /// The default action of table `table_id` in `slot` (None when the
    /// table has none).
    pub async fn read_default_action(
        &self,
        slot: u32,
        table_id: u32,
    ) -> Result<Option<TableAction>, Error> {
        let read = self
            .read_entities(slot, vec![default_entry(table_id, None)])
            .await?;
        Ok(read.into_iter().rev().find_map(|e| match e.entity {
            Some(entity::Entity::TableEntry(t))
                if t.table_id == table_id && t.is_default_action =>
            {
                t.action
            }
            _ => None,
        }))
    }

    /// Sets the default action of table `table_id` in `slot` to `action`,
    /// or resets it to the program's initial default when `None`. A
    /// refusal is [`Error::Rpc`] with the device's per-update code and
    /// message.
    pub async fn write_default_action(
        &self,
        slot: u32,
        table_id: u32,
        action: Option<&ActionCall>,
    ) -> Result<(), Error> {
        let update = Update {
            r#type: update::Type::Modify as i32,
            entity: Some(default_entry(table_id, action.map(ActionCall::to_proto))),
        };
        match self.write_entities(slot, vec![update]).await?.pop() {
            None => Ok(()),
            Some((_, code, message)) => {
                let status = tonic::Status::new(tonic::Code::from_i32(code), message);
                Err(self.rpc_error("Write", self.target.device_id(slot), status))
            }
        }
    }
}

/// Table `table_id`'s default entry (a read filter when `action` is None).
fn default_entry(table_id: u32, action: Option<TableAction>) -> Entity {
    Entity {
        entity: Some(entity::Entity::TableEntry(TableEntry {
            table_id,
            is_default_action: true,
            action,
            ..Default::default()
        })),
    }
}
