//! p4fleet-client: table writes to P4 devices over P4Runtime or BFRT
//! (Tofino), batched and pipelined, with one result per update.
//!
//! [`Device::connect`] takes a plain [`Target`] (endpoint, device id,
//! protocol) and who this client is ([`Identity`]); it does no network I/O
//! until first use. A background session per device id keeps the P4Runtime
//! arbitration or the BFRT subscription open and re-opens it with backoff,
//! so a call simply waits (bounded) until the device accepts this client.
//!
//! Writes take [`WriteOp`]s that borrow entries of p4fleet's entry model
//! ([`p4fleet_model`], re-exported as [`model`]; the messages are
//! [`proto`]) and encode the requests
//! straight from them (no message per entry): [`Device::write_ops`] splits
//! them into requests of `batch_size`, keeps `max_in_flight` requests in
//! flight (updates of one entry stay in order), and reports each refused
//! update at its index. On P4Runtime targets that serve p4fleet's columnar
//! bulk write (docs/bulk.md) it is used by itself when it applies. BFRT
//! devices get the same entries, translated while encoding.
//!
//! Slots: slot `n` of a target is device id `device_id + n` (one endpoint
//! may host several devices).
//!
//! The crate knows nothing of Kubernetes; the p4fleet operator maps its
//! Switch resources onto [`Target`]s.

mod bfrt;
mod bulk;
mod channel;
mod endpoint;
mod error;
pub mod fpga;
mod observe;
mod order;
mod p4runtime;
mod pipeline;
mod raw;
mod session;
mod tls;
pub mod tuning;
mod unreachable;

use std::fmt;
use std::time::Duration;

use p4fleet_proto::p4info::P4Info;
use p4fleet_proto::p4runtime::TableEntry;

pub use bfrt::{BfrtDevice, TofinoPipeline, TofinoSha256};
pub use channel::connect_lazy;
pub use endpoint::{Found, Service, WrongEndpoint, identify};
pub use error::Error;
pub use fpga::{SlotCallError, SlotClient};
pub use observe::{UpdateCounts, WriteObserver, WriteRpc};
/// The entry model the writes borrow from (p4fleet-model).
pub use p4fleet_model as model;
pub use p4fleet_model::entries::{Atomicity, WriteOp};
/// The P4Runtime, BFRT and P4Info messages (p4fleet-proto).
pub use p4fleet_proto as proto;
pub use p4runtime::{
    EntityError, EntitySum, Malformed, Notice, P4RuntimeDevice, PushMode, RawEntities,
};
pub use tls::{TlsFailure, TlsFile, TlsMaterialError, classify as classify_tls_error, tls_failure};
pub use unreachable::{ConnectCause, ResolveError};

/// The protocol a device speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Protocol {
    /// P4Runtime (`p4.v1.P4Runtime`): bmv2, DPDK, FPGA targets, the emulator.
    P4Runtime,
    /// BFRT (`bfrt_proto.BfRuntime`): Tofino.
    Bfrt,
}

/// TLS material (PEM): the CA the device's certificate must chain to, and
/// optionally this client's certificate and key (mutual TLS; both or
/// neither). The device's certificate must name the endpoint's host.
/// Checked by [`Device::connect`] ([`TlsSettings::check`]); handshake
/// failures are [`Error::Tls`] with a [`TlsFailure`].
#[derive(Clone, Default, PartialEq, Eq)]
pub struct TlsSettings {
    pub ca_pem: Vec<u8>,
    pub cert_pem: Vec<u8>,
    pub key_pem: Vec<u8>,
}

impl fmt::Debug for TlsSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never print the key.
        f.debug_struct("TlsSettings")
            .field("ca_pem", &format_args!("{} bytes", self.ca_pem.len()))
            .field("cert_pem", &format_args!("{} bytes", self.cert_pem.len()))
            .finish_non_exhaustive()
    }
}

/// Where a device is: what identifies a connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// `host:port`.
    pub endpoint: String,
    /// Device id of slot 0.
    pub device_id: u64,
    pub protocol: Protocol,
    /// None: plaintext.
    pub tls: Option<TlsSettings>,
}

