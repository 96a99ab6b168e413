//! The operator's path for one TableEntrySet target, in process and
//! without a cluster: ConfigMaps with gzip-compressed `binaryData`
//! (served from memory, a fresh copy per GET as the API server's answer
//! would be) → fetch and gunzip → parse → desired set → read back and plan
//! → chunked write to a device → status. The stages are the operator's
//! own functions (`entry_sources`, `entry_set::{parse, apply, status}`);
//! left out is only the Kubernetes I/O around them (watches, the status
//! and ownership-record writes).
//!
//! Used by `p4fleet-entry-path` (memory and time per stage at 1 M
//! entries, docs/performance.md) and `p4fleet-batching-bench` (Auto against
//! static write settings), and at a small size by `tests/entry_path.rs`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, anyhow};
use k8s_openapi::api::core::v1::ConfigMap;
use p4fleet::stages::{
    Auto, Ctx, EntrySets, FetchError, Reads, SetCtx, Target, apply, parse, status,
};
use p4fleet::{Context, DevicePool, Metrics, OperatorConfig};
use p4fleet_crds::{
    P4Program, Switch, TableEntrySet, TableEntrySetStatus, UrlSource, VirtualSwitch,
};
use p4fleet_model::entries::TableSchema;
use p4fleet_proto::p4info::{self, P4Info};

use crate::fleet::manifests::{Entries, GZIP_KEY, NAMESPACE, TABLE, gzip};

/// The ConfigMaps key every map holds its text under (gzip-compressed).
pub const KEY: &str = GZIP_KEY;

/// A stage of one sync, reported when it ends (its results still held).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// The ConfigMaps fetched and gunzipped (the texts).
    Fetch,
    /// Each text parsed, the desired set assembled (duplicates, digest).
    Parse,
    /// The device's table read back and the difference planned.
    Plan,
    /// The plan written chunk by chunk.
    Write,
    /// The status built from the outcome.
    Status,
}

impl Stage {
    pub fn name(self) -> &'static str {
        match self {
            Stage::Fetch => "fetch + gunzip",
            Stage::Parse => "parse + assemble desired",
            Stage::Plan => "read back + plan",
            Stage::Write => "chunked write",
            Stage::Status => "status",
        }
    }
}

/// `entries` (the fleet benchmark's firewall lines) in ConfigMaps of
/// `per_map` lines each, gzip-compressed under [`KEY`].
pub fn config_maps(entries: usize, per_map: usize) -> Vec<ConfigMap> {
    let e = Entries {
        count: entries,
        change_every: 100,
        version: 0,
    };
    let per_map = per_map.max(1);
    (0..entries.div_ceil(per_map))
        .map(|m| {
            let bytes = gzip(&e.lines(m * per_map, per_map));
            let mut cm = ConfigMap::default();
            cm.metadata.name = Some(map_name(m));
            cm.metadata.namespace = Some(NAMESPACE.into());
            cm.metadata.resource_version = Some("1".into());
            cm.binary_data = Some(BTreeMap::from([(
                KEY.to_string(),
                k8s_openapi::ByteString(bytes),
            )]));
            cm
        })
        .collect()
}

fn map_name(m: usize) -> String {
    format!("big-entries-{m:03}")
}

/// The cluster as the stages read it: only ConfigMaps.
pub struct MemReads {
    maps: BTreeMap<String, ConfigMap>,
}

impl MemReads {
    pub fn new(maps: Vec<ConfigMap>) -> MemReads {
        MemReads {
            maps: maps
                .into_iter()
                .map(|m| (m.metadata.name.clone().unwrap_or_default(), m))
                .collect(),
        }
    }

    /// Compressed bytes held (what the API server would serve).
    pub fn bytes(&self) -> usize {
        self.maps
            .values()
            .flat_map(|m| m.binary_data.iter().flat_map(|b| b.values()))
            .map(|v| v.0.len())
            .sum()
    }
}

