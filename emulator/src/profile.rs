//! Latency profiles: an added per-request and per-entry cost on writes, so
//! demos look like a real target and pipelining has something to hide.
//!
//! The per-entry cost is serialized per device (one ASIC, one driver: a
//! device finishes one batch's entries before the next's), the per-request
//! cost overlaps between requests in flight (RPC, session and driver entry
//! overhead). Waiting uses the async timer, never a blocked thread, so
//! other requests keep being served meanwhile.

use std::str::FromStr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Added write latency of an emulated device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LatencyProfile {
    /// No added latency (the default; all benchmark headline figures).
    #[default]
    None,
    /// Roughly the rbfrt paper's Tofino figures (Figure 3, local
    /// controller): ~1,134 entries/s at batch 1 (≈ 0.88 ms per request) and
    /// ~52,832 entries/s at batch 30,000 (≈ 19 µs per entry).
    Tofino,
    /// Explicit costs.
    Custom {
        per_request: Duration,
        per_entry: Duration,
    },
}

impl LatencyProfile {
    /// Overlappable cost of one write request.
    pub fn per_request(self) -> Duration {
        match self {
            LatencyProfile::None => Duration::ZERO,
            // 1/1134 s per single-entry request minus one entry's cost.
            LatencyProfile::Tofino => Duration::from_micros(863),
            LatencyProfile::Custom { per_request, .. } => per_request,
        }
    }

    /// Serialized (per device) cost of one entry.
    pub fn per_entry(self) -> Duration {
        match self {
            LatencyProfile::None => Duration::ZERO,
            // 1/52,832 s ≈ 18.9 µs.
            LatencyProfile::Tofino => Duration::from_nanos(18_930),
            LatencyProfile::Custom { per_entry, .. } => per_entry,
        }
    }

    pub fn is_none(self) -> bool {
        self.per_request().is_zero() && self.per_entry().is_zero()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown latency profile {0:?} (expected none, tofino or custom:PER_REQUEST_US:PER_ENTRY_US)"
)]
pub struct UnknownProfile(pub String);

impl FromStr for LatencyProfile {
    type Err = UnknownProfile;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "none" | "" => Ok(LatencyProfile::None),
            "tofino" => Ok(LatencyProfile::Tofino),
            custom => {
                // custom:PER_REQUEST_US:PER_ENTRY_US (tests that need a
                // slow sync, e.g. to stop a leader in the middle of one).
                let us = |v: &str| v.parse::<u64>().map(Duration::from_micros);
                match custom
                    .strip_prefix("custom:")
                    .and_then(|r| r.split_once(':'))
                {
                    Some((req, entry)) => match (us(req), us(entry)) {
                        (Ok(per_request), Ok(per_entry)) => Ok(LatencyProfile::Custom {
                            per_request,
                            per_entry,
                        }),
                        _ => Err(UnknownProfile(s.to_string())),
                    },
                    None => Err(UnknownProfile(s.to_string())),
                }
            }
        }
    }
}

/// When a device's serialized entry work is done.
#[derive(Debug, Default)]
pub(crate) struct BusyUntil(Mutex<Option<Instant>>);

impl BusyUntil {
    /// Reserves `entries` entries' worth of device time after the request's
    /// overhead and whatever is queued; returns when the request may answer.
    pub fn reserve(&self, profile: LatencyProfile, entries: usize, now: Instant) -> Instant {
        let work = profile.per_entry() * entries as u32;
        // The request's own overhead first (overlapping others'), then its
        // entries queue behind the device's earlier work.
        let ready = now + profile.per_request();
        let mut busy = self.0.lock().expect("busy lock");
        let start = busy.map_or(ready, |b| b.max(ready));
        let done = start + work;
        *busy = Some(done);
        done
    }
}

/// Waits out the profile's cost of a write of `entries` entries.
pub(crate) async fn delay(profile: LatencyProfile, busy: &BusyUntil, entries: usize) {
    if profile.is_none() {
        return;
    }
    let until = busy.reserve(profile, entries, Instant::now());
    tokio::time::sleep_until(until.into()).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_names() {
        assert_eq!("none".parse(), Ok(LatencyProfile::None));
        assert_eq!("Tofino".parse(), Ok(LatencyProfile::Tofino));
        assert!("asic".parse::<LatencyProfile>().is_err());
        assert_eq!(
            "custom:100:250".parse(),
            Ok(LatencyProfile::Custom {
                per_request: Duration::from_micros(100),
                per_entry: Duration::from_micros(250),
            })
        );
        assert!("custom:100".parse::<LatencyProfile>().is_err());
        assert!("custom:x:1".parse::<LatencyProfile>().is_err());
    }

    #[test]
    fn tofino_resembles_the_paper() {
        let p = LatencyProfile::Tofino;
        let one = (p.per_request() + p.per_entry()).as_secs_f64();
        assert!((1.0 / one - 1134.0).abs() < 10.0, "{}", 1.0 / one);
        let big = (p.per_request() + p.per_entry() * 30_000).as_secs_f64();
        let rate = 30_000.0 / big;
        assert!((rate - 52_832.0).abs() < 2_000.0, "{rate}");
    }

    #[test]
    fn entries_serialize_requests_overlap() {
        let p = LatencyProfile::Custom {
            per_request: Duration::from_millis(1),
            per_entry: Duration::from_millis(10),
        };
        let b = BusyUntil::default();
        let t0 = Instant::now();
        // Two concurrent requests of one entry: the second's entry waits
        // for the first's.
        assert_eq!(b.reserve(p, 1, t0), t0 + Duration::from_millis(11));
        assert_eq!(b.reserve(p, 1, t0), t0 + Duration::from_millis(21));
        // Per-request overhead alone overlaps.
        let q = LatencyProfile::Custom {
            per_request: Duration::from_millis(5),
            per_entry: Duration::ZERO,
        };
        let c = BusyUntil::default();
        assert_eq!(c.reserve(q, 1, t0), t0 + Duration::from_millis(5));
        assert_eq!(c.reserve(q, 1, t0), t0 + Duration::from_millis(5));
    }
}
