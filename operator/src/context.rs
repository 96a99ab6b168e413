//! Shared state handed to every reconciler.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBackoff, ExponentialBuilder};
use kube::runtime::events::{Recorder, Reporter};

use crate::cache::Caches;
use crate::controllers::entry_set::SyncMemory;
use crate::devices::DevicePool;
use crate::entry_sources::EntrySources;
use crate::limits::{DevicePermits, Limits};
use crate::metrics::Metrics;
use crate::reads::ApiReads;
use crate::status::Events;

/// Operator-wide settings from the command line.
#[derive(Clone, Debug)]
pub struct OperatorConfig {
    /// Default period of full resyncs: TableEntrySets read their tables
    /// back and repair what differs.
    pub resync: Duration,
    /// Period of the cheap checks between resyncs: Switch probes and the
    /// pipeline cookie of each VirtualSwitch (one small RPC each).
    pub drift: Duration,
    /// Period of an applied AsyncExternPolicy's stats reads.
    pub extern_stats: Duration,
    /// Controller name written into Events.
    pub reporter: String,
    /// This replica's identity (pod name) for Events and the leader lease.
    pub instance: Option<String>,
    /// Watch only this namespace (namespaced kinds); all namespaces when None.
    pub watch_namespace: Option<String>,
    /// Reconciles per kind, targets per set, syncs per device.
    pub limits: Limits,
    /// Downloads of `url` artifact sources: size cap, timeout, cache.
    pub artifacts: crate::artifacts::fetch::FetchLimits,
}

impl Default for OperatorConfig {
    fn default() -> Self {
        OperatorConfig {
            resync: Duration::from_secs(60),
            drift: Duration::from_secs(10),
            extern_stats: Duration::from_secs(5),
            reporter: "p4fleet".into(),
            instance: None,
            watch_namespace: None,
            limits: Limits::default(),
            artifacts: Default::default(),
        }
    }
}

/// Everything a reconcile needs; shared behind an Arc.
pub struct Context {
    pub client: kube::Client,
    /// Every read of a dereference stage goes through here.
    pub reads: ApiReads,
    /// The watched Switches, VirtualSwitches and P4Programs that `reads`
    /// answers from and the controllers trigger on.
    pub caches: Caches,
    /// Entry syncs in flight per device.
    pub permits: DevicePermits,
    pub config: OperatorConfig,
    pub metrics: Arc<Metrics>,
    /// One long-lived connection per Switch, shared by all reconcilers.
    pub devices: DevicePool,
    /// Kubernetes Events about p4fleet objects.
    pub events: Events,
    /// Which controllers have synced their watches (for /readyz).
    pub readiness: Readiness,
    /// Per-object consecutive failures, for error backoff.
    pub backoff: Backoff,
    /// Failed attempts per object and cause (a device that refused a
    /// load, a policy, an artifact that could not be fetched): held
    /// until their backoff is due or their inputs change.
    pub retries: crate::retries::Retries,
    /// What TableEntrySet syncs remember between runs (drift, statuses).
    pub sync_memory: SyncMemory,
    /// TableEntrySets' durable ownership records (devices without entry
    /// metadata: BFRT).
    pub ownership: crate::ownership::Records,
    /// TableEntrySets' ConfigMap sources: watched, fetched and parsed once.
    pub entry_sources: EntrySources,
    /// Ready programs the VirtualSwitch controller resolved, by digest.
    pub programs: crate::controllers::virtual_switch::pipeline::ProgramCache,
    /// Swaps confirmed by a device that no status read shows yet.
    pub unreported_swaps: crate::controllers::virtual_switch::unreported::Unreported,
    /// VirtualSwitch statuses this process wrote, until the cache has them.
    pub virtual_switch_statuses:
        crate::controllers::written::Written<p4fleet_crds::VirtualSwitchStatus>,
    /// When each TableEntrySet's next periodic resync is due.
    pub resync_due: Arc<crate::controllers::entry_set::resync_due::ResyncDue>,
    /// The learning tasks of TableEntrySets with `spec.learn`.
    pub learners: crate::learning::Learners,
    /// The digest sinks (log, ConfigMap) of TableEntrySets.
    pub digest_sinks: crate::digest_sink::DigestSinks,
    /// Idle timeout notifications about sets' own entries.
    pub idle: Arc<crate::idle_reports::IdleReports>,
    /// Healthy Switches' devices, probed between their reconciles.
    pub drift_probes: crate::controllers::switch::drift_probe::DriftProbes,
}

