//! P4Program: a compiled pipeline with per-target artifacts.

use std::collections::BTreeMap;

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::common::{ArtifactSource, Condition, conditions_schema};

/// A compiled P4 pipeline: P4Info plus the artifacts each kind of target loads.
#[serde_with::skip_serializing_none]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "p4fleet.dev",
    version = "v1alpha1",
    kind = "P4Program",
    doc = "A compiled P4 program: its P4Info and the artifacts each kind of target loads (bmv2 JSON, Tofino binary and bfrt.json, ...), inline or from ConfigMaps; status reports the tables it declares and its digest.",
    plural = "p4programs",
    shortname = "p4p",
    namespaced,
    status = "P4ProgramStatus",
    category = "p4fleet",
    printcolumn = r#"{"name":"Targets","type":"string","jsonPath":".status.targets"}"#,
    printcolumn = r#"{"name":"Tables","type":"integer","jsonPath":".status.tableCount"}"#,
    printcolumn = r#"{"name":"Digest","type":"string","jsonPath":".status.shortDigest"}"#,
    printcolumn = r#"{"name":"Current","type":"integer","jsonPath":".status.currentRevision.revision"}"#,
    printcolumn = r#"{"name":"Updated","type":"integer","jsonPath":".status.updateRevision.revision"}"#,
    printcolumn = r#"{"name":"Rollout","type":"string","jsonPath":".status.rollout.phase"}"#,
    printcolumn = r#"{"name":"Step","type":"integer","jsonPath":".status.rollout.step","priority":1}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Reason","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].reason","priority":1}"#,
    printcolumn = r#"{"name":"Message","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].message","priority":1}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct P4ProgramSpec {
    /// P4Info in protobuf text format (as p4c's `--p4runtime-files x.p4info.txt` writes it).
    pub p4info: ArtifactSource,
    /// Artifacts per target kind; a program may carry several.
    #[serde(default)]
    pub artifacts: ProgramArtifacts,
    /// Old revisions kept besides those in use (the update revision, the
    /// current one, and any a VirtualSwitch still runs); default 10.
    /// Each revision is a ControllerRevision with the program's bytes
    /// snapshotted into immutable ConfigMaps (docs/rollouts.md).
    #[schemars(range(min = 0, max = 100))]
    pub revision_history_limit: Option<u32>,
    /// How a new revision reaches the VirtualSwitches running the
    /// program: all at once (the default), or as a Canary in steps with a
    /// health gate after each (docs/rollouts.md).
    pub rollout: Option<crate::rollout::Rollout>,
    /// Plan only: a changed content is not rolled out; `status.plan` says
    /// which VirtualSwitches would reload and how, and which tables keep
    /// their entries. Set it back to false to roll it out (docs/plans.md).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub plan: bool,
}

/// Per-target pipeline artifacts.
#[serde_with::skip_serializing_none]
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProgramArtifacts {
    /// bmv2 (simple_switch_grpc): the JSON p4c writes.
    pub bmv2: Option<Bmv2Artifacts>,
    /// Tofino: bfrt.json, context.json and the binary (tofino.bin).
    pub tofino: Option<TofinoArtifacts>,
    /// DPDK (infrap4d / T4P4S): the pipeline spec and context.
    pub dpdk: Option<DpdkArtifacts>,
    /// FPGA: a partial bitstream for one slot and what it occupies.
    pub fpga: Option<FpgaArtifacts>,
}

/// bmv2 artifacts.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Bmv2Artifacts {
    /// The bmv2 JSON.
    pub json: ArtifactSource,
}

/// Tofino artifacts.
#[serde_with::skip_serializing_none]
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TofinoArtifacts {
    /// bfrt.json: the BF Runtime table schema.
    pub bfrt_json: ArtifactSource,
    /// context.json of the pipe.
    pub context_json: Option<ArtifactSource>,
    /// tofino.bin, from a ConfigMap's binaryData.
    pub binary: Option<ArtifactSource>,
    /// Pipe names the program is loaded into (default `pipe`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pipes: Vec<String>,
}

/// DPDK artifacts.
#[serde_with::skip_serializing_none]
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DpdkArtifacts {
    /// The `.spec` pipeline description.
    pub spec: ArtifactSource,
    /// The context JSON (p4c-dpdk's `--context`); a P4Runtime Dpdk Switch
    /// (infrap4d) needs it.
    pub context: Option<ArtifactSource>,
    /// The bfrt.json (p4c-dpdk's `--bf-rt-schema`); a P4Runtime Dpdk
    /// Switch (infrap4d) needs it.
    pub bfrt_json: Option<ArtifactSource>,
}

