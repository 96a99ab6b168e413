//! The board's state machine: each slot's phase and program, what loads
//! are queued, resources held, isolation and port maps, and the traffic
//! they steer. Pure: callers pass the time and hold the board's lock;
//! every change first counts the traffic up to that instant
//! (`super::traffic`), so counters follow the phases exactly.
//!
//! Resources a slot holds: its program's while Loading or Loaded (nothing
//! when Empty or Failed), and while a load is queued the larger of the
//! running and the queued program's, per resource. A swap thus never
//! needs both at once, and nobody else can take what the queued load was
//! promised before it runs.

use std::sync::Arc;
use std::time::{Duration, Instant};

use p4fleet_proto::p4info::P4Info;

use super::error::SlotError;
use super::isolation::{self, PortMap, Sid, SlotIsolation};
use super::resources::{self, Resources};
use super::spec::BoardSpec;
use super::traffic::{Counters, Fate, FlowSpec, Target, Traffic};

/// Phase of a slot, as `p4fleet.fpga.v1.SlotPhase`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    Empty,
    Loading,
    Loaded,
    Failed,
}

/// A program for a slot, as verified from a LoadSlot header.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Program {
    pub digest: String,
    pub sha256: [u8; 32],
    pub size_bits: u64,
    pub resources: Resources,
    pub p4info: P4Info,
}

#[derive(Debug, Clone)]
pub(crate) struct Slot {
    pub phase: Phase,
    /// When `phase` began.
    pub since: Instant,
    /// The program Loading, Loaded or Failed.
    pub program: Option<Arc<Program>>,
    /// Verified and waiting for the configuration port.
    pub queued: Option<Arc<Program>>,
    /// Duration of the last completed load.
    pub last_load: Option<Duration>,
    /// Why the last load failed.
    pub failure: Option<String>,
    pub sid: Option<Sid>,
    pub port_map: PortMap,
}

impl Slot {
    fn new(now: Instant) -> Slot {
        Slot {
            phase: Phase::Empty,
            since: now,
            program: None,
            queued: None,
            last_load: None,
            failure: None,
            sid: None,
            port_map: PortMap::default(),
        }
    }

    /// Resources the slot holds (see the module docs).
    pub fn held(&self) -> Resources {
        let running = match (self.phase, &self.program) {
            (Phase::Loading | Phase::Loaded, Some(p)) => p.resources.clone(),
            _ => Resources::new(),
        };
        match &self.queued {
            Some(q) => resources::max_each(&running, &q.resources),
            None => running,
        }
    }

    fn busy(&self, slot: u32) -> Result<(), SlotError> {
        if self.queued.is_some() || self.phase == Phase::Loading {
            return Err(SlotError::SlotBusy {
                slot,
                queued: self.queued.is_some(),
            });
        }
        Ok(())
    }
}

pub(crate) struct BoardState {
    spec: Arc<BoardSpec>,
    /// A full configuration is running.
    pub configuring: bool,
    /// A full configuration is waiting for the configuration port.
    pub full_queued: bool,
    pub slots: Vec<Slot>,
    traffic: Traffic,
}

impl BoardState {
    pub fn new(spec: Arc<BoardSpec>, now: Instant) -> BoardState {
        BoardState {
            slots: (0..spec.slots).map(|_| Slot::new(now)).collect(),
            traffic: Traffic::new(spec.slots),
            configuring: false,
            full_queued: false,
            spec,
        }
    }

    pub fn slot(&self, slot: u32) -> Result<&Slot, SlotError> {
        self.slots.get(slot as usize).ok_or(SlotError::UnknownSlot {
            slot,
            count: self.spec.slots,
        })
    }

    fn ready(&self) -> Result<(), SlotError> {
        if self.configuring || self.full_queued {
            return Err(SlotError::BoardConfiguring);
        }
        Ok(())
    }

    /// Resources held by all slots, with every resource of the board.
    pub fn used(&self) -> Resources {
        let mut used: Resources = self
            .spec
            .resources
            .iter()
            .map(|r| (r.name.clone(), 0))
            .collect();
        for s in &self.slots {
            resources::add(&mut used, &s.held());
        }
        used
    }

    /// What is free for slots, per resource of the board.
    pub fn free(&self) -> Resources {
        let used = self.used();
        self.spec
            .resources
            .iter()
            .map(|r| {
                let u = used.get(&r.name).copied().unwrap_or(0);
                (r.name.clone(), r.for_slots().saturating_sub(u))
            })
            .collect()
    }

