//! VirtualSwitch: a program instance placed on a slot of a Switch, like a Pod on a Node.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::common::{Condition, Selector, conditions_schema};
use crate::replication::{CloneSession, MulticastGroup, ReplicationStatus};

/// One instance of a P4Program running in a slot of a Switch.
#[serde_with::skip_serializing_none]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "p4fleet.dev",
    version = "v1alpha1",
    kind = "VirtualSwitch",
    doc = "One instance of a P4Program running in a slot of a Switch (chosen by name or selector); p4fleet loads the pipeline and reports where it runs.",
    plural = "virtualswitches",
    shortname = "vsw",
    namespaced,
    status = "VirtualSwitchStatus",
    category = "p4fleet",
    printcolumn = r#"{"name":"Program","type":"string","jsonPath":".spec.programRef"}"#,
    printcolumn = r#"{"name":"Switch","type":"string","jsonPath":".status.switch"}"#,
    printcolumn = r#"{"name":"Slot","type":"integer","jsonPath":".status.slot"}"#,
    printcolumn = r#"{"name":"Pipeline","type":"string","jsonPath":".status.loadedShortDigest"}"#,
    printcolumn = r#"{"name":"Last Swap","type":"date","jsonPath":".status.lastSwap.at"}"#,
    printcolumn = r#"{"name":"Mcast","type":"integer","jsonPath":".status.replication.multicastGroups","priority":1}"#,
    printcolumn = r#"{"name":"Clones","type":"integer","jsonPath":".status.replication.cloneSessions","priority":1}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Reason","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].reason","priority":1}"#,
    printcolumn = r#"{"name":"Message","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].message","priority":1}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "has(self.switchRef) != has(self.switchSelector)",
     "message": "exactly one of switchRef or switchSelector must be set"},
    {"rule": "!has(self.slot) || has(self.switchRef)",
     "message": "slot can only be chosen together with switchRef"}
]))]
pub struct VirtualSwitchSpec {
    /// Name of the P4Program (same namespace) to run.
    #[schemars(length(min = 1, max = 253))]
    pub program_ref: String,
    /// Name of the Switch to run on.
    #[schemars(length(min = 1, max = 253))]
    pub switch_ref: Option<String>,
    /// Lets p4fleet pick a matching Switch with a free slot and enough resources.
    pub switch_selector: Option<Selector>,
    /// Slot on the Switch; the first free one when absent.
    #[schemars(range(min = 0, max = 63))]
    pub slot: Option<u32>,
    /// How traffic is steered to this virtual switch.
    pub isolation: Option<Isolation>,
    /// Physical to virtual port map.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["physical"]))]
    pub port_map: Vec<PortMapping>,
    /// How a program change is rolled out.
    #[serde(default)]
    pub update_strategy: UpdateStrategy,
    /// Multicast groups written to the device with the program (P4Runtime
    /// targets); the device holds exactly these.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["id"]))]
    #[schemars(length(max = 1024))]
    pub multicast_groups: Vec<MulticastGroup>,
    /// Clone (mirror) sessions written to the device with the program
    /// (P4Runtime targets); the device holds exactly these.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["id"]))]
    #[schemars(length(max = 1024))]
    pub clone_sessions: Vec<CloneSession>,
}

/// Switch id selecting this virtual switch's traffic (P4VBox: VLAN + dst MAC).
#[serde_with::skip_serializing_none]
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Isolation {
    /// VLAN id that selects this virtual switch.
    #[schemars(range(min = 1, max = 4094))]
    pub vlan: u16,
    /// Destination MAC that selects this virtual switch, `aa:bb:cc:dd:ee:ff`.
    #[schemars(regex(pattern = r"^([0-9a-fA-F]{2}:){5}[0-9a-fA-F]{2}$"))]
    pub dst_mac: Option<String>,
}

