//! A VirtualSwitch's `spec.multicastGroups` and `spec.cloneSessions` on its
//! device: validated against the program ([`desired`], pure), compared with
//! what the device holds ([`plan`], pure: only the difference is written,
//! inserts and modifies before deletes), then written ([`sync`]).
//!
//! The VirtualSwitch owns every multicast group and clone session of its
//! device id (slot): the pipeline it loads is its own, so whatever else is
//! there is removed. Nothing is written while an item is invalid (the
//! device keeps what it had); what the device refuses is reported per item.

use std::collections::BTreeMap;

use p4fleet_crds::{CloneSession, MulticastGroup, Replica, ReplicationStatus, VirtualSwitchSpec};
use p4fleet_proto::p4info::P4Info;
use p4fleet_proto::p4runtime::{
    self as p4, packet_replication_engine_entry::Type as Pre, replica::PortKind, update::Type,
};

use crate::status::EventNote;

/// Condition type: the device holds exactly the spec's multicast groups
/// and clone sessions.
pub const REPLICATION_SYNCED: &str = "ReplicationSynced";
/// Errors kept in status.
pub const MAX_ERRORS: usize = 10;
/// v1model: ports are `bit<9>` and bmv2 keeps 511 as its drop port.
pub const V1MODEL_MAX_PORT: u32 = 510;

/// An invalid item of the spec, naming its field and item.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}[id={id}]: {reason}")]
pub struct ItemError {
    pub field: &'static str,
    pub id: u32,
    pub reason: String,
}

/// A multicast group or clone session in the form compared with the
/// device's: replicas as sorted (port, instance).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Item {
    Multicast {
        id: u32,
        replicas: Vec<(u32, u32)>,
    },
    Clone {
        id: u32,
        replicas: Vec<(u32, u32)>,
        class_of_service: u32,
        packet_length_bytes: u32,
    },
}

impl Item {
    fn key(&self) -> (u8, u32) {
        match self {
            Item::Multicast { id, .. } => (0, *id),
            Item::Clone { id, .. } => (1, *id),
        }
    }

    fn field(&self) -> &'static str {
        match self.key().0 {
            0 => "spec.multicastGroups",
            _ => "spec.cloneSessions",
        }
    }

    /// The P4Runtime entry (ports as `port` bytes, P4Runtime 1.4).
    pub fn entry(&self) -> p4::PacketReplicationEngineEntry {
        let replicas = |r: &[(u32, u32)]| {
            r.iter()
                .map(|(port, instance)| p4::Replica {
                    port_kind: Some(PortKind::Port(canonical_port(*port))),
                    instance: *instance,
                })
                .collect()
        };
        let t = match self {
            Item::Multicast { id, replicas: r } => {
                Pre::MulticastGroupEntry(p4::MulticastGroupEntry {
                    multicast_group_id: *id,
                    replicas: replicas(r),
                })
            }
            Item::Clone {
                id,
                replicas: r,
                class_of_service,
                packet_length_bytes,
            } => Pre::CloneSessionEntry(p4::CloneSessionEntry {
                session_id: *id,
                replicas: replicas(r),
                class_of_service: *class_of_service,
                packet_length_bytes: *packet_length_bytes as i32,
            }),
        };
        p4::PacketReplicationEngineEntry { r#type: Some(t) }
    }

    /// What the device holds, or None for a replica whose port is not a
    /// number (it then differs from anything desired).
    pub fn from_entry(e: &p4::PacketReplicationEngineEntry) -> Option<Item> {
        let replicas = |r: &[p4::Replica]| -> Option<Vec<(u32, u32)>> {
            let mut out: Vec<_> = r
                .iter()
                .map(|r| Some((port_of(r)?, r.instance)))
                .collect::<Option<_>>()?;
            out.sort_unstable();
            Some(out)
        };
        Some(match e.r#type.as_ref()? {
            Pre::MulticastGroupEntry(g) => Item::Multicast {
                id: g.multicast_group_id,
                replicas: replicas(&g.replicas)?,
            },
            Pre::CloneSessionEntry(c) => Item::Clone {
                id: c.session_id,
                replicas: replicas(&c.replicas)?,
                class_of_service: c.class_of_service,
                packet_length_bytes: u32::try_from(c.packet_length_bytes).ok()?,
            },
        })
    }
}

