//! p4fleet-emulator: emulated P4 targets that serve real P4Runtime v1 gRPC
//! with control-plane semantics taken from the P4Info they are given (match
//! kinds, bit widths, canonical byte strings, priorities, table sizes,
//! default actions, arbitration, per-update errors, read-back).
//!
//! Use in-process with [`Emulator::start`], or run the `p4fleet-emulator`
//! binary. See `emulator/README.md` for flags, the stats JSON and limits.

pub mod bfrt;
mod bulk;
pub mod dataplane;
mod device;
mod entry;
mod grpc;
mod key;
mod profile;
mod schema;
mod service;
mod stats;
mod wire;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use p4fleet_proto::bfrt::bf_runtime_server::BfRuntimeServer;
use p4fleet_proto::p4runtime::{self as p4, p4_runtime_server::P4RuntimeServer};
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

pub use bulk::{BULK_VERSION, BulkService};
pub use device::DeviceStats;
pub use entry::UpdateError;
pub use profile::{LatencyProfile, UnknownProfile};
pub use schema::SchemaError;
pub use service::{P4RUNTIME_API_VERSION, P4RuntimeGrpc, P4RuntimeService, write_error_details};

use device::Device;
use service::Inner;

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
    #[error("bfrt program: {0}")]
    BfrtProgram(String),
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
        }
    }
}

/// The gRPC server settings of both front ends. Large batches are
/// megabytes: big HTTP/2 windows and frames mean fewer WINDOW_UPDATE round
/// trips and fewer frames to parse per Write (h2's defaults are 16 KiB
/// frames and hyper's 1 MiB windows).
fn tuned_server() -> tonic::transport::Server {
    tonic::transport::Server::builder()
        .tcp_nodelay(true)
        .initial_stream_window_size(16 * 1024 * 1024)
        .initial_connection_window_size(64 * 1024 * 1024)
        .max_frame_size(1024 * 1024)
}

/// Accepted connections with TCP_NODELAY. The server builder's
/// `tcp_nodelay` only applies to listeners tonic binds itself; without it,
/// Nagle holds back the small response frames of concurrent requests until
/// the client's delayed ACK (~40 ms stalls with several Writes in flight).
fn nodelay_incoming(listener: TcpListener) -> tonic::transport::server::TcpIncoming {
    tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true))
}

/// A set of emulated devices; cheap to clone (shared state).
#[derive(Clone)]
pub struct Emulator {
    inner: Arc<Inner>,
    max_message_size: usize,
}

impl Emulator {
    /// Devices without any listener; serve them with [`Emulator::service`].
    pub fn new(config: &EmulatorConfig) -> Emulator {
        let devices = config
            .device_ids
            .iter()
            .map(|id| (*id, Arc::new(Device::new(*id))))
            .collect::<HashMap<_, _>>();
        Emulator {
            inner: Arc::new(Inner {
                devices,
                next_stream_id: AtomicU64::new(1),
                read_chunk: config.read_chunk_size,
                profile: config.profile,
            }),
            max_message_size: config.max_message_size,
        }
    }

