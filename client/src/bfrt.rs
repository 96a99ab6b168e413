//! BFRT driver for Tofino Switches: one tonic channel per Switch, one
//! StreamChannel per device id (slot) that Subscribes this client and is
//! re-opened with backoff, BIND to the program, batched and pipelined
//! writes with per-update results decoded from `grpc-status-details-bin`.
//!
//! The rest of p4fleet speaks canonical P4Runtime entries; this driver
//! translates them with [`p4fleet_model::entries::bfrt::BfrtProgramMap`] (built in
//! [`BfrtDevice::set_pipeline`] from the P4Info and the bfrt.json), so
//! [`BfrtDevice::write_ops`], [`BfrtDevice::write`] and
//! [`BfrtDevice::read_table`] have the same shapes as the P4Runtime
//! device's. `write_ops` translates while encoding (no messages built).
//!
//! BFRT has no pipeline cookie: a program is pushed unless the device
//! already reports one of the same name with the same bfrt.json (by
//! SHA-256). BFRT has no entry metadata either: reads return none.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use p4fleet_crds::entry_set::Atomicity;
use p4fleet_proto::bfrt::{
    self, ForwardingPipelineConfig, GetForwardingPipelineConfigRequest, ReadRequest,
    SetForwardingPipelineConfigRequest, StreamMessageRequest, TargetDevice, WriteRequest,
    bf_runtime_client::BfRuntimeClient, forwarding_pipeline_config::Profile,
    set_forwarding_pipeline_config_request::Action as SetAction, stream_message_request,
    stream_message_response, write_request,
};
use p4fleet_proto::p4info::P4Info;
use p4fleet_proto::p4runtime::{TableEntry, Update};
use prost::Message;
use sha2::{Digest, Sha256};
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Channel;

use super::channel::{self, BACKOFF_MAX, BACKOFF_MIN, MAX_MESSAGE};
use super::order::OrderKey;
use super::pipeline::{self, UpdateErrors};
use super::raw::{self, BFRT_WRITE};
use super::{Capabilities, DriverError, UpdateFailure, WriteOptions, WriteReport};
use p4fleet_model::entries::EntryError;
use p4fleet_model::entries::bfrt::{BfrtInfo, BfrtProgramMap, BfrtWriteHeader, bfrt_write_request};
use p4fleet_model::entries::{TableSchema, WriteOp};

const SUBSCRIBE_WAIT: Duration = Duration::from_secs(10);

/// A P4Program's Tofino artifacts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TofinoPipeline {
    /// Program name clients BIND to.
    pub p4_name: String,
    pub bfrt_json: Vec<u8>,
    pub context_json: Vec<u8>,
    /// tofino.bin.
    pub binary: Vec<u8>,
}

/// Subscription state of one device id; `Subscribed(n)` counts
/// (re)subscriptions so a new stream is bound again.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Sub {
    Connecting(String),
    Subscribed(u64),
    Refused(String),
}

/// The program of one device id, as this driver last set or found it.
struct Loaded {
    p4_name: String,
    /// Shared with running writes (no copy per write).
    map: Arc<BfrtProgramMap>,
    /// Subscription generation the BIND was made on.
    bound_on: Option<u64>,
}

/// A BFRT connection to one Switch.
pub struct BfrtDevice {
    name: String,
    endpoint: String,
    base_device_id: u64,
    client_id: u32,
    client: BfRuntimeClient<Channel>,
    /// Writes encoded by [`p4fleet_model::entries::bfrt::bfrt_write_request`].
    raw: tonic::client::Grpc<Channel>,
    sessions: channel::Sessions<Sub>,
    loaded: Mutex<HashMap<u64, Arc<Mutex<Loaded>>>>,
}

