//! Switch: one physical (or emulated) device, cluster-scoped like a Node.

use std::collections::BTreeMap;

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::common::{Condition, SecretRef, conditions_schema};

/// A programmable switch device p4fleet manages.
#[serde_with::skip_serializing_none]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "p4fleet.dev",
    version = "v1alpha1",
    kind = "Switch",
    doc = "A programmable switch p4fleet manages (bmv2, Tofino, DPDK, FPGA): where its P4Runtime or BFRT server is, its device id and slots, TLS; status reports whether it is reachable and what it runs.",
    plural = "switches",
    shortname = "sw",
    status = "SwitchStatus",
    category = "p4fleet",
    printcolumn = r#"{"name":"Target","type":"string","jsonPath":".spec.target"}"#,
    printcolumn = r#"{"name":"Endpoint","type":"string","jsonPath":".spec.endpoint"}"#,
    printcolumn = r#"{"name":"Slots","type":"string","jsonPath":".status.slotSummary"}"#,
    printcolumn = r#"{"name":"Free","type":"string","jsonPath":".status.freeSummary"}"#,
    printcolumn = r#"{"name":"Reachable","type":"string","jsonPath":".status.conditions[?(@.type==\"Reachable\")].status"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Reason","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].reason","priority":1}"#,
    printcolumn = r#"{"name":"Message","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].message","priority":1}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct SwitchSpec {
    /// Kind of device: Tofino (BFRT), Bmv2 or Dpdk (P4Runtime), Fpga (slot service).
    pub target: SwitchTarget,
    /// gRPC endpoint of the device agent, `host:port`.
    #[schemars(length(min = 3, max = 253), regex(pattern = r"^[^\s:]+:[0-9]{1,5}$"))]
    pub endpoint: String,
    /// Control protocol; defaults to the target's native one (Bfrt for Tofino, P4Runtime otherwise).
    pub protocol: Option<SwitchProtocol>,
    /// Device id used in P4Runtime/BFRT requests.
    #[serde(default = "default_device_id")]
    #[schemars(range(min = 0))]
    pub device_id: u64,
    /// Secret with `ca.crt` (the CA the device's certificate must chain to) and,
    /// for mutual TLS, `tls.crt` and `tls.key` (both or neither); plaintext when absent.
    pub tls_secret_ref: Option<SecretRef>,
    /// Number of slots that can each host one VirtualSwitch (FPGA regions, pipes, or 1).
    #[serde(default = "default_slots")]
    #[schemars(range(min = 1, max = 64))]
    pub slots: u32,
    /// Resources the device offers to VirtualSwitches, e.g. `luts: 1200000`, `ffs: 2400000`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub capacity: BTreeMap<String, u64>,
    /// Physical ports of the device.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["id"]))]
    pub ports: Vec<SwitchPort>,
    /// Tofino (BFRT): hardware pipes per device, used only when the device
    /// does not report its pipe count (BF Runtime has no message for it).
    #[schemars(range(min = 1, max = 8))]
    pub pipes: Option<u32>,
}

fn default_device_id() -> u64 {
    1
}

fn default_slots() -> u32 {
    1
}

/// Kind of device.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum SwitchTarget {
    Tofino,
    Bmv2,
    Dpdk,
    Fpga,
}

/// Control protocol spoken to the device.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum SwitchProtocol {
    P4Runtime,
    Bfrt,
}

impl SwitchSpec {
    /// The protocol in effect: the explicit one or the target's default.
    pub fn effective_protocol(&self) -> SwitchProtocol {
        self.protocol.unwrap_or(match self.target {
            SwitchTarget::Tofino => SwitchProtocol::Bfrt,
            _ => SwitchProtocol::P4Runtime,
        })
    }
}

/// One physical port.
#[serde_with::skip_serializing_none]
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SwitchPort {
    /// Port number on the device (the value P4 programs see).
    #[schemars(range(min = 0, max = 65535))]
    pub id: u32,
    /// Human name, e.g. `eth1` or `1/0`.
    pub name: Option<String>,
    /// Speed in Gbit/s.
    #[schemars(range(min = 1, max = 1600))]
    pub speed_gbps: Option<u32>,
}

