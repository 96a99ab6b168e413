//! Apply stage for direct meters per entry (`spec.entries[].meter`,
//! `@meter=` in the line format), after the entries: per target, the
//! table's direct meter from the running P4Info, the device's
//! `DirectMeterEntry`s of the table read back and diffed against the
//! desired configs ([`p4fleet_model::entries::direct_meter`], pure), the
//! differing ones written (MODIFY, one request) and read again: only what
//! the read confirms is counted. A config changed behind the operator's
//! back, or reset by an entry MODIFY, differs at the next sync and is
//! written again.
//!
//! [`fold`] (pure) puts the outcome into the status: the
//! `DirectMetersSynced` condition, per-entry errors and Ready.

use std::collections::HashMap;

use kube::ResourceExt;
use p4fleet_client::Device;
use p4fleet_crds::entry_set::EntryError as StatusEntryError;
use p4fleet_crds::{Condition, condition_types::READY};
use p4fleet_model::entries::EntryKey;
use p4fleet_model::entries::direct_meter::{self as model, DirectMeterSchema, MeterConfig};
use p4fleet_proto::p4runtime::{self as p4, entity::Entity, update::Type};

use super::MAX_ERRORS;
use super::SetCtx;
use super::dereference::Target;
use super::desired::Desired;
use super::set::Set;
use crate::status::{EventNote, ready_from};

/// The condition this stage adds (only to sets with a metered entry).
pub const DIRECT_METERS_SYNCED: &str = "DirectMetersSynced";

/// What one target's direct meters came to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Outcome {
    /// The table's direct meter (None when not known).
    pub meter: Option<String>,
    /// Entries that set a meter.
    pub wanted: usize,
    /// Of those, the ones the device's read-back shows as desired.
    pub confirmed: usize,
    /// Configs written by this sync.
    pub written: usize,
    /// Why not all are confirmed: `(reason, message)`.
    pub problem: Option<(&'static str, String)>,
    /// Per-entry errors (source, key, reason), the first [`MAX_ERRORS`].
    pub errors: Vec<StatusEntryError>,
}

impl Outcome {
    fn fail(&mut self, reason: &'static str, why: String) {
        self.problem.get_or_insert((reason, why));
    }
}

/// Sets target `t`'s direct meters to what `desired` asks; None when no
/// entry sets one (nothing is read or written then).
pub async fn sync_target(ctx: &SetCtx, t: &Target, desired: &Desired) -> Option<Outcome> {
    let wanted = desired.meters();
    if wanted.is_empty() {
        return None;
    }
    let mut out = Outcome {
        wanted: wanted.len(),
        ..Outcome::default()
    };
    let dev = match t.device(&ctx.devices) {
        Ok(d) => d,
        Err(e) => {
            out.fail("DeviceUnavailable", e.to_string());
            return Some(out);
        }
    };
    let Device::P4Runtime(p) = dev.as_ref() else {
        out.fail(
            "UnsupportedOnTarget",
            format!(
                "Switch {}: direct meters are written over P4Runtime only",
                t.switch.name_any()
            ),
        );
        return Some(out);
    };
    let schema = match p.running_p4info(t.slot).await {
        Ok(Some(info)) => DirectMeterSchema::of_table(&info, t.schema.id),
        Ok(None) => {
            out.fail("DeviceUnavailable", "no pipeline loaded".into());
            return Some(out);
        }
        Err(e) => {
            out.fail("DeviceUnavailable", e.to_string());
            return Some(out);
        }
    };
    let Some(schema) = schema else {
        let why = format!(
            "table {} has no direct meter in the program of VirtualSwitch {}",
            t.schema.name, t.virtual_switch
        );
        for &(i, _) in wanted.iter().take(MAX_ERRORS) {
            out.errors.push(desired.error(i, format!("meter: {why}")));
        }
        out.fail("NoDirectMeter", why);
        return Some(out);
    };
    out.meter = Some(schema.name.clone());
    let list: Vec<(&EntryKey, MeterConfig)> = wanted
        .iter()
        .map(|&(i, c)| (&desired.entry(i).key, c))
        .collect();
    let on_device = match read_back(p, t).await {
        Ok(m) => m,
        Err(e) => {
            out.fail("DeviceUnavailable", e.to_string());
            return Some(out);
        }
    };
    let plan = model::plan(&list, &on_device);
    if plan.writes.is_empty() {
        out.confirmed = plan.in_place.len();
    } else {
        let updates = plan
            .writes
            .iter()
            .map(|&j| p4::Update {
                r#type: Type::Modify as i32,
                entity: Some(p4::Entity {
                    entity: Some(Entity::DirectMeterEntry(model::to_proto(
                        list[j].0, &list[j].1,
                    ))),
                }),
            })
            .collect();
        match p.write_entities(t.slot, updates).await {
            Ok(refused) => {
                out.written = plan.writes.len() - refused.len();
                for (k, code, message) in refused {
                    let i = wanted[plan.writes[k]].0;
                    let why = format!(
                        "meter: VirtualSwitch {} refused it ({}): {message}",
                        t.virtual_switch,
                        tonic::Code::from_i32(code).description()
                    );
                    if out.errors.len() < MAX_ERRORS {
                        out.errors.push(desired.error(i, why.clone()));
                    }
                    out.fail("MeterRefused", why);
                }
            }
            Err(e) => {
                out.fail("DeviceUnavailable", e.to_string());
                return Some(out);
            }
        }
        // Only what the device shows now counts.
        match read_back(p, t).await {
            Ok(now) => out.confirmed = model::plan(&list, &now).in_place.len(),
            Err(e) => out.fail("DeviceUnavailable", e.to_string()),
        }
    }
    if !plan.no_entry.is_empty() && out.problem.is_none() {
        out.fail(
            "EntryNotOnDevice",
            format!(
                "{} entries with a meter are not on VirtualSwitch {} (see the entry errors)",
                plan.no_entry.len(),
                t.virtual_switch
            ),
        );
    }
    Some(out)
}

