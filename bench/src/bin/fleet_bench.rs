//! `p4fleet-fleet-bench`: the fleet benchmark (docs/fleet.md). Each
//! scenario runs in a child process of this binary with its own etcd,
//! kube-apiserver, emulators and operator, so no run sees another's
//! objects or counters; the parent collects their results and writes
//! docs/fleet/results.{md,csv,json} and docs/fleet/fleet.svg.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Parser;
use p4fleet_bench::fleet::report::Report;
use p4fleet_bench::fleet::{self, ApplyMode, Config, Run, Scenario, SetLayout};
use p4fleet_bench::machine::Machine;

#[derive(Parser, Debug, Clone)]
#[command(
    name = "p4fleet-fleet-bench",
    about = "The operator at fleet size: from kubectl apply to every object Ready"
)]
struct Args {
    /// Fleet sizes of scenario (a), (c) and (d); 0 skips them.
    #[arg(long, value_delimiter = ',', default_value = "10,100,1000")]
    switches: Vec<usize>,
    /// Fleet sizes run again after those of --switches with one shared
    /// selector set instead of per-Switch sets (the `shared` layout of
    /// --sets): its 1 % change is one ConfigMap, not one per Switch; 0
    /// skips them.
    #[arg(long, value_delimiter = ',', default_value = "1000")]
    shared_switches: Vec<usize>,
    /// Entries per Switch.
    #[arg(long, default_value_t = 1000)]
    entries: usize,
    /// Percent of each set's entries changed in (c).
    #[arg(long, default_value_t = 1.0)]
    change_percent: f64,
    /// Entries of scenario (b) (0 skips it).
    #[arg(long, default_value_t = 1_000_000)]
    big_entries: usize,
    /// Lines per ConfigMap in (b) (ConfigMaps hold at most 1 MiB):
    /// 100,000 compressed (about 0.45 MB of gzip each), 25,000 with
    /// --big-plain (about 0.8 MB of text each).
    #[arg(long)]
    per_map: Option<usize>,
    /// (b) from plain `data` ConfigMaps instead of gzip-compressed
    /// `binaryData` (as runs before 2026-11-28 did).
    #[arg(long)]
    big_plain: bool,
    /// Devices per emulator process (0: split each fleet over two
    /// processes, one per core of this 2-core machine).
    #[arg(long, default_value_t = 0)]
    devices_per_emulator: usize,
    /// How objects are applied: `api` by default, because kubectl applied
    /// about one object per second on the shared development machine
    /// (docs/fleet.md), which would make the 4,001 objects of 1,000
    /// Switches a measurement of kubectl.
    #[arg(long, value_enum, default_value = "api")]
    apply: ApplyMode,
    /// How the fleet's entries are written: `per-switch` (a ConfigMap and
    /// a TableEntrySet per Switch) or `shared` (one ConfigMap and one
    /// TableEntrySet selecting every VirtualSwitch, the same entries on
    /// each; a change is then one object).
    #[arg(long, value_enum, default_value = "per-switch")]
    sets: SetLayout,
    /// The operator's --resync-seconds (the idle round is one of these).
    #[arg(long, default_value_t = 30)]
    resync_seconds: u64,
    /// The operator's --drift-seconds (its default).
    #[arg(long, default_value_t = 10)]
    drift_seconds: u64,
    /// The operator's --log-level.
    #[arg(long, default_value = "info")]
    operator_log_level: String,
    /// Seconds each phase may take to become Ready.
    #[arg(long, default_value_t = 900)]
    timeout_seconds: u64,
    /// Directory of p4fleet and p4fleet-emulator (default: next to this binary).
    #[arg(long)]
    bin: Option<PathBuf>,
    /// Where results go.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Print the results only; write nothing under --out.
    #[arg(long)]
    no_docs: bool,
    /// The command line recorded in the results.
    #[arg(long, default_value = "make bench-fleet")]
    command: String,
    /// Redraw results.md, results.csv, results.json and fleet.svg from
    /// saved results.json files (several: their runs together, dated and
    /// described by the first).
    #[arg(long, value_delimiter = ',')]
    render: Vec<PathBuf>,
    /// (internal) Run one scenario, `fleet:N` or `big:M`, and write its
    /// result as JSON to --result.
    #[arg(long, hide = true)]
    child: Option<String>,
    #[arg(long, hide = true)]
    result: Option<PathBuf>,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| p4fleet_e2e::repo_root().join("docs/fleet"));
    if !args.render.is_empty() {
        let mut merged: Option<Report> = None;
        for json in &args.render {
            let r: Report = serde_json::from_str(&std::fs::read_to_string(json)?)
                .with_context(|| format!("{}", json.display()))?;
            match &mut merged {
                None => merged = Some(r),
                Some(m) => {
                    m.runs.extend(r.runs);
                    m.load_after = r.load_after;
                }
            }
        }
        let report = merged.expect("at least one file");
        write_docs(&report, &out)?;
        std::fs::write(
            out.join("results.json"),
            serde_json::to_string_pretty(&report)? + "\n",
        )?;
        return Ok(());
    }
    if let Some(child) = &args.child {
        return run_child(&args, child);
    }
    let load_before = loadavg();
    let mut runs = Vec::new();
    let mut scenarios: Vec<String> = args
        .switches
        .iter()
        .filter(|n| **n > 0)
        .map(|n| format!("fleet:{n}"))
        .collect();
    scenarios.extend(
        args.shared_switches
            .iter()
            .filter(|n| **n > 0)
            .map(|n| format!("shared:{n}")),
    );
    if args.big_entries > 0 {
        scenarios.push(format!("big:{}", args.big_entries));
    }
    for s in &scenarios {
        eprintln!("p4fleet-fleet-bench: {s}");
        let run = spawn_child(s).with_context(|| format!("scenario {s}"))?;
        eprintln!("{}", one_line(&run));
        runs.push(run);
    }
    let report = Report {
        date: chrono::Utc::now().format("%Y-%m-%d %H:%M UTC").to_string(),
        commit: commit(),
        command: args.command.clone(),
        machine: Machine::probe(),
        load_before,
        load_after: loadavg(),
        runs,
    };
    println!("{}", report.markdown());
    if !args.no_docs {
        write_docs(&report, &out)?;
        std::fs::write(
            out.join("results.json"),
            serde_json::to_string_pretty(&report)? + "\n",
        )?;
        eprintln!("wrote {}", out.display());
    }
    Ok(())
}

