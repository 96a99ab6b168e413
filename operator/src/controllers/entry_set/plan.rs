//! Plan only (`spec.plan`): what a sync would write on each target, as
//! `status.plan` shows it, and whether a later apply wrote what was
//! planned. Pure: the targets' plans come from [`super::apply::plan_target`],
//! the same read-back and diff a sync writes from.

use p4fleet_crds::condition_types::{READY, SYNCED};
use p4fleet_crds::{Condition, EntryPlan, TableEntrySetStatus, TargetPlan};
use p4fleet_model::entries::{Entry, TableSchema, format_entry, format_key};
use p4fleet_model::sync::{DeviceEntry, Plan};
use sha2::{Digest, Sha256};

use super::apply::{Outcome, Planned};
use super::dereference::Target;
use crate::status::EventNote;
use kube::ResourceExt;

/// Updates shown per target as lines; the counts and digest cover all.
pub const SHOWN: usize = 10;

/// Condition reason of Synced and Ready while the set only plans.
pub const PLAN_ONLY: &str = "PlanOnly";

/// One target's planned updates, borrowed from its read-back and diff.
pub struct Updates<'a> {
    pub virtual_switch: &'a str,
    pub switch: &'a str,
    pub schema: &'a TableSchema,
    pub plan: &'a Plan,
    pub desired: &'a [&'a Entry],
    pub on_device: &'a [DeviceEntry],
}

impl Updates<'_> {
    /// Each update as `(op, entry)`: inserts, modifies, then deletes.
    fn each(&self) -> impl Iterator<Item = (char, &Entry)> + '_ {
        let p = self.plan;
        let ins = p.inserts.iter().map(|&i| ('+', self.desired[i]));
        let modi = p.modifies.iter().map(|&i| ('~', self.desired[i]));
        let del = p.deletes.iter().map(|&i| ('-', &self.on_device[i].entry));
        ins.chain(modi).chain(del)
    }

    fn line(&self, op: char, e: &Entry) -> String {
        let text = format_entry(self.schema, e).unwrap_or_else(|_| format_key(self.schema, &e.key));
        format!("{op} {text}")
    }

    /// The target's part of `status.plan`.
    pub fn target(&self) -> TargetPlan {
        let p = self.plan;
        TargetPlan {
            virtual_switch: self.virtual_switch.to_string(),
            switch: self.switch.to_string(),
            insert: p.inserts.len() as u64,
            modify: p.modifies.len() as u64,
            delete: p.deletes.len() as u64,
            unchanged: p.unchanged as u64,
            conflicts: p.conflicts.len() as u64,
            changes: self
                .each()
                .take(SHOWN)
                .map(|(op, e)| self.line(op, e))
                .collect(),
            error: None,
        }
    }

    fn hash_into(&self, h: &mut Sha256) {
        h.update(self.virtual_switch.as_bytes());
        h.update([0]);
        for (op, e) in self.each() {
            h.update(self.line(op, e).as_bytes());
            h.update([b'\n']);
        }
        h.update([1]);
    }
}

/// A digest of every update on every target, whatever their order: equal
/// when applying would write exactly what was planned.
pub fn digest(targets: &[Updates]) -> String {
    let mut order: Vec<&Updates> = targets.iter().collect();
    order.sort_by_key(|u| u.virtual_switch);
    let mut h = Sha256::new();
    for u in order {
        u.hash_into(&mut h);
    }
    let d = h.finalize();
    d[..8].iter().map(|b| format!("{b:02x}")).collect()
}

/// `status.plan` of the planned targets and those that could not be
/// planned (`unplanned`: their target with `error` set).
pub fn status(
    generation: Option<i64>,
    targets: &[Updates],
    unplanned: Vec<TargetPlan>,
) -> EntryPlan {
    let mut all: Vec<TargetPlan> = targets.iter().map(Updates::target).collect();
    all.extend(unplanned);
    all.sort_by(|a, b| a.virtual_switch.cmp(&b.virtual_switch));
    let sum = |f: fn(&TargetPlan) -> u64| all.iter().map(f).sum();
    EntryPlan {
        observed_generation: generation,
        digest: digest(targets),
        insert: sum(|t| t.insert),
        modify: sum(|t| t.modify),
        delete: sum(|t| t.delete),
        unchanged: sum(|t| t.unchanged),
        targets: all,
    }
}