impl Target {
    /// A plaintext P4Runtime target.
    pub fn p4runtime(endpoint: impl Into<String>, device_id: u64) -> Target {
        Target {
            endpoint: endpoint.into(),
            device_id,
            protocol: Protocol::P4Runtime,
            tls: None,
        }
    }

    /// A plaintext BFRT target.
    pub fn bfrt(endpoint: impl Into<String>, device_id: u64) -> Target {
        Target {
            protocol: Protocol::Bfrt,
            ..Target::p4runtime(endpoint, device_id)
        }
    }

    /// Device id of a slot.
    pub fn device_id(&self, slot: u32) -> u64 {
        self.device_id + u64::from(slot)
    }
}

/// Who this client is to a device. P4Runtime makes the client with the
/// highest election id primary (the only one allowed to write); BFRT tells
/// clients apart by client id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Identity {
    pub election_id: u128,
    pub client_id: u32,
}

/// Why a device does not accept this client on a device id: what the
/// device said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// Another controller is primary (P4Runtime arbitration). The election
    /// id the device reported (the primary's, or the highest it has seen).
    NotPrimary {
        primary_election_id: Option<u128>,
        message: String,
    },
    /// The device does not serve this device id (NOT_FOUND).
    UnknownDevice { message: String },
    /// Any other refusal, with the device's gRPC status code (e.g. a BFRT
    /// client id in use).
    Other { code: i32, message: String },
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::NotPrimary {
                primary_election_id: Some(id),
                message,
            } => write!(
                f,
                "another controller is primary: election id (high {}, low {}) ({message})",
                id >> 64,
                *id as u64
            ),
            Refusal::NotPrimary {
                primary_election_id: None,
                message,
            } => write!(f, "not primary ({message})"),
            Refusal::UnknownDevice { message } => {
                write!(
                    f,
                    "the device does not serve this device id: NOT_FOUND ({message})"
                )
            }
            Refusal::Other { code, message } => {
                write!(f, "refused: {:?} ({message})", tonic::Code::from_i32(*code))
            }
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
    /// BFRT: hardware pipes per device, when the device says
    /// (`p4fleet_pipes` in its non-P4 bfrt.json); None otherwise.
    pub pipes: Option<u32>,
}

/// How a [`Device::write_ops`] is split and pipelined.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteOptions {
    /// Updates per request (at least 1).
    pub batch_size: usize,
    /// Requests in flight at once (at least 1).
    pub max_in_flight: usize,
    pub atomicity: Atomicity,
    /// The caller guarantees that no two ops share a key (a sync's plan
    /// holds each key once): requests then pipeline without the same-key
    /// check, which hashed every key of a write into a map (8 % of the
    /// operator's CPU in a 1,000,000-entry sync).
    pub distinct_keys: bool,
}

impl Default for WriteOptions {
    fn default() -> Self {
        WriteOptions {
            batch_size: 1000,
            max_in_flight: 4,
            atomicity: Atomicity::ContinueOnError,
            distinct_keys: false,
        }
    }
}

/// One update the device refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpdateFailure {
    /// Index of the update in the ops given to [`Device::write_ops`].
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

/// A connection to one device (all its slots).
///
/// An enum rather than a trait object, so its async methods need no boxing.
pub enum Device {
    P4Runtime(P4RuntimeDevice),
    Bfrt(BfrtDevice),
}

impl Device {
    /// A lazy connection to `target`: nothing is dialed until first use.
    /// Must be called inside a tokio runtime. Refuses TLS material that
    /// does not parse and endpoints that are not `host:port`.
    pub fn connect(target: Target, identity: Identity) -> Result<Device, Error> {
        Ok(match target.protocol {
            Protocol::P4Runtime => {
                Device::P4Runtime(P4RuntimeDevice::connect(target, identity.election_id)?)
            }
            Protocol::Bfrt => Device::Bfrt(BfrtDevice::connect(target, identity.client_id)?),
        })
    }

    /// Calls `observer` once per Write RPC this device sends from now on
    /// (see [`WriteRpc`]), e.g. to count requests and their latency.
    pub fn with_write_observer(mut self, observer: WriteObserver) -> Device {
        match &mut self {
            Device::P4Runtime(d) => d.observer = Some(observer),
            Device::Bfrt(d) => d.observer = Some(observer),
        }
        self
    }

