//! What the bench binaries share: the machine probe and the fleet
//! benchmark (`p4fleet-fleet-bench`, docs/fleet.md), which the e2e-style
//! test `tests/fleet.rs` runs at a small size.

pub mod fleet;
pub mod machine;
pub mod text;
