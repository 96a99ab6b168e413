//! The drift probe between a Switch's reconciles. Every `--drift-seconds`
//! (spread per Switch, `controllers::spread`) the device of a Switch whose last
//! reconcile found it reachable and accepting this operator is asked what
//! that reconcile's probe asks: the pipeline of every loaded slot
//! (`super::pipelines::check`, which names a lost one to its
//! VirtualSwitch's controller), or Capabilities when no slot is loaded,
//! and whether its stream still accepts this operator (no RPC while it
//! stands). The Switch is reconciled only when an answer differs from what
//! its reconcile confirmed; a steady device costs one small RPC per slot
//! and no reconcile, no status read or write.
//!
//! The probe used to be the Switch reconcile itself, requeued every
//! `--drift-seconds`: at 1,000 Switches, kube-runtime's scheduling and the
//! reconcile's own status build were half of an idle round's operator CPU
//! (profiled with `make bench-fleet`, docs/dev/fleet-lab-notes.md). A Switch
//! is now reconciled on its changes, its device's changes, a probe that
//! found a difference, and as a safety net every ten resyncs
//! (`controllers::covered`).
//!
//! The schedule and the task's loop are `controllers::schedule`'s (probes
//! due within a short window of each other run together).
//!
//! FPGA boards are not probed here: their reconcile also reads the board's
//! slot service, which only the reconcile turns into status, so a board's
//! Switch keeps its reconcile every `--drift-seconds`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use kube::runtime::reflector::ObjectRef;
use p4fleet_client::Device;
use p4fleet_crds::{Switch, SwitchTarget};
use tokio::sync::broadcast;
use tokio::time::Instant;

use crate::controllers::schedule::Queue;
use crate::controllers::{Shutdown, spread};
use crate::devices::{Asked, DevicePool};

/// Probes in flight at once (a device that does not answer holds one for
/// its timeout, not the others).
const IN_FLIGHT: usize = 64;

/// What a probe found, against what the Switch's last reconcile confirmed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// The device answers as it did: nothing to do.
    Confirmed,
    /// Something differs: the Switch is reconciled.
    Changed(&'static str),
    /// No longer probed here (the Switch is gone or no longer healthy).
    Dropped,
}

/// Whether a Switch is probed here rather than by its reconcile.
pub fn probed_here(sw: &Switch) -> bool {
    sw.spec.target != SwitchTarget::Fpga
}

/// What the Switch's last reconcile confirmed: the stamp of its answers
/// and the connection it asked on.
#[derive(Debug, Clone)]
struct Healthy {
    asked: Asked,
    device: Weak<Device>,
    /// When a probe here last confirmed it.
    confirmed: Option<Instant>,
}

impl Healthy {
    fn on(&self, asked: Asked, device: &Arc<Device>) -> bool {
        self.asked == asked
            && self
                .device
                .upgrade()
                .is_some_and(|d| Arc::ptr_eq(&d, device))
    }
}

/// The Switches probed here, their schedule, and who hears of changes.
pub struct DriftProbes {
    period: Duration,
    healthy: Mutex<HashMap<String, Healthy>>,
    queue: Queue,
    changed: broadcast::Sender<String>,
}

impl DriftProbes {
    pub fn new(period: Duration) -> DriftProbes {
        DriftProbes {
            period,
            healthy: Mutex::default(),
            queue: Queue::new(period),
            changed: broadcast::channel(4096).0,
        }
    }

