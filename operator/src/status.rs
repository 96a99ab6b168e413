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
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::events::{Event, EventType, Recorder};
use kube::{Resource, ResourceExt};
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
        let reference: ObjectReference = obj.object_ref(&());
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
                crate::event_names::publish(client, reporter, &event, &reference).await
            }
            _ => self.recorder.publish(&event, &reference).await,
        };
        if let Err(e) = res {
            tracing::warn!(object = %obj.name_any(), reason = %ev.reason, error = %e, "publishing event failed");
        }
    }

    /// Publishes one Event per condition that changed between `old` and `new`:
    /// Normal for True, Warning otherwise; the reason is the condition's reason.
    pub async fn condition_changes<K>(&self, obj: &K, old: &[Condition], new: &[Condition])
    where
        K: Resource<DynamicType = ()>,
    {
        for c in transitions(old, new) {
            let reason = if c.reason.is_empty() {
                c.type_.clone()
            } else {
                c.reason.clone()
            };
            let note = if c.message.is_empty() {
                format!("{} is {:?}", c.type_, c.status)
            } else {
                format!("{}: {}", c.type_, c.message)
            };
            let ev = EventNote {
                warning: !c.is_true(),
                reason,
                action: c.type_.clone(),
                note,
            };
            self.publish(obj, &ev).await;
        }
    }
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

    #[test]
    fn truncates_on_char_boundary() {
        assert_eq!(truncate("ääää", 3), "ä");
        assert_eq!(truncate("abc", 5), "abc");
    }
}