/// FPGA artifacts.
#[serde_with::skip_serializing_none]
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FpgaArtifacts {
    /// Partial bitstream for one slot, from a ConfigMap's binaryData.
    pub bitstream: ArtifactSource,
    /// Size of the bitstream in bits (used to estimate reconfiguration time).
    #[schemars(range(min = 1))]
    pub bits: Option<u64>,
    /// Resources one instance occupies, e.g. `luts: 52000`, `ffs: 61000`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub resources: BTreeMap<String, u64>,
}

/// Observed state of a P4Program.
#[serde_with::skip_serializing_none]
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct P4ProgramStatus {
    /// Generation of the spec last acted upon.
    pub observed_generation: Option<i64>,
    /// Conditions: Valid, ResolvedRefs, Ready.
    #[serde(default)]
    #[schemars(schema_with = "conditions_schema")]
    pub conditions: Vec<Condition>,
    /// sha256 of the P4Info and all artifacts; used as the pipeline cookie.
    pub digest: Option<String>,
    /// First 12 hex digits of the digest, for printing.
    pub short_digest: Option<String>,
    /// Target kinds this program has artifacts for, comma separated.
    pub targets: Option<String>,
    /// Number of tables in the P4Info.
    pub table_count: Option<u32>,
    /// Tables found in the P4Info.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tables: Vec<TableInfo>,
    /// Actions found in the P4Info.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub actions: Vec<String>,
    /// The revision of the program's content in force (its digest): what
    /// VirtualSwitches are moved to.
    pub update_revision: Option<RevisionRef>,
    /// The revision every VirtualSwitch running the program runs; it
    /// differs from the update revision while a change reaches them.
    pub current_revision: Option<RevisionRef>,
    /// The last Canary rollout's progress (docs/rollouts.md).
    pub rollout: Option<crate::rollout::RolloutStatus>,
    /// What rolling out the changed content would do, while `spec.plan`
    /// holds it (docs/plans.md).
    pub plan: Option<ProgramPlan>,
}

/// What rolling out a changed program content would do.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProgramPlan {
    /// Short digest of the content in force.
    pub from: String,
    /// Short digest of the content planned.
    pub to: String,
    /// Tables whose definition is unchanged: a hitless load
    /// (RECONCILE_AND_COMMIT) keeps their entries.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tables_kept: Vec<String>,
    /// Tables in both whose definition changed: they start empty and
    /// their sets write them again.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tables_changed: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tables_added: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tables_removed: Vec<String>,
    /// Every VirtualSwitch running the program.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub virtual_switches: Vec<VirtualSwitchPlan>,
    /// TableEntrySets that fill a removed table: they would become
    /// `TableNotInProgram` (and hold the change, docs/rollouts.md).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sets_losing_table: Vec<String>,
}

/// What one VirtualSwitch would do.
#[serde_with::skip_serializing_none]
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VirtualSwitchPlan {
    pub name: String,
    /// Its Switch (absent while it is not placed).
    pub switch: Option<String>,
    /// `Hitless` (P4Runtime, HotSwap: RECONCILE_AND_COMMIT, unchanged
    /// tables keep their entries; a replace if the target refuses),
    /// `PartialReconfiguration` (Fpga, HotSwap: this slot only),
    /// `Replace` (Recreate, or BFRT: every table starts empty),
    /// `None` (it runs the planned content already, or is not placed).
    pub load: String,
}

/// One revision of a program's content, kept as a ControllerRevision.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RevisionRef {
    /// Name of the ControllerRevision (`<program>-<first 16 digest digits>`).
    pub name: String,
    /// Revision number: increases with every content change (a content
    /// seen before takes the next number again, as a Deployment does).
    pub revision: i64,
    /// The content's digest (sha256, hex), as in `status.digest`.
    pub digest: String,
}

/// A table of the program.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TableInfo {
    /// Fully qualified name, e.g. `MyIngress.firewall`.
    pub name: String,
    /// P4Info id.
    pub id: u32,
    /// Maximum number of entries.
    #[serde(default)]
    pub size: i64,
    /// Match fields as `name:kind:bits`.
    #[serde(default)]
    pub match_fields: Vec<String>,
    /// Actions the table accepts.
    #[serde(default)]
    pub actions: Vec<String>,
}
