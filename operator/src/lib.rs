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
//! `fencing` (the device identity a leader's term gives it) and
//! `entries_cli` (the offline `p4fleet entries` tools).

pub mod allocator;
pub mod artifacts;
pub mod cache;
pub mod claimants;
pub mod cli;
pub mod context;
pub mod controllers;
pub mod convert;
pub mod counter_metrics;
pub mod devices;
pub mod digest_sink;
pub mod entries_cli;
pub mod entry_sources;
pub mod event_names;
pub mod fencing;
pub mod fleet;
pub mod http;
pub mod idle_reports;
pub mod leader;
pub mod learning;
pub mod limits;
pub mod loaded_pipelines;
pub mod metrics;
pub mod notice_metrics;
pub mod ownership;
pub mod process_metrics;
pub mod reads;
pub mod reconcile_triggers;
pub mod retries;
pub mod shutdown;
#[cfg(test)]
mod source_scan;
pub mod status;
pub mod telemetry;
pub mod tls_secrets;
