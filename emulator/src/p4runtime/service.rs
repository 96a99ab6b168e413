//! The P4Runtime gRPC service over the emulated devices.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use crate::grpc::{self, BoxStream};
use bytes::Bytes;
use futures::StreamExt;
use p4fleet_proto::p4runtime::{
    self as p4,
    get_forwarding_pipeline_config_request::ResponseType,
    p4_runtime_server::{P4Runtime, P4RuntimeServer},
    set_forwarding_pipeline_config_request::Action as SetAction,
    update::Type,
    write_request::Atomicity,
};
use prost::Message;
use tonic::{Request, Response, Status, Streaming};

use super::arbitration::{check_primary, from_uint128};
use crate::device::Device;
use crate::p4runtime::wire;
use crate::registry::Registry;
use crate::update_error::UpdateError;
use crate::write_batch::{self, Tally};

/// P4Runtime API version this emulator reports.
pub const P4RUNTIME_API_VERSION: &str = "1.4.0";

/// The tonic service; build with [`crate::Emulator::service`].
#[derive(Clone)]
pub struct P4RuntimeService {
    pub(crate) registry: Arc<Registry>,
}

/// The google.rpc.Status bytes for a failed batch: one p4.v1.Error per update,
/// in order, OK for the ones that succeeded.
pub fn write_error_details(n: usize, errors: &[(usize, UpdateError)]) -> Vec<u8> {
    let any = |error: p4::Error| prost_types::Any {
        type_url: p4::ERROR_TYPE_URL.to_string(),
        value: error.encode_to_vec(),
    };
    write_batch::error_details(n, errors, any(p4::Error::default()), |e| {
        any(p4::Error {
            canonical_code: e.code as i32,
            message: e.message.clone(),
            ..Default::default()
        })
    })
}

impl P4RuntimeService {
    /// Write, from the encoded `WriteRequest`: updates are validated and
    /// applied from borrowed views of the request bytes (`super::wire`).
    pub(crate) async fn write_raw(&self, body: Bytes) -> Result<(), Status> {
        let req = wire::parse_write(&body)
            .map_err(|e| Status::invalid_argument(format!("WriteRequest: {e}")))?;
        let dev = self.registry.device(req.device_id)?;
        dev.counters.write_rpcs.fetch_add(1, Ordering::Relaxed);
        if req.atomicity != Atomicity::ContinueOnError as i32 {
            return Err(Status::unimplemented(
                "only CONTINUE_ON_ERROR atomicity is supported",
            ));
        }
        check_primary(dev, req.role, req.election_id)?;
        let fault = crate::faults::before_write(dev).await?;
        let n = req.updates.len();
        let mut errors: Vec<(usize, UpdateError)> = Vec::new();
        let mut applied = Tally::default();
        let timed = {
            let mut state = dev.p4runtime.pipeline.lock().expect("pipeline lock");
            let pipeline = state.pipeline.as_mut().ok_or_else(|| dev.no_pipeline())?;
            let mut key = Vec::with_capacity(64);
            let mut scratch = wire::Scratch::default();
            for (i, u) in req.updates.iter().enumerate() {
                if let Some(e) = fault.and_then(|f| f.update_error(i)) {
                    errors.push((i, e));
                    continue;
                }
                match pipeline.apply(u, &mut key, &mut scratch) {
                    Ok(Type::Insert) => applied.inserts += 1,
                    Ok(Type::Modify) => applied.modifies += 1,
                    Ok(_) => applied.deletes += 1,
                    Err(e) => errors.push((i, e)),
                }
            }
            pipeline.has_timed_work()
        };
        if timed {
            super::notifier::wake(dev);
        }
        write_batch::finish(dev, self.registry.profile, n, applied, &errors, || {
            write_error_details(n, &errors)
        })
        .await
    }

