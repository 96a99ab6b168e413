//! Which Switch changes bring which VirtualSwitches back.
//!
//! Every slot claim is a write to the Switch (its annotation, then the
//! Switch controller's `free` in status). Reconciling every VirtualSwitch
//! of the Switch on each of those writes is N² reconciles for N
//! VirtualSwitches created together, and a placed VirtualSwitch has no use
//! for another one's claim. So a Switch change reaches:
//!
//! - every VirtualSwitch that may use the Switch, when what placement and
//!   loading read of it changed ([`view`]: spec, labels, deletion, the
//!   device-reported status; not the claims and what is derived from them);
//! - otherwise only those not placed yet ([`placed`]): a released claim may
//!   let them in.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::Mutex;

use kube::ResourceExt;
use kube::runtime::reflector::{ObjectRef, Store};
use p4fleet_crds::condition_types::SCHEDULED;
use p4fleet_crds::{SLOT_CLAIMS_ANNOTATION, Switch, VirtualSwitch, find_condition};

/// A hash of what a Switch offers VirtualSwitches, leaving out the slot
/// claims and the status fields computed from them (`free`, summaries,
/// `slotsInUse`) and condition messages and times. Pure.
pub fn view(sw: &Switch) -> u64 {
    let mut annotations = sw.annotations().clone();
    annotations.remove(SLOT_CLAIMS_ANNOTATION);
    let st = sw.status.clone().unwrap_or_default();
    let conditions: Vec<_> = st
        .conditions
        .iter()
        .map(|c| (&c.type_, format!("{:?}", c.status), &c.reason))
        .collect();
    let fields = serde_json::json!({
        "spec": sw.spec,
        "labels": sw.labels(),
        "annotations": annotations,
        "deleting": sw.metadata.deletion_timestamp.is_some(),
        "uid": sw.metadata.uid,
        "capabilities": st.capabilities,
        "slots": st.slots,
        "capacity": st.capacity,
        "capacitySource": st.capacity_source,
        "configPort": st.config_port,
        "conditions": conditions,
    });
    let mut h = std::collections::hash_map::DefaultHasher::new();
    fields.to_string().hash(&mut h);
    h.finish()
}

/// Whether `v` holds a slot (Scheduled with a Switch in its status).
pub fn placed(v: &VirtualSwitch) -> bool {
    v.status.as_ref().is_some_and(|st| {
        st.switch.is_some()
            && find_condition(&st.conditions, SCHEDULED).is_some_and(|c| c.is_true())
    })
}

/// Whether a change of `sw` brings `v` back: `uses` says whether `v` may
/// use `sw` at all, `view_changed` whether [`view`] changed. Pure.
pub fn triggered(v: &VirtualSwitch, uses: bool, view_changed: bool) -> bool {
    uses && (view_changed || !placed(v))
}

/// The watch mapper: Switch → the VirtualSwitches it brings back. Keeps
/// the last [`view`] per Switch (by name) to tell claim-only changes apart.
pub fn mapper(
    store: Store<VirtualSwitch>,
    uses: impl Fn(&VirtualSwitch, &Switch) -> bool + Send + Sync + 'static,
) -> impl Fn(Switch) -> Vec<ObjectRef<VirtualSwitch>> + Send + Sync + 'static {
    let seen: Mutex<HashMap<String, u64>> = Mutex::default();
    move |sw: Switch| {
        let h = view(&sw);
        let before = seen
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(sw.name_any(), h);
        let changed = before != Some(h);
        store
            .state()
            .into_iter()
            .filter(|v| triggered(v, uses(v, &sw), changed))
            .map(|v| ObjectRef::from_obj(v.as_ref()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use p4fleet_crds::{Condition, SwitchSpec, SwitchStatus, VirtualSwitchStatus};

    fn board() -> Switch {
        let spec: SwitchSpec =
            serde_json::from_value(serde_json::json!({"target": "Fpga", "endpoint": "h:1"}))
                .unwrap();
        let mut sw = Switch::new("b", spec);
        sw.status = Some(SwitchStatus {
            slots: Some(16),
            capacity: [("luts".to_string(), 380_501)].into(),
            free: [("luts".to_string(), 380_501)].into(),
            conditions: vec![Condition::new("Ready", true, "Reachable", "ok")],
            ..Default::default()
        });
        sw
    }

    #[test]
    fn claims_and_what_follows_from_them_do_not_change_the_view() {
        let sw = board();
        let mut claimed = sw.clone();
        claimed
            .annotations_mut()
            .insert(SLOT_CLAIMS_ANNOTATION.into(), "[{\"slot\":0}]".into());
        let st = claimed.status.as_mut().unwrap();
        st.free.insert("luts".into(), 352_405);
        st.free_summary = Some("luts=352405".into());
        st.slot_summary = Some("1/16".into());
        st.conditions[0].message = "1 slot in use".into();
        assert_eq!(view(&sw), view(&claimed));

        let mut grown = sw.clone();
        grown
            .status
            .as_mut()
            .unwrap()
            .capacity
            .insert("luts".into(), 400_000);
        assert_ne!(view(&sw), view(&grown));
        let mut moved = sw.clone();
        moved.spec.endpoint = "h:2".into();
        assert_ne!(view(&sw), view(&moved));
        let mut down = sw.clone();
        down.status.as_mut().unwrap().conditions[0] =
            Condition::new("Ready", false, "Unreachable", "gone");
        assert_ne!(view(&sw), view(&down));
    }

    #[test]
    fn a_claim_only_change_brings_back_only_the_unplaced() {
        let spec = serde_json::from_value(serde_json::json!({"programRef": "p"})).unwrap();
        let mut v = VirtualSwitch::new("v", spec);
        assert!(triggered(&v, true, false), "not placed yet");
        v.status = Some(VirtualSwitchStatus {
            switch: Some("b".into()),
            slot: Some(0),
            conditions: vec![Condition::new(SCHEDULED, true, "Scheduled", "b slot 0")],
            ..Default::default()
        });
        assert!(
            !triggered(&v, true, false),
            "placed: claims of others do not matter"
        );
        assert!(triggered(&v, true, true), "the Switch itself changed");
        assert!(!triggered(&v, false, true), "a Switch it may not use");
    }
}
