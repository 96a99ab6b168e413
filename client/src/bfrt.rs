//! BFRT for Tofino: one tonic channel per target, one StreamChannel per
//! device id (slot) that Subscribes this client (the session loop of
//! [`crate::session`]), BIND to the program, batched and pipelined writes
//! with per-update results decoded from `grpc-status-details-bin`.
//!
//! The rest of p4fleet speaks canonical P4Runtime entries; this device
//! translates them with [`p4fleet_model::entries::bfrt::BfrtProgramMap`]
//! (built in [`BfrtDevice::set_pipeline`] from the P4Info and the
//! bfrt.json), so [`BfrtDevice::write_ops`] and [`BfrtDevice::read_table`]
//! have the same shapes as the P4Runtime device's. `write_ops` translates
//! while encoding (no messages built).
//!
//! BFRT has no pipeline cookie: a program is pushed unless the device
//! already reports one of the same name with the same bfrt.json (by
//! SHA-256). BFRT has no entry metadata either: reads return none.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use p4fleet_model::entries::bfrt::{
    BfrtInfo, BfrtOp, BfrtProgramMap, BfrtWriteHeader, bfrt_write_request,
};
use p4fleet_model::entries::{TableSchema, WriteOp};
use p4fleet_proto::bfrt::{
    self, ForwardingPipelineConfig, GetForwardingPipelineConfigRequest, ReadRequest,
    SetForwardingPipelineConfigRequest, StreamMessageRequest, StreamMessageResponse, TargetDevice,
    bf_runtime_client::BfRuntimeClient, forwarding_pipeline_config::Profile,
    set_forwarding_pipeline_config_request::Action as SetAction, stream_message_request,
    stream_message_response,
};
use p4fleet_proto::p4info::P4Info;
use p4fleet_proto::p4runtime::TableEntry;
use sha2::{Digest, Sha256};
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Channel;

use crate::channel::{self, MAX_MESSAGE};
use crate::observe::{Observe, WriteObserver};
use crate::pipeline::{self, UpdateErrors};
use crate::raw::{self, BFRT_WRITE};
use crate::session::{self, Sessions};
use crate::{Capabilities, Error, Refusal, Target, UpdateFailure, WriteOptions, WriteReport};

mod default_action;

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

/// The subscription stream of a device id: subscribed when the device
/// answers the Subscribe without an error status.
#[derive(Clone)]
struct Subscription {
    client: BfRuntimeClient<Channel>,
    client_id: u32,
}

impl session::Stream for Subscription {
    type Request = StreamMessageRequest;
    type Response = StreamMessageResponse;
    const NAME: &'static str = "subscription";

    fn hello(&self, device_id: u64) -> StreamMessageRequest {
        StreamMessageRequest {
            client_id: self.client_id,
            update: Some(stream_message_request::Update::Subscribe(bfrt::Subscribe {
                device_id: device_id as u32,
                notifications: Some(bfrt::subscribe::Notifications::default()),
                ..Default::default()
            })),
        }
    }

    async fn open(
        &self,
        requests: ReceiverStream<StreamMessageRequest>,
    ) -> Result<tonic::Streaming<StreamMessageResponse>, tonic::Status> {
        let mut client = self.client.clone();
        Ok(client.stream_channel(requests).await?.into_inner())
    }

    fn answer(&self, m: StreamMessageResponse) -> Option<Result<(), Refusal>> {
        let Some(stream_message_response::Update::Subscribe(s)) = m.update else {
            return None;
        };
        Some(match s.status {
            // A subscription to a device id the device does not serve.
            Some(st) if st.code == tonic::Code::NotFound as i32 => Err(Refusal::UnknownDevice {
                message: st.message,
            }),
            Some(st) if st.code != 0 => Err(Refusal::Other {
                code: st.code,
                message: st.message,
            }),
            _ => Ok(()),
        })
    }
}

/// The program of one device id, as this client last set or found it.
struct Loaded {
    p4_name: String,
    /// Shared with running writes (no copy per write).
    map: Arc<BfrtProgramMap>,
    /// Subscription (acceptance count) the BIND was made on.
    bound_on: Option<u64>,
}

/// The translation between `p4info`'s tables and a program's bfrt.json.
fn program_map(device_id: u64, p4info: &P4Info, bfrt_json: &[u8]) -> Result<BfrtProgramMap, Error> {
    let protocol = |reason: String| Error::Protocol { device_id, reason };
    let tables = TableSchema::all_from_p4info(p4info).map_err(|e| protocol(e.to_string()))?;
    let info = BfrtInfo::parse(bfrt_json).map_err(|e| protocol(e.to_string()))?;
    BfrtProgramMap::new(&tables, &info).map_err(|e| protocol(e.to_string()))
}

