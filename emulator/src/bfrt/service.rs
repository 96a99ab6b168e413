//! The `bfrt_proto.BfRuntime` gRPC service over the emulated devices.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use crate::grpc::{self, BoxStream};
use bytes::Bytes;
use futures::StreamExt;
use p4fleet_proto::bfrt::{
    self,
    bf_runtime_server::{BfRuntime, BfRuntimeServer},
    set_forwarding_pipeline_config_request::Action,
    update::Type,
    write_request::Atomicity,
};
use p4fleet_proto::rpc;
use prost::Message;
use tonic::{Code, Request, Response, Status, Streaming};

use super::device::{BfrtDevice, Client};
use super::non_p4_json;
use super::store::{Applied, Program, Scratch, Undo};
use super::wire::{self, EntityView};
use crate::device::Device;
use crate::registry::Registry;
use crate::update_error::{UpdateError, err, malformed};
use crate::wire::{begin, end, put_bytes};
use crate::write_batch::{self, Tally};

/// The tonic service; build with [`crate::Emulator::bfrt_service`].
#[derive(Clone)]
pub struct BfrtService {
    pub(crate) registry: Arc<Registry>,
}

/// The google.rpc.Status bytes of a failed batch: one `bfrt_proto.Error` per
/// update, in order; `ok` is the code of the updates without an error of
/// their own (OK, or ABORTED when the batch was rolled back).
pub fn bfrt_write_error_details(n: usize, errors: &[(usize, UpdateError)], ok: Code) -> Vec<u8> {
    let any = |code: Code, message: String| prost_types::Any {
        type_url: bfrt::ERROR_TYPE_URL.to_string(),
        value: bfrt::Error {
            canonical_code: code as i32,
            message,
            space: "BF-RT".into(),
            code: 0,
        }
        .encode_to_vec(),
    };
    let ok_msg = if ok == Code::Ok {
        String::new()
    } else {
        "not applied: the batch was rolled back".to_string()
    };
    write_batch::error_details(n, errors, any(ok, ok_msg), |e| {
        any(e.code, e.message.clone())
    })
}

/// The program a Write/Read of `client` names (or the one it is bound to).
fn bound_program<'a>(bf: &'a BfrtDevice, client: u32, p4_name: &str) -> Result<&'a str, Status> {
    let Some(c) = bf.clients.get(&client) else {
        return Err(Status::failed_precondition(format!(
            "client {client} is not subscribed (open StreamChannel and Subscribe first)"
        )));
    };
    let Some(bound) = c.bound.as_deref() else {
        return Err(Status::failed_precondition(format!(
            "client {client} is not bound to a program (SetForwardingPipelineConfig BIND)"
        )));
    };
    if !p4_name.is_empty() && p4_name != bound {
        return Err(Status::failed_precondition(format!(
            "client {client} is bound to {bound}, not {p4_name}"
        )));
    }
    Ok(bound)
}

/// The table store holding `table_id`: the program's, else the fixed one.
fn store_for<'a>(
    program: &'a mut Program,
    fixed: &'a mut Program,
    table_id: u32,
) -> Option<(&'a mut Program, bool)> {
    if program.schema.tables.contains_key(&table_id) {
        Some((program, false))
    } else if fixed.schema.tables.contains_key(&table_id) {
        Some((fixed, true))
    } else {
        None
    }
}

impl BfrtService {
    fn device(&self, id: u32) -> Result<&Arc<Device>, Status> {
        self.registry.device(id as u64)
    }

