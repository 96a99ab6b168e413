//! Swaps the device confirmed that a status read does not show yet. A swap
//! is seen once, when its push happens: the next reconcile finds the new
//! program in place and pushes nothing. If the status write after the push
//! failed (API server busy, restarted), or went through but the next
//! reconcile starts from a cached VirtualSwitch the watch has not brought
//! up to that write, the status it writes (server-side apply, the whole
//! status) would drop the swap for good. So a swap is kept here per
//! VirtualSwitch until the status a reconcile starts from carries it.
//!
//! [`crate::controllers::written`] already makes a reconcile that starts
//! from the very version a write replaced build on that write. This covers
//! what it cannot: a failed write, and a start from a version someone else
//! wrote in between (a metadata edit) that the cache shows before ours.

use std::collections::HashMap;
use std::sync::Mutex;

use p4fleet_crds::{LastSwap, VirtualSwitchStatus};

/// Per VirtualSwitch (`namespace/name`): the last swap not yet written.
#[derive(Default)]
pub struct Unreported {
    swaps: Mutex<HashMap<String, (LastSwap, Option<u64>)>>,
}

impl Unreported {
    /// Brings `new` (the status about to be written) up to the swap this
    /// process saw last for `key`: kept when `new` has a swap of its own
    /// that `old` (the status read) lacks, put back into `new` when an
    /// earlier one was not written and the same program still runs.
    pub fn carry(
        &self,
        key: &str,
        old: Option<&VirtualSwitchStatus>,
        new: &mut VirtualSwitchStatus,
    ) {
        let mut swaps = self.swaps.lock().expect("unreported swaps lock");
        let written = |s: &LastSwap| {
            old.and_then(|o| o.last_swap.as_ref())
                .is_some_and(|o| o.at == s.at)
        };
        match new.last_swap.as_ref() {
            Some(s) if !written(s) => {
                swaps.insert(key.to_string(), (s.clone(), new.last_swap_millis));
            }
            _ => {
                if let Some((s, millis)) = swaps.get(key) {
                    if written(s) || new.loaded_digest.as_deref() != Some(s.to_digest.as_str()) {
                        swaps.remove(key);
                    } else {
                        new.last_swap = Some(s.clone());
                        new.last_swap_millis = *millis;
                    }
                }
            }
        }
    }

    /// `key` is gone (its VirtualSwitch deleted).
    pub fn forget(&self, key: &str) {
        self.swaps
            .lock()
            .expect("unreported swaps lock")
            .remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn swap(at: &str, to: &str) -> LastSwap {
        LastSwap {
            at: at.into(),
            to_digest: to.into(),
            ..Default::default()
        }
    }

    fn status(swap: Option<LastSwap>, loaded: &str) -> VirtualSwitchStatus {
        VirtualSwitchStatus {
            last_swap: swap,
            last_swap_millis: Some(7),
            loaded_digest: Some(loaded.into()),
            ..Default::default()
        }
    }

    #[test]
    fn a_swap_comes_back_until_a_status_read_shows_it() {
        let u = Unreported::default();
        let old = status(Some(swap("t1", "a")), "a");
        // The push of b: a new swap, kept.
        let mut new = status(Some(swap("t2", "b")), "b");
        u.carry("ns/vs", Some(&old), &mut new);
        // Whether its write failed or the cache has not seen it yet, the
        // next reconciles push nothing and start from the old status: the
        // swap is put back every time, not only once.
        for _ in 0..2 {
            let mut next = status(old.last_swap.clone(), "b");
            u.carry("ns/vs", Some(&old), &mut next);
            assert_eq!(next.last_swap.as_ref().unwrap().at, "t2");
        }
        // A reconcile that starts from a status showing it lets it go.
        let seen = status(Some(swap("t2", "b")), "b");
        let mut next = seen.clone();
        u.carry("ns/vs", Some(&seen), &mut next);
        assert!(u.swaps.lock().unwrap().is_empty());
        // A deleted VirtualSwitch's swap goes with it.
        let mut new = status(Some(swap("t3", "c")), "c");
        u.carry("ns/vs", Some(&seen), &mut new);
        u.forget("ns/vs");
        let mut after = status(seen.last_swap.clone(), "c");
        u.carry("ns/vs", Some(&seen), &mut after);
        assert_eq!(after.last_swap.unwrap().at, "t2");
    }

    #[test]
    fn a_swap_already_written_or_of_another_program_is_dropped() {
        let u = Unreported::default();
        let old = status(Some(swap("t1", "a")), "a");
        let mut new = status(Some(swap("t2", "b")), "b");
        u.carry("k", Some(&old), &mut new);
        // The status read shows it: nothing to put back.
        let seen = status(Some(swap("t2", "b")), "b");
        let mut next = seen.clone();
        u.carry("k", Some(&seen), &mut next);
        assert_eq!(next.last_swap.unwrap().at, "t2");
        assert!(u.swaps.lock().unwrap().is_empty());
        // Another program runs now (loaded back to a without a swap seen).
        let mut new = status(Some(swap("t3", "c")), "c");
        u.carry("k", Some(&old), &mut new);
        let mut other = status(old.last_swap.clone(), "a");
        u.carry("k", Some(&old), &mut other);
        assert_eq!(other.last_swap.unwrap().at, "t1");
        assert!(u.swaps.lock().unwrap().is_empty());
    }
}
