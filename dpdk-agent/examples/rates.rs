//! Single-core rates of the real DPDK pipeline through the agent, in the
//! shape of T4P4S's Figure 1: L2 forwarding (examples/l2crypt, `smac` and
//! `dmac` hit for all 16 flows) with no extern, an empty extern, encrypt,
//! encrypt + decrypt (the mailbox variant: one AES block per call); Sync,
//! Async on one dedicated extern core, Async on the crypto device (DPDK's
//! OpenSSL PMD, polled by the pipeline's core). Starts the agent (pcap source
//! looped as fast as the pipeline takes it, counting sinks), measures
//! packets and the CPU time of its `dataplane` and `extern-core-*`
//! threads (/proc/PID/task/*/schedstat). Prints a markdown table.
//!
//! `cargo build --release -p p4fleet-dpdk-agent --bins --examples &&
//! target/release/examples/rates [--size 64] [--seconds 1] [--runs 3]`

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use clap::Parser;
use p4fleet_client::model::entries::{TableSchema, WriteOp, parse_inline};
use p4fleet_client::model::pipeline_config::BfPipelineConfig;
use p4fleet_client::proto::externs::{self as xpb, extern_runtime_client::ExternRuntimeClient};
use p4fleet_client::proto::p4info;
use p4fleet_client::{Device, Identity, Target, WriteOptions};

#[derive(Parser, Debug)]
struct Args {
    /// The agent binary (default: next to this example's directory).
    #[arg(long)]
    agent: Option<PathBuf>,
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

/// CPU ns of the agent's data plane thread and extern cores.
fn cpu_ns(pid: u32) -> (u64, u64) {
    let (mut dp, mut ext) = (0, 0);
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return (0, 0);
    };
    for t in tasks.flatten() {
        let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
        let ns: u64 = std::fs::read_to_string(t.path().join("schedstat"))
            .ok()
            .and_then(|s| s.split_whitespace().next().and_then(|v| v.parse().ok()))
            .unwrap_or(0);
        if comm.starts_with("dataplane") {
            dp += ns;
        } else if comm.starts_with("extern-core") {
            ext += ns;
        }
    }
    (dp, ext)
}

