//! Samples and their summaries (pure).

use serde::{Deserialize, Serialize};

/// One insertion of all entries at one batch size.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
pub struct Sample {
    pub entries: usize,
    pub requests: usize,
    /// First request built .. last answer received.
    pub elapsed_s: f64,
    /// Sum of the Write requests' response times.
    pub latency_sum_s: f64,
}

/// A client-side-only sample: the time `encode` takes to build every
/// request of `entries` entries (nothing sent, no latency).
pub fn timed_encode<T>(entries: usize, encode: impl FnOnce() -> Vec<T>) -> Sample {
    let start = std::time::Instant::now();
    let frames = encode();
    let elapsed_s = start.elapsed().as_secs_f64();
    let requests = frames.len();
    std::hint::black_box(frames);
    Sample {
        entries,
        requests,
        elapsed_s,
        latency_sum_s: 0.0,
    }
}

impl Sample {
    pub fn rate(&self) -> f64 {
        if self.elapsed_s > 0.0 {
            self.entries as f64 / self.elapsed_s
        } else {
            0.0
        }
    }

    pub fn mean_latency_s(&self) -> f64 {
        if self.requests == 0 {
            0.0
        } else {
            self.latency_sum_s / self.requests as f64
        }
    }
}

/// Median and range of a set of values.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
pub struct Spread {
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

impl Spread {
    /// `median [min–max]`, each written by `f`.
    pub fn show(&self, f: impl Fn(f64) -> String) -> String {
        format!("{} [{}–{}]", f(self.median), f(self.min), f(self.max))
    }

    pub fn of(values: &[f64]) -> Option<Spread> {
        if values.is_empty() {
            return None;
        }
        let mut v = values.to_vec();
        v.sort_by(|a, b| a.total_cmp(b));
        let n = v.len();
        let median = if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        };
        Some(Spread {
            median,
            min: v[0],
            max: v[n - 1],
        })
    }
}

/// Summary of one (path, batch size).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
pub struct Summary {
    pub batch: usize,
    pub runs: usize,
    /// Entries per second.
    pub rate: Spread,
    /// Mean response time per Write request, seconds.
    pub latency_s: Spread,
}

pub fn summarize(batch: usize, samples: &[Sample]) -> Option<Summary> {
    let rates: Vec<f64> = samples.iter().map(Sample::rate).collect();
    let lats: Vec<f64> = samples.iter().map(Sample::mean_latency_s).collect();
    Some(Summary {
        batch,
        runs: samples.len(),
        rate: Spread::of(&rates)?,
        latency_s: Spread::of(&lats)?,
    })
}

pub use p4fleet_bench::text::thousands;

/// A duration in seconds as µs / ms / s with 3 significant digits.
pub fn duration(s: f64) -> String {
    if s < 1e-3 {
        format!("{:.0} µs", s * 1e6)
    } else if s < 1.0 {
        format!("{:.3} ms", s * 1e3)
    } else {
        format!("{s:.3} s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_median_even_and_odd() {
        let s = Spread::of(&[3.0, 1.0, 2.0]).unwrap();
        assert_eq!((s.median, s.min, s.max), (2.0, 1.0, 3.0));
        assert_eq!(Spread::of(&[1.0, 2.0, 4.0, 3.0]).unwrap().median, 2.5);
        assert!(Spread::of(&[]).is_none());
    }

    #[test]
    fn sample_rates() {
        let s = Sample {
            entries: 30_000,
            requests: 10,
            elapsed_s: 0.5,
            latency_sum_s: 0.4,
        };
        assert_eq!(s.rate(), 60_000.0);
        assert!((s.mean_latency_s() - 0.04).abs() < 1e-12);
    }

    #[test]
    fn formatting() {
        assert_eq!(thousands(1_234_567.8), "1,234,568");
        assert_eq!(thousands(999.0), "999");
        assert_eq!(duration(0.000_25), "250 µs");
        assert_eq!(duration(0.0123), "12.300 ms");
    }
}
