//! What the controllers share about the fleet, so that no controller
//! reaches into another's module: slot claims as recorded on Switches,
//! which sets fill which VirtualSwitch, the hold on a program change that
//! would remove tables sets still fill, the extern runtime that the
//! Switch controller probes and AsyncExternPolicies apply through, and a
//! program's revisions (written by the P4Program controller, loaded by
//! VirtualSwitches) and a TableEntrySet's entry revisions, and the
//! data-plane rates a rollout's gate compares.

pub mod entry_revisions;
pub mod extern_runtime;
pub mod fills;
pub mod program_hold;
pub mod program_plan;
pub mod revisions;
pub mod rollout;
pub mod slot_claims;
pub mod throughput;
