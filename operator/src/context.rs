//! Shared state handed to every reconciler.

use std::sync::Arc;
use std::time::Duration;

use crate::driver::DriverPool;
use crate::metrics::Metrics;

/// Operator-wide settings from the command line.
#[derive(Clone, Debug)]
pub struct OperatorConfig {
    /// Default period of drift checks and idle requeues.
    pub resync: Duration,
    /// Identity written into Events and field managers.
    pub reporter: String,
}

impl Default for OperatorConfig {
    fn default() -> Self {
        OperatorConfig {
            resync: Duration::from_secs(60),
            reporter: "p4fleet".into(),
        }
    }
}

/// Everything a reconcile needs; cheap to clone behind an Arc.
pub struct Context {
    pub client: kube::Client,
    pub config: OperatorConfig,
    pub metrics: Arc<Metrics>,
    /// One long-lived connection per Switch, shared by all reconcilers.
    pub drivers: DriverPool,
}
