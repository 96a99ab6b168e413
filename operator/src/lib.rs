//! p4fleet: a Kubernetes operator for fleets of programmable P4 switches.
//!
//! Layout: `entries` (pure entry model and line format), `sync` (pure diffing and
//! batching), `driver` (device connections: P4Runtime, later BFRT), `controllers`
//! (one reconciler per resource kind), plus the runtime pieces (`context`,
//! `status`, `metrics`, `http`, `telemetry`, `leader`, `cli`).

pub mod cli;
pub mod context;
pub mod controllers;
pub mod convert;
pub mod driver;
pub mod http;
pub mod leader;
pub mod metrics;
pub mod status;
pub mod telemetry;
