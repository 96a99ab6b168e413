//! What the data plane benchmarks measure outside the data plane: CPU time
//! per thread group from `/proc/<pid>/task/*/schedstat`, and the round
//! trip of one cache line between two threads. Used by
//! `p4fleet-dataplane-bench` (this process's threads) and
//! `p4fleet-dpdk-bench` (the agent's and the emulator's processes).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// On-CPU nanoseconds of the threads of `pid` (`None`: this process)
/// whose names start with `first`, and of those that start with `second`.
pub fn thread_cpu_ns(pid: Option<u32>, first: &str, second: &str) -> (u64, u64) {
    let dir = pid.map_or_else(
        || "/proc/self/task".to_string(),
        |p| format!("/proc/{p}/task"),
    );
    let (mut a, mut b) = (0, 0);
    let Ok(tasks) = std::fs::read_dir(dir) else {
        return (0, 0);
    };
    for t in tasks.flatten() {
        let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
        let ns: u64 = std::fs::read_to_string(t.path().join("schedstat"))
            .ok()
            .and_then(|s| s.split_whitespace().next().and_then(|v| v.parse().ok()))
            .unwrap_or(0);
        if comm.starts_with(first) {
            a += ns;
        } else if comm.starts_with(second) {
            b += ns;
        }
    }
    (a, b)
}

/// Pins the calling thread to `cpu` (best effort: a refusal leaves it
/// where it was).
fn pin(cpu: usize) {
    // SAFETY: a zeroed cpu_set_t with one CPU, for this thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

/// Mean round trip (ns) of a counter bounced `n` times between two
/// threads, pinned to `cpus` if given: the floor under every hand-off to
/// an extern core. On a VM the host moves the vCPUs (here 50-120 ns at
/// times, ~520 ns at others); on a busy machine it is a scheduling delay.
pub fn round_trip_ns(cpus: Option<(usize, usize)>, n: u64) -> f64 {
    #[repr(align(128))]
    struct Line(AtomicU64);
    let lines = Arc::new((Line(AtomicU64::new(0)), Line(AtomicU64::new(0))));
    let pong_lines = lines.clone();
    let pong = std::thread::spawn(move || {
        if let Some((_, b)) = cpus {
            pin(b);
        }
        for i in 1..=n {
            while pong_lines.0.0.load(Ordering::Acquire) != i {
                std::hint::spin_loop();
            }
            pong_lines.1.0.store(i, Ordering::Release);
        }
    });
    let ping = std::thread::spawn(move || {
        if let Some((a, _)) = cpus {
            pin(a);
        }
        let t0 = Instant::now();
        for i in 1..=n {
            lines.0.0.store(i, Ordering::Release);
            while lines.1.0.load(Ordering::Acquire) != i {
                std::hint::spin_loop();
            }
        }
        t0.elapsed().as_nanos() as f64 / n.max(1) as f64
    });
    let ns = ping.join().expect("ping thread");
    pong.join().expect("pong thread");
    ns
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_threads_are_found_by_name_and_a_round_trip_takes_time() {
        let stop = Arc::new(AtomicU64::new(0));
        let s = stop.clone();
        let t = std::thread::Builder::new()
            .name("measure-spin".into())
            .spawn(move || {
                while s.load(Ordering::Relaxed) == 0 {
                    std::hint::spin_loop();
                }
            })
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        let (spin, none) = thread_cpu_ns(None, "measure-spin", "no-such-thread");
        stop.store(1, Ordering::Relaxed);
        t.join().unwrap();
        assert!(spin > 0, "the spinning thread's CPU time is counted");
        assert_eq!(none, 0);
        assert!(round_trip_ns(None, 1_000) > 0.0);
    }
}
