//! Digests and learning of a TableEntrySet: the digest configs it writes
//! (`spec.digests`), the entries it learns from a digest (`spec.learn`)
//! and what the devices confirmed of both (`status.digests`,
//! `status.learning`). docs/entities/digests.md says why they live on
//! TableEntrySet.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The config of one digest of the program (P4Runtime `DigestEntry`).
#[serde_with::skip_serializing_none]
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DigestSetting {
    /// The digest's P4Info name (or alias), e.g. `mac_learn_digest_t`.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// A list is sent when its first message is this old (`10ms`, `1s`;
    /// `0`: at once).
    #[serde(default = "default_max_timeout")]
    #[schemars(length(min = 1, max = 32))]
    pub max_timeout: String,
    /// A list is sent when it holds this many messages (0: no bound).
    #[serde(default = "default_max_list_size")]
    #[schemars(range(min = 0, max = 65536))]
    pub max_list_size: i32,
    /// A sent list holds its data back until acked or until this passes.
    #[serde(default = "default_ack_timeout")]
    #[schemars(length(min = 1, max = 32))]
    pub ack_timeout: String,
    /// Where the digest's messages go besides learning: the operator's
    /// log, a ConfigMap owned by the set, or both (docs/entities/digests.md,
    /// "Operator: sinks"). Nowhere else when absent.
    pub sink: Option<DigestSink>,
}

/// The sinks of one digest.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DigestSink {
    /// `Log`: one structured line per digest list in the operator's log;
    /// `ConfigMap`: the last `keep` messages in the ConfigMap
    /// `status.digests.sinkConfigMaps` names. One or both.
    #[schemars(length(min = 1, max = 2), extend("x-kubernetes-list-type" = "set"))]
    pub to: Vec<DigestSinkKind>,
    /// How many messages (the newest) the ConfigMap keeps.
    #[serde(default = "default_sink_keep")]
    #[schemars(range(min = 1, max = 500))]
    pub keep: u32,
}

/// One place a digest's messages go.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum DigestSinkKind {
    Log,
    ConfigMap,
}

/// Messages a digest's ConfigMap keeps unless `keep` says otherwise.
pub const DEFAULT_SINK_KEEP: u32 = 50;
/// The most messages a digest's ConfigMap keeps (the CRD's bound): 500
/// lines of a few hundred bytes stay far below a ConfigMap's 1 MiB.
pub const MAX_SINK_KEEP: u32 = 500;

fn default_sink_keep() -> u32 {
    DEFAULT_SINK_KEEP
}

fn default_max_timeout() -> String {
    "10ms".into()
}

fn default_max_list_size() -> i32 {
    100
}

fn default_ack_timeout() -> String {
    "1s".into()
}

/// Entries learned from a digest: each message becomes one entry of
/// `table` (key and parameters taken from the message's members), owned
/// by the set and removed when the device says it idled out.
#[serde_with::skip_serializing_none]
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LearnSpec {
    /// The digest (name or alias); it must be configured in `digests`.
    #[schemars(length(min = 1, max = 253))]
    pub digest: String,
    /// The table learned entries go into (name or alias); the set's own
    /// table when absent. Its match fields must all be EXACT.
    #[schemars(length(min = 1, max = 255))]
    pub table: Option<String>,
    /// The action of learned entries (an action of that table).
    #[schemars(length(min = 1, max = 255))]
    pub action: String,
    /// Match field name to the digest member that gives its value; every
    /// match field of the table is mapped.
    #[schemars(extend("minProperties" = 1, "maxProperties" = 16))]
    pub key: BTreeMap<String, String>,
    /// Action parameter name to the digest member that gives its value;
    /// every parameter of the action is mapped.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = 64))]
    pub params: BTreeMap<String, String>,
    /// Learned entries idle out after this long without a hit (`30s`,
    /// `5m`); only on tables whose P4Info says NOTIFY_CONTROL. Never, when
    /// absent.
    #[schemars(length(min = 1, max = 32))]
    pub idle_timeout: Option<String>,
    /// At most this many learned entries per VirtualSwitch; further
    /// messages are dropped (condition `Learning` False, `LimitReached`).
    #[serde(default = "default_max_learned")]
    #[schemars(range(min = 1, max = 1000000))]
    pub max_learned: u32,
}

fn default_max_learned() -> u32 {
    1000
}

/// What the devices confirmed of the set's digests and learning.
#[serde_with::skip_serializing_none]
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DigestsStatus {
    /// Digests this set configured and read back on at least one target
    /// (what it deletes when they leave the spec or the set is deleted).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub configured: Vec<String>,
    /// Entries carrying the set's learned tag, read back from the
    /// devices (all targets).
    pub learned: Option<u64>,
    /// Learned entries this process removed after their idle timeout.
    pub aged_out: Option<u64>,
    /// The ConfigMaps this set writes digest messages to (`sink.to`
    /// ConfigMap), which it deletes when they leave the spec or the set
    /// is deleted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sink_config_maps: Vec<String>,
}

/// Idle timeout notifications the devices sent about the set's own
/// (static) entries. They are reported, not acted on: a static entry is
/// desired state and stays (learned entries are removed instead).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct IdleStatus {
    /// Entries of this set named in IdleTimeoutNotifications since this
    /// operator process started (every target; an entry notified twice
    /// counts twice).
    pub notified: u64,
    /// The keys of the last few entries notified (at most 5), newest last.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub recent: Vec<String>,
}
