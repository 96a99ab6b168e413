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

use std::collections::HashMap;
use std::sync::Mutex;

/// Per object (`namespace/name`): the versions the last write replaced,
/// and the status it wrote.
pub struct Written<S> {
    by_key: Mutex<HashMap<String, (Vec<String>, S)>>,
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
    /// reconcile started from, and those of its own earlier writes).
    pub fn remember(&self, key: &str, replaced: Vec<String>, status: S) {
        self.lock().insert(key.to_string(), (replaced, status));
    }

    /// The status this process wrote for `key` when the object at hand is
    /// still at a version that write replaced (its status is stale).
    pub fn over(&self, key: &str, resource_version: &str) -> Option<S> {
        self.lock()
            .get(key)
            .filter(|(replaced, _)| replaced.iter().any(|rv| rv == resource_version))
            .map(|(_, st)| st.clone())
    }

    /// `key` is gone.
    pub fn forget(&self, key: &str) {
        self.lock().remove(key);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (Vec<String>, S)>> {
        self.by_key.lock().unwrap_or_else(|e| e.into_inner())
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
        w.remember("ns/s", vec!["10".into(), "11".into()], 3);
        assert_eq!(w.over("ns/s", "10"), Some(3));
        assert_eq!(w.over("ns/s", "11"), Some(3));
        // The cache has caught up (or someone else wrote): trust it.
        assert_eq!(w.over("ns/s", "12"), None);
        assert_eq!(w.over("ns/other", "10"), None);
        w.forget("ns/s");
        assert_eq!(w.over("ns/s", "10"), None);
    }
}
