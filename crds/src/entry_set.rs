//! TableEntrySet: entries of one table of one VirtualSwitch (or all matching a selector).

use std::collections::BTreeMap;

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::common::{Condition, Selector, conditions_schema};

/// Desired entries for one table, pushed in batches and kept in sync.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "p4fleet.dev",
    version = "v1alpha1",
    kind = "TableEntrySet",
    plural = "tableentrysets",
    shortname = "tes",
    namespaced,
    status = "TableEntrySetStatus",
    category = "p4fleet",
    printcolumn = r#"{"name":"Table","type":"string","jsonPath":".spec.table"}"#,
    printcolumn = r#"{"name":"Desired","type":"integer","jsonPath":".status.desired"}"#,
    printcolumn = r#"{"name":"Applied","type":"integer","jsonPath":".status.applied"}"#,
    printcolumn = r#"{"name":"Failed","type":"integer","jsonPath":".status.failed","priority":1}"#,
    printcolumn = r#"{"name":"Rate","type":"string","jsonPath":".status.rate"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "has(self.virtualSwitchRef) != has(self.virtualSwitchSelector)",
     "message": "exactly one of virtualSwitchRef or virtualSwitchSelector must be set"},
    {"rule": "(has(self.entries) && size(self.entries) > 0) || (has(self.entriesFrom) && size(self.entriesFrom) > 0) || (has(self.ownership) && self.ownership == 'Exclusive')",
     "message": "entries or entriesFrom must be given (only an Exclusive set may be empty, to clear its table)"}
]))]
pub struct TableEntrySetSpec {
    /// Name of the VirtualSwitch (same namespace) whose table this fills.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub virtual_switch_ref: Option<String>,
    /// Fill this table on every VirtualSwitch with these labels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub virtual_switch_selector: Option<Selector>,
    /// Table name as in the P4Info, e.g. `MyIngress.firewall` (or its alias `firewall`).
    #[schemars(length(min = 1, max = 255))]
    pub table: String,
    /// Entries given inline (up to 5000; larger sets belong in ConfigMaps).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 5000))]
    pub entries: Vec<TableEntry>,
    /// ConfigMaps holding entries in the compact line format (docs/entries.md).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 1000))]
    pub entries_from: Vec<EntriesSource>,
    /// How entries are written.
    #[serde(default)]
    pub write: WriteOptions,
    /// Whether this set merges with others or owns the table.
    #[serde(default)]
    pub ownership: Ownership,
    /// Seconds between drift checks (read-back and repair); 0 disables them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 86400))]
    pub resync_seconds: Option<u32>,
}

/// One table entry as people write it.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "!self.match.exists(k, self.match[k].contains('&&&') || self.match[k].contains('..')) || has(self.priority)",
     "message": "ternary (value&&&mask) and range (lo..hi) entries need a priority"}
]))]
pub struct TableEntry {
    /// Match field name to value: `10.0.0.1`, `10.0.0.0/24`, `0x0a000000&&&0xff000000`, `1000..2000`, `aa:bb:cc:dd:ee:ff`.
    #[serde(rename = "match")]
    #[schemars(extend(
        "minProperties" = 1,
        "maxProperties" = 16,
        "additionalProperties" = {"type": "string", "minLength": 1, "maxLength": 128}
    ))]
    pub match_: BTreeMap<String, String>,
    /// Action name, e.g. `MyIngress.allow` or `allow`.
    #[schemars(length(min = 1, max = 255))]
    pub action: String,
    /// Action parameter name to value.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend(
        "maxProperties" = 64,
        "additionalProperties" = {"type": "string", "minLength": 1, "maxLength": 256}
    ))]
    pub params: BTreeMap<String, String>,
    /// Priority, required for ternary, range and optional matches (higher wins).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 2147483647))]
    pub priority: Option<i32>,
}

/// A ConfigMap with entries in the line format.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EntriesSource {
    /// ConfigMap name (same namespace).
    #[schemars(length(min = 1, max = 253))]
    pub config_map: String,
    /// Key in the ConfigMap; every key is read when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// Whether a missing ConfigMap is an error (default) or an empty source.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub optional: Option<bool>,
}

/// Write options.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WriteOptions {
    /// Updates per Write request.
    #[serde(default = "default_batch_size")]
    #[schemars(range(min = 1, max = 1000000))]
    pub batch_size: u32,
    /// Write requests in flight per device; updates of one entry keep
    /// their order (a request waits for an earlier one with the same
    /// entry).
    #[serde(default = "default_max_in_flight")]
    #[schemars(range(min = 1, max = 64))]
    pub max_in_flight: u32,
    /// What a failed update does to the rest of its batch.
    #[serde(default)]
    pub atomicity: Atomicity,
}

impl Default for WriteOptions {
    fn default() -> Self {
        WriteOptions {
            batch_size: default_batch_size(),
            max_in_flight: default_max_in_flight(),
            atomicity: Atomicity::default(),
        }
    }
}

fn default_batch_size() -> u32 {
    1000
}

fn default_max_in_flight() -> u32 {
    4
}

/// Batch atomicity (P4Runtime WriteRequest.Atomicity / BFRT atomicity).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum Atomicity {
    /// Apply what is valid, report each failed update.
    #[default]
    ContinueOnError,
    /// Undo the batch if any update fails.
    RollbackOnError,
    /// The batch takes effect in the data plane at once.
    DataplaneAtomic,
}

/// Ownership of the table.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum Ownership {
    /// Manage only this set's own entries.
    #[default]
    Merge,
    /// Own the table: entries not in this set are removed.
    Exclusive,
}

/// Observed state of a TableEntrySet.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TableEntrySetStatus {
    /// Generation of the spec last acted upon.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Conditions: Valid, ResolvedRefs, Synced, Ready.
    #[serde(default)]
    #[schemars(schema_with = "conditions_schema")]
    pub conditions: Vec<Condition>,
    /// Entries the spec asks for (per target).
    #[serde(default)]
    pub desired: u64,
    /// Entries on the device(s) that match the spec.
    #[serde(default)]
    pub applied: u64,
    /// Entries that could not be parsed or were refused by the device.
    #[serde(default)]
    pub failed: u64,
    /// Achieved rate of the last sync that wrote something, e.g. `52.8k/s`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<String>,
    /// Achieved entries per second of the last sync that wrote something.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entries_per_second: Option<u64>,
    /// Mean Write request latency of that sync, in microseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mean_request_latency_micros: Option<u64>,
    /// Updates written in that sync (inserts + modifies + deletes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_sync_updates: Option<u64>,
    /// When that sync finished (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_sync_time: Option<String>,
    /// Entries repaired because the device differed from the spec, in total.
    #[serde(default)]
    pub drift_corrected: u64,
    /// The first per-entry errors.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<EntryError>,
    /// Per-target breakdown.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub targets: Vec<TargetStatus>,
}

/// One entry that failed.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EntryError {
    /// Where the entry came from: `entries[3]` or `configmap/fw-1:line 17`.
    pub source: String,
    /// The entry's match key as written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// Why it failed.
    pub reason: String,
}

/// Sync state on one VirtualSwitch.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TargetStatus {
    /// VirtualSwitch name.
    pub virtual_switch: String,
    /// Switch it runs on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub switch: Option<String>,
    /// Entries applied there.
    #[serde(default)]
    pub applied: u64,
    /// Entries that failed there.
    #[serde(default)]
    pub failed: u64,
    /// Achieved rate there in the last sync that wrote something.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entries_per_second: Option<u64>,
}
