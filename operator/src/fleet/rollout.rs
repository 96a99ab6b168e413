//! Staged rollouts of a P4Program's revisions, pure: the order in which
//! VirtualSwitches move ([`order`]), how many each step moves
//! ([`plan`]), the health gate from observed facts ([`checks`]), and the
//! state machine ([`advance`]) that takes the rollout's status as it is in
//! the API and what is observed now, and returns the next status and the
//! revision each VirtualSwitch is to run. Everything it needs to resume is
//! in that status, so an operator that restarts (or a new leader) moves
//! no VirtualSwitch twice and skips none. docs/rollouts.md has the model.

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use chrono::{DateTime, Utc};
use kube::ResourceExt;
use p4fleet_crds::{
    Condition, ConditionStatus, GateFailure, MovedState, MovedSwitch, P4ProgramStatus, Rollout,
    RolloutPhase, RolloutRevision, RolloutStatus, RolloutStrategy, Switch, TableEntrySet,
    VirtualSwitch, find_condition,
};

use super::revisions::Kept;
use crate::artifacts::short_digest;

/// Label of a VirtualSwitch that places it in the rollout order: an
/// integer, smaller first; without one (or not an integer) it comes after
/// every one that has one. Ties by name.
pub const ORDER_LABEL: &str = "p4fleet.dev/rollout-order";
/// Annotation on a P4Program that passes an indefinite pause:
/// `<revision>/<step>`, e.g. `7/2` resumes revision 7's rollout at its
/// step 2 (0-based). Naming both keeps it from passing a later rollout's
/// pause when it stays in Git.
pub const RESUME_ANNOTATION: &str = "p4fleet.dev/rollout-resume";
/// Annotation on a P4Program that tries a rolled-back revision again:
/// `<revision>@<the rollback's finishedAt>`, e.g.
/// `4@2026-11-29T10:00:00.123Z`. Naming that rollback makes it one retry:
/// left in Git, it does not retry again after the retry's own rollback.
pub const RETRY_ANNOTATION: &str = "p4fleet.dev/rollout-retry";
/// `spec.rollout.maxUnavailable` when not given.
pub const DEFAULT_MAX_UNAVAILABLE: u32 = 1;
/// `spec.rollout.progressDeadlineSeconds` when not given.
pub const DEFAULT_PROGRESS_DEADLINE: u32 = 600;

/// A VirtualSwitch running the program, as the rollout sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct Member {
    pub name: String,
    /// Its [`ORDER_LABEL`], if any.
    pub order: Option<String>,
    /// The Switch it runs on.
    pub switch: Option<String>,
    pub observed: Observed,
}

/// What the gate looks at, as observed now.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Observed {
    /// `status.loadedDigest`.
    pub loaded_digest: Option<String>,
    /// Its `PipelineLoaded` condition.
    pub pipeline: PipelineFact,
    /// The TableEntrySets that fill it.
    pub sets: Vec<SetFact>,
    /// Its Switch's `Reachable` (None: not known).
    pub reachable: Option<bool>,
    /// Data-plane packets/s, where the target reports it.
    pub rate: Rate,
}

/// A member's data-plane rate at one look of the gate.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub enum Rate {
    /// The target reports none (a Bmv2 or Tofino program without a
    /// packet-counting direct counter), or it was not asked.
    #[default]
    NotReported,
    /// The target reports one, but its device did not answer this look:
    /// a member is not moved without the figure to compare with later.
    Unanswered,
    PacketsPerSecond(u64),
}

impl Rate {
    /// From a throughput sample's answer for one member: `None` when it
    /// was not asked, `Some(None)` when its device did not answer.
    pub fn sampled(answer: Option<&Option<u64>>) -> Rate {
        match answer {
            None => Rate::NotReported,
            Some(None) => Rate::Unanswered,
            Some(Some(pps)) => Rate::PacketsPerSecond(*pps),
        }
    }

    pub fn figure(self) -> Option<u64> {
        match self {
            Rate::PacketsPerSecond(pps) => Some(pps),
            Rate::NotReported | Rate::Unanswered => None,
        }
    }
}

/// A VirtualSwitch's `PipelineLoaded`.
#[derive(Debug, Clone, Default, PartialEq)]
pub enum PipelineFact {
    Loaded,
    /// Not yet (loading, waiting for its program).
    #[default]
    Pending,
    /// The device refused or failed (a reason of `PipelineLoaded=False`).
    Failed {
        reason: String,
        message: String,
    },
}

/// A TableEntrySet filling a VirtualSwitch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetFact {
    pub name: String,
    pub ready: bool,
    /// Entries the device refused.
    pub failed: u64,
    /// Synced onto the pipeline now loaded (after the VirtualSwitch moved).
    pub reapplied: bool,
}

/// What a step does, with the VirtualSwitch counts resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// After it, this many VirtualSwitches (in order) run the new revision.
    Move(usize),
    /// Wait this long; None: until resumed.
    Pause(Option<Duration>),
}

/// Why a rollout spec cannot be followed (the schema refuses most; what
/// it cannot see is named with its field).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    #[error(
        "spec.rollout.steps[{step}].pause.duration: {value:?} is not a duration such as 30s, 5m or 1h30m"
    )]
    Duration { step: usize, value: String },
    #[error(
        "spec.rollout.pinRevision: revision {pinned} no longer exists (kept: {kept}); pick a kept one or remove the pin"
    )]
    PinnedGone { pinned: i64, kept: String },
}

impl SpecError {
    /// The condition reason.
    pub fn reason(&self) -> &'static str {
        match self {
            SpecError::Duration { .. } => "InvalidRollout",
            SpecError::PinnedGone { .. } => "PinnedRevisionGone",
        }
    }
}

/// The revision to roll out: the pinned one, or the update revision.
pub fn target(
    spec: &Rollout,
    update: &RolloutRevision,
    revisions: &[Kept],
) -> Result<RolloutRevision, SpecError> {
    let Some(pinned) = spec.pin_revision else {
        return Ok(update.clone());
    };
    match revisions.iter().find(|r| r.revision == pinned) {
        Some(k) => Ok(RolloutRevision {
            revision: k.revision,
            digest: k.digest.clone(),
        }),
        None => {
            let mut kept: Vec<i64> = revisions.iter().map(|r| r.revision).collect();
            kept.sort();
            let kept: Vec<String> = kept.iter().map(i64::to_string).collect();
            Err(SpecError::PinnedGone {
                pinned,
                kept: kept.join(", "),
            })
        }
    }
}

/// A Go duration (`1h30m`, `45s`, `1.5m`, `250ms`), as the schema checks it.
pub fn parse_duration(s: &str) -> Option<Duration> {
    let mut rest = s.trim();
    if rest.is_empty() {
        return None;
    }
    if rest == "0" {
        return Some(Duration::ZERO);
    }
    let mut total = 0f64;
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let value: f64 = rest[..num_len].parse().ok()?;
        rest = &rest[num_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let secs = match &rest[..unit_len] {
            "h" => 3600.0,
            "m" => 60.0,
            "s" => 1.0,
            "ms" => 1e-3,
            "us" | "µs" => 1e-6,
            "ns" => 1e-9,
            _ => return None,
        };
        total += value * secs;
        rest = &rest[unit_len..];
    }
    Some(Duration::from_secs_f64(total))
}

/// `spec`'s steps for a fleet of `total` VirtualSwitches: counts from the
/// start of the rollout, never fewer than the step before (a percentage
/// rounds up, so 1 % of 3 moves one). AllAtOnce is one step of all.
pub fn plan(spec: &Rollout, total: usize) -> Result<Vec<Step>, SpecError> {
    if spec.strategy == RolloutStrategy::AllAtOnce || spec.steps.is_empty() {
        return Ok(vec![Step::Move(total)]);
    }
    let mut out = Vec::new();
    let mut moved = 0usize;
    for (i, s) in spec.steps.iter().enumerate() {
        let step = match (&s.switches, &s.percent, &s.pause) {
            (Some(n), _, _) => Step::Move((*n as usize).min(total)),
            (_, Some(p), _) => Step::Move((*p as usize * total).div_ceil(100)),
            (_, _, Some(pause)) => match &pause.duration {
                None => Step::Pause(None),
                Some(d) => match parse_duration(d) {
                    Some(d) => Step::Pause(Some(d)),
                    None => {
                        return Err(SpecError::Duration {
                            step: i,
                            value: d.clone(),
                        });
                    }
                },
            },
            (None, None, None) => continue,
        };
        out.push(match step {
            Step::Move(n) => {
                moved = moved.max(n);
                Step::Move(moved)
            }
            pause => pause,
        });
    }
    Ok(out)
}

/// `members` in rollout order: by [`ORDER_LABEL`] (an integer, smaller
/// first; without one after all that have one), then by name.
pub fn order(members: &[Member]) -> Vec<&Member> {
    let mut out: Vec<&Member> = members.iter().collect();
    let key = |m: &Member| {
        m.order
            .as_deref()
            .and_then(|o| o.trim().parse::<i64>().ok())
    };
    out.sort_by(|a, b| match (key(a), key(b)) {
        (Some(x), Some(y)) => x.cmp(&y).then_with(|| a.name.cmp(&b.name)),
        (Some(_), None) => std::cmp::Ordering::Less,
        (None, Some(_)) => std::cmp::Ordering::Greater,
        (None, None) => a.name.cmp(&b.name),
    });
    out
}

