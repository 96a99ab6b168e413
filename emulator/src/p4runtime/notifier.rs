//! The device's own messages on the StreamChannel: digest lists
//! (`super::digests`) and idle timeout notifications (`super::idle`),
//! sent to the primary controller of the default role when they are due.
//!
//! One ticker task per device, started by the first write or frame that
//! may need it: it sleeps until the next deadline the pipeline reports
//! (or until woken by new work), so an idle device costs nothing and
//! timing follows the configured timeouts, not a fixed poll.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use p4fleet_proto::p4runtime::{self as p4, stream_message_response::Update};
use tokio::sync::Notify;

use crate::device::Device;
use crate::p4runtime::pipeline::Pipeline;
use crate::p4runtime::resources::table_entry;

/// The role whose primary receives the device's messages.
const ROLE: &str = "";

#[derive(Default)]
pub(crate) struct Notifier {
    wake: Arc<Notify>,
    started: AtomicBool,
}

/// Wakes `dev`'s ticker (starting it on the first call from inside a
/// tokio runtime): new work may have moved its next deadline.
pub(crate) fn wake(dev: &Arc<Device>) {
    let n = &dev.p4runtime.notifier;
    if !n.started.swap(true, Ordering::AcqRel) {
        match tokio::runtime::Handle::try_current() {
            Ok(h) => {
                h.spawn(run(Arc::downgrade(dev), n.wake.clone()));
            }
            // Not in a runtime (a synchronous caller): the next call
            // from one starts it.
            Err(_) => n.started.store(false, Ordering::Release),
        }
    }
    n.wake.notify_one();
}

async fn run(dev: Weak<Device>, wake: Arc<Notify>) {
    loop {
        let Some(d) = dev.upgrade() else { return };
        let next = tick(&d, Instant::now());
        drop(d);
        match next {
            Some(t) => {
                tokio::select! {
                    _ = tokio::time::sleep_until(tokio::time::Instant::from_std(t)) => {}
                    _ = wake.notified() => {}
                }
            }
            None => wake.notified().await,
        }
    }
}

/// Sends what is due at `now`; returns the next deadline.
fn tick(dev: &Device, now: Instant) -> Option<Instant> {
    let timestamp = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos().min(i64::MAX as u128) as i64)
        .unwrap_or_default();
    let (due, next) = {
        let mut state = dev.p4runtime.pipeline.lock().expect("pipeline lock");
        let p = state.pipeline.as_mut()?;
        let due = p.due(now, timestamp);
        (due, p.next_deadline())
    };
    if due.lists.is_empty() && due.idle.is_none() {
        return next;
    }
    let tx = dev
        .p4runtime
        .arbitration
        .lock()
        .expect("arbitration lock")
        .primary_tx(ROLE);
    let c = &dev.counters;
    let send = |update: Update| {
        tx.as_ref().is_some_and(|tx| {
            tx.send(Ok(p4::StreamMessageResponse {
                update: Some(update),
            }))
            .is_ok()
        })
    };
    for list in due.lists {
        let n = list.data.len() as u64;
        if send(Update::Digest(list)) {
            c.digest_lists.fetch_add(1, Ordering::Relaxed);
            c.digest_messages.fetch_add(n, Ordering::Relaxed);
        } else {
            c.digest_lists_undelivered.fetch_add(1, Ordering::Relaxed);
        }
    }
    if let Some(idle) = due.idle {
        let n = idle.table_entry.len() as u64;
        if send(Update::IdleTimeoutNotification(idle)) {
            c.idle_notifications.fetch_add(1, Ordering::Relaxed);
            c.idle_entries_notified.fetch_add(n, Ordering::Relaxed);
        }
    }
    next
}

/// What is due at one instant.
pub(crate) struct Due {
    pub lists: Vec<p4::DigestList>,
    /// Every entry that idled out, in one notification.
    pub idle: Option<p4::IdleTimeoutNotification>,
}

impl Pipeline {
    /// Digest lists due and entries idled out at `now` (both marked as
    /// sent).
    pub(crate) fn due(&mut self, now: Instant, timestamp: i64) -> Due {
        let lists = self.digests.due(now, timestamp);
        let mut ids: Vec<u32> = self.tables.keys().copied().collect();
        ids.sort_unstable();
        let mut entries = Vec::new();
        for id in ids {
            let state = self.tables.get_mut(&id).expect("listed");
            if state.idle.is_empty() {
                continue;
            }
            for key in state.idle.expire(now) {
                if let Some(stored) = state.entries.get(key.as_slice()) {
                    entries.push(table_entry(stored));
                }
            }
        }
        Due {
            lists,
            idle: (!entries.is_empty()).then_some(p4::IdleTimeoutNotification {
                table_entry: entries,
                timestamp,
            }),
        }
    }

    /// When [`Pipeline::due`] has something to do next, if ever.
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        let idle = self.tables.values().filter_map(|t| t.idle.next_deadline());
        idle.chain(self.digests.next_deadline()).min()
    }

    /// Whether this pipeline has digests or idle timeout tables (writes to
    /// it may give the ticker work).
    pub(crate) fn has_timed_work(&self) -> bool {
        !self.schema.digests.is_empty() || self.schema.tables.values().any(|t| t.idle_notify)
    }
}
