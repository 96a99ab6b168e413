//! Packet replication a VirtualSwitch asks of its device: multicast groups
//! (`spec.multicastGroups`) and clone sessions (`spec.cloneSessions`),
//! written as P4Runtime `PacketReplicationEngineEntry`s next to the
//! program. See docs/entities/replication.md.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// One copy of a packet: the egress port and the copy's instance number
/// (`standard_metadata.egress_rid` in v1model).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Replica {
    /// Device port (as P4Runtime numbers it) the copy leaves on.
    #[schemars(range(min = 0, max = 65535))]
    pub port: u32,
    /// Instance id of the copy; two copies to one port differ in it.
    #[serde(default)]
    #[schemars(range(min = 0, max = 65535))]
    pub instance: u32,
}

/// A multicast group: the copies made of a packet whose program sets
/// `standard_metadata.mcast_grp` to `id`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MulticastGroup {
    /// Group id the program names (v1model: `bit<16>`, 0 is "no group").
    #[schemars(range(min = 1, max = 65535))]
    pub id: u32,
    /// The copies, in any order.
    #[serde(default)]
    #[schemars(length(max = 512))]
    pub replicas: Vec<Replica>,
}

/// A clone (mirror) session: where copies made by `clone(..., id)` go.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CloneSession {
    /// Session id the program names.
    #[schemars(range(min = 1))]
    pub id: u32,
    /// The copies, in any order.
    #[serde(default)]
    #[schemars(length(max = 512))]
    pub replicas: Vec<Replica>,
    /// Class of service (queue) of the copies.
    #[serde(default)]
    pub class_of_service: u32,
    /// Truncate copies to this many bytes (0: whole packets).
    #[serde(default)]
    #[schemars(range(min = 0, max = 65535))]
    pub packet_length_bytes: u32,
}

/// What the device confirmed of `multicastGroups` and `cloneSessions`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReplicationStatus {
    /// Multicast groups the device holds as specified.
    pub multicast_groups: u32,
    /// Clone sessions the device holds as specified.
    pub clone_sessions: u32,
    /// Why items were not written (at most 10), each naming its field and item.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<String>,
}
