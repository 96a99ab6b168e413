//! Command line: `p4fleet operator | entries | rollout | crds | version`.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::telemetry::LogFormat;

/// p4fleet runs fleets of programmable P4 switches from Kubernetes resources.
#[derive(Debug, Parser)]
#[command(name = "p4fleet", version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the operator: watch Switches, P4Programs, VirtualSwitches,
    /// TableEntrySets and AsyncExternPolicies, push pipelines and entries to
    /// the devices, write status; serve /metrics, /livez and /readyz.
    Operator(OperatorArgs),
    /// Work with table entries offline (CI in a GitOps repository) or read
    /// them back from a device: validate, fmt, convert, export.
    #[command(subcommand)]
    Entries(EntriesCommand),
    /// Follow and steer a P4Program's rollout (docs/rollouts.md, "From the
    /// command line"): status, pause, resume, undo. Talks to the cluster of
    /// $KUBECONFIG (or ~/.kube/config, or in-cluster), as kubectl does.
    #[command(subcommand)]
    Rollout(RolloutCommand),
    /// Show what applying a manifest would do, without applying it: each
    /// object checked by the API server (server-side apply, dry run), each
    /// TableEntrySet's updates per Switch against a read-back of its
    /// devices, each P4Program's reload per VirtualSwitch (docs/plans.md).
    /// Exit codes: 0 planned, 1 something refused or invalid, 2 an error.
    Plan(PlanArgs),
    /// Print the CustomResourceDefinitions of all p4fleet resources as YAML
    /// (what charts/p4fleet/crds and config/crd hold).
    Crds,
    /// Print the version, the commit it was built from and the build date.
    Version,
}

#[derive(Debug, Args)]
pub struct OperatorArgs {
    /// Address of the HTTP server for /metrics, /livez and /readyz.
    #[arg(long, default_value = "0.0.0.0:8080", env = "P4FLEET_LISTEN_ADDR")]
    pub listen_addr: SocketAddr,
    /// Log format on stderr.
    #[arg(long, value_enum, default_value = "text", env = "P4FLEET_LOG_FORMAT")]
    pub log_format: LogFormat,
    /// Log filter, e.g. `info` or `info,p4fleet=debug`.
    #[arg(long, default_value = "info", env = "P4FLEET_LOG_LEVEL")]
    pub log_level: String,
    /// Run the controllers only while holding the Lease `p4fleet-leader` in
    /// $POD_NAMESPACE (identity $POD_NAME), so several replicas can run.
    #[arg(long, env = "P4FLEET_LEADER_ELECTION")]
    pub leader_election: bool,
    /// Leader election: seconds a Lease stays valid without renewal.
    #[arg(
        long,
        default_value_t = 15,
        env = "P4FLEET_LEASE_DURATION_SECONDS",
        value_parser = clap::value_parser!(u64).range(1..=3600)
    )]
    pub lease_duration_seconds: u64,
    /// Leader election: the leader stops its controllers when it could not
    /// renew for this long (must be below the lease duration).
    #[arg(
        long,
        default_value_t = 10,
        env = "P4FLEET_RENEW_DEADLINE_SECONDS",
        value_parser = clap::value_parser!(u64).range(1..=3600)
    )]
    pub renew_deadline_seconds: u64,
    /// Leader election: seconds between renewals (and candidate retries).
    #[arg(
        long,
        default_value_t = 2,
        env = "P4FLEET_RETRY_PERIOD_SECONDS",
        value_parser = clap::value_parser!(u64).range(1..=3600)
    )]
    pub retry_period_seconds: u64,
    /// Seconds between full resyncs: every TableEntrySet reads its tables
    /// back and repairs what differs.
    #[arg(
        long,
        default_value_t = 60,
        env = "P4FLEET_RESYNC_SECONDS",
        value_parser = clap::value_parser!(u64).range(1..=86400)
    )]
    pub resync_seconds: u64,
    /// One resync in this many of a TableEntrySet whose last sync found
    /// its entries in place (and that keeps only entries) is a full sync;
    /// the others read its tables back and compare, and reconcile it at
    /// once if anything differs (docs/reliability.md). 1: every resync is
    /// a full sync.
    #[arg(
        long,
        default_value_t = 10,
        env = "P4FLEET_FULL_RESYNC_EVERY",
        value_parser = clap::value_parser!(u32).range(1..=1000)
    )]
    pub full_resync_every: u32,
    /// Seconds between cheap drift checks: Switch probes and pipeline
    /// cookies (a lost or restarted device is noticed at once anyway, by
    /// its broken stream).
    #[arg(long, default_value_t = 10, env = "P4FLEET_DRIFT_SECONDS",
        value_parser = clap::value_parser!(u64).range(1..=86400))]
    pub drift_seconds: u64,
    /// Seconds between reads of an applied AsyncExternPolicy's data plane
    /// stats (packets/s, async ops/s, drops in status); each read also
    /// checks the policy is still in force.
    #[arg(long, default_value_t = 5, env = "P4FLEET_EXTERN_STATS_SECONDS",
        value_parser = clap::value_parser!(u64).range(1..=86400))]
    pub extern_stats_seconds: u64,
    /// Watch namespaced resources only in this namespace (Switches are cluster-scoped).
    #[arg(long, env = "P4FLEET_WATCH_NAMESPACE")]
    pub watch_namespace: Option<String>,
    #[command(flatten)]
    pub concurrency: ConcurrencyArgs,
    #[command(flatten)]
    pub artifacts: ArtifactArgs,
}

