//! A TableEntrySet's ownership record that could not be used as stored,
//! and what the set says about it (pure).

use p4fleet_crds::{Condition, Ownership};

use crate::status::EventNote;

/// The condition type a set reports a damaged record under.
pub const CONDITION: &str = "OwnershipRecord";

/// What was wrong with the stored record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DamageKind {
    /// It could not be read (bad gzip, unknown format, digest mismatch, a
    /// missing chunk …): the reason.
    Unreadable(String),
    /// The head ConfigMap this process wrote was deleted by someone else.
    Deleted,
}

/// A record that could not be used as stored (ConfigMap `name`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Damage {
    pub name: String,
    pub kind: DamageKind,
}

impl Damage {
    fn reason(&self) -> &'static str {
        match self.kind {
            DamageKind::Unreadable(_) => "RecordDamaged",
            DamageKind::Deleted => "RecordDeleted",
        }
    }

    /// What happened and what the set does about it.
    fn message(&self, ownership: Ownership) -> String {
        match &self.kind {
            DamageKind::Deleted => format!(
                "ownership record ConfigMap {} was deleted; it is written again from this \
                 operator's memory (nothing is lost)",
                self.name
            ),
            DamageKind::Unreadable(why) => {
                let fallback = match ownership {
                    Ownership::Merge => {
                        "only entries equal to desired ones count as this set's: entries it \
                         wrote earlier that are no longer desired cannot be told from other \
                         writers' and stay on the device (check the table and delete them by hand)"
                    }
                    Ownership::Exclusive => {
                        "the set is Exclusive, so every entry it does not desire is deleted anyway"
                    }
                };
                format!(
                    "ownership record ConfigMap {} is unreadable ({why}); it is replaced by a new \
                     record, and {fallback}",
                    self.name
                )
            }
        }
    }
}

/// The set's condition while its record is damaged: `OwnershipRecord`
/// False, reason `RecordDamaged` or `RecordDeleted`.
pub fn damage_condition(d: &Damage, ownership: Ownership) -> Condition {
    Condition::new(CONDITION, false, d.reason(), d.message(ownership))
}

/// The Warning Event of the same.
pub fn damage_event(d: &Damage, ownership: Ownership) -> EventNote {
    EventNote::warning(d.reason(), "Sync", d.message(ownership))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn damaged(why: &str) -> Damage {
        Damage {
            name: "p4fleet-owned.fw".into(),
            kind: DamageKind::Unreadable(why.into()),
        }
    }

    #[test]
    fn an_unreadable_record_names_the_configmap_the_reason_and_the_fallback() {
        let d = damaged("not gzip data, or truncated: invalid gzip header");
        let c = damage_condition(&d, Ownership::Merge);
        assert_eq!(
            (c.type_.as_str(), c.is_true(), c.reason.as_str()),
            (CONDITION, false, "RecordDamaged")
        );
        assert!(c.message.contains("p4fleet-owned.fw"), "{}", c.message);
        assert!(c.message.contains("invalid gzip header"), "{}", c.message);
        assert!(c.message.contains("stay on the device"), "{}", c.message);
        let c = damage_condition(&d, Ownership::Exclusive);
        assert!(c.message.contains("Exclusive"), "{}", c.message);
        let e = damage_event(&d, Ownership::Merge);
        assert_eq!(e.reason, "RecordDamaged");
    }

    #[test]
    fn a_deleted_record_is_rewritten_from_memory() {
        let d = Damage {
            name: "p4fleet-owned.fw".into(),
            kind: DamageKind::Deleted,
        };
        let c = damage_condition(&d, Ownership::Merge);
        assert_eq!(c.reason, "RecordDeleted");
        assert!(c.message.contains("was deleted"), "{}", c.message);
    }
}
