//! One kube-rs Controller per kind, sharing the error policy, metrics,
//! backoff and readiness reporting.
//!
//! Each kind's module exposes `controller(&Context) -> Controller<K>` (the
//! watches it needs) and `reconcile(Arc<K>, Arc<Context>) -> Result<Action, Error>`;
//! [`run_controllers`] drives them all until shutdown.
//!
//! Every reconcile runs the same stages (docs/architecture.md, "Controller
//! shape"): dereference (reads through [`crate::reads::Reads`] only),
//! validate and build (pure), apply (device I/O only), update status
//! ([`update_status`], the one status write). No controller imports
//! another controller's module (a test holds it): what they share lives
//! in [`crate::fleet`].

pub mod entry_set;
pub mod extern_policy;
pub mod lanes;
pub mod program;
pub mod schedule;
pub mod switch;
pub mod virtual_switch;
pub mod written;

use std::fmt::Debug;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use kube::core::object::HasStatus;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::finalizer;
use kube::{Api, Resource, ResourceExt};
use serde::de::DeserializeOwned;

use crate::context::Context;
use crate::status::{WithConditions, apply_status, now_rfc3339, settle, unchanged};

pub use crate::cache::watcher_config;
pub use crate::shutdown::{Shutdown, shutdown_on};

/// Why a reconcile failed (it is retried with backoff). What a resource
/// gets wrong, or a device cannot do, is status, not an error: these are
/// the failures of reconciling itself.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("object has no {0}")]
    MissingObjectKey(&'static str),
    /// Adding or removing a finalizer failed.
    #[error("finalizer: {0}")]
    Finalizer(#[source] kube::Error),
    /// A write lost an optimistic-concurrency race: the object changed
    /// since this reconcile read it (a finalizer patch whose test of the
    /// list it read failed). Expected, not a failure: retried quietly.
    #[error("the object changed meanwhile: {0}")]
    Conflict(#[source] kube::Error),
    /// kube's finalizer helper could not use the name as a JSON pointer
    /// (the names are constants, so this is a bug).
    #[error("finalizer name is not a valid JSON pointer")]
    InvalidFinalizer,
    /// A deleted TableEntrySet's entries are still on a device.
    #[error("removing entries: {0}")]
    EntriesNotRemoved(entry_set::cleanup::RemovalFailures),
    /// A TableEntrySet's ownership record could not be read or written
    /// (device writes wait for it).
    #[error(transparent)]
    OwnershipRecord(#[from] crate::ownership::StoreError),
    /// A deleted AsyncExternPolicy's target still runs it.
    #[error("restoring the extern defaults: {0}")]
    PolicyNotRestored(String),
}

impl Error {
    /// Every [`Error::metric_label`] (their series start at zero).
    pub const METRIC_LABELS: &[&str] = &["kube", "invalid_object", "finalizer", "device"];

    /// Short label for the `reconcile_errors` metric.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::Kube(_) | Error::OwnershipRecord(_) => "kube",
            Error::MissingObjectKey(_) => "invalid_object",
            Error::Finalizer(_) | Error::InvalidFinalizer | Error::Conflict(_) => "finalizer",
            Error::EntriesNotRemoved(_) | Error::PolicyNotRestored(_) => "device",
        }
    }
}

/// A controller's context: what every controller shares ([`Context`],
/// through `Deref`) and the state this one keeps for itself (`own`: a
/// TableEntrySet's sync memory, a VirtualSwitch's resolved programs, the
/// Switches' drift probes). No controller sees another's state.
pub struct Ctx<S> {
    shared: Arc<Context>,
    pub own: S,
}

impl<S> Ctx<S> {
    pub fn new(shared: Arc<Context>, own: S) -> Arc<Ctx<S>> {
        Arc::new(Ctx { shared, own })
    }

    /// The shared context, for tasks that outlive a reconcile.
    pub fn shared(&self) -> &Arc<Context> {
        &self.shared
    }
}

impl<S> std::ops::Deref for Ctx<S> {
    type Target = Context;

    fn deref(&self) -> &Context {
        &self.shared
    }
}

/// The outcome of `kube::runtime::finalizer` in this crate's terms: a
/// stage's own error as it is; removing the finalizer from an object that
/// is already gone is done, not an error.
pub fn finalized(res: Result<Action, finalizer::Error<Error>>) -> Result<Action, Error> {
    use finalizer::Error as F;
    match res {
        Ok(action) => Ok(action),
        Err(F::ApplyFailed(e) | F::CleanupFailed(e)) => Err(e),
        Err(F::RemoveFinalizer(kube::Error::Api(s))) if s.is_not_found() => {
            Ok(Action::await_change())
        }
        Err(F::AddFinalizer(e) | F::RemoveFinalizer(e)) if lost_race(&e) => Err(Error::Conflict(e)),
        Err(F::AddFinalizer(e) | F::RemoveFinalizer(e)) => Err(Error::Finalizer(e)),
        Err(F::UnnamedObject) => Err(Error::MissingObjectKey("name")),
        Err(F::InvalidFinalizer) => Err(Error::InvalidFinalizer),
    }
}

/// Whether a write was refused because the object changed since it was
/// read: 409 Conflict (a resourceVersion precondition), or 422 without
/// field causes, which is how the API server refuses a JSON patch whose
/// `test` operation failed (kube's finalizer helper tests the finalizer
/// list it read). A 422 of a validation failure names its fields.
pub fn lost_race(e: &kube::Error) -> bool {
    let kube::Error::Api(s) = e else {
        return false;
    };
    let causes = s.details.as_ref().map_or(0, |d| d.causes.len());
    s.code == 409 || (s.code == 422 && causes == 0)
}

/// The backoff from which a conflict is warned and counted as an error
/// after all (the fourth in a row: 1, 2, 4 s quiet): a race lost again
/// and again is no race.
const QUIET_CONFLICT_DELAY: Duration = Duration::from_secs(8);

/// The namespace of a namespaced object.
pub fn namespace<K: Resource>(obj: &K) -> Result<String, Error> {
    obj.namespace().ok_or(Error::MissingObjectKey("namespace"))
}

/// `namespace/name` (or `name`) of an object, for logs, backoff and slot owners.
pub fn object_key<K: Resource>(obj: &K) -> String {
    match obj.namespace() {
        Some(ns) => format!("{ns}/{}", obj.name_any()),
        None => obj.name_any(),
    }
}

/// Shared error policy: count, log, and requeue with per-object exponential backoff.
pub fn error_policy<K, S>(obj: Arc<K>, err: &Error, ctx: Arc<Ctx<S>>) -> Action
where
    K: Resource<DynamicType = ()>,
{
    let kind = K::kind(&());
    let key = object_key(obj.as_ref());
    let delay = ctx.backoff.failed(&format!("{kind}/{key}"));
    if let Error::Conflict(_) = err
        && delay < QUIET_CONFLICT_DELAY
    {
        ctx.metrics.reconcile_conflict(&kind);
        tracing::debug!(%kind, object = %key, error = %err, retry_in = ?delay,
            "the object changed meanwhile; retrying");
        return Action::requeue(delay);
    }
    ctx.metrics.reconcile_error(&kind, err.metric_label());
    tracing::warn!(%kind, object = %key, error = %err, retry_in = ?delay, "reconcile failed");
    Action::requeue(delay)
}

/// Api for a namespaced kind, limited to `--watch-namespace` when given.
pub fn scoped_api<K>(ctx: &Context) -> Api<K>
where
    K: Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>,
{
    crate::cache::api_in(&ctx.client, ctx.config.watch_namespace.as_deref())
}

/// A watch mapper: when a related object changes, requeue the cached
/// objects that `refers(obj, related)` says depend on it.
fn referrers<K, R>(
    store: kube::runtime::reflector::Store<K>,
    refers: impl Fn(&K, &R) -> bool + Send + Sync + 'static,
) -> impl Fn(R) -> Vec<kube::runtime::reflector::ObjectRef<K>> + Send + Sync + 'static
where
    K: Resource<DynamicType = ()> + Clone + Send + Sync + 'static,
{
    move |related: R| {
        store
            .state()
            .into_iter()
            .filter(|obj| refers(obj, &related))
            .map(|obj| kube::runtime::reflector::ObjectRef::from_obj(obj.as_ref()))
            .collect()
    }
}

/// Adds a watch of `api` to `c`: when an `R` changes, the cached objects
/// that `refers(obj, related)` says depend on it are reconciled.
pub fn watch_related<K, R>(
    c: Controller<K>,
    api: Api<R>,
    refers: impl Fn(&K, &R) -> bool + Send + Sync + 'static,
) -> Controller<K>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    R: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + 'static,
{
    let store = c.store();
    c.watches(api, watcher_config(), referrers(store, refers))
}

/// Adds device changes to `c`: whenever the device of a Switch changes
/// ([`crate::devices::DevicePool::subscribe`]: lost, back, refused, a
/// pipeline pushed), the cached objects that `runs_on(obj, switch)` says
/// depend on that Switch are reconciled; all of them if changes were missed.
pub fn on_device_changes<K>(
    c: Controller<K>,
    ctx: &Context,
    runs_on: impl Fn(&K, &str) -> bool + Send + Sync + 'static,
) -> Controller<K>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    let store = c.store();
    let changes = tokio_stream::wrappers::BroadcastStream::new(ctx.devices.subscribe());
    let trigger = changes.flat_map(move |change| {
        let refs: Vec<_> = store
            .state()
            .into_iter()
            .filter(|obj| match &change {
                Ok(switch) => runs_on(obj, switch),
                Err(_lagged) => true,
            })
            .map(|obj| kube::runtime::reflector::ObjectRef::from_obj(obj.as_ref()))
            .collect();
        futures::stream::iter(refs)
    });
    c.reconcile_on(trigger)
}

