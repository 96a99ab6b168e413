//! p4fleet: a Kubernetes operator for fleets of programmable P4 switches.
//!
//! Kubernetes only: the entry model and sync planning are p4fleet-model's,
//! device I/O (P4Runtime, BFRT) is p4fleet-client's. Here: `controllers`
//! (one reconciler per resource kind, each dereference → validate → build
//! → apply → update status), `reads` (the one interface dereference stages
//! read the cluster through), `cache` (the shared reflector stores behind
//! `reads`), `limits` (concurrency per kind, per set, per device), `artifacts` (P4Program sources, P4Info,
//! digest), `devices` (one client connection per Switch), `convert` (CRD
//! enums in the model's and client's terms), plus the runtime pieces
//! (`context`, `status`, `metrics`, `process_metrics`, `http`, `telemetry`, `leader`, `cli`),
//! `fencing` (the device identity a leader's term gives it),
//! `entries_cli` (the offline `p4fleet entries` tools), `rollout_cli`
//! (`p4fleet rollout status | pause | resume | undo`) and `plan_cli`
//! (`p4fleet plan -f`).
//!
//! Public: the commands' modules, the re-exports below (what the binary,
//! e2e and the benchmarks use) and `stages`; every other module is the
//! crate's own.

pub(crate) mod allocator;
pub(crate) mod artifacts;
pub(crate) mod cache;
pub(crate) mod claimants;
pub mod cli;
pub(crate) mod context;
pub(crate) mod controllers;
pub(crate) mod convert;
pub(crate) mod counter_metrics;
pub(crate) mod devices;
pub(crate) mod digest_sink;
pub mod entries_cli;
pub(crate) mod entry_sources;
pub(crate) mod event_names;
pub(crate) mod fencing;
pub(crate) mod fleet;
pub(crate) mod http;
pub(crate) mod idle_reports;
pub(crate) mod leader;
pub(crate) mod learning;
pub(crate) mod limits;
pub(crate) mod loaded_pipelines;
pub(crate) mod metrics;
pub(crate) mod notice_metrics;
pub(crate) mod ownership;
pub mod plan_cli;
pub(crate) mod process_metrics;
pub(crate) mod reads;
pub(crate) mod reconcile_triggers;
pub(crate) mod retries;
pub mod rollout_cli;
pub(crate) mod rollout_metrics;
pub(crate) mod shutdown;
#[cfg(test)]
mod source_scan;
pub(crate) mod status;
pub(crate) mod telemetry;
pub(crate) mod tls_secrets;

// The library's surface: what the binary, the end-to-end tests and the
// benchmarks use. Everything else is the crate's own.
pub use artifacts::{cookie, digest};
pub use context::{Context, OperatorConfig};
pub use controllers::{Error, Shutdown, finalized, lost_race, run_controllers, shutdown_on};
pub use devices::{DevicePool, NoticeEvent};
pub use fencing::identity_for_term;
pub use http::{router, serve};
pub use leader::{Elector, LEASE_NAME, LeaderConfig, Term};
pub use metrics::Metrics;
pub use notice_metrics::{DigestLabels, NoticeMetrics};
pub use telemetry::init as init_telemetry;

/// The TableEntrySet sync's stages one by one, for the benchmark that
/// times them (`bench/src/entry_path.rs`) and the integration tests that
/// drive them without a cluster: not a stable interface.
#[doc(hidden)]
pub mod stages {
    pub use crate::artifacts::url_source::FetchError;
    pub use crate::controllers::Ctx;
    pub use crate::controllers::entry_set::dereference::{SourceText, Sources, Target};
    pub use crate::controllers::entry_set::desired_cache::{DesiredCache, Inputs};
    pub use crate::controllers::entry_set::memory::Auto;
    pub use crate::controllers::entry_set::read_check::{self, ReadBack};
    pub use crate::controllers::entry_set::{
        EntrySets, SetCtx, apply, desired, desired::Desired, parse, set::Set, status,
    };
    pub use crate::convert::write_options;
    pub use crate::entry_sources::{parsed, schema_digest};
    pub use crate::ownership::Record;
    pub use crate::reads::Reads;
    pub use crate::status::now_rfc3339;
}
