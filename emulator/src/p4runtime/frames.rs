//! The L2 frame model of a P4Runtime device: Ethernet frames received on a
//! port are looked up in the installed tables the way an L2 program looks
//! them up, so hits, idle clocks and learning digests come from traffic,
//! not from a test poking at state.
//!
//! A P4Info says which tables exist and what they match on, not which
//! action sends which digest, so the model binds by shape, and only that:
//! - a table keyed by exactly one EXACT 48-bit field whose name ends in
//!   `srcAddr` / `src_addr` is looked up with the frame's source MAC, one
//!   ending in `dstAddr` / `dst_addr` with its destination MAC;
//! - a hit counts the entry's direct counter (if any) and restarts its
//!   idle clock (`super::idle`);
//! - a miss in a source-MAC table runs the table's default action; unless
//!   that is `NoAction`, it sends each digest whose type is a struct of a
//!   48-bit member and a port member (at most 32 bits), filled with the
//!   source MAC and the ingress port (the `mac_learn_digest_t` of the
//!   P4 tutorials and of examples/l2switch).
//!
//! Pure logic; the caller holds the device's pipeline lock.

use std::time::Instant;

use p4fleet_proto::p4runtime as p4;

use crate::key::MatchKind;
use crate::p4runtime::digests::Offer;
use crate::p4runtime::entry::canonical;
use crate::p4runtime::pipeline::Pipeline;
use crate::p4runtime::schema::TableInfo;

/// One Ethernet frame arriving on a port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frame {
    pub ingress_port: u32,
    pub dst: [u8; 6],
    pub src: [u8; 6],
    /// Bytes, for byte counters.
    pub len: u64,
}

/// What a batch of frames did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct FrameReport {
    pub frames: u64,
    /// Table lookups that hit / missed.
    pub hits: u64,
    pub misses: u64,
    /// Digest messages added to a list being built.
    pub digests_queued: u64,
    /// Digest messages dropped: the same data was waiting or outstanding.
    pub digests_duplicate: u64,
    /// Digest messages dropped: the digest has no config.
    pub digests_unconfigured: u64,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Side {
    Src,
    Dst,
}

/// Which MAC a table is keyed by, if it is an L2 table.
fn l2_side(t: &TableInfo) -> Option<Side> {
    let [f] = t.fields.as_slice() else {
        return None;
    };
    if f.kind != MatchKind::Exact || f.bitwidth != 48 {
        return None;
    }
    let name = f.name.rsplit('.').next().unwrap_or(&f.name);
    match name {
        "srcAddr" | "src_addr" => Some(Side::Src),
        "dstAddr" | "dst_addr" => Some(Side::Dst),
        _ => None,
    }
}

fn bits(v: &[u8]) -> p4::P4Data {
    p4::P4Data {
        data: Some(p4::p4_data::Data::Bitstring(canonical(v).to_vec())),
    }
}

impl Pipeline {
    /// Runs `frames` through the L2 tables (see the module docs).
    pub(crate) fn receive_frames(&mut self, frames: &[Frame], now: Instant) -> FrameReport {
        let mut report = FrameReport::default();
        let mut tables: Vec<(u32, Side)> = self
            .schema
            .tables
            .values()
            .filter_map(|t| Some((t.id, l2_side(t)?)))
            .collect();
        tables.sort_unstable_by_key(|(id, _)| *id);
        let learning: Vec<u32> = {
            let mut ids: Vec<u32> = self
                .schema
                .digests
                .values()
                .filter(|d| matches!(d.members.as_slice(), [(_, 48), (_, w)] if *w <= 32))
                .map(|d| d.id)
                .collect();
            ids.sort_unstable();
            ids
        };
        for f in frames {
            report.frames += 1;
            for &(id, side) in &tables {
                let mac = match side {
                    Side::Src => &f.src,
                    Side::Dst => &f.dst,
                };
                let state = self.tables.get_mut(&id).expect("one state per table");
                if state.entries.contains_key(mac.as_slice()) {
                    report.hits += 1;
                    state.idle.hit(mac, now);
                    if let Some(c) = self.resources.direct_counter(id, mac) {
                        c.count(f.len);
                    }
                    continue;
                }
                report.misses += 1;
                if side != Side::Src {
                    continue;
                }
                let default = state.default_action.as_ref().map(|a| a.action_id);
                let no_action = default
                    .and_then(|a| self.schema.actions.get(&a))
                    .is_none_or(|a| a.name == "NoAction");
                if no_action {
                    continue;
                }
                for &d in &learning {
                    let data = p4::P4Data {
                        data: Some(p4::p4_data::Data::Struct(p4::P4StructLike {
                            members: vec![bits(mac), bits(&f.ingress_port.to_be_bytes())],
                        })),
                    };
                    match self.digests.offer(d, &data, now) {
                        Offer::Queued => report.digests_queued += 1,
                        Offer::Duplicate => report.digests_duplicate += 1,
                        Offer::NotConfigured => report.digests_unconfigured += 1,
                    }
                }
            }
        }
        report
    }
}

