//! P4Runtime front end: the `p4.v1.P4Runtime` service and p4fleet's bulk
//! extension over the emulated devices, with semantics taken from the
//! P4Info a client sets.

pub(crate) mod action_profile;
pub(crate) mod arbitration;
pub(crate) mod bulk;
mod counters;
mod device;
pub(crate) mod digests;
pub(crate) mod entry;
pub(crate) mod frames;
pub(crate) mod groups;
pub(crate) mod idle;
mod meters;
pub(crate) mod notifier;
pub(crate) mod pipeline;
mod pipeline_config;
pub(crate) mod pre;
pub(crate) mod reconcile;
mod registers;
pub(crate) mod resources;
pub(crate) mod schema;
pub(crate) mod service;
pub(crate) mod wire;

pub(crate) use device::P4RuntimeDevice;

use p4fleet_proto::bulk::bulk_write_server::BulkWriteServer;
use p4fleet_proto::p4runtime::p4_runtime_server::P4RuntimeServer;

use crate::Emulator;
use bulk::BulkService;
use service::{P4RuntimeGrpc, P4RuntimeService};

impl Emulator {
    /// The tonic service (with raised message size limits), to mount in any
    /// tonic server.
    pub fn service(&self) -> P4RuntimeGrpc {
        let svc = P4RuntimeService {
            registry: self.registry.clone(),
        };
        let generated = P4RuntimeServer::new(svc.clone())
            .max_decoding_message_size(self.max_message_size)
            .max_encoding_message_size(self.max_message_size);
        P4RuntimeGrpc::new(svc, generated, self.max_message_size)
    }

    /// p4fleet's columnar `BulkWrite` service (docs/bulk.md), served next
    /// to P4Runtime.
    pub fn bulk_service(&self) -> BulkWriteServer<BulkService> {
        BulkWriteServer::new(BulkService {
            registry: self.registry.clone(),
        })
        .max_decoding_message_size(self.max_message_size)
        .max_encoding_message_size(self.max_message_size)
    }
}
