//! Status, pure: where the VirtualSwitch runs and what is loaded, the
//! Event of a push, and when to come back.

use std::time::Duration;

use p4fleet_crds::condition_types::{PIPELINE_LOADED, READY, SCHEDULED};
use p4fleet_crds::{Condition, LastSwap, UpdateStrategyType, VirtualSwitch, VirtualSwitchStatus};

use super::pipeline::NotReady;
use super::placement::PlacementError;
use crate::artifacts;
use crate::retries::Refusal;
use crate::status::{EventNote, ready_from};

/// What placing and loading achieved.
#[derive(Debug)]
pub enum Outcome {
    Unplaced(PlacementError),
    Placed {
        switch: String,
        slot: u32,
        pipeline: Pipeline,
    },
}

/// What became of the program on a placed VirtualSwitch.
#[derive(Debug)]
pub enum Pipeline {
    NotReady(NotReady),
    /// The load failed (or, held until its backoff is due, failed last
    /// time): in the words of the condition.
    Failed(Refusal),
    /// Running `digest`; `pushed` is how long the push took when this
    /// reconcile pushed it (None: the device already ran it).
    Loaded {
        digest: String,
        pushed: Option<Duration>,
        /// A program change of a running slot the device confirmed.
        swap: Option<Swap>,
    },
}

/// A swap the device confirmed: from which digest, how long the device
/// took, when it was read back (RFC 3339).
#[derive(Debug, Clone, PartialEq)]
pub struct Swap {
    pub from_digest: Option<String>,
    /// What was done to the slot (not what the spec asked of a slot that
    /// was empty).
    pub strategy: UpdateStrategyType,
    pub device: Duration,
    pub at: String,
    /// P4Runtime: what the change did to the device's entries.
    pub update: Option<super::hitless::Update>,
}

/// The status to write, the Event to publish after it, when to come back.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    pub status: VirtualSwitchStatus,
    pub event: Option<EventNote>,
    pub requeue: Duration,
}

/// Computes the [`Report`] of one reconcile of `vs`: back after `resync`
/// when loaded, after `retry` (the failed step's backoff) when not.
pub fn report(vs: &VirtualSwitch, outcome: &Outcome, resync: Duration, retry: Duration) -> Report {
    let old = vs.status.as_ref();
    let mut st = VirtualSwitchStatus {
        observed_generation: vs.metadata.generation,
        loaded_digest: old.and_then(|s| s.loaded_digest.clone()),
        loaded_short_digest: old.and_then(|s| s.loaded_short_digest.clone()),
        last_swap_millis: old.and_then(|s| s.last_swap_millis),
        last_swap: old.and_then(|s| s.last_swap.clone()),
        ..Default::default()
    };
    let mut requeue = resync;
    let mut event = None;
    let (scheduled, loaded) = match outcome {
        Outcome::Unplaced(e) => {
            requeue = retry;
            st.loaded_digest = None;
            st.loaded_short_digest = None;
            (
                Condition::new(SCHEDULED, false, e.reason(), e.to_string()),
                Condition::unknown(PIPELINE_LOADED, "NotScheduled", "not placed on a Switch"),
            )
        }
        Outcome::Placed {
            switch,
            slot,
            pipeline,
        } => {
            st.switch = Some(switch.clone());
            st.slot = Some(*slot);
            let scheduled = Condition::new(
                SCHEDULED,
                true,
                "Scheduled",
                format!("{switch} slot {slot}"),
            );
            let program = &vs.spec.program_ref;
            let loaded = match pipeline {
                Pipeline::NotReady(n) => {
                    requeue = retry;
                    n.condition()
                }
                Pipeline::Failed(e) => {
                    requeue = retry;
                    Condition::new(PIPELINE_LOADED, false, e.reason, e.message.clone())
                }
                Pipeline::Loaded {
                    digest,
                    pushed,
                    swap,
                } => {
                    let short = artifacts::short_digest(digest);
                    let mut fallback = None;
                    if let Some(sw) = swap {
                        let mut last = LastSwap {
                            at: sw.at.clone(),
                            from_digest: sw.from_digest.clone(),
                            to_digest: digest.clone(),
                            strategy: sw.strategy,
                            duration_millis: sw.device.as_millis() as u64,
                            ..Default::default()
                        };
                        if let Some(u) = &sw.update {
                            super::hitless::record(&mut last, u);
                            fallback = super::hitless::fallback_note(u, program);
                        }
                        st.last_swap = Some(last);
                    }
                    if let Some(took) = pushed {
                        let ms = took.as_millis() as u64;
                        st.last_swap_millis = Some(ms);
                        // A swap says what happened to the slot, and that
                        // it was this slot alone.
                        // P4Runtime swaps carry an `update` (what the
                        // device kept); FPGA slot loads do not.
                        let how = match swap.as_ref().map(|s| (s.strategy, s.update.is_some())) {
                            None => "",
                            Some((UpdateStrategyType::HotSwap, _)) => {
                                " (HotSwap: loaded over the old program; other slots untouched)"
                            }
                            Some((UpdateStrategyType::Recreate, false)) => {
                                " (Recreate: slot unloaded, then loaded, isolation and port map set again; other slots untouched)"
                            }
                            Some((UpdateStrategyType::Recreate, true)) => {
                                " (Recreate: the slot's device replaced its program, every entry cleared; other slots untouched)"
                            }
                        };
                        let note = format!(
                            "loaded {program} ({short}) on {switch} slot {slot} in {ms} ms{how}"
                        );
                        event = Some(match fallback {
                            // The target could not keep unchanged tables:
                            // every entry is written again.
                            Some(why) => EventNote::warning(
                                "ReconcileUnsupported",
                                "SetPipeline",
                                format!("{note}; {why}"),
                            ),
                            None => EventNote::normal("PipelineLoaded", "SetPipeline", note),
                        });
                    }
                    st.loaded_short_digest = Some(short);
                    st.loaded_digest = Some(digest.clone());
                    let message = format!("{program} loaded on {switch} slot {slot}");
                    Condition::new(PIPELINE_LOADED, true, "Loaded", message)
                }
            };
            (scheduled, loaded)
        }
    };
    let ready = ready_from(&[&scheduled, &loaded], READY, "pipeline loaded");
    st.conditions = vec![scheduled, loaded, ready];
    Report {
        status: st,
        event,
        requeue,
    }
}

