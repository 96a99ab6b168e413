//! ConfigMap entry sources of TableEntrySets, read once and shared.
//!
//! - Which ConfigMaps exist, with their labels and resourceVersions: a
//!   metadata-only watch ([`ConfigMapIndex`]), the same stream that
//!   requeues the sets reading them (docs/architecture.md says why
//!   metadata and not a label-selected watch of whole objects).
//! - A ConfigMap's texts: fetched (one GET) and decoded ([`decode`]:
//!   gzip `binaryData`, size limits) only when its resourceVersion
//!   changed.
//! - A text parsed against a table schema ([`parsed`]): once per
//!   (ConfigMap, key, resourceVersion, schema, options), on the blocking
//!   pool with at most [`MAX_PARSES`] at once, so the async runtime (and
//!   /livez) never waits on it; the result is shared (`Arc`) by every set
//!   and resync that reads it.
//! - What no set uses any more is evicted when its last set stops using
//!   it ([`uses`]: counted per parse, indexed per ConfigMap).

pub mod decode;
pub mod parsed;
pub mod runs;
mod uses;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::{FutureExt, Stream, StreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use p4fleet_crds::entry_set::EntriesSource;
use p4fleet_model::entries::{ParseOptions, TableSchema};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use sha2::{Digest, Sha256};
use tokio::sync::{OnceCell, Semaphore};

pub use decode::{DecodeError, MAX_TEXT_BYTES, Text};
pub use parsed::ParsedText;

use crate::reads::Reads;
use uses::{ConfigMapId, ReadVersions, Users};

/// Parses (and decodes) running at once on the blocking pool: the
/// machine's other cores stay free for the runtime and the device writes.
pub const MAX_PARSES: usize = 2;

/// ConfigMap GETs of one set in flight at once.
const FETCHES_AT_ONCE: usize = 4;

/// One ConfigMap a set reads, or what is missing, in `entriesFrom` order.
enum Step {
    Fetch {
        name: String,
        /// The index's resourceVersion (None: no index, always fetch).
        version: Option<String>,
        key: Option<String>,
        required: bool,
    },
    Problem(SourceProblem),
}

/// A blocking job over a text or ConfigMap this large returns what it
/// freed (the text, the gunzip buffers) to the OS when it ends
/// ([`crate::allocator::release_freed`]); below it, what a job frees is
/// too little to matter, and a purge makes the next allocations fault
/// pages in again. (Its cost on small jobs was not isolated:
/// docs/dev/fleet-lab-notes.md.)
const RELEASE_FROM: usize = 1 << 20;

/// How long a sync waits for the ConfigMap watch's first list.
const INDEX_WAIT: Duration = Duration::from_secs(30);

/// What the index keeps of a ConfigMap.
pub type Meta = PartialObjectMeta<ConfigMap>;

/// One text of an entry source: a key of a ConfigMap at a resourceVersion.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceText {
    pub config_map: String,
    pub key: String,
    pub resource_version: String,
    pub text: Text,
}

/// The texts of a set's `entriesFrom`, in order: per source, its
/// ConfigMaps in name order, per ConfigMap its keys in key order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Sources {
    pub texts: Vec<SourceText>,
}

/// An entry source that could not be read; the message names the field,
/// ConfigMap and key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SourceProblem {
    #[error("ConfigMap {0} not found")]
    NotFound(String),
    #[error("ConfigMap {config_map} has no key {key:?}")]
    KeyNotFound { config_map: String, key: String },
    #[error("spec.entriesFrom[{index}].configMapSelector matches no ConfigMap")]
    NoneSelected { index: usize },
    #[error("ConfigMap {config_map} key {key:?}: {error}")]
    Unreadable {
        config_map: String,
        key: String,
        error: DecodeError,
    },
    #[error("the ConfigMap watch has not listed ConfigMaps yet")]
    IndexNotReady,
}

impl SourceProblem {
    /// The condition reason.
    pub fn reason(&self) -> &'static str {
        match self {
            SourceProblem::NotFound(_)
            | SourceProblem::KeyNotFound { .. }
            | SourceProblem::NoneSelected { .. } => "ConfigMapNotFound",
            SourceProblem::Unreadable { .. } => "SourceUnreadable",
            SourceProblem::IndexNotReady => "SourcesNotListed",
        }
    }

    /// Whether the set should poll: every other problem clears through
    /// the ConfigMap watch.
    pub fn polls(&self) -> bool {
        matches!(self, SourceProblem::IndexNotReady)
    }
}

