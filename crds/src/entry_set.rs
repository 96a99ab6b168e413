//! TableEntrySet: entries of one table of one VirtualSwitch (or all matching a selector).

use std::collections::BTreeMap;

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::action_profile::{ActionProfileSpec, ActionProfileStatus, WeightedAction};
use crate::common::{Condition, Selector, conditions_schema};
use crate::digests::{DigestSetting, DigestsStatus, IdleStatus, LearnSpec};
use crate::resources::{CounterReadout, CountersStatus, MeterSetting, RegisterSetting};

/// Desired entries for one table, pushed in batches and kept in sync.
#[serde_with::skip_serializing_none]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "p4fleet.dev",
    version = "v1alpha1",
    kind = "TableEntrySet",
    doc = "Entries of one table of a VirtualSwitch (or of every VirtualSwitch a selector matches), inline or in ConfigMaps in the line format; p4fleet writes them in batches, repairs drift and reports desired, applied and failed entries.",
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
    printcolumn = r#"{"name":"Groups","type":"integer","jsonPath":".status.actionProfile.groups","priority":1}"#,
    printcolumn = r#"{"name":"Packets","type":"integer","jsonPath":".status.counters.packets","priority":1}"#,
    printcolumn = r#"{"name":"Rollout","type":"string","jsonPath":".status.rollout.phase","priority":1}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Reason","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].reason","priority":1}"#,
    printcolumn = r#"{"name":"Message","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].message","priority":1}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "has(self.virtualSwitchRef) != has(self.virtualSwitchSelector)",
     "message": "exactly one of virtualSwitchRef or virtualSwitchSelector must be set"},
    {"rule": "(has(self.entries) && size(self.entries) > 0) || (has(self.entriesFrom) && size(self.entriesFrom) > 0) || (has(self.ownership) && self.ownership == 'Exclusive') || has(self.defaultAction) || has(self.learn)",
     "message": "entries, entriesFrom, defaultAction or learn must be given (only an Exclusive set may be empty, to clear its table)"},
    {"rule": "!has(self.learn) || (has(self.digests) && self.digests.exists(d, d.name == self.learn.digest))",
     "message": "learn.digest must be configured in digests"},
    {"rule": "!has(self.rollout) || !has(self.rollout.strategy) || self.rollout.strategy != 'Canary' || !has(self.actionProfile)",
     "message": "rollout: a Canary rollout of entries is not available for a table with an actionProfile (its members and groups are shared by every entry); use AllAtOnce"}
]))]
pub struct TableEntrySetSpec {
    /// Name of the VirtualSwitch (same namespace) whose table this fills.
    #[schemars(length(min = 1, max = 253))]
    pub virtual_switch_ref: Option<String>,
    /// Fill this table on every VirtualSwitch with these labels.
    pub virtual_switch_selector: Option<Selector>,
    /// Table name as in the P4Info, e.g. `MyIngress.firewall` (or its alias `firewall`).
    #[schemars(length(min = 1, max = 255))]
    pub table: String,
    /// Entries given inline (up to 5000; larger sets belong in ConfigMaps).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 5000))]
    pub entries: Vec<TableEntry>,
    /// ConfigMaps holding entries in the compact line format
    /// (docs/entries.md), by name or by label selector, plain or
    /// gzip-compressed; an entry given twice across them is an error that
    /// names both places.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 1000))]
    pub entries_from: Vec<EntriesSource>,
    /// How entries are written.
    #[serde(default)]
    pub write: WriteOptions,
    /// Whether this set merges with others or owns the table.
    #[serde(default)]
    pub ownership: Ownership,
    /// Clear LPM host bits and ternary value bits outside the mask
    /// (`10.0.0.1/24` becomes `10.0.0.0/24`), as p4runtime-shell does,
    /// instead of reporting them as invalid entries (the default).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub mask_host_bits: bool,
    /// Seconds between drift checks (read-back and repair); 0 disables them.
    #[schemars(range(min = 0, max = 86400))]
    pub resync_seconds: Option<u32>,
    /// The table's default action (what a miss does), set on every target
    /// and kept in sync like the entries; removing it (or deleting the set)
    /// resets the table to the program's initial default. One set per
    /// table should give it. See docs/entities/default-action.md.
    pub default_action: Option<DefaultAction>,
    /// Read the table's direct counter back into status and metrics
    /// (docs/entities/counters.md).
    pub counters: Option<CounterReadout>,
    /// Indirect meter configs (docs/entities/meters.md).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 1000))]
    pub meters: Vec<MeterSetting>,
    /// Register values (docs/entities/registers.md).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 1000))]
    pub registers: Vec<RegisterSetting>,
    /// Members and groups of the table's action profile or selector
    /// (ECMP), used by entries by name (docs/entities/action-profiles.md).
    pub action_profile: Option<ActionProfileSpec>,
    /// Digest configs written to every target (docs/entities/digests.md).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub digests: Vec<DigestSetting>,
    /// Entries learned from a digest, removed when they idle out
    /// (docs/entities/digests.md, "Learning").
    pub learn: Option<LearnSpec>,
    /// Plan only: compute, per target and against a live read-back, what
    /// a sync would write (`status.plan`) and write nothing to any
    /// device. Set it back to false to apply (docs/plans.md).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub plan: bool,
    /// How a change of the entries reaches the selected VirtualSwitches:
    /// all at once (the default), or a Canary in steps with a health gate
    /// after each and a rollback to the previous entries on a failed gate
    /// (docs/rollouts.md, "Rolling out entries").
    pub rollout: Option<crate::rollout::Rollout>,
    /// Old entry revisions kept for rollbacks and pins (default 10).
    #[schemars(range(min = 0, max = 100))]
    pub revision_history_limit: Option<u32>,
}