#[cfg(test)]
mod tests {
    use super::super::pipeline::LoadError;
    use super::*;
    use p4fleet_crds::ConditionStatus::{self, False, True, Unknown};
    use p4fleet_crds::{VirtualSwitchSpec, find_condition};

    const RESYNC: Duration = Duration::from_secs(60);
    const RETRY: Duration = Duration::from_secs(4);
    const DIGEST: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    fn vs(old: Option<VirtualSwitchStatus>) -> VirtualSwitch {
        let spec: VirtualSwitchSpec =
            serde_json::from_value(serde_json::json!({"programRef": "fw", "switchRef": "sw"}))
                .unwrap();
        let mut v = VirtualSwitch::new("v", spec);
        v.metadata.generation = Some(2);
        v.status = old;
        v
    }

    fn placed(pipeline: Pipeline) -> Outcome {
        Outcome::Placed {
            switch: "sw".into(),
            slot: 1,
            pipeline,
        }
    }

    fn state<'a>(r: &'a Report, t: &str) -> (ConditionStatus, &'a str) {
        let c = find_condition(&r.status.conditions, t).unwrap();
        (c.status, c.reason.as_str())
    }

    /// The report for a VirtualSwitch without status placed on sw slot 1.
    fn fresh(pipeline: Pipeline) -> Report {
        report(&vs(None), &placed(pipeline), RESYNC, RETRY)
    }

    fn loaded_before() -> VirtualSwitchStatus {
        VirtualSwitchStatus {
            loaded_digest: Some("old".into()),
            loaded_short_digest: Some("old".into()),
            last_swap_millis: Some(7),
            ..Default::default()
        }
    }

    #[test]
    fn a_push_is_reported_with_its_duration_and_an_event() {
        let pushed = Some(Duration::from_millis(42));
        let r = report(
            &vs(Some(loaded_before())),
            &placed(Pipeline::Loaded {
                digest: DIGEST.into(),
                pushed,
                swap: Some(Swap {
                    from_digest: Some("old".into()),
                    strategy: UpdateStrategyType::Recreate,
                    device: Duration::from_millis(30),
                    at: "2026-11-22T21:00:00Z".into(),
                    update: None,
                }),
            }),
            RESYNC,
            RETRY,
        );
        let st = &r.status;
        assert_eq!((st.switch.as_deref(), st.slot), (Some("sw"), Some(1)));
        assert_eq!(st.loaded_digest.as_deref(), Some(DIGEST));
        assert_eq!(st.loaded_short_digest.as_deref(), Some("0123456789ab"));
        assert_eq!(st.last_swap_millis, Some(42));
        let swap = st.last_swap.as_ref().unwrap();
        assert_eq!(
            (swap.from_digest.as_deref(), swap.to_digest.as_str()),
            (Some("old"), DIGEST)
        );
        assert_eq!(swap.duration_millis, 30);
        // The strategy done, not the spec's (HotSwap here).
        assert_eq!(swap.strategy, UpdateStrategyType::Recreate);
        assert_eq!(st.observed_generation, Some(2));
        assert!(
            st.conditions.iter().all(|c| c.is_true()),
            "{:?}",
            st.conditions
        );
        let ev = r.event.unwrap();
        assert_eq!(ev.reason, "PipelineLoaded");
        assert_eq!(
            ev.note,
            "loaded fw (0123456789ab) on sw slot 1 in 42 ms (Recreate: slot unloaded, then loaded, isolation and port map set again; other slots untouched)"
        );
        assert_eq!(r.requeue, RESYNC);

        // Already running: no push, no Event, the last swap time stays.
        let r = report(
            &vs(Some(loaded_before())),
            &placed(Pipeline::Loaded {
                digest: DIGEST.into(),
                pushed: None,
                swap: None,
            }),
            RESYNC,
            RETRY,
        );
        assert_eq!(r.status.last_swap_millis, Some(7));
        assert!(r.event.is_none());
    }

    #[test]
    fn a_recreate_on_a_p4runtime_slot_says_every_entry_was_cleared() {
        let r = report(
            &vs(Some(loaded_before())),
            &placed(Pipeline::Loaded {
                digest: DIGEST.into(),
                pushed: Some(Duration::from_millis(9)),
                swap: Some(Swap {
                    from_digest: Some("old".into()),
                    strategy: UpdateStrategyType::Recreate,
                    device: Duration::from_millis(9),
                    at: "2026-11-23T06:00:00Z".into(),
                    update: Some(super::super::hitless::Update {
                        mode: p4fleet_crds::ProgramUpdateMode::Replaced,
                        entries_kept: Some(0),
                        tables_kept: vec![],
                        fallback: None,
                    }),
                }),
            }),
            RESYNC,
            RETRY,
        );
        let swap = r.status.last_swap.as_ref().unwrap();
        assert_eq!(swap.strategy, UpdateStrategyType::Recreate);
        assert_eq!(swap.mode, Some(p4fleet_crds::ProgramUpdateMode::Replaced));
        assert_eq!(swap.entries_kept, Some(0));
        let ev = r.event.unwrap();
        assert_eq!(ev.reason, "PipelineLoaded");
        assert_eq!(
            ev.note,
            "loaded fw (0123456789ab) on sw slot 1 in 9 ms (Recreate: the slot's device replaced its program, every entry cleared; other slots untouched)"
        );
    }

    #[test]
    fn unplaced_clears_what_was_loaded_and_retries() {
        let e = PlacementError::Unschedulable {
            candidates: 1,
            unfit: vec![(
                "sw".into(),
                vec![super::super::placement::Unfit::NoFreeSlot],
            )],
        };
        let r = report(
            &vs(Some(loaded_before())),
            &Outcome::Unplaced(e),
            RESYNC,
            RETRY,
        );
        assert_eq!(state(&r, SCHEDULED), (False, "Unschedulable"));
        assert_eq!(
            find_condition(&r.status.conditions, SCHEDULED)
                .unwrap()
                .message,
            "0/1 switches: 1 no free slot"
        );
        assert_eq!(state(&r, PIPELINE_LOADED), (Unknown, "NotScheduled"));
        assert_eq!(state(&r, READY), (False, "Unschedulable"));
        assert_eq!(r.status.loaded_digest, None);
        assert_eq!(r.status.switch, None);
        assert_eq!(r.requeue, RETRY);
    }

    #[test]
    fn a_program_not_ready_or_a_failed_load_is_retried() {
        let r = fresh(Pipeline::NotReady(NotReady::Unready("fw".into())));
        assert_eq!(state(&r, PIPELINE_LOADED), (False, "ProgramNotReady"));
        assert_eq!(state(&r, SCHEDULED), (True, "Scheduled"));
        assert_eq!(r.requeue, RETRY);

        let missing = super::super::pipeline::TofinoArtifactError::Missing {
            program: "fw".into(),
            switch: "sw".into(),
        };
        let failed = |e: LoadError| Pipeline::Failed(e.refusal());
        let r = fresh(failed(LoadError::MissingTofinoArtifacts(missing)));
        assert_eq!(state(&r, READY), (False, "MissingTofinoArtifacts"));
        let unreachable = p4fleet_client::Error::Unsupported("x");
        let r = fresh(failed(LoadError::Device(unreachable)));
        assert_eq!(state(&r, PIPELINE_LOADED), (False, "LoadFailed"));
        assert_eq!(r.requeue, RETRY);
    }
}
