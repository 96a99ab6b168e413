//! p4fleet's entry model: everything between a table entry as a user writes
//! it and the bytes a device receives, with no I/O.
//!
//! - [`entries`]: table schemas (from P4Info and bfrt.json), values and
//!   canonical entries, the line format, the P4Runtime wire encoder and the
//!   one P4Runtime <-> BFRT mapping with its wire encoder.
//! - [`bulk`]: the columnar form of p4fleet's bulk write (docs/bulk.md).
//! - [`p4info`]: what a P4Info declares, checked and summarised (the one
//!   place besides [`entries::TableSchema`] that walks a P4Info).
//! - [`sync`]: what to write so a table holds a set's entries (ownership,
//!   plan, write phases) and the tallies of what a sync did.
//! - [`learn`]: digest configs (durations, exact difference) and learn
//!   rules (a digest message into a table entry).
//! - [`pipeline_config`]: the packed device config a DPDK target
//!   (infrap4d) takes: `BfPipelineConfig` with bfrt.json, context.json and
//!   the `.spec`.
//!
//! The crate knows nothing of Kubernetes, gRPC transports or async
//! runtimes: its Cargo.toml lists none, so the compiler holds the line.
//! p4fleet-client (device I/O) and the operator build on it.

pub mod bulk;
pub mod entries;
#[doc(hidden)]
pub mod fixtures;
pub mod learn;
pub mod p4info;
pub mod pipeline_config;
pub mod resources;
pub mod sync;
