//! Status stage, pure: from what dereference found, the first parse and
//! each target's [`Outcome`], the new status (counts, rates, per-target
//! status, errors, conditions), the Events to publish after writing it and
//! when to come back.
//!
//! - The rate fields and `lastSyncTime` describe the last sync that wrote
//!   something: an idle resync computes the old status again, so nothing
//!   is written and the controller is not re-triggered. A rate is given
//!   only when that sync was large or long enough to measure one
//!   ([`measured_rate`]), to three significant digits.
//! - `desired` is absent while unknown: no target was parsed for, or a
//!   required source could not be read.
//! - `driftCorrected` adds each target's [`Outcome::drift`].
//! - `failed` counts each invalid entry once per target (it is missing on
//!   each) plus what the devices refused or conflicts kept out.

use std::time::Duration;

use kube::runtime::controller::Action;
use p4fleet_crds::condition_types::{READY, RESOLVED_REFS, SYNCED, VALID};
use p4fleet_crds::entry_set::{EntryError as StatusEntryError, TargetStatus};
use p4fleet_crds::{Condition, ConditionStatus, TableEntrySetStatus, find_condition};
use p4fleet_model::sync::{self, SyncTally};

use super::MAX_ERRORS;
use super::apply::Outcome;
use super::conflicts::Claim;
use super::dereference::Problem;
use super::desired::Desired;
use super::set::Set;
use crate::entry_sources::parsed::excerpt_reason;
use crate::status::{EventNote, ready_from};

/// Requeue while waiting for a dependency or an unreachable device.
pub const RETRY: Duration = Duration::from_secs(5);

/// Requeue after the device refused entries for want of room
/// (RESOURCE_EXHAUSTED): room may come (another writer deletes, a batch
/// limit passes), but every retry rewrites what was refused.
pub const RETRY_FULL: Duration = Duration::from_secs(30);

/// When entries the device refused with gRPC `code` are written again:
/// soon after a transient failure (the device or its runtime was busy,
/// restarting or cut off mid-batch), later when it was out of room, and
/// not before the next change or regular resync when the entry itself
/// was refused (INVALID_ARGUMENT, ALREADY_EXISTS, NOT_FOUND, ...: writing
/// it again gives the same answer). Pure.
pub fn retry_after(code: i32) -> Option<Duration> {
    use tonic::Code;
    match Code::from_i32(code) {
        Code::Unavailable
        | Code::DeadlineExceeded
        | Code::Aborted
        | Code::Cancelled
        | Code::Unknown
        | Code::Internal => Some(RETRY),
        Code::ResourceExhausted => Some(RETRY_FULL),
        _ => None,
    }
}

/// Everything the status is computed from.
pub struct Input<'a> {
    pub set: &'a Set<'a>,
    pub problems: &'a [Problem],
    /// The first parse of the desired entries (None without targets): its
    /// invalid entries are reported.
    pub parse: Option<&'a Desired>,
    pub outcomes: &'a [Outcome],
    /// The operator's resync period, for sets that set none.
    pub default_resync: Duration,
    /// The time a sync that wrote something is stamped with.
    pub now: &'a str,
}

/// The status to write, the Events to publish after it, when to come back.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    pub status: TableEntrySetStatus,
    pub events: Vec<EventNote>,
    pub action: Action,
}

#[cfg(test)]
impl Report {
    /// A report whose status holds only `ready`, no Event, waiting for a
    /// change: what the stages that fold into a report start from in tests.
    pub(super) fn ready_only(ready: Condition) -> Report {
        Report {
            status: TableEntrySetStatus {
                conditions: vec![ready],
                ..Default::default()
            },
            events: Vec::new(),
            action: Action::await_change(),
        }
    }
}

/// Why the device is not (yet) known to hold the desired entries, said
/// before a sync finds out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pending {
    /// This process has not synced the set yet (operator restart): an old
    /// Ready was confirmed by another process, against a device that may
    /// have changed since.
    Unconfirmed,
    /// A sync is about to write `updates` updates.
    Syncing { updates: usize },
}

/// Below this many updates, a set that claims nothing yet (Ready not
/// True: a new set, or one that failed) is not marked Syncing first: the
/// mark costs a status write and an Event (two API round trips) per set
/// for a write that is over in moments, and at fleet size those writes
/// delayed the create itself (docs/dev/fleet-lab-notes.md). A Ready True is always
/// retracted before a write, whatever its size.
pub const MARK_NEW_FROM: usize = 50_000;

/// The status to write before a sync goes on: the old one with Ready and
/// Synced no longer claiming that the device is exact (everything else,
/// `observedGeneration` included, as it was). None when it need not
/// change: an Unconfirmed mark only replaces a Ready that is True.
pub fn pending(old: Option<&TableEntrySetStatus>, why: Pending) -> Option<TableEntrySetStatus> {
    let ready = old.and_then(|s| find_condition(&s.conditions, READY));
    let (status, reason, message) = match why {
        Pending::Unconfirmed => {
            if !ready.is_some_and(Condition::is_true) {
                return None;
            }
            (
                ConditionStatus::Unknown,
                "Unconfirmed",
                "not yet confirmed against the device by this operator process".to_string(),
            )
        }
        Pending::Syncing { updates } => {
            if !ready.is_some_and(Condition::is_true) && updates < MARK_NEW_FROM {
                return None;
            }
            (
                ConditionStatus::False,
                "Syncing",
                format!("writing {updates} updates to the device"),
            )
        }
    };
    let mut new = old.cloned().unwrap_or_default();
    for type_ in [SYNCED, READY] {
        let c = Condition {
            status,
            ..Condition::new(type_, false, reason, message.clone())
        };
        new.conditions.retain(|c| c.type_ != type_);
        new.conditions.push(c);
    }
    Some(new)
}

