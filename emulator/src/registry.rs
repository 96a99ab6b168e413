//! The emulated devices by id, and the settings every front end serves
//! them with. Shared (behind an `Arc`) by the P4Runtime, bulk and BFRT
//! services and the side channel.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tonic::Status;

use crate::dataplane::EngineRegistry;
use crate::device::Device;
use crate::profile::LatencyProfile;

pub(crate) struct Registry {
    devices: HashMap<u64, Arc<Device>>,
    next_stream_id: AtomicU64,
    /// Entities per P4Runtime ReadResponse.
    pub read_chunk: usize,
    /// Added write latency (none by default).
    pub profile: LatencyProfile,
    /// The data planes of the DPDK devices (`crate::dpdk`).
    pub engines: EngineRegistry,
}

impl Registry {
    pub fn new(
        devices: impl IntoIterator<Item = Device>,
        read_chunk: usize,
        profile: LatencyProfile,
    ) -> Registry {
        let devices: HashMap<u64, Arc<Device>> =
            devices.into_iter().map(|d| (d.id, Arc::new(d))).collect();
        let engines = EngineRegistry::new();
        for d in devices.values() {
            engines.add_device(d.id, d.dpdk.is_some());
        }
        Registry {
            devices,
            next_stream_id: AtomicU64::new(1),
            read_chunk,
            profile,
            engines,
        }
    }

    pub fn get(&self, id: u64) -> Option<&Arc<Device>> {
        self.devices.get(&id)
    }

    /// The device, or the NOT_FOUND a gRPC call answers for an unknown id.
    pub fn device(&self, id: u64) -> Result<&Arc<Device>, Status> {
        self.get(id)
            .ok_or_else(|| Status::not_found(format!("unknown device id {id}")))
    }

    /// Device ids served, sorted.
    pub fn ids(&self) -> Vec<u64> {
        let mut ids: Vec<u64> = self.devices.keys().copied().collect();
        ids.sort_unstable();
        ids
    }

    /// A process-wide unique id for a new stream (both front ends).
    pub fn next_stream_id(&self) -> u64 {
        self.next_stream_id.fetch_add(1, Ordering::Relaxed)
    }
}