    /// Names of Switches whose probe found a difference, from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<String> {
        self.changed.subscribe()
    }

    /// Switch `name`'s reconcile found its device reachable and accepting
    /// this operator, asked on `device` at `asked`: probe it from now on.
    pub fn healthy(&self, name: &str, asked: Asked, device: &Arc<Device>) {
        let mut healthy = lock(&self.healthy);
        // A probe's confirmation on the same stamp and connection stands.
        let confirmed = healthy
            .get(name)
            .filter(|h| h.on(asked, device))
            .and_then(|h| h.confirmed);
        let h = Healthy {
            asked,
            device: Arc::downgrade(device),
            confirmed,
        };
        healthy.insert(name.to_string(), h);
        drop(healthy);
        let at = Instant::now() + spread(self.period, name);
        self.queue.add(name, at);
    }

    /// Switch `name` is not healthy (or gone): its reconcile probes it.
    pub fn unhealthy(&self, name: &str) {
        lock(&self.healthy).remove(name);
    }

    /// Whether a probe here confirmed Switch `name`'s device within
    /// `within`, at `asked` on `device`: its reconcile need not ask the
    /// device again (as a VirtualSwitch's resync trusts the probe's
    /// pipeline check, `LoadedPipelines::confirmed_within`).
    pub fn confirmed_within(
        &self,
        name: &str,
        asked: Asked,
        device: &Arc<Device>,
        within: Duration,
    ) -> bool {
        lock(&self.healthy).get(name).is_some_and(|h| {
            h.on(asked, device) && h.confirmed.is_some_and(|t| t.elapsed() <= within)
        })
    }

    fn mark(&self, name: &str) -> Option<Healthy> {
        lock(&self.healthy).get(name).cloned()
    }

    /// Probes the healthy Switches until `shutdown`.
    pub async fn run(ctx: Arc<super::SwitchCtx>, shutdown: Shutdown) {
        let this = &ctx.own.drift_probes;
        let probe = |name: String| {
            let ctx = ctx.clone();
            async move {
                let verdict = ctx.own.drift_probes.probe(&ctx, &name).await;
                (name, verdict)
            }
        };
        let settle = |name: String, verdict| this.settle(&ctx, &name, verdict);
        this.queue.run(IN_FLIGHT, shutdown, probe, settle).await;
    }

    async fn probe(&self, ctx: &super::SwitchCtx, name: &str) -> Verdict {
        let Some(mark) = self.mark(name) else {
            return Verdict::Dropped;
        };
        let Some(sw) = ctx.caches.switches.store().get(&ObjectRef::new(name)) else {
            return Verdict::Dropped;
        };
        let verdict = probe(&ctx.devices, &sw, &mark).await;
        if verdict == Verdict::Confirmed {
            self.confirm(name, &mark);
        }
        verdict
    }

    /// Notes a probe's confirmation of `probed`, only if that is still
    /// the Switch's mark: a reconcile may have marked it again meanwhile,
    /// on another stamp.
    fn confirm(&self, name: &str, probed: &Healthy) {
        if let Some(h) = lock(&self.healthy).get_mut(name)
            && h.asked == probed.asked
            && h.device.ptr_eq(&probed.device)
        {
            h.confirmed = Some(Instant::now());
        }
    }

    fn settle(&self, ctx: &super::SwitchCtx, name: &str, verdict: Verdict) {
        ctx.metrics.drift_probe(&verdict);
        let again = match &verdict {
            Verdict::Confirmed => Some(Instant::now() + spread(self.period, name)),
            Verdict::Changed(why) => {
                tracing::info!(switch = %name, reason = why,
                    "drift probe: the device answers differently; reconciling its Switch");
                self.unhealthy(name);
                let _ = self.changed.send(name.to_string());
                None
            }
            Verdict::Dropped => None,
        };
        self.queue.finish(name, again);
    }
}