/// A table's default action: an action of the table that is not
/// `@tableonly` (`@defaultonly` ones are allowed here, and only here);
/// a table with a const default action cannot have one set.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DefaultAction {
    /// Action name, e.g. `MyIngress.drop` or `drop`.
    #[schemars(length(min = 1, max = 255))]
    pub action: String,
    /// Action parameter name to value; integers may be written unquoted.
    #[serde(
        default,
        skip_serializing_if = "BTreeMap::is_empty",
        deserialize_with = "int_or_string::map"
    )]
    #[schemars(extend(
        "maxProperties" = 64,
        "additionalProperties" = {"x-kubernetes-int-or-string": true, "maxLength": 256, "minLength": 1}
    ))]
    pub params: BTreeMap<String, String>,
}

/// One table entry as people write it.
#[serde_with::skip_serializing_none]
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "!self.match.exists(k, type(self.match[k]) == string && (self.match[k].contains('&&&') || self.match[k].contains('..'))) || has(self.priority)",
     "message": "ternary (value&&&mask) and range (lo..hi) entries need a priority"},
    {"rule": "(has(self.action) && self.action != '' ? 1 : 0) + (has(self.member) ? 1 : 0) + (has(self.group) ? 1 : 0) + (has(self.actionSet) && size(self.actionSet) > 0 ? 1 : 0) == 1",
     "message": "exactly one of action, member, group or actionSet must be set"},
    {"rule": "!has(self.idleTimeout) || (has(self.action) && self.action != '')",
     "message": "idleTimeout is for entries with a direct action (not member, group or actionSet)"}
]))]
pub struct TableEntry {
    /// Match field name to value: `10.0.0.1`, `10.0.0.0/24`, `0x0a000000&&&0xff000000`, `1000..2000`, `aa:bb:cc:dd:ee:ff`; integers may be written unquoted (`3`).
    #[serde(rename = "match", deserialize_with = "int_or_string::map")]
    #[schemars(extend(
        "minProperties" = 1,
        "maxProperties" = 16,
        "additionalProperties" = {"x-kubernetes-int-or-string": true, "maxLength": 128, "minLength": 1}
    ))]
    pub match_: BTreeMap<String, String>,
    /// Action name, e.g. `MyIngress.allow` or `allow` (empty when the
    /// entry uses a member, group or action set of an action profile).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(length(max = 255))]
    pub action: String,
    /// Action parameter name to value; integers may be written unquoted (`port: 3`).
    #[serde(
        default,
        skip_serializing_if = "BTreeMap::is_empty",
        deserialize_with = "int_or_string::map"
    )]
    #[schemars(extend(
        "maxProperties" = 64,
        "additionalProperties" = {"x-kubernetes-int-or-string": true, "maxLength": 256, "minLength": 1}
    ))]
    pub params: BTreeMap<String, String>,
    /// Priority, required for ternary, range and optional matches (higher wins).
    #[schemars(range(min = 1, max = 2147483647))]
    pub priority: Option<i32>,
    /// Idle timeout (`30s`, `5m`): the device notifies the entry when it
    /// has not been hit for this long. Only on tables compiled with
    /// `support_timeout = true` (P4Info NOTIFY_CONTROL). The entry is not
    /// removed on timeout (it is desired state): the set reports it
    /// (docs/entities/idle-timeouts.md). Line format: `@idle=30s`.
    #[schemars(length(min = 1, max = 32))]
    pub idle_timeout: Option<String>,
    /// For a table with an action profile, in place of `action`: a
    /// member of `spec.actionProfile`, by name.
    #[schemars(length(min = 1, max = 63))]
    pub member: Option<String>,
    /// ... or a group of `spec.actionProfile`, by name.
    #[schemars(length(min = 1, max = 63))]
    pub group: Option<String>,
    /// ... or a one-shot action set: the device makes the group itself
    /// (more than one action only with a selector). A profile's tables
    /// use either members/groups or one-shot sets.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 256))]
    pub action_set: Vec<WeightedAction>,
    /// The entry's direct meter config, for a table with a direct meter
    /// (docs/entities/meters.md).
    pub meter: Option<crate::EntryMeter>,
}