/// Downloads of P4Program `url` artifact sources (docs/artifacts.md).
#[derive(Debug, Args)]
pub struct ArtifactArgs {
    /// Largest artifact downloaded, in bytes; a larger one is refused
    /// (condition ArtifactTooLarge) before or while it is read.
    #[arg(long, default_value_t = 256 << 20, env = "P4FLEET_ARTIFACT_MAX_BYTES",
        value_parser = clap::value_parser!(u64).range(1..))]
    pub artifact_max_bytes: u64,
    /// Seconds one download may take, redirects included.
    #[arg(long, default_value_t = 120, env = "P4FLEET_ARTIFACT_FETCH_TIMEOUT_SECONDS",
        value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub artifact_fetch_timeout_seconds: u64,
    /// Downloaded artifacts kept in memory by digest, in bytes (0: none;
    /// every resolve downloads again).
    #[arg(long, default_value_t = 512 << 20, env = "P4FLEET_ARTIFACT_CACHE_BYTES")]
    pub artifact_cache_bytes: u64,
}

impl ArtifactArgs {
    pub fn limits(&self) -> crate::artifacts::fetch::FetchLimits {
        crate::artifacts::fetch::FetchLimits {
            max_bytes: self.artifact_max_bytes,
            timeout: std::time::Duration::from_secs(self.artifact_fetch_timeout_seconds),
            cache_bytes: self.artifact_cache_bytes,
        }
    }
}