fn canonical_port(port: u32) -> Vec<u8> {
    let b = port.to_be_bytes();
    let first = b.iter().position(|x| *x != 0).unwrap_or(3);
    b[first..].to_vec()
}

#[allow(deprecated)] // older devices answer with `egress_port`
fn port_of(r: &p4::Replica) -> Option<u32> {
    match r.port_kind.as_ref()? {
        PortKind::EgressPort(p) => Some(*p),
        PortKind::Port(b) if !b.is_empty() && b.len() <= 4 => {
            Some(b.iter().fold(0u32, |n, x| n << 8 | u32::from(*x)))
        }
        PortKind::Port(_) => None,
    }
}

/// The replicas of one item, sorted, or None after reporting why not.
fn check_replicas(
    field: &'static str,
    id: u32,
    r: &[Replica],
    v1model: bool,
    errors: &mut Vec<ItemError>,
) -> Option<Vec<(u32, u32)>> {
    let mut out: Vec<(u32, u32)> = Vec::with_capacity(r.len());
    let before = errors.len();
    for (i, rep) in r.iter().enumerate() {
        let reason = if v1model && rep.port > V1MODEL_MAX_PORT {
            format!(
                "port {} is out of range for v1model (0..={V1MODEL_MAX_PORT})",
                rep.port
            )
        } else if out.contains(&(rep.port, rep.instance)) {
            format!(
                "port {} instance {} is listed twice",
                rep.port, rep.instance
            )
        } else {
            out.push((rep.port, rep.instance));
            continue;
        };
        errors.push(ItemError {
            field,
            id,
            reason: format!("replicas[{i}]: {reason}"),
        });
    }
    out.sort_unstable();
    (errors.len() == before).then_some(out)
}

/// The spec's groups and sessions as items, after checking each against
/// the program's architecture: every invalid item is reported.
pub fn desired(spec: &VirtualSwitchSpec, p4info: &P4Info) -> Result<Vec<Item>, Vec<ItemError>> {
    let v1model = p4info
        .pkg_info
        .as_ref()
        .is_some_and(|p| p.arch == "v1model");
    let mut errors = Vec::new();
    let mut items = Vec::new();
    let mut seen = BTreeMap::new();
    let twice = |field, id| ItemError {
        field,
        id,
        reason: "id is listed twice".into(),
    };
    for MulticastGroup { id, replicas: r } in &spec.multicast_groups {
        let r = check_replicas("spec.multicastGroups", *id, r, v1model, &mut errors);
        if seen.insert((0, *id), ()).is_some() {
            errors.push(twice("spec.multicastGroups", *id));
        } else if let Some(replicas) = r {
            items.push(Item::Multicast { id: *id, replicas });
        }
    }
    for CloneSession {
        id,
        replicas: r,
        class_of_service,
        packet_length_bytes,
    } in &spec.clone_sessions
    {
        let r = check_replicas("spec.cloneSessions", *id, r, v1model, &mut errors);
        if seen.insert((1, *id), ()).is_some() {
            errors.push(twice("spec.cloneSessions", *id));
        } else if let Some(replicas) = r {
            items.push(Item::Clone {
                id: *id,
                replicas,
                class_of_service: *class_of_service,
                packet_length_bytes: *packet_length_bytes,
            });
        }
    }
    if errors.is_empty() {
        items.sort();
        Ok(items)
    } else {
        Err(errors)
    }
}