impl BfrtDevice {
    /// A lazy connection (must be called inside a tokio runtime). Slot `n`
    /// is device id `device_id + n`.
    pub fn new(
        name: String,
        endpoint: String,
        device_id: u64,
        client_id: u32,
    ) -> Result<Self, DriverError> {
        let channel = channel::connect_lazy(&endpoint)?;
        let raw = tonic::client::Grpc::new(channel.clone())
            .max_decoding_message_size(MAX_MESSAGE)
            .max_encoding_message_size(MAX_MESSAGE);
        let client = BfRuntimeClient::new(channel)
            .max_decoding_message_size(MAX_MESSAGE)
            .max_encoding_message_size(MAX_MESSAGE);
        Ok(BfrtDevice {
            name,
            endpoint,
            base_device_id: device_id,
            client_id,
            client,
            raw,
            sessions: channel::Sessions::new(),
            loaded: Mutex::new(HashMap::new()),
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// Device id of a slot.
    pub fn device_id(&self, slot: u32) -> u64 {
        self.base_device_id + u64::from(slot)
    }

    fn rpc_error(&self, rpc: &'static str, device_id: u64, status: tonic::Status) -> DriverError {
        if status.code() == tonic::Code::Unavailable {
            DriverError::Unreachable {
                endpoint: self.endpoint.clone(),
                device_id,
                reason: status.message().to_string(),
            }
        } else {
            DriverError::Rpc {
                rpc,
                device_id,
                status: Box::new(status),
            }
        }
    }

    fn target(device_id: u64) -> TargetDevice {
        TargetDevice {
            device_id: device_id as u32,
            pipe_id: 0xffff,
            direction: 0xff,
            prsr_id: 0xff,
        }
    }

    async fn get_config(
        &self,
        device_id: u64,
    ) -> Result<bfrt::GetForwardingPipelineConfigResponse, DriverError> {
        self.client
            .clone()
            .get_forwarding_pipeline_config(GetForwardingPipelineConfigRequest {
                device_id: device_id as u32,
                client_id: self.client_id,
            })
            .await
            .map(|r| r.into_inner())
            .map_err(|s| self.rpc_error("GetForwardingPipelineConfig", device_id, s))
    }

    /// Reachability probe: the programs the device reports.
    pub async fn capabilities(&self) -> Result<Capabilities, DriverError> {
        let cfg = self.get_config(self.base_device_id).await?;
        let names: Vec<&str> = cfg.config.iter().map(|c| c.p4_name.as_str()).collect();
        Ok(Capabilities {
            protocol: "BFRT",
            bulk_write: false,
            api_version: format!("bfrt_proto; programs [{}]", names.join(",")),
        })
    }

    /// Starts (once) the subscription stream of `device_id` and waits until
    /// it is subscribed; returns its generation.
    async fn wait_subscribed(&self, device_id: u64) -> Result<u64, DriverError> {
        let mut rx = self
            .sessions
            .watch(device_id, Sub::Connecting("starting".into()), |tx| {
                subscribe(self.client.clone(), device_id, self.client_id, tx)
            });
        let _ = tokio::time::timeout(
            SUBSCRIBE_WAIT,
            rx.wait_for(|s| !matches!(s, Sub::Connecting(_))),
        )
        .await;
        let state = rx.borrow().clone();
        match state {
            Sub::Subscribed(n) => Ok(n),
            Sub::Connecting(reason) => Err(DriverError::Unreachable {
                endpoint: self.endpoint.clone(),
                device_id,
                reason,
            }),
            Sub::Refused(reason) => Err(DriverError::NotPrimary { device_id, reason }),
        }
    }

    /// Pushes the program to `slot` unless the device already runs one of
    /// the same name and bfrt.json; learns the table translation either way.
    /// Returns whether it was pushed. Then binds.
    pub async fn set_pipeline(
        &self,
        slot: u32,
        p4info: &P4Info,
        pipeline: &TofinoPipeline,
    ) -> Result<bool, DriverError> {
        let device_id = self.device_id(slot);
        let protocol = |reason: String| DriverError::Protocol { device_id, reason };
        let tables = TableSchema::all_from_p4info(p4info).map_err(|e| protocol(e.to_string()))?;
        let info = BfrtInfo::parse(&pipeline.bfrt_json).map_err(|e| protocol(e.to_string()))?;
        let map = BfrtProgramMap::new(&tables, &info).map_err(|e| protocol(e.to_string()))?;
        let want = Sha256::digest(&pipeline.bfrt_json);
        let current = self.get_config(device_id).await?;
        let loaded = current
            .config
            .iter()
            .any(|c| c.p4_name == pipeline.p4_name && Sha256::digest(&c.bfruntime_info) == want);
        if !loaded {
            let req = SetForwardingPipelineConfigRequest {
                device_id: device_id as u32,
                client_id: self.client_id,
                action: SetAction::VerifyAndWarmInitBeginAndEnd as i32,
                config: vec![ForwardingPipelineConfig {
                    p4_name: pipeline.p4_name.clone(),
                    bfruntime_info: pipeline.bfrt_json.clone(),
                    profiles: vec![Profile {
                        profile_name: "pipe".into(),
                        context: pipeline.context_json.clone(),
                        binary: pipeline.binary.clone(),
                        pipe_scope: vec![0, 1, 2, 3],
                    }],
                }],
                ..Default::default()
            };
            self.client
                .clone()
                .set_forwarding_pipeline_config(req)
                .await
                .map_err(|s| self.rpc_error("SetForwardingPipelineConfig", device_id, s))?;
        }
        self.loaded
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(
                device_id,
                Arc::new(Mutex::new(Loaded {
                    p4_name: pipeline.p4_name.clone(),
                    map: Arc::new(map),
                    bound_on: None,
                })),
            );
        self.bind(slot).await?;
        Ok(!loaded)
    }

    /// The program set for `slot`, bound on the current subscription.
    async fn bound(&self, device_id: u64) -> Result<(String, Arc<BfrtProgramMap>), DriverError> {
        let loaded = self
            .loaded
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&device_id)
            .cloned()
            .ok_or_else(|| DriverError::Protocol {
                device_id,
                reason: "no program set for this slot (set_pipeline first)".into(),
            })?;
        let generation = self.wait_subscribed(device_id).await?;
        let (name, map, bound_on) = {
            let l = loaded.lock().unwrap_or_else(|e| e.into_inner());
            (l.p4_name.clone(), l.map.clone(), l.bound_on)
        };
        if bound_on != Some(generation) {
            let req = SetForwardingPipelineConfigRequest {
                device_id: device_id as u32,
                client_id: self.client_id,
                action: SetAction::Bind as i32,
                config: vec![ForwardingPipelineConfig {
                    p4_name: name.clone(),
                    ..Default::default()
                }],
                ..Default::default()
            };
            self.client
                .clone()
                .set_forwarding_pipeline_config(req)
                .await
                .map_err(|s| self.rpc_error("SetForwardingPipelineConfig(BIND)", device_id, s))?;
            loaded.lock().unwrap_or_else(|e| e.into_inner()).bound_on = Some(generation);
        }
        Ok((name, map))
    }

    /// Subscribes (if needed) and BINDs this client to the program of `slot`.
    pub async fn bind(&self, slot: u32) -> Result<(), DriverError> {
        self.bound(self.device_id(slot)).await.map(|_| ())
    }

    /// Writes P4Runtime `updates` to `slot` as BFRT updates (translated with
    /// [`BfrtProgramMap::update_to_bfrt`]); see [`Self::write_rows`].
    pub async fn write(
        &self,
        slot: u32,
        updates: Vec<Update>,
        opts: WriteOptions,
    ) -> Result<WriteReport, DriverError> {
        self.write_rows(
            slot,
            updates.len(),
            opts,
            |map| updates.iter().map(|u| map.update_to_bfrt(u)).collect(),
            |_, h, batch| {
                Ok(WriteRequest {
                    target: Some(h.target),
                    client_id: h.client_id,
                    updates: batch,
                    atomicity: h.atomicity,
                    p4_name: h.p4_name.to_string(),
                }
                .encode_to_vec())
            },
        )
        .await
    }

    /// Writes `ops` to `slot` as BFRT Write requests encoded straight from
    /// the entries (the translation of [`BfrtProgramMap::update_to_bfrt`]
    /// without building messages); see [`Self::write_rows`].
    pub async fn write_ops<'o>(
        &self,
        slot: u32,
        ops: &[WriteOp<'o>],
        opts: WriteOptions,
    ) -> Result<WriteReport, DriverError> {
        self.write_rows(
            slot,
            ops.len(),
            opts,
            |map| ops.iter().map(|op| map.check(*op)).collect(),
            |map, h, batch| bfrt_write_request(map, h, &batch),
        )
        .await
    }

    /// The one write path: every row translated for BFRT first (`check`;
    /// a row BFRT cannot express fails on its own), then the sendable ones
    /// in requests of `batch_size`, each encoded by `encode` when the
    /// pipeline pulls it and sent pre-encoded, up to `max_in_flight` at
    /// once. Per-update results at the caller's indexes.
    async fn write_rows<U: OrderKey>(
        &self,
        slot: u32,
        n: usize,
        opts: WriteOptions,
        check: impl FnOnce(&BfrtProgramMap) -> Vec<Result<U, EntryError>>,
        encode: impl Fn(&BfrtProgramMap, &BfrtWriteHeader, Vec<U>) -> Result<Vec<u8>, EntryError>,
    ) -> Result<WriteReport, DriverError> {
        let device_id = self.device_id(slot);
        let mut report = WriteReport {
            updates: n,
            ..Default::default()
        };
        if n == 0 {
            return Ok(report);
        }
        let (p4_name, map) = self.bound(device_id).await?;
        let mut sendable: Vec<(usize, U)> = Vec::with_capacity(n);
        for (i, r) in check(&map).into_iter().enumerate() {
            match r {
                Ok(u) => sendable.push((i, u)),
                Err(e) => report.failures.push(UpdateFailure {
                    index: i,
                    code: tonic::Code::InvalidArgument as i32,
                    message: e.to_string(),
                }),
            }
        }
        let header = BfrtWriteHeader {
            target: Self::target(device_id),
            client_id: self.client_id,
            atomicity: atomicity(opts.atomicity),
            p4_name: &p4_name,
        };
        let (grpc, map, header, encode) = (&self.raw, &*map, &header, &encode);
        let send = |batch: Vec<U>| {
            let body = encode(map, header, batch);
            let mut grpc = grpc.clone();
            async move {
                // Cannot fail: the rows were checked against this same map.
                let body = body.map_err(|e| tonic::Status::invalid_argument(e.to_string()))?;
                raw::unary::<bfrt::WriteResponse>(&mut grpc, BFRT_WRITE, body.into())
                    .await
                    .map(drop)
            }
        };
        pipeline::write_pipelined(sendable, opts, &mut report, send, decode_update_errors).await;
        Ok(report)
    }

    /// Every entry of one table (P4Info `table_id`; 0: every table of the
    /// program) in `slot`, in canonical P4Runtime form.
    pub async fn read_table(
        &self,
        slot: u32,
        table_id: u32,
    ) -> Result<Vec<TableEntry>, DriverError> {
        let device_id = self.device_id(slot);
        let (p4_name, map) = self.bound(device_id).await?;
        let ids: Vec<u32> = if table_id == 0 {
            map.tables().map(|t| t.bfrt_table_id).collect()
        } else {
            vec![
                map.table(table_id)
                    .ok_or_else(|| DriverError::Protocol {
                        device_id,
                        reason: format!("table id {table_id} is not in the bfrt.json"),
                    })?
                    .bfrt_table_id,
            ]
        };
        let req = ReadRequest {
            target: Some(Self::target(device_id)),
            client_id: self.client_id,
            entities: ids
                .into_iter()
                .map(|id| bfrt::Entity {
                    entity: Some(bfrt::entity::Entity::TableEntry(bfrt::TableEntry {
                        table_id: id,
                        ..Default::default()
                    })),
                })
                .collect(),
            p4_name,
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
            for e in resp.entities {
                let Some(bfrt::entity::Entity::TableEntry(t)) = e.entity else {
                    continue;
                };
                let tm = map
                    .table_by_bfrt_id(t.table_id)
                    .ok_or_else(|| DriverError::Protocol {
                        device_id,
                        reason: format!("read returned unknown table {}", t.table_id),
                    })?;
                out.push(tm.from_bfrt(&t).map_err(|e| DriverError::Protocol {
                    device_id,
                    reason: e.to_string(),
                })?);
            }
        }
        Ok(out)
    }
}

fn atomicity(a: Atomicity) -> i32 {
    (match a {
        Atomicity::ContinueOnError => write_request::Atomicity::ContinueOnError,
        Atomicity::RollbackOnError => write_request::Atomicity::RollbackOnError,
        Atomicity::DataplaneAtomic => write_request::Atomicity::DataplaneAtomic,
    }) as i32
}

/// Per-update errors of a failed BFRT Write (`bfrt_proto.Error` details).
pub fn decode_update_errors(status: &tonic::Status, n: usize) -> Option<UpdateErrors> {
    pipeline::decode_update_errors::<bfrt::Error>(status, n)
}

/// Keeps the StreamChannel of one device id open and subscribed,
/// re-subscribing with backoff after a disconnect. Ends when every receiver
/// is gone.
async fn subscribe(
    client: BfRuntimeClient<Channel>,
    device_id: u64,
    client_id: u32,
    state: watch::Sender<Sub>,
) {
    let mut backoff = BACKOFF_MIN;
    let mut generation = 0u64;
    loop {
        let (tx, rx) = mpsc::channel(4);
        let hello = StreamMessageRequest {
            client_id,
            update: Some(stream_message_request::Update::Subscribe(bfrt::Subscribe {
                device_id: device_id as u32,
                notifications: Some(bfrt::subscribe::Notifications::default()),
                ..Default::default()
            })),
        };
        let _ = tx.send(hello).await;
        let reason = match client.clone().stream_channel(ReceiverStream::new(rx)).await {
            Err(s) => format!("{:?}: {}", s.code(), s.message()),
            Ok(resp) => {
                let mut stream = resp.into_inner();
                loop {
                    match stream.message().await {
                        Ok(Some(m)) => {
                            if let Some(stream_message_response::Update::Subscribe(s)) = m.update {
                                match s.status {
                                    Some(st) if st.code != 0 => {
                                        state.send_replace(Sub::Refused(st.message));
                                    }
                                    _ => {
                                        generation += 1;
                                        backoff = BACKOFF_MIN;
                                        state.send_replace(Sub::Subscribed(generation));
                                    }
                                }
                            }
                        }
                        Ok(None) => break "stream closed".to_string(),
                        Err(s) => break format!("{:?}: {}", s.code(), s.message()),
                    }
                }
            }
        };
        drop(tx);
        state.send_replace(Sub::Connecting(reason.clone()));
        if state.is_closed() {
            return;
        }
        tracing::debug!(device_id, %reason, ?backoff, "re-subscribing");
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(BACKOFF_MAX);
    }
}
