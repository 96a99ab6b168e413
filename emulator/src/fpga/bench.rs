//! The swap benchmark (`p4fleet-emulator fpga-bench`): an emulated
//! NetFPGA-SUME per configuration port, three slots loaded (P4VBox's L2
//! switch, router and firewall, Table I resources), traffic offered to
//! each, then slot 1 swapped between router and firewall with bitstreams
//! of several sizes through a real gRPC client, and (unless skipped) a
//! full-board configuration. Prints a markdown report: load time against
//! `bits / port speed` and P4VBox's figures, and the packets lost on the
//! other slots during each swap (goal 0).

use std::time::{Duration, Instant};

use p4fleet_proto::fpga::{self as pb, slot_service_client::SlotServiceClient};
use p4fleet_proto::p4info::{self, P4Info};
use tonic::transport::Channel;

use super::bitstream;
use super::p4vbox::{BITSTREAM_BITS as P4VBOX_BITS, FIREWALL, L2SWITCH, Program, ROUTER};
use super::spec::{BoardSpec, ConfigPort, FpgaConfig};
use super::upload::{configure_board_messages, load_slot_messages};
use crate::{Emulator, EmulatorConfig};

#[derive(clap::Args, Debug, Clone)]
pub struct BenchArgs {
    /// Partial bitstream sizes, bits (multiples of 32).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "350016,700000,1400000,2800000,5600000"
    )]
    pub sizes: Vec<u64>,
    /// Configuration port presets.
    #[arg(long, value_delimiter = ',', default_value = "jtag,icap")]
    pub ports: Vec<String>,
    /// Swaps per size.
    #[arg(long, default_value_t = 3)]
    pub runs: usize,
    /// Packets/s offered to each loaded slot.
    #[arg(long, default_value_t = 1_000_000)]
    pub pps: u64,
    /// Skip the full-board configuration (about a minute over JTAG).
    #[arg(long)]
    pub skip_full: bool,
    /// The command line to print in the report.
    #[arg(long)]
    pub command: Option<String>,
}

type BoxError = Box<dyn std::error::Error>;

fn p4info_of(p: &Program) -> Result<P4Info, BoxError> {
    Ok(p4info::parse_text(p.p4info)?)
}

/// Awaits `rpc`: its reply and how long the whole RPC took.
async fn timed<T>(
    rpc: impl std::future::Future<Output = Result<tonic::Response<T>, tonic::Status>>,
) -> Result<(T, Duration), BoxError> {
    let t = Instant::now();
    let r = rpc.await?.into_inner();
    Ok((r, t.elapsed()))
}

/// Loads `program` into `slot` with a synthetic bitstream of `bits`;
/// returns the device's load duration and the whole RPC's.
async fn load(
    c: &mut SlotServiceClient<Channel>,
    slot: u32,
    program: &Program,
    bits: u64,
    seed: &str,
) -> Result<(Duration, Duration), BoxError> {
    let bytes = bitstream::synthetic(bits, seed)?;
    let header = pb::LoadSlotHeader {
        slot,
        program_digest: format!("{}-{seed}", program.name),
        size_bits: bits,
        sha256: bitstream::sha256(&bytes).to_vec(),
        resources: program.resources(),
        p4info: Some(p4info_of(program)?),
    };
    let messages = load_slot_messages(header, &bytes);
    let (r, rpc) = timed(c.load_slot(tokio_stream::iter(messages))).await?;
    let device = r.load_duration.ok_or("no load_duration")?.try_into()?;
    Ok((device, rpc))
}

async fn counters(c: &mut SlotServiceClient<Channel>) -> Result<Vec<pb::SlotCounters>, BoxError> {
    Ok(c.get_slot_counters(pb::GetSlotCountersRequest {
        slots: vec![0, 1, 2],
    })
    .await?
    .into_inner()
    .slots)
}

/// One row of the report.
struct Row {
    port: String,
    bits: u64,
    model: Duration,
    p4vbox: &'static str,
    device: Vec<Duration>,
    rpc: Vec<Duration>,
    /// Packets dropped by slots 0 and 2 during the swaps.
    lost_elsewhere: u64,
    /// Packets slots 0 and 2 forwarded during the swaps.
    forwarded_elsewhere: u64,
    /// Packets the swapped slot dropped.
    dropped_swapped: u64,
}

fn median(v: &[Duration]) -> Duration {
    let mut v = v.to_vec();
    v.sort_unstable();
    v.get(v.len() / 2).copied().unwrap_or_default()
}

fn secs(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s >= 1.0 {
        format!("{s:.2} s")
    } else {
        format!("{:.2} ms", s * 1e3)
    }
}

fn p4vbox_figure(port: &str, bits: u64, full: bool) -> &'static str {
    match (port, bits, full) {
        ("jtag", _, true) => "60 s",
        ("jtag", P4VBOX_BITS, false) => "0.72 s",
        ("icap", P4VBOX_BITS, false) => "~0.015 s (estimate)",
        _ => "",
    }
}

