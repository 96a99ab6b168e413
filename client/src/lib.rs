//! Device drivers: one long-lived connection per Switch, shared by all
//! reconcilers.
//!
//! [`DriverPool::connect`] hands out an `Arc<Device>` per Switch name and
//! reuses it while the Switch's endpoint, protocol and device id stay the
//! same. Connections are lazy: the gRPC channel reconnects by itself, and a
//! background task per device id keeps the arbitration stream open
//! (re-arbitrating with backoff after a disconnect), so a write simply waits
//! until this client is primary again.
//!
//! [`Device`] is an enum rather than a trait object so a BFRT variant can be
//! added next to P4Runtime without boxing futures.
//!
//! Slots: on a P4Runtime Switch, slot `n` is device id `spec.deviceId + n`
//! (the emulator hosts several devices per process, so one endpoint can host
//! several VirtualSwitches).

pub mod bfrt;
pub mod bulk;
mod channel;
mod order;
pub mod p4runtime;
mod pipeline;
mod raw;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use p4fleet_crds::entry_set::Atomicity;
use p4fleet_crds::switch::{Switch, SwitchProtocol};
use p4fleet_proto::p4info::P4Info;
use p4fleet_proto::p4runtime::{TableEntry, Update, update};

pub use bfrt::{BfrtDevice, TofinoPipeline};
pub use p4fleet_model::entries::WriteOp;
pub use p4runtime::P4RuntimeDevice;

/// Errors at the driver boundary.
#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    #[error("invalid endpoint {endpoint:?}: {reason}")]
    InvalidEndpoint { endpoint: String, reason: String },
    #[error("{0} is not supported yet")]
    Unsupported(String),
    #[error("device {device_id} at {endpoint} is unreachable: {reason}")]
    Unreachable {
        endpoint: String,
        device_id: u64,
        reason: String,
    },
    #[error("not primary for device {device_id}: {reason}")]
    NotPrimary { device_id: u64, reason: String },
    #[error("{rpc} on device {device_id} failed: {status}")]
    Rpc {
        rpc: &'static str,
        device_id: u64,
        status: Box<tonic::Status>,
    },
    #[error("device {device_id} sent an invalid answer: {reason}")]
    Protocol { device_id: u64, reason: String },
}

impl DriverError {
    /// Whether retrying later may help (connection or arbitration trouble),
    /// as opposed to a request the device will always refuse.
    pub fn is_transient(&self) -> bool {
        match self {
            DriverError::Unreachable { .. } | DriverError::NotPrimary { .. } => true,
            DriverError::Rpc { status, .. } => matches!(
                status.code(),
                tonic::Code::Unavailable
                    | tonic::Code::DeadlineExceeded
                    | tonic::Code::PermissionDenied
                    | tonic::Code::Unknown
                    | tonic::Code::Aborted
                    | tonic::Code::ResourceExhausted
            ),
            _ => false,
        }
    }
}

/// What a device reports about itself.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Capabilities {
    /// Protocol name, e.g. `P4Runtime`.
    pub protocol: &'static str,
    /// API version the device reported, e.g. `1.4.0`.
    pub api_version: String,
    /// The device serves p4fleet's columnar bulk write (docs/bulk.md).
    pub bulk_write: bool,
}

/// How a [`Device::write_ops`] is split and pipelined.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteOptions {
    /// Updates per request (at least 1).
    pub batch_size: usize,
    /// Requests in flight at once (at least 1).
    pub max_in_flight: usize,
    pub atomicity: Atomicity,
}

impl Default for WriteOptions {
    fn default() -> Self {
        WriteOptions {
            batch_size: 1000,
            max_in_flight: 4,
            atomicity: Atomicity::ContinueOnError,
        }
    }
}

impl From<&p4fleet_crds::entry_set::WriteOptions> for WriteOptions {
    fn from(w: &p4fleet_crds::entry_set::WriteOptions) -> Self {
        WriteOptions {
            batch_size: w.batch_size.max(1) as usize,
            max_in_flight: w.max_in_flight.max(1) as usize,
            atomicity: w.atomicity,
        }
    }
}

/// One update the device refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpdateFailure {
    /// Index of the update in the ops (or `updates`) given to
    /// [`Device::write_ops`] ([`Device::write`]).
    pub index: usize,
    /// gRPC canonical code (`tonic::Code` as i32).
    pub code: i32,
    pub message: String,
}

impl UpdateFailure {
    pub fn code(&self) -> tonic::Code {
        tonic::Code::from_i32(self.code)
    }
}

