//! Counters, meters and registers of a TableEntrySet: the readout of its
//! table's direct counter (`spec.counters`, `status.counters`), indirect
//! meter configs (`spec.meters`) and register values (`spec.registers`).
//! docs/entities/ says why they live on TableEntrySet.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Read the table's direct counter back every `intervalSeconds` into
/// status (totals, the busiest entries) and metrics.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CounterReadout {
    /// Seconds between readouts; the status changes at most this often.
    #[serde(default = "default_interval")]
    #[schemars(range(min = 5, max = 86400))]
    pub interval_seconds: u32,
    /// How many of the busiest entries (by packets) status and metrics
    /// show.
    #[serde(default = "default_top_n")]
    #[schemars(range(min = 0, max = 20))]
    pub top_n: u32,
}

fn default_interval() -> u32 {
    60
}

fn default_top_n() -> u32 {
    5
}

impl Default for CounterReadout {
    fn default() -> Self {
        CounterReadout {
            interval_seconds: default_interval(),
            top_n: default_top_n(),
        }
    }
}

/// The config of one cell of an indirect meter (two-rate three-color,
/// RFC 2698): rates in the meter's unit per second, bursts in its unit.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MeterSetting {
    /// The meter's P4Info name (or alias).
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    pub index: i64,
    pub cir: i64,
    pub cburst: i64,
    pub pir: i64,
    pub pburst: i64,
}

/// The value of one register cell.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RegisterSetting {
    /// The register's P4Info name (or alias).
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    pub index: i64,
    /// Decimal or `0x` hex; must fit the register's `bit<W>`.
    #[schemars(length(min = 1, max = 100))]
    pub value: String,
}

/// The last readout of the table's direct counter, over every target.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CountersStatus {
    /// The direct counter's P4Info name.
    pub counter: String,
    /// When it was read (RFC 3339).
    pub read_at: String,
    pub packets: u64,
    pub bytes: u64,
    /// Entries read.
    pub entries: u64,
    /// The busiest entries, by packets.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub top: Vec<CounterTop>,
}

/// One of the busiest entries.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CounterTop {
    pub virtual_switch: String,
    /// The entry's key in the line format.
    pub key: String,
    pub packets: u64,
    pub bytes: u64,
}
