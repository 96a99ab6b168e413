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
//!
//! A record that cannot be used ([`Damage`]: bad gzip, unknown format,
//! content that does not match its digest, a missing chunk, or deleted
//! behind the operator's back) never stops the set and never widens what
//! it deletes: a damaged one is replaced by an empty record, so only
//! device entries equal to desired ones count as the set's (a Merge set
//! leaves every other entry alone; an Exclusive set owns the table
//! anyway), and one deleted while this process runs is rewritten from
//! memory. The set says so ([`damage_condition`], an Event) and the next
//! write stores a good record.

mod damage;
pub mod record;
pub mod store;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use kube::{Client, ResourceExt};
use p4fleet_crds::TableEntrySet;

pub use damage::{Damage, DamageKind, damage_condition, damage_event};
pub use record::Record;
pub use store::{StoreError, Stored, is_record};

/// Each set's stored record as this process last read or wrote it, by
/// `namespace/name`.
#[derive(Default)]
pub struct Records {
    sets: Mutex<HashMap<String, Arc<Stored>>>,
    /// The last damage found per set, and when: shown for
    /// [`DAMAGE_SHOWN`] after, not only by the sync that found it.
    damaged: Mutex<HashMap<String, (Damage, std::time::Instant)>>,
}

/// How long a set keeps its `OwnershipRecord` condition after the damage
/// was found (the record itself is good again after that sync).
pub const DAMAGE_SHOWN: std::time::Duration = std::time::Duration::from_secs(600);

impl Records {
    fn key(set: &TableEntrySet) -> String {
        format!("{}/{}", set.namespace().unwrap_or_default(), set.name_any())
    }

    fn cached(&self, key: &str) -> Option<Arc<Stored>> {
        let g = self.sets.lock().unwrap_or_else(|e| e.into_inner());
        g.get(key).cloned()
    }

    fn keep(&self, key: String, stored: Arc<Stored>) {
        if let Some(d) = &stored.damage {
            let mut g = self.damaged.lock().unwrap_or_else(|e| e.into_inner());
            g.insert(key.clone(), (d.clone(), std::time::Instant::now()));
        }
        let mut g = self.sets.lock().unwrap_or_else(|e| e.into_inner());
        g.insert(key, stored);
    }

    /// The damage last found in the record of the set `key`
    /// (`namespace/name`), if found within [`DAMAGE_SHOWN`].
    pub fn recent_damage(&self, key: &str) -> Option<Damage> {
        let g = self.damaged.lock().unwrap_or_else(|e| e.into_inner());
        g.get(key)
            .filter(|(_, at)| at.elapsed() < DAMAGE_SHOWN)
            .map(|(d, _)| d.clone())
    }

    /// The set's record: from memory, or read from the cluster the first
    /// time this process needs it.
    pub async fn get(
        &self,
        client: &Client,
        set: &TableEntrySet,
    ) -> Result<Arc<Stored>, StoreError> {
        let key = Self::key(set);
        let ns = set.namespace().unwrap_or_default();
        let name = set.name_any();
        if let Some(s) = self.cached(&key) {
            let Some(digest) = s.digest else {
                return Ok(s);
            };
            // What this process wrote must still be there (one metadata
            // read): deleted, it is rewritten from memory; changed by
            // someone else, it is read again.
            match store::head_digest(client, &ns, &name).await? {
                Some(d) if d == hex::encode(digest) => return Ok(s),
                Some(_) => {}
                None => {
                    let damage = Damage {
                        name: store::head_name(&name),
                        kind: DamageKind::Deleted,
                    };
                    let healed = Arc::new(Stored {
                        record: s.record.clone(),
                        digest: None,
                        chunks: 0,
                        damage: Some(damage),
                    });
                    self.keep(key, healed.clone());
                    return Ok(healed);
                }
            }
        }
        let stored = match store::load(client, &ns, &name).await {
            Ok(s) => s,
            Err(StoreError::Damaged { name, reason }) => Stored {
                damage: Some(Damage {
                    name,
                    kind: DamageKind::Unreadable(reason),
                }),
                ..Stored::default()
            },
            Err(e) => return Err(e),
        };
        let stored = Arc::new(stored);
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
        if prev.record == record && prev.damage.is_none() {
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
        drop(g);
        let mut g = self.damaged.lock().unwrap_or_else(|e| e.into_inner());
        g.remove(&Self::key(set));
        Ok(())
    }
}
