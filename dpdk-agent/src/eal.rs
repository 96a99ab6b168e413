//! DPDK's Environment Abstraction Layer: initialized once per process.

use std::ffi::{CString, c_char};
use std::sync::OnceLock;

use crate::ffi;

static EAL: OnceLock<Result<(), String>> = OnceLock::new();

/// The EAL arguments for a machine without hugepages or NICs (tests, CI,
/// development): one lcore, plain memory, no PCI scan, no shared config,
/// no telemetry socket. Works as root and as an unprivileged user
/// (`--in-memory` is refused together with `--no-huge` in 22.11).
pub const NO_HUGE_ARGS: &str =
    "-l 0 --no-huge --no-pci --no-shconf --no-telemetry -m 256 --log-level lib.*:notice";

/// Initializes the EAL with `args` (argv without the program name). A
/// second call returns the first call's result (the EAL cannot be
/// initialized twice in one process).
///
/// `rte_eal_init` pins the calling thread to its main lcore (`-l 0`: CPU
/// 0), and every thread created afterwards inherits that: the data plane,
/// the extern cores and the gRPC runtime would all share one CPU. The
/// calling thread's CPU set from before is restored afterwards (call this
/// before starting other threads); `--cpus` pins the data plane and the
/// extern cores ([`pin_current_thread`]).
pub fn init(args: &[String]) -> Result<(), String> {
    EAL.get_or_init(|| {
        // SAFETY: a zeroed cpu_set_t filled by the kernel for this thread.
        let mut before: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        let have = unsafe {
            libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut before)
        } == 0;
        let mut owned: Vec<CString> = vec![CString::new("p4fleet-dpdk-agent").expect("no NUL")];
        for a in args {
            owned.push(CString::new(a.as_str()).map_err(|_| format!("EAL argument {a:?}"))?);
        }
        let mut argv: Vec<*mut c_char> = owned.iter().map(|s| s.as_ptr().cast_mut()).collect();
        argv.push(std::ptr::null_mut());
        // SAFETY: argv is a NULL-terminated array of NUL-terminated
        // strings that outlive the call (rte_eal_init may permute it).
        let n = unsafe { ffi::p4fa_eal_init(owned.len() as i32, argv.as_mut_ptr()) };
        // The EAL keeps pointers into argv for its lifetime.
        std::mem::forget(owned);
        if have {
            // SAFETY: the set read above, for this thread.
            unsafe {
                libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &before);
            }
        }
        if n < 0 {
            return Err(format!(
                "rte_eal_init({}) failed: {}",
                args.join(" "),
                ffi::strerror(n)
            ));
        }
        Ok(())
    })
    .clone()
}

/// Splits an argument string at whitespace (EAL arguments have no quoting
/// needs here).
pub fn split(args: &str) -> Vec<String> {
    args.split_whitespace().map(str::to_string).collect()
}

/// Pins the calling thread to `cpu`. A busy-polling thread that the
/// scheduler moves between CPUs starts over with cold caches each time
/// (and the data plane and an extern core can end up sharing a CPU for a
/// time slice, which stalls every parked packet).
pub fn pin_current_thread(cpu: usize) -> std::io::Result<()> {
    // SAFETY: a zeroed cpu_set_t with one CPU set, for this thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Pins the calling thread to `cpu` if one is given; a failure is logged
/// (the thread runs unpinned, as without `--cpus`).
pub fn pin_or_log(cpu: Option<usize>, what: &str) {
    if let Some(cpu) = cpu
        && let Err(e) = pin_current_thread(cpu)
    {
        tracing::warn!("{what}: cannot pin to CPU {cpu}: {e}; running unpinned");
    }
}
