//! P4Runtime driver: one tonic channel per Switch, one arbitration stream
//! per device id (slot), batched and pipelined writes with per-update
//! results decoded from the `grpc-status-details-bin` trailer.

use std::time::Duration;

use p4fleet_crds::entry_set::Atomicity;
use p4fleet_proto::p4info::P4Info;
use p4fleet_proto::p4runtime::p4_runtime_client::P4RuntimeClient;
use p4fleet_proto::p4runtime::{
    self as p4rt, CapabilitiesRequest, Entity, ForwardingPipelineConfig,
    GetForwardingPipelineConfigRequest, MasterArbitrationUpdate, ReadRequest,
    SetForwardingPipelineConfigRequest, StreamMessageRequest, TableEntry, Uint128, Update,
    WriteRequest, entity, forwarding_pipeline_config, get_forwarding_pipeline_config_request,
    set_forwarding_pipeline_config_request, stream_message_request, stream_message_response,
    write_request,
};
use prost::Message;
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Channel;

use super::channel::{self, BACKOFF_MAX, BACKOFF_MIN, MAX_MESSAGE};
use super::order::OrderKey;
use super::pipeline::{self, UpdateErrors};
use super::raw::{self, P4RT_WRITE};
use super::{Capabilities, DriverError, Target, WriteOptions, WriteReport};
use p4fleet_model::entries::WriteOp;
use p4fleet_model::entries::wire::{P4rtWriteHeader, p4rt_write_request};

/// How long a request waits for this client to become primary.
const PRIMARY_WAIT: Duration = Duration::from_secs(10);

/// Arbitration state of one device id.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Arbitration {
    /// Stream not (yet) established.
    Connecting(String),
    Primary,
    /// Another controller is primary (or no primary and we are not it).
    Backup(String),
}

/// A P4Runtime connection to one Switch.
pub struct P4RuntimeDevice {
    name: String,
    target: Target,
    election_id: Uint128,
    client: P4RuntimeClient<Channel>,
    /// Writes encoded by [`p4fleet_model::entries::wire`], on the same channel.
    raw: tonic::client::Grpc<Channel>,
    sessions: channel::Sessions<Arbitration>,
    /// p4fleet's columnar bulk write, used when the target has it.
    bulk: Box<super::bulk::BulkState>,
}

