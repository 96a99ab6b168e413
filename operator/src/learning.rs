//! The learning loop of TableEntrySets with `spec.learn`: one task per
//! set and target listens to its device's notices (the client has acked
//! every digest list already), inserts one entry per digest message
//! (tagged with the set's learned tag, with the rule's idle timeout) and
//! deletes the learned entries an idle timeout notification names.
//!
//! The TableEntrySet reconcile starts, replaces and stops the tasks
//! ([`Learners::ensure`], [`Learners::retain`]); status counts what the
//! devices hold (read back), never what a task believes. Events are
//! aggregated per set by [`Window`]: at most one per [`EVENT_PERIOD`],
//! never one per digest.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use p4fleet_client::{Device, Notice};
use p4fleet_model::learn::LearnRule;
use p4fleet_proto::p4runtime as p4;
use tokio::sync::broadcast::error::RecvError;
use tokio::time::Instant;

use crate::status::{EventNote, Events};

/// At most one learning Event per set in this period.
pub const EVENT_PERIOD: Duration = Duration::from_secs(60);

/// What the learning of one set did since its last Event (pure).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Window {
    last: Option<Instant>,
    lists: u64,
    messages: u64,
    learned: u64,
    aged_out: u64,
    dropped: u64,
}

impl Window {
    pub fn lists(&mut self, lists: u64, messages: u64) {
        self.lists += lists;
        self.messages += messages;
    }

    pub fn learned(&mut self, n: u64) {
        self.learned += n;
    }

    pub fn aged_out(&mut self, n: u64) {
        self.aged_out += n;
    }

    pub fn dropped(&mut self, n: u64) {
        self.dropped += n;
    }

    /// The Event due at `now`: the first thing that happened is reported
    /// at once, later ones once [`EVENT_PERIOD`] after the last Event,
    /// summed. Nothing happened: none.
    pub fn take_due(&mut self, now: Instant) -> Option<EventNote> {
        let quiet = self.lists == 0 && self.aged_out == 0;
        let due = self
            .last
            .is_none_or(|l| now.saturating_duration_since(l) >= EVENT_PERIOD);
        if quiet || !due {
            return None;
        }
        let mut note = format!(
            "{} digest messages in {} lists in the last {} s: {} entries learned, {} aged out",
            self.messages,
            self.lists,
            EVENT_PERIOD.as_secs(),
            self.learned,
            self.aged_out
        );
        let ev = if self.dropped > 0 {
            note.push_str(&format!(", {} dropped at maxLearned", self.dropped));
            EventNote::warning("LearnLimitReached", "Learn", note)
        } else {
            EventNote::normal("Learned", "Learn", note)
        };
        *self = Window {
            last: Some(now),
            ..Window::default()
        };
        Some(ev)
    }
}

/// One target's learning, as the reconcile needs it.
struct Running {
    rule: LearnRule,
    max: u64,
    device: Arc<Device>,
    task: tokio::task::AbortHandle,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The learning of one set: its targets' tasks and their shared Window.
#[derive(Default)]
struct SetLearning {
    targets: HashMap<String, Running>,
    window: Arc<Mutex<Window>>,
    /// Learned entries the tasks removed after their idle timeout.
    aged_out: Arc<AtomicU64>,
}

/// What one target's task needs.
pub struct Job {
    pub set: Arc<ObjectReference>,
    pub virtual_switch: String,
    pub device: Arc<Device>,
    pub slot: u32,
    pub rule: LearnRule,
    pub max_learned: u64,
    /// Learned entries the device holds now (read back by the reconcile).
    pub learned: u64,
}

/// The running learning tasks, by set (`namespace/name`).
#[derive(Default)]
pub struct Learners {
    sets: Mutex<HashMap<String, SetLearning>>,
}

impl Learners {
    /// Runs `job` for its target of set `key`, unless a task with the same
    /// rule, bound and device runs already.
    pub fn ensure(&self, key: &str, job: Job, events: &Events) {
        let mut sets = self.sets.lock().unwrap_or_else(|e| e.into_inner());
        let s = sets.entry(key.to_string()).or_default();
        if let Some(r) = s.targets.get(&job.virtual_switch)
            && r.rule == job.rule
            && r.max == job.max_learned
            && Arc::ptr_eq(&r.device, &job.device)
        {
            return;
        }
        let Device::P4Runtime(_) = job.device.as_ref() else {
            return;
        };
        let running = Running {
            rule: job.rule.clone(),
            max: job.max_learned,
            device: job.device.clone(),
            task: tokio::spawn(learn(
                job.set.clone(),
                Shared {
                    window: s.window.clone(),
                    aged_out: s.aged_out.clone(),
                    events: events.clone(),
                },
                job.device.clone(),
                job.slot,
                job.rule,
                job.max_learned,
                job.learned,
            ))
            .abort_handle(),
        };
        tracing::info!(set = key, virtual_switch = %job.virtual_switch, "learning started");
        s.targets.insert(job.virtual_switch, running);
    }

