//! After a swap: the table entries written again into the new program
//! (`status.lastSwap.entriesReapplied`). The TableEntrySet controller does
//! the writing (a VirtualSwitch's status change brings its sets back);
//! this counts what the device holds in the slot once every set that fills
//! the VirtualSwitch, and whose table the new program has, has synced
//! since the swap. The slot's tables are empty after a load, so everything
//! read back was written after it. Sets whose table the new program lacks
//! report `TableNotInProgram` themselves and expect nothing here.

use std::time::Duration;

use chrono::{DateTime, Utc};
use kube::ResourceExt;
use p4fleet_crds::{LastSwap, Switch, TableEntrySet, VirtualSwitch};
use p4fleet_model::entries::TableSchema;
use p4fleet_proto::p4info::P4Info;

use crate::context::Context;

/// How long after a swap the count is waited for.
pub const WINDOW: Duration = Duration::from_secs(120);
/// How often it is looked at meanwhile.
pub const POLL: Duration = Duration::from_secs(1);

/// Whether `swap` still waits for its count at `now`.
pub fn waiting(swap: Option<&LastSwap>, now: DateTime<Utc>) -> bool {
    let Some(swap) = swap.filter(|s| s.entries_reapplied.is_none()) else {
        return false;
    };
    DateTime::parse_from_rfc3339(&swap.at)
        .is_ok_and(|at| now.signed_duration_since(at).to_std().unwrap_or_default() < WINDOW)
}

/// The entries the sets filling `vs` have confirmed since a swap at
/// `at` into a program described by `p4info`, once every set whose table
/// it has has synced on `vs` since then (or has synced there wanting and
/// holding no entries); None while one has not. A set with no status for
/// `vs` yet has not synced there (before the swap its table may have been
/// missing), whatever its `desired` says; a set that is not Ready (its
/// sync was refused, or it reports TableNotInProgram) is waited for. Pure.
#[cfg(test)]
pub fn expected(sets: &[TableEntrySet], vs: &str, p4info: &P4Info, at: &str) -> Option<u64> {
    expected_with_kept(sets, vs, p4info, at, &[])
}

/// [`expected`] after a swap that kept the entries of the tables named in
/// `kept` (`lastSwap.tablesKept`, full P4Info names): a Ready set of such
/// a table needs no sync since the swap (it has nothing to write), so its
/// applied entries count as they are. Pure.
pub fn expected_with_kept(
    sets: &[TableEntrySet],
    vs: &str,
    p4info: &P4Info,
    at: &str,
    kept: &[String],
) -> Option<u64> {
    let at = DateTime::parse_from_rfc3339(at).ok()?;
    let mut total = 0;
    for set in sets {
        let Ok(schema) = TableSchema::from_p4info(p4info, &set.spec.table) else {
            continue;
        };
        let st = set.status.clone().unwrap_or_default();
        if kept.contains(&schema.name)
            && ready(&st)
            && let Some(t) = st.targets.iter().find(|t| t.virtual_switch == vs)
        {
            total += t.applied;
            continue;
        }
        let since = st
            .last_sync_time
            .as_deref()
            .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
            .is_some_and(|t| t >= at);
        match st.targets.iter().find(|t| t.virtual_switch == vs) {
            // Only a Ready status counts: a sync right after the load may
            // have been refused (applied 0, failed 5) and is retried.
            _ if !ready(&st) => return None,
            Some(t) if since => total += t.applied,
            Some(t) if st.desired == Some(0) && t.applied == 0 => {}
            _ => return None,
        }
    }
    Some(total)
}

fn ready(st: &p4fleet_crds::TableEntrySetStatus) -> bool {
    p4fleet_crds::find_condition(&st.conditions, p4fleet_crds::condition_types::READY)
        .is_some_and(|c| c.is_true())
}

