//! What an emulated FPGA board is (part, resources and what the static
//! region takes of them, configuration port, slots, Ethernet ports), its
//! presets, and the configuration-time arithmetic. Pure data.
//!
//! The NetFPGA-SUME preset is P4VBox's board (Rodrigues et al., "P4VBox:
//! Enabling P4-based Switch Virtualization"): a Virtex-7 690T whose static
//! region (10G ports and DMA, input arbiter, input and output P4
//! interfaces, control) takes 52,699 LUTs (12.2 %) and 76,241 FFs (8.8 %),
//! the sums of the paper's Table I.
//!
//! Configuration time is `bits / ConfigPort::bps`, where `bps` is what the
//! port achieves, not its nominal rate. P4VBox reports 0.72 s for a 2.8 Mb
//! partial bitstream and 60 s for the full board over a "66 Mbps" JTAG
//! port; 2.8 Mb / 66 Mb/s would be 42 ms and the 690T's 229,878,496-bit
//! full bitstream 3.5 s. Both figures instead fit one effective rate,
//! 2.8 Mb / 0.72 s = 3.89 Mb/s (full: 229,878,496 / 3,888,889 = 59.1 s),
//! 5.9 % of nominal, and the paper's ICAP estimate (~0.015 s) is the same
//! ratio applied to ICAP's 3.2 Gb/s. The presets use that ratio for every
//! port; `--fpga-port-bps` sets the effective rate directly (e.g. the raw
//! 3,200,000,000 for an ICAP controller that streams at full speed).

use std::time::Duration;

/// One kind of FPGA resource over the whole device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceSpec {
    /// e.g. `luts`, `ffs`, `brams`.
    pub name: String,
    pub capacity: u64,
    /// Taken by the static region, never available to slots.
    pub static_region: u64,
}

impl ResourceSpec {
    pub fn new(name: &str, capacity: u64, static_region: u64) -> ResourceSpec {
        ResourceSpec {
            name: name.to_string(),
            capacity,
            static_region,
        }
    }

    /// What slots may use in all: capacity minus the static region.
    pub fn for_slots(&self) -> u64 {
        self.capacity.saturating_sub(self.static_region)
    }
}

/// The configuration port every load goes through, one at a time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigPort {
    /// `jtag`, `icap`, `selectmap` or `serial` for the presets.
    pub name: String,
    /// Clock × width, the interface's maximum (UG909, 7 series).
    pub nominal_bps: u64,
    /// What configuration achieves; loads take `bits / bps`.
    pub bps: u64,
}

/// P4VBox's measured rate over JTAG: 2.8 Mb in 0.72 s.
pub const P4VBOX_JTAG_BPS: u64 = 3_888_889;
/// 7 series JTAG: 66 MHz × 1 bit.
pub const JTAG_NOMINAL_BPS: u64 = 66_000_000;

/// Effective rate of a port of `nominal` bits/s at P4VBox's measured
/// efficiency (3.89 Mb/s of 66 Mb/s), rounded to the nearest bit/s.
pub const fn p4vbox_effective(nominal: u64) -> u64 {
    // nominal × (2.8e6 / 0.72) / 66e6 = nominal × 2.8e8 / 4.752e9
    ((nominal as u128 * 280_000_000 + 2_376_000_000) / 4_752_000_000) as u64
}

impl ConfigPort {
    /// The 7 series ports of UG909's table: JTAG 66 Mb/s, ICAP and
    /// SelectMAP 3.2 Gb/s (100 MHz × 32 bit), serial 100 Mb/s; effective
    /// rates at P4VBox's efficiency.
    pub fn preset(name: &str) -> Result<ConfigPort, UnknownPreset> {
        let nominal = match name {
            "jtag" => JTAG_NOMINAL_BPS,
            "icap" | "selectmap" => 3_200_000_000,
            "serial" => 100_000_000,
            _ => {
                return Err(UnknownPreset {
                    what: "configuration port",
                    name: name.to_string(),
                    known: "jtag, icap, selectmap, serial",
                });
            }
        };
        Ok(ConfigPort {
            name: name.to_string(),
            nominal_bps: nominal,
            bps: p4vbox_effective(nominal),
        })
    }

