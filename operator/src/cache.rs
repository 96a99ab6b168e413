//! Reflector caches of the kinds reconcilers read: Switches,
//! VirtualSwitches and P4Programs. One watch per kind feeds one
//! [`Store`]; every controller that triggers on that kind subscribes to the
//! same feed ([`Cache::controller`], [`Cache::watched_by`]) and
//! [`crate::reads::ApiReads`] answers lookups from the stores, so no
//! reconcile LISTs or GETs these kinds.
//!
//! A store lags the API server by the watch's latency. Decisions that need
//! the current object write with its resourceVersion as a precondition
//! (slot claims) and, after a 409, wait for the store to catch up
//! ([`Cache::newer_than`]) before they read again: a stale read costs a
//! retry, never a wrong write.
//!
//! `switch::forget_deleted` reads the same feed ([`Cache::events`]) for
//! deletions, so each kind is watched once.
//!
//! kube-runtime's own shared streams (`store_shared`) dispatch only
//! applied objects and apply back-pressure from the slowest subscriber; this
//! feed is a broadcast channel instead: related watches also see deletions,
//! and a subscriber that lags behind gets every cached object again rather
//! than stalling the watch.

use std::collections::{HashMap, HashSet};
use std::fmt::Debug;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use futures::{Stream, StreamExt};
use k8s_openapi::api::apps::v1::ControllerRevision;
use kube::runtime::controller::Controller;
use kube::runtime::reflector::{self, ObjectRef, Store, store::Writer};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Resource, ResourceExt};
use p4fleet_crds::{
    AsyncExternPolicy, P4Program, SLOT_CLAIMS_ANNOTATION, SlotClaim, Switch, TableEntrySet,
    VirtualSwitch,
};
use serde::de::DeserializeOwned;
use tokio::sync::{broadcast, watch};
use tokio_stream::wrappers::BroadcastStream;
use tokio_stream::wrappers::errors::BroadcastStreamRecvError;

use crate::shutdown::Shutdown;

/// Events buffered per subscriber before it counts as lagged.
const FEED: usize = 4096;

/// What the watch saw, as the feed passes it on.
#[derive(Clone)]
pub enum Seen<K> {
    Applied(Arc<K>),
    Deleted(Arc<K>),
    /// A (re)list finished: every cached object may have changed.
    Relisted,
}

/// One kind's store and the feed of its watch.
pub struct Cache<K: Resource<DynamicType = ()> + Clone + 'static> {
    store: Store<K>,
    /// Taken by [`Cache::run`] (one watch per cache).
    writer: Mutex<Option<Writer<K>>>,
    feed: broadcast::Sender<Seen<K>>,
    /// True once the first list is in the store.
    ready: watch::Sender<bool>,
    /// Objects by a key taken from each (see [`Cache::indexed`]).
    index: Option<Arc<Index<K>>>,
}

/// The store of a cache and its index (a cheap handle).
#[derive(Clone)]
pub struct Filing<K: Resource<DynamicType = ()> + Clone + 'static> {
    store: Store<K>,
    index: Option<Arc<Index<K>>>,
}

impl<K: Resource<DynamicType = ()> + Clone + 'static> Filing<K> {
    /// The cached objects filed under `key`, in (namespace, name) order;
    /// every object when the cache has no index. Callers check each
    /// object for what they need: a just-changed object may be filed
    /// under its old keys for the instant before the watch refiles it.
    pub fn under(&self, key: &str) -> Vec<Arc<K>> {
        let mut objs = match &self.index {
            None => self.store.state(),
            Some(index) => index
                .get(key)
                .iter()
                .filter_map(|r| self.store.get(r))
                .collect(),
        };
        objs.sort_by(|a, b| list_order(a.as_ref(), b.as_ref()));
        objs
    }
}

/// The API server's LIST order (namespace, name): a store is a hash map,
/// and placement ties and status target lists must not depend on its order.
pub fn list_order<K: Resource>(a: &K, b: &K) -> std::cmp::Ordering {
    (&a.meta().namespace, &a.meta().name).cmp(&(&b.meta().namespace, &b.meta().name))
}

