//! Data-plane packets/s of a rollout's VirtualSwitches, asked of their
//! devices where the target reports it, for the gate's throughput check
//! (`rollout::checks`):
//! - a DPDK pipeline: the forwarded packets/s its extern runtime reports
//!   (`GetStats`, over the target's own sampling interval);
//! - an FPGA slot: the packets it sent, from two reads of the board's
//!   monotonic slot counters [`SPAN`] apart;
//! - a Bmv2 or Tofino program: the packets its direct counters counted,
//!   summed over every table with a packet-counting direct counter in the
//!   P4Info the device runs, from two reads [`SPAN`] apart (P4Runtime
//!   `DirectCounterEntry` reads; over BFRT, the tables' `$COUNTER_SPEC_PKTS`).
//!   A program without one reports no rate: its check says "not reported".
//!
//! Figures are asked at each look of the gate rather than read from
//! status (an AsyncExternPolicy's rate is written only when it changes,
//! with no time of its own), so a figure is never older than the look
//! that judges it.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::ResourceExt;
use p4fleet_crds::{Switch, SwitchTarget};
use p4fleet_proto::externs::{self as pb, extern_runtime_client::ExternRuntimeClient};
use p4fleet_proto::p4info::P4Info;

use crate::devices::DevicePool;

/// Time between the two reads of a monotonic counter (an FPGA board's
/// slot counters, a program's direct counters): long enough for a rate
/// at line rate, short enough for a reconcile.
pub const SPAN: Duration = Duration::from_millis(500);
/// The longest one device is waited for: a device that does not answer
/// has no figure (the check waits for one), it does not hold the gate.
const CALL_DEADLINE: Duration = Duration::from_secs(3);
/// Devices asked at once.
const PARALLEL: usize = 32;

/// Where a VirtualSwitch's rate comes from.
#[derive(Debug, Clone, PartialEq)]
pub enum Source {
    /// The Switch's extern runtime, at the VirtualSwitch's device id.
    Dpdk(p4fleet_client::Target),
    /// Slot `n` of an FPGA board.
    FpgaSlot(u32),
    /// The direct counters of the program in `slot` of a P4Runtime or
    /// BFRT device; on a Tofino pipe set, through the program's own
    /// client (`first_pipe`).
    DirectCounters { slot: u32, first_pipe: Option<u32> },
}

/// The source of a VirtualSwitch in `slot` of `sw` (on the pipe set from
/// `first_pipe`, if any), if its target can report a rate. Whether a
/// Bmv2 or Tofino program does (has a direct counter) is known only from
/// the device, at the sample.
pub fn source(
    devices: &DevicePool,
    sw: &Switch,
    slot: Option<u32>,
    first_pipe: Option<u32>,
) -> Option<Source> {
    match sw.spec.target {
        SwitchTarget::Dpdk => Some(Source::Dpdk(super::extern_runtime::target(
            devices, sw, slot,
        ))),
        SwitchTarget::Fpga => Some(Source::FpgaSlot(slot?)),
        SwitchTarget::Bmv2 | SwitchTarget::Tofino => Some(Source::DirectCounters {
            slot: slot.unwrap_or(0),
            first_pipe,
        }),
    }
}

/// One VirtualSwitch to ask about.
#[derive(Debug, Clone)]
pub struct Ask {
    pub virtual_switch: String,
    pub switch: Switch,
    pub source: Source,
}

impl Ask {
    /// VirtualSwitch `vs` in `slot` of `sw` (on the pipe set from
    /// `first_pipe`, if any), if its target can report a rate.
    pub fn of(
        devices: &DevicePool,
        vs: String,
        sw: &Switch,
        slot: Option<u32>,
        first_pipe: Option<u32>,
    ) -> Option<Ask> {
        Some(Ask {
            source: source(devices, sw, slot, first_pipe)?,
            virtual_switch: vs,
            switch: sw.clone(),
        })
    }
}

/// Packets/s between two reads of a monotonic counter, `secs` apart;
/// None when the counter went back (a board that restarted) or no time
/// passed.
pub fn rate(first: u64, second: u64, secs: f64) -> Option<u64> {
    let sent = second.checked_sub(first)?;
    (secs > 0.0).then(|| (sent as f64 / secs).round() as u64)
}

/// The packets/s of each asked VirtualSwitch, by name: None where its
/// device did not answer (or gave no figure). A VirtualSwitch whose
/// program turns out to count nothing (no direct counter) is left out:
/// its target reports no rate.
pub async fn sample(devices: &DevicePool, asks: Vec<Ask>) -> HashMap<String, Option<u64>> {
    let (fpga, others): (Vec<Ask>, Vec<Ask>) = asks
        .into_iter()
        .partition(|a| matches!(a.source, Source::FpgaSlot(_)));
    let others = futures::stream::iter(others)
        .map(|a| async move {
            let pps = match &a.source {
                Source::Dpdk(t) => Some(dpdk_rate(devices, &a.switch, t).await),
                Source::DirectCounters { slot, first_pipe } => {
                    counted_rate(devices, &a, *slot, *first_pipe).await
                }
                Source::FpgaSlot(_) => None,
            };
            pps.map(|pps| (a.virtual_switch, pps))
        })
        .buffer_unordered(PARALLEL)
        .collect::<Vec<_>>();
    let (mut got, fpga): (HashMap<String, Option<u64>>, _) = futures::join!(
        async { others.await.into_iter().flatten().collect() },
        fpga_rates(devices, fpga)
    );
    got.extend(fpga);
    got
}

