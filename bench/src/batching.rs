//! Adaptive batching against static settings (`make bench-batching`,
//! docs/batching.md, docs/performance.md): the same set synced through the
//! operator's stages ([`crate::entry_path`]) with each static batch size ×
//! requests in flight of a grid, and with both `Auto`, on one emulated
//! device (its table emptied before every sync). The rate compared is the
//! write stage's: desired entries over the time of the chunked write,
//! which is what the settings change.

use std::fmt::Write as _;

use crate::entry_path::{EntryPath, MemReads};
use crate::text::thousands;
use p4fleet_proto::p4info::P4Info;

/// The write settings of one series: fixed, or Auto (both dimensions).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Setting {
    Static { batch: usize, in_flight: usize },
    Auto,
}

impl Setting {
    /// The spec's `write` object.
    pub fn write_spec(self) -> serde_json::Value {
        match self {
            Setting::Static { batch, in_flight } => {
                serde_json::json!({"batchSize": batch, "maxInFlight": in_flight})
            }
            Setting::Auto => serde_json::json!({"batchSize": "Auto", "maxInFlight": "Auto"}),
        }
    }

    pub fn label(self) -> String {
        match self {
            Setting::Static { batch, in_flight } => {
                format!("{} × {in_flight}", thousands(batch as f64))
            }
            Setting::Auto => "Auto".into(),
        }
    }
}

/// The syncs of one series.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    pub setting: Setting,
    /// Write-stage entries/s of each sync, in order.
    pub rates: Vec<f64>,
    /// The settings the write used after each sync (Auto: as tuned).
    pub used: Vec<(usize, usize)>,
    /// Whether every sync wrote and applied every desired entry.
    pub all_applied: bool,
}

impl Series {
    /// What the series achieves once settled: the median of its last
    /// `last` syncs (all of them for a static setting).
    pub fn settled_rate(&self, last: usize) -> f64 {
        let tail = &self.rates[self.rates.len().saturating_sub(last.max(1))..];
        median(tail)
    }
}

pub fn median(v: &[f64]) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    s[s.len() / 2]
}

/// Runs `syncs` syncs of `entries` (fresh ConfigMaps each series) with
/// `setting` against device 1 at `endpoint`.
pub async fn run_series(
    setting: Setting,
    endpoint: &str,
    info: &P4Info,
    entries: usize,
    per_map: usize,
    syncs: usize,
) -> anyhow::Result<Series> {
    let reads = MemReads::new(crate::entry_path::config_maps(entries, per_map));
    let mut path = EntryPath::new(reads, endpoint, 1, info.clone(), setting.write_spec()).await?;
    let mut s = Series {
        setting,
        rates: Vec::with_capacity(syncs),
        used: Vec::with_capacity(syncs),
        all_applied: true,
    };
    for i in 0..syncs {
        if i > 0 {
            path.clear().await?;
        }
        let used = path.settings();
        let r = path.sync(&mut |_| {}).await?;
        // The table was empty: every entry is written.
        s.all_applied &= r.applied == r.desired && r.written == entries as u64;
        s.rates
            .push(r.written as f64 / r.write.as_secs_f64().max(1e-9));
        s.used.push(used);
    }
    Ok(s)
}

/// One device profile's results.
#[derive(Debug, Clone)]
pub struct ProfileResult {
    pub profile: String,
    pub statics: Vec<Series>,
    pub auto: Series,
    /// Auto's settled rate: the median of its last this-many syncs.
    pub auto_last: usize,
}

impl ProfileResult {
    pub fn best_static(&self) -> Option<&Series> {
        self.statics.iter().max_by(|a, b| {
            a.settled_rate(usize::MAX)
                .total_cmp(&b.settled_rate(usize::MAX))
        })
    }

    /// Auto's settled rate over the best static one's.
    pub fn auto_ratio(&self) -> f64 {
        let best = self
            .best_static()
            .map(|s| s.settled_rate(usize::MAX))
            .unwrap_or(0.0);
        if best > 0.0 {
            self.auto.settled_rate(self.auto_last) / best
        } else {
            0.0
        }
    }
}