/// Computes the [`Report`] of one sync.
pub fn report(input: &Input) -> Report {
    let set = input.set;
    let me = &set.key;
    let old = set.status;
    let mut total = SyncTally::default();
    for o in input.outcomes {
        total.add(&o.tally);
    }
    let invalid = input.parse.map_or(0, |d| d.invalid) as u64;
    let targets = input.outcomes.len() as u64;
    let counts = Counts {
        total,
        invalid,
        failed: total.failed + invalid * targets,
        drift: input.outcomes.iter().map(|o| o.drift).sum(),
    };
    let device_errors: Vec<&StatusEntryError> =
        input.outcomes.iter().flat_map(|o| &o.errors).collect();
    let mut errors: Vec<StatusEntryError> =
        input.parse.map(|d| d.errors.clone()).unwrap_or_default();
    errors.extend(device_errors.iter().map(|e| (*e).clone()));
    errors.truncate(MAX_ERRORS);
    // Whatever a device or a source said, status stays far below the API
    // server's request limit: MAX_ERRORS reasons and keys of at most 512 bytes.
    for e in &mut errors {
        e.reason = excerpt_reason(&e.reason);
        e.key = e.key.as_deref().map(excerpt_reason);
    }

    let resolved = resolved_refs(me, input.problems);
    let valid = valid(me, input.problems, &counts, &errors, input.outcomes);
    let synced = synced(
        me,
        input.problems,
        &counts,
        device_errors.first().copied(),
        input.outcomes,
    );
    let ready = ready_from(&[&resolved, &valid, &synced], READY, "all entries applied");

    // The generation counts as observed once it was applied: a target whose
    // device could not be written leaves the old one.
    let applied = input.outcomes.iter().all(|o| o.device_error.is_none());
    let mut status = TableEntrySetStatus {
        observed_generation: match applied {
            true => set.generation,
            false => old.and_then(|s| s.observed_generation),
        },
        desired: desired_known(input).then_some(total.desired),
        applied: total.applied,
        failed: counts.failed,
        drift_corrected: old.map_or(0, |s| s.drift_corrected) + counts.drift,
        errors,
        targets: target_statuses(old, input.outcomes),
        conditions: vec![resolved, valid, synced, ready],
        ..Default::default()
    };
    rates(&mut status, old, &total, input.now);
    let events = events(&status, old, &counts, device_errors.first().copied());
    Report {
        status,
        events,
        action: action(input),
    }
}

/// What the status counts, summed over targets.
struct Counts {
    total: SyncTally,
    /// Entries skipped as invalid (of the first parse).
    invalid: u64,
    /// Desired entries not on some target: invalid ones once per target,
    /// plus refusals and conflicts.
    failed: u64,
    drift: u64,
}

impl Counts {
    /// Entries that failed on a device (not for being invalid), and
    /// entries a refused delete left behind.
    fn on_devices(&self) -> u64 {
        self.total.failed + self.total.stale
    }
}

fn resolved_refs(me: &str, problems: &[Problem]) -> Condition {
    let refs: Vec<&Problem> = problems.iter().filter(|p| !p.invalidates_spec()).collect();
    match refs.first() {
        None => Condition::new(RESOLVED_REFS, true, "Resolved", "all references resolved"),
        Some(first) => Condition::new(
            RESOLVED_REFS,
            false,
            first.reason(),
            format!("TableEntrySet {me}: {}", join(&refs)),
        ),
    }
}

fn valid(
    me: &str,
    problems: &[Problem],
    counts: &Counts,
    errors: &[StatusEntryError],
    outcomes: &[Outcome],
) -> Condition {
    let spec: Vec<&Problem> = problems.iter().filter(|p| p.invalidates_spec()).collect();
    if let Some(first) = spec.first() {
        return Condition::new(
            VALID,
            false,
            first.reason(),
            format!("TableEntrySet {me}: {}", join(&spec)),
        );
    }
    if counts.invalid > 0 {
        let first: Vec<String> = errors
            .iter()
            .take(3)
            .map(|e| format!("{}: {}", e.source, e.reason))
            .collect();
        let more = match counts.invalid as usize {
            n if n > first.len() => {
                format!(
                    " (and {} more; status.errors lists the first)",
                    n - first.len()
                )
            }
            _ => String::new(),
        };
        let message = format!(
            "TableEntrySet {me}: {} invalid entries skipped: {}{more}",
            counts.invalid,
            first.join("; ")
        );
        return Condition::new(VALID, false, "InvalidEntries", message);
    }
    if outcomes.is_empty() {
        if let Some(message) = held(me, problems) {
            return Condition::unknown(VALID, HELD, message);
        }
        return Condition::unknown(
            VALID,
            "NoTarget",
            "no resolved VirtualSwitch to validate against",
        );
    }
    Condition::new(
        VALID,
        true,
        "Valid",
        format!("{} entries", counts.total.desired),
    )
}

/// Reason of Valid and Synced when every target this set fills is kept by
/// an older set (the same as ResolvedRefs', so one Event says it).
const HELD: &str = "OwnershipConflict";

