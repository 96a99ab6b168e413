//! The Switch probe's pipeline stage: in the same pass as the reachability
//! probe (every `--drift-seconds`), each slot of the device that has a
//! VirtualSwitch loaded is checked the way that VirtualSwitch's load checks
//! it (`crate::loaded_pipelines::PipelineCheck`): one small read per
//! slot. A pipeline not found (or a device that could not be asked) names
//! its VirtualSwitch to the VirtualSwitch controller, which reconciles it
//! at once: it re-pushes, or reports the device's problem. The
//! VirtualSwitches themselves so need no check of their own between
//! resyncs (docs/reliability.md).

use std::time::Duration;

use kube::ResourceExt;
use p4fleet_client::Device;
use p4fleet_crds::Switch;

use crate::devices::{Asked, DevicePool};
use crate::loaded_pipelines::PipelineCheck;

/// Why a pipeline was not confirmed.
#[derive(Debug, thiserror::Error)]
pub enum NotConfirmed {
    #[error("the device reports another pipeline, or none")]
    Differs,
    #[error(transparent)]
    Device(#[from] p4fleet_client::Error),
    #[error(transparent)]
    Slot(#[from] p4fleet_client::SlotCallError),
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    #[error("the Switch's device did not answer its probe")]
    Unreachable,
}

/// Asks the device whether `check` still holds.
async fn confirm(
    devices: &DevicePool,
    sw: &Switch,
    dev: &Device,
    check: &PipelineCheck,
) -> Result<(), NotConfirmed> {
    let holds = match check {
        PipelineCheck::Cookie { slot, cookie } => {
            dev.pipeline_cookie(*slot).await? == Some(*cookie)
        }
        PipelineCheck::Tofino {
            slot,
            p4_name,
            sha256,
            pipes,
        } => dev.runs_tofino(*slot, p4_name, sha256, pipes).await?,
        PipelineCheck::Slot { slot, .. } => {
            let state = devices.slot_client(sw)?.slot_state(*slot).await?;
            check.slot_holds(&state)
        }
    };
    if holds {
        Ok(())
    } else {
        Err(NotConfirmed::Differs)
    }
}

/// What [`check`] found.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Checked {
    /// VirtualSwitches whose pipeline was not confirmed (named to their
    /// controller).
    pub lost: usize,
    /// Checks the device answered (the pipeline held or differed): this
    /// probe reached the device.
    pub answered: usize,
}

/// Checks every loaded VirtualSwitch of `sw` on `dev` (None: the device
/// did not answer the probe, so none is confirmed), each within
/// `timeout`, and names those not confirmed to their controller.
pub async fn check(
    devices: &DevicePool,
    sw: &Switch,
    dev: Option<&Device>,
    timeout: Duration,
) -> Checked {
    let name = sw.name_any();
    let mut out = Checked::default();
    for (vs, c) in devices.pipelines().on(&name) {
        let confirmed = match dev {
            None => Err(NotConfirmed::Unreachable),
            Some(dev) => tokio::time::timeout(timeout, confirm(devices, sw, dev, &c))
                .await
                .unwrap_or(Err(NotConfirmed::Timeout(timeout))),
        };
        if matches!(confirmed, Ok(()) | Err(NotConfirmed::Differs)) {
            out.answered += 1;
        }
        if let (Ok(()), Some(dev)) = (&confirmed, dev) {
            devices.pipelines().confirmed(&vs, &c, Asked::of(sw, dev));
        }
        if let Err(why) = confirmed {
            tracing::info!(switch = %name, virtual_switch = %vs, reason = %why,
                "pipeline not confirmed by the Switch probe: reconciling its VirtualSwitch");
            devices.pipelines().lost(&vs);
            out.lost += 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use p4fleet_proto::p4info;

    fn switch(endpoint: &str) -> Switch {
        let spec = serde_json::from_value(
            serde_json::json!({"target": "Bmv2", "endpoint": endpoint, "deviceId": 1, "slots": 1}),
        )
        .unwrap();
        Switch::new("sw", spec)
    }

    /// A pipeline replaced or gone behind the operator's back (no stream
    /// change) is found by the probe's check, and its VirtualSwitch named.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_pipeline_not_on_the_device_names_its_virtual_switch() {
        let running = p4fleet_emulator::Emulator::start(Default::default())
            .await
            .unwrap();
        let sw = switch(&running.p4runtime_addr().to_string());
        let devices = DevicePool::with_election_id(1);
        let mut lost = devices.pipelines().subscribe();
        let dev = devices.connect(&sw).unwrap();
        devices
            .pipelines()
            .record("ns/a", "sw", PipelineCheck::Cookie { slot: 0, cookie: 7 });
        let t = Duration::from_secs(5);

        // Nothing loaded yet: the device answered, and the pipeline is lost.
        let c = check(&devices, &sw, Some(&dev), t).await;
        assert_eq!((c.lost, c.answered), (1, 1));
        assert_eq!(lost.recv().await.unwrap(), "ns/a");

        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../examples/firewall/p4info.txt"
        );
        let info = p4info::parse_text(&std::fs::read_to_string(path).unwrap()).unwrap();
        assert!(dev.set_pipeline(0, &info, Vec::new(), 7).await.unwrap());
        assert_eq!(check(&devices, &sw, Some(&dev), t).await.lost, 0);

        // Another pipeline (cookie) now: lost again.
        assert!(dev.set_pipeline(0, &info, Vec::new(), 8).await.unwrap());
        assert_eq!(check(&devices, &sw, Some(&dev), t).await.lost, 1);
        assert_eq!(lost.recv().await.unwrap(), "ns/a");

        // A device that did not answer its probe confirms nothing.
        devices
            .pipelines()
            .record("ns/a", "sw", PipelineCheck::Cookie { slot: 0, cookie: 8 });
        let c = check(&devices, &sw, Some(&dev), t).await;
        assert_eq!((c.lost, c.answered), (0, 1));
        let c = check(&devices, &sw, None, t).await;
        assert_eq!(
            (c.lost, c.answered),
            (1, 0),
            "nothing asked, nothing answered"
        );
        assert!(lost.try_recv().is_ok());
        running.shutdown().await.unwrap();
    }
}