/// Entries of a table with an action profile go through
/// [`super::profiles`], which does not write meters: one that sets a
/// meter there is refused in the condition, not ignored.
pub fn on_indirect_table(set: &Set<'_>, t: &Target) -> Option<Outcome> {
    let profile = t.profile.as_ref()?;
    let metered: Vec<usize> = (set.spec.entries.iter().enumerate())
        .filter(|(_, e)| e.meter.is_some())
        .map(|(i, _)| i)
        .collect();
    let first = *metered.first()?;
    Some(Outcome {
        wanted: metered.len(),
        problem: Some((
            "MeterOnActionProfileTable",
            format!(
                "spec.entries[{first}]: table {} has action profile {}: meters on its entries are not written yet",
                t.schema.name, profile.name
            ),
        )),
        ..Outcome::default()
    })
}

/// The table's direct meter configs as the device reports them, by entry.
async fn read_back(
    p: &p4fleet_client::P4RuntimeDevice,
    t: &Target,
) -> Result<HashMap<EntryKey, Option<MeterConfig>>, p4fleet_client::Error> {
    let filter = p4::Entity {
        entity: Some(Entity::DirectMeterEntry(model::read_filter(t.schema.id))),
    };
    let mut out = HashMap::new();
    for e in p.read_entities(t.slot, vec![filter]).await? {
        if let Some(Entity::DirectMeterEntry(d)) = e.entity
            && let Ok((key, config)) = model::from_proto(&t.schema, &d)
        {
            out.insert(key, config);
        }
    }
    Ok(out)
}

/// Puts the targets' outcomes (`(virtual switch, outcome)`) into the
/// status: the condition, the per-entry errors and Ready. Nothing when no
/// target had a metered entry.
pub fn fold(report: &mut super::status::Report, set: &Set<'_>, outcomes: &[(String, Outcome)]) {
    if outcomes.is_empty() {
        return;
    }
    let me = &set.key;
    let table = &set.spec.table;
    let st = &mut report.status;
    for (_, o) in outcomes {
        for e in &o.errors {
            if st.errors.len() < MAX_ERRORS && !st.errors.contains(e) {
                st.errors.push(e.clone());
            }
        }
    }
    let condition = match outcomes
        .iter()
        .find_map(|(vs, o)| o.problem.as_ref().map(|p| (vs, p)))
    {
        Some((vs, (reason, why))) => Condition::new(
            DIRECT_METERS_SYNCED,
            false,
            reason,
            format!(
                "TableEntrySet {me}: direct meters of table {table} on VirtualSwitch {vs}: {why}"
            ),
        ),
        None => {
            let confirmed = outcomes.iter().map(|(_, o)| o.confirmed).min().unwrap_or(0);
            let wanted = outcomes.iter().map(|(_, o)| o.wanted).max().unwrap_or(0);
            let meter = outcomes
                .iter()
                .find_map(|(_, o)| o.meter.clone())
                .unwrap_or_default();
            let written: usize = outcomes.iter().map(|(_, o)| o.written).sum();
            let message = format!(
                "{confirmed} of {wanted} entry meters of {meter} confirmed on {} targets ({written} written by this sync)",
                outcomes.len()
            );
            if written > 0 {
                report.events.push(EventNote::normal(
                    "DirectMetersSet",
                    "SetDirectMeters",
                    format!("table {table}: {written} direct meter configs written"),
                ));
            }
            Condition::new(
                DIRECT_METERS_SYNCED,
                confirmed == wanted,
                if confirmed == wanted {
                    "Synced"
                } else {
                    "NotConfirmed"
                },
                message,
            )
        }
    };
    if !condition.is_true() {
        report.events.push(EventNote::warning(
            &condition.reason,
            "SetDirectMeters",
            condition.message.clone(),
        ));
        if let Some(ready) = st.conditions.iter_mut().find(|c| c.type_ == READY)
            && ready.is_true()
        {
            *ready = ready_from(&[&condition], READY, "");
        }
    }
    st.conditions.push(condition);
}