/// Adds a broadcast of object keys to `c`: each key that `object` maps to
/// a reference is reconciled; every cached object when keys were missed
/// (the receiver lagged).
pub fn on_named<K>(
    c: Controller<K>,
    keys: tokio::sync::broadcast::Receiver<String>,
    object: impl Fn(&str) -> Option<kube::runtime::reflector::ObjectRef<K>> + Send + 'static,
) -> Controller<K>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    let store = c.store();
    let keys = tokio_stream::wrappers::BroadcastStream::new(keys);
    c.reconcile_on(keys.flat_map(move |key| {
        let refs: Vec<_> = match key {
            Ok(key) => object(&key).into_iter().collect(),
            Err(_lagged) => store
                .state()
                .iter()
                .map(|obj| kube::runtime::reflector::ObjectRef::from_obj(obj.as_ref()))
                .collect(),
        };
        futures::stream::iter(refs)
    }))
}

/// The period of an object's periodic check (drift check, resync), spread
/// over the fleet: `period` shortened by up to a tenth, by a fraction
/// fixed per object (a hash of `key`). Objects created together would
/// otherwise all requeue in the same instant every period, a burst of
/// device reads and reconciles each time; with periods that differ by
/// object their checks drift apart. Never longer than `period`, so what
/// docs/reliability.md promises for the interval still holds.
pub fn spread(period: Duration, key: &str) -> Duration {
    use std::hash::{Hash, Hasher};
    // SipHash with fixed keys: the same fraction in every process.
    let mut h = std::hash::DefaultHasher::new();
    key.hash(&mut h);
    let permille = (h.finish() % 1000) as u32;
    period - period / 10 * permille / 1000
}