async fn bench_port(port: &str, args: &BenchArgs) -> Result<Vec<Row>, BoxError> {
    let mut board = BoardSpec::netfpga_sume();
    board.config_port = ConfigPort::preset(port)?;
    let mut fpga = FpgaConfig::new(board.clone());
    fpga.traffic_pps = args.pps;
    let emu = Emulator::start(EmulatorConfig {
        device_ids: Vec::new(),
        fpga: Some(fpga),
        ..Default::default()
    })
    .await?;
    let channel = tonic::transport::Endpoint::from_shared(emu.p4runtime_url())?
        .connect()
        .await?;
    let mut c = SlotServiceClient::new(channel)
        .max_decoding_message_size(256 << 20)
        .max_encoding_message_size(256 << 20);
    for (slot, p) in [(0, &L2SWITCH), (1, &ROUTER), (2, &FIREWALL)] {
        load(&mut c, slot, p, P4VBOX_BITS, p.name).await?;
        c.set_isolation(pb::SetIsolationRequest {
            slot,
            isolation: Some(pb::Isolation {
                vlan_id: 10 * (slot + 1),
                dst_mac: Vec::new(),
            }),
        })
        .await?;
    }
    let mut rows = Vec::new();
    for &bits in &args.sizes {
        let mut row = Row {
            port: port.to_string(),
            bits,
            model: board.config_port.load_time(bits),
            p4vbox: p4vbox_figure(port, bits, false),
            device: Vec::new(),
            rpc: Vec::new(),
            lost_elsewhere: 0,
            forwarded_elsewhere: 0,
            dropped_swapped: 0,
        };
        for run in 0..args.runs {
            let next = if run % 2 == 0 { &FIREWALL } else { &ROUTER };
            let before = counters(&mut c).await?;
            let seed = format!("{}-{bits}-{run}", next.name);
            let (device, rpc) = load(&mut c, 1, next, bits, &seed).await?;
            let after = counters(&mut c).await?;
            for s in [0, 2] {
                row.lost_elsewhere += after[s].dropped_packets - before[s].dropped_packets;
                row.forwarded_elsewhere += after[s].rx_packets - before[s].rx_packets;
            }
            row.dropped_swapped += after[1].dropped_packets - before[1].dropped_packets;
            row.device.push(device);
            row.rpc.push(rpc);
        }
        // Back to the router for the next size.
        if args.runs % 2 == 1 {
            load(&mut c, 1, &ROUTER, P4VBOX_BITS, "router").await?;
        }
        rows.push(row);
    }
    if !args.skip_full {
        let bits = board.full_bitstream_bits;
        let bytes = bitstream::synthetic(bits, "full")?;
        let header = pb::ConfigureBoardHeader {
            size_bits: bits,
            sha256: bitstream::sha256(&bytes).to_vec(),
        };
        let messages = configure_board_messages(header, &bytes);
        let (r, rpc) = timed(c.configure_board(tokio_stream::iter(messages))).await?;
        rows.push(Row {
            port: format!("{port} (full board)"),
            bits,
            model: board.config_port.load_time(bits),
            p4vbox: p4vbox_figure(port, bits, true),
            device: vec![r.load_duration.ok_or("no load_duration")?.try_into()?],
            rpc: vec![rpc],
            lost_elsewhere: 0,
            forwarded_elsewhere: 0,
            dropped_swapped: 0,
        });
    }
    emu.shutdown().await?;
    Ok(rows)
}

fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    format!("{cpu}, {cores} cores")
}

pub(crate) async fn run(args: BenchArgs) -> Result<(), BoxError> {
    let mut rows = Vec::new();
    for port in &args.ports {
        eprintln!("fpga-bench: {port} ...");
        rows.extend(bench_port(port, &args).await?);
    }
    let command = args
        .command
        .clone()
        .unwrap_or_else(|| std::env::args().collect::<Vec<_>>().join(" "));
    println!("Machine: {}", machine());
    println!("Date: {}", chrono::Utc::now().format("%Y-%m-%d %H:%M UTC"));
    println!("Command: `{command}`");
    println!();
    println!(
        "NetFPGA-SUME preset, slots 0-2 loaded (l2switch, router, firewall; Table I resources), \
         {} packets/s offered to each; slot 1 swapped router/firewall {} times per size.",
        args.pps, args.runs
    );
    println!();
    println!(
        "| port | bitstream (bits) | bits / speed | P4VBox | load on the device (median) | \
         LoadSlot RPC incl. upload (median) | lost on other slots | forwarded by other slots meanwhile | dropped by the swapped slot |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in &rows {
        let full = r.port.contains("full");
        println!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            r.port,
            r.bits,
            secs(r.model),
            r.p4vbox,
            secs(median(&r.device)),
            secs(median(&r.rpc)),
            if full {
                "—".into()
            } else {
                r.lost_elsewhere.to_string()
            },
            if full {
                "—".into()
            } else {
                r.forwarded_elsewhere.to_string()
            },
            if full {
                "—".into()
            } else {
                r.dropped_swapped.to_string()
            },
        );
    }
    Ok(())
}