/// Label: the namespace whose sets a fetch or parse served.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NamespaceLabel {
    pub namespace: String,
}

/// What the cache does, for /metrics.
#[derive(Clone, Default)]
pub struct SourceMetrics {
    /// ConfigMaps fetched (GET) because their resourceVersion was new.
    pub fetches: Family<NamespaceLabel, Counter>,
    /// Texts parsed against a schema (a cache miss).
    pub parses: Family<NamespaceLabel, Counter>,
    /// Parsed texts held, and roughly how many bytes they take.
    pub cached_texts: Gauge,
    pub cached_bytes: Gauge,
}

impl SourceMetrics {
    pub fn register(&self, registry: &mut prometheus_client::registry::Registry) {
        registry.register(
            "entry_source_fetches",
            "ConfigMaps fetched because their resourceVersion changed, by namespace",
            self.fetches.clone(),
        );
        registry.register(
            "entry_source_parses",
            "Entry texts parsed (cache misses), by namespace",
            self.parses.clone(),
        );
        registry.register(
            "entry_source_cached_texts",
            "Parsed entry texts held in the cache",
            self.cached_texts.clone(),
        );
        registry.register(
            "entry_source_cached_bytes",
            "Approximate bytes of the parsed entry texts held",
            self.cached_bytes.clone(),
        );
    }
}

/// Which ConfigMaps exist, from a metadata-only watch.
pub struct ConfigMapIndex {
    /// The store of the current watch (a new one per [`ConfigMapIndex::watch`]).
    store: Mutex<Store<Meta>>,
    /// Feeds the store by hand in unit tests.
    #[cfg(test)]
    writer: Mutex<Option<reflector::store::Writer<Meta>>>,
    /// Whether a watch feeds the store; without one, names are looked up
    /// with a GET (unit tests, the offline CLI).
    watched: AtomicBool,
}

impl Default for ConfigMapIndex {
    fn default() -> Self {
        let (store, _writer) = reflector::store();
        ConfigMapIndex {
            store: Mutex::new(store),
            #[cfg(test)]
            writer: Mutex::new(None),
            watched: AtomicBool::new(false),
        }
    }
}

impl ConfigMapIndex {
    /// The metadata watch of `api`, feeding this index from a fresh store
    /// (controllers started again get a consistent one); its items (every
    /// ConfigMap touched) are what requeues the sets.
    pub fn metadata_feed(
        &self,
        api: Api<Meta>,
        config: watcher::Config,
    ) -> impl Stream<Item = Result<Meta, watcher::Error>> + Send + 'static {
        let (store, writer) = reflector::store();
        *self.store.lock().unwrap_or_else(|p| p.into_inner()) = store;
        self.watched.store(true, Ordering::Relaxed);
        // An Api of PartialObjectMeta lists and watches metadata only.
        let stream = watcher(api, config)
            .default_backoff()
            // managedFields are most of a ConfigMap's metadata and unused.
            .modify(|m: &mut Meta| m.metadata.managed_fields = None);
        reflector::reflector(writer, stream).touched_objects()
    }

    fn store(&self) -> Store<Meta> {
        self.store.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Fills the index once from a list instead of a watch (`p4fleet
    /// plan`: the cluster's ConfigMaps and the manifest's).
    pub fn fill(&self, metas: &[Meta]) -> reflector::store::Writer<Meta> {
        let (store, mut w) = reflector::store();
        w.apply_watcher_event(&watcher::Event::Init);
        for m in metas {
            w.apply_watcher_event(&watcher::Event::InitApply(m.clone()));
        }
        w.apply_watcher_event(&watcher::Event::InitDone);
        *self.store.lock().unwrap_or_else(|p| p.into_inner()) = store;
        self.watched.store(true, Ordering::Relaxed);
        w
    }

    /// Fills the index by hand (unit tests).
    #[cfg(test)]
    pub fn insert_for_tests(&self, metas: &[Meta]) {
        let w = self.fill(metas);
        *self.writer.lock().unwrap() = Some(w);
    }

    /// Whether lookups can use the store: Ok(true) when it is listed,
    /// Ok(false) when no watch feeds it, Err when it is not listed in time.
    async fn ready(&self) -> Result<bool, SourceProblem> {
        if !self.watched.load(Ordering::Relaxed) {
            return Ok(false);
        }
        let store = self.store();
        if store.wait_until_ready().now_or_never().is_some() {
            return Ok(true);
        }
        match tokio::time::timeout(INDEX_WAIT, store.wait_until_ready()).await {
            Ok(Ok(())) => Ok(true),
            _ => Err(SourceProblem::IndexNotReady),
        }
    }

    fn get(&self, ns: &str, name: &str) -> Option<Arc<Meta>> {
        self.store().get(&ObjectRef::new(name).within(ns))
    }

    /// Names of the ConfigMaps in `ns` that `src` selects, in name order.
    fn select(&self, ns: &str, src: &EntriesSource) -> Vec<String> {
        let mut names: Vec<String> = self
            .store()
            .state_filter(|m| {
                m.metadata.namespace.as_deref() == Some(ns)
                    && !crate::ownership::is_record(m.metadata.labels.as_ref())
                    && src.selects(
                        m.metadata.name.as_deref().unwrap_or_default(),
                        m.metadata.labels.as_ref().unwrap_or(&Default::default()),
                    )
            })
            .iter()
            .filter_map(|m| m.metadata.name.clone())
            .collect();
        names.sort();
        names
    }
}

