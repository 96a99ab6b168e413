//! `p4fleet-dataplane-bench`: Figure 1 of the T4P4S asynchronous-extern
//! paper on this machine, through the emulated DPDK data plane: L2
//! forwarding (examples/l2crypt) with no extern, an empty extern, encrypt,
//! encrypt + decrypt; each Sync and Async (packet descriptor and coroutine
//! context, on dedicated extern cores or the inline crypto device), for
//! 1..N worker and extern cores. Prints a markdown table (docs/dpdk.md).
//! An extern sees only its mailbox (as on DPDK SWX), so the encrypt rows
//! run examples/l2crypt/l2crypt_mailbox.spec, which moves one 16-byte
//! payload block through the mailboxes (encrypt: its decrypt call
//! replaced by the move back), as p4fleet-dpdk-agent's `rates` example
//! does; l2crypt.spec's calls would encrypt a mailbox nobody reads.
//!
//! Build and run:
//! `cargo build --release -p p4fleet-bench -p p4fleet-emulator &&
//! target/release/p4fleet-dataplane-bench [--csv rows.csv]`; plot kept
//! runs (their printed output) without running:
//! `p4fleet-dataplane-bench --plot run64.txt,run1024.txt --svg fig.svg`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use p4fleet_emulator::dataplane::alloc::CountingAllocator;
use p4fleet_emulator::dataplane::engine::available_cores;
use p4fleet_emulator::dataplane::packet::{self, TrafficConfig};
use p4fleet_emulator::dataplane::{
    ActionCall, Engine, EngineConfig, Executor, ExternPolicy, FieldValue, MemoryTableSource, Mode,
    SnapshotEntry, SuspendMethod,
};
use p4fleet_emulator::dataplane::{measure, report};
use p4fleet_proto::p4info::{self, ExternInstance, P4Info, Preamble};

#[global_allocator]
static GLOBAL: CountingAllocator = CountingAllocator::new();

const SPEC: &str = include_str!("../../../examples/l2crypt/l2crypt.spec");
const MAILBOX_SPEC: &str = include_str!("../../../examples/l2crypt/l2crypt_mailbox.spec");
/// l2crypt_mailbox.spec's decrypt step, and what replaces it in the
/// encrypt-only workload (the encrypted block goes back to the packet).
const DECRYPT_STEP: &str = "\tmov f.async_decrypt.w0 f.async_encrypt.w0\n\tmov f.async_decrypt.w1 f.async_encrypt.w1\n\textern f.async_decrypt\n\tmov h.payload.w0 f.async_decrypt.w0\n\tmov h.payload.w1 f.async_decrypt.w1\n";
const ENCRYPT_ONLY: &str =
    "\tmov h.payload.w0 f.async_encrypt.w0\n\tmov h.payload.w1 f.async_encrypt.w1\n";
const P4INFO: &str = include_str!("../../../examples/l2crypt/p4info.txt");
const SMAC: u32 = 41683160;
const DMAC: u32 = 44918510;
const NO_ACTION: u32 = 21257015;
const FORWARD: u32 = 29683729;

#[derive(Parser, Debug)]
#[command(
    name = "p4fleet-dataplane-bench",
    about = "T4P4S Figure 1 on the emulated DPDK data plane"
)]
struct Args {
    /// Measured seconds per run.
    #[arg(long, default_value_t = 1.0)]
    seconds: f64,
    /// Warm-up seconds per run (not measured).
    #[arg(long, default_value_t = 0.3)]
    warmup: f64,
    /// Frame size in bytes.
    #[arg(long, default_value_t = 64)]
    size: u16,
    /// Flows (distinct MAC pairs, all with table entries).
    #[arg(long, default_value_t = 16)]
    flows: u32,
    /// Worker core counts to run.
    #[arg(long, value_delimiter = ',', default_value = "1,2")]
    workers: Vec<u32>,
    /// Dedicated extern core counts to run (Async rows; only those that fit
    /// next to the workers unless --oversubscribe).
    #[arg(long, value_delimiter = ',', default_value = "1,2")]
    extern_cores: Vec<u32>,
    /// Packets per rx burst.
    #[arg(long, default_value_t = 32)]
    rx_burst: u32,
    /// Calls per burst to an executor.
    #[arg(long, default_value_t = 64)]
    burst: u32,
    /// Stack bytes copied per Context suspend/resume.
    #[arg(long, default_value_t = 8192)]
    context_bytes: usize,
    /// Only workloads whose name contains this (e.g. "encrypt").
    #[arg(long)]
    only: Option<String>,
    /// Only variants whose "mode executor" label contains this (e.g.
    /// "PD 1 extern"); the no-extern baseline always runs.
    #[arg(long)]
    variant: Option<String>,
    /// Print the counters every 100 ms while measuring (stderr).
    #[arg(long)]
    verbose: bool,
    /// Runs per row (interleaved rounds); the table shows the median.
    #[arg(long, default_value_t = 3)]
    repeat: u32,
    /// Also run rows needing more threads than the machine has cores.
    #[arg(long)]
    oversubscribe: bool,
    /// Also write the table's rows as CSV to this file.
    #[arg(long)]
    csv: Option<std::path::PathBuf>,
    /// Do not run: plot these saved outputs of the benchmark (one panel
    /// each) into the --svg file.
    #[arg(long, value_delimiter = ',', requires = "svg")]
    plot: Vec<std::path::PathBuf>,
    /// The plot's output file (with --plot).
    #[arg(long)]
    svg: Option<std::path::PathBuf>,
}

