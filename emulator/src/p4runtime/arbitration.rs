//! P4Runtime arbitration per (device, role): the stream with the highest
//! election id is the primary; everyone is told on each change
//! ([`Arbitration`], pure state: the caller holds the device's arbitration
//! lock). [`check_primary`] is the rule every write-like call applies.
//!
//! Two rules for "highest" ([`ArbitrationMode`]): the highest id among the
//! open streams (lenient, the default), or the spec's rule: the primary is
//! the stream holding the highest id the device has *ever* seen for the
//! role, so after the primary goes away a controller with a lower id stays
//! a backup (the spec's wording; bmv2's PI server uses the first rule,
//! and we have not checked Stratum). The second is what fences a stale
//! leader, so the failover tests run with it.

use std::collections::HashMap;

use p4fleet_proto::p4runtime as p4;
use p4fleet_proto::rpc;
use tokio::sync::mpsc::UnboundedSender;
use tonic::{Code, Status};

use crate::device::Device;

pub(crate) type StreamTx = UnboundedSender<Result<p4::StreamMessageResponse, Status>>;

struct StreamSlot {
    stream_id: u64,
    election_id: Option<u128>,
    role: Option<p4::Role>,
    tx: StreamTx,
}

/// Which stream may be primary.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ArbitrationMode {
    /// The open stream with the highest election id.
    #[default]
    HighestLive,
    /// Only a stream holding the highest election id ever seen for the
    /// role (P4Runtime spec, "Mastership arbitration"): no primary while
    /// that controller is away.
    HighestEverSeen,
}

#[derive(Default)]
struct RoleState {
    streams: Vec<StreamSlot>,
    primary: Option<u64>,
    highest: Option<u128>,
}

impl RoleState {
    fn elect(&self, mode: ArbitrationMode) -> Option<u64> {
        let live = self
            .streams
            .iter()
            .filter(|s| s.election_id.is_some())
            .max_by_key(|s| s.election_id)?;
        match mode {
            ArbitrationMode::HighestLive => Some(live.stream_id),
            ArbitrationMode::HighestEverSeen => {
                (live.election_id >= self.highest).then_some(live.stream_id)
            }
        }
    }

    fn primary_election(&self) -> Option<u128> {
        let p = self.primary?;
        self.streams
            .iter()
            .find(|s| s.stream_id == p)
            .and_then(|s| s.election_id)
    }

    fn notify(&self, device_id: u64, only: Option<u64>) {
        let primary_eid = self.primary_election();
        let shown = primary_eid.or(self.highest);
        for s in &self.streams {
            if only.is_some_and(|o| o != s.stream_id) {
                continue;
            }
            let status = if Some(s.stream_id) == self.primary {
                rpc::Status {
                    code: Code::Ok as i32,
                    message: "you are the primary".into(),
                    details: vec![],
                }
            } else if self.primary.is_some() {
                rpc::Status {
                    code: Code::AlreadyExists as i32,
                    message: "a primary exists; you are a backup".into(),
                    details: vec![],
                }
            } else {
                rpc::Status {
                    code: Code::NotFound as i32,
                    message: "there is no primary".into(),
                    details: vec![],
                }
            };
            let msg = p4::StreamMessageResponse {
                update: Some(p4::stream_message_response::Update::Arbitration(
                    p4::MasterArbitrationUpdate {
                        device_id,
                        role: s.role.clone(),
                        election_id: shown.map(to_uint128),
                        status: Some(status),
                    },
                )),
            };
            // A closed receiver means the stream is going away; its removal
            // follows.
            let _ = s.tx.send(Ok(msg));
        }
    }
}

pub fn to_uint128(v: u128) -> p4::Uint128 {
    p4::Uint128 {
        high: (v >> 64) as u64,
        low: v as u64,
    }
}

pub fn from_uint128(v: &p4::Uint128) -> u128 {
    ((v.high as u128) << 64) | v.low as u128
}

/// Primary election per role (role name "" is the default role).
#[derive(Default)]
pub(crate) struct Arbitration {
    roles: HashMap<String, RoleState>,
    mode: ArbitrationMode,
}

impl Arbitration {
    pub fn with_mode(mode: ArbitrationMode) -> Self {
        Arbitration {
            roles: HashMap::new(),
            mode,
        }
    }