/// A ConfigMap's texts at one resourceVersion.
struct Fetched {
    resource_version: String,
    /// Every key, decoded.
    keys: Vec<decode::Decoded>,
}

/// What a parse depends on.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct ParseKey {
    namespace: String,
    config_map: String,
    key: String,
    resource_version: String,
    schema: [u8; 32],
    mask_host_bits: bool,
}

type ParseSlot = Arc<OnceCell<Arc<ParsedText>>>;

/// Held while one ConfigMap is fetched (see [`EntrySources::fetch`]).
type FetchGate = Arc<tokio::sync::Mutex<()>>;

/// The entry-source cache: the index, the fetched texts, the parses.
pub struct EntrySources {
    pub index: ConfigMapIndex,
    fetched: Mutex<HashMap<(String, String), Arc<Fetched>>>,
    /// One fetch at a time per ConfigMap (see [`EntrySources::fetch`]).
    fetching: Mutex<HashMap<(String, String), FetchGate>>,
    parsed: Mutex<HashMap<ParseKey, ParseSlot>>,
    /// What each set (`namespace/name`) used in its last sync.
    users: Arc<Mutex<Users<ParseKey>>>,
    permits: Arc<Semaphore>,
    metrics: SourceMetrics,
    /// The sets' programs' P4Infos, parsed once per text (their tables'
    /// schemas are looked up on every sync).
    pub p4infos: crate::artifacts::ParsedP4Infos,
}

impl Default for EntrySources {
    fn default() -> Self {
        EntrySources::new(SourceMetrics::default())
    }
}

/// The digest of a schema: parses are shared between sets whose tables
/// have the same schema, whatever program they come from.
pub fn schema_digest(schema: &TableSchema) -> [u8; 32] {
    Sha256::digest(format!("{schema:?}").as_bytes()).into()
}

impl EntrySources {
    pub fn new(metrics: SourceMetrics) -> Self {
        EntrySources {
            index: ConfigMapIndex::default(),
            fetched: Mutex::default(),
            fetching: Mutex::default(),
            parsed: Mutex::default(),
            users: Arc::default(),
            permits: Arc::new(Semaphore::new(MAX_PARSES)),
            metrics,
            p4infos: Default::default(),
        }
    }

    /// Runs `f` on the blocking pool under a parse permit.
    pub async fn blocking<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> T {
        let permit = self
            .permits
            .clone()
            .acquire_owned()
            .await
            .expect("the semaphore is never closed");
        let r = tokio::task::spawn_blocking(move || {
            let _permit = permit;
            f()
        })
        .await;
        match r {
            Ok(v) => v,
            // A panic in a parse is a bug; surface it where it happened.
            Err(e) => std::panic::resume_unwind(e.into_panic()),
        }
    }

    /// The texts of `sources` in `ns` for set `set` (`namespace/name`),
    /// and what could not be read. Only a failed request is an error.
    pub async fn read(
        &self,
        reads: &impl Reads,
        set: &str,
        ns: &str,
        sources: &[EntriesSource],
    ) -> Result<(Sources, Vec<SourceProblem>), kube::Error> {
        let mut used = ReadVersions::new();
        let r = self.read_into(reads, ns, sources, &mut used).await;
        let mut users = self.lock_users();
        let gone = users.read(set, used);
        self.evict_fetched(&gone);
        r
    }

