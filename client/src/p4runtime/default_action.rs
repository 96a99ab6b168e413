//! A table's default entry over P4Runtime: read it (`is_default_action`
//! read filter) and set or reset it (a MODIFY of the default entry; with
//! no action it returns to the program's initial default, P4Runtime spec
//! §9.1.3). One update per request: a default entry is one per table, so
//! it takes no part in the batched entry path.

use p4fleet_model::entries::ActionCall;
use p4fleet_proto::p4runtime::{
    self as p4rt, Entity, ReadRequest, TableAction, TableEntry, Update, WriteRequest, entity,
    update,
};

use super::{P4RuntimeDevice, decode_update_errors};
use crate::Error;

impl P4RuntimeDevice {
    /// The default action of table `table_id` in `slot` (None when the
    /// table has none).
    pub async fn read_default_action(
        &self,
        slot: u32,
        table_id: u32,
    ) -> Result<Option<TableAction>, Error> {
        let device_id = self.target.device_id(slot);
        let req = ReadRequest {
            device_id,
            entities: vec![Entity {
                entity: Some(entity::Entity::TableEntry(TableEntry {
                    table_id,
                    is_default_action: true,
                    ..Default::default()
                })),
            }],
            ..Default::default()
        };
        let mut stream = self
            .client
            .clone()
            .read(req)
            .await
            .map_err(|s| self.rpc_error("Read", device_id, s))?
            .into_inner();
        let mut found = None;
        while let Some(resp) = stream
            .message()
            .await
            .map_err(|s| self.rpc_error("Read", device_id, s))?
        {
            for e in resp.entities {
                if let Some(entity::Entity::TableEntry(t)) = e.entity
                    && t.table_id == table_id
                    && t.is_default_action
                {
                    found = t.action;
                }
            }
        }
        Ok(found)
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
        let device_id = self.target.device_id(slot);
        let election_id = self.wait_primary(device_id).await?;
        let req = WriteRequest {
            device_id,
            election_id: Some(election_id),
            updates: vec![Update {
                r#type: update::Type::Modify as i32,
                entity: Some(Entity {
                    entity: Some(entity::Entity::TableEntry(TableEntry {
                        table_id,
                        is_default_action: true,
                        action: action.map(ActionCall::to_proto),
                        ..Default::default()
                    })),
                }),
            }],
            atomicity: p4rt::write_request::Atomicity::ContinueOnError as i32,
            ..Default::default()
        };
        match self.client.clone().write(req).await {
            Ok(_) => Ok(()),
            Err(status) => {
                let status = crate::pipeline::single_update_status(status, decode_update_errors);
                Err(self.rpc_error("Write", device_id, status))
            }
        }
    }
}
