//! Swaps the device confirmed whose status write has not gone through
//! yet. A swap is seen once, when its push happens: if the status write
//! after it fails (API server busy, restarted), the next reconcile finds
//! the new program in place, pushes nothing and would never record the
//! swap. Kept here per VirtualSwitch until a status write carries it.

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

    /// The status carrying `key`'s swap was written.
    pub fn written(&self, key: &str) {
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
    fn a_swap_whose_write_failed_comes_back_until_written() {
        let u = Unreported::default();
        let old = status(Some(swap("t1", "a")), "a");
        // The push of b: a new swap, kept.
        let mut new = status(Some(swap("t2", "b")), "b");
        u.carry("ns/vs", Some(&old), &mut new);
        // Its write failed; the next reconcile pushes nothing and starts
        // from the old status again.
        let mut next = status(old.last_swap.clone(), "b");
        u.carry("ns/vs", Some(&old), &mut next);
        assert_eq!(next.last_swap.as_ref().unwrap().at, "t2");
        u.written("ns/vs");
        let mut after = status(old.last_swap.clone(), "b");
        u.carry("ns/vs", Some(&old), &mut after);
        assert_eq!(after.last_swap.unwrap().at, "t1");
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