    async fn read_into(
        &self,
        reads: &impl Reads,
        ns: &str,
        sources: &[EntriesSource],
        used: &mut ReadVersions,
    ) -> Result<(Sources, Vec<SourceProblem>), kube::Error> {
        let mut out = Sources::default();
        let mut problems = Vec::new();
        if sources.is_empty() {
            return Ok((out, problems));
        }
        let indexed = match self.index.ready().await {
            Ok(i) => i,
            Err(p) => return Ok((out, vec![p])),
        };
        let steps = self.resolve(ns, sources, indexed);
        // The GETs at once (a set of 10 ConfigMaps of 1 MB waited for ten
        // round trips in a row), their results then taken in order.
        let mut gets = Vec::new();
        for step in &steps {
            if let Step::Fetch { name, version, .. } = step {
                gets.push(self.fetch(reads, ns, name, version.clone()));
            }
        }
        let fetched: Vec<_> = futures::stream::iter(gets)
            .buffered(FETCHES_AT_ONCE)
            .collect()
            .await;
        let mut fetched = fetched.into_iter();
        for step in steps {
            let (name, key, required) = match step {
                Step::Problem(p) => {
                    problems.push(p);
                    continue;
                }
                Step::Fetch {
                    name,
                    key,
                    required,
                    ..
                } => (name, key, required),
            };
            let fetched = fetched.next().expect("one fetch per step")?;
            let version = fetched.as_ref().map(|f| f.resource_version.clone());
            used.insert((ns.to_string(), name.clone()), version.unwrap_or_default());
            let Some(fetched) = fetched else {
                if required {
                    problems.push(SourceProblem::NotFound(name));
                }
                continue;
            };
            let keys: Vec<&decode::Decoded> = match &key {
                Some(k) => fetched.keys.iter().filter(|(kk, _)| kk == k).collect(),
                None => fetched.keys.iter().collect(),
            };
            if keys.is_empty()
                && let (Some(k), true) = (key, required)
            {
                problems.push(SourceProblem::KeyNotFound {
                    config_map: name.clone(),
                    key: k,
                });
            }
            for (key, text) in keys {
                match text {
                    Ok(text) => out.texts.push(SourceText {
                        config_map: name.clone(),
                        key: key.clone(),
                        resource_version: fetched.resource_version.clone(),
                        text: text.clone(),
                    }),
                    Err(error) => problems.push(SourceProblem::Unreadable {
                        config_map: name.clone(),
                        key: key.clone(),
                        error: error.clone(),
                    }),
                }
            }
        }
        Ok((out, problems))
    }

    /// The ConfigMaps `sources` name or select, in order (per source, its
    /// ConfigMaps in name order), and what is missing before any fetch.
    fn resolve(&self, ns: &str, sources: &[EntriesSource], indexed: bool) -> Vec<Step> {
        let mut steps = Vec::new();
        for (index, src) in sources.iter().enumerate() {
            let required = !src.optional.unwrap_or(false);
            let names = match (&src.config_map, &src.config_map_selector) {
                (Some(name), _) => vec![name.clone()],
                (None, Some(_)) if indexed => {
                    let names = self.index.select(ns, src);
                    if names.is_empty() && required {
                        steps.push(Step::Problem(SourceProblem::NoneSelected { index }));
                    }
                    names
                }
                // Without a watch there is nothing to select from.
                (None, _) => {
                    if required {
                        steps.push(Step::Problem(SourceProblem::NoneSelected { index }));
                    }
                    Vec::new()
                }
            };
            for name in names {
                // Not in the index: asked for anyway when named (the watch
                // may not have delivered a ConfigMap created just before
                // the set; a sync without it would write a part of the
                // set, then read it all back once the rest came).
                let version = match indexed.then(|| self.index.get(ns, &name)) {
                    Some(Some(m)) => m.metadata.resource_version.clone(),
                    Some(None) if src.config_map.is_none() => continue,
                    _ => None,
                };
                steps.push(Step::Fetch {
                    name,
                    version,
                    key: src.key.clone(),
                    required,
                });
            }
        }
        steps
    }