impl TableEntry {
    /// Whether the entry names a member, group or action set instead of
    /// an action.
    pub fn is_indirect(&self) -> bool {
        self.member.is_some() || self.group.is_some() || !self.action_set.is_empty()
    }
}

/// Values as people write them in YAML: `port: 3` as well as `port: "3"`
/// (p4runtime-shell and the P4 tutorials take both). Integers are kept as
/// their decimal text, which the entry parser reads like any other value.
pub(crate) mod int_or_string {
    use std::collections::BTreeMap;
    use std::fmt;

    use serde::Deserializer;
    use serde::de::{self, MapAccess, Visitor};

    struct Text(String);

    impl<'de> de::Deserialize<'de> for Text {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct V;
            impl Visitor<'_> for V {
                type Value = Text;
                fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                    f.write_str("a string or a number")
                }
                fn visit_str<E: de::Error>(self, v: &str) -> Result<Text, E> {
                    Ok(Text(v.to_string()))
                }
                fn visit_string<E: de::Error>(self, v: String) -> Result<Text, E> {
                    Ok(Text(v))
                }
                fn visit_u64<E: de::Error>(self, v: u64) -> Result<Text, E> {
                    Ok(Text(v.to_string()))
                }
                fn visit_u128<E: de::Error>(self, v: u128) -> Result<Text, E> {
                    Ok(Text(v.to_string()))
                }
                // Kept as text so that the entry parser rejects it with an
                // error naming the entry and field (a set that failed to
                // deserialize would get no status at all).
                fn visit_i64<E: de::Error>(self, v: i64) -> Result<Text, E> {
                    Ok(Text(v.to_string()))
                }
                fn visit_f64<E: de::Error>(self, v: f64) -> Result<Text, E> {
                    Ok(Text(v.to_string()))
                }
            }
            d.deserialize_any(V)
        }
    }

    pub(crate) fn map<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<BTreeMap<String, String>, D::Error> {
        struct M;
        impl<'de> Visitor<'de> for M {
            type Value = BTreeMap<String, String>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a map of names to strings or integers")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut a: A) -> Result<Self::Value, A::Error> {
                let mut out = BTreeMap::new();
                while let Some((k, Text(v))) = a.next_entry::<String, Text>()? {
                    out.insert(k, v);
                }
                Ok(out)
            }
        }
        d.deserialize_map(M)
    }
}

/// ConfigMaps with entries in the line format: one by name, or every one
/// in the set's namespace whose labels match. Keys of `data` hold text;
/// keys of `binaryData` ending in `.gz` hold gzip-compressed text (other
/// `binaryData` keys are read as UTF-8 text). See docs/entries.md.
#[serde_with::skip_serializing_none]
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "has(self.configMap) != has(self.configMapSelector)",
     "message": "exactly one of configMap or configMapSelector must be set"}
]))]
pub struct EntriesSource {
    /// ConfigMap name (same namespace).
    #[schemars(length(min = 1, max = 253))]
    pub config_map: Option<String>,
    /// Every ConfigMap of the set's namespace with these labels, read in
    /// name order. Matching none is an error unless `optional`.
    pub config_map_selector: Option<Selector>,
    /// Key in each ConfigMap (in `data` or `binaryData`); every key is
    /// read when absent.
    #[schemars(length(min = 1, max = 253))]
    pub key: Option<String>,
    /// Whether a missing ConfigMap or key (or a selector matching none)
    /// is an error (default) or an empty source.
    pub optional: Option<bool>,
}

