//! Prometheus metrics (prometheus-client), served as text on `/metrics`.
//! docs/metrics.md lists every metric, its type, unit and labels.
//!
//! One registry per operator process. Reconcilers record through the helpers
//! ([`Metrics::reconcile`], [`Metrics::reconcile_error`], [`Metrics::entry_set`]);
//! the write path through [`Metrics::write_rpc`], which the device pool calls
//! once per Write RPC (`DevicePool::observe_writes`). Label sets known up
//! front (kinds and error reasons; a Switch's ops once it is seen) are
//! created at zero, so `rate()` and alerts see a series before the first
//! error; the series of a deleted Switch or TableEntrySet are removed.

use std::time::Instant;

use p4fleet_client::WriteRpc;
use p4fleet_crds::TableEntrySetStatus;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::process_metrics::ProcessCollector;

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

/// Labels: update type (`insert`, `modify`, `delete`) on a switch.
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

/// Label: what a check found.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabel {
    pub outcome: String,
}

/// Labels: a TableEntrySet.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SetLabels {
    pub namespace: String,
    pub name: String,
}

/// Labels of `build_info`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BuildLabels {
    pub version: String,
    pub commit: String,
}

/// The `op` label values, one per P4Runtime update type.
pub const OPS: [&str; 3] = ["insert", "modify", "delete"];

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
    /// `process_*` (no `p4fleet_` prefix, as every exporter names them).
    process: Registry,
    /// Reconciles started, by kind.
    pub reconciles: Family<KindLabel, Counter>,
    /// Reconciles that returned an error, by kind and reason.
    pub reconcile_errors: Family<ErrorLabels, Counter>,
    /// Reconciles that lost an optimistic-concurrency race (not errors:
    /// retried quietly), by kind.
    pub reconcile_conflicts: Family<KindLabel, Counter>,
    /// Reconcile duration in seconds, by kind.
    pub reconcile_duration: HistogramFamily<KindLabel>,
    /// Status writes actually sent (idle reconciles skip them), by kind.
    pub status_writes: Family<KindLabel, Counter>,
    /// Table entry updates the device accepted, by switch and op.
    pub entries_written: Family<WriteLabels, Counter>,
    /// Table entry updates the device refused, by switch and op.
    pub entries_failed: Family<WriteLabels, Counter>,
    /// Write RPCs sent (answered or not), by switch.
    pub write_requests: Family<SwitchLabel, Counter>,
    /// Write RPCs that failed as a whole (no per-update answer), by switch.
    pub write_requests_failed: Family<SwitchLabel, Counter>,
    /// Write RPC latency in seconds, by switch.
    pub write_request_duration: HistogramFamily<SwitchLabel>,
    /// SetForwardingPipelineConfig calls that loaded a pipeline, by switch.
    pub pipeline_loads: Family<SwitchLabel, Counter>,
    /// 1 when the switch's connection is up, by switch.
    pub switch_connected: Family<SwitchLabel, Gauge>,
    /// Drift probes between Switch reconciles, by what they found.
    pub drift_probes: Family<OutcomeLabel, Counter>,
    /// TableEntrySet resyncs answered by the read-back alone, by outcome.
    pub entry_set_rechecks: Family<OutcomeLabel, Counter>,
    /// 1 while this replica holds the leader lease (or runs without election).
    pub leader: Gauge,
    /// TableEntrySet ConfigMap sources: fetches, parses, cache size.
    pub entry_sources: crate::entry_sources::SourceMetrics,
    /// Always 1; the labels say which build runs.
    pub build_info: Family<BuildLabels, Gauge>,
    /// Per TableEntrySet, from its last status: desired, applied and failed
    /// entries, Ready, and the rate and size of its last sync that wrote.
    pub set_desired: Family<SetLabels, Gauge>,
    pub set_applied: Family<SetLabels, Gauge>,
    pub set_failed: Family<SetLabels, Gauge>,
    pub set_ready: Family<SetLabels, Gauge>,
    pub set_rate: Family<SetLabels, Gauge>,
    pub set_sync_updates: Family<SetLabels, Gauge>,
    /// Direct counter readouts of TableEntrySets (`crate::counter_metrics`).
    pub counters: crate::counter_metrics::CounterMetrics,
    /// Digest lists and idle timeout notifications (`crate::notice_metrics`).
    pub notices: crate::notice_metrics::NoticeMetrics,
    /// P4Program rollouts (`crate::rollout_metrics`).
    pub(crate) rollouts: crate::rollout_metrics::RolloutMetrics,
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
            reconcile_conflicts: Family::default(),
            reconcile_duration: Family::new_with_constructor(reconcile_histogram),
            status_writes: Family::default(),
            entries_written: Family::default(),
            entries_failed: Family::default(),
            write_requests: Family::default(),
            write_requests_failed: Family::default(),
            write_request_duration: Family::new_with_constructor(request_histogram),
            pipeline_loads: Family::default(),
            switch_connected: Family::default(),
            drift_probes: Family::default(),
            entry_set_rechecks: Family::default(),
            leader: Gauge::default(),
            entry_sources: Default::default(),
            build_info: Family::default(),
            set_desired: Family::default(),
            set_applied: Family::default(),
            set_failed: Family::default(),
            set_ready: Family::default(),
            set_rate: Family::default(),
            set_sync_updates: Family::default(),
            counters: Default::default(),
            notices: Default::default(),
            rollouts: Default::default(),
            registry: Registry::default(),
            process: Registry::default(),
        };
        m.entry_sources.register(&mut registry);
        m.counters.register(&mut registry);
        m.notices.register(&mut registry);
        m.rollouts.register(&mut registry);
        let r = &mut registry;
        r.register("reconciles", "Reconciles started", m.reconciles.clone());
        r.register(
            "reconcile_triggers",
            "Reconciles started, by what triggered them",
            crate::reconcile_triggers::counts().clone(),
        );
        r.register(
            "reconcile_errors",
            "Reconciles that failed",
            m.reconcile_errors.clone(),
        );
        r.register(
            "reconcile_conflicts",
            "Reconciles that lost a race with another write of their object and were retried",
            m.reconcile_conflicts.clone(),
        );
        r.register(
            "reconcile_duration_seconds",
            "Reconcile duration",
            m.reconcile_duration.clone(),
        );
        r.register(
            "status_writes",
            "Status updates sent to the API server",
            m.status_writes.clone(),
        );
        r.register(
            "entries_written",
            "Table entry updates accepted by devices",
            m.entries_written.clone(),
        );
        r.register(
            "entries_failed",
            "Table entry updates refused by devices",
            m.entries_failed.clone(),
        );
        r.register(
            "write_requests",
            "Write RPCs sent to devices",
            m.write_requests.clone(),
        );
        r.register(
            "write_requests_failed",
            "Write RPCs that failed as a whole",
            m.write_requests_failed.clone(),
        );
        r.register(
            "write_request_duration_seconds",
            "Write RPC latency",
            m.write_request_duration.clone(),
        );
        r.register(
            "pipeline_loads",
            "Pipelines loaded onto devices",
            m.pipeline_loads.clone(),
        );
        r.register(
            "switch_connected",
            "Whether the device connection is up",
            m.switch_connected.clone(),
        );
        r.register(
            "drift_probes",
            "Device probes between Switch reconciles, by outcome",
            m.drift_probes.clone(),
        );
        r.register(
            "entry_set_rechecks",
            "TableEntrySet resyncs that were a read-back alone, by outcome",
            m.entry_set_rechecks.clone(),
        );
        r.register(
            "leader",
            "Whether this replica runs the controllers",
            m.leader.clone(),
        );
        r.register(
            "build_info",
            "The running build (always 1)",
            m.build_info.clone(),
        );
        let set = [
            (
                "desired_entries",
                "Entries the set asks for",
                &m.set_desired,
            ),
            (
                "applied_entries",
                "Entries of the set on its devices",
                &m.set_applied,
            ),
            (
                "failed_entries",
                "Entries of the set that failed to parse or were refused",
                &m.set_failed,
            ),
            ("ready", "Whether the set is Ready", &m.set_ready),
            (
                "last_sync_entries_per_second",
                "Entries per second of the set's last sync that wrote entries",
                &m.set_rate,
            ),
            (
                "last_sync_updates",
                "Updates written by the set's last sync that wrote entries",
                &m.set_sync_updates,
            ),
        ];
        for (name, help, family) in set {
            r.register(format!("table_entry_set_{name}"), help, family.clone());
        }
        m.build_info
            .get_or_create(&BuildLabels {
                version: env!("CARGO_PKG_VERSION").into(),
                commit: env!("P4FLEET_COMMIT").into(),
            })
            .set(1);
        let mut process = Registry::default();
        process.register_collector(Box::new(ProcessCollector));
        Metrics {
            registry,
            process,
            ..m
        }
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

    /// Creates the series of a controller's kind at zero: its reconciles,
    /// status writes and each reconcile error `reason`.
    pub fn kind_known(&self, kind: &str, reasons: &[&str]) {
        let label = KindLabel { kind: kind.into() };
        let _ = self.reconciles.get_or_create(&label);
        let _ = self.status_writes.get_or_create(&label);
        let _ = self.reconcile_conflicts.get_or_create(&label);
        for reason in reasons {
            let _ = self.reconcile_errors.get_or_create(&ErrorLabels {
                kind: kind.into(),
                reason: (*reason).into(),
            });
        }
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

    /// Counts a reconcile that lost a race with another write.
    pub fn reconcile_conflict(&self, kind: &str) {
        let label = KindLabel { kind: kind.into() };
        self.reconcile_conflicts.get_or_create(&label).inc();
    }

    /// Counts a status write.
    /// Counts a drift probe (`controllers::drift_probe`) by its verdict.
    pub fn drift_probe(&self, verdict: &crate::controllers::switch::drift_probe::Verdict) {
        use crate::controllers::switch::drift_probe::Verdict;
        let outcome = match verdict {
            Verdict::Confirmed => "confirmed",
            Verdict::Changed(_) => "changed",
            Verdict::Dropped => "dropped",
        };
        self.drift_probes
            .get_or_create(&OutcomeLabel {
                outcome: outcome.into(),
            })
            .inc();
    }

    /// A TableEntrySet recheck: `held` (every target held its entries)
    /// or `differed` (the full sync runs).
    pub fn entry_set_recheck(&self, held: bool) {
        let outcome = if held { "held" } else { "differed" };
        self.entry_set_rechecks
            .get_or_create(&OutcomeLabel {
                outcome: outcome.into(),
            })
            .inc();
    }

    pub fn status_write(&self, kind: &str) {
        self.status_writes
            .get_or_create(&KindLabel { kind: kind.into() })
            .inc();
    }

    /// Sets a Switch's connection gauge and creates its write series at
    /// zero (so an error rate exists before the first error).
    pub fn switch_seen(&self, switch: &str, connected: bool) {
        let s = SwitchLabel {
            switch: switch.into(),
        };
        self.switch_connected
            .get_or_create(&s)
            .set(i64::from(connected));
        let _ = self.write_requests.get_or_create(&s);
        let _ = self.write_requests_failed.get_or_create(&s);
        let _ = self.pipeline_loads.get_or_create(&s);
        for op in OPS {
            let w = write_labels(switch, op);
            let _ = self.entries_written.get_or_create(&w);
            let _ = self.entries_failed.get_or_create(&w);
        }
    }

    /// Removes every series of a Switch (deleted): a gone Switch is not
    /// "disconnected", it has no series at all.
    pub fn forget_switch(&self, switch: &str) {
        let s = SwitchLabel {
            switch: switch.into(),
        };
        self.write_requests.remove(&s);
        self.write_requests_failed.remove(&s);
        self.write_request_duration.remove(&s);
        self.pipeline_loads.remove(&s);
        self.switch_connected.remove(&s);
        for op in OPS {
            let w = write_labels(switch, op);
            self.entries_written.remove(&w);
            self.entries_failed.remove(&w);
        }
    }

    /// Records one Write RPC of `switch`'s device: one request, one
    /// latency sample, its updates by type.
    pub fn write_rpc(&self, switch: &str, rpc: &WriteRpc) {
        let s = SwitchLabel {
            switch: switch.into(),
        };
        self.write_requests.get_or_create(&s).inc();
        if rpc.failed.is_some() {
            self.write_requests_failed.get_or_create(&s).inc();
        }
        self.write_request_duration
            .get_or_create(&s)
            .observe(rpc.latency.as_secs_f64());
        let (sent, refused) = (rpc.sent, rpc.refused);
        for (op, sent, refused) in [
            ("insert", sent.insert, refused.insert),
            ("modify", sent.modify, refused.modify),
            ("delete", sent.delete, refused.delete),
        ] {
            if sent == 0 {
                continue;
            }
            let w = write_labels(switch, op);
            self.entries_written
                .get_or_create(&w)
                .inc_by(sent.saturating_sub(refused));
            if refused > 0 {
                self.entries_failed.get_or_create(&w).inc_by(refused);
            }
        }
    }

    /// Sets the gauges of a TableEntrySet (`namespace`, `name`) from the
    /// status just written. The rate and size of the last sync stay absent
    /// until a sync wrote something.
    pub fn entry_set(&self, namespace: &str, name: &str, st: &TableEntrySetStatus) {
        let l = set_labels(namespace, name);
        let gauge = |f: &Family<SetLabels, Gauge>, v: u64| {
            f.get_or_create(&l)
                .set(i64::try_from(v).unwrap_or(i64::MAX));
        };
        // Unknown is no sample (not 0): the series goes until it is known.
        match st.desired {
            Some(d) => gauge(&self.set_desired, d),
            None => {
                self.set_desired.remove(&l);
            }
        }
        gauge(&self.set_applied, st.applied);
        gauge(&self.set_failed, st.failed);
        let ready =
            p4fleet_crds::find_condition(&st.conditions, "Ready").is_some_and(|c| c.is_true());
        gauge(&self.set_ready, u64::from(ready));
        // Like status: a sync too small to measure a rate has none.
        match st.entries_per_second {
            Some(r) => gauge(&self.set_rate, r),
            None => {
                self.set_rate.remove(&l);
            }
        }
        if let Some(n) = st.last_sync_updates {
            gauge(&self.set_sync_updates, n);
        }
    }

    /// Removes every series of a TableEntrySet (deleted).
    pub fn forget_entry_set(&self, namespace: &str, name: &str) {
        let l = set_labels(namespace, name);
        for f in [
            &self.set_desired,
            &self.set_applied,
            &self.set_failed,
            &self.set_ready,
            &self.set_rate,
            &self.set_sync_updates,
        ] {
            f.remove(&l);
        }
        self.counters.forget(namespace, name);
    }

    /// Prometheus text exposition of every metric.
    pub fn encode(&self) -> String {
        use prometheus_client::encoding::text;
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = text::encode_registry(&mut out, &self.registry)
            .and_then(|()| text::encode_registry(&mut out, &self.process))
            .and_then(|()| text::encode_eof(&mut out));
        out
    }
}

