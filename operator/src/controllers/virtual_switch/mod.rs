//! VirtualSwitch reconciler: place it on a Switch slot, push its program's
//! pipeline through p4fleet-client (P4Runtime: the target's device config,
//! cookie = program digest; BFRT: the Tofino artifacts), report where it
//! runs and what is loaded.

use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::runtime::controller::{Action, Controller};
use kube::{Api, ResourceExt};
use p4fleet_crds::condition_types::{PIPELINE_LOADED, SCHEDULED};
use p4fleet_crds::{
    Condition, P4Program, Switch, SwitchProtocol, SwitchTarget, VirtualSwitch, VirtualSwitchSpec,
    VirtualSwitchStatus, find_condition,
};
use p4fleet_proto::p4info;

use super::{Error, object_key, referrers, scoped_api, update_status, watcher_config};
use crate::artifacts::{self, Resolved, field};
use crate::context::Context;
use crate::status::ready_from;
use p4fleet_client::{Device, TofinoPipeline};

const RETRY: Duration = Duration::from_secs(10);

/// Watches VirtualSwitches, the P4Programs they run and the Switches they run on.
pub fn controller(ctx: &Context) -> Controller<VirtualSwitch> {
    let c = Controller::new(scoped_api::<VirtualSwitch>(ctx), watcher_config());
    let by_program = c.store();
    let by_switch = c.store();
    c.watches(
        scoped_api::<P4Program>(ctx),
        watcher_config(),
        referrers(by_program, |v: &VirtualSwitch, p: &P4Program| {
            v.namespace() == p.namespace() && v.spec.program_ref == p.name_any()
        }),
    )
    .watches(
        ctx.all::<Switch>(),
        watcher_config(),
        referrers(by_switch, |v: &VirtualSwitch, sw: &Switch| {
            let name = sw.name_any();
            v.spec.switch_ref.as_deref() == Some(name.as_str())
                || v.status.as_ref().and_then(|s| s.switch.as_deref()) == Some(name.as_str())
                || v.spec
                    .switch_selector
                    .as_ref()
                    .is_some_and(|s| s.matches(sw.labels()))
        }),
    )
}

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

/// The device config the target loads: its artifact for the Switch's kind
/// (bmv2 JSON, DPDK spec, FPGA bitstream), empty when the program has none.
fn device_config(target: SwitchTarget, resolved: &Resolved) -> Vec<u8> {
    let key = match target {
        SwitchTarget::Bmv2 => field::BMV2_JSON,
        SwitchTarget::Dpdk => field::DPDK_SPEC,
        SwitchTarget::Fpga => field::FPGA_BITSTREAM,
        SwitchTarget::Tofino => field::TOFINO_BINARY,
    };
    resolved
        .get(key)
        .and_then(|r| r.as_ref().ok())
        .cloned()
        .unwrap_or_default()
}

/// Why a program cannot be loaded on a BFRT Switch; the message names the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TofinoArtifactError {
    #[error(
        "{}: P4Program {program} has no Tofino artifacts, which Switch {switch} (Tofino, BFRT) needs",
        field::TOFINO_BFRT_JSON
    )]
    Missing { program: String, switch: String },
    /// The artifact could not be read (the error names the field).
    #[error(transparent)]
    Unreadable(#[from] artifacts::SourceError),
}

/// The Tofino pipeline a BFRT Switch loads: bfrt.json (required),
/// context.json and binary (empty when the program has none), bound under
/// the program's name.
pub fn tofino_pipeline(
    program: &str,
    switch: &str,
    resolved: &Resolved,
) -> Result<TofinoPipeline, TofinoArtifactError> {
    let optional = |key: &str| -> Result<Vec<u8>, TofinoArtifactError> {
        match resolved.get(key) {
            None => Ok(Vec::new()),
            Some(Ok(b)) => Ok(b.clone()),
            Some(Err(e)) => Err(e.clone().into()),
        }
    };
    let bfrt_json = match resolved.get(field::TOFINO_BFRT_JSON) {
        None => {
            return Err(TofinoArtifactError::Missing {
                program: program.into(),
                switch: switch.into(),
            });
        }
        Some(r) => r.clone()?,
    };
    Ok(TofinoPipeline {
        p4_name: program.into(),
        bfrt_json,
        context_json: optional(field::TOFINO_CONTEXT_JSON)?,
        binary: optional(field::TOFINO_BINARY)?,
    })
}

