//! `p4fleet-emulator`: serves emulated P4Runtime (and, with `--bfrt-addr`,
//! BFRT; with `--fpga`, an FPGA board's slot service) devices until SIGTERM
//! or ctrl-c. Prints `p4runtime listening on ADDR`, `stats listening on
//! ADDR`, `bfrt listening on ADDR` and `fpga ...` on stdout once bound.
//! `fpga-bitstream` and `fpga-bench` are subcommands (`fpga::cli`).

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Parser;
use p4fleet_emulator::dataplane::packet::TrafficConfig;
use p4fleet_emulator::fpga::cli::{Command, FpgaArgs};
use p4fleet_emulator::{
    ArbitrationMode, BfrtProgram, DEFAULT_RATE_PPS, DpdkConfig, Emulator, EmulatorConfig,
    LatencyProfile, ServerTls,
};

#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser, Debug)]
#[command(name = "p4fleet-emulator", about = "Emulated P4Runtime devices")]
struct Args {
    /// P4Runtime gRPC listen address (port 0 picks a free port).
    #[arg(long, default_value = "127.0.0.1:0")]
    p4runtime_addr: SocketAddr,
    /// Stats/drift HTTP listen address (port 0 picks a free port).
    #[arg(long, default_value = "127.0.0.1:0")]
    stats_addr: SocketAddr,
    /// Serve devices 1..=N (ignored when --device-ids is given; default 1,
    /// or 0 with --fpga).
    #[arg(long)]
    devices: Option<u64>,
    /// Explicit comma-separated device ids, e.g. 1,2,7.
    #[arg(long, value_delimiter = ',')]
    device_ids: Vec<u64>,
    /// Entities per ReadResponse.
    #[arg(long, default_value_t = 1000)]
    read_chunk_size: usize,
    /// BFRT gRPC listen address (port 0 picks a free port); off when absent.
    #[arg(long)]
    bfrt_addr: Option<SocketAddr>,
    /// BFRT program preloaded on every device, as NAME=path/to/bfrt.json
    /// (repeatable).
    #[arg(long = "bfrt-program", value_parser = parse_program)]
    bfrt_programs: Vec<BfrtProgram>,
    /// Added write latency: `none` (default) or `tofino` (≈ 0.88 ms per
    /// request + 19 µs per entry, the rbfrt paper's Tofino figures) or
    /// `custom:PER_REQUEST_US:PER_ENTRY_US`.
    #[arg(long, default_value = "none")]
    profile: LatencyProfile,
    /// P4Runtime arbitration: `highest-live` (the open stream with the
    /// highest election id is primary) or `highest-ever-seen` (the spec's
    /// rule: only the highest id the device has ever seen is primary).
    #[arg(long, default_value = "highest-live", value_parser = parse_arbitration)]
    arbitration: ArbitrationMode,
    /// Serve TLS on the P4Runtime and BFRT ports with this certificate
    /// chain (PEM); needs --tls-key.
    #[arg(long, requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// Private key (PEM) of --tls-cert.
    #[arg(long, requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Require client certificates signed by this CA (PEM): mutual TLS.
    #[arg(long, requires = "tls_cert")]
    tls_client_ca: Option<PathBuf>,
    /// Answer RECONCILE_AND_COMMIT with UNIMPLEMENTED, like a target
    /// without it (to test a client's fallback to VERIFY_AND_COMMIT).
    #[arg(long)]
    no_reconcile: bool,
    /// Hardware pipes of each device's Tofino chip: 4 (Tofino-1, 64
    /// ports) or 2 (the two-pipe parts); BFRT `pipe_scope`s name pipes
    /// below it and programs take disjoint pipe sets (docs/bfrt.md).
    #[arg(long, default_value_t = p4fleet_emulator::bfrt::pipes::DEFAULT_PIPES)]
    tofino_pipes: u32,
    #[command(flatten)]
    fpga: FpgaArgs,
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    dpdk: DpdkArgs,
}

