//! TableEntrySet reconciler: resolve the target VirtualSwitches, parse the
//! entries (inline and ConfigMaps), read the table back from each device,
//! write only the difference in batches, and report what was achieved.
//!
//! Choices worth knowing:
//! - Ownership is recorded on the device (see [`p4fleet_model::sync`]): entries carry
//!   the set's tag in their P4Runtime `metadata`, so Merge deletes survive
//!   restarts.
//! - While a required ConfigMap is missing, nothing is deleted (the
//!   entries it held are unknown, not undesired); inserts and modifies of
//!   the entries that did resolve still go out.
//! - Bad entries are reported (Valid=False, Event) and skipped; the others
//!   are written under the set's atomicity.
//! - The status changes only when something changed: the rate fields and
//!   `lastSyncTime` describe the last sync that wrote something, so idle
//!   resyncs write nothing and do not re-trigger the controller.
//! - `driftCorrected` counts updates a resync had to make although the
//!   desired entries were the same as at the previous successful sync (kept
//!   in memory: after an operator restart the first sync is not counted).
//! - Deletion: the finalizer removes the entries tagged with this set from
//!   each target. An unreachable device is retried with backoff for
//!   [`DELETE_GRACE`] after the deletion request; then the finalizer is
//!   dropped with a Warning Event (the entries stay on the device), so a
//!   dead switch never blocks namespace deletion forever. A target whose
//!   VirtualSwitch, program or Switch is gone is skipped.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::{Api, ResourceExt};
use p4fleet_crds::condition_types::{PIPELINE_LOADED, RESOLVED_REFS, SYNCED, VALID};
use p4fleet_crds::entry_set::{EntryError as StatusEntryError, TargetStatus};
use p4fleet_crds::{
    Condition, P4Program, Switch, TableEntrySet, TableEntrySetStatus, VirtualSwitch, find_condition,
};

use super::{Error, object_key, referrers, scoped_api, update_status, watcher_config};
use crate::artifacts;
use crate::context::Context;
use crate::convert;
use crate::status::{now_rfc3339, ready_from};
use p4fleet_client::Device;
use p4fleet_model::entries::{Entry, EntryKey, LineParser, TableSchema, format_key, parse_inline};
use p4fleet_model::sync::{self, DeviceEntry, Origin, SyncTally, WriteStats};

/// Finalizer that removes a deleted set's entries from its devices.
pub const FINALIZER: &str = "p4fleet.dev/table-entries";
/// How long a deleted set keeps trying to remove its entries.
pub const DELETE_GRACE: Duration = Duration::from_secs(120);
/// Per-entry errors kept in status.
const MAX_ERRORS: usize = 10;
/// Requeue while waiting for a dependency or an unreachable device.
const RETRY: Duration = Duration::from_secs(5);

/// Watches TableEntrySets, the ConfigMaps and VirtualSwitches they use.
pub fn controller(ctx: &Context) -> Controller<TableEntrySet> {
    let c = Controller::new(scoped_api::<TableEntrySet>(ctx), watcher_config());
    let by_cm = c.store();
    let by_vs = c.store();
    c.watches(
        scoped_api::<ConfigMap>(ctx),
        watcher_config(),
        referrers(by_cm, |s: &TableEntrySet, cm: &ConfigMap| {
            s.namespace() == cm.namespace()
                && s.spec
                    .entries_from
                    .iter()
                    .any(|f| f.config_map == cm.name_any())
        }),
    )
    .watches(
        scoped_api::<VirtualSwitch>(ctx),
        watcher_config(),
        referrers(by_vs, |s: &TableEntrySet, vs: &VirtualSwitch| {
            s.namespace() == vs.namespace()
                && (s.spec.virtual_switch_ref.as_deref() == Some(vs.name_any().as_str())
                    || s.spec
                        .virtual_switch_selector
                        .as_ref()
                        .is_some_and(|sel| sel.matches(vs.labels())))
        }),
    )
}

/// Where a desired entry came from, rendered lazily for status.
#[derive(Debug, Clone, Copy)]
enum Source {
    Inline(usize),
    Line { cm: usize, key: usize, line: u32 },
}

/// Desired entries of one schema, parsed, with sources and the problems.
struct Desired {
    entries: Vec<Entry>,
    sources: Vec<Source>,
    /// `(source label, key, reason)` of entries that were skipped.
    errors: Vec<StatusEntryError>,
    invalid: usize,
    /// ConfigMap names and keys, indexed by [`Source::Line`].
    cms: Vec<(String, Vec<String>)>,
}

