//! `p4fleet plan -f FILE`: what applying a manifest would do, without
//! applying it, for a pull request's CI job (docs/plans.md).
//!
//! 1. Every object of the file goes to the API server as a server-side
//!    apply with `dryRun=All`: its schema and CEL rules judge it, nothing
//!    is stored, and what comes back (defaults filled in) is what the
//!    operator would see.
//! 2. Each TableEntrySet is planned by the operator's own stages,
//!    reading the cluster with the file's objects laid over it
//!    ([`Overlay`]): dereference, parse, then each P4Runtime target read
//!    back as a backup client and diffed ([`apply::plan_target`]),
//!    nothing written. The digest is the one `spec.plan` and the
//!    `PlanApplied` Event show for the same change.
//! 3. Each P4Program is resolved with the file's ConfigMaps and compared
//!    with the content in force ([`program_plan::of_fleet`]).
//!
//! [`render_entries`] and [`render_program`] are pure and unit-tested.

use std::fmt::Write as _;
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use kube::core::{GroupVersionKind, PartialObjectMeta};
use kube::discovery::Scope;
use kube::{Client, ResourceExt};
use p4fleet_crds::{
    EntryPlan, P4Program, P4ProgramStatus, ProgramPlan, Switch, SwitchProtocol, TableEntrySet,
    TargetPlan, UrlSource, VirtualSwitch, find_condition,
};
use serde_json::Value;

use crate::artifacts::fetch::{FetchLimits, Fetcher};
use crate::artifacts::url_source::FetchError;
use crate::controllers::entry_set::{apply, conflicts, dereference, desired, plan};
use crate::devices::DevicePool;
use crate::entry_sources::{EntrySources, Meta, SourceMetrics};
use crate::fleet::program_plan;
use crate::reads::{ApiReads, Reads, placed_on};

/// The field manager of the dry runs (nothing is stored under it).
const MANAGER: &str = "p4fleet-plan";
/// The election id of the plan's device sessions: the lowest, so the
/// operator stays primary and this client only reads.
const ELECTION_ID: u128 = 1;
/// The plan's BFRT client id: above every id an operator takes (those
/// fit in 16 bits, `crate::fencing`), so its subscription never stands
/// in for the operator's.
const BFRT_CLIENT_ID: u32 = 0x1_0000;

/// `p4fleet plan` succeeded: `Clean` (exit 0) or something was refused
/// or invalid (exit 1, each said on the way).
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    Clean,
    Refused,
}

