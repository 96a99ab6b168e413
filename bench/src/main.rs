//! `p4fleet-bench`: the rbfrt paper's insertion experiment (Figure 3) against
//! the p4fleet emulator, with p4fleet-client and peer clients side by
//! side in one run, plus the emulator's own ceiling and the reconcile cost.
//! Writes docs/benchmarks.md, docs/benchmarks/{results.json,results.csv,
//! insertion-rate.svg}. See docs/benchmarks.md for how to read them.

mod bulk_ceiling;
mod ceiling;
mod emu;
mod paths;
mod reconcile;
mod report;
mod stats;
mod workload;

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::Parser;
use indicatif::{ProgressBar, ProgressStyle};
use p4fleet_model::entries::TableSchema;

use crate::paths::{P4fleetBfrt, P4fleetP4rt, Python, Rbfrt};
use crate::report::{Machine, PathResult, Results};

#[global_allocator]
static ALLOC: p4fleet_bench::alloc::Counting = p4fleet_bench::alloc::Counting;

const ALL_PATHS: &str =
    "p4fleet-p4rt-1,p4fleet-p4rt-n,p4fleet-p4rt-bulk,p4fleet-bfrt-1,p4fleet-bfrt-n,rbfrt,python";

#[derive(Parser, Debug)]
#[command(
    name = "p4fleet-bench",
    about = "The rbfrt paper's insertion experiment, side by side"
)]
struct Args {
    /// Entries inserted per run.
    #[arg(long, default_value_t = 30_000)]
    entries: usize,
    /// Runs per (path, batch size).
    #[arg(long, default_value_t = 5)]
    runs: usize,
    /// Batch sizes (entries per Write request).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "1,3,10,30,100,300,1000,3000,10000,30000"
    )]
    batches: Vec<usize>,
    /// Paths to measure: p4fleet-p4rt-1 (maxInFlight 1), p4fleet-p4rt-n
    /// (maxInFlight --max-in-flight), p4fleet-p4rt-bulk (p4fleet's columnar
    /// bulk write, maxInFlight --max-in-flight), rbfrt, python.
    #[arg(long, value_delimiter = ',', default_value = ALL_PATHS)]
    paths: Vec<String>,
    /// maxInFlight of the pipelined p4fleet path.
    #[arg(long, default_value_t = 4)]
    max_in_flight: usize,
    /// The emulator binary (default: next to this binary).
    #[arg(long)]
    emulator_bin: Option<PathBuf>,
    /// Pin the emulator child to these CPUs (taskset list, e.g. `1`).
    #[arg(long)]
    emulator_cpus: Option<String>,
    /// Python with the `p4runtime` package (default: the e2e venv).
    #[arg(long)]
    python: Option<PathBuf>,
    /// Repository root (examples/, bench/python/, docs/).
    #[arg(long)]
    repo: Option<PathBuf>,
    /// Entries of the no-op resync measurement (0 skips it).
    #[arg(long, default_value_t = 100_000)]
    reconcile_entries: usize,
    /// Skip the in-process emulator ceiling.
    #[arg(long)]
    no_ceiling: bool,
    /// Only measure the client-side encode cost (no emulator, no docs):
    /// p4fleet's direct encoding (the *encode only* series) beside the
    /// prost `Update` path it replaced, per batch size.
    #[arg(long)]
    encode_only: bool,
    /// Do not write docs/ (print the markdown instead).
    #[arg(long)]
    no_docs: bool,
    /// Re-render docs/benchmarks.md, the plot and the CSV from a saved
    /// results.json (e.g. after a change to the report text) instead of
    /// measuring; the measurement's own date, commit and machine are kept.
    #[arg(long, value_name = "RESULTS_JSON")]
    report_from: Option<PathBuf>,
    /// The command recorded in the docs as the way to reproduce.
    #[arg(long)]
    command: Option<String>,
}

