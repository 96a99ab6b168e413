//! How much the operator does at once: reconciles per kind (kube-runtime's
//! controller concurrency), targets of one TableEntrySet synced in
//! parallel, and syncs per device ([`DevicePermits`]: one semaphore per
//! Switch, so a slow or stalled device holds only its own permits and the
//! others keep going).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The limits (`p4fleet operator --*-concurrency`, docs/resources.md, "Operator").
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Concurrent reconciles per kind; 0 is unbounded.
    pub switch: u16,
    pub program: u16,
    pub virtual_switch: u16,
    pub entry_set: u16,
    pub extern_policy: u16,
    /// Targets of one TableEntrySet planned and written at once.
    pub targets_per_set: usize,
    /// Reads and writes of entries in flight per device (across all sets).
    pub syncs_per_device: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            switch: 32,
            program: 8,
            virtual_switch: 16,
            entry_set: 16,
            extern_policy: 8,
            targets_per_set: 32,
            syncs_per_device: 2,
        }
    }
}

impl Limits {
    /// Concurrent reconciles of `kind` (a CRD kind name); 0 is unbounded.
    pub fn reconciles(&self, kind: &str) -> u16 {
        match kind {
            "Switch" => self.switch,
            "P4Program" => self.program,
            "VirtualSwitch" => self.virtual_switch,
            "TableEntrySet" => self.entry_set,
            "AsyncExternPolicy" => self.extern_policy,
            _ => 0,
        }
    }
}

/// One semaphore per Switch: [`DevicePermits::acquire`] waits for one of
/// that device's permits only.
pub struct DevicePermits {
    per_device: usize,
    devices: Mutex<HashMap<String, Arc<Semaphore>>>,
}

impl DevicePermits {
    /// `per_device` permits per Switch (at least one).
    pub fn new(per_device: usize) -> Self {
        DevicePermits {
            per_device: per_device.max(1),
            devices: Mutex::new(HashMap::new()),
        }
    }

    /// Waits for a permit of `switch`; it is released when dropped.
    pub async fn acquire(&self, switch: &str) -> OwnedSemaphorePermit {
        let sem = {
            let mut g = self.devices.lock().unwrap_or_else(|p| p.into_inner());
            g.entry(switch.to_string())
                .or_insert_with(|| Arc::new(Semaphore::new(self.per_device)))
                .clone()
        };
        sem.acquire_owned()
            .await
            .expect("device semaphores are never closed")
    }
}

impl DevicePermits {
    /// Runs every future, at most `limit` at once, each while holding a
    /// permit of its device (the `String` beside it); results in input
    /// order. Futures that wait for a busy device do not hold up the others.
    pub async fn each<R, Fut>(
        &self,
        limit: usize,
        work: impl IntoIterator<Item = (String, Fut)>,
    ) -> Vec<R>
    where
        Fut: std::future::Future<Output = R>,
    {
        use futures::StreamExt;
        let held: Vec<_> = work
            .into_iter()
            .map(|(device, work)| self.holding(device, work))
            .collect();
        futures::stream::iter(held)
            .buffered(limit.max(1))
            .collect()
            .await
    }

    async fn holding<R>(&self, device: String, work: impl std::future::Future<Output = R>) -> R {
        let _permit = self.acquire(&device).await;
        work.await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn every_kind_has_its_limit() {
        let l = Limits::default();
        for kind in [
            "Switch",
            "P4Program",
            "VirtualSwitch",
            "TableEntrySet",
            "AsyncExternPolicy",
        ] {
            assert!(l.reconciles(kind) > 0, "{kind}");
        }
        assert_eq!(l.reconciles("Other"), 0);
    }

    #[tokio::test]
    async fn a_busy_device_does_not_hold_up_another() {
        let p = DevicePermits::new(1);
        let slow = p.acquire("a").await;
        // "b" has its own permit while "a" is held.
        let b = tokio::time::timeout(Duration::from_secs(5), p.acquire("b")).await;
        assert!(b.is_ok());
        // A second user of "a" waits until the first lets go.
        let second = tokio::time::timeout(Duration::from_millis(50), p.acquire("a")).await;
        assert!(second.is_err());
        drop(slow);
        let second = tokio::time::timeout(Duration::from_secs(5), p.acquire("a")).await;
        assert!(second.is_ok());
    }

    #[tokio::test]
    async fn each_runs_devices_in_parallel_and_keeps_the_order() {
        let p = DevicePermits::new(1);
        let stalled = p.acquire("slow").await;
        let done = std::sync::Mutex::new(Vec::new());
        let items = [("slow", 0), ("a", 1), ("b", 2), ("a", 3)].map(|(d, i)| (d.to_string(), i));
        let done = &done;
        let run = p.each(
            8,
            items.map(|(d, i)| {
                let work = async move {
                    done.lock().unwrap().push(i);
                    i * 10
                };
                (d, work)
            }),
        );
        tokio::pin!(run);
        // While "slow" is stalled the others all finish.
        let early = tokio::time::timeout(Duration::from_millis(100), &mut run).await;
        assert!(early.is_err(), "waits for the stalled device");
        let mut seen = done.lock().unwrap().clone();
        seen.sort();
        assert_eq!(seen, vec![1, 2, 3]);
        drop(stalled);
        let out = tokio::time::timeout(Duration::from_secs(5), run)
            .await
            .unwrap();
        assert_eq!(out, vec![0, 10, 20, 30]);
    }
}
