//! Per-device counters (bumped by every front end) and the snapshot the
//! stats side channel serves.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::Serialize;

use crate::Emulator;
use crate::device::Device;

/// Monotonic counters of one device.
#[derive(Default)]
pub(crate) struct Counters {
    pub write_rpcs: AtomicU64,
    pub read_rpcs: AtomicU64,
    pub set_pipeline_rpcs: AtomicU64,
    pub get_pipeline_rpcs: AtomicU64,
    pub stream_channels: AtomicU64,
    pub inserts: AtomicU64,
    pub modifies: AtomicU64,
    pub deletes: AtomicU64,
    pub failed_updates: AtomicU64,
    pub entities_read: AtomicU64,
    pub drift_deletes: AtomicU64,
    pub refused_writes: AtomicU64,
    pub frames: AtomicU64,
    pub digest_lists: AtomicU64,
    pub digest_messages: AtomicU64,
    pub digest_lists_undelivered: AtomicU64,
    pub digest_acks: AtomicU64,
    pub idle_notifications: AtomicU64,
    pub idle_entries_notified: AtomicU64,
}

/// Snapshot of a device's counters and contents (the stats JSON).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct DeviceStats {
    pub device_id: u64,
    /// Successful Write RPCs and failed ones alike.
    pub write_rpcs: u64,
    pub read_rpcs: u64,
    pub set_pipeline_rpcs: u64,
    pub get_pipeline_rpcs: u64,
    pub stream_channels: u64,
    /// Successful updates by type.
    pub inserts: u64,
    pub modifies: u64,
    pub deletes: u64,
    /// Updates refused with a per-update error.
    pub failed_updates: u64,
    pub entities_read: u64,
    /// Entries removed through the drift helpers.
    pub drift_deletes: u64,
    /// Write-like P4Runtime calls refused PERMISSION_DENIED because the
    /// caller was not the primary.
    #[serde(default)]
    pub refused_writes: u64,
    pub pipeline_set: bool,
    /// Cookie of the committed pipeline config, if any.
    pub cookie: Option<u64>,
    /// Entries installed now, over all tables.
    pub entries: u64,
    /// Entries installed now per table id (as a decimal string).
    pub tables: std::collections::BTreeMap<String, u64>,
    /// Current primary election id (decimal u128) per role ("" = default role).
    pub primaries: HashMap<String, String>,
    /// BFRT programs loaded (their tables count in `entries` and appear in
    /// `tables` under their bfrt.json names).
    #[serde(default)]
    pub bfrt_programs: Vec<String>,
    /// P4Runtime entries inserted per table (by P4Info name) since the
    /// table was created: a table kept by RECONCILE_AND_COMMIT keeps its
    /// count, so an update that re-inserted nothing leaves it as it was.
    #[serde(default)]
    pub table_inserts: std::collections::BTreeMap<String, u64>,
    /// What the last RECONCILE_AND_COMMIT kept and dropped.
    #[serde(default)]
    pub last_reconcile: Option<crate::Reconciled>,
    /// Frames run through the L2 frame model (`Emulator::receive_frames`).
    #[serde(default)]
    pub frames: u64,
    /// DigestLists sent to the primary, and the digest messages in them.
    #[serde(default)]
    pub digest_lists: u64,
    #[serde(default)]
    pub digest_messages: u64,
    /// DigestLists due while no controller was primary (not sent; their
    /// data may be sent again after the ack timeout).
    #[serde(default)]
    pub digest_lists_undelivered: u64,
    /// DigestListAcks that matched an outstanding list.
    #[serde(default)]
    pub digest_acks: u64,
    /// IdleTimeoutNotifications sent, and the entries in them.
    #[serde(default)]
    pub idle_notifications: u64,
    #[serde(default)]
    pub idle_entries_notified: u64,
}

impl Device {
    pub fn stats(&self) -> DeviceStats {
        let c = &self.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let mut s = DeviceStats {
            device_id: self.id,
            write_rpcs: get(&c.write_rpcs),
            read_rpcs: get(&c.read_rpcs),
            set_pipeline_rpcs: get(&c.set_pipeline_rpcs),
            get_pipeline_rpcs: get(&c.get_pipeline_rpcs),
            stream_channels: get(&c.stream_channels),
            inserts: get(&c.inserts),
            modifies: get(&c.modifies),
            deletes: get(&c.deletes),
            failed_updates: get(&c.failed_updates),
            entities_read: get(&c.entities_read),
            drift_deletes: get(&c.drift_deletes),
            refused_writes: get(&c.refused_writes),
            frames: get(&c.frames),
            digest_lists: get(&c.digest_lists),
            digest_messages: get(&c.digest_messages),
            digest_lists_undelivered: get(&c.digest_lists_undelivered),
            digest_acks: get(&c.digest_acks),
            idle_notifications: get(&c.idle_notifications),
            idle_entries_notified: get(&c.idle_entries_notified),
            primaries: self
                .p4runtime
                .arbitration
                .lock()
                .expect("arbitration lock")
                .primaries(),
            ..Default::default()
        };
        let state = self.p4runtime.pipeline.lock().expect("pipeline lock");
        if let Some(p) = &state.pipeline {
            s.pipeline_set = true;
            s.cookie = p.config.cookie.as_ref().map(|c| c.cookie);
            for t in p.table_views() {
                s.entries += t.len() as u64;
                s.tables.insert(t.info.id.to_string(), t.len() as u64);
                s.table_inserts.insert(t.info.name.clone(), t.inserts());
            }
        }
        s.last_reconcile = state.last_reconcile.clone();
        drop(state);
        let bf = self.bfrt.lock().expect("bfrt lock");
        s.bfrt_programs = bf.programs.keys().cloned().collect();
        s.pipeline_set |= !bf.programs.is_empty();
        for (name, n) in bf.table_counts() {
            s.entries += n;
            s.tables.insert(name, n);
        }
        s
    }
}

/// Calls per gRPC method (`/p4.v1.P4Runtime/Capabilities`, …) over every
/// device and port of one emulator, counted as each call arrives: some
/// methods name no device (Capabilities), so they cannot be per device.
#[derive(Default)]
pub(crate) struct RpcCounts(Mutex<BTreeMap<String, u64>>);

impl RpcCounts {
    pub(crate) fn count(&self, path: &str) {
        let mut m = self.0.lock().unwrap_or_else(|e| e.into_inner());
        match m.get_mut(path) {
            Some(n) => *n += 1,
            None => {
                m.insert(path.to_string(), 1);
            }
        }
    }

    pub(crate) fn snapshot(&self) -> BTreeMap<String, u64> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

impl Emulator {
    /// gRPC calls received so far, by method path (every device, both
    /// front ends; a StreamChannel counts once, when it is opened).
    pub fn rpc_counts(&self) -> BTreeMap<String, u64> {
        self.rpcs.snapshot()
    }

    /// Counters and contents of one device.
    pub fn stats(&self, device_id: u64) -> Option<DeviceStats> {
        self.registry.get(device_id).map(|d| d.stats())
    }
}