/// How often an object whose periodic checks all run elsewhere (a healthy
/// Switch and its loaded VirtualSwitches: the drift probe asks their
/// device every `--drift-seconds` and reconciles them when an answer
/// differs) is reconciled anyway: ten resyncs. Such a reconcile finds
/// nothing the probe did not confirm; it is a safety net against a trigger
/// this operator missed, like controller-runtime's long `SyncPeriod`.
/// Spread per object as [`spread`].
pub fn covered(resync: Duration, key: &str) -> Duration {
    spread(resync * COVERED_RESYNCS, key)
}

/// Resyncs between the reconciles of [`covered`] objects.
pub const COVERED_RESYNCS: u32 = 10;

/// Runs one controller until shutdown: registers it for readiness, marks it
/// synced when its store is, times every reconcile, resets backoff on success.
pub async fn drive<K, S, F, Fut>(
    controller: Controller<K>,
    reconcile: F,
    ctx: Arc<Ctx<S>>,
    shutdown: Shutdown,
) where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    S: Send + Sync + 'static,
    F: Fn(Arc<K>, Arc<Ctx<S>>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Action, Error>> + Send + 'static,
{
    let kind = K::kind(&()).to_string();
    ctx.readiness.register(&kind);
    // kube-runtime starts every reconcile that is due (unbounded); the
    // kind's limit is the gate's, which lets changes go before periodic
    // checks (`lanes`).
    let gate = lanes::Gate::new(ctx.config.limits.reconciles(&kind).into());
    let controller =
        controller.with_config(kube::runtime::controller::Config::default().concurrency(0));
    ctx.metrics.kind_known(&kind, Error::METRIC_LABELS);
    let store = controller.store();
    let latest = store.clone();
    let stopping = shutdown.clone();
    let readiness = ctx.readiness.clone();
    let synced_kind = kind.clone();
    tokio::spawn(async move {
        // The store's readiness is a oneshot that remembers only the last
        // waker, and the controller waits on it too: poll it afresh each
        // round instead of parking on it once.
        loop {
            match tokio::time::timeout(Duration::from_millis(250), store.wait_until_ready()).await {
                Ok(Ok(())) => {
                    tracing::info!(kind = %synced_kind, "watch synced");
                    readiness.synced(&synced_kind);
                    return;
                }
                Ok(Err(_)) => return,
                Err(_) => {}
            }
        }
    });
    let reconcile = Arc::new(reconcile);
    let log_kind = kind.clone();
    controller
        .graceful_shutdown_on(shutdown)
        .run(
            move |obj: Arc<K>, ctx: Arc<Ctx<S>>| {
                let reconcile = reconcile.clone();
                let kind = kind.clone();
                let (gate, latest) = (gate.clone(), latest.clone());
                let stopping = stopping.clone();
                async move {
                    let trigger = crate::reconcile_triggers::current();
                    let lane = lanes::Lane::of(trigger.as_deref());
                    // kube-runtime waits for the reconciles it started when
                    // it shuts down: those still waiting for the gate then
                    // do nothing (this process may no longer lead).
                    let _permit = tokio::select! {
                        p = gate.acquire(lane) => p,
                        () = stopping => return Ok(Action::await_change()),
                    };
                    // The object as it is now (it may have changed while
                    // its reconcile waited for the gate).
                    let at_dispatch = kube::runtime::reflector::ObjectRef::from_obj(obj.as_ref());
                    let obj = latest.get(&at_dispatch).unwrap_or(obj);
                    let key = format!("{kind}/{}", object_key(obj.as_ref()));
                    // Reads answer from the shared caches: none may be
                    // used before its first list is in.
                    ctx.caches.ready().await;
                    let _timer = ctx.metrics.reconcile(&kind);
                    let res = reconcile(obj, ctx.clone()).await;
                    if res.is_ok() {
                        ctx.backoff.succeeded(&key);
                    }
                    res
                }
            },
            error_policy::<K, S>,
            ctx,
        )
        .for_each(move |res| {
            match res {
                Ok((obj, _)) => tracing::debug!(kind = %log_kind, object = %obj, "reconciled"),
                // Reconciler errors are already logged by error_policy.
                Err(kube::runtime::controller::Error::ReconcilerFailed(..)) => {}
                Err(e) => tracing::warn!(kind = %log_kind, error = %e, "controller"),
            }
            futures::future::ready(())
        })
        .await;
    tracing::info!(kind = %K::kind(&()), "controller stopped");
}

/// Starts the shared caches and every controller and returns when all
/// have shut down.
pub async fn run_controllers(ctx: Arc<Context>, shutdown: Shutdown) {
    // Each controller, the caches and the deletion feed run as tasks of
    // their own. Joined in one future, every wake of any of them (each
    // reconcile that finishes) polled all of them on the thread that
    // awaits this, and woke that thread: a quarter of the operator's CPU
    // in an idle round at 1,000 Switches (profiled with `make bench-fleet`:
    // docs/dev/fleet-lab-notes.md). The set aborts them when this future
    // is dropped (a lost lease), as the joined future did.
    let mut tasks = tokio::task::JoinSet::new();
    // One `drive` per kind module: its context (the shared one and the
    // state the controller keeps for itself), its `controller` and
    // `reconcile`. The controllers subscribe to the caches' feeds when
    // built, so they are built before the caches' watches start.
    macro_rules! drive {
        ($kind:ident, $own:expr) => {{
            let own = Ctx::new(ctx.clone(), $own);
            let c = $kind::controller(&own);
            tasks.spawn(drive(c, $kind::reconcile, own.clone(), shutdown.clone()));
            own
        }};
    }
    let switches = drive!(switch, switch::Switches::new(&ctx.config));
    drive!(program, ());
    drive!(virtual_switch, virtual_switch::VirtualSwitches::default());
    let sets = drive!(entry_set, entry_set::EntrySets::new(&ctx));
    drive!(extern_policy, ());
    tasks.spawn(switch::forget_deleted(switches.clone(), shutdown.clone()));
    tasks.spawn(switch::drift_probe::DriftProbes::run(
        switches,
        shutdown.clone(),
    ));
    tasks.spawn(entry_set::recheck::Rechecks::run(
        sets.clone(),
        shutdown.clone(),
    ));
    tasks.spawn(entry_set::forget_deleted_switches(sets, shutdown.clone()));
    let (c, stop) = (ctx.clone(), shutdown.clone());
    tasks.spawn(async move {
        let ns = c.config.watch_namespace.as_deref();
        c.caches.run(c.client.clone(), ns, stop).await
    });
    while let Some(done) = tasks.join_next().await {
        if let Err(e) = done
            && e.is_panic()
        {
            std::panic::resume_unwind(e.into_panic());
        }
    }
}

/// The update-status stage of every controller: settles `new` against the
/// object's current status ([`crate::status::settle`]), writes it by
/// server-side apply unless nothing changed, and publishes the Events of
/// the conditions that changed, one per root cause
/// ([`crate::status::condition_events`]). Returns whether it wrote.
pub async fn update_status<K>(
    ctx: &Context,
    api: &Api<K>,
    obj: &K,
    new: &mut K::Status,
) -> Result<bool, Error>
where
    K: HasStatus + Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug,
    K::Status: WithConditions + PartialEq + serde::Serialize,
{
    update_status_noting(ctx, api, obj, new, &[]).await
}

/// [`update_status`] for a stage that publishes `notes` of its own after
/// it: a condition whose reason a note has gets no second Event.
pub async fn update_status_noting<K>(
    ctx: &Context,
    api: &Api<K>,
    obj: &K,
    new: &mut K::Status,
    notes: &[crate::status::EventNote],
) -> Result<bool, Error>
where
    K: HasStatus + Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug,
    K::Status: WithConditions + PartialEq + serde::Serialize,
{
    Ok(write_status_noting(ctx, api, obj, new, notes)
        .await?
        .is_some())
}

/// [`update_status_noting`] that returns the object as the API server
/// stored it (its new resourceVersion), None when nothing changed.
pub async fn write_status_noting<K>(
    ctx: &Context,
    api: &Api<K>,
    obj: &K,
    new: &mut K::Status,
    notes: &[crate::status::EventNote],
) -> Result<Option<K>, Error>
where
    K: HasStatus + Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug,
    K::Status: WithConditions + PartialEq + serde::Serialize,
{
    let old = obj.status();
    settle(old, new, obj.meta().generation, &now_rfc3339());
    if unchanged(old, new) {
        return Ok(None);
    }
    let stored = apply_status(api, &obj.name_any(), &*new).await?;
    ctx.metrics.status_write(&K::kind(&()));
    let old_conditions = old.map(|s| s.conditions()).unwrap_or_default();
    ctx.events
        .condition_changes(obj, old_conditions, new.conditions(), notes)
        .await;
    Ok(Some(stored))
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::Status;

    fn api(code: u16, reason: &str) -> kube::Error {
        kube::Error::Api(Status::failure("x", reason).with_code(code).boxed())
    }

    /// The controllers: one folder (or file) each under `controllers/`.
    const CONTROLLERS: [&str; 5] = [
        "entry_set",
        "extern_policy",
        "program",
        "switch",
        "virtual_switch",
    ];

    #[test]
    fn no_controller_imports_another_controllers_module() {
        let files = crate::source_scan::rust_files("controllers");
        let mut found = Vec::new();
        for f in &files {
            let rel = f.to_string_lossy();
            let Some(me) = CONTROLLERS.iter().find(|c| {
                rel.contains(&format!("/controllers/{c}/")) || rel.ends_with(&format!("/{c}.rs"))
            }) else {
                continue;
            };
            for (n, code) in crate::source_scan::code_lines(f) {
                for other in CONTROLLERS.iter().filter(|c| *c != me) {
                    let uses = [
                        format!("controllers::{other}"),
                        format!("super::{other}::"),
                        format!("super::super::{other}"),
                        format!("use super::{{{other}"),
                    ];
                    if uses.iter().any(|u| code.contains(u.as_str())) {
                        found.push(format!("{rel}:{n}: {}", code.trim()));
                    }
                }
            }
        }
        assert!(files.len() > 20, "scanned {} files", files.len());
        assert!(
            found.is_empty(),
            "controllers reaching into another controller (move what they share to crate::fleet):\n{}",
            found.join("\n")
        );
    }

    #[test]
    fn spread_periods_stay_within_a_tenth_below_and_differ_by_object() {
        let p = Duration::from_secs(30);
        let periods: Vec<Duration> = (0..200)
            .map(|i| spread(p, &format!("ns/set-{i}")))
            .collect();
        assert!(periods.iter().all(|d| *d <= p && *d >= p - p / 10));
        assert_eq!(spread(p, "ns/set-1"), periods[1], "fixed per object");
        let mut distinct = periods.clone();
        distinct.sort();
        distinct.dedup();
        assert!(
            distinct.len() > 150,
            "{} distinct periods of 200",
            distinct.len()
        );
        assert_eq!(spread(Duration::ZERO, "x"), Duration::ZERO);
    }

    #[test]
    fn covered_objects_come_back_every_ten_resyncs_spread() {
        let r = Duration::from_secs(30);
        let c = covered(r, "ns/vs-1");
        assert!(c <= r * 10 && c >= r * 9, "{c:?}");
        assert_eq!(c, spread(r * 10, "ns/vs-1"));
        assert_ne!(covered(r, "ns/vs-1"), covered(r, "ns/vs-2"));
    }

    #[test]
    fn finalizer_outcomes_map_onto_the_reconcile_error() {
        use finalizer::Error as F;
        let done = Action::await_change();
        assert_eq!(finalized(Ok(done.clone())).unwrap(), done);
        // The object is gone: nothing left to do.
        let gone = finalized(Err(F::RemoveFinalizer(api(404, "NotFound"))));
        assert_eq!(gone.unwrap(), done);
        // A lost race (the JSON patch's test failed: 422 without causes,
        // or a 409) is a conflict; a 422 naming fields is a real refusal.
        let conflict = finalized(Err(F::AddFinalizer(api(422, "Invalid")))).unwrap_err();
        assert!(matches!(conflict, Error::Conflict(_)), "{conflict:?}");
        let conflict = finalized(Err(F::RemoveFinalizer(api(409, "Conflict")))).unwrap_err();
        assert!(matches!(conflict, Error::Conflict(_)), "{conflict:?}");
        let mut invalid = Status::failure("x", "Invalid").with_code(422);
        invalid.details = serde_json::from_value(serde_json::json!({
            "causes": [{"reason": "FieldValueInvalid", "field": "metadata.finalizers"}]
        }))
        .unwrap();
        let refused = finalized(Err(F::AddFinalizer(kube::Error::Api(invalid.boxed()))));
        assert!(matches!(refused, Err(Error::Finalizer(_))), "{refused:?}");
        let other = finalized(Err(F::AddFinalizer(api(403, "Forbidden")))).unwrap_err();
        assert_eq!(other.metric_label(), "finalizer");
        let stage = finalized(Err(F::CleanupFailed(Error::MissingObjectKey("namespace"))));
        assert!(matches!(stage, Err(Error::MissingObjectKey("namespace"))));
        assert!(matches!(
            finalized(Err(F::UnnamedObject)),
            Err(Error::MissingObjectKey("name"))
        ));
    }
}
