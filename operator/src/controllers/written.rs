//! Statuses this process wrote, until the cache shows them.
//!
//! A reconcile starts from the cached object. Right after a status write
//! the watch may not have brought that write in yet, and the next reconcile
//! (a trigger that came in meanwhile) would start from the status before
//! it. Status is written whole (server-side apply), so what that reconcile
//! writes would undo the first one's: counters would go back, and what
//! happened only once (a program swap) would be gone for good. So each
//! kind that writes such status remembers, per object, the
//! resourceVersions a write replaced and the status it wrote; a reconcile
//! that starts from one of those versions builds on the written status.
//! A write that built on the last one (the cache still behind it) replaced
//! that one's versions too, and the version it produced: a cache that then
//! shows the older write is just as stale.

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::Mutex;

use kube::core::object::HasStatus;
use kube::{Api, Resource, ResourceExt};
use serde::de::DeserializeOwned;

use super::Error;
use crate::context::Context;
use crate::status::{EventNote, WithConditions};

/// Per object (`namespace/name`): what the last write replaced and wrote.
pub struct Written<S> {
    by_key: Mutex<HashMap<String, Write<S>>>,
}

struct Write<S> {
    replaced: Vec<String>,
    /// The version the write produced (None: nothing was sent).
    produced: Option<String>,
    status: S,
}

impl<S> Default for Written<S> {
    fn default() -> Self {
        Self {
            by_key: Mutex::default(),
        }
    }
}

impl<S: Clone> Written<S> {
    /// A write of `status` replaced each of `replaced` (the version the
    /// reconcile started from, and those of its own earlier writes) and
    /// produced `produced`.
    pub fn remember(
        &self,
        key: &str,
        mut replaced: Vec<String>,
        mut produced: Option<String>,
        status: S,
    ) {
        let mut by_key = self.lock();
        if let Some(last) = by_key.get(key)
            && replaced.iter().any(|rv| last.replaced.contains(rv))
        {
            // Built on the last write: the cache may show it next.
            replaced.extend(last.replaced.iter().cloned());
            replaced.extend(last.produced.iter().cloned());
            produced = produced.or_else(|| last.produced.clone());
        }
        let write = Write {
            replaced,
            produced,
            status,
        };
        by_key.insert(key.to_string(), write);
    }

    /// The status this process wrote for `key` when the object at hand is
    /// still at a version that write replaced (its status is stale).
    pub fn over(&self, key: &str, resource_version: &str) -> Option<S> {
        self.lock()
            .get(key)
            .filter(|w| w.replaced.iter().any(|rv| rv == resource_version))
            .map(|w| w.status.clone())
    }

    /// `key` is gone.
    pub fn forget(&self, key: &str) {
        self.lock().remove(key);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Write<S>>> {
        self.by_key.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// One object's status writes within a reconcile, so that no controller
/// handles resourceVersions: it starts from the status this process last
/// wrote while the cache still shows a version that write replaced
/// ([`Written::over`]), collects the versions its own writes replace (an
/// intermediate mark, then the final status), and remembers the final
/// write for the next reconcile ([`Written::remember`]).
pub struct StatusWriter<'a, K: HasStatus + Clone> {
    memory: &'a Written<K::Status>,
    api: &'a Api<K>,
    key: String,
    /// The object as this reconcile last wrote it, or as cached.
    object: Cow<'a, K>,
    replaced: Vec<String>,
}

impl<'a, K> StatusWriter<'a, K>
where
    K: HasStatus + Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug,
    K::Status: Clone + WithConditions + PartialEq + serde::Serialize,
{
    /// The writer of `cached`'s status (`key`: `namespace/name`).
    pub fn start(
        memory: &'a Written<K::Status>,
        api: &'a Api<K>,
        key: &str,
        cached: &'a K,
    ) -> Self {
        let version = cached.resource_version().unwrap_or_default();
        let object = match memory.over(key, &version) {
            Some(status) => {
                tracing::debug!(object = %key, %version,
                    "the cache has not shown this process's last status write yet; building on that write");
                let mut fresher = cached.clone();
                *fresher.status_mut() = Some(status);
                Cow::Owned(fresher)
            }
            None => Cow::Borrowed(cached),
        };
        StatusWriter {
            memory,
            api,
            key: key.to_string(),
            object,
            replaced: vec![version],
        }
    }

    /// The object with the freshest status this process knows of.
    pub fn object(&self) -> &K {
        &self.object
    }

    /// Writes `new` (settled against the current status) on the way, e.g.
    /// a mark before a long write; what comes after builds on it.
    pub async fn mark(&mut self, ctx: &Context, mut new: K::Status) -> Result<(), Error> {
        let stored = super::write_status_noting(ctx, self.api, &self.object, &mut new, &[]).await?;
        self.replaced
            .extend(stored.and_then(|s| s.resource_version()));
        *self.object.to_mut().status_mut() = Some(new);
        Ok(())
    }

    /// Writes the reconcile's final status (Events for the conditions that
    /// changed, but those `notes` publish) and remembers it. Returns
    /// whether anything was sent.
    pub async fn finish(
        self,
        ctx: &Context,
        new: &mut K::Status,
        notes: &[EventNote],
    ) -> Result<bool, Error> {
        let stored = super::write_status_noting(ctx, self.api, &self.object, new, notes).await?;
        let wrote = stored.is_some();
        let produced = stored.and_then(|s| s.resource_version());
        self.memory
            .remember(&self.key, self.replaced, produced, new.clone());
        Ok(wrote)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_status_written_over_a_version_replaces_only_that_version() {
        let w = Written::<u32>::default();
        assert_eq!(w.over("ns/s", "10"), None);
        // Started from 10, wrote an intermediate status (11), then 3 (12).
        w.remember("ns/s", vec!["10".into(), "11".into()], Some("12".into()), 3);
        assert_eq!(w.over("ns/s", "10"), Some(3));
        assert_eq!(w.over("ns/s", "11"), Some(3));
        // The cache has caught up (or someone else wrote): trust it.
        assert_eq!(w.over("ns/s", "12"), None);
        assert_eq!(w.over("ns/other", "10"), None);
        w.forget("ns/s");
        assert_eq!(w.over("ns/s", "10"), None);
    }

    /// Two reconciles in a row start from a cache behind their writes:
    /// the second write also replaced the first one's version, so a cache
    /// that shows that version next is stale too.
    #[test]
    fn a_write_built_on_the_last_one_replaced_its_versions_too() {
        let w = Written::<u32>::default();
        w.remember("ns/s", vec!["10".into()], Some("12".into()), 1);
        // Started from 10 again (cache behind), built on 1, wrote 2 (13).
        w.remember("ns/s", vec!["10".into()], Some("13".into()), 2);
        assert_eq!(w.over("ns/s", "10"), Some(2));
        assert_eq!(w.over("ns/s", "12"), Some(2), "the first write's version");
        assert_eq!(w.over("ns/s", "13"), None);
        // A reconcile from the cache caught up starts the history anew.
        w.remember("ns/s", vec!["13".into()], Some("14".into()), 3);
        assert_eq!(w.over("ns/s", "12"), None);
        assert_eq!(w.over("ns/s", "13"), Some(3));
        // Nothing sent: the version on the server is still the last one's.
        w.remember("ns/s", vec!["13".into()], None, 3);
        assert_eq!(w.over("ns/s", "14"), Some(3));
    }
}
