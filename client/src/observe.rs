//! Per-request write observation: a callback the caller gives a
//! [`crate::Device`] ([`crate::Device::with_write_observer`]) is called once
//! per Write (or BulkWrite) RPC, when its answer arrives, with what that
//! request carried and what the device refused. The operator turns it into
//! its metrics; the crate itself stays free of any metrics library.

use std::sync::Arc;
use std::time::Duration;

use p4fleet_model::entries::WriteOp;
use p4fleet_proto::p4runtime::update::Type;

use crate::UpdateFailure;

/// Updates of one request, by type.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UpdateCounts {
    pub insert: u64,
    pub modify: u64,
    pub delete: u64,
}

impl UpdateCounts {
    fn add(&mut self, ty: Type) {
        match ty {
            Type::Insert => self.insert += 1,
            Type::Modify => self.modify += 1,
            Type::Delete => self.delete += 1,
            // Never sent: the model builds no such op.
            Type::Unspecified => {}
        }
    }

    pub fn total(&self) -> u64 {
        self.insert + self.modify + self.delete
    }
}

/// One Write RPC, answered (or failed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteRpc {
    /// The device id (slot) it was sent to.
    pub device_id: u64,
    /// From sending the request to its answer.
    pub latency: Duration,
    /// Updates the request carried.
    pub sent: UpdateCounts,
    /// Updates the device refused (per-update errors, or every update of a
    /// request that failed as a whole).
    pub refused: UpdateCounts,
    /// The gRPC code of a request that failed as a whole (no per-update
    /// details, e.g. UNAVAILABLE); None when the device answered per update.
    pub failed: Option<tonic::Code>,
}

/// Called once per Write RPC; must be cheap (it runs on the write path).
pub type WriteObserver = Arc<dyn Fn(&WriteRpc) + Send + Sync>;

/// What the pipeline needs to describe a request to the observer.
#[derive(Clone, Copy)]
pub(crate) struct Observe<'a> {
    pub observer: Option<&'a WriteObserver>,
    pub device_id: u64,
    /// The caller's ops: request indexes point into them.
    pub ops: &'a [WriteOp<'a>],
}

impl Observe<'_> {
    /// Reports one answered request: its ops (`indexes`), the updates
    /// refused in it and, if it failed as a whole, its code.
    pub(crate) fn answered(
        &self,
        indexes: &[usize],
        latency: Duration,
        refused: &[UpdateFailure],
        failed: Option<tonic::Code>,
    ) {
        let Some(observer) = self.observer else {
            return;
        };
        let mut rpc = WriteRpc {
            device_id: self.device_id,
            latency,
            sent: UpdateCounts::default(),
            refused: UpdateCounts::default(),
            failed,
        };
        for &i in indexes {
            if let Some(op) = self.ops.get(i) {
                rpc.sent.add(op.ty());
            }
        }
        for f in refused {
            if let Some(op) = self.ops.get(f.index) {
                rpc.refused.add(op.ty());
            }
        }
        observer(&rpc);
    }
}