/// What stops the command (exit code 2).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: document {index}: {message}")]
    Manifest {
        path: PathBuf,
        index: usize,
        message: String,
    },
    #[error("no cluster to talk to (KUBECONFIG, ~/.kube/config or in-cluster): {0}")]
    Client(#[source] Box<kube::Error>),
    #[error("{what}: {source}")]
    Api {
        what: String,
        #[source]
        source: Box<kube::Error>,
    },
    #[error("TableEntrySet {set}: {error}")]
    Ownership {
        set: String,
        #[source]
        error: Box<crate::ownership::StoreError>,
    },
    #[error("writing the plan: {0}")]
    Output(#[source] std::io::Error),
    #[error("starting the async runtime: {0}")]
    Runtime(#[source] std::io::Error),
}

fn api_err(what: impl Into<String>) -> impl FnOnce(kube::Error) -> Error {
    let what = what.into();
    move |e| Error::Api {
        what,
        source: Box::new(e),
    }
}

/// Runs `p4fleet plan -f FILE` against the cluster of KUBECONFIG.
pub fn run(
    args: crate::cli::PlanArgs,
    out: &mut dyn Write,
    diag: &mut dyn Write,
) -> Result<Outcome, Error> {
    crate::cli::block_on(run_async(args, out, diag)).map_err(Error::Runtime)?
}

async fn run_async(
    args: crate::cli::PlanArgs,
    out: &mut dyn Write,
    diag: &mut dyn Write,
) -> Result<Outcome, Error> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let text = std::fs::read_to_string(&args.filename).map_err(|source| Error::Read {
        path: args.filename.clone(),
        source,
    })?;
    let docs = documents(&text).map_err(|(index, message)| Error::Manifest {
        path: args.filename.clone(),
        index,
        message,
    })?;
    let client = Client::try_default()
        .await
        .map_err(|e| Error::Client(Box::new(e)))?;
    let default_ns = args
        .namespace
        .clone()
        .unwrap_or_else(|| client.default_namespace().to_string());
    let mut outcome = Outcome::Clean;
    let mut accepted = Vec::new();
    for doc in docs {
        match dry_run(&client, &default_ns, doc).await? {
            Ok(obj) => accepted.push(obj),
            Err(refusal) => {
                writeln!(out, "{refusal}").map_err(Error::Output)?;
                outcome = Outcome::Refused;
            }
        }
    }
    let overlay = Overlay::of(&accepted);
    let reads = PlanReads {
        client: client.clone(),
        overlay,
        fetcher: Arc::new(Fetcher::new(FetchLimits::default())),
    };
    let sets = sets_to_plan(&reads).await?;
    for set in &sets {
        let planned = plan_set(&reads, set).await?;
        if !planned.invalid.is_empty() {
            outcome = Outcome::Refused;
        }
        out.write_all(render_entries(&planned).as_bytes())
            .map_err(Error::Output)?;
    }
    let programs = programs_to_plan(&reads).await?;
    for program in &programs {
        let (text, ok) = plan_program(&reads, program).await?;
        if !ok {
            outcome = Outcome::Refused;
        }
        out.write_all(text.as_bytes()).map_err(Error::Output)?;
    }
    if sets.is_empty() && programs.is_empty() {
        let _ = writeln!(diag, "p4fleet: no TableEntrySet or P4Program to plan");
    }
    Ok(outcome)
}

/// The YAML documents of a manifest (a `List` is its items); empty
/// documents are skipped. `Err((index, why))` for one that is not an object.
fn documents(text: &str) -> Result<Vec<Value>, (usize, String)> {
    use serde::Deserialize;
    let mut docs = Vec::new();
    for (index, de) in serde_yaml::Deserializer::from_str(text).enumerate() {
        let v = Value::deserialize(de).map_err(|e| (index, e.to_string()))?;
        match v {
            Value::Null => {}
            Value::Object(ref o) if o.get("kind").and_then(Value::as_str) == Some("List") => {
                let items = o.get("items").and_then(Value::as_array).cloned();
                docs.extend(items.unwrap_or_default());
            }
            Value::Object(_) => docs.push(v),
            _ => return Err((index, "not an object".into())),
        }
    }
    Ok(docs)
}

/// The object as the API server would store it (server-side apply, dry
/// run), or the refusal as a line naming the object.
async fn dry_run(
    client: &Client,
    default_ns: &str,
    mut doc: Value,
) -> Result<Result<DynamicObject, String>, Error> {
    let api_version = doc["apiVersion"].as_str().unwrap_or_default().to_string();
    let kind = doc["kind"].as_str().unwrap_or_default().to_string();
    let name = doc["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let what = format!("{kind} {name}");
    if api_version.is_empty() || kind.is_empty() || name.is_empty() {
        return Ok(Err(format!(
            "refused: {what}: apiVersion, kind and metadata.name are required"
        )));
    }
    let (group, version) = api_version.split_once('/').unwrap_or(("", &api_version));
    let gvk = GroupVersionKind::gvk(group, version, &kind);
    let (resource, caps) = match kube::discovery::pinned_kind(client, &gvk).await {
        Ok(found) => found,
        Err(e) => return Ok(Err(format!("refused: {what}: {e}"))),
    };
    let api: Api<DynamicObject> = match caps.scope {
        Scope::Cluster => Api::all_with(client.clone(), &resource),
        Scope::Namespaced => {
            let ns = doc["metadata"]["namespace"]
                .as_str()
                .unwrap_or(default_ns)
                .to_string();
            doc["metadata"]["namespace"] = Value::String(ns.clone());
            Api::namespaced_with(client.clone(), &ns, &resource)
        }
    };
    let params = PatchParams::apply(MANAGER).dry_run().force();
    match api.patch(&name, &params, &Patch::Apply(&doc)).await {
        Ok(mut obj) => {
            obj.types = Some(kube::core::TypeMeta {
                api_version,
                kind: kind.clone(),
            });
            Ok(Ok(obj))
        }
        Err(kube::Error::Api(ae)) => {
            let ns = doc["metadata"]["namespace"].as_str().unwrap_or_default();
            let at = if ns.is_empty() {
                name
            } else {
                format!("{ns}/{name}")
            };
            Ok(Err(format!("refused: {kind} {at}: {}", ae.message)))
        }
        Err(e) => Err(api_err(format!("dry run of {what}"))(e)),
    }
}

fn typed<K: serde::de::DeserializeOwned>(obj: &DynamicObject) -> Option<K> {
    serde_json::to_value(obj)
        .ok()
        .and_then(|v| serde_json::from_value(v).ok())
}

/// The file's objects, as the dry run returned them, laid over the
/// cluster's.
#[derive(Default)]
struct Overlay {
    config_maps: Vec<ConfigMap>,
    programs: Vec<P4Program>,
    virtual_switches: Vec<VirtualSwitch>,
    switches: Vec<Switch>,
    sets: Vec<TableEntrySet>,
}

impl Overlay {
    fn of(objs: &[DynamicObject]) -> Overlay {
        let mut o = Overlay::default();
        for obj in objs {
            let kind = obj.types.as_ref().map(|t| t.kind.as_str());
            let group = obj.types.as_ref().map(|t| t.api_version.as_str());
            let ours = group.is_some_and(|g| g.starts_with("p4fleet.dev/"));
            match (kind, ours) {
                (Some("ConfigMap"), false) => o.config_maps.extend(typed(obj)),
                (Some("P4Program"), true) => o.programs.extend(typed(obj)),
                (Some("VirtualSwitch"), true) => o.virtual_switches.extend(typed(obj)),
                (Some("Switch"), true) => o.switches.extend(typed(obj)),
                (Some("TableEntrySet"), true) => o.sets.extend(typed(obj)),
                _ => {}
            }
        }
        o
    }
}

fn find<'a, K: kube::Resource>(objs: &'a [K], ns: Option<&str>, name: &str) -> Option<&'a K> {
    objs.iter()
        .find(|o| o.meta().namespace.as_deref() == ns && o.meta().name.as_deref() == Some(name))
}