    /// Write, from the encoded `WriteRequest`: updates are validated and
    /// applied from borrowed views of the request bytes.
    pub(crate) async fn write_raw(&self, body: Bytes) -> Result<(), Status> {
        let req = wire::parse_write(&body)
            .map_err(|e| Status::invalid_argument(format!("WriteRequest: {e}")))?;
        let dev = self.device(req.device_id)?;
        dev.counters.write_rpcs.fetch_add(1, Ordering::Relaxed);
        let rollback = match Atomicity::try_from(req.atomicity) {
            Ok(Atomicity::ContinueOnError) => false,
            // The whole batch is applied under one lock, so readers never see
            // part of it: DATAPLANE_ATOMIC is ROLLBACK_ON_ERROR here.
            Ok(Atomicity::RollbackOnError | Atomicity::DataplaneAtomic) => true,
            Err(_) => return Err(Status::invalid_argument("unknown atomicity")),
        };
        let fault = crate::faults::before_write(dev).await?;
        let n = req.updates.len();
        let mut errors: Vec<(usize, UpdateError)> = Vec::new();
        let mut applied = Tally::default();
        {
            let mut guard = dev.bfrt.lock().expect("bfrt lock");
            let bf = &mut *guard;
            let name = bound_program(bf, req.client_id, req.p4_name)?.to_string();
            let program = bf
                .programs
                .get_mut(&name)
                .expect("bound programs are loaded");
            let fixed = &mut bf.fixed;
            let mut scratch = Scratch::default();
            let mut log_p: Vec<Undo> = Vec::new();
            let mut log_f: Vec<Undo> = Vec::new();
            for (i, u) in req.updates.iter().enumerate() {
                let injected = fault.and_then(|f| f.update_error(i));
                let res = match (injected, wire::parse_update(u)) {
                    (Some(e), _) => Err(e),
                    (None, Err(e)) => Err(malformed(e)),
                    (None, Ok((ty, entity))) => {
                        let ty = Type::try_from(ty).unwrap_or(Type::Unspecified);
                        apply_one(
                            program,
                            fixed,
                            ty,
                            entity,
                            rollback,
                            &mut scratch,
                            &mut log_p,
                            &mut log_f,
                        )
                    }
                };
                match res {
                    Ok(Applied::Insert) => applied.inserts += 1,
                    Ok(Applied::Modify) => applied.modifies += 1,
                    Ok(Applied::Delete(k)) => applied.deletes += k,
                    Ok(Applied::Other) => {}
                    Err(e) => {
                        errors.push((i, e));
                        if rollback {
                            break;
                        }
                    }
                }
            }
            if rollback && !errors.is_empty() {
                program.undo(log_p);
                fixed.undo(log_f);
                applied = Tally::default();
            }
        }
        let ok = if rollback { Code::Aborted } else { Code::Ok };
        write_batch::finish(dev, self.registry.profile, n, applied, &errors, || {
            bfrt_write_error_details(n, &errors, ok)
        })
        .await
    }

    /// Read, as one encoded `ReadResponse` (BFRT answers a Read with one
    /// message; clients such as rbfrt read only the first).
    pub(crate) fn read_raw(&self, req: &bfrt::ReadRequest) -> Result<Bytes, Status> {
        let dev = self.device(req.target.map(|t| t.device_id).unwrap_or(0))?;
        dev.counters.read_rpcs.fetch_add(1, Ordering::Relaxed);
        let mut out: Vec<u8> = Vec::new();
        let mut count = 0u64;
        {
            let guard = dev.bfrt.lock().expect("bfrt lock");
            let bf = &*guard;
            let name = bound_program(bf, req.client_id, &req.p4_name)?;
            let program = &bf.programs[name];
            let pick = |id: u32| {
                if program.schema.tables.contains_key(&id) {
                    Ok(program)
                } else if bf.fixed.schema.tables.contains_key(&id) {
                    Ok(&bf.fixed)
                } else {
                    Err(Status::not_found(format!("unknown table id {id}")))
                }
            };
            for ent in &req.entities {
                match &ent.entity {
                    Some(bfrt::entity::Entity::TableEntry(filter)) => {
                        pick(filter.table_id)?
                            .read_entries(filter, &mut |te| {
                                count += 1;
                                // ReadResponse.entities (1) → Entity.table_entry (1).
                                let e = begin(&mut out, 1);
                                put_bytes(&mut out, 1, te);
                                end(&mut out, e);
                            })
                            .map_err(Status::from)?;
                    }
                    Some(bfrt::entity::Entity::TableUsage(u)) => {
                        let usage = pick(u.table_id)?.usage(u.table_id).unwrap_or(0);
                        count += 1;
                        let entity = bfrt::Entity {
                            entity: Some(bfrt::entity::Entity::TableUsage(bfrt::TableUsage {
                                table_id: u.table_id,
                                usage,
                                ..Default::default()
                            })),
                        };
                        put_bytes(&mut out, 1, &entity.encode_to_vec());
                    }
                    Some(_) => {
                        return Err(Status::unimplemented(
                            "only table entries and table usage can be read from this emulator",
                        ));
                    }
                    None => return Err(Status::invalid_argument("entity is empty")),
                }
            }
        }
        dev.counters
            .entities_read
            .fetch_add(count, Ordering::Relaxed);
        Ok(out.into())
    }
}

