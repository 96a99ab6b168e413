//! Injected faults, armed per device through the side channel so tests can
//! see what a client does when a device misbehaves: whole Write RPCs
//! answered UNAVAILABLE, Writes or Read streams that stall, and Writes of
//! which some updates fail (per-update errors).
//!
//! A fault is armed with `after` (RPCs of its kind to let through first)
//! and `count` (RPCs it then hits); one write fault and one read fault can
//! be armed at a time, arming again replaces it. What fired is counted so
//! a test can check its fault really happened. Pure bookkeeping: the front
//! ends ask [`Faults::on_write`] / [`Faults::on_read`] and act.

use std::sync::Mutex;
use std::time::Duration;

use serde::Serialize;
use tonic::Code;

use crate::update_error::{UpdateError, err};

/// What an armed fault does to the RPC it hits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FaultKind {
    /// The whole Write answers UNAVAILABLE; nothing is applied.
    Unavailable,
    /// The Write waits this long before it is applied and answered.
    StallWrite(Duration),
    /// Every `n`-th update of the Write (the `n`-th, `2n`-th, …) fails
    /// with RESOURCE_EXHAUSTED and is not applied; the others are.
    FailUpdates(usize),
    /// The Read stream sends its first message, then waits this long
    /// before the rest (a one-message answer waits before it).
    StallRead(Duration),
}

impl FaultKind {
    fn is_read(self) -> bool {
        matches!(self, FaultKind::StallRead(_))
    }
}

/// What a Write RPC must do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WriteFault {
    Unavailable,
    Stall(Duration),
    FailUpdates(usize),
}

impl WriteFault {
    /// The error of update `i` (0-based) of a Write hit by
    /// [`WriteFault::FailUpdates`], None for updates applied as usual.
    pub fn update_error(self, i: usize) -> Option<UpdateError> {
        match self {
            WriteFault::FailUpdates(n) if (i + 1).is_multiple_of(n.max(1)) => Some(err(
                Code::ResourceExhausted,
                "injected fault: this update failed (side channel fail-updates)",
            )),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Armed {
    kind: FaultKind,
    after: u64,
    count: u64,
}

impl Armed {
    /// Counts one RPC of its kind; true when the fault hits it.
    fn hit(&mut self) -> bool {
        if self.after > 0 {
            self.after -= 1;
            false
        } else if self.count > 0 {
            self.count -= 1;
            true
        } else {
            false
        }
    }
}

/// How many RPCs each kind of fault hit so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub(crate) struct Fired {
    pub unavailable: u64,
    pub stalled_writes: u64,
    pub failed_updates_writes: u64,
    pub stalled_reads: u64,
}

#[derive(Debug, Default)]
struct State {
    write: Option<Armed>,
    read: Option<Armed>,
    fired: Fired,
}

/// One device's armed faults.
#[derive(Debug, Default)]
pub(crate) struct Faults(Mutex<State>);

impl Faults {
    /// Arms `kind` for the `count` RPCs of its kind after the next `after`.
    pub fn arm(&self, kind: FaultKind, after: u64, count: u64) {
        let mut s = self.0.lock().expect("faults lock");
        let armed = Some(Armed { kind, after, count });
        if kind.is_read() {
            s.read = armed;
        } else {
            s.write = armed;
        }
    }

    /// Disarms everything (the fired counts stay).
    pub fn clear(&self) {
        let mut s = self.0.lock().expect("faults lock");
        s.write = None;
        s.read = None;
    }

    /// Called once per Write RPC: what it must do, if anything.
    pub fn on_write(&self) -> Option<WriteFault> {
        let mut s = self.0.lock().expect("faults lock");
        let armed = s.write.as_mut()?;
        if !armed.hit() {
            return None;
        }
        let fault = match armed.kind {
            FaultKind::Unavailable => {
                s.fired.unavailable += 1;
                WriteFault::Unavailable
            }
            FaultKind::StallWrite(d) => {
                s.fired.stalled_writes += 1;
                WriteFault::Stall(d)
            }
            FaultKind::FailUpdates(n) => {
                s.fired.failed_updates_writes += 1;
                WriteFault::FailUpdates(n)
            }
            FaultKind::StallRead(_) => unreachable!("read faults are armed as reads"),
        };
        Some(fault)
    }

    /// Called once per Read RPC: how long its stream stalls, if at all.
    pub fn on_read(&self) -> Option<Duration> {
        let mut s = self.0.lock().expect("faults lock");
        let armed = s.read.as_mut()?;
        let FaultKind::StallRead(d) = armed.kind else {
            return None;
        };
        if !armed.hit() {
            return None;
        }
        s.fired.stalled_reads += 1;
        Some(d)
    }

    pub fn fired(&self) -> Fired {
        self.0.lock().expect("faults lock").fired
    }
}

/// What a Write RPC on `dev` does before its updates: answers UNAVAILABLE
/// or stalls when a fault says so; the fault, if it fails updates.
pub(crate) async fn before_write(
    dev: &crate::device::Device,
) -> Result<Option<WriteFault>, tonic::Status> {
    match dev.faults.on_write() {
        Some(WriteFault::Unavailable) => Err(tonic::Status::unavailable(
            "injected fault: device unavailable (side channel)",
        )),
        Some(WriteFault::Stall(d)) => {
            tokio::time::sleep(d).await;
            Ok(None)
        }
        other => Ok(other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_fault_lets_after_through_then_hits_count_writes() {
        let f = Faults::default();
        f.arm(FaultKind::Unavailable, 2, 3);
        let hits: Vec<_> = (0..7).map(|_| f.on_write()).collect();
        let u = Some(WriteFault::Unavailable);
        assert_eq!(hits, [None, None, u, u, u, None, None]);
        assert_eq!(f.fired().unavailable, 3);
        assert_eq!(f.on_read(), None, "reads are not hit by a write fault");
    }

    #[test]
    fn read_and_write_faults_are_armed_independently_and_replace_their_kind() {
        let f = Faults::default();
        let d = Duration::from_millis(10);
        f.arm(FaultKind::StallRead(d), 0, 1);
        f.arm(FaultKind::Unavailable, 0, 5);
        f.arm(FaultKind::StallWrite(d), 0, 1);
        assert_eq!(f.on_write(), Some(WriteFault::Stall(d)));
        assert_eq!(f.on_write(), None, "the stall replaced UNAVAILABLE");
        assert_eq!(f.on_read(), Some(d));
        assert_eq!(f.on_read(), None);
        let fired = f.fired();
        assert_eq!((fired.stalled_writes, fired.stalled_reads), (1, 1));
        f.arm(FaultKind::Unavailable, 0, 1);
        f.clear();
        assert_eq!(f.on_write(), None);
    }

    #[test]
    fn fail_updates_fails_every_nth_update() {
        let w = WriteFault::FailUpdates(3);
        let failed: Vec<usize> = (0..10).filter(|&i| w.update_error(i).is_some()).collect();
        assert_eq!(failed, [2, 5, 8]);
        let e = w.update_error(2).unwrap();
        assert_eq!(e.code, Code::ResourceExhausted);
        assert_eq!(WriteFault::Unavailable.update_error(0), None);
        assert!(
            WriteFault::FailUpdates(0).update_error(0).is_some(),
            "0 is every update"
        );
    }
}