/// Replaces the listed objects that the overlay holds too, and adds the
/// overlay's others (of `ns`, or all when None).
fn merged<K: kube::Resource + Clone>(listed: Vec<K>, overlay: &[K], ns: Option<&str>) -> Vec<K> {
    let key = |o: &K| (o.meta().namespace.clone(), o.meta().name.clone());
    let mut out: Vec<K> = listed
        .into_iter()
        .filter(|l| !overlay.iter().any(|o| key(o) == key(l)))
        .collect();
    out.extend(
        overlay
            .iter()
            .filter(|o| ns.is_none() || o.meta().namespace.as_deref() == ns)
            .cloned(),
    );
    out.sort_by(crate::cache::list_order);
    out
}

/// [`Reads`] from the API server by GET and LIST, with the file's objects
/// in front.
struct PlanReads {
    client: Client,
    overlay: Overlay,
    fetcher: Arc<Fetcher>,
}

impl PlanReads {
    fn api<K>(&self, ns: &str) -> Api<K>
    where
        K: kube::Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>,
    {
        Api::namespaced(self.client.clone(), ns)
    }

    async fn list<K>(&self, ns: Option<&str>) -> Result<Vec<K>, kube::Error>
    where
        K: kube::Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
        K: kube::Resource<Scope = kube::core::NamespaceResourceScope>,
    {
        let api: Api<K> = crate::cache::api_in(&self.client, ns);
        Ok(api.list(&ListParams::default()).await?.items)
    }
}

/// The object `name` of `api` (in `ns`): the file's, else the cluster's.
async fn get<K>(
    api: Api<K>,
    overlay: &[K],
    ns: Option<&str>,
    name: &str,
) -> Result<Option<K>, kube::Error>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match find(overlay, ns, name) {
        Some(o) => Ok(Some(o.clone())),
        None => api.get_opt(name).await,
    }
}

impl Reads for PlanReads {
    async fn switch(&self, name: &str) -> Result<Option<Switch>, kube::Error> {
        let api = Api::all(self.client.clone());
        get(api, &self.overlay.switches, None, name).await
    }

    async fn switches(&self) -> Result<Vec<Switch>, kube::Error> {
        let listed = Api::<Switch>::all(self.client.clone())
            .list(&ListParams::default())
            .await?
            .items;
        Ok(merged(listed, &self.overlay.switches, None))
    }

    async fn program(&self, ns: &str, name: &str) -> Result<Option<P4Program>, kube::Error> {
        get(self.api(ns), &self.overlay.programs, Some(ns), name).await
    }