fn repo_root(arg: Option<PathBuf>) -> PathBuf {
    arg.unwrap_or_else(|| {
        let cwd = std::env::current_dir().unwrap_or_default();
        if cwd.join("examples/firewall/p4info.txt").exists() {
            cwd
        } else {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
        }
    })
}

fn git_commit(repo: &Path) -> String {
    std::process::Command::new("git")
        .arg("-C")
        .arg(repo)
        .args(["rev-parse", "--short", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "unknown".into())
}

/// Device ids on the emulator child, one per client so arbitration of one
/// never preempts another.
const DEV_P4FLEET: u64 = 1;
const DEV_PYTHON: u64 = 2;
const DEV_RBFRT: u64 = 3;
const DEV_RECONCILE: u64 = 4;
const DEV_P4FLEET_N: u64 = 5;
const DEV_BFRT: u64 = 6;
const DEV_BFRT_N: u64 = 7;
const DEV_P4FLEET_BULK: u64 = 8;

enum Client {
    P4fleet(Box<P4fleetP4rt>, usize, u64),
    Rbfrt(Rbfrt),
    Bfrt(Box<P4fleetBfrt>, usize, u64),
    Python(Python),
}

/// `--encode-only`: the client-side cost per entry of the direct encoders
/// (and, for P4Runtime, of the prost message path they replaced),
/// interleaved.
fn encode_only(
    entries: &[p4fleet_model::entries::Entry],
    bfrt: &p4fleet_model::entries::bfrt::BfrtProgramMap,
    batches: &[usize],
    runs: usize,
) {
    let per_entry = |s: stats::Sample| s.elapsed_s * 1e9 / s.entries.max(1) as f64;
    println!("| batch | P4Runtime direct, ns/entry | P4Runtime prost Update path | BFRT direct |");
    println!("|---:|---:|---:|---:|");
    for &batch in batches {
        let mut cols: [Vec<f64>; 3] = Default::default();
        for _ in 0..runs.max(1) {
            cols[0].push(per_entry(paths::client_encode(entries, batch)));
            cols[1].push(per_entry(ceiling::client_encode(entries, batch)));
            cols[2].push(per_entry(paths::bfrt_client_encode(bfrt, entries, batch)));
        }
        let m: Vec<String> = cols
            .iter_mut()
            .map(|v| {
                v.sort_by(f64::total_cmp);
                format!("{:.0}", v[v.len() / 2])
            })
            .collect();
        println!("| {batch} | {} |", m.join(" | "));
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let repo = repo_root(args.repo.clone());
    if let Some(path) = &args.report_from {
        let json = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
        let results: report::Results =
            serde_json::from_slice(&json).with_context(|| format!("parsing {}", path.display()))?;
        return write_docs(&repo, &results, args.no_docs);
    }
    let p4info_path = repo.join("examples/firewall/p4info.txt");
    let (info, ids) = workload::firewall(&p4info_path)?;
    let schema = TableSchema::from_p4info(&info, workload::TABLE)?;
    let batches: Vec<usize> = args.batches.iter().map(|b| (*b).max(1)).collect();
    if args.encode_only {
        let json = std::fs::read(repo.join("examples/firewall/bfrt.json"))?;
        let bfrt = workload::bfrt_map(&info, &json)?;
        encode_only(
            &workload::entries(&ids, args.entries),
            &bfrt,
            &batches,
            args.runs,
        );
        return Ok(());
    }
    let emulator_bin = args.emulator_bin.clone().unwrap_or_else(|| {
        std::env::current_exe()
            .ok()
            .and_then(|p| p.parent().map(|d| d.join("p4fleet-emulator")))
            .unwrap_or_else(|| "p4fleet-emulator".into())
    });
    let mut notes = Vec::new();
    let machine = Machine::probe();
    eprintln!(
        "machine: {} × {}, {}; emulator {}",
        machine.nproc,
        machine.cpu,
        machine.memory,
        emulator_bin.display()
    );
    let child = emu::ChildEmulator::start(
        &emulator_bin,
        8,
        &repo.join("examples/firewall/bfrt.json"),
        args.emulator_cpus.as_deref(),
    )
    .await
    .context("starting the emulator (build it: cargo build --release -p p4fleet-emulator)")?;
    let endpoint = child.p4runtime.to_string();
    let emulator_desc = format!(
        "`p4fleet-emulator` child process ({}), P4Runtime and BFRT front ends, one device per client; client and emulator share the machine's {} CPUs",
        match &args.emulator_cpus {
            Some(c) => format!("pinned to CPUs {c}"),
            None => "not pinned".into(),
        },
        machine.nproc
    );

    // Clients, in the order of the docs' columns.
    let mut clients: Vec<(PathResult, Option<Client>)> = Vec::new();
    for key in &args.paths {
        let (res, client) = match key.as_str() {
            "p4fleet-p4rt-1" | "p4fleet-p4rt-n" => {
                let n = if key == "p4fleet-p4rt-1" {
                    1
                } else {
                    args.max_in_flight
                };
                let r = PathResult::new(
                    key,
                    &format!("p4fleet P4Runtime (maxInFlight {n})"),
                    "P4Runtime",
                    true,
                );
                let dev = if n == 1 { DEV_P4FLEET } else { DEV_P4FLEET_N };
                let c = P4fleetP4rt::connect(&endpoint, dev, info.clone())
                    .await
                    .map(|c| Client::P4fleet(Box::new(c), n, dev));
                (r, c)
            }
            "p4fleet-p4rt-bulk" => {
                let n = args.max_in_flight;
                let r = PathResult::new(
                    key,
                    &format!("p4fleet P4Runtime bulk (maxInFlight {n})"),
                    "P4Runtime bulk",
                    true,
                );
                let c = async {
                    let mut c =
                        P4fleetP4rt::connect(&endpoint, DEV_P4FLEET_BULK, info.clone()).await?;
                    c.use_bulk().await?;
                    anyhow::Ok(c)
                }
                .await
                .map(|c| Client::P4fleet(Box::new(c), n, DEV_P4FLEET_BULK));
                (r, c)
            }
            "p4fleet-bfrt-1" | "p4fleet-bfrt-n" => {
                let (n, dev) = if key == "p4fleet-bfrt-1" {
                    (1, DEV_BFRT)
                } else {
                    (args.max_in_flight, DEV_BFRT_N)
                };
                let r = PathResult::new(
                    key,
                    &format!("p4fleet BFRT (maxInFlight {n})"),
                    "BFRT",
                    true,
                );
                let json = std::fs::read(repo.join("examples/firewall/bfrt.json"))?;
                let c = P4fleetBfrt::connect(&child.bfrt.to_string(), dev, &info, json)
                    .await
                    .map(|c| Client::Bfrt(Box::new(c), n, dev));
                (r, c)
            }
            "rbfrt" => {
                let r = PathResult::new(key, "rbfrt 0.1.11 (BFRT)", "BFRT", false);
                (
                    r,
                    Rbfrt::connect(child.bfrt, DEV_RBFRT as u32)
                        .await
                        .map(Client::Rbfrt),
                )
            }
            "python" => {
                let python = args
                    .python
                    .clone()
                    .unwrap_or_else(|| repo.join(".local/p4runtime-shell-venv/bin/python"));
                let c = Python::start(
                    &python,
                    &repo.join("bench/python/p4rt_peer.py"),
                    &endpoint,
                    DEV_PYTHON,
                    &p4info_path,
                )
                .await;
                let name = match &c {
                    Ok(p) => format!(
                        "Python P4Runtime (p4runtime stubs, grpcio {}, protobuf {})",
                        p.info.grpcio, p.info.protobuf
                    ),
                    Err(_) => "Python P4Runtime".into(),
                };
                if let Ok(p) = &c {
                    notes.push(format!(
                        "Python peer: bench/python/p4rt_peer.py, Python {}, grpcio {}, protobuf implementation `{}` (the venv of the e2e p4runtime-shell test, e2e/python/requirements.txt: p4runtime 1.4.1, protobuf 3.20.3, which has no C++ extension for this Python). It uses the `p4runtime` package's stubs directly, which is faster than p4runtime-shell's entry objects, and sends the same batch sizes (p4runtime-shell itself only writes one entry per request).",
                        p.info.python, p.info.grpcio, p.info.protobuf
                    ));
                }
                (
                    PathResult::new(key, &name, "P4Runtime", false),
                    c.map(Client::Python),
                )
            }
            other => anyhow::bail!("unknown path {other:?} (known: {ALL_PATHS})"),
        };
        match client {
            Ok(c) => clients.push((res, Some(c))),
            Err(e) => {
                eprintln!("{key}: cannot run: {e:#}");
                let mut res = res;
                res.error = Some(format!("{e:#}"));
                clients.push((res, None));
            }
        }
    }

    let entries = workload::entries(&ids, args.entries);
    let total = (args.runs * batches.len() * clients.len()) as u64;
    let pb = ProgressBar::new(total);
    pb.set_style(
        ProgressStyle::with_template(
            "{elapsed_precise} [{bar:30.cyan/blue}] {pos}/{len} eta {eta} {msg}",
        )
        .expect("template")
        .progress_chars("=> "),
    );
    for run in 1..=args.runs {
        for &batch in &batches {
            for (res, client) in clients.iter_mut() {
                pb.set_message(format!("run {run} batch {batch} {}", res.key));
                let Some(c) = client.as_mut() else {
                    pb.inc(1);
                    continue;
                };
                let (sample, device) = match c {
                    Client::P4fleet(c, n, dev) => (c.run(&entries, batch, *n).await, *dev),
                    Client::Bfrt(c, n, dev) => (c.run(&entries, batch, *n).await, *dev),
                    Client::Rbfrt(c) => (c.run(args.entries, batch).await, DEV_RBFRT),
                    Client::Python(c) => (c.run(args.entries, batch).await, DEV_PYTHON),
                };
                let checked = match sample {
                    Ok(s) => match child.entries(device).await {
                        Ok(n) if n == args.entries as u64 => Ok(s),
                        Ok(n) => Err(anyhow::anyhow!(
                            "device {device} holds {n} entries after the run, expected {}",
                            args.entries
                        )),
                        Err(e) => Err(e),
                    },
                    Err(e) => Err(e),
                };
                match checked {
                    Ok(s) => res.samples.entry(batch).or_default().push(s),
                    Err(e) => {
                        pb.println(format!("{} batch {batch}: {e:#}; dropped", res.key));
                        res.error = Some(format!("run {run} batch {batch}: {e:#}"));
                        *client = None;
                    }
                }
                pb.inc(1);
                if pb.is_hidden() {
                    // No terminal (e.g. make bench > log): one line per step.
                    eprintln!(
                        "[{}/{total}] run {run} batch {batch} {}",
                        pb.position(),
                        res.key
                    );
                }
            }
        }
    }
    pb.finish_with_message("insertions done");
    let mut paths: Vec<PathResult> = Vec::new();
    for (res, client) in clients {
        if let Some(Client::Python(p)) = client {
            p.stop().await;
        }
        paths.push(res);
    }

    if !args.no_ceiling {
        eprintln!("emulator ceiling (in-process) and client encode cost...");
        let mut ceil = PathResult::new(
            "ceiling",
            "emulator ceiling (in-process, no client)",
            "P4Runtime",
            false,
        );
        ceil.reference = true;
        let mut enc = PathResult::new("encode", "p4fleet encode only (no send)", "P4Runtime", true);
        enc.reference = true;
        match ceiling::Ceiling::start(info.clone()).await {
            Ok(mut c) => {
                for _ in 0..args.runs {
                    for &batch in &batches {
                        match c.run(&entries, batch).await {
                            Ok(s) => ceil.samples.entry(batch).or_default().push(s),
                            Err(e) => ceil.error = Some(format!("{e:#}")),
                        }
                        enc.samples
                            .entry(batch)
                            .or_default()
                            .push(paths::client_encode(&entries, batch));
                    }
                }
                c.shutdown().await;
            }
            Err(e) => ceil.error = Some(format!("{e:#}")),
        }
        paths.push(ceil);
        paths.push(enc);
        let mut bulk = PathResult::new(
            "ceiling-bulk",
            "emulator bulk ceiling (in-process, no client)",
            "P4Runtime bulk",
            false,
        );
        bulk.reference = true;
        match bulk_ceiling::BulkCeiling::start(info.clone()).await {
            Ok(mut c) => {
                for _ in 0..args.runs {
                    for &batch in &batches {
                        match c.run(&entries, batch).await {
                            Ok(s) => bulk.samples.entry(batch).or_default().push(s),
                            Err(e) => bulk.error = Some(format!("{e:#}")),
                        }
                    }
                }
                c.shutdown().await;
            }
            Err(e) => bulk.error = Some(format!("{e:#}")),
        }
        paths.push(bulk);
    }

    let mut reconcile = None;
    if args.reconcile_entries > 0 {
        eprintln!("no-op resync of {} entries...", args.reconcile_entries);
        drop(entries);
        let r = async {
            let mut c = P4fleetP4rt::connect(&endpoint, DEV_RECONCILE, info.clone()).await?;
            reconcile::run(
                &mut c,
                &schema,
                &ids,
                args.reconcile_entries,
                args.runs.max(3),
            )
            .await
        }
        .await;
        match r {
            Ok(r) => reconcile = Some(r),
            Err(e) => notes.push(format!("The reconcile measurement failed: {e:#}")),
        }
    }

    notes.push(format!(
        "The machine has {} CPUs shared by the client under test, the emulator (a separate process) and anything else running; on a 2-CPU machine the client and the server compete, so the absolute rates are lower than on separate hosts. The emulator is not a Tofino: it has no ASIC write latency, so these numbers measure the clients and the gRPC path (see the ceiling).",
        machine.nproc
    ));
    let results = Results {
        date: chrono::Utc::now().format("%Y-%m-%d %H:%M UTC").to_string(),
        command: args
            .command
            .as_deref()
            .map(|c| c.trim().to_string())
            .unwrap_or_else(|| std::env::args().collect::<Vec<_>>().join(" ")),
        git_commit: git_commit(&repo),
        machine,
        entries: args.entries,
        runs: args.runs,
        batches,
        emulator: emulator_desc,
        paths,
        reconcile,
        notes,
    };
    write_docs(&repo, &results, args.no_docs)
}

/// docs/benchmarks.md and docs/benchmarks/ from `results` (or the markdown
/// on stdout only, with `--no-docs`).
fn write_docs(
    repo: &std::path::Path,
    results: &report::Results,
    no_docs: bool,
) -> anyhow::Result<()> {
    let md = results.markdown();
    if no_docs {
        println!("{md}");
        return Ok(());
    }
    let dir = repo.join("docs/benchmarks");
    std::fs::create_dir_all(&dir)?;
    std::fs::write(repo.join("docs/benchmarks.md"), &md)?;
    // Written to a temporary first: --report-from may be reading this file.
    let json = serde_json::to_string_pretty(results)?;
    std::fs::write(dir.join("results.json.tmp"), json)?;
    std::fs::rename(dir.join("results.json.tmp"), dir.join("results.json"))?;
    std::fs::write(dir.join("results.csv"), results.csv())?;
    std::fs::write(dir.join("insertion-rate.svg"), report::svg(results))?;
    eprintln!("wrote docs/benchmarks.md and docs/benchmarks/");
    println!("{md}");
    Ok(())
}
