//! Digests (P4Runtime `DigestEntry`, `DigestList`, `DigestListAck`): the
//! P4Info's digests, each one's config as the controller wrote it, and
//! the lists the device builds from what its data plane sends
//! (`super::frames`). Pure logic over an `Instant` the caller passes in;
//! the device's ticker (`super::notifier`) delivers the lists.
//!
//! Semantics (P4Runtime spec, "DigestEntry"):
//! - Nothing is collected for a digest without a config (no DigestEntry).
//! - A list is sent when it holds `max_list_size` messages (0: no size
//!   bound) or when its first message is `max_timeout_ns` old (0: at once).
//! - A sent list is outstanding until the controller acks it or
//!   `ack_timeout_ns` passes; while outstanding, the same digest data is
//!   not sent again (nor while it waits in the list being built). That is
//!   what keeps a learning digest for one unknown MAC from flooding the
//!   controller at line rate.

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::{Duration, Instant};

use p4fleet_proto::p4info::{self, P4Info};
use p4fleet_proto::p4runtime::{self as p4, digest_entry::Config, update::Type};
use prost::Message;
use tonic::Code;

use crate::key::IdMap;
use crate::update_error::{UpdateError, err};

/// One digest of the P4Info.
#[derive(Debug, Clone, PartialEq)]
pub struct DigestInfo {
    pub id: u32,
    pub name: String,
    /// Bit widths of the members when the digest is a struct of
    /// bitstrings (what the frame model can fill), in order.
    pub members: Vec<(String, u32)>,
}

/// The P4Info's digests by id.
pub(crate) fn digests_from_p4info(info: &P4Info) -> IdMap<DigestInfo> {
    let structs = info.type_info.as_ref().map(|t| &t.structs);
    info.digests
        .iter()
        .filter_map(|d| {
            let pre = d.preamble.as_ref()?;
            let members = struct_members(d, structs).unwrap_or_default();
            Some((
                pre.id,
                DigestInfo {
                    id: pre.id,
                    name: pre.name.clone(),
                    members,
                },
            ))
        })
        .collect()
}

fn struct_members(
    d: &p4info::Digest,
    structs: Option<&HashMap<String, p4fleet_proto::p4info::P4StructTypeSpec>>,
) -> Option<Vec<(String, u32)>> {
    use p4fleet_proto::p4info::{p4_bitstring_like_type_spec, p4_data_type_spec};
    let Some(p4_data_type_spec::TypeSpec::Struct(s)) = d.type_spec.as_ref()?.type_spec.as_ref()
    else {
        return None;
    };
    structs?
        .get(&s.name)?
        .members
        .iter()
        .map(|m| {
            let Some(p4_data_type_spec::TypeSpec::Bitstring(b)) =
                m.type_spec.as_ref()?.type_spec.as_ref()
            else {
                return None;
            };
            match b.type_spec.as_ref()? {
                p4_bitstring_like_type_spec::TypeSpec::Bit(w) => {
                    Some((m.name.clone(), w.bitwidth as u32))
                }
                _ => None,
            }
        })
        .collect()
}

/// A list sent and not yet acked.
#[derive(Debug)]
struct Outstanding {
    list_id: u64,
    sent: Instant,
    data: Vec<Vec<u8>>,
}

/// One digest's config and lists.
#[derive(Debug, Default)]
struct DigestState {
    config: Option<Config>,
    /// The list being built: encoded `P4Data`s, and when its first came.
    building: Vec<Vec<u8>>,
    first_at: Option<Instant>,
    outstanding: VecDeque<Outstanding>,
    /// Encoded data in `building` or in an outstanding list.
    held: HashSet<Vec<u8>>,
    next_list_id: u64,
}

/// What happened to one digest message offered by the data plane.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Offer {
    /// Added to the list being built.
    Queued,
    /// The same data is waiting or outstanding: dropped.
    Duplicate,
    /// The digest has no config: dropped.
    NotConfigured,
}