    async fn virtual_switch(
        &self,
        ns: &str,
        name: &str,
    ) -> Result<Option<VirtualSwitch>, kube::Error> {
        get(self.api(ns), &self.overlay.virtual_switches, Some(ns), name).await
    }

    async fn virtual_switches(&self, ns: Option<&str>) -> Result<Vec<VirtualSwitch>, kube::Error> {
        let listed = self.list::<VirtualSwitch>(ns).await?;
        Ok(merged(listed, &self.overlay.virtual_switches, ns))
    }

    async fn controller_revision(
        &self,
        ns: &str,
        name: &str,
    ) -> Result<Option<ControllerRevision>, kube::Error> {
        self.api(ns).get_opt(name).await
    }

    async fn program_revisions(
        &self,
        ns: &str,
        program: &str,
    ) -> Result<Vec<ControllerRevision>, kube::Error> {
        let mut all = self.list::<ControllerRevision>(Some(ns)).await?;
        all.retain(|r| {
            r.owner_references()
                .iter()
                .any(|o| o.kind == "P4Program" && o.name == program)
        });
        Ok(all)
    }

    async fn config_map(&self, ns: &str, name: &str) -> Result<Option<ConfigMap>, kube::Error> {
        get(self.api(ns), &self.overlay.config_maps, Some(ns), name).await
    }

    async fn entry_revisions(
        &self,
        ns: &str,
        set_uid: &str,
    ) -> Result<Vec<ConfigMap>, kube::Error> {
        // A plan reads no revision (a set's plan is of the content read now).
        let _ = (ns, set_uid);
        Ok(Vec::new())
    }

    async fn artifact(
        &self,
        ns: &str,
        src: &UrlSource,
    ) -> Result<Result<Vec<u8>, FetchError>, kube::Error> {
        ApiReads::fetch_artifact(&self.client, &self.fetcher, ns, src).await
    }
}

/// The file's P4Programs, then the cluster's that read one of the file's
/// ConfigMaps (a new P4Info is often only its ConfigMap).
async fn programs_to_plan(reads: &PlanReads) -> Result<Vec<P4Program>, Error> {
    let in_file = reads.overlay.programs.clone();
    with_readers(reads, in_file, "P4Programs", |p: &P4Program, ns| {
        crate::artifacts::sources(&p.spec).iter().any(|(_, src)| {
            let name = src.config_map_key_ref.as_ref().map(|r| r.name.as_str());
            name.is_some_and(|n| find(&reads.overlay.config_maps, Some(ns), n).is_some())
        })
    })
    .await
}

/// The file's TableEntrySets, then the cluster's that read one of the
/// file's ConfigMaps (a change of entries is often only its ConfigMap).
async fn sets_to_plan(reads: &PlanReads) -> Result<Vec<TableEntrySet>, Error> {
    let in_file = reads.overlay.sets.clone();
    with_readers(reads, in_file, "TableEntrySets", |s: &TableEntrySet, ns| {
        s.spec.entries_from.iter().any(|src| {
            reads.overlay.config_maps.iter().any(|c| {
                c.namespace().as_deref() == Some(ns) && src.selects(&c.name_any(), c.labels())
            })
        })
    })
    .await
}

/// `in_file`, then the cluster's objects of that kind (`what`, for
/// errors) that are not in the file and that `reads_one` says read one
/// of the file's ConfigMaps, in the namespaces those ConfigMaps are in.
async fn with_readers<K>(
    reads: &PlanReads,
    mut in_file: Vec<K>,
    what: &str,
    reads_one: impl Fn(&K, &str) -> bool,
) -> Result<Vec<K>, Error>
where
    K: kube::Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    K: kube::Resource<Scope = kube::core::NamespaceResourceScope>,
{
    let mut namespaces: Vec<String> = reads
        .overlay
        .config_maps
        .iter()
        .filter_map(|c| c.namespace())
        .collect();
    namespaces.sort();
    namespaces.dedup();
    for ns in namespaces {
        let listed: Vec<K> = reads
            .list(Some(&ns))
            .await
            .map_err(api_err(format!("listing {what} of {ns}")))?;
        for o in listed {
            let known = find(&in_file, Some(&ns), &o.name_any()).is_some();
            if !known && reads_one(&o, &ns) {
                in_file.push(o);
            }
        }
    }
    Ok(in_file)
}