    /// The target this connection was made for.
    pub fn target(&self) -> &Target {
        match self {
            Device::P4Runtime(d) => d.target(),
            Device::Bfrt(d) => d.target(),
        }
    }

    /// A counter that changes whenever this client's standing on any
    /// device id it keeps a stream to changes: the stream was lost (the
    /// device went away), a new stream was accepted (it came back, maybe
    /// empty), or the device refused this client. Watch it to react at once
    /// instead of at the next periodic check; `changed` fails once the
    /// `Device` is dropped.
    pub fn changes(&self) -> tokio::sync::watch::Receiver<u64> {
        match self {
            Device::P4Runtime(d) => d.sessions.epochs(),
            Device::Bfrt(d) => d.sessions.epochs(),
        }
    }

    /// Keeps the stream of `slot` (arbitration / subscription) open from
    /// now on, without waiting for it, so that [`Device::changes`] sees
    /// that device id come and go even while nothing is written.
    pub fn observe(&self, slot: u32) {
        let id = self.target().device_id(slot);
        match self {
            Device::P4Runtime(d) => d.sessions.observe(id),
            Device::Bfrt(d) => d.sessions.observe(id),
        }
    }

    /// Starts the stream of `slot` (arbitration / subscription) if needed
    /// and waits up to `timeout` for the device's verdict on this client:
    /// `Ok` when accepted (primary / subscribed), [`Error::NotPrimary`]
    /// with what the device said when refused, [`Error::Unreachable`] when
    /// no verdict came.
    pub async fn standing(&self, slot: u32, timeout: Duration) -> Result<(), Error> {
        let id = self.target().device_id(slot);
        match self {
            Device::P4Runtime(d) => d.sessions.standing(id, timeout).await,
            Device::Bfrt(d) => d.sessions.standing(id, timeout).await,
        }
    }

    /// Asks the device what it supports; also the reachability probe.
    pub async fn capabilities(&self) -> Result<Capabilities, Error> {
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
    ) -> Result<bool, Error> {
        match self {
            Device::P4Runtime(d) => d.set_pipeline(slot, p4info, device_config, cookie).await,
            Device::Bfrt(_) => Err(Error::Unsupported(
                "a P4Runtime device config on a BFRT device (use the Tofino artifacts)",
            )),
        }
    }

