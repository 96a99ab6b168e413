//! Status writing: server-side apply with one field manager, condition
//! merging that keeps `lastTransitionTime` stable, and Events.
//!
//! A status that changes on every reconcile re-triggers the controller
//! (the status write is a watch event), so reconcilers compute the new status,
//! [`settle`] it against the old one and only write real changes
//! ([`unchanged`]); `controllers::update_status` does all of that for
//! every controller.

use std::fmt::Debug;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::Resource;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::events::{Event, EventType, Recorder};
use p4fleet_crds::{
    AsyncExternPolicyStatus, Condition, ConditionStatus, P4ProgramStatus, SwitchStatus,
    TableEntrySetStatus, VirtualSwitchStatus,
};
use serde::Serialize;
use serde::de::DeserializeOwned;

/// The single field manager every p4fleet status write uses.
pub const FIELD_MANAGER: &str = "p4fleet";

/// Current time in RFC 3339 with second precision (as Kubernetes writes it).
pub fn now_rfc3339() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// Writes `status` (a serialisable status struct or JSON) of object `name`
/// by server-side apply on the status subresource, forcing ownership.
pub async fn apply_status<K>(
    api: &Api<K>,
    name: &str,
    status: impl Serialize,
) -> Result<K, kube::Error>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug,
{
    let patch = serde_json::json!({
        "apiVersion": K::api_version(&()),
        "kind": K::kind(&()),
        "status": status,
    });
    api.patch_status(
        name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&patch),
    )
    .await
}

/// A status that carries conditions (every p4fleet status does).
pub trait WithConditions {
    fn conditions(&self) -> &[Condition];
    fn conditions_mut(&mut self) -> &mut Vec<Condition>;
}

macro_rules! with_conditions {
    ($($status:ty),*) => {$(
        impl WithConditions for $status {
            fn conditions(&self) -> &[Condition] {
                &self.conditions
            }
            fn conditions_mut(&mut self) -> &mut Vec<Condition> {
                &mut self.conditions
            }
        }
    )*};
}

with_conditions!(
    SwitchStatus,
    P4ProgramStatus,
    VirtualSwitchStatus,
    TableEntrySetStatus,
    AsyncExternPolicyStatus
);

/// Readies a freshly computed status for comparison and writing: its
/// conditions are merged with the old ones ([`merge_conditions`]) for
/// `generation`. Everything else is the builder's.
pub fn settle<S: WithConditions>(old: Option<&S>, new: &mut S, generation: Option<i64>, now: &str) {
    let old = old.map(|s| s.conditions()).unwrap_or_default();
    let fresh = std::mem::take(new.conditions_mut());
    *new.conditions_mut() = merge_conditions(old, fresh, generation, now);
}

/// Whether `new` equals the status the object already has (no write needed).
pub fn unchanged<S: PartialEq>(old: Option<&S>, new: &S) -> bool {
    old == Some(new)
}

/// Builds the condition list of a new status from the freshly computed
/// `new` conditions: each gets `observedGeneration`, and keeps its old
/// `lastTransitionTime` when its status did not change (a new time otherwise).
/// Conditions absent from `new` are dropped.
pub fn merge_conditions(
    old: &[Condition],
    new: Vec<Condition>,
    generation: Option<i64>,
    now: &str,
) -> Vec<Condition> {
    new.into_iter()
        .map(|mut c| {
            c.observed_generation = generation;
            let prev = old.iter().find(|o| o.type_ == c.type_);
            c.last_transition_time = match prev {
                Some(p) if p.status == c.status && p.last_transition_time.is_some() => {
                    p.last_transition_time.clone()
                }
                _ => Some(now.to_string()),
            };
            c
        })
        .collect()
}

/// A `Ready` condition that is True iff all `parts` are True; its reason and
/// message come from the first part that is not.
pub fn ready_from(parts: &[&Condition], ready_reason: &str, ready_message: &str) -> Condition {
    match parts.iter().find(|c| c.status != ConditionStatus::True) {
        None => Condition::new(
            p4fleet_crds::condition_types::READY,
            true,
            ready_reason,
            ready_message,
        ),
        Some(c) => Condition {
            type_: p4fleet_crds::condition_types::READY.into(),
            status: if c.status == ConditionStatus::Unknown {
                ConditionStatus::Unknown
            } else {
                ConditionStatus::False
            },
            reason: c.reason.clone(),
            message: if c.message.is_empty() {
                format!("{} is {:?}", c.type_, c.status)
            } else {
                c.message.clone()
            },
            last_transition_time: None,
            observed_generation: None,
        },
    }
}

/// The conditions whose status differs between `old` and `new` (by type), for Events.
pub fn transitions<'a>(old: &[Condition], new: &'a [Condition]) -> Vec<&'a Condition> {
    new.iter()
        .filter(|c| {
            old.iter()
                .find(|o| o.type_ == c.type_)
                .is_none_or(|o| o.status != c.status || o.reason != c.reason)
        })
        .collect()
}

