//! `p4fleet.externs.v1.ExternRuntime` over the emulated data planes: one
//! [`Engine`] per device, found in an [`EngineRegistry`] (the device
//! registry registers a device's engine when its pipeline is loaded).
//!
//! What a caller probing for the capability gets: an unknown device is
//! NOT_FOUND; a device that is not a DPDK target (no extern runtime) is
//! UNIMPLEMENTED, as a target without this service would answer; a DPDK
//! target without a pipeline is FAILED_PRECONDITION; another pipeline than
//! the one named is NOT_FOUND.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use p4fleet_proto::externs as pb;
use p4fleet_proto::externs::extern_runtime_server::{ExternRuntime, ExternRuntimeServer};
use prost::Message;
use tonic::{Code, Request, Response, Status};

use super::engine::Engine;
use super::policy::{Executor, ExternPolicy, Mode, PolicyError, SuspendMethod};
use super::stats::{EngineStats, ExternStats};

/// What a device is, for the extern runtime.
#[derive(Clone)]
enum Slot {
    /// Served, but not a DPDK target: it has no extern runtime.
    Other,
    /// A DPDK target; its data plane once a pipeline is loaded.
    Dpdk(Option<Arc<Engine>>),
}

/// Device id -> data plane.
#[derive(Clone, Default)]
pub struct EngineRegistry {
    devices: Arc<RwLock<HashMap<u64, Slot>>>,
}

impl EngineRegistry {
    pub fn new() -> EngineRegistry {
        EngineRegistry::default()
    }

    /// Declares a served device: a DPDK target (no pipeline yet) or not.
    pub fn add_device(&self, device_id: u64, dpdk: bool) {
        let slot = if dpdk { Slot::Dpdk(None) } else { Slot::Other };
        self.devices
            .write()
            .expect("registry lock")
            .insert(device_id, slot);
    }

    /// Registers (or replaces) a DPDK device's data plane; returns the
    /// old one.
    pub fn insert(&self, device_id: u64, engine: Arc<Engine>) -> Option<Arc<Engine>> {
        match self
            .devices
            .write()
            .expect("registry lock")
            .insert(device_id, Slot::Dpdk(Some(engine)))
        {
            Some(Slot::Dpdk(old)) => old,
            _ => None,
        }
    }

    /// Takes a DPDK device's data plane away (it has no pipeline now).
    pub fn remove(&self, device_id: u64) -> Option<Arc<Engine>> {
        match self
            .devices
            .write()
            .expect("registry lock")
            .get_mut(&device_id)
        {
            Some(Slot::Dpdk(e)) => e.take(),
            _ => None,
        }
    }

    pub fn get(&self, device_id: u64) -> Option<Arc<Engine>> {
        match self.devices.read().expect("registry lock").get(&device_id) {
            Some(Slot::Dpdk(e)) => e.clone(),
            _ => None,
        }
    }

    /// The device's data plane, or the gRPC status that says why there is
    /// none (see the module documentation).
    pub fn engine(&self, device_id: u64) -> Result<Arc<Engine>, Status> {
        match self.devices.read().expect("registry lock").get(&device_id) {
            Some(Slot::Dpdk(Some(e))) => Ok(e.clone()),
            Some(Slot::Dpdk(None)) => Err(Status::failed_precondition(format!(
                "device {device_id} has no forwarding pipeline config: its data plane runs once \
                 a pipeline is set"
            ))),
            Some(Slot::Other) => Err(Status::unimplemented(format!(
                "device {device_id} is not a DPDK target: it has no extern runtime"
            ))),
            None => Err(Status::not_found(format!("unknown device id {device_id}"))),
        }
    }
}

/// The tonic service.
#[derive(Clone)]
pub struct ExternRuntimeService {
    registry: EngineRegistry,
}

impl ExternRuntimeService {
    pub fn new(registry: EngineRegistry) -> ExternRuntimeService {
        ExternRuntimeService { registry }
    }

    /// The generated server around it, to mount in a tonic server.
    pub fn server(self) -> ExternRuntimeServer<ExternRuntimeService> {
        ExternRuntimeServer::new(self)
    }

    fn engine(&self, target: Option<&pb::Target>) -> Result<Arc<Engine>, Status> {
        let t = target.ok_or_else(|| Status::invalid_argument("target is required"))?;
        let e = self.registry.engine(t.device_id)?;
        if !t.pipeline.is_empty() && t.pipeline != e.pipeline() {
            return Err(Status::not_found(format!(
                "device {} runs pipeline {:?}, not {:?}",
                t.device_id,
                e.pipeline(),
                t.pipeline
            )));
        }
        Ok(e)
    }
}

