//! The standard `process_*` metrics (CPU time, memory, file descriptors,
//! threads, start time) read from Linux's /proc at each scrape.
//! prometheus-client has no process collector, and these few files need no
//! dependency. Elsewhere than Linux (no /proc) the metrics are left out.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

/// Clock ticks per second of /proc's times: USER_HZ, which Linux fixes at
/// 100 for user space on every architecture it exports /proc for.
const USER_HZ: f64 = 100.0;

/// What one scrape read.
#[derive(Debug, Default, PartialEq)]
pub struct ProcessStats {
    pub cpu_seconds: f64,
    pub resident_bytes: u64,
    pub virtual_bytes: u64,
    pub threads: u64,
    /// Since the Unix epoch.
    pub start_time_seconds: f64,
    pub open_fds: u64,
    pub max_fds: Option<u64>,
}

/// Parses `/proc/self/stat` (after the command name, which may hold spaces
/// and parentheses) and the boot time from `/proc/stat`.
pub fn parse_stat(stat: &str, proc_stat: &str) -> Option<ProcessStats> {
    let rest = &stat[stat.rfind(')')? + 1..];
    // Field 3 (state) is the first after the command; stat(5) numbers from 1.
    let f: Vec<&str> = rest.split_whitespace().collect();
    let field = |n: usize| f.get(n - 3)?.parse::<u64>().ok();
    let boot = proc_stat
        .lines()
        .find_map(|l| l.strip_prefix("btime "))?
        .trim()
        .parse::<u64>()
        .ok()?;
    Some(ProcessStats {
        cpu_seconds: (field(14)? + field(15)?) as f64 / USER_HZ,
        threads: field(20)?,
        start_time_seconds: boot as f64 + field(22)? as f64 / USER_HZ,
        virtual_bytes: field(23)?,
        ..Default::default()
    })
}

/// `VmRSS` of `/proc/self/status`, in bytes.
pub fn parse_rss(status: &str) -> Option<u64> {
    let kb = status.lines().find_map(|l| l.strip_prefix("VmRSS:"))?;
    let kb = kb.trim().strip_suffix("kB")?.trim().parse::<u64>().ok()?;
    Some(kb * 1024)
}

/// The soft "Max open files" of `/proc/self/limits` (None if unlimited).
pub fn parse_max_fds(limits: &str) -> Option<u64> {
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line["Max open files".len()..]
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

fn read() -> Option<ProcessStats> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let proc_stat = std::fs::read_to_string("/proc/stat").ok()?;
    let mut s = parse_stat(&stat, &proc_stat)?;
    s.resident_bytes = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|t| parse_rss(&t))
        .unwrap_or(0);
    s.open_fds = std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count() as u64);
    s.max_fds = std::fs::read_to_string("/proc/self/limits")
        .ok()
        .and_then(|t| parse_max_fds(&t));
    Some(s)
}

/// Encodes [`ProcessStats`] as `process_*` at each scrape.
#[derive(Debug)]
pub struct ProcessCollector;

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let Some(s) = read() else {
            return Ok(());
        };
        let cpu = ConstCounter::new(s.cpu_seconds);
        cpu.encode(encoder.encode_descriptor(
            "process_cpu_seconds",
            "Total user and system CPU time spent in seconds",
            None,
            cpu.metric_type(),
        )?)?;
        let mut gauge = |name: &str, help: &str, v: f64| {
            let g = ConstGauge::new(v);
            g.encode(encoder.encode_descriptor(name, help, None, g.metric_type())?)
        };
        gauge(
            "process_resident_memory_bytes",
            "Resident memory size in bytes",
            s.resident_bytes as f64,
        )?;
        gauge(
            "process_virtual_memory_bytes",
            "Virtual memory size in bytes",
            s.virtual_bytes as f64,
        )?;
        gauge(
            "process_start_time_seconds",
            "Start time of the process since the Unix epoch in seconds",
            s.start_time_seconds,
        )?;
        gauge(
            "process_open_fds",
            "Number of open file descriptors",
            s.open_fds as f64,
        )?;
        if let Some(max) = s.max_fds {
            gauge(
                "process_max_fds",
                "Maximum number of open file descriptors",
                max as f64,
            )?;
        }
        gauge("process_threads", "Number of OS threads", s.threads as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_proc_files() {
        // A command name with a space and a parenthesis; utime 250,
        // stime 50, 7 threads, started 1000 ticks after boot, 4096 B vsize.
        let stat = "42 (p4 (fleet)) S 1 42 42 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 7 0 1000 4096 300 ...";
        let proc_stat = "cpu  1 2 3\nbtime 1700000000\nprocesses 9\n";
        let s = parse_stat(stat, proc_stat).unwrap();
        assert_eq!(s.cpu_seconds, 3.0);
        assert_eq!(s.threads, 7);
        assert_eq!(s.start_time_seconds, 1_700_000_010.0);
        assert_eq!(s.virtual_bytes, 4096);
        assert_eq!(
            parse_rss("Name:\tp4fleet\nVmRSS:\t  2048 kB\n"),
            Some(2 << 20)
        );
        let limits = "Limit                     Soft Limit           Hard Limit           Units\nMax open files            1024                 524288               files\n";
        assert_eq!(parse_max_fds(limits), Some(1024));
        assert_eq!(
            parse_max_fds("Max open files  unlimited unlimited files\n"),
            None
        );
        assert!(parse_stat("garbage", proc_stat).is_none());
    }

    #[test]
    fn reads_this_process() {
        let s = read().expect("/proc is there on Linux");
        assert!(s.resident_bytes > 0 && s.threads >= 1 && s.open_fds > 0);
        assert!(s.start_time_seconds > 1.0e9);
    }
}
