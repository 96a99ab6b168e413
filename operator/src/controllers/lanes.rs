//! Which reconciles of a kind run first when the kind is at its
//! concurrency limit: those a change started (a watch event, a device
//! change, a retry) before the periodic checks and resyncs that came due.
//!
//! kube-runtime starts reconciles in the order their times come due, so at
//! fleet size a change of many objects queued behind the periodic resyncs
//! that were due at the same moment (`make bench-fleet`: 1,054 resyncs in
//! the 1 % change of 1,000 sets; docs/dev/fleet-lab-notes.md).
//! [`drive`](super::drive) therefore lets
//! kube-runtime start every due reconcile and bounds the work here
//! instead: a [`Gate`] of the kind's limit, with one queue per [`Lane`];
//! a freed permit goes to the oldest waiting change, and to a periodic
//! check only when no change waits. Pure scheduling, no I/O.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;

/// What a waiting reconcile is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lane {
    /// Something changed (the object, a related object, its device), or a
    /// failed reconcile is retried: someone waits for it.
    Change,
    /// The reconciler's own `Action::requeue`: a periodic check or
    /// resync, which may wait for the changes.
    Periodic,
}

impl Lane {
    /// The lane of a reconcile started for `trigger` (a label of
    /// [`crate::reconcile_triggers::trigger_of`]; None when unknown,
    /// e.g. without the tracing layer that reads it).
    pub fn of(trigger: Option<&str>) -> Lane {
        match trigger {
            Some("requeue") => Lane::Periodic,
            _ => Lane::Change,
        }
    }
}

/// A concurrency limit whose freed permits go to [`Lane::Change`] first.
/// Cheap to clone (shared).
#[derive(Clone)]
pub struct Gate {
    inner: Arc<Inner>,
}

struct Inner {
    state: Mutex<State>,
}

struct State {
    free: usize,
    changes: VecDeque<oneshot::Sender<Permit>>,
    periodic: VecDeque<oneshot::Sender<Permit>>,
}

/// One unit of the gate's limit, given back when dropped.
pub struct Permit {
    inner: Arc<Inner>,
    armed: bool,
}

impl Gate {
    /// A gate of `limit` permits; 0 is unbounded.
    pub fn new(limit: usize) -> Gate {
        let free = if limit == 0 { usize::MAX } else { limit };
        Gate {
            inner: Arc::new(Inner {
                state: Mutex::new(State {
                    free,
                    changes: VecDeque::new(),
                    periodic: VecDeque::new(),
                }),
            }),
        }
    }

    /// Waits for a permit in `lane`'s queue.
    pub async fn acquire(&self, lane: Lane) -> Permit {
        let rx = {
            let mut s = self.inner.lock();
            if s.free > 0 {
                s.free -= 1;
                return Permit {
                    inner: self.inner.clone(),
                    armed: true,
                };
            }
            let (tx, rx) = oneshot::channel();
            match lane {
                Lane::Change => s.changes.push_back(tx),
                Lane::Periodic => s.periodic.push_back(tx),
            }
            rx
        };
        // The sender stays queued until a permit is sent on it, and the
        // gate outlives this future (it holds the Arc).
        rx.await.expect("a queued waiter is always sent a permit")
    }

    /// Reconciles waiting per lane (changes, periodic).
    #[cfg(test)]
    pub fn waiting(&self) -> (usize, usize) {
        let s = self.inner.lock();
        (s.changes.len(), s.periodic.len())
    }
}

impl Inner {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Hands a freed permit to the next waiter (changes first), or puts it
    /// back. A waiter that gave up (its receiver dropped) is skipped.
    fn release(self: &Arc<Self>) {
        loop {
            let next = {
                let mut s = self.lock();
                match s.changes.pop_front().or_else(|| s.periodic.pop_front()) {
                    Some(tx) => tx,
                    None => {
                        s.free = s.free.saturating_add(1);
                        return;
                    }
                }
            };
            let permit = Permit {
                inner: self.clone(),
                armed: true,
            };
            match next.send(permit) {
                Ok(()) => return,
                // Not dropped as a permit: this loop passes it on.
                Err(mut unsent) => unsent.armed = false,
            }
        }
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        if self.armed {
            self.inner.release();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    async fn soon<F: std::future::Future>(f: F) -> Option<F::Output> {
        tokio::time::timeout(Duration::from_millis(200), f)
            .await
            .ok()
    }

    #[test]
    fn only_a_periodic_requeue_is_periodic() {
        assert_eq!(Lane::of(Some("requeue")), Lane::Periodic);
        for t in [
            "object_updated",
            "related:ConfigMap",
            "device_change",
            "error_retry",
        ] {
            assert_eq!(Lane::of(Some(t)), Lane::Change, "{t}");
        }
        assert_eq!(Lane::of(None), Lane::Change);
    }

    #[tokio::test]
    async fn a_change_goes_before_periodic_checks_that_waited_longer() {
        let gate = Gate::new(1);
        let held = gate.acquire(Lane::Change).await;
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        for (name, lane) in [
            ("periodic-1", Lane::Periodic),
            ("periodic-2", Lane::Periodic),
            ("change", Lane::Change),
        ] {
            let (g, order) = (gate.clone(), order.clone());
            tasks.push(tokio::spawn(async move {
                let _p = g.acquire(lane).await;
                order.lock().unwrap().push(name);
            }));
            // Queue them in this order.
            while gate.waiting().0 + gate.waiting().1 < tasks.len() {
                tokio::task::yield_now().await;
            }
        }
        assert_eq!(gate.waiting(), (1, 2));
        drop(held);
        for t in tasks {
            t.await.unwrap();
        }
        assert_eq!(
            *order.lock().unwrap(),
            ["change", "periodic-1", "periodic-2"]
        );
    }

    #[tokio::test]
    async fn the_limit_holds_and_freed_permits_come_back() {
        let gate = Gate::new(2);
        let a = gate.acquire(Lane::Periodic).await;
        let _b = gate.acquire(Lane::Change).await;
        assert!(soon(gate.acquire(Lane::Change)).await.is_none(), "a third");
        drop(a);
        assert!(soon(gate.acquire(Lane::Periodic)).await.is_some());
    }

    #[tokio::test]
    async fn a_waiter_that_gave_up_does_not_take_the_permit_with_it() {
        let gate = Gate::new(1);
        let held = gate.acquire(Lane::Change).await;
        // Gives up while queued (its reconcile was cancelled).
        assert!(soon(gate.acquire(Lane::Change)).await.is_none());
        assert_eq!(gate.waiting(), (1, 0));
        drop(held);
        assert!(soon(gate.acquire(Lane::Periodic)).await.is_some());
    }

    #[tokio::test]
    async fn zero_is_unbounded() {
        let gate = Gate::new(0);
        let mut held = Vec::new();
        for _ in 0..1000 {
            held.push(soon(gate.acquire(Lane::Periodic)).await.expect("free"));
        }
    }
}
