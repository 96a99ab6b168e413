//! Periodic checks run by a task of their own, outside kube-runtime's
//! reconcile loop: the Switches' drift probes (`switch::drift_probe`) and
//! the TableEntrySets' rechecks (`entry_set::recheck`). At 1,000 objects,
//! kube-runtime's scheduling and a reconcile's own work around a check
//! cost more than the check (profiled with `make bench-fleet`,
//! docs/dev/fleet-lab-notes.md); here a steady object costs its check.
//!
//! Checks due within a short window of each other run together
//! ([`window`]): early by at most that window, never late, and the
//! runtime's threads wake once for the lot rather than once per check.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashSet};
use std::sync::Mutex;
use std::time::Duration;

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use tokio::sync::Notify;
use tokio::time::Instant;

use super::Shutdown;

/// How far ahead of their time due checks are taken with the first one: a
/// fortieth of the period, at most 250 ms (a 10 s period: about 25 checks
/// together at 1,000 objects). Pure.
pub fn window(period: Duration) -> Duration {
    (period / 40).min(Duration::from_millis(250))
}

/// When each object is checked next (pure: the caller gives the time). An
/// object is held from [`Schedule::add`] until [`Schedule::finish`]
/// releases it, queued or while its check runs, so it never has two
/// checks.
#[derive(Debug, Default)]
pub struct Schedule {
    due: BinaryHeap<Reverse<(Instant, String)>>,
    held: HashSet<String>,
}

impl Schedule {
    /// Queues `name` at `at` unless it is held already; whether it was.
    pub fn add(&mut self, name: &str, at: Instant) -> bool {
        if !self.held.insert(name.to_string()) {
            return false;
        }
        self.due.push(Reverse((at, name.to_string())));
        true
    }

    /// When the first queued check is due.
    pub fn next(&self) -> Option<Instant> {
        self.due.peek().map(|Reverse((at, _))| *at)
    }

    /// Up to `max` objects due at `now`, earliest first (still held).
    pub fn take_due(&mut self, now: Instant, max: usize) -> Vec<String> {
        let mut out = Vec::new();
        while out.len() < max {
            match self.due.peek() {
                Some(Reverse((at, _))) if *at <= now => {
                    let Reverse((_, name)) = self.due.pop().expect("peeked");
                    out.push(name);
                }
                _ => break,
            }
        }
        out
    }

    /// Ends a check of `name`: queued again at `again`, or released.
    pub fn finish(&mut self, name: &str, again: Option<Instant>) {
        match again {
            Some(at) => self.due.push(Reverse((at, name.to_string()))),
            None => {
                self.held.remove(name);
            }
        }
    }
}

/// A [`Schedule`] shared between whoever queues and the task that runs
/// the checks.
pub struct Queue {
    schedule: Mutex<Schedule>,
    /// Wakes the task when an object is queued.
    queued: Notify,
    window: Duration,
}