    /// Whether `need` may be loaded into `slot` now: the slot exists and
    /// is not busy, the board is ready, every resource is one the board
    /// has and fits what is free plus what the slot holds (its program is
    /// replaced).
    pub fn check_load(&self, slot: u32, need: &Resources) -> Result<(), SlotError> {
        let s = self.slot(slot)?;
        self.ready()?;
        s.busy(slot)?;
        if let Some(name) = need.keys().find(|n| self.spec.resource(n).is_none()) {
            return Err(SlotError::UnknownResource {
                slot,
                name: name.clone(),
                known: self
                    .spec
                    .resources
                    .iter()
                    .map(|r| r.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            });
        }
        let mut free = self.free();
        resources::add(&mut free, &s.held());
        let shortfalls = resources::shortfalls(need, &free);
        if !shortfalls.is_empty() {
            return Err(SlotError::InsufficientResources { slot, shortfalls });
        }
        Ok(())
    }

    /// Queues a verified load: the slot keeps running what it runs until
    /// the load gets the configuration port ([`BoardState::begin_load`]).
    pub fn queue_load(&mut self, slot: u32, program: Arc<Program>) -> Result<(), SlotError> {
        self.check_load(slot, &program.resources)?;
        self.slots[slot as usize].queued = Some(program);
        Ok(())
    }

    /// The queued load of `slot` starts: the slot is Loading (its old
    /// program is gone) from `now`. `None` if nothing is queued.
    pub fn begin_load(&mut self, slot: u32, now: Instant) -> Option<Arc<Program>> {
        let program = self.slots.get_mut(slot as usize)?.queued.take()?;
        self.advance(now);
        let s = &mut self.slots[slot as usize];
        s.phase = Phase::Loading;
        s.since = now;
        s.program = Some(program.clone());
        s.failure = None;
        Some(program)
    }

    /// The load of `slot` ends at `now`: Loaded, or Failed with `failure`.
    /// Returns how long it was Loading.
    pub fn finish_load(&mut self, slot: u32, now: Instant, failure: Option<String>) -> Duration {
        self.advance(now);
        let s = &mut self.slots[slot as usize];
        debug_assert_eq!(s.phase, Phase::Loading);
        let took = now.saturating_duration_since(s.since);
        s.since = now;
        match failure {
            None => {
                s.phase = Phase::Loaded;
                s.last_load = Some(took);
            }
            Some(why) => {
                s.phase = Phase::Failed;
                s.failure = Some(why);
            }
        }
        took
    }

    /// Empties a slot that is not busy: program, isolation and port map.
    pub fn unload(&mut self, slot: u32, now: Instant) -> Result<(), SlotError> {
        self.slot(slot)?.busy(slot)?;
        self.ready()?;
        self.advance(now);
        let last_load = self.slots[slot as usize].last_load;
        self.slots[slot as usize] = Slot {
            last_load,
            ..Slot::new(now)
        };
        Ok(())
    }

    /// Sets (or with `None` clears) the Sid of `slot`.
    pub fn set_isolation(
        &mut self,
        slot: u32,
        sid: Option<Sid>,
        now: Instant,
    ) -> Result<(), SlotError> {
        let s = self.slot(slot)?;
        self.ready()?;
        if let Some(sid) = sid {
            isolation::check(
                slot,
                sid,
                &s.port_map,
                &isolation_view(&self.slots),
                &self.spec,
            )?;
        }
        self.advance(now);
        self.slots[slot as usize].sid = sid;
        Ok(())
    }

    pub fn set_port_map(&mut self, slot: u32, map: PortMap, now: Instant) -> Result<(), SlotError> {
        let s = self.slot(slot)?;
        self.ready()?;
        if let Some(sid) = s.sid {
            isolation::check(slot, sid, &map, &isolation_view(&self.slots), &self.spec)?;
        }
        self.advance(now);
        self.slots[slot as usize].port_map = map;
        Ok(())
    }

    /// Queues a full configuration: from now on slot calls are refused
    /// until it is done. Refused while a slot load is queued or running.
    pub fn queue_full(&mut self) -> Result<(), SlotError> {
        self.ready()?;
        for (i, s) in self.slots.iter().enumerate() {
            s.busy(i as u32)?;
        }
        self.full_queued = true;
        Ok(())
    }

    /// The full configuration starts: every slot is Empty, with no
    /// isolation or port map (the control module is reset with the rest).
    pub fn begin_full(&mut self, now: Instant) {
        self.advance(now);
        self.full_queued = false;
        self.configuring = true;
        for s in &mut self.slots {
            *s = Slot {
                last_load: s.last_load,
                ..Slot::new(now)
            };
        }
    }

    pub fn finish_full(&mut self, now: Instant) {
        self.advance(now);
        self.configuring = false;
    }

    /// Counts the traffic offered up to `now` with the current state.
    fn advance(&mut self, now: Instant) {
        let slots = &self.slots;
        let spec = &self.spec;
        // While the board configures, every Sid is cleared: nothing matches.
        let view = isolation_view(slots);
        self.traffic.advance(now, |f| fate(f, slots, &view, spec));
    }

    /// Every counter, up to `now`.
    pub fn counters(&mut self, now: Instant) -> &Counters {
        self.advance(now);
        self.traffic.counters()
    }

    /// Replaces the offered flows from `now` on.
    pub fn set_flows(&mut self, now: Instant, flows: Vec<FlowSpec>) -> Result<(), SlotError> {
        for f in &flows {
            match f.target {
                Target::Slot(s) => {
                    self.slot(s)?;
                }
                Target::Sid { port, .. } if self.spec.port(port).is_none() => {
                    return Err(SlotError::BadRequest {
                        slot: None,
                        msg: format!("flow enters on physical port {port}, which the board lacks"),
                    });
                }
                Target::Sid { .. } => {}
            }
        }
        self.advance(now);
        self.traffic.set_flows(now, flows);
        Ok(())
    }

    pub fn flows(&self) -> Vec<FlowSpec> {
        self.traffic.flows().collect()
    }
}

fn isolation_view(slots: &[Slot]) -> Vec<SlotIsolation<'_>> {
    slots
        .iter()
        .enumerate()
        .map(|(i, s)| SlotIsolation {
            slot: i as u32,
            sid: s.sid,
            ports: &s.port_map,
        })
        .collect()
}

