//! P4Runtime: one tonic channel per target, one arbitration stream per
//! device id (slot), batched and pipelined writes with per-update results
//! decoded from the `grpc-status-details-bin` trailer, and p4fleet's bulk
//! write where the target serves it.

mod resources;

use std::time::Duration;

mod entities;
pub use entities::EntityError;
mod raw_read;
pub use raw_read::{EntitySum, Malformed, RawEntities};

use p4fleet_model::entries::WriteOp;
use p4fleet_model::entries::wire::{P4rtWriteHeader, p4rt_write_request};
use p4fleet_proto::p4info::P4Info;
use p4fleet_proto::p4runtime::p4_runtime_client::P4RuntimeClient;
use p4fleet_proto::p4runtime::{
    self as p4rt, CapabilitiesRequest, Entity, ForwardingPipelineConfig,
    GetForwardingPipelineConfigRequest, MasterArbitrationUpdate,
    SetForwardingPipelineConfigRequest, StreamMessageRequest, StreamMessageResponse, TableEntry,
    Uint128, entity, forwarding_pipeline_config, get_forwarding_pipeline_config_request,
    set_forwarding_pipeline_config_request, stream_message_request, stream_message_response,
};
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Channel;

use crate::bulk::BulkState;
use crate::channel::{self, MAX_MESSAGE};
use crate::endpoint;
use crate::observe::{Observe, WriteObserver};
use crate::pipeline::{self, UpdateErrors};
use crate::raw::{self, P4RT_WRITE};
use crate::session::{self, Sessions};
use crate::{Capabilities, Error, Refusal, Target, WriteOptions, WriteReport};

mod default_action;
mod hitless;
mod notices;
pub use hitless::PushMode;
pub use notices::Notice;

/// How long a request waits for this client to become primary.
const PRIMARY_WAIT: Duration = Duration::from_secs(10);

/// The arbitration stream of a device id: primary when the device answers
/// with OK and this client's election id.
#[derive(Clone)]
pub(crate) struct Arbitration {
    client: P4RuntimeClient<Channel>,
    election_id: Uint128,
    /// Where digest lists and idle timeout notifications go (`notices`).
    notices: tokio::sync::broadcast::Sender<notices::Notice>,
}

impl session::Stream for Arbitration {
    type Request = StreamMessageRequest;
    type Response = StreamMessageResponse;
    const NAME: &'static str = "arbitration";

    fn hello(&self, device_id: u64) -> StreamMessageRequest {
        StreamMessageRequest {
            update: Some(stream_message_request::Update::Arbitration(
                MasterArbitrationUpdate {
                    device_id,
                    role: None,
                    election_id: Some(self.election_id),
                    status: None,
                },
            )),
        }
    }

    async fn open(
        &self,
        requests: ReceiverStream<StreamMessageRequest>,
    ) -> Result<tonic::Streaming<StreamMessageResponse>, tonic::Status> {
        let mut client = self.client.clone();
        Ok(client.stream_channel(requests).await?.into_inner())
    }

    fn notice(&self, device_id: u64, m: &StreamMessageResponse) -> Option<StreamMessageRequest> {
        let (notice, reply) = notices::notice_of(device_id, m)?;
        // No subscriber is not an error: the ack still goes out.
        let _ = self.notices.send(notice);
        reply
    }

    fn answer(&self, m: StreamMessageResponse) -> Option<Result<(), Refusal>> {
        let Some(stream_message_response::Update::Arbitration(a)) = m.update else {
            return None;
        };
        let primary = a.status.as_ref().is_some_and(|s| s.code == 0)
            && a.election_id == Some(self.election_id);
        Some(if primary {
            Ok(())
        } else {
            Err(Refusal::NotPrimary {
                primary_election_id: a
                    .election_id
                    .map(|e| (u128::from(e.high) << 64) | u128::from(e.low)),
                message: a.status.map(|s| s.message).unwrap_or_default(),
            })
        })
    }

    /// P4Runtime ends the stream of a device id the device does not serve
    /// with NOT_FOUND; an arbitration it will not take (e.g. an election id
    /// another stream already uses) with one of the codes below. Anything
    /// else is a lost connection.
    fn refusal(&self, status: &tonic::Status) -> Option<Refusal> {
        use tonic::Code as C;
        let message = status.message().to_string();
        match status.code() {
            C::NotFound => Some(Refusal::UnknownDevice { message }),
            C::InvalidArgument | C::AlreadyExists | C::PermissionDenied | C::FailedPrecondition => {
                Some(Refusal::Other {
                    code: status.code() as i32,
                    message,
                })
            }
            _ => None,
        }
    }
}