impl Queue {
    /// Checks of period `period` (for the [`window`]).
    pub fn new(period: Duration) -> Queue {
        Queue {
            schedule: Mutex::default(),
            queued: Notify::new(),
            window: window(period),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Schedule> {
        self.schedule.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues `name` at `at` ([`Schedule::add`]).
    pub fn add(&self, name: &str, at: Instant) {
        if self.lock().add(name, at) {
            self.queued.notify_one();
        }
    }

    /// Ends a check of `name` ([`Schedule::finish`]).
    pub fn finish(&self, name: &str, again: Option<Instant>) {
        self.lock().finish(name, again);
    }

    /// Runs `check` on each object as it comes due, at most `in_flight`
    /// at once (one that does not answer holds one slot for its timeout,
    /// not the others), and `settle` on each result, until `shutdown`.
    pub async fn run<V, Fut>(
        &self,
        in_flight: usize,
        shutdown: Shutdown,
        check: impl Fn(String) -> Fut,
        mut settle: impl FnMut(String, V),
    ) where
        Fut: std::future::Future<Output = (String, V)>,
    {
        let mut running = FuturesUnordered::new();
        let mut shutdown = std::pin::pin!(shutdown);
        loop {
            let next = self.lock().next();
            let wait = async {
                match next {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                () = &mut shutdown => return,
                () = self.queued.notified() => {}
                () = wait, if running.len() < in_flight => {}
                Some((name, verdict)) = running.next(), if !running.is_empty() => {
                    settle(name, verdict);
                }
            }
            let room = in_flight - running.len();
            let until = Instant::now() + self.window;
            for name in self.lock().take_due(until, room) {
                running.push(check(name));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_object_is_held_once_until_its_check_is_finished() {
        let t0 = Instant::now();
        let s = |n| Duration::from_secs(n);
        let mut sched = Schedule::default();
        assert!(sched.add("a", t0 + s(10)));
        assert!(sched.add("b", t0 + s(5)));
        assert!(!sched.add("a", t0 + s(1)), "queued already");
        assert_eq!(sched.next(), Some(t0 + s(5)));
        assert!(sched.take_due(t0 + s(4), 10).is_empty());
        assert_eq!(sched.take_due(t0 + s(10), 10), ["b", "a"]);
        assert_eq!(sched.next(), None);
        assert!(!sched.add("a", t0), "held while its check runs");
        sched.finish("a", Some(t0 + s(20)));
        sched.finish("b", None);
        assert_eq!(sched.next(), Some(t0 + s(20)));
        assert!(sched.add("b", t0 + s(30)), "released");
        assert_eq!(sched.take_due(t0 + s(40), 1), ["a"], "at most max");
        assert_eq!(sched.take_due(t0 + s(40), 1), ["b"]);
    }

    #[test]
    fn due_checks_are_taken_together_a_short_window_early() {
        let ms = Duration::from_millis;
        assert_eq!(window(Duration::from_secs(10)), ms(250));
        assert_eq!(window(Duration::from_secs(2)), ms(50));
        assert_eq!(window(Duration::from_secs(3600)), ms(250), "capped");
        assert!(window(Duration::from_secs(1)) < Duration::from_secs(1) / 10);
    }

    #[tokio::test]
    async fn the_task_checks_what_comes_due_and_settles_it() {
        // A window of 25 ms.
        let q = std::sync::Arc::new(Queue::new(Duration::from_secs(1)));
        let (tx, stop) = futures::channel::oneshot::channel::<()>();
        let shutdown: Shutdown = futures::FutureExt::shared(Box::pin(async move {
            let _ = stop.await;
        })
            as futures::future::BoxFuture<'static, ()>);
        let settled = std::sync::Arc::new(Mutex::new(Vec::new()));
        let (q2, s2) = (q.clone(), settled.clone());
        let task = tokio::spawn(async move {
            let check = |name: String| async move { (name.clone(), name.len()) };
            let settle = |name: String, v: usize| {
                s2.lock().unwrap().push((name.clone(), v, Instant::now()));
                q2.finish(&name, None);
            };
            q2.run(4, shutdown, check, settle).await;
        });
        let (t0, ms) = (Instant::now(), Duration::from_millis);
        q.add("abc", t0 + ms(800));
        q.add("ab", t0 + ms(100));
        // Polled, not slept: a loaded machine may settle late, never early.
        let settled_n = |n: usize| {
            let s = settled.clone();
            async move {
                while s.lock().unwrap().len() < n {
                    tokio::time::sleep(ms(10)).await;
                }
            }
        };
        tokio::time::timeout(Duration::from_secs(20), settled_n(2))
            .await
            .expect("both checked");
        let got = settled.lock().unwrap().clone();
        assert_eq!((got[0].0.as_str(), got[0].1), ("ab", 2), "earliest first");
        assert_eq!((got[1].0.as_str(), got[1].1), ("abc", 3));
        // Early by at most the window (25 ms), never more.
        assert!(got[0].2 >= t0 + ms(75));
        assert!(got[1].2 >= t0 + ms(775));
        let _ = tx.send(());
        task.await.unwrap();
    }
}
