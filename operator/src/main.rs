//! `p4fleet` binary: thin wiring over the library.

use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use p4fleet::cli::{Cli, Command, OperatorArgs};
use p4fleet::{
    Context, DevicePool, Elector, LeaderConfig, Metrics, OperatorConfig, Shutdown, run_controllers,
    shutdown_on,
};
use p4fleet::{entries_cli, plan_cli, rollout_cli};

#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc's options, set before the first allocation: an ELF
/// constructor (as the `ctor` crate makes one) runs before the Rust
/// runtime allocates, and mimalloc keeps an option set before its own
/// start-up. Arenas are committed as they are used, not eagerly: the
/// operator's peak RSS with one 1,000,000-entry set was 405 to 416 MiB
/// with eager commit and 350 to 360 without (docs/dev/fleet-lab-notes.md), with the
/// same live heap.
/// (`.init_array` is ELF's: Linux, where the operator runs.)
#[cfg(target_os = "linux")]
#[used]
#[unsafe(link_section = ".init_array")]
static MIMALLOC_OPTIONS: extern "C" fn() = mimalloc_options;

#[cfg(target_os = "linux")]
extern "C" fn mimalloc_options() {
    /// `mi_option_arena_eager_commit` in mimalloc.h's `mi_option_e`.
    const ARENA_EAGER_COMMIT: libmimalloc_sys::mi_option_t = 4;
    // SAFETY: mi_option_set stores an option's value and may be called at
    // any time; called this early, it is in place before mimalloc's first
    // arena is reserved.
    unsafe { libmimalloc_sys::mi_option_set(ARENA_EAGER_COMMIT, 0) }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Crds => {
            print!("{}", p4fleet_crds::all_yaml());
            ExitCode::SUCCESS
        }
        Command::Entries(cmd) => tool(|out, diag| {
            entries_cli::run(cmd, out, diag).map(|o| o == entries_cli::Outcome::Clean)
        }),
        Command::Rollout(cmd) => tool(|out, diag| {
            rollout_cli::run(cmd, out, diag).map(|o| o == rollout_cli::Outcome::Done)
        }),
        Command::Plan(args) => {
            tool(|out, diag| plan_cli::run(args, out, diag).map(|o| o == plan_cli::Outcome::Clean))
        }
        Command::Version => {
            print!("{}", p4fleet::cli::version_text());
            ExitCode::SUCCESS
        }
        Command::Operator(args) => {
            let mut rt = tokio::runtime::Builder::new_multi_thread();
            rt.enable_all();
            if let Some(n) = args.concurrency.worker_threads {
                rt.worker_threads(n.into());
            }
            let rt = match rt.build() {
                Ok(rt) => rt,
                Err(e) => {
                    eprintln!("p4fleet: tokio runtime: {e}");
                    return ExitCode::FAILURE;
                }
            };
            match rt.block_on(operator(args)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    tracing::error!(error = %format!("{e:#}"), "operator failed");
                    eprintln!("p4fleet: {e:#}");
                    ExitCode::FAILURE
                }
            }
        }
    }
}

/// Runs a command line tool on stdout and stderr. Its exit code: 0 when
/// it ended `Ok(true)` (clean, done), 1 on `Ok(false)` (findings, a
/// refusal, a rollback: each said on the way), 2 on an error, said on
/// stderr.
fn tool<E: std::fmt::Display>(
    run: impl FnOnce(&mut dyn Write, &mut dyn Write) -> Result<bool, E>,
) -> ExitCode {
    let (mut out, mut diag) = (std::io::stdout().lock(), std::io::stderr().lock());
    match run(&mut out, &mut diag) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            let _ = writeln!(diag, "p4fleet: {e}");
            ExitCode::from(2)
        }
    }
}

/// Resolves on SIGTERM or ctrl-c.
async fn signal() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {},
        _ = term => {},
    }
    tracing::info!("shutdown requested");
}