fn write_docs(report: &Report, out: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(out)?;
    std::fs::write(out.join("results.md"), report.markdown())?;
    std::fs::write(out.join("results.csv"), report.csv())?;
    std::fs::write(out.join("fleet.svg"), report.svg())?;
    Ok(())
}

/// Re-runs this binary with the same flags plus `--child SCENARIO`.
fn spawn_child(scenario: &str) -> anyhow::Result<Run> {
    let dir = tempfile::tempdir()?;
    let result = dir.path().join("run.json");
    let exe = std::env::current_exe()?;
    let status = Command::new(exe)
        .args(std::env::args_os().skip(1))
        .args(["--child", scenario, "--result"])
        .arg(&result)
        .status()?;
    if !status.success() {
        bail!("child exited with {status}");
    }
    Ok(serde_json::from_str(&std::fs::read_to_string(&result)?)?)
}

fn run_child(args: &Args, child: &str) -> anyhow::Result<()> {
    let mut layout = args.sets;
    let scenario = match child.split_once(':') {
        Some(("fleet", n)) => Scenario::Fleet {
            switches: n.parse()?,
        },
        Some(("shared", n)) => {
            layout = SetLayout::Shared;
            Scenario::Fleet {
                switches: n.parse()?,
            }
        }
        Some(("big", n)) => Scenario::Big {
            entries: n.parse()?,
            per_map: args
                .per_map
                .unwrap_or(if args.big_plain { 25_000 } else { 100_000 }),
            gzip: !args.big_plain,
        },
        _ => bail!("--child {child}: want fleet:N, shared:N or big:M"),
    };
    let switches = match scenario {
        Scenario::Fleet { switches } => switches,
        Scenario::Big { .. } => 1,
    };
    let bin = p4fleet_bench::bin_dir(args.bin.clone())?;
    let work = tempfile::tempdir()?;
    let cfg = Config {
        scenario,
        entries: args.entries,
        change_every: (100.0 / args.change_percent).round().max(1.0) as usize,
        devices_per_emulator: if args.devices_per_emulator == 0 {
            switches.div_ceil(2).max(1)
        } else {
            args.devices_per_emulator
        },
        apply: args.apply,
        layout,
        resync_seconds: args.resync_seconds,
        drift_seconds: args.drift_seconds,
        operator_log_level: args.operator_log_level.clone(),
        timeout: Duration::from_secs(args.timeout_seconds),
        bin,
        work: work.path().to_path_buf(),
    };
    let run = fleet::on_control_plane(|cp| fleet::run(cp, &cfg))?;
    let path = args.result.clone().context("--result")?;
    std::fs::write(path, serde_json::to_string(&run)?)?;
    Ok(())
}

fn one_line(r: &Run) -> String {
    let phases: Vec<String> = r
        .phases
        .iter()
        .map(|p| {
            format!(
                "{} {:.2}s ({} written, {} API requests, {} status writes, {:.2} CPU-s, {} device RPCs: {:?})",
                p.name,
                p.seconds,
                p.device.written(),
                p.api_requests,
                p.status_writes,
                p.operator_cpu_seconds,
                p.rpcs.values().sum::<u64>(),
                p.rpcs
            )
        })
        .collect();
    let err = r
        .error
        .as_ref()
        .map(|e| format!("; stopped: {e}"))
        .unwrap_or_default();
    format!("  {}{err}", phases.join("; "))
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

fn commit() -> String {
    let git = |args: &[&str]| {
        Command::new("git")
            .args(args)
            .current_dir(p4fleet_e2e::repo_root())
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_default()
    };
    let head = git(&["rev-parse", "--short", "HEAD"]);
    let dirty = !git(&["status", "--porcelain", "--untracked-files=no"]).is_empty();
    if dirty {
        format!("{head} (with local changes)")
    } else {
        head
    }
}