/// `--plot`: one panel per saved run, titled by its frame size.
fn plot(files: &[std::path::PathBuf], out: &std::path::Path) -> Result<(), String> {
    let mut panels = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(f).map_err(|e| format!("{}: {e}", f.display()))?;
        let rows = report::parse_table(&text).map_err(|e| format!("{}: {e}", f.display()))?;
        let title = match report::frame_bytes(&text) {
            Some(b) => format!("{b}-byte frames"),
            None => f.display().to_string(),
        };
        panels.push((title, rows));
    }
    std::fs::write(out, report::svg(&panels)).map_err(|e| format!("{}: {e}", out.display()))
}

#[derive(Clone, Copy, PartialEq)]
enum Workload {
    NoExtern,
    Empty,
    Encrypt,
    EncDec,
}

impl Workload {
    fn name(self) -> &'static str {
        match self {
            Workload::NoExtern => "no extern",
            Workload::Empty => "empty extern",
            Workload::Encrypt => "encrypt",
            Workload::EncDec => "encrypt+decrypt",
        }
    }

    fn externs(self) -> &'static [&'static str] {
        match self {
            Workload::NoExtern => &[],
            Workload::Empty => &["empty"],
            Workload::Encrypt => &["async_encrypt"],
            Workload::EncDec => &["async_encrypt", "async_decrypt"],
        }
    }

    /// The example's spec with this workload's extern calls: the crypto
    /// workloads move a payload block through the mailboxes.
    fn spec(self) -> String {
        match self {
            Workload::Encrypt => {
                assert!(
                    MAILBOX_SPEC.contains(DECRYPT_STEP),
                    "l2crypt_mailbox.spec changed"
                );
                return MAILBOX_SPEC.replace(DECRYPT_STEP, ENCRYPT_ONLY);
            }
            Workload::EncDec => return MAILBOX_SPEC.to_string(),
            Workload::NoExtern | Workload::Empty => {}
        }
        let calls: String = self
            .externs()
            .iter()
            .map(|e| format!("\textern f.{e}\n"))
            .collect();
        let mut out = String::new();
        let mut placed = false;
        for line in SPEC.lines() {
            if line.trim_start().starts_with("extern f.") {
                if !placed {
                    out.push_str(&calls);
                    placed = true;
                }
                continue;
            }
            out.push_str(line);
            out.push('\n');
        }
        out
    }

    fn p4info(self) -> P4Info {
        let mut info = p4info::parse_text(P4INFO).expect("example p4info");
        if self == Workload::Empty {
            info.externs[0].instances.push(ExternInstance {
                preamble: Some(Preamble {
                    id: 0x8100_0001,
                    name: "empty".into(),
                    alias: "empty".into(),
                    ..Default::default()
                }),
                info: None,
            });
        }
        info
    }
}

#[derive(Clone, Copy)]
struct Variant {
    mode: Mode,
    suspend: Option<SuspendMethod>,
    executor: Option<Executor>,
    cores: u32,
}

