//! p4fleet-emulator: emulated P4 targets that serve real P4Runtime v1 gRPC
//! (with control-plane semantics taken from the P4Info they are given:
//! match kinds, bit widths, canonical byte strings, priorities, table sizes,
//! default actions, arbitration, per-update errors, read-back) and BF
//! Runtime (BFRT) gRPC (semantics from bfrt.json).
//!
//! Use in-process with [`Emulator::start`], or run the `p4fleet-emulator`
//! binary. See `emulator/README.md` for flags, the stats JSON and limits.
//!
//! An independent oracle: this crate deliberately does NOT reuse the
//! operator's entry model, P4Info/bfrt.json mapping or wire encoders. It
//! parses, validates and canonicalizes what arrives on the wire with its
//! own code, written from the P4Runtime and BFRT specs, so a bug in the
//! client's encoding cannot be mirrored by the server and pass unnoticed.
//! Only the generated protobuf types (`p4fleet-proto`) are shared.
//!
//! Layout: `p4runtime/` and `bfrt/` are the two front ends (service, wire
//! views, schema, table store). What they share sits at the top: `registry`
//! (the devices by id), `device` (one device: each front end's state and
//! the shared counters of `stats`), `grpc` (the wire-level gRPC server),
//! `wire` (the protobuf codec), `key` (canonical keys and entry maps),
//! `update_error`, `write_batch` (the end of a Write batch), `profile`
//! (added latency), `drift` (changes behind the clients' backs),
//! `side_channel` (stats and drift over HTTP) and `running` (listeners and
//! server tasks). `dataplane` is the software data plane of DPDK targets
//! and `dpdk` makes devices DPDK targets (packed pipeline configs, the
//! data plane following the P4Runtime tables, the extern runtime).
//! `fpga` is an FPGA board: its slot service, its slots as P4Runtime
//! devices, its traffic model. emulator/README.md has the table.

pub mod bfrt;
pub mod dataplane;
mod device;
mod dpdk;
mod drift;
mod faults;
pub mod fpga;
mod grpc;
mod key;
mod p4runtime;
mod profile;
mod registry;
mod running;
mod side_channel;
mod stats;
#[cfg(test)]
mod testing;
mod tls;
mod update_error;
mod wire;
mod write_batch;

use std::net::SocketAddr;
use std::sync::Arc;

pub use dpdk::{DEFAULT_RATE_PPS, DeviceConfigError, DpdkConfig};
pub use p4runtime::arbitration::ArbitrationMode;
pub use p4runtime::bulk::{BULK_VERSION, BulkService};
pub use p4runtime::frames::{Frame, FrameReport};
pub use p4runtime::reconcile::Reconciled;
pub use p4runtime::schema::SchemaError;
pub use p4runtime::service::{
    P4RUNTIME_API_VERSION, P4RuntimeGrpc, P4RuntimeService, write_error_details,
};
pub use profile::{LatencyProfile, UnknownProfile};
pub use running::RunningEmulator;
pub use stats::DeviceStats;
pub use tls::ServerTls;
pub use update_error::UpdateError;

use device::Device;
use registry::Registry;
use running::Server;