fn write_labels(switch: &str, op: &str) -> WriteLabels {
    WriteLabels {
        switch: switch.into(),
        op: op.into(),
    }
}

fn set_labels(namespace: &str, name: &str) -> SetLabels {
    SetLabels {
        namespace: namespace.into(),
        name: name.into(),
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
    use p4fleet_client::UpdateCounts;
    use std::time::Duration;

    fn rpc(sent: UpdateCounts, refused: UpdateCounts, failed: bool) -> WriteRpc {
        WriteRpc {
            device_id: 1,
            latency: Duration::from_millis(2),
            sent,
            refused,
            failed: failed.then_some(tonic::Code::Unavailable),
        }
    }

    fn counts(insert: u64, modify: u64, delete: u64) -> UpdateCounts {
        UpdateCounts {
            insert,
            modify,
            delete,
        }
    }

    #[test]
    fn encodes_reconciles_and_one_request_per_rpc() {
        let m = Metrics::new();
        {
            let _t = m.reconcile("Switch");
        }
        m.reconcile_error("Switch", "Kube");
        m.write_rpc("sw1", &rpc(counts(10, 2, 0), counts(1, 0, 0), false));
        m.write_rpc("sw1", &rpc(counts(0, 0, 5), counts(0, 0, 5), true));
        let text = m.encode();
        for line in [
            "p4fleet_reconciles_total{kind=\"Switch\"} 1",
            "p4fleet_reconcile_errors_total{kind=\"Switch\",reason=\"Kube\"} 1",
            "p4fleet_reconcile_duration_seconds_count{kind=\"Switch\"} 1",
            "p4fleet_write_requests_total{switch=\"sw1\"} 2",
            "p4fleet_write_requests_failed_total{switch=\"sw1\"} 1",
            "p4fleet_write_request_duration_seconds_count{switch=\"sw1\"} 2",
            "p4fleet_entries_written_total{switch=\"sw1\",op=\"insert\"} 9",
            "p4fleet_entries_written_total{switch=\"sw1\",op=\"modify\"} 2",
            "p4fleet_entries_failed_total{switch=\"sw1\",op=\"insert\"} 1",
            "p4fleet_entries_failed_total{switch=\"sw1\",op=\"delete\"} 5",
            "p4fleet_build_info{version=\"",
        ] {
            assert!(text.contains(line), "{line} missing in:\n{text}");
        }
        assert!(text.ends_with("# EOF\n"));
    }

    #[test]
    fn known_label_sets_start_at_zero() {
        let m = Metrics::new();
        m.kind_known("TableEntrySet", &["kube", "device"]);
        m.switch_seen("sw1", false);
        let text = m.encode();
        for line in [
            "p4fleet_reconcile_errors_total{kind=\"TableEntrySet\",reason=\"device\"} 0",
            "p4fleet_reconciles_total{kind=\"TableEntrySet\"} 0",
            "p4fleet_entries_failed_total{switch=\"sw1\",op=\"modify\"} 0",
            "p4fleet_write_requests_failed_total{switch=\"sw1\"} 0",
            "p4fleet_switch_connected{switch=\"sw1\"} 0",
        ] {
            assert!(text.contains(line), "{line} missing in:\n{text}");
        }
    }

    #[test]
    fn a_forgotten_switch_has_no_series() {
        let m = Metrics::new();
        m.write_rpc("sw1", &rpc(counts(10, 0, 0), counts(0, 0, 0), false));
        m.write_rpc("sw2", &rpc(counts(1, 0, 0), counts(0, 0, 0), false));
        m.switch_seen("sw1", true);
        m.switch_seen("sw2", true);
        m.forget_switch("sw1");
        let text = m.encode();
        assert!(!text.contains("switch=\"sw1\""), "{text}");
        assert!(
            text.contains("p4fleet_switch_connected{switch=\"sw2\"} 1"),
            "{text}"
        );
    }

    #[test]
    fn entry_set_gauges_follow_status_and_go_with_the_set() {
        let m = Metrics::new();
        let mut st = TableEntrySetStatus {
            desired: Some(30),
            applied: 28,
            failed: 2,
            ..Default::default()
        };
        m.entry_set("ns", "fw", &st);
        let text = m.encode();
        assert!(
            text.contains(
                "p4fleet_table_entry_set_applied_entries{namespace=\"ns\",name=\"fw\"} 28"
            )
        );
        assert!(text.contains("p4fleet_table_entry_set_ready{namespace=\"ns\",name=\"fw\"} 0"));
        // No sync wrote yet: no rate.
        assert!(!text.contains("last_sync_entries_per_second{"), "{text}");
        st.entries_per_second = Some(5000);
        m.entry_set("ns", "fw", &st);
        m.entry_set("ns", "other", &st);
        assert!(m.encode().contains(
            "p4fleet_table_entry_set_last_sync_entries_per_second{namespace=\"ns\",name=\"fw\"} 5000"
        ));
        // Unknown desired and an unmeasured rate are no samples, not 0.
        let unknown = TableEntrySetStatus {
            desired: None,
            entries_per_second: None,
            ..st.clone()
        };
        m.entry_set("ns", "fw", &unknown);
        let text = m.encode();
        assert!(
            !text.contains("desired_entries{namespace=\"ns\",name=\"fw\"}"),
            "{text}"
        );
        assert!(
            !text.contains("per_second{namespace=\"ns\",name=\"fw\"}"),
            "{text}"
        );
        m.forget_entry_set("ns", "fw");
        let text = m.encode();
        assert!(!text.contains("name=\"fw\""), "{text}");
        assert!(text.contains("name=\"other\""), "{text}");
    }

    #[test]
    fn process_metrics_are_unprefixed() {
        let text = Metrics::new().encode();
        assert!(text.contains("\nprocess_resident_memory_bytes "), "{text}");
        assert!(!text.contains("p4fleet_process_"), "{text}");
    }
}