/// Applies one update's entity to the program's or the fixed tables.
#[allow(clippy::too_many_arguments)]
fn apply_one<'a>(
    program: &mut Program,
    fixed: &mut Program,
    ty: Type,
    entity: EntityView<'a>,
    rollback: bool,
    scratch: &mut Scratch<'a>,
    log_p: &mut Vec<Undo>,
    log_f: &mut Vec<Undo>,
) -> Result<Applied, UpdateError> {
    match entity {
        EntityView::TableEntry(te) => {
            let te = wire::parse_table_entry(te, &mut scratch.keys).map_err(malformed)?;
            let table_id = te.table_id;
            match store_for(program, fixed, table_id) {
                Some((store, is_fixed)) => {
                    let log = match (rollback, is_fixed) {
                        (false, _) => None,
                        (true, false) => Some(log_p),
                        (true, true) => Some(log_f),
                    };
                    store.apply_parsed(ty, te, scratch, log)
                }
                None => Err(err(Code::NotFound, format!("unknown table id {table_id}"))),
            }
        }
        EntityView::TableOperation(table_id) => {
            if store_for(program, fixed, table_id).is_some() {
                // No counters or registers to sync in an emulator.
                Ok(Applied::Other)
            } else {
                Err(err(Code::NotFound, format!("unknown table id {table_id}")))
            }
        }
        EntityView::Other(_) => Err(err(
            Code::Unimplemented,
            "only table entries and table operations can be written to this emulator",
        )),
        EntityView::Missing => Err(err(Code::InvalidArgument, "update has no entity")),
    }
}

impl crate::grpc::WireMethods for BfrtService {
    const WRITE: &'static str = "/bfrt_proto.BfRuntime/Write";
    const READ: &'static str = "/bfrt_proto.BfRuntime/Read";
    type ReadRequest = bfrt::ReadRequest;

    fn write(&self, body: Bytes) -> impl Future<Output = Result<(), Status>> + Send {
        self.write_raw(body)
    }

    fn read(&self, req: &bfrt::ReadRequest) -> Result<Vec<Bytes>, Status> {
        Ok(vec![self.read_raw(req)?])
    }

    fn read_stall(&self, req: &bfrt::ReadRequest) -> Option<std::time::Duration> {
        let id = req.target.map(|t| t.device_id).unwrap_or(0);
        self.registry.get(id as u64)?.faults.on_read()
    }
}

/// `bfrt_proto.BfRuntime` as served: Write and Read on the wire path, the
/// other methods through the generated server.
pub type BfrtGrpc = crate::grpc::WireServer<BfrtService, BfRuntimeServer<BfrtService>>;

#[tonic::async_trait]
impl BfRuntime for BfrtService {
    async fn write(
        &self,
        request: Request<bfrt::WriteRequest>,
    ) -> Result<Response<bfrt::WriteResponse>, Status> {
        // Served by the wire path (`BfrtGrpc`); this is for callers of the
        // generated trait.
        self.write_raw(request.into_inner().encode_to_vec().into())
            .await?;
        Ok(Response::new(bfrt::WriteResponse { status: vec![] }))
    }

    type ReadStream = BoxStream<bfrt::ReadResponse>;

    async fn read(
        &self,
        request: Request<bfrt::ReadRequest>,
    ) -> Result<Response<Self::ReadStream>, Status> {
        let resp = bfrt::ReadResponse::decode(self.read_raw(&request.into_inner())?)
            .map_err(|e| Status::internal(e.to_string()))?;
        Ok(Response::new(Box::pin(tokio_stream::iter([Ok(resp)]))))
    }

    async fn set_forwarding_pipeline_config(
        &self,
        request: Request<bfrt::SetForwardingPipelineConfigRequest>,
    ) -> Result<Response<bfrt::SetForwardingPipelineConfigResponse>, Status> {
        use bfrt::SetForwardingPipelineConfigResponseType as R;
        let req = request.into_inner();
        let dev = self.device(req.device_id)?;
        dev.counters
            .set_pipeline_rpcs
            .fetch_add(1, Ordering::Relaxed);
        let action = Action::try_from(req.action)
            .map_err(|_| Status::invalid_argument(format!("unknown action {}", req.action)))?;
        let mut bf = dev.bfrt.lock().expect("bfrt lock");
        // Loading needs no subscription (clients such as rbfrt load before
        // they subscribe); binding does.
        if action == Action::Bind && !bf.clients.contains_key(&req.client_id) {
            return Err(Status::failed_precondition(format!(
                "client {} is not subscribed (open StreamChannel and Subscribe first)",
                req.client_id
            )));
        }
        let done = |t: R| {
            Ok(Response::new(bfrt::SetForwardingPipelineConfigResponse {
                set_forwarding_pipeline_config_response_type: t as i32,
            }))
        };
        match action {
            Action::Bind => {
                let name = req
                    .config
                    .first()
                    .map(|c| c.p4_name.clone())
                    .unwrap_or_default();
                if !name.is_empty() && !bf.programs.contains_key(&name) {
                    return Err(Status::not_found(format!(
                        "program {name} is not loaded on device {}",
                        req.device_id
                    )));
                }
                // An empty name unbinds.
                let c = bf.clients.get_mut(&req.client_id).expect("checked");
                c.bound = (!name.is_empty()).then_some(name);
                done(R::WarmInitFinished)
            }
            Action::Verify => {
                BfrtDevice::verify(req.config, bf.pipes).map_err(Status::invalid_argument)?;
                done(R::WarmInitFinished)
            }
            Action::VerifyAndWarmInitBegin => {
                let p =
                    BfrtDevice::verify(req.config, bf.pipes).map_err(Status::invalid_argument)?;
                bf.pending = Some(p);
                done(R::WarmInitStarted)
            }
            Action::VerifyAndWarmInitBeginAndEnd => {
                let p =
                    BfrtDevice::verify(req.config, bf.pipes).map_err(Status::invalid_argument)?;
                bf.pending = None;
                bf.load(p, false);
                done(R::WarmInitFinished)
            }
            Action::WarmInitEnd | Action::ReconcileAndWarmInitEnd => {
                let p = bf.pending.take().ok_or_else(|| {
                    Status::failed_precondition(
                        "no warm init in progress (VERIFY_AND_WARM_INIT_BEGIN)",
                    )
                })?;
                bf.load(p, action == Action::ReconcileAndWarmInitEnd);
                done(R::WarmInitFinished)
            }
        }
    }