impl Desired {
    fn label(&self, s: Source) -> String {
        match s {
            Source::Inline(i) => format!("entries[{i}]"),
            Source::Line { cm, key, line } => {
                let (name, keys) = &self.cms[cm];
                if keys.len() == 1 {
                    format!("configmap/{name}:line {line}")
                } else {
                    format!("configmap/{name}/{}:line {line}", keys[key])
                }
            }
        }
    }

    fn push_error(&mut self, source: String, key: Option<String>, reason: String) {
        self.invalid += 1;
        if self.errors.len() < MAX_ERRORS {
            self.errors.push(StatusEntryError {
                source,
                key,
                reason,
            });
        }
    }
}

/// ConfigMap data for the set's `entriesFrom`, fetched once per reconcile.
struct Sources {
    /// `(name, [(key, text)])` of the ConfigMaps found.
    cms: Vec<(String, Vec<(String, String)>)>,
    /// Problems: required ConfigMap missing, key missing.
    missing: Vec<String>,
}

async fn fetch_sources(ctx: &Context, ns: &str, set: &TableEntrySet) -> Result<Sources, Error> {
    let api: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), ns);
    let mut out = Sources {
        cms: Vec::new(),
        missing: Vec::new(),
    };
    for src in &set.spec.entries_from {
        let optional = src.optional.unwrap_or(false);
        let Some(cm) = api.get_opt(&src.config_map).await? else {
            if !optional {
                out.missing
                    .push(format!("ConfigMap {} not found", src.config_map));
            }
            continue;
        };
        let mut data = cm.data.unwrap_or_default();
        let texts: Vec<(String, String)> = match &src.key {
            Some(k) => match data.remove(k) {
                Some(t) => vec![(k.clone(), t)],
                None => {
                    if !optional {
                        out.missing
                            .push(format!("ConfigMap {} has no key {k:?}", src.config_map));
                    }
                    continue;
                }
            },
            // BTreeMap: keys in sorted order, so sources are stable.
            None => data.into_iter().collect(),
        };
        out.cms.push((src.config_map.clone(), texts));
    }
    Ok(out)
}

/// Parses inline entries and ConfigMap texts against one table schema,
/// skipping (and reporting) bad entries and later duplicates.
fn parse_desired(set: &TableEntrySet, schema: &TableSchema, sources: &Sources) -> Desired {
    let mut d = Desired {
        entries: Vec::new(),
        sources: Vec::new(),
        errors: Vec::new(),
        invalid: 0,
        cms: sources
            .cms
            .iter()
            .map(|(n, ks)| (n.clone(), ks.iter().map(|(k, _)| k.clone()).collect()))
            .collect(),
    };
    for (i, te) in set.spec.entries.iter().enumerate() {
        match parse_inline(schema, &te.match_, &te.action, &te.params, te.priority) {
            Ok(e) => {
                d.entries.push(e);
                d.sources.push(Source::Inline(i));
            }
            Err(e) => {
                let key = te
                    .match_
                    .iter()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect::<Vec<_>>()
                    .join(" ");
                d.push_error(format!("entries[{i}]"), Some(key), e.to_string());
            }
        }
    }
    for (ci, (_, texts)) in sources.cms.iter().enumerate() {
        for (ki, (_, text)) in texts.iter().enumerate() {
            let mut p = LineParser::new(schema);
            d.entries.reserve(text.len() / 32);
            for (li, line) in text.lines().enumerate() {
                let src = Source::Line {
                    cm: ci,
                    key: ki,
                    line: li as u32 + 1,
                };
                match p.parse_line(line) {
                    Ok(Some(e)) => {
                        d.entries.push(e);
                        d.sources.push(src);
                    }
                    Ok(None) => {}
                    Err(e) => {
                        let label = d.label(src);
                        d.push_error(label, None, e.to_string());
                    }
                }
            }
        }
    }
    let dups = sync::duplicates(&d.entries);
    if !dups.is_empty() {
        let mut drop = vec![false; d.entries.len()];
        for &(first, dup) in &dups {
            drop[dup] = true;
            let reason = format!("duplicate key: also at {}", d.label(d.sources[first]));
            let label = d.label(d.sources[dup]);
            let key = format_key(schema, &d.entries[dup].key);
            d.push_error(label, Some(key), reason);
        }
        let mut i = 0;
        d.entries.retain(|_| {
            i += 1;
            !drop[i - 1]
        });
        let mut i = 0;
        d.sources.retain(|_| {
            i += 1;
            !drop[i - 1]
        });
    }
    d
}