/// The updates that make the device hold exactly `want`, given that it
/// holds `have`: inserts and modifies first, deletes last (a clone session
/// or group being replaced is never missing in between).
pub fn plan(want: &[Item], have: &[p4::PacketReplicationEngineEntry]) -> Vec<(Type, Item)> {
    let mut held: BTreeMap<(u8, u32), Option<Item>> = BTreeMap::new();
    for e in have {
        let key = match e.r#type.as_ref() {
            Some(Pre::MulticastGroupEntry(g)) => (0, g.multicast_group_id),
            Some(Pre::CloneSessionEntry(c)) => (1, c.session_id),
            None => continue,
        };
        held.insert(key, Item::from_entry(e));
    }
    let mut out = Vec::new();
    for w in want {
        match held.remove(&w.key()) {
            None => out.push((Type::Insert, w.clone())),
            Some(h) if h.as_ref() == Some(w) => {}
            Some(_) => out.push((Type::Modify, w.clone())),
        }
    }
    for ((kind, id), _) in held {
        let item = if kind == 0 {
            Item::Multicast {
                id,
                replicas: vec![],
            }
        } else {
            Item::Clone {
                id,
                replicas: vec![],
                class_of_service: 0,
                packet_length_bytes: 0,
            }
        };
        out.push((Type::Delete, item));
    }
    out
}

/// How a sync ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The spec asks for nothing and the device was not asked (no sync).
    Nothing,
    /// The device holds exactly the spec's items.
    Synced {
        multicast: u32,
        clones: u32,
        written: usize,
    },
    /// Invalid items: nothing written.
    Invalid(Vec<ItemError>),
    /// The device refused some updates (the others were applied).
    Refused {
        multicast: u32,
        clones: u32,
        errors: Vec<String>,
    },
    /// The device could not be read or written.
    Failed(String),
    /// The target has no way to take them (not P4Runtime).
    Unsupported(String),
}

/// Status, condition and Event for an outcome (`None`: leave them as they
/// are, the spec asks for nothing).
pub fn report(
    outcome: &Outcome,
) -> Option<(
    ReplicationStatus,
    p4fleet_crds::Condition,
    Option<EventNote>,
)> {
    use p4fleet_crds::Condition;
    let status = |multicast_groups, clone_sessions, errors: Vec<String>| ReplicationStatus {
        multicast_groups,
        clone_sessions,
        errors: errors.into_iter().take(MAX_ERRORS).collect(),
    };
    Some(match outcome {
        Outcome::Nothing => return None,
        Outcome::Synced {
            multicast,
            clones,
            written,
        } => (
            status(*multicast, *clones, vec![]),
            Condition::new(
                REPLICATION_SYNCED,
                true,
                "Synced",
                format!("{multicast} multicast groups, {clones} clone sessions"),
            ),
            (*written > 0).then(|| {
                EventNote::normal(
                    "ReplicationSynced",
                    "Write",
                    format!(
                        "{written} multicast group/clone session updates; the device holds \
                         {multicast} groups and {clones} sessions"
                    ),
                )
            }),
        ),
        Outcome::Invalid(errors) => {
            let msgs: Vec<String> = errors.iter().map(ToString::to_string).collect();
            let note = format!("nothing written: {}", msgs.join("; "));
            (
                status(0, 0, msgs),
                Condition::new(
                    REPLICATION_SYNCED,
                    false,
                    "InvalidReplication",
                    note.clone(),
                ),
                Some(EventNote::warning("InvalidReplication", "Validate", note)),
            )
        }
        Outcome::Refused {
            multicast,
            clones,
            errors,
        } => {
            let note = errors.join("; ");
            (
                status(*multicast, *clones, errors.clone()),
                Condition::new(
                    REPLICATION_SYNCED,
                    false,
                    "ReplicationRefused",
                    note.clone(),
                ),
                Some(EventNote::warning("ReplicationRefused", "Write", note)),
            )
        }
        Outcome::Failed(e) => (
            status(0, 0, vec![e.clone()]),
            Condition::new(REPLICATION_SYNCED, false, "DeviceError", e.clone()),
            None,
        ),
        Outcome::Unsupported(e) => (
            status(0, 0, vec![e.clone()]),
            Condition::new(REPLICATION_SYNCED, false, "UnsupportedOnTarget", e.clone()),
            Some(EventNote::warning(
                "UnsupportedOnTarget",
                "Validate",
                e.clone(),
            )),
        ),
    })
}

