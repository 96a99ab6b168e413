//! `make bench-fpga`, operator side: what the operator adds on top of the
//! device's load time when a VirtualSwitch's `programRef` changes, and the
//! packets other slots lose meanwhile (docs/fpga.md, "Swap benchmark").
//!
//! A real kube-apiserver + etcd, the operator and one emulated NetFPGA-SUME
//! per configuration port as child processes. Three VirtualSwitches (L2,
//! router, L2 on VLANs 10, 20, 30) with traffic on every slot; then the
//! middle one is swapped router ↔ firewall `--swaps` times. Per swap:
//!
//! - E: from just before the PATCH of `programRef` to the first watch event
//!   of the VirtualSwitch whose `status.lastSwap` names the new digest;
//! - D: `lastSwap.durationMillis`, the device's own load time;
//! - L: `status.lastSwapMillis`, the operator's slot load (upload,
//!   LoadSlot, isolation, port map, read-backs);
//! - overhead O = E − D, of which push = L − D and reaction + status =
//!   E − L (watch delivery to the operator, reconcile up to the load,
//!   status write, watch delivery back);
//! - packets dropped by the other two slots between counters read before
//!   the PATCH and after the status (goal 0), and what they forwarded.
//!
//! Usage: fpga_swap_bench [--swaps N] [--ports icap,jtag] [--pps N]
//! [--bin-dir DIR] (the operator and emulator binaries; default: this
//! build's, `make bench-fpga` passes `target/release`).

#[path = "../tests/fpga_common/mod.rs"]
mod fpga_common;

use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::api::{Patch, PatchParams};
use kube::runtime::watcher;
use p4fleet_client::{SlotClient, Target};
use p4fleet_e2e::processes::{build_binaries, spawn_emulator, spawn_operator};
use p4fleet_e2e::{ControlPlane, TestNamespace};
use p4fleet_proto::fpga as pb;
use serde_json::json;

use fpga_common::*;

struct Args {
    swaps: usize,
    ports: Vec<String>,
    pps: u64,
    bin_dir: Option<std::path::PathBuf>,
}

const USAGE: &str =
    "usage: fpga_swap_bench [--swaps N] [--ports icap,jtag] [--pps N] [--bin-dir DIR]";

/// Exits with the usage on `--help` or a bad flag (a benchmark driver,
/// so a message and exit code 2 rather than a panic's backtrace).
fn usage(problem: &str) -> ! {
    if problem.is_empty() {
        println!("{USAGE}");
        std::process::exit(0);
    }
    eprintln!("fpga_swap_bench: {problem}\n{USAGE}");
    std::process::exit(2);
}

fn args() -> Args {
    let mut a = Args {
        swaps: 10,
        ports: vec!["icap".into(), "jtag".into()],
        pps: 100_000,
        bin_dir: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        if flag == "--help" || flag == "-h" {
            usage("");
        }
        let value = it
            .next()
            .unwrap_or_else(|| usage(&format!("{flag} needs a value")));
        let number = |v: &str| {
            v.parse()
                .unwrap_or_else(|_| usage(&format!("{flag} takes a number, not {v:?}")))
        };
        match flag.as_str() {
            "--swaps" => a.swaps = number(&value) as usize,
            "--ports" => a.ports = value.split(',').map(Into::into).collect(),
            "--pps" => a.pps = number(&value),
            "--bin-dir" => a.bin_dir = Some(value.into()),
            _ => usage(&format!("unknown flag {flag}")),
        }
    }
    a
}

