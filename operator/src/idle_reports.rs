//! Idle timeout notifications about TableEntrySets' own (static) entries:
//! entries written with an `idleTimeout` carry the set's tag in their
//! metadata, so a notification naming them is matched to the set by that
//! tag. They are reported, never acted on: a static entry is desired state
//! (the set's sync would write it again), so it stays on the device.
//! Learned entries carry another tag (`sync::learned_tag`) and are removed
//! by `crate::learning` instead.
//!
//! Per set: a counter metric, a count and the last few keys for status
//! ([`IdleReports::seen`]), and an aggregated, rate-limited Event
//! ([`IdleWindow`]: the first notification at once, later ones summed at
//! most once per [`EVENT_PERIOD`]; never one per notification).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::ObjectReference;
use p4fleet_proto::p4runtime as p4;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use tokio::time::Instant;

use crate::learning::EVENT_PERIOD;
use crate::metrics::SetLabels;
use crate::status::EventNote;

/// Keys kept per set for status (newest last).
pub const RECENT: usize = 5;

/// What a set's notifications came to since its last Event (pure).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct IdleWindow {
    last: Option<Instant>,
    notifications: u64,
    entries: u64,
}

impl IdleWindow {
    /// One notification naming `entries` of the set's entries.
    pub fn add(&mut self, entries: u64) {
        self.notifications += 1;
        self.entries += entries;
    }

    /// The Event due at `now`: the first at once, later ones once
    /// [`EVENT_PERIOD`] after the last Event, summed; none when nothing
    /// happened.
    pub fn take_due(&mut self, now: Instant) -> Option<EventNote> {
        let due = self
            .last
            .is_none_or(|l| now.saturating_duration_since(l) >= EVENT_PERIOD);
        if self.entries == 0 || !due {
            return None;
        }
        let note = format!(
            "{} entries idle (in {} idle timeout notifications, last {} s); static entries stay on the device",
            self.entries,
            self.notifications,
            EVENT_PERIOD.as_secs()
        );
        *self = IdleWindow {
            last: Some(now),
            ..IdleWindow::default()
        };
        Some(EventNote::normal("EntriesIdle", "IdleTimeout", note))
    }
}

struct Watched {
    /// The set, for its Events and metric labels.
    set: Arc<ObjectReference>,
    window: IdleWindow,
    notified: u64,
    /// The last [`RECENT`] entries notified, as the device sent them.
    recent: VecDeque<p4::TableEntry>,
}

/// The sets whose entries have idle timeouts, by their entries' metadata.
#[derive(Default)]
pub struct IdleReports {
    sets: Mutex<HashMap<Vec<u8>, Watched>>,
    /// Entries of each set named in notifications
    /// (`p4fleet_idle_timeout_set_entries_total`).
    metric: Family<SetLabels, Counter>,
}

impl IdleReports {
    /// Reports counting into `metric`.
    pub fn new(metric: Family<SetLabels, Counter>) -> Self {
        IdleReports {
            sets: Mutex::default(),
            metric,
        }
    }

    /// Reports notifications about entries carrying `metadata` (the set's
    /// tag) for `set` from now on; keeps what was seen already.
    pub fn register(&self, set: &ObjectReference, metadata: Vec<u8>) {
        let mut sets = self.sets.lock().unwrap_or_else(|e| e.into_inner());
        let w = sets.entry(metadata).or_insert_with(|| Watched {
            set: Arc::new(set.clone()),
            window: IdleWindow::default(),
            notified: 0,
            recent: VecDeque::new(),
        });
        w.set = Arc::new(set.clone());
    }

    /// Stops reporting for the set whose entries carry `metadata`.
    pub fn forget(&self, metadata: &[u8]) {
        let mut sets = self.sets.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(w) = sets.remove(metadata) {
            self.metric.remove(&labels(&w.set));
        }
    }

    /// Counts one notification; the Events now due, with their sets.
    pub fn observe(
        &self,
        n: &p4::IdleTimeoutNotification,
        now: Instant,
    ) -> Vec<(Arc<ObjectReference>, EventNote)> {
        let mut sets = self.sets.lock().unwrap_or_else(|e| e.into_inner());
        if sets.is_empty() {
            return Vec::new();
        }
        let mut per_set: HashMap<&[u8], Vec<&p4::TableEntry>> = HashMap::new();
        for e in &n.table_entry {
            if sets.contains_key(e.metadata.as_slice()) {
                per_set.entry(e.metadata.as_slice()).or_default().push(e);
            }
        }
        let mut due = Vec::new();
        for (md, entries) in per_set {
            let Some(w) = sets.get_mut(md) else { continue };
            let k = entries.len() as u64;
            w.notified += k;
            w.window.add(k);
            self.metric.get_or_create(&labels(&w.set)).inc_by(k);
            for e in entries {
                if w.recent.len() == RECENT {
                    w.recent.pop_front();
                }
                w.recent.push_back(e.clone());
            }
            if let Some(ev) = w.window.take_due(now) {
                due.push((w.set.clone(), ev));
            }
        }
        due
    }