/// One check of the gate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum CheckKind {
    PipelineLoaded,
    EntriesReapplied,
    SwitchReachable,
    Throughput,
    ProgressDeadline,
}

impl CheckKind {
    pub fn name(self) -> &'static str {
        match self {
            CheckKind::PipelineLoaded => "PipelineLoaded",
            CheckKind::EntriesReapplied => "EntriesReapplied",
            CheckKind::SwitchReachable => "SwitchReachable",
            CheckKind::Throughput => "Throughput",
            CheckKind::ProgressDeadline => "ProgressDeadline",
        }
    }
}

/// A check's outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Pass,
    /// Not yet known (loading, syncing, window not over).
    Pending,
    Fail,
}

/// One check of one VirtualSwitch, with what it compared.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    pub kind: CheckKind,
    pub verdict: Verdict,
    pub compared: String,
}

fn check(kind: CheckKind, verdict: Verdict, compared: String) -> Check {
    Check {
        kind,
        verdict,
        compared,
    }
}

/// The gate's checks of one moved VirtualSwitch `m` that should run
/// `target`. The throughput check compares its packets/s now with
/// `before` (when it was moved) once the analysis window is `over`.
pub fn checks(
    m: &Member,
    target: &RolloutRevision,
    min_ratio: Option<f64>,
    before: Option<u64>,
    over: bool,
) -> Vec<Check> {
    use CheckKind::*;
    use Verdict::*;
    let o = &m.observed;
    let want = format!(
        "revision {} ({})",
        target.revision,
        short_digest(&target.digest)
    );
    let runs = o.loaded_digest.as_deref() == Some(target.digest.as_str());
    let loaded = match (&o.pipeline, runs) {
        (PipelineFact::Failed { reason, message }, _) => check(
            PipelineLoaded,
            Fail,
            format!("PipelineLoaded=False ({reason}) loading {want}: {message}"),
        ),
        (PipelineFact::Loaded, true) => check(PipelineLoaded, Pass, format!("loaded {want}")),
        _ => {
            let now = o
                .loaded_digest
                .as_deref()
                .map_or("none".into(), short_digest);
            check(
                PipelineLoaded,
                Pending,
                format!("loaded {now}, want {want}"),
            )
        }
    };
    let reapplied = if loaded.verdict != Pass {
        check(EntriesReapplied, Pending, "after the pipeline".into())
    } else if let Some(s) = o.sets.iter().find(|s| s.failed > 0) {
        let n = s.failed;
        check(
            EntriesReapplied,
            Fail,
            format!("TableEntrySet {}: {n} entries failed", s.name),
        )
    } else if let Some(s) = o.sets.iter().find(|s| !s.ready || !s.reapplied) {
        check(
            EntriesReapplied,
            Pending,
            format!("TableEntrySet {} not re-applied and Ready yet", s.name),
        )
    } else {
        let n = o.sets.len();
        check(
            EntriesReapplied,
            Pass,
            format!("{n} TableEntrySets re-applied, 0 failed, Ready"),
        )
    };
    let sw = m.switch.as_deref().unwrap_or("(none)");
    let reachable = match o.reachable {
        Some(true) => check(SwitchReachable, Pass, format!("Switch {sw} Reachable")),
        Some(false) => check(SwitchReachable, Fail, format!("Switch {sw} not Reachable")),
        None => check(
            SwitchReachable,
            Pending,
            format!("Switch {sw} not probed yet"),
        ),
    };
    let throughput = match (min_ratio, before, o.rate.figure()) {
        (None, ..) => check(
            Throughput,
            Pass,
            "not checked (no minThroughputRatio)".into(),
        ),
        (Some(_), None, _) => check(
            Throughput,
            Pass,
            "not reported by the target before the step".into(),
        ),
        (Some(_), Some(_), None) => {
            check(Throughput, Pending, "not reported since the step".into())
        }
        (Some(r), Some(b), Some(now)) => {
            let floor = r * b as f64;
            let said = format!("{now} packets/s, at least {r} × {b} packets/s before the step");
            match (now as f64 >= floor, over) {
                (true, true) => check(Throughput, Pass, said),
                (_, false) => check(Throughput, Pending, format!("{said}, at the window's end")),
                (false, true) => check(Throughput, Fail, said),
            }
        }
    };
    vec![loaded, reapplied, reachable, throughput]
}

/// Whether a look at a rollout needs the data-plane rates: a
/// `minThroughputRatio` is set and the rollout to content `digest` may
/// move or judge a member (not yet started, moving, paused, or rolled
/// back and retried by `retry`). A rollout at rest needs none: asking
/// every device at each resync would cost a round of calls for nothing.
pub fn gauges_throughput(
    spec: &Rollout,
    previous: Option<&RolloutStatus>,
    digest: &str,
    retry: Option<&Retry>,
) -> bool {
    let ratio = spec
        .analysis
        .as_ref()
        .is_some_and(|a| a.min_throughput_ratio.is_some());
    let at_rest = previous.is_some_and(|r| {
        r.to.digest == digest
            && match r.phase {
                RolloutPhase::Completed => true,
                RolloutPhase::RolledBack => !retries(retry, r),
                RolloutPhase::Progressing | RolloutPhase::Paused => false,
            }
    });
    ratio && spec.strategy == RolloutStrategy::Canary && !at_rest
}

/// A resume of an indefinite pause: revision and step, from [`RESUME_ANNOTATION`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Resume {
    pub revision: i64,
    pub step: u32,
}

/// The resume an annotation value `7/2` says; None for anything else.
pub fn resume(value: &str) -> Option<Resume> {
    let (r, s) = value.trim().split_once('/')?;
    Some(Resume {
        revision: r.trim().parse().ok()?,
        step: s.trim().parse().ok()?,
    })
}

/// A retry of a rolled-back revision, from [`RETRY_ANNOTATION`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Retry {
    pub revision: i64,
    /// The `finishedAt` of the rollback it retries.
    pub rolled_back_at: String,
}

/// The retry an annotation value `4@2026-11-29T10:00:00.123Z` says; None
/// for anything else.
pub fn retry(value: &str) -> Option<Retry> {
    let (r, at) = value.trim().split_once('@')?;
    Some(Retry {
        revision: r.trim().parse().ok()?,
        rolled_back_at: at.trim().to_string(),
    })
    .filter(|r| !r.rolled_back_at.is_empty())
}

/// Whether `retry` names the rollback `p` ended in.
pub fn retries(retry: Option<&Retry>, p: &RolloutStatus) -> bool {
    p.phase == RolloutPhase::RolledBack
        && retry.is_some_and(|r| {
            r.revision == p.to.revision && Some(&r.rolled_back_at) == p.finished_at.as_ref()
        })
}

/// What [`advance`] works from.
#[derive(Debug, Clone)]
pub struct Input<'a> {
    pub spec: &'a Rollout,
    /// The revision to roll out ([`target`]).
    pub target: RolloutRevision,
    /// Whether `target` is pinned (`spec.rollout.pinRevision`) rather
    /// than the content in force: then even a fleet at rest keeps a
    /// status naming it, which the VirtualSwitches follow.
    pub pinned: bool,
    /// The revision the fleet ran before (the last good one); None when
    /// none ran (a first rollout moves everything at once: nothing to protect).
    pub stable: Option<RolloutRevision>,
    /// The rollout's status as the API has it.
    pub previous: Option<&'a RolloutStatus>,
    /// The VirtualSwitches running the program, in any order.
    pub members: &'a [Member],
    pub resume: Option<Resume>,
    /// A retry of a rolled-back revision ([`RETRY_ANNOTATION`]).
    pub retry: Option<Retry>,
    pub now: DateTime<Utc>,
}

/// The Events' reasons ([`Note::reason`]); `RolledBack` is also the
/// P4Program's condition type while a rollout stays rolled back.
pub const STARTED: &str = "RolloutStarted";
pub const STEP_PASSED: &str = "RolloutStepPassed";
pub const COMPLETED: &str = "RolloutCompleted";
pub const ROLLED_BACK: &str = "RolledBack";

/// The `RolledBack` condition of a program whose rollout is rolled back
/// (None otherwise: a new rollout or a pin clears it). Its reason is the
/// Event's, so the transition is told once (by the note); the message
/// names the check, the VirtualSwitch and its Switch.
pub fn rolled_back_condition(st: &RolloutStatus) -> Option<Condition> {
    if st.phase != RolloutPhase::RolledBack {
        return None;
    }
    let message = match &st.failure {
        Some(f) => format!(
            "revision {} failed {} on VirtualSwitch {}{}: {}",
            st.to.revision,
            f.check,
            f.virtual_switch,
            f.switch
                .as_deref()
                .map(|s| format!(" (Switch {s})"))
                .unwrap_or_default(),
            f.message
        ),
        None => format!("revision {} was rolled back", st.to.revision),
    };
    Some(Condition::new(ROLLED_BACK, true, ROLLED_BACK, message))
}

/// Something to tell as an Event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Note {
    pub warning: bool,
    pub reason: &'static str,
    pub message: String,
}

impl Note {
    /// The Event to publish (action `Rollout`).
    pub fn event(self) -> crate::status::EventNote {
        use crate::status::EventNote;
        match self.warning {
            true => EventNote::warning(self.reason, "Rollout", self.message),
            false => EventNote::normal(self.reason, "Rollout", self.message),
        }
    }
}

/// Condition type on an object whose rollout cannot be followed (a
/// pinned revision gone, a pause it cannot read).
pub const ROLLOUT_VALID: &str = "RolloutValid";

