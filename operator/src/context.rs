//! What every controller shares: the API client and the caches it reads,
//! the device pool, Events, metrics, readiness, backoff and retries, the
//! settings. What one controller keeps for itself is its own
//! (`controllers::Ctx::own`).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kube::runtime::events::{Recorder, Reporter};

use crate::cache::Caches;
use crate::devices::DevicePool;
use crate::limits::Limits;
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
    /// One resync of an unchanged TableEntrySet in this many is a full
    /// sync; the others are rechecks (its read-back alone). 1: all full.
    pub full_resync_every: u32,
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
            full_resync_every: crate::controllers::entry_set::recheck::DEFAULT_FULL_EVERY,
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
    pub config: OperatorConfig,
    pub metrics: Arc<Metrics>,
    /// One long-lived connection per Switch, shared by all reconcilers.
    pub devices: DevicePool,
    /// Kubernetes Events about p4fleet objects.
    pub events: Events,
    /// Which controllers have synced their watches (for /readyz).
    pub readiness: Readiness,
    /// Per-object consecutive failures, for error backoff.
    pub backoff: crate::retries::Backoff,
    /// Failed attempts per object and cause (a device that refused a
    /// load, a policy, an artifact that could not be fetched): held
    /// until their backoff is due or their inputs change.
    pub retries: crate::retries::Retries,
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
        let sets = caches.entry_sets.store();
        metrics.rollouts.watch(caches.programs.store(), sets);
        let m = metrics.clone();
        devices.observe_writes(Arc::new(move |switch, rpc| m.write_rpc(switch, rpc)));
        Arc::new(Context {
            reads: ApiReads::new(
                client.clone(),
                &caches,
                Arc::new(crate::artifacts::fetch::Fetcher::new(
                    config.artifacts.clone(),
                )),
            ),
            caches,
            client,
            config,
            metrics: metrics.clone(),
            devices,
            events,
            readiness: Readiness::default(),
            backoff: Default::default(),
            retries: Default::default(),
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

#[cfg(test)]
mod tests {
    use super::*;

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