    /// Handles a MasterArbitrationUpdate from stream `stream_id`.
    pub fn arbitrate(
        &mut self,
        device_id: u64,
        stream_id: u64,
        role: Option<p4::Role>,
        election_id: Option<u128>,
        tx: &StreamTx,
    ) -> Result<(), Status> {
        let name = role.as_ref().map(|r| r.name.clone()).unwrap_or_default();
        let rs = self.roles.entry(name).or_default();
        if let Some(eid) = election_id
            && rs
                .streams
                .iter()
                .any(|s| s.stream_id != stream_id && s.election_id == Some(eid))
        {
            return Err(Status::invalid_argument(
                "election id already used by another controller of this role",
            ));
        }
        match rs.streams.iter_mut().find(|s| s.stream_id == stream_id) {
            Some(s) => {
                s.election_id = election_id;
                s.role = role;
            }
            None => rs.streams.push(StreamSlot {
                stream_id,
                election_id,
                role,
                tx: tx.clone(),
            }),
        }
        if election_id > rs.highest {
            rs.highest = election_id;
        }
        let elected = rs.elect(self.mode);
        if elected != rs.primary {
            rs.primary = elected;
            rs.notify(device_id, None);
        } else {
            rs.notify(device_id, Some(stream_id));
        }
        Ok(())
    }

    /// Forgets a closed stream; elects a new primary if it was the primary.
    pub fn remove(&mut self, device_id: u64, role: &str, stream_id: u64) {
        let Some(rs) = self.roles.get_mut(role) else {
            return;
        };
        rs.streams.retain(|s| s.stream_id != stream_id);
        let elected = rs.elect(self.mode);
        if elected != rs.primary {
            rs.primary = elected;
            rs.notify(device_id, None);
        }
    }

    /// The primary's election id for `role`, if there is a primary.
    pub fn primary_election(&self, role: &str) -> Option<u128> {
        self.roles.get(role).and_then(|r| r.primary_election())
    }

    /// The primary's stream of `role`, where the device's own messages
    /// (digest lists, idle timeout notifications) go.
    pub fn primary_tx(&self, role: &str) -> Option<StreamTx> {
        let rs = self.roles.get(role)?;
        let p = rs.primary?;
        rs.streams
            .iter()
            .find(|s| s.stream_id == p)
            .map(|s| s.tx.clone())
    }

    pub fn primaries(&self) -> HashMap<String, String> {
        self.roles
            .iter()
            .filter_map(|(k, r)| r.primary_election().map(|e| (k.clone(), e.to_string())))
            .collect()
    }
}

/// Write, bulk write and SetForwardingPipelineConfig need the primary's
/// election id for the role: PERMISSION_DENIED otherwise.
pub(crate) fn check_primary(
    dev: &Device,
    role: &str,
    election_id: Option<u128>,
) -> Result<(), Status> {
    let primary = dev
        .p4runtime
        .arbitration
        .lock()
        .expect("arbitration lock")
        .primary_election(role);
    let refused = |status| {
        dev.counters
            .refused_writes
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Err(status)
    };
    match (primary, election_id) {
        (Some(p), Some(e)) if p == e => Ok(()),
        (None, _) => refused(Status::permission_denied(format!(
            "no primary controller for role {role:?} of device {}",
            dev.id
        ))),
        _ => refused(Status::permission_denied(
            "election id is not the primary's",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::sync::mpsc::unbounded_channel;

    /// Arbitrates `(stream, id)` pairs in order; returns the primary's id.
    fn run(mode: ArbitrationMode, steps: &[(u64, Option<u128>)], closed: &[u64]) -> Option<u128> {
        let mut a = Arbitration::with_mode(mode);
        let (tx, _rx) = unbounded_channel();
        for &(stream, id) in steps {
            a.arbitrate(1, stream, None, id, &tx).unwrap();
        }
        for &stream in closed {
            a.remove(1, "", stream);
        }
        a.primary_election("")
    }

    #[test]
    fn the_highest_open_stream_is_primary_in_both_modes() {
        for mode in [
            ArbitrationMode::HighestLive,
            ArbitrationMode::HighestEverSeen,
        ] {
            assert_eq!(run(mode, &[(1, Some(5)), (2, Some(9))], &[]), Some(9));
            assert_eq!(run(mode, &[(1, Some(9)), (2, Some(5))], &[]), Some(9));
        }
    }

    #[test]
    fn a_lower_id_stays_backup_after_the_highest_leaves_only_in_spec_mode() {
        let steps = [(1, Some(5)), (2, Some(9))];
        assert_eq!(run(ArbitrationMode::HighestLive, &steps, &[2]), Some(5));
        assert_eq!(run(ArbitrationMode::HighestEverSeen, &steps, &[2]), None);
        // A controller that comes back with the highest id (or higher) is primary again.
        let back = [(1, Some(5)), (2, Some(9)), (3, Some(10))];
        assert_eq!(run(ArbitrationMode::HighestEverSeen, &back, &[2]), Some(10));
    }

    #[test]
    fn a_newer_process_with_a_lower_id_never_becomes_primary_in_spec_mode() {
        // The start-time bug: the new leader started before the old one.
        let steps = [(1, Some(200)), (2, Some(100))];
        assert_eq!(run(ArbitrationMode::HighestEverSeen, &steps, &[1]), None);
    }
}
