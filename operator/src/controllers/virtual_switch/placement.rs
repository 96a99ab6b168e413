//! Placement, pure: which Switch slot a VirtualSwitch runs on, from the
//! Switches and the slots other VirtualSwitches hold. A placed
//! VirtualSwitch keeps its slot (a re-reconcile never moves a running
//! instance); a fixed `spec.slot` is checked, not searched.

use kube::ResourceExt;
use p4fleet_crds::{Switch, VirtualSwitch, VirtualSwitchSpec};

use crate::controllers::object_key;

/// A slot held by some VirtualSwitch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Occupied {
    pub switch: String,
    pub slot: u32,
    /// `namespace/name` of the holder.
    pub owner: String,
}

/// Why a VirtualSwitch could not be placed; the message names the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlacementError {
    #[error("spec.switchRef: Switch {0} not found")]
    SwitchNotFound(String),
    #[error("spec.slot: slot {slot} is out of range, Switch {switch} has {slots} slots")]
    SlotOutOfRange {
        switch: String,
        slot: u32,
        slots: u32,
    },
    #[error("spec.slot: slot {slot} of Switch {switch} is held by {owner}")]
    SlotTaken {
        switch: String,
        slot: u32,
        owner: String,
    },
    #[error("Switch {0} has no free slot")]
    NoFreeSlot(String),
    #[error("spec.switchSelector: no Switch matches with a free slot")]
    NoMatchingSwitch,
}

impl PlacementError {
    pub fn reason(&self) -> &'static str {
        match self {
            PlacementError::SwitchNotFound(_) => "SwitchNotFound",
            PlacementError::SlotOutOfRange { .. } => "SlotOutOfRange",
            PlacementError::SlotTaken { .. } => "SlotTaken",
            PlacementError::NoFreeSlot(_) => "NoFreeSlot",
            PlacementError::NoMatchingSwitch => "NoMatchingSwitch",
        }
    }
}

fn free_slot(sw: &Switch, me: &str, current: Option<u32>, used: &[Occupied]) -> Option<u32> {
    let name = sw.name_any();
    let taken = |s: u32| {
        used.iter()
            .any(|o| o.switch == name && o.slot == s && o.owner != me)
    };
    // Keep the slot we already hold, so a re-reconcile never moves a running instance.
    if let Some(c) = current
        && c < sw.spec.slots
        && !taken(c)
    {
        return Some(c);
    }
    (0..sw.spec.slots).find(|s| !taken(*s))
}

/// Chooses `(switch, slot)` for VirtualSwitch `me` (`namespace/name`).
/// `current` is where it runs now (from status); `used` are the slots other
/// VirtualSwitches hold. With a selector, Switches are tried by name order
/// (the current one first).
pub fn place(
    me: &str,
    spec: &VirtualSwitchSpec,
    current: Option<(&str, u32)>,
    switches: &[Switch],
    used: &[Occupied],
) -> Result<(String, u32), PlacementError> {
    if let Some(name) = &spec.switch_ref {
        let sw = switches
            .iter()
            .find(|s| s.name_any() == *name)
            .ok_or_else(|| PlacementError::SwitchNotFound(name.clone()))?;
        if let Some(slot) = spec.slot {
            if slot >= sw.spec.slots {
                return Err(PlacementError::SlotOutOfRange {
                    switch: name.clone(),
                    slot,
                    slots: sw.spec.slots,
                });
            }
            if let Some(o) = used
                .iter()
                .find(|o| o.switch == *name && o.slot == slot && o.owner != me)
            {
                return Err(PlacementError::SlotTaken {
                    switch: name.clone(),
                    slot,
                    owner: o.owner.clone(),
                });
            }
            return Ok((name.clone(), slot));
        }
        let cur = current.filter(|(s, _)| s == name).map(|(_, slot)| slot);
        return free_slot(sw, me, cur, used)
            .map(|slot| (name.clone(), slot))
            .ok_or_else(|| PlacementError::NoFreeSlot(name.clone()));
    }
    let selector = spec.switch_selector.clone().unwrap_or_default();
    let mut candidates: Vec<&Switch> = switches
        .iter()
        .filter(|s| selector.matches(s.labels()))
        .collect();
    candidates.sort_by_key(|s| {
        (
            Some(s.name_any().as_str()) != current.map(|c| c.0),
            s.name_any(),
        )
    });
    candidates
        .into_iter()
        .find_map(|sw| {
            let cur = current
                .filter(|(s, _)| *s == sw.name_any())
                .map(|(_, slot)| slot);
            free_slot(sw, me, cur, used).map(|slot| (sw.name_any(), slot))
        })
        .ok_or(PlacementError::NoMatchingSwitch)
}

