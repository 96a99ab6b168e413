//! Command line: `p4fleet operator | crds | version`.

use std::net::SocketAddr;

use clap::{Args, Parser, Subcommand};

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
    /// Print the CustomResourceDefinitions of all p4fleet resources as YAML
    /// (what charts/p4fleet/crds and config/crd hold).
    Crds,
    /// Print the version.
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
    #[arg(long)]
    pub leader_election: bool,
    /// Leader election: seconds a Lease stays valid without renewal.
    #[arg(long, default_value_t = 15, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub lease_duration_seconds: u64,
    /// Leader election: the leader stops its controllers when it could not
    /// renew for this long (must be below the lease duration).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub renew_deadline_seconds: u64,
    /// Leader election: seconds between renewals (and candidate retries).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub retry_period_seconds: u64,
    /// Seconds between full resyncs: every TableEntrySet reads its tables
    /// back and repairs what differs.
    #[arg(long, default_value_t = 60, env = "P4FLEET_RESYNC_SECONDS",
        value_parser = clap::value_parser!(u64).range(1..=86400))]
    pub resync_seconds: u64,
    /// Seconds between cheap drift checks: Switch probes and pipeline
    /// cookies (a lost or restarted device is noticed at once anyway, by
    /// its broken stream).
    #[arg(long, default_value_t = 10, env = "P4FLEET_DRIFT_SECONDS",
        value_parser = clap::value_parser!(u64).range(1..=86400))]
    pub drift_seconds: u64,
    /// Watch namespaced resources only in this namespace (Switches are cluster-scoped).
    #[arg(long)]
    pub watch_namespace: Option<String>,
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
        assert_eq!(a.watch_namespace.as_deref(), Some("team-a"));
        assert!(Cli::try_parse_from(["p4fleet", "operator", "--resync-seconds=0"]).is_err());
    }
}