/// Every digest of one pipeline.
#[derive(Debug, Default)]
pub(crate) struct Digests {
    states: IdMap<DigestState>,
}

fn ns(v: i64) -> Duration {
    Duration::from_nanos(v.max(0) as u64)
}

impl Digests {
    pub fn new(schema: &IdMap<DigestInfo>) -> Digests {
        Digests {
            states: schema
                .keys()
                .map(|id| {
                    (
                        *id,
                        DigestState {
                            next_list_id: 1,
                            ..Default::default()
                        },
                    )
                })
                .collect(),
        }
    }

    /// INSERT, MODIFY or DELETE of one `DigestEntry`.
    pub fn write(&mut self, ty: Type, e: p4::DigestEntry) -> Result<(), UpdateError> {
        let Some(s) = self.states.get_mut(&e.digest_id) else {
            return Err(err(
                Code::NotFound,
                format!("unknown digest id {}", e.digest_id),
            ));
        };
        if ty != Type::Delete {
            let c = e
                .config
                .as_ref()
                .ok_or_else(|| err(Code::InvalidArgument, "DigestEntry has no config"))?;
            if c.max_timeout_ns < 0 || c.ack_timeout_ns < 0 || c.max_list_size < 0 {
                return Err(err(
                    Code::InvalidArgument,
                    format!(
                        "digest {}: max_timeout_ns, ack_timeout_ns and max_list_size must not be negative",
                        e.digest_id
                    ),
                ));
            }
        }
        match (ty, s.config.is_some()) {
            (Type::Insert, true) => Err(err(
                Code::AlreadyExists,
                format!("digest {} is already configured", e.digest_id),
            )),
            (Type::Modify | Type::Delete, false) => Err(err(
                Code::NotFound,
                format!("digest {} is not configured", e.digest_id),
            )),
            (Type::Delete, true) => {
                // Pending and outstanding data go with the config.
                *s = DigestState {
                    next_list_id: s.next_list_id,
                    ..Default::default()
                };
                Ok(())
            }
            _ => {
                s.config = e.config;
                Ok(())
            }
        }
    }

    /// The configured digests matching a read filter (digest id 0: all).
    pub fn read(&self, digest_id: u32) -> Result<Vec<p4::DigestEntry>, UpdateError> {
        if digest_id != 0 && !self.states.contains_key(&digest_id) {
            return Err(err(
                Code::NotFound,
                format!("unknown digest id {digest_id}"),
            ));
        }
        let mut out: Vec<p4::DigestEntry> = self
            .states
            .iter()
            .filter(|(id, s)| (digest_id == 0 || **id == digest_id) && s.config.is_some())
            .map(|(id, s)| p4::DigestEntry {
                digest_id: *id,
                config: s.config,
            })
            .collect();
        out.sort_by_key(|e| e.digest_id);
        Ok(out)
    }

    /// One digest message from the data plane.
    pub fn offer(&mut self, digest_id: u32, data: &p4::P4Data, now: Instant) -> Offer {
        let Some(s) = self.states.get_mut(&digest_id) else {
            return Offer::NotConfigured;
        };
        if s.config.is_none() {
            return Offer::NotConfigured;
        }
        let bytes = data.encode_to_vec();
        if !s.held.insert(bytes.clone()) {
            return Offer::Duplicate;
        }
        s.building.push(bytes);
        s.first_at.get_or_insert(now);
        Offer::Queued
    }

