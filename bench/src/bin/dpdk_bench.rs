//! `p4fleet-dpdk-bench`: T4P4S Figure 1's shape on the real DPDK pipeline
//! (p4fleet-dpdk-agent over Debian's DPDK 22.11 SWX) beside the emulated
//! DPDK data plane, in one run, through the same APIs: L2 forwarding
//! (examples/l2crypt, `smac` and `dmac` hit for all 16 flows) with no
//! extern, an empty extern, encrypt + decrypt with the mailbox untouched
//! (l2crypt.spec), encrypt and encrypt + decrypt of one AES block
//! (l2crypt_mailbox.spec); Sync, Async on one dedicated extern core, Async
//! on the crypto device (the agent: DPDK's OpenSSL PMD; the emulator: its
//! emulated inline device). One pipeline core each, one extern core.
//!
//! Each target is a process of its own, driven with p4fleet-client
//! (P4Runtime: pipeline and entries) and ExternRuntime (policy, and tx
//! packets from GetStats); CPU time of its data plane and extern threads
//! from /proc/PID/task/*/schedstat. The agent loops a pcap of the 16
//! flows from DPDK's source port as fast as the pipeline takes it; the
//! emulator's built-in generator runs on its worker core (its cost is in
//! the emulator's figures). Prints a markdown table.
//!
//! `make bench-dpdk` (both frame sizes), or
//! `cargo build --release -p p4fleet-dpdk-agent -p p4fleet-emulator -p
//! p4fleet-bench --bins && target/release/p4fleet-dpdk-bench [--size 64]
//! [--runs 3] [--only empty] [--burst 0]`

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use clap::Parser;
use p4fleet_client::model::entries::{Entry, TableSchema, WriteOp, parse_inline};
use p4fleet_client::model::pipeline_config::BfPipelineConfig;
use p4fleet_client::proto::externs::{self as xpb, extern_runtime_client::ExternRuntimeClient};
use p4fleet_client::proto::p4info;
use p4fleet_client::{Device, Identity, Target, WriteOptions};
use p4fleet_emulator::dataplane::measure;

#[derive(Parser, Debug)]
#[command(
    name = "p4fleet-dpdk-bench",
    about = "T4P4S Figure 1 on the real DPDK pipeline beside the emulator"
)]
struct Args {
    /// Where p4fleet-dpdk-agent and p4fleet-emulator are (default: this
    /// binary's directory).
    #[arg(long)]
    bin_dir: Option<PathBuf>,
    /// Only this target (agent or emulator).
    #[arg(long)]
    target: Option<String>,
    /// The agent's `--cpus` (its data plane on the first CPU, the extern
    /// core on the second); empty: not pinned.
    #[arg(long, default_value = "0,1")]
    agent_cpus: String,
    /// Frame size in bytes (no FCS).
    #[arg(long, default_value_t = 64)]
    size: usize,
    #[arg(long, default_value_t = 1.0)]
    seconds: f64,
    #[arg(long, default_value_t = 0.3)]
    warmup: f64,
    /// Runs per row (the median is printed).
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// The policies' `burst_size` (0: the agent's default).
    #[arg(long, default_value_t = 0)]
    burst: u32,
    /// Only the workloads whose name contains this.
    #[arg(long)]
    only: Option<String>,
}

fn example(file: &str) -> String {
    std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../examples/l2crypt")
            .join(file),
    )
    .unwrap()
}

fn frame(flow: u8, size: usize) -> Vec<u8> {
    let mut f = vec![
        0x02, 0, 0, 0x01, 0, flow, 0x02, 0, 0, 0, 0, flow, 0x08, 0x00,
    ];
    let ip_len = (size - 14) as u16;
    let mut ip = [
        0x45u8, 0, 0, 0, 0, 0, 0x40, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
    ];
    ip[2..4].copy_from_slice(&ip_len.to_be_bytes());
    f.extend_from_slice(&ip);
    f.extend_from_slice(&[0x04, 0xd2, 0x16, 0x2e]);
    f.extend_from_slice(&(ip_len - 20).to_be_bytes());
    f.extend_from_slice(&[0, 0]);
    let n = size - f.len();
    f.extend((0..n).map(|i| (i as u8).wrapping_mul(7).wrapping_add(3)));
    f
}