/// Objects of one cache filed under keys taken from each object (the
/// Switch a VirtualSwitch is placed on, the VirtualSwitches a Switch's
/// slot claims name), so a reconcile finds its few related objects
/// without scanning the fleet: at 1,000 Switches those scans were a
/// tenth of an idle round's CPU (docs/dev/fleet-lab-notes.md). Kept in step with the
/// store by the watch, before the feed passes the event on; a reader still
/// checks what it finds against the object.
struct Index<K: Resource<DynamicType = ()>> {
    keys: fn(&K) -> Vec<String>,
    filed: RwLock<Filed<K>>,
}

struct Filed<K: Resource<DynamicType = ()>> {
    by_key: HashMap<String, HashSet<ObjectRef<K>>>,
    keys_of: HashMap<ObjectRef<K>, Vec<String>>,
}

impl<K: Resource<DynamicType = ()>> Index<K> {
    fn new(keys: fn(&K) -> Vec<String>) -> Self {
        Index {
            keys,
            filed: RwLock::new(Filed {
                by_key: HashMap::new(),
                keys_of: HashMap::new(),
            }),
        }
    }

    /// Files `obj` under its keys now (`None`: it is gone).
    fn file(&self, obj_ref: ObjectRef<K>, obj: Option<&K>) {
        let mut f = self.filed.write().unwrap_or_else(|p| p.into_inner());
        for key in f.keys_of.remove(&obj_ref).unwrap_or_default() {
            if let Some(refs) = f.by_key.get_mut(&key) {
                refs.remove(&obj_ref);
                if refs.is_empty() {
                    f.by_key.remove(&key);
                }
            }
        }
        let keys = obj.map(self.keys).unwrap_or_default();
        for key in &keys {
            f.by_key
                .entry(key.clone())
                .or_default()
                .insert(obj_ref.clone());
        }
        if !keys.is_empty() {
            f.keys_of.insert(obj_ref, keys);
        }
    }

    /// Files every object of `objs` afresh (after a relist).
    fn refile(&self, objs: &[Arc<K>]) {
        {
            let mut f = self.filed.write().unwrap_or_else(|p| p.into_inner());
            f.by_key.clear();
            f.keys_of.clear();
        }
        for obj in objs {
            self.file(ObjectRef::from_obj(obj.as_ref()), Some(obj));
        }
    }

    fn get(&self, key: &str) -> Vec<ObjectRef<K>> {
        let f = self.filed.read().unwrap_or_else(|p| p.into_inner());
        f.by_key
            .get(key)
            .map(|refs| refs.iter().cloned().collect())
            .unwrap_or_default()
    }
}

impl<K> Default for Cache<K>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    fn default() -> Self {
        let (store, writer) = reflector::store();
        Cache {
            store,
            writer: Mutex::new(Some(writer)),
            feed: broadcast::Sender::new(FEED),
            ready: watch::Sender::new(false),
            index: None,
        }
    }
}