/// When conflicts with older sets left this set no target: that it is
/// held, by which set, and what to do (the conflicts' own words).
fn held(me: &str, problems: &[Problem]) -> Option<String> {
    let held: Vec<String> = problems
        .iter()
        .filter_map(|p| match p {
            Problem::OwnershipConflict(c) if !c.keeps && c.claim == Claim::Table => {
                Some(c.to_string())
            }
            _ => None,
        })
        .collect();
    (!held.is_empty()).then(|| format!("TableEntrySet {me}: {}", held.join("; ")))
}

fn synced(
    me: &str,
    problems: &[Problem],
    counts: &Counts,
    first: Option<&StatusEntryError>,
    outcomes: &[Outcome],
) -> Condition {
    let unavailable: Vec<String> = outcomes
        .iter()
        .filter_map(|o| o.device_error.as_ref().map(ToString::to_string))
        .collect();
    if !unavailable.is_empty() {
        return Condition::new(SYNCED, false, "DeviceUnavailable", unavailable.join("; "));
    }
    if outcomes.is_empty() {
        if let Some(message) = held(me, problems) {
            return Condition::new(SYNCED, false, HELD, message);
        }
        return Condition::unknown(SYNCED, "NoTarget", "no resolved VirtualSwitch");
    }
    if counts.on_devices() > 0 {
        let message = format!(
            "{} entries failed on the device: {}",
            counts.on_devices(),
            first.map(describe).unwrap_or_default()
        );
        return Condition::new(SYNCED, false, "EntriesFailed", message);
    }
    Condition::new(
        SYNCED,
        true,
        "Synced",
        format!(
            "{} entries applied on {} target(s)",
            counts.total.applied,
            outcomes.len()
        ),
    )
}

/// `source key: reason` of an entry error.
fn describe(e: &StatusEntryError) -> String {
    format!(
        "{} {}: {}",
        e.source,
        e.key.as_deref().unwrap_or_default(),
        e.reason
    )
}

/// Problems shown in a condition message; the rest are counted, so the
/// message stays short however many sources or targets fail.
const MAX_PROBLEMS_SHOWN: usize = 5;

fn join(problems: &[&Problem]) -> String {
    let mut all: Vec<String> = problems
        .iter()
        .take(MAX_PROBLEMS_SHOWN)
        .map(|p| excerpt_reason(&p.to_string()))
        .collect();
    if problems.len() > MAX_PROBLEMS_SHOWN {
        all.push(format!("and {} more", problems.len() - MAX_PROBLEMS_SHOWN));
    }
    all.join("; ")
}

/// Whether the desired count is known: the entries were parsed for a
/// target and no required source is missing or unreadable (its entries
/// are unknown, not absent).
fn desired_known(input: &Input) -> bool {
    input.parse.is_some()
        && !input.outcomes.is_empty()
        && !input.problems.iter().any(Problem::is_source)
}

/// Below both of these a sync's rate is mostly one request's round trip
/// and the scheduler's noise (3 entries in 2 ms "1.5k/s"), not a rate.
const RATE_MIN_UPDATES: u64 = 100;
const RATE_MIN_ELAPSED: Duration = Duration::from_millis(100);

/// Updates per second of a sync that wrote `written` updates in `elapsed`,
/// when that measures something: at least [`RATE_MIN_UPDATES`] updates or
/// [`RATE_MIN_ELAPSED`] of writing. Rounded to three significant digits.
pub fn measured_rate(written: u64, elapsed: Duration) -> Option<f64> {
    let measurable = written >= RATE_MIN_UPDATES || elapsed >= RATE_MIN_ELAPSED;
    (written > 0 && elapsed > Duration::ZERO && measurable)
        .then(|| significant(written as f64 / elapsed.as_secs_f64(), 3))
}

/// `x` rounded to `digits` significant digits.
fn significant(x: f64, digits: i32) -> f64 {
    if x <= 0.0 || !x.is_finite() {
        return x;
    }
    let scale = 10f64.powi(digits - 1 - x.log10().floor() as i32);
    (x * scale).round() / scale
}

fn entries_per_second(t: &SyncTally) -> Option<f64> {
    measured_rate(t.written, t.writes.elapsed)
}

fn target_statuses(old: Option<&TableEntrySetStatus>, outcomes: &[Outcome]) -> Vec<TargetStatus> {
    outcomes
        .iter()
        .map(|o| {
            let before = old
                .and_then(|s| {
                    s.targets
                        .iter()
                        .find(|x| x.virtual_switch == o.virtual_switch)
                })
                .and_then(|t| t.entries_per_second);
            TargetStatus {
                virtual_switch: o.virtual_switch.clone(),
                switch: Some(o.switch.clone()),
                applied: o.tally.applied,
                failed: o.tally.failed,
                stale: o.tally.stale,
                // A target that wrote describes its own sync (measured or
                // not); one that wrote nothing keeps its last rate.
                entries_per_second: match o.tally.written {
                    0 => before,
                    _ => entries_per_second(&o.tally).map(|r| r as u64),
                },
                pipeline_digest: o.pipeline_digest.clone(),
                // Filled in by the rollout stage (`rollout::fold`).
                entries_digest: None,
            }
        })
        .collect()
}

