//! P4Runtime as infrap4d serves it for a DPDK target: arbitration on the
//! StreamChannel (the open stream with the highest election id of a role
//! is its primary), SetForwardingPipelineConfig with the packed
//! BfPipelineConfig, GetForwardingPipelineConfig, Write with per-update
//! errors in the status details, Read, Capabilities.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use futures::Stream;
use p4fleet_proto::p4runtime::{self as p4, p4_runtime_server::P4Runtime};
use p4fleet_proto::rpc;
use prost::Message;
use tokio::sync::mpsc;
use tokio_stream::StreamExt;
use tokio_stream::wrappers::UnboundedReceiverStream;
use tonic::{Code, Request, Response, Status, Streaming};

use crate::device::{Device, UpdateError};

pub const P4RUNTIME_API_VERSION: &str = "1.4.0";

type Tx = mpsc::UnboundedSender<Result<p4::StreamMessageResponse, Status>>;

struct Stream1 {
    id: u64,
    election_id: Option<u128>,
    role: Option<p4::Role>,
    tx: Tx,
}

/// Streams per role; the primary is the open stream with the highest
/// election id.
#[derive(Default)]
struct Arbitration {
    roles: HashMap<String, Vec<Stream1>>,
}

fn to_u128(v: &p4::Uint128) -> u128 {
    ((v.high as u128) << 64) | v.low as u128
}

fn from_u128(v: u128) -> p4::Uint128 {
    p4::Uint128 {
        high: (v >> 64) as u64,
        low: v as u64,
    }
}

impl Arbitration {
    fn primary(streams: &[Stream1]) -> Option<&Stream1> {
        streams
            .iter()
            .filter(|s| s.election_id.is_some())
            .max_by_key(|s| s.election_id)
    }

    fn primary_election(&self, role: &str) -> Option<u128> {
        self.roles
            .get(role)
            .and_then(|s| Self::primary(s))
            .and_then(|s| s.election_id)
    }

    /// Tells every stream of `role` (or only `only`) where it stands.
    fn notify(&self, device_id: u64, role: &str, only: Option<u64>) {
        let Some(streams) = self.roles.get(role) else {
            return;
        };
        let primary = Self::primary(streams);
        let shown = primary.and_then(|p| p.election_id);
        for s in streams {
            if only.is_some_and(|o| o != s.id) {
                continue;
            }
            let (code, message) = match primary {
                Some(p) if p.id == s.id => (Code::Ok, "you are the primary"),
                Some(_) => (Code::AlreadyExists, "a primary exists; you are a backup"),
                None => (Code::NotFound, "there is no primary"),
            };
            let _ = s.tx.send(Ok(p4::StreamMessageResponse {
                update: Some(p4::stream_message_response::Update::Arbitration(
                    p4::MasterArbitrationUpdate {
                        device_id,
                        role: s.role.clone(),
                        election_id: shown.map(from_u128),
                        status: Some(rpc::Status {
                            code: code as i32,
                            message: message.into(),
                            details: vec![],
                        }),
                    },
                )),
            }));
        }
    }
}

#[derive(Clone)]
pub struct P4RuntimeService {
    device: Arc<Device>,
    arbitration: Arc<Mutex<Arbitration>>,
    next_stream: Arc<AtomicU64>,
}

impl P4RuntimeService {
    pub fn new(device: Arc<Device>) -> P4RuntimeService {
        P4RuntimeService {
            device,
            arbitration: Arc::default(),
            next_stream: Arc::new(AtomicU64::new(1)),
        }
    }

    fn check_primary(&self, role: &str, election_id: Option<&p4::Uint128>) -> Result<(), Status> {
        let primary = self
            .arbitration
            .lock()
            .expect("arbitration lock")
            .primary_election(role);
        match (primary, election_id.map(to_u128)) {
            (Some(p), Some(e)) if p == e => Ok(()),
            (None, _) => Err(Status::permission_denied(format!(
                "no primary controller for role {role:?} of device {}",
                self.device.config.device_id
            ))),
            _ => Err(Status::permission_denied(
                "election id is not the primary's",
            )),
        }
    }
}

/// The google.rpc.Status of a Write with failed updates: one p4.v1.Error
/// per update, in order (code OK for the applied ones).
pub fn write_error_details(results: &[Option<UpdateError>]) -> Vec<u8> {
    let failed = results.iter().filter(|r| r.is_some()).count();
    let details = results
        .iter()
        .map(|r| {
            let e = match r {
                Some(e) => p4::Error {
                    canonical_code: e.code as i32,
                    message: e.message.clone(),
                    ..Default::default()
                },
                None => p4::Error::default(),
            };
            prost_types::Any {
                type_url: p4::ERROR_TYPE_URL.to_string(),
                value: e.encode_to_vec(),
            }
        })
        .collect();
    rpc::Status {
        code: Code::Unknown as i32,
        message: format!("{failed} of {} updates failed", results.len()),
        details,
    }
    .encode_to_vec()
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, Status> + Send + 'static,
) -> Result<T, Status> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Status::internal(e.to_string()))?
}

type BoxStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send + 'static>>;

#[tonic::async_trait]
impl P4Runtime for P4RuntimeService {
    async fn write(
        &self,
        request: Request<p4::WriteRequest>,
    ) -> Result<Response<p4::WriteResponse>, Status> {
        let req = request.into_inner();
        self.check_primary(&req.role, req.election_id.as_ref())?;
        let device = self.device.clone();
        let n = req.updates.len();
        let results = blocking(move || device.write(&req)).await?;
        let failed = results.iter().filter(|r| r.is_some()).count();
        if failed == 0 {
            return Ok(Response::new(p4::WriteResponse {}));
        }
        Err(Status::with_details(
            Code::Unknown,
            format!("{failed} of {n} updates failed"),
            write_error_details(&results).into(),
        ))
    }

