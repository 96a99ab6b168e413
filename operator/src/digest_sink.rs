//! Digest sinks of TableEntrySets (`spec.digests[].sink`): besides
//! learning, a digest's messages go to the operator's log (`Log`: one
//! structured line per DigestList) and/or to a ConfigMap owned by the set
//! (`ConfigMap`: its last `keep` messages, newest last).
//!
//! One task per set and target listens to its device's notices (the
//! client has acked every list already) and logs or buffers what its
//! digests send; one writer task per set puts the buffers into their
//! ConfigMaps by server-side apply with the operator's field manager, at
//! most once per [`FLUSH_PERIOD`] ([`Throttle`]), so a digest flood costs
//! one API write per ConfigMap and period, never one per message. The
//! TableEntrySet reconcile starts, replaces and stops them
//! ([`DigestSinks::configure`], [`DigestSinks::ensure`],
//! [`DigestSinks::stop`]); its finalizer deletes the ConfigMaps (a bare
//! kube-apiserver runs no garbage collector, so the ownerReference alone
//! would leave them behind).
//!
//! What a ConfigMap holds is what this process received: after an
//! operator restart it starts again from the next message.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use kube::{Client, ResourceExt};
use p4fleet_client::{Device, Notice};
use p4fleet_crds::{DigestSink, DigestSinkKind, MAX_SINK_KEEP};
use p4fleet_model::learn::DigestInfo;
use p4fleet_proto::p4runtime as p4;
use sha2::{Digest, Sha256};
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::{Notify, watch};
use tokio::time::Instant;

use crate::status::{FIELD_MANAGER, now_rfc3339};

/// Label of every sink ConfigMap: the set that writes it. A ConfigMap of
/// the sink's name without it is someone else's and is never written.
pub const SINK_LABEL: &str = "p4fleet.dev/digest-sink";
/// At most one write per ConfigMap in this period.
pub const FLUSH_PERIOD: Duration = Duration::from_secs(10);
/// Messages rendered in one log line; the rest are counted (`more`).
pub const LOG_MESSAGES: usize = 8;
/// The `tracing` target of the log sink's lines (filter on it).
pub const LOG_TARGET: &str = "p4fleet::digests";
/// Keys of a sink ConfigMap.
pub const KEY_DIGEST: &str = "digest";
pub const KEY_MESSAGES: &str = "messages";
pub const KEY_RECEIVED: &str = "received";
/// Longest ConfigMap name (a DNS subdomain).
const MAX_NAME: usize = 253;

/// A sink the spec gets wrong (the CRD schema refuses these too; the
/// operator checks again rather than trust every writer of the object).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SinkError {
    #[error("no sink given (Log, ConfigMap or both)")]
    NoSink,
    #[error("{0:?} is given twice")]
    Repeated(DigestSinkKind),
    #[error("{keep} is out of range (1 to {MAX_SINK_KEEP})")]
    Keep { keep: u32 },
}

impl SinkError {
    /// The field of `digests[i]` it is about.
    pub fn field(&self) -> &'static str {
        match self {
            SinkError::NoSink | SinkError::Repeated(_) => "sink.to",
            SinkError::Keep { .. } => "sink.keep",
        }
    }
}

/// Checks one digest's sink (pure).
pub fn check(sink: &DigestSink) -> Result<(), SinkError> {
    if sink.to.is_empty() {
        return Err(SinkError::NoSink);
    }
    let mut seen = HashSet::new();
    if let Some(k) = sink.to.iter().find(|k| !seen.insert(**k)) {
        return Err(SinkError::Repeated(*k));
    }
    if sink.keep == 0 || sink.keep > MAX_SINK_KEEP {
        return Err(SinkError::Keep { keep: sink.keep });
    }
    Ok(())
}

/// The ConfigMap of digest `digest` (as the spec names it) of set `set`:
/// `<set>-digest-<digest>`, lower case, `_` and other characters a name
/// may not hold as `-`. A hash of the original names is appended when
/// that lost information (upper case) or the name would be too long, so
/// two digests never share a ConfigMap.
pub fn config_map_name(set: &str, digest: &str) -> String {
    let slug: String = digest
        .chars()
        .map(|c| match c {
            'a'..='z' | '0'..='9' | '.' => c,
            'A'..='Z' => c.to_ascii_lowercase(),
            _ => '-',
        })
        .collect();
    let slug = slug.trim_matches(|c: char| !c.is_ascii_alphanumeric());
    let name = format!("{set}-digest-{slug}");
    let lossy = digest.chars().any(|c| c.is_ascii_uppercase()) || slug.is_empty();
    if !lossy && name.len() <= MAX_NAME {
        return name;
    }
    let hash = Sha256::digest(format!("{set}/{digest}").as_bytes());
    let hex: String = hash[..4].iter().map(|b| format!("{b:02x}")).collect();
    let keep = MAX_NAME - hex.len() - 1;
    let head = name[..name.len().min(keep)].trim_end_matches(['-', '.']);
    format!("{head}-{hex}")
}