/// How often a rollout in progress looks again without a change to wake
/// it: a backstop (changes of what the gate reads wake it; the analysis
/// window and timed pauses requeue at their end).
pub const POLL: Duration = Duration::from_secs(10);

/// How soon a member held for a figure its device did not give is asked
/// again (one throughput call takes at most 3 s).
const UNANSWERED_RETRY: Duration = Duration::from_secs(2);

/// When to look at a rollout again: the timer [`advance`] asked for, and
/// at most [`POLL`] while it progresses.
pub fn wake(asked: Option<Duration>, status: Option<&RolloutStatus>) -> Option<Duration> {
    let progressing = status.is_some_and(|r| r.phase == RolloutPhase::Progressing);
    match (asked, progressing) {
        (r, true) => Some(r.map_or(POLL, |r| r.min(POLL))),
        (r, false) => r,
    }
}

/// A Switch's `Reachable` (None: not probed yet, or Unknown).
pub fn reachable(sw: &Switch) -> Option<bool> {
    use p4fleet_crds::condition_types::REACHABLE;
    let c = find_condition(&sw.status.as_ref()?.conditions, REACHABLE)?;
    (c.status != ConditionStatus::Unknown).then(|| c.is_true())
}

/// What [`advance`] decided.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    /// The rollout's status to write (None: no rollout to report).
    pub status: Option<RolloutStatus>,
    /// The revision each VirtualSwitch (by name) is to run.
    pub assign: BTreeMap<String, RolloutRevision>,
    pub notes: Vec<Note>,
    /// When a timer (pause, analysis window, deadline) wants a look.
    pub requeue: Option<Duration>,
}

fn at(s: &str) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(s)
        .ok()
        .map(|t| t.with_timezone(&Utc))
}

/// Milliseconds: the analysis window counts from `healthySince`, and a
/// stamp cut to the second made it up to a second short (seen in the
/// rollout benchmark). Stamps change only when the rollout moves.
fn stamp(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// Time from `since` to `now`, zero when `since` is later or unreadable.
fn elapsed(since: &str, now: DateTime<Utc>) -> Duration {
    at(since)
        .and_then(|s| (now - s).to_std().ok())
        .unwrap_or(Duration::ZERO)
}

/// A rollout at rest: all `members` on `target`, `from` the revision
/// left (if any), as of `now`.
pub fn completed(
    target: &RolloutRevision,
    from: Option<RolloutRevision>,
    members: usize,
    now: DateTime<Utc>,
) -> RolloutStatus {
    RolloutStatus {
        phase: RolloutPhase::Completed,
        from,
        to: target.clone(),
        step_started_at: stamp(now),
        started_at: stamp(now),
        finished_at: Some(stamp(now)),
        updated: members as u32,
        ..Default::default()
    }
}

/// Every member on `rev`.
fn all_on(members: &[Member], rev: &RolloutRevision) -> BTreeMap<String, RolloutRevision> {
    members
        .iter()
        .map(|m| (m.name.clone(), rev.clone()))
        .collect()
}

/// One step of the state machine: the next status and assignments, from
/// the status in the API and the facts now. Pure; calling it again with
/// the status it returned and the same facts changes nothing.
pub fn advance(input: &Input) -> Result<Decision, SpecError> {
    let Input {
        spec,
        target,
        previous,
        members,
        now,
        ..
    } = input;
    // The whole fleet on the target now, `from` the revision left (if any).
    let at_rest = |from| completed(target, from, members.len(), *now);
    let steady = |status: Option<RolloutStatus>| Decision {
        assign: all_on(members, target),
        // A pinned revision at rest: a status that names it.
        status: status.or_else(|| input.pinned.then(|| at_rest(None))),
        notes: Vec::new(),
        requeue: None,
    };
    // AllAtOnce: every VirtualSwitch at once, no gate, no rollout status.
    if spec.strategy != RolloutStrategy::Canary {
        return Ok(steady(None));
    }
    let ours = previous.filter(|p| p.to == *target);
    // Within a rollout its `from` stays the revision to go back to.
    let Some(stable) = ours
        .and_then(|p| p.from.clone())
        .or_else(|| input.stable.clone())
    else {
        // Nothing ran before: nothing to protect.
        return Ok(steady(None));
    };
    let retrying = ours.is_some_and(|p| retries(input.retry.as_ref(), p));
    match ours {
        // The same revision rolled back: it stays back until another
        // revision (or pin) comes, or a retry names this rollback.
        Some(p) if p.phase == RolloutPhase::RolledBack && !retrying => {
            return Ok(Decision {
                assign: all_on(members, &stable),
                status: Some(p.clone()),
                notes: Vec::new(),
                requeue: None,
            });
        }
        Some(p) if p.phase == RolloutPhase::Completed => return Ok(steady(Some(p.clone()))),
        _ => {}
    }
    if stable == *target {
        // The fleet runs the target already (a pin back to it, or a
        // revision reverted): a rollout of another revision in progress is
        // abandoned, its moved VirtualSwitches go back with everyone.
        // After a rollout of another revision, the status says the fleet
        // is back on this one (a pin's own status says so already), so the
        // earlier rollout's phase does not linger or vanish unexplained.
        let left = previous.filter(|p| p.to != *target && !input.pinned);
        let Some(left) = left else {
            return Ok(steady(None));
        };
        // Completed only once every VirtualSwitch runs it; until then the
        // earlier rollout's status stands while they move back.
        let runs = |m: &Member| m.observed.loaded_digest.as_deref() == Some(target.digest.as_str());
        if !members.iter().all(runs) {
            let mut moving = steady(Some(left.clone()));
            moving.requeue = Some(Duration::from_secs(10));
            return Ok(moving);
        }
        let mut back = steady(Some(at_rest(Some(left.to.clone()))));
        back.notes.push(Note {
            warning: false,
            reason: COMPLETED,
            message: format!(
                "revision {} runs on all {} VirtualSwitches again; revision {} ({:?}) is left",
                target.revision,
                members.len(),
                left.to.revision,
                left.phase
            ),
        });
        return Ok(back);
    }
    let mut notes = Vec::new();
    let mut st = match previous {
        Some(p) if p.to == *target && !retrying => RolloutStatus::clone(p),
        _ => {
            // A new revision: from the first step, even mid-rollout (the
            // canary must see the newest revision).
            let restarted = previous.is_some_and(|p| {
                matches!(p.phase, RolloutPhase::Progressing | RolloutPhase::Paused)
            });
            notes.push(Note {
                warning: false,
                reason: STARTED,
                message: format!(
                    "rolling out revision {} from revision {}{}",
                    target.revision,
                    stable.revision,
                    match (restarted, retrying) {
                        (_, true) => " (a retry after its rollback)",
                        (true, _) => " (the rollout in progress restarts from its first step)",
                        _ => "",
                    }
                ),
            });
            RolloutStatus {
                phase: RolloutPhase::Progressing,
                from: Some(stable.clone()),
                to: target.clone(),
                step: 0,
                step_started_at: stamp(*now),
                started_at: stamp(*now),
                ..Default::default()
            }
        }
    };
    let ordered = order(members);
    let names: HashSet<&str> = members.iter().map(|m| m.name.as_str()).collect();
    // A VirtualSwitch deleted meanwhile is no longer counted.
    st.moved
        .retain(|m| names.contains(m.virtual_switch.as_str()));
    let steps = plan(spec, ordered.len())?;
    let analysis = spec.analysis.clone().unwrap_or_default();
    let window = Duration::from_secs(analysis.seconds.unwrap_or(0).into());
    let deadline = Duration::from_secs(
        spec.progress_deadline_seconds
            .unwrap_or(DEFAULT_PROGRESS_DEADLINE)
            .into(),
    );
    let max_unavailable = spec
        .max_unavailable
        .unwrap_or(DEFAULT_MAX_UNAVAILABLE)
        .max(1) as usize;
    let mut requeue: Option<Duration> = None;
    let mut wake = |d: Duration| requeue = Some(requeue.map_or(d, |r: Duration| r.min(d)));
    let by_name: BTreeMap<&str, &Member> = members.iter().map(|m| (m.name.as_str(), m)).collect();
    loop {
        if st.phase == RolloutPhase::RolledBack {
            break;
        }
        let Some(step) = steps.get(st.step as usize).copied() else {
            st.phase = RolloutPhase::Completed;
            st.finished_at = Some(stamp(*now));
            notes.push(Note {
                warning: false,
                reason: COMPLETED,
                message: format!(
                    "revision {} runs on all {} VirtualSwitches",
                    target.revision,
                    st.moved.len()
                ),
            });
            break;
        };
        if spec.paused {
            st.phase = RolloutPhase::Paused;
            break;
        }
        match step {
            Step::Pause(d) => {
                st.phase = RolloutPhase::Paused;
                let resumed = input
                    .resume
                    .is_some_and(|r| r.revision == target.revision && r.step == st.step);
                let waited = elapsed(&st.step_started_at, *now);
                match d {
                    _ if resumed => {}
                    Some(d) if waited >= d => {}
                    Some(d) => {
                        wake(d - waited);
                        break;
                    }
                    None => break,
                }
                next_step(&mut st, *now);
                continue;
            }
            Step::Move(n) => {
                st.phase = RolloutPhase::Progressing;
                // The gate over every moved VirtualSwitch.
                let over = st
                    .healthy_since
                    .as_deref()
                    .is_some_and(|h| elapsed(h, *now) >= window);
                let mut failure = None;
                // Healthy: every check but throughput passes; passed: all do.
                let mut all_healthy = true;
                let mut all_pass = true;
                let mut progressed = false;
                for moved in st.moved.iter_mut() {
                    let Some(m) = by_name.get(moved.virtual_switch.as_str()) else {
                        continue;
                    };
                    let cs = checks(
                        m,
                        target,
                        analysis.min_throughput_ratio,
                        moved.packets_per_second_before,
                        over,
                    );
                    if let Some(c) = cs.iter().find(|c| c.verdict == Verdict::Fail) {
                        failure.get_or_insert_with(|| GateFailure {
                            check: c.kind.name().into(),
                            virtual_switch: m.name.clone(),
                            switch: m.switch.clone(),
                            message: c.compared.clone(),
                        });
                        moved.state = MovedState::Failed;
                        continue;
                    }
                    // Throughput is judged at the window's end only.
                    let healthy = cs
                        .iter()
                        .all(|c| c.verdict == Verdict::Pass || c.kind == CheckKind::Throughput);
                    if healthy && moved.state != MovedState::Healthy {
                        moved.state = MovedState::Healthy;
                        progressed = true;
                    }
                    all_healthy &= healthy;
                    all_pass &= cs.iter().all(|c| c.verdict == Verdict::Pass);
                }
                let since = st
                    .progressed_at
                    .clone()
                    .unwrap_or_else(|| st.step_started_at.clone());
                let stuck = elapsed(&since, *now) >= deadline;
                if failure.is_none() && stuck && (st.moved.len() < n || !all_pass) {
                    // The first moved one not healthy, else the next to move.
                    let moved: HashSet<&str> =
                        st.moved.iter().map(|m| m.virtual_switch.as_str()).collect();
                    let pending = st
                        .moved
                        .iter()
                        .find(|m| m.state != MovedState::Healthy)
                        .map(|m| (m.virtual_switch.clone(), m.switch.clone()))
                        .or_else(|| {
                            ordered
                                .iter()
                                .find(|m| !moved.contains(m.name.as_str()))
                                .map(|m| (m.name.clone(), m.switch.clone()))
                        });
                    let (virtual_switch, switch) = pending.unwrap_or_default();
                    let unanswered = analysis.min_throughput_ratio.is_some()
                        && by_name
                            .get(virtual_switch.as_str())
                            .is_some_and(|m| m.observed.rate == Rate::Unanswered);
                    failure = Some(GateFailure {
                        check: CheckKind::ProgressDeadline.name().into(),
                        virtual_switch,
                        switch,
                        message: format!(
                            "step {} not healthy within {} s (progressDeadlineSeconds){}",
                            st.step,
                            deadline.as_secs(),
                            match unanswered {
                                true => "; its device gave no packets/s to compare with",
                                false => "",
                            }
                        ),
                    });
                }
                if let Some(f) = failure {
                    for m in st.moved.iter_mut() {
                        m.state = MovedState::RolledBack;
                    }
                    notes.push(Note {
                        warning: true,
                        reason: ROLLED_BACK,
                        message: format!(
                            "revision {} failed {} on VirtualSwitch {}{}: {}; {} VirtualSwitches back on revision {}",
                            target.revision,
                            f.check,
                            f.virtual_switch,
                            f.switch.as_deref().map(|s| format!(" (Switch {s})")).unwrap_or_default(),
                            f.message,
                            st.moved.len(),
                            stable.revision
                        ),
                    });
                    st.failure = Some(f);
                    st.phase = RolloutPhase::RolledBack;
                    st.finished_at = Some(stamp(*now));
                    break;
                }
                // Move the next ones, at most maxUnavailable not yet healthy.
                let unhealthy = st
                    .moved
                    .iter()
                    .filter(|m| m.state != MovedState::Healthy)
                    .count();
                let room = max_unavailable.saturating_sub(unhealthy);
                let moved: HashSet<String> =
                    st.moved.iter().map(|m| m.virtual_switch.clone()).collect();
                // With a throughput check, a member whose device did not
                // answer waits for a figure (in order: the canary is not
                // skipped), or its check would have nothing to compare.
                let want = n.saturating_sub(st.moved.len()).min(room);
                let unmoved = ordered.iter().filter(|m| !moved.contains(&m.name));
                let gauged = analysis.min_throughput_ratio.is_some();
                let next: Vec<&Member> = unmoved
                    .take(want)
                    .take_while(|m| !(gauged && m.observed.rate == Rate::Unanswered))
                    .copied()
                    .collect();
                if next.len() < want && gauged {
                    wake(UNANSWERED_RETRY);
                }
                for m in &next {
                    st.moved.push(MovedSwitch {
                        virtual_switch: m.name.clone(),
                        switch: m.switch.clone(),
                        step: st.step,
                        state: MovedState::Moving,
                        packets_per_second_before: m.observed.rate.figure(),
                    });
                }
                if progressed || !next.is_empty() {
                    st.progressed_at = Some(stamp(*now));
                }
                let since = st
                    .progressed_at
                    .clone()
                    .unwrap_or_else(|| st.step_started_at.clone());
                let to_deadline = deadline.saturating_sub(elapsed(&since, *now));
                if !next.is_empty() || st.moved.len() < n || !all_healthy {
                    st.healthy_since = None;
                    wake(to_deadline);
                    break;
                }
                // Every moved VirtualSwitch healthy: the window.
                let healthy_since = st.healthy_since.get_or_insert_with(|| stamp(*now)).clone();
                let waited = elapsed(&healthy_since, *now);
                if waited < window {
                    wake(window - waited);
                    break;
                }
                if !all_pass {
                    // Throughput is judged now that the window is over:
                    // once more with that verdict, unless it was.
                    if !over {
                        continue;
                    }
                    wake(to_deadline);
                    break;
                }
                notes.push(Note {
                    warning: false,
                    reason: STEP_PASSED,
                    message: format!(
                        "step {}: {} of {} VirtualSwitches on revision {}, gate passed",
                        st.step,
                        st.moved.len(),
                        ordered.len(),
                        target.revision
                    ),
                });
                next_step(&mut st, *now);
            }
        }
    }
    let on_target = |s: MovedState| {
        matches!(
            s,
            MovedState::Moving | MovedState::Healthy | MovedState::Failed
        )
    };
    let mut assign = all_on(members, &stable);
    for m in st.moved.iter().filter(|m| on_target(m.state)) {
        assign.insert(m.virtual_switch.clone(), target.clone());
    }
    if st.phase == RolloutPhase::Completed {
        assign = all_on(members, target);
    }
    st.updated = st.moved.iter().filter(|m| on_target(m.state)).count() as u32;
    st.healthy = st
        .moved
        .iter()
        .filter(|m| m.state == MovedState::Healthy)
        .count() as u32;
    st.rolled_back = st
        .moved
        .iter()
        .filter(|m| m.state == MovedState::RolledBack)
        .count() as u32;
    st.pending = (members.len() as u32).saturating_sub(st.updated + st.rolled_back);
    Ok(Decision {
        status: Some(st),
        assign,
        notes,
        requeue,
    })
}

/// The digest VirtualSwitch `vs` is to run, by its program's status: with
/// a Canary rollout, the revision the rollout assigns it (the new one once
/// moved, the one before otherwise, the one before again after a rollback);
/// without one, the content in force (`status.digest`).
pub fn assigned<'a>(status: &'a P4ProgramStatus, vs: &str) -> Option<&'a str> {
    match &status.rollout {
        Some(r) => Some(assigned_in(r, vs)),
        None => status.digest.as_deref(),
    }
}