fn mode_pb(m: Mode) -> pb::Mode {
    match m {
        Mode::Sync => pb::Mode::Sync,
        Mode::Async => pb::Mode::Async,
        Mode::Skip => pb::Mode::Skip,
    }
}

fn suspend_pb(s: SuspendMethod) -> pb::SuspendMethod {
    match s {
        SuspendMethod::PacketDescriptor => pb::SuspendMethod::PacketDescriptor,
        SuspendMethod::Context => pb::SuspendMethod::Context,
    }
}

fn executor_pb(e: Executor) -> pb::Executor {
    match e {
        Executor::InlineCryptoDevice => pb::Executor::InlineCryptoDevice,
        Executor::DedicatedCores => pb::Executor::DedicatedCores,
        Executor::Accelerator => pb::Executor::Accelerator,
    }
}

/// An engine policy as the wire message.
pub fn policy_to_pb(name: &str, p: &ExternPolicy) -> pb::ExternPolicy {
    pb::ExternPolicy {
        name: name.to_string(),
        mode: mode_pb(p.mode) as i32,
        suspend: p
            .suspend
            .map(suspend_pb)
            .unwrap_or(pb::SuspendMethod::Unspecified) as i32,
        executor: p
            .executor
            .map(executor_pb)
            .unwrap_or(pb::Executor::Unspecified) as i32,
        cores: p.cores,
        burst_size: p.burst_size,
        context_pool: p.context_pool,
        queue_depth: p.queue_depth,
    }
}

/// A wire policy as the engine's, or the PolicyError to answer with.
pub fn policy_from_pb(p: &pb::ExternPolicy) -> Result<(String, ExternPolicy), pb::PolicyError> {
    let bad = |field: &str, what: String| pb::PolicyError {
        reason: pb::policy_error::Reason::UnknownMode as i32,
        extern_name: p.name.clone(),
        field: field.to_string(),
        message: what,
    };
    let mode = match pb::Mode::try_from(p.mode) {
        Ok(pb::Mode::Sync) => Mode::Sync,
        Ok(pb::Mode::Async) => Mode::Async,
        Ok(pb::Mode::Skip) => Mode::Skip,
        _ => {
            return Err(bad(
                "mode",
                format!(
                    "extern {:?}: mode {} is not SYNC, ASYNC or SKIP",
                    p.name, p.mode
                ),
            ));
        }
    };
    // An enum value this build does not know, in `field`.
    let unknown = |field: &str, what: &str, raw: i32| {
        bad(field, format!("extern {:?}: unknown {what} {raw}", p.name))
    };
    let suspend = match pb::SuspendMethod::try_from(p.suspend) {
        Ok(pb::SuspendMethod::Unspecified) => None,
        Ok(pb::SuspendMethod::PacketDescriptor) => Some(SuspendMethod::PacketDescriptor),
        Ok(pb::SuspendMethod::Context) => Some(SuspendMethod::Context),
        Err(_) => return Err(unknown("suspend", "suspend method", p.suspend)),
    };
    let executor = match pb::Executor::try_from(p.executor) {
        Ok(pb::Executor::Unspecified) => None,
        Ok(pb::Executor::InlineCryptoDevice) => Some(Executor::InlineCryptoDevice),
        Ok(pb::Executor::DedicatedCores) => Some(Executor::DedicatedCores),
        Ok(pb::Executor::Accelerator) => Some(Executor::Accelerator),
        Err(_) => return Err(unknown("executor", "executor", p.executor)),
    };
    Ok((
        p.name.clone(),
        ExternPolicy {
            mode,
            suspend,
            executor,
            cores: p.cores,
            burst_size: p.burst_size,
            context_pool: p.context_pool,
            queue_depth: p.queue_depth,
        },
    ))
}