/// Loads the program into `slot` the way the Switch's protocol wants:
/// P4Runtime with the target's device config (cookie = digest), or BFRT
/// with the Tofino artifacts. Returns whether it was pushed.
async fn load(
    dev: &Device,
    sw: &Switch,
    slot: u32,
    program_ref: &str,
    info: &p4info::P4Info,
    digest: &str,
    resolved: &Resolved,
) -> Result<bool, (&'static str, String)> {
    match sw.spec.effective_protocol() {
        SwitchProtocol::Bfrt => {
            let pipeline = tofino_pipeline(program_ref, &sw.name_any(), resolved)
                .map_err(|e| ("MissingTofinoArtifacts", e.to_string()))?;
            dev.set_tofino_pipeline(slot, info, &pipeline)
                .await
                .map_err(|e| ("LoadFailed", e.to_string()))
        }
        SwitchProtocol::P4Runtime => dev
            .set_pipeline(
                slot,
                info,
                device_config(sw.spec.target, resolved),
                artifacts::cookie(digest),
            )
            .await
            .map_err(|e| ("LoadFailed", e.to_string())),
    }
}

/// The program's pipeline when it is Ready and its sources still match its digest.
async fn ready_pipeline(
    ctx: &Context,
    ns: &str,
    program_ref: &str,
) -> Result<Result<(String, p4info::P4Info, Resolved), Condition>, Error> {
    let api: Api<P4Program> = Api::namespaced(ctx.client.clone(), ns);
    let Some(p) = api.get_opt(program_ref).await? else {
        return Ok(Err(Condition::new(
            PIPELINE_LOADED,
            false,
            "ProgramNotFound",
            format!("spec.programRef: P4Program {program_ref} not found"),
        )));
    };
    let st = p.status.clone().unwrap_or_default();
    let ready = find_condition(&st.conditions, "Ready").is_some_and(|c| c.is_true());
    let (true, Some(digest)) = (ready, st.digest.clone()) else {
        return Ok(Err(Condition::new(
            PIPELINE_LOADED,
            false,
            "ProgramNotReady",
            format!("spec.programRef: P4Program {program_ref} is not Ready"),
        )));
    };
    let resolved = artifacts::resolve(&ctx.reads, ns, &p.spec).await?;
    match resolved.p4info() {
        Ok(info) if resolved.digest() == digest => Ok(Ok((digest, info, resolved))),
        // The sources changed after the program was last reconciled; it will
        // be again, and that status change brings us back here.
        _ => Ok(Err(Condition::unknown(
            PIPELINE_LOADED,
            "ProgramChanging",
            format!("P4Program {program_ref} sources changed; waiting for its new digest"),
        ))),
    }
}

