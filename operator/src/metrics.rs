//! Prometheus metrics (prometheus-client), served as text on `/metrics`.
//!
//! One registry per operator process. Reconcilers record through the helpers
//! ([`Metrics::reconcile`], [`Metrics::reconcile_error`]); the write path records
//! entries and requests through the public families.

use std::time::{Duration, Instant};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Label: resource kind (`Switch`, `P4Program`, ...).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabel {
    pub kind: String,
}

/// Labels: resource kind and a short error reason.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    pub kind: String,
    pub reason: String,
}

/// Labels: update operation (`insert`, `modify`, `delete`) on a switch.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WriteLabels {
    pub switch: String,
    pub op: String,
}

/// Label: switch name.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SwitchLabel {
    pub switch: String,
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

fn reconcile_histogram() -> Histogram {
    // 1 ms .. ~33 s
    Histogram::new(exponential_buckets(0.001, 2.0, 16))
}

fn request_histogram() -> Histogram {
    // 50 µs .. ~1.6 s
    Histogram::new(exponential_buckets(0.000_05, 2.0, 16))
}

/// All operator metrics plus the registry they are encoded from.
pub struct Metrics {
    registry: Registry,
    /// Reconciles started, by kind.
    pub reconciles: Family<KindLabel, Counter>,
    /// Reconciles that returned an error, by kind and reason.
    pub reconcile_errors: Family<ErrorLabels, Counter>,
    /// Reconcile duration in seconds, by kind.
    pub reconcile_duration: HistogramFamily<KindLabel>,
    /// Status writes actually sent (idle reconciles skip them), by kind.
    pub status_writes: Family<KindLabel, Counter>,
    /// Table entry updates the device accepted, by switch and op.
    pub entries_written: Family<WriteLabels, Counter>,
    /// Table entry updates the device refused, by switch and op.
    pub entries_failed: Family<WriteLabels, Counter>,
    /// Write RPCs sent, by switch.
    pub write_requests: Family<SwitchLabel, Counter>,
    /// Write RPC latency in seconds, by switch.
    pub write_request_duration: HistogramFamily<SwitchLabel>,
    /// SetForwardingPipelineConfig calls that loaded a pipeline, by switch.
    pub pipeline_loads: Family<SwitchLabel, Counter>,
    /// 1 when the switch's connection is up, by switch.
    pub switch_connected: Family<SwitchLabel, Gauge>,
    /// 1 while this replica holds the leader lease (or runs without election).
    pub leader: Gauge,
    /// TableEntrySet ConfigMap sources: fetches, parses, cache size.
    pub entry_sources: crate::entry_sources::SourceMetrics,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("p4fleet");
        let m = Metrics {
            reconciles: Family::default(),
            reconcile_errors: Family::default(),
            reconcile_duration: Family::new_with_constructor(reconcile_histogram),
            status_writes: Family::default(),
            entries_written: Family::default(),
            entries_failed: Family::default(),
            write_requests: Family::default(),
            write_request_duration: Family::new_with_constructor(request_histogram),
            pipeline_loads: Family::default(),
            switch_connected: Family::default(),
            leader: Gauge::default(),
            entry_sources: Default::default(),
            registry: Registry::default(),
        };
        m.entry_sources.register(&mut registry);
        registry.register("reconciles", "Reconciles started", m.reconciles.clone());
        registry.register(
            "reconcile_errors",
            "Reconciles that failed",
            m.reconcile_errors.clone(),
        );
        registry.register(
            "reconcile_duration_seconds",
            "Reconcile duration",
            m.reconcile_duration.clone(),
        );
        registry.register(
            "status_writes",
            "Status updates sent to the API server",
            m.status_writes.clone(),
        );
        registry.register(
            "entries_written",
            "Table entry updates accepted by devices",
            m.entries_written.clone(),
        );
        registry.register(
            "entries_failed",
            "Table entry updates refused by devices",
            m.entries_failed.clone(),
        );
        registry.register(
            "write_requests",
            "Write RPCs sent to devices",
            m.write_requests.clone(),
        );
        registry.register(
            "write_request_duration_seconds",
            "Write RPC latency",
            m.write_request_duration.clone(),
        );
        registry.register(
            "pipeline_loads",
            "Pipelines loaded onto devices",
            m.pipeline_loads.clone(),
        );
        registry.register(
            "switch_connected",
            "Whether the device connection is up",
            m.switch_connected.clone(),
        );
        registry.register(
            "leader",
            "Whether this replica runs the controllers",
            m.leader.clone(),
        );
        Metrics { registry, ..m }
    }

    /// Registers an extra metric (e.g. from the driver) under the `p4fleet_` prefix.
    /// Only possible before the Metrics are shared.
    pub fn register(
        &mut self,
        name: &str,
        help: &str,
        metric: impl prometheus_client::registry::Metric,
    ) {
        self.registry.register(name, help, metric);
    }

    /// Counts a reconcile of `kind`; the returned guard records its duration when dropped.
    pub fn reconcile(&self, kind: &str) -> ReconcileTimer<'_> {
        let label = KindLabel { kind: kind.into() };
        self.reconciles.get_or_create(&label).inc();
        ReconcileTimer {
            metrics: self,
            label,
            start: Instant::now(),
        }
    }

    /// Counts a failed reconcile.
    pub fn reconcile_error(&self, kind: &str, reason: &str) {
        self.reconcile_errors
            .get_or_create(&ErrorLabels {
                kind: kind.into(),
                reason: reason.into(),
            })
            .inc();
    }

    /// Counts a status write.
    pub fn status_write(&self, kind: &str) {
        self.status_writes
            .get_or_create(&KindLabel { kind: kind.into() })
            .inc();
    }

    /// Records one Write RPC: its latency and the accepted/refused updates.
    /// Removes every series of a Switch (deleted): a gone Switch is not
    /// "disconnected", it has no series at all.
    pub fn forget_switch(&self, switch: &str) {
        let s = SwitchLabel {
            switch: switch.into(),
        };
        self.write_requests.remove(&s);
        self.write_request_duration.remove(&s);
        self.pipeline_loads.remove(&s);
        self.switch_connected.remove(&s);
        for op in ["delete", "write"] {
            let w = WriteLabels {
                switch: switch.into(),
                op: op.into(),
            };
            self.entries_written.remove(&w);
            self.entries_failed.remove(&w);
        }
    }

    pub fn write_request(&self, switch: &str, op: &str, ok: u64, failed: u64, took: Duration) {
        let s = SwitchLabel {
            switch: switch.into(),
        };
        self.write_requests.get_or_create(&s).inc();
        self.write_request_duration
            .get_or_create(&s)
            .observe(took.as_secs_f64());
        let w = WriteLabels {
            switch: switch.into(),
            op: op.into(),
        };
        if ok > 0 {
            self.entries_written.get_or_create(&w).inc_by(ok);
        }
        if failed > 0 {
            self.entries_failed.get_or_create(&w).inc_by(failed);
        }
    }

    /// Prometheus text exposition of every metric.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