/// How much the operator does at once (docs/resources.md, "Operator").
/// Reconciles: 0 means unbounded; one object never reconciles twice at once.
#[derive(Debug, Args)]
pub struct ConcurrencyArgs {
    /// Switch reconciles at once (each probes its device).
    #[arg(long, default_value_t = 32, env = "P4FLEET_SWITCH_CONCURRENCY")]
    pub switch_concurrency: u16,
    /// P4Program reconciles at once (each parses its P4Info).
    #[arg(long, default_value_t = 8, env = "P4FLEET_PROGRAM_CONCURRENCY")]
    pub program_concurrency: u16,
    /// VirtualSwitch reconciles at once (each may push a pipeline).
    #[arg(long, default_value_t = 16, env = "P4FLEET_VIRTUAL_SWITCH_CONCURRENCY")]
    pub virtual_switch_concurrency: u16,
    /// TableEntrySet reconciles at once (each syncs its targets).
    #[arg(long, default_value_t = 16, env = "P4FLEET_ENTRY_SET_CONCURRENCY")]
    pub entry_set_concurrency: u16,
    /// AsyncExternPolicy reconciles at once.
    #[arg(long, default_value_t = 8, env = "P4FLEET_EXTERN_POLICY_CONCURRENCY")]
    pub extern_policy_concurrency: u16,
    /// Targets of one selector TableEntrySet synced in parallel.
    #[arg(long, default_value_t = 32, env = "P4FLEET_SET_TARGET_CONCURRENCY",
        value_parser = clap::value_parser!(u64).range(1..=4096))]
    pub set_target_concurrency: u64,
    /// Entry syncs (read-back or write) in flight per device, over all
    /// sets; a slow device holds only its own.
    #[arg(long, default_value_t = 2, env = "P4FLEET_DEVICE_SYNC_CONCURRENCY",
        value_parser = clap::value_parser!(u64).range(1..=1024))]
    pub device_sync_concurrency: u64,
    /// Threads of the async runtime (default: one per CPU the process may
    /// use). Parses of large entry sources run on separate blocking
    /// threads either way. One thread took 17 % less CPU per idle resync
    /// round at 1,000 Switches and wrote a 1,000,000-entry set 7 % slower
    /// on a 2-CPU machine (docs/performance.md).
    #[arg(long, env = "P4FLEET_WORKER_THREADS",
        value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub worker_threads: Option<u16>,
}

impl ConcurrencyArgs {
    pub fn limits(&self) -> crate::limits::Limits {
        crate::limits::Limits {
            switch: self.switch_concurrency,
            program: self.program_concurrency,
            virtual_switch: self.virtual_switch_concurrency,
            entry_set: self.entry_set_concurrency,
            extern_policy: self.extern_policy_concurrency,
            targets_per_set: self.set_target_concurrency as usize,
            syncs_per_device: self.device_sync_concurrency as usize,
        }
    }
}

/// Runs `fut` on a runtime of the calling thread: the command line tools
/// do one thing at a time.
pub fn block_on<F: std::future::Future>(fut: F) -> std::io::Result<F::Output> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    Ok(rt.block_on(fut))
}

/// What `p4fleet version` prints: version, commit and build date (set by
/// build.rs).
pub fn version_text() -> String {
    format!(
        "p4fleet {}\ncommit: {}\nbuilt: {}\n",
        env!("CARGO_PKG_VERSION"),
        env!("P4FLEET_COMMIT"),
        env!("P4FLEET_BUILD_DATE")
    )
}

