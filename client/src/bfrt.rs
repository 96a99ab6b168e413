//! BFRT for Tofino: one tonic channel per target, one StreamChannel per
//! device id (slot) that Subscribes this client (the session loop of
//! [`crate::session`]), BIND to the program, batched and pipelined writes
//! with per-update results decoded from `grpc-status-details-bin`.
//!
//! The rest of p4fleet speaks canonical P4Runtime entries; this device
//! translates them with [`p4fleet_model::entries::bfrt::BfrtProgramMap`]
//! (built in [`BfrtDevice::set_pipeline`] from the P4Info and the
//! bfrt.json), so [`BfrtDevice::write_ops`] and [`BfrtDevice::read_table_each`]
//! have the same shapes as the P4Runtime device's. `write_ops` translates
//! while encoding (no messages built).
//!
//! BFRT has no pipeline cookie: a program is pushed unless the device
//! already reports one of the same name with the same bfrt.json,
//! context.json and binary (by SHA-256, [`TofinoSha256`]). BFRT has no
//! entry metadata either: reads return none.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use p4fleet_model::entries::bfrt::stateful::BfrtRegisters;
use p4fleet_model::entries::bfrt::{
    BfrtInfo, BfrtOp, BfrtProgramMap, BfrtWriteHeader, bfrt_write_request,
};
use p4fleet_model::entries::{TableSchema, WriteOp};
use p4fleet_proto::bfrt::{
    self, ForwardingPipelineConfig, GetForwardingPipelineConfigRequest,
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
use crate::endpoint;
use crate::observe::{Observe, WriteObserver};
use crate::pipeline::{self, UpdateErrors};
use crate::raw::{self, BFRT_WRITE};
use crate::session::{self, Sessions};
use crate::{Capabilities, Error, Refusal, Target, UpdateFailure, WriteOptions, WriteReport};

mod default_action;
mod resources;

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

impl TofinoPipeline {
    /// The SHA-256 of each of its parts.
    pub fn sha256(&self) -> TofinoSha256 {
        TofinoSha256 {
            bfrt_json: Sha256::digest(&self.bfrt_json).to_vec(),
            context_json: Sha256::digest(&self.context_json).to_vec(),
            binary: Sha256::digest(&self.binary).to_vec(),
        }
    }
}

/// What tells one build of a Tofino program from another on a device
/// (BFRT has no pipeline cookie): the SHA-256 of its bfrt.json,
/// context.json and binary. A rebuild that keeps the tables keeps the
/// bfrt.json, so that alone would take a new binary for the one loaded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TofinoSha256 {
    pub bfrt_json: Vec<u8>,
    pub context_json: Vec<u8>,
    pub binary: Vec<u8>,
}

impl TofinoSha256 {
    /// Whether `c`, a program as the device reports it, is this build: the
    /// same bfrt.json, and each profile's context.json and binary the same
    /// where the device reports them (one that leaves them out is judged
    /// by its bfrt.json alone). Pure.
    pub fn matches(&self, c: &ForwardingPipelineConfig) -> bool {
        let same = |reported: &[u8], want: &[u8]| {
            reported.is_empty() || Sha256::digest(reported).as_slice() == want
        };
        Sha256::digest(&c.bfruntime_info).as_slice() == self.bfrt_json
            && c.profiles
                .iter()
                .all(|p| same(&p.context, &self.context_json) && same(&p.binary, &self.binary))
    }
}

/// The subscription stream of a device id: subscribed when the device
/// answers the Subscribe without an error status.
#[derive(Clone)]
pub(crate) struct Subscription {
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
    /// The P4Info the program was set with, and its registers in
    /// bfrt.json ([`resources`]).
    p4info: Arc<P4Info>,
    registers: Arc<BfrtRegisters>,
    /// Subscription (acceptance count) the BIND was made on.
    bound_on: Option<u64>,
}

/// A program this client loaded on a pipe set of a device, and the client
/// (own client id) bound to it.
#[derive(Clone)]
struct PipeProgram {
    p4_name: String,
    pipes: Vec<u32>,
    /// A [`crate::Device::Bfrt`].
    client: Arc<crate::Device>,
}