    /// Lists due at `now` (full or old enough), in digest id order, and
    /// outstanding lists whose ack timeout passed released (their data may
    /// be sent again).
    pub fn due(&mut self, now: Instant, timestamp_ns: i64) -> Vec<p4::DigestList> {
        let mut ids: Vec<u32> = self.states.keys().copied().collect();
        ids.sort_unstable();
        let mut out = Vec::new();
        for id in ids {
            let s = self.states.get_mut(&id).expect("listed");
            let Some(c) = s.config else { continue };
            while s
                .outstanding
                .front()
                .is_some_and(|o| now.duration_since(o.sent) >= ns(c.ack_timeout_ns))
            {
                let o = s.outstanding.pop_front().expect("checked");
                for d in o.data {
                    s.held.remove(&d);
                }
            }
            let max = c.max_list_size.max(0) as usize;
            // A list is cut at max_list_size; what remains waits for its own
            // size or time.
            while !s.building.is_empty() {
                let full = max > 0 && s.building.len() >= max;
                let old = s
                    .first_at
                    .is_some_and(|t| now.duration_since(t) >= ns(c.max_timeout_ns));
                if !full && !old {
                    break;
                }
                let n = if max > 0 {
                    max.min(s.building.len())
                } else {
                    s.building.len()
                };
                let data: Vec<Vec<u8>> = s.building.drain(..n).collect();
                if s.building.is_empty() {
                    s.first_at = None;
                }
                let list_id = s.next_list_id;
                s.next_list_id += 1;
                out.push(p4::DigestList {
                    digest_id: id,
                    list_id,
                    data: data
                        .iter()
                        .map(|d| p4::P4Data::decode(d.as_slice()).expect("encoded here"))
                        .collect(),
                    timestamp: timestamp_ns,
                });
                s.outstanding.push_back(Outstanding {
                    list_id,
                    sent: now,
                    data,
                });
            }
        }
        out
    }

    /// A controller's `DigestListAck`: the list's data may be sent again.
    /// False when no such list is outstanding (acked already, timed out,
    /// or never sent).
    pub fn ack(&mut self, digest_id: u32, list_id: u64) -> bool {
        let Some(s) = self.states.get_mut(&digest_id) else {
            return false;
        };
        let Some(i) = s.outstanding.iter().position(|o| o.list_id == list_id) else {
            return false;
        };
        let o = s.outstanding.remove(i).expect("found");
        for d in o.data {
            s.held.remove(&d);
        }
        true
    }

    /// When [`Digests::due`] has something to do next, if ever.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.states
            .values()
            .filter_map(|s| {
                let c = s.config?;
                let build = s.first_at.map(|t| t + ns(c.max_timeout_ns));
                let ack = s.outstanding.front().map(|o| o.sent + ns(c.ack_timeout_ns));
                build.into_iter().chain(ack).min()
            })
            .min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn digests() -> Digests {
        let mut schema = IdMap::default();
        schema.insert(
            7,
            DigestInfo {
                id: 7,
                name: "d".into(),
                members: vec![("a".into(), 8)],
            },
        );
        Digests::new(&schema)
    }

    fn entry(max_timeout_ns: i64, max_list_size: i32, ack_timeout_ns: i64) -> p4::DigestEntry {
        p4::DigestEntry {
            digest_id: 7,
            config: Some(Config {
                max_timeout_ns,
                max_list_size,
                ack_timeout_ns,
            }),
        }
    }

    /// Digests with digest 7 configured by `entry(..)`, and the time now.
    fn configured(
        max_timeout_ns: i64,
        max_list_size: i32,
        ack_timeout_ns: i64,
    ) -> (Digests, Instant) {
        let mut d = digests();
        d.write(
            Type::Insert,
            entry(max_timeout_ns, max_list_size, ack_timeout_ns),
        )
        .unwrap();
        (d, Instant::now())
    }

    fn data(v: u8) -> p4::P4Data {
        p4::P4Data {
            data: Some(p4::p4_data::Data::Bitstring(vec![v])),
        }
    }

    fn values(l: &p4::DigestList) -> Vec<u8> {
        l.data
            .iter()
            .map(|d| match &d.data {
                Some(p4::p4_data::Data::Bitstring(b)) => b[0],
                _ => panic!("not a bitstring"),
            })
            .collect()
    }