impl Reads for MemReads {
    async fn switch(&self, _: &str) -> Result<Option<Switch>, kube::Error> {
        Ok(None)
    }
    async fn switches(&self) -> Result<Vec<Switch>, kube::Error> {
        Ok(Vec::new())
    }
    async fn program(&self, _: &str, _: &str) -> Result<Option<P4Program>, kube::Error> {
        Ok(None)
    }
    async fn virtual_switch(&self, _: &str, _: &str) -> Result<Option<VirtualSwitch>, kube::Error> {
        Ok(None)
    }
    async fn virtual_switches(&self, _: Option<&str>) -> Result<Vec<VirtualSwitch>, kube::Error> {
        Ok(Vec::new())
    }
    async fn config_map(&self, _: &str, name: &str) -> Result<Option<ConfigMap>, kube::Error> {
        Ok(self.maps.get(name).cloned())
    }
    async fn entry_revisions(&self, _: &str, _: &str) -> Result<Vec<ConfigMap>, kube::Error> {
        Ok(Vec::new())
    }
    async fn controller_revision(
        &self,
        _: &str,
        _: &str,
    ) -> Result<Option<k8s_openapi::api::apps::v1::ControllerRevision>, kube::Error> {
        Ok(None)
    }
    async fn program_revisions(
        &self,
        _: &str,
        _: &str,
    ) -> Result<Vec<k8s_openapi::api::apps::v1::ControllerRevision>, kube::Error> {
        Ok(Vec::new())
    }
    async fn artifact(
        &self,
        _: &str,
        _: &UrlSource,
    ) -> Result<Result<Vec<u8>, FetchError>, kube::Error> {
        Ok(Err(FetchError::InvalidUrl {
            reason: "no artifacts in the entry path".into(),
        }))
    }
}

/// The example firewall's P4Info with its tables sized for `entries`.
pub fn p4info(entries: usize) -> anyhow::Result<P4Info> {
    let path = p4fleet_e2e::repo_root().join("examples/firewall/p4info.txt");
    let text = std::fs::read_to_string(&path).with_context(|| format!("reading {path:?}"))?;
    let sized = crate::fleet::manifests::p4info_with_size(&text, entries.max(65_536));
    p4info::parse_text(&sized).map_err(|e| anyhow!("P4Info: {e}"))
}

/// One set with one target, synced by the operator's stages.
pub struct EntryPath {
    pub ctx: Arc<SetCtx>,
    reads: MemReads,
    pub set: TableEntrySet,
    set_key: String,
    target: Target,
    info: P4Info,
    cookie: u64,
}

/// What one sync did.
#[derive(Debug, Clone)]
pub struct Synced {
    pub desired: u64,
    pub applied: u64,
    pub written: u64,
    pub requests: u64,
    /// From the end of the fetch to the end of the write (ConfigMap text
    /// parsed → device).
    pub parse_to_device: Duration,
    /// The write stage alone.
    pub write: Duration,
    pub status: TableEntrySetStatus,
}

impl EntryPath {
    /// A set reading every map of `reads` with `write` settings (the
    /// spec's `write` object), targeting device `device_id` of the
    /// P4Runtime server at `endpoint` (slot 0), whose pipeline is loaded.
    pub async fn new(
        reads: MemReads,
        endpoint: &str,
        device_id: u64,
        info: P4Info,
        write: serde_json::Value,
    ) -> anyhow::Result<EntryPath> {
        // Never contacted: the stages here make no API request.
        let client = kube::Client::try_from(kube::Config::new("http://127.0.0.1:9".parse()?))?;
        let shared = Context::new(
            client,
            OperatorConfig::default(),
            Arc::new(Metrics::new()),
            DevicePool::new(),
        );
        let own = EntrySets::new(&shared);
        let ctx = Ctx::new(shared, own);
        let from: Vec<serde_json::Value> = reads
            .maps
            .keys()
            .map(|n| serde_json::json!({"configMap": n, "key": KEY}))
            .collect();
        let mut set: TableEntrySet = serde_json::from_value(serde_json::json!({
            "apiVersion": "p4fleet.dev/v1alpha1", "kind": "TableEntrySet",
            "metadata": {"name": "big", "namespace": NAMESPACE, "generation": 1},
            "spec": {"virtualSwitchRef": "vs", "table": TABLE, "entriesFrom": from,
                     "write": write}
        }))?;
        set.status = None;
        let switch: Switch = serde_json::from_value(serde_json::json!({
            "apiVersion": "p4fleet.dev/v1alpha1", "kind": "Switch",
            "metadata": {"name": "sw"},
            "spec": {"target": "Bmv2", "endpoint": endpoint, "deviceId": device_id, "slots": 1}
        }))?;
        let schema = TableSchema::from_p4info(&info, TABLE).map_err(|e| anyhow!("{e}"))?;
        let target = Target {
            virtual_switch: "vs".into(),
            switch,
            slot: 0,
            schema,
            const_default_action: None,
            profile: None,
            first_pipe: None,
            encoded_for: None,
            program: "big".into(),
            p4info: std::sync::Arc::new(info.clone()),
        };
        let mut path = EntryPath {
            ctx,
            reads,
            set,
            set_key: format!("{NAMESPACE}/big"),
            target,
            info,
            cookie: 0,
        };
        path.clear().await?;
        Ok(path)
    }