impl PipeProgram {
    fn bfrt(&self) -> &BfrtDevice {
        match self.client.as_ref() {
            crate::Device::Bfrt(d) => d,
            crate::Device::P4Runtime(_) => unreachable!("pipe-set clients are BFRT devices"),
        }
    }
}

/// The client id of the program whose first pipe is `first_pipe`: the
/// device's client id in the low 16 bits (the operator's election id),
/// the pipe + 1 above, so programs on disjoint pipes never share one.
fn pipe_client_id(base: u32, first_pipe: u32) -> u32 {
    (base & 0xffff) | ((first_pipe + 1) << 16)
}

/// The pipes a loaded program runs on: the union of its profiles'
/// `pipe_scope`s; None when a profile has an empty scope (every pipe).
fn program_pipes(c: &ForwardingPipelineConfig) -> Option<std::collections::BTreeSet<u32>> {
    let mut out = std::collections::BTreeSet::new();
    for p in &c.profiles {
        if p.pipe_scope.is_empty() {
            return None;
        }
        out.extend(p.pipe_scope.iter().copied());
    }
    Some(out)
}

/// The whole device config (pure) that frees `off` and then adds `add`
/// on its pipes: every program of `current` that keeps running (another
/// name than `add`'s, on explicit pipes disjoint from `off`), as the device
/// reported it, then `add` with one profile `pipe` scoped to its pipes
/// (explicitly: an empty scope would be every pipe). A program on every
/// pipe (empty scope) is dropped: pipe sets and a whole-device program do
/// not share a device.
pub fn device_config_with(
    current: &[ForwardingPipelineConfig],
    off: &std::collections::BTreeSet<u32>,
    add: Option<(&TofinoPipeline, &[u32])>,
) -> Vec<ForwardingPipelineConfig> {
    let name = add.map(|(p, _)| p.p4_name.as_str());
    let mut out: Vec<ForwardingPipelineConfig> = current
        .iter()
        .filter(|c| Some(c.p4_name.as_str()) != name)
        .filter(|c| program_pipes(c).is_some_and(|p| p.is_disjoint(off)))
        .cloned()
        .collect();
    if let Some((pipeline, pipes)) = add {
        out.push(pipeline_config(pipeline, pipes.to_vec()));
    }
    out
}

/// `pipeline` as one device config: its one profile `pipe` on
/// `pipe_scope` (empty: every pipe of the chip).
fn pipeline_config(pipeline: &TofinoPipeline, pipe_scope: Vec<u32>) -> ForwardingPipelineConfig {
    ForwardingPipelineConfig {
        p4_name: pipeline.p4_name.clone(),
        bfruntime_info: pipeline.bfrt_json.clone(),
        profiles: vec![Profile {
            profile_name: "pipe".into(),
            context: pipeline.context_json.clone(),
            binary: pipeline.binary.clone(),
            pipe_scope,
        }],
    }
}

/// The translation between `p4info`'s tables (and registers) and a
/// program's bfrt.json.
fn program_map(
    device_id: u64,
    p4info: &P4Info,
    bfrt_json: &[u8],
) -> Result<(BfrtProgramMap, BfrtRegisters), Error> {
    let protocol = |reason: String| Error::Protocol { device_id, reason };
    let tables = TableSchema::all_from_p4info(p4info).map_err(|e| protocol(e.to_string()))?;
    let info = BfrtInfo::parse(bfrt_json).map_err(|e| protocol(e.to_string()))?;
    let map = BfrtProgramMap::new(&tables, &info).map_err(|e| protocol(e.to_string()))?;
    Ok((map, BfrtRegisters::new(p4info, &info)))
}