/// `p4fleet entries ...` (docs/entries.md, "Tools").
#[derive(Debug, Subcommand)]
pub enum EntriesCommand {
    /// Check line-format files against a P4Info with the operator's parser;
    /// prints `FILE:LINE: reason` per error, exits 1 if any.
    Validate(EntriesFiles),
    /// Rewrite line-format files in canonical form (comments are not
    /// kept); with --check, only list files that would change (exit 1).
    Fmt {
        #[command(flatten)]
        files: EntriesFiles,
        /// Change nothing; exit 1 if a file is not in canonical form.
        #[arg(long)]
        check: bool,
        #[arg(long, value_enum, default_value = "compact")]
        style: TextStyle,
    },
    /// Convert simple_switch_CLI scripts or P4 tutorials runtime.json files
    /// to the line format on stdout, one `#! table` section per table.
    Convert {
        /// The program's P4Info (protobuf text format).
        #[arg(long)]
        p4info: PathBuf,
        /// The input format.
        #[arg(long, value_enum)]
        from: ConvertFrom,
        /// Print only this table's section (what one ConfigMap key holds).
        #[arg(long)]
        table: Option<String>,
        #[arg(long, value_enum, default_value = "compact")]
        style: TextStyle,
        /// Clear LPM host bits and ternary bits outside the mask instead of
        /// failing (a TableEntrySet's `spec.maskHostBits`).
        #[arg(long)]
        mask_host_bits: bool,
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
    /// Read one table of a live P4Runtime or BFRT device and print it in
    /// the line format (sorted, so two exports diff cleanly).
    Export {
        /// The program's P4Info (protobuf text format).
        #[arg(long)]
        p4info: PathBuf,
        /// Table name (full, alias or unique dotted suffix).
        #[arg(long)]
        table: String,
        /// The device's protocol: P4Runtime (bmv2, DPDK, Stratum) or BFRT (Tofino).
        #[arg(long, value_enum, default_value = "p4runtime")]
        protocol: ExportProtocol,
        /// BFRT: the program to read (default: the only one the device runs).
        #[arg(long)]
        program: Option<String>,
        /// BFRT: this reader's client id. BFRT tells clients apart by it; the
        /// default is above every id the operator uses (1..=65535).
        #[arg(long, default_value_t = 65536)]
        client_id: u32,
        /// The device's P4Runtime (or BFRT) address, `host:port`.
        #[arg(long)]
        address: String,
        /// Device id.
        #[arg(long, default_value_t = 1)]
        device_id: u64,
        /// Give up after this many seconds.
        #[arg(long, default_value_t = 10)]
        timeout_seconds: u64,
        #[arg(long, value_enum, default_value = "compact")]
        style: TextStyle,
    },
}

/// `p4fleet rollout ...` (docs/rollouts.md, "From the command line"), of
/// a P4Program or a selector TableEntrySet.
/// Exit codes: 0 done, 1 the watched rollout rolled back, 2 an error
/// (no such object, the API refused, a timeout).
#[derive(Debug, Subcommand)]
pub enum RolloutCommand {
    /// Print the rollout: phase, revisions, step, counts, moved
    /// VirtualSwitches (a set's: targets), failure.
    Status {
        #[command(flatten)]
        object: RolloutArgs,
        /// Follow until the rollout completes (exit 0), rolls back (exit 1)
        /// or pauses (exit 0).
        #[arg(short, long)]
        watch: bool,
        /// With --watch: give up (exit 2) after this long, a Go duration
        /// such as 90s or 10m.
        #[arg(long, default_value = "10m", value_parser = go_duration)]
        timeout: std::time::Duration,
    },
    /// Set spec.rollout.paused: nothing more moves, nothing rolls back.
    Pause(RolloutArgs),
    /// Clear spec.rollout.paused, and pass the indefinite pause step the
    /// rollout waits at, if any (the annotation p4fleet.dev/rollout-resume).
    Resume(RolloutArgs),
    /// Try the rolled-back revision once more, from the first step (the
    /// annotation p4fleet.dev/rollout-retry, naming this rollback).
    Retry(RolloutArgs),
    /// List the kept revisions, oldest first, with what the status says of
    /// each (current, update, pinned, the rollout's from and to).
    History(RolloutArgs),
    /// Pin the revision before (spec.rollout.pinRevision): where the
    /// rollout in progress started, else the revision the fleet ran, else
    /// the highest kept revision below the one in force.
    Undo {
        #[command(flatten)]
        object: RolloutArgs,
        /// Pin this revision instead (one of the kept revisions).
        #[arg(long, value_parser = clap::value_parser!(i64).range(1..))]
        to_revision: Option<i64>,
    },
}

/// `p4fleet plan`'s input.
#[derive(Debug, Args)]
pub struct PlanArgs {
    /// The manifest: YAML documents (or a `List`) as `kubectl apply -f`
    /// takes them.
    #[arg(short = 'f', long)]
    pub filename: PathBuf,
    /// Namespace of the objects that name none (default: the kubeconfig
    /// context's).
    #[arg(short, long)]
    pub namespace: Option<String>,
}

/// The object a `rollout` command acts on.
#[derive(Debug, Args)]
pub struct RolloutArgs {
    /// NAME (a P4Program) or TYPE/NAME: p4p/NAME, or tes/NAME for a
    /// selector TableEntrySet.
    #[arg(value_name = "[TYPE/]NAME", value_parser = crate::rollout_cli::parse_object)]
    pub object: crate::rollout_cli::Object,
    /// Its namespace (default: the kubeconfig context's).
    #[arg(short, long)]
    pub namespace: Option<String>,
}

/// A Go duration (`30s`, `10m`, `1h30m`), read as the rollout steps are.
fn go_duration(s: &str) -> Result<std::time::Duration, String> {
    crate::fleet::rollout::parse_duration(s)
        .ok_or_else(|| format!("{s:?} is not a duration such as 90s, 10m or 1h30m"))
}

/// The P4Info, table and files of `validate` and `fmt`.
#[derive(Debug, Args)]
pub struct EntriesFiles {
    /// The program's P4Info (protobuf text format).
    #[arg(long)]
    pub p4info: PathBuf,
    /// Table of every file; without it each file's `#! table` header names it.
    #[arg(long)]
    pub table: Option<String>,
    /// Clear LPM host bits and ternary bits outside the mask instead of
    /// reporting them (a TableEntrySet's `spec.maskHostBits`).
    #[arg(long)]
    pub mask_host_bits: bool,
    /// Line-format files.
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
}

/// Protocols `p4fleet entries export` reads over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ExportProtocol {
    P4runtime,
    Bfrt,
}