fn write_pcap(path: &Path, size: usize) {
    let mut b = Vec::new();
    b.extend_from_slice(&0xa1b2_c3d4u32.to_le_bytes());
    b.extend_from_slice(&2u16.to_le_bytes());
    b.extend_from_slice(&4u16.to_le_bytes());
    for v in [0u32, 0, 65535, 1] {
        b.extend_from_slice(&v.to_le_bytes());
    }
    for flow in 0..16u8 {
        let f = frame(flow, size);
        for v in [0u32, 0, f.len() as u32, f.len() as u32] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        b.extend_from_slice(&f);
    }
    std::fs::write(path, b).unwrap();
}

/// One of the two targets.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Agent,
    Emulator,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Agent => "agent",
            Kind::Emulator => "emulator",
        }
    }

    /// Thread name prefixes: data plane, extern cores.
    fn threads(self) -> (&'static str, &'static str) {
        match self {
            Kind::Agent => ("dataplane", "extern-core"),
            Kind::Emulator => ("dp-worker", "dp-extern"),
        }
    }
}

/// One measured row of one target.
#[derive(Clone)]
struct Measured {
    mpps: f64,
    dp_ns: f64,
    ext_ns: f64,
    cpu: f64,
}

/// What a row gave on a target: a figure, or why there is none.
#[derive(Clone)]
enum Outcome {
    Measured(Measured),
    Refused(String),
}

struct Workload {
    name: &'static str,
    spec: String,
    externs: Vec<&'static str>,
}