impl crate::Emulator {
    /// Runs Ethernet frames through a P4Runtime device's L2 tables (the
    /// frame model above): hits count and restart idle clocks, unknown
    /// sources send learning digests, and the device's ticker sends what
    /// becomes due to the primary controller.
    pub fn receive_frames(
        &self,
        device_id: u64,
        frames: &[Frame],
    ) -> Result<FrameReport, crate::EmulatorError> {
        let dev = self.device(device_id)?;
        let report = {
            let mut state = dev.p4runtime.pipeline.lock().expect("pipeline lock");
            let p = state.pipeline.as_mut().ok_or_else(|| {
                crate::update_error::err(tonic::Code::FailedPrecondition, "no pipeline")
            })?;
            p.receive_frames(frames, Instant::now())
        };
        dev.counters
            .frames
            .fetch_add(report.frames, std::sync::atomic::Ordering::Relaxed);
        super::notifier::wake(dev);
        Ok(report)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::p4runtime::schema::Schema;
    use p4fleet_proto::p4runtime::update::Type;

    const L2: &str = include_str!("../../../examples/l2switch/p4info.txt");

    fn pipeline() -> Pipeline {
        let info = p4fleet_proto::p4info::parse_text(L2).unwrap();
        Pipeline::new(
            Schema::from_p4info(&info).unwrap(),
            p4::ForwardingPipelineConfig::default(),
        )
    }

    fn frame(src: u8, port: u32) -> Frame {
        Frame {
            ingress_port: port,
            dst: [2, 0, 0, 0, 0, 0xff],
            src: [2, 0, 0, 0, 0, src],
            len: 64,
        }
    }

    #[test]
    fn unknown_sources_send_learning_digests_once_configured() {
        let mut p = pipeline();
        let now = Instant::now();
        let r = p.receive_frames(&[frame(1, 3)], now);
        assert_eq!((r.misses, r.digests_unconfigured), (2, 1));
        let digest_id = *p.schema.digests.keys().next().unwrap();
        p.digests
            .write(
                Type::Insert,
                p4::DigestEntry {
                    digest_id,
                    config: Some(p4::digest_entry::Config {
                        max_timeout_ns: 0,
                        max_list_size: 10,
                        ack_timeout_ns: 1_000_000_000,
                    }),
                },
            )
            .unwrap();
        let r = p.receive_frames(&[frame(1, 3), frame(1, 3), frame(2, 4)], now);
        assert_eq!((r.digests_queued, r.digests_duplicate), (2, 1));
        let lists = p.digests.due(now, 0);
        assert_eq!(lists.len(), 1);
        let expect = |src: u8, port: u8| p4::P4Data {
            data: Some(p4::p4_data::Data::Struct(p4::P4StructLike {
                members: vec![bits(&[2, 0, 0, 0, 0, src]), bits(&[port])],
            })),
        };
        assert_eq!(lists[0].data, vec![expect(1, 3), expect(2, 4)]);
    }
}
