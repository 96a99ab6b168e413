//! CPU time and memory of a child process from /proc (Linux).

use serde::{Deserialize, Serialize};

/// One reading of a process.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct ProcSample {
    /// utime + stime, in seconds.
    pub cpu_seconds: f64,
    /// VmRSS, bytes.
    pub rss_bytes: u64,
    /// VmHWM (peak resident set), bytes.
    pub peak_rss_bytes: u64,
}

impl ProcSample {
    /// Reads /proc/<pid>/stat and /proc/<pid>/status; zeros for what is
    /// missing (a process that exited).
    pub fn read(pid: i32) -> ProcSample {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        ProcSample {
            cpu_seconds: cpu_ticks(&stat).unwrap_or(0) as f64 / clock_ticks(),
            rss_bytes: status_kb(&status, "VmRSS:").unwrap_or(0) * 1024,
            peak_rss_bytes: status_kb(&status, "VmHWM:").unwrap_or(0) * 1024,
        }
    }
}

fn clock_ticks() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 { t as f64 } else { 100.0 }
}

/// utime + stime (fields 14 and 15 of /proc/<pid>/stat), counted after
/// the command name, which may itself contain spaces and parentheses.
fn cpu_ticks(stat: &str) -> Option<u64> {
    let after = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    // `after` starts at field 3 (state); utime is field 14.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

fn status_kb(status: &str, key: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(key))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()
}

/// Raises this process's open-file limit to its hard limit (children
/// inherit it): 1,000 Switches are 1,000 gRPC connections on each side.
/// Returns the soft limit in effect.
pub fn raise_nofile() -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit write and read the struct we own.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return 0;
        }
        if lim.rlim_cur < lim.rlim_max {
            let want = libc::rlimit {
                rlim_cur: lim.rlim_max,
                rlim_max: lim.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &want) == 0 {
                return want.rlim_cur;
            }
        }
    }
    lim.rlim_cur
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_ticks_skip_a_command_with_spaces() {
        let stat = "4242 (p4fleet (op) x) S 1 4242 4242 0 -1 4194560 1000 0 0 0 150 25 0 0 20 0 9 0 100 0 0";
        assert_eq!(cpu_ticks(stat), Some(175));
        assert_eq!(cpu_ticks("garbage"), None);
    }

    #[test]
    fn status_fields_in_kib() {
        let status = "Name:\tp4fleet\nVmHWM:\t  123456 kB\nVmRSS:\t   1000 kB\n";
        assert_eq!(status_kb(status, "VmHWM:"), Some(123_456));
        assert_eq!(status_kb(status, "VmRSS:"), Some(1000));
        assert_eq!(status_kb(status, "VmSwap:"), None);
    }

    #[test]
    fn this_process_has_cpu_and_memory() {
        let s = ProcSample::read(std::process::id() as i32);
        assert!(s.peak_rss_bytes >= s.rss_bytes && s.rss_bytes > 0);
    }
}