impl EntriesSource {
    /// Whether the ConfigMap `name` with `labels` is one this source reads.
    pub fn selects(&self, name: &str, labels: &BTreeMap<String, String>) -> bool {
        self.config_map.as_deref() == Some(name)
            || self
                .config_map_selector
                .as_ref()
                .is_some_and(|s| s.matches(labels))
    }
}

/// Write options.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WriteOptions {
    /// Updates per Write request, or `Auto`: tuned per device from the
    /// entries/s its writes achieve (docs/resources.md; measured in docs/batching.md).
    #[serde(
        default = "default_batch_size",
        deserialize_with = "batch_size_or_default"
    )]
    #[schemars(schema_with = "batch_size_schema")]
    pub batch_size: Tunable,
    /// Write requests in flight per device, or `Auto` (tuned like
    /// batchSize); updates of one entry keep their order (a request waits
    /// for an earlier one with the same entry).
    #[serde(
        default = "default_max_in_flight",
        deserialize_with = "max_in_flight_or_default"
    )]
    #[schemars(schema_with = "max_in_flight_schema")]
    pub max_in_flight: Tunable,
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

fn default_batch_size() -> Tunable {
    Tunable::Fixed(1000)
}

fn default_max_in_flight() -> Tunable {
    Tunable::Fixed(4)
}

// The generated schema says nullable (kube's rewrite of an int-or-string
// with a default): a null is the default, as an absent field.
fn batch_size_or_default<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Tunable, D::Error> {
    Ok(Option::<Tunable>::deserialize(d)?.unwrap_or_else(default_batch_size))
}

fn max_in_flight_or_default<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Tunable, D::Error> {
    Ok(Option::<Tunable>::deserialize(d)?.unwrap_or_else(default_max_in_flight))
}

/// A write setting: a number, or `Auto` (the operator tunes it per device).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tunable {
    Auto,
    Fixed(u32),
}

impl Tunable {
    /// The fixed value, or `auto` for Auto.
    pub fn or(self, auto: u32) -> u32 {
        match self {
            Tunable::Auto => auto,
            Tunable::Fixed(v) => v,
        }
    }

    pub fn is_auto(self) -> bool {
        self == Tunable::Auto
    }
}

impl Serialize for Tunable {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Tunable::Auto => s.serialize_str("Auto"),
            Tunable::Fixed(v) => s.serialize_u32(*v),
        }
    }
}

impl<'de> Deserialize<'de> for Tunable {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::{self, Visitor};
        struct V;
        impl Visitor<'_> for V {
            type Value = Tunable;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a positive integer or \"Auto\"")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Tunable, E> {
                u32::try_from(v)
                    .map(Tunable::Fixed)
                    .map_err(|_| E::custom(format!("{v} is too large")))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Tunable, E> {
                u64::try_from(v)
                    .map_err(|_| E::custom(format!("{v} is negative")))
                    .and_then(|v| self.visit_u64(v))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Tunable, E> {
                match v {
                    "Auto" => Ok(Tunable::Auto),
                    _ => Err(E::invalid_value(de::Unexpected::Str(v), &self)),
                }
            }
        }
        d.deserialize_any(V)
    }
}

/// An integer in `min..=max` or the string `Auto`. The bounds are a CEL
/// rule: a structural int-or-string schema cannot type its branches.
fn tunable_schema(min: u32, max: u32) -> schemars::Schema {
    let rule = format!("type(self) == int ? self >= {min} && self <= {max} : self == 'Auto'");
    let message = format!("must be an integer from {min} to {max}, or Auto");
    schemars::json_schema!({
        "x-kubernetes-int-or-string": true,
        "x-kubernetes-validations": [{"rule": rule, "message": message}]
    })
}

fn batch_size_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    tunable_schema(1, 1_000_000)
}