    /// The ConfigMap `ns/name`, fetched unless the cached copy has
    /// `version` (None: unknown, always fetch); None if it does not exist.
    /// One fetch per ConfigMap at a time: a set's sync and a VirtualSwitch
    /// re-applying that set may ask at once, and the second then finds
    /// the first one's copy instead of fetching and decoding it again.
    async fn fetch(
        &self,
        reads: &impl Reads,
        ns: &str,
        name: &str,
        version: Option<String>,
    ) -> Result<Option<Arc<Fetched>>, kube::Error> {
        let id = (ns.to_string(), name.to_string());
        let gate = self.lock_fetching().entry(id.clone()).or_default().clone();
        let turn = gate.lock().await;
        let r = self.fetch_now(reads, &id, version).await;
        drop(turn);
        let mut gates = self.lock_fetching();
        // Only the map and this call hold it: nobody waits.
        if Arc::strong_count(&gate) == 2 {
            gates.remove(&id);
        }
        r
    }

    async fn fetch_now(
        &self,
        reads: &impl Reads,
        id: &(String, String),
        version: Option<String>,
    ) -> Result<Option<Arc<Fetched>>, kube::Error> {
        let (ns, name) = (id.0.as_str(), id.1.as_str());
        let id = id.clone();
        if let Some(v) = &version {
            let cached = self.lock_fetched().get(&id).cloned();
            if let Some(f) = cached.filter(|f| &f.resource_version == v) {
                return Ok(Some(f));
            }
        }
        let Some(cm) = reads.config_map(ns, name).await? else {
            self.lock_fetched().remove(&id);
            return Ok(None);
        };
        let rv = cm.metadata.resource_version.clone().unwrap_or_default();
        if let Some(f) = self
            .lock_fetched()
            .get(&id)
            .filter(|f| f.resource_version == rv)
        {
            return Ok(Some(f.clone()));
        }
        self.metrics
            .fetches
            .get_or_create(&NamespaceLabel {
                namespace: ns.to_string(),
            })
            .inc();
        let keys = self
            .blocking(move || {
                let large = decode::data_bytes(&cm) >= RELEASE_FROM;
                let keys = decode::decode(&cm, None, MAX_TEXT_BYTES).unwrap_or_default();
                drop(cm);
                if large {
                    crate::allocator::release_freed();
                }
                keys
            })
            .await;
        let f = Arc::new(Fetched {
            resource_version: rv,
            keys,
        });
        self.lock_fetched().insert(id, f.clone());
        Ok(Some(f))
    }

    /// The parse of `text` against `schema`: cached, or parsed now on the
    /// blocking pool (concurrent callers of one key wait for one parse).
    pub async fn parsed(
        &self,
        set: &str,
        ns: &str,
        text: &SourceText,
        schema: &TableSchema,
        schema_digest: [u8; 32],
        options: ParseOptions,
    ) -> Arc<ParsedText> {
        let key = ParseKey {
            namespace: ns.to_string(),
            config_map: text.config_map.clone(),
            key: text.key.clone(),
            resource_version: text.resource_version.clone(),
            schema: schema_digest,
            mask_host_bits: options.mask_host_bits,
        };
        // Used before looked up: a concurrent eviction (which checks the
        // uses under the same lock) keeps it.
        self.lock_users().parse(set, &key);
        let slot = self.lock_parsed().entry(key).or_default().clone();
        slot.get_or_init(|| async {
            self.metrics
                .parses
                .get_or_create(&NamespaceLabel {
                    namespace: ns.to_string(),
                })
                .inc();
            let (schema, body) = (schema.clone(), text.text.clone());
            let p = self
                .blocking(move || {
                    let (p, len) = match body.take() {
                        Ok(text) => (parsed::parse(&schema, options, &text), text.len()),
                        Err(e) => (parsed::unreadable(&e), 0),
                    };
                    // A taken gzip text is freed by now.
                    if len >= RELEASE_FROM {
                        crate::allocator::release_freed();
                    }
                    p
                })
                .await;
            Arc::new(p)
        })
        .await
        .clone()
    }

    /// Starts recording which parses set `set` uses (call before its
    /// [`EntrySources::parsed`] calls); [`EntrySources::finish`] then
    /// evicts what it used before and no set uses now.
    pub fn begin(&self, set: &str) {
        self.lock_users().begin(set);
    }

    /// Ends the sync of set `set` begun with [`EntrySources::begin`]:
    /// evicts the parses it no longer uses and no other set does.
    pub fn finish(&self, set: &str) {
        let mut users = self.lock_users();
        let gone = users.finish(set);
        self.evict_parses(&users, &gone);
    }