/// `status.plan` of the targets read back and planned
/// ([`super::apply::plan_target`]); a target that could not be read, or
/// whose table has an action profile (`indirect`: its entries go through
/// `profiles`, which does not plan), is shown with why.
pub fn of_targets(
    generation: Option<i64>,
    planned: &[Result<Planned<'_>, Outcome>],
    indirect: &[Target],
) -> EntryPlan {
    let updates: Vec<Updates> = planned.iter().flatten().map(Planned::updates).collect();
    let unreadable = planned.iter().filter_map(|p| p.as_ref().err()).map(|o| {
        let error = o.device_error.as_ref().map(ToString::to_string);
        (o.virtual_switch.clone(), o.switch.clone(), error)
    });
    let profiled = indirect.iter().map(|t| {
        let why = "a table with an action profile is not planned; nothing written";
        (
            t.virtual_switch.clone(),
            t.switch.name_any(),
            Some(why.to_string()),
        )
    });
    let unplanned = unreadable
        .chain(profiled)
        .map(|(virtual_switch, switch, error)| TargetPlan {
            virtual_switch,
            switch,
            error,
            ..Default::default()
        })
        .collect();
    status(generation, &updates, unplanned)
}

/// `+3 ~1 -2`
fn counts(p: &EntryPlan) -> String {
    format!("+{} ~{} -{}", p.insert, p.modify, p.delete)
}

/// A plan-only status: Synced and Ready say that nothing is written
/// (where they had nothing more specific to say, such as an unreachable
/// device), with the plan's counts.
pub fn mark_plan_only(status: &mut TableEntrySetStatus, plan: EntryPlan) {
    let message = format!(
        "spec.plan is true: {} planned on {} target(s) (status.plan, digest {}), nothing written; set spec.plan to false to apply",
        counts(&plan),
        plan.targets.len(),
        plan.digest
    );
    for c in &mut status.conditions {
        let ours = c.type_ == SYNCED || c.type_ == READY;
        if ours && (c.is_true() || c.reason == "Syncing") {
            *c = Condition::new(&c.type_, false, PLAN_ONLY, message.clone());
        }
    }
    status.plan = Some(plan);
}

/// The Event of a plan that changed (a new plan, or the devices or
/// sources moved under it).
pub fn planned_event(old: Option<&EntryPlan>, new: &EntryPlan) -> Option<EventNote> {
    if old.is_some_and(|o| o.digest == new.digest) {
        return None;
    }
    let note = format!(
        "Planned {} on {} target(s), digest {}; nothing written (spec.plan)",
        counts(new),
        new.targets.len(),
        new.digest
    );
    Some(EventNote::normal("Planned", "Plan", note))
}

/// The Event of the first apply after a plan: whether the devices needed
/// exactly the planned updates (`now`: the digest and plan of this sync).
pub fn applied_event(planned: &EntryPlan, now_digest: &str, now: &EntryPlan) -> EventNote {
    if planned.digest == now_digest {
        let note = format!(
            "Applying the plan {} as planned ({})",
            planned.digest,
            counts(planned)
        );
        return EventNote::normal("PlanApplied", "Write", note);
    }
    let note = format!(
        "The devices or the sources changed since the plan {} ({}): writing {} instead (digest {})",
        planned.digest,
        counts(planned),
        counts(now),
        now_digest
    );
    EventNote::warning("PlanOutdated", "Write", note)
}

#[cfg(test)]
mod tests {
    use super::*;
    use p4fleet_model::entries::parse_text;
    use p4fleet_model::fixtures::firewall;

    /// Firewall entries from `dst` addresses, all `allow(port)`.
    fn entries(s: &TableSchema, rows: &[(u8, u8)]) -> Vec<Entry> {
        let mut text = String::from("#! fields hdr.ipv4.srcAddr hdr.ipv4.dstAddr\n");
        for (dst, port) in rows {
            text.push_str(&format!("10.0.0.1 10.0.0.{dst} allow port={port}\n"));
        }
        parse_text(s, &text).unwrap()
    }

    fn updates<'a>(
        vs: &'a str,
        s: &'a TableSchema,
        plan: &'a Plan,
        desired: &'a [&'a Entry],
        on_device: &'a [DeviceEntry],
    ) -> Updates<'a> {
        Updates {
            virtual_switch: vs,
            switch: "sw",
            schema: s,
            plan,
            desired,
            on_device,
        }
    }

    #[test]
    fn a_plan_shows_each_update_as_a_line_and_counts_them_all() {
        let s = firewall();
        let desired = entries(&s, &[(1, 1), (2, 2), (3, 3)]);
        let refs: Vec<&Entry> = desired.iter().collect();
        let on_device: Vec<DeviceEntry> = entries(&s, &[(9, 1)])
            .into_iter()
            .map(|entry| DeviceEntry { entry, tag: 7 })
            .collect();
        let plan = Plan {
            inserts: vec![0, 2],
            modifies: vec![1],
            deletes: vec![0],
            conflicts: vec![],
            unchanged: 4,
        };
        let u = updates("vs-a", &s, &plan, &refs, &on_device);
        let t = u.target();
        assert_eq!((t.insert, t.modify, t.delete, t.unchanged), (2, 1, 1, 4));
        assert_eq!(t.changes.len(), 4);
        assert!(t.changes[0].starts_with("+ ") && t.changes[0].contains("10.0.0.1"));
        assert!(t.changes[2].starts_with("~ ") && t.changes[2].contains("10.0.0.2"));
        assert!(t.changes[3].starts_with("- ") && t.changes[3].contains("10.0.0.9"));
        assert!(t.changes[0].contains("allow"), "{}", t.changes[0]);
        let p = status(Some(4), &[u], vec![]);
        assert_eq!((p.insert, p.modify, p.delete, p.unchanged), (2, 1, 1, 4));
        assert_eq!(p.observed_generation, Some(4));
        assert_eq!(p.digest.len(), 16);
    }

    #[test]
    fn only_the_first_updates_are_lines() {
        let s = firewall();
        let rows: Vec<(u8, u8)> = (1..=30).map(|i| (i, 1)).collect();
        let desired = entries(&s, &rows);
        let refs: Vec<&Entry> = desired.iter().collect();
        let plan = Plan {
            inserts: (0..30).collect(),
            ..Default::default()
        };
        let t = updates("vs", &s, &plan, &refs, &[]).target();
        assert_eq!((t.insert, t.changes.len()), (30, SHOWN));
    }

    #[test]
    fn the_digest_changes_with_any_update_but_not_with_target_order() {
        let s = firewall();
        let desired = entries(&s, &[(1, 1), (2, 2)]);
        let other = entries(&s, &[(1, 1), (2, 3)]);
        let (refs, others): (Vec<&Entry>, Vec<&Entry>) =
            (desired.iter().collect(), other.iter().collect());
        let one = Plan {
            inserts: vec![0],
            ..Default::default()
        };
        let both = Plan {
            inserts: vec![0, 1],
            ..Default::default()
        };
        let ab = digest(&[
            updates("a", &s, &one, &refs, &[]),
            updates("b", &s, &both, &refs, &[]),
        ]);
        let ba = digest(&[
            updates("b", &s, &both, &refs, &[]),
            updates("a", &s, &one, &refs, &[]),
        ]);
        assert_eq!(ab, ba);
        let more = digest(&[
            updates("a", &s, &both, &refs, &[]),
            updates("b", &s, &both, &refs, &[]),
        ]);
        assert_ne!(ab, more);
        let other_port = digest(&[
            updates("a", &s, &one, &refs, &[]),
            updates("b", &s, &both, &others, &[]),
        ]);
        assert_ne!(ab, other_port, "a changed action parameter is another plan");
    }

    #[test]
    fn plan_only_is_not_ready_but_a_device_error_keeps_its_reason() {
        let mut st = TableEntrySetStatus {
            conditions: vec![
                Condition::new(SYNCED, true, "Synced", "all entries applied"),
                Condition::new(READY, true, "Synced", ""),
                Condition::new("Valid", true, "Valid", ""),
            ],
            ..Default::default()
        };
        mark_plan_only(&mut st, EntryPlan::default());
        assert_eq!(st.conditions[0].reason, PLAN_ONLY);
        assert!(!st.conditions[1].is_true());
        assert!(
            st.conditions[2].is_true(),
            "Valid is about the spec, untouched"
        );
        let mut st = TableEntrySetStatus {
            conditions: vec![Condition::new(SYNCED, false, "DeviceUnavailable", "x")],
            ..Default::default()
        };
        mark_plan_only(&mut st, EntryPlan::default());
        assert_eq!(st.conditions[0].reason, "DeviceUnavailable");
        assert!(st.plan.is_some());
    }

    #[test]
    fn applying_says_whether_the_devices_needed_what_was_planned() {
        let plan = |digest: &str, insert| EntryPlan {
            digest: digest.into(),
            insert,
            ..Default::default()
        };
        let planned = plan("aa", 2);
        let same = applied_event(&planned, "aa", &planned);
        assert_eq!(same.reason, "PlanApplied");
        let now = plan("bb", 3);
        let moved = applied_event(&planned, "bb", &now);
        assert_eq!(moved.reason, "PlanOutdated");
        assert!(moved.note.contains("+2 ~0 -0") && moved.note.contains("+3 ~0 -0"));
        assert!(planned_event(Some(&planned), &planned).is_none());
        assert!(planned_event(None, &planned).is_some());
    }
}
