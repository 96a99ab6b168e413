//! `p4fleet-entry-path`: where the bytes and the time of one large
//! TableEntrySet sync go (docs/performance.md). Runs the
//! operator's stages in process ([`p4fleet_bench::entry_path`]) against a
//! child emulator (its memory is not counted) and prints, per stage, the
//! live heap when it ends and the peak during it, exact (a counting
//! global allocator), and its time.
//!
//! `p4fleet-entry-path --entries 1000000` (debug builds count the same
//! bytes; their times are only proportions).

use std::path::PathBuf;
use std::time::Instant;

use clap::Parser;
use p4fleet_bench::alloc;
use p4fleet_bench::entry_path::{self, EntryPath, MemReads, Stage};
use p4fleet_bench::fleet::procs::Emulator;

#[global_allocator]
static ALLOC: alloc::Counting = alloc::Counting;

#[derive(Parser)]
#[command(about = "Memory and time per stage of one large TableEntrySet sync")]
struct Args {
    /// Desired entries.
    #[arg(long, default_value_t = 1_000_000)]
    entries: usize,
    /// Lines per ConfigMap (the fleet benchmark's scenario b uses 25,000).
    #[arg(long, default_value_t = 25_000)]
    per_map: usize,
    #[arg(long, default_value_t = 10_000)]
    batch_size: u32,
    #[arg(long, default_value_t = 4)]
    max_in_flight: u32,
    /// Idle resyncs after the first sync (each reads the table back).
    #[arg(long, default_value_t = 1)]
    resyncs: usize,
    /// Directory of `p4fleet-emulator` (default: this binary's).
    #[arg(long)]
    bin_dir: Option<PathBuf>,
}

struct Row {
    what: String,
    live: isize,
    peak: isize,
    seconds: f64,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let bin_dir = p4fleet_bench::bin_dir(args.bin_dir.clone())?;
    let emu = Emulator::spawn(&bin_dir, 0, 1)?;
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?
        .block_on(run(&args, &emu))
}

async fn run(args: &Args, emu: &Emulator) -> anyhow::Result<()> {
    let n = args.entries;
    let maps = entry_path::config_maps(n, args.per_map);
    let reads = MemReads::new(maps);
    let compressed = reads.bytes();
    let write = serde_json::json!({
        "batchSize": args.batch_size, "maxInFlight": args.max_in_flight
    });
    let path = EntryPath::new(
        reads,
        &emu.p4runtime.to_string(),
        1,
        entry_path::p4info(n)?,
        write,
    )
    .await?;
    let (base, _) = alloc::live();
    println!(
        "{n} entries in {} ConfigMaps ({:.1} MB gzip, {:.1} B per entry; held by the \"API server\", not counted)",
        n.div_ceil(args.per_map),
        compressed as f64 / 1e6,
        compressed as f64 / n as f64
    );
    let mut rows = Vec::new();
    for round in 0..=args.resyncs {
        let label = if round == 0 {
            "sync".to_string()
        } else {
            format!("resync {round}")
        };
        alloc::reset_peak();
        let mut t = Instant::now();
        let mut at = |s: Stage| {
            rows.push(Row {
                what: format!("{label}: {}", s.name()),
                live: alloc::live().0 - base,
                peak: alloc::peak() - base,
                seconds: t.elapsed().as_secs_f64(),
            });
            alloc::reset_peak();
            t = Instant::now();
        };
        let s = path.sync(&mut at).await?;
        rows.push(Row {
            what: format!("{label}: held after it"),
            live: alloc::live().0 - base,
            peak: alloc::peak() - base,
            seconds: 0.0,
        });
        println!(
            "{label}: {} desired, {} applied, {} written in {} requests; parse → device {:.2} s ({:.0} entries/s), write {:.2} s",
            s.desired,
            s.applied,
            s.written,
            s.requests,
            s.parse_to_device.as_secs_f64(),
            s.desired as f64 / s.parse_to_device.as_secs_f64(),
            s.write.as_secs_f64(),
        );
    }
    println!();
    println!("| stage | live at its end (MB) | B/entry | peak during it (MB) | B/entry | s |");
    println!("|---|---:|---:|---:|---:|---:|");
    for r in &rows {
        println!(
            "| {} | {:.1} | {:.0} | {:.1} | {:.0} | {:.2} |",
            r.what,
            r.live as f64 / 1e6,
            r.live as f64 / n as f64,
            r.peak as f64 / 1e6,
            r.peak as f64 / n as f64,
            r.seconds
        );
    }
    let top = rows.iter().map(|r| r.peak).max().unwrap_or(0);
    println!(
        "\npeak live heap over the run: {:.1} MB, {:.0} B per desired entry",
        top as f64 / 1e6,
        top as f64 / n as f64
    );
    Ok(())
}
