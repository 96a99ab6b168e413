//! The data plane's view of the P4Runtime table store: a
//! [`TableSource`] over one device's committed pipeline, so that what
//! P4Runtime Writes (and the drift helpers) install is what the data plane
//! forwards with.
//!
//! Versions are read without the device's lock (each table's counter is
//! bumped under it, see `p4runtime::pipeline`); a snapshot takes the lock
//! and decodes the stored canonical entries.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use p4fleet_proto::p4runtime as p4;
use prost::Message;

use crate::dataplane::hits::DirectCounters;
use crate::dataplane::{ActionCall, SnapshotEntry, TableSnapshot, TableSource};
use crate::device::Device;

/// One committed pipeline's tables, as a data plane follows them.
pub(crate) struct P4RuntimeTables {
    device: Weak<Device>,
    /// The pipeline this source belongs to (a later commit makes a new
    /// one, and a new data plane).
    generation: u64,
    versions: HashMap<u32, Arc<AtomicU64>>,
}

impl P4RuntimeTables {
    /// The tables of `dev`'s current pipeline; `None` without one.
    pub fn current(dev: &Arc<Device>) -> Option<P4RuntimeTables> {
        let state = dev.p4runtime.pipeline.lock().expect("pipeline lock");
        let p = state.pipeline.as_ref()?;
        Some(P4RuntimeTables {
            device: Arc::downgrade(dev),
            generation: p.generation,
            versions: p
                .table_views()
                .map(|t| (t.info.id, t.version_counter()))
                .collect(),
        })
    }
}

impl TableSource for P4RuntimeTables {
    fn version(&self, table_id: u32) -> u64 {
        self.versions
            .get(&table_id)
            .map_or(0, |v| v.load(Ordering::Acquire))
    }

    fn snapshot(&self, table_id: u32) -> TableSnapshot {
        let version = self.version(table_id);
        let Some(dev) = self.device.upgrade() else {
            return TableSnapshot {
                version,
                ..TableSnapshot::default()
            };
        };
        let state = dev.p4runtime.pipeline.lock().expect("pipeline lock");
        let pipeline = state
            .pipeline
            .as_ref()
            .filter(|p| p.generation == self.generation);
        // Another pipeline was committed: this source's data plane is
        // being replaced; it keeps what it has.
        let Some((p, table)) = pipeline.and_then(|p| Some((p, p.table(table_id)?))) else {
            return TableSnapshot {
                version,
                ..TableSnapshot::default()
            };
        };
        // Under the lock, so the version and the entries agree.
        let version = self.version(table_id);
        let mut counters = Vec::new();
        let entries = table
            .entries()
            .filter_map(|(key, raw)| {
                let te = p4::TableEntry::decode(raw).ok()?;
                let entry = SnapshotEntry::from_p4runtime(&te)?;
                counters.push(p.resources.direct_counter(table_id, key));
                Some(entry)
            })
            .collect();
        let counters = DirectCounters(if counters.iter().all(Option::is_none) {
            Vec::new()
        } else {
            counters
        });
        // The program's own default until a controller changes it (the
        // initial default comes from the P4Info, the data plane's from
        // the .spec).
        let default_action = table
            .default_action()
            .filter(|a| Some(*a) != table.info.initial_default.as_ref())
            .map(|a| ActionCall {
                action_id: a.action_id,
                params: a.params.iter().map(|p| p.value.clone()).collect(),
            });
        TableSnapshot {
            version,
            entries,
            default_action,
            counters,
        }
    }
}