/// The digest `vs` is to run by rollout `r`: the new revision once moved
/// (or once complete), the one before otherwise and after a rollback.
pub fn assigned_in<'a>(r: &'a RolloutStatus, vs: &str) -> &'a str {
    let moved = r.moved.iter().find(|m| m.virtual_switch == vs);
    let on_target = match r.phase {
        RolloutPhase::Completed => true,
        RolloutPhase::RolledBack => false,
        RolloutPhase::Progressing | RolloutPhase::Paused => moved.is_some_and(|m| {
            matches!(
                m.state,
                MovedState::Moving | MovedState::Healthy | MovedState::Failed
            )
        }),
    };
    match (on_target, &r.from) {
        (false, Some(from)) => from.digest.as_str(),
        _ => r.to.digest.as_str(),
    }
}

/// A VirtualSwitch as the gate sees it: its order label, where it runs,
/// its loaded digest and `PipelineLoaded`, the sets that fill it (`sets`:
/// Ready, failed there, re-applied since its last swap) and its Switch's
/// `Reachable`. Pure.
pub fn member(vs: &VirtualSwitch, sets: &[&TableEntrySet], switch: Option<&Switch>) -> Member {
    use p4fleet_crds::condition_types::{PIPELINE_LOADED, READY};
    let name = vs.name_any();
    let st = vs.status.clone().unwrap_or_default();
    let pipeline = match find_condition(&st.conditions, PIPELINE_LOADED) {
        Some(c) if c.is_true() => PipelineFact::Loaded,
        Some(c) if c.status == ConditionStatus::False => PipelineFact::Failed {
            reason: c.reason.clone(),
            message: c.message.clone(),
        },
        _ => PipelineFact::Pending,
    };
    // Entries are re-applied once the VirtualSwitch counted them after its
    // swap into what it runs now (a load that was no swap has none).
    let counted = match &st.last_swap {
        Some(s) if Some(&s.to_digest) == st.loaded_digest.as_ref() => s.entries_reapplied.is_some(),
        _ => true,
    };
    let sets = sets
        .iter()
        .map(|s| {
            let sst = s.status.clone().unwrap_or_default();
            let here = sst.targets.iter().find(|t| t.virtual_switch == name);
            // A sync whose entries were encoded for another content (it
            // saw the VirtualSwitch before its swap) says nothing of this
            // one: its refusals are not this revision's, and the next
            // sync is waited for. (No digest: an older operator's status.)
            let for_loaded = here.is_none_or(|t| {
                t.pipeline_digest.is_none() || t.pipeline_digest == st.loaded_digest
            });
            SetFact {
                name: s.name_any(),
                ready: find_condition(&sst.conditions, READY).is_some_and(|c| c.is_true()),
                failed: here
                    .filter(|_| for_loaded)
                    .map_or(0, |t| t.failed + t.stale),
                reapplied: counted && for_loaded,
            }
        })
        .collect();
    let reachable = switch.and_then(reachable);
    Member {
        order: vs.labels().get(ORDER_LABEL).cloned(),
        switch: st.switch.clone(),
        observed: Observed {
            loaded_digest: st.loaded_digest,
            pipeline,
            sets,
            reachable,
            // Not gathered yet: the throughput check passes, saying so.
            rate: Rate::NotReported,
        },
        name,
    }
}