    /// Stops the tasks of set `key` whose targets are not in `keep`
    /// (all of them, and the set's Window, when `keep` is empty).
    pub fn retain(&self, key: &str, keep: &[&str]) {
        let mut sets = self.sets.lock().unwrap_or_else(|e| e.into_inner());
        if keep.is_empty() {
            sets.remove(key);
        } else if let Some(s) = sets.get_mut(key) {
            s.targets.retain(|vs, _| keep.contains(&vs.as_str()));
        }
    }

    /// Learned entries of set `key` removed after their idle timeout by
    /// this process.
    pub fn aged_out(&self, key: &str) -> Option<u64> {
        let sets = self.sets.lock().unwrap_or_else(|e| e.into_inner());
        sets.get(key).map(|s| s.aged_out.load(Ordering::Relaxed))
    }
}

struct Shared {
    window: Arc<Mutex<Window>>,
    aged_out: Arc<AtomicU64>,
    events: Events,
}

/// One target's loop; ends when aborted or when the device goes away.
async fn learn(
    set: Arc<ObjectReference>,
    shared: Shared,
    device: Arc<Device>,
    slot: u32,
    rule: LearnRule,
    max: u64,
    mut learned: u64,
) {
    let Device::P4Runtime(p) = device.as_ref() else {
        return;
    };
    let device_id = p.target().device_id(slot);
    let mut rx = p.notices();
    let mut tick = tokio::time::interval(EVENT_PERIOD / 4);
    loop {
        tokio::select! {
            n = rx.recv() => match n {
                Ok(Notice::DigestList { device_id: d, list })
                    if d == device_id && list.digest_id == rule.digest_id =>
                {
                    let (room, dropped, inserts) = inserts(&rule, &list, learned, max);
                    let n = inserts.len();
                    let ok = write(p, slot, inserts, tonic::Code::AlreadyExists).await;
                    learned += ok;
                    let mut w = shared.window.lock().unwrap_or_else(|e| e.into_inner());
                    w.lists(1, list.data.len() as u64);
                    w.learned(ok);
                    w.dropped(dropped);
                    tracing::debug!(messages = list.data.len(), room, n, ok, "digest list learned");
                }
                Ok(Notice::IdleTimeout { device_id: d, notification }) if d == device_id => {
                    let deletes: Vec<p4::Update> = notification
                        .table_entry
                        .iter()
                        .filter(|e| rule.learned(e))
                        .map(LearnRule::delete)
                        .collect();
                    if deletes.is_empty() {
                        continue;
                    }
                    let ok = write(p, slot, deletes, tonic::Code::NotFound).await;
                    learned = learned.saturating_sub(ok);
                    shared.aged_out.fetch_add(ok, Ordering::Relaxed);
                    shared.window.lock().unwrap_or_else(|e| e.into_inner()).aged_out(ok);
                }
                Ok(_) => continue,
                Err(RecvError::Lagged(k)) => {
                    tracing::warn!(lost = k, "learning fell behind its device's notices");
                    continue;
                }
                Err(RecvError::Closed) => return,
            },
            _ = tick.tick() => {}
        }
        let due = shared
            .window
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take_due(Instant::now());
        if let Some(ev) = due {
            shared.events.publish_to(&set, &ev).await;
        }
    }
}

/// The INSERTs of one digest list within the room `max - learned` left,
/// and how many messages did not fit (pure).
fn inserts(
    rule: &LearnRule,
    list: &p4::DigestList,
    learned: u64,
    max: u64,
) -> (u64, u64, Vec<p4::Update>) {
    let room = max.saturating_sub(learned);
    let mut out = Vec::new();
    let mut dropped = 0;
    for data in &list.data {
        match rule.entry(data) {
            Ok(_) if out.len() as u64 >= room => dropped += 1,
            Ok(e) => out.push(LearnRule::insert(e)),
            Err(e) => tracing::warn!(error = %e, "digest message not learned"),
        }
    }
    (room, dropped, out)
}

/// Writes `updates`; how many the device took. `benign` (ALREADY_EXISTS
/// for an insert, NOT_FOUND for a delete) is neither counted nor logged.
async fn write(
    p: &p4fleet_client::P4RuntimeDevice,
    slot: u32,
    updates: Vec<p4::Update>,
    benign: tonic::Code,
) -> u64 {
    let n = updates.len();
    if n == 0 {
        return 0;
    }
    match p.write_entities(slot, updates).await {
        Ok(refused) => {
            for (_, code, message) in refused.iter().filter(|r| r.1 != benign as i32) {
                tracing::warn!(code, %message, "learned entry refused");
            }
            (n - refused.len()) as u64
        }
        Err(e) => {
            tracing::warn!(error = %e, "learning write failed");
            0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_are_aggregated_and_rate_limited() {
        let mut w = Window::default();
        let t0 = Instant::now();
        assert_eq!(w.take_due(t0), None, "nothing happened");
        w.lists(1, 3);
        w.learned(3);
        let first = w.take_due(t0).expect("the first is reported at once");
        assert_eq!(
            first.note,
            "3 digest messages in 1 lists in the last 60 s: 3 entries learned, 0 aged out"
        );
        assert!(!first.warning);
        w.lists(2, 9);
        w.learned(8);
        w.dropped(1);
        w.lists(1, 0);
        w.aged_out(2);
        assert_eq!(w.take_due(t0 + Duration::from_secs(59)), None);
        let next = w.take_due(t0 + EVENT_PERIOD).unwrap();
        assert_eq!(
            next.note,
            "9 digest messages in 3 lists in the last 60 s: 8 entries learned, 2 aged out, 1 dropped at maxLearned"
        );
        assert!(next.warning);
        assert_eq!(next.reason, "LearnLimitReached");
        assert_eq!(w.take_due(t0 + EVENT_PERIOD * 3), None, "reset");
    }

    #[test]
    fn a_list_is_learned_up_to_the_bound() {
        let info = p4fleet_proto::p4info::parse_text(
            &std::fs::read_to_string(
                std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                    .join("../examples/l2switch/p4info.txt"),
            )
            .unwrap(),
        )
        .unwrap();
        let names = p4fleet_model::learn::LearnNames {
            digest: "mac_learn_digest_t".into(),
            table: "smac".into(),
            action: "NoAction".into(),
            key: vec![("hdr.ethernet.srcAddr".into(), "srcAddr".into())],
            ..Default::default()
        };
        let rule = p4fleet_model::learn::resolve(&info, &names, vec![1]).unwrap();
        let msg = |b: u8| p4::P4Data {
            data: Some(p4::p4_data::Data::Struct(p4::P4StructLike {
                members: vec![
                    p4::P4Data {
                        data: Some(p4::p4_data::Data::Bitstring(vec![2, 0, 0, 0, 0, b])),
                    },
                    p4::P4Data {
                        data: Some(p4::p4_data::Data::Bitstring(vec![1])),
                    },
                ],
            })),
        };
        let list = p4::DigestList {
            digest_id: rule.digest_id,
            data: vec![msg(1), msg(2), msg(3)],
            ..Default::default()
        };
        let (room, dropped, ups) = inserts(&rule, &list, 8, 10);
        assert_eq!((room, dropped, ups.len()), (2, 1, 2));
        let (_, dropped, ups) = inserts(&rule, &list, 0, 10);
        assert_eq!((dropped, ups.len()), (0, 3));
    }
}
