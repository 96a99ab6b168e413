//! Counters, meters and registers on a P4Runtime device: the device's
//! P4Info, to resolve their names (reads and writes go through
//! `read_entities`/`write_entities`, plain prost messages: small and
//! infrequent, not the pre-encoded table entry path).

use p4fleet_proto::p4info::P4Info;
use p4fleet_proto::p4runtime::{
    GetForwardingPipelineConfigRequest, get_forwarding_pipeline_config_request::ResponseType,
};

use super::P4RuntimeDevice;
use crate::Error;

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
}

impl crate::Device {
    /// The P4Info of the program in `slot`: the device's (P4Runtime), or
    /// the one the program was set with (BFRT devices know only bfrt.json).
    pub async fn running_p4info(&self, slot: u32) -> Result<Option<P4Info>, Error> {
        match self {
            crate::Device::P4Runtime(d) => d.running_p4info(slot).await,
            crate::Device::Bfrt(d) => d.running_p4info(slot).await,
        }
    }
}
