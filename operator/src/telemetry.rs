//! tracing setup: text or JSON lines on stderr, level from `--log-level`
//! (any `RUST_LOG`-style filter, e.g. `info,p4fleet=debug`), and the
//! reconcile trigger counts ([`crate::reconcile_triggers`]), which see
//! kube-runtime's reconcile spans whatever the log level.

use tracing_subscriber::EnvFilter;
use tracing_subscriber::Layer;
use tracing_subscriber::filter::filter_fn;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

use crate::reconcile_triggers::{SPAN_NAME, TriggerLayer};

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
    let fmt = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let logs = match format {
        LogFormat::Text => fmt.boxed(),
        LogFormat::Json => fmt.json().flatten_event(true).boxed(),
    };
    // Each layer its own filter: the log level must not hide the spans
    // the trigger counts are read from.
    let triggers = TriggerLayer.with_filter(filter_fn(|m| m.is_span() && m.name() == SPAN_NAME));
    let res = tracing_subscriber::registry()
        .with(logs.with_filter(filter))
        .with(triggers)
        .try_init();
    if let Err(e) = res {
        eprintln!("tracing already initialised: {e}");
    }
}