fn max_in_flight_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    tunable_schema(1, 64)
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
#[serde_with::skip_serializing_none]
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TableEntrySetStatus {
    /// Generation of the spec last acted upon.
    pub observed_generation: Option<i64>,
    /// Conditions: Valid, ResolvedRefs, Synced, Ready.
    #[serde(default)]
    #[schemars(schema_with = "conditions_schema")]
    pub conditions: Vec<Condition>,
    /// Entries the spec asks for, summed over targets; absent until every
    /// source was read and parsed for at least one target (unknown, never 0).
    pub desired: Option<u64>,
    /// Entries on the device(s) that match the spec.
    #[serde(default)]
    pub applied: u64,
    /// Entries that could not be parsed or were refused by the device.
    #[serde(default)]
    pub failed: u64,
    /// Achieved rate of the last sync that wrote something, e.g. `52.8k/s`;
    /// absent when that sync was too small to measure one (fewer than 100
    /// updates in less than 100 ms).
    pub rate: Option<String>,
    /// Achieved entries per second of that sync, to three significant
    /// digits (absent like `rate`).
    pub entries_per_second: Option<u64>,
    /// Mean Write request latency of that sync, in microseconds.
    pub mean_request_latency_micros: Option<u64>,
    /// Updates written in that sync (inserts + modifies + deletes).
    pub last_sync_updates: Option<u64>,
    /// When that sync finished (RFC 3339).
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
    /// The default action every target confirmed on read-back, e.g.
    /// `drop()` or `forward(port=3)` (absent: this set sets none).
    pub default_action: Option<String>,
    /// The last readout of the table's direct counter (`spec.counters`).
    pub counters: Option<CountersStatus>,
    /// Members, groups and entries of the table's action profile that
    /// the devices confirmed (absent without `spec.actionProfile`).
    pub action_profile: Option<ActionProfileStatus>,
    /// Digests configured and entries learned, as the devices confirmed
    /// them (absent without `spec.digests`).
    pub digests: Option<DigestsStatus>,
    /// Idle timeout notifications about the set's entries with an
    /// `idleTimeout` (absent when none has one).
    pub idle: Option<IdleStatus>,
    /// What a sync would write, while `spec.plan` is true (docs/plans.md).
    pub plan: Option<EntryPlan>,
    /// A Canary rollout's progress (docs/rollouts.md, "Rolling out
    /// entries"); revisions are those of the entries.
    pub rollout: Option<crate::rollout::RolloutStatus>,
}

/// The updates a sync would write, computed against the devices'
/// read-back while `spec.plan` is true.
#[serde_with::skip_serializing_none]
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EntryPlan {
    /// Generation of the spec planned.
    pub observed_generation: Option<i64>,
    /// A digest of every planned update on every target: applying
    /// compares it with what the devices need then.
    pub digest: String,
    /// Entries to insert, over all targets.
    pub insert: u64,
    /// Entries to modify (another action or idle timeout).
    pub modify: u64,
    /// Entries to delete.
    pub delete: u64,
    /// Desired entries the devices already hold.
    pub unchanged: u64,
    /// Per target.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub targets: Vec<TargetPlan>,
}