/// A VirtualSwitch the set fills, resolved down to a device slot.
struct ResolvedTarget {
    vs: String,
    switch: Switch,
    slot: u32,
    schema: TableSchema,
}

/// Resolves the set's VirtualSwitches. Returns the targets and, per
/// unresolved one, `(reason, message)`; a missing table is reported apart
/// (it makes the spec invalid rather than a reference unresolved).
async fn resolve_targets(
    ctx: &Context,
    ns: &str,
    set: &TableEntrySet,
) -> Result<
    (
        Vec<ResolvedTarget>,
        Vec<(&'static str, String)>,
        Vec<String>,
    ),
    Error,
> {
    let vs_api: Api<VirtualSwitch> = Api::namespaced(ctx.client.clone(), ns);
    let mut vss = Vec::new();
    let mut unresolved = Vec::new();
    let mut bad_table = Vec::new();
    let mut targets = Vec::new();
    if let Some(name) = &set.spec.virtual_switch_ref {
        match vs_api.get_opt(name).await? {
            Some(v) => vss.push(v),
            None => unresolved.push((
                "VirtualSwitchNotFound",
                format!("spec.virtualSwitchRef: VirtualSwitch {name} not found"),
            )),
        }
    } else if let Some(sel) = &set.spec.virtual_switch_selector {
        vss = vs_api
            .list(&Default::default())
            .await?
            .items
            .into_iter()
            .filter(|v| sel.matches(v.labels()))
            .collect();
        if vss.is_empty() {
            unresolved.push((
                "NoVirtualSwitch",
                "spec.virtualSwitchSelector matches no VirtualSwitch".to_string(),
            ));
        }
    }
    let sw_api: Api<Switch> = Api::all(ctx.client.clone());
    let prog_api: Api<P4Program> = Api::namespaced(ctx.client.clone(), ns);
    let mut schemas: HashMap<String, Result<TableSchema, String>> = HashMap::new();
    for vs in vss {
        let vs_name = vs.name_any();
        let st = vs.status.clone().unwrap_or_default();
        let loaded = find_condition(&st.conditions, PIPELINE_LOADED).is_some_and(|c| c.is_true());
        let (Some(sw_name), Some(slot), true) = (st.switch.clone(), st.slot, loaded) else {
            unresolved.push((
                "VirtualSwitchNotReady",
                format!("VirtualSwitch {vs_name} has no pipeline loaded yet"),
            ));
            continue;
        };
        let Some(sw) = sw_api.get_opt(&sw_name).await? else {
            unresolved.push((
                "SwitchNotFound",
                format!("VirtualSwitch {vs_name}: Switch {sw_name} not found"),
            ));
            continue;
        };
        let prog = vs.spec.program_ref.clone();
        if !schemas.contains_key(&prog) {
            let r = match prog_api.get_opt(&prog).await? {
                None => Err(format!("P4Program {prog} not found")),
                Some(p) => artifacts::p4info(&ctx.reads, ns, &p.spec)
                    .await?
                    .map_err(|e| format!("P4Program {prog}: {e}"))
                    .and_then(|info| {
                        TableSchema::from_p4info(&info, &set.spec.table)
                            .map_err(|e| format!("P4Program {prog}: {e}"))
                    }),
            };
            schemas.insert(prog.clone(), r);
        }
        match &schemas[&prog] {
            Ok(schema) => targets.push(ResolvedTarget {
                vs: vs_name,
                switch: sw,
                slot,
                schema: schema.clone(),
            }),
            Err(e) if e.contains("not found in P4Info") => bad_table.push(format!(
                "table {:?} is not in the program of VirtualSwitch {vs_name}: {e}",
                set.spec.table
            )),
            Err(e) => unresolved.push(("ProgramNotUsable", e.clone())),
        }
    }
    Ok((targets, unresolved, bad_table))
}

/// What the sync of one target achieved.
struct TargetResult {
    tally: SyncTally,
    /// Device-side errors (refused updates, conflicts).
    errors: Vec<StatusEntryError>,
    /// Connection-level failure (nothing or not everything was attempted).
    device_error: Option<String>,
}

/// In-memory per (set, target) memory: the digest of the desired entries
/// at the last sync that ended with everything applied.
fn synced_digests() -> &'static Mutex<HashMap<String, [u8; 32]>> {
    static M: OnceLock<Mutex<HashMap<String, [u8; 32]>>> = OnceLock::new();
    M.get_or_init(Default::default)
}