/// The last `keep` rendered messages of one digest (pure).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ring {
    digest: String,
    keep: usize,
    lines: VecDeque<String>,
    received: u64,
    dirty: bool,
}

impl Ring {
    pub fn new(digest: &str, keep: u32) -> Ring {
        Ring {
            digest: digest.to_string(),
            keep: keep as usize,
            lines: VecDeque::new(),
            received: 0,
            dirty: false,
        }
    }

    /// Adds one message, dropping the oldest beyond `keep`.
    pub fn push(&mut self, line: String) {
        self.received += 1;
        self.lines.push_back(line);
        self.trim();
        self.dirty = true;
    }

    /// A new bound (the spec changed); the oldest go if it is smaller.
    pub fn set_keep(&mut self, keep: u32) {
        if self.keep != keep as usize {
            self.keep = keep as usize;
            self.trim();
            self.dirty = true;
        }
    }

    fn trim(&mut self) {
        while self.lines.len() > self.keep {
            self.lines.pop_front();
        }
    }

    /// Messages this process received for it.
    #[cfg(test)]
    pub fn received(&self) -> u64 {
        self.received
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.lines.len()
    }

    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.lines.is_empty()
    }

    /// Whether it changed since it was last written.
    #[cfg(test)]
    pub fn dirty(&self) -> bool {
        self.dirty
    }

    /// The ConfigMap's `data` as of now.
    pub fn data(&self) -> BTreeMap<&'static str, String> {
        let mut messages = String::new();
        for l in &self.lines {
            messages.push_str(l);
            messages.push('\n');
        }
        BTreeMap::from([
            (KEY_DIGEST, self.digest.clone()),
            (KEY_MESSAGES, messages),
            (KEY_RECEIVED, self.received.to_string()),
        ])
    }
}

/// When the writer may write again (pure): the first write at once,
/// each later one [`FLUSH_PERIOD`] after the previous.
#[derive(Debug, Default, Clone, Copy)]
pub struct Throttle {
    last: Option<Instant>,
}

impl Throttle {
    /// How long a write wanted at `now` waits.
    pub fn wait(&self, now: Instant) -> Duration {
        match self.last {
            None => Duration::ZERO,
            Some(l) => (l + FLUSH_PERIOD).saturating_duration_since(now),
        }
    }

    pub fn wrote(&mut self, now: Instant) {
        self.last = Some(now);
    }
}

/// One message as a sink shows it: the members by name, or why it could
/// not be decoded (never left out silently).
pub fn render(info: &DigestInfo, data: &p4::P4Data) -> String {
    info.render(data)
        .unwrap_or_else(|e| format!("undecoded=\"{e}\""))
}

/// The values of one list for its log line (pure): at most
/// [`LOG_MESSAGES`] messages, `; ` between them, and how many more the
/// list held.
pub fn log_values(info: &DigestInfo, list: &p4::DigestList) -> (String, usize) {
    let shown: Vec<String> = list
        .data
        .iter()
        .take(LOG_MESSAGES)
        .map(|d| render(info, d))
        .collect();
    (
        shown.join("; "),
        list.data.len().saturating_sub(shown.len()),
    )
}

/// One ConfigMap line: when it was received, where from, which list.
pub fn message_line(at: &str, virtual_switch: &str, list_id: u64, rendered: &str) -> String {
    format!("{at} {virtual_switch} list={list_id} {rendered}")
}

/// The ConfigMap object of `ring` for set `set`, owned by it through
/// `owner` (the set's `Resource::controller_owner_ref`).
pub fn object(
    set: &ObjectReference,
    owner: Option<&OwnerReference>,
    name: &str,
    ring: &Ring,
) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name,
            "labels": {
                SINK_LABEL: set.name.as_deref().unwrap_or_default(),
                "app.kubernetes.io/managed-by": "p4fleet",
            },
            "ownerReferences": owner.into_iter().collect::<Vec<_>>(),
        },
        "data": ring.data(),
    })
}