/// One target's plan.
#[serde_with::skip_serializing_none]
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TargetPlan {
    pub virtual_switch: String,
    pub switch: String,
    pub insert: u64,
    pub modify: u64,
    pub delete: u64,
    pub unchanged: u64,
    /// Desired entries another set holds with another action (Merge):
    /// they would not be written.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub conflicts: u64,
    /// The first updates in the line format: `+ LINE` inserts, `~ LINE`
    /// modifies (the new entry), `- LINE` deletes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub changes: Vec<String>,
    /// Why the target could not be planned (its device unreachable, its
    /// table planned by another stage).
    pub error: Option<String>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// One entry that failed.
#[serde_with::skip_serializing_none]
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EntryError {
    /// Where the entry came from: `entries[3]` or `configmap/fw-1:line 17`.
    pub source: String,
    /// The entry's match key as written.
    pub key: Option<String>,
    /// Why it failed.
    pub reason: String,
}

/// Sync state on one VirtualSwitch.
#[serde_with::skip_serializing_none]
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TargetStatus {
    /// VirtualSwitch name.
    pub virtual_switch: String,
    /// Switch it runs on.
    pub switch: Option<String>,
    /// Entries applied there.
    #[serde(default)]
    pub applied: u64,
    /// Entries that failed there.
    #[serde(default)]
    pub failed: u64,
    /// Entries the set wanted gone that the device still holds there
    /// (their delete was refused or not sent).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub stale: u64,
    /// Achieved rate there in the last sync that wrote something (absent
    /// when that sync was too small to measure one, like `rate`).
    pub entries_per_second: Option<u64>,
    /// The program content whose P4Info encoded the entries of the last
    /// sync there: the VirtualSwitch's `loadedDigest` as the sync saw it,
    /// or the program's content in force when that one is not recorded as
    /// a revision. A result for another content than the VirtualSwitch now
    /// runs says nothing of it (a rollout's gate waits for the next).
    pub pipeline_digest: Option<String>,
    /// With a Canary rollout: the entries revision (its digest) the last
    /// sync there wrote and the device confirmed, with `failed` of them
    /// refused. Absent when the sync could not reach the device.
    pub entries_digest: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_may_be_unquoted_integers() {
        let e: TableEntry = serde_yaml::from_str(
            "match: {hdr.ipv4.dstAddr: 10.0.0.1, meta.port: 3, big: 340282366920938463463374607431768211455}\n\
             action: forward\n\
             params: {port: 3, mac: \"aa:bb:cc:dd:ee:ff\"}\n",
        )
        .unwrap();
        assert_eq!(e.match_["meta.port"], "3");
        assert_eq!(e.match_["hdr.ipv4.dstAddr"], "10.0.0.1");
        assert_eq!(e.params["port"], "3");
        assert_eq!(e.params["mac"], "aa:bb:cc:dd:ee:ff");
        // What the API server stores (JSON) reads the same.
        let e: TableEntry = serde_json::from_value(serde_json::json!({
            "match": {"a": 7}, "action": "x", "params": {"p": "0x10"}
        }))
        .unwrap();
        assert_eq!(
            (e.match_["a"].as_str(), e.params["p"].as_str()),
            ("7", "0x10")
        );
        // Numbers that are no value stay text, for the entry parser to
        // reject with the field's name; other types do not deserialize.
        let e: TableEntry = serde_json::from_value(serde_json::json!({
            "match": {"a": -1, "b": 1.5}, "action": "x"
        }))
        .unwrap();
        assert_eq!(
            (e.match_["a"].as_str(), e.match_["b"].as_str()),
            ("-1", "1.5")
        );
        let bad = serde_json::json!({"match": {"a": true}, "action": "x"});
        assert!(serde_json::from_value::<TableEntry>(bad).is_err());
    }

    #[test]
    fn write_settings_are_numbers_or_auto() {
        let w: WriteOptions =
            serde_json::from_value(serde_json::json!({"batchSize": "Auto", "maxInFlight": 8}))
                .unwrap();
        assert_eq!(
            (w.batch_size, w.max_in_flight),
            (Tunable::Auto, Tunable::Fixed(8))
        );
        assert_eq!(
            serde_json::to_value(&w).unwrap()["batchSize"],
            serde_json::json!("Auto")
        );
        let d: WriteOptions = serde_json::from_value(serde_json::json!({})).unwrap();
        assert_eq!((d.batch_size.or(7), d.max_in_flight.or(7)), (1000, 4));
        let null = serde_json::json!({"batchSize": null, "maxInFlight": null});
        assert_eq!(serde_json::from_value::<WriteOptions>(null).unwrap(), d);
        assert_eq!(Tunable::Auto.or(7), 7);
        for bad in [
            serde_json::json!("auto"),
            serde_json::json!(-1),
            serde_json::json!(1.5),
        ] {
            let v = serde_json::json!({ "batchSize": bad });
            assert!(serde_json::from_value::<WriteOptions>(v).is_err(), "{bad}");
        }
        let s = serde_json::to_value(schemars::schema_for!(WriteOptions)).unwrap();
        let b = &s["properties"]["batchSize"];
        assert_eq!(b["x-kubernetes-int-or-string"], true, "{b}");
        let rule = b["x-kubernetes-validations"][0]["rule"].as_str().unwrap();
        assert!(
            rule.contains("self <= 1000000") && rule.contains("'Auto'"),
            "{rule}"
        );
        let m = &s["properties"]["maxInFlight"]["x-kubernetes-validations"][0];
        assert!(m["rule"].as_str().unwrap().contains("self <= 64"), "{m}");
    }

    #[test]
    fn schema_says_int_or_string() {
        let s = serde_json::to_value(schemars::schema_for!(TableEntry)).unwrap();
        for field in ["match", "params"] {
            let v = &s["properties"][field]["additionalProperties"];
            assert_eq!(v["x-kubernetes-int-or-string"], true, "{field}: {v}");
        }
    }
}
