//! What each VirtualSwitch's pipeline looks like on its device, as the
//! VirtualSwitch controller last confirmed it, so that the Switch probe
//! (every `--drift-seconds`) checks every slot of its device in the same
//! pass, and the VirtualSwitch itself only comes back at
//! `--resync-seconds` (docs/reliability.md). A check that fails names the
//! VirtualSwitch on [`LoadedPipelines::subscribe`]: its controller
//! reconciles it at once (and re-pushes).
//!
//! Held by the device pool (`crate::devices`): a Switch that goes away
//! takes its checks with it.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use p4fleet_proto::fpga as pb;
use tokio::sync::broadcast;

use crate::devices::Asked;

/// What the device must report for one VirtualSwitch's pipeline to be
/// there, per target kind: the very comparison its own load makes before
/// deciding to push.
#[derive(Debug, Clone, PartialEq)]
pub enum PipelineCheck {
    /// P4Runtime: the slot's device id reports this pipeline cookie
    /// (GetForwardingPipelineConfig, COOKIE_ONLY).
    Cookie { slot: u32, cookie: u64 },
    /// BFRT: the slot's device runs a program of this name and build
    /// (its bfrt.json, context.json and binary) on exactly `pipes` (empty:
    /// the whole device).
    Tofino {
        slot: u32,
        p4_name: String,
        sha256: p4fleet_client::TofinoSha256,
        pipes: Vec<u32>,
    },
    /// FPGA: the slot service reports the slot Loaded with this program
    /// digest, isolation and port map.
    Slot {
        slot: u32,
        digest: String,
        isolation: Option<pb::Isolation>,
        port_map: Vec<pb::PortMapping>,
    },
}

impl PipelineCheck {
    /// Whether an FPGA slot's state is what this check expects (pure;
    /// other kinds: false).
    pub fn slot_holds(&self, state: &pb::SlotState) -> bool {
        match self {
            PipelineCheck::Slot {
                digest,
                isolation,
                port_map,
                ..
            } => {
                state.phase() == pb::SlotPhase::Loaded
                    && &state.program_digest == digest
                    && &state.isolation == isolation
                    && &state.port_map == port_map
            }
            _ => false,
        }
    }
}

/// Buffered lost pipelines per subscriber; one that falls further behind
/// is told it lagged (and reconciles every VirtualSwitch).
const LOST: usize = 1024;

#[derive(Default)]
struct Checks {
    /// Switch name → VirtualSwitch key (`namespace/name`) → its check.
    by_switch: HashMap<String, BTreeMap<String, PipelineCheck>>,
    /// VirtualSwitch key → the Switch its check is on.
    switch_of: HashMap<String, String>,
    /// VirtualSwitch key → when, and on what device epoch and Switch
    /// generation, a Switch probe last found its check held. A
    /// confirmation stands only for the same, and a new connection drops
    /// those of its Switch ([`LoadedPipelines::unconfirm_switch`]).
    confirmed: HashMap<String, (Instant, Asked)>,
}

/// The checks of every loaded VirtualSwitch, by Switch.
pub struct LoadedPipelines {
    checks: Mutex<Checks>,
    lost: broadcast::Sender<String>,
}

impl Default for LoadedPipelines {
    fn default() -> Self {
        LoadedPipelines {
            checks: Mutex::default(),
            lost: broadcast::Sender::new(LOST),
        }
    }
}

impl LoadedPipelines {
    fn lock(&self) -> std::sync::MutexGuard<'_, Checks> {
        self.checks.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// VirtualSwitch `vs` runs on Switch `switch`, and `check` tells that
    /// it still does (replaces its check on any Switch).
    pub fn record(&self, vs: &str, switch: &str, check: PipelineCheck) {
        let mut c = self.lock();
        if let Some(old) = c.switch_of.insert(vs.to_string(), switch.to_string())
            && old != switch
            && let Some(on) = c.by_switch.get_mut(&old)
        {
            on.remove(vs);
        }
        let on = c.by_switch.entry(switch.to_string()).or_default();
        if on.insert(vs.to_string(), check.clone()).as_ref() != Some(&check) {
            // What the probe confirmed was another check.
            c.confirmed.remove(vs);
        }
    }

    /// A Switch probe found `check` held for `vs` just now, on `stamp`
    /// (ignored when `vs`'s check changed meanwhile).
    pub fn confirmed(&self, vs: &str, check: &PipelineCheck, stamp: Asked) {
        let mut c = self.lock();
        if Self::current(&c, vs) == Some(check) {
            c.confirmed.insert(vs.to_string(), (Instant::now(), stamp));
        }
    }