/// A target process and the clients that drive it.
struct Running {
    child: std::process::Child,
    device: Device,
    externs: ExternRuntimeClient<tonic::transport::Channel>,
    /// The agent's pipeline steps; the emulator's `dp-control` samples on
    /// its own.
    device_id: u64,
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(kind: Kind, args: &Args, bin_dir: &Path, dir: &Path) -> Running {
    let size = args.size;
    let (bin, args): (&str, Vec<String>) = match kind {
        Kind::Agent => (
            "p4fleet-dpdk-agent",
            vec![
                "--addr".into(),
                "127.0.0.1:0".into(),
                "--extern-cores".into(),
                "1".into(),
                "--port-in".into(),
                format!("source:{}", dir.join("flows.pcap").display()),
                "--workdir".into(),
                dir.join("work").display().to_string(),
            ]
            .into_iter()
            .chain(
                (!args.agent_cpus.is_empty())
                    .then(|| ["--cpus".to_string(), args.agent_cpus.clone()])
                    .into_iter()
                    .flatten(),
            )
            .collect(),
        ),
        Kind::Emulator => (
            "p4fleet-emulator",
            [
                "--device-ids",
                "1",
                "--dpdk-device-ids",
                "1",
                "--dpdk-workers",
                "1",
                "--dpdk-extern-cores",
                "1",
                "--dpdk-rate-pps",
                "0",
                "--dpdk-flows",
                "16",
                "--dpdk-sizes",
                &size.to_string(),
                "--p4runtime-addr",
                "127.0.0.1:0",
                "--stats-addr",
                "127.0.0.1:0",
            ]
            .map(String::from)
            .to_vec(),
        ),
    };
    let path = bin_dir.join(bin);
    let mut child = Command::new(&path)
        .args(&args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    let addr = loop {
        line.clear();
        assert!(out.read_line(&mut line).unwrap() > 0, "{bin} exited");
        if let Some(a) = line.trim().strip_prefix("p4runtime listening on ") {
            break a.to_string();
        }
    };
    // Keep reading its stdout so that it never blocks on a full pipe.
    std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
    let t = Target::p4runtime(addr, 1);
    let device = Device::connect(
        t.clone(),
        Identity {
            election_id: 1,
            client_id: 1,
        },
    )
    .unwrap();
    let externs = ExternRuntimeClient::new(p4fleet_client::connect_lazy(&t).unwrap());
    Running {
        child,
        device,
        externs,
        device_id: 1,
    }
}

fn entries(info: &p4info::P4Info) -> Vec<Entry> {
    let smac = TableSchema::from_p4info(info, "MyIngress.smac").unwrap();
    let dmac = TableSchema::from_p4info(info, "MyIngress.dmac").unwrap();
    let mut out = Vec::new();
    for flow in 0..16u8 {
        let m = |base: &str| {
            BTreeMap::from([(
                format!("hdr.ethernet.{base}"),
                format!(
                    "0x0200000{}00{flow:02x}",
                    if base == "srcAddr" { "0" } else { "1" }
                ),
            )])
        };
        let s = parse_inline(&smac, &m("srcAddr"), "NoAction", &BTreeMap::new(), None).unwrap();
        let d = parse_inline(
            &dmac,
            &m("dstAddr"),
            "forward",
            &BTreeMap::from([("port".to_string(), "1".to_string())]),
            None,
        )
        .unwrap();
        out.push(s);
        out.push(d);
    }
    out
}

fn workloads() -> Vec<Workload> {
    let l2 = example("l2crypt.spec");
    let mailbox = example("l2crypt_mailbox.spec");
    let calls = "\textern f.async_encrypt\n\textern f.async_decrypt\n";
    assert!(l2.contains(calls));
    let no_extern = l2.replace(calls, "");
    let empty = l2.replace(calls, "\textern f.empty\n");
    let dec = "\tmov f.async_decrypt.w0 f.async_encrypt.w0\n\tmov f.async_decrypt.w1 f.async_encrypt.w1\n\textern f.async_decrypt\n\tmov h.payload.w0 f.async_decrypt.w0\n\tmov h.payload.w1 f.async_decrypt.w1\n";
    assert!(mailbox.contains(dec));
    let encrypt = mailbox.replace(
        dec,
        "\tmov h.payload.w0 f.async_encrypt.w0\n\tmov h.payload.w1 f.async_encrypt.w1\n",
    );
    vec![
        Workload {
            name: "no extern",
            spec: no_extern,
            externs: vec![],
        },
        Workload {
            name: "empty (l2crypt.spec, 1 call)",
            spec: empty,
            externs: vec!["empty"],
        },
        // (The P4Info gets `empty` where the workload calls it: the
        // emulator requires a called extern in P4Info's externs.)
        Workload {
            name: "encrypt + decrypt, mailbox untouched (l2crypt.spec)",
            spec: l2,
            externs: vec!["async_encrypt", "async_decrypt"],
        },
        Workload {
            name: "encrypt (mailbox variant)",
            spec: encrypt,
            externs: vec!["async_encrypt"],
        },
        Workload {
            name: "encrypt + decrypt (l2crypt_mailbox.spec)",
            spec: mailbox,
            externs: vec!["async_encrypt", "async_decrypt"],
        },
    ]
}

fn modes(w: &Workload) -> &'static [&'static str] {
    if w.externs.is_empty() {
        &["-"]
    } else if w.externs == ["empty"] {
        &["Sync", "Async"]
    } else {
        &["Sync", "Async", "Async, crypto device"]
    }
}

/// Loads `w`, sets `mode` on its externs, measures tx packets/s and CPU.
async fn measure(
    r: &mut Running,
    kind: Kind,
    args: &Args,
    info: &p4info::P4Info,
    w: &Workload,
    mode: &str,
    cookie: u64,
) -> Outcome {
    let cfg = BfPipelineConfig::dpdk(
        "l2crypt",
        example("bfrt.json").into_bytes(),
        example("context.json").into_bytes(),
        w.spec.as_bytes().to_vec(),
    )
    .pack();
    let mut info = info.clone();
    if w.externs.contains(&"empty") {
        info.externs[0].instances.push(p4info::ExternInstance {
            preamble: Some(p4info::Preamble {
                id: 0x8100_00ff,
                name: "empty".into(),
                alias: "empty".into(),
                ..Default::default()
            }),
            info: None,
        });
    }
    let info = &info;
    if let Err(e) = r.device.set_pipeline(0, info, cfg, cookie).await {
        return Outcome::Refused(format!("pipeline refused: {e}"));
    }
    let entries = entries(info);
    let ops: Vec<WriteOp> = entries.iter().map(WriteOp::insert).collect();
    match r.device.write_ops(0, &ops, WriteOptions::default()).await {
        Ok(rep) if rep.failures.is_empty() => {}
        Ok(rep) => return Outcome::Refused(format!("entries failed: {:?}", rep.failures)),
        Err(e) => return Outcome::Refused(format!("entries failed: {e}")),
    }
    let policy = w
        .externs
        .iter()
        .map(|n| xpb::ExternPolicy {
            name: n.to_string(),
            mode: if mode.starts_with("Async") {
                xpb::Mode::Async as i32
            } else {
                xpb::Mode::Sync as i32
            },
            executor: match mode {
                "Async" => xpb::Executor::DedicatedCores as i32,
                "Async, crypto device" => xpb::Executor::InlineCryptoDevice as i32,
                _ => 0,
            },
            burst_size: args.burst,
            ..Default::default()
        })
        .collect();
    let target = Some(xpb::Target {
        device_id: r.device_id,
        pipeline: String::new(),
    });
    if let Err(e) = r
        .externs
        .set_policy(xpb::SetPolicyRequest {
            target: target.clone(),
            externs: policy,
        })
        .await
    {
        return Outcome::Refused(format!("policy refused: {}", e.message()));
    }
    tokio::time::sleep(Duration::from_secs_f64(args.warmup)).await;
    let pid = r.child.id();
    let stats = async |e: &mut ExternRuntimeClient<_>| {
        let s = e
            .get_stats(xpb::GetStatsRequest {
                target: target.clone(),
            })
            .await
            .unwrap()
            .into_inner();
        s.pipeline.unwrap().tx_packets
    };
    let (tx0, c0, t0) = (
        stats(&mut r.externs).await,
        {
            let (d, e) = kind.threads();
            measure::thread_cpu_ns(Some(pid), d, e)
        },
        Instant::now(),
    );
    tokio::time::sleep(Duration::from_secs_f64(args.seconds)).await;
    let (tx1, c1, dt) = (
        stats(&mut r.externs).await,
        {
            let (d, e) = kind.threads();
            measure::thread_cpu_ns(Some(pid), d, e)
        },
        t0.elapsed().as_secs_f64(),
    );
    let n = tx1.saturating_sub(tx0).max(1) as f64;
    Outcome::Measured(Measured {
        mpps: n / dt / 1e6,
        dp_ns: (c1.0 - c0.0) as f64 / n,
        ext_ns: (c1.1 - c0.1) as f64 / n,
        cpu: ((c1.0 - c0.0) + (c1.1 - c0.1)) as f64 / 1e9 / dt,
    })
}

/// The median run by Mpps; a refusal if any run was refused.
fn median(mut runs: Vec<Outcome>) -> Outcome {
    if let Some(r) = runs.iter().find(|r| matches!(r, Outcome::Refused(_))) {
        return r.clone();
    }
    let mut m: Vec<Measured> = runs
        .drain(..)
        .filter_map(|r| match r {
            Outcome::Measured(m) => Some(m),
            Outcome::Refused(_) => None,
        })
        .collect();
    m.sort_by(|a, b| a.mpps.total_cmp(&b.mpps));
    Outcome::Measured(m.swap_remove(m.len() / 2))
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args = Args::parse();
    let bin_dir = p4fleet_bench::bin_dir(args.bin_dir.clone()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    write_pcap(&dir.path().join("flows.pcap"), args.size);
    let info = p4info::parse_text(&example("p4info.txt")).unwrap();
    let workloads: Vec<Workload> = workloads()
        .into_iter()
        .filter(|w| {
            w.externs.is_empty()
                || args
                    .only
                    .as_ref()
                    .is_none_or(|o| w.name.contains(o.as_str()))
        })
        .collect();
    let kinds: Vec<Kind> = [Kind::Agent, Kind::Emulator]
        .into_iter()
        .filter(|k| args.target.as_deref().is_none_or(|t| t == k.name()))
        .collect();
    let cpus: Vec<usize> = args
        .agent_cpus
        .split(',')
        .filter_map(|c| c.trim().parse().ok())
        .collect();
    let round_trip = || match cpus[..] {
        [a, b, ..] => format!("{:.0} ns", measure::round_trip_ns(Some((a, b)), 200_000)),
        _ => "not measured (no two --agent-cpus)".to_string(),
    };
    let rt_before = round_trip();
    // results[kind][row]
    let mut results: Vec<Vec<Outcome>> = Vec::new();
    let mut cookie = 100;
    for &kind in &kinds {
        let mut r = start(kind, &args, &bin_dir, dir.path());
        let mut rows = Vec::new();
        for w in &workloads {
            for mode in modes(w) {
                let mut runs = Vec::new();
                for _ in 0..args.runs {
                    cookie += 1;
                    runs.push(measure(&mut r, kind, &args, &info, w, mode, cookie).await);
                }
                rows.push(median(runs));
            }
        }
        results.push(rows);
    }
    let rt_after = round_trip();
    println!(
        "frame {} B, 16 flows, smac and dmac hit; one pipeline core and one extern core per target; \
         median of {} runs of {} s after {} s warm-up; cache line round trip between the agent's \
         CPUs {}: {rt_before} before, {rt_after} after",
        args.size, args.runs, args.seconds, args.warmup, args.agent_cpus
    );
    let mut header = "| workload | mode |".to_string();
    let mut rule = "|---|---|".to_string();
    for k in &kinds {
        header += &format!(
            " {0} Mpps | {0} vs no extern | {0} data plane ns/pkt | {0} extern core ns/pkt |",
            k.name()
        );
        rule += "---:|---:|---:|---:|";
    }
    if kinds.len() == 2 {
        header += " emulator / agent |";
        rule += "---:|";
    }
    println!("{header}\n{rule}");
    let base: Vec<Option<f64>> = results
        .iter()
        .map(|rows| match &rows[0] {
            Outcome::Measured(m) => Some(m.mpps),
            Outcome::Refused(_) => None,
        })
        .collect();
    let mut i = 0;
    for w in &workloads {
        for mode in modes(w) {
            let mut line = format!("| {} | {mode} |", w.name);
            for (k, rows) in results.iter().enumerate() {
                match &rows[i] {
                    Outcome::Measured(m) => {
                        let vs = base[k].map_or("-".to_string(), |b| {
                            format!("{:+.0} %", (m.mpps / b - 1.0) * 100.0)
                        });
                        line +=
                            &format!(" {:.2} | {vs} | {:.0} | {:.0} |", m.mpps, m.dp_ns, m.ext_ns);
                        if m.cpu < 0.9 {
                            eprintln!(
                                "note: {} {} {mode}: its threads got {:.2} cores (other load on the machine?)",
                                kinds[k].name(),
                                w.name,
                                m.cpu
                            );
                        }
                    }
                    Outcome::Refused(why) => {
                        line += " refused | - | - | - |";
                        eprintln!("{} {} {mode}: {why}", kinds[k].name(), w.name);
                    }
                }
            }
            if results.len() == 2 {
                match (&results[0][i], &results[1][i]) {
                    (Outcome::Measured(a), Outcome::Measured(e)) => {
                        line += &format!(" {:.2} |", e.mpps / a.mpps)
                    }
                    _ => line += " - |",
                }
            }
            println!("{line}");
            i += 1;
        }
    }
}