pub async fn reconcile(obj: Arc<VirtualSwitch>, ctx: Arc<Context>) -> Result<Action, Error> {
    let ns = obj
        .namespace()
        .ok_or(Error::MissingObjectKey("namespace"))?;
    let me = object_key(obj.as_ref());
    let old = obj.status.as_ref();
    let mut new = VirtualSwitchStatus {
        loaded_digest: old.and_then(|s| s.loaded_digest.clone()),
        loaded_short_digest: old.and_then(|s| s.loaded_short_digest.clone()),
        last_swap_millis: old.and_then(|s| s.last_swap_millis),
        ..Default::default()
    };
    let switches = ctx.all::<Switch>().list(&Default::default()).await?.items;
    let others: Vec<VirtualSwitch> = scoped_api::<VirtualSwitch>(&ctx)
        .list(&Default::default())
        .await?
        .items
        .into_iter()
        .filter(|v| object_key(v) != me)
        .collect();
    let current = old.and_then(|s| Some((s.switch.as_deref()?, s.slot?)));
    let mut requeue = ctx.config.resync;
    let mut pushed = None;
    let (scheduled, loaded) = match place(&me, &obj.spec, current, &switches, &occupied(&others)) {
        Err(e) => {
            requeue = RETRY;
            new.loaded_digest = None;
            new.loaded_short_digest = None;
            (
                Condition::new(SCHEDULED, false, e.reason(), e.to_string()),
                Condition::unknown(PIPELINE_LOADED, "NotScheduled", "not placed on a Switch"),
            )
        }
        Ok((sw_name, slot)) => {
            new.switch = Some(sw_name.clone());
            new.slot = Some(slot);
            let sched = Condition::new(
                SCHEDULED,
                true,
                "Scheduled",
                format!("{sw_name} slot {slot}"),
            );
            let sw = switches
                .iter()
                .find(|s| s.name_any() == sw_name)
                .expect("placed on a listed switch");
            let loaded = match ready_pipeline(&ctx, &ns, &obj.spec.program_ref).await? {
                Err(c) => {
                    requeue = RETRY;
                    c
                }
                Ok((digest, info, resolved)) => {
                    let started = Instant::now();
                    let res = match ctx.devices.connect(sw) {
                        Ok(dev) => {
                            let p = &obj.spec.program_ref;
                            load(&dev, sw, slot, p, &info, &digest, &resolved).await
                        }
                        Err(e) => Err(("LoadFailed", e.to_string())),
                    };
                    match res {
                        Ok(was_pushed) => {
                            if was_pushed {
                                let ms = started.elapsed().as_millis() as u64;
                                new.last_swap_millis = Some(ms);
                                ctx.metrics
                                    .pipeline_loads
                                    .get_or_create(&crate::metrics::SwitchLabel {
                                        switch: sw_name.clone(),
                                    })
                                    .inc();
                                pushed = Some(ms);
                            }
                            new.loaded_short_digest = Some(artifacts::short_digest(&digest));
                            new.loaded_digest = Some(digest.clone());
                            Condition::new(
                                PIPELINE_LOADED,
                                true,
                                "Loaded",
                                format!("{} loaded on {sw_name} slot {slot}", obj.spec.program_ref),
                            )
                        }
                        Err((reason, e)) => {
                            requeue = RETRY;
                            Condition::new(PIPELINE_LOADED, false, reason, e)
                        }
                    }
                }
            };
            (sched, loaded)
        }
    };
    let ready = ready_from(&[&scheduled, &loaded], "Ready", "pipeline loaded");
    new.observed_generation = obj.metadata.generation;
    new.conditions = vec![scheduled, loaded, ready];
    let api: Api<VirtualSwitch> = Api::namespaced(ctx.client.clone(), &ns);
    update_status(&ctx, &api, obj.as_ref(), &mut new).await?;
    if let Some(ms) = pushed {
        ctx.events
            .publish(
                obj.as_ref(),
                false,
                "PipelineLoaded",
                "SetPipeline",
                format!(
                    "loaded {} ({}) on {} slot {} in {ms} ms",
                    obj.spec.program_ref,
                    new.loaded_short_digest.clone().unwrap_or_default(),
                    new.switch.clone().unwrap_or_default(),
                    new.slot.unwrap_or(0)
                ),
            )
            .await;
    }
    Ok(Action::requeue(requeue))
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
    fn tofino_pipeline_needs_bfrt_json_and_defaults_the_rest() {
        let mut r = Resolved::default();
        r.insert(field::P4INFO, Ok(b"p4info".to_vec()));
        let e = tofino_pipeline("fw", "tofino-1", &r).unwrap_err();
        assert!(matches!(e, TofinoArtifactError::Missing { .. }));
        let msg = e.to_string();
        assert!(msg.starts_with("spec.artifacts.tofino.bfrtJson:"), "{msg}");
        assert!(msg.contains("fw") && msg.contains("tofino-1"), "{msg}");

        r.insert(field::TOFINO_BFRT_JSON, Ok(b"{}".to_vec()));
        let p = tofino_pipeline("fw", "tofino-1", &r).unwrap();
        assert_eq!(p.p4_name, "fw");
        assert_eq!(p.bfrt_json, b"{}");
        assert!(p.context_json.is_empty() && p.binary.is_empty());

        r.insert(field::TOFINO_CONTEXT_JSON, Ok(b"{\"c\":1}".to_vec()));
        r.insert(field::TOFINO_BINARY, Ok(vec![0, 1, 2]));
        let p = tofino_pipeline("fw", "tofino-1", &r).unwrap();
        assert_eq!((p.context_json.len(), p.binary), (7, vec![0, 1, 2]));

        let gone = "spec.artifacts.tofino.binary: ConfigMap fw-bin not found";
        r.insert(
            field::TOFINO_BINARY,
            Err(artifacts::SourceError::ConfigMapNotFound {
                field: field::TOFINO_BINARY,
                name: "fw-bin".into(),
            }),
        );
        assert_eq!(
            tofino_pipeline("fw", "tofino-1", &r)
                .unwrap_err()
                .to_string(),
            gone
        );
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
