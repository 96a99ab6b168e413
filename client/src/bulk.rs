//! p4fleet's columnar bulk write (`p4fleet.bulk.v1.BulkWrite`, docs/bulk.md)
//! on P4Runtime targets that advertise it; the columns are
//! [`p4fleet_model::bulk`]'s.
//!
//! [`P4RuntimeDevice::write_ops`](crate::P4RuntimeDevice::write_ops) hands
//! every write to [`BulkState::try_write`] first. It is used when the
//! target answers `BulkWrite.Capabilities` (asked once per connection;
//! UNIMPLEMENTED = absent), the slot's P4Info is known, the atomicity is
//! CONTINUE_ON_ERROR, and the ops are of one table with one update type that
//! the columns represent exactly. Anything else (or any value the columns
//! could not carry unchanged) goes the standard way, so the per-update
//! results are always the standard path's.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use p4fleet_model::bulk::{self, BulkSchema};
use p4fleet_model::entries::Atomicity;
use p4fleet_proto::bulk::{self as bk, bulk_write_client::BulkWriteClient};
use p4fleet_proto::p4info::P4Info;
use p4fleet_proto::p4runtime::{
    GetForwardingPipelineConfigRequest, Uint128,
    get_forwarding_pipeline_config_request::ResponseType, p4_runtime_client::P4RuntimeClient,
    update::Type,
};
use tonic::transport::Channel;

use crate::observe::Observe;
use crate::{WriteOptions, WriteReport, order, pipeline};

/// Bulk state of one P4Runtime connection.
pub(crate) struct BulkState {
    client: BulkWriteClient<Channel>,
    enabled: AtomicBool,
    /// Whether the target serves BulkWrite: asked once, kept once known.
    supported: tokio::sync::Mutex<Option<bool>>,
    /// Column widths per slot, from the P4Info pushed or read back.
    schemas: Mutex<HashMap<u32, Arc<BulkSchema>>>,
}

impl BulkState {
    pub(crate) fn new(channel: Channel, max_message: usize) -> BulkState {
        BulkState {
            client: BulkWriteClient::new(channel)
                .max_decoding_message_size(max_message)
                .max_encoding_message_size(max_message),
            enabled: AtomicBool::new(true),
            supported: tokio::sync::Mutex::new(None),
            schemas: Mutex::new(HashMap::new()),
        }
    }

    pub(crate) fn set_enabled(&self, on: bool) {
        self.enabled.store(on, Ordering::Relaxed);
    }

    pub(crate) fn enabled(&self) -> bool {
        self.enabled.load(Ordering::Relaxed)
    }

    /// Whether the target advertises BulkWrite (asked on first use; a
    /// transient failure is asked again next time).
    pub(crate) async fn supported(&self) -> bool {
        let mut s = self.supported.lock().await;
        if let Some(known) = *s {
            return known;
        }
        match self
            .client
            .clone()
            .capabilities(bk::BulkCapabilitiesRequest {})
            .await
        {
            Ok(_) => {
                *s = Some(true);
                true
            }
            Err(st) if st.code() == tonic::Code::Unimplemented => {
                *s = Some(false);
                false
            }
            Err(st) => {
                tracing::debug!(status = %st, "BulkWrite.Capabilities failed; asking again later");
                false
            }
        }
    }

    /// Records the P4Info of a slot (on every set_pipeline).
    pub(crate) fn set_schema(&self, slot: u32, p4info: &P4Info) {
        let s = Arc::new(BulkSchema::from_p4info(p4info));
        self.schemas
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(slot, s);
    }

    /// The slot's column widths, reading its P4Info back once if this
    /// connection did not push it.
    async fn schema(
        &self,
        slot: u32,
        device_id: u64,
        p4: &P4RuntimeClient<Channel>,
    ) -> Option<Arc<BulkSchema>> {
        if let Some(s) = self
            .schemas
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&slot)
        {
            return Some(s.clone());
        }
        let resp = p4
            .clone()
            .get_forwarding_pipeline_config(GetForwardingPipelineConfigRequest {
                device_id,
                response_type: ResponseType::P4infoAndCookie as i32,
            })
            .await
            .ok()?;
        let info = resp.into_inner().config?.p4info?;
        self.set_schema(slot, &info);
        self.schemas
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&slot)
            .cloned()
    }

    /// Writes `ops` with BulkWrite when it applies (see the module docs)
    /// and returns true; false means nothing was sent and the caller takes
    /// the standard path.
    pub(crate) async fn try_write(
        &self,
        p4: &P4RuntimeClient<Channel>,
        slot: u32,
        election_id: Uint128,
        observe: Observe<'_>,
        opts: WriteOptions,
        report: &mut WriteReport,
    ) -> bool {
        let (device_id, ops) = (observe.device_id, observe.ops);
        if !self.enabled() || opts.atomicity != Atomicity::ContinueOnError {
            return false;
        }
        let Some((table_id, ty)) = bulk::single_table(ops) else {
            return false;
        };
        if ty == Type::Unspecified || !self.supported().await {
            return false;
        }
        let Some(schema) = self.schema(slot, device_id, p4).await else {
            return false;
        };
        let batch = opts.batch_size.max(1);
        // Encode every request up front: one that cannot be carried exactly
        // sends the whole write the standard way.
        let mut reqs = Vec::with_capacity(ops.len().div_ceil(batch));
        for (i, chunk) in ops.chunks(batch).enumerate() {
            let Some(mut r) = bulk::encode(&schema, table_id, ty, chunk) else {
                return false;
            };
            r.device_id = device_id;
            r.election_id = Some(election_id);
            let first = i * batch;
            reqs.push(((first..first + chunk.len()).collect(), r));
        }
        // Same-key order across requests in flight (see `order`).
        let deps = order::batch_dependencies(ops.chunks(batch), opts);
        let client = &self.client;
        let send = |req: bk::BulkWriteRequest| {
            let rows = req.count;
            let mut client = client.clone();
            async move {
                let answer = client.write(req).await?.into_inner();
                answer
                    .errors
                    .into_iter()
                    .map(|e| {
                        // Per-row errors name rows of this request.
                        if e.index >= rows {
                            return Err(tonic::Status::internal(format!(
                                "BulkWrite answer names row {} of {rows}",
                                e.index
                            )));
                        }
                        Ok((e.index as usize, e.code, e.message))
                    })
                    .collect()
            }
        };
        // A failed BulkWrite carries no per-row details: all its rows fail.
        pipeline::run(reqs, deps, opts, report, send, |_, _| None, observe).await;
        true
    }
}
