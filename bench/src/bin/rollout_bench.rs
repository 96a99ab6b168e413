//! `p4fleet-rollout-bench` (`make bench-rollout`): a Canary rollout over a
//! fleet of emulated Switches, then a failed gate rolled back
//! (p4fleet_bench::fleet::rollout; docs/rollouts.md, "Benchmark"). Prints
//! the results as Markdown with the machine, date and command.

use std::time::Duration;

use clap::Parser;
use p4fleet_bench::fleet::{self, ApplyMode, Config, Scenario, SetLayout};
use p4fleet_bench::machine::Machine;

#[derive(Parser, Debug)]
#[command(
    name = "p4fleet-rollout-bench",
    about = "A Canary rollout over a fleet, then a failed gate rolled back"
)]
struct Args {
    /// Switches in the fleet (one VirtualSwitch each).
    #[arg(long, default_value_t = 1000)]
    switches: usize,
    /// Entries per Switch (one shared selector TableEntrySet).
    #[arg(long, default_value_t = 100)]
    entries: usize,
    /// Percent of the fleet per step (steps of it up to 100 %).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=100))]
    step_percent: u32,
    /// The health gate's analysis window, in seconds.
    #[arg(long, default_value_t = 10)]
    analysis_seconds: u32,
    /// Devices per emulator process (0: half the fleet each).
    #[arg(long, default_value_t = 0)]
    devices_per_emulator: usize,
    /// Seconds each phase may take.
    #[arg(long, default_value_t = 900)]
    timeout_seconds: u64,
    /// The operator's `--log-level`.
    #[arg(long, default_value = "info")]
    operator_log_level: String,
    /// The command line shown with the results.
    #[arg(long, default_value = "make bench-rollout")]
    command: String,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let bin = p4fleet_bench::bin_dir(None)?;
    let work = tempfile::tempdir()?;
    let cfg = Config {
        scenario: Scenario::Fleet {
            switches: args.switches,
        },
        entries: args.entries,
        change_every: 100,
        devices_per_emulator: match args.devices_per_emulator {
            0 => args.switches.div_ceil(2).max(1),
            n => n,
        },
        apply: ApplyMode::Api,
        layout: SetLayout::Shared,
        resync_seconds: 60,
        drift_seconds: 10,
        operator_log_level: args.operator_log_level.clone(),
        timeout: Duration::from_secs(args.timeout_seconds),
        bin,
        work: work.path().to_path_buf(),
    };
    let report = fleet::on_control_plane(|cp| {
        fleet::rollout::run(
            cp,
            &cfg,
            args.switches,
            args.step_percent,
            args.analysis_seconds,
        )
    })?;
    let m = Machine::probe();
    println!(
        "Machine: {} × {}, {}, Linux {}; {} UTC; `{}`.\n",
        m.nproc,
        m.cpu,
        m.memory,
        m.kernel,
        chrono::Utc::now().format("%Y-%m-%d %H:%M"),
        args.command
    );
    print!("{}", report.markdown());
    Ok(())
}