impl Context {
    pub fn new(
        client: kube::Client,
        config: OperatorConfig,
        metrics: Arc<Metrics>,
        devices: DevicePool,
    ) -> Arc<Context> {
        let reporter = Reporter {
            controller: config.reporter.clone(),
            instance: config.instance.clone(),
        };
        let recorder = Recorder::new(client.clone(), reporter.clone());
        let events = Events::new(recorder).with_long_names(client.clone(), reporter);
        let caches = Caches::default();
        let m = metrics.clone();
        devices.observe_writes(Arc::new(move |switch, rpc| m.write_rpc(switch, rpc)));
        let n = metrics.notices.clone();
        let idle = Arc::new(crate::idle_reports::IdleReports::new(
            n.idle_set_entries.clone(),
        ));
        let (reports, ev) = (idle.clone(), events.clone());
        devices.observe_notices(Arc::new(move |switch, event| match event {
            crate::devices::NoticeEvent::Notice(notice) => {
                n.record(switch, notice);
                if let p4fleet_client::Notice::IdleTimeout { notification, .. } = notice {
                    let now = tokio::time::Instant::now();
                    for (set, note) in reports.observe(notification, now) {
                        let ev = ev.clone();
                        tokio::spawn(async move { ev.publish(set.as_ref(), &note).await });
                    }
                }
            }
            crate::devices::NoticeEvent::Lost(k) => n.lost(switch, k),
        }));
        let drift_probes = crate::controllers::switch::drift_probe::DriftProbes::new(config.drift);
        Arc::new(Context {
            reads: ApiReads::new(
                client.clone(),
                &caches,
                Arc::new(crate::artifacts::fetch::Fetcher::new(
                    config.artifacts.clone(),
                )),
            ),
            caches,
            permits: DevicePermits::new(config.limits.syncs_per_device),
            client,
            config,
            metrics: metrics.clone(),
            devices,
            events,
            readiness: Readiness::default(),
            backoff: Backoff::default(),
            retries: Default::default(),
            sync_memory: SyncMemory::default(),
            ownership: Default::default(),
            entry_sources: EntrySources::new(metrics.entry_sources.clone()),
            programs: Default::default(),
            unreported_swaps: Default::default(),
            virtual_switch_statuses: Default::default(),
            resync_due: Default::default(),
            learners: Default::default(),
            digest_sinks: Default::default(),
            idle,
            drift_probes,
        })
    }

    /// An Api for kind `K` over all namespaces (or cluster-scoped).
    pub fn all<K>(&self) -> kube::Api<K>
    where
        K: kube::Resource<DynamicType = ()>,
    {
        kube::Api::all(self.client.clone())
    }
}

/// Readiness of the operator: each controller registers itself and reports
/// when its watch has synced. Ready when every registered one has.
#[derive(Clone, Default)]
pub struct Readiness {
    inner: Arc<Mutex<ReadinessState>>,
}

#[derive(Default)]
struct ReadinessState {
    /// None: no controllers expected (standby replica); Some: per-kind sync.
    controllers: Option<BTreeMap<String, bool>>,
    standby: bool,
}

impl Readiness {
    /// Declares a controller that must sync before the operator is ready.
    pub fn register(&self, kind: &str) {
        let mut g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        g.controllers
            .get_or_insert_with(BTreeMap::new)
            .insert(kind.into(), false);
    }

    /// Marks a controller's watch as synced.
    pub fn synced(&self, kind: &str) {
        let mut g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        g.controllers
            .get_or_insert_with(BTreeMap::new)
            .insert(kind.into(), true);
    }

    /// A replica waiting for the leader lease is ready (it serves probes and
    /// is a valid rollout target) without running controllers.
    pub fn set_standby(&self, standby: bool) {
        let mut g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        g.standby = standby;
    }

    /// Ok with a summary when ready, Err naming what has not synced.
    pub fn check(&self) -> Result<String, String> {
        let g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        if g.standby {
            return Ok("standby: waiting for the leader lease".into());
        }
        match &g.controllers {
            None => Err("controllers not started".into()),
            Some(m) => {
                let pending: Vec<&str> = m
                    .iter()
                    .filter(|(_, s)| !**s)
                    .map(|(k, _)| k.as_str())
                    .collect();
                if pending.is_empty() {
                    Ok(format!("{} watches synced", m.len()))
                } else {
                    Err(format!("watches not synced: {}", pending.join(", ")))
                }
            }
        }
    }
}

/// Exponential per-object backoff for failed reconciles (1 s doubling to
/// 5 min): one backon schedule per failing object, dropped on success.
#[derive(Default)]
pub struct Backoff {
    failing: Mutex<HashMap<String, ExponentialBackoff>>,
}

impl Backoff {
    pub const MIN: Duration = Duration::from_secs(1);
    pub const MAX: Duration = Duration::from_secs(300);

    fn schedule() -> ExponentialBackoff {
        ExponentialBuilder::default()
            .with_min_delay(Backoff::MIN)
            .with_max_delay(Backoff::MAX)
            .without_max_times()
            .build()
    }

    /// Records a failure of `key` and returns how long to wait before retrying.
    pub fn failed(&self, key: &str) -> Duration {
        let mut g = self.failing.lock().unwrap_or_else(|p| p.into_inner());
        g.entry(key.to_string())
            .or_insert_with(Backoff::schedule)
            .next()
            .unwrap_or(Backoff::MAX)
    }

    /// Forgets the failures of `key` after a successful reconcile.
    pub fn succeeded(&self, key: &str) {
        let mut g = self.failing.lock().unwrap_or_else(|p| p.into_inner());
        g.remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_and_resets() {
        let b = Backoff::default();
        assert_eq!(b.failed("a"), Duration::from_secs(1));
        assert_eq!(b.failed("a"), Duration::from_secs(2));
        assert_eq!(b.failed("a"), Duration::from_secs(4));
        b.succeeded("a");
        assert_eq!(b.failed("a"), Duration::from_secs(1));
        let forty = (0..40).map(|_| b.failed("b")).last();
        assert_eq!(forty, Some(Backoff::MAX));
        assert_eq!(b.failed("a"), Duration::from_secs(2), "per object");
    }

    #[test]
    fn readiness_needs_every_registered_controller() {
        let r = Readiness::default();
        assert!(r.check().is_err());
        r.register("Switch");
        r.register("P4Program");
        r.synced("Switch");
        assert!(r.check().unwrap_err().contains("P4Program"));
        r.synced("P4Program");
        assert!(r.check().is_ok());
    }
}
