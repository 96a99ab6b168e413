//! The built-in traffic source and its accounting. Pure: callers pass the
//! time.
//!
//! A line-rate hardware data plane is modelled, not simulated packet by
//! packet: each flow offers a constant rate, and the packets it has
//! offered by time `t` are `floor(pps × (t − start))`. Whatever decides a
//! packet's fate (the board's steering and slot phases) only changes at
//! events, so [`Traffic::advance`] runs up to each event with the state
//! that held before it: the packets offered since the previous event all
//! get the fate of that interval. Counts are exact integers and telescope:
//! over any span, the packets a flow's counters gained are the packets it
//! offered, none lost or counted twice however many events fall inside.

use std::time::Instant;

use super::isolation::Sid;

/// Where a flow's frames go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// Frames carrying whatever Sid the slot has, entering on the slot's
    /// first mapped physical port: the hosts of that virtual switch. They
    /// send nothing while the slot has no Sid.
    Slot(u32),
    /// Frames with a fixed Sid entering on `port`.
    Sid { sid: Sid, port: u32 },
}

/// An offered flow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlowSpec {
    pub target: Target,
    /// Packets per second.
    pub pps: u64,
    pub packet_bytes: u32,
}

/// What happened to a flow's packets over an interval.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fate {
    /// Received and sent out by the slot.
    Forwarded(u32),
    /// Steered to the slot, which could not take them (not Loaded, or the
    /// ingress port is not in its port map).
    Dropped(u32),
    /// No slot has the frames' Sid.
    Unmatched,
    /// The flow sends nothing (a slot flow whose slot has no Sid).
    Silent,
}

/// Packet and byte counters of one slot (monotonic).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct PacketCounters {
    pub rx_packets: u64,
    pub rx_bytes: u64,
    pub tx_packets: u64,
    pub tx_bytes: u64,
    pub dropped_packets: u64,
    pub dropped_bytes: u64,
}

/// Every counter of the board.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Counters {
    pub slots: Vec<PacketCounters>,
    pub unmatched_packets: u64,
    pub unmatched_bytes: u64,
    /// Packets sent by all flows so far (= forwarded + dropped +
    /// unmatched).
    pub offered_packets: u64,
}

#[derive(Debug, Clone)]
struct Flow {
    spec: FlowSpec,
    /// When the flow started at this rate.
    start: Instant,
    /// Packets counted since `start`.
    counted: u64,
}

impl Flow {
    /// Packets offered from `start` to `now`.
    fn offered(&self, now: Instant) -> u64 {
        let ns = now.saturating_duration_since(self.start).as_nanos();
        u64::try_from(self.spec.pps as u128 * ns / 1_000_000_000).unwrap_or(u64::MAX)
    }
}

/// The offered flows and the counters they fed.
#[derive(Debug, Clone)]
pub(crate) struct Traffic {
    flows: Vec<Flow>,
    counters: Counters,
}

impl Traffic {
    pub fn new(slots: u32) -> Traffic {
        Traffic {
            flows: Vec::new(),
            counters: Counters {
                slots: vec![PacketCounters::default(); slots as usize],
                ..Default::default()
            },
        }
    }

    /// Counts every packet offered up to `now`, each with the fate `fate`
    /// gives its flow (the state since the previous call).
    pub fn advance(&mut self, now: Instant, fate: impl Fn(&FlowSpec) -> Fate) {
        for f in &mut self.flows {
            let offered = f.offered(now);
            let n = offered.saturating_sub(f.counted);
            if n == 0 {
                continue;
            }
            f.counted = offered;
            let bytes = n * u64::from(f.spec.packet_bytes);
            let c = &mut self.counters;
            let fate = fate(&f.spec);
            if fate != Fate::Silent {
                c.offered_packets += n;
            }
            match fate {
                Fate::Forwarded(s) => {
                    let s = &mut c.slots[s as usize];
                    s.rx_packets += n;
                    s.rx_bytes += bytes;
                    s.tx_packets += n;
                    s.tx_bytes += bytes;
                }
                Fate::Dropped(s) => {
                    let s = &mut c.slots[s as usize];
                    s.dropped_packets += n;
                    s.dropped_bytes += bytes;
                }
                Fate::Unmatched => {
                    c.unmatched_packets += n;
                    c.unmatched_bytes += bytes;
                }
                Fate::Silent => {}
            }
        }
    }