/// Where a flow's frames go with the board as it is: the input interface
/// steers by Sid, the slot takes them if Loaded and the ingress port is in
/// its port map.
fn fate(f: &FlowSpec, slots: &[Slot], view: &[SlotIsolation<'_>], spec: &BoardSpec) -> Fate {
    let (sid, port) = match f.target {
        Target::Slot(s) => {
            let slot = &slots[s as usize];
            let Some(sid) = slot.sid else {
                return Fate::Silent;
            };
            let port = slot.port_map.first_physical(spec).unwrap_or(0);
            (sid, port)
        }
        Target::Sid { sid, port } => (sid, port),
    };
    // A flow addressed to a VLAN only carries some destination; any one
    // that no slot claims exactly.
    let mac = sid.dst_mac.unwrap_or([0xff; 6]);
    let Some(to) = isolation::steer(sid.vlan, mac, view) else {
        return Fate::Unmatched;
    };
    let slot = &slots[to as usize];
    if slot.phase == Phase::Loaded && slot.port_map.virtual_of(port, spec).is_some() {
        Fate::Forwarded(to)
    } else {
        Fate::Dropped(to)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn program(luts: u64, ffs: u64) -> Arc<Program> {
        Arc::new(Program {
            digest: format!("p{luts}"),
            sha256: [0; 32],
            size_bits: 8,
            resources: [("luts".to_string(), luts), ("ffs".to_string(), ffs)].into(),
            p4info: P4Info::default(),
        })
    }

    fn board() -> (BoardState, Instant) {
        let now = Instant::now();
        (
            BoardState::new(Arc::new(BoardSpec::netfpga_sume()), now),
            now,
        )
    }

    fn load(b: &mut BoardState, slot: u32, p: Arc<Program>, now: Instant) -> Result<(), SlotError> {
        b.queue_load(slot, p)?;
        b.begin_load(slot, now).unwrap();
        b.finish_load(slot, now, None);
        Ok(())
    }

    #[test]
    fn thirteen_l2_switches_fit_the_fourteenth_does_not() {
        let (mut b, now) = board();
        for s in 0..13 {
            load(&mut b, s, program(28_096, 40_506), now).unwrap();
        }
        let e = load(&mut b, 13, program(28_096, 40_506), now).unwrap_err();
        assert_eq!(
            e.to_string(),
            "slot 13: insufficient luts (need 28096, free 15253)"
        );
        // Unloading one frees its share.
        b.unload(4, now).unwrap();
        assert_eq!(b.free()["luts"], 15_253 + 28_096);
        load(&mut b, 13, program(28_096, 40_506), now).unwrap();
    }

    #[test]
    fn a_swap_counts_what_the_slot_holds_and_queued_loads_reserve() {
        let (mut b, now) = board();
        load(&mut b, 0, program(300_000, 1), now).unwrap();
        // Replacing slot 0's program: its 300,000 LUTs count as free for it.
        b.check_load(0, &program(370_000, 1).resources).unwrap();
        assert!(b.check_load(1, &program(90_000, 1).resources).is_err());
        // A queued smaller program keeps the larger running one's share
        // reserved until it runs.
        b.queue_load(0, program(10_000, 1)).unwrap();
        assert_eq!(b.used()["luts"], 300_000);
        assert!(matches!(
            b.check_load(0, &program(1, 1).resources),
            Err(SlotError::SlotBusy {
                slot: 0,
                queued: true
            })
        ));
        b.begin_load(0, now).unwrap();
        assert_eq!(b.used()["luts"], 10_000);
        assert!(matches!(
            b.unload(0, now),
            Err(SlotError::SlotBusy { queued: false, .. })
        ));
        b.finish_load(0, now, Some("no sync word".into()));
        assert_eq!(b.slots[0].phase, Phase::Failed);
        assert_eq!(b.used()["luts"], 0, "a failed slot holds nothing");
    }

    #[test]
    fn unknown_slots_and_resources_are_refused() {
        let (b, _) = board();
        assert!(matches!(
            b.check_load(16, &Resources::new()),
            Err(SlotError::UnknownSlot {
                slot: 16,
                count: 16
            })
        ));
        let e = b
            .check_load(0, &[("dsps".to_string(), 1)].into())
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "slot 0: unknown resource \"dsps\" (the board has luts, ffs, brams)"
        );
    }

    #[test]
    fn full_configuration_empties_every_slot_and_blocks_slot_calls() {
        let (mut b, now) = board();
        load(&mut b, 0, program(1, 1), now).unwrap();
        let sid = Sid {
            vlan: 10,
            dst_mac: None,
        };
        b.set_isolation(0, Some(sid), now).unwrap();
        b.queue_load(1, program(1, 1)).unwrap();
        assert_eq!(
            b.queue_full(),
            Err(SlotError::SlotBusy {
                slot: 1,
                queued: true
            })
        );
        b.begin_load(1, now).unwrap();
        b.finish_load(1, now, None);
        b.queue_full().unwrap();
        assert_eq!(
            b.check_load(1, &Resources::new()),
            Err(SlotError::BoardConfiguring)
        );
        assert_eq!(b.queue_full(), Err(SlotError::BoardConfiguring));
        b.begin_full(now);
        assert_eq!(b.slots[0].phase, Phase::Empty);
        assert_eq!(b.slots[0].sid, None);
        assert!(b.set_isolation(0, Some(sid), now).is_err());
        b.finish_full(now);
        b.set_isolation(0, Some(sid), now).unwrap();
    }

    #[test]
    fn traffic_follows_sid_phase_and_port_map() {
        let (mut b, t0) = board();
        let at = |ms| t0 + Duration::from_millis(ms);
        let v = |vlan| Sid {
            vlan,
            dst_mac: None,
        };
        let stray = FlowSpec {
            target: Target::Sid {
                sid: v(99),
                port: 0,
            },
            pps: 1000,
            packet_bytes: 64,
        };
        let to = |slot| FlowSpec {
            target: Target::Slot(slot),
            pps: 1000,
            packet_bytes: 64,
        };
        b.set_flows(t0, vec![to(0), to(1), stray]).unwrap();
        load(&mut b, 0, program(1, 1), t0).unwrap();
        b.set_isolation(0, Some(v(10)), t0).unwrap();
        b.set_isolation(1, Some(v(20)), t0).unwrap();
        // 0-100 ms: slot 0 forwards, slot 1 is Empty (drops), 99 matches nothing.
        b.queue_load(1, program(1, 1)).unwrap();
        b.begin_load(1, at(100)).unwrap();
        // 100-300 ms: slot 1 Loading (drops).
        b.finish_load(1, at(300), None);
        // 300-400 ms: both forward. Then slot 0 maps only port 3, but its
        // frames enter on its first mapped port: still forwarded.
        let pm = |p| p4fleet_proto::fpga::PortMapping {
            physical_port: p,
            virtual_port: 0,
        };
        let only3 = PortMap::from_proto(0, &[pm(3)], &b.spec).unwrap();
        b.set_port_map(0, only3, at(400)).unwrap();
        let c = b.counters(at(500)).clone();
        assert_eq!(c.slots[0].rx_packets, 500);
        assert_eq!(c.slots[0].dropped_packets, 0);
        assert_eq!(c.slots[1].dropped_packets, 300);
        assert_eq!(c.slots[1].rx_packets, 200);
        assert_eq!(c.unmatched_packets, 500);
        assert_eq!(c.offered_packets, 1500);
        // A fixed-Sid flow on a port the slot does not map is dropped there.
        let wrong_port = FlowSpec {
            target: Target::Sid {
                sid: v(10),
                port: 1,
            },
            ..stray
        };
        b.set_flows(at(500), vec![wrong_port]).unwrap();
        assert_eq!(b.counters(at(600)).slots[0].dropped_packets, 100);
    }
}