async fn dpdk_rate(devices: &DevicePool, sw: &Switch, t: &p4fleet_client::Target) -> Option<u64> {
    let ch = devices.side_channel_to(&sw.name_any(), t).ok()?;
    let mut client = ExternRuntimeClient::new(ch);
    let ask = client.get_stats(pb::GetStatsRequest {
        target: Some(pb::Target {
            device_id: t.device_id,
            pipeline: String::new(),
        }),
    });
    let stats = tokio::time::timeout(CALL_DEADLINE, ask)
        .await
        .ok()?
        .ok()?
        .into_inner();
    // A pipeline that is not running forwards nothing: that is a figure.
    let p = stats.pipeline?;
    Some(p.packets_per_second.max(0.0).round() as u64)
}

/// The tables of `p4info` whose direct counter counts packets: what a
/// rate is summed over (a bytes-only counter has no packets to count).
pub fn packet_counted_tables(p4info: &P4Info) -> Vec<u32> {
    use p4fleet_proto::p4info::counter_spec::Unit;
    let mut ids: Vec<u32> = p4info
        .direct_counters
        .iter()
        .filter(|c| {
            let unit = c.spec.as_ref().map_or(Unit::Unspecified as i32, |s| s.unit);
            unit == Unit::Packets as i32 || unit == Unit::Both as i32
        })
        .map(|c| c.direct_table_id)
        .collect();
    ids.sort_unstable();
    ids.dedup();
    ids
}

/// The rate of a Bmv2 or Tofino program's direct counters: the outer
/// None when its program has none (no rate reported), the inner one when
/// the device did not answer (or a counter went back between the reads,
/// as when entries were written again).
async fn counted_rate(
    devices: &DevicePool,
    a: &Ask,
    slot: u32,
    first_pipe: Option<u32>,
) -> Option<Option<u64>> {
    let dev = match crate::fleet::slot_claims::program_device(
        devices,
        &a.switch,
        slot,
        first_pipe,
        &a.virtual_switch,
    ) {
        Ok(d) => d,
        Err(_) => return Some(None),
    };
    let p4info = match tokio::time::timeout(CALL_DEADLINE, dev.running_p4info(slot)).await {
        Ok(Ok(Some(p))) => p,
        // No pipeline: nothing forwards, and nothing says what to count.
        // (A BFRT client knows the P4Info once it set or bound the
        // program; before, after an operator restart, the VirtualSwitch
        // reports no rate rather than holding its move.)
        Ok(Ok(None)) => return None,
        _ => return Some(None),
    };
    let tables = packet_counted_tables(&p4info);
    if tables.is_empty() {
        return None;
    }
    let first = counted_packets(&dev, slot, &tables).await;
    let from = Instant::now();
    tokio::time::sleep(SPAN).await;
    let second = counted_packets(&dev, slot, &tables).await;
    let secs = from.elapsed().as_secs_f64();
    Some(match (first, second) {
        (Some(x), Some(y)) => rate(x, y, secs),
        _ => None,
    })
}

/// Packets counted by the direct counters of `tables`, summed; None when
/// the device did not answer.
async fn counted_packets(dev: &p4fleet_client::Device, slot: u32, tables: &[u32]) -> Option<u64> {
    use p4fleet_proto::p4runtime::{self as p4, entity::Entity};
    let filters = tables
        .iter()
        .map(|&table_id| p4::Entity {
            entity: Some(Entity::DirectCounterEntry(p4::DirectCounterEntry {
                table_entry: Some(p4::TableEntry {
                    table_id,
                    ..Default::default()
                }),
                data: None,
            })),
        })
        .collect();
    let read = tokio::time::timeout(CALL_DEADLINE, dev.read_entities(slot, filters))
        .await
        .ok()?
        .ok()?;
    Some(
        read.into_iter()
            .filter_map(|e| match e.entity {
                Some(Entity::DirectCounterEntry(d)) => d.data,
                _ => None,
            })
            .map(|d| d.packet_count.max(0) as u64)
            .sum(),
    )
}

/// One read of a board: its slots' sent packets, and when by the board's
/// clock (if it says) and by this process's.
type Read = (HashMap<u32, u64>, Option<f64>, f64);

