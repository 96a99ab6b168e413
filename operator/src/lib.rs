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
//! `entries_cli` (the offline `p4fleet entries` tools) and `rollout_cli`
//! (`p4fleet rollout status | pause | resume | undo`).

pub(crate) mod allocator;
pub mod artifacts;
pub(crate) mod cache;
pub(crate) mod claimants;
pub mod cli;
pub mod context;
pub mod controllers;
pub mod convert;
pub(crate) mod counter_metrics;
pub mod devices;
pub(crate) mod digest_sink;
pub mod entries_cli;
pub mod entry_sources;
pub(crate) mod event_names;
pub mod fencing;
pub(crate) mod fleet;
pub mod http;
pub(crate) mod idle_reports;
pub mod leader;
pub(crate) mod learning;
pub(crate) mod limits;
pub(crate) mod loaded_pipelines;
pub mod metrics;
pub mod notice_metrics;
pub mod ownership;
pub mod plan_cli;
pub(crate) mod process_metrics;
pub mod reads;
pub(crate) mod reconcile_triggers;
pub(crate) mod retries;
pub mod rollout_cli;
pub(crate) mod rollout_metrics;
pub(crate) mod shutdown;
#[cfg(test)]
mod source_scan;
pub mod status;
pub mod telemetry;
pub(crate) mod tls_secrets;
