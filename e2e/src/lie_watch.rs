//! Status must never say more than the device holds: a watcher that polls
//! a TableEntrySet's status every 50 ms against the emulator's own entry
//! count and collects every moment the set said Ready while the device
//! did not hold the expected number of entries. Used by the restart and
//! fault tests.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use kube::api::Api;
use p4fleet_crds::{Condition, TableEntrySet, find_condition};

use crate::processes::device_entries;

/// Polls a watch must have made to count as watching.
const MIN_POLLS: usize = 5;

/// What a [`LieWatch`] saw.
#[derive(Debug)]
pub struct Watched {
    /// Status polls made.
    pub polls: usize,
    /// When the set was first seen not Ready (from the watch's start).
    pub noticed: Option<Duration>,
    /// Each Ready seen, while watching, with the device not exact.
    pub lies: Vec<String>,
    /// The reasons of the Ready condition seen while it was not True.
    pub reasons: BTreeSet<String>,
}

/// A running watch of set `name` against device `device` of the emulator
/// whose stats side channel is at `stats`.
pub struct LieWatch {
    expected: Arc<AtomicU64>,
    armed: Arc<AtomicBool>,
    when_written: Arc<AtomicBool>,
    done: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<Watched>,
}

impl LieWatch {
    /// Starts polling. Until the set is first seen not Ready (the operator
    /// noticed a change; before that it cannot know) or [`LieWatch::arm`]
    /// is called, nothing counts as a lie.
    pub fn start(
        sets: Api<TableEntrySet>,
        name: &str,
        stats: SocketAddr,
        device: u64,
        expected: u64,
    ) -> LieWatch {
        let expected = Arc::new(AtomicU64::new(expected));
        let armed = Arc::new(AtomicBool::new(false));
        let when_written = Arc::new(AtomicBool::new(false));
        let done = Arc::new(AtomicBool::new(false));
        let (e, a, d) = (expected.clone(), armed.clone(), done.clone());
        let ww = when_written.clone();
        let initial = expected.load(Ordering::SeqCst);
        let name = name.to_string();
        let task = tokio::spawn(async move {
            let started = Instant::now();
            let mut w = Watched {
                polls: 0,
                noticed: None,
                lies: Vec::new(),
                reasons: BTreeSet::new(),
            };
            // Asked to stop, it still polls until it has watched enough to
            // tell (a test that restarts the API server may ask it to stop
            // a moment after the server answers again), for at most 5 s.
            let mut stop_asked: Option<Instant> = None;
            loop {
                if d.load(Ordering::SeqCst) {
                    let asked = *stop_asked.get_or_insert_with(Instant::now);
                    if w.polls > MIN_POLLS || asked.elapsed() > Duration::from_secs(5) {
                        break;
                    }
                }
                if let Ok(set) = sets.get(&name).await {
                    let st = set.status.unwrap_or_default();
                    let ready = find_condition(&st.conditions, "Ready");
                    let said_ready = ready.is_some_and(Condition::is_true);
                    // Read after status: a count moving towards the
                    // expected one cannot excuse a Ready read before it.
                    let held = tokio::task::spawn_blocking(move || device_entries(stats, device))
                        .await
                        .unwrap();
                    w.polls += 1;
                    if ww.load(Ordering::SeqCst) && held.is_some_and(|n| n != initial) {
                        a.store(true, Ordering::SeqCst);
                    }
                    if !said_ready {
                        w.noticed.get_or_insert(started.elapsed());
                        if let Some(c) = ready {
                            w.reasons.insert(c.reason.clone());
                        }
                    }
                    let watching = w.noticed.is_some() || a.load(Ordering::SeqCst);
                    let want = e.load(Ordering::SeqCst);
                    if watching && said_ready && held != Some(want) {
                        w.lies.push(format!(
                            "{:?}: Ready while the device held {held:?} of {want}: {ready:?}",
                            started.elapsed()
                        ));
                    }
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            w
        });
        LieWatch {
            expected,
            armed,
            when_written,
            done,
            task,
        }
    }

    /// From now on a Ready over a device that is not exact is a lie even
    /// if the set was never seen not Ready (the test knows the operator is
    /// at work: e.g. the device's entries changed).
    pub fn arm(&self) {
        self.armed.store(true, Ordering::SeqCst);
    }

    /// Arms the watch by itself once the device's entry count differs from
    /// the one it started with: the operator is writing, so it has marked
    /// the set Syncing before (not for tests that take the device away).
    pub fn arm_when_written(&self) {
        self.when_written.store(true, Ordering::SeqCst);
    }

    /// The entry count the device must hold whenever the set says Ready.
    pub fn expect(&self, entries: u64) {
        self.expected.store(entries, Ordering::SeqCst);
    }

    /// Stops polling; what was seen.
    pub async fn finish(self) -> Watched {
        self.done.store(true, Ordering::SeqCst);
        self.task.await.expect("lie watch task")
    }
}

impl Watched {
    /// Panics with the first lies, if any, and if too few polls were made
    /// to have watched anything.
    pub fn assert_truthful(&self, what: &str) {
        assert!(
            self.lies.is_empty(),
            "{what}: {} lies: {:#?}",
            self.lies.len(),
            &self.lies[..self.lies.len().min(3)]
        );
        // Polls count only while the API server answers: a test that
        // restarts it watches for a few seconds at 20 polls/s at best.
        assert!(
            self.polls > MIN_POLLS,
            "{what}: watched ({} polls)",
            self.polls
        );
    }
}