/// On a BFRT target, binds the plan's client to the program the
/// VirtualSwitch runs (as a reader: the operator's client loaded it); the
/// reason it cannot be planned otherwise.
async fn attach_bfrt(pool: &DevicePool, t: &dereference::Target) -> Result<(), String> {
    if t.switch.spec.effective_protocol() != SwitchProtocol::Bfrt {
        return Ok(());
    }
    if t.first_pipe.is_some() {
        // Each pipe set is its own client in the operator.
        return Err("a BFRT pipe set is planned by the operator: use spec.plan: true".into());
    }
    let dev = pool.connect(&t.switch).map_err(|e| e.to_string())?;
    if let p4fleet_client::Device::Bfrt(b) = dev.as_ref() {
        b.attach(t.slot, &t.p4info, Some(&t.program))
            .await
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// One TableEntrySet's plan, as [`render_entries`] prints it.
#[derive(Debug, Default)]
pub struct SetPlan {
    pub namespace: String,
    pub name: String,
    /// Unresolved references, missing sources (the set's ResolvedRefs and
    /// Valid would say so).
    pub problems: Vec<String>,
    /// Entries that do not parse, with where (`Valid=False`).
    pub invalid: Vec<String>,
    pub plan: EntryPlan,
}

async fn plan_set(reads: &PlanReads, set: &TableEntrySet) -> Result<SetPlan, Error> {
    let ns = set.namespace().unwrap_or_default();
    let key = format!("{ns}/{}", set.name_any());
    let sources = EntrySources::new(SourceMetrics::default());
    // Selected ConfigMaps are looked up in an index a watch feeds in the
    // operator: here, the namespace's list with the file's laid over it.
    let listed: Vec<ConfigMap> = reads
        .list(Some(&ns))
        .await
        .map_err(api_err(format!("listing ConfigMaps of {ns}")))?;
    let metas: Vec<Meta> = merged(listed, &reads.overlay.config_maps, Some(&ns))
        .into_iter()
        .map(|c| PartialObjectMeta {
            types: None,
            metadata: c.metadata,
            _phantom: Default::default(),
        })
        .collect();
    let _index = sources.index.fill(&metas);
    let mut d = dereference::dereference(reads, &sources, &ns, set)
        .await
        .map_err(api_err(format!(
            "reading what TableEntrySet {key} refers to"
        )))?;
    // What an older set keeps is left to it, as the operator leaves it.
    let listed: Vec<TableEntrySet> = reads
        .list(Some(&ns))
        .await
        .map_err(api_err(format!("listing TableEntrySets of {ns}")))?;
    let others: Vec<Arc<TableEntrySet>> = merged(listed, &reads.overlay.sets, Some(&ns))
        .into_iter()
        .map(Arc::new)
        .collect();
    let vss = reads
        .virtual_switches(Some(&ns))
        .await
        .map_err(api_err(format!("listing VirtualSwitches of {ns}")))?;
    conflicts::settle(set, &mut d, &others, |name| {
        vss.iter()
            .find(|v| v.name_any() == name)
            .cloned()
            .map(Arc::new)
    });
    let mut out = SetPlan {
        namespace: ns.clone(),
        name: set.name_any(),
        problems: d.problems.iter().map(ToString::to_string).collect(),
        ..Default::default()
    };
    let pool = DevicePool::with_identity(p4fleet_client::Identity {
        election_id: ELECTION_ID,
        client_id: BFRT_CLIENT_ID,
    });
    let (indirect, direct): (Vec<_>, Vec<_>) =
        d.targets.iter().cloned().partition(|t| t.profile.is_some());
    let mut unplanned = Vec::new();
    let mut parsed = Vec::new();
    for t in direct {
        if let Err(error) = attach_bfrt(&pool, &t).await {
            unplanned.push(TargetPlan {
                virtual_switch: t.virtual_switch.clone(),
                switch: t.switch.name_any(),
                error: Some(error),
                ..Default::default()
            });
            continue;
        }
        let desired = desired::parse(&set.spec, &t.schema, &d.sources);
        if out.invalid.is_empty() {
            out.invalid = desired
                .errors
                .iter()
                .map(|e| format!("{}: {}", e.source, e.reason))
                .collect();
        }
        parsed.push((t, desired));
    }
    // BFRT keeps no entry metadata: the set's record says which entries
    // on the device are its own (a Merge set deletes only those).
    let record = match crate::ownership::store::load(&reads.client, &ns, &set.name_any()).await {
        Ok(stored) => stored.record,
        Err(e @ crate::ownership::StoreError::Damaged { .. }) => {
            out.problems
                .push(format!("{e}: planned as if empty, as the operator would"));
            crate::ownership::Record::default()
        }
        Err(e) => {
            return Err(Error::Ownership {
                set: key.clone(),
                error: Box::new(e),
            });
        }
    };
    let mut planned = Vec::new();
    let value = crate::controllers::entry_set::set::Set::of(set);
    for (t, desired) in &parsed {
        let job = apply::Job {
            set: &value,
            target: t,
            desired,
            deletes: d.sources_complete(),
            record: &record,
        };
        planned.push(apply::plan_target(&pool, job).await);
    }
    let mut p = plan::of_targets(set.metadata.generation, &planned, &indirect);
    p.targets.extend(unplanned);
    p.targets
        .sort_by(|a, b| a.virtual_switch.cmp(&b.virtual_switch));
    out.plan = p;
    Ok(out)
}

/// A set's plan as text: a line with the totals and digest, then each
/// target with its first updates.
pub fn render_entries(s: &SetPlan) -> String {
    let p = &s.plan;
    let mut t = String::new();
    let _ = writeln!(
        t,
        "TableEntrySet {}/{}: +{} ~{} -{} ({} unchanged) on {} target(s), digest {}",
        s.namespace,
        s.name,
        p.insert,
        p.modify,
        p.delete,
        p.unchanged,
        p.targets.len(),
        p.digest
    );
    for problem in &s.problems {
        let _ = writeln!(t, "  problem: {problem}");
    }
    for bad in &s.invalid {
        let _ = writeln!(t, "  invalid: {bad}");
    }
    for target in &p.targets {
        let _ = write!(t, "  {} on {}: ", target.virtual_switch, target.switch);
        match &target.error {
            Some(e) => {
                let _ = writeln!(t, "not planned: {e}");
            }
            None => {
                let _ = writeln!(
                    t,
                    "+{} ~{} -{} ({} unchanged{})",
                    target.insert,
                    target.modify,
                    target.delete,
                    target.unchanged,
                    match target.conflicts {
                        0 => String::new(),
                        n => format!(", {n} held by another set"),
                    }
                );
            }
        }
        for line in &target.changes {
            let _ = writeln!(t, "    {line}");
        }
        let shown = target.changes.len() as u64;
        let all = target.insert + target.modify + target.delete;
        if all > shown {
            let _ = writeln!(t, "    ... and {} more", all - shown);
        }
    }
    t
}

/// A program's plan as text, and whether its new content is valid.
async fn plan_program(reads: &PlanReads, program: &P4Program) -> Result<(String, bool), Error> {
    let ns = program.namespace().unwrap_or_default();
    let name = program.name_any();
    let what = format!("P4Program {ns}/{name}");
    let resolved = crate::artifacts::resolve(reads, &ns, &program.spec)
        .await
        .map_err(api_err(format!("reading the sources of {what}")))?;
    let new = crate::controllers::program::build_status(
        &program.spec,
        &resolved,
        program.metadata.generation,
    );
    let ready = find_condition(&new.conditions, "Ready");
    if !ready.is_some_and(|c| c.is_true()) {
        let why = ready.map(|c| c.message.clone()).unwrap_or_default();
        return Ok((format!("{what}: invalid: {why}\n"), false));
    }
    let live = Api::<P4Program>::namespaced(reads.client.clone(), &ns)
        .get_opt(&name)
        .await
        .map_err(api_err(format!("reading {what}")))?;
    let old = live.and_then(|p| p.status).unwrap_or_default();
    if old.digest.is_none() {
        let to = new.short_digest.clone().unwrap_or_default();
        let text = format!("{what}: {to}, nothing in force yet: its VirtualSwitches load it\n");
        return Ok((text, true));
    }
    if old.digest == new.digest {
        return Ok((format!("{what}: no change\n"), true));
    }
    let vss: Vec<Arc<VirtualSwitch>> = reads
        .virtual_switches(Some(&ns))
        .await
        .map_err(api_err(format!("listing VirtualSwitches of {ns}")))?
        .into_iter()
        .map(Arc::new)
        .collect();
    let switches: Vec<Arc<Switch>> = reads
        .switches()
        .await
        .map_err(api_err("listing Switches"))?
        .into_iter()
        .filter(|s| vss.iter().any(|v| placed_on(v, &s.name_any())))
        .map(Arc::new)
        .collect();
    let listed: Vec<TableEntrySet> = reads
        .list(Some(&ns))
        .await
        .map_err(api_err(format!("listing TableEntrySets of {ns}")))?;
    let sets: Vec<Arc<TableEntrySet>> = merged(listed, &reads.overlay.sets, Some(&ns))
        .into_iter()
        .map(Arc::new)
        .collect();
    let plan = program_plan::of_fleet(program, &old, &new, &vss, &switches, &sets);
    Ok((render_program(&what, &old, &plan), true))
}

/// A program change's plan as text.
pub fn render_program(what: &str, old: &P4ProgramStatus, p: &ProgramPlan) -> String {
    let mut t = String::new();
    let revision = old
        .current_revision
        .as_ref()
        .map(|r| format!(" (revision {})", r.revision))
        .unwrap_or_default();
    let _ = writeln!(t, "{what}: {}{revision} -> {}", p.from, p.to);
    let list = |v: &[String]| match v.is_empty() {
        true => "none".to_string(),
        false => v.join(", "),
    };
    let _ = writeln!(t, "  tables kept: {}", list(&p.tables_kept));
    let _ = writeln!(t, "  tables changed: {}", list(&p.tables_changed));
    let _ = writeln!(t, "  tables added: {}", list(&p.tables_added));
    let _ = writeln!(t, "  tables removed: {}", list(&p.tables_removed));
    for v in &p.virtual_switches {
        let on = v.switch.as_deref().unwrap_or("(not placed)");
        let _ = writeln!(t, "  {} on {on}: {}", v.name, v.load);
    }
    for s in &p.sets_losing_table {
        let _ = writeln!(t, "  loses its table: TableEntrySet {s}");
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documents_skip_empty_ones_and_open_lists() {
        let text = "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\n---\n\
                    apiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: ConfigMap, metadata: {name: b}}\n";
        let docs = documents(text).unwrap();
        let names: Vec<&str> = docs
            .iter()
            .map(|d| d["metadata"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["a", "b"]);
        assert_eq!(documents("- 1\n- 2\n").unwrap_err().0, 0);
    }

    #[test]
    fn an_entry_plan_reads_as_totals_then_targets_with_their_lines() {
        let s = SetPlan {
            namespace: "ns".into(),
            name: "fw".into(),
            plan: EntryPlan {
                digest: "abcd".into(),
                insert: 12,
                delete: 1,
                unchanged: 5,
                targets: vec![
                    TargetPlan {
                        virtual_switch: "vs-a".into(),
                        switch: "edge-1".into(),
                        insert: 12,
                        delete: 1,
                        unchanged: 5,
                        changes: vec!["+ a".into(), "- b".into()],
                        ..Default::default()
                    },
                    TargetPlan {
                        virtual_switch: "vs-b".into(),
                        switch: "edge-2".into(),
                        error: Some("unreachable".into()),
                        ..Default::default()
                    },
                ],
                ..Default::default()
            },
            ..Default::default()
        };
        let text = render_entries(&s);
        assert!(text.starts_with(
            "TableEntrySet ns/fw: +12 ~0 -1 (5 unchanged) on 2 target(s), digest abcd\n"
        ));
        assert!(text.contains(
            "  vs-a on edge-1: +12 ~0 -1 (5 unchanged)\n    + a\n    - b\n    ... and 11 more\n"
        ));
        assert!(text.contains("  vs-b on edge-2: not planned: unreachable\n"));
    }

    #[test]
    fn a_program_plan_names_tables_and_loads() {
        let p = ProgramPlan {
            from: "aaa".into(),
            to: "bbb".into(),
            tables_kept: vec!["acl".into()],
            virtual_switches: vec![p4fleet_crds::VirtualSwitchPlan {
                name: "vs".into(),
                switch: Some("sw".into()),
                load: "Hitless".into(),
            }],
            ..Default::default()
        };
        let text = render_program("P4Program ns/p", &P4ProgramStatus::default(), &p);
        assert!(text.starts_with("P4Program ns/p: aaa -> bbb\n"), "{text}");
        assert!(text.contains("  tables kept: acl\n  tables changed: none\n"));
        assert!(text.contains("  vs on sw: Hitless\n"));
    }
}