/// One Event to publish about an object: computed by the pure stages,
/// published after the status write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventNote {
    pub warning: bool,
    pub reason: String,
    pub action: String,
    pub note: String,
}

impl EventNote {
    pub fn normal(reason: &str, action: &str, note: String) -> Self {
        EventNote {
            warning: false,
            reason: reason.into(),
            action: action.into(),
            note,
        }
    }

    pub fn warning(reason: &str, action: &str, note: String) -> Self {
        EventNote {
            warning: true,
            ..EventNote::normal(reason, action, note)
        }
    }
}

/// Publishes Kubernetes Events about objects. Failures are logged, never
/// returned: an Event is a courtesy, not part of reconciling.
#[derive(Clone)]
pub struct Events {
    recorder: Recorder,
    /// For objects whose names are too long for the Recorder.
    long_names: Option<(kube::Client, kube::runtime::events::Reporter)>,
}

impl Events {
    pub fn new(recorder: Recorder) -> Self {
        Events {
            recorder,
            long_names: None,
        }
    }

    /// Events about objects with names past
    /// [`crate::event_names::RECORDER_NAME_MAX`] are created directly.
    pub fn with_long_names(
        mut self,
        client: kube::Client,
        reporter: kube::runtime::events::Reporter,
    ) -> Self {
        self.long_names = Some((client, reporter));
        self
    }

    /// Publishes one Event regarding `obj`.
    pub async fn publish<K>(&self, obj: &K, ev: &EventNote)
    where
        K: Resource<DynamicType = ()>,
    {
        self.publish_to(&obj.object_ref(&()), ev).await;
    }

    /// Publishes one Event regarding the object `reference` names.
    pub async fn publish_to(&self, reference: &ObjectReference, ev: &EventNote) {
        let event = Event {
            type_: if ev.warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: truncate(&ev.reason, 128),
            note: Some(truncate(&ev.note, 1000)),
            action: truncate(&ev.action, 128),
            secondary: None,
        };
        let long = reference
            .name
            .as_ref()
            .is_some_and(|n| n.len() > crate::event_names::RECORDER_NAME_MAX);
        let res = match (&self.long_names, long) {
            (Some((client, reporter)), true) => {
                crate::event_names::publish(client, reporter, &event, reference).await
            }
            _ => self.recorder.publish(&event, reference).await,
        };
        if let Err(e) = res {
            let object = reference.name.as_deref().unwrap_or_default();
            tracing::warn!(%object, reason = %ev.reason, error = %e, "publishing event failed");
        }
    }

    /// Publishes the Events of a status change ([`condition_events`]).
    pub async fn condition_changes<K>(
        &self,
        obj: &K,
        old: &[Condition],
        new: &[Condition],
        notes: &[EventNote],
    ) where
        K: Resource<DynamicType = ()>,
    {
        for ev in condition_events(old, new, notes) {
            self.publish(obj, &ev).await;
        }
    }
}

/// Reasons of a condition that waits: for progress (a sync writing, a
/// pipeline being pushed, an unconfirmed status after a restart) or for
/// another object that reports its own cause (a VirtualSwitch or program
/// not ready yet). Their Events are Normal: nothing is wrong here, and the
/// other object's Warning names the cause once.
pub const WAITING_REASONS: &[&str] = &[
    "Syncing",
    "Unconfirmed",
    "ProgramChanging",
    "ProgramNotReady",
    "VirtualSwitchNotReady",
    "VirtualSwitchNotScheduled",
    // A VirtualSwitch waiting for its candidate Switches' first probe.
    "SwitchNotProbed",
];

/// Reasons of a condition that only follows from another condition of the
/// same object (nothing to validate without a target, no probe of an
/// invalid spec, …): no Event of their own when that other condition
/// changed too.
pub const DERIVED_REASONS: &[&str] = &[
    "NoTarget",
    "SourcesUnresolved",
    "NotProbed",
    "NotScheduled",
    // An AsyncExternPolicy whose VirtualSwitch is not resolved yet: its
    // Valid, Applied and T4P4SOptions follow from ResolvedRefs.
    "RefsUnresolved",
    "NotApplied",
    "NotRendered",
];

