//! A software data plane for emulated DPDK targets, built the way DPDK
//! software switches are: a pipeline loaded from a DPDK SWX `.spec`
//! ([`spec`]) and bound to its P4Info ([`bind`]); run-to-completion worker
//! cores polling bursts from an rx port fed by a built-in traffic source
//! ([`packet`]); table lookups that follow what the control plane installed
//! ([`table::TableSource`], swapped in RCU-style); extern calls
//! ([`externs`]: AES-128-CBC encrypt/decrypt, empty) run Sync, Async (on
//! dedicated extern cores or an emulated inline crypto device, packets
//! parked in a context pool, [`context`]) or Skip, per extern
//! ([`policy`]); counters and latency histograms per worker ([`stats`]);
//! the [`engine::Engine`] that ties them together; and the
//! `p4fleet.externs.v1.ExternRuntime` gRPC service over it ([`service`]).
//!
//! See docs/dpdk.md for the model, its knobs and the benchmark.

pub mod alloc;
pub mod bind;
pub mod context;
pub mod engine;
pub mod externs;
pub mod hits;
pub mod measure;
pub mod packet;
pub mod policy;
pub mod report;
pub mod service;
pub mod spec;
pub mod stats;
pub mod table;
mod worker;

pub use engine::{Engine, EngineConfig, EngineError, ExternInfo, LoadedProgram};
pub use policy::{Capabilities, Executor, ExternPolicy, Mode, PolicyError, SuspendMethod};
pub use service::{EngineRegistry, ExternRuntimeService};
pub use stats::EngineStats;
pub use table::{
    ActionCall, FieldValue, MemoryTableSource, SnapshotEntry, TableSnapshot, TableSource,
};