    /// Read, as encoded `ReadResponse`s of up to `read_chunk` entities:
    /// stored entries are copied out as they are, not re-encoded.
    pub(crate) fn read_raw(&self, req: &p4::ReadRequest) -> Result<Vec<Bytes>, Status> {
        let dev = self.registry.device(req.device_id)?;
        dev.counters.read_rpcs.fetch_add(1, Ordering::Relaxed);
        let chunk = self.registry.read_chunk.max(1);
        let mut responses: Vec<Bytes> = Vec::new();
        let mut current: Vec<u8> = Vec::new();
        let mut in_current = 0usize;
        let mut total = 0u64;
        {
            let state = dev.p4runtime.pipeline.lock().expect("pipeline lock");
            let pipeline = state.pipeline.as_ref().ok_or_else(|| dev.no_pipeline())?;
            for ent in &req.entities {
                match &ent.entity {
                    Some(p4::entity::Entity::TableEntry(filter)) => {
                        pipeline
                            .read_table_entries(filter, &mut |te| {
                                total += 1;
                                wire::push_read_entity(&mut current, te);
                                in_current += 1;
                                if in_current >= chunk {
                                    responses.push(std::mem::take(&mut current).into());
                                    in_current = 0;
                                }
                            })
                            .map_err(Status::from)?;
                    }
                    Some(_)
                        if pipeline.read_groups_entity(ent, &mut |e| {
                            total += 1;
                            crate::wire::put_bytes(&mut current, 1, e);
                            in_current += 1;
                            if in_current >= chunk {
                                responses.push(std::mem::take(&mut current).into());
                                in_current = 0;
                            }
                        })? => {}
                    Some(other) => {
                        let mut push = |e| {
                            total += 1;
                            super::resources::push_entity(&mut current, e);
                            in_current += 1;
                            if in_current >= chunk {
                                responses.push(std::mem::take(&mut current).into());
                                in_current = 0;
                            }
                        };
                        pipeline
                            .read_resource(other, &mut push)
                            .unwrap_or_else(|| {
                                Err(crate::update_error::err(
                                    tonic::Code::Unimplemented,
                                    "this entity kind cannot be read from this emulator",
                                ))
                            })
                            .map_err(Status::from)?;
                    }
                    None => return Err(Status::invalid_argument("entity is empty")),
                }
            }
        }
        if in_current > 0 || responses.is_empty() {
            responses.push(current.into());
        }
        dev.counters
            .entities_read
            .fetch_add(total, Ordering::Relaxed);
        Ok(responses)
    }
}

impl crate::grpc::WireMethods for P4RuntimeService {
    const WRITE: &'static str = "/p4.v1.P4Runtime/Write";
    const READ: &'static str = "/p4.v1.P4Runtime/Read";
    type ReadRequest = p4::ReadRequest;

    fn write(&self, body: Bytes) -> impl Future<Output = Result<(), Status>> + Send {
        self.write_raw(body)
    }

    fn read(&self, req: &p4::ReadRequest) -> Result<Vec<Bytes>, Status> {
        self.read_raw(req)
    }

    fn read_stall(&self, req: &p4::ReadRequest) -> Option<std::time::Duration> {
        self.registry.get(req.device_id)?.faults.on_read()
    }
}

/// `p4.v1.P4Runtime` as served: Write and Read on the wire path, the other
/// methods through the generated server.
pub type P4RuntimeGrpc =
    crate::grpc::WireServer<P4RuntimeService, P4RuntimeServer<P4RuntimeService>>;

#[tonic::async_trait]
impl P4Runtime for P4RuntimeService {
    async fn write(
        &self,
        request: Request<p4::WriteRequest>,
    ) -> Result<Response<p4::WriteResponse>, Status> {
        // Served by the wire path (`P4RuntimeGrpc`); this is for callers of
        // the generated trait.
        self.write_raw(request.into_inner().encode_to_vec().into())
            .await?;
        Ok(Response::new(p4::WriteResponse {}))
    }

    type ReadStream = BoxStream<p4::ReadResponse>;

    async fn read(
        &self,
        request: Request<p4::ReadRequest>,
    ) -> Result<Response<Self::ReadStream>, Status> {
        let chunks = self.read_raw(&request.into_inner())?;
        let responses: Vec<Result<p4::ReadResponse, Status>> = chunks
            .iter()
            .map(|c| {
                p4::ReadResponse::decode(c.as_ref()).map_err(|e| Status::internal(e.to_string()))
            })
            .collect();
        Ok(Response::new(Box::pin(tokio_stream::iter(responses))))
    }

    async fn set_forwarding_pipeline_config(
        &self,
        request: Request<p4::SetForwardingPipelineConfigRequest>,
    ) -> Result<Response<p4::SetForwardingPipelineConfigResponse>, Status> {
        let req = request.into_inner();
        let dev = self.registry.device(req.device_id)?;
        dev.counters
            .set_pipeline_rpcs
            .fetch_add(1, Ordering::Relaxed);
        dev.check_pipeline_settable()?;
        check_primary(dev, &req.role, req.election_id.as_ref().map(from_uint128))?;
        let action = SetAction::try_from(req.action).unwrap_or(SetAction::Unspecified);
        if dev.dpdk.is_some() {
            let (dev, engines) = (dev.clone(), self.registry.engines.clone());
            tokio::task::spawn_blocking(move || {
                crate::dpdk::set_pipeline(&dev, &engines, action, req.config)
            })
            .await
            .map_err(|e| Status::internal(e.to_string()))??;
            return Ok(Response::new(p4::SetForwardingPipelineConfigResponse {}));
        }
        dev.p4runtime
            .pipeline
            .lock()
            .expect("pipeline lock")
            .set_pipeline(action, req.config)?;
        Ok(Response::new(p4::SetForwardingPipelineConfigResponse {}))
    }

