//! Dpdk devices: emulated DPDK targets (P4-DPDK behind infrap4d). A Dpdk
//! device serves P4Runtime like any other, but its pipeline is real: a
//! SetForwardingPipelineConfig must carry the packed device config
//! infrap4d takes ([`device_config`]), and committing one loads the
//! `.spec` into a software data plane (`crate::dataplane`) that forwards
//! generated traffic with the tables P4Runtime writes install
//! ([`tables`]), and whose externs `p4fleet.externs.v1.ExternRuntime`
//! drives.
//!
//! Every commit starts a new data plane: counters from zero, every extern
//! back to its default (Sync), as when infrap4d re-adds a device. A
//! controller re-applies its extern policy after loading a pipeline.

mod device_config;
mod tables;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use p4fleet_proto::externs::extern_runtime_server::ExternRuntimeServer;
use p4fleet_proto::p4info::P4Info;
use p4fleet_proto::p4runtime::{
    self as p4, set_forwarding_pipeline_config_request::Action as SetAction,
};
use tonic::Status;

use crate::Emulator;
use crate::dataplane::engine::MAX_WORKERS;
use crate::dataplane::packet::TrafficConfig;
use crate::dataplane::policy::MAX_BURST;
use crate::dataplane::{Engine, EngineConfig, EngineRegistry, ExternRuntimeService, LoadedProgram};
use crate::device::Device;
use crate::p4runtime::schema::Schema;

pub use device_config::DeviceConfigError;
use tables::P4RuntimeTables;

/// Which devices are DPDK targets and how their data planes run (the
/// `--dpdk*` flags).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DpdkConfig {
    /// DPDK devices; empty = every served device.
    pub device_ids: Vec<u64>,
    /// Worker cores per device.
    pub workers: u32,
    /// Cores set aside for extern work per device (the most dedicated
    /// cores one extern may get; 0 = none); `None` = the machine's.
    pub extern_cores: Option<u32>,
    /// Packets per rx burst.
    pub rx_burst: u32,
    /// The generated traffic each device's data plane forwards.
    pub traffic: TrafficConfig,
    /// Rate sampling interval (packets/s, async ops/s).
    pub stats_interval: Duration,
}

/// Packets/s a Dpdk device's traffic source sends by default: enough to
/// see rates and counters move, little enough that an emulator with a few
/// devices leaves its host's cores to the rest (the workers sleep between
/// bursts below line rate).
pub const DEFAULT_RATE_PPS: u64 = 100_000;

impl Default for DpdkConfig {
    fn default() -> Self {
        DpdkConfig {
            device_ids: Vec::new(),
            workers: 1,
            extern_cores: None,
            rx_burst: 32,
            traffic: TrafficConfig {
                rate_pps: Some(DEFAULT_RATE_PPS),
                ..TrafficConfig::default()
            },
            stats_interval: Duration::from_secs(1),
        }
    }
}

impl DpdkConfig {
    /// Whether device `id` (of those served) is a DPDK target.
    pub fn covers(&self, id: u64) -> bool {
        self.device_ids.is_empty() || self.device_ids.contains(&id)
    }

    /// Checks the settings against the served device ids; the message
    /// names the setting.
    pub fn validate(&self, served: &[u64]) -> Result<(), String> {
        if let Some(id) = self.device_ids.iter().find(|id| !served.contains(id)) {
            return Err(format!("dpdk device id {id} is not a served device"));
        }
        if self.workers == 0 || self.workers as usize > MAX_WORKERS {
            return Err(format!(
                "dpdk workers {} outside 1..={MAX_WORKERS}",
                self.workers
            ));
        }
        if self.rx_burst == 0 || self.rx_burst > MAX_BURST {
            return Err(format!(
                "dpdk rx burst {} outside 1..={MAX_BURST}",
                self.rx_burst
            ));
        }
        self.traffic
            .validate()
            .map_err(|e| format!("dpdk traffic: {e}"))
    }

    fn engine_config(&self, pipeline: String) -> EngineConfig {
        EngineConfig {
            pipeline,
            workers: self.workers,
            rx_burst: self.rx_burst,
            traffic: self.traffic.clone(),
            extern_cores: self.extern_cores,
            stats_interval: self.stats_interval,
            ..EngineConfig::default()
        }
    }
}

