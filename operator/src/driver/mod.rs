//! Device drivers: one long-lived connection per Switch, shared by all reconcilers.
//! (Placeholder: the P4Runtime driver lands here.)

/// Connections to devices, keyed by Switch name.
#[derive(Default)]
pub struct DriverPool {}