fn next_step(st: &mut RolloutStatus, now: DateTime<Utc>) {
    st.step += 1;
    st.step_started_at = stamp(now);
    st.progressed_at = Some(stamp(now));
    st.healthy_since = None;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_are_asked_only_while_a_ratio_gated_rollout_can_move_or_judge() {
        let spec: p4fleet_crds::Rollout = serde_json::from_value(serde_json::json!({
            "strategy": "Canary", "steps": [{"percent": 100}],
            "analysis": {"seconds": 3, "minThroughputRatio": 0.5}}))
        .unwrap();
        let rev = |n: i64| format!("{n:0>64}");
        let status = |phase, to: i64| RolloutStatus {
            phase,
            to: RolloutRevision {
                revision: to,
                digest: format!("{to:0>64}"),
            },
            ..Default::default()
        };
        assert!(gauges_throughput(&spec, None, &rev(2), None));
        let moving = status(RolloutPhase::Progressing, 2);
        assert!(gauges_throughput(&spec, Some(&moving), &rev(2), None));
        let done = status(RolloutPhase::Completed, 2);
        assert!(!gauges_throughput(&spec, Some(&done), &rev(2), None));
        // A new revision after a finished one starts a rollout again.
        assert!(gauges_throughput(&spec, Some(&done), &rev(3), None));
        let rolled_back = status(RolloutPhase::RolledBack, 2);
        assert!(!gauges_throughput(&spec, Some(&rolled_back), &rev(2), None));
        // ... unless a retry names that rollback.
        let mut back = rolled_back.clone();
        back.finished_at = Some("2026-12-01T10:00:00.000Z".into());
        let retry = retry("2@2026-12-01T10:00:00.000Z");
        assert!(gauges_throughput(
            &spec,
            Some(&back),
            &rev(2),
            retry.as_ref()
        ));
        let mut no_ratio = spec.clone();
        no_ratio.analysis = None;
        assert!(!gauges_throughput(&no_ratio, None, &rev(2), None));
        let mut all_at_once = spec;
        all_at_once.strategy = RolloutStrategy::AllAtOnce;
        assert!(!gauges_throughput(&all_at_once, None, &rev(2), None));
    }

    use chrono::TimeZone;
    use p4fleet_crds::{Analysis, Pause, RolloutStep};

    fn rev(n: i64) -> RolloutRevision {
        RolloutRevision {
            revision: n,
            digest: format!("{n:0>64}"),
        }
    }

    fn member(name: &str, order: Option<&str>) -> Member {
        Member {
            name: name.into(),
            order: order.map(str::to_string),
            switch: Some(format!("sw-{name}")),
            observed: Observed {
                loaded_digest: Some(rev(1).digest),
                pipeline: PipelineFact::Loaded,
                sets: vec![SetFact {
                    name: format!("set-{name}"),
                    ready: true,
                    failed: 0,
                    reapplied: true,
                }],
                reachable: Some(true),
                rate: Rate::PacketsPerSecond(1000),
            },
        }
    }

    fn fleet(n: usize) -> Vec<Member> {
        (0..n)
            .map(|i| member(&format!("vs-{i:02}"), None))
            .collect()
    }

    /// A look at rest: no previous status, nothing pinned, resumed or
    /// retried; tests override what they vary.
    fn input<'a>(
        spec: &'a Rollout,
        target: RolloutRevision,
        stable: Option<RolloutRevision>,
        members: &'a [Member],
    ) -> Input<'a> {
        Input {
            spec,
            target,
            pinned: false,
            stable,
            previous: None,
            members,
            resume: None,
            retry: None,
            now: Utc::now(),
        }
    }

    fn step_switches(n: u32) -> RolloutStep {
        RolloutStep {
            switches: Some(n),
            ..Default::default()
        }
    }

    fn step_percent(p: u32) -> RolloutStep {
        RolloutStep {
            percent: Some(p),
            ..Default::default()
        }
    }

    fn step_pause(d: Option<&str>) -> RolloutStep {
        RolloutStep {
            pause: Some(Pause {
                duration: d.map(str::to_string),
            }),
            ..Default::default()
        }
    }

    fn canary(steps: Vec<RolloutStep>) -> Rollout {
        Rollout {
            strategy: RolloutStrategy::Canary,
            steps,
            max_unavailable: Some(2),
            analysis: Some(Analysis {
                seconds: Some(30),
                min_throughput_ratio: Some(0.9),
            }),
            ..Default::default()
        }
    }

    /// A fleet the rollout drives: each tick runs [`advance`] on the
    /// status as the API would hold it (written as JSON and read back, as
    /// a restarted operator reads it), then every VirtualSwitch loads what
    /// it was assigned, healthy unless `broken` says otherwise.
    struct World {
        members: Vec<Member>,
        status: Option<RolloutStatus>,
        now: DateTime<Utc>,
        /// Every load, in order: (VirtualSwitch, revision).
        loads: Vec<(String, i64)>,
        /// Loading this revision leaves a VirtualSwitch with failed entries.
        broken: Option<i64>,
        stable: RolloutRevision,
    }

    impl World {
        fn new(n: usize) -> World {
            World {
                members: fleet(n),
                status: None,
                now: Utc.with_ymd_and_hms(2026, 12, 1, 10, 0, 0).unwrap(),
                loads: Vec::new(),
                broken: None,
                stable: rev(1),
            }
        }

        fn tick(
            &mut self,
            spec: &Rollout,
            target: &RolloutRevision,
            resume: Option<Resume>,
        ) -> Decision {
            self.tick_retrying(spec, target, resume, None)
        }

        fn tick_retrying(
            &mut self,
            spec: &Rollout,
            target: &RolloutRevision,
            resume: Option<Resume>,
            retry: Option<Retry>,
        ) -> Decision {
            let text = serde_json::to_string(&self.status).unwrap();
            let previous: Option<RolloutStatus> = serde_json::from_str(&text).unwrap();
            let d = advance(&Input {
                previous: previous.as_ref(),
                resume,
                retry,
                now: self.now,
                ..input(
                    spec,
                    target.clone(),
                    Some(self.stable.clone()),
                    &self.members,
                )
            })
            .unwrap();
            for m in &mut self.members {
                let want = &d.assign[&m.name];
                if m.observed.loaded_digest.as_deref() != Some(want.digest.as_str()) {
                    self.loads.push((m.name.clone(), want.revision));
                    m.observed.loaded_digest = Some(want.digest.clone());
                    m.observed.sets[0].failed = match self.broken == Some(want.revision) {
                        true => 3,
                        false => 0,
                    };
                }
            }
            if let Some(st) = &d.status {
                let moving = st
                    .moved
                    .iter()
                    .filter(|m| m.state == MovedState::Moving)
                    .count();
                let most = spec.max_unavailable.unwrap_or(DEFAULT_MAX_UNAVAILABLE) as usize;
                assert!(
                    moving <= most,
                    "{moving} moving at once, maxUnavailable {most}"
                );
            }
            self.status = d.status.clone();
            self.now += chrono::Duration::seconds(10);
            d
        }

        /// Ticks until the rollout's phase is `phase` (at most `max` ticks).
        fn until(
            &mut self,
            spec: &Rollout,
            target: &RolloutRevision,
            phase: RolloutPhase,
            max: usize,
        ) {
            for _ in 0..max {
                self.tick(spec, target, None);
                if self.status.as_ref().map(|s| s.phase) == Some(phase) {
                    return;
                }
            }
            panic!("not {phase:?} after {max} ticks: {:?}", self.status);
        }

        fn on(&self, r: i64) -> usize {
            let d = rev(r).digest;
            self.members
                .iter()
                .filter(|m| m.observed.loaded_digest.as_deref() == Some(d.as_str()))
                .count()
        }
    }

    #[test]
    fn the_order_is_by_label_then_name() {
        let ms = vec![
            member("b", None),
            member("a", None),
            member("z", Some("1")),
            member("y", Some("10")),
            member("x", Some("1")),
            member("c", Some("first")),
        ];
        let names: Vec<&str> = order(&ms).iter().map(|m| m.name.as_str()).collect();
        assert_eq!(names, ["x", "z", "y", "a", "b", "c"]);
    }

    #[test]
    fn steps_count_from_the_start_round_up_and_never_go_back() {
        let spec = canary(vec![
            step_switches(1),
            step_pause(Some("1h30m")),
            step_percent(1),
            step_percent(25),
            step_pause(None),
            step_percent(100),
        ]);
        use Step::*;
        assert_eq!(
            plan(&spec, 10).unwrap(),
            [
                Move(1),
                Pause(Some(Duration::from_secs(5400))),
                Move(1),
                Move(3),
                Pause(None),
                Move(10)
            ]
        );
        assert_eq!(
            plan(&canary(vec![step_switches(5), step_percent(100)]), 3).unwrap(),
            [Move(3), Move(3)]
        );
        let all = Rollout::default();
        assert_eq!(plan(&all, 7).unwrap(), [Move(7)]);
        let bad = canary(vec![step_pause(Some("5 minutes")), step_percent(100)]);
        let e = plan(&bad, 3).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("spec.rollout.steps[0].pause.duration:"),
            "{e}"
        );
        assert_eq!(parse_duration("250ms"), Some(Duration::from_millis(250)));
        assert_eq!(parse_duration("1.5m"), Some(Duration::from_secs(90)));
        assert_eq!(parse_duration("-5m"), None);
        assert_eq!(parse_duration(""), None);
    }

    #[test]
    fn each_check_says_what_it_compared() {
        let target = rev(2);
        let mut m = member("vs", None);
        let verdicts = |cs: &[Check]| cs.iter().map(|c| c.verdict).collect::<Vec<_>>();
        use Verdict::*;
        // Still on revision 1: loading.
        let cs = checks(&m, &target, Some(0.9), Some(1000), false);
        assert_eq!(verdicts(&cs), [Pending, Pending, Pass, Pending]);
        assert!(
            cs[0].compared.contains("want revision 2"),
            "{}",
            cs[0].compared
        );
        m.observed.loaded_digest = Some(target.digest.clone());
        let cs = checks(&m, &target, Some(0.9), Some(1000), true);
        assert_eq!(verdicts(&cs), [Pass, Pass, Pass, Pass]);
        assert_eq!(
            cs[1].compared,
            "1 TableEntrySets re-applied, 0 failed, Ready"
        );
        assert_eq!(
            cs[3].compared,
            "1000 packets/s, at least 0.9 × 1000 packets/s before the step"
        );
        m.observed.sets[0].failed = 2;
        m.observed.reachable = Some(false);
        m.observed.rate = Rate::PacketsPerSecond(10);
        let cs = checks(&m, &target, Some(0.9), Some(1000), true);
        assert_eq!(verdicts(&cs), [Pass, Fail, Fail, Fail]);
        assert_eq!(cs[1].compared, "TableEntrySet set-vs: 2 entries failed");
        assert_eq!(cs[2].compared, "Switch sw-vs not Reachable");
        // Before the window's end, a low rate is not yet a verdict.
        assert_eq!(
            checks(&m, &target, Some(0.9), Some(1000), false)[3].verdict,
            Pending
        );
        // A target that does not report throughput passes that check.
        assert_eq!(checks(&m, &target, Some(0.9), None, true)[3].verdict, Pass);
        m.observed.pipeline = PipelineFact::Failed {
            reason: "LoadFailed".into(),
            message: "device said no".into(),
        };
        let c = &checks(&m, &target, None, None, true)[0];
        assert_eq!(c.verdict, Fail);
        assert!(c.compared.contains("LoadFailed") && c.compared.contains("device said no"));
    }

    #[test]
    fn a_canary_moves_in_order_one_step_at_a_time_and_completes() {
        let mut w = World::new(10);
        let spec = canary(vec![
            step_switches(1),
            step_pause(Some("5m")),
            step_percent(50),
            step_percent(100),
        ]);
        let target = rev(2);
        // First tick: only the canary moves.
        let d = w.tick(&spec, &target, None);
        assert_eq!(d.notes[0].reason, "RolloutStarted");
        assert_eq!(w.on(2), 1);
        assert_eq!(w.loads, [("vs-00".to_string(), 2)]);
        // The canary stays alone until its 30 s window passed, then the pause.
        w.until(&spec, &target, RolloutPhase::Paused, 10);
        assert_eq!(w.on(2), 1);
        let st = w.status.clone().unwrap();
        assert_eq!((st.step, st.updated, st.healthy, st.pending), (1, 1, 1, 9));
        // 5 minutes later, the next step moves up to 5, two at a time.
        for _ in 0..29 {
            w.tick(&spec, &target, None);
            assert_eq!(w.on(2), 1, "paused");
        }
        w.until(&spec, &target, RolloutPhase::Completed, 60);
        assert_eq!(w.on(2), 10);
        // In order, each exactly once.
        let moved: Vec<&str> = w.loads.iter().map(|(n, _)| n.as_str()).collect();
        let expected: Vec<String> = (0..10).map(|i| format!("vs-{i:02}")).collect();
        assert_eq!(moved, expected);
        let st = w.status.clone().unwrap();
        assert_eq!(
            (st.updated, st.healthy, st.pending, st.rolled_back),
            (10, 10, 0, 0)
        );
        assert!(st.finished_at.is_some());
        // Done stays done.
        let d = w.tick(&spec, &target, None);
        assert!(d.notes.is_empty() && d.assign.values().all(|r| *r == target));
    }

    #[test]
    fn a_failed_gate_rolls_the_moved_back_and_the_rest_never_see_it() {
        let mut w = World::new(12);
        w.broken = Some(2);
        let spec = canary(vec![step_switches(1), step_percent(100)]);
        let target = rev(2);
        w.until(&spec, &target, RolloutPhase::RolledBack, 5);
        let st = w.status.clone().unwrap();
        let f = st.failure.clone().unwrap();
        assert_eq!(
            (
                f.check.as_str(),
                f.virtual_switch.as_str(),
                f.switch.as_deref()
            ),
            ("EntriesReapplied", "vs-00", Some("sw-vs-00"))
        );
        assert_eq!(f.message, "TableEntrySet set-vs-00: 3 entries failed");
        // The canary is back on revision 1; the other 11 never loaded 2.
        w.tick(&spec, &target, None);
        assert_eq!(w.on(1), 12);
        assert_eq!(
            w.loads,
            [("vs-00".to_string(), 2), ("vs-00".to_string(), 1)]
        );
        assert_eq!((st.rolled_back, st.updated, st.pending), (1, 0, 11));
        // It stays back: the failed revision is not tried again.
        for _ in 0..5 {
            w.tick(&spec, &target, None);
        }
        assert_eq!(w.loads.len(), 2);
        assert_eq!(w.status.as_ref().unwrap().phase, RolloutPhase::RolledBack);
        // A new revision starts a new rollout.
        w.broken = None;
        let d = w.tick(&spec, &rev(3), None);
        assert_eq!(d.notes[0].reason, "RolloutStarted");
        assert_eq!(w.on(3), 1);
    }

    #[test]
    fn a_retry_names_one_rollback_and_tries_the_revision_once_more() {
        let mut w = World::new(4);
        w.broken = Some(2);
        let spec = canary(vec![step_switches(1), step_percent(100)]);
        let target = rev(2);
        w.until(&spec, &target, RolloutPhase::RolledBack, 5);
        let first = w.status.clone().unwrap().finished_at.unwrap();
        assert_eq!(
            retry(&format!(" 2@{first} ")),
            Some(Retry {
                revision: 2,
                rolled_back_at: first.clone()
            })
        );
        assert_eq!(retry("2@"), None);
        assert_eq!(retry("2"), None);
        // Another revision's, or another rollback's, retry passes nothing.
        for other in [format!("3@{first}"), "2@2020-01-01T00:00:00.000Z".into()] {
            w.tick_retrying(&spec, &target, None, retry(&other));
            assert_eq!(w.status.as_ref().unwrap().phase, RolloutPhase::RolledBack);
        }
        assert_eq!(w.loads.len(), 2, "the canary there and back only");
        // The right one starts over from the first step.
        w.now += chrono::Duration::seconds(1);
        let again = retry(&format!("2@{first}"));
        let d = w.tick_retrying(&spec, &target, None, again.clone());
        assert_eq!(d.notes[0].reason, STARTED);
        assert!(d.notes[0].message.contains("a retry after its rollback"));
        let st = w.status.clone().unwrap();
        assert_eq!(
            (st.phase, st.step, st.moved.len()),
            (RolloutPhase::Progressing, 0, 1)
        );
        // Still broken: back again, and the annotation left in place does
        // not retry once more.
        for _ in 0..5 {
            w.tick_retrying(&spec, &target, None, again.clone());
        }
        let st = w.status.clone().unwrap();
        assert_eq!(st.phase, RolloutPhase::RolledBack);
        assert_ne!(st.finished_at.as_deref(), Some(first.as_str()));
        assert_eq!(w.loads.len(), 4, "one more canary move and back");
        // Fixed on the device, a retry of this rollback completes.
        w.broken = None;
        let second = st.finished_at.unwrap();
        for _ in 0..10 {
            w.tick_retrying(&spec, &target, None, retry(&format!("2@{second}")));
            w.now += chrono::Duration::seconds(1);
        }
        assert_eq!(w.status.as_ref().unwrap().phase, RolloutPhase::Completed);
        assert_eq!(w.on(2), 4);
    }

    #[test]
    fn a_revision_after_a_completed_rollout_rolls_out_again() {
        let mut w = World::new(4);
        let spec = canary(vec![step_switches(1), step_percent(50), step_percent(100)]);
        w.until(&spec, &rev(2), RolloutPhase::Completed, 60);
        assert_eq!(w.on(2), 4);
        // The fleet runs revision 2 now: the operator's current revision.
        w.stable = rev(2);
        let d = w.tick(&spec, &rev(3), None);
        assert_eq!(d.notes[0].reason, STARTED);
        let st = w.status.clone().unwrap();
        assert_eq!(
            (
                st.phase,
                st.step,
                st.to.revision,
                st.from.map(|f| f.revision)
            ),
            (RolloutPhase::Progressing, 0, 3, Some(2))
        );
        assert_eq!((w.on(3), w.on(2)), (1, 3), "the canary alone");
    }

    #[test]
    fn throughput_falling_below_the_ratio_fails_at_the_windows_end() {
        let mut w = World::new(3);
        let spec = canary(vec![step_switches(1), step_percent(100)]);
        let target = rev(2);
        w.tick(&spec, &target, None);
        w.members[0].observed.rate = Rate::PacketsPerSecond(500);
        w.until(&spec, &target, RolloutPhase::RolledBack, 10);
        let f = w.status.unwrap().failure.unwrap();
        assert_eq!(f.check, "Throughput");
        assert_eq!(
            f.message,
            "500 packets/s, at least 0.9 × 1000 packets/s before the step"
        );
    }

    #[test]
    fn a_member_whose_device_gave_no_rate_is_moved_once_it_does() {
        let mut w = World::new(3);
        let spec = Rollout {
            progress_deadline_seconds: Some(60),
            ..canary(vec![step_switches(1), step_percent(100)])
        };
        let target = rev(2);
        // The canary's device did not answer: nobody moves (not the next
        // one in its place), and the rollout looks again soon.
        w.members[0].observed.rate = Rate::Unanswered;
        let d = w.tick(&spec, &target, None);
        assert_eq!(w.on(2), 0);
        assert!(w.status.as_ref().unwrap().moved.is_empty());
        assert_eq!(d.requeue, Some(UNANSWERED_RETRY));
        // It answers: it moves, with its figure to compare with.
        w.members[0].observed.rate = Rate::PacketsPerSecond(800);
        w.tick(&spec, &target, None);
        let st = w.status.clone().unwrap();
        assert_eq!(st.moved[0].virtual_switch, "vs-00");
        assert_eq!(st.moved[0].packets_per_second_before, Some(800));
        // Without a throughput check, the rate is not waited for.
        let mut w = World::new(3);
        w.members[0].observed.rate = Rate::Unanswered;
        let plain = Rollout {
            analysis: None,
            ..spec.clone()
        };
        w.tick(&plain, &target, None);
        assert_eq!(w.on(2), 1);
        // A device that never answers fails the step at its deadline,
        // saying why.
        let mut w = World::new(3);
        w.members[0].observed.rate = Rate::Unanswered;
        w.until(&spec, &target, RolloutPhase::RolledBack, 10);
        let f = w.status.unwrap().failure.unwrap();
        assert_eq!(
            (f.check.as_str(), f.virtual_switch.as_str()),
            ("ProgressDeadline", "vs-00")
        );
        assert!(
            f.message
                .ends_with("its device gave no packets/s to compare with"),
            "{}",
            f.message
        );
        assert_eq!(w.loads, []);
    }

    #[test]
    fn a_new_revision_mid_rollout_restarts_from_the_first_step() {
        let mut w = World::new(6);
        let spec = canary(vec![step_switches(1), step_percent(50), step_percent(100)]);
        w.until(&spec, &rev(2), RolloutPhase::Progressing, 1);
        // Run until step 1 moved some.
        for _ in 0..6 {
            w.tick(&spec, &rev(2), None);
        }
        assert!(w.on(2) >= 2, "{}", w.on(2));
        // Revision 3 comes: the canary runs 3, every other one goes back to 1.
        let d = w.tick(&spec, &rev(3), None);
        assert_eq!(d.notes[0].reason, "RolloutStarted");
        assert!(d.notes[0].message.contains("restarts from its first step"));
        let st = w.status.clone().unwrap();
        assert_eq!(
            (st.step, st.to.revision, st.from.as_ref().unwrap().revision),
            (0, 3, 1)
        );
        assert_eq!((w.on(3), w.on(2), w.on(1)), (1, 0, 5));
        assert_eq!(w.members[0].observed.loaded_digest, Some(rev(3).digest));
        w.until(&spec, &rev(3), RolloutPhase::Completed, 60);
        assert_eq!(w.on(3), 6);
    }

    /// The status alone carries a rollout across an operator restart
    /// (every tick of [`World`] starts from the status as JSON): a new
    /// machine, a leader change between any two ticks, moves nobody twice.
    #[test]
    fn resuming_from_status_neither_skips_nor_repeats_a_switch() {
        let mut w = World::new(20);
        let spec = canary(vec![
            step_switches(1),
            step_percent(10),
            step_pause(Some("1m")),
            step_percent(60),
            step_percent(100),
        ]);
        w.until(&spec, &rev(2), RolloutPhase::Completed, 200);
        let mut seen = std::collections::HashMap::new();
        for (n, r) in &w.loads {
            *seen.entry((n.clone(), *r)).or_insert(0) += 1;
        }
        assert_eq!(seen.len(), 20, "every one moved");
        assert!(seen.values().all(|c| *c == 1), "none twice: {seen:?}");
        // The same status and facts again change nothing (idempotent).
        let before = w.status.clone();
        w.tick(&spec, &rev(2), None);
        assert_eq!(w.status, before);
    }

    #[test]
    fn an_indefinite_pause_waits_for_its_resume_and_paused_stops_moving() {
        let mut w = World::new(4);
        let spec = canary(vec![step_switches(1), step_pause(None), step_percent(100)]);
        let target = rev(2);
        w.until(&spec, &target, RolloutPhase::Paused, 10);
        for _ in 0..20 {
            w.tick(&spec, &target, None);
        }
        assert_eq!(w.on(2), 1);
        // A resume of another revision's or step's pause does not pass it.
        w.tick(
            &spec,
            &target,
            Some(Resume {
                revision: 1,
                step: 1,
            }),
        );
        w.tick(
            &spec,
            &target,
            Some(Resume {
                revision: 2,
                step: 0,
            }),
        );
        assert_eq!(w.on(2), 1);
        assert_eq!(
            resume(" 2/1 "),
            Some(Resume {
                revision: 2,
                step: 1
            })
        );
        assert_eq!(resume("2"), None);
        w.tick(&spec, &target, resume("2/1"));
        assert_eq!(w.status.as_ref().unwrap().step, 2);
        // spec.rollout.paused: nothing more moves.
        let paused = Rollout {
            paused: true,
            ..spec.clone()
        };
        for _ in 0..5 {
            w.tick(&paused, &target, None);
        }
        let moved = w.on(2);
        assert_eq!(w.status.as_ref().unwrap().phase, RolloutPhase::Paused);
        w.tick(&paused, &target, None);
        assert_eq!(w.on(2), moved);
        w.until(&spec, &target, RolloutPhase::Completed, 30);
    }

    #[test]
    fn a_step_without_progress_fails_at_its_deadline() {
        let mut w = World::new(3);
        let spec = Rollout {
            progress_deadline_seconds: Some(60),
            ..canary(vec![step_switches(1), step_percent(100)])
        };
        let target = rev(2);
        w.tick(&spec, &target, None);
        // The canary's device went away before it loaded anything.
        w.members[0].observed.loaded_digest = Some(rev(1).digest);
        w.members[0].observed.pipeline = PipelineFact::Pending;
        w.members[0].observed.reachable = None;
        let mut rolled = None;
        for _ in 0..10 {
            let before = w.now;
            // Keep it pending: the world's loads do not reach it.
            let d = advance(&Input {
                previous: w.status.as_ref(),
                now: before,
                ..input(&spec, target.clone(), Some(rev(1)), &w.members)
            })
            .unwrap();
            w.status = d.status.clone();
            w.now += chrono::Duration::seconds(10);
            if w.status.as_ref().unwrap().phase == RolloutPhase::RolledBack {
                rolled = Some(before);
                break;
            }
            assert!(d.requeue.is_some(), "the deadline is a timer");
        }
        let f = w.status.unwrap().failure.unwrap();
        assert_eq!(
            (f.check.as_str(), f.virtual_switch.as_str()),
            ("ProgressDeadline", "vs-00")
        );
        assert!(rolled.is_some());
    }

    #[test]
    fn a_revert_to_the_revision_the_fleet_runs_completes_naming_the_one_left() {
        let spec = canary(vec![step_switches(1), step_percent(100)]);
        let ms = fleet(3);
        let rolled_back = RolloutStatus {
            phase: RolloutPhase::RolledBack,
            from: Some(rev(1)),
            to: rev(2),
            ..Default::default()
        };
        let input = |previous| Input {
            previous,
            now: Utc.with_ymd_and_hms(2026, 12, 1, 10, 0, 0).unwrap(),
            ..input(&spec, rev(1), Some(rev(1)), &ms)
        };
        // The canary still runs revision 2: the rollback's status stands
        // while it moves back, and nothing is claimed.
        let mut moving = fleet(3);
        moving[0].observed.loaded_digest = Some(rev(2).digest);
        let d = advance(&Input {
            members: &moving,
            ..input(Some(&rolled_back))
        })
        .unwrap();
        assert_eq!(d.status.as_ref(), Some(&rolled_back));
        assert!(d.notes.is_empty() && d.assign.values().all(|r| *r == rev(1)));
        let d = advance(&input(Some(&rolled_back))).unwrap();
        let st = d.status.clone().expect("a status naming the revert");
        assert_eq!(st.phase, RolloutPhase::Completed);
        assert_eq!((st.from.clone(), st.to.clone()), (Some(rev(2)), rev(1)));
        assert_eq!(st.updated, 3);
        assert_eq!(rolled_back_condition(&st), None, "the rollback is over");
        assert_eq!(d.notes.len(), 1);
        assert!(
            d.notes[0]
                .message
                .contains("revision 2 (RolledBack) is left")
        );
        assert!(d.assign.values().all(|r| *r == rev(1)));
        // Once said, it stays without a new Event.
        let again = advance(&input(d.status.as_ref())).unwrap();
        assert_eq!(again.status, d.status);
        assert!(again.notes.is_empty());
        // Nothing rolled out before: nothing to say.
        assert_eq!(advance(&input(None)).unwrap().status, None);
    }

    #[test]
    fn a_rolled_back_rollout_is_a_condition_naming_the_check_and_where() {
        let mut st = RolloutStatus {
            phase: RolloutPhase::Progressing,
            to: rev(3),
            ..Default::default()
        };
        assert_eq!(rolled_back_condition(&st), None);
        st.phase = RolloutPhase::RolledBack;
        st.failure = Some(GateFailure {
            check: "EntriesReapplied".into(),
            virtual_switch: "vs-0".into(),
            switch: Some("sw1".into()),
            message: "TableEntrySet fw: 3 entries failed there".into(),
        });
        let c = rolled_back_condition(&st).unwrap();
        assert!(c.is_true());
        assert_eq!(
            (c.type_.as_str(), c.reason.as_str()),
            (ROLLED_BACK, ROLLED_BACK)
        );
        assert_eq!(
            c.message,
            "revision 3 failed EntriesReapplied on VirtualSwitch vs-0 (Switch sw1): \
             TableEntrySet fw: 3 entries failed there"
        );
        st.phase = RolloutPhase::Completed;
        assert_eq!(
            rolled_back_condition(&st),
            None,
            "a later rollout clears it"
        );
    }

    #[test]
    fn a_virtual_switch_runs_what_the_rollout_assigns_it() {
        let mut st = P4ProgramStatus {
            digest: Some(rev(3).digest),
            ..Default::default()
        };
        assert_eq!(
            assigned(&st, "a"),
            Some(rev(3).digest.as_str()),
            "no rollout"
        );
        let moved = |n: &str, state| MovedSwitch {
            virtual_switch: n.into(),
            switch: None,
            step: 0,
            state,
            packets_per_second_before: None,
        };
        st.rollout = Some(RolloutStatus {
            phase: RolloutPhase::Progressing,
            from: Some(rev(1)),
            to: rev(2),
            moved: vec![
                moved("a", MovedState::Healthy),
                moved("b", MovedState::RolledBack),
            ],
            ..Default::default()
        });
        let on = |st: &P4ProgramStatus, vs| assigned(st, vs).map(str::to_string);
        assert_eq!(on(&st, "a"), Some(rev(2).digest));
        assert_eq!(on(&st, "b"), Some(rev(1).digest));
        assert_eq!(on(&st, "c"), Some(rev(1).digest), "not moved yet");
        st.rollout.as_mut().unwrap().phase = RolloutPhase::RolledBack;
        assert_eq!(on(&st, "a"), Some(rev(1).digest));
        st.rollout.as_mut().unwrap().phase = RolloutPhase::Completed;
        assert_eq!(
            on(&st, "c"),
            Some(rev(2).digest),
            "a pinned revision, not status.digest"
        );
    }

    #[test]
    fn the_gates_facts_come_from_the_objects_status() {
        let vs: VirtualSwitch = serde_json::from_value(serde_json::json!({
            "apiVersion": "p4fleet.dev/v1alpha1", "kind": "VirtualSwitch",
            "metadata": {"name": "edge", "namespace": "ns", "labels": {ORDER_LABEL: "0"}},
            "spec": {"programRef": "fw", "switchRef": "sw1"},
            "status": {"switch": "sw1", "loadedDigest": "d2",
                "conditions": [{"type": "PipelineLoaded", "status": "True", "reason": "Loaded"}],
                "lastSwap": {"at": "2026-12-01T10:00:00Z", "fromDigest": "d1", "toDigest": "d2",
                             "strategy": "Recreate", "durationMillis": 5}}
        }))
        .unwrap();
        let set: TableEntrySet = serde_json::from_value(serde_json::json!({
            "apiVersion": "p4fleet.dev/v1alpha1", "kind": "TableEntrySet",
            "metadata": {"name": "fw", "namespace": "ns"},
            "spec": {"virtualSwitchRef": "edge", "table": "t", "ownership": "Exclusive"},
            "status": {"applied": 7, "failed": 3,
                "conditions": [{"type": "Ready", "status": "False", "reason": "Failed"}],
                "targets": [{"virtualSwitch": "edge", "applied": 7, "failed": 3}]}
        }))
        .unwrap();
        let sw: Switch = serde_json::from_value(serde_json::json!({
            "apiVersion": "p4fleet.dev/v1alpha1", "kind": "Switch",
            "metadata": {"name": "sw1"},
            "spec": {"target": "Bmv2", "endpoint": "h:1"},
            "status": {"conditions": [{"type": "Reachable", "status": "False", "reason": "ConnectionRefused"}]}
        }))
        .unwrap();
        let m = super::member(&vs, &[&set], Some(&sw));
        assert_eq!(m.order.as_deref(), Some("0"));
        assert_eq!(m.switch.as_deref(), Some("sw1"));
        assert_eq!(m.observed.pipeline, PipelineFact::Loaded);
        assert_eq!(
            m.observed.sets,
            [SetFact {
                name: "fw".into(),
                ready: false,
                failed: 3,
                reapplied: false
            }],
            "the swap into d2 has not counted its entries yet"
        );
        assert_eq!(m.observed.reachable, Some(false));
        assert_eq!(super::member(&vs, &[], None).observed.reachable, None);

        // Refusals of a sync that encoded its entries for d1 (it saw the
        // VirtualSwitch before the swap) are not d2's: waited past.
        let mut stale = set.clone();
        let t = &mut stale.status.as_mut().unwrap().targets[0];
        t.pipeline_digest = Some("d1".into());
        let f = &super::member(&vs, &[&stale], Some(&sw)).observed.sets[0];
        assert_eq!((f.failed, f.reapplied), (0, false));
        let mut fresh = stale.clone();
        fresh.status.as_mut().unwrap().targets[0].pipeline_digest = Some("d2".into());
        let f = &super::member(&vs, &[&fresh], Some(&sw)).observed.sets[0];
        assert_eq!(f.failed, 3, "a sync for d2 counts");
    }

    #[test]
    fn all_at_once_moves_everything_and_a_pin_must_exist() {
        let ms = fleet(3);
        let all = Rollout::default();
        let d = advance(&input(&all, rev(2), Some(rev(1)), &ms)).unwrap();
        assert!(d.status.is_none());
        assert!(d.assign.values().all(|r| *r == rev(2)));
        // A first content (nothing ran before) is not staged either.
        let c = canary(vec![step_switches(1), step_percent(100)]);
        let d = advance(&input(&c, rev(1), None, &ms)).unwrap();
        assert!(d.status.is_none() && d.assign.values().all(|r| *r == rev(1)));
        // A pin at rest (AllAtOnce, or the fleet on it already) keeps a
        // status naming it: the VirtualSwitches run it, not the newest.
        let pinned_all = Rollout {
            pin_revision: Some(1),
            ..Rollout::default()
        };
        let d = advance(&Input {
            pinned: true,
            ..input(&pinned_all, rev(1), Some(rev(2)), &ms)
        })
        .unwrap();
        let st = P4ProgramStatus {
            digest: Some(rev(2).digest),
            rollout: d.status.clone(),
            ..Default::default()
        };
        assert_eq!(
            d.status.as_ref().map(|s| s.phase),
            Some(RolloutPhase::Completed)
        );
        assert_eq!(assigned(&st, "vs-00"), Some(rev(1).digest.as_str()));

        let kept = |n: i64| Kept {
            name: format!("fw-{n}"),
            revision: n,
            digest: rev(n).digest,
            parts: Vec::new(),
        };
        let revs = [kept(4), kept(5)];
        let pinned = Rollout {
            pin_revision: Some(4),
            ..c.clone()
        };
        assert_eq!(target(&pinned, &rev(5), &revs).unwrap(), rev(4));
        assert_eq!(target(&c, &rev(5), &revs).unwrap(), rev(5));
        let gone = Rollout {
            pin_revision: Some(2),
            ..c
        };
        let e = target(&gone, &rev(5), &revs).unwrap_err();
        assert_eq!(e.reason(), "PinnedRevisionGone");
        assert_eq!(
            e.to_string(),
            "spec.rollout.pinRevision: revision 2 no longer exists (kept: 4, 5); pick a kept one or remove the pin"
        );
    }
}