    #[test]
    fn config_writes_follow_insert_modify_delete_rules() {
        let mut d = digests();
        let code = |r: Result<(), UpdateError>| r.unwrap_err().code;
        assert_eq!(code(d.write(Type::Modify, entry(0, 1, 0))), Code::NotFound);
        assert_eq!(code(d.write(Type::Delete, entry(0, 1, 0))), Code::NotFound);
        d.write(Type::Insert, entry(0, 1, 0)).unwrap();
        assert_eq!(
            code(d.write(Type::Insert, entry(0, 1, 0))),
            Code::AlreadyExists
        );
        d.write(Type::Modify, entry(5, 2, 3)).unwrap();
        assert_eq!(d.read(0).unwrap(), vec![entry(5, 2, 3)]);
        assert_eq!(
            code(d.write(Type::Modify, entry(-1, 2, 3))),
            Code::InvalidArgument
        );
        let mut unknown = entry(0, 1, 0);
        unknown.digest_id = 8;
        assert_eq!(code(d.write(Type::Insert, unknown)), Code::NotFound);
        assert_eq!(d.read(8).unwrap_err().code, Code::NotFound);
        d.write(Type::Delete, entry(0, 0, 0)).unwrap();
        assert!(d.read(7).unwrap().is_empty());
    }

    #[test]
    fn nothing_is_collected_without_a_config() {
        let mut d = digests();
        let now = Instant::now();
        assert_eq!(d.offer(7, &data(1), now), Offer::NotConfigured);
        assert!(d.due(now + Duration::from_secs(1), 0).is_empty());
    }

    #[test]
    fn lists_are_cut_at_max_list_size_and_sent_when_full() {
        // A long timeout: only size sends a list.
        let (mut d, t0) = configured(1_000_000_000_000, 2, 1_000_000_000_000);
        for v in 1..=5 {
            assert_eq!(d.offer(7, &data(v), t0), Offer::Queued);
        }
        let lists = d.due(t0, 42);
        assert_eq!(lists.len(), 2);
        assert_eq!(values(&lists[0]), [1, 2]);
        assert_eq!(values(&lists[1]), [3, 4]);
        assert_eq!((lists[0].list_id, lists[1].list_id), (1, 2));
        assert_eq!(lists[0].timestamp, 42);
        // The fifth waits for a sixth or for its timeout.
        assert!(d.due(t0, 0).is_empty());
        let later = d.due(t0 + Duration::from_secs(1000), 0);
        assert_eq!(values(&later[0]), [5]);
    }

    #[test]
    fn a_list_is_sent_when_its_first_message_is_max_timeout_old() {
        let (mut d, t0) = configured(1_000_000, 0, 1_000_000_000);
        d.offer(7, &data(1), t0);
        d.offer(7, &data(2), t0 + Duration::from_micros(500));
        assert!(d.due(t0 + Duration::from_micros(999), 0).is_empty());
        assert_eq!(d.next_deadline(), Some(t0 + Duration::from_millis(1)));
        let lists = d.due(t0 + Duration::from_millis(1), 0);
        assert_eq!(values(&lists[0]), [1, 2]);
    }

    #[test]
    fn the_same_data_is_not_sent_again_until_acked_or_ack_timeout() {
        let (mut d, t0) = configured(0, 1, 1_000_000);
        d.offer(7, &data(1), t0);
        // Waiting in the list: a second copy is dropped.
        assert_eq!(d.offer(7, &data(1), t0), Offer::Duplicate);
        let first = d.due(t0, 0);
        assert_eq!(first.len(), 1);
        // Outstanding: still dropped.
        assert_eq!(d.offer(7, &data(1), t0), Offer::Duplicate);
        assert_eq!(d.offer(7, &data(2), t0), Offer::Queued);
        d.due(t0, 0);
        // Acked: may be sent again; a second ack of it is refused.
        assert!(d.ack(7, first[0].list_id));
        assert!(!d.ack(7, first[0].list_id));
        assert_eq!(d.offer(7, &data(1), t0), Offer::Queued);
        // Not acked: released when the ack timeout passes.
        assert_eq!(d.offer(7, &data(2), t0), Offer::Duplicate);
        d.due(t0 + Duration::from_millis(1), 0);
        assert_eq!(
            d.offer(7, &data(2), t0 + Duration::from_millis(1)),
            Offer::Queued
        );
    }
}