struct Row {
    workload: &'static str,
    mode: &'static str,
    mpps: f64,
    dp_ns: f64,
    ext_ns: f64,
    cpu: f64,
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args = Args::parse();
    let dir = tempfile::tempdir().unwrap();
    let pcap = dir.path().join("flows.pcap");
    write_pcap(&pcap, args.size);
    let agent = args.agent.clone().unwrap_or_else(|| {
        std::env::current_exe()
            .unwrap()
            .parent()
            .unwrap()
            .parent()
            .unwrap()
            .join("p4fleet-dpdk-agent")
    });
    let mut child = Command::new(&agent)
        .args(["--addr", "127.0.0.1:0", "--extern-cores", "1"])
        .arg("--port-in")
        .arg(format!("source:{}", pcap.display()))
        .arg("--workdir")
        .arg(dir.path().join("work"))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("{}: {e}", agent.display()));
    let pid = child.id();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    let addr = loop {
        line.clear();
        assert!(out.read_line(&mut line).unwrap() > 0, "agent exited");
        if let Some(a) = line.trim().strip_prefix("p4runtime listening on ") {
            break a.to_string();
        }
    };
    let t = Target::p4runtime(addr, 1);
    let device = Device::connect(
        t.clone(),
        Identity {
            election_id: 1,
            client_id: 1,
        },
    )
    .unwrap();
    let mut externs = ExternRuntimeClient::new(p4fleet_client::connect_lazy(&t).unwrap());
    let info = p4info::parse_text(&example("p4info.txt")).unwrap();
    let smac = TableSchema::from_p4info(&info, "MyIngress.smac").unwrap();
    let dmac = TableSchema::from_p4info(&info, "MyIngress.dmac").unwrap();
    let mut entries = Vec::new();
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
        entries
            .push(parse_inline(&smac, &m("srcAddr"), "NoAction", &BTreeMap::new(), None).unwrap());
        entries.push(
            parse_inline(
                &dmac,
                &m("dstAddr"),
                "forward",
                &BTreeMap::from([("port".to_string(), "1".to_string())]),
                None,
            )
            .unwrap(),
        );
    }

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
    let workloads: Vec<(&str, String, Vec<&str>)> = vec![
        ("no extern", no_extern, vec![]),
        ("empty (l2crypt.spec, 1 call)", empty, vec!["empty"]),
        (
            "encrypt + decrypt, mailbox untouched (l2crypt.spec)",
            l2.clone(),
            vec!["async_encrypt", "async_decrypt"],
        ),
        ("encrypt (mailbox variant)", encrypt, vec!["async_encrypt"]),
        (
            "encrypt + decrypt (l2crypt_mailbox.spec)",
            mailbox,
            vec!["async_encrypt", "async_decrypt"],
        ),
    ];
    let mut rows: Vec<Row> = Vec::new();
    let mut cookie = 100;
    for (name, spec, ext_names) in &workloads {
        if !ext_names.is_empty() && args.only.as_ref().is_some_and(|o| !name.contains(o.as_str())) {
            continue;
        }
        let modes: &[&str] = if ext_names.is_empty() {
            &["-"]
        } else if ext_names == &["empty"] {
            &["Sync", "Async"]
        } else {
            &["Sync", "Async", "Async, crypto device"]
        };
        for mode in modes {
            let mut runs = Vec::new();
            for _ in 0..args.runs {
                cookie += 1;
                let cfg = BfPipelineConfig::dpdk(
                    "l2crypt",
                    example("bfrt.json").into_bytes(),
                    example("context.json").into_bytes(),
                    spec.as_bytes().to_vec(),
                )
                .pack();
                device.set_pipeline(0, &info, cfg, cookie).await.unwrap();
                let ops: Vec<WriteOp> = entries.iter().map(WriteOp::insert).collect();
                let r = device
                    .write_ops(0, &ops, WriteOptions::default())
                    .await
                    .unwrap();
                assert!(r.failures.is_empty(), "{:?}", r.failures);
                let policy = ext_names
                    .iter()
                    .map(|n| xpb::ExternPolicy {
                        name: n.to_string(),
                        mode: if mode.starts_with("Async") {
                            xpb::Mode::Async as i32
                        } else {
                            xpb::Mode::Sync as i32
                        },
                        executor: match *mode {
                            "Async" => xpb::Executor::DedicatedCores as i32,
                            "Async, crypto device" => xpb::Executor::InlineCryptoDevice as i32,
                            _ => 0,
                        },
                        burst_size: args.burst,
                        ..Default::default()
                    })
                    .collect();
                let target = Some(xpb::Target {
                    device_id: 1,
                    pipeline: String::new(),
                });
                externs
                    .set_policy(xpb::SetPolicyRequest {
                        target: target.clone(),
                        externs: policy,
                    })
                    .await
                    .unwrap();
                tokio::time::sleep(Duration::from_secs_f64(args.warmup)).await;
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
                let (tx0, c0, t0) = (stats(&mut externs).await, cpu_ns(pid), Instant::now());
                tokio::time::sleep(Duration::from_secs_f64(args.seconds)).await;
                let (tx1, c1, dt) = (
                    stats(&mut externs).await,
                    cpu_ns(pid),
                    t0.elapsed().as_secs_f64(),
                );
                let n = (tx1 - tx0).max(1) as f64;
                runs.push(Row {
                    workload: name,
                    mode,
                    mpps: n / dt / 1e6,
                    dp_ns: (c1.0 - c0.0) as f64 / n,
                    ext_ns: (c1.1 - c0.1) as f64 / n,
                    cpu: ((c1.0 - c0.0) + (c1.1 - c0.1)) as f64 / 1e9 / dt,
                });
            }
            runs.sort_by(|a, b| a.mpps.total_cmp(&b.mpps));
            rows.push(runs.swap_remove(runs.len() / 2));
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    let base = rows[0].mpps;
    println!(
        "frame {} B, 16 flows, smac and dmac hit; median of {} runs of {} s after {} s warm-up",
        args.size, args.runs, args.seconds, args.warmup
    );
    println!(
        "| workload | mode | Mpps | vs no extern | data plane ns/pkt (CPU) | extern core ns/pkt | CPU got |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|");
    for r in &rows {
        println!(
            "| {} | {} | {:.2} | {:+.0} % | {:.0} | {:.0} | {:.2} |",
            r.workload,
            r.mode,
            r.mpps,
            (r.mpps / base - 1.0) * 100.0,
            r.dp_ns,
            r.ext_ns,
            r.cpu
        );
    }
}