/// The DPDK part of a device.
pub(crate) struct DpdkDevice {
    config: Arc<DpdkConfig>,
    /// Serializes pipeline changes; holds the program VERIFY_AND_SAVE
    /// checked, for COMMIT.
    saved: Mutex<Option<LoadedProgram>>,
}

impl DpdkDevice {
    pub fn new(config: Arc<DpdkConfig>) -> DpdkDevice {
        DpdkDevice {
            config,
            saved: Mutex::new(None),
        }
    }

    /// Everything that can refuse the config: the packed structure, then
    /// the `.spec` loaded and bound to the P4Info.
    fn load(
        &self,
        config: &p4::ForwardingPipelineConfig,
        p4info: &P4Info,
    ) -> Result<LoadedProgram, Status> {
        let schema =
            Schema::from_p4info(p4info).map_err(|e| Status::invalid_argument(e.to_string()))?;
        let packed = device_config::check(&config.p4_device_config, &schema)
            .map_err(|e| Status::invalid_argument(e.to_string()))?;
        LoadedProgram::load(
            &packed.spec,
            p4info,
            self.config.engine_config(packed.p4_name),
        )
        .map_err(|e| {
            Status::invalid_argument(format!(
                "p4_device_config: profiles[0].binary (the .spec) does not load: {e}"
            ))
        })
    }
}

impl Device {
    /// Makes this device a DPDK target.
    pub fn with_dpdk(mut self, config: Arc<DpdkConfig>) -> Device {
        self.dpdk = Some(DpdkDevice::new(config));
        self
    }
}

/// SetForwardingPipelineConfig on a DPDK device: the P4Runtime semantics
/// (`p4runtime::pipeline_config`) plus the device config check, and on a
/// commit a new data plane following the new pipeline's tables. Blocking
/// (it starts and stops threads).
pub(crate) fn set_pipeline(
    dev: &Arc<Device>,
    engines: &EngineRegistry,
    action: SetAction,
    config: Option<p4::ForwardingPipelineConfig>,
) -> Result<(), Status> {
    let dpdk = dev.dpdk.as_ref().expect("a DPDK device");
    let mut saved = dpdk.saved.lock().expect("dpdk lock");
    // A missing config or P4Info is the P4Runtime front end's to refuse.
    let loaded = match (&config, action) {
        (
            Some(c),
            SetAction::Verify
            | SetAction::VerifyAndSave
            | SetAction::VerifyAndCommit
            | SetAction::ReconcileAndCommit,
        ) => match &c.p4info {
            Some(info) => Some(dpdk.load(c, info)?),
            None => None,
        },
        _ => None,
    };
    dev.p4runtime
        .pipeline
        .lock()
        .expect("pipeline lock")
        .set_pipeline(action, config)?;
    let to_run = match action {
        SetAction::VerifyAndSave => {
            *saved = loaded;
            return Ok(());
        }
        SetAction::Commit => saved.take(),
        SetAction::VerifyAndCommit | SetAction::ReconcileAndCommit => {
            *saved = None;
            loaded
        }
        SetAction::Verify | SetAction::Unspecified => return Ok(()),
    };
    let loaded = to_run.ok_or_else(|| Status::internal("no checked program to run"))?;
    let source = P4RuntimeTables::current(dev)
        .ok_or_else(|| Status::internal("the committed pipeline is gone"))?;
    // The old data plane stops before the new one starts.
    if let Some(old) = engines.remove(dev.id) {
        old.stop();
    }
    let engine = Engine::from_program(loaded, Arc::new(source))
        .map_err(|e| Status::internal(format!("starting the data plane: {e}")))?;
    engine.start();
    tracing::info!(
        device = dev.id,
        pipeline = engine.pipeline(),
        "data plane started"
    );
    engines.insert(dev.id, Arc::new(engine));
    Ok(())
}

impl Emulator {
    /// `p4fleet.externs.v1.ExternRuntime` over this emulator's DPDK
    /// devices (served next to P4Runtime).
    pub fn extern_runtime_service(&self) -> ExternRuntimeServer<ExternRuntimeService> {
        ExternRuntimeService::new(self.registry.engines.clone()).server()
    }

    /// The data plane of a DPDK device with a pipeline.
    pub fn dataplane(&self, device_id: u64) -> Option<Arc<Engine>> {
        self.registry.engines.get(device_id)
    }
}
