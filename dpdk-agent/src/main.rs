//! `p4fleet-dpdk-agent`: the host agent a DPDK user runs next to their
//! switch. One process, one device, one gRPC port (P4Runtime and
//! `p4fleet.externs.v1.ExternRuntime`). docs/dpdk.md, "The DPDK host agent".

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Parser;
use p4fleet_dpdk_agent::device::{Config, Device};
use p4fleet_dpdk_agent::extern_runtime::ExternRuntimeService;
use p4fleet_dpdk_agent::p4runtime::P4RuntimeService;
use p4fleet_dpdk_agent::pipeline::{BuildConfig, PortIn, PortOut, Ports};
use p4fleet_dpdk_agent::{self as agent, eal};
use p4fleet_proto::externs::extern_runtime_server::ExternRuntimeServer;
use p4fleet_proto::p4runtime::p4_runtime_server::P4RuntimeServer;

const MEMPOOL: &str = "P4FA_MP0";

#[derive(Parser, Debug)]
#[command(
    name = "p4fleet-dpdk-agent",
    version,
    about = "P4Runtime and p4fleet's extern runtime over a DPDK SWX pipeline (DPDK 22.11)"
)]
struct Args {
    /// gRPC address (P4Runtime and ExternRuntime); port 0 picks a free one
    /// (printed as `p4runtime listening on ADDR`).
    #[arg(long, env = "P4FLEET_AGENT_ADDR", default_value = "127.0.0.1:9559")]
    addr: SocketAddr,
    /// The P4Runtime device id this agent serves.
    #[arg(long, default_value_t = 1)]
    device_id: u64,
    /// EAL arguments. The default runs without hugepages, PCI or a NIC
    /// (tests, development); a switch gives its cores, hugepages and
    /// devices, e.g. "-l 0-3 -a 0000:3b:00.0 -a 0000:3b:00.1".
    #[arg(long, default_value = eal::NO_HUGE_ARGS, allow_hyphen_values = true)]
    eal: String,
    /// An input port, in port order: `source:PCAP[:LOOPS]` (a pcap file
    /// looped, LOOPS 0 = forever, the default), `ring:NAME` (an rte_ring
    /// the agent creates), `ethdev:NAME` (a DPDK ethdev, e.g. a NIC's PCI
    /// address or a --vdev; the agent starts it, one rx/tx queue).
    #[arg(long = "port-in")]
    ports_in: Vec<String>,
    /// An output port, in port order: `sink[:PCAP]`, `ring:NAME`,
    /// `ethdev:NAME`.
    #[arg(long = "port-out")]
    ports_out: Vec<String>,
    /// Output ports are padded with (counting) sinks up to this many:
    /// DPDK 22.11 does not bound-check `tx`, and a program that sends to
    /// a port the pipeline lacks crashes it. 256 covers 8-bit ports.
    #[arg(long, default_value_t = 256)]
    pad_ports_out: u32,
    /// Paces the input ports to this many packets/s (0 = as fast as the
    /// core polls; tests and demos on shared machines pace).
    #[arg(long, default_value_t = 0)]
    rate_pps: u64,
    /// Most extern cores one extern may get (Async, DedicatedCores);
    /// 0 = none. Default: the machine's cores minus the data plane's.
    #[arg(long)]
    extern_cores: Option<u32>,
    /// Where generated C, shared objects and iospecs go (default: a new
    /// directory under the system's temp dir).
    #[arg(long)]
    workdir: Option<PathBuf>,
    /// The C compiler that builds generated pipelines.
    #[arg(long, env = "CC", default_value = "cc")]
    cc: String,
    /// DPDK's internal pipeline headers of this version
    /// (rte_swx_pipeline_internal.h, rte_swx_pipeline_spec.h).
    #[arg(long, default_value = agent::DPDK_PIPELINE_INCLUDE)]
    pipeline_include: PathBuf,
    /// The DPDK crypto device of the InlineCryptoDevice executor: a
    /// software PMD the agent adds to the EAL as `--vdev` (crypto_openssl0,
    /// the OpenSSL PMD T4P4S used; crypto_aesni_mb0, Intel's multi-buffer
    /// library) or a device the EAL arguments already give; `none`: no
    /// InlineCryptoDevice.
    #[arg(long, default_value = "crypto_openssl0")]
    crypto_dev: String,
    /// Packet buffers in the input ports' mempool.
    #[arg(long, default_value_t = 8191)]
    mbufs: u32,
    /// CPUs to pin to, e.g. "2,3,4": the data plane on the first, extern
    /// cores on the others in turn (with one CPU, all on it). Default: not
    /// pinned (the scheduler moves the threads; fine for tests, costly for
    /// a switch: docs/dpdk.md).
    #[arg(long, value_delimiter = ',')]
    cpus: Vec<usize>,
    /// Rate sampling interval (packets/s, async ops/s), ms.
    #[arg(long, default_value_t = 1000)]
    stats_interval_ms: u64,
}

fn port_in(s: &str) -> anyhow::Result<PortIn> {
    let (kind, rest) = s.split_once(':').unwrap_or((s, ""));
    Ok(match kind {
        "source" => {
            let (file, loops) = match rest.rsplit_once(':') {
                Some((f, n)) if n.parse::<u64>().is_ok() => (f, n.parse()?),
                _ => (rest, 0),
            };
            if file.is_empty() {
                bail!("--port-in {s}: source needs a pcap file");
            }
            PortIn::Source {
                pcap: std::fs::canonicalize(file).with_context(|| format!("--port-in {s}"))?,
                loops,
            }
        }
        "ring" if !rest.is_empty() => PortIn::Ring { name: rest.into() },
        "ethdev" if !rest.is_empty() => PortIn::Ethdev { dev: rest.into() },
        _ => bail!("--port-in {s}: expected source:PCAP[:LOOPS], ring:NAME or ethdev:NAME"),
    })
}

