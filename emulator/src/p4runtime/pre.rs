//! The packet replication engine of one device: multicast groups and clone
//! sessions (`PacketReplicationEngineEntry`), written and read as P4Runtime
//! 1.4 says (9.5), with bmv2's v1model limits. Pure logic; the caller holds
//! the device's pipeline lock.

use std::collections::BTreeMap;

use p4fleet_proto::p4runtime::{
    self as p4, packet_replication_engine_entry::Type as Pre, update::Type,
};
use prost::Message;
use tonic::Code;

use crate::p4runtime::entry::canonicalize;
use crate::update_error::{UpdateError, err, hex};

/// Highest port a replica may name: v1model ports are `bit<9>` and bmv2
/// reserves 511 as its drop port.
pub const MAX_PORT: u64 = 510;
/// Highest multicast group id: v1model's `mcast_grp` is `bit<16>`.
pub const MAX_MULTICAST_GROUP: u32 = 0xffff;

/// Multicast groups and clone sessions, by id.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct PreState {
    multicast: BTreeMap<u32, p4::MulticastGroupEntry>,
    clones: BTreeMap<u32, p4::CloneSessionEntry>,
}

/// The port of a replica: the `port` bytes (an unsigned big-endian number)
/// or the deprecated `egress_port` (p4runtime-shell and older clients
/// still send it).
#[allow(deprecated)]
pub fn replica_port(r: &p4::Replica) -> Result<u64, String> {
    use p4::replica::PortKind;
    match &r.port_kind {
        Some(PortKind::EgressPort(p)) => Ok(u64::from(*p)),
        Some(PortKind::Port(bytes)) => {
            let sig: Vec<u8> = bytes.iter().copied().skip_while(|b| *b == 0).collect();
            if bytes.is_empty() || sig.len() > 8 {
                return Err(format!("port 0x{} is not a port number", hex(bytes)));
            }
            Ok(sig.iter().fold(0u64, |n, b| n << 8 | u64::from(*b)))
        }
        None => Err("replica has no port".into()),
    }
}

/// Checks a replica list: ports in range, no (port, instance) twice.
/// Returns the replicas in canonical form (port bytes without padding).
fn check_replicas(
    replicas: &[p4::Replica],
    what: &dyn Fn() -> String,
) -> Result<Vec<p4::Replica>, UpdateError> {
    let mut seen = Vec::with_capacity(replicas.len());
    let mut out = Vec::with_capacity(replicas.len());
    for (i, r) in replicas.iter().enumerate() {
        let port = replica_port(r).map_err(|e| {
            err(
                Code::InvalidArgument,
                format!("{} replica {i}: {e}", what()),
            )
        })?;
        if port > MAX_PORT {
            return Err(err(
                Code::OutOfRange,
                format!(
                    "{} replica {i}: port {port} is out of range (0..={MAX_PORT})",
                    what()
                ),
            ));
        }
        if seen.contains(&(port, r.instance)) {
            return Err(err(
                Code::InvalidArgument,
                format!(
                    "{} replica {i}: port {port} instance {} is listed twice",
                    what(),
                    r.instance
                ),
            ));
        }
        seen.push((port, r.instance));
        let mut r = r.clone();
        if let Some(p4::replica::PortKind::Port(bytes)) = &mut r.port_kind {
            canonicalize(bytes);
        }
        out.push(r);
    }
    Ok(out)
}

/// Applies update `ty` of `id` to `map`; `value()` checks and builds the
/// value to store (not for a delete), before `id` is looked up.
fn upsert<T>(
    map: &mut BTreeMap<u32, T>,
    ty: Type,
    id: u32,
    what: &dyn Fn() -> String,
    value: impl FnOnce() -> Result<T, UpdateError>,
) -> Result<Type, UpdateError> {
    let value = if ty == Type::Delete {
        None
    } else {
        Some(value()?)
    };
    match ty {
        Type::Insert if map.contains_key(&id) => Err(err(
            Code::AlreadyExists,
            format!("{}: already exists", what()),
        )),
        Type::Modify | Type::Delete if !map.contains_key(&id) => {
            Err(err(Code::NotFound, format!("{}: not found", what())))
        }
        Type::Delete => {
            map.remove(&id);
            Ok(ty)
        }
        _ => {
            map.insert(id, value.expect("checked for insert and modify"));
            Ok(ty)
        }
    }
}