/// A BFRT connection to one target.
pub struct BfrtDevice {
    target: Target,
    client_id: u32,
    client: BfRuntimeClient<Channel>,
    /// Writes encoded by [`p4fleet_model::entries::bfrt::bfrt_write_request`].
    raw: tonic::client::Grpc<Channel>,
    sessions: Sessions<Subscription>,
    loaded: Mutex<HashMap<u64, Arc<Mutex<Loaded>>>>,
    /// Hears of every Write RPC ([`crate::Device::with_write_observer`]).
    pub(crate) observer: Option<WriteObserver>,
}

impl BfrtDevice {
    /// A lazy connection (must be called inside a tokio runtime).
    pub(crate) fn connect(target: Target, client_id: u32) -> Result<Self, Error> {
        let channel = channel::connect_lazy(&target)?;
        let raw = tonic::client::Grpc::new(channel.clone())
            .max_decoding_message_size(MAX_MESSAGE)
            .max_encoding_message_size(MAX_MESSAGE);
        let client = BfRuntimeClient::new(channel)
            .max_decoding_message_size(MAX_MESSAGE)
            .max_encoding_message_size(MAX_MESSAGE);
        let subscription = Subscription {
            client: client.clone(),
            client_id,
        };
        Ok(BfrtDevice {
            sessions: Sessions::new(subscription, &target.endpoint),
            target,
            client_id,
            client,
            raw,
            loaded: Mutex::new(HashMap::new()),
            observer: None,
        })
    }

    pub fn target(&self) -> &Target {
        &self.target
    }