/// What one target's sink does with each of its digests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SinkRule {
    pub digest: DigestInfo,
    pub log: bool,
    /// The ConfigMap its messages go to.
    pub config_map: Option<String>,
}

/// Why a sink's ConfigMap cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ClaimError {
    #[error(
        "ConfigMap {name} exists and is not this set's (no {SINK_LABEL} label naming it); delete or rename it"
    )]
    Taken { name: String },
    #[error("ConfigMap {name}: {source}")]
    Api {
        name: String,
        #[source]
        source: kube::Error,
    },
}

impl ClaimError {
    /// The `DigestsSynced` reason.
    pub fn reason(&self) -> &'static str {
        match self {
            ClaimError::Taken { .. } => "DigestSinkTaken",
            ClaimError::Api { .. } => "DigestSinkFailed",
        }
    }
}

/// What one target's sink task needs.
pub struct SinkJob {
    pub virtual_switch: String,
    pub device: Arc<Device>,
    pub slot: u32,
    pub rules: Vec<SinkRule>,
}

type Rings = Arc<Mutex<BTreeMap<String, Ring>>>;

struct Running {
    rules: Vec<SinkRule>,
    device: Arc<Device>,
    task: tokio::task::AbortHandle,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The writer of one set's ConfigMaps. Stopped only between writes, so a
/// stop never leaves a write in flight behind a delete.
struct Writer {
    stop: watch::Sender<bool>,
    done: tokio::task::JoinHandle<()>,
}

#[derive(Default)]
struct SetSinks {
    targets: HashMap<String, Running>,
    rings: Rings,
    notify: Arc<Notify>,
    writer: Option<Writer>,
    /// ConfigMap names found free or this set's ([`DigestSinks::claim`]).
    claimed: HashSet<String>,
}

/// The sinks of every set, by set (`namespace/name`).
#[derive(Default)]
pub struct DigestSinks {
    sets: Mutex<HashMap<String, SetSinks>>,
}

impl DigestSinks {
    fn with<T>(&self, key: &str, f: impl FnOnce(&mut SetSinks) -> T) -> T {
        let mut sets = self.sets.lock().unwrap_or_else(|e| e.into_inner());
        f(sets.entry(key.to_string()).or_default())
    }

    /// Checks, once per process and name, that ConfigMap `name` is free
    /// or already this set's: the sink never writes over someone else's.
    pub async fn claim(
        &self,
        client: &Client,
        key: &str,
        set: &ObjectReference,
        name: &str,
    ) -> Result<(), ClaimError> {
        if self.with(key, |s| s.claimed.contains(name)) {
            return Ok(());
        }
        let ns = set.namespace.as_deref().unwrap_or_default();
        let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
        let found = api.get_opt(name).await.map_err(|source| ClaimError::Api {
            name: name.to_string(),
            source,
        })?;
        let ours = found.is_none_or(|cm| cm.labels().get(SINK_LABEL) == set.name.as_ref());
        if !ours {
            return Err(ClaimError::Taken {
                name: name.to_string(),
            });
        }
        self.with(key, |s| s.claimed.insert(name.to_string()));
        Ok(())
    }

    /// The set's ConfigMaps are `books` (name, digest, keep): buffers of
    /// others are dropped, new ones made, and the writer runs while there
    /// is any.
    pub async fn configure(
        &self,
        client: &Client,
        key: &str,
        set: &ObjectReference,
        owner: Option<&OwnerReference>,
        books: &[(String, String, u32)],
    ) {
        let idle = self.with(key, |s| {
            let mut rings = s.rings.lock().unwrap_or_else(|e| e.into_inner());
            rings.retain(|name, _| books.iter().any(|b| &b.0 == name));
            for (name, digest, keep) in books {
                rings
                    .entry(name.clone())
                    .or_insert_with(|| Ring::new(digest, *keep))
                    .set_keep(*keep);
            }
            drop(rings);
            if books.is_empty() {
                return s.writer.take();
            }
            if s.writer.is_none() {
                let (stop, stopped) = watch::channel(false);
                let done = tokio::spawn(write_loop(
                    client.clone(),
                    Arc::new(set.clone()),
                    owner.cloned(),
                    s.rings.clone(),
                    s.notify.clone(),
                    stopped,
                ));
                s.writer = Some(Writer { stop, done });
            }
            None
        });
        if let Some(w) = idle {
            finish(w).await;
        }
    }