/// Outcome of a [`Device::write_ops`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WriteReport {
    /// Updates sent.
    pub updates: usize,
    /// Write requests sent.
    pub requests: usize,
    /// Updates refused, sorted by index.
    pub failures: Vec<UpdateFailure>,
    /// Requests that failed as a whole (no per-update details), e.g.
    /// UNAVAILABLE; their updates are also in `failures`.
    pub failed_requests: usize,
    /// Wall time of the whole write.
    pub elapsed: Duration,
    /// Sum of the per-request latencies (for the mean).
    pub total_request_latency: Duration,
}

impl WriteReport {
    /// Updates the device accepted.
    pub fn succeeded(&self) -> usize {
        self.updates - self.failures.len()
    }

    /// Mean latency of one Write request.
    pub fn mean_request_latency(&self) -> Duration {
        if self.requests == 0 {
            Duration::ZERO
        } else {
            self.total_request_latency / self.requests as u32
        }
    }

    /// Accepted updates per second of wall time.
    pub fn updates_per_second(&self) -> f64 {
        let s = self.elapsed.as_secs_f64();
        if s <= 0.0 {
            0.0
        } else {
            self.succeeded() as f64 / s
        }
    }
}

/// A connection to one Switch.
pub enum Device {
    P4Runtime(P4RuntimeDevice),
    Bfrt(BfrtDevice),
}

impl Device {
    /// The Switch name this device was connected for.
    pub fn name(&self) -> &str {
        match self {
            Device::P4Runtime(d) => d.name(),
            Device::Bfrt(d) => d.name(),
        }
    }

    /// Asks the device what it supports; also the reachability probe.
    pub async fn capabilities(&self) -> Result<Capabilities, DriverError> {
        match self {
            Device::P4Runtime(d) => d.capabilities().await,
            Device::Bfrt(d) => d.capabilities().await,
        }
    }

    /// Loads a pipeline into `slot` unless the device already reports
    /// `cookie`; returns whether it was pushed. BFRT devices need their
    /// Tofino artifacts: see [`Device::set_tofino_pipeline`].
    pub async fn set_pipeline(
        &self,
        slot: u32,
        p4info: &P4Info,
        device_config: Vec<u8>,
        cookie: u64,
    ) -> Result<bool, DriverError> {
        match self {
            Device::P4Runtime(d) => d.set_pipeline(slot, p4info, device_config, cookie).await,
            Device::Bfrt(_) => Err(DriverError::Unsupported(
                "a P4Runtime device config on a BFRT switch (use the Tofino artifacts)".into(),
            )),
        }
    }

    /// Loads Tofino artifacts into `slot` of a BFRT device unless it already
    /// runs them (and binds); returns whether it was pushed.
    pub async fn set_tofino_pipeline(
        &self,
        slot: u32,
        p4info: &P4Info,
        pipeline: &TofinoPipeline,
    ) -> Result<bool, DriverError> {
        match self {
            Device::Bfrt(d) => d.set_pipeline(slot, p4info, pipeline).await,
            Device::P4Runtime(_) => Err(DriverError::Unsupported(
                "Tofino artifacts on a P4Runtime switch".into(),
            )),
        }
    }

    /// Whether entries keep the `metadata` bytes p4fleet writes (and read
    /// them back): TableEntrySet ownership relies on it where available.
    pub fn stores_entry_metadata(&self) -> bool {
        matches!(self, Device::P4Runtime(_))
    }

    /// The cookie of the pipeline loaded in `slot`, if any.
    pub async fn pipeline_cookie(&self, slot: u32) -> Result<Option<u64>, DriverError> {
        match self {
            Device::P4Runtime(d) => d.pipeline_cookie(slot).await,
            // BFRT has no cookie; set_tofino_pipeline compares artifacts.
            Device::Bfrt(_) => Ok(None),
        }
    }