/// Input formats of `p4fleet entries convert`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ConvertFrom {
    /// simple_switch_CLI / runtime_CLI scripts (`table_add ...`).
    SimpleSwitchCli,
    /// The P4 tutorials' runtime.json (`table_entries`).
    RuntimeJson,
}

/// How entries are written (docs/entries.md, "The line format").
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum TextStyle {
    /// `#! fields` / `#! action` headers and positional lines.
    Compact,
    /// `field=value ... => action param=value` lines.
    Named,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn chart_flags_parse() {
        let cli = Cli::try_parse_from([
            "p4fleet",
            "operator",
            "--listen-addr=0.0.0.0:8080",
            "--log-format=json",
            "--log-level=info",
            "--resync-seconds=60",
            "--drift-seconds=5",
            "--extern-stats-seconds=2",
            "--full-resync-every=1",
            "--leader-election",
            "--watch-namespace=team-a",
        ])
        .unwrap();
        let Command::Operator(a) = cli.command else {
            panic!("operator subcommand")
        };
        assert_eq!(a.log_format, LogFormat::Json);
        assert!(a.leader_election);
        assert_eq!((a.resync_seconds, a.drift_seconds), (60, 5));
        assert_eq!(a.extern_stats_seconds, 2);
        assert_eq!(a.full_resync_every, 1);
        assert!(Cli::try_parse_from(["p4fleet", "operator", "--full-resync-every=0"]).is_err());
        assert!(Cli::try_parse_from(["p4fleet", "operator", "--extern-stats-seconds=0"]).is_err());
        assert_eq!(a.watch_namespace.as_deref(), Some("team-a"));
        assert!(Cli::try_parse_from(["p4fleet", "operator", "--resync-seconds=0"]).is_err());
    }

    #[test]
    fn concurrency_defaults_are_the_limits_defaults() {
        let cli = Cli::try_parse_from(["p4fleet", "operator"]).unwrap();
        let Command::Operator(a) = cli.command else {
            panic!("operator subcommand")
        };
        assert_eq!(a.concurrency.limits(), crate::limits::Limits::default());
        let cli = Cli::try_parse_from(["p4fleet", "operator", "--entry-set-concurrency=3"]);
        let Command::Operator(a) = cli.unwrap().command else {
            panic!("operator subcommand")
        };
        assert_eq!(a.concurrency.limits().entry_set, 3);
        assert!(
            Cli::try_parse_from(["p4fleet", "operator", "--device-sync-concurrency=0"]).is_err()
        );
        assert_eq!(a.concurrency.worker_threads, None);
        let cli = Cli::try_parse_from(["p4fleet", "operator", "--worker-threads=1"]);
        let Command::Operator(a) = cli.unwrap().command else {
            panic!("operator subcommand")
        };
        assert_eq!(a.concurrency.worker_threads, Some(1));
        assert!(Cli::try_parse_from(["p4fleet", "operator", "--worker-threads=0"]).is_err());
    }

    #[test]
    fn every_operator_flag_has_an_env_variable() {
        let cmd = Cli::command();
        let op = cmd.find_subcommand("operator").unwrap();
        for arg in op.get_arguments() {
            if matches!(arg.get_id().as_str(), "help" | "version") {
                continue;
            }
            let want = format!(
                "P4FLEET_{}",
                arg.get_id().as_str().to_uppercase().replace('-', "_")
            );
            assert_eq!(
                arg.get_env().and_then(|e| e.to_str()),
                Some(want.as_str()),
                "--{}",
                arg.get_id()
            );
        }
    }

    #[test]
    fn rollout_commands_parse() {
        let cli = Cli::try_parse_from(["p4fleet", "rollout", "status", "fw", "-n", "team-a", "-w"]);
        let Command::Rollout(RolloutCommand::Status {
            object,
            watch,
            timeout,
        }) = cli.unwrap().command
        else {
            panic!("rollout status")
        };
        assert_eq!(
            (&object.object, object.namespace.as_deref()),
            (
                &crate::rollout_cli::parse_object("fw").unwrap(),
                Some("team-a")
            )
        );
        assert_eq!(object.object.kind, crate::rollout_cli::Kind::Program);
        let cli = Cli::try_parse_from(["p4fleet", "rollout", "pause", "tes/routes"]);
        let Command::Rollout(RolloutCommand::Pause(args)) = cli.unwrap().command else {
            panic!("rollout pause")
        };
        assert_eq!(
            (args.object.kind, args.object.name.as_str()),
            (crate::rollout_cli::Kind::EntrySet, "routes")
        );
        assert!(Cli::try_parse_from(["p4fleet", "rollout", "pause", "deploy/web"]).is_err());
        let cli = Cli::try_parse_from(["p4fleet", "rollout", "history", "tes/routes", "-n", "a"]);
        assert!(matches!(
            cli.unwrap().command,
            Command::Rollout(RolloutCommand::History(_))
        ));
        assert!(watch);
        assert_eq!(timeout, std::time::Duration::from_secs(600));
        let cli = Cli::try_parse_from(["p4fleet", "rollout", "status", "fw", "--timeout=1m30s"]);
        let Command::Rollout(RolloutCommand::Status { timeout, watch, .. }) = cli.unwrap().command
        else {
            panic!("rollout status")
        };
        assert_eq!((timeout.as_secs(), watch), (90, false));
        assert!(
            Cli::try_parse_from(["p4fleet", "rollout", "status", "fw", "--timeout=soon"]).is_err()
        );
        let cli = Cli::try_parse_from(["p4fleet", "rollout", "undo", "fw", "--to-revision=3"]);
        let Command::Rollout(RolloutCommand::Undo { to_revision, .. }) = cli.unwrap().command
        else {
            panic!("rollout undo")
        };
        assert_eq!(to_revision, Some(3));
        assert!(
            Cli::try_parse_from(["p4fleet", "rollout", "undo", "fw", "--to-revision=0"]).is_err()
        );
        assert!(Cli::try_parse_from(["p4fleet", "rollout", "pause"]).is_err());
    }

    #[test]
    fn version_names_commit_and_date() {
        let v = version_text();
        assert!(v.starts_with(&format!("p4fleet {}\n", env!("CARGO_PKG_VERSION"))));
        let commit = v.lines().nth(1).unwrap().strip_prefix("commit: ").unwrap();
        assert!(!commit.is_empty());
        let date = v.lines().nth(2).unwrap().strip_prefix("built: ").unwrap();
        // 2026-11-22T21:00:00Z
        assert_eq!(date.len(), 20, "{date}");
        assert_eq!(&date[4..5], "-");
        assert!(date.ends_with('Z'));
    }
}
