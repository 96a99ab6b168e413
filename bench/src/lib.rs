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

use std::path::PathBuf;

/// Where the workspace's other binaries are: `given`, else the directory of
/// this executable (cargo puts them side by side).
pub fn bin_dir(given: Option<PathBuf>) -> anyhow::Result<PathBuf> {
    match given {
        Some(d) => Ok(d),
        None => Ok(std::env::current_exe()?
            .parent()
            .ok_or_else(|| anyhow::anyhow!("binary directory of the running executable"))?
            .to_path_buf()),
    }
}