    /// How long `bits` take through this port (rounded up to the
    /// nanosecond; a port of 0 bits/s never finishes: `Duration::MAX`).
    pub fn load_time(&self, bits: u64) -> Duration {
        if self.bps == 0 {
            return Duration::MAX;
        }
        let nanos = (bits as u128 * 1_000_000_000).div_ceil(self.bps as u128);
        Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
    }
}

/// A physical Ethernet port of the board.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EthernetPort {
    pub id: u32,
    pub name: String,
    pub speed_bps: u64,
}

/// An emulated board.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BoardSpec {
    /// Board model, e.g. `netfpga-sume`.
    pub board: String,
    /// FPGA part.
    pub part: String,
    pub resources: Vec<ResourceSpec>,
    pub config_port: ConfigPort,
    /// Slots (reconfigurable regions), numbered from 0.
    pub slots: u32,
    /// P4Runtime device id of slot 0; slot s is `base_device_id + s`.
    pub base_device_id: u64,
    pub ports: Vec<EthernetPort>,
    /// Length of a full bitstream for the part.
    pub full_bitstream_bits: u64,
}

/// XC7VX690T configuration bitstream length (UG470, Table 1-1).
pub const XC7VX690T_FULL_BITS: u64 = 229_878_496;

/// A preset or port name nobody knows.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {what} {name:?} (known: {known})")]
pub struct UnknownPreset {
    pub what: &'static str,
    pub name: String,
    pub known: &'static str,
}

impl BoardSpec {
    /// Board presets by name: `netfpga-sume`.
    pub fn preset(name: &str) -> Result<BoardSpec, UnknownPreset> {
        match name {
            "netfpga-sume" => Ok(BoardSpec::netfpga_sume()),
            _ => Err(UnknownPreset {
                what: "board",
                name: name.to_string(),
                known: "netfpga-sume",
            }),
        }
    }

    /// P4VBox's NetFPGA-SUME: XC7VX690T (433,200 LUTs, 866,400 FFs, 1,470
    /// 36 Kb BRAMs), static region from Table I (BRAMs not reported: 0),
    /// JTAG, 16 slots, four 10G ports, device ids 1..=16.
    pub fn netfpga_sume() -> BoardSpec {
        BoardSpec {
            board: "netfpga-sume".into(),
            part: "xc7vx690tffg1761-3".into(),
            resources: vec![
                // 4x10G + DMA 26,997, IA 2,120, IPI 229, OPI 6,181, control 17,172.
                ResourceSpec::new("luts", 433_200, 52_699),
                // 34,646 + 4,564 + 1,679 + 9,779 + 25,573.
                ResourceSpec::new("ffs", 866_400, 76_241),
                ResourceSpec::new("brams", 1_470, 0),
            ],
            config_port: ConfigPort::preset("jtag").expect("jtag is a preset"),
            slots: 16,
            base_device_id: 1,
            ports: (0..4)
                .map(|i| EthernetPort {
                    id: i,
                    name: format!("nf{i}"),
                    speed_bps: 10_000_000_000,
                })
                .collect(),
            full_bitstream_bits: XC7VX690T_FULL_BITS,
        }
    }

    /// P4Runtime device id of `slot`.
    pub fn device_id(&self, slot: u32) -> u64 {
        self.base_device_id + u64::from(slot)
    }

    /// P4Runtime device ids of every slot, in slot order.
    pub fn device_ids(&self) -> impl Iterator<Item = u64> + '_ {
        (0..self.slots).map(|s| self.device_id(s))
    }

    pub fn resource(&self, name: &str) -> Option<&ResourceSpec> {
        self.resources.iter().find(|r| r.name == name)
    }

    pub fn port(&self, id: u32) -> Option<&EthernetPort> {
        self.ports.iter().find(|p| p.id == id)
    }
}