    /// Runs `job` for its target of set `key`, unless a task with the
    /// same rules and device runs already.
    pub fn ensure(&self, key: &str, job: SinkJob) {
        let Device::P4Runtime(_) = job.device.as_ref() else {
            return;
        };
        self.with(key, |s| {
            if let Some(r) = s.targets.get(&job.virtual_switch)
                && r.rules == job.rules
                && Arc::ptr_eq(&r.device, &job.device)
            {
                return;
            }
            let task = tokio::spawn(sink_loop(
                key.to_string(),
                job.virtual_switch.clone(),
                job.device.clone(),
                job.slot,
                job.rules.clone(),
                s.rings.clone(),
                s.notify.clone(),
            ))
            .abort_handle();
            tracing::info!(set = key, virtual_switch = %job.virtual_switch, "digest sink started");
            s.targets.insert(
                job.virtual_switch,
                Running {
                    rules: job.rules,
                    device: job.device,
                    task,
                },
            );
        });
    }

    /// Stops the sink tasks of set `key` whose targets are not in `keep`.
    pub fn retain(&self, key: &str, keep: &[&str]) {
        let mut sets = self.sets.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(s) = sets.get_mut(key) {
            s.targets.retain(|vs, _| keep.contains(&vs.as_str()));
        }
    }

    /// Stops everything of set `key` and waits for its writer to finish
    /// the write it may be doing (so a delete after this is the last
    /// word).
    pub async fn stop(&self, key: &str) {
        let gone = {
            let mut sets = self.sets.lock().unwrap_or_else(|e| e.into_inner());
            sets.remove(key)
        };
        if let Some(w) = gone.and_then(|mut s| s.writer.take()) {
            finish(w).await;
        }
    }
}

/// Stops a writer and waits for it (a write it is doing has the kube
/// client's own timeout).
async fn finish(w: Writer) {
    let _ = w.stop.send(true);
    if let Err(e) = w.done.await
        && !e.is_cancelled()
    {
        tracing::warn!(error = %e, "digest sink writer failed");
    }
}

/// One set's writer: waits for a changed buffer, then for its
/// [`Throttle`], then writes every changed ConfigMap once.
async fn write_loop(
    client: Client,
    set: Arc<ObjectReference>,
    owner: Option<OwnerReference>,
    rings: Rings,
    notify: Arc<Notify>,
    mut stop: watch::Receiver<bool>,
) {
    let ns = set.namespace.as_deref().unwrap_or_default();
    let api: Api<ConfigMap> = Api::namespaced(client, ns);
    let mut throttle = Throttle::default();
    loop {
        tokio::select! {
            _ = notify.notified() => {}
            _ = stop.changed() => return,
        }
        let wait = throttle.wait(Instant::now());
        if !wait.is_zero() {
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = stop.changed() => return,
            }
        }
        let due: Vec<(String, serde_json::Value)> = {
            let mut rings = rings.lock().unwrap_or_else(|e| e.into_inner());
            rings
                .iter_mut()
                .filter(|(_, r)| r.dirty)
                .map(|(name, r)| {
                    r.dirty = false;
                    (name.clone(), object(&set, owner.as_ref(), name, r))
                })
                .collect()
        };
        for (name, obj) in due {
            let params = PatchParams::apply(FIELD_MANAGER).force();
            if let Err(e) = api.patch(&name, &params, &Patch::Apply(obj)).await {
                tracing::warn!(config_map = %name, error = %e, "digest sink not written; retried");
                if let Some(r) = rings
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .get_mut(&name)
                {
                    r.dirty = true;
                }
                notify.notify_one();
            }
        }
        throttle.wrote(Instant::now());
    }
}

/// One target's listener; ends when aborted or when the device goes away.
async fn sink_loop(
    set: String,
    virtual_switch: String,
    device: Arc<Device>,
    slot: u32,
    rules: Vec<SinkRule>,
    rings: Rings,
    notify: Arc<Notify>,
) {
    let Device::P4Runtime(p) = device.as_ref() else {
        return;
    };
    let device_id = p.target().device_id(slot);
    let mut rx = p.notices();
    loop {
        let list = match rx.recv().await {
            Ok(Notice::DigestList { device_id: d, list }) if d == device_id => list,
            Ok(_) => continue,
            Err(RecvError::Lagged(k)) => {
                tracing::warn!(
                    set,
                    virtual_switch,
                    lost = k,
                    "digest sink fell behind its device's notices"
                );
                continue;
            }
            Err(RecvError::Closed) => return,
        };
        let Some(rule) = rules.iter().find(|r| r.digest.id == list.digest_id) else {
            continue;
        };
        if rule.log {
            let (values, more) = log_values(&rule.digest, &list);
            tracing::info!(
                target: LOG_TARGET,
                set,
                virtual_switch,
                digest = %rule.digest.name,
                list_id = list.list_id,
                messages = list.data.len(),
                more,
                values = %values,
                "digest list"
            );
        }
        if let Some(name) = &rule.config_map {
            let at = now_rfc3339();
            let mut rings = rings.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(ring) = rings.get_mut(name) {
                for d in &list.data {
                    let line = render(&rule.digest, d);
                    ring.push(message_line(&at, &virtual_switch, list.list_id, &line));
                }
            }
            drop(rings);
            notify.notify_one();
        }
    }
}