    async fn get_forwarding_pipeline_config(
        &self,
        request: Request<p4::GetForwardingPipelineConfigRequest>,
    ) -> Result<Response<p4::GetForwardingPipelineConfigResponse>, Status> {
        let req = request.into_inner();
        let dev = self.registry.device(req.device_id)?;
        dev.counters
            .get_pipeline_rpcs
            .fetch_add(1, Ordering::Relaxed);
        let rt = ResponseType::try_from(req.response_type)
            .map_err(|_| Status::invalid_argument("unknown response_type"))?;
        let state = dev.p4runtime.pipeline.lock().expect("pipeline lock");
        let Some(p) = &state.pipeline else {
            return Ok(Response::new(p4::GetForwardingPipelineConfigResponse {
                config: Some(p4::ForwardingPipelineConfig::default()),
            }));
        };
        let full = &p.config;
        let config = p4::ForwardingPipelineConfig {
            p4info: match rt {
                ResponseType::All | ResponseType::P4infoAndCookie => full.p4info.clone(),
                _ => None,
            },
            p4_device_config: match rt {
                ResponseType::All | ResponseType::DeviceConfigAndCookie => {
                    full.p4_device_config.clone()
                }
                _ => Vec::new(),
            },
            cookie: full.cookie,
        };
        Ok(Response::new(p4::GetForwardingPipelineConfigResponse {
            config: Some(config),
        }))
    }

    type StreamChannelStream = BoxStream<p4::StreamMessageResponse>;

    async fn stream_channel(
        &self,
        request: Request<Streaming<p4::StreamMessageRequest>>,
    ) -> Result<Response<Self::StreamChannelStream>, Status> {
        let registry = self.registry.clone();
        let stream_id = registry.next_stream_id();
        Ok(grpc::session(
            request.into_inner(),
            move |mut inbound, tx| async move {
                // (device, role) this stream is bound to after its first
                // arbitration update.
                let mut bound: Option<(Arc<Device>, String)> = None;
                while let Some(msg) = inbound.next().await {
                    let Ok(msg) = msg else { break };
                    match msg.update {
                        Some(p4::stream_message_request::Update::Arbitration(a)) => {
                            let role_name =
                                a.role.as_ref().map(|r| r.name.clone()).unwrap_or_default();
                            let dev = match registry.device(a.device_id) {
                                Ok(d) => d.clone(),
                                Err(e) => {
                                    let _ = tx.send(Err(e));
                                    break;
                                }
                            };
                            if let Some((d, r)) = &bound
                                && (d.id != dev.id || *r != role_name)
                            {
                                let _ = tx.send(Err(Status::failed_precondition(
                                    "a stream cannot change its device id or role",
                                )));
                                break;
                            }
                            if bound.is_none() {
                                dev.counters.stream_channels.fetch_add(1, Ordering::Relaxed);
                            }
                            let eid = a.election_id.as_ref().map(from_uint128);
                            let res = dev
                                .p4runtime
                                .arbitration
                                .lock()
                                .expect("arbitration lock")
                                .arbitrate(dev.id, stream_id, a.role, eid, &tx);
                            bound = Some((dev, role_name));
                            if let Err(e) = res {
                                let _ = tx.send(Err(e));
                                break;
                            }
                        }
                        Some(_) if bound.is_none() => {
                            let _ = tx.send(Err(Status::failed_precondition(
                                "send a MasterArbitrationUpdate first",
                            )));
                            break;
                        }
                        Some(p4::stream_message_request::Update::DigestAck(ack)) => {
                            let dev = &bound.as_ref().expect("bound").0;
                            let mut state = dev.p4runtime.pipeline.lock().expect("pipeline lock");
                            // An ack of nothing outstanding (late, repeated)
                            // is ignored, as the spec's acks carry no answer.
                            if let Some(p) = state.pipeline.as_mut()
                                && p.digests.ack(ack.digest_id, ack.list_id)
                            {
                                dev.counters.digest_acks.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                        // Packet-out: the frame model takes frames from
                        // `Emulator::receive_frames`, not from controllers.
                        _ => {}
                    }
                }
                if let Some((dev, role)) = bound {
                    dev.p4runtime
                        .arbitration
                        .lock()
                        .expect("arbitration lock")
                        .remove(dev.id, &role, stream_id);
                }
            },
        ))
    }

    async fn capabilities(
        &self,
        _request: Request<p4::CapabilitiesRequest>,
    ) -> Result<Response<p4::CapabilitiesResponse>, Status> {
        Ok(Response::new(p4::CapabilitiesResponse {
            p4runtime_api_version: P4RUNTIME_API_VERSION.to_string(),
        }))
    }
}