/// Observed state of a Switch.
#[serde_with::skip_serializing_none]
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SwitchStatus {
    /// Generation of the spec last acted upon.
    pub observed_generation: Option<i64>,
    /// Conditions: Reachable, Ready.
    #[serde(default)]
    #[schemars(schema_with = "conditions_schema")]
    pub conditions: Vec<Condition>,
    /// What the device reported it can do.
    pub capabilities: Option<SwitchCapabilities>,
    /// Slots occupied by VirtualSwitches.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub slots_in_use: Vec<SlotUse>,
    /// `used/total` slots, for printing.
    pub slot_summary: Option<String>,
    /// Slots VirtualSwitches can use: what the device reported, else `spec.slots`.
    pub slots: Option<u32>,
    /// Resources VirtualSwitches can use (static region excluded): what the
    /// device reported, else `spec.capacity`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub capacity: BTreeMap<String, u64>,
    /// Where `slots` and `capacity` come from: `Device` or `Spec`.
    pub capacity_source: Option<String>,
    /// `capacity` minus what the slot claims hold.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub free: BTreeMap<String, u64>,
    /// `free` as `name=value,...`, for printing.
    pub free_summary: Option<String>,
    /// The board's configuration port, as the device reported it.
    pub config_port: Option<ConfigPortStatus>,
    /// Tofino (BFRT): hardware pipes per device (slot), which
    /// VirtualSwitches share as disjoint pipe sets: what the device
    /// reported, else `spec.pipes`; absent when neither says.
    pub pipes: Option<u32>,
    /// Where `pipes` comes from: `Device` or `Spec`.
    pub pipes_source: Option<String>,
}

/// A configuration port (FPGA boards).
#[serde_with::skip_serializing_none]
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConfigPortStatus {
    /// `jtag`, `icap`, `selectmap`, `serial`.
    pub name: String,
    /// What loads achieve, bits/s (a load of B bits takes B / this).
    pub bits_per_second: u64,
    /// The interface's maximum, bits/s.
    pub nominal_bits_per_second: Option<u64>,
}

/// Annotation on a Switch holding its slot claims (a JSON list of
/// [`SlotClaim`]). It is written only with the Switch's resourceVersion as
/// a precondition, so concurrent claims never share a slot or overbook a
/// resource; it lives in metadata so that the status writes (server-side
/// apply) never carry a stale copy of it.
pub const SLOT_CLAIMS_ANNOTATION: &str = "p4fleet.dev/slot-claims";

/// A slot, the resources and the traffic a VirtualSwitch holds on a Switch.
#[serde_with::skip_serializing_none]
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SlotClaim {
    /// Slot index.
    pub slot: u32,
    /// `namespace/name` of the VirtualSwitch.
    pub virtual_switch: String,
    /// Resources its program occupies.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub resources: BTreeMap<String, u64>,
    /// VLAN id of its isolation.
    pub vlan: Option<u16>,
    /// Destination MAC of its isolation.
    pub dst_mac: Option<String>,
    /// Physical ports it uses (empty: every port).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ports: Vec<u32>,
    /// Tofino (BFRT): the hardware pipes of the slot's device it holds
    /// (empty: the whole device).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pipes: Vec<u32>,
}

/// Capabilities a device advertises.
#[serde_with::skip_serializing_none]
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SwitchCapabilities {
    /// API version reported by the device (P4Runtime or BFRT).
    pub api_version: Option<String>,
    /// The device accepts p4fleet's columnar bulk writes.
    #[serde(default)]
    pub bulk_write: bool,
    /// The device hosts p4fleet's async extern runtime.
    #[serde(default)]
    pub async_externs: bool,
    /// The device hosts p4fleet's slot service (partial reconfiguration).
    #[serde(default)]
    pub slot_service: bool,
    /// One VirtualSwitch's program can be replaced while the others on the
    /// same device keep running and keep their entries: an FPGA slot
    /// service that answered, or a BFRT device that reported its pipes.
    #[serde(default)]
    pub hot_swap: bool,
    /// VirtualSwitches can run on disjoint pipe sets of one device (a BFRT
    /// device that reported its pipe count).
    #[serde(default)]
    pub pipe_sets: bool,
    /// `isolation` (VLAN / dst MAC) and `portMap` are enforced (the slot
    /// service answered).
    #[serde(default)]
    pub isolation: bool,
    /// See `isolation`: port maps go with the slot service.
    #[serde(default)]
    pub port_map: bool,
    /// Programs occupy counted resources (the board reported its capacity).
    #[serde(default)]
    pub resources_counted: bool,
}

/// A slot and the VirtualSwitch that holds it.
#[serde_with::skip_serializing_none]
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SlotUse {
    /// Slot index.
    pub slot: u32,
    /// `namespace/name` of the VirtualSwitch.
    pub virtual_switch: String,
    /// Digest of the pipeline loaded in the slot.
    pub pipeline_digest: Option<String>,
}