fn port_out(s: &str) -> anyhow::Result<PortOut> {
    let (kind, rest) = s.split_once(':').unwrap_or((s, ""));
    Ok(match kind {
        "sink" => PortOut::Sink {
            pcap: (!rest.is_empty()).then(|| rest.into()),
        },
        "ring" if !rest.is_empty() => PortOut::Ring { name: rest.into() },
        "ethdev" if !rest.is_empty() => PortOut::Ethdev { dev: rest.into() },
        _ => bail!("--port-out {s}: expected sink[:PCAP], ring:NAME or ethdev:NAME"),
    })
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();

    let ins = args
        .ports_in
        .iter()
        .map(|s| port_in(s))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let outs = args
        .ports_out
        .iter()
        .map(|s| port_out(s))
        .collect::<anyhow::Result<Vec<_>>>()?;
    if ins.is_empty() {
        bail!("no input port: give --port-in (source:PCAP, ring:NAME or ethdev:NAME)");
    }
    for h in ["rte_swx_pipeline_internal.h", "rte_swx_pipeline_spec.h"] {
        if !args.pipeline_include.join(h).is_file() {
            bail!(
                "{} has no {h} (DPDK {}'s internal pipeline header; hack/install-deps.sh puts \
                 it in .local/dpdk-src/, or give --pipeline-include)",
                args.pipeline_include.display(),
                agent::DPDK_VERSION
            );
        }
    }

    let crypto_dev = (args.crypto_dev != "none").then(|| args.crypto_dev.clone());
    let mut eal_args = eal::split(&args.eal);
    if let Some(dev) = &crypto_dev
        && dev.starts_with("crypto_")
        && !args.eal.contains(dev.as_str())
    {
        eal_args.push(format!("--vdev={dev}"));
    }
    eal::init(&eal_args).map_err(anyhow::Error::msg)?;
    agent::create_mempool(MEMPOOL, args.mbufs, 2304).map_err(anyhow::Error::msg)?;
    if let Some(dev) = &crypto_dev {
        agent::start_crypto_device(dev).map_err(|e| {
            anyhow::anyhow!("{e} (--crypto-dev none runs without the InlineCryptoDevice executor)")
        })?;
    }
    let mut ethdevs: Vec<&str> = Vec::new();
    for p in &ins {
        match p {
            PortIn::Ring { name } => agent::create_ring(name, 1024).map_err(anyhow::Error::msg)?,
            PortIn::Ethdev { dev } => ethdevs.push(dev),
            PortIn::Source { .. } => {}
        }
    }
    for p in &outs {
        match p {
            PortOut::Ring { name } => agent::create_ring(name, 1024).map_err(anyhow::Error::msg)?,
            PortOut::Ethdev { dev } => ethdevs.push(dev),
            PortOut::Sink { .. } => {}
        }
    }
    ethdevs.sort_unstable();
    ethdevs.dedup();
    for dev in ethdevs {
        agent::start_ethdev(dev, MEMPOOL).map_err(anyhow::Error::msg)?;
    }

    let workdir = match args.workdir {
        Some(d) => d,
        None => std::env::temp_dir().join(format!("p4fleet-dpdk-agent-{}", std::process::id())),
    };
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get() as u32);
    let config = Config {
        device_id: args.device_id,
        build: BuildConfig {
            workdir: workdir.clone(),
            cc: args.cc,
            cflags: agent::DPDK_CFLAGS.to_string(),
            internal_include: args.pipeline_include,
            numa: 0,
        },
        ports: Ports {
            ins,
            outs,
            pad_outs_to: args.pad_ports_out,
            mempool: MEMPOOL.into(),
            burst: 32,
        },
        rate_pps: args.rate_pps,
        max_extern_cores: args.extern_cores.unwrap_or(cores.saturating_sub(1)),
        crypto_dev,
        stats_interval: Duration::from_millis(args.stats_interval_ms.max(10)),
        cpus: args.cpus,
    };
    let device = Device::new(config);

    let sampler = device.clone();
    std::thread::Builder::new()
        .name("stats".into())
        .spawn(move || {
            loop {
                std::thread::sleep(sampler.config.stats_interval);
                sampler.sample();
            }
        })?;

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let result = rt.block_on(serve(args.addr, device.clone()));
    device.shutdown();
    let _ = std::fs::remove_dir_all(&workdir);
    result
}

async fn serve(addr: SocketAddr, device: Arc<Device>) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("bind {addr}"))?;
    let local = listener.local_addr()?;
    println!("p4runtime listening on {local}");
    tracing::info!(
        %local,
        device_id = device.config.device_id,
        dpdk = agent::DPDK_VERSION,
        "serving P4Runtime and p4fleet.externs.v1.ExternRuntime"
    );
    const MAX_MESSAGE: usize = 256 << 20;
    let p4rt = P4RuntimeServer::new(P4RuntimeService::new(device.clone()))
        .max_decoding_message_size(MAX_MESSAGE)
        .max_encoding_message_size(MAX_MESSAGE);
    let externs = ExternRuntimeServer::new(ExternRuntimeService::new(device));
    let shutdown = async {
        let mut term =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = async { match term.as_mut() { Some(t) => { t.recv().await; } None => std::future::pending().await } } => {}
        }
    };
    tonic::transport::Server::builder()
        .add_service(p4rt)
        .add_service(externs)
        .serve_with_incoming_shutdown(
            tokio_stream::wrappers::TcpListenerStream::new(listener),
            shutdown,
        )
        .await?;
    Ok(())
}