impl P4RuntimeDevice {
    /// A lazy connection (must be called inside a tokio runtime).
    pub(crate) fn new(
        name: String,
        target: Target,
        election_low: u64,
    ) -> Result<Self, DriverError> {
        let channel = channel::connect_lazy(&target.endpoint)?;
        let bulk = Box::new(super::bulk::BulkState::new(channel.clone(), MAX_MESSAGE));
        let raw = tonic::client::Grpc::new(channel.clone())
            .max_decoding_message_size(MAX_MESSAGE)
            .max_encoding_message_size(MAX_MESSAGE);
        let client = P4RuntimeClient::new(channel)
            .max_decoding_message_size(MAX_MESSAGE)
            .max_encoding_message_size(MAX_MESSAGE);
        Ok(P4RuntimeDevice {
            name,
            target,
            election_id: Uint128 {
                high: 0,
                low: election_low,
            },
            client,
            raw,
            sessions: channel::Sessions::new(),
            bulk,
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Turns the automatic use of p4fleet's bulk write on (the default) or
    /// off, e.g. to measure the standard path.
    pub fn set_bulk_enabled(&self, on: bool) {
        self.bulk.set_enabled(on);
    }

    pub(crate) fn target(&self) -> &Target {
        &self.target
    }

    /// Device id of a slot.
    pub fn device_id(&self, slot: u32) -> u64 {
        self.target.device_id + u64::from(slot)
    }

    fn rpc_error(&self, rpc: &'static str, device_id: u64, status: tonic::Status) -> DriverError {
        if status.code() == tonic::Code::Unavailable {
            DriverError::Unreachable {
                endpoint: self.target.endpoint.clone(),
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

    pub async fn capabilities(&self) -> Result<Capabilities, DriverError> {
        let resp = self
            .client
            .clone()
            .capabilities(CapabilitiesRequest {})
            .await
            .map_err(|s| self.rpc_error("Capabilities", self.target.device_id, s))?;
        Ok(Capabilities {
            protocol: "P4Runtime",
            api_version: resp.into_inner().p4runtime_api_version,
            bulk_write: self.bulk.supported().await,
        })
    }

    /// Starts (once) the arbitration task of `device_id` and waits until
    /// this client is primary there.
    async fn wait_primary(&self, device_id: u64) -> Result<Uint128, DriverError> {
        let mut rx = self.sessions.watch(
            device_id,
            Arbitration::Connecting("starting".into()),
            |tx| arbitrate(self.client.clone(), device_id, self.election_id, tx),
        );
        let primary =
            tokio::time::timeout(PRIMARY_WAIT, rx.wait_for(|a| *a == Arbitration::Primary))
                .await
                .is_ok_and(|r| r.is_ok());
        if primary {
            return Ok(self.election_id);
        }
        let last = rx.borrow().clone();
        match last {
            Arbitration::Primary => Ok(self.election_id),
            Arbitration::Connecting(reason) => Err(DriverError::Unreachable {
                endpoint: self.target.endpoint.clone(),
                device_id,
                reason,
            }),
            Arbitration::Backup(reason) => Err(DriverError::NotPrimary { device_id, reason }),
        }
    }

    pub async fn pipeline_cookie(&self, slot: u32) -> Result<Option<u64>, DriverError> {
        let device_id = self.device_id(slot);
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
    ) -> Result<bool, DriverError> {
        let device_id = self.device_id(slot);
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

    /// Writes prost `updates` to `slot` (anything P4Runtime can express),
    /// in batches, pipelined; see [`Self::write_rows`].
    pub async fn write(
        &self,
        slot: u32,
        updates: Vec<Update>,
        opts: WriteOptions,
    ) -> Result<WriteReport, DriverError> {
        self.write_rows(slot, updates, opts, |h, batch| {
            WriteRequest {
                device_id: h.device_id,
                election_id: Some(Uint128 {
                    high: h.election_id.0,
                    low: h.election_id.1,
                }),
                updates: batch,
                atomicity: h.atomicity,
                ..Default::default()
            }
            .encode_to_vec()
        })
        .await
    }

    /// Writes `ops` to `slot`, encoded straight from the entries
    /// ([`p4fleet_model::entries::wire`]); see [`Self::write_rows`].
    pub async fn write_ops<'o>(
        &self,
        slot: u32,
        ops: &[WriteOp<'o>],
        opts: WriteOptions,
    ) -> Result<WriteReport, DriverError> {
        self.write_rows(slot, ops.to_vec(), opts, |h, batch| {
            p4rt_write_request(h, &batch)
        })
        .await
    }

    /// The one write path: through p4fleet's bulk write when
    /// [`super::bulk`] applies (one table, one update type), else as
    /// standard Write requests of `batch_size` rows, each encoded by
    /// `encode` when the pipeline pulls it (so encoding the next request
    /// overlaps the device's work on this one) and sent pre-encoded, up to
    /// `max_in_flight` at once. Per-update results as reported by the
    /// target, at the caller's indexes.
    async fn write_rows<U>(
        &self,
        slot: u32,
        rows: Vec<U>,
        opts: WriteOptions,
        encode: impl Fn(&P4rtWriteHeader, Vec<U>) -> Vec<u8>,
    ) -> Result<WriteReport, DriverError>
    where
        U: super::bulk::Row + OrderKey,
    {
        let device_id = self.device_id(slot);
        let mut report = WriteReport {
            updates: rows.len(),
            ..Default::default()
        };
        if rows.is_empty() {
            return Ok(report);
        }
        let election_id = self.wait_primary(device_id).await?;
        if self
            .bulk
            .try_write(
                &self.client,
                slot,
                device_id,
                election_id,
                &rows,
                opts,
                &mut report,
            )
            .await
        {
            return Ok(report);
        }
        let header = P4rtWriteHeader {
            device_id,
            election_id: (election_id.high, election_id.low),
            atomicity: atomicity(opts.atomicity),
        };
        let (grpc, header, encode) = (&self.raw, &header, &encode);
        let send = |batch: Vec<U>| {
            let body = encode(header, batch).into();
            let mut grpc = grpc.clone();
            async move {
                raw::unary::<p4rt::WriteResponse>(&mut grpc, P4RT_WRITE, body)
                    .await
                    .map(drop)
            }
        };
        pipeline::write_pipelined(
            rows.into_iter().enumerate(),
            opts,
            &mut report,
            send,
            decode_update_errors,
        )
        .await;
        Ok(report)
    }

    /// Writes entries of p4fleet's entry model with one update type (see
    /// [`Self::write_ops`]).
    pub async fn write_entries(
        &self,
        slot: u32,
        ty: p4rt::update::Type,
        entries: &[p4fleet_model::entries::Entry],
        opts: WriteOptions,
    ) -> Result<WriteReport, DriverError> {
        let ops: Vec<WriteOp> = entries.iter().map(|e| WriteOp::new(ty, e)).collect();
        self.write_ops(slot, &ops, opts).await
    }

    pub async fn read_table(
        &self,
        slot: u32,
        table_id: u32,
    ) -> Result<Vec<TableEntry>, DriverError> {
        let device_id = self.device_id(slot);
        let req = ReadRequest {
            device_id,
            entities: vec![Entity {
                entity: Some(entity::Entity::TableEntry(TableEntry {
                    table_id,
                    ..Default::default()
                })),
            }],
            ..Default::default()
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
            out.extend(resp.entities.into_iter().filter_map(|e| match e.entity {
                Some(entity::Entity::TableEntry(t)) => Some(t),
                _ => None,
            }));
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

/// Per-update errors of a failed P4Runtime Write (`p4.v1.Error` details).
pub fn decode_update_errors(status: &tonic::Status, n: usize) -> Option<UpdateErrors> {
    pipeline::decode_update_errors::<p4rt::Error>(status, n)
}

/// Keeps the arbitration stream of one device id open, re-arbitrating with
/// backoff after any disconnect, and publishes the state. Ends when every
/// receiver is gone.
async fn arbitrate(
    client: P4RuntimeClient<Channel>,
    device_id: u64,
    election_id: Uint128,
    state: watch::Sender<Arbitration>,
) {
    let mut backoff = BACKOFF_MIN;
    loop {
        let (tx, rx) = mpsc::channel(4);
        let hello = StreamMessageRequest {
            update: Some(stream_message_request::Update::Arbitration(
                MasterArbitrationUpdate {
                    device_id,
                    role: None,
                    election_id: Some(election_id),
                    status: None,
                },
            )),
        };
        // Cannot fail: the receiver is alive and the buffer empty.
        let _ = tx.send(hello).await;
        let reason = match client.clone().stream_channel(ReceiverStream::new(rx)).await {
            Err(s) => format!("{:?}: {}", s.code(), s.message()),
            Ok(resp) => {
                let mut stream = resp.into_inner();
                loop {
                    match stream.message().await {
                        Ok(Some(m)) => {
                            if let Some(stream_message_response::Update::Arbitration(a)) = m.update
                            {
                                let ok = a.status.as_ref().is_some_and(|s| s.code == 0)
                                    && a.election_id == Some(election_id);
                                let next = if ok {
                                    backoff = BACKOFF_MIN;
                                    Arbitration::Primary
                                } else {
                                    let msg = a.status.map(|s| s.message).unwrap_or_default();
                                    Arbitration::Backup(format!(
                                        "primary has election id {:?}: {msg}",
                                        a.election_id.map(|e| (e.high, e.low))
                                    ))
                                };
                                state.send_replace(next);
                            }
                        }
                        Ok(None) => break "arbitration stream closed".to_string(),
                        Err(s) => break format!("{:?}: {}", s.code(), s.message()),
                    }
                }
            }
        };
        drop(tx);
        state.send_replace(Arbitration::Connecting(reason.clone()));
        if state.is_closed() {
            return;
        }
        tracing::debug!(device_id, %reason, ?backoff, "re-arbitrating");
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(BACKOFF_MAX);
    }
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
