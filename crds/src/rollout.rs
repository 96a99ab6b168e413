//! How a change reaches a fleet: `spec.rollout` of a P4Program (strategy,
//! steps, health gate, pause, pin) and the progress the operator keeps in
//! `status.rollout`, so that a restarted or new leader resumes it.
//! docs/rollouts.md has the model.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// How a new revision reaches the VirtualSwitches that run the program.
#[serde_with::skip_serializing_none]
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "!has(self.strategy) || self.strategy != 'Canary' || (has(self.steps) && size(self.steps) > 0)",
     "message": "strategy Canary needs steps, ending with {percent: 100}"},
    {"rule": "!has(self.steps) || size(self.steps) == 0 || (has(self.strategy) && self.strategy == 'Canary')",
     "message": "steps are only used by strategy Canary"},
    {"rule": "!has(self.steps) || size(self.steps) == 0 || (has(self.steps[size(self.steps) - 1].percent) && self.steps[size(self.steps) - 1].percent == 100)",
     "message": "the last step must be {percent: 100}: a rollout ends with every VirtualSwitch on the new revision"},
    {"rule": "!has(self.maxUnavailable) || self.maxUnavailable > 0",
     "message": "maxUnavailable 0 would never move a VirtualSwitch: give at least 1"}
]))]
pub struct Rollout {
    /// AllAtOnce (the default): every VirtualSwitch loads a new revision
    /// at once, with no gate. Canary: in `steps`, each followed by a
    /// health gate; a failed gate rolls the moved ones back.
    #[serde(default)]
    pub strategy: RolloutStrategy,
    /// Canary only: the steps, in order. A step moves VirtualSwitches
    /// (`switches` or `percent`, counted from the start of the rollout),
    /// or pauses. The last is `{percent: 100}`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub steps: Vec<RolloutStep>,
    /// VirtualSwitches of a step that may be loading or not yet healthy at
    /// once (default 1): a step of ten moves them one at a time.
    #[schemars(range(min = 0, max = 10000))]
    pub max_unavailable: Option<u32>,
    /// The health gate after every moving step.
    pub analysis: Option<Analysis>,
    /// Stops the rollout where it is (nothing more moves, nothing is
    /// rolled back) until set to false again.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub paused: bool,
    /// Run this revision (a number from `kubectl get controllerrevisions`
    /// or `status.updateRevision`) instead of the newest: a rollback from
    /// Git, through the same steps. Unset: the newest revision.
    #[schemars(range(min = 1))]
    pub pin_revision: Option<i64>,
    /// A step whose VirtualSwitches are not all healthy this long after it
    /// started fails its gate (a device that went away does not hang the
    /// rollout); default 600.
    #[schemars(range(min = 1, max = 86400))]
    pub progress_deadline_seconds: Option<u32>,
}

/// How a rollout proceeds.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum RolloutStrategy {
    /// Every VirtualSwitch at once, no gate (as before rollouts existed).
    #[default]
    AllAtOnce,
    /// In steps, each gated on the health of what it moved.
    Canary,
}

/// One step of a Canary rollout: exactly one of `switches`, `percent`
/// and `pause`.
#[serde_with::skip_serializing_none]
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "(has(self.switches) ? 1 : 0) + (has(self.percent) ? 1 : 0) + (has(self.pause) ? 1 : 0) == 1",
     "message": "a step is exactly one of switches, percent or pause"}
]))]
pub struct RolloutStep {
    /// After this step, this many VirtualSwitches (in rollout order) run
    /// the new revision; `1` is a canary.
    #[schemars(range(min = 1, max = 100000))]
    pub switches: Option<u32>,
    /// After this step, this share of the VirtualSwitches (rounded up)
    /// runs the new revision.
    #[schemars(range(min = 1, max = 100))]
    pub percent: Option<u32>,
    /// Wait: for `duration`, or, without one, until resumed (the
    /// annotation `p4fleet.dev/rollout-resume`, docs/rollouts.md).
    pub pause: Option<Pause>,
}