    /// Replaces every flow from `now` on. Call [`Traffic::advance`] to `now`
    /// first, so what was offered until now is counted.
    pub fn set_flows(&mut self, now: Instant, specs: impl IntoIterator<Item = FlowSpec>) {
        self.flows = specs
            .into_iter()
            .filter(|s| s.pps > 0)
            .map(|spec| Flow {
                spec,
                start: now,
                counted: 0,
            })
            .collect();
    }

    pub fn flows(&self) -> impl Iterator<Item = FlowSpec> + '_ {
        self.flows.iter().map(|f| f.spec)
    }

    pub fn counters(&self) -> &Counters {
        &self.counters
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn flow(target: Target, pps: u64) -> FlowSpec {
        FlowSpec {
            target,
            pps,
            packet_bytes: 100,
        }
    }

    #[test]
    fn counts_are_rate_times_time_in_each_state() {
        let t0 = Instant::now();
        let ms = |n| t0 + Duration::from_millis(n);
        let mut t = Traffic::new(2);
        t.set_flows(t0, [flow(Target::Slot(0), 1000), flow(Target::Slot(1), 3)]);
        // Slot 0 forwards for 250 ms, is dropped for 500 ms (a load), then
        // forwards again; slot 1 forwards throughout.
        let mut loading = false;
        let fate = |loading: bool| {
            move |f: &FlowSpec| match f.target {
                Target::Slot(0) if loading => Fate::Dropped(0),
                Target::Slot(s) => Fate::Forwarded(s),
                Target::Sid { .. } => Fate::Unmatched,
            }
        };
        t.advance(ms(250), fate(loading));
        loading = true;
        t.advance(ms(750), fate(loading));
        loading = false;
        t.advance(ms(1000), fate(loading));
        let c = t.counters();
        assert_eq!(c.slots[0].rx_packets, 500);
        assert_eq!(c.slots[0].tx_bytes, 50_000);
        assert_eq!(c.slots[0].dropped_packets, 500);
        assert_eq!(c.slots[1].rx_packets, 3);
        assert_eq!(c.slots[1].dropped_packets, 0);
        assert_eq!(c.offered_packets, 1003);
    }

    #[test]
    fn many_events_lose_no_packet() {
        let t0 = Instant::now();
        let mut t = Traffic::new(1);
        t.set_flows(t0, [flow(Target::Slot(0), 7)]);
        // 7 pps sampled every 13 ms for 10 s: partial packets carry over.
        for i in 1..=770 {
            let fate = if i % 2 == 0 {
                Fate::Forwarded(0)
            } else {
                Fate::Dropped(0)
            };
            t.advance(t0 + Duration::from_millis(13 * i), |_| fate);
        }
        let c = &t.counters().slots[0];
        assert_eq!(c.rx_packets + c.dropped_packets, 70);
        assert_eq!(t.counters().offered_packets, 70);
    }

    #[test]
    fn new_flows_start_from_now_and_keep_what_was_counted() {
        let t0 = Instant::now();
        let s = |n| t0 + Duration::from_secs(n);
        let mut t = Traffic::new(1);
        let sid = Target::Sid {
            sid: Sid {
                vlan: 5,
                dst_mac: None,
            },
            port: 0,
        };
        t.set_flows(t0, [flow(sid, 10)]);
        t.advance(s(2), |_| Fate::Unmatched);
        t.set_flows(s(2), [flow(sid, 100), flow(Target::Slot(0), 0)]);
        assert_eq!(t.flows().count(), 1, "idle flows are not kept");
        t.advance(s(3), |_| Fate::Unmatched);
        assert_eq!(t.counters().unmatched_packets, 120);
        assert_eq!(t.counters().unmatched_bytes, 12_000);
        // Silent intervals send nothing.
        t.advance(s(4), |_| Fate::Silent);
        assert_eq!(t.counters().offered_packets, 120);
        // Time going backwards (or not at all) counts nothing.
        t.advance(s(1), |_| Fate::Unmatched);
        assert_eq!(t.counters().offered_packets, 120);
    }
}