/// The rate fields: of this sync when it wrote something, else the old ones.
fn rates(
    status: &mut TableEntrySetStatus,
    old: Option<&TableEntrySetStatus>,
    total: &SyncTally,
    now: &str,
) {
    if total.written == 0 {
        status.rate = old.and_then(|s| s.rate.clone());
        status.entries_per_second = old.and_then(|s| s.entries_per_second);
        status.mean_request_latency_micros = old.and_then(|s| s.mean_request_latency_micros);
        status.last_sync_updates = old.and_then(|s| s.last_sync_updates);
        status.last_sync_time = old.and_then(|s| s.last_sync_time.clone());
        return;
    }
    let w = &total.writes;
    let eps = entries_per_second(total);
    status.rate = eps.map(sync::format_rate);
    status.entries_per_second = eps.map(|r| r as u64);
    status.mean_request_latency_micros = Some(
        (w.request_latency.as_micros() as u64)
            .checked_div(w.requests)
            .unwrap_or(0),
    );
    status.last_sync_updates = Some(total.written);
    status.last_sync_time = Some(now.to_string());
}

/// `Synced` after a sync that wrote something; `EntriesFailed` when
/// devices refused entries and something changed (a write, or the count).
fn events(
    new: &TableEntrySetStatus,
    old: Option<&TableEntrySetStatus>,
    counts: &Counts,
    first: Option<&StatusEntryError>,
) -> Vec<EventNote> {
    let mut out = Vec::new();
    let t = &counts.total;
    if t.written > 0 {
        let at = new
            .rate
            .as_deref()
            .map(|r| format!(" at {r}"))
            .unwrap_or_default();
        let mut note = format!(
            "Synced {} entries{at} ({} inserted, {} modified, {} deleted; {} requests, mean {} us)",
            t.written,
            t.inserted,
            t.modified,
            t.deleted,
            t.writes.requests,
            new.mean_request_latency_micros.unwrap_or(0)
        );
        if counts.drift > 0 {
            note.push_str(&format!("; {} drifted entries repaired", counts.drift));
        }
        out.push(EventNote::normal("Synced", "Write", note));
    }
    let failed = counts.on_devices();
    if failed > 0 && (t.written > 0 || old.map(|s| s.failed) != Some(new.failed)) {
        let note = format!(
            "{failed} entries failed: {}",
            first.map(describe).unwrap_or_default()
        );
        out.push(EventNote::warning("EntriesFailed", "Write", note));
    }
    out
}