/// A BFRT connection to one target.
pub struct BfrtDevice {
    target: Target,
    client_id: u32,
    client: BfRuntimeClient<Channel>,
    /// The channel under `client`, for a look at what answered a failed
    /// probe (`crate::endpoint`).
    channel: Channel,
    /// Writes encoded by [`p4fleet_model::entries::bfrt::bfrt_write_request`].
    raw: tonic::client::Grpc<Channel>,
    pub(crate) sessions: Sessions<Subscription>,
    loaded: Mutex<HashMap<u64, Arc<Mutex<Loaded>>>>,
    /// Programs loaded on pipe sets ([`BfrtDevice::set_pipes`]), per device
    /// id: each with a client of its own (a BFRT client binds one
    /// program), keyed by the program's first pipe.
    pipe_programs: Mutex<HashMap<u64, Vec<PipeProgram>>>,
    /// Held while a device's config is read, changed and pushed back, so
    /// two programs loaded at once never drop each other.
    config_lock: tokio::sync::Mutex<()>,
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
        let client = BfRuntimeClient::new(channel.clone())
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
            channel,
            raw,
            loaded: Mutex::new(HashMap::new()),
            pipe_programs: Mutex::new(HashMap::new()),
            config_lock: tokio::sync::Mutex::new(()),
            observer: None,
        })
    }

    pub fn target(&self) -> &Target {
        &self.target
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
        self.ask_config(device_id)
            .await
            .map_err(|s| self.rpc_error("GetForwardingPipelineConfig", device_id, s))
    }

    async fn ask_config(
        &self,
        device_id: u64,
    ) -> Result<bfrt::GetForwardingPipelineConfigResponse, tonic::Status> {
        self.client
            .clone()
            .get_forwarding_pipeline_config(GetForwardingPipelineConfigRequest {
                device_id: device_id as u32,
                client_id: self.client_id,
            })
            .await
            .map(|r| r.into_inner())
    }

    /// Reachability probe: the programs the device reports. A failure
    /// says what answered instead of a BFRT server, when something did
    /// (`crate::endpoint`).
    pub async fn capabilities(&self) -> Result<Capabilities, Error> {
        let id = self.target.device_id;
        let cfg = match self.ask_config(id).await {
            Ok(cfg) => cfg,
            Err(s) => {
                let rpc = "GetForwardingPipelineConfig";
                return Err(endpoint::call_error(&self.channel, &self.target, rpc, id, s).await);
            }
        };
        let names: Vec<&str> = cfg.config.iter().map(|c| c.p4_name.as_str()).collect();
        Ok(Capabilities {
            protocol: "BFRT",
            bulk_write: false,
            api_version: format!("bfrt_proto; programs [{}]", names.join(",")),
            pipes: cfg
                .non_p4_config
                .as_ref()
                .and_then(|n| reported_pipes(&n.bfruntime_info)),
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
    /// the same name and build ([`TofinoSha256`]); learns the table
    /// translation either way.
    /// Returns whether it was pushed. Then binds.
    pub async fn set_pipeline(
        &self,
        slot: u32,
        p4info: &P4Info,
        pipeline: &TofinoPipeline,
    ) -> Result<bool, Error> {
        let device_id = self.target.device_id(slot);
        let map = program_map(device_id, p4info, &pipeline.bfrt_json)?;
        let want = pipeline.sha256();
        let current = self.get_config(device_id).await?;
        let loaded = current
            .config
            .iter()
            .any(|c| c.p4_name == pipeline.p4_name && want.matches(c));
        if !loaded {
            // Empty scope: every pipe of the chip, whatever its count (2
            // or 4 on Tofino-1); the program owns the whole device
            // (docs/bfrt.md).
            let config = vec![pipeline_config(pipeline, vec![])];
            self.set_config(
                "SetForwardingPipelineConfig",
                device_id,
                SetAction::VerifyAndWarmInitBeginAndEnd,
                config,
            )
            .await?;
        }
        self.remember(device_id, &pipeline.p4_name, map, p4info);
        // The whole device is this program's now.
        self.pipe_programs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&device_id);
        self.bind(slot).await?;
        Ok(!loaded)
    }

    /// Whether `slot`'s device runs a program named `p4_name` of build
    /// `sha256`, on exactly `pipes` (empty: any pipes, a whole-device
    /// program): the check [`BfrtDevice::set_pipeline`] and
    /// [`BfrtDevice::set_pipes`] make before pushing, without pushing.
    pub async fn runs(
        &self,
        slot: u32,
        p4_name: &str,
        sha256: &TofinoSha256,
        pipes: &[u32],
    ) -> Result<bool, Error> {
        let current = self.get_config(self.target.device_id(slot)).await?;
        let wanted: std::collections::BTreeSet<u32> = pipes.iter().copied().collect();
        Ok(current.config.iter().any(|c| {
            c.p4_name == p4_name
                && sha256.matches(c)
                && (pipes.is_empty() || program_pipes(c).as_ref() == Some(&wanted))
        }))
    }

    /// Sends `config` as the whole device's: VERIFY_AND_WARM_INIT_BEGIN,
    /// then RECONCILE_AND_WARM_INIT_END, so every program that keeps its
    /// name, bfrt.json and pipes keeps its entries (BF Runtime's warm init
    /// with reconcile; docs/bfrt.md, "Pipes").
    async fn push_device_config(
        &self,
        device_id: u64,
        config: Vec<ForwardingPipelineConfig>,
    ) -> Result<(), Error> {
        // The config goes with the first; the second ends the warm init.
        let steps = [
            (SetAction::VerifyAndWarmInitBegin, config),
            (SetAction::ReconcileAndWarmInitEnd, Vec::new()),
        ];
        for (action, config) in steps {
            self.set_config("SetForwardingPipelineConfig", device_id, action, config)
                .await?;
        }
        Ok(())
    }

    /// One SetForwardingPipelineConfig of `device_id` by this client;
    /// `rpc` names it in an error.
    async fn set_config(
        &self,
        rpc: &'static str,
        device_id: u64,
        action: SetAction,
        config: Vec<ForwardingPipelineConfig>,
    ) -> Result<(), Error> {
        let req = SetForwardingPipelineConfigRequest {
            device_id: device_id as u32,
            client_id: self.client_id,
            action: action as i32,
            config,
            ..Default::default()
        };
        self.client
            .clone()
            .set_forwarding_pipeline_config(req)
            .await
            .map_err(|s| self.rpc_error(rpc, device_id, s))?;
        Ok(())
    }

    /// Loads `pipeline` on pipes `pipes` of `slot`'s device next to the
    /// programs already there, unless the device runs it there already
    /// (same name, bfrt.json and pipes), and binds a client of its own
    /// (client id [`pipe_client_id`]) to it. The config sent is the whole
    /// device's ([`device_config_with`]): the other programs as the device
    /// reports them keep running and keep their entries. Returns whether
    /// it was pushed. Writes and reads of `slot` then go through that
    /// client while it is the device's only pipe-set program here.
    pub async fn set_pipes(
        &self,
        slot: u32,
        p4info: &P4Info,
        pipeline: &TofinoPipeline,
        pipes: &[u32],
    ) -> Result<bool, Error> {
        let device_id = self.target.device_id(slot);
        let first = *pipes.iter().min().ok_or_else(|| Error::Protocol {
            device_id,
            reason: format!("program {}: no pipes to load it on", pipeline.p4_name),
        })?;
        let map = program_map(device_id, p4info, &pipeline.bfrt_json)?;
        let want = pipeline.sha256();
        let wanted: std::collections::BTreeSet<u32> = pipes.iter().copied().collect();
        let pushed = {
            let _config = self.config_lock.lock().await;
            let current = self.get_config(device_id).await?;
            let runs = current.config.iter().any(|c| {
                c.p4_name == pipeline.p4_name
                    && want.matches(c)
                    && program_pipes(c).as_ref() == Some(&wanted)
            });
            if !runs {
                let config = device_config_with(&current.config, &wanted, Some((pipeline, pipes)));
                self.push_device_config(device_id, config).await?;
            }
            !runs
        };
        let sub = self.pipe_client(device_id, first, &pipeline.p4_name, pipes)?;
        sub.bfrt()
            .remember(device_id, &pipeline.p4_name, map, p4info);
        // Pipe sets and a whole-device program do not mix on one device.
        self.loaded
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&device_id);
        sub.bfrt().bound(device_id).await?;
        Ok(pushed)
    }

    /// Removes the programs on any of `pipes` of `slot`'s device, keeping
    /// the others and their entries (the whole config without them, warm
    /// init with reconcile). Returns the names of those it removed.
    pub async fn remove_pipes(&self, slot: u32, pipes: &[u32]) -> Result<Vec<String>, Error> {
        let device_id = self.target.device_id(slot);
        let off: std::collections::BTreeSet<u32> = pipes.iter().copied().collect();
        let _config = self.config_lock.lock().await;
        self.pipe_programs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(device_id)
            .or_default()
            .retain(|p| p.pipes.iter().all(|q| !off.contains(q)));
        let current = self.get_config(device_id).await?;
        let removed: Vec<String> = current
            .config
            .iter()
            .filter(|c| program_pipes(c).is_some_and(|p| !p.is_disjoint(&off)))
            .map(|c| c.p4_name.clone())
            .collect();
        if !removed.is_empty() {
            let config = device_config_with(&current.config, &off, None);
            self.push_device_config(device_id, config).await?;
        }
        Ok(removed)
    }

    /// The client of the program on `first` pipe of `device_id` (made
    /// once), recorded as running `p4_name` on `pipes`.
    fn pipe_client(
        &self,
        device_id: u64,
        first: u32,
        p4_name: &str,
        pipes: &[u32],
    ) -> Result<PipeProgram, Error> {
        let mut all = self.pipe_programs.lock().unwrap_or_else(|e| e.into_inner());
        let list = all.entry(device_id).or_default();
        let id = pipe_client_id(self.client_id, first);
        let client = match list.iter().find(|p| p.bfrt().client_id == id) {
            Some(p) => p.client.clone(),
            None => {
                let mut c = BfrtDevice::connect(self.target.clone(), id)?;
                c.observer = self.observer.clone();
                Arc::new(crate::Device::Bfrt(c))
            }
        };
        // One entry per program: by name and by client (first pipe).
        list.retain(|p| p.p4_name != p4_name && p.bfrt().client_id != id);
        let program = PipeProgram {
            p4_name: p4_name.into(),
            pipes: pipes.to_vec(),
            client,
        };
        list.push(program.clone());
        Ok(program)
    }

    /// The client bound to the program this client loaded on a pipe set of
    /// `slot`'s device whose first pipe is `first_pipe`, if any: its
    /// writes and reads carry that program's name and client id.
    pub fn pipe_set(&self, slot: u32, first_pipe: u32) -> Option<Arc<crate::Device>> {
        let device_id = self.target.device_id(slot);
        let id = pipe_client_id(self.client_id, first_pipe);
        let all = self.pipe_programs.lock().unwrap_or_else(|e| e.into_inner());
        all.get(&device_id)?
            .iter()
            .find(|p| p.bfrt().client_id == id)
            .map(|p| p.client.clone())
    }

    /// Refuses a write or read of `slot` without a program when programs
    /// run on pipe sets of its device: they go through the program's own
    /// client ([`BfrtDevice::pipe_set`]), never to whichever was bound last.
    fn no_pipe_sets(&self, slot: u32) -> Result<(), Error> {
        let device_id = self.target.device_id(slot);
        let all = self.pipe_programs.lock().unwrap_or_else(|e| e.into_inner());
        match all.get(&device_id).map(Vec::as_slice) {
            None | Some([]) => Ok(()),
            Some(programs) => {
                let names: Vec<String> = programs
                    .iter()
                    .map(|p| format!("{} (pipes {:?})", p.p4_name, p.pipes))
                    .collect();
                Err(Error::Protocol {
                    device_id,
                    reason: format!(
                        "the device runs programs {} on pipe sets; writes and reads go through the program's own client",
                        names.join(", ")
                    ),
                })
            }
        }
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
        self.remember(device_id, &config.p4_name, map, p4info);
        self.bind(slot).await?;
        Ok(config.p4_name.clone())
    }

    /// Keeps the program of `device_id` (not yet bound) for writes and reads.
    fn remember(
        &self,
        device_id: u64,
        p4_name: &str,
        (map, registers): (BfrtProgramMap, BfrtRegisters),
        p4info: &P4Info,
    ) {
        let loaded = Loaded {
            p4_name: p4_name.to_string(),
            map: Arc::new(map),
            p4info: Arc::new(p4info.clone()),
            registers: Arc::new(registers),
            bound_on: None,
        };
        self.loaded
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(device_id, Arc::new(Mutex::new(loaded)));
    }

    /// The P4Info and registers of the program set for `device_id`.
    fn loaded_parts(&self, device_id: u64) -> Option<(Arc<P4Info>, Arc<BfrtRegisters>)> {
        let loaded = self
            .loaded
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&device_id)
            .cloned()?;
        let l = loaded.lock().unwrap_or_else(|e| e.into_inner());
        Some((l.p4info.clone(), l.registers.clone()))
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
            let config = vec![ForwardingPipelineConfig {
                p4_name: name.clone(),
                ..Default::default()
            }];
            self.set_config(
                "SetForwardingPipelineConfig(BIND)",
                device_id,
                SetAction::Bind,
                config,
            )
            .await?;
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
        self.no_pipe_sets(slot)?;
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
    /// program) in `slot`, in canonical P4Runtime form, each handed to `f`
    /// as its answer arrives.
    pub async fn read_table_each(
        &self,
        slot: u32,
        table_id: u32,
        f: &mut (dyn FnMut(TableEntry) + Send),
    ) -> Result<(), Error> {
        self.no_pipe_sets(slot)?;
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
        let filters = ids
            .into_iter()
            .map(|id| bfrt::TableEntry {
                table_id: id,
                ..Default::default()
            })
            .collect();
        self.read_bfrt_each(device_id, p4_name, filters, &mut |t| {
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
            Ok(())
        })
        .await
    }
}