    /// Whether a Switch probe found `check` held for `vs` on `stamp`
    /// within the last `within`: the VirtualSwitch's own resync then need
    /// not ask the device again (the probe asks every `--drift-seconds`).
    pub fn confirmed_within(
        &self,
        vs: &str,
        check: &PipelineCheck,
        stamp: Asked,
        within: Duration,
    ) -> bool {
        let c = self.lock();
        Self::current(&c, vs) == Some(check)
            && c.confirmed
                .get(vs)
                .is_some_and(|(at, on)| *on == stamp && at.elapsed() <= within)
    }

    fn current<'a>(c: &'a Checks, vs: &str) -> Option<&'a PipelineCheck> {
        c.by_switch.get(c.switch_of.get(vs)?)?.get(vs)
    }

    /// VirtualSwitch `vs` has no confirmed pipeline any more (not placed,
    /// not loaded, deleted): the Switch probe no longer checks it, and it
    /// checks itself at `--drift-seconds`.
    pub fn forget(&self, vs: &str) {
        let mut c = self.lock();
        c.confirmed.remove(vs);
        if let Some(sw) = c.switch_of.remove(vs)
            && let Some(on) = c.by_switch.get_mut(&sw)
        {
            on.remove(vs);
            if on.is_empty() {
                c.by_switch.remove(&sw);
            }
        }
    }

    /// The confirmations of every VirtualSwitch on Switch `switch` go (a
    /// new connection to its device).
    pub fn unconfirm_switch(&self, switch: &str) {
        let mut c = self.lock();
        let on: Vec<String> = c
            .by_switch
            .get(switch)
            .map(|on| on.keys().cloned().collect())
            .unwrap_or_default();
        for vs in on {
            c.confirmed.remove(&vs);
        }
    }

    /// Every check of Switch `switch` goes (the Switch was deleted).
    pub fn forget_switch(&self, switch: &str) {
        let mut c = self.lock();
        if let Some(on) = c.by_switch.remove(switch) {
            for vs in on.keys() {
                c.switch_of.remove(vs);
                c.confirmed.remove(vs);
            }
        }
    }

    /// The checks on Switch `switch`, by VirtualSwitch key.
    pub fn on(&self, switch: &str) -> Vec<(String, PipelineCheck)> {
        self.lock()
            .by_switch
            .get(switch)
            .map(|on| on.iter().map(|(k, c)| (k.clone(), c.clone())).collect())
            .unwrap_or_default()
    }

    /// Whether the Switch probe checks `vs`'s pipeline (and it may wait
    /// for `--resync-seconds` itself).
    pub fn checked(&self, vs: &str) -> bool {
        self.lock().switch_of.contains_key(vs)
    }

    /// The pipeline of VirtualSwitch `vs` is not (or could not be seen) on
    /// its device: tells the subscribers (its controller reconciles it).
    pub fn lost(&self, vs: &str) {
        // An earlier confirmation no longer stands: its reconcile asks the
        // device itself.
        self.lock().confirmed.remove(vs);
        // No subscriber (tests, tools) is fine.
        let _ = self.lost.send(vs.to_string());
    }

    /// Keys of VirtualSwitches whose pipeline was found lost, from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<String> {
        self.lost.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cookie(c: u64) -> PipelineCheck {
        PipelineCheck::Cookie { slot: 0, cookie: c }
    }

    #[test]
    fn checks_follow_their_virtual_switch_from_switch_to_switch() {
        let p = LoadedPipelines::default();
        p.record("ns/a", "sw1", cookie(1));
        p.record("ns/b", "sw1", cookie(2));
        assert_eq!(p.on("sw1").len(), 2);
        assert!(p.checked("ns/a"));
        // Moved: checked on its new Switch only.
        p.record("ns/a", "sw2", cookie(3));
        assert_eq!(p.on("sw1"), vec![("ns/b".to_string(), cookie(2))]);
        assert_eq!(p.on("sw2"), vec![("ns/a".to_string(), cookie(3))]);
        // A new load replaces the check.
        p.record("ns/a", "sw2", cookie(4));
        assert_eq!(p.on("sw2"), vec![("ns/a".to_string(), cookie(4))]);
        p.forget("ns/b");
        assert!(p.on("sw1").is_empty() && !p.checked("ns/b"));
        p.forget_switch("sw2");
        assert!(p.on("sw2").is_empty() && !p.checked("ns/a"));
    }

    #[test]
    fn a_confirmation_stands_for_its_own_check_within_the_window() {
        let p = LoadedPipelines::default();
        let hour = Duration::from_secs(3600);
        let on = Asked {
            generation: Some(1),
            epoch: 0,
        };
        let within = |vs: &str, c: u64, stamp: Asked, w: Duration| {
            p.confirmed_within(vs, &cookie(c), stamp, w)
        };
        p.record("ns/a", "sw1", cookie(1));
        assert!(!within("ns/a", 1, on, hour), "never probed");
        p.confirmed("ns/a", &cookie(1), on);
        assert!(within("ns/a", 1, on, hour));
        assert!(!within("ns/a", 2, on, hour), "another program");
        assert!(!within("ns/a", 1, on, Duration::ZERO), "too old");
        // Only on what it was made on.
        for other in [
            Asked { epoch: 1, ..on },
            Asked {
                generation: Some(2),
                ..on
            },
        ] {
            assert!(!within("ns/a", 1, other, hour), "{other:?}");
        }
        // The same check recorded again keeps the confirmation...
        p.record("ns/a", "sw1", cookie(1));
        assert!(within("ns/a", 1, on, hour));
        // ...a new one drops it, and a probe of the old one does not count.
        p.record("ns/a", "sw1", cookie(2));
        p.confirmed("ns/a", &cookie(1), on);
        assert!(!within("ns/a", 2, on, hour) && !within("ns/a", 1, on, hour));
        p.confirmed("ns/a", &cookie(2), on);
        assert!(within("ns/a", 2, on, hour));
        // Moved to another Switch: not yet probed there.
        p.record("ns/a", "sw2", cookie(2));
        assert!(!within("ns/a", 2, on, hour), "not probed on sw2");
        p.confirmed("ns/a", &cookie(2), on);
        // A probe that did not find it takes the confirmation back.
        p.lost("ns/a");
        assert!(!within("ns/a", 2, on, hour));
        p.confirmed("ns/a", &cookie(2), on);
        p.forget("ns/a");
        assert!(!within("ns/a", 2, on, hour));
        p.record("ns/b", "sw3", cookie(3));
        p.confirmed("ns/b", &cookie(3), on);
        p.unconfirm_switch("sw3");
        assert!(!within("ns/b", 3, on, hour), "a new connection");
        assert!(p.checked("ns/b"), "still checked by the probe");
        p.confirmed("ns/b", &cookie(3), on);
        p.forget_switch("sw3");
        assert!(!within("ns/b", 3, on, hour));
    }

    #[tokio::test]
    async fn a_lost_pipeline_names_its_virtual_switch() {
        let p = LoadedPipelines::default();
        let mut rx = p.subscribe();
        p.lost("ns/a");
        assert_eq!(rx.recv().await.unwrap(), "ns/a");
    }

    #[test]
    fn a_slot_holds_only_with_its_digest_isolation_and_port_map() {
        let iso = Some(pb::Isolation {
            vlan_id: 7,
            ..Default::default()
        });
        let ports = vec![pb::PortMapping {
            physical_port: 1,
            virtual_port: 0,
        }];
        let check = PipelineCheck::Slot {
            slot: 2,
            digest: "d1".into(),
            isolation: iso.clone(),
            port_map: ports.clone(),
        };
        let mut state = pb::SlotState {
            slot: 2,
            phase: pb::SlotPhase::Loaded as i32,
            program_digest: "d1".into(),
            isolation: iso,
            port_map: ports,
            ..Default::default()
        };
        assert!(check.slot_holds(&state));
        state.port_map.clear();
        assert!(!check.slot_holds(&state), "port map changed");
        state.port_map = vec![pb::PortMapping {
            physical_port: 1,
            virtual_port: 0,
        }];
        state.isolation = None;
        assert!(!check.slot_holds(&state), "isolation gone");
        state.isolation = Some(pb::Isolation {
            vlan_id: 7,
            ..Default::default()
        });
        state.program_digest = "d2".into();
        assert!(!check.slot_holds(&state), "another program");
        state.program_digest = "d1".into();
        state.phase = pb::SlotPhase::Empty as i32;
        assert!(!check.slot_holds(&state), "emptied");
        assert!(!cookie(1).slot_holds(&state));
    }
}
