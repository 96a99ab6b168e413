//! Durable ownership for devices that keep no entry metadata (BFRT): the
//! keys each TableEntrySet wrote, per target, kept in the cluster so that
//! an operator that restarts (or a new leader) deletes exactly what the
//! set wrote and no entry of another writer.
//!
//! - [`record`]: the content (pure): keys per target, encoded, gzipped,
//!   content-addressed.
//! - [`store`]: the ConfigMaps holding it (I/O).
//! - [`Records`]: this process's copy of each set's stored record, read
//!   once per set (at its first sync or cleanup) and written through.
//!
//! The sync writes the record *before* device writes that grow what the
//! set owns (the old keys plus those it is about to insert), and shrinks
//! it once the device confirmed the deletes; a crash in between leaves a
//! record that knows every entry the set may have written.

pub mod record;
pub mod store;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use kube::{Client, ResourceExt};
use p4fleet_crds::TableEntrySet;

pub use record::Record;
pub use store::{StoreError, Stored, is_record};

/// Each set's stored record as this process last read or wrote it, by
/// `namespace/name`.
#[derive(Default)]
pub struct Records {
    sets: Mutex<HashMap<String, Arc<Stored>>>,
}

impl Records {
    fn key(set: &TableEntrySet) -> String {
        format!("{}/{}", set.namespace().unwrap_or_default(), set.name_any())
    }

    fn cached(&self, key: &str) -> Option<Arc<Stored>> {
        let g = self.sets.lock().unwrap_or_else(|e| e.into_inner());
        g.get(key).cloned()
    }

    fn keep(&self, key: String, stored: Arc<Stored>) {
        let mut g = self.sets.lock().unwrap_or_else(|e| e.into_inner());
        g.insert(key, stored);
    }

    /// The set's record: from memory, or read from the cluster the first
    /// time this process needs it.
    pub async fn get(
        &self,
        client: &Client,
        set: &TableEntrySet,
    ) -> Result<Arc<Stored>, StoreError> {
        let key = Self::key(set);
        if let Some(s) = self.cached(&key) {
            return Ok(s);
        }
        let ns = set.namespace().unwrap_or_default();
        let stored = Arc::new(store::load(client, &ns, &set.name_any()).await?);
        self.keep(key, stored.clone());
        Ok(stored)
    }

    /// Stores `record` as the set's record (no write when unchanged).
    pub async fn put(
        &self,
        client: &Client,
        set: &TableEntrySet,
        record: Record,
    ) -> Result<Arc<Stored>, StoreError> {
        let prev = self.get(client, set).await?;
        if prev.record == record {
            return Ok(prev);
        }
        let stored = Arc::new(store::save(client, set, &prev, record).await?);
        self.keep(Self::key(set), stored.clone());
        Ok(stored)
    }

    /// Deletes the set's record and forgets it (its entries are gone).
    pub async fn remove(&self, client: &Client, set: &TableEntrySet) -> Result<(), StoreError> {
        let prev = self.get(client, set).await?;
        let ns = set.namespace().unwrap_or_default();
        store::delete(client, &ns, &set.name_any(), &prev).await?;
        let mut g = self.sets.lock().unwrap_or_else(|e| e.into_inner());
        g.remove(&Self::key(set));
        Ok(())
    }
}