/// The count for `vs` (placed on `slot` of `sw`, swapped into a program
/// with `p4info` at `at`), or None while the sets are not done. A device
/// that cannot be read gives None (logged): the count waits.
pub async fn count(
    ctx: &Context,
    vs: &VirtualSwitch,
    sw: &Switch,
    slot: u32,
    p4info: &P4Info,
    at: &str,
    kept: &[String],
) -> Result<Option<u64>, kube::Error> {
    let ns = vs.namespace().unwrap_or_default();
    let sets: Vec<TableEntrySet> = ctx
        .caches
        .entry_sets
        .store()
        .state()
        .into_iter()
        .filter(|s| {
            s.namespace().as_deref() == Some(ns.as_str()) && crate::fleet::fills::fills(s, vs)
        })
        .map(|s| TableEntrySet::clone(&s))
        .collect();
    let Some(expected) = expected_with_kept(&sets, &vs.name_any(), p4info, at, kept) else {
        return Ok(None);
    };
    // A pipe set's entries are read through its program's own client.
    let me = format!("{ns}/{}", vs.name_any());
    let first_pipe = crate::fleet::slot_claims::first_pipe(sw, &me);
    let held =
        match crate::fleet::slot_claims::program_device(&ctx.devices, sw, slot, first_pipe, &me) {
            Ok(dev) => dev.read_table(slot, 0).await.map(|e| e.len() as u64),
            Err(e) => Err(e),
        };
    match held {
        Ok(n) if n >= expected => Ok(Some(n)),
        Ok(_) => Ok(None),
        Err(e) => {
            tracing::warn!(virtual_switch = %vs.name_any(), error = %e,
                "could not read the slot back to count re-applied entries");
            Ok(None)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use p4fleet_crds::{TableEntrySetStatus, TargetStatus};

    const ROUTER: &str = include_str!("../../../../examples/router/p4info.txt");
    const AT: &str = "2026-11-23T00:00:10Z";

    /// Marks `set` not Ready, for `reason`.
    fn not_ready(set: &mut TableEntrySet, reason: &str) {
        set.status.as_mut().unwrap().conditions =
            vec![p4fleet_crds::Condition::new("Ready", false, reason, "")];
    }

    fn set(table: &str, desired: u64, synced: Option<&str>, applied: Option<u64>) -> TableEntrySet {
        let spec = serde_json::from_value(serde_json::json!({
            "virtualSwitchRef": "b", "table": table}))
        .unwrap();
        let mut s = TableEntrySet::new(table, spec);
        s.status = Some(TableEntrySetStatus {
            desired: Some(desired),
            last_sync_time: synced.map(Into::into),
            targets: applied
                .map(|applied| TargetStatus {
                    virtual_switch: "b".into(),
                    applied,
                    ..Default::default()
                })
                .into_iter()
                .collect(),
            conditions: vec![p4fleet_crds::Condition::new("Ready", true, "Synced", "")],
            ..Default::default()
        });
        s
    }

    #[test]
    fn the_count_waits_for_every_set_whose_table_the_new_program_has() {
        let p4info = p4fleet_proto::p4info::parse_text(ROUTER).unwrap();
        let lpm = set(
            "MyIngress.ipv4_lpm",
            3,
            Some("2026-11-23T00:00:11Z"),
            Some(3),
        );
        let acl = set("acl", 2, Some("2026-11-23T00:00:10Z"), Some(2));
        // Not in the router: reports TableNotInProgram itself.
        let fw = set("MyIngress.firewall", 5, None, None);
        let empty = set("MyIngress.acl", 0, None, Some(0));
        let all = [lpm.clone(), acl.clone(), fw, empty];
        assert_eq!(expected(&all, "b", &p4info, AT), Some(5));
        // A set last synced before the swap, or not yet on this target.
        let stale = set("acl", 2, Some("2026-11-23T00:00:09Z"), Some(2));
        assert_eq!(expected(&[lpm.clone(), stale], "b", &p4info, AT), None);
        let elsewhere = set("acl", 2, Some("2026-11-23T00:00:12Z"), None);
        assert_eq!(expected(&[lpm.clone(), elsewhere], "b", &p4info, AT), None);
        // After a reconcile that kept acl's entries, its Ready set counts
        // without a sync since the swap (it had nothing to write).
        let kept = ["MyIngress.acl".to_string()];
        let stale = set("acl", 2, Some("2026-11-23T00:00:09Z"), Some(2));
        let both = [lpm.clone(), stale];
        assert_eq!(expected_with_kept(&both, "b", &p4info, AT, &kept), Some(5));
        let lpm_stale = set(
            "MyIngress.ipv4_lpm",
            3,
            Some("2026-11-23T00:00:09Z"),
            Some(3),
        );
        assert_eq!(
            expected_with_kept(&[lpm_stale], "b", &p4info, AT, &kept),
            None
        );
        assert_eq!(expected(&[], "b", &p4info, AT), Some(0));
        // Not synced on "b" yet (its table was not in the old program):
        // its desired 0 is stale, not "wants nothing".
        let unsynced = set("MyIngress.ipv4_lpm", 0, None, None);
        assert_eq!(expected(&[unsynced], "b", &p4info, AT), None);
        // Synced on "b" under the old program, which lacked its table
        // (TableNotInProgram: desired 0, applied 0, not Ready): waits.
        let mut orphaned = set("MyIngress.ipv4_lpm", 0, None, Some(0));
        not_ready(&mut orphaned, "TableNotInProgram");
        assert_eq!(expected(&[orphaned], "b", &p4info, AT), None);
        // Synced since the swap but refused by the device (not Ready): the
        // retry is waited for, not counted as 0.
        let mut refused = set(
            "MyIngress.ipv4_lpm",
            5,
            Some("2026-11-23T00:00:11Z"),
            Some(0),
        );
        not_ready(&mut refused, "EntriesFailed");
        assert_eq!(expected(&[refused], "b", &p4info, AT), None);
    }

    #[test]
    fn only_a_recent_swap_without_a_count_waits() {
        let now: DateTime<Utc> = "2026-11-23T00:01:00Z".parse().unwrap();
        let swap = |at: &str, n: Option<u64>| LastSwap {
            at: at.into(),
            entries_reapplied: n,
            ..Default::default()
        };
        assert!(waiting(Some(&swap(AT, None)), now));
        assert!(!waiting(Some(&swap(AT, Some(4))), now));
        assert!(!waiting(Some(&swap("2026-11-22T23:00:00Z", None)), now));
        assert!(!waiting(None, now));
    }
}