    /// Binds the listeners and serves until [`RunningEmulator::shutdown`].
    pub async fn start(config: EmulatorConfig) -> Result<RunningEmulator, EmulatorError> {
        if config.device_ids.is_empty() {
            return Err(EmulatorError::NoDevices);
        }
        let emu = Emulator::new(&config);
        if !config.bfrt_programs.is_empty() {
            for id in emu.device_ids() {
                emu.load_bfrt_programs(id, &config.bfrt_programs)?;
            }
        }
        let listener = TcpListener::bind(config.p4runtime_addr)
            .await
            .map_err(|source| EmulatorError::Bind {
                addr: config.p4runtime_addr,
                source,
            })?;
        let p4runtime_addr = listener
            .local_addr()
            .map_err(|source| EmulatorError::Bind {
                addr: config.p4runtime_addr,
                source,
            })?;
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        let svc = emu.service();
        // p4fleet's bulk extension shares the P4Runtime port.
        let bulk_svc = emu.bulk_service();
        let incoming = nodelay_incoming(listener);
        let grpc = tokio::spawn(async move {
            tuned_server()
                .add_service(svc)
                .add_service(bulk_svc)
                .serve_with_incoming_shutdown(incoming, async {
                    let _ = stop_rx.await;
                })
                .await
                .map_err(|e| EmulatorError::Server(e.to_string()))
        });

        let mut stats_addr = None;
        let mut stats_stop = None;
        let mut stats_task = None;
        if let Some(addr) = config.stats_addr {
            let l = TcpListener::bind(addr)
                .await
                .map_err(|source| EmulatorError::Bind { addr, source })?;
            stats_addr = Some(
                l.local_addr()
                    .map_err(|source| EmulatorError::Bind { addr, source })?,
            );
            let (tx, rx) = oneshot::channel::<()>();
            stats_stop = Some(tx);
            let app = stats::router(emu.clone());
            stats_task = Some(tokio::spawn(async move {
                axum::serve(l, app)
                    .with_graceful_shutdown(async {
                        let _ = rx.await;
                    })
                    .await
                    .map_err(|e| EmulatorError::Server(e.to_string()))
            }));
        }
        let mut bfrt_addr = None;
        let mut bfrt_stop = None;
        let mut bfrt_task = None;
        if let Some(addr) = config.bfrt_addr {
            let l = TcpListener::bind(addr)
                .await
                .map_err(|source| EmulatorError::Bind { addr, source })?;
            bfrt_addr = Some(
                l.local_addr()
                    .map_err(|source| EmulatorError::Bind { addr, source })?,
            );
            let (tx, rx) = oneshot::channel::<()>();
            bfrt_stop = Some(tx);
            let svc = emu.bfrt_service();
            let incoming = nodelay_incoming(l);
            bfrt_task = Some(tokio::spawn(async move {
                tuned_server()
                    .add_service(svc)
                    .serve_with_incoming_shutdown(incoming, async {
                        let _ = rx.await;
                    })
                    .await
                    .map_err(|e| EmulatorError::Server(e.to_string()))
            }));
        }
        Ok(RunningEmulator {
            emulator: emu,
            p4runtime_addr,
            stats_addr,
            bfrt_addr,
            stop: Some(stop_tx),
            stats_stop,
            bfrt_stop,
            grpc: Some(grpc),
            stats_task,
            bfrt_task,
        })
    }

    /// The tonic service (with raised message size limits), to mount in any
    /// tonic server.
    pub fn service(&self) -> P4RuntimeGrpc {
        let svc = P4RuntimeService {
            inner: self.inner.clone(),
        };
        let generated = P4RuntimeServer::new(svc.clone())
            .max_decoding_message_size(self.max_message_size)
            .max_encoding_message_size(self.max_message_size);
        P4RuntimeGrpc::new(svc, generated, self.max_message_size)
    }

    /// p4fleet's columnar `BulkWrite` service (docs/bulk.md), served next
    /// to P4Runtime.
    pub fn bulk_service(
        &self,
    ) -> p4fleet_proto::bulk::bulk_write_server::BulkWriteServer<BulkService> {
        p4fleet_proto::bulk::bulk_write_server::BulkWriteServer::new(BulkService {
            inner: self.inner.clone(),
        })
        .max_decoding_message_size(self.max_message_size)
        .max_encoding_message_size(self.max_message_size)
    }

    /// The BFRT tonic service (with raised message size limits), to mount in
    /// any tonic server.
    pub fn bfrt_service(&self) -> bfrt::BfrtGrpc {
        let svc = bfrt::BfrtService {
            inner: self.inner.clone(),
        };
        let generated = BfRuntimeServer::new(svc.clone())
            .max_decoding_message_size(self.max_message_size)
            .max_encoding_message_size(self.max_message_size);
        bfrt::BfrtGrpc::new(svc, generated, self.max_message_size)
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
        let verified = bfrt::BfrtDevice::verify(configs).map_err(EmulatorError::BfrtProgram)?;
        self.device(device_id)?
            .bfrt
            .lock()
            .expect("bfrt lock")
            .load(verified, false);
        Ok(())
    }

    /// Drift helper for BFRT: applies one update to program `p4_name` of a
    /// device behind the clients' backs (validated, no binding needed), e.g.
    /// a DELETE of one entry or a foreign INSERT.
    pub fn bfrt_apply(
        &self,
        device_id: u64,
        p4_name: &str,
        ty: p4fleet_proto::bfrt::update::Type,
        entry: p4fleet_proto::bfrt::TableEntry,
    ) -> Result<(), EmulatorError> {
        let dev = self.device(device_id)?;
        let mut bf = dev.bfrt.lock().expect("bfrt lock");
        let p = bf
            .programs
            .get_mut(p4_name)
            .ok_or_else(|| EmulatorError::BfrtProgram(format!("{p4_name} is not loaded")))?;
        let applied = p.apply_entry(ty, entry, None)?;
        if let bfrt::Applied::Delete(n) = applied {
            dev.counters
                .drift_deletes
                .fetch_add(n, std::sync::atomic::Ordering::Relaxed);
        }
        Ok(())
    }