    /// See [`crate::Device::changes`].
    pub fn changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.sessions.epochs()
    }

    /// See [`crate::Device::standing`].
    pub async fn standing(&self, slot: u32, timeout: Duration) -> Result<(), Error> {
        self.sessions
            .standing(self.target.device_id(slot), timeout)
            .await
    }

    /// See [`crate::Device::observe`].
    pub fn observe(&self, slot: u32) {
        self.sessions.observe(self.target.device_id(slot));
    }

    fn rpc_error(&self, rpc: &'static str, device_id: u64, status: tonic::Status) -> Error {
        Error::rpc(&self.target.endpoint, rpc, device_id, status)
    }

    fn target_device(device_id: u64) -> TargetDevice {
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
    ) -> Result<bfrt::GetForwardingPipelineConfigResponse, Error> {
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
    pub async fn capabilities(&self) -> Result<Capabilities, Error> {
        let cfg = self.get_config(self.target.device_id).await?;
        let names: Vec<&str> = cfg.config.iter().map(|c| c.p4_name.as_str()).collect();
        Ok(Capabilities {
            protocol: "BFRT",
            bulk_write: false,
            api_version: format!("bfrt_proto; programs [{}]", names.join(",")),
        })
    }

    /// Starts (once) the subscription stream of `device_id` and waits until
    /// it is subscribed; returns its generation.
    /// A refusal is final (no wait for another client to leave).
    async fn wait_subscribed(&self, device_id: u64) -> Result<u64, Error> {
        self.sessions
            .wait(device_id, SUBSCRIBE_WAIT, |s| {
                !matches!(s, session::State::Connecting(..))
            })
            .await
    }

    /// Pushes the program to `slot` unless the device already runs one of
    /// the same name and bfrt.json; learns the table translation either way.
    /// Returns whether it was pushed. Then binds.
    pub async fn set_pipeline(
        &self,
        slot: u32,
        p4info: &P4Info,
        pipeline: &TofinoPipeline,
    ) -> Result<bool, Error> {
        let device_id = self.target.device_id(slot);
        let map = program_map(device_id, p4info, &pipeline.bfrt_json)?;
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
                        // Empty: every pipe of the chip, whatever its
                        // count (2 or 4 on Tofino-1); the program owns
                        // the whole device (docs/bfrt.md).
                        pipe_scope: vec![],
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
        self.remember(device_id, &pipeline.p4_name, map);
        self.bind(slot).await?;
        Ok(!loaded)
    }

    /// Binds this client to a program the device already runs in `slot`
    /// (named `p4_name`, or its only one), learning the table translation
    /// from the device's bfrt.json and `p4info`: for a reader (such as
    /// `p4fleet entries export`) that did not load the program. Returns
    /// the program's name. The client id must differ from the writer's.
    pub async fn attach(
        &self,
        slot: u32,
        p4info: &P4Info,
        p4_name: Option<&str>,
    ) -> Result<String, Error> {
        let device_id = self.target.device_id(slot);
        let protocol = |reason: String| Error::Protocol { device_id, reason };
        let current = self.get_config(device_id).await?;
        let names: Vec<&str> = current.config.iter().map(|c| c.p4_name.as_str()).collect();
        let config = match p4_name {
            Some(n) => current.config.iter().find(|c| c.p4_name == n),
            None if current.config.len() == 1 => current.config.first(),
            None => None,
        }
        .ok_or_else(|| {
            protocol(format!(
                "the device runs programs [{}]; name one of them",
                names.join(",")
            ))
        })?;
        let map = program_map(device_id, p4info, &config.bfruntime_info)?;
        self.remember(device_id, &config.p4_name, map);
        self.bind(slot).await?;
        Ok(config.p4_name.clone())
    }

    /// Keeps the program of `device_id` (not yet bound) for writes and reads.
    fn remember(&self, device_id: u64, p4_name: &str, map: BfrtProgramMap) {
        let loaded = Loaded {
            p4_name: p4_name.to_string(),
            map: Arc::new(map),
            bound_on: None,
        };
        self.loaded
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(device_id, Arc::new(Mutex::new(loaded)));
    }

    /// The program set for `slot`, bound on the current subscription.
    async fn bound(&self, device_id: u64) -> Result<(String, Arc<BfrtProgramMap>), Error> {
        let loaded = self
            .loaded
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&device_id)
            .cloned()
            .ok_or_else(|| Error::Protocol {
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
    pub async fn bind(&self, slot: u32) -> Result<(), Error> {
        self.bound(self.target.device_id(slot)).await.map(|_| ())
    }

    /// Writes `ops` to `slot` as BFRT Write requests encoded straight from
    /// the entries (the translation of [`BfrtProgramMap::check`], no
    /// messages built): every op is checked first (one BFRT cannot express
    /// fails on its own, INVALID_ARGUMENT), then the sendable ones go in
    /// requests of `batch_size`, each encoded when the pipeline pulls it
    /// and sent pre-encoded, up to `max_in_flight` at once. Per-update
    /// results at the ops' indexes.
    pub async fn write_ops(
        &self,
        slot: u32,
        ops: &[WriteOp<'_>],
        opts: WriteOptions,
    ) -> Result<WriteReport, Error> {
        let device_id = self.target.device_id(slot);
        let n = ops.len();
        let mut report = WriteReport {
            updates: n,
            ..Default::default()
        };
        if n == 0 {
            return Ok(report);
        }
        let (p4_name, map) = self.bound(device_id).await?;
        let mut sendable: Vec<(usize, BfrtOp)> = Vec::with_capacity(n);
        for (i, op) in ops.iter().enumerate() {
            match map.check(*op) {
                Ok(u) => sendable.push((i, u)),
                Err(e) => report.failures.push(UpdateFailure {
                    index: i,
                    code: tonic::Code::InvalidArgument as i32,
                    message: e.to_string(),
                }),
            }
        }
        let header = BfrtWriteHeader {
            target: Self::target_device(device_id),
            client_id: self.client_id,
            atomicity: opts.atomicity,
            p4_name: &p4_name,
        };
        let (grpc, map, header) = (&self.raw, &*map, &header);
        let send = |batch: Vec<BfrtOp>| {
            let body = bfrt_write_request(map, header, &batch);
            let mut grpc = grpc.clone();
            async move {
                // Cannot fail: the ops were checked against this same map.
                let body = body.map_err(|e| tonic::Status::invalid_argument(e.to_string()))?;
                raw::unary::<bfrt::WriteResponse>(&mut grpc, BFRT_WRITE, body.into())
                    .await
                    .map(|_| UpdateErrors::new())
            }
        };
        let observe = Observe {
            observer: self.observer.as_ref(),
            device_id,
            ops,
        };
        pipeline::write_pipelined(
            sendable,
            opts,
            &mut report,
            send,
            decode_update_errors,
            observe,
        )
        .await;
        Ok(report)
    }

    /// Every entry of one table (P4Info `table_id`; 0: every table of the
    /// program) in `slot`, in canonical P4Runtime form.
    pub async fn read_table(&self, slot: u32, table_id: u32) -> Result<Vec<TableEntry>, Error> {
        let mut out = Vec::new();
        self.read_table_each(slot, table_id, &mut |t| out.push(t))
            .await?;
        Ok(out)
    }

    /// [`Self::read_table`], each entry handed to `f` as its answer arrives.
    pub async fn read_table_each(
        &self,
        slot: u32,
        table_id: u32,
        f: &mut (dyn FnMut(TableEntry) + Send),
    ) -> Result<(), Error> {
        let device_id = self.target.device_id(slot);
        let (p4_name, map) = self.bound(device_id).await?;
        let ids: Vec<u32> = if table_id == 0 {
            map.tables().map(|t| t.bfrt_table_id).collect()
        } else {
            vec![
                map.table(table_id)
                    .ok_or_else(|| Error::Protocol {
                        device_id,
                        reason: format!("table id {table_id} is not in the bfrt.json"),
                    })?
                    .bfrt_table_id,
            ]
        };
        let req = ReadRequest {
            target: Some(Self::target_device(device_id)),
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
                    .ok_or_else(|| Error::Protocol {
                        device_id,
                        reason: format!("read returned unknown table {}", t.table_id),
                    })?;
                f(tm.from_bfrt(&t).map_err(|e| Error::Protocol {
                    device_id,
                    reason: e.to_string(),
                })?);
            }
        }
        Ok(())
    }
}

/// Per-update errors of a failed BFRT Write (`bfrt_proto.Error` details).
fn decode_update_errors(status: &tonic::Status, n: usize) -> Option<UpdateErrors> {
    pipeline::decode_update_errors::<bfrt::Error>(status, n)
}
