//! A table's default entry over BFRT (`is_default_entry`): read it, set it
//! with a MODIFY, reset it with a RESET; translated from and to P4Runtime
//! form through the bound program's [`p4fleet_model::entries::bfrt::BfrtTableMap`].

use p4fleet_model::entries::ActionCall;
use p4fleet_proto::bfrt::{self, WriteRequest, update};
use p4fleet_proto::p4runtime::TableAction;

use super::{BfrtDevice, decode_update_errors};
use crate::Error;

impl BfrtDevice {
    /// The default action of P4Info table `table_id` in `slot`, in
    /// P4Runtime form (None when its default entry has no action).
    pub async fn read_default_action(
        &self,
        slot: u32,
        table_id: u32,
    ) -> Result<Option<TableAction>, Error> {
        self.no_pipe_sets(slot)?;
        let device_id = self.target.device_id(slot);
        let (p4_name, map) = self.bound(device_id).await?;
        let tm = map.table(table_id).ok_or_else(|| Error::Protocol {
            device_id,
            reason: format!("table id {table_id} is not in the bfrt.json"),
        })?;
        let filter = tm.default_entry(None).map_err(|e| Error::Protocol {
            device_id,
            reason: e.to_string(),
        })?;
        let mut found = None;
        self.read_bfrt_each(device_id, p4_name, vec![filter], &mut |t| {
            if t.is_default_entry && t.table_id == tm.bfrt_table_id {
                let te = tm.from_bfrt(&t).map_err(|e| Error::Protocol {
                    device_id,
                    reason: e.to_string(),
                })?;
                found = te.action;
            }
            Ok(())
        })
        .await?;
        Ok(found)
    }

    /// Sets the default entry of P4Info table `table_id` in `slot` to
    /// `action` (MODIFY), or resets it to the program's initial default
    /// when None (RESET).
    pub async fn write_default_action(
        &self,
        slot: u32,
        table_id: u32,
        action: Option<&ActionCall>,
    ) -> Result<(), Error> {
        self.no_pipe_sets(slot)?;
        let device_id = self.target.device_id(slot);
        self.wait_subscribed(device_id).await?;
        let (p4_name, map) = self.bound(device_id).await?;
        let protocol = |reason: String| Error::Protocol { device_id, reason };
        let tm = map
            .table(table_id)
            .ok_or_else(|| protocol(format!("table id {table_id} is not in the bfrt.json")))?;
        let entry = tm
            .default_entry(action)
            .map_err(|e| protocol(e.to_string()))?;
        let ty = match action {
            Some(_) => update::Type::Modify,
            None => update::Type::Reset,
        };
        let req = WriteRequest {
            target: Some(Self::target_device(device_id)),
            client_id: self.client_id,
            updates: vec![bfrt::Update {
                r#type: ty as i32,
                entity: Some(bfrt::Entity {
                    entity: Some(bfrt::entity::Entity::TableEntry(entry)),
                }),
            }],
            p4_name,
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