/// A P4Runtime connection to one target.
pub struct P4RuntimeDevice {
    target: Target,
    election_id: Uint128,
    client: P4RuntimeClient<Channel>,
    /// The channel under `client`, for a look at what answered a failed
    /// probe (`crate::endpoint`).
    channel: Channel,
    /// Writes encoded by [`p4fleet_model::entries::wire`], on the same channel.
    raw: tonic::client::Grpc<Channel>,
    pub(crate) sessions: Sessions<Arbitration>,
    /// p4fleet's columnar bulk write, used when the target has it.
    bulk: Box<BulkState>,
    /// Hears of every Write RPC ([`crate::Device::with_write_observer`]).
    pub(crate) observer: Option<WriteObserver>,
    /// Device ids that refused RECONCILE_AND_COMMIT (`hitless`).
    no_reconcile: std::sync::Mutex<std::collections::HashSet<u64>>,
    /// The arbitration streams' notices (`notices`).
    notices: tokio::sync::broadcast::Sender<notices::Notice>,
}

impl P4RuntimeDevice {
    /// A lazy connection (must be called inside a tokio runtime).
    pub(crate) fn connect(target: Target, election_id: u128) -> Result<Self, Error> {
        let channel = channel::connect_lazy(&target)?;
        let bulk = Box::new(BulkState::new(channel.clone(), MAX_MESSAGE));
        let raw = tonic::client::Grpc::new(channel.clone())
            .max_decoding_message_size(MAX_MESSAGE)
            .max_encoding_message_size(MAX_MESSAGE);
        let client = P4RuntimeClient::new(channel.clone())
            .max_decoding_message_size(MAX_MESSAGE)
            .max_encoding_message_size(MAX_MESSAGE);
        let election_id = Uint128 {
            high: (election_id >> 64) as u64,
            low: election_id as u64,
        };
        let (notices, _) = tokio::sync::broadcast::channel(notices::NOTICE_BUFFER);
        let arbitration = Arbitration {
            client: client.clone(),
            election_id,
            notices: notices.clone(),
        };
        Ok(P4RuntimeDevice {
            sessions: Sessions::new(arbitration, &target.endpoint),
            target,
            election_id,
            client,
            channel,
            raw,
            bulk,
            observer: None,
            no_reconcile: Default::default(),
            notices,
        })
    }

    /// Turns the automatic use of p4fleet's bulk write on (the default) or
    /// off, e.g. to measure the standard path.
    pub fn set_bulk_enabled(&self, on: bool) {
        self.bulk.set_enabled(on);
    }

    pub fn target(&self) -> &Target {
        &self.target
    }

    fn rpc_error(&self, rpc: &'static str, device_id: u64, status: tonic::Status) -> Error {
        Error::rpc(&self.target.endpoint, rpc, device_id, status)
    }

    /// The reachability probe: a failure says what answered instead of a
    /// P4Runtime server, when something did (`crate::endpoint`).
    pub async fn capabilities(&self) -> Result<Capabilities, Error> {
        let resp = match self
            .client
            .clone()
            .capabilities(CapabilitiesRequest {})
            .await
        {
            Ok(r) => r,
            Err(s) => {
                let (rpc, id) = ("Capabilities", self.target.device_id);
                return Err(endpoint::call_error(&self.channel, &self.target, rpc, id, s).await);
            }
        };
        Ok(Capabilities {
            protocol: "P4Runtime",
            api_version: resp.into_inner().p4runtime_api_version,
            bulk_write: self.bulk.supported().await,
            pipes: None,
        })
    }

    /// Starts (once) the arbitration of `device_id` and waits until this
    /// client is primary there (a backup may become primary meanwhile).
    async fn wait_primary(&self, device_id: u64) -> Result<Uint128, Error> {
        self.sessions
            .wait(device_id, PRIMARY_WAIT, |s| {
                matches!(s, session::State::Accepted(_))
            })
            .await?;
        Ok(self.election_id)
    }

    pub async fn pipeline_cookie(&self, slot: u32) -> Result<Option<u64>, Error> {
        let device_id = self.target.device_id(slot);
        let req = GetForwardingPipelineConfigRequest {
            device_id,
            response_type: get_forwarding_pipeline_config_request::ResponseType::CookieOnly as i32,
        };
        match self
            .client
            .clone()
            .get_forwarding_pipeline_config(req)
            .await
        {
            Ok(r) => Ok(r
                .into_inner()
                .config
                .and_then(|c| c.cookie)
                .map(|c| c.cookie)),
            // No pipeline loaded yet.
            Err(s)
                if matches!(
                    s.code(),
                    tonic::Code::FailedPrecondition | tonic::Code::NotFound
                ) =>
            {
                Ok(None)
            }
            Err(s) => Err(self.rpc_error("GetForwardingPipelineConfig", device_id, s)),
        }
    }

