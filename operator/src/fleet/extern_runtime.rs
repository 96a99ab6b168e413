//! Whether a device serves p4fleet's extern runtime
//! (`p4fleet.externs.v1.ExternRuntime`): the Switch's `asyncExterns`
//! capability, asked by the Switch controller's probe. Applying a policy
//! through it is the AsyncExternPolicy controller's.

use std::time::Duration;

use p4fleet_proto::externs::{self as pb, extern_runtime_client::ExternRuntimeClient};
use tonic::transport::Channel;

/// Whether the device at `t` serves an extern runtime (the Switch
/// capability `asyncExterns`): it answers ListExterns, or says it has no
/// pipeline yet (a Dpdk target before its first program). UNIMPLEMENTED
/// (no such service, or not a Dpdk device) and any failure are `false`:
/// status never claims what the device did not confirm. Asked on `ch`, a
/// channel the caller keeps (the Switch probe asks every
/// `--drift-seconds`: a new channel each time would be a new connection).
#[cfg(test)]
pub async fn serves_extern_runtime(ch: Channel, device_id: u64) -> bool {
    extern_runtime_answer(ch, device_id).await.unwrap_or(false)
}

/// The device's own answer to whether it serves an extern runtime, or
/// None when it gave none (unreachable, timed out, another failure): an
/// answer holds as long as the device does, a missing one does not.
pub async fn extern_runtime_answer(ch: Channel, device_id: u64) -> Option<bool> {
    let mut client = ExternRuntimeClient::new(ch);
    let probe = client.list_externs(pb::ListExternsRequest {
        target: Some(pb::Target {
            device_id,
            pipeline: String::new(),
        }),
    });
    match tokio::time::timeout(Duration::from_secs(5), probe).await {
        Ok(Ok(_)) => Some(true),
        Ok(Err(s)) => match s.code() {
            tonic::Code::FailedPrecondition => Some(true),
            tonic::Code::Unimplemented | tonic::Code::NotFound => Some(false),
            _ => None,
        },
        Err(_) => None,
    }
}

/// Where the extern runtime of the VirtualSwitch in `slot` of `sw` is:
/// the Switch's side target with the slot's device id (a Dpdk Switch's
/// slots are consecutive device ids from its own).
pub fn target(
    devices: &crate::devices::DevicePool,
    sw: &p4fleet_crds::Switch,
    slot: Option<u32>,
) -> p4fleet_client::Target {
    p4fleet_client::Target {
        device_id: sw.spec.device_id + u64::from(slot.unwrap_or(0)),
        ..devices.side_target(sw)
    }
}