/// The side-by-side tables (markdown), one per profile.
pub fn table(results: &[ProfileResult]) -> String {
    let mut out = String::new();
    for r in results {
        let _ = writeln!(out, "### Device profile `{}`\n", r.profile);
        let _ = writeln!(
            out,
            "| setting (batch × in flight) | syncs | write entries/s, median [min–max] | all applied |"
        );
        let _ = writeln!(out, "|---|---:|---:|---|");
        let best = r.best_static().map(|s| s.setting);
        for s in &r.statics {
            let mark = if Some(s.setting) == best {
                " **best**"
            } else {
                ""
            };
            let (lo, hi) = min_max(&s.rates);
            let _ = writeln!(
                out,
                "| {}{mark} | {} | {} [{}–{}] | {} |",
                s.setting.label(),
                s.rates.len(),
                thousands(s.settled_rate(usize::MAX)),
                thousands(lo),
                thousands(hi),
                yes(s.all_applied)
            );
        }
        let a = &r.auto;
        let (b, k) = a.used.last().copied().unwrap_or((0, 0));
        let _ = writeln!(
            out,
            "| Auto, first sync | 1 | {} | {} |",
            thousands(a.rates.first().copied().unwrap_or(0.0)),
            yes(a.all_applied)
        );
        let _ = writeln!(
            out,
            "| Auto, last {} of {} syncs (at {} × {k}) | {} | {} | {} |",
            r.auto_last.min(a.rates.len()),
            a.rates.len(),
            thousands(b as f64),
            r.auto_last.min(a.rates.len()),
            thousands(a.settled_rate(r.auto_last)),
            yes(a.all_applied)
        );
        let _ = writeln!(
            out,
            "\nAuto settled / best static: **{:.0} %** (goal ≥ 90 %). Auto's settings sync by sync: {}\n",
            100.0 * r.auto_ratio(),
            a.used
                .iter()
                .map(|(b, k)| format!("{b}×{k}"))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    out
}

fn min_max(v: &[f64]) -> (f64, f64) {
    v.iter().fold((f64::INFINITY, 0.0f64), |(lo, hi), &x| {
        (lo.min(x), hi.max(x))
    })
}

fn yes(b: bool) -> &'static str {
    if b { "yes" } else { "**no**" }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn series(setting: Setting, rates: &[f64]) -> Series {
        Series {
            setting,
            rates: rates.to_vec(),
            used: rates.iter().map(|_| (1024, 4)).collect(),
            all_applied: true,
        }
    }

    #[test]
    fn auto_is_compared_on_its_last_syncs_with_the_best_static_median() {
        let r = ProfileResult {
            profile: "none".into(),
            statics: vec![
                series(
                    Setting::Static {
                        batch: 1000,
                        in_flight: 1,
                    },
                    &[100.0, 120.0, 110.0],
                ),
                series(
                    Setting::Static {
                        batch: 10_000,
                        in_flight: 4,
                    },
                    &[200.0, 180.0, 220.0],
                ),
            ],
            // Slow while it explores, then at the best static's rate.
            auto: series(Setting::Auto, &[50.0, 60.0, 190.0, 185.0, 195.0]),
            auto_last: 3,
        };
        assert_eq!(
            r.best_static().map(|s| s.setting),
            Some(Setting::Static {
                batch: 10_000,
                in_flight: 4
            })
        );
        assert!((r.auto_ratio() - 190.0 / 200.0).abs() < 1e-9);
        let t = table(&[r]);
        assert!(
            t.contains("| 10,000 × 4 **best** | 3 | 200 [180–220] | yes |"),
            "{t}"
        );
        assert!(t.contains("Auto settled / best static: **95 %**"), "{t}");
    }

    #[test]
    fn the_write_spec_says_auto_or_the_numbers() {
        assert_eq!(
            Setting::Auto.write_spec(),
            serde_json::json!({"batchSize": "Auto", "maxInFlight": "Auto"})
        );
        let s = Setting::Static {
            batch: 300,
            in_flight: 2,
        };
        assert_eq!(s.write_spec()["batchSize"], 300);
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[]), 0.0);
    }
}