    async fn get_forwarding_pipeline_config(
        &self,
        request: Request<bfrt::GetForwardingPipelineConfigRequest>,
    ) -> Result<Response<bfrt::GetForwardingPipelineConfigResponse>, Status> {
        let req = request.into_inner();
        let dev = self.device(req.device_id)?;
        dev.counters
            .get_pipeline_rpcs
            .fetch_add(1, Ordering::Relaxed);
        let bf = dev.bfrt.lock().expect("bfrt lock");
        Ok(Response::new(bfrt::GetForwardingPipelineConfigResponse {
            config: bf.programs.values().map(|p| p.config.clone()).collect(),
            non_p4_config: Some(bfrt::NonP4Config {
                bfruntime_info: non_p4_json(bf.pipes).into_bytes(),
            }),
        }))
    }

    type StreamChannelStream = BoxStream<bfrt::StreamMessageResponse>;

    async fn stream_channel(
        &self,
        request: Request<Streaming<bfrt::StreamMessageRequest>>,
    ) -> Result<Response<Self::StreamChannelStream>, Status> {
        let registry = self.registry.clone();
        let stream_id = registry.next_stream_id();
        Ok(grpc::session(
            request.into_inner(),
            move |mut inbound, tx| async move {
                // (device, client id) registered by this stream.
                let mut registered: Vec<(Arc<Device>, u32)> = Vec::new();
                while let Some(msg) = inbound.next().await {
                    let Ok(msg) = msg else { break };
                    let Some(bfrt::stream_message_request::Update::Subscribe(mut sub)) = msg.update
                    else {
                        // Digest acks: there is no data plane producing digests.
                        continue;
                    };
                    let st = |code: Code, message: String| rpc::Status {
                        code: code as i32,
                        message,
                        details: vec![],
                    };
                    let result = match registry.device(sub.device_id as u64) {
                        Err(e) => st(Code::NotFound, e.message().to_string()),
                        Ok(dev) => {
                            let mut bf = dev.bfrt.lock().expect("bfrt lock");
                            match bf.clients.get(&msg.client_id) {
                                Some(c) if c.stream_id != stream_id => st(
                                    Code::AlreadyExists,
                                    format!(
                                        "client id {} is in use on device {}",
                                        msg.client_id, dev.id
                                    ),
                                ),
                                Some(_) => st(Code::Ok, "already subscribed".into()),
                                None => {
                                    bf.clients.insert(
                                        msg.client_id,
                                        Client {
                                            stream_id,
                                            bound: None,
                                        },
                                    );
                                    dev.counters.stream_channels.fetch_add(1, Ordering::Relaxed);
                                    registered.push((dev.clone(), msg.client_id));
                                    st(Code::Ok, "subscribed".into())
                                }
                            }
                        }
                    };
                    sub.status = Some(result);
                    let reply = bfrt::StreamMessageResponse {
                        update: Some(bfrt::stream_message_response::Update::Subscribe(sub)),
                    };
                    if tx.send(Ok(reply)).is_err() {
                        break;
                    }
                }
                for (dev, client) in registered {
                    let mut bf = dev.bfrt.lock().expect("bfrt lock");
                    if bf
                        .clients
                        .get(&client)
                        .is_some_and(|c| c.stream_id == stream_id)
                    {
                        bf.clients.remove(&client);
                    }
                }
            },
        ))
    }
}
