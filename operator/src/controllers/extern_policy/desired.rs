//! The build stage, pure: what the extern runtime is asked for
//! ([`desired`]), whether what it reports back is that ([`in_force`]),
//! and the measurements as status shows them ([`Measured`], rounded so
//! steady traffic does not rewrite status on every poll).

use p4fleet_crds::{AsyncExternPolicySpec, ExternExecutor, ExternMode, SuspendMethod};
use p4fleet_proto::externs as pb;

/// The SetPolicy list for a spec. Unset optional fields stay unspecified
/// (0): the target fills in its defaults and reports them back.
pub fn desired(spec: &AsyncExternPolicySpec) -> Vec<pb::ExternPolicy> {
    spec.externs
        .iter()
        .map(|e| pb::ExternPolicy {
            name: e.name.clone(),
            mode: mode(e.mode) as i32,
            suspend: e
                .suspend
                .map_or(pb::SuspendMethod::Unspecified, |s| match s {
                    SuspendMethod::Context => pb::SuspendMethod::Context,
                    SuspendMethod::PacketDescriptor => pb::SuspendMethod::PacketDescriptor,
                }) as i32,
            executor: e.executor.map_or(pb::Executor::Unspecified, |x| match x {
                ExternExecutor::InlineCryptoDevice => pb::Executor::InlineCryptoDevice,
                ExternExecutor::DedicatedCores => pb::Executor::DedicatedCores,
                ExternExecutor::Accelerator => pb::Executor::Accelerator,
            }) as i32,
            cores: e.cores.unwrap_or(0),
            burst_size: e.burst_size,
            context_pool: e.context_pool,
            queue_depth: e.queue_depth,
        })
        .collect()
}

fn mode(m: ExternMode) -> pb::Mode {
    match m {
        ExternMode::Sync => pb::Mode::Sync,
        ExternMode::Async => pb::Mode::Async,
        ExternMode::Skip => pb::Mode::Skip,
    }
}

/// Names of the wanted externs the target does not have.
pub fn missing(wanted: &[pb::ExternPolicy], on_target: &[pb::ExternInfo]) -> Vec<String> {
    wanted
        .iter()
        .filter(|w| !on_target.iter().any(|x| x.name == w.name))
        .map(|w| w.name.clone())
        .collect()
}

/// Whether the effective policy (as the target reports it) is the wanted
/// one: every wanted extern in its mode, and for Async every setting the
/// spec fixed (unspecified ones are the target's to choose). Externs the
/// spec does not name must run Sync (SetPolicy resets them).
pub fn in_force(wanted: &[pb::ExternPolicy], effective: &[pb::ExternPolicy]) -> bool {
    let same = |want: u32, got: u32| want == 0 || want == got;
    let wanted_ok = wanted.iter().all(|w| {
        effective.iter().any(|e| {
            e.name == w.name
                && e.mode == w.mode
                && (w.mode != pb::Mode::Async as i32
                    || (same(w.suspend as u32, e.suspend as u32)
                        && same(w.executor as u32, e.executor as u32)
                        && same(w.cores, e.cores)
                        && same(w.burst_size, e.burst_size)
                        && same(w.context_pool, e.context_pool)
                        && same(w.queue_depth, e.queue_depth)))
        })
    });
    let others_sync = effective
        .iter()
        .filter(|e| !wanted.iter().any(|w| w.name == e.name))
        .all(|e| e.mode == pb::Mode::Sync as i32);
    wanted_ok && others_sync
}

/// `(mode, modes)` of the status: the one mode all externs run in (or
/// `Mixed`), and `name=Mode` per extern, in the target's order.
pub fn mode_summary(effective: &[pb::ExternPolicy]) -> (String, String) {
    let name = |m: i32| match pb::Mode::try_from(m) {
        Ok(pb::Mode::Sync) => "Sync",
        Ok(pb::Mode::Async) => "Async",
        Ok(pb::Mode::Skip) => "Skip",
        _ => "Unknown",
    };
    let modes: Vec<String> = effective
        .iter()
        .map(|e| format!("{}={}", e.name, name(e.mode)))
        .collect();
    let first = effective.first().map_or("None", |e| name(e.mode));
    let mode = if effective.iter().all(|e| name(e.mode) == first) {
        first
    } else {
        "Mixed"
    };
    (mode.to_string(), modes.join(","))
}

/// Measurements as status shows them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Measured {
    pub packets_per_second: u64,
    pub async_ops_per_second: u64,
    pub drops: u64,
}

impl Measured {
    /// From the target's stats: rates rounded to two significant digits;
    /// drops are the extern drops (context pool exhausted, queue full)
    /// since the data plane started.
    pub fn from_stats(s: &pb::GetStatsResponse) -> Measured {
        let pps = s.pipeline.as_ref().map_or(0.0, |p| p.packets_per_second);
        let ops: f64 = s.externs.iter().map(|x| x.async_ops_per_second).sum();
        let drops = s
            .pipeline
            .as_ref()
            .and_then(|p| p.drops.as_ref())
            .map_or(0, |d| d.pool_exhausted + d.queue_full);
        Measured {
            packets_per_second: round2(pps),
            async_ops_per_second: round2(ops),
            drops,
        }
    }
}

