//! AsyncExternPolicy: per-extern execution choices for DPDK software switches.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::common::{Condition, conditions_schema};

/// How the extern calls (e.g. encrypt/decrypt) of a VirtualSwitch execute.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "p4fleet.dev",
    version = "v1alpha1",
    kind = "AsyncExternPolicy",
    doc = "How the extern calls (e.g. encrypt/decrypt) of a VirtualSwitch on a DPDK Switch execute: inline (Sync), on an executor with dedicated cores (Async) or not at all (Skip); status reports whether the policy applies.",
    plural = "asyncexternpolicies",
    shortname = "aep",
    namespaced,
    status = "AsyncExternPolicyStatus",
    category = "p4fleet",
    printcolumn = r#"{"name":"VirtualSwitch","type":"string","jsonPath":".spec.virtualSwitchRef"}"#,
    printcolumn = r#"{"name":"Externs","type":"integer","jsonPath":".status.externCount"}"#,
    printcolumn = r#"{"name":"Mode","type":"string","jsonPath":".status.mode"}"#,
    printcolumn = r#"{"name":"PPS","type":"integer","jsonPath":".status.packetsPerSecond"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Reason","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].reason","priority":1}"#,
    printcolumn = r#"{"name":"Message","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].message","priority":1}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct AsyncExternPolicySpec {
    /// VirtualSwitch (same namespace, on a Dpdk Switch) the policy applies to.
    #[schemars(length(min = 1, max = 253))]
    pub virtual_switch_ref: String,
    /// One entry per extern instance.
    #[schemars(length(min = 1, max = 64))]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub externs: Vec<ExternSetting>,
}

/// Execution of one extern.
#[serde_with::skip_serializing_none]
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "self.mode != 'Async' || has(self.executor)",
     "message": "an Async extern needs an executor"},
    {"rule": "!has(self.cores) || (has(self.executor) && self.executor == 'DedicatedCores')",
     "message": "cores is only valid with executor DedicatedCores"}
]))]
pub struct ExternSetting {
    /// Extern instance name as in the program, e.g. `ipsec_encrypt`.
    #[schemars(length(min = 1, max = 255))]
    pub name: String,
    /// Sync runs it inline, Async on an executor, Skip does not call it.
    pub mode: ExternMode,
    /// How an async call suspends the packet (T4P4S: coroutine context or packet descriptor).
    pub suspend: Option<SuspendMethod>,
    /// Where async calls run.
    pub executor: Option<ExternExecutor>,
    /// Cores dedicated to the executor.
    #[schemars(range(min = 1, max = 256))]
    pub cores: Option<u32>,
    /// Packets per burst handed to the executor.
    #[serde(default = "default_burst")]
    #[schemars(range(min = 1, max = 1024))]
    pub burst_size: u32,
    /// Size of the context pool (T4P4S uses N*1024-1).
    #[serde(default = "default_pool")]
    #[schemars(range(min = 1, max = 1048575))]
    pub context_pool: u32,
    /// Depth of the request queue to the executor.
    #[serde(default = "default_queue")]
    #[schemars(range(min = 1, max = 65536))]
    pub queue_depth: u32,
}

fn default_burst() -> u32 {
    64
}

fn default_pool() -> u32 {
    1023
}

fn default_queue() -> u32 {
    1024
}

/// Execution mode of an extern.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum ExternMode {
    Sync,
    Async,
    Skip,
}

/// How a packet waits for an async call.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum SuspendMethod {
    /// Save a coroutine context per packet.
    Context,
    /// Keep the packet descriptor and resume processing from it.
    PacketDescriptor,
}

/// Where async calls run.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum ExternExecutor {
    /// A crypto device in the packet-processing core's poll loop.
    InlineCryptoDevice,
    /// Cores set aside for extern work.
    DedicatedCores,
    /// A hardware accelerator.
    Accelerator,
}

/// Observed state of an AsyncExternPolicy.
#[serde_with::skip_serializing_none]
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AsyncExternPolicyStatus {
    /// Generation of the spec last acted upon.
    pub observed_generation: Option<i64>,
    /// Conditions: Valid, ResolvedRefs, Ready.
    #[serde(default)]
    #[schemars(schema_with = "conditions_schema")]
    pub conditions: Vec<Condition>,
    /// Number of externs configured.
    pub extern_count: Option<u32>,
    /// The mode every extern runs in as the device reports it (`Sync`,
    /// `Async`, `Skip`), or `Mixed`.
    pub mode: Option<String>,
    /// Per extern, the mode the device reports, e.g.
    /// `async_encrypt=Async,async_decrypt=Sync`.
    pub modes: Option<String>,
    /// Packets per second the data plane forwards (two significant digits).
    pub packets_per_second: Option<u64>,
    /// Async extern operations per second (two significant digits).
    pub async_ops_per_second: Option<u64>,
    /// Packets dropped because an extern's queue or context pool was full,
    /// since the data plane started.
    pub drops: Option<u64>,
    /// The ConfigMap (same namespace) that holds the policy rendered as
    /// T4P4S launch options, while the policy renders (docs/dpdk.md).
    pub t4p4s_config_map: Option<String>,
}