async fn operator(args: OperatorArgs) -> anyhow::Result<()> {
    // One crypto provider for every TLS client (kube, gRPC) in the process.
    let _ = rustls::crypto::ring::default_provider().install_default();
    p4fleet::init_telemetry(args.log_format, &args.log_level);

    let shutdown: Shutdown = shutdown_on(signal());
    let client = kube::Client::try_default().await?;
    let config = OperatorConfig {
        resync: Duration::from_secs(args.resync_seconds),
        drift: Duration::from_secs(args.drift_seconds),
        extern_stats: Duration::from_secs(args.extern_stats_seconds),
        full_resync_every: args.full_resync_every,
        reporter: "p4fleet".into(),
        instance: std::env::var("POD_NAME").ok(),
        watch_namespace: args.watch_namespace.clone(),
        limits: args.concurrency.limits(),
        artifacts: args.artifacts.limits(),
    };
    let metrics = Arc::new(Metrics::new());
    let ctx = Context::new(client.clone(), config, metrics.clone(), DevicePool::new());
    let router = p4fleet::router(metrics.clone(), ctx.readiness.clone());
    let http = p4fleet::serve(args.listen_addr, router, shutdown.clone()).await?;
    tracing::info!(
        version = env!("CARGO_PKG_VERSION"),
        commit = env!("P4FLEET_COMMIT"),
        "p4fleet operator starting"
    );

    let elector = if args.leader_election {
        let namespace = std::env::var("POD_NAMESPACE")
            .map_err(|_| anyhow::anyhow!("--leader-election needs $POD_NAMESPACE"))?;
        let identity = std::env::var("POD_NAME").unwrap_or_else(|_| {
            format!(
                "{}-{}",
                std::env::var("HOSTNAME").unwrap_or_else(|_| "p4fleet".into()),
                std::process::id()
            )
        });
        let cfg = LeaderConfig {
            lease_duration: Duration::from_secs(args.lease_duration_seconds),
            renew_deadline: Duration::from_secs(args.renew_deadline_seconds),
            retry_period: Duration::from_secs(args.retry_period_seconds),
            ..LeaderConfig::new(namespace, identity)
        };
        let elector = Elector::new(client.clone(), cfg)?;
        ctx.readiness.set_standby(true);
        let term = tokio::select! {
            term = elector.acquire() => term,
            _ = shutdown.clone() => {
                let _ = http.await;
                return Ok(());
            }
        };
        // Before any controller connects: devices see this term's
        // election id, above every earlier leader's.
        let identity = p4fleet::identity_for_term(term);
        ctx.devices.set_identity(identity);
        tracing::info!(
            term = term.0,
            election_id = %identity.election_id,
            client_id = identity.client_id,
            "device identity from the lease term"
        );
        ctx.readiness.set_standby(false);
        Some(elector)
    } else {
        None
    };
    metrics.leader.set(1);

    let result = match &elector {
        None => {
            run_controllers(ctx.clone(), shutdown.clone()).await;
            Ok(())
        }
        Some(elector) => {
            // Losing the lease stops this replica's controllers at once;
            // exiting lets Kubernetes restart it as a fresh candidate.
            let (lost_tx, lost_rx) = tokio::sync::oneshot::channel::<()>();
            let stop = shutdown_on({
                let shutdown = shutdown.clone();
                async move {
                    tokio::select! {
                        _ = shutdown => {},
                        _ = lost_rx => {},
                    }
                }
            });
            tokio::select! {
                _ = run_controllers(ctx.clone(), stop.clone()) => Ok(()),
                lost = elector.hold() => {
                    let _ = lost_tx.send(());
                    Err(anyhow::anyhow!("{lost}"))
                }
            }
        }
    };
    if let Some(elector) = &elector
        && result.is_ok()
    {
        elector.release().await;
    }
    metrics.leader.set(0);
    // The HTTP server stops with the same shutdown signal.
    if result.is_ok() {
        let _ = http.await;
    }
    tracing::info!("p4fleet operator stopped");
    result
}
