//! Entities other than table entries (packet replication, action profile
//! members and groups), read and written one small batch at a time: they
//! are few, so they go through the generated client rather than the
//! pipelined table-entry path.

use p4fleet_proto::p4runtime::{self as p4rt, Entity, ReadRequest, Update, WriteRequest};

use super::{P4RuntimeDevice, decode_update_errors};
use crate::{Device, Error};

/// One refused update of a batch: its index, gRPC code and message.
pub type EntityError = (usize, i32, String);

impl P4RuntimeDevice {
    /// Every entity matching `filters` (wildcard reads), in the device's order.
    pub async fn read_entities(
        &self,
        slot: u32,
        filters: Vec<Entity>,
    ) -> Result<Vec<Entity>, Error> {
        let mut out = Vec::new();
        self.read_entities_each(slot, filters, &mut |e| out.push(e))
            .await?;
        Ok(out)
    }

    /// [`Self::read_entities`], each entity handed to `f` as its answer
    /// arrives.
    pub async fn read_entities_each(
        &self,
        slot: u32,
        filters: Vec<Entity>,
        f: &mut (dyn FnMut(Entity) + Send),
    ) -> Result<(), Error> {
        let device_id = self.target.device_id(slot);
        let req = ReadRequest {
            device_id,
            entities: filters,
            ..Default::default()
        };
        let call = self.client.clone().read(req).await;
        crate::for_each_response(
            call,
            |s| self.rpc_error("Read", device_id, s),
            |resp| {
                resp.entities.into_iter().for_each(&mut *f);
                Ok(())
            },
        )
        .await
    }

    /// Writes `updates` in one CONTINUE_ON_ERROR request; the refused ones
    /// come back with their index (the others were applied).
    pub async fn write_entities(
        &self,
        slot: u32,
        updates: Vec<Update>,
    ) -> Result<Vec<EntityError>, Error> {
        if updates.is_empty() {
            return Ok(Vec::new());
        }
        let device_id = self.target.device_id(slot);
        let election_id = self.wait_primary(device_id).await?;
        let n = updates.len();
        let req = WriteRequest {
            device_id,
            election_id: Some(election_id),
            updates,
            atomicity: p4rt::write_request::Atomicity::ContinueOnError as i32,
            ..Default::default()
        };
        match self.client.clone().write(req).await {
            Ok(_) => Ok(Vec::new()),
            Err(status) => match decode_update_errors(&status, n) {
                Some(errors) => Ok(errors),
                None => Err(self.rpc_error("Write", device_id, status)),
            },
        }
    }
}

impl Device {
    /// [`P4RuntimeDevice::read_entities`]; over BFRT registers and direct
    /// counters only ([`crate::BfrtDevice::read_entities`]).
    pub async fn read_entities(
        &self,
        slot: u32,
        filters: Vec<Entity>,
    ) -> Result<Vec<Entity>, Error> {
        match self {
            Device::P4Runtime(d) => d.read_entities(slot, filters).await,
            Device::Bfrt(d) => d.read_entities(slot, filters).await,
        }
    }

    /// [`P4RuntimeDevice::write_entities`]; over BFRT register cells only
    /// ([`crate::BfrtDevice::write_entities`]).
    pub async fn write_entities(
        &self,
        slot: u32,
        updates: Vec<Update>,
    ) -> Result<Vec<EntityError>, Error> {
        match self {
            Device::P4Runtime(d) => d.write_entities(slot, updates).await,
            Device::Bfrt(d) => d.write_entities(slot, updates).await,
        }
    }
}
