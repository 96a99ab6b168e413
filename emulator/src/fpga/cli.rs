//! The binary's FPGA flags (`--fpga netfpga-sume` and the parameters that
//! override the preset) and its `fpga-*` subcommands.

use std::io::Write;
use std::path::PathBuf;

use super::bench::{self, BenchArgs};
use super::bitstream;
use super::spec::{BoardSpec, ConfigPort, EthernetPort, FpgaConfig, ResourceSpec};

/// `--fpga*` flags; every `--fpga-*` needs `--fpga`.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct FpgaArgs {
    /// Emulate an FPGA board from a preset (`netfpga-sume`): its slots are
    /// P4Runtime devices (base device id + slot) and the slot service
    /// (p4fleet.fpga.v1) shares the P4Runtime port.
    #[arg(long, value_name = "PRESET")]
    pub fpga: Option<String>,
    /// FPGA part name reported by GetBoardInfo.
    #[arg(long, requires = "fpga")]
    pub fpga_part: Option<String>,
    /// A resource as NAME=CAPACITY[/STATIC], e.g. luts=433200/52699
    /// (repeatable; replaces the preset's resource of that name or adds one).
    #[arg(long = "fpga-resource", requires = "fpga", value_parser = parse_resource)]
    pub fpga_resources: Vec<ResourceSpec>,
    /// Configuration port: jtag (preset default), icap, selectmap, serial.
    #[arg(long, requires = "fpga")]
    pub fpga_port: Option<String>,
    /// Effective configuration speed, bits/s (loads take bits / this);
    /// overrides the port's.
    #[arg(long, requires = "fpga")]
    pub fpga_port_bps: Option<u64>,
    /// Number of slots.
    #[arg(long, requires = "fpga")]
    pub fpga_slots: Option<u32>,
    /// P4Runtime device id of slot 0.
    #[arg(long, requires = "fpga")]
    pub fpga_base_device_id: Option<u64>,
    /// Number of Ethernet ports (0..N-1, named nfI).
    #[arg(long, requires = "fpga")]
    pub fpga_eth_ports: Option<u32>,
    /// Speed of each Ethernet port, bits/s.
    #[arg(long, requires = "fpga")]
    pub fpga_eth_port_bps: Option<u64>,
    /// Size of the part's full bitstream, bits.
    #[arg(long, requires = "fpga")]
    pub fpga_full_bits: Option<u64>,
    /// Packets/s offered to every slot from the start (default 0).
    #[arg(long, requires = "fpga")]
    pub fpga_traffic_pps: Option<u64>,
    /// Size of offered packets, bytes (default 64).
    #[arg(long, requires = "fpga")]
    pub fpga_packet_bytes: Option<u32>,
}

fn parse_resource(s: &str) -> Result<ResourceSpec, String> {
    let (name, amounts) = s
        .split_once('=')
        .ok_or_else(|| format!("expected NAME=CAPACITY[/STATIC], got {s:?}"))?;
    let (capacity, static_region) = amounts.split_once('/').unwrap_or((amounts, "0"));
    let num = |v: &str| {
        v.parse::<u64>()
            .map_err(|e| format!("{s:?}: {v:?} is not a count: {e}"))
    };
    Ok(ResourceSpec::new(name, num(capacity)?, num(static_region)?))
}

impl FpgaArgs {
    /// The board these flags describe (`None` without `--fpga`).
    pub fn config(&self) -> Result<Option<FpgaConfig>, String> {
        let Some(preset) = &self.fpga else {
            return Ok(None);
        };
        let mut b = BoardSpec::preset(preset).map_err(|e| e.to_string())?;
        if let Some(p) = &self.fpga_part {
            b.part = p.clone();
        }
        for r in &self.fpga_resources {
            match b.resources.iter_mut().find(|x| x.name == r.name) {
                Some(x) => *x = r.clone(),
                None => b.resources.push(r.clone()),
            }
        }
        if let Some(p) = &self.fpga_port {
            b.config_port = ConfigPort::preset(p).map_err(|e| e.to_string())?;
        }
        if let Some(bps) = self.fpga_port_bps {
            b.config_port.bps = bps;
        }
        if let Some(n) = self.fpga_slots {
            b.slots = n;
        }
        if let Some(id) = self.fpga_base_device_id {
            b.base_device_id = id;
        }
        let speed = self
            .fpga_eth_port_bps
            .or(b.ports.first().map(|p| p.speed_bps))
            .unwrap_or(10_000_000_000);
        let count = self.fpga_eth_ports.unwrap_or(b.ports.len() as u32);
        b.ports = (0..count)
            .map(|i| EthernetPort {
                id: i,
                name: format!("nf{i}"),
                speed_bps: speed,
            })
            .collect();
        if let Some(bits) = self.fpga_full_bits {
            b.full_bitstream_bits = bits;
        }
        let mut config = FpgaConfig::new(b);
        config.traffic_pps = self.fpga_traffic_pps.unwrap_or(0);
        config.packet_bytes = self.fpga_packet_bytes.unwrap_or(64);
        Ok(Some(config))
    }
}