/// Slots other VirtualSwitches hold (from their status).
pub fn occupied(vss: &[VirtualSwitch]) -> Vec<Occupied> {
    vss.iter()
        .filter_map(|v| {
            let st = v.status.as_ref()?;
            Some(Occupied {
                switch: st.switch.clone()?,
                slot: st.slot?,
                owner: object_key(v),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use p4fleet_crds::{Selector, SwitchSpec};

    fn sw(name: &str, slots: u32, labels: &[(&str, &str)]) -> Switch {
        let spec: SwitchSpec = serde_json::from_value(
            serde_json::json!({"target": "Fpga", "endpoint": "h:1", "slots": slots}),
        )
        .unwrap();
        let mut s = Switch::new(name, spec);
        s.metadata.labels = Some(
            labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
        s
    }

    fn spec(
        switch_ref: Option<&str>,
        slot: Option<u32>,
        selector: Option<&[(&str, &str)]>,
    ) -> VirtualSwitchSpec {
        VirtualSwitchSpec {
            program_ref: "fw".into(),
            switch_ref: switch_ref.map(Into::into),
            switch_selector: selector.map(|l| Selector {
                match_labels: l
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            }),
            slot,
            isolation: None,
            port_map: vec![],
            update_strategy: Default::default(),
        }
    }

    fn occ(switch: &str, slot: u32, owner: &str) -> Occupied {
        Occupied {
            switch: switch.into(),
            slot,
            owner: owner.into(),
        }
    }

    #[test]
    fn switch_ref_takes_the_first_free_slot_or_the_given_one() {
        let sws = [sw("a", 3, &[])];
        let used = [occ("a", 0, "ns/x")];
        assert_eq!(
            place("ns/me", &spec(Some("a"), None, None), None, &sws, &used),
            Ok(("a".into(), 1))
        );
        assert_eq!(
            place("ns/me", &spec(Some("a"), Some(2), None), None, &sws, &used),
            Ok(("a".into(), 2))
        );
        assert_eq!(
            place("ns/me", &spec(Some("a"), Some(0), None), None, &sws, &used)
                .unwrap_err()
                .reason(),
            "SlotTaken"
        );
        assert_eq!(
            place("ns/me", &spec(Some("a"), Some(3), None), None, &sws, &used)
                .unwrap_err()
                .reason(),
            "SlotOutOfRange"
        );
        assert_eq!(
            place("ns/me", &spec(Some("b"), None, None), None, &sws, &used).unwrap_err(),
            PlacementError::SwitchNotFound("b".into())
        );
    }

    #[test]
    fn keeps_its_current_slot() {
        let sws = [sw("a", 3, &[])];
        assert_eq!(
            place(
                "ns/me",
                &spec(Some("a"), None, None),
                Some(("a", 2)),
                &sws,
                &[]
            ),
            Ok(("a".into(), 2))
        );
    }

    #[test]
    fn full_switch_has_no_free_slot() {
        let sws = [sw("a", 1, &[])];
        let used = [occ("a", 0, "ns/x")];
        assert_eq!(
            place("ns/me", &spec(Some("a"), None, None), None, &sws, &used)
                .unwrap_err()
                .reason(),
            "NoFreeSlot"
        );
    }

    #[test]
    fn selector_picks_first_matching_switch_with_room() {
        let sws = [
            sw("c", 1, &[("pool", "edge")]),
            sw("b", 1, &[("pool", "edge")]),
            sw("a", 4, &[("pool", "core")]),
        ];
        let sel: &[(&str, &str)] = &[("pool", "edge")];
        assert_eq!(
            place("ns/me", &spec(None, None, Some(sel)), None, &sws, &[]),
            Ok(("b".into(), 0))
        );
        let used = [occ("b", 0, "ns/x")];
        assert_eq!(
            place("ns/me", &spec(None, None, Some(sel)), None, &sws, &used),
            Ok(("c".into(), 0))
        );
        let used = [occ("b", 0, "ns/x"), occ("c", 0, "ns/y")];
        assert_eq!(
            place("ns/me", &spec(None, None, Some(sel)), None, &sws, &used),
            Err(PlacementError::NoMatchingSwitch)
        );
        // Stays where it is even when an earlier switch has room.
        assert_eq!(
            place(
                "ns/me",
                &spec(None, None, Some(sel)),
                Some(("c", 0)),
                &sws,
                &[]
            ),
            Ok(("c".into(), 0))
        );
    }
}