/// The FPGA slots' rates: every board read once, then again after
/// [`SPAN`]. The board's own time of each read is used where it
/// gives one (`GetSlotCountersResponse.at`), this process's otherwise.
async fn fpga_rates(devices: &DevicePool, asks: Vec<Ask>) -> HashMap<String, Option<u64>> {
    let mut boards: BTreeMap<String, (Switch, Vec<(String, u32)>)> = BTreeMap::new();
    for a in asks {
        let Source::FpgaSlot(slot) = a.source else {
            continue;
        };
        let e = boards
            .entry(a.switch.name_any())
            .or_insert_with(|| (a.switch.clone(), Vec::new()));
        e.1.push((a.virtual_switch, slot));
    }
    if boards.is_empty() {
        return HashMap::new();
    }
    let origin = Instant::now();
    let read_all = || {
        futures::future::join_all(
            boards
                .values()
                .map(|(sw, _)| read_board(devices, sw, origin)),
        )
    };
    let first = read_all().await;
    tokio::time::sleep(SPAN).await;
    let second = read_all().await;
    let mut got: HashMap<String, Option<u64>> = boards
        .values()
        .flat_map(|(_, vss)| vss.iter().map(|(vs, _)| (vs.clone(), None)))
        .collect();
    for (((_, vss), a), b) in boards.values().zip(first).zip(second) {
        let (Some((a, board_a, ta)), Some((b, board_b, tb))) = (a, b) else {
            continue;
        };
        // One clock for both reads: the board's where both carry it.
        let secs = match (board_a, board_b) {
            (Some(x), Some(y)) => y - x,
            _ => tb - ta,
        };
        for (vs, slot) in vss {
            let (Some(x), Some(y)) = (a.get(slot), b.get(slot)) else {
                continue;
            };
            got.insert(vs.clone(), rate(*x, *y, secs));
        }
    }
    got
}

async fn read_board(devices: &DevicePool, sw: &Switch, origin: Instant) -> Option<Read> {
    let client = devices.slot_client(sw).ok()?;
    let answer = tokio::time::timeout(CALL_DEADLINE, client.counters(Vec::new()))
        .await
        .ok()?
        .ok()?;
    let board = answer
        .at
        .map(|t| t.seconds as f64 + f64::from(t.nanos) / 1e9);
    let local = origin.elapsed().as_secs_f64();
    let sent = answer
        .slots
        .iter()
        .map(|s| (s.slot, s.tx_packets))
        .collect();
    Some((sent, board, local))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rate_is_sent_packets_over_the_time_between_reads() {
        assert_eq!(rate(1_000, 1_500, 0.5), Some(1_000));
        assert_eq!(rate(7, 7, 0.5), Some(0));
        // A board that restarted between the reads: no figure, not a
        // huge one.
        assert_eq!(rate(1_000, 10, 0.5), None);
        assert_eq!(rate(1, 2, 0.0), None);
    }

    fn switch(target: SwitchTarget) -> Switch {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "p4fleet.dev/v1alpha1", "kind": "Switch",
            "metadata": {"name": "sw"},
            "spec": {"target": target, "endpoint": "127.0.0.1:9559", "deviceId": 4}
        }))
        .unwrap()
    }

    #[test]
    fn each_target_has_its_source() {
        let devices = DevicePool::new();
        let dpdk = source(&devices, &switch(SwitchTarget::Dpdk), Some(2), None);
        // The VirtualSwitch's slot picks the device id, as for its policy.
        assert!(matches!(dpdk, Some(Source::Dpdk(t)) if t.device_id == 6));
        let fpga = source(&devices, &switch(SwitchTarget::Fpga), Some(3), None);
        assert_eq!(fpga, Some(Source::FpgaSlot(3)));
        assert_eq!(
            source(&devices, &switch(SwitchTarget::Fpga), None, None),
            None
        );
        assert_eq!(
            source(&devices, &switch(SwitchTarget::Bmv2), None, None),
            Some(Source::DirectCounters {
                slot: 0,
                first_pipe: None
            })
        );
        assert_eq!(
            source(&devices, &switch(SwitchTarget::Tofino), Some(1), Some(2)),
            Some(Source::DirectCounters {
                slot: 1,
                first_pipe: Some(2)
            })
        );
    }

    #[test]
    fn a_rate_counts_the_tables_whose_direct_counter_counts_packets() {
        use p4fleet_proto::p4info::{CounterSpec, DirectCounter, counter_spec::Unit};
        let counter = |table: u32, unit: Unit| DirectCounter {
            spec: Some(CounterSpec { unit: unit as i32 }),
            direct_table_id: table,
            ..Default::default()
        };
        let p4info = P4Info {
            direct_counters: vec![
                counter(30, Unit::Both),
                counter(10, Unit::Packets),
                counter(20, Unit::Bytes),
                counter(40, Unit::Unspecified),
            ],
            ..Default::default()
        };
        assert_eq!(packet_counted_tables(&p4info), vec![10, 30]);
        assert!(packet_counted_tables(&P4Info::default()).is_empty());
    }
}