impl PreState {
    /// Applies one PacketReplicationEngineEntry update.
    pub fn apply(
        &mut self,
        ty: Type,
        entry: &p4::PacketReplicationEngineEntry,
    ) -> Result<Type, UpdateError> {
        match &entry.r#type {
            Some(Pre::MulticastGroupEntry(g)) => {
                let id = g.multicast_group_id;
                let what = || format!("multicast group {id}");
                if id == 0 || id > MAX_MULTICAST_GROUP {
                    return Err(err(
                        Code::OutOfRange,
                        format!("{}: ids are 1..={MAX_MULTICAST_GROUP}", what()),
                    ));
                }
                upsert(&mut self.multicast, ty, id, &what, || {
                    Ok(p4::MulticastGroupEntry {
                        multicast_group_id: id,
                        replicas: check_replicas(&g.replicas, &what)?,
                    })
                })
            }
            Some(Pre::CloneSessionEntry(c)) => {
                let id = c.session_id;
                let what = || format!("clone session {id}");
                if id == 0 {
                    return Err(err(
                        Code::OutOfRange,
                        format!("{}: session ids start at 1", what()),
                    ));
                }
                upsert(&mut self.clones, ty, id, &what, || {
                    if c.packet_length_bytes < 0 {
                        return Err(err(
                            Code::InvalidArgument,
                            format!(
                                "{}: packet_length_bytes {} is negative",
                                what(),
                                c.packet_length_bytes
                            ),
                        ));
                    }
                    Ok(p4::CloneSessionEntry {
                        replicas: check_replicas(&c.replicas, &what)?,
                        ..c.clone()
                    })
                })
            }
            None => Err(err(
                Code::InvalidArgument,
                "packet replication engine entry has no type",
            )),
        }
    }

    /// Entries matching a read filter (id 0: all of that type; no type:
    /// every group and session), as encoded `Entity`s.
    pub fn read(&self, filter: &p4::PacketReplicationEngineEntry, emit: &mut dyn FnMut(&[u8])) {
        let wrap = |t: Pre| {
            p4::Entity {
                entity: Some(p4::entity::Entity::PacketReplicationEngineEntry(
                    p4::PacketReplicationEngineEntry { r#type: Some(t) },
                )),
            }
            .encode_to_vec()
        };
        let (groups, sessions) = match &filter.r#type {
            Some(Pre::MulticastGroupEntry(g)) => (Some(g.multicast_group_id), None),
            Some(Pre::CloneSessionEntry(c)) => (None, Some(c.session_id)),
            None => (Some(0), Some(0)),
        };
        if let Some(want) = groups {
            for (id, g) in &self.multicast {
                if want == 0 || want == *id {
                    emit(&wrap(Pre::MulticastGroupEntry(g.clone())));
                }
            }
        }
        if let Some(want) = sessions {
            for (id, c) in &self.clones {
                if want == 0 || want == *id {
                    emit(&wrap(Pre::CloneSessionEntry(c.clone())));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn replica(port: u32, instance: u32) -> p4::Replica {
        p4::Replica {
            port_kind: Some(p4::replica::PortKind::Port(port.to_be_bytes().to_vec())),
            instance,
        }
    }

    fn group(id: u32, replicas: Vec<p4::Replica>) -> p4::PacketReplicationEngineEntry {
        p4::PacketReplicationEngineEntry {
            r#type: Some(Pre::MulticastGroupEntry(p4::MulticastGroupEntry {
                multicast_group_id: id,
                replicas,
            })),
        }
    }

    fn session(id: u32, replicas: Vec<p4::Replica>, len: i32) -> p4::PacketReplicationEngineEntry {
        p4::PacketReplicationEngineEntry {
            r#type: Some(Pre::CloneSessionEntry(p4::CloneSessionEntry {
                session_id: id,
                replicas,
                class_of_service: 2,
                packet_length_bytes: len,
            })),
        }
    }

    fn read(pre: &PreState, filter: p4::PacketReplicationEngineEntry) -> Vec<Pre> {
        let mut out = Vec::new();
        pre.read(&filter, &mut |b| {
            let Some(p4::entity::Entity::PacketReplicationEngineEntry(e)) =
                p4::Entity::decode(b).unwrap().entity
            else {
                panic!("a PRE entry")
            };
            out.push(e.r#type.unwrap());
        });
        out
    }

    #[test]
    fn multicast_groups_are_checked_and_read_back_canonical() {
        let mut pre = PreState::default();
        let ok = group(1, vec![replica(1, 0), replica(2, 0), replica(1, 1)]);
        assert_eq!(pre.apply(Type::Insert, &ok), Ok(Type::Insert));
        assert_eq!(
            pre.apply(Type::Insert, &ok).unwrap_err().code,
            Code::AlreadyExists
        );
        for (bad, code) in [
            (group(0, vec![]), Code::OutOfRange),
            (group(0x10000, vec![]), Code::OutOfRange),
            (group(2, vec![replica(511, 0)]), Code::OutOfRange),
            (
                group(2, vec![replica(3, 0), replica(3, 0)]),
                Code::InvalidArgument,
            ),
            (
                group(
                    2,
                    vec![p4::Replica {
                        port_kind: None,
                        instance: 0,
                    }],
                ),
                Code::InvalidArgument,
            ),
        ] {
            assert_eq!(pre.apply(Type::Insert, &bad).unwrap_err().code, code);
        }
        assert_eq!(
            pre.apply(Type::Modify, &group(3, vec![])).unwrap_err().code,
            Code::NotFound
        );
        let got = read(&pre, group(0, vec![]));
        let [Pre::MulticastGroupEntry(g)] = got.as_slice() else {
            panic!("one group: {got:?}")
        };
        assert_eq!(g.replicas.len(), 3);
        // Padding removed, as P4Runtime's canonical form wants.
        assert_eq!(
            g.replicas[1].port_kind,
            Some(p4::replica::PortKind::Port(vec![2]))
        );
        #[allow(deprecated)]
        let legacy = p4::Replica {
            port_kind: Some(p4::replica::PortKind::EgressPort(510)),
            instance: 0,
        };
        assert!(pre.apply(Type::Modify, &group(1, vec![legacy])).is_ok());
        assert_eq!(pre.multicast[&1].replicas.len(), 1);
        assert_eq!(pre.apply(Type::Delete, &group(1, vec![])), Ok(Type::Delete));
        assert!(read(&pre, group(0, vec![])).is_empty());
    }

    #[test]
    fn clone_sessions_keep_their_settings() {
        let mut pre = PreState::default();
        assert!(
            pre.apply(Type::Insert, &session(7, vec![replica(4, 0)], 128))
                .is_ok()
        );
        assert!(
            pre.apply(Type::Insert, &group(7, vec![replica(4, 0)]))
                .is_ok()
        );
        assert_eq!(
            pre.apply(Type::Insert, &session(8, vec![], -1))
                .unwrap_err()
                .code,
            Code::InvalidArgument
        );
        assert_eq!(
            pre.apply(Type::Insert, &session(0, vec![], 0))
                .unwrap_err()
                .code,
            Code::OutOfRange
        );
        let got = read(&pre, session(7, vec![], 0));
        let [Pre::CloneSessionEntry(c)] = got.as_slice() else {
            panic!("one session: {got:?}")
        };
        assert_eq!((c.class_of_service, c.packet_length_bytes), (2, 128));
        // No type: every group and session.
        assert_eq!(
            read(&pre, p4::PacketReplicationEngineEntry { r#type: None }).len(),
            2
        );
        assert_eq!(read(&pre, session(9, vec![], 0)).len(), 0);
    }
}