/// For devices that do not keep entry metadata (BFRT): the keys each
/// (set, target) desired at its last sync, standing in for ownership tags.
/// In memory only: after a restart such a set owns just what it desires.
fn owned_memory() -> &'static Mutex<HashMap<String, Arc<HashSet<EntryKey>>>> {
    static M: OnceLock<Mutex<HashMap<String, Arc<HashSet<EntryKey>>>>> = OnceLock::new();
    M.get_or_init(Default::default)
}

fn owned_keys(memo_key: &str) -> Arc<HashSet<EntryKey>> {
    owned_memory()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(memo_key)
        .cloned()
        .unwrap_or_default()
}

fn remember_owned(memo_key: &str, keys: HashSet<EntryKey>) {
    owned_memory()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(memo_key.to_string(), Arc::new(keys));
}

/// Reads a table back and converts it, with ownership tags.
async fn read_back(
    dev: &Device,
    t: &ResolvedTarget,
) -> Result<Vec<DeviceEntry>, p4fleet_client::Error> {
    let raw = dev.read_table(t.slot, t.schema.id).await?;
    let mut out = Vec::with_capacity(raw.len());
    for te in &raw {
        match Entry::from_proto(&t.schema, te) {
            Ok(entry) => out.push(DeviceEntry {
                entry,
                tag: sync::tag_of(&te.metadata),
            }),
            Err(e) => {
                tracing::warn!(table = %t.schema.name, error = %e, "unreadable entry on device")
            }
        }
    }
    Ok(out)
}

async fn sync_target(
    ctx: &Context,
    set: &TableEntrySet,
    tag: u64,
    t: &ResolvedTarget,
    d: &Desired,
    allow_deletes: bool,
    memo_key: &str,
) -> TargetResult {
    let mut r = TargetResult {
        tally: SyncTally::unsynced(d.entries.len()),
        errors: Vec::new(),
        device_error: None,
    };
    let sw_name = t.switch.name_any();
    let dev = match ctx.devices.connect(&t.switch) {
        Ok(dev) => dev,
        Err(e) => {
            r.device_error = Some(format!("Switch {sw_name}: {e}"));
            return r;
        }
    };
    let mut on_device = match read_back(&dev, t).await {
        Ok(v) => v,
        Err(e) => {
            r.device_error = Some(format!("Switch {sw_name}: {e}"));
            return r;
        }
    };
    if !dev.stores_entry_metadata() {
        let prev = owned_keys(memo_key);
        let desired: HashMap<&EntryKey, &Entry> = d.entries.iter().map(|e| (&e.key, e)).collect();
        sync::infer_tags(
            &mut on_device,
            tag,
            |k| prev.contains(k),
            |de| {
                desired
                    .get(&de.entry.key)
                    .is_some_and(|e| e.action == de.entry.action)
            },
        );
        remember_owned(memo_key, d.entries.iter().map(|e| e.key.clone()).collect());
    }
    let mut plan = sync::plan(
        &d.entries,
        &on_device,
        convert::ownership(set.spec.ownership),
        tag,
    );
    if !allow_deletes {
        plan.deletes.clear();
    }
    for &(i, _) in &plan.conflicts {
        if r.errors.len() < MAX_ERRORS {
            r.errors.push(StatusEntryError {
                source: d.label(d.sources[i]),
                key: Some(format_key(&t.schema, &d.entries[i].key)),
                reason: "owned by another TableEntrySet with a different action".into(),
            });
        }
    }
    // The ops borrow the desired and read-back entries: nothing per entry
    // is cloned or built before the client encodes the requests.
    let metadata = sync::tag_metadata(tag);
    let (deletes, rest) = sync::write_ops(&plan, &d.entries, &on_device, &metadata);
    let opts = convert::write_options(&set.spec.write);
    let mut stats = WriteStats::default();
    let mut failed_idx: Vec<(Origin, i32, String)> = Vec::new();
    for (op, phase) in [("delete", deletes), ("write", rest)] {
        if phase.ops.is_empty() {
            continue;
        }
        let n = phase.ops.len();
        match dev.write_ops(t.slot, &phase.ops, opts).await {
            Ok(rep) => {
                ctx.metrics.write_request(
                    &sw_name,
                    op,
                    (n - rep.failures.len()) as u64,
                    rep.failures.len() as u64,
                    rep.elapsed,
                );
                for f in &rep.failures {
                    failed_idx.push((phase.origins[f.index], f.code, f.message.clone()));
                }
                stats.add(WriteStats {
                    requests: rep.requests as u64,
                    elapsed: rep.elapsed,
                    request_latency: rep.total_request_latency,
                });
            }
            Err(e) => {
                r.device_error = Some(format!("Switch {sw_name}: {e}"));
                for &o in &phase.origins {
                    failed_idx.push((o, tonic::Code::Unavailable as i32, e.to_string()));
                }
            }
        }
    }
    for (o, code, msg) in &failed_idx {
        let (source, key) = match *o {
            Origin::Insert(i) | Origin::Modify(i) => (
                d.label(d.sources[i]),
                format_key(&t.schema, &d.entries[i].key),
            ),
            Origin::Delete(j) => (
                "device".to_string(),
                format_key(&t.schema, &on_device[j].entry.key),
            ),
        };
        if r.errors.len() < MAX_ERRORS && r.device_error.is_none() {
            r.errors.push(StatusEntryError {
                source,
                key: Some(key),
                reason: format!("{:?}: {msg}", tonic::Code::from_i32(*code)),
            });
        }
    }
    let failed: Vec<Origin> = failed_idx.iter().map(|(o, _, _)| *o).collect();
    r.tally = SyncTally::of(&plan, &failed, stats);
    r
}