/// One physical-to-virtual port mapping.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PortMapping {
    /// Port id on the Switch.
    #[schemars(range(min = 0, max = 65535))]
    pub physical: u32,
    /// Port number the program sees.
    #[schemars(range(min = 0, max = 65535))]
    #[serde(rename = "virtual")]
    pub virtual_port: u32,
}

/// Rollout of program changes.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UpdateStrategy {
    /// How a program change reaches the device. HotSwap: the new program is
    /// loaded over the old one (on an Fpga Switch a partial reconfiguration
    /// of this slot only; elsewhere the slot's device replaces its
    /// pipeline, keeping unchanged tables' entries where the target takes
    /// RECONCILE_AND_COMMIT). Recreate: on an Fpga Switch this slot (never
    /// the board) is unloaded first, isolation and port map included, and
    /// loaded as new; on P4Runtime targets the slot's device replaces its
    /// program with VERIFY_AND_COMMIT, clearing every table; on Tofino
    /// (BFRT) both replace the slot's device's program and its entries.
    #[serde(default, rename = "type")]
    pub type_: UpdateStrategyType,
}

/// Kind of rollout.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum UpdateStrategyType {
    /// Load the new program over the old one.
    #[default]
    HotSwap,
    /// Unload the slot first, then load the new program (Fpga Switches);
    /// a full replace, no entry kept, on P4Runtime targets.
    Recreate,
}

/// Observed state of a VirtualSwitch.
#[serde_with::skip_serializing_none]
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VirtualSwitchStatus {
    /// Generation of the spec last acted upon.
    pub observed_generation: Option<i64>,
    /// Conditions: Scheduled, PipelineLoaded, Ready.
    #[serde(default)]
    #[schemars(schema_with = "conditions_schema")]
    pub conditions: Vec<Condition>,
    /// Switch it runs on.
    pub switch: Option<String>,
    /// Slot it runs in.
    pub slot: Option<u32>,
    /// Digest of the pipeline loaded on the device.
    pub loaded_digest: Option<String>,
    /// First 12 hex digits of the loaded digest, for printing.
    pub loaded_short_digest: Option<String>,
    /// Duration of the last pipeline load or slot swap, in milliseconds.
    pub last_swap_millis: Option<u64>,
    /// The last program change of a running slot (hot swap or recreate).
    pub last_swap: Option<LastSwap>,
    /// Multicast groups and clone sessions the device confirmed.
    pub replication: Option<ReplicationStatus>,
}

/// A program change of a running VirtualSwitch, as the device confirmed it.
#[serde_with::skip_serializing_none]
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LastSwap {
    /// When the device reported the new program loaded (RFC 3339).
    pub at: String,
    /// Digest of the program it replaced.
    pub from_digest: Option<String>,
    /// Digest of the program now loaded.
    pub to_digest: String,
    /// What was done: Recreate when the slot was unloaded first, HotSwap
    /// when the new program was loaded over the old.
    pub strategy: UpdateStrategyType,
    /// How long the device took to load it, in milliseconds.
    pub duration_millis: u64,
    /// Table entries re-applied to the new program, when known (entries
    /// the device kept are not counted).
    pub entries_reapplied: Option<u64>,
    /// P4Runtime targets: whether the device kept the entries of the
    /// tables the new program did not change (Reconciled) or cleared every
    /// table (Replaced). See docs/entities/hitless-updates.md.
    pub mode: Option<ProgramUpdateMode>,
    /// Entries the device kept through the change (read back right after it).
    pub entries_kept: Option<u64>,
    /// Tables whose entries the device kept (P4Info names).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tables_kept: Vec<String>,
    /// Why the change was not reconciled, when the target refused
    /// RECONCILE_AND_COMMIT (its answer).
    pub fallback_reason: Option<String>,
}

/// How a program change treated the device's table entries.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum ProgramUpdateMode {
    /// RECONCILE_AND_COMMIT: entries of unchanged tables stayed.
    Reconciled,
    /// VERIFY_AND_COMMIT: every table was cleared and re-applied.
    Replaced,
}