    /// The Event of the set with `metadata` that became due since its last
    /// notification (the reconcile flushes what the rate limit held back).
    pub fn take_due(&self, metadata: &[u8], now: Instant) -> Option<EventNote> {
        let mut sets = self.sets.lock().unwrap_or_else(|e| e.into_inner());
        sets.get_mut(metadata)?.window.take_due(now)
    }

    /// Entries notified so far and the last few, for status.
    pub fn seen(&self, metadata: &[u8]) -> Option<(u64, Vec<p4::TableEntry>)> {
        let sets = self.sets.lock().unwrap_or_else(|e| e.into_inner());
        let w = sets.get(metadata)?;
        Some((w.notified, w.recent.iter().cloned().collect()))
    }
}

fn labels(set: &ObjectReference) -> SetLabels {
    SetLabels {
        namespace: set.namespace.clone().unwrap_or_default(),
        name: set.name.clone().unwrap_or_default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn set(name: &str) -> ObjectReference {
        ObjectReference {
            kind: Some("TableEntrySet".into()),
            namespace: Some("ns".into()),
            name: Some(name.into()),
            ..Default::default()
        }
    }

    fn entry(key: u8, metadata: &[u8]) -> p4::TableEntry {
        p4::TableEntry {
            table_id: 1,
            r#match: vec![p4::FieldMatch {
                field_id: 1,
                field_match_type: Some(p4::field_match::FieldMatchType::Exact(
                    p4::field_match::Exact { value: vec![key] },
                )),
            }],
            metadata: metadata.to_vec(),
            ..Default::default()
        }
    }

    fn notification(entries: Vec<p4::TableEntry>) -> p4::IdleTimeoutNotification {
        p4::IdleTimeoutNotification {
            table_entry: entries,
            timestamp: 1,
        }
    }

    #[test]
    fn events_are_aggregated_per_set_and_rate_limited() {
        let r = IdleReports::default();
        r.register(&set("a"), b"A".to_vec());
        r.register(&set("b"), b"B".to_vec());
        let t0 = Instant::now();
        // Entries of other owners (learned, foreign) are not counted.
        let due = r.observe(
            &notification(vec![entry(1, b"A"), entry(2, b"A"), entry(3, b"x")]),
            t0,
        );
        assert_eq!(due.len(), 1, "the first is reported at once");
        assert_eq!(due[0].0.name.as_deref(), Some("a"));
        assert_eq!(
            due[0].1.note,
            "2 entries idle (in 1 idle timeout notifications, last 60 s); static entries stay on the device"
        );
        assert_eq!(due[0].1.reason, "EntriesIdle");
        // Within the period: counted, no Event.
        for i in 0..10 {
            let due = r.observe(
                &notification(vec![entry(i, b"A")]),
                t0 + Duration::from_secs(1),
            );
            assert!(due.is_empty());
        }
        assert_eq!(r.take_due(b"A", t0 + Duration::from_secs(59)), None);
        let ev = r.take_due(b"A", t0 + EVENT_PERIOD).unwrap();
        assert!(
            ev.note.starts_with("10 entries idle (in 10 "),
            "{}",
            ev.note
        );
        assert_eq!(r.take_due(b"A", t0 + EVENT_PERIOD * 3), None, "reset");
        // Status: every entry counted, the last few kept.
        let (notified, recent) = r.seen(b"A").unwrap();
        assert_eq!(notified, 12);
        assert_eq!(recent.len(), RECENT);
        assert_eq!(recent.last().unwrap(), &entry(9, b"A"));
        assert_eq!(r.seen(b"B").unwrap().0, 0);
        let m = r.metric.get_or_create(&labels(&set("a"))).get();
        assert_eq!(m, 12);
        let metric = Family::<SetLabels, Counter>::default();
        let r2 = IdleReports::new(metric.clone());
        r2.register(&set("c"), b"C".to_vec());
        r2.observe(&notification(vec![entry(1, b"C")]), t0);
        let m = metric.get_or_create(&labels(&set("c"))).get();
        assert_eq!(m, 1, "counted into the registered family");
        let m = r.metric.get_or_create(&labels(&set("a"))).get();
        assert_eq!(m, 12);
        r.forget(b"A");
        assert!(r.seen(b"A").is_none());
        assert!(
            r.observe(&notification(vec![entry(1, b"A")]), t0)
                .is_empty(),
            "forgotten"
        );
    }
}