/// Errors starting or driving the emulator.
#[derive(Debug, thiserror::Error)]
pub enum EmulatorError {
    #[error("binding {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("no devices configured")]
    NoDevices,
    #[error("unknown device id {0}")]
    UnknownDevice(u64),
    #[error(transparent)]
    Update(#[from] UpdateError),
    #[error("server: {0}")]
    Server(String),
    #[error("a Tofino chip has 1 to 8 pipes, not {0}")]
    TofinoPipes(u32),
    #[error("bfrt program: {0}")]
    BfrtProgram(String),
    #[error("dpdk: {0}")]
    Dpdk(String),
    #[error(transparent)]
    Fpga(#[from] fpga::FpgaConfigError),
    #[error("tls: {0}")]
    Tls(String),
}

/// A BFRT program loaded on every device at start (as if a client had sent
/// VERIFY_AND_WARM_INIT_BEGIN_AND_END), so clients can BIND right away.
#[derive(Debug, Clone)]
pub struct BfrtProgram {
    /// Program name clients BIND to (e.g. `firewall`).
    pub name: String,
    /// Its bfrt.json.
    pub bfrt_json: Vec<u8>,
}

/// How to run an emulator.
#[derive(Debug, Clone)]
pub struct EmulatorConfig {
    /// Where P4Runtime listens (`127.0.0.1:0` picks a free port).
    pub p4runtime_addr: SocketAddr,
    /// Where the stats/drift HTTP side channel listens; `None` = off.
    pub stats_addr: Option<SocketAddr>,
    /// Device ids served, each an independent device.
    pub device_ids: Vec<u64>,
    /// Entities per ReadResponse message.
    pub read_chunk_size: usize,
    /// Largest gRPC message accepted or sent, in bytes.
    pub max_message_size: usize,
    /// Where BFRT (`bfrt_proto.BfRuntime`) listens; `None` = off.
    pub bfrt_addr: Option<SocketAddr>,
    /// BFRT programs preloaded on every device.
    pub bfrt_programs: Vec<BfrtProgram>,
    /// Added write latency (P4Runtime and BFRT); `None` for benchmarks.
    pub profile: LatencyProfile,
    /// DPDK targets (all devices, or those listed) and their data planes;
    /// `None` = no DPDK devices.
    pub dpdk: Option<DpdkConfig>,
    /// An FPGA board (`fpga`): its slots are devices too, and its slot
    /// service shares the P4Runtime port.
    pub fpga: Option<fpga::FpgaConfig>,
    /// Which P4Runtime stream may be primary (lenient by default; the
    /// spec's "highest election id ever seen" fences stale controllers).
    pub arbitration: ArbitrationMode,
    /// TLS on the P4Runtime and BFRT ports; `None` = plaintext.
    pub tls: Option<ServerTls>,
    /// Whether SetForwardingPipelineConfig takes RECONCILE_AND_COMMIT
    /// (keeping the state of unchanged tables); off, it is UNIMPLEMENTED,
    /// as on targets without it.
    pub reconcile: bool,
    /// Hardware pipes of each device's Tofino chip (BFRT `pipe_scope`s name
    /// pipes below it): 4 by default (Tofino-1, 64 ports), 2 for the
    /// two-pipe parts.
    pub tofino_pipes: u32,
}

impl Default for EmulatorConfig {
    fn default() -> Self {
        EmulatorConfig {
            p4runtime_addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            stats_addr: None,
            device_ids: vec![1],
            read_chunk_size: 1000,
            max_message_size: 256 * 1024 * 1024,
            bfrt_addr: None,
            bfrt_programs: Vec::new(),
            profile: LatencyProfile::None,
            dpdk: None,
            fpga: None,
            arbitration: ArbitrationMode::default(),
            reconcile: true,
            tls: None,
            tofino_pipes: bfrt::pipes::DEFAULT_PIPES,
        }
    }
}

/// A set of emulated devices; cheap to clone (shared state).
#[derive(Clone)]
pub struct Emulator {
    registry: Arc<Registry>,
    max_message_size: usize,
    fpga: Option<Arc<fpga::Board>>,
    /// Calls per gRPC method ([`Emulator::rpc_counts`]).
    rpcs: Arc<stats::RpcCounts>,
}

impl Emulator {
    /// Devices without any listener; serve them with [`Emulator::service`].
    /// Device ids must be distinct ([`Emulator::start`] checks).
    pub fn new(config: &EmulatorConfig) -> Emulator {
        let dpdk = config.dpdk.clone().map(Arc::new);
        let device = |id: u64| match &dpdk {
            Some(d) if d.covers(id) => Device::new(id).with_dpdk(d.clone()),
            _ => Device::new(id),
        };
        let slots = config.fpga.iter().flat_map(fpga::slot_devices);
        let registry = Arc::new(Registry::new(
            config
                .device_ids
                .iter()
                .map(|id| device(*id))
                .chain(slots)
                .map(|d| d.with_arbitration(config.arbitration))
                .map(|d| d.with_reconcile(config.reconcile))
                .map(|d| d.with_tofino_pipes(config.tofino_pipes)),
            config.read_chunk_size,
            config.profile,
        ));
        let fpga = config.fpga.as_ref().map(|f| {
            let devices = f
                .board
                .device_ids()
                .filter_map(|id| registry.get(id).cloned());
            Arc::new(fpga::Board::new(f, devices.collect()))
        });
        Emulator {
            registry,
            max_message_size: config.max_message_size,
            fpga,
            rpcs: Arc::default(),
        }
    }

    /// Binds the listeners and serves until [`RunningEmulator::shutdown`].
    pub async fn start(config: EmulatorConfig) -> Result<RunningEmulator, EmulatorError> {
        if config.device_ids.is_empty() && config.fpga.is_none() {
            return Err(EmulatorError::NoDevices);
        }
        if !(1..=bfrt::pipes::MAX_PIPES).contains(&config.tofino_pipes) {
            return Err(EmulatorError::TofinoPipes(config.tofino_pipes));
        }
        if let Some(d) = &config.dpdk {
            d.validate(&config.device_ids)
                .map_err(EmulatorError::Dpdk)?;
        }
        if let Some(f) = &config.fpga {
            f.validate(&config.device_ids)?;
        }
        let emu = Emulator::new(&config);
        if !config.bfrt_programs.is_empty() {
            // Plain devices only: FPGA slots get their programs from LoadSlot.
            for &id in &config.device_ids {
                emu.load_bfrt_programs(id, &config.bfrt_programs)?;
            }
        }
        // p4fleet's bulk extension, extern runtime and FPGA slot service
        // share the P4Runtime port (the extern runtime answers
        // UNIMPLEMENTED for devices that are not DPDK targets).
        let tls = config.tls.as_ref();
        let p4runtime = running::tuned_server(tls, emu.rpcs.clone())?
            .add_service(emu.service())
            .add_service(emu.bulk_service())
            .add_service(emu.extern_runtime_service())
            .add_optional_service(emu.slot_service());
        let p4runtime = Server::grpc(config.p4runtime_addr, p4runtime).await?;
        let stats = match config.stats_addr {
            Some(addr) => {
                let app = side_channel::router(emu.clone()).merge(emu.fpga_routes());
                Some(Server::http(addr, app).await?)
            }
            None => None,
        };
        let bfrt = match config.bfrt_addr {
            Some(addr) => {
                let router =
                    running::tuned_server(tls, emu.rpcs.clone())?.add_service(emu.bfrt_service());
                Some(Server::grpc(addr, router).await?)
            }
            None => None,
        };
        Ok(RunningEmulator {
            emulator: emu,
            p4runtime,
            stats,
            bfrt,
        })
    }

    fn device(&self, id: u64) -> Result<&Arc<Device>, EmulatorError> {
        self.registry
            .get(id)
            .ok_or(EmulatorError::UnknownDevice(id))
    }

    /// Device ids served, sorted.
    pub fn device_ids(&self) -> Vec<u64> {
        self.registry.ids()
    }
}
