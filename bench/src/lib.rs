//! What the bench binaries share: the machine probe, the counting
//! allocator, the fleet benchmark (`p4fleet-fleet-bench`, docs/fleet.md),
//! which the e2e-style test `tests/fleet.rs` runs at a small size, and the
//! operator's entry path in process (`entry_path`: `p4fleet-entry-path`
//! and `p4fleet-batching-bench`, tested by `tests/entry_path.rs`).

pub mod alloc;
pub mod batching;
pub mod entry_path;
pub mod fleet;
pub mod machine;
pub mod text;