/// Records a reconcile's duration on drop.
pub struct ReconcileTimer<'a> {
    metrics: &'a Metrics,
    label: KindLabel,
    start: Instant,
}

impl Drop for ReconcileTimer<'_> {
    fn drop(&mut self) {
        self.metrics
            .reconcile_duration
            .get_or_create(&self.label)
            .observe(self.start.elapsed().as_secs_f64());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_reconciles_and_writes() {
        let m = Metrics::new();
        {
            let _t = m.reconcile("Switch");
        }
        m.reconcile_error("Switch", "Kube");
        m.write_request("sw1", "insert", 10, 1, Duration::from_millis(2));
        let text = m.encode();
        assert!(
            text.contains("p4fleet_reconciles_total{kind=\"Switch\"} 1"),
            "{text}"
        );
        assert!(text.contains("p4fleet_reconcile_errors_total{kind=\"Switch\",reason=\"Kube\"} 1"));
        assert!(text.contains("p4fleet_entries_written_total{switch=\"sw1\",op=\"insert\"} 10"));
        assert!(text.contains("p4fleet_reconcile_duration_seconds_count{kind=\"Switch\"} 1"));
        assert!(text.ends_with("# EOF\n"));
    }

    #[test]
    fn a_forgotten_switch_has_no_series() {
        let m = Metrics::new();
        m.write_request("sw1", "write", 10, 0, Duration::from_millis(2));
        m.write_request("sw2", "write", 1, 0, Duration::from_millis(2));
        for sw in ["sw1", "sw2"] {
            let s = SwitchLabel { switch: sw.into() };
            m.switch_connected.get_or_create(&s).set(1);
        }
        m.forget_switch("sw1");
        let text = m.encode();
        assert!(!text.contains("switch=\"sw1\""), "{text}");
        assert!(
            text.contains("p4fleet_switch_connected{switch=\"sw2\"} 1"),
            "{text}"
        );
    }
}