/// A refused policy as its wire error and gRPC code.
pub fn policy_error_to_pb(e: &PolicyError) -> (Code, pb::PolicyError) {
    use pb::policy_error::Reason;
    let (code, reason, field) = match e {
        PolicyError::UnknownExtern { .. } => (Code::NotFound, Reason::UnknownExtern, ""),
        PolicyError::Duplicate { .. } => (Code::InvalidArgument, Reason::DuplicateExtern, "name"),
        PolicyError::MissingExecutor { .. } => {
            (Code::InvalidArgument, Reason::MissingExecutor, "executor")
        }
        PolicyError::UnsupportedExecutor { .. } => (
            Code::FailedPrecondition,
            Reason::UnsupportedExecutor,
            "executor",
        ),
        PolicyError::CoresWithoutDedicatedCores { .. } => (
            Code::InvalidArgument,
            Reason::CoresWithoutDedicatedCores,
            "cores",
        ),
        PolicyError::OutOfRange { field, .. } => {
            (Code::InvalidArgument, Reason::OutOfRange, *field)
        }
        PolicyError::BurstOverQueue { .. } => (
            Code::InvalidArgument,
            Reason::BurstOverQueueDepth,
            "burst_size",
        ),
    };
    (
        code,
        pb::PolicyError {
            reason: reason as i32,
            extern_name: e.extern_name().to_string(),
            field: field.to_string(),
            message: e.to_string(),
        },
    )
}

/// A gRPC status carrying `err` in its `google.rpc.Status` details.
fn status_with(code: Code, err: pb::PolicyError) -> Status {
    let details = p4fleet_proto::rpc::Status {
        code: code as i32,
        message: err.message.clone(),
        details: vec![prost_types::Any {
            type_url: pb::POLICY_ERROR_TYPE_URL.to_string(),
            value: err.encode_to_vec(),
        }],
    };
    Status::with_details(code, err.message.clone(), details.encode_to_vec().into())
}

/// The PolicyError inside a refusal from any ExternRuntime server.
pub fn policy_error_from_status(s: &Status) -> Option<pb::PolicyError> {
    let st = p4fleet_proto::rpc::Status::decode(s.details()).ok()?;
    st.details
        .iter()
        .find(|a| a.type_url == pb::POLICY_ERROR_TYPE_URL)
        .and_then(|a| pb::PolicyError::decode(a.value.as_slice()).ok())
}

fn extern_stats_pb(x: &ExternStats) -> pb::ExternStats {
    pb::ExternStats {
        name: x.name.clone(),
        policy: Some(policy_to_pb(&x.name, &x.policy)),
        sync_calls: x.sync_calls,
        skipped: x.skipped,
        async_submitted: x.async_submitted,
        async_completed: x.async_completed,
        async_ops_per_second: x.async_ops_per_second,
        queue_depth: x.in_flight,
        drops_pool_exhausted: x.drops_pool_exhausted,
        drops_queue_full: x.drops_queue_full,
        latency_p50_ns: x.latency_p50_ns.unwrap_or(0),
        latency_p99_ns: x.latency_p99_ns.unwrap_or(0),
    }
}

/// Engine stats as the wire answer.
pub fn stats_to_pb(pipeline: &str, s: &EngineStats) -> pb::GetStatsResponse {
    pb::GetStatsResponse {
        pipeline: Some(pb::PipelineStats {
            pipeline: pipeline.to_string(),
            running: s.running,
            worker_cores: s.workers,
            extern_cores: s.extern_cores,
            rx_packets: s.rx_packets,
            tx_packets: s.tx_packets,
            tx_bytes: s.tx_bytes,
            packets_per_second: s.packets_per_second,
            drops: Some(pb::Drops {
                program: s.drops.program,
                truncated: s.drops.truncated,
                pool_exhausted: s.drops.pool_exhausted,
                queue_full: s.drops.queue_full,
                bad_port: s.drops.bad_port,
            }),
            latency_p50_ns: s.latency_p50_ns.unwrap_or(0),
            latency_p99_ns: s.latency_p99_ns.unwrap_or(0),
            tx_ports: s
                .tx_per_port
                .iter()
                .map(|(port, packets)| pb::PortStats {
                    port: *port,
                    packets: *packets,
                })
                .collect(),
            tables: s
                .tables
                .iter()
                .map(|t| pb::TableStats {
                    name: t.name.clone(),
                    table_id: t.table_id,
                    entries: t.entries,
                    hits: t.hits,
                    misses: t.misses,
                    actions: t
                        .actions
                        .iter()
                        .map(|(name, id, n)| pb::ActionStats {
                            name: name.clone(),
                            action_id: *id,
                            packets: *n,
                        })
                        .collect(),
                    error: t.compile_error.clone().unwrap_or_default(),
                })
                .collect(),
            policy_sets: s.policy_sets,
        }),
        externs: s.externs.iter().map(extern_stats_pb).collect(),
    }
}

