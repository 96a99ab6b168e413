//! Counters, meters and registers on a P4Runtime device: the device's
//! P4Info (to resolve their names), reads of any entity filters, and
//! Writes of MODIFY updates with their per-update errors. Small and
//! infrequent (a readout per interval, a handful of settings), so plain
//! prost messages, not the pre-encoded table entry path.

use p4fleet_proto::p4info::P4Info;
use p4fleet_proto::p4runtime::{
    self as p4rt, Entity, GetForwardingPipelineConfigRequest, ReadRequest, Update, WriteRequest,
    entity, get_forwarding_pipeline_config_request::ResponseType,
};

use super::{P4RuntimeDevice, decode_update_errors};
use crate::Error;

/// One refused update: its index in the request, gRPC code and message.
pub type Refused = (usize, i32, String);

impl P4RuntimeDevice {
    /// The P4Info of the pipeline the device runs (`None`: none loaded).
    pub async fn running_p4info(&self, slot: u32) -> Result<Option<P4Info>, Error> {
        let device_id = self.target.device_id(slot);
        let req = GetForwardingPipelineConfigRequest {
            device_id,
            response_type: ResponseType::P4infoAndCookie as i32,
        };
        let resp = self
            .client
            .clone()
            .get_forwarding_pipeline_config(req)
            .await
            .map_err(|s| self.rpc_error("GetForwardingPipelineConfig", device_id, s))?;
        Ok(resp.into_inner().config.and_then(|c| c.p4info))
    }

    /// Every entity matching `filters` (one Read).
    pub async fn read_entities(
        &self,
        slot: u32,
        filters: Vec<entity::Entity>,
    ) -> Result<Vec<entity::Entity>, Error> {
        let device_id = self.target.device_id(slot);
        let req = ReadRequest {
            device_id,
            entities: filters
                .into_iter()
                .map(|e| Entity { entity: Some(e) })
                .collect(),
            ..Default::default()
        };
        let mut stream = self
            .client
            .clone()
            .read(req)
            .await
            .map_err(|s| self.rpc_error("Read", device_id, s))?
            .into_inner();
        let mut out = Vec::new();
        while let Some(resp) = stream
            .message()
            .await
            .map_err(|s| self.rpc_error("Read", device_id, s))?
        {
            out.extend(resp.entities.into_iter().filter_map(|e| e.entity));
        }
        Ok(out)
    }

    /// Writes `updates` in one request as primary; the updates the device
    /// refused, by index (empty: all applied).
    pub async fn write_updates(
        &self,
        slot: u32,
        updates: Vec<Update>,
    ) -> Result<Vec<Refused>, Error> {
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
            Err(s) => match decode_update_errors(&s, n) {
                Some(errors) => Ok(errors),
                None => Err(self.rpc_error("Write", device_id, s)),
            },
        }
    }
}