fn count(items: &[Item]) -> (u32, u32) {
    let m = items
        .iter()
        .filter(|i| matches!(i, Item::Multicast { .. }))
        .count() as u32;
    (m, items.len() as u32 - m)
}

/// Reads the device's groups and sessions in `slot`, writes the
/// difference to the spec, and says how that went. `had_any`: the last
/// status reported some (so an emptied spec still deletes them).
pub async fn sync(
    dev: &p4fleet_client::Device,
    slot: u32,
    spec: &VirtualSwitchSpec,
    p4info: &P4Info,
    had_any: bool,
) -> Outcome {
    if spec.multicast_groups.is_empty() && spec.clone_sessions.is_empty() && !had_any {
        return Outcome::Nothing;
    }
    let want = match desired(spec, p4info) {
        Ok(w) => w,
        Err(errors) => return Outcome::Invalid(errors),
    };
    let wildcard = p4::Entity {
        entity: Some(p4::entity::Entity::PacketReplicationEngineEntry(
            p4::PacketReplicationEngineEntry { r#type: None },
        )),
    };
    let have: Vec<_> = match dev.read_entities(slot, vec![wildcard]).await {
        Ok(entities) => entities
            .into_iter()
            .filter_map(|e| match e.entity {
                Some(p4::entity::Entity::PacketReplicationEngineEntry(p)) => Some(p),
                _ => None,
            })
            .collect(),
        Err(e) => return Outcome::Failed(format!("reading the replication entries: {e}")),
    };
    let steps = plan(&want, &have);
    let updates = steps
        .iter()
        .map(|(ty, item)| p4::Update {
            r#type: *ty as i32,
            entity: Some(p4::Entity {
                entity: Some(p4::entity::Entity::PacketReplicationEngineEntry(
                    item.entry(),
                )),
            }),
        })
        .collect();
    let (multicast, clones) = count(&want);
    match dev.write_entities(slot, updates).await {
        Ok(errors) if errors.is_empty() => Outcome::Synced {
            multicast,
            clones,
            written: steps.len(),
        },
        Ok(errors) => {
            let refused: Vec<&Item> = errors.iter().map(|(i, _, _)| &steps[*i].1).collect();
            let ok = want.iter().filter(|w| !refused.contains(w));
            let (multicast, clones) = count(&ok.cloned().collect::<Vec<_>>());
            Outcome::Refused {
                multicast,
                clones,
                errors: errors
                    .iter()
                    .map(|(i, code, msg)| {
                        let (ty, item) = &steps[*i];
                        format!(
                            "{}[id={}]: {ty:?} refused by the device (code {code}): {msg}",
                            item.field(),
                            item.key().1
                        )
                    })
                    .collect(),
            }
        }
        Err(e) => Outcome::Failed(format!("writing the replication entries: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FABRIC: &str = include_str!("../../../../examples/fabric/p4info.txt");

    fn spec(v: serde_json::Value) -> VirtualSwitchSpec {
        let mut base = serde_json::json!({"programRef": "p", "switchRef": "s"});
        base.as_object_mut()
            .unwrap()
            .extend(v.as_object().unwrap().clone());
        serde_json::from_value(base).unwrap()
    }

    fn info() -> P4Info {
        p4fleet_proto::p4info::parse_text(FABRIC).unwrap()
    }

    #[test]
    fn desired_sorts_replicas_and_reports_every_bad_item() {
        let s = spec(serde_json::json!({
            "multicastGroups": [{"id": 1, "replicas": [{"port": 3}, {"port": 1}, {"port": 1, "instance": 1}]}],
            "cloneSessions": [{"id": 5, "replicas": [{"port": 7}], "classOfService": 1, "packetLengthBytes": 128}]
        }));
        let items = desired(&s, &info()).unwrap();
        assert_eq!(
            items,
            [
                Item::Multicast {
                    id: 1,
                    replicas: vec![(1, 0), (1, 1), (3, 0)]
                },
                Item::Clone {
                    id: 5,
                    replicas: vec![(7, 0)],
                    class_of_service: 1,
                    packet_length_bytes: 128
                }
            ]
        );
        let bad = spec(serde_json::json!({
            "multicastGroups": [{"id": 2, "replicas": [{"port": 600}, {"port": 4}, {"port": 4}]},
                                {"id": 3, "replicas": [{"port": 1}]}],
            "cloneSessions": [{"id": 5, "replicas": [{"port": 511}]}]
        }));
        let errors = desired(&bad, &info()).unwrap_err();
        assert_eq!(errors.len(), 3, "{errors:?}");
        assert_eq!(
            errors[0].to_string(),
            "spec.multicastGroups[id=2]: replicas[0]: port 600 is out of range for v1model (0..=510)"
        );
        assert!(errors[1].reason.contains("listed twice"));
        assert_eq!(errors[2].field, "spec.cloneSessions");
        // Another architecture: the device decides on ports.
        let mut other = info();
        other.pkg_info.as_mut().unwrap().arch = "psa".into();
        let psa =
            spec(serde_json::json!({"multicastGroups": [{"id": 2, "replicas": [{"port": 600}]}]}));
        assert!(desired(&psa, &other).is_ok());
    }

    #[test]
    fn plan_writes_only_the_difference_deletes_last() {
        let want = desired(
            &spec(serde_json::json!({
                "multicastGroups": [{"id": 1, "replicas": [{"port": 1}, {"port": 2}]},
                                    {"id": 2, "replicas": [{"port": 3}]}],
                "cloneSessions": [{"id": 5, "replicas": [{"port": 7}]}]
            })),
            &info(),
        )
        .unwrap();
        // The device: group 1 as wanted (other order, legacy port field),
        // group 2 different, group 9 extra, session 5 missing.
        #[allow(deprecated)]
        let legacy = |p| p4::Replica {
            port_kind: Some(PortKind::EgressPort(p)),
            instance: 0,
        };
        let group = |id, replicas| p4::PacketReplicationEngineEntry {
            r#type: Some(Pre::MulticastGroupEntry(p4::MulticastGroupEntry {
                multicast_group_id: id,
                replicas,
            })),
        };
        let have = vec![
            group(1, vec![legacy(2), legacy(1)]),
            group(2, vec![legacy(4)]),
            group(9, vec![]),
        ];
        let steps: Vec<(Type, (u8, u32))> = plan(&want, &have)
            .into_iter()
            .map(|(t, i)| (t, i.key()))
            .collect();
        assert_eq!(
            steps,
            [
                (Type::Modify, (0, 2)),
                (Type::Insert, (1, 5)),
                (Type::Delete, (0, 9))
            ]
        );
        // In sync: nothing to write; entries round-trip.
        let have: Vec<_> = want.iter().map(Item::entry).collect();
        assert!(plan(&want, &have).is_empty());
        assert_eq!(Item::from_entry(&have[0]).as_ref(), Some(&want[0]));
    }

    #[test]
    fn reports_say_what_the_device_holds() {
        assert!(report(&Outcome::Nothing).is_none());
        let (st, cond, ev) = report(&Outcome::Synced {
            multicast: 2,
            clones: 1,
            written: 0,
        })
        .unwrap();
        assert_eq!((st.multicast_groups, st.clone_sessions), (2, 1));
        assert!(cond.is_true() && ev.is_none());
        let invalid = Outcome::Invalid(vec![ItemError {
            field: "spec.cloneSessions",
            id: 3,
            reason: "x".into(),
        }]);
        let (st, cond, ev) = report(&invalid).unwrap();
        assert_eq!(st.errors, ["spec.cloneSessions[id=3]: x"]);
        assert_eq!(cond.reason, "InvalidReplication");
        assert!(ev.unwrap().warning);
    }
}