    /// Forgets set `set` (deleted) and evicts what only it used.
    pub fn release(&self, set: &str) {
        let mut users = self.lock_users();
        let (parses, config_maps) = users.release(set);
        self.evict_parses(&users, &parses);
        self.evict_fetched(&config_maps);
    }

    /// Drops the parses `gone` (none of them used, under the `users`
    /// lock held by the caller: a set that starts using one again
    /// meanwhile waits, then parses it afresh).
    fn evict_parses(&self, users: &Users<ParseKey>, gone: &[ParseKey]) {
        if gone.is_empty() {
            return;
        }
        tracing::debug!(parses = gone.len(), "parses no longer used: evicted");
        let mut parsed = self.lock_parsed();
        for key in gone.iter().filter(|k| !users.holds(k)) {
            parsed.remove(key);
        }
        let (mut n, mut bytes) = (0i64, 0i64);
        for slot in parsed.values() {
            if let Some(p) = slot.get() {
                n += 1;
                bytes += p.approx_bytes() as i64;
            }
        }
        self.metrics.cached_texts.set(n);
        self.metrics.cached_bytes.set(bytes);
    }

    /// Drops the fetched ConfigMaps `gone` (read by no set).
    fn evict_fetched(&self, gone: &[ConfigMapId]) {
        if gone.is_empty() {
            return;
        }
        let mut fetched = self.lock_fetched();
        for id in gone {
            fetched.remove(id);
        }
    }

    /// How many parsed texts and fetched ConfigMaps are held.
    pub fn held(&self) -> (usize, usize) {
        (self.lock_parsed().len(), self.lock_fetched().len())
    }

    fn lock_fetched(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), Arc<Fetched>>> {
        self.fetched.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn lock_fetching(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), FetchGate>> {
        self.fetching.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn lock_parsed(&self) -> std::sync::MutexGuard<'_, HashMap<ParseKey, ParseSlot>> {
        self.parsed.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn lock_users(&self) -> std::sync::MutexGuard<'_, Users<ParseKey>> {
        self.users.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Which sets read which ConfigMaps in their last sync, for the watch's
    /// mapper: a ConfigMap whose labels no longer match a selector still
    /// requeues the sets that read it.
    pub fn readers(&self) -> Readers {
        Readers(self.users.clone())
    }
}

/// A handle on which ConfigMaps each set read last ([`EntrySources::readers`]).
#[derive(Clone)]
pub struct Readers(Arc<Mutex<Users<ParseKey>>>);

impl Readers {
    /// The sets (`namespace/name`) that read ConfigMap `ns/name` in their
    /// last sync, each with the resourceVersion it read ("" if none).
    pub fn of(&self, ns: &str, name: &str) -> Vec<(String, String)> {
        self.lock().readers_of(&(ns.to_string(), name.to_string()))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Users<ParseKey>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The sets to sync for a watch event of a ConfigMap at `version`:
/// `readers` (each with the version its last sync read) that read another
/// version, and the `selecting` sets (whose sources name or select it)
/// that did not read it at all. A reader of this very version is left
/// alone: a set created right after its ConfigMaps reads them before the
/// watch delivers them, and would otherwise read its whole table back
/// once the events came. Without a version every reader syncs.
pub fn to_sync(
    readers: Vec<(String, String)>,
    selecting: impl IntoIterator<Item = String>,
    version: Option<&str>,
) -> Vec<String> {
    let mut out = Vec::new();
    let mut read = std::collections::HashSet::new();
    for (set, v) in readers {
        if version != Some(v.as_str()) {
            out.push(set.clone());
        }
        read.insert(set);
    }
    for set in selecting {
        if !read.contains(&set) {
            read.insert(set.clone());
            out.push(set);
        }
    }
    out
}

/// Requeues sets when a ConfigMap they read (by name or selector) changes.
pub fn reads_config_map(set: &p4fleet_crds::TableEntrySet, cm: &Meta) -> bool {
    let (Some(name), ns) = (
        cm.metadata.name.as_deref(),
        cm.metadata.namespace.as_deref(),
    ) else {
        return false;
    };
    let empty = Default::default();
    let labels = cm.metadata.labels.as_ref().unwrap_or(&empty);
    if crate::ownership::is_record(Some(labels)) {
        return false;
    }
    set.metadata.namespace.as_deref() == ns
        && set
            .spec
            .entries_from
            .iter()
            .any(|s| s.selects(name, labels))
}

#[cfg(test)]
mod tests;