#[tonic::async_trait]
impl ExternRuntime for ExternRuntimeService {
    async fn list_externs(
        &self,
        request: Request<pb::ListExternsRequest>,
    ) -> Result<Response<pb::ListExternsResponse>, Status> {
        let engine = self.engine(request.get_ref().target.as_ref())?;
        let externs = engine
            .externs()
            .into_iter()
            .map(|x| pb::ExternInfo {
                name: x.name,
                p4info_id: x.p4info_id,
                kind: x.kind.as_str().to_string(),
                capabilities: Some(pb::Capabilities {
                    modes: x
                        .capabilities
                        .modes
                        .iter()
                        .map(|m| mode_pb(*m) as i32)
                        .collect(),
                    suspend_methods: x
                        .capabilities
                        .suspend_methods
                        .iter()
                        .map(|s| suspend_pb(*s) as i32)
                        .collect(),
                    executors: x
                        .capabilities
                        .executors
                        .iter()
                        .map(|e| executor_pb(*e) as i32)
                        .collect(),
                    max_cores: x.capabilities.max_cores,
                    max_burst_size: super::policy::MAX_BURST,
                    max_context_pool: super::policy::MAX_CONTEXT_POOL,
                    max_queue_depth: super::policy::MAX_QUEUE_DEPTH,
                }),
            })
            .collect();
        Ok(Response::new(pb::ListExternsResponse {
            pipeline: engine.pipeline().to_string(),
            externs,
        }))
    }

    async fn get_policy(
        &self,
        request: Request<pb::GetPolicyRequest>,
    ) -> Result<Response<pb::GetPolicyResponse>, Status> {
        let engine = self.engine(request.get_ref().target.as_ref())?;
        Ok(Response::new(pb::GetPolicyResponse {
            externs: engine
                .policy()
                .iter()
                .map(|(n, p)| policy_to_pb(n, p))
                .collect(),
        }))
    }

    async fn set_policy(
        &self,
        request: Request<pb::SetPolicyRequest>,
    ) -> Result<Response<pb::SetPolicyResponse>, Status> {
        let req = request.into_inner();
        let engine = self.engine(req.target.as_ref())?;
        let desired = req
            .externs
            .iter()
            .map(policy_from_pb)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| status_with(Code::InvalidArgument, e))?;
        // Applying stops and restarts cores: not on the async runtime.
        let applied = tokio::task::spawn_blocking(move || engine.set_policy(&desired))
            .await
            .map_err(|e| Status::internal(e.to_string()))?;
        match applied {
            Ok(p) => Ok(Response::new(pb::SetPolicyResponse {
                externs: p.iter().map(|(n, p)| policy_to_pb(n, p)).collect(),
            })),
            Err(e) => {
                let (code, err) = policy_error_to_pb(&e);
                Err(status_with(code, err))
            }
        }
    }

    async fn get_stats(
        &self,
        request: Request<pb::GetStatsRequest>,
    ) -> Result<Response<pb::GetStatsResponse>, Status> {
        let engine = self.engine(request.get_ref().target.as_ref())?;
        Ok(Response::new(stats_to_pb(
            engine.pipeline(),
            &engine.stats(),
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policy_round_trips_through_the_wire_type() {
        for p in [
            ExternPolicy::default(),
            ExternPolicy::with_mode(Mode::Skip),
            ExternPolicy::asynchronous(Executor::DedicatedCores),
            ExternPolicy {
                suspend: Some(SuspendMethod::Context),
                ..ExternPolicy::asynchronous(Executor::InlineCryptoDevice)
            },
        ] {
            let wire = policy_to_pb("async_encrypt", &p);
            assert_eq!(
                policy_from_pb(&wire).unwrap(),
                ("async_encrypt".to_string(), p)
            );
        }
    }

    #[test]
    fn unspecified_mode_is_refused_with_the_extern_named() {
        let wire = pb::ExternPolicy {
            name: "async_encrypt".into(),
            ..Default::default()
        };
        let e = policy_from_pb(&wire).unwrap_err();
        assert_eq!(e.extern_name, "async_encrypt");
        assert_eq!(e.field, "mode");
    }

    #[test]
    fn errors_carry_typed_details() {
        let e = PolicyError::UnknownExtern {
            name: "compress".into(),
            known: "async_encrypt".into(),
        };
        let (code, err) = policy_error_to_pb(&e);
        assert_eq!(code, Code::NotFound);
        let s = status_with(code, err);
        let back = policy_error_from_status(&s).unwrap();
        assert_eq!(back.extern_name, "compress");
        assert_eq!(back.reason, pb::policy_error::Reason::UnknownExtern as i32);
    }
}
