//! The P4Runtime state of one device: its pipeline (with the table
//! contents) and its arbitration, each behind its own lock so that
//! arbitration never waits for a Write batch.

use std::sync::Mutex;

use super::arbitration::Arbitration;
use super::pipeline_config::PipelineState;

#[derive(Default)]
pub(crate) struct P4RuntimeDevice {
    pub pipeline: Mutex<PipelineState>,
    pub arbitration: Mutex<Arbitration>,
    /// Wakes the device's ticker (digest lists, idle timeouts).
    pub notifier: super::notifier::Notifier,
}