    pub async fn set_pipeline(
        &self,
        slot: u32,
        p4info: &P4Info,
        device_config: Vec<u8>,
        cookie: u64,
    ) -> Result<bool, Error> {
        let device_id = self.target.device_id(slot);
        self.bulk.set_schema(slot, p4info);
        if self.pipeline_cookie(slot).await? == Some(cookie) {
            return Ok(false);
        }
        let election_id = self.wait_primary(device_id).await?;
        let req = SetForwardingPipelineConfigRequest {
            device_id,
            election_id: Some(election_id),
            action: set_forwarding_pipeline_config_request::Action::VerifyAndCommit as i32,
            config: Some(ForwardingPipelineConfig {
                p4info: Some(p4info.clone()),
                p4_device_config: device_config,
                cookie: Some(forwarding_pipeline_config::Cookie { cookie }),
            }),
            ..Default::default()
        };
        self.client
            .clone()
            .set_forwarding_pipeline_config(req)
            .await
            .map_err(|s| self.rpc_error("SetForwardingPipelineConfig", device_id, s))?;
        Ok(true)
    }

    /// Writes `ops` to `slot`: through p4fleet's bulk write when
    /// [`BulkState::try_write`] applies (one table, one update type), else
    /// as standard Write requests of `batch_size` ops, each encoded straight
    /// from the entries ([`p4fleet_model::entries::wire`]) when the pipeline
    /// pulls it (so encoding the next request overlaps the device's work on
    /// this one) and sent pre-encoded, up to `max_in_flight` at once.
    /// Per-update results as reported by the target, at the ops' indexes.
    pub async fn write_ops(
        &self,
        slot: u32,
        ops: &[WriteOp<'_>],
        opts: WriteOptions,
    ) -> Result<WriteReport, Error> {
        let device_id = self.target.device_id(slot);
        let mut report = WriteReport {
            updates: ops.len(),
            ..Default::default()
        };
        if ops.is_empty() {
            return Ok(report);
        }
        let election_id = self.wait_primary(device_id).await?;
        let observe = Observe {
            observer: self.observer.as_ref(),
            device_id,
            ops,
        };
        if self
            .bulk
            .try_write(&self.client, slot, election_id, observe, opts, &mut report)
            .await
        {
            return Ok(report);
        }
        let header = P4rtWriteHeader {
            device_id,
            election_id: (election_id.high, election_id.low),
            atomicity: opts.atomicity,
        };
        let (grpc, header) = (&self.raw, &header);
        let send = |batch: Vec<WriteOp>| {
            let body = p4rt_write_request(header, &batch).into();
            let mut grpc = grpc.clone();
            async move {
                raw::unary::<p4rt::WriteResponse>(&mut grpc, P4RT_WRITE, body)
                    .await
                    .map(|_| UpdateErrors::new())
            }
        };
        pipeline::write_pipelined(
            ops.iter().copied().enumerate(),
            opts,
            &mut report,
            send,
            decode_update_errors,
            observe,
        )
        .await;
        Ok(report)
    }

    /// Every entry of one table (`table_id` 0: every table) in `slot`, each
    /// handed to `f` as its answer arrives: a large table is never held as
    /// messages all at once.
    pub async fn read_table_each(
        &self,
        slot: u32,
        table_id: u32,
        f: &mut (dyn FnMut(TableEntry) + Send),
    ) -> Result<(), Error> {
        let filter = Entity {
            entity: Some(entity::Entity::TableEntry(TableEntry {
                table_id,
                ..Default::default()
            })),
        };
        self.read_entities_each(slot, vec![filter], &mut |e| {
            if let Some(entity::Entity::TableEntry(t)) = e.entity {
                f(t)
            }
        })
        .await
    }
}

/// Per-update errors of a failed P4Runtime Write (`p4.v1.Error` details).
fn decode_update_errors(status: &tonic::Status, n: usize) -> Option<UpdateErrors> {
    pipeline::decode_update_errors::<p4rt::Error>(status, n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    /// A Status whose details are p4.v1.Errors with these codes (the
    /// Any type is named through the field, so no prost-types dependency).
    fn status_with(codes: &[i32]) -> p4fleet_proto::rpc::Status {
        let mut st = p4fleet_proto::rpc::Status {
            code: 2,
            message: "batch".into(),
            ..Default::default()
        };
        for &code in codes {
            st.details.push(Default::default());
            let any = st.details.last_mut().unwrap();
            any.type_url = p4rt::ERROR_TYPE_URL.into();
            any.value = p4rt::Error {
                canonical_code: code,
                message: format!("m{code}"),
                ..Default::default()
            }
            .encode_to_vec();
        }
        st
    }

    #[test]
    fn decodes_per_update_errors() {
        let st = status_with(&[0, 6, 0, 11]);
        let status =
            tonic::Status::with_details(tonic::Code::Unknown, "batch", st.encode_to_vec().into());
        let got = decode_update_errors(&status, 4).unwrap();
        assert_eq!(got, vec![(1, 6, "m6".into()), (3, 11, "m11".into())]);
        assert!(decode_update_errors(&status, 3).is_none());
        let plain = tonic::Status::unavailable("down");
        assert!(decode_update_errors(&plain, 3).is_none());
    }
}