    /// Loads the pipeline again with a cookie no path of this process
    /// used before (an equal one is skipped), which empties the device's
    /// tables.
    pub async fn clear(&mut self) -> anyhow::Result<()> {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        self.cookie = NEXT.fetch_add(1, Ordering::Relaxed);
        let dev = self.ctx.devices.connect(&self.target.switch)?;
        dev.set_pipeline(0, &self.info, b"entry-path".to_vec(), self.cookie)
            .await?;
        Ok(())
    }

    /// One sync of the set, as the reconciler runs it; `at` is called at
    /// the end of each stage while what it built is still held.
    pub async fn sync(&self, at: &mut dyn FnMut(Stage)) -> anyhow::Result<Synced> {
        let ns = NAMESPACE;
        let cache = &self.ctx.own.entry_sources;
        let (sources, problems) = cache
            .read(&self.reads, &self.set_key, ns, &self.set.spec.entries_from)
            .await?;
        if let Some(p) = problems.first() {
            return Err(anyhow!("entry source: {p}"));
        }
        at(Stage::Fetch);
        let t0 = Instant::now();
        let targets = std::slice::from_ref(&self.target);
        let set = p4fleet::stages::Set::of(&self.set);
        // Held to the end, as the reconciler holds what dereference read.
        let desired = parse::per_target(
            cache,
            &self.ctx.own.sync_memory.desired,
            &self.set_key,
            &set,
            targets,
            &sources,
        )
        .await;
        at(Stage::Parse);
        let record = p4fleet::stages::Record::default();
        let job = apply::Job {
            set: &set,
            target: &self.target,
            desired: desired.of(0),
            deletes: true,
            record: &record,
        };
        let planned = match apply::plan_target(&self.ctx.devices, job).await {
            Ok(p) => p,
            Err(out) => return Err(anyhow!("read back: {:?}", out.device_error)),
        };
        at(Stage::Plan);
        let t1 = Instant::now();
        let outcome = apply::write_target(&self.ctx, planned).await;
        let write = t1.elapsed();
        let parse_to_device = t0.elapsed();
        if let Some(e) = &outcome.device_error {
            return Err(anyhow!("write: {e}"));
        }
        at(Stage::Write);
        let now = p4fleet::stages::now_rfc3339();
        let outcomes = [outcome];
        let report = status::report(&status::Input {
            set: &set,
            problems: &[],
            parse: desired.first(),
            outcomes: &outcomes,
            default_resync: Duration::from_secs(60),
            now: &now,
        });
        at(Stage::Status);
        let t = &outcomes[0].tally;
        Ok(Synced {
            desired: t.desired,
            applied: t.applied,
            written: t.written,
            requests: t.writes.requests,
            parse_to_device,
            write,
            status: report.status,
        })
    }

    /// The batch size and requests in flight the next write of this set
    /// uses (Auto: what the device's writes tuned them to).
    pub fn settings(&self) -> (usize, usize) {
        let base = p4fleet::stages::write_options(&self.set.spec.write);
        self.ctx.own.sync_memory.tuned(
            self.switch(),
            self.auto(),
            (base.batch_size, base.max_in_flight),
        )
    }

    /// Whether Auto's climb has settled for this set's Switch.
    pub fn settled(&self) -> bool {
        self.ctx.own.sync_memory.settled(self.switch(), self.auto())
    }

    fn switch(&self) -> &str {
        self.target
            .switch
            .metadata
            .name
            .as_deref()
            .unwrap_or_default()
    }

    fn auto(&self) -> Auto {
        let w = &self.set.spec.write;
        Auto {
            batch: w.batch_size.is_auto(),
            in_flight: w.max_in_flight.is_auto(),
        }
    }
}