#[cfg(test)]
mod tests {
    use super::*;
    use p4fleet_crds::TableEntrySet;
    use p4fleet_crds::{TableEntrySetSpec, find_condition};

    fn set() -> TableEntrySet {
        let spec: TableEntrySetSpec = serde_json::from_value(serde_json::json!({
            "virtualSwitchRef": "vs", "table": "MyIngress.acl"
        }))
        .unwrap();
        let mut s = TableEntrySet::new("acl", spec);
        s.metadata.namespace = Some("ns".into());
        s
    }

    fn report() -> super::super::status::Report {
        super::super::status::Report::ready_only(Condition::new(READY, true, "Synced", "ok"))
    }

    #[test]
    fn no_metered_entries_add_nothing() {
        let mut r = report();
        fold(&mut r, &Set::of(&set()), &[]);
        assert_eq!(r.status.conditions.len(), 1);
        assert!(r.events.is_empty());
    }

    #[test]
    fn confirmed_everywhere_is_synced_and_ready_stays() {
        let o = Outcome {
            meter: Some("MyIngress.acl_meter".into()),
            wanted: 2,
            confirmed: 2,
            written: 1,
            ..Outcome::default()
        };
        let mut r = report();
        fold(
            &mut r,
            &Set::of(&set()),
            &[("a".into(), o.clone()), ("b".into(), o)],
        );
        let c = find_condition(&r.status.conditions, DIRECT_METERS_SYNCED).unwrap();
        assert!(c.is_true(), "{c:?}");
        assert_eq!(
            c.message,
            "2 of 2 entry meters of MyIngress.acl_meter confirmed on 2 targets (2 written by this sync)"
        );
        assert!(
            find_condition(&r.status.conditions, READY)
                .unwrap()
                .is_true()
        );
        assert_eq!(r.events.len(), 1);
        assert!(!r.events[0].warning);
    }

    #[test]
    fn a_problem_names_set_table_and_switch_and_turns_ready_false() {
        let bad = StatusEntryError {
            source: "entries[1]".into(),
            key: Some("hdr.ipv4.srcAddr=10.0.0.1".into()),
            reason: "meter: table MyIngress.smac has no direct meter".into(),
        };
        let o = Outcome {
            wanted: 1,
            problem: Some((
                "NoDirectMeter",
                "table MyIngress.smac has no direct meter".into(),
            )),
            errors: vec![bad.clone()],
            ..Outcome::default()
        };
        let mut r = report();
        fold(&mut r, &Set::of(&set()), &[("vs1".into(), o)]);
        let c = find_condition(&r.status.conditions, DIRECT_METERS_SYNCED).unwrap();
        assert!(!c.is_true());
        assert_eq!(c.reason, "NoDirectMeter");
        assert!(
            c.message.starts_with(
                "TableEntrySet ns/acl: direct meters of table MyIngress.acl on VirtualSwitch vs1: "
            ),
            "{}",
            c.message
        );
        let ready = find_condition(&r.status.conditions, READY).unwrap();
        assert!(!ready.is_true());
        assert_eq!(ready.reason, "NoDirectMeter");
        assert_eq!(r.status.errors, vec![bad]);
        assert!(r.events.iter().any(|e| e.warning));
    }

    #[test]
    fn fewer_confirmed_than_wanted_is_not_synced() {
        let o = Outcome {
            meter: Some("m".into()),
            wanted: 3,
            confirmed: 2,
            ..Outcome::default()
        };
        let mut r = report();
        fold(&mut r, &Set::of(&set()), &[("vs".into(), o)]);
        let c = find_condition(&r.status.conditions, DIRECT_METERS_SYNCED).unwrap();
        assert_eq!((c.is_true(), c.reason.as_str()), (false, "NotConfirmed"));
    }
}