/// `p4fleet-emulator fpga-*` subcommands.
#[derive(clap::Subcommand, Debug, Clone)]
pub enum Command {
    /// Writes a deterministic synthetic partial bitstream (no Vivado here;
    /// real ones come from the Xilinx flow). Prints its sha256 on stderr.
    FpgaBitstream(BitstreamArgs),
    /// Swap benchmark: slot load time vs bitstream size per configuration
    /// port, and packets lost on the other slots (markdown on stdout).
    FpgaBench(BenchArgs),
}

#[derive(clap::Args, Debug, Clone)]
pub struct BitstreamArgs {
    /// Size in bits (a multiple of 32), e.g. 2800000 for P4VBox's 2.8 Mb.
    #[arg(long)]
    pub bits: u64,
    /// Seed, e.g. the program name: same seed and size, same bytes.
    #[arg(long)]
    pub seed: String,
    /// Output file (default stdout).
    #[arg(long, short)]
    pub out: Option<PathBuf>,
}

/// Runs a subcommand.
pub async fn run(command: Command) -> Result<(), Box<dyn std::error::Error>> {
    match command {
        Command::FpgaBitstream(a) => {
            let bytes = bitstream::synthetic(a.bits, &a.seed)?;
            match &a.out {
                Some(path) => std::fs::write(path, &bytes)?,
                None => {
                    let mut out = std::io::stdout().lock();
                    out.write_all(&bytes)?;
                    out.flush()?;
                }
            }
            eprintln!(
                "{} bits, sha256 {}",
                a.bits,
                bitstream::hex(&bitstream::sha256(&bytes))
            );
            Ok(())
        }
        Command::FpgaBench(a) => bench::run(a).await,
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(clap::Parser, Debug)]
    struct Cli {
        #[command(flatten)]
        fpga: FpgaArgs,
    }

    fn parse(args: &[&str]) -> Result<Option<FpgaConfig>, String> {
        let cli = Cli::try_parse_from(std::iter::once("x").chain(args.iter().copied()))
            .map_err(|e| e.to_string())?;
        cli.fpga.config()
    }

    #[test]
    fn preset_alone_is_the_sume() {
        let c = parse(&["--fpga", "netfpga-sume"]).unwrap().unwrap();
        assert_eq!(c.board, BoardSpec::netfpga_sume());
        assert_eq!((c.traffic_pps, c.packet_bytes), (0, 64));
        assert_eq!(parse(&[]).unwrap(), None);
    }

    #[test]
    fn every_parameter_has_a_flag() {
        let c = parse(&[
            "--fpga=netfpga-sume",
            "--fpga-part=xc7vx485t",
            "--fpga-resource=luts=303600/40000",
            "--fpga-resource=dsps=2800",
            "--fpga-port=icap",
            "--fpga-slots=8",
            "--fpga-base-device-id=100",
            "--fpga-eth-ports=2",
            "--fpga-eth-port-bps=25000000000",
            "--fpga-full-bits=162187488",
            "--fpga-traffic-pps=1000",
            "--fpga-packet-bytes=256",
        ])
        .unwrap()
        .unwrap();
        let b = &c.board;
        assert_eq!(b.part, "xc7vx485t");
        assert_eq!(
            b.resource("luts"),
            Some(&ResourceSpec::new("luts", 303_600, 40_000))
        );
        assert_eq!(
            b.resource("dsps"),
            Some(&ResourceSpec::new("dsps", 2_800, 0))
        );
        assert_eq!(b.resource("ffs").unwrap().capacity, 866_400);
        assert_eq!(b.config_port.name, "icap");
        assert_eq!(b.config_port.nominal_bps, 3_200_000_000);
        assert_eq!((b.slots, b.base_device_id), (8, 100));
        assert_eq!(b.ports.len(), 2);
        assert_eq!(b.ports[1].speed_bps, 25_000_000_000);
        assert_eq!(b.full_bitstream_bits, 162_187_488);
        assert_eq!((c.traffic_pps, c.packet_bytes), (1000, 256));
        let raw = parse(&[
            "--fpga=netfpga-sume",
            "--fpga-port=icap",
            "--fpga-port-bps=3200000000",
        ])
        .unwrap()
        .unwrap();
        assert_eq!(raw.board.config_port.bps, 3_200_000_000);
    }

    #[test]
    fn bad_flags_are_refused() {
        assert!(parse(&["--fpga-slots=4"]).unwrap_err().contains("--fpga"));
        assert!(
            parse(&["--fpga=vc709"])
                .unwrap_err()
                .contains("unknown board")
        );
        assert!(
            parse(&["--fpga=netfpga-sume", "--fpga-port=pcie"])
                .unwrap_err()
                .contains("unknown configuration port")
        );
        assert!(parse(&["--fpga=netfpga-sume", "--fpga-resource=luts"]).is_err());
        assert!(parse(&["--fpga=netfpga-sume", "--fpga-resource=luts=x/1"]).is_err());
    }
}