    /// Writes `ops` to `slot` in batches, pipelined; per-update results
    /// (`UpdateFailure::index` is the op's index). Errors only when nothing
    /// could be attempted (not primary, unreachable before the first
    /// request); partial failures are in the report. The requests are
    /// encoded straight from the borrowed entries (no prost message per
    /// entry); on P4Runtime, p4fleet's bulk write is used when the target
    /// has it and the ops are of one table and update type. This is the
    /// operator's write path.
    pub async fn write_ops(
        &self,
        slot: u32,
        ops: &[WriteOp<'_>],
        opts: WriteOptions,
    ) -> Result<WriteReport, DriverError> {
        match self {
            Device::P4Runtime(d) => d.write_ops(slot, ops, opts).await,
            Device::Bfrt(d) => d.write_ops(slot, ops, opts).await,
        }
    }

    /// [`Device::write_ops`] for entries written with one update type
    /// (DELETE sends only their keys).
    pub async fn write_entries(
        &self,
        slot: u32,
        ty: update::Type,
        entries: &[p4fleet_model::entries::Entry],
        opts: WriteOptions,
    ) -> Result<WriteReport, DriverError> {
        let ops: Vec<WriteOp> = entries.iter().map(|e| WriteOp::new(ty, e)).collect();
        self.write_ops(slot, &ops, opts).await
    }

    /// Writes prost `updates` (anything P4Runtime can express, e.g. default
    /// entries) in batches, pipelined; per-update results as
    /// [`Device::write_ops`], which is the faster path for table entries.
    pub async fn write(
        &self,
        slot: u32,
        updates: Vec<Update>,
        opts: WriteOptions,
    ) -> Result<WriteReport, DriverError> {
        match self {
            Device::P4Runtime(d) => d.write(slot, updates, opts).await,
            Device::Bfrt(d) => d.write(slot, updates, opts).await,
        }
    }

    /// Every entry of one table (`table_id` 0: every table) in `slot`.
    pub async fn read_table(
        &self,
        slot: u32,
        table_id: u32,
    ) -> Result<Vec<TableEntry>, DriverError> {
        match self {
            Device::P4Runtime(d) => d.read_table(slot, table_id).await,
            Device::Bfrt(d) => d.read_table(slot, table_id).await,
        }
    }

    /// Whether this connection was made for the same endpoint and identity.
    fn same_target(&self, t: &Target) -> bool {
        match self {
            Device::P4Runtime(d) => d.target() == t,
            Device::Bfrt(d) => {
                t.protocol == SwitchProtocol::Bfrt
                    && d.endpoint() == t.endpoint
                    && d.device_id(0) == t.device_id
            }
        }
    }
}

/// What identifies a connection: a change means a new one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Target {
    pub endpoint: String,
    pub device_id: u64,
    pub protocol: SwitchProtocol,
}

/// Connections to devices, keyed by Switch name.
pub struct DriverPool {
    devices: Mutex<HashMap<String, Arc<Device>>>,
    election_low: u64,
}

impl Default for DriverPool {
    fn default() -> Self {
        DriverPool::new()
    }
}

impl DriverPool {
    /// A pool whose connections claim primary with election id
    /// `(0, unix seconds of start)`: a newer operator replica (after a
    /// leader change) outranks the old one.
    pub fn new() -> Self {
        let secs = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(1);
        DriverPool::with_election_id(secs.max(1))
    }

    /// A pool with an explicit election id low word (tests, tools).
    pub fn with_election_id(low: u64) -> Self {
        DriverPool {
            devices: Mutex::new(HashMap::new()),
            election_low: low,
        }
    }

    /// The device for this Switch, connecting (lazily) on first use or when
    /// its endpoint, protocol or device id changed. Does no network I/O;
    /// call [`Device::capabilities`] to probe reachability.
    pub fn connect(&self, sw: &Switch) -> Result<Arc<Device>, DriverError> {
        let name = sw.metadata.name.clone().unwrap_or_default();
        let target = Target {
            endpoint: sw.spec.endpoint.clone(),
            device_id: sw.spec.device_id,
            protocol: sw.spec.effective_protocol(),
        };
        let mut devices = self.devices.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(d) = devices.get(&name)
            && d.same_target(&target)
        {
            return Ok(d.clone());
        }
        if sw.spec.tls_secret_ref.is_some() {
            return Err(DriverError::Unsupported("TLS to switches".into()));
        }
        let dev = match target.protocol {
            SwitchProtocol::P4Runtime => Device::P4Runtime(P4RuntimeDevice::new(
                name.clone(),
                target,
                self.election_low,
            )?),
            // BFRT client ids are small integers; keep the low bits of the
            // election id so a newer operator still differs from an old one.
            SwitchProtocol::Bfrt => Device::Bfrt(BfrtDevice::new(
                name.clone(),
                target.endpoint.clone(),
                target.device_id,
                (self.election_low & 0xffff) as u32,
            )?),
        };
        let dev = Arc::new(dev);
        devices.insert(name, dev.clone());
        Ok(dev)
    }

    /// The existing device of a Switch, if connected.
    pub fn get(&self, name: &str) -> Option<Arc<Device>> {
        let devices = self.devices.lock().unwrap_or_else(|e| e.into_inner());
        devices.get(name).cloned()
    }

    /// Drops the connection of a Switch (deleted or changed). Background
    /// tasks end once the last `Arc<Device>` is gone.
    pub fn forget(&self, name: &str) {
        let mut devices = self.devices.lock().unwrap_or_else(|e| e.into_inner());
        devices.remove(name);
    }
}
