//! Prometheus metrics (placeholder: filled in by the runtime work).

/// Operator metrics.
#[derive(Default)]
pub struct Metrics {}