/// An emulated board plus the traffic offered to it at start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FpgaConfig {
    pub board: BoardSpec,
    /// Packets/s offered to every slot from the start (0: none); see
    /// `traffic`. Changed later over the side channel.
    pub traffic_pps: u64,
    /// Size of the offered packets, bytes.
    pub packet_bytes: u32,
}

impl FpgaConfig {
    /// A board with no traffic offered yet, 64-byte packets.
    pub fn new(board: BoardSpec) -> FpgaConfig {
        FpgaConfig {
            board,
            traffic_pps: 0,
            packet_bytes: 64,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sume_preset_is_p4vbox_board() {
        let b = BoardSpec::preset("netfpga-sume").unwrap();
        let luts = b.resource("luts").unwrap();
        assert_eq!((luts.capacity, luts.static_region), (433_200, 52_699));
        // "The static part requires around 12.2% of the board's LUTs".
        let share = luts.static_region as f64 / luts.capacity as f64;
        assert!((share - 0.122).abs() < 0.0005, "{share}");
        let ffs = b.resource("ffs").unwrap();
        assert_eq!((ffs.capacity, ffs.static_region), (866_400, 76_241));
        assert_eq!(b.resource("brams").unwrap().capacity, 1_470);
        assert_eq!(b.slots, 16);
        assert_eq!(b.ports.len(), 4);
        assert_eq!(
            b.device_ids().collect::<Vec<_>>(),
            (1..=16).collect::<Vec<_>>()
        );
        assert_eq!(b.config_port.nominal_bps, 66_000_000);
        assert!(BoardSpec::preset("vcu118").is_err());
    }

    #[test]
    fn p4vbox_packing_follows_from_table_one() {
        let b = BoardSpec::netfpga_sume();
        let free = b.resource("luts").unwrap().for_slots();
        // "up to thirteen deployed L2 switch instances, six routers, eight firewalls".
        assert_eq!(free / 28_096, 13);
        assert_eq!(free / 57_704, 6);
        assert_eq!(free / 45_683, 8);
    }

    #[test]
    fn jtag_times_reproduce_p4vbox() {
        let jtag = ConfigPort::preset("jtag").unwrap();
        assert_eq!(jtag.bps, P4VBOX_JTAG_BPS);
        // 2.8 Mb partial bitstream: 0.72 s.
        let partial = jtag.load_time(2_800_000);
        assert_eq!(partial.as_millis(), 719, "{partial:?}");
        assert!(partial > Duration::from_millis(719) && partial <= Duration::from_millis(720));
        // Full 690T bitstream: 229,878,496 / 3,888,889 = 59.1 s ("60 seconds").
        let full = jtag.load_time(XC7VX690T_FULL_BITS);
        assert_eq!(full.as_secs(), 59);
        // At the nominal 66 Mb/s it would be 42 ms and 3.5 s.
        let raw = ConfigPort {
            bps: 66_000_000,
            ..jtag
        };
        assert_eq!(raw.load_time(2_800_000).as_micros(), 42_424);
        assert_eq!(raw.load_time(XC7VX690T_FULL_BITS).as_millis(), 3_483);
    }

    #[test]
    fn icap_reproduces_the_p4vbox_estimate() {
        let icap = ConfigPort::preset("icap").unwrap();
        assert_eq!(icap.nominal_bps, 3_200_000_000);
        assert_eq!(icap.bps, 188_552_189);
        // "possibly lowering deployment times to around 0.015 seconds".
        assert_eq!(icap.load_time(2_800_000).as_micros(), 14_850);
        assert_eq!(ConfigPort::preset("selectmap").unwrap().bps, icap.bps);
        assert!(ConfigPort::preset("pcie").is_err());
    }

    #[test]
    fn load_time_rounds_up_and_never_divides_by_zero() {
        let p = ConfigPort {
            name: "x".into(),
            nominal_bps: 3,
            bps: 3,
        };
        assert_eq!(p.load_time(1), Duration::from_nanos(333_333_334));
        assert_eq!(p.load_time(0), Duration::ZERO);
        let stuck = ConfigPort { bps: 0, ..p };
        assert_eq!(stuck.load_time(1), Duration::MAX);
    }
}
