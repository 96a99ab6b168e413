//! When a failed attempt may be made again (pure: the caller passes the
//! time). Per object and per cause, a failure is retried on the
//! documented backoff (1 s doubling to 5 min, as failed reconciles:
//! [`Backoff`]); an attempt with the same inputs as the
//! one that failed is held until that backoff is due, whatever brought
//! the reconcile back (a watch event, its own status write, a device
//! notice). Changed inputs (a new program digest, an edited spec, a
//! device that restarted) are tried at once, on a fresh schedule.
//!
//! While held, a reconcile reports the failure it remembers here, word
//! for word, so its status is unchanged and nothing is written: a device
//! that refuses is not asked again and again, and a status write does not
//! bring the next reconcile.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use backon::{BackoffBuilder, ExponentialBackoff, ExponentialBuilder};

/// A fingerprint of what an attempt depends on: equal inputs would fail
/// the same way.
pub fn inputs(of: &impl Hash) -> u64 {
    // SipHash with fixed keys: stable within the process, which is all
    // the fingerprints are compared in.
    let mut h = std::hash::DefaultHasher::new();
    of.hash(&mut h);
    h.finish()
}

/// The delay after `failures` consecutive failures: 1 s, 2 s, 4 s, …, 5 min.
pub fn delay(failures: u32) -> Duration {
    let doublings = failures.saturating_sub(1).min(16);
    (Backoff::MIN * 2u32.pow(doublings)).min(Backoff::MAX)
}

/// A failure as a condition shows it: what a held reconcile reports again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub reason: &'static str,
    pub message: String,
}

/// Whether to make an attempt now.
#[derive(Debug, Clone, PartialEq)]
pub enum Gate<T> {
    /// Try (nothing failed, the inputs changed, or the backoff is due).
    Go,
    /// The same attempt failed and its backoff is not due: report `last`
    /// again and come back in `retry_in`.
    Wait { retry_in: Duration, last: T },
}

struct Failed<T> {
    inputs: u64,
    failures: u32,
    due: Instant,
    last: T,
}

/// The failures of one kind of attempt, per object and cause. `T` is what
/// a held reconcile reports again (the failure as its status shows it).
pub struct Retries<T = Refusal> {
    failed: Mutex<HashMap<(String, &'static str), Failed<T>>>,
}

impl<T> Default for Retries<T> {
    fn default() -> Self {
        Retries {
            failed: Mutex::new(HashMap::new()),
        }
    }
}

impl<T: Clone> Retries<T> {
    /// Whether `key`'s attempt at `cause` with `inputs` may go ahead at `now`.
    pub fn gate(&self, key: &str, cause: &'static str, inputs: u64, now: Instant) -> Gate<T> {
        let g = self.failed.lock().unwrap_or_else(|p| p.into_inner());
        match g.get(&(key.to_string(), cause)) {
            Some(f) if f.inputs == inputs && f.due > now => Gate::Wait {
                retry_in: f.due - now,
                last: f.last.clone(),
            },
            _ => Gate::Go,
        }
    }

    /// Records that the attempt failed as `last`; returns when to retry.
    /// Other inputs than the last failure's start a fresh schedule.
    pub fn failed(
        &self,
        key: &str,
        cause: &'static str,
        inputs: u64,
        now: Instant,
        last: T,
    ) -> Duration {
        let mut g = self.failed.lock().unwrap_or_else(|p| p.into_inner());
        let f = g.entry((key.to_string(), cause)).or_insert_with(|| Failed {
            inputs,
            failures: 0,
            due: now,
            last: last.clone(),
        });
        if f.inputs != inputs {
            f.inputs = inputs;
            f.failures = 0;
        }
        f.failures += 1;
        let d = delay(f.failures);
        f.due = now + d;
        f.last = last;
        d
    }

    /// How long until the recorded failure of `key` at `cause` is due
    /// (zero when it is), None when none is recorded.
    pub fn due_in(&self, key: &str, cause: &'static str, now: Instant) -> Option<Duration> {
        let g = self.failed.lock().unwrap_or_else(|p| p.into_inner());
        g.get(&(key.to_string(), cause))
            .map(|f| f.due.saturating_duration_since(now))
    }

    /// The attempt succeeded: the next failure starts at 1 s again.
    pub fn succeeded(&self, key: &str, cause: &'static str) {
        let mut g = self.failed.lock().unwrap_or_else(|p| p.into_inner());
        g.remove(&(key.to_string(), cause));
    }