/// Deletes ConfigMap `name` if it is the sink of set `set` (its label
/// says so), whether or not this process wrote it; a missing one, or
/// someone else's of that name, is left alone. Whether it deleted one.
pub async fn delete(client: &Client, ns: &str, set: &str, name: &str) -> Result<bool, kube::Error> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let Some(cm) = api.get_opt(name).await? else {
        return Ok(false);
    };
    if cm.labels().get(SINK_LABEL).map(String::as_str) != Some(set) {
        return Ok(false);
    }
    // The object just checked, not one created since under that name.
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: cm.uid(),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    match api.delete(name, &params).await {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(s)) if s.is_not_found() || s.code == 409 => Ok(false),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::Resource;
    use p4fleet_crds::TableEntrySet;
    use p4fleet_model::learn::Member;

    fn info() -> DigestInfo {
        DigestInfo {
            id: 7,
            name: "mac_learn_digest_t".into(),
            members: vec![
                Member {
                    name: "srcAddr".into(),
                    bitwidth: 48,
                },
                Member {
                    name: "ingress_port".into(),
                    bitwidth: 9,
                },
            ],
        }
    }

    fn msg(last: u8, port: u8) -> p4::P4Data {
        let bits = |b: Vec<u8>| p4::P4Data {
            data: Some(p4::p4_data::Data::Bitstring(b)),
        };
        p4::P4Data {
            data: Some(p4::p4_data::Data::Struct(p4::P4StructLike {
                members: vec![bits(vec![2, 0, 0, 0, 0, last]), bits(vec![port])],
            })),
        }
    }

    #[test]
    fn a_log_line_renders_at_most_a_bounded_number_of_messages() {
        let list = p4::DigestList {
            digest_id: 7,
            list_id: 3,
            data: (1..=3).map(|i| msg(i, i)).collect(),
            ..Default::default()
        };
        let (values, more) = log_values(&info(), &list);
        assert_eq!(
            values,
            "srcAddr=02:00:00:00:00:01 ingress_port=1; srcAddr=02:00:00:00:00:02 ingress_port=2; \
             srcAddr=02:00:00:00:00:03 ingress_port=3"
        );
        assert_eq!(more, 0);
        let flood = p4::DigestList {
            data: (0..100).map(|i| msg(i, 1)).collect(),
            ..list
        };
        let (values, more) = log_values(&info(), &flood);
        assert_eq!(values.matches("srcAddr=").count(), LOG_MESSAGES);
        assert_eq!(more, 100 - LOG_MESSAGES);
        // A message that does not decode says so in its place.
        let odd = p4::DigestList {
            data: vec![p4::P4Data::default()],
            ..Default::default()
        };
        let (values, _) = log_values(&info(), &odd);
        assert!(values.starts_with("undecoded=\""), "{values}");
    }

    #[test]
    fn the_ring_keeps_the_newest_messages_within_its_bound() {
        let mut r = Ring::new("mac_learn_digest_t", 3);
        assert!(!r.dirty() && r.is_empty());
        for i in 0..5 {
            r.push(format!("m{i}"));
        }
        assert_eq!((r.len(), r.received()), (3, 5));
        assert!(r.dirty());
        let data = r.data();
        assert_eq!(data[KEY_MESSAGES], "m2\nm3\nm4\n");
        assert_eq!(data[KEY_RECEIVED], "5");
        assert_eq!(data[KEY_DIGEST], "mac_learn_digest_t");
        r.dirty = false;
        r.set_keep(3);
        assert!(!r.dirty(), "the same bound changes nothing");
        r.set_keep(1);
        assert_eq!(r.data()[KEY_MESSAGES], "m4\n");
        assert!(r.dirty());
    }

    #[test]
    fn a_flood_is_written_at_most_once_per_period() {
        // A message every millisecond for a minute; the writer loop's
        // rule: write when something changed and the throttle allows.
        let t0 = Instant::now();
        let mut t = Throttle::default();
        let mut ring = Ring::new("d", 50);
        let mut writes = Vec::new();
        for ms in 0..60_000u64 {
            let now = t0 + Duration::from_millis(ms);
            ring.push(format!("m{ms}"));
            if ring.dirty() && t.wait(now).is_zero() {
                ring.dirty = false;
                t.wrote(now);
                writes.push(ms);
            }
        }
        assert_eq!(writes.first(), Some(&0), "the first message at once");
        assert_eq!(writes.len(), 6, "{writes:?}");
        assert!(writes.windows(2).all(|w| w[1] - w[0] >= 10_000));
        assert_eq!(ring.received(), 60_000);
        assert_eq!(ring.len(), 50);
        // Quiet for a while: the next message goes at once.
        let later = t0 + Duration::from_secs(120);
        assert_eq!(t.wait(later), Duration::ZERO);
        assert_eq!(
            t.wait(t0 + Duration::from_millis(55_000)),
            Duration::from_secs(5)
        );
    }

    #[test]
    fn sinks_are_checked_by_field() {
        let sink = |to: Vec<DigestSinkKind>, keep| DigestSink { to, keep };
        use DigestSinkKind::*;
        assert_eq!(check(&sink(vec![Log, ConfigMap], 50)), Ok(()));
        let e = check(&sink(vec![], 50)).unwrap_err();
        assert_eq!((e.field(), e), ("sink.to", SinkError::NoSink));
        let e = check(&sink(vec![Log, Log], 50)).unwrap_err();
        assert_eq!((e.field(), e), ("sink.to", SinkError::Repeated(Log)));
        let e = check(&sink(vec![ConfigMap], MAX_SINK_KEEP + 1)).unwrap_err();
        assert_eq!(e.field(), "sink.keep");
        assert_eq!(e.to_string(), "501 is out of range (1 to 500)");
        assert!(check(&sink(vec![ConfigMap], 0)).is_err());
    }

    #[test]
    fn config_map_names_are_valid_and_distinct() {
        assert_eq!(
            config_map_name("l2", "mac_learn_digest_t"),
            "l2-digest-mac-learn-digest-t"
        );
        // Case is folded, so the hash keeps `Foo` and `foo` apart.
        let upper = config_map_name("l2", "Learn_T");
        assert!(upper.starts_with("l2-digest-learn-t-"), "{upper}");
        assert_ne!(upper, config_map_name("l2", "learn_T"));
        assert_ne!(config_map_name("l2", "learn_t"), upper);
        let long = config_map_name(&"s".repeat(250), "d");
        assert_eq!(long.len(), MAX_NAME);
        assert!(
            long.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
        );
        assert!(long.chars().last().unwrap().is_ascii_alphanumeric());
    }

    #[test]
    fn the_config_map_is_owned_by_its_set_and_labelled() {
        let set: TableEntrySet = serde_json::from_value(serde_json::json!({
            "apiVersion": "p4fleet.dev/v1alpha1", "kind": "TableEntrySet",
            "metadata": {"name": "l2", "namespace": "ns", "uid": "u-1"},
            "spec": {"virtualSwitchRef": "l2", "table": "MyIngress.smac"}
        }))
        .unwrap();
        let mut ring = Ring::new("mac_learn_digest_t", 5);
        let rendered = render(&info(), &msg(7, 3));
        ring.push(message_line("2026-11-27T16:00:00Z", "l2", 4, &rendered));
        let owner = set.controller_owner_ref(&());
        let cm = object(
            &set.object_ref(&()),
            owner.as_ref(),
            "l2-digest-mac-learn-digest-t",
            &ring,
        );
        let owner = &cm["metadata"]["ownerReferences"][0];
        assert_eq!(
            (&owner["kind"], &owner["uid"], &owner["controller"]),
            (
                &serde_json::json!("TableEntrySet"),
                &serde_json::json!("u-1"),
                &serde_json::json!(true)
            )
        );
        assert_eq!(cm["metadata"]["labels"][SINK_LABEL], "l2");
        assert_eq!(
            cm["data"][KEY_MESSAGES],
            "2026-11-27T16:00:00Z l2 list=4 srcAddr=02:00:00:00:00:07 ingress_port=3\n"
        );
        assert_eq!(cm["data"][KEY_RECEIVED], "1");
    }
}