/// The Events of a status change: one per root cause, not one per
/// condition.
///
/// - The changed conditions ([`transitions`]) are grouped by reason: Ready
///   takes the reason of the condition that makes it not Ready
///   ([`ready_from`]), so a cause and the Ready it breaks are one Event.
/// - When Ready turns True, the other conditions that turned True with it
///   are that same success: one Normal Event, Ready's.
/// - A reason the stage reports itself (`notes`, e.g. `Synced` with the
///   counts and rate) gets no second Event from its condition, and a
///   Ready turning True gets none when the stage reports the success
///   (a Normal note: `Synced`, `PipelineLoaded`, `DigestChanged`).
/// - [`DERIVED_REASONS`] get none when another condition changed too.
/// - Warning only for a condition that is not True for a reason that is
///   not [`WAITING_REASONS`].
pub fn condition_events(
    old: &[Condition],
    new: &[Condition],
    notes: &[EventNote],
) -> Vec<EventNote> {
    let changed = transitions(old, new);
    let ready_now = changed
        .iter()
        .any(|c| c.type_ == p4fleet_crds::condition_types::READY && c.is_true());
    let reason_of = |c: &Condition| {
        if c.reason.is_empty() {
            c.type_.clone()
        } else {
            c.reason.clone()
        }
    };
    // Groups in the order of their first condition: (reason, conditions).
    let mut groups: Vec<(String, Vec<&Condition>)> = Vec::new();
    for c in changed {
        let key = if ready_now && c.is_true() {
            // Folded into Ready's success.
            new.iter()
                .find(|r| r.type_ == p4fleet_crds::condition_types::READY)
                .map(reason_of)
                .unwrap_or_else(|| reason_of(c))
        } else {
            reason_of(c)
        };
        match groups.iter_mut().find(|(r, _)| *r == key) {
            Some((_, g)) => g.push(c),
            None => groups.push((key, vec![c])),
        }
    }
    let several = groups.len() > 1;
    let success_noted = ready_now && notes.iter().any(|n| !n.warning);
    groups
        .into_iter()
        .filter(|(reason, _)| !notes.iter().any(|n| n.reason == *reason))
        .filter(|(_, group)| {
            !(success_noted
                && group
                    .iter()
                    .any(|c| c.type_ == p4fleet_crds::condition_types::READY && c.is_true()))
        })
        .filter(|(reason, _)| !(several && DERIVED_REASONS.contains(&reason.as_str())))
        .map(|(reason, group)| {
            // The cause speaks for the group; Ready only when alone (or
            // when it is the success the others folded into).
            let lead = if ready_now {
                group
                    .iter()
                    .find(|c| c.type_ == p4fleet_crds::condition_types::READY)
                    .unwrap_or(&group[0])
            } else {
                group
                    .iter()
                    .find(|c| c.type_ != p4fleet_crds::condition_types::READY)
                    .unwrap_or(&group[0])
            };
            let note = if lead.message.is_empty() {
                format!("{} is {:?}", lead.type_, lead.status)
            } else {
                format!("{}: {}", lead.type_, lead.message)
            };
            let bad = group.iter().any(|c| !c.is_true());
            EventNote {
                warning: bad && !WAITING_REASONS.contains(&reason.as_str()),
                action: lead.type_.clone(),
                reason,
                note,
            }
        })
        .collect()
}

fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cond(t: &str, ok: bool, reason: &str) -> Condition {
        Condition::new(t, ok, reason, "")
    }

    #[test]
    fn merge_keeps_transition_time_when_status_is_unchanged() {
        let old = merge_conditions(&[], vec![cond("Ready", true, "Ok")], Some(1), "t1");
        assert_eq!(old[0].last_transition_time.as_deref(), Some("t1"));
        assert_eq!(old[0].observed_generation, Some(1));

        let same = merge_conditions(&old, vec![cond("Ready", true, "Ok")], Some(2), "t2");
        assert_eq!(same[0].last_transition_time.as_deref(), Some("t1"));
        assert_eq!(same[0].observed_generation, Some(2));

        let flipped = merge_conditions(&old, vec![cond("Ready", false, "Bad")], Some(2), "t3");
        assert_eq!(flipped[0].last_transition_time.as_deref(), Some("t3"));
    }

    #[test]
    fn merge_is_idempotent_so_idle_reconciles_write_nothing() {
        let a = merge_conditions(&[], vec![cond("Valid", true, "Ok")], Some(3), "t1");
        let b = merge_conditions(&a, vec![cond("Valid", true, "Ok")], Some(3), "t9");
        assert!(unchanged(Some(&a), &b));
    }

    #[test]
    fn ready_follows_the_first_failing_part() {
        let v = cond("Valid", true, "Ok");
        let r = Condition::new(
            "ResolvedRefs",
            false,
            "ConfigMapNotFound",
            "configmap x missing",
        );
        let ready = ready_from(&[&v, &r], "Ready", "all good");
        assert_eq!(ready.status, ConditionStatus::False);
        assert_eq!(ready.reason, "ConfigMapNotFound");
        assert_eq!(ready.message, "configmap x missing");
        assert!(ready_from(&[&v], "Ready", "ok").is_true());
    }

    #[test]
    fn transitions_report_only_changes() {
        let old = vec![cond("Valid", true, "Ok"), cond("Ready", false, "Wait")];
        let new = vec![cond("Valid", true, "Ok"), cond("Ready", true, "Ok")];
        let t = transitions(&old, &new);
        assert_eq!(t.len(), 1);
        assert_eq!(t[0].type_, "Ready");
    }

    fn with(t: &str, ok: Option<bool>, reason: &str, message: &str) -> Condition {
        let mut c = Condition::new(t, ok.unwrap_or(false), reason, message);
        if ok.is_none() {
            c.status = ConditionStatus::Unknown;
        }
        c
    }

    /// The one Event `condition_events` gives for `old` → `new`.
    fn one_event(old: &[Condition], new: &[Condition]) -> EventNote {
        let mut evs = condition_events(old, new, &[]);
        assert_eq!(evs.len(), 1, "{evs:?}");
        evs.remove(0)
    }

    /// A False condition.
    fn failing(t: &str, reason: &str, message: &str) -> Condition {
        with(t, Some(false), reason, message)
    }

    #[test]
    fn one_event_per_root_cause() {
        // A device goes away: Synced and Ready turn False for one reason.
        let old = vec![
            with("Valid", Some(true), "Valid", ""),
            with("Synced", Some(true), "Synced", ""),
            with("Ready", Some(true), "Ready", ""),
        ];
        let down = vec![
            with("Valid", Some(true), "Valid", ""),
            failing("Synced", "DeviceUnavailable", "Switch sw: refused"),
            failing("Ready", "DeviceUnavailable", "Switch sw: refused"),
        ];
        let ev = one_event(&old, &down);
        assert!(ev.warning);
        assert_eq!(ev.reason, "DeviceUnavailable");
        assert_eq!(ev.action, "Synced");
        assert_eq!(ev.note, "Synced: Switch sw: refused");

        // It comes back: every condition turns True, one Normal Event.
        let ev = one_event(&down, &old);
        assert!(!ev.warning);
        assert_eq!((ev.reason.as_str(), ev.action.as_str()), ("Ready", "Ready"));

        // The first sync of a new object: one Event, Ready's.
        one_event(&[], &old);
    }

    #[test]
    fn waiting_is_normal_derived_is_folded_and_notes_win() {
        // A sync about to write: progress, not a problem.
        let syncing = vec![
            failing("Synced", "Syncing", "writing 10 updates"),
            failing("Ready", "Syncing", "writing 10 updates"),
        ];
        let ev = one_event(&[], &syncing);
        assert!(!ev.warning, "{ev:?}");

        // A missing VirtualSwitch: its ResolvedRefs reason is the cause;
        // NoTarget on Valid and Synced follows from it.
        let missing = vec![
            failing("ResolvedRefs", "VirtualSwitchNotFound", "no vs"),
            with("Valid", None, "NoTarget", ""),
            with("Synced", None, "NoTarget", ""),
            failing("Ready", "VirtualSwitchNotFound", "no vs"),
        ];
        let ev = one_event(&[], &missing);
        assert!(ev.warning);
        assert_eq!(ev.reason, "VirtualSwitchNotFound");

        // A policy whose VirtualSwitch is not placed yet: one Normal Event
        // (waiting), none for what follows from it.
        let unplaced = vec![
            with("Valid", None, "RefsUnresolved", ""),
            failing("ResolvedRefs", "VirtualSwitchNotScheduled", "not placed"),
            with("Applied", None, "NotApplied", ""),
            with("T4P4SOptions", None, "NotRendered", ""),
            failing("Ready", "VirtualSwitchNotScheduled", "not placed"),
        ];
        let ev = one_event(&[], &unplaced);
        assert!(!ev.warning, "{ev:?}");
        assert_eq!(ev.reason, "VirtualSwitchNotScheduled");

        // The stage's own Synced note replaces the condition's Event, and
        // the Ready that success brings.
        let synced = vec![with("Synced", Some(true), "Synced", "")];
        let note = EventNote::normal("Synced", "Write", "Synced 3 entries".into());
        assert!(condition_events(&[], &synced, std::slice::from_ref(&note)).is_empty());
        let ready = vec![
            with("Synced", Some(true), "Synced", ""),
            with("Ready", Some(true), "Ready", "all entries applied"),
        ];
        assert!(condition_events(&[], &ready, &[note]).is_empty());
        // A Warning note (EntriesFailed) is no success: Ready keeps its Event.
        let warn = EventNote::warning("EntriesFailed", "Write", "1 failed".into());
        assert_eq!(condition_events(&[], &ready, &[warn]).len(), 1);
    }

    #[test]
    fn truncates_on_char_boundary() {
        assert_eq!(truncate("ääää", 3), "ä");
        assert_eq!(truncate("abc", 5), "abc");
    }
}