    fn device(&self, id: u64) -> Result<&Arc<Device>, EmulatorError> {
        self.inner
            .devices
            .get(&id)
            .ok_or(EmulatorError::UnknownDevice(id))
    }

    /// Device ids served, sorted.
    pub fn device_ids(&self) -> Vec<u64> {
        let mut ids: Vec<u64> = self.inner.devices.keys().copied().collect();
        ids.sort_unstable();
        ids
    }

    /// Counters and contents of one device.
    pub fn stats(&self, device_id: u64) -> Option<DeviceStats> {
        self.inner.devices.get(&device_id).map(|d| d.stats())
    }

    /// Drift helper: deletes the entry with the key (table, match, priority)
    /// of `entry` behind the controller's back. Returns whether it existed.
    pub fn delete_entry(
        &self,
        device_id: u64,
        entry: &p4::TableEntry,
    ) -> Result<bool, EmulatorError> {
        Ok(self.device(device_id)?.delete_entry(entry)?)
    }

    /// Drift helper: deletes up to `count` arbitrary entries of `table_id`
    /// (all tables if `None`). Returns how many were deleted.
    pub fn drop_entries(
        &self,
        device_id: u64,
        table_id: Option<u32>,
        count: usize,
    ) -> Result<usize, EmulatorError> {
        Ok(self.device(device_id)?.drop_entries(table_id, count))
    }

    /// Drift helper: inserts an entry as a foreign writer would (validated,
    /// no arbitration).
    pub fn inject_entry(&self, device_id: u64, entry: p4::TableEntry) -> Result<(), EmulatorError> {
        Ok(self.device(device_id)?.inject_entry(entry)?)
    }
}

/// A started emulator; dropping it without [`RunningEmulator::shutdown`]
/// stops the servers too (their tasks see the stop channels close).
pub struct RunningEmulator {
    emulator: Emulator,
    p4runtime_addr: SocketAddr,
    stats_addr: Option<SocketAddr>,
    bfrt_addr: Option<SocketAddr>,
    stop: Option<oneshot::Sender<()>>,
    stats_stop: Option<oneshot::Sender<()>>,
    bfrt_stop: Option<oneshot::Sender<()>>,
    grpc: Option<JoinHandle<Result<(), EmulatorError>>>,
    stats_task: Option<JoinHandle<Result<(), EmulatorError>>>,
    bfrt_task: Option<JoinHandle<Result<(), EmulatorError>>>,
}

impl RunningEmulator {
    pub fn p4runtime_addr(&self) -> SocketAddr {
        self.p4runtime_addr
    }

    /// `http://127.0.0.1:PORT`, handy for tonic clients.
    pub fn p4runtime_url(&self) -> String {
        format!("http://{}", self.p4runtime_addr)
    }

    pub fn stats_addr(&self) -> Option<SocketAddr> {
        self.stats_addr
    }

    /// Where BFRT listens, when enabled.
    pub fn bfrt_addr(&self) -> Option<SocketAddr> {
        self.bfrt_addr
    }

    pub fn emulator(&self) -> &Emulator {
        &self.emulator
    }

    pub fn stats(&self, device_id: u64) -> Option<DeviceStats> {
        self.emulator.stats(device_id)
    }

    /// Stops both servers and waits for them.
    pub async fn shutdown(mut self) -> Result<(), EmulatorError> {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(s) = self.stats_stop.take() {
            let _ = s.send(());
        }
        if let Some(s) = self.bfrt_stop.take() {
            let _ = s.send(());
        }
        // Open StreamChannels would keep graceful shutdown waiting; bound it.
        let wait = async {
            if let Some(h) = self.grpc.take() {
                h.await
                    .map_err(|e| EmulatorError::Server(e.to_string()))??;
            }
            if let Some(h) = self.stats_task.take() {
                h.await
                    .map_err(|e| EmulatorError::Server(e.to_string()))??;
            }
            if let Some(h) = self.bfrt_task.take() {
                h.await
                    .map_err(|e| EmulatorError::Server(e.to_string()))??;
            }
            Ok::<(), EmulatorError>(())
        };
        match tokio::time::timeout(std::time::Duration::from_secs(1), wait).await {
            Ok(r) => r,
            Err(_) => Ok(()),
        }
    }
}

impl Drop for RunningEmulator {
    fn drop(&mut self) {
        if let Some(h) = &self.grpc {
            h.abort();
        }
        if let Some(h) = &self.stats_task {
            h.abort();
        }
        if let Some(h) = &self.bfrt_task {
            h.abort();
        }
    }
}