impl<K> Cache<K>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    /// A cache that also files its objects under `keys` ([`Cache::filed_under`]).
    pub fn indexed(keys: fn(&K) -> Vec<String>) -> Self {
        Cache {
            index: Some(Arc::new(Index::new(keys))),
            ..Cache::default()
        }
    }

    /// The store (a cheap handle; reads never hit the API server).
    pub fn store(&self) -> Store<K> {
        self.store.clone()
    }

    /// The cached objects filed under `key` ([`Filing::under`]).
    pub fn filed_under(&self, key: &str) -> Vec<Arc<K>> {
        self.filing().under(key)
    }

    /// A handle on the store and its index, for readers that outlive a
    /// borrow of the cache.
    pub fn filing(&self) -> Filing<K> {
        Filing {
            store: self.store.clone(),
            index: self.index.clone(),
        }
    }

    /// Watches `api` into the store and the feed until `shutdown`. Runs
    /// once per cache: a second call returns at once.
    pub async fn run(&self, api: Api<K>, shutdown: Shutdown) {
        self.run_with(api, watcher_config(), shutdown).await
    }

    /// [`Cache::run`] with a watch of its own configuration (a label
    /// selector: only what p4fleet created).
    pub async fn run_with(&self, api: Api<K>, config: watcher::Config, shutdown: Shutdown) {
        let taken = self.writer.lock().unwrap_or_else(|p| p.into_inner()).take();
        let Some(mut writer) = taken else { return };
        let kind = K::kind(&());
        // managedFields (server-side apply's field ownership, a JSON tree
        // per manager) are most of an applied object's metadata and no
        // reconcile reads them; every cached read clones the object, and
        // at fleet size those clones were most of an idle round's CPU
        // (docs/dev/fleet-lab-notes.md).
        let events = watcher(api, config)
            .default_backoff()
            .modify(|obj: &mut K| obj.meta_mut().managed_fields = None);
        let mut events = std::pin::pin!(events.take_until(shutdown));
        while let Some(ev) = events.next().await {
            let ev = match ev {
                Ok(ev) => ev,
                Err(e) => {
                    tracing::warn!(%kind, error = %e, "cache watch");
                    continue;
                }
            };
            writer.apply_watcher_event(&ev);
            self.refile(&ev);
            // Send errors only mean that no one subscribes yet.
            let _ = match ev {
                watcher::Event::Apply(obj) => {
                    let cached = self.store.get(&ObjectRef::from_obj(&obj));
                    self.feed
                        .send(Seen::Applied(cached.unwrap_or_else(|| Arc::new(obj))))
                }
                watcher::Event::Delete(obj) => self.feed.send(Seen::Deleted(Arc::new(obj))),
                watcher::Event::InitDone => {
                    if !*self.ready.borrow() {
                        tracing::info!(%kind, objects = self.store.state().len(), "cache synced");
                    }
                    self.ready.send_replace(true);
                    self.feed.send(Seen::Relisted)
                }
                watcher::Event::Init | watcher::Event::InitApply(_) => Ok(0),
            };
        }
    }

    /// Files what the watch saw in the index, after the store took it.
    fn refile(&self, ev: &watcher::Event<K>) {
        let Some(index) = &self.index else { return };
        match ev {
            watcher::Event::Apply(obj) => index.file(ObjectRef::from_obj(obj), Some(obj)),
            watcher::Event::Delete(obj) => index.file(ObjectRef::from_obj(obj), None),
            // A relist swaps the whole store in at its end.
            watcher::Event::InitDone => index.refile(&self.store.state()),
            watcher::Event::Init | watcher::Event::InitApply(_) => {}
        }
    }

    /// Resolves once the first list is in the store (at once after that).
    pub async fn ready(&self) {
        let mut rx = self.ready.subscribe();
        // Err: the sender is gone, which cannot happen while `self` lives.
        let _ = rx.wait_for(|r| *r).await;
    }

    /// Objects as they are applied, and all of them after a relist or a
    /// lag: the trigger of a controller whose primary kind this is.
    pub fn applied(&self) -> impl Stream<Item = Arc<K>> + Send + use<K> {
        self.subscribe(false)
    }

    /// Like [`Cache::applied`], plus deleted objects: the trigger of a
    /// controller that watches this kind as a related one.
    pub fn touched(&self) -> impl Stream<Item = Arc<K>> + Send + use<K> {
        self.subscribe(true)
    }

    /// The feed itself; a subscriber that lags gets [`Seen::Relisted`]
    /// (compare with the store: deletions may have been missed).
    pub fn events(&self) -> impl Stream<Item = Seen<K>> + Send + use<K> {
        BroadcastStream::new(self.feed.subscribe()).map(|seen| match seen {
            Ok(seen) => seen,
            Err(BroadcastStreamRecvError::Lagged(_)) => Seen::Relisted,
        })
    }

    fn subscribe(&self, deletes: bool) -> impl Stream<Item = Arc<K>> + Send + use<K> {
        let store = self.store.clone();
        BroadcastStream::new(self.feed.subscribe()).flat_map(move |seen| {
            let objs = match seen {
                Ok(Seen::Applied(obj)) => vec![obj],
                Ok(Seen::Deleted(obj)) if deletes => vec![obj],
                Ok(Seen::Deleted(_)) => Vec::new(),
                Ok(Seen::Relisted) | Err(BroadcastStreamRecvError::Lagged(_)) => store.state(),
            };
            futures::stream::iter(objs)
        })
    }

    /// A controller of this kind, triggered by this cache's feed and
    /// reading its store (no watch of its own).
    pub fn controller(&self) -> Controller<K> {
        Controller::for_shared_stream(self.applied(), self.store())
    }

    /// Adds this kind to `c` as a related kind: when an object changes or
    /// goes, the objects of `c`'s store that `refers(obj, related)` says
    /// depend on it are reconciled.
    pub fn watched_by<P>(
        &self,
        c: Controller<P>,
        refers: impl Fn(&P, &K) -> bool + Send + Sync + 'static,
    ) -> Controller<P>
    where
        P: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    {
        let store = c.store();
        c.watches_shared_stream(self.touched(), move |related: Arc<K>| {
            store
                .state()
                .into_iter()
                .filter(|obj| refers(obj, &related))
                .map(|obj| ObjectRef::from_obj(obj.as_ref()))
                .collect::<Vec<_>>()
        })
    }

    /// Waits (up to `timeout`) until the cached `obj_ref` exists and
    /// satisfies `shown` (a write of this process has come back through
    /// the watch). False on timeout.
    pub async fn shows(
        &self,
        obj_ref: &ObjectRef<K>,
        shown: impl Fn(&K) -> bool,
        timeout: Duration,
    ) -> bool {
        let poll = async {
            while !self.store.get(obj_ref).is_some_and(|o| shown(&o)) {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        };
        tokio::time::timeout(timeout, poll).await.is_ok()
    }

    /// Waits (up to `timeout`) until the cached `obj_ref` is no longer at
    /// resourceVersion `stale` (changed or gone). False on timeout.
    pub async fn newer_than(&self, obj_ref: &ObjectRef<K>, stale: &str, timeout: Duration) -> bool {
        let moved = || {
            self.store
                .get(obj_ref)
                .is_none_or(|o| o.resource_version().as_deref() != Some(stale))
        };
        let poll = async {
            while !moved() {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        };
        tokio::time::timeout(timeout, poll).await.is_ok()
    }
}

/// Api for a namespaced kind in `ns`, or in every namespace when None.
pub fn api_in<K>(client: &kube::Client, ns: Option<&str>) -> Api<K>
where
    K: Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>,
{
    match ns {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

/// Default watcher configuration for the watched kinds.
pub fn watcher_config() -> watcher::Config {
    watcher::Config::default().any_semantic()
}

/// The caches of every kind reconcilers read (ConfigMaps are read by GET;
/// see [`crate::reads`]).
pub struct Caches {
    pub switches: Cache<Switch>,
    pub virtual_switches: Cache<VirtualSwitch>,
    pub programs: Cache<P4Program>,
    /// The TableEntrySet controller's own objects, also read by the
    /// VirtualSwitch controller (entries re-applied after a swap).
    pub entry_sets: Cache<TableEntrySet>,
    /// The AsyncExternPolicy controller's own objects, filed under the
    /// VirtualSwitch they name: one policy per VirtualSwitch holds its
    /// device's extern policy, the others are told who does.
    pub extern_policies: Cache<AsyncExternPolicy>,
    /// The P4Programs' revisions (ControllerRevisions p4fleet created),
    /// filed under their program ([`revision_of`]).
    pub revisions: Cache<ControllerRevision>,
}

impl Default for Caches {
    fn default() -> Self {
        Caches {
            switches: Cache::indexed(claimed_by),
            virtual_switches: Cache::indexed(placed_on),
            programs: Cache::default(),
            entry_sets: Cache::indexed(fills_key),
            extern_policies: Cache::indexed(policy_key),
            revisions: Cache::indexed(revision_owner),
        }
    }
}

/// The key under which the revisions of P4Program `name` in `ns` are filed.
pub fn revision_of(ns: &str, name: &str) -> String {
    format!("P4Program/{ns}/{name}")
}

/// A revision is filed under the P4Program its owner reference names.
fn revision_owner(cr: &ControllerRevision) -> Vec<String> {
    let ns = cr.metadata.namespace.as_deref().unwrap_or_default();
    cr.owner_references()
        .iter()
        .filter(|o| o.kind == "P4Program" && o.api_version.starts_with("p4fleet.dev/"))
        .map(|o| revision_of(ns, &o.name))
        .collect()
}

/// A Switch is filed under the VirtualSwitches (`namespace/name`) its
/// slot claims name; a malformed claim list names none (the claim code
/// reads every Switch when it finds no claim of its own, and reports it).
fn claimed_by(sw: &Switch) -> Vec<String> {
    sw.annotations()
        .get(SLOT_CLAIMS_ANNOTATION)
        .and_then(|a| serde_json::from_str::<Vec<SlotClaim>>(a).ok())
        .map(|claims| claims.into_iter().map(|c| c.virtual_switch).collect())
        .unwrap_or_default()
}

/// A TableEntrySet is filed under the VirtualSwitch it names
/// (`namespace/name`, [`filled_key`]), and one that selects VirtualSwitches
/// by label under its namespace's [`selecting_key`], so a sync finds the
/// sets that may fill the same VirtualSwitch (ownership conflicts) without
/// reading every set of the cluster. (Filing by table would not narrow a
/// fleet whose sets all fill the same table on different devices.)
fn fills_key(set: &TableEntrySet) -> Vec<String> {
    let ns = set.metadata.namespace.as_deref().unwrap_or_default();
    let mut keys = Vec::new();
    if let Some(vs) = &set.spec.virtual_switch_ref {
        keys.push(filled_key(ns, vs));
    }
    if set.spec.virtual_switch_selector.is_some() {
        keys.push(selecting_key(ns));
    }
    keys
}

/// A policy is filed under the VirtualSwitch it names ([`filled_key`]).
fn policy_key(p: &AsyncExternPolicy) -> Vec<String> {
    let ns = p.metadata.namespace.as_deref().unwrap_or_default();
    vec![filled_key(ns, &p.spec.virtual_switch_ref)]
}

/// The key of the sets naming VirtualSwitch `vs` of namespace `ns`.
pub fn filled_key(ns: &str, vs: &str) -> String {
    format!("{ns}/{vs}")
}

/// The key of the sets selecting VirtualSwitches of namespace `ns` by
/// label (`*` is in no object name).
pub fn selecting_key(ns: &str) -> String {
    format!("{ns}/*")
}

/// A VirtualSwitch is filed under the Switch its status places it on.
fn placed_on(vs: &VirtualSwitch) -> Vec<String> {
    vs.status
        .as_ref()
        .and_then(|s| s.switch.clone())
        .into_iter()
        .collect()
}

impl Caches {
    /// Runs the six watches until `shutdown`: Switches cluster-wide,
    /// the namespaced kinds in `watch_namespace` (all when None).
    pub async fn run(
        &self,
        client: kube::Client,
        watch_namespace: Option<&str>,
        shutdown: Shutdown,
    ) {
        let vss = api_in(&client, watch_namespace);
        let programs = api_in(&client, watch_namespace);
        let sets = api_in(&client, watch_namespace);
        let policies = api_in(&client, watch_namespace);
        let revisions = api_in(&client, watch_namespace);
        // Only the revisions p4fleet wrote: Deployments' and
        // StatefulSets' would cost memory and wake nothing.
        let (k, v) = crate::fleet::revisions::MANAGED_BY;
        let ours = watcher_config().labels(&format!("{k}={v}"));
        tokio::join!(
            self.switches
                .run(Api::all(client.clone()), shutdown.clone()),
            self.virtual_switches.run(vss, shutdown.clone()),
            self.programs.run(programs, shutdown.clone()),
            self.entry_sets.run(sets, shutdown.clone()),
            self.extern_policies.run(policies, shutdown.clone()),
            self.revisions.run_with(revisions, ours, shutdown.clone()),
        );
    }

    /// Resolves once every cache holds its first list.
    pub async fn ready(&self) {
        tokio::join!(
            self.switches.ready(),
            self.virtual_switches.ready(),
            self.programs.ready(),
            self.entry_sets.ready(),
            self.extern_policies.ready(),
            self.revisions.ready()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use p4fleet_crds::SwitchSpec;

    fn switch(name: &str, rv: &str) -> Switch {
        let spec: SwitchSpec =
            serde_json::from_value(serde_json::json!({"target": "Bmv2", "endpoint": "h:1"}))
                .unwrap();
        let mut sw = Switch::new(name, spec);
        sw.metadata.resource_version = Some(rv.into());
        sw
    }

    /// Feeds `events` through the cache's writer as its watch would.
    fn feed(cache: &Cache<Switch>, events: Vec<watcher::Event<Switch>>) {
        let mut w = cache.writer.lock().unwrap().take().unwrap();
        for ev in events {
            w.apply_watcher_event(&ev);
            cache.refile(&ev);
            let _ = match ev {
                watcher::Event::Apply(o) => cache.feed.send(Seen::Applied(Arc::new(o))),
                watcher::Event::Delete(o) => cache.feed.send(Seen::Deleted(Arc::new(o))),
                watcher::Event::InitDone => cache.feed.send(Seen::Relisted),
                _ => Ok(0),
            };
        }
        *cache.writer.lock().unwrap() = Some(w);
    }

    /// The events of a list (or relist) of `objs`.
    fn listed(objs: Vec<Switch>) -> Vec<watcher::Event<Switch>> {
        let applied = objs.into_iter().map(watcher::Event::InitApply);
        std::iter::once(watcher::Event::Init)
            .chain(applied)
            .chain([watcher::Event::InitDone])
            .collect()
    }

    fn names(objs: Vec<Arc<Switch>>) -> Vec<String> {
        let mut n: Vec<String> = objs.iter().map(|o| o.name_any()).collect();
        n.sort();
        n
    }

    #[tokio::test]
    async fn related_watches_see_deletions_primaries_do_not() {
        let cache = Cache::<Switch>::default();
        let applied = cache.applied();
        let touched = cache.touched();
        let mut events = listed(vec![switch("a", "1"), switch("b", "1")]);
        events.extend([
            watcher::Event::Apply(switch("a", "2")),
            watcher::Event::Delete(switch("b", "1")),
        ]);
        feed(&cache, events);
        let take = |s: std::pin::Pin<Box<dyn Stream<Item = Arc<Switch>> + Send>>, n| async move {
            s.take(n).collect::<Vec<_>>().await
        };
        // The relist emits the store as it is when the subscriber reads it.
        let a = take(Box::pin(applied), 2).await;
        assert_eq!(names(a), vec!["a", "a"]);
        let t = take(Box::pin(touched), 3).await;
        assert_eq!(names(t), vec!["a", "a", "b"]);
    }

    fn claiming(name: &str, rv: &str, vss: &[&str]) -> Switch {
        let mut sw = switch(name, rv);
        let claims: Vec<SlotClaim> = (0..)
            .zip(vss)
            .map(|(slot, vs)| SlotClaim {
                slot,
                virtual_switch: vs.to_string(),
                ..Default::default()
            })
            .collect();
        sw.annotations_mut().insert(
            SLOT_CLAIMS_ANNOTATION.into(),
            serde_json::to_string(&claims).unwrap(),
        );
        sw
    }

    #[test]
    fn the_index_follows_applies_deletions_and_relists() {
        let cache = Cache::<Switch>::indexed(claimed_by);
        let under = |key: &str| names(cache.filed_under(key));
        feed(
            &cache,
            listed(vec![
                claiming("a", "1", &["ns/x", "ns/y"]),
                claiming("b", "1", &["ns/x"]),
                switch("c", "1"),
            ]),
        );
        assert_eq!(under("ns/x"), vec!["a", "b"]);
        assert_eq!(under("ns/y"), vec!["a"]);
        assert!(under("ns/z").is_empty());
        // A claim moves: filed under the new key only.
        feed(
            &cache,
            vec![watcher::Event::Apply(claiming("a", "2", &["ns/z"]))],
        );
        assert_eq!(under("ns/x"), vec!["b"]);
        assert!(under("ns/y").is_empty());
        assert_eq!(under("ns/z"), vec!["a"]);
        // A malformed claim list files the Switch under nothing.
        let mut bad = switch("b", "2");
        bad.annotations_mut()
            .insert(SLOT_CLAIMS_ANNOTATION.into(), "{".into());
        feed(&cache, vec![watcher::Event::Apply(bad)]);
        assert!(under("ns/x").is_empty());
        feed(
            &cache,
            vec![watcher::Event::Delete(claiming("a", "2", &["ns/z"]))],
        );
        assert!(under("ns/z").is_empty());
        // A relist refiles from the store as listed, dropping what is gone.
        feed(&cache, listed(vec![claiming("c", "3", &["ns/x"])]));
        assert_eq!(under("ns/x"), vec!["c"]);
        // Without an index, every object.
        let plain = Cache::<Switch>::default();
        feed(&plain, listed(vec![switch("p", "1")]));
        assert_eq!(names(plain.filed_under("anything")), vec!["p"]);
    }

    #[test]
    fn a_virtual_switch_is_filed_under_the_switch_its_status_names() {
        let vs: VirtualSwitch = serde_json::from_value(serde_json::json!({
            "apiVersion": "p4fleet.dev/v1alpha1", "kind": "VirtualSwitch",
            "metadata": {"name": "v", "namespace": "ns"},
            "spec": {"programRef": "p", "switchRef": "s1"},
            "status": {"switch": "s2"},
        }))
        .unwrap();
        assert_eq!(placed_on(&vs), vec!["s2"]);
        let unplaced = VirtualSwitch { status: None, ..vs };
        assert!(placed_on(&unplaced).is_empty());
    }

    /// A set is filed under the VirtualSwitch it names and, when it
    /// selects by label, under its namespace's selector key, which is no
    /// VirtualSwitch's.
    #[test]
    fn a_set_is_filed_under_the_virtual_switches_it_may_fill() {
        let set = |spec: serde_json::Value| -> TableEntrySet {
            serde_json::from_value(serde_json::json!({
                "apiVersion": "p4fleet.dev/v1alpha1", "kind": "TableEntrySet",
                "metadata": {"name": "s", "namespace": "ns"},
                "spec": spec,
            }))
            .unwrap()
        };
        let named = set(serde_json::json!({"virtualSwitchRef": "v", "table": "t"}));
        assert_eq!(fills_key(&named), vec![filled_key("ns", "v")]);
        let selecting = set(serde_json::json!({"table": "t",
            "virtualSwitchSelector": {"matchLabels": {"a": "b"}}}));
        assert_eq!(fills_key(&selecting), vec![selecting_key("ns")]);
        assert_ne!(selecting_key("ns"), filled_key("ns", "v"));
        assert_ne!(filled_key("ns", "v"), filled_key("other", "v"));
    }

    #[tokio::test]
    async fn the_raw_feed_turns_a_lag_into_a_relist() {
        let cache = Cache::<Switch>::default();
        let events = cache.events();
        let applies = (0..FEED + 1).map(|i| watcher::Event::Apply(switch("a", &i.to_string())));
        feed(&cache, applies.collect());
        let first = Box::pin(events).next().await;
        assert!(matches!(first, Some(Seen::Relisted)));
    }

    #[tokio::test]
    async fn a_lagging_subscriber_gets_everything_again() {
        let cache = Cache::<Switch>::default();
        let applied = cache.applied();
        let mut events = vec![watcher::Event::Init];
        events.extend((0..3).map(|i| watcher::Event::InitApply(switch(&format!("s{i}"), "1"))));
        events.push(watcher::Event::InitDone);
        events.extend((0..FEED + 1).map(|i| watcher::Event::Apply(switch("s0", &i.to_string()))));
        feed(&cache, events);
        let first: Vec<_> = Box::pin(applied).take(3).collect().await;
        assert_eq!(names(first), vec!["s0", "s1", "s2"]);
    }

    /// Reconcilers read through `Reads` (the caches) only: a LIST or a
    /// GET of an `Api` under `controllers/` fails this scan. ConfigMaps are
    /// read by `ApiReads` in reads.rs, outside it.
    #[test]
    fn controllers_do_not_read_the_api() {
        let files = crate::source_scan::rust_files("controllers");
        assert!(files.len() > 10, "scanned {} files", files.len());
        let forbidden = [
            ".list(",
            ".get_opt(",
            "list_metadata(",
            "get_metadata(",
            "watch(",
        ];
        let mut found = Vec::new();
        for f in &files {
            for (n, code) in crate::source_scan::code_lines(f) {
                for pat in forbidden {
                    if code.contains(pat) {
                        found.push(format!("{}:{n}: {}", f.display(), code.trim()));
                    }
                }
            }
        }
        assert!(
            found.is_empty(),
            "API reads in controllers:\n{}",
            found.join("\n")
        );
    }

    #[tokio::test]
    async fn newer_than_waits_for_the_store_to_move() {
        let cache = Cache::<Switch>::default();
        feed(&cache, listed(vec![switch("a", "5")]));
        let a = ObjectRef::new("a");
        let short = Duration::from_millis(50);
        assert!(!cache.newer_than(&a, "5", short).await, "still at 5");
        assert!(cache.newer_than(&a, "4", short).await, "already past 4");
        feed(&cache, vec![watcher::Event::Apply(switch("a", "6"))]);
        assert!(cache.newer_than(&a, "5", short).await);
        feed(&cache, vec![watcher::Event::Delete(switch("a", "6"))]);
        assert!(
            cache.newer_than(&a, "6", short).await,
            "gone counts as moved"
        );
    }
}
