//! The emulator and operator binaries as child processes of a test: built
//! once (`cargo build` of both, debug), killed with the test process.

use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::Command;

use crate::repo_root;

/// The cargo target directory the tests run from.
pub fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("target"))
}

/// Builds the emulator and operator binaries (debug) and returns their
/// directory; `cargo test --workspace` has released the build lock by the
/// time tests run.
pub fn build_binaries() -> PathBuf {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let st = Command::new(cargo)
        .current_dir(repo_root())
        .args([
            "build",
            "-q",
            "-p",
            "p4fleet-emulator",
            "-p",
            "p4fleet",
            "--bins",
        ])
        .status()
        .expect("run cargo build");
    assert!(
        st.success(),
        "cargo build of the emulator and operator failed"
    );
    target_dir().join("debug")
}

/// Makes the child die (SIGKILL) when the thread that spawned it exits.
pub fn with_pdeathsig(cmd: &mut Command) {
    // SAFETY: prctl is async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}