/// One probe of `sw`'s device against what its reconcile confirmed: the
/// reconcile's own probe (`super::probe`: the loaded slots'
/// pipelines, or Capabilities, and the stream's verdict), on the
/// connection and stamp the reconcile saw.
async fn probe(devices: &DevicePool, sw: &Switch, mark: &Healthy) -> Verdict {
    use kube::ResourceExt;
    if !probed_here(sw) {
        return Verdict::Dropped;
    }
    let Some(dev) = devices.get(&sw.name_any()) else {
        return Verdict::Changed("the connection was closed");
    };
    if !mark.on(Asked::of(sw, &dev), &dev) {
        return Verdict::Changed("the Switch or its device changed since its reconcile");
    }
    match super::probe(devices, sw).await {
        (Ok(_), Some(Ok(()))) => Verdict::Confirmed,
        (Err(_), _) => Verdict::Changed("the device did not answer"),
        (Ok(_), _) => Verdict::Changed("the device no longer accepts this operator"),
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::switch::probed::{self, calls};

    /// A steady device is confirmed with one pipeline check and nothing
    /// else; a lost pipeline is named to its VirtualSwitch (the device
    /// still answers); an edited Switch, a closed connection or a device
    /// gone is a change.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_probe_confirms_a_steady_device_and_finds_what_changed() {
        let probed::Probed {
            running,
            sw,
            devices,
            dev,
            info,
            loaded,
        } = probed::device().await;
        // The Switch's reconcile probes first (and keeps the Capabilities
        // answer), then marks it healthy.
        let (caps, standing) = crate::controllers::switch::probe(&devices, &sw).await;
        assert!(caps.is_ok() && matches!(standing, Some(Ok(()))));
        let mark = |sw: &Switch, dev: &Arc<Device>| Healthy {
            asked: Asked::of(sw, dev),
            device: Arc::downgrade(dev),
            confirmed: None,
        };
        let healthy = mark(&sw, &dev);

        let (caps, cookies) = (
            calls(&running, "P4Runtime/Capabilities"),
            calls(&running, "P4Runtime/GetForwardingPipelineConfig"),
        );
        for _ in 0..3 {
            assert_eq!(probe(&devices, &sw, &healthy).await, Verdict::Confirmed);
        }
        assert_eq!(calls(&running, "P4Runtime/Capabilities"), caps);
        assert_eq!(
            calls(&running, "P4Runtime/GetForwardingPipelineConfig"),
            cookies + 3,
            "one pipeline check per probe"
        );
        let drift = Duration::from_secs(60);
        assert!(
            devices
                .pipelines()
                .confirmed_within("ns/a", &loaded, healthy.asked, drift)
        );

        // Another pipeline on the slot: the device answers, so the Switch
        // stands, but its VirtualSwitch's confirmation is gone.
        assert!(dev.set_pipeline(0, &info, Vec::new(), 8).await.unwrap());
        let healthy = mark(&sw, &dev);
        assert_eq!(probe(&devices, &sw, &healthy).await, Verdict::Confirmed);
        assert!(
            !devices
                .pipelines()
                .confirmed_within("ns/a", &loaded, healthy.asked, drift)
        );

        // Nothing loaded: Capabilities is asked instead.
        devices.pipelines().forget_switch("sw");
        assert_eq!(probe(&devices, &sw, &healthy).await, Verdict::Confirmed);
        assert_eq!(calls(&running, "P4Runtime/Capabilities"), caps + 1);

        // A confirmation stands for its own mark only.
        let probes = DriftProbes::new(Duration::from_secs(10));
        let within = Duration::from_secs(10);
        probes.healthy("sw", healthy.asked, &dev);
        assert!(!probes.confirmed_within("sw", healthy.asked, &dev, within));
        let marked = probes.mark("sw").unwrap();
        probes.confirm("sw", &marked);
        assert!(probes.confirmed_within("sw", healthy.asked, &dev, within));
        assert!(!probes.confirmed_within("sw", healthy.asked, &dev, Duration::ZERO));
        probes.healthy("sw", healthy.asked, &dev);
        assert!(
            probes.confirmed_within("sw", healthy.asked, &dev, within),
            "marked again on the same stamp: still confirmed"
        );
        let later = Asked {
            generation: Some(2),
            ..healthy.asked
        };
        assert!(!probes.confirmed_within("sw", later, &dev, within));
        probes.healthy("sw", later, &dev);
        probes.confirm("sw", &marked);
        assert!(
            !probes.confirmed_within("sw", later, &dev, within),
            "a probe of the old mark confirms nothing of the new one"
        );
        probes.unhealthy("sw");
        assert!(probes.mark("sw").is_none());

        // The Switch edited since its reconcile.
        let mut edited = sw.clone();
        edited.metadata.generation = Some(2);
        assert!(matches!(
            probe(&devices, &edited, &healthy).await,
            Verdict::Changed(_)
        ));
        // A board is its reconcile's to probe.
        let mut board = sw.clone();
        board.spec.target = SwitchTarget::Fpga;
        assert_eq!(probe(&devices, &board, &healthy).await, Verdict::Dropped);

        // The device gone.
        running.shutdown().await.unwrap();
        assert!(matches!(
            probe(&devices, &sw, &healthy).await,
            Verdict::Changed(_)
        ));
        // The connection closed (the Switch forgotten).
        devices.forget("sw");
        assert!(matches!(
            probe(&devices, &sw, &healthy).await,
            Verdict::Changed(_)
        ));
    }
}
