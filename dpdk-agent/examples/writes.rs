//! Table writes through the agent into DPDK's control API: N exact-match
//! dmac entries of examples/l2crypt (4,096 fit), inserted and deleted in
//! batches of B updates (one Write and one DPDK commit per batch), with
//! p4fleet-client as the operator uses it. Prints entries/s per batch
//! size. The pipeline keeps forwarding (paced at 100,000 packets/s).
//!
//! `cargo build --release -p p4fleet-dpdk-agent --bins --examples &&
//! target/release/examples/writes [--entries 4000] [--batches 1,10,100,1000,4000]`

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use clap::Parser;
use p4fleet_client::model::entries::{Entry, TableSchema, WriteOp, parse_inline};
use p4fleet_client::model::pipeline_config::BfPipelineConfig;
use p4fleet_client::proto::p4info;
use p4fleet_client::{Device, Identity, Target, WriteOptions};

#[derive(Parser, Debug)]
struct Args {
    #[arg(long)]
    agent: Option<PathBuf>,
    #[arg(long, default_value_t = 4000)]
    entries: u32,
    #[arg(long, value_delimiter = ',', default_value = "1,10,100,1000,4000")]
    batches: Vec<usize>,
}

fn example(file: &str) -> String {
    std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../examples/l2crypt")
            .join(file),
    )
    .unwrap()
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args = Args::parse();
    let dir = tempfile::tempdir().unwrap();
    // One 60-byte frame is enough traffic to keep the pipeline running.
    let pcap = dir.path().join("one.pcap");
    let mut b = Vec::new();
    b.extend_from_slice(&0xa1b2_c3d4u32.to_le_bytes());
    b.extend_from_slice(&[2, 0, 4, 0]);
    for v in [0u32, 0, 65535, 1, 0, 0, 60, 60] {
        b.extend_from_slice(&v.to_le_bytes());
    }
    b.extend_from_slice(&[0u8; 60]);
    std::fs::write(&pcap, b).unwrap();
    let agent = args.agent.clone().unwrap_or_else(|| {
        let exe = std::env::current_exe().unwrap();
        exe.parent()
            .unwrap()
            .parent()
            .unwrap()
            .join("p4fleet-dpdk-agent")
    });
    let mut child = Command::new(&agent)
        .args(["--addr", "127.0.0.1:0", "--rate-pps", "100000"])
        .arg("--port-in")
        .arg(format!("source:{}", pcap.display()))
        .arg("--workdir")
        .arg(dir.path().join("work"))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("{}: {e}", agent.display()));
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    let addr = loop {
        line.clear();
        assert!(out.read_line(&mut line).unwrap() > 0, "agent exited");
        if let Some(a) = line.trim().strip_prefix("p4runtime listening on ") {
            break a.to_string();
        }
    };
    let device = Device::connect(
        Target::p4runtime(addr, 1),
        Identity {
            election_id: 1,
            client_id: 1,
        },
    )
    .unwrap();
    let info = p4info::parse_text(&example("p4info.txt")).unwrap();
    let cfg = BfPipelineConfig::dpdk(
        "l2crypt",
        example("bfrt.json").into_bytes(),
        example("context.json").into_bytes(),
        example("l2crypt.spec").into_bytes(),
    )
    .pack();
    let t = Instant::now();
    device.set_pipeline(0, &info, cfg, 1).await.unwrap();
    println!(
        "SetForwardingPipelineConfig (codegen, cc, build): {:.0} ms",
        t.elapsed().as_secs_f64() * 1e3
    );
    let dmac = TableSchema::from_p4info(&info, "MyIngress.dmac").unwrap();
    let entries: Vec<Entry> = (0..args.entries)
        .map(|i| {
            parse_inline(
                &dmac,
                &BTreeMap::from([("hdr.ethernet.dstAddr".to_string(), format!("0x0a00{i:08x}"))]),
                "forward",
                &BTreeMap::from([("port".to_string(), (i % 16).to_string())]),
                None,
            )
            .unwrap()
        })
        .collect();
    println!("| batch | insert entries/s | delete entries/s | Write requests |");
    println!("|---:|---:|---:|---:|");
    for batch in &args.batches {
        let opts = WriteOptions {
            batch_size: *batch,
            max_in_flight: 1,
            ..WriteOptions::default()
        };
        let ins: Vec<WriteOp> = entries.iter().map(WriteOp::insert).collect();
        let t = Instant::now();
        let r = device.write_ops(0, &ins, opts).await.unwrap();
        let ins_rate = entries.len() as f64 / t.elapsed().as_secs_f64();
        assert!(r.failures.is_empty(), "{:?}", &r.failures[..1]);
        let requests = r.requests;
        let del: Vec<WriteOp> = entries.iter().map(|e| WriteOp::delete(&e.key)).collect();
        let t = Instant::now();
        let r = device.write_ops(0, &del, opts).await.unwrap();
        let del_rate = entries.len() as f64 / t.elapsed().as_secs_f64();
        assert!(r.failures.is_empty(), "{:?}", &r.failures[..1]);
        println!("| {batch} | {ins_rate:.0} | {del_rate:.0} | {requests} |");
    }
    let _ = child.kill();
    let _ = child.wait();
}
