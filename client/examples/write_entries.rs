//! Writes 30,000 firewall entries to a P4Runtime device, e.g. the emulator:
//!
//! ```text
//! cargo run --release -p p4fleet-emulator -- --p4runtime-addr 127.0.0.1:9559 &
//! cargo run --release -p p4fleet-client --example write_entries -- 127.0.0.1:9559
//! ```
//!
//! The same code as client/README.md's example.

use std::fmt::Write as _;

use p4fleet_client::model::entries::{TableSchema, WriteOp, parse_text};
use p4fleet_client::{Device, Identity, Target, WriteOptions, proto};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let endpoint = std::env::args().nth(1).unwrap_or("127.0.0.1:9559".into());
    let p4info = proto::p4info::parse_text(include_str!("../../examples/firewall/p4info.txt"))?;
    let schema = TableSchema::from_p4info(&p4info, "firewall")?;

    // 30,000 entries in p4fleet's line format: src dst port -> allow(port).
    let mut text = String::from("#! fields hdr.ipv4.srcAddr hdr.ipv4.dstAddr\n#! action allow\n");
    for i in 0..30_000u32 {
        let [_, a, b, c] = i.to_be_bytes();
        writeln!(text, "10.{a}.{b}.{c} 192.168.0.1 {}", i % 512)?;
    }
    let entries = parse_text(&schema, &text)?;

    let id = Identity {
        election_id: 1,
        client_id: 1,
    };
    let device = Device::connect(Target::p4runtime(endpoint, 1), id)?;
    device.set_pipeline(0, &p4info, Vec::new(), 1).await?;
    let ops: Vec<WriteOp> = entries.iter().map(WriteOp::insert).collect();
    let report = device.write_ops(0, &ops, WriteOptions::default()).await?;

    println!(
        "{} of {} entries written in {:?} ({:.0} entries/s, {} requests); refused: {:?}",
        report.succeeded(),
        ops.len(),
        report.elapsed,
        report.updates_per_second(),
        report.requests,
        report.failures.first(),
    );
    Ok(())
}