impl Variant {
    fn label(&self) -> (String, String) {
        match self.mode {
            Mode::Sync => ("Sync".into(), "inline".into()),
            Mode::Skip => ("Skip".into(), "-".into()),
            Mode::Async => {
                let s = match self.suspend {
                    Some(SuspendMethod::Context) => "Async/Context",
                    _ => "Async/PD",
                };
                let e = match self.executor {
                    Some(Executor::DedicatedCores) => format!("{} extern core(s)", self.cores),
                    Some(Executor::InlineCryptoDevice) => "inline device".into(),
                    _ => "?".into(),
                };
                (s.into(), e)
            }
        }
    }

    fn policy(&self, burst: u32) -> ExternPolicy {
        ExternPolicy {
            mode: self.mode,
            suspend: self.suspend,
            executor: self.executor,
            cores: self.cores,
            burst_size: burst,
            ..ExternPolicy::default()
        }
    }
}

struct Row {
    workload: Workload,
    variant: Variant,
    workers: u32,
    mpps: f64,
    p50_us: f64,
    p99_us: f64,
    ext_p50_us: f64,
    ext_p99_us: f64,
    drops: u64,
    allocs_per_pkt: f64,
    threads: u32,
    /// Worker-core CPU per forwarded packet.
    worker_ns: f64,
    /// Extern-core CPU per forwarded packet.
    extern_ns: f64,
    /// Cores' CPU seconds per wall second (what the scheduler gave).
    cpu_share: f64,
}

fn source(flows: u32) -> Arc<MemoryTableSource> {
    let s = Arc::new(MemoryTableSource::new());
    let exact = |mac: [u8; 6], action_id: u32, params: Vec<Vec<u8>>| SnapshotEntry {
        matches: vec![(1, FieldValue::Exact(mac.to_vec()))],
        priority: 0,
        action: ActionCall { action_id, params },
    };
    s.set_entries(
        DMAC,
        (0..flows)
            .map(|i| exact(packet::dst_mac(i), FORWARD, vec![vec![(i % 4) as u8 + 1]]))
            .collect(),
    );
    s.set_entries(
        SMAC,
        (0..flows)
            .map(|i| exact(packet::src_mac(i), NO_ACTION, vec![]))
            .collect(),
    );
    s
}