/// Adds the finalizer (merge patch of the whole list, keeping others').
async fn add_finalizer(api: &Api<TableEntrySet>, set: &TableEntrySet) -> Result<(), Error> {
    let mut fins = set.finalizers().to_vec();
    fins.push(FINALIZER.to_string());
    let patch = serde_json::json!({"metadata": {"finalizers": fins, "resourceVersion": set.resource_version()}});
    api.patch(
        &set.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await?;
    Ok(())
}

async fn remove_finalizer(api: &Api<TableEntrySet>, set: &TableEntrySet) -> Result<(), Error> {
    let fins: Vec<&String> = set
        .finalizers()
        .iter()
        .filter(|f| *f != FINALIZER)
        .collect();
    let patch = serde_json::json!({"metadata": {"finalizers": fins, "resourceVersion": set.resource_version()}});
    match api
        .patch(
            &set.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Finalizer: removes the set's entries from every resolvable target.
async fn cleanup(ctx: &Context, ns: &str, set: &TableEntrySet) -> Result<Action, Error> {
    let api: Api<TableEntrySet> = Api::namespaced(ctx.client.clone(), ns);
    if !set.finalizers().iter().any(|f| f == FINALIZER) {
        return Ok(Action::await_change());
    }
    let tag = sync::set_tag(ns, &set.name_any());
    let (targets, _, _) = resolve_targets(ctx, ns, set).await?;
    let sources = fetch_sources(ctx, ns, set).await?;
    let mut failures = Vec::new();
    let mut removed = 0usize;
    for t in &targets {
        let res: Result<usize, String> = async {
            let dev = ctx.devices.connect(&t.switch).map_err(|e| e.to_string())?;
            let mut on_device = read_back(&dev, t).await.map_err(|e| e.to_string())?;
            if !dev.stores_entry_metadata() {
                // No tags on the device: what it desires now or desired at
                // its last sync (this process) is its own.
                let prev = owned_keys(&format!("{}/{}", object_key(set), t.vs));
                let d = parse_desired(set, &t.schema, &sources);
                let desired: HashSet<&EntryKey> = d.entries.iter().map(|e| &e.key).collect();
                sync::infer_tags(
                    &mut on_device,
                    tag,
                    |k| prev.contains(k),
                    |de| desired.contains(&de.entry.key),
                );
            }
            let which = sync::plan_removal(&on_device, tag);
            let n = which.len();
            let ops = sync::delete_ops(&on_device, &which);
            let rep = dev
                .write_ops(t.slot, &ops, convert::write_options(&set.spec.write))
                .await
                .map_err(|e| e.to_string())?;
            // NOT_FOUND: already gone, which is what we want.
            let real: Vec<_> = rep
                .failures
                .iter()
                .filter(|f| f.code() != tonic::Code::NotFound)
                .collect();
            match real.first() {
                Some(f) => Err(format!("{} deletes failed: {}", real.len(), f.message)),
                None => Ok(n),
            }
        }
        .await;
        match res {
            Ok(n) => removed += n,
            Err(e) => failures.push(format!("{} ({}): {e}", t.vs, t.switch.name_any())),
        }
    }
    let prefix = format!("{}/", object_key(set));
    synced_digests()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .retain(|k, _| !k.starts_with(&prefix));
    if failures.is_empty() {
        owned_memory()
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|k, _| !k.starts_with(&prefix));
        tracing::info!(set = %object_key(set), removed, "removed entries of deleted set");
        remove_finalizer(&api, set).await?;
        return Ok(Action::await_change());
    }
    let since = set
        .metadata
        .deletion_timestamp
        .as_ref()
        .map(|t| {
            let secs = chrono::Utc::now().timestamp() - t.0.as_second();
            Duration::from_secs(secs.max(0) as u64)
        })
        .unwrap_or_default();
    if since > DELETE_GRACE {
        ctx.events
            .publish(
                set,
                true,
                "CleanupAbandoned",
                "Delete",
                format!(
                    "gave up removing entries after {}s; they stay on: {}",
                    DELETE_GRACE.as_secs(),
                    failures.join("; ")
                ),
            )
            .await;
        remove_finalizer(&api, set).await?;
        return Ok(Action::await_change());
    }
    Err(Error::Device {
        switch: targets
            .first()
            .map(|t| t.switch.name_any())
            .unwrap_or_default(),
        message: format!("removing entries: {}", failures.join("; ")),
    })
}

/// Reconciles one TableEntrySet.
pub async fn reconcile(obj: Arc<TableEntrySet>, ctx: Arc<Context>) -> Result<Action, Error> {
    let ns = obj
        .namespace()
        .ok_or(Error::MissingObjectKey("namespace"))?;
    let name = obj.name_any();
    let api: Api<TableEntrySet> = Api::namespaced(ctx.client.clone(), &ns);
    if obj.metadata.deletion_timestamp.is_some() {
        return cleanup(&ctx, &ns, &obj).await;
    }
    if !obj.finalizers().iter().any(|f| f == FINALIZER) {
        // The finalizer update is a watch event that brings us back.
        add_finalizer(&api, &obj).await?;
        return Ok(Action::await_change());
    }
    let me = object_key(obj.as_ref());
    let tag = sync::set_tag(&ns, &name);
    let old = obj.status.as_ref();
    let (targets, unresolved, bad_table) = resolve_targets(&ctx, &ns, &obj).await?;
    let sources = fetch_sources(&ctx, &ns, &obj).await?;

    let mut errors: Vec<StatusEntryError> = Vec::new();
    let mut total = SyncTally::default();
    let mut invalid = 0usize;
    let mut drift = 0u64;
    let mut device_errors: Vec<String> = Vec::new();
    let mut target_status = Vec::new();
    let mut parsed: Vec<(TableSchema, Desired)> = Vec::new();
    for t in &targets {
        // Targets running the same program share one parse.
        let idx = match parsed.iter().position(|(s, _)| *s == t.schema) {
            Some(i) => i,
            None => {
                let d = parse_desired(&obj, &t.schema, &sources);
                if parsed.is_empty() {
                    invalid = d.invalid;
                    errors.extend(d.errors.iter().cloned());
                }
                parsed.push((t.schema.clone(), d));
                parsed.len() - 1
            }
        };
        let d = &parsed[idx].1;
        let memo_key = format!("{me}/{}", t.vs);
        let digest = sync::desired_digest(&d.entries);
        let r = sync_target(&ctx, &obj, tag, t, d, sources.missing.is_empty(), &memo_key).await;
        let was_synced = synced_digests()
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&memo_key)
            == Some(&digest);
        if was_synced {
            drift += r.tally.changes();
        }
        {
            let mut m = synced_digests().lock().unwrap_or_else(|e| e.into_inner());
            if r.device_error.is_none() && r.tally.applied == r.tally.desired {
                m.insert(memo_key, digest);
            } else {
                m.remove(&memo_key);
            }
        }
        total.add(&r.tally);
        for e in r.errors {
            if errors.len() < MAX_ERRORS {
                errors.push(e);
            }
        }
        if let Some(e) = &r.device_error {
            device_errors.push(e.clone());
        }
        let (written, elapsed) = (r.tally.written, r.tally.writes.elapsed);
        let eps = (written > 0 && elapsed > Duration::ZERO)
            .then(|| (written as f64 / elapsed.as_secs_f64()) as u64);
        let old_t = old.and_then(|s| s.targets.iter().find(|x| x.virtual_switch == t.vs));
        target_status.push(TargetStatus {
            virtual_switch: t.vs.clone(),
            switch: Some(t.switch.name_any()),
            applied: r.tally.applied,
            failed: r.tally.failed,
            entries_per_second: eps.or(old_t.and_then(|o| o.entries_per_second)),
        });
    }
    let SyncTally {
        desired: desired_total,
        applied,
        mut failed,
        written,
        inserted: ins,
        modified: modi,
        deleted: del,
        writes,
    } = total;
    let (elapsed, requests, latency) = (writes.elapsed, writes.requests, writes.request_latency);
    failed += invalid as u64 * targets.len().max(1) as u64;
    if targets.is_empty() {
        failed = invalid as u64;
    }

    // Conditions.
    let mut ref_problems: Vec<String> = unresolved.iter().map(|(_, m)| m.clone()).collect();
    ref_problems.extend(sources.missing.iter().cloned());
    let resolved = if ref_problems.is_empty() {
        Condition::new(RESOLVED_REFS, true, "Resolved", "all references resolved")
    } else {
        let reason = if !sources.missing.is_empty() && unresolved.is_empty() {
            "ConfigMapNotFound"
        } else {
            unresolved
                .first()
                .map(|(r, _)| *r)
                .unwrap_or("ConfigMapNotFound")
        };
        Condition::new(
            RESOLVED_REFS,
            false,
            reason,
            format!("TableEntrySet {me}: {}", ref_problems.join("; ")),
        )
    };
    let valid = if !bad_table.is_empty() {
        Condition::new(
            VALID,
            false,
            "UnknownTable",
            format!("TableEntrySet {me}: {}", bad_table.join("; ")),
        )
    } else if invalid > 0 {
        let first: Vec<String> = errors
            .iter()
            .take(3)
            .map(|e| format!("{}: {}", e.source, e.reason))
            .collect();
        Condition::new(
            VALID,
            false,
            "InvalidEntries",
            format!(
                "TableEntrySet {me}: {invalid} invalid entries skipped: {}",
                first.join("; ")
            ),
        )
    } else if targets.is_empty() {
        Condition::unknown(
            VALID,
            "NoTarget",
            "no resolved VirtualSwitch to validate against",
        )
    } else {
        Condition::new(VALID, true, "Valid", format!("{desired_total} entries"))
    };
    let device_failed = failed.saturating_sub(invalid as u64);
    let synced = if !device_errors.is_empty() {
        Condition::new(SYNCED, false, "DeviceUnavailable", device_errors.join("; "))
    } else if targets.is_empty() {
        Condition::unknown(SYNCED, "NoTarget", "no resolved VirtualSwitch")
    } else if device_failed > 0 {
        let first = errors
            .iter()
            .find(|e| e.source == "device" || e.key.is_some())
            .map(|e| {
                format!(
                    "{} {}: {}",
                    e.source,
                    e.key.clone().unwrap_or_default(),
                    e.reason
                )
            })
            .unwrap_or_default();
        Condition::new(
            SYNCED,
            false,
            "EntriesFailed",
            format!("{device_failed} entries failed on the device: {first}"),
        )
    } else {
        Condition::new(
            SYNCED,
            true,
            "Synced",
            format!("{applied} entries applied on {} target(s)", targets.len()),
        )
    };
    let ready = ready_from(
        &[&resolved, &valid, &synced],
        "Ready",
        "all entries applied",
    );

    let mut new = TableEntrySetStatus {
        observed_generation: obj.metadata.generation,
        desired: desired_total,
        applied,
        failed,
        drift_corrected: old.map(|s| s.drift_corrected).unwrap_or(0) + drift,
        errors,
        targets: target_status,
        rate: old.and_then(|s| s.rate.clone()),
        entries_per_second: old.and_then(|s| s.entries_per_second),
        mean_request_latency_micros: old.and_then(|s| s.mean_request_latency_micros),
        last_sync_updates: old.and_then(|s| s.last_sync_updates),
        last_sync_time: old.and_then(|s| s.last_sync_time.clone()),
        ..Default::default()
    };
    if written > 0 {
        let eps = written as f64 / elapsed.as_secs_f64().max(1e-9);
        new.rate = Some(sync::format_rate(eps));
        new.entries_per_second = Some(eps as u64);
        new.mean_request_latency_micros = Some(
            (latency.as_micros() as u64)
                .checked_div(requests)
                .unwrap_or(0),
        );
        new.last_sync_updates = Some(written);
        new.last_sync_time = Some(now_rfc3339());
    }
    new.conditions = vec![resolved, valid, synced, ready];
    update_status(&ctx, &api, obj.as_ref(), &mut new).await?;
    if written > 0 {
        let mut note = format!(
            "Synced {written} entries at {} ({ins} inserted, {modi} modified, {del} deleted; {requests} requests, mean {} us)",
            new.rate.clone().unwrap_or_default(),
            new.mean_request_latency_micros.unwrap_or(0)
        );
        if drift > 0 {
            note.push_str(&format!("; {drift} drifted entries repaired"));
        }
        ctx.events
            .publish(obj.as_ref(), false, "Synced", "Write", note)
            .await;
    }
    if device_failed > 0 && (written > 0 || old.map(|s| s.failed) != Some(failed)) {
        let first = new
            .errors
            .iter()
            .find(|e| e.key.is_some())
            .map(|e| {
                format!(
                    "{} {}: {}",
                    e.source,
                    e.key.clone().unwrap_or_default(),
                    e.reason
                )
            })
            .unwrap_or_default();
        ctx.events
            .publish(
                obj.as_ref(),
                true,
                "EntriesFailed",
                "Write",
                format!("{device_failed} entries failed: {first}"),
            )
            .await;
    }
    let resync = match obj.spec.resync_seconds {
        Some(0) => None,
        Some(s) => Some(Duration::from_secs(u64::from(s))),
        None => Some(ctx.config.resync),
    };
    let retry = !device_errors.is_empty() || !unresolved.is_empty();
    Ok(match (retry, resync) {
        (true, Some(r)) => Action::requeue(r.min(RETRY)),
        (true, None) => Action::requeue(RETRY),
        (false, Some(r)) => Action::requeue(r),
        (false, None) => Action::await_change(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use p4fleet_crds::TableEntrySetSpec;
    use p4fleet_crds::entry_set::TableEntry as SpecEntry;
    use p4fleet_proto::p4info;
    use std::collections::BTreeMap;

    fn firewall() -> TableSchema {
        let p4info =
            p4info::parse_text(include_str!("../../../../examples/firewall/p4info.txt")).unwrap();
        TableSchema::from_p4info(&p4info, "firewall").unwrap()
    }

    fn set(entries: Vec<SpecEntry>) -> TableEntrySet {
        let spec: TableEntrySetSpec = serde_json::from_value(serde_json::json!({
            "virtualSwitchRef": "vs", "table": "firewall"
        }))
        .unwrap();
        let mut s = TableEntrySet::new("s", TableEntrySetSpec { entries, ..spec });
        s.metadata.namespace = Some("ns".into());
        s
    }

    fn fw(src: &str, dst: &str, action: &str, params: &[(&str, &str)]) -> SpecEntry {
        SpecEntry {
            match_: BTreeMap::from([
                ("hdr.ipv4.srcAddr".to_string(), src.to_string()),
                ("hdr.ipv4.dstAddr".to_string(), dst.to_string()),
            ]),
            action: action.into(),
            params: params
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            priority: None,
        }
    }

    #[test]
    fn bad_entries_are_reported_with_their_source_and_others_kept() {
        let s = set(vec![
            fw("10.0.0.1", "10.0.0.2", "allow", &[("port", "1")]),
            fw("10.0.0.1", "10.0.0.3", "allow", &[("port", "4096")]),
            fw("10.0.0.1", "10.0.0.4", "jump", &[]),
        ]);
        let sources = Sources {
            cms: vec![(
                "fw-1".into(),
                vec![(
                    "entries".into(),
                    "#! fields hdr.ipv4.srcAddr hdr.ipv4.dstAddr\n#! action allow\n10.0.0.9 10.0.0.9 1\n10.0.0.1 10.0.0.2 3\n10.0.0.300 10.0.0.1 1\n".into(),
                )],
            )],
            missing: vec![],
        };
        let d = parse_desired(&s, &firewall(), &sources);
        assert_eq!(d.entries.len(), 2);
        assert_eq!(d.invalid, 4);
        let srcs: Vec<&str> = d.errors.iter().map(|e| e.source.as_str()).collect();
        assert_eq!(
            srcs,
            [
                "entries[1]",
                "entries[2]",
                "configmap/fw-1:line 5",
                "configmap/fw-1:line 4"
            ]
        );
        assert!(
            d.errors[3].reason.contains("entries[0]"),
            "{:?}",
            d.errors[3]
        );
    }
}
