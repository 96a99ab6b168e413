//! tracing setup: text or JSON lines on stderr, level from `--log-level`
//! (any `RUST_LOG`-style filter, e.g. `info,p4fleet=debug`).

use tracing_subscriber::EnvFilter;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// Installs the global subscriber; an invalid filter falls back to `info`.
pub fn init(format: LogFormat, level: &str) {
    let filter = EnvFilter::try_new(level).unwrap_or_else(|e| {
        eprintln!("invalid --log-level {level:?} ({e}); using info");
        EnvFilter::new("info")
    });
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let res = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
    if let Err(e) = res {
        eprintln!("tracing already initialised: {e}");
    }
}