fn run(args: &Args, workload: Workload, variant: Variant, workers: u32) -> Row {
    let info = workload.p4info();
    let engine = Engine::load(
        &workload.spec(),
        &info,
        source(args.flows),
        EngineConfig {
            pipeline: "l2crypt".into(),
            workers,
            rx_burst: args.rx_burst,
            context_bytes: args.context_bytes,
            traffic: TrafficConfig {
                sizes: vec![args.size],
                flows: args.flows,
                ..TrafficConfig::default()
            },
            ..EngineConfig::default()
        },
    )
    .expect("bench program loads");
    let policy: Vec<(String, ExternPolicy)> = workload
        .externs()
        .iter()
        .map(|e| (e.to_string(), variant.policy(args.burst)))
        .collect();
    engine.set_policy(&policy).expect("bench policy is valid");
    engine.start();
    std::thread::sleep(Duration::from_secs_f64(args.warmup));
    let s0 = engine.stats();
    let c0 = measure::thread_cpu_ns(None, "dp-worker", "dp-extern");
    let a0 = GLOBAL.count();
    let t0 = Instant::now();
    if args.verbose {
        for _ in 0..(args.seconds * 10.0) as u32 {
            std::thread::sleep(Duration::from_millis(100));
            let s = engine.stats();
            eprintln!(
                "rx {} tx {} drops {:?} externs {:?}",
                s.rx_packets,
                s.tx_packets,
                s.drops,
                s.externs
                    .iter()
                    .map(|x| (x.async_submitted, x.async_completed, x.in_flight))
                    .collect::<Vec<_>>()
            );
        }
    } else {
        std::thread::sleep(Duration::from_secs_f64(args.seconds));
    }
    let a1 = GLOBAL.count();
    let c1 = measure::thread_cpu_ns(None, "dp-worker", "dp-extern");
    let s1 = engine.stats();
    let dt = t0.elapsed().as_secs_f64();
    engine.stop();
    let packets = s1.tx_packets - s0.tx_packets;
    let us = |ns: Option<u64>| ns.map(|n| n as f64 / 1000.0).unwrap_or(0.0);
    let ext = s1.externs.first();
    Row {
        workload,
        variant,
        workers,
        mpps: packets as f64 / dt / 1e6,
        p50_us: us(s1.latency_p50_ns),
        p99_us: us(s1.latency_p99_ns),
        ext_p50_us: us(ext.and_then(|e| e.latency_p50_ns)),
        ext_p99_us: us(ext.and_then(|e| e.latency_p99_ns)),
        drops: s1.drops.total() - s0.drops.total(),
        allocs_per_pkt: (a1 - a0) as f64 / packets.max(1) as f64,
        worker_ns: (c1.0 - c0.0) as f64 / packets.max(1) as f64,
        extern_ns: (c1.1 - c0.1) as f64 / packets.max(1) as f64,
        cpu_share: (c1.0 - c0.0 + c1.1 - c0.1) as f64 / 1e9 / dt,
        threads: workers + s1.extern_cores,
    }
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

fn main() {
    let args = Args::parse();
    if let (false, Some(out)) = (args.plot.is_empty(), &args.svg) {
        if let Err(e) = plot(&args.plot, out) {
            eprintln!("p4fleet-dataplane-bench: {e}");
            std::process::exit(1);
        }
        return;
    }
    let machine_cores = available_cores();
    println!(
        "load average before: {}; cross-core round trip: {:.0} ns",
        load_average(),
        measure::round_trip_ns(None, 20_000)
    );
    let variants_for = |w: Workload| -> Vec<Variant> {
        let sync = Variant {
            mode: Mode::Sync,
            suspend: None,
            executor: None,
            cores: 0,
        };
        if w == Workload::NoExtern {
            return vec![sync];
        }
        let mut v = vec![sync];
        for suspend in [SuspendMethod::PacketDescriptor, SuspendMethod::Context] {
            for c in &args.extern_cores {
                v.push(Variant {
                    mode: Mode::Async,
                    suspend: Some(suspend),
                    executor: Some(Executor::DedicatedCores),
                    cores: *c,
                });
            }
            v.push(Variant {
                mode: Mode::Async,
                suspend: Some(suspend),
                executor: Some(Executor::InlineCryptoDevice),
                cores: 0,
            });
        }
        v
    };
    let workloads = [
        Workload::NoExtern,
        Workload::Empty,
        Workload::Encrypt,
        Workload::EncDec,
    ];
    println!(
        "machine: {machine_cores} cores; frame {} B, {} flows, rx burst {}, executor burst {}, context {} B; median of {} runs of {} s per row, each after {} s warm-up\n",
        args.size,
        args.flows,
        args.rx_burst,
        args.burst,
        args.context_bytes,
        args.repeat,
        args.seconds,
        args.warmup
    );
    // Every row once per round, rounds interleaved, so that load from
    // other processes hits all rows alike; each row reports its median run.
    let mut rows: Vec<(Workload, Variant, u32)> = Vec::new();
    for w in &args.workers {
        for wl in workloads {
            if let Some(only) = &args.only
                && !wl.name().contains(only.as_str())
                && wl != Workload::NoExtern
            {
                continue;
            }
            for v in variants_for(wl) {
                let (m, e) = v.label();
                if let Some(f) = &args.variant
                    && wl != Workload::NoExtern
                    && !format!("{m} {e}").contains(f.as_str())
                {
                    continue;
                }
                if w + v.cores > machine_cores && !args.oversubscribe {
                    continue;
                }
                rows.push((wl, v, *w));
            }
        }
    }
    let mut runs: Vec<Vec<Row>> = (0..rows.len()).map(|_| Vec::new()).collect();
    for round in 0..args.repeat {
        eprintln!("round {}/{}: {} rows", round + 1, args.repeat, rows.len());
        for (i, (wl, v, w)) in rows.iter().enumerate() {
            runs[i].push(run(&args, *wl, *v, *w));
        }
    }
    // The table is kept to be written as CSV too (the same rows, read back).
    let mut table = String::new();
    let mut out = |line: String| {
        println!("{line}");
        table.push_str(&line);
        table.push('\n');
    };
    out("| workload | mode | executor | workers | threads | Mpps (median) | min..max | vs no extern | CPU got | worker ns/pkt | extern-core ns/pkt | Mpps per worker CPU | latency p50 / p99 (µs) | extern p50 / p99 (µs) | drops/s | allocs/pkt |".to_string());
    out("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|".to_string());
    let mut baseline = None;
    for mut rs in runs {
        rs.sort_by(|a, b| a.mpps.total_cmp(&b.mpps));
        let (lo, hi) = (rs[0].mpps, rs[rs.len() - 1].mpps);
        let r = &rs[rs.len() / 2];
        // The CPU-time figures are robust to what else the machine runs:
        // their own medians.
        let median = |f: fn(&Row) -> f64| {
            let mut v: Vec<f64> = rs.iter().map(f).collect();
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        let worker_ns = median(|r| r.worker_ns);
        let extern_ns = median(|r| r.extern_ns);
        if r.workload == Workload::NoExtern {
            baseline = Some(r.mpps);
        }
        let (mode, exec) = r.variant.label();
        let vs = baseline
            .map(|b| format!("{:+.0} %", (r.mpps / b - 1.0) * 100.0))
            .unwrap_or_default();
        let over = if r.threads > machine_cores {
            " (over)"
        } else {
            ""
        };
        let ext = if r.workload == Workload::NoExtern {
            "-".to_string()
        } else {
            format!("{:.1} / {:.1}", r.ext_p50_us, r.ext_p99_us)
        };
        out(format!(
            "| {} | {} | {} | {} | {}{} | {:.2} | {:.2}..{:.2} | {} | {:.2} | {:.0} | {:.0} | {:.2} | {:.1} / {:.1} | {} | {:.0} | {:.4} |",
            r.workload.name(),
            mode,
            exec,
            r.workers,
            r.threads,
            over,
            r.mpps,
            lo,
            hi,
            vs,
            r.cpu_share,
            worker_ns,
            extern_ns,
            1e3 / worker_ns.max(1e-9),
            r.p50_us,
            r.p99_us,
            ext,
            r.drops as f64 / args.seconds,
            r.allocs_per_pkt
        ));
    }
    if let Some(path) = &args.csv {
        let rows = report::parse_table(&table).expect("the table just printed parses");
        if let Err(e) = std::fs::write(path, report::csv(&rows)) {
            eprintln!("p4fleet-dataplane-bench: {}: {e}", path.display());
            std::process::exit(1);
        }
    }
    println!(
        "\nload average after: {}; cross-core round trip: {:.0} ns",
        load_average(),
        measure::round_trip_ns(None, 20_000)
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use p4fleet_emulator::dataplane::externs::{CryptoKeys, ExternFn, ExternKind};

    /// What each workload's program sends for flow 0 with every extern
    /// Sync: the crypto workloads do real AES on the payload block.
    #[test]
    fn workloads_load_and_the_encrypt_rows_encrypt_a_payload_block() {
        let block = 14 + 20..14 + 20 + 16;
        let plain = packet::build_frame(64, false);
        let mut encrypted = plain.clone();
        let mut b: [u8; 16] = plain[block.clone()].try_into().unwrap();
        ExternFn::new(ExternKind::Encrypt, &CryptoKeys::default()).call_block(&mut b);
        encrypted[block].copy_from_slice(&b);
        for (w, want) in [
            (Workload::NoExtern, &plain),
            (Workload::Empty, &plain),
            (Workload::Encrypt, &encrypted),
            (Workload::EncDec, &plain),
        ] {
            let engine = Engine::load(
                &w.spec(),
                &w.p4info(),
                source(1),
                EngineConfig {
                    pipeline: "l2crypt".into(),
                    traffic: TrafficConfig {
                        total_packets: Some(4),
                        flows: 1,
                        ..TrafficConfig::default()
                    },
                    capture: 4,
                    ..EngineConfig::default()
                },
            )
            .unwrap_or_else(|e| panic!("{}: {e}", w.name()));
            engine.start();
            let deadline = Instant::now() + Duration::from_secs(30);
            while engine.captured().len() < 4 {
                assert!(Instant::now() < deadline, "{}: no traffic", w.name());
                std::thread::sleep(Duration::from_millis(5));
            }
            let s = engine.stats();
            assert_eq!(s.externs.len(), w.externs().len(), "{}", w.name());
            assert!(s.externs.iter().all(|x| x.sync_calls == 4), "{s:#?}");
            for (_, f) in engine.captured() {
                assert_eq!(&f, want, "{}", w.name());
            }
        }
    }
}