    /// Like [`Device::set_pipeline`], saying what the device ran before
    /// (`Loaded`, `Replaced`) and, with `reconcile`, keeping the state of
    /// unchanged tables where the target takes RECONCILE_AND_COMMIT
    /// (probed, and remembered per device id when refused); None when
    /// nothing was pushed.
    pub async fn push_pipeline(
        &self,
        slot: u32,
        p4info: &P4Info,
        device_config: Vec<u8>,
        cookie: u64,
        reconcile: bool,
    ) -> Result<Option<PushMode>, Error> {
        match self {
            Device::P4Runtime(d) => {
                d.push_pipeline(slot, p4info, device_config, cookie, reconcile)
                    .await
            }
            Device::Bfrt(_) => Err(Error::Unsupported(
                "a P4Runtime device config on a BFRT device (use the Tofino artifacts)",
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
    ) -> Result<bool, Error> {
        match self {
            Device::Bfrt(d) => d.set_pipeline(slot, p4info, pipeline).await,
            Device::P4Runtime(_) => {
                Err(Error::Unsupported("Tofino artifacts on a P4Runtime device"))
            }
        }
    }

    /// Loads Tofino artifacts on pipes `pipes` of `slot`'s BFRT device next
    /// to the programs already there (the whole device config, warm init
    /// with reconcile: the others keep their entries), and binds a client
    /// of its own to it; returns whether it was pushed.
    pub async fn set_tofino_pipes(
        &self,
        slot: u32,
        p4info: &P4Info,
        pipeline: &TofinoPipeline,
        pipes: &[u32],
    ) -> Result<bool, Error> {
        match self {
            Device::Bfrt(d) => d.set_pipes(slot, p4info, pipeline, pipes).await,
            Device::P4Runtime(_) => Err(Error::Unsupported("pipe sets on a P4Runtime device")),
        }
    }

    /// The device (own client id, bound to its program) for the program
    /// this client loaded on the pipe set of `slot`'s BFRT device that
    /// starts at `first_pipe`; None if it loaded none there (yet).
    pub fn pipe_set(&self, slot: u32, first_pipe: u32) -> Option<std::sync::Arc<Device>> {
        match self {
            Device::Bfrt(d) => d.pipe_set(slot, first_pipe),
            Device::P4Runtime(_) => None,
        }
    }

    /// Removes the programs on any of `pipes` of `slot`'s BFRT device,
    /// keeping the others and their entries; returns the removed names.
    pub async fn remove_tofino_pipes(
        &self,
        slot: u32,
        pipes: &[u32],
    ) -> Result<Vec<String>, Error> {
        match self {
            Device::Bfrt(d) => d.remove_pipes(slot, pipes).await,
            Device::P4Runtime(_) => Err(Error::Unsupported("pipe sets on a P4Runtime device")),
        }
    }

    /// The default action of table `table_id` (P4Info id) in `slot`, in
    /// P4Runtime form (BFRT: its default entry, translated).
    pub async fn read_default_action(
        &self,
        slot: u32,
        table_id: u32,
    ) -> Result<Option<p4fleet_proto::p4runtime::TableAction>, Error> {
        match self {
            Device::P4Runtime(d) => d.read_default_action(slot, table_id).await,
            Device::Bfrt(d) => d.read_default_action(slot, table_id).await,
        }
    }

    /// Sets the default action of table `table_id` in `slot` (a MODIFY of
    /// the default entry), or resets it to the program's initial default
    /// when `action` is None (P4Runtime: a MODIFY without action; BFRT: a
    /// RESET).
    pub async fn write_default_action(
        &self,
        slot: u32,
        table_id: u32,
        action: Option<&p4fleet_model::entries::ActionCall>,
    ) -> Result<(), Error> {
        match self {
            Device::P4Runtime(d) => d.write_default_action(slot, table_id, action).await,
            Device::Bfrt(d) => d.write_default_action(slot, table_id, action).await,
        }
    }

    /// Whether entries keep the `metadata` bytes a writer sets (and read
    /// them back): P4Runtime does, BFRT does not.
    pub fn stores_entry_metadata(&self) -> bool {
        matches!(self, Device::P4Runtime(_))
    }

    /// Whether `slot` of a BFRT device runs the Tofino program `p4_name`
    /// of build `sha256` on exactly `pipes` (empty: a whole-device
    /// program); what [`Device::set_tofino_pipeline`] and
    /// [`Device::set_tofino_pipes`] check before pushing.
    pub async fn runs_tofino(
        &self,
        slot: u32,
        p4_name: &str,
        sha256: &TofinoSha256,
        pipes: &[u32],
    ) -> Result<bool, Error> {
        match self {
            Device::Bfrt(d) => d.runs(slot, p4_name, sha256, pipes).await,
            Device::P4Runtime(_) => {
                Err(Error::Unsupported("Tofino artifacts on a P4Runtime device"))
            }
        }
    }

    /// The cookie of the pipeline loaded in `slot`, if any.
    pub async fn pipeline_cookie(&self, slot: u32) -> Result<Option<u64>, Error> {
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
    /// has it and the ops are of one table and update type.
    pub async fn write_ops(
        &self,
        slot: u32,
        ops: &[WriteOp<'_>],
        opts: WriteOptions,
    ) -> Result<WriteReport, Error> {
        match self {
            Device::P4Runtime(d) => d.write_ops(slot, ops, opts).await,
            Device::Bfrt(d) => d.write_ops(slot, ops, opts).await,
        }
    }

    /// Every entry of one table (`table_id` 0: every table) in `slot`, in
    /// canonical P4Runtime form (BFRT entries translated back).
    pub async fn read_table(&self, slot: u32, table_id: u32) -> Result<Vec<TableEntry>, Error> {
        let mut out = Vec::new();
        self.read_table_each(slot, table_id, &mut |t| out.push(t))
            .await?;
        Ok(out)
    }

    /// [`P4RuntimeDevice::read_table_raw`]: None over BFRT, whose entries
    /// are translated, not kept as the target sent them.
    pub async fn read_table_raw(
        &self,
        slot: u32,
        table_id: u32,
    ) -> Result<Option<RawEntities>, Error> {
        match self {
            Device::P4Runtime(d) => d.read_table_raw(slot, table_id).await.map(Some),
            Device::Bfrt(_) => Ok(None),
        }
    }

    /// [`Device::read_table`], each entry handed to `f` as the device's
    /// answers arrive, so a caller that converts them never holds a large
    /// table twice (a resync of 1,000,000 entries peaked at 463 B of heap per
    /// entry instead of 1,224; docs/dev/fleet-lab-notes.md).
    pub async fn read_table_each(
        &self,
        slot: u32,
        table_id: u32,
        f: &mut (dyn FnMut(TableEntry) + Send),
    ) -> Result<(), Error> {
        match self {
            Device::P4Runtime(d) => d.read_table_each(slot, table_id, f).await,
            Device::Bfrt(d) => d.read_table_each(slot, table_id, f).await,
        }
    }
}

/// Drains a server-streaming call (a Read) into `f`, one response at a
/// time as it arrives; a failed call or message is `rpc_error`'s error,
/// and the first error `f` returns ends it.
pub(crate) async fn for_each_response<T>(
    call: Result<tonic::Response<tonic::Streaming<T>>, tonic::Status>,
    rpc_error: impl Fn(tonic::Status) -> Error,
    mut f: impl FnMut(T) -> Result<(), Error>,
) -> Result<(), Error> {
    let mut stream = call.map_err(&rpc_error)?.into_inner();
    while let Some(resp) = stream.message().await.map_err(&rpc_error)? {
        f(resp)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A loopback port nothing listens on (bound, then closed).
    fn closed_port() -> u16 {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    }

    #[tokio::test]
    async fn unreachable_devices_say_why_by_cause() {
        let id = Identity {
            election_id: 1,
            client_id: 1,
        };
        let refused = format!("127.0.0.1:{}", closed_port());
        // .invalid never resolves (RFC 6761).
        let cases = [
            (refused.as_str(), ConnectCause::Refused),
            ("nonexistent.invalid:9559", ConnectCause::Dns),
        ];
        let protocols = [Protocol::P4Runtime, Protocol::Bfrt];
        let all = protocols
            .iter()
            .flat_map(|&p| cases.iter().map(move |&c| (p, c)));
        // In parallel: a stream's wait lasts its whole timeout.
        let checks = all.map(|(protocol, (endpoint, want))| async move {
            let t = Target {
                protocol,
                ..Target::p4runtime(endpoint, 1)
            };
            let d = Device::connect(t, id).unwrap();
            // A unary call, and the arbitration / subscription stream.
            let unary = d.capabilities().await;
            let stream = d.standing(0, Duration::from_secs(3)).await;
            for e in [unary.err(), stream.err()] {
                match e {
                    Some(Error::Unreachable { cause, .. }) => {
                        assert_eq!(cause, want, "{protocol:?} {endpoint}")
                    }
                    other => panic!("{protocol:?} {endpoint}: {other:?}"),
                }
            }
        });
        futures::future::join_all(checks).await;
    }

    #[tokio::test]
    async fn bad_tls_material_and_bad_endpoints_are_refused_before_any_io() {
        let id = Identity {
            election_id: 1,
            client_id: 1,
        };
        for protocol in [Protocol::P4Runtime, Protocol::Bfrt] {
            let mut t = Target {
                protocol,
                ..Target::p4runtime("127.0.0.1:9559", 1)
            };
            let d = Device::connect(t.clone(), id).unwrap();
            assert_eq!(d.target(), &t);
            assert_eq!(d.stores_entry_metadata(), protocol == Protocol::P4Runtime);
            t.tls = Some(TlsSettings::default());
            assert!(matches!(
                Device::connect(t.clone(), id),
                Err(Error::TlsMaterial(TlsMaterialError {
                    file: TlsFile::Ca,
                    ..
                }))
            ));
            t.tls = None;
            t.endpoint = "not an endpoint".into();
            assert!(matches!(
                Device::connect(t, id),
                Err(Error::InvalidEndpoint { .. })
            ));
        }
        assert_eq!(Target::bfrt("h:1", 4).device_id(2), 6);
    }

    #[test]
    fn tls_keys_are_not_printed() {
        let tls = TlsSettings {
            key_pem: b"SECRET".to_vec(),
            ..Default::default()
        };
        assert!(!format!("{tls:?}").contains("SECRET"));
    }
}
