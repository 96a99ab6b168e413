//! BF Runtime (BFRT) front end: the `bfrt_proto.BfRuntime` service over the
//! same emulated devices as P4Runtime (same device ids, counters and stats),
//! with its own table store because BFRT programs come from bfrt.json (names
//! and full-width values) rather than from a P4Info.
//!
//! Clients open a StreamChannel and Subscribe (registering their client id
//! with a device), load programs with SetForwardingPipelineConfig
//! (VERIFY_AND_WARM_INIT_BEGIN_AND_END, or BEGIN then WARM_INIT_END), BIND to
//! one by name, then Write and Read. See docs/bfrt.md.

mod device;
pub mod pipes;
pub(crate) mod schema;
mod service;
mod stateful;
mod store;
mod wire;

use p4fleet_proto::bfrt::bf_runtime_server::BfRuntimeServer;

pub(crate) use device::BfrtDevice;
pub use schema::{BfrtSchemaError, NON_P4_JSON, non_p4_json};
pub use service::{BfrtGrpc, BfrtService, bfrt_write_error_details};
pub(crate) use store::Applied;

use crate::{BfrtProgram, Emulator, EmulatorError};

impl Emulator {
    /// The BFRT tonic service (with raised message size limits), to mount in
    /// any tonic server.
    pub fn bfrt_service(&self) -> BfrtGrpc {
        let svc = BfrtService {
            registry: self.registry.clone(),
        };
        let generated = BfRuntimeServer::new(svc.clone())
            .max_decoding_message_size(self.max_message_size)
            .max_encoding_message_size(self.max_message_size);
        BfrtGrpc::new(svc, generated, self.max_message_size)
    }

    /// Loads BFRT programs on a device, replacing the loaded ones (as
    /// VERIFY_AND_WARM_INIT_BEGIN_AND_END does).
    pub fn load_bfrt_programs(
        &self,
        device_id: u64,
        programs: &[BfrtProgram],
    ) -> Result<(), EmulatorError> {
        let configs = programs
            .iter()
            .map(|p| p4fleet_proto::bfrt::ForwardingPipelineConfig {
                p4_name: p.name.clone(),
                bfruntime_info: p.bfrt_json.clone(),
                profiles: vec![],
            })
            .collect();
        let dev = self.device(device_id)?;
        let mut bf = dev.bfrt.lock().expect("bfrt lock");
        let verified = BfrtDevice::verify(configs, bf.pipes).map_err(EmulatorError::BfrtProgram)?;
        bf.load(verified, false);
        Ok(())
    }
}
