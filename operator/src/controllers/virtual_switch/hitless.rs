//! Hitless program changes on P4Runtime targets: what the client's push
//! ([`p4fleet_client::Device::push_pipeline`]: RECONCILE_AND_COMMIT, or
//! VERIFY_AND_COMMIT where the target refuses it) did to the entries the
//! device held, for `status.lastSwap` (`mode`, `entriesKept`,
//! `fallbackReason`) and the Event of the change. The TableEntrySets then
//! sync as after any load: their read-back sees the kept entries and
//! writes only what the new program lost.

use p4fleet_client::{Device, PushMode};
use p4fleet_crds::{LastSwap, ProgramUpdateMode};
use p4fleet_proto::p4info::P4Info;

/// How a program change treated the device's entries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Update {
    pub mode: ProgramUpdateMode,
    /// Entries on the device right after the change, before anything was
    /// written again (None when they could not be read: not claimed).
    pub entries_kept: Option<u64>,
    /// The tables those entries are in (P4Info names, sorted).
    pub tables_kept: Vec<String>,
    /// What the target answered to RECONCILE_AND_COMMIT when it refused it.
    pub fallback: Option<String>,
}

impl Update {
    /// A program changed whose kept entries could not be counted.
    pub fn uncounted() -> Update {
        Update {
            mode: ProgramUpdateMode::Replaced,
            entries_kept: None,
            tables_kept: Vec::new(),
            fallback: None,
        }
    }

    /// A program replaced: its tables start empty (`fallback`: why a
    /// reconcile was refused, if one was asked for).
    pub fn replaced(fallback: Option<String>) -> Update {
        Update {
            mode: ProgramUpdateMode::Replaced,
            entries_kept: Some(0),
            tables_kept: Vec::new(),
            fallback,
        }
    }
}

/// The [`Update`] of a push that replaced a running program (None for a
/// first load). After a reconcile, the slot is read back to count what
/// the device kept; after a replace nothing was kept.
pub async fn update(dev: &Device, slot: u32, p4info: &P4Info, mode: PushMode) -> Option<Update> {
    match mode {
        PushMode::Loaded => None,
        PushMode::Replaced { fallback } => Some(Update::replaced(fallback)),
        PushMode::Reconciled => {
            let (entries_kept, tables_kept) = kept(dev, slot, p4info).await;
            Some(Update {
                mode: ProgramUpdateMode::Reconciled,
                entries_kept,
                tables_kept,
                fallback: None,
            })
        }
    }
}

/// The [`Update`] of a load whose effect on the program's entries the
/// protocol does not say (BFRT's warm init): what the slot holds right
/// after it, read back. `Replaced` when it holds none, `Reconciled` when
/// some stayed.
pub async fn observed(dev: &Device, slot: u32, p4info: &P4Info) -> Update {
    let (entries_kept, tables_kept) = kept(dev, slot, p4info).await;
    Update {
        mode: match entries_kept {
            Some(n) if n > 0 => ProgramUpdateMode::Reconciled,
            _ => ProgramUpdateMode::Replaced,
        },
        entries_kept,
        tables_kept,
        fallback: None,
    }
}

/// The entries of every table in `slot` and their tables' names; None
/// (logged) when they could not be read: nothing is claimed then.
async fn kept(dev: &Device, slot: u32, p4info: &P4Info) -> (Option<u64>, Vec<String>) {
    match dev.read_table(slot, 0).await {
        Ok(entries) => {
            let ids: Vec<u32> = entries.iter().map(|e| e.table_id).collect();
            (Some(ids.len() as u64), table_names(p4info, &ids))
        }
        Err(e) => {
            tracing::warn!(slot, error = %e, "could not count the entries kept by a program change");
            (None, Vec::new())
        }
    }
}

/// The P4Info names of the tables with these ids, sorted, once each. Pure.
pub fn table_names(p4info: &P4Info, ids: &[u32]) -> Vec<String> {
    let mut names: Vec<String> = p4info
        .tables
        .iter()
        .filter_map(|t| t.preamble.as_ref())
        .filter(|p| ids.contains(&p.id))
        .map(|p| p.name.clone())
        .collect();
    names.sort();
    names.dedup();
    names
}

/// Records `update` in `swap`. Pure.
pub fn record(swap: &mut LastSwap, update: &Update) {
    swap.mode = Some(update.mode);
    swap.entries_kept = update.entries_kept;
    swap.tables_kept = update.tables_kept.clone();
    swap.fallback_reason = update.fallback.clone();
}

/// Entries written again after a swap: what the sets confirmed on the
/// device (`held`) less what the device kept through it. Pure.
pub fn reapplied(swap: &LastSwap, held: u64) -> u64 {
    held.saturating_sub(swap.entries_kept.unwrap_or(0))
}

/// The note of the Event of a change that did not keep what it could
/// have, or None. Pure.
pub fn fallback_note(update: &Update, program: &str) -> Option<String> {
    let why = update.fallback.as_ref()?;
    Some(format!(
        "the target refused RECONCILE_AND_COMMIT ({why}); {program} was loaded with VERIFY_AND_COMMIT, which cleared every table, and all entries are re-applied"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use p4fleet_crds::UpdateStrategyType;

    fn swap() -> LastSwap {
        LastSwap {
            at: "2026-11-23T00:00:00Z".into(),
            from_digest: Some("a".into()),
            to_digest: "b".into(),
            strategy: UpdateStrategyType::HotSwap,
            duration_millis: 3,
            ..Default::default()
        }
    }

    #[test]
    fn kept_tables_are_named_once_each_in_order() {
        let info = p4fleet_proto::p4info::parse_text(
            "tables { preamble { id: 2 name: \"b\" } }\ntables { preamble { id: 1 name: \"a\" } }\n\
             tables { preamble { id: 3 name: \"c\" } }\n",
        )
        .unwrap();
        assert_eq!(table_names(&info, &[2, 1, 2, 9]), ["a", "b"]);
        assert!(table_names(&info, &[]).is_empty());
    }

    #[test]
    fn kept_entries_are_not_counted_as_reapplied() {
        let mut s = swap();
        let kept = Update {
            mode: ProgramUpdateMode::Reconciled,
            entries_kept: Some(40),
            tables_kept: vec!["MyIngress.acl".into()],
            fallback: None,
        };
        record(&mut s, &kept);
        assert_eq!(s.mode, Some(ProgramUpdateMode::Reconciled));
        assert_eq!(s.tables_kept, ["MyIngress.acl"]);
        assert_eq!(reapplied(&s, 50), 10);
        assert_eq!(reapplied(&s, 30), 0);
        assert_eq!(fallback_note(&kept, "p"), None);

        let mut s = swap();
        let replaced = Update {
            mode: ProgramUpdateMode::Replaced,
            entries_kept: Some(0),
            tables_kept: Vec::new(),
            fallback: Some("Unimplemented: no".into()),
        };
        record(&mut s, &replaced);
        assert_eq!(reapplied(&s, 50), 50);
        assert_eq!(s.fallback_reason.as_deref(), Some("Unimplemented: no"));
        let note = fallback_note(&replaced, "prog-v2").unwrap();
        assert!(
            note.contains("RECONCILE_AND_COMMIT") && note.contains("prog-v2"),
            "{note}"
        );
        // Not counted: nothing is subtracted.
        let mut s = swap();
        s.entries_kept = None;
        assert_eq!(reapplied(&s, 7), 7);
    }
}