/// DPDK targets (docs/dpdk.md): a software data plane per device, loaded
/// from the packed pipeline config, forwarding generated traffic.
#[derive(clap::Args, Debug)]
struct DpdkArgs {
    /// Every served device is a DPDK target.
    #[arg(long)]
    dpdk: bool,
    /// Only these devices are DPDK targets (implies --dpdk for them).
    #[arg(long, value_delimiter = ',')]
    dpdk_device_ids: Vec<u64>,
    /// Worker cores per DPDK device.
    #[arg(long, default_value_t = 1)]
    dpdk_workers: u32,
    /// Cores per DPDK device set aside for extern work: the most dedicated
    /// cores one extern may get (0 = none); default: the machine's cores.
    #[arg(long)]
    dpdk_extern_cores: Option<u32>,
    /// Packets per rx burst.
    #[arg(long, default_value_t = 32)]
    dpdk_rx_burst: u32,
    /// Generated packets/s per DPDK device (0 = line rate: as fast as the
    /// workers poll, a busy core per worker).
    #[arg(long, default_value_t = DEFAULT_RATE_PPS)]
    dpdk_rate_pps: u64,
    /// Distinct flows (MAC pairs) in the generated traffic.
    #[arg(long, default_value_t = 16)]
    dpdk_flows: u32,
    /// Frame sizes in bytes, used in turn (e.g. 64,128,1024).
    #[arg(long, value_delimiter = ',', default_value = "64")]
    dpdk_sizes: Vec<u16>,
    /// Tag generated frames with 802.1Q.
    #[arg(long)]
    dpdk_vlan: bool,
}

impl DpdkArgs {
    fn config(self) -> Option<DpdkConfig> {
        if !self.dpdk && self.dpdk_device_ids.is_empty() {
            return None;
        }
        Some(DpdkConfig {
            device_ids: self.dpdk_device_ids,
            workers: self.dpdk_workers,
            extern_cores: self.dpdk_extern_cores,
            rx_burst: self.dpdk_rx_burst,
            traffic: TrafficConfig {
                rate_pps: (self.dpdk_rate_pps > 0).then_some(self.dpdk_rate_pps),
                total_packets: None,
                sizes: self.dpdk_sizes,
                flows: self.dpdk_flows,
                vlan: self.dpdk_vlan,
            },
            ..DpdkConfig::default()
        })
    }
}

fn parse_arbitration(s: &str) -> Result<ArbitrationMode, String> {
    match s {
        "highest-live" => Ok(ArbitrationMode::HighestLive),
        "highest-ever-seen" => Ok(ArbitrationMode::HighestEverSeen),
        _ => Err(format!(
            "expected highest-live or highest-ever-seen, got {s:?}"
        )),
    }
}

fn parse_program(s: &str) -> Result<BfrtProgram, String> {
    let (name, path) = s
        .split_once('=')
        .ok_or_else(|| format!("expected NAME=PATH, got {s:?}"))?;
    let bfrt_json = std::fs::read(path).map_err(|e| format!("reading {path}: {e}"))?;
    Ok(BfrtProgram {
        name: name.to_string(),
        bfrt_json,
    })
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    if let Some(command) = args.command {
        return p4fleet_emulator::fpga::cli::run(command).await;
    }
    let fpga = args.fpga.config()?;
    let device_ids = if args.device_ids.is_empty() {
        let default = if fpga.is_some() { 0 } else { 1 };
        (1..=args.devices.unwrap_or(default)).collect()
    } else {
        args.device_ids
    };
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => Some(ServerTls::from_files(
            cert,
            key,
            args.tls_client_ca.as_deref(),
        )?),
        _ => None,
    };
    let config = EmulatorConfig {
        p4runtime_addr: args.p4runtime_addr,
        stats_addr: Some(args.stats_addr),
        device_ids,
        read_chunk_size: args.read_chunk_size,
        bfrt_addr: args.bfrt_addr,
        bfrt_programs: args.bfrt_programs,
        profile: args.profile,
        dpdk: args.dpdk.config(),
        fpga,
        arbitration: args.arbitration,
        tls,
        reconcile: !args.no_reconcile,
        tofino_pipes: args.tofino_pipes,
        ..Default::default()
    };
    // Listen for SIGTERM before announcing the addresses: a supervisor (or a
    // test) may stop us as soon as it has read them.
    let shutdown = shutdown_signal()?;
    let running = Emulator::start(config).await?;
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "p4runtime listening on {}", running.p4runtime_addr())?;
        if let Some(a) = running.stats_addr() {
            writeln!(out, "stats listening on {a}")?;
        }
        if let Some(a) = running.bfrt_addr() {
            writeln!(out, "bfrt listening on {a}")?;
        }
        if let Some(b) = running.emulator().fpga_board() {
            let ids: Vec<u64> = b.device_ids().collect();
            writeln!(
                out,
                "fpga {} ({}): {} slots, devices {}-{}, slot service on the p4runtime port",
                b.board,
                b.part,
                b.slots,
                ids[0],
                ids[ids.len() - 1]
            )?;
        }
        out.flush()?;
    }
    tracing::info!(devices = ?running.emulator().device_ids(), "emulator started");
    shutdown.await;
    tracing::info!("shutting down");
    running.shutdown().await?;
    Ok(())
}

/// Registers the SIGTERM handler now and resolves on SIGTERM or Ctrl-C.
fn shutdown_signal() -> std::io::Result<impl std::future::Future<Output = ()>> {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    Ok(async move {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    })
}