    /// Forgets every cause of `key` (the object is gone).
    pub fn forget(&self, key: &str) {
        let mut g = self.failed.lock().unwrap_or_else(|p| p.into_inner());
        g.retain(|(k, _), _| k != key);
    }
}

/// Exponential per-object backoff for failed reconciles (1 s doubling to
/// 5 min): one backon schedule per failing object, dropped on success.
#[derive(Default)]
pub struct Backoff {
    failing: Mutex<HashMap<String, ExponentialBackoff>>,
}

impl Backoff {
    pub const MIN: Duration = Duration::from_secs(1);
    pub const MAX: Duration = Duration::from_secs(300);

    fn schedule() -> ExponentialBackoff {
        ExponentialBuilder::default()
            .with_min_delay(Backoff::MIN)
            .with_max_delay(Backoff::MAX)
            .without_max_times()
            .build()
    }

    /// Records a failure of `key` and returns how long to wait before retrying.
    pub fn failed(&self, key: &str) -> Duration {
        let mut g = self.failing.lock().unwrap_or_else(|p| p.into_inner());
        g.entry(key.to_string())
            .or_insert_with(Backoff::schedule)
            .next()
            .unwrap_or(Backoff::MAX)
    }

    /// Forgets the failures of `key` after a successful reconcile.
    pub fn succeeded(&self, key: &str) {
        let mut g = self.failing.lock().unwrap_or_else(|p| p.into_inner());
        g.remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn backoff_doubles_and_resets() {
        let b = Backoff::default();
        assert_eq!(b.failed("a"), Duration::from_secs(1));
        assert_eq!(b.failed("a"), Duration::from_secs(2));
        assert_eq!(b.failed("a"), Duration::from_secs(4));
        b.succeeded("a");
        assert_eq!(b.failed("a"), Duration::from_secs(1));
        let forty = (0..40).map(|_| b.failed("b")).last();
        assert_eq!(forty, Some(Backoff::MAX));
        assert_eq!(b.failed("a"), Duration::from_secs(2), "per object");
    }

    #[test]
    fn delays_double_from_one_second_to_five_minutes() {
        let d: Vec<u64> = (1..=11).map(|n| delay(n).as_secs()).collect();
        assert_eq!(d, [1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300]);
        assert_eq!(delay(1000), Backoff::MAX);
    }

    #[test]
    fn the_same_attempt_is_held_until_its_backoff_is_due() {
        let r = Retries::default();
        let t0 = Instant::now();
        assert_eq!(r.gate("vs", "load", 7, t0), Gate::Go);
        assert_eq!(r.failed("vs", "load", 7, t0, "refused"), S);
        // Brought back at once (its own status write): held, with the
        // failure to report again.
        assert_eq!(
            r.gate("vs", "load", 7, t0 + S / 10),
            Gate::Wait {
                retry_in: S * 9 / 10,
                last: "refused"
            }
        );
        assert_eq!(r.gate("vs", "load", 7, t0 + S), Gate::Go, "due");
        assert_eq!(r.failed("vs", "load", 7, t0 + S, "refused"), 2 * S);
        assert_eq!(r.failed("vs", "load", 7, t0 + 3 * S, "refused"), 4 * S);
        assert!(matches!(
            r.gate("vs", "load", 7, t0 + 6 * S),
            Gate::Wait { retry_in, .. } if retry_in == S
        ));
    }

    #[test]
    fn changed_inputs_go_at_once_and_start_a_fresh_schedule() {
        let r = Retries::default();
        let t0 = Instant::now();
        for n in 0..4 {
            r.failed("vs", "load", 1, t0 + n * S, "old");
        }
        assert_eq!(r.gate("vs", "load", 2, t0 + 4 * S), Gate::Go);
        assert_eq!(r.failed("vs", "load", 2, t0 + 4 * S, "new"), S);
    }

    #[test]
    fn causes_and_objects_are_apart_and_success_resets() {
        let r = Retries::default();
        let t0 = Instant::now();
        r.failed("vs", "load", 1, t0, "x");
        r.failed("vs", "load", 1, t0, "x");
        assert_eq!(r.gate("vs", "placement", 1, t0), Gate::Go, "per cause");
        assert_eq!(r.gate("other", "load", 1, t0), Gate::Go, "per object");
        assert_eq!(r.failed("vs", "placement", 1, t0, "y"), S);
        assert_eq!(r.due_in("vs", "load", t0 + S / 2), Some(S * 3 / 2));
        assert_eq!(r.due_in("vs", "load", t0 + 3 * S), Some(Duration::ZERO));
        r.succeeded("vs", "load");
        assert_eq!(r.due_in("vs", "load", t0), None);
        assert_eq!(r.gate("vs", "load", 1, t0), Gate::Go);
        assert_eq!(r.failed("vs", "load", 1, t0, "x"), S, "from 1 s again");
        r.forget("vs");
        assert_eq!(r.gate("vs", "placement", 1, t0), Gate::Go);
    }
}