/// One swap's figures, in milliseconds and packets.
struct Swap {
    e: f64,
    d: f64,
    l: f64,
    dropped_other: u64,
    forwarded_other: u64,
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

fn counts(r: &pb::GetSlotCountersResponse, slots: &[u32]) -> (u64, u64) {
    r.slots
        .iter()
        .filter(|c| slots.contains(&c.slot))
        .fold((0, 0), |(f, d), c| {
            (f + c.tx_packets, d + c.dropped_packets)
        })
}

async fn run_port(cp: &ControlPlane, port: &str, a: &Args) -> Vec<Swap> {
    let bin = bins(a);
    let pps = a.pps.to_string();
    let emu = spawn_emulator(
        &bin,
        &[
            "--fpga",
            "netfpga-sume",
            "--fpga-port",
            port,
            "--fpga-traffic-pps",
            &pps,
        ],
    );
    let client = cp.client().await;
    let ns = TestNamespace::new(&client).await;
    let Three {
        router,
        firewall,
        api,
        ..
    } = three(&client, ns.name(), emu.p4runtime).await;
    let mut slots = Vec::new();
    for name in ["a", "c"] {
        let v = until(&format!("{name} Ready"), || async {
            let v = api.get(name).await.ok()?;
            let ready = v.status.as_ref()?.conditions.iter().all(|c| c.is_true());
            ready.then_some(v)
        })
        .await;
        slots.push(v.status.unwrap().slot.unwrap());
    }
    until("b Ready", || async {
        let v = api.get("b").await.ok()?;
        (v.status?.loaded_digest? == router).then_some(())
    })
    .await;

    // Every status of "b" as it arrives, with the instant it arrived.
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let cfg = watcher::Config::default().fields("metadata.name=b");
    let watch_api = api.clone();
    tokio::spawn(async move {
        let mut events = watcher::watcher(watch_api, cfg).boxed();
        while let Some(ev) = events.next().await {
            let seen = Instant::now();
            let objs = match ev {
                Ok(watcher::Event::Apply(v)) | Ok(watcher::Event::InitApply(v)) => vec![v],
                _ => vec![],
            };
            for v in objs {
                if tx.send((seen, v)).is_err() {
                    return;
                }
            }
        }
    });

    let board = SlotClient::connect(&Target::p4runtime(emu.p4runtime.to_string(), 1)).unwrap();
    let mut out = Vec::new();
    for i in 0..a.swaps {
        let to = if i % 2 == 0 { &firewall } else { &router };
        let to_name = if i % 2 == 0 { "firewall" } else { "router" };
        while rx.try_recv().is_ok() {}
        let before = board.counters(vec![]).await.unwrap();
        let t0 = Instant::now();
        let patch = json!({"spec": {"programRef": to_name}});
        api.patch("b", &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
        let (seen, v) = loop {
            let (seen, v) = tokio::time::timeout(WAIT, rx.recv())
                .await
                .expect("swap status within the wait")
                .expect("watch running");
            let st = v.status.as_ref();
            if st
                .and_then(|s| s.last_swap.as_ref())
                .is_some_and(|s| &s.to_digest == to)
            {
                break (seen, v);
            }
        };
        let after = board.counters(vec![]).await.unwrap();
        let st = v.status.unwrap();
        let swap = st.last_swap.unwrap();
        let (f0, d0) = counts(&before, &slots);
        let (f1, d1) = counts(&after, &slots);
        out.push(Swap {
            e: ms(seen - t0),
            d: swap.duration_millis as f64,
            l: st.last_swap_millis.unwrap_or_default() as f64,
            dropped_other: d1 - d0,
            forwarded_other: f1 - f0,
        });
        // Let the status settle (entriesReapplied) before the next swap.
        until("b settled", || async {
            let s = api.get("b").await.ok()?.status?.last_swap?;
            s.entries_reapplied.map(|_| ())
        })
        .await;
    }
    ns.delete(&client).await.ok();
    drop(emu);
    out
}

fn bins(a: &Args) -> std::path::PathBuf {
    a.bin_dir.clone().unwrap_or_else(build_binaries)
}

#[tokio::main]
async fn main() {
    let a = args();
    let cp = ControlPlane::shared().await;
    let bin = bins(&a);
    let _op = spawn_operator(&bin, cp.kubeconfig_path(), "operator-fpga-bench", &[]);
    println!(
        "| port | swaps | E median (ms) | D device (ms) | L operator's load (ms) | overhead O = E − D (ms) | push L − D (ms) | reaction + status E − L (ms) | O max (ms) | dropped by other slots | forwarded by other slots |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for port in &a.ports {
        let s = run_port(cp, port, &a).await;
        let col = |f: &dyn Fn(&Swap) -> f64| median(s.iter().map(f).collect());
        let o_max = s.iter().map(|x| x.e - x.d).fold(f64::MIN, f64::max);
        println!(
            "| {port} | {} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {} | {} |",
            s.len(),
            col(&|x| x.e),
            col(&|x| x.d),
            col(&|x| x.l),
            col(&|x| x.e - x.d),
            col(&|x| x.l - x.d),
            col(&|x| x.e - x.l),
            o_max,
            s.iter().map(|x| x.dropped_other).sum::<u64>(),
            s.iter().map(|x| x.forwarded_other).sum::<u64>(),
        );
    }
}
