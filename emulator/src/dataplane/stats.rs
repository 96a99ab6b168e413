//! Data plane counters: one block per worker core, each counter written by
//! that worker only (relaxed load + store, no locked instruction on the
//! per-packet path) and summed by readers; a preallocated log-bucket
//! latency histogram; and the plain snapshot types reported outward.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use super::policy::ExternPolicy;

/// A single-writer counter.
#[derive(Debug, Default)]
pub struct Counter(AtomicU64);

impl Counter {
    /// Adds `n`. Only the owning thread may call it.
    #[inline]
    pub fn add(&self, n: u64) {
        self.0.store(self.0.load(Relaxed).wrapping_add(n), Relaxed);
    }
    #[inline]
    pub fn inc(&self) {
        self.add(1);
    }
    pub fn get(&self) -> u64 {
        self.0.load(Relaxed)
    }
}

fn counters(n: usize) -> Box<[Counter]> {
    (0..n).map(|_| Counter::default()).collect()
}

/// Sub-buckets per power of two (12.5 % resolution).
const SUB: u32 = 8;
const SUB_BITS: u32 = 3;
/// Values below this are their own bucket.
const LINEAR: u64 = 16;
/// Buckets: 16 linear + 8 per octave from 2^4 to 2^44 ns (~4.9 hours).
pub const BUCKETS: usize = LINEAR as usize + 40 * SUB as usize;

/// Bucket of a value (nanoseconds).
#[inline]
pub fn bucket(v: u64) -> usize {
    if v < LINEAR {
        return v as usize;
    }
    let e = 63 - v.leading_zeros(); // >= 4
    let sub = ((v >> (e - SUB_BITS)) & (SUB as u64 - 1)) as u32;
    let i = LINEAR as usize + ((e - 4) * SUB + sub) as usize;
    i.min(BUCKETS - 1)
}

/// Smallest value of a bucket.
pub fn bucket_floor(i: usize) -> u64 {
    if i < LINEAR as usize {
        return i as u64;
    }
    let j = (i - LINEAR as usize) as u32;
    let e = j / SUB + 4;
    let sub = (j % SUB) as u64;
    (1u64 << e) | (sub << (e - SUB_BITS))
}

/// A latency histogram (single writer).
#[derive(Debug)]
pub struct Histogram {
    buckets: Box<[Counter]>,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            buckets: counters(BUCKETS),
        }
    }
}

impl Histogram {
    #[inline]
    pub fn record(&self, ns: u64) {
        self.buckets[bucket(ns)].inc();
    }

    /// Adds this histogram's counts into `into`.
    pub fn merge_into(&self, into: &mut [u64; BUCKETS]) {
        for (d, c) in into.iter_mut().zip(self.buckets.iter()) {
            *d += c.get();
        }
    }
}

/// The value at quantile `q` (0..=1) of merged bucket counts, as the
/// bucket's lower bound; `None` when empty.
pub fn quantile(counts: &[u64; BUCKETS], q: f64) -> Option<u64> {
    let total: u64 = counts.iter().sum();
    if total == 0 {
        return None;
    }
    let rank = ((q * total as f64).ceil() as u64).clamp(1, total);
    let mut seen = 0;
    for (i, c) in counts.iter().enumerate() {
        seen += c;
        if seen >= rank {
            return Some(bucket_floor(i));
        }
    }
    None
}

/// Why a packet was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DropCause {
    /// The program dropped it (`drop`).
    Program = 0,
    /// Shorter than a header it extracts.
    Truncated = 1,
    /// No free context for an async call (Context method only: T4P4S
    /// drops; elsewhere the packet waits).
    PoolExhausted = 2,
    /// The executor's queue was full (Context method only, as above).
    QueueFull = 3,
    /// Egress port outside 0..=255.
    BadPort = 4,
}

pub const DROP_CAUSES: usize = 5;

/// Ports with their own tx counter (the flood port is 255).
pub const PORTS: usize = 256;

/// One extern's counters in one worker.
#[derive(Debug, Default)]
pub struct ExternCounters {
    pub sync_calls: Counter,
    pub skipped: Counter,
    pub submitted: Counter,
    pub completed: Counter,
    pub drop_pool: Counter,
    pub drop_queue: Counter,
    /// Async calls that found the pool or queue full and waited for room.
    pub waits: Counter,
    /// Sync: sampled call duration; Async: submit-to-resume time.
    pub latency: Histogram,
}

/// One worker's counters.
#[derive(Debug)]
pub struct WorkerCounters {
    pub rx: Counter,
    /// Generator found no free buffer (a NIC's rx_nombuf).
    pub rx_nombuf: Counter,
    /// Lost by the rx port's full queue (a NIC's imissed).
    pub rx_missed: Counter,
    pub tx: Counter,
    pub tx_bytes: Counter,
    pub drops: [Counter; DROP_CAUSES],
    pub tx_port: Box<[Counter]>,
    pub table_hit: Box<[Counter]>,
    pub table_miss: Box<[Counter]>,
    pub action: Box<[Counter]>,
    pub externs: Box<[ExternCounters]>,
    /// rx-to-tx time of forwarded packets.
    pub latency: Histogram,
}