/// The set's resync period (`resyncSeconds`, 0 disables), shortened to
/// [`RETRY`] while a device is unavailable or a reference is polled for,
/// and to [`retry_after`] of the entries a device refused.
fn action(input: &Input) -> Action {
    let resync = match input.set.spec.resync_seconds {
        Some(0) => None,
        Some(s) => Some(Duration::from_secs(u64::from(s))),
        None => Some(input.default_resync),
    };
    let retry = input.outcomes.iter().any(|o| o.device_error.is_some())
        || input.problems.iter().any(Problem::polls);
    // Entries refused for a reason that may pass (`retry_after`).
    let refused = input.outcomes.iter().filter_map(|o| o.retry).min();
    let soonest = [retry.then_some(RETRY), refused, resync]
        .into_iter()
        .flatten()
        .min();
    match soonest {
        Some(d) => Action::requeue(d),
        None => Action::await_change(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::entry_set::apply::DeviceError;
    use crate::controllers::entry_set::dereference::{SourceProblem, Sources};
    use crate::controllers::entry_set::desired::tests::{firewall, fw, set};
    use crate::controllers::entry_set::desired::{self};
    use crate::status::{settle, unchanged};
    use p4fleet_crds::TableEntrySet;
    use p4fleet_crds::{ConditionStatus, find_condition};
    use p4fleet_model::sync::WriteStats;

    const RESYNC: Duration = Duration::from_secs(60);

    /// A tally of a sync of `desired` entries that wrote `written` of them
    /// in 10 ms with 2 requests and had `failed` refused.
    fn tally(desired: u64, written: u64, failed: u64) -> SyncTally {
        SyncTally {
            desired,
            applied: desired - failed,
            failed,
            stale: 0,
            written,
            inserted: written,
            modified: 0,
            deleted: 0,
            writes: if written > 0 {
                WriteStats {
                    requests: 2,
                    elapsed: Duration::from_millis(10),
                    request_latency: Duration::from_millis(8),
                }
            } else {
                WriteStats::default()
            },
        }
    }

    /// `t` with its writes taking `ms` milliseconds.
    fn timed(mut t: SyncTally, ms: u64) -> SyncTally {
        t.writes.elapsed = Duration::from_millis(ms);
        t
    }

    fn outcome(vs: &str, tally: SyncTally) -> Outcome {
        Outcome {
            virtual_switch: vs.into(),
            switch: "sw".into(),
            tally,
            errors: vec![],
            device_error: None,
            drift: 0,
            owned: None,
            retry: None,
            pipeline_digest: Some("d1".into()),
            byte_equal: false,
        }
    }

    #[test]
    fn refused_entries_are_retried_when_the_refusal_may_pass() {
        use tonic::Code;
        assert_eq!(retry_after(Code::Unavailable as i32), Some(RETRY));
        assert_eq!(retry_after(Code::Aborted as i32), Some(RETRY));
        assert_eq!(
            retry_after(Code::ResourceExhausted as i32),
            Some(RETRY_FULL)
        );
        for c in [Code::InvalidArgument, Code::AlreadyExists, Code::NotFound] {
            assert_eq!(retry_after(c as i32), None, "{c:?}");
        }
        // The soonest of the targets' retries, never later than the resync.
        let (s, d) = with_entries(false);
        let mut full = outcome("a", SyncTally::default());
        full.retry = Some(RETRY_FULL);
        let mut busy = outcome("b", SyncTally::default());
        busy.retry = Some(RETRY);
        let act = |outcomes: &[Outcome]| run(&s, &[], Some(&d), outcomes).action;
        assert_eq!(
            act(std::slice::from_ref(&full)),
            Action::requeue(RETRY_FULL)
        );
        assert_eq!(act(&[full, busy]), Action::requeue(RETRY));
        assert_eq!(
            act(&[outcome("a", SyncTally::default())]),
            Action::requeue(RESYNC)
        );
    }

    fn refused(key: &str) -> StatusEntryError {
        StatusEntryError {
            source: "configmap/fw:line 3".into(),
            key: Some(key.into()),
            reason: "ResourceExhausted: table full".into(),
        }
    }

    fn unreachable(vs: &str) -> Outcome {
        Outcome {
            device_error: Some(DeviceError {
                switch: "sw".into(),
                error: p4fleet_client::Error::Unreachable {
                    endpoint: "h:1".into(),
                    device_id: 1,
                    cause: p4fleet_client::ConnectCause::Refused,
                    reason: "tcp connect error".into(),
                },
            }),
            ..outcome(vs, SyncTally::unsynced(3))
        }
    }

    /// A set with three valid entries, or with bad ones among them.
    fn with_entries(bad: bool) -> (TableEntrySet, Desired) {
        let mut entries = vec![
            fw("10.0.0.1", "10.0.0.2", "allow", &[("port", "1")]),
            fw("10.0.0.1", "10.0.0.3", "drop", &[]),
            fw("10.0.0.1", "10.0.0.4", "drop", &[]),
        ];
        if bad {
            entries.push(fw("10.0.0.1", "10.0.0.5", "allow", &[("port", "4096")]));
            entries.push(fw("10.0.0.1", "10.0.0.6", "jump", &[]));
        }
        let s = set(entries);
        let d = desired::parse(&s.spec, &firewall(), &Sources::default());
        (s, d)
    }

    fn run(
        set: &TableEntrySet,
        problems: &[Problem],
        parse: Option<&Desired>,
        outcomes: &[Outcome],
    ) -> Report {
        report(&Input {
            set: &Set::of(set),
            problems,
            parse,
            outcomes,
            default_resync: RESYNC,
            now: "2025-01-01T00:00:00Z",
        })
    }

    fn cond<'a>(r: &'a Report, t: &str) -> &'a Condition {
        find_condition(&r.status.conditions, t).unwrap()
    }

    fn state(r: &Report, t: &str) -> (ConditionStatus, String) {
        let c = cond(r, t);
        (c.status, c.reason.clone())
    }

    fn assert_message_starts(r: &Report, t: &str, prefix: &str) {
        let message = &cond(r, t).message;
        assert!(message.starts_with(prefix), "{t}: {message}");
    }

    fn is(status: ConditionStatus, reason: &str) -> (ConditionStatus, String) {
        (status, reason.to_string())
    }

    use ConditionStatus::{False, True, Unknown};

    #[test]
    fn a_complete_sync_is_ready_with_its_rate_and_one_event() {
        let (s, d) = with_entries(false);
        let r = run(
            &s,
            &[],
            Some(&d),
            &[outcome("vs", timed(tally(3, 3, 0), 150))],
        );
        for t in [RESOLVED_REFS, VALID, SYNCED, READY] {
            assert!(cond(&r, t).is_true(), "{t}: {:?}", cond(&r, t));
        }
        assert_eq!(cond(&r, VALID).message, "3 entries");
        assert_eq!(cond(&r, SYNCED).message, "3 entries applied on 1 target(s)");
        let st = &r.status;
        assert_eq!((st.desired, st.applied, st.failed), (Some(3), 3, 0));
        assert_eq!(st.rate.as_deref(), Some("20/s"));
        assert_eq!(st.entries_per_second, Some(20));
        assert_eq!(st.mean_request_latency_micros, Some(4000));
        assert_eq!(st.last_sync_updates, Some(3));
        assert_eq!(st.last_sync_time.as_deref(), Some("2025-01-01T00:00:00Z"));
        assert_eq!(st.targets[0].entries_per_second, Some(20));
        assert_eq!(st.targets[0].switch.as_deref(), Some("sw"));
        // Which content's P4Info encoded them, for a rollout's gate.
        assert_eq!(st.targets[0].pipeline_digest.as_deref(), Some("d1"));
        assert_eq!(r.events.len(), 1);
        assert_eq!(
            r.events[0].note,
            "Synced 3 entries at 20/s (3 inserted, 0 modified, 0 deleted; 2 requests, mean 4000 us)"
        );
        assert!(!r.events[0].warning);
        assert_eq!(r.action, Action::requeue(RESYNC));
    }

    #[test]
    fn an_idle_resync_changes_no_status_and_publishes_nothing() {
        let (mut s, d) = with_entries(false);
        let first = run(
            &s,
            &[],
            Some(&d),
            &[outcome("vs", timed(tally(3, 3, 0), 150))],
        );
        let mut written = first.status.clone();
        settle(None, &mut written, Some(1), "t1");
        s.status = Some(written.clone());
        // The next resync finds everything in place and writes nothing.
        let idle = run(&s, &[], Some(&d), &[outcome("vs", tally(3, 0, 0))]);
        let mut again = idle.status.clone();
        settle(Some(&written), &mut again, Some(1), "t2");
        assert!(unchanged(Some(&written), &again), "{again:#?}");
        assert!(idle.events.is_empty());
        // Rates and lastSyncTime describe the last sync that wrote.
        assert_eq!(
            again.last_sync_time.as_deref(),
            Some("2025-01-01T00:00:00Z")
        );
        assert_eq!(again.targets[0].entries_per_second, Some(20));
    }

    #[test]
    fn a_sync_too_small_to_measure_has_no_rate_but_says_what_it_wrote() {
        let (mut s, d) = with_entries(false);
        // An earlier large sync measured a rate; this one wrote 3 updates
        // in 10 ms, which measures a round trip, not a rate.
        s.status = Some(TableEntrySetStatus {
            rate: Some("52.8k/s".into()),
            entries_per_second: Some(52_800),
            targets: vec![TargetStatus {
                virtual_switch: "vs".into(),
                entries_per_second: Some(52_800),
                ..Default::default()
            }],
            ..Default::default()
        });
        let r = run(&s, &[], Some(&d), &[outcome("vs", tally(3, 3, 0))]);
        let st = &r.status;
        assert_eq!((st.rate.as_deref(), st.entries_per_second), (None, None));
        assert_eq!(st.targets[0].entries_per_second, None);
        assert_eq!(st.last_sync_updates, Some(3));
        assert_eq!(st.mean_request_latency_micros, Some(4000));
        assert_eq!(
            r.events[0].note,
            "Synced 3 entries (3 inserted, 0 modified, 0 deleted; 2 requests, mean 4000 us)"
        );
    }

    #[test]
    fn rates_need_enough_updates_or_time_and_are_rounded() {
        let ms = Duration::from_millis;
        assert_eq!(measured_rate(0, ms(500)), None);
        assert_eq!(measured_rate(99, ms(99)), None);
        assert_eq!(measured_rate(100, Duration::ZERO), None);
        assert_eq!(measured_rate(100, ms(1)), Some(100_000.0));
        assert_eq!(measured_rate(5, ms(100)), Some(50.0));
        assert_eq!(measured_rate(30_000, ms(567)), Some(52_900.0));
        assert_eq!(measured_rate(12_345, ms(1000)), Some(12_300.0));
        assert_eq!(measured_rate(1_000_000, ms(7_468)), Some(134_000.0));
    }

    #[test]
    fn desired_is_absent_until_known() {
        let (s, d) = with_entries(false);
        // No target: nothing was parsed.
        let r = run(
            &s,
            &[Problem::VirtualSwitchNotFound("vs".into())],
            None,
            &[],
        );
        assert_eq!(r.status.desired, None);
        let json = serde_json::to_value(&r.status).unwrap();
        assert!(json.get("desired").is_none(), "{json}");
        // A required ConfigMap is missing: its entries are unknown.
        let missing = [Problem::Source(SourceProblem::NotFound("fw".into()))];
        let r = run(&s, &missing, Some(&d), &[outcome("vs", tally(3, 3, 0))]);
        assert_eq!(r.status.desired, None);
        // Parsed, even with the device unreachable: known.
        let r = run(&s, &[], Some(&d), &[unreachable("vs")]);
        assert_eq!(r.status.desired, Some(3));
        // An Exclusive set that clears its table desires 0, and says so.
        let empty = run(&s, &[], Some(&d), &[outcome("vs", tally(0, 0, 0))]);
        assert_eq!(empty.status.desired, Some(0));
    }

    #[test]
    fn rates_only_when_something_was_written() {
        let (s, d) = with_entries(false);
        let r = run(&s, &[], Some(&d), &[outcome("vs", tally(3, 0, 0))]);
        let st = &r.status;
        assert_eq!(st.rate, None);
        assert_eq!(st.entries_per_second, None);
        assert_eq!(st.last_sync_updates, None);
        assert_eq!(st.last_sync_time, None);
        assert_eq!(st.targets[0].entries_per_second, None);
        assert!(r.events.is_empty());
    }

    #[test]
    fn drift_repairs_are_added_up_and_named_in_the_event() {
        let (mut s, d) = with_entries(false);
        s.status = Some(TableEntrySetStatus {
            drift_corrected: 7,
            ..Default::default()
        });
        let mut a = outcome("a", tally(3, 2, 0));
        a.drift = 2;
        let mut b = outcome("b", tally(3, 1, 0));
        b.drift = 1;
        let r = run(&s, &[], Some(&d), &[a, b]);
        assert_eq!(r.status.drift_corrected, 10);
        assert!(
            r.events[0].note.ends_with("; 3 drifted entries repaired"),
            "{}",
            r.events[0].note
        );
        assert_eq!(cond(&r, SYNCED).message, "6 entries applied on 2 target(s)");
    }

    #[test]
    fn invalid_entries_make_it_invalid_but_synced_and_count_once_per_target() {
        let (s, d) = with_entries(true);
        let r = run(
            &s,
            &[],
            Some(&d),
            &[outcome("a", tally(3, 3, 0)), outcome("b", tally(3, 3, 0))],
        );
        assert_eq!(state(&r, VALID), is(False, "InvalidEntries"));
        let skipped = "TableEntrySet ns/s: 2 invalid entries skipped: entries[3]: ";
        assert_message_starts(&r, VALID, skipped);
        // The devices took every valid entry: Synced stays True.
        assert_eq!(state(&r, SYNCED), is(True, "Synced"));
        assert_eq!(state(&r, READY), is(False, "InvalidEntries"));
        assert_eq!((r.status.desired, r.status.failed), (Some(6), 4));
        assert_eq!(r.status.errors.len(), 2);
        assert!(r.events.iter().all(|e| e.reason == "Synced"));
    }

    #[test]
    fn refused_entries_fail_sync_and_warn_when_something_changed() {
        let (mut s, d) = with_entries(false);
        let mut o = outcome("vs", tally(3, 2, 1));
        o.errors.push(refused("10.0.0.4 10.0.0.1"));
        let r = run(&s, &[], Some(&d), &[o]);
        assert_eq!(state(&r, SYNCED), is(False, "EntriesFailed"));
        assert_eq!(
            cond(&r, SYNCED).message,
            "1 entries failed on the device: configmap/fw:line 3 10.0.0.4 10.0.0.1: ResourceExhausted: table full"
        );
        assert_eq!(state(&r, READY), is(False, "EntriesFailed"));
        assert_eq!(r.status.failed, 1);
        let warn: Vec<&EventNote> = r.events.iter().filter(|e| e.warning).collect();
        assert_eq!(warn.len(), 1);
        assert_eq!(warn[0].reason, "EntriesFailed");
        assert!(
            warn[0]
                .note
                .starts_with("1 entries failed: configmap/fw:line 3")
        );

        // The same failure on an idle resync is not announced again.
        s.status = Some(r.status.clone());
        let mut o = outcome("vs", tally(3, 0, 1));
        o.errors.push(refused("10.0.0.4 10.0.0.1"));
        assert!(run(&s, &[], Some(&d), &[o]).events.is_empty());
    }

    #[test]
    fn a_refused_delete_leaves_the_set_not_ready() {
        let (s, d) = with_entries(false);
        let mut t = tally(3, 0, 0);
        t.stale = 1;
        let mut o = outcome("vs", t);
        o.errors.push(refused("10.0.0.9 10.0.0.1"));
        let r = run(&s, &[], Some(&d), &[o]);
        assert_eq!(state(&r, SYNCED), is(False, "EntriesFailed"));
        assert_eq!(state(&r, READY), is(False, "EntriesFailed"));
    }

    #[test]
    fn an_unavailable_device_is_not_synced_and_retried_soon() {
        let (s, d) = with_entries(false);
        let r = run(&s, &[], Some(&d), &[unreachable("vs")]);
        assert_eq!(state(&r, SYNCED), is(False, "DeviceUnavailable"));
        assert_message_starts(&r, SYNCED, "Switch sw: device 1 at h:1 is unreachable");
        assert_eq!(state(&r, VALID), is(True, "Valid"));
        assert_eq!(state(&r, READY), is(False, "DeviceUnavailable"));
        assert_eq!((r.status.desired, r.status.applied), (Some(3), 0));
        assert_eq!(r.action, Action::requeue(RETRY));
    }

    #[test]
    fn a_set_held_by_an_older_one_says_so_by_name_not_no_target() {
        use super::super::conflicts::Conflict;
        use p4fleet_crds::entry_set::Ownership;
        let (s, d) = with_entries(false);
        let held = Conflict {
            virtual_switch: "vs".into(),
            table: "MyIngress.fw".into(),
            claim: Claim::Table,
            other: "merged".into(),
            ownership: Ownership::Exclusive,
            other_ownership: Ownership::Merge,
            keeps: false,
        };
        let r = run(&s, &[Problem::OwnershipConflict(held)], Some(&d), &[]);
        for t in [VALID, SYNCED, READY, RESOLVED_REFS] {
            assert_eq!(state(&r, t).1, "OwnershipConflict", "{t}");
            let m = &cond(&r, t).message;
            assert!(
                m.contains("TableEntrySet merged (Merge; this set: Exclusive)")
                    && m.contains("this set is held")
                    && m.contains("delete one of the two sets or make both Merge"),
                "{t}: {m}"
            );
        }
        assert_eq!(state(&r, SYNCED).0, False);
        // A set with no target for another reason still says NoTarget.
        let r = run(&s, &[], Some(&d), &[]);
        assert_eq!(state(&r, VALID), is(Unknown, "NoTarget"));
    }

    #[test]
    fn unresolved_references_name_every_problem_the_first_gives_the_reason() {
        let (s, d) = with_entries(false);
        let problems = [
            Problem::VirtualSwitchNotFound("vs".into()),
            Problem::Source(SourceProblem::NotFound("fw".into())),
        ];
        let r = run(&s, &problems, None, &[]);
        assert_eq!(state(&r, RESOLVED_REFS), is(False, "VirtualSwitchNotFound"));
        assert_eq!(
            cond(&r, RESOLVED_REFS).message,
            "TableEntrySet ns/s: spec.virtualSwitchRef: VirtualSwitch vs not found; ConfigMap fw not found"
        );
        assert_eq!(state(&r, VALID), is(Unknown, "NoTarget"));
        assert_eq!(state(&r, SYNCED), is(Unknown, "NoTarget"));
        assert_eq!(state(&r, READY), is(False, "VirtualSwitchNotFound"));
        assert_eq!(r.status.failed, 0);
        assert_eq!(
            r.action,
            Action::requeue(RETRY),
            "a VirtualSwitch is polled for"
        );

        // A missing ConfigMap alone: the inline entries still apply; the
        // ConfigMap's watch brings the set back.
        let problems = [Problem::Source(SourceProblem::NotFound("fw".into()))];
        let r = run(&s, &problems, Some(&d), &[outcome("vs", tally(3, 3, 0))]);
        assert_eq!(state(&r, RESOLVED_REFS), is(False, "ConfigMapNotFound"));
        assert_eq!(state(&r, SYNCED), is(True, "Synced"));
        assert_eq!(state(&r, READY), is(False, "ConfigMapNotFound"));
        assert_eq!(r.action, Action::requeue(RESYNC));
    }

    #[test]
    fn many_problems_and_long_reasons_keep_status_small() {
        let (s, d) = with_entries(false);
        // A selector over 1000 ConfigMaps, each unreadable.
        let problems: Vec<Problem> = (0..1000)
            .map(|i| {
                Problem::Source(SourceProblem::Unreadable {
                    config_map: format!("part-{i}"),
                    key: "entries.txt.gz".into(),
                    error: crate::entry_sources::DecodeError::TooLarge { limit: 1 },
                })
            })
            .collect();
        let mut o = outcome("vs", tally(3, 3, 0));
        o.errors.push(StatusEntryError {
            source: "configmap/fw/entries:line 3".into(),
            key: Some("k".repeat(100_000)),
            reason: "r".repeat(700_000),
        });
        let r = run(&s, &problems, Some(&d), &[o]);
        let refs = cond(&r, RESOLVED_REFS);
        assert_eq!(refs.reason, "SourceUnreadable");
        assert!(refs.message.ends_with("and 995 more"), "{}", refs.message);
        assert!(refs.message.len() < 2000, "{}", refs.message.len());
        let size = serde_json::to_string(&r.status).unwrap().len();
        assert!(size < 20_000, "status of {size} bytes");
    }

    #[test]
    fn an_unknown_table_is_invalid_not_unresolved() {
        let (s, _) = with_entries(false);
        let p = [Problem::UnknownTable {
            table: "MyIngress.dmac".into(),
            virtual_switch: "vs".into(),
            error: super::super::dereference::ProgramError::NotFound("fw".into()),
        }];
        let r = run(&s, &p, None, &[]);
        assert_eq!(state(&r, RESOLVED_REFS), is(True, "Resolved"));
        assert_eq!(state(&r, VALID), is(False, "UnknownTable"));
        assert!(cond(&r, VALID).message.contains("MyIngress.dmac"));
        assert_eq!(state(&r, READY), is(False, "UnknownTable"));
        assert_eq!(r.action, Action::requeue(RESYNC));
    }

    #[test]
    fn pending_syncs_and_restarts_never_leave_an_old_ready() {
        let (mut s, d) = with_entries(false);
        s.metadata.generation = Some(1);
        // A new set says Syncing before a large first write only (it
        // claims nothing either way).
        assert_eq!(pending(None, Pending::Syncing { updates: 3 }), None);
        let big = MARK_NEW_FROM;
        let st = pending(None, Pending::Syncing { updates: big }).unwrap();
        let ready = find_condition(&st.conditions, READY).unwrap();
        assert_eq!((ready.status, ready.reason.as_str()), (False, "Syncing"));
        assert_eq!(
            ready.message,
            format!("writing {big} updates to the device")
        );
        assert_eq!(
            find_condition(&st.conditions, SYNCED).unwrap().status,
            False
        );
        assert_eq!(pending(None, Pending::Unconfirmed), None, "nothing claimed");

        // A Ready set of generation 1.
        let done = run(&s, &[], Some(&d), &[outcome("vs", tally(3, 3, 0))]).status;
        assert_eq!(done.observed_generation, Some(1));
        let restarted = pending(Some(&done), Pending::Unconfirmed).unwrap();
        let ready = find_condition(&restarted.conditions, READY).unwrap();
        assert_eq!(
            (ready.status, ready.reason.as_str()),
            (Unknown, "Unconfirmed")
        );
        assert_eq!(
            (restarted.applied, restarted.observed_generation),
            (3, Some(1))
        );
        assert_eq!(
            pending(Some(&restarted), Pending::Unconfirmed),
            None,
            "only a True Ready is marked"
        );
        let syncing = pending(Some(&done), Pending::Syncing { updates: 1 }).unwrap();
        assert_eq!(syncing.conditions.len(), done.conditions.len());
        assert_eq!(
            find_condition(&syncing.conditions, READY).unwrap().reason,
            "Syncing"
        );

        // Generation 2 whose device is unavailable: observedGeneration stays.
        s.metadata.generation = Some(2);
        s.status = Some(syncing);
        let r = run(&s, &[], Some(&d), &[unreachable("vs")]);
        assert_eq!(r.status.observed_generation, Some(1));
        assert_eq!(state(&r, READY), is(False, "DeviceUnavailable"));
        // Once applied it follows.
        let r = run(&s, &[], Some(&d), &[outcome("vs", tally(3, 3, 0))]);
        assert_eq!(r.status.observed_generation, Some(2));
        assert_eq!(state(&r, READY), is(True, "Ready"));
    }

    #[test]
    fn resync_seconds_set_the_requeue_and_zero_disables_it() {
        let (mut s, d) = with_entries(false);
        s.spec.resync_seconds = Some(3);
        let ok = [outcome("vs", tally(3, 0, 0))];
        assert_eq!(
            run(&s, &[], Some(&d), &ok).action,
            Action::requeue(Duration::from_secs(3))
        );
        s.spec.resync_seconds = Some(0);
        assert_eq!(run(&s, &[], Some(&d), &ok).action, Action::await_change());
        assert_eq!(
            run(&s, &[], Some(&d), &[unreachable("vs")]).action,
            Action::requeue(RETRY)
        );
    }
}