/// `x` rounded to two significant digits (98,765 -> 99,000; 0.4 -> 0).
pub fn round2(x: f64) -> u64 {
    if !x.is_finite() || x < 0.5 {
        return 0;
    }
    let digits = x.log10().floor() as i32;
    let unit = 10f64.powi((digits - 1).max(0));
    ((x / unit).round() * unit) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> AsyncExternPolicySpec {
        serde_json::from_value(serde_json::json!({
            "virtualSwitchRef": "l2",
            "externs": [
                {"name": "async_encrypt", "mode": "Async", "executor": "DedicatedCores", "cores": 1},
                {"name": "async_decrypt", "mode": "Skip"}
            ]
        }))
        .unwrap()
    }

    fn effective(enc_mode: pb::Mode, cores: u32) -> Vec<pb::ExternPolicy> {
        vec![
            pb::ExternPolicy {
                name: "async_encrypt".into(),
                mode: enc_mode as i32,
                suspend: pb::SuspendMethod::PacketDescriptor as i32,
                executor: pb::Executor::DedicatedCores as i32,
                cores,
                burst_size: 64,
                context_pool: 1023,
                queue_depth: 1024,
            },
            pb::ExternPolicy {
                name: "async_decrypt".into(),
                mode: pb::Mode::Skip as i32,
                ..Default::default()
            },
        ]
    }

    #[test]
    fn the_request_carries_what_the_spec_fixed() {
        let d = desired(&spec());
        assert_eq!(d[0].mode, pb::Mode::Async as i32);
        assert_eq!(d[0].executor, pb::Executor::DedicatedCores as i32);
        assert_eq!(d[0].suspend, pb::SuspendMethod::Unspecified as i32);
        assert_eq!(
            (d[0].cores, d[0].burst_size, d[0].context_pool),
            (1, 64, 1023)
        );
        assert_eq!(d[1].mode, pb::Mode::Skip as i32);
        assert_eq!(d[1].executor, pb::Executor::Unspecified as i32);
    }

    #[test]
    fn in_force_only_when_the_target_reports_it() {
        let d = desired(&spec());
        assert!(in_force(&d, &effective(pb::Mode::Async, 1)));
        // The target's default suspend method is fine: the spec left it open.
        assert!(!in_force(&d, &effective(pb::Mode::Sync, 1)));
        assert!(!in_force(&d, &effective(pb::Mode::Async, 2)));
        assert!(!in_force(&d, &effective(pb::Mode::Async, 1)[..1]));
        // An extern the spec does not name must be back to Sync.
        let mut extra = effective(pb::Mode::Async, 1);
        extra.push(pb::ExternPolicy {
            name: "other".into(),
            mode: pb::Mode::Skip as i32,
            ..Default::default()
        });
        assert!(!in_force(&d, &extra));
        extra[2].mode = pb::Mode::Sync as i32;
        assert!(in_force(&d, &extra));
    }

    #[test]
    fn missing_names_the_externs_the_target_lacks() {
        let on = vec![pb::ExternInfo {
            name: "async_encrypt".into(),
            ..Default::default()
        }];
        assert_eq!(missing(&desired(&spec()), &on), ["async_decrypt"]);
    }

    #[test]
    fn modes_are_summarized() {
        let (mode, modes) = mode_summary(&effective(pb::Mode::Async, 1));
        assert_eq!(mode, "Mixed");
        assert_eq!(modes, "async_encrypt=Async,async_decrypt=Skip");
        let (mode, _) = mode_summary(&effective(pb::Mode::Skip, 1));
        assert_eq!(mode, "Skip");
    }

    #[test]
    fn rates_round_to_two_significant_digits() {
        assert_eq!(round2(98_765.0), 99_000);
        assert_eq!(round2(100_412.0), 100_000);
        assert_eq!(round2(99_612.0), 100_000);
        assert_eq!(round2(7.4), 7);
        assert_eq!(round2(0.4), 0);
        assert_eq!(round2(f64::NAN), 0);
        // Steady traffic with jitter shows one value.
        let a = round2(100_000.0 * 1.004);
        let b = round2(100_000.0 * 0.997);
        assert_eq!(a, b);
    }

    #[test]
    fn measured_sums_extern_rates_and_drops() {
        let s = pb::GetStatsResponse {
            pipeline: Some(pb::PipelineStats {
                packets_per_second: 12_345.6,
                drops: Some(pb::Drops {
                    pool_exhausted: 5,
                    queue_full: 2,
                    program: 100,
                    ..Default::default()
                }),
                ..Default::default()
            }),
            externs: vec![
                pb::ExternStats {
                    async_ops_per_second: 6_000.0,
                    ..Default::default()
                },
                pb::ExternStats {
                    async_ops_per_second: 6_100.0,
                    ..Default::default()
                },
            ],
        };
        assert_eq!(
            Measured::from_stats(&s),
            Measured {
                packets_per_second: 12_000,
                async_ops_per_second: 12_000,
                drops: 7
            }
        );
    }
}