impl WorkerCounters {
    pub fn new(tables: usize, actions: usize, externs: usize) -> WorkerCounters {
        WorkerCounters {
            rx: Counter::default(),
            rx_nombuf: Counter::default(),
            rx_missed: Counter::default(),
            tx: Counter::default(),
            tx_bytes: Counter::default(),
            drops: Default::default(),
            tx_port: counters(PORTS),
            table_hit: counters(tables),
            table_miss: counters(tables),
            action: counters(actions),
            externs: (0..externs).map(|_| ExternCounters::default()).collect(),
            latency: Histogram::default(),
        }
    }

    #[inline]
    pub fn drop(&self, cause: DropCause) {
        self.drops[cause as usize].inc();
    }
}

/// Drops by cause.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct DropCounts {
    pub program: u64,
    pub truncated: u64,
    pub pool_exhausted: u64,
    pub queue_full: u64,
    pub bad_port: u64,
}

impl DropCounts {
    pub fn total(&self) -> u64 {
        self.program + self.truncated + self.pool_exhausted + self.queue_full + self.bad_port
    }
}

/// Counters of one table.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct TableStats {
    pub name: String,
    pub table_id: u32,
    /// Entries and version of the lookup structure in force.
    pub entries: u64,
    pub version: u64,
    pub hits: u64,
    pub misses: u64,
    /// (action name, P4Info id, times run by this table's lookups).
    pub actions: Vec<(String, u32, u64)>,
    /// Why the latest snapshot did not compile (the previous one stays).
    pub compile_error: Option<String>,
}

/// Counters of one extern.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ExternStats {
    pub name: String,
    pub policy: ExternPolicy,
    pub sync_calls: u64,
    pub skipped: u64,
    pub async_submitted: u64,
    pub async_completed: u64,
    pub async_ops_per_second: f64,
    /// Submitted, not yet resumed (queued or being worked on).
    pub in_flight: u64,
    /// Context method only (T4P4S drops; otherwise 0, as on DPDK).
    pub drops_pool_exhausted: u64,
    pub drops_queue_full: u64,
    /// Calls that found the pool or queue full and waited (not in
    /// ExternRuntime, which has no field for them).
    pub async_waits: u64,
    pub latency_p50_ns: Option<u64>,
    pub latency_p99_ns: Option<u64>,
}

/// Everything the data plane counts, summed over workers.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct EngineStats {
    pub running: bool,
    pub workers: u32,
    pub extern_cores: u32,
    /// Extern policies applied (SetPolicy calls), each a restart of the
    /// cores: a controller that keeps setting policies shows here.
    pub policy_sets: u64,
    pub rx_packets: u64,
    pub rx_nombuf: u64,
    /// Lost by the rx ports' full queues (never received; not in `drops`).
    pub rx_missed: u64,
    pub tx_packets: u64,
    pub tx_bytes: u64,
    pub drops: DropCounts,
    /// Forwarded packets/s over the last sampling interval.
    pub packets_per_second: f64,
    /// Received packets/s over the last sampling interval.
    pub rx_packets_per_second: f64,
    /// (port, packets) for ports that sent any.
    pub tx_per_port: Vec<(u32, u64)>,
    pub tables: Vec<TableStats>,
    pub externs: Vec<ExternStats>,
    pub latency_p50_ns: Option<u64>,
    pub latency_p99_ns: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_monotonic_and_bounded() {
        let mut last = 0;
        for v in [
            0u64,
            1,
            15,
            16,
            17,
            31,
            32,
            100,
            1000,
            1 << 20,
            1 << 40,
            u64::MAX,
        ] {
            let b = bucket(v);
            assert!(b >= last, "{v}");
            assert!(b < BUCKETS);
            assert!(bucket_floor(b) <= v, "{v}: floor {}", bucket_floor(b));
            last = b;
        }
        // 12.5 % resolution above 16 ns.
        for v in [100u64, 12_345, 9_876_543] {
            let f = bucket_floor(bucket(v));
            assert!((v - f) as f64 / v as f64 <= 0.125, "{v} {f}");
        }
    }

    #[test]
    fn quantiles() {
        let h = Histogram::default();
        for _ in 0..90 {
            h.record(100);
        }
        for _ in 0..10 {
            h.record(10_000);
        }
        let mut c = [0u64; BUCKETS];
        h.merge_into(&mut c);
        assert_eq!(quantile(&c, 0.5), Some(bucket_floor(bucket(100))));
        assert_eq!(quantile(&c, 0.99), Some(bucket_floor(bucket(10_000))));
        assert_eq!(quantile(&[0; BUCKETS], 0.5), None);
    }

    #[test]
    fn single_writer_counter() {
        let c = Counter::default();
        c.inc();
        c.add(5);
        assert_eq!(c.get(), 6);
    }
}