/// A pause step.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Pause {
    /// How long, as a Go duration (`30s`, `5m`, `1h30m`); absent: until
    /// resumed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 32), extend("x-kubernetes-validations" = [
        {"rule": "duration(self) >= duration('0s')",
         "message": "a pause's duration must not be negative, e.g. 30s or 5m"}
    ]))]
    pub duration: Option<String>,
}

/// The health gate: what must hold for every VirtualSwitch a step moved,
/// over an analysis window, before the next step.
#[serde_with::skip_serializing_none]
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Analysis {
    /// How long the moved VirtualSwitches must stay healthy after they all
    /// became so (default 0: the checks are made once).
    #[schemars(range(min = 0, max = 86400))]
    pub seconds: Option<u32>,
    /// Where the target reports data-plane throughput: the least share of
    /// its packets/s before the step it may fall to (e.g. 0.9). Absent: not
    /// checked.
    #[schemars(range(min = 0.0, max = 1.0))]
    pub min_throughput_ratio: Option<f64>,
}

/// Where a rollout stands.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum RolloutPhase {
    /// Moving VirtualSwitches, or watching the ones moved.
    #[default]
    Progressing,
    /// At a pause step, or `spec.rollout.paused`.
    Paused,
    /// Every VirtualSwitch runs the new revision and the last gate passed.
    Completed,
    /// A gate failed: the moved VirtualSwitches were sent back to the
    /// revision before; the failed revision is not tried again.
    RolledBack,
}

/// A revision as a rollout names it.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RolloutRevision {
    pub revision: i64,
    pub digest: String,
}

/// What became of a VirtualSwitch a rollout moved.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum MovedState {
    /// Assigned the new revision; not (yet) healthy.
    Moving,
    /// Passed the gate's checks.
    Healthy,
    /// Its check failed.
    Failed,
    /// Sent back to the revision before.
    RolledBack,
}

/// A VirtualSwitch a rollout moved (in the order it moved them).
#[serde_with::skip_serializing_none]
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MovedSwitch {
    /// The VirtualSwitch (the program's namespace).
    pub virtual_switch: String,
    /// The Switch it ran on when moved.
    pub switch: Option<String>,
    /// The step that moved it (0-based).
    pub step: u32,
    pub state: MovedState,
    /// Its data-plane packets/s when it was moved, where the target
    /// reports it (the throughput check compares against this).
    pub packets_per_second_before: Option<u64>,
}

/// The check of a gate that failed, and where.
#[serde_with::skip_serializing_none]
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GateFailure {
    /// PipelineLoaded, EntriesReapplied, SwitchReachable, Throughput or
    /// ProgressDeadline.
    pub check: String,
    pub virtual_switch: String,
    pub switch: Option<String>,
    /// What it compared.
    pub message: String,
}

/// A rollout's progress, kept in the API so that a restarted operator
/// resumes it without skipping or repeating a VirtualSwitch.
#[serde_with::skip_serializing_none]
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RolloutStatus {
    pub phase: RolloutPhase,
    /// The revision rolled out from (the last good one), if any ran.
    pub from: Option<RolloutRevision>,
    /// The revision rolled out.
    pub to: RolloutRevision,
    /// The current step (0-based; the number of steps once done).
    pub step: u32,
    /// When the current step started (RFC 3339).
    pub step_started_at: String,
    /// When every VirtualSwitch of the current step was first healthy:
    /// the analysis window runs from here.
    pub healthy_since: Option<String>,
    /// When the rollout last made progress (a VirtualSwitch moved or
    /// turned healthy, a step passed): `progressDeadlineSeconds` counts
    /// from here.
    pub progressed_at: Option<String>,
    /// VirtualSwitches on the new revision, healthy, still to move, and
    /// sent back.
    pub updated: u32,
    pub healthy: u32,
    pub pending: u32,
    pub rolled_back: u32,
    /// The VirtualSwitches moved, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub moved: Vec<MovedSwitch>,
    /// Why it rolled back.
    pub failure: Option<GateFailure>,
    /// When the rollout started and ended (RFC 3339).
    pub started_at: String,
    pub finished_at: Option<String>,
}