    type ReadStream = BoxStream<p4::ReadResponse>;

    async fn read(
        &self,
        request: Request<p4::ReadRequest>,
    ) -> Result<Response<Self::ReadStream>, Status> {
        let req = request.into_inner();
        let device = self.device.clone();
        let entities = blocking(move || device.read(&req)).await?;
        // Answers of at most 10,000 entities each (bounded messages).
        let chunks: Vec<Result<p4::ReadResponse, Status>> = if entities.is_empty() {
            vec![Ok(p4::ReadResponse { entities })]
        } else {
            entities
                .chunks(10_000)
                .map(|c| {
                    Ok(p4::ReadResponse {
                        entities: c.to_vec(),
                    })
                })
                .collect()
        };
        Ok(Response::new(Box::pin(tokio_stream::iter(chunks))))
    }

    async fn set_forwarding_pipeline_config(
        &self,
        request: Request<p4::SetForwardingPipelineConfigRequest>,
    ) -> Result<Response<p4::SetForwardingPipelineConfigResponse>, Status> {
        use p4::set_forwarding_pipeline_config_request::Action;
        let req = request.into_inner();
        self.check_primary(&req.role, req.election_id.as_ref())?;
        let action = Action::try_from(req.action).unwrap_or(Action::Unspecified);
        let device = self.device.clone();
        blocking(move || device.set_pipeline(req.device_id, action, req.config)).await?;
        Ok(Response::new(p4::SetForwardingPipelineConfigResponse {}))
    }

    async fn get_forwarding_pipeline_config(
        &self,
        request: Request<p4::GetForwardingPipelineConfigRequest>,
    ) -> Result<Response<p4::GetForwardingPipelineConfigResponse>, Status> {
        let req = request.into_inner();
        let config = self.device.get_pipeline(req.device_id, req.response_type)?;
        Ok(Response::new(p4::GetForwardingPipelineConfigResponse {
            config: Some(config),
        }))
    }

    type StreamChannelStream = BoxStream<p4::StreamMessageResponse>;

    async fn stream_channel(
        &self,
        request: Request<Streaming<p4::StreamMessageRequest>>,
    ) -> Result<Response<Self::StreamChannelStream>, Status> {
        let mut inbound = request.into_inner();
        let (tx, rx) = mpsc::unbounded_channel();
        let id = self.next_stream.fetch_add(1, Ordering::Relaxed);
        let arbitration = self.arbitration.clone();
        let device_id = self.device.config.device_id;
        tokio::spawn(async move {
            let mut bound: Option<String> = None;
            while let Some(msg) = inbound.next().await {
                let Ok(msg) = msg else { break };
                match msg.update {
                    Some(p4::stream_message_request::Update::Arbitration(a)) => {
                        if a.device_id != device_id {
                            let _ = tx.send(Err(Status::not_found(format!(
                                "unknown device id {} (this agent serves device {device_id})",
                                a.device_id
                            ))));
                            break;
                        }
                        let role = a.role.as_ref().map(|r| r.name.clone()).unwrap_or_default();
                        if bound.as_ref().is_some_and(|r| *r != role) {
                            let _ = tx.send(Err(Status::failed_precondition(
                                "a stream cannot change its role",
                            )));
                            break;
                        }
                        let eid = a.election_id.as_ref().map(to_u128);
                        let mut arb = arbitration.lock().expect("arbitration lock");
                        let streams = arb.roles.entry(role.clone()).or_default();
                        if eid.is_some()
                            && streams.iter().any(|s| s.id != id && s.election_id == eid)
                        {
                            let _ = tx.send(Err(Status::invalid_argument(
                                "election id already used by another controller of this role",
                            )));
                            break;
                        }
                        let before = Arbitration::primary(streams).map(|s| s.id);
                        match streams.iter_mut().find(|s| s.id == id) {
                            Some(s) => {
                                s.election_id = eid;
                                s.role = a.role.clone();
                            }
                            None => streams.push(Stream1 {
                                id,
                                election_id: eid,
                                role: a.role.clone(),
                                tx: tx.clone(),
                            }),
                        }
                        let after = Arbitration::primary(streams).map(|s| s.id);
                        if before != after {
                            arb.notify(device_id, &role, None);
                        } else {
                            arb.notify(device_id, &role, Some(id));
                        }
                        bound = Some(role);
                    }
                    Some(_) if bound.is_none() => {
                        let _ = tx.send(Err(Status::failed_precondition(
                            "send a MasterArbitrationUpdate first",
                        )));
                        break;
                    }
                    // Packet-out and digest acks: the agent has no packet
                    // I/O to the controller and no digests.
                    _ => {}
                }
            }
            if let Some(role) = bound {
                let mut arb = arbitration.lock().expect("arbitration lock");
                if let Some(streams) = arb.roles.get_mut(&role) {
                    let before = Arbitration::primary(streams).map(|s| s.id);
                    streams.retain(|s| s.id != id);
                    let after = Arbitration::primary(streams).map(|s| s.id);
                    if before != after {
                        arb.notify(device_id, &role, None);
                    }
                }
            }
        });
        Ok(Response::new(Box::pin(UnboundedReceiverStream::new(rx))))
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
