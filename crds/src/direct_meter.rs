//! An entry's direct meter config (`spec.entries[].meter`), for tables
//! whose P4Info has a direct meter. docs/entities/meters.md.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Two-rate three-color (RFC 2698): rates in the meter's unit per second
/// (bytes or packets, as the program declares), bursts in its unit.
/// Checked by the operator (PIR at least CIR, bursts above 0, nothing
/// negative); in the line format `@meter=CIR:CBURST:PIR:PBURST`.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EntryMeter {
    pub cir: i64,
    pub cburst: i64,
    pub pir: i64,
    pub pburst: i64,
}