/// The pipe count a device reports in its non-P4 bfrt.json (top-level
/// `p4fleet_pipes`, which p4fleet's emulator writes; BF Runtime itself has
/// no message for it). None when absent or not a count of 1 to 64.
pub fn reported_pipes(non_p4_bfrt_json: &[u8]) -> Option<u32> {
    let v: serde_json::Value = serde_json::from_slice(non_p4_bfrt_json).ok()?;
    let n = v.get("p4fleet_pipes")?.as_u64()?;
    (1..=64).contains(&n).then_some(n as u32)
}

/// Per-update errors of a failed BFRT Write (`bfrt_proto.Error` details).
fn decode_update_errors(status: &tonic::Status, n: usize) -> Option<UpdateErrors> {
    pipeline::decode_update_errors::<bfrt::Error>(status, n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_build_is_its_bfrt_json_context_and_binary_where_the_device_reports_them() {
        let built = TofinoPipeline {
            p4_name: "fw".into(),
            bfrt_json: b"{}".to_vec(),
            context_json: b"{\"build\": 1}".to_vec(),
            binary: vec![1],
        };
        let reported = |p: &TofinoPipeline| ForwardingPipelineConfig {
            p4_name: p.p4_name.clone(),
            bfruntime_info: p.bfrt_json.clone(),
            profiles: vec![Profile {
                profile_name: "pipe".into(),
                context: p.context_json.clone(),
                binary: p.binary.clone(),
                pipe_scope: vec![],
            }],
        };
        let want = built.sha256();
        assert!(want.matches(&reported(&built)));
        // The same tables, another binary or context: another build.
        for rebuilt in [
            TofinoPipeline {
                binary: vec![2],
                ..built.clone()
            },
            TofinoPipeline {
                context_json: b"{\"build\": 2}".to_vec(),
                ..built.clone()
            },
            TofinoPipeline {
                bfrt_json: b"{ }".to_vec(),
                ..built.clone()
            },
        ] {
            assert!(!want.matches(&reported(&rebuilt)), "{rebuilt:?}");
        }
        // A device that does not report the profiles' bytes: by bfrt.json.
        let bare = TofinoPipeline {
            context_json: vec![],
            binary: vec![],
            ..built.clone()
        };
        assert!(want.matches(&reported(&bare)));
    }
}
