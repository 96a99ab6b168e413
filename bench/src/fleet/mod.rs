//! The fleet benchmark (docs/fleet.md): the operator as a release binary
//! against a real kube-apiserver, emulator processes serving many devices,
//! objects applied the way users apply them, and the clock running from the
//! apply until every object is Ready (watched, not polled).
//!
//! Scenarios: (a) `create`: N Switches with one VirtualSwitch and one
//! TableEntrySet of E entries (from a ConfigMap) each; (d) `idle`: one
//! resync round of that fleet with nothing to do; (c) `change`: 1 % of
//! the entries of every set changed in its ConfigMap; (b) `big`: one set
//! of 1,000,000 entries drawn from many ConfigMaps onto one device.
//! (a), (c) and (d) write per-Switch sets, or with `--sets shared` one
//! selector set of the same entries on every Switch ([`SetLayout`]).

pub mod manifests;
pub mod procfs;
pub mod procs;
pub mod prom;
pub mod ready;
pub mod report;
pub mod rollout;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use p4fleet_e2e::ControlPlane;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use manifests::{Device, Entries, FIELD_MANAGER, NAMESPACE};
use procfs::ProcSample;
use procs::{DeviceStats, Emulator, Operator};
use prom::ApiCounts;
use ready::{Kind, Tracker, Want};

/// How the objects reach the API server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
pub enum ApplyMode {
    /// `kubectl apply --server-side -f DIR` of the generated manifests:
    /// one request per object, one after the other.
    Kubectl,
    /// Server-side apply through kube-rs, 16 objects in flight (what a
    /// GitOps tool or a script with a client library does).
    Api,
}

/// How a fleet's entries are written (scenarios a, c, d).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
pub enum SetLayout {
    /// A ConfigMap and a TableEntrySet per Switch (a change of 1 % of
    /// the entries edits every ConfigMap).
    #[default]
    PerSwitch,
    /// One ConfigMap and one TableEntrySet selecting every VirtualSwitch:
    /// the same entries on every Switch (a change is one ConfigMap).
    Shared,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Scenario {
    /// (a), then (d) and (c) on the same fleet.
    Fleet { switches: usize },
    /// (b): one set of `entries` entries from ConfigMaps of `per_map`
    /// lines, gzip-compressed in `binaryData` when `gzip` (runs before
    /// 2026-11-28 used plain `data`, hence the default).
    Big {
        entries: usize,
        per_map: usize,
        #[serde(default)]
        gzip: bool,
    },
}

#[derive(Debug, Clone)]
pub struct Config {
    pub scenario: Scenario,
    /// Entries per Switch (Fleet).
    pub entries: usize,
    /// Every k-th entry changes in (c): 100 = 1 %.
    pub change_every: usize,
    /// Devices served by one emulator process.
    pub devices_per_emulator: usize,
    pub apply: ApplyMode,
    /// Per-Switch sets or one shared selector set.
    pub layout: SetLayout,
    /// The operator's `--resync-seconds` (the idle round waits for one).
    pub resync_seconds: u64,
    /// The operator's `--drift-seconds` (Switch probes, pipeline checks).
    pub drift_seconds: u64,
    pub operator_log_level: String,
    /// Time allowed for each phase to become Ready.
    pub timeout: Duration,
    /// The directory of `p4fleet` and `p4fleet-emulator`.
    pub bin: PathBuf,
    /// Where the generated manifests are written.
    pub work: PathBuf,
}

/// What one phase measured (deltas between its start and its end).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Phase {
    /// `create`, `idle`, `change` or `big`.
    pub name: String,
    /// From the start of the apply to the last object Ready (idle: the
    /// length of the round).
    pub seconds: f64,
    pub apply_seconds: f64,
    pub objects_applied: usize,
    /// Entries the sets ask for, over all devices.
    pub desired_entries: u64,
    /// Entries the phase was expected to write (create: all; change: the
    /// changed ones; idle: none).
    pub expected_writes: u64,
    /// Emulator counters over all devices (entries: held at the end).
    pub device: DeviceStats,
    pub api: Vec<ApiUse>,
    pub api_requests: f64,
    pub api_bytes: f64,
    /// Events and bytes kube-apiserver sent to watchers during the phase,
    /// by resource (results before 2026-11-28 17:00 UTC have none).
    #[serde(default)]
    pub watch_sent: BTreeMap<String, (f64, f64)>,
    pub status_writes: f64,
    pub reconciles: BTreeMap<String, f64>,
    /// Reconciles by `Kind/trigger` (the operator's
    /// `p4fleet_reconcile_triggers_total`; docs/metrics.md).
    #[serde(default)]
    pub triggers: BTreeMap<String, f64>,
    /// gRPC calls the emulators received, by method name
    /// (`P4Runtime/Capabilities`, …; their stats side channel).
    #[serde(default)]
    pub rpcs: BTreeMap<String, u64>,
    pub operator_cpu_seconds: f64,
    pub operator_rss_before_bytes: u64,
    pub operator_peak_rss_bytes: u64,
    pub emulator_cpu_seconds: f64,
    /// Median of the sets' own `status.entriesPerSecond` (device writes).
    pub set_entries_per_second: Option<u64>,
    /// Set when the phase timed out: what was not Ready (the counters
    /// are then those up to the timeout, and the run stops).
    #[serde(default)]
    pub not_ready: Option<String>,
}

impl Phase {
    /// Desired entries per second over the phase.
    pub fn entries_per_second(&self) -> f64 {
        if self.seconds > 0.0 {
            self.expected_writes as f64 / self.seconds
        } else {
            0.0
        }
    }

    pub fn reconcile_count(&self) -> f64 {
        self.reconciles.values().sum()
    }

    /// API requests of the operator: all of them but the bench's applies
    /// (one per object) and watches, kubectl's discovery (no resource) and
    /// kube-apiserver's own lease and endpoint upkeep (the operator runs
    /// without leader election).
    pub fn operator_requests(&self) -> f64 {
        let others: f64 = self
            .api
            .iter()
            .filter(|a| {
                a.verb == "WATCH"
                    || matches!(
                        a.resource.as_str(),
                        "" | "leases" | "endpoints" | "endpointslices"
                    )
            })
            .map(|a| a.requests)
            .sum();
        self.api_requests - self.objects_applied as f64 - others
    }

    /// gRPC calls of `method` (e.g. `P4Runtime/Capabilities`) the
    /// emulators received in the phase.
    pub fn rpcs_of(&self, method: &str) -> u64 {
        self.rpcs.get(method).copied().unwrap_or(0)
    }

    /// Operator API requests per reconcile.
    pub fn requests_per_reconcile(&self) -> Option<f64> {
        let r = self.reconcile_count();
        (r > 0.0).then(|| self.operator_requests() / r)
    }
}

/// One API row of a phase.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ApiUse {
    pub verb: String,
    pub resource: String,
    pub subresource: String,
    pub requests: f64,
    pub bytes: f64,
}

/// One scenario's run (its own control plane, emulators and operator).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Run {
    pub scenario: Scenario,
    pub switches: usize,
    pub entries_per_switch: usize,
    pub emulators: usize,
    pub devices_per_emulator: usize,
    pub apply: ApplyMode,
    /// Per-Switch sets or one shared selector set (results written before
    /// it was recorded are per-Switch).
    #[serde(default)]
    pub layout: SetLayout,
    pub resync_seconds: u64,
    /// The operator's `--drift-seconds` (results written before it was
    /// recorded ran with the default, 10).
    #[serde(default = "default_drift")]
    pub drift_seconds: u64,
    pub phases: Vec<Phase>,
    /// Why the run stopped early, if it did (the phases before it stand).
    pub error: Option<String>,
}

impl Run {
    pub fn phase(&self, name: &str) -> Option<&Phase> {
        self.phases.iter().find(|p| p.name == name)
    }
}

/// Everything running for one scenario.
struct Env {
    client: Client,
    emulators: Vec<Emulator>,
    operator: Operator,
    tracker: Tracker,
    kubeconfig: PathBuf,
}

#[derive(Debug, Clone)]
struct Snapshot {
    api: ApiCounts,
    watch_sent: BTreeMap<String, (f64, f64)>,
    reconciles: BTreeMap<String, f64>,
    triggers: BTreeMap<String, f64>,
    operator: ProcSample,
    emulator_cpu: f64,
    devices: Vec<DeviceStats>,
    rpcs: BTreeMap<String, u64>,
}

impl Env {
    async fn snapshot(&self) -> anyhow::Result<Snapshot> {
        let req = http::Request::get("/metrics").body(Vec::new())?;
        let text = self.client.request_text(req).await?;
        let mut devices = Vec::new();
        let mut rpcs = BTreeMap::new();
        for e in &self.emulators {
            let (d, r) = e.stats_and_rpcs()?;
            devices.extend(d);
            for (path, n) in r {
                // `/p4.v1.P4Runtime/Capabilities` → `P4Runtime/Capabilities`.
                let method = path.rsplit('/').take(2).collect::<Vec<_>>();
                let short = match method[..] {
                    [m, s] => format!("{}/{m}", s.rsplit('.').next().unwrap_or(s)),
                    _ => path.clone(),
                };
                *rpcs.entry(short).or_insert(0) += n;
            }
        }
        let operator = self.operator.metrics()?;
        Ok(Snapshot {
            api: ApiCounts::parse(&text),
            watch_sent: prom::watch_sent(&text),
            reconciles: prom::reconciles(&operator),
            triggers: prom::triggers(&operator),
            operator: ProcSample::read(self.operator.proc.pid()),
            emulator_cpu: self
                .emulators
                .iter()
                .map(|e| ProcSample::read(e.proc.pid()).cpu_seconds)
                .sum(),
            devices,
            rpcs,
        })
    }
}

/// A fleet binary's main: `f` on the shared control plane (started on
/// first use), in a new multi-threaded runtime.
pub fn on_control_plane<T, F>(f: impl FnOnce(&'static ControlPlane) -> F) -> anyhow::Result<T>
where
    F: std::future::Future<Output = anyhow::Result<T>>,
{
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async { f(ControlPlane::shared().await).await })
}

/// Runs `cfg`'s scenario against `cp`. Errors only when nothing could be
/// measured; a phase that fails ends the run with `Run::error`.
pub async fn run(cp: &ControlPlane, cfg: &Config) -> anyhow::Result<Run> {
    let nofile = procfs::raise_nofile();
    let (devices, entries) = match cfg.scenario {
        Scenario::Fleet { switches } => (switches, cfg.entries),
        Scenario::Big { entries, .. } => (1, entries),
    };
    if nofile < (devices as u64) * 2 + 256 {
        bail!("open-file limit {nofile} is too low for {devices} devices (ulimit -n)");
    }
    let per = cfg.devices_per_emulator.max(1);
    let mut run = Run {
        scenario: cfg.scenario,
        switches: devices,
        entries_per_switch: entries,
        emulators: devices.div_ceil(per),
        devices_per_emulator: per.min(devices),
        apply: cfg.apply,
        layout: cfg.layout,
        resync_seconds: cfg.resync_seconds,
        drift_seconds: cfg.drift_seconds,
        phases: Vec::new(),
        error: None,
    };
    let mut env = start(cp, cfg, devices).await?;
    let result = match cfg.scenario {
        Scenario::Fleet { switches } => fleet(&mut env, cfg, switches, &mut run).await,
        Scenario::Big {
            entries,
            per_map,
            gzip,
        } => big(&mut env, cfg, entries, per_map, gzip, &mut run).await,
    };
    if let Err(e) = result {
        run.error = Some(format!("{e:#}"));
    }
    Ok(run)
}

async fn start(cp: &ControlPlane, cfg: &Config, devices: usize) -> anyhow::Result<Env> {
    let client = cp.client().await;
    let ns: Api<Namespace> = Api::all(client.clone());
    let mut obj = Namespace::default();
    obj.metadata.name = Some(NAMESPACE.into());
    match ns.create(&PostParams::default(), &obj).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => return Err(e).context("create namespace"),
    }
    let per = cfg.devices_per_emulator.max(1);
    let mut emulators = Vec::new();
    let mut left = devices;
    while left > 0 {
        let n = left.min(per);
        emulators.push(Emulator::spawn(&cfg.bin, emulators.len(), n as u64)?);
        left -= n;
    }
    let kubeconfig = cp.kubeconfig_path().to_path_buf();
    let operator = Operator::spawn(
        &cfg.bin,
        &kubeconfig,
        cfg.resync_seconds,
        cfg.drift_seconds,
        &cfg.operator_log_level,
    )?;
    let tracker = Tracker::start(&client, NAMESPACE).await?;
    Ok(Env {
        client,
        emulators,
        operator,
        tracker,
        kubeconfig,
    })
}

/// Switch `i`'s device: emulator `i / per`, device id `i % per + 1`.
fn device_list(env: &Env, count: usize) -> Vec<Device> {
    let mut out = Vec::with_capacity(count);
    for e in &env.emulators {
        for id in 1..=e.devices {
            if out.len() < count {
                out.push(Device {
                    endpoint: e.p4runtime.to_string(),
                    device_id: id,
                });
            }
        }
    }
    out
}

fn p4info(entries: usize) -> anyhow::Result<String> {
    let path = p4fleet_e2e::repo_root().join("examples/firewall/p4info.txt");
    let text = std::fs::read_to_string(&path).with_context(|| format!("{}", path.display()))?;
    // Room for every entry of one device (the emulator enforces the size).
    Ok(manifests::p4info_with_size(
        &text,
        (entries * 2).max(65_536),
    ))
}

async fn fleet(env: &mut Env, cfg: &Config, switches: usize, run: &mut Run) -> anyhow::Result<()> {
    let mut entries = Entries {
        count: cfg.entries,
        change_every: cfg.change_every,
        version: 0,
    };
    let devices = device_list(env, switches);
    let p4info = p4info(cfg.entries)?;
    let objects = match cfg.layout {
        SetLayout::PerSwitch => manifests::fleet(&p4info, &devices, &entries),
        SetLayout::Shared => manifests::shared_fleet(&p4info, &devices, &entries),
    };
    let total = (switches * cfg.entries) as u64;
    let want = want_all(&objects);

    let p = timed_apply(env, cfg, "create", &objects, &want, total, total).await?;
    push_or_stop(run, p)?;

    // (d) One idle resync round: every device read back once more. The
    // round after it is the steady one: each set's sync found its entries
    // in place, so its resyncs until its tenth are rechecks (the
    // operator's `entry_set::recheck`).
    tokio::time::sleep(Duration::from_secs(2)).await;
    let p = idle_round(env, cfg, total, "idle").await?;
    run.phases.push(p);
    let p = idle_round(env, cfg, total, "idle-steady").await?;
    run.phases.push(p);

    // (c) Every k-th entry of every set changes in its ConfigMap.
    entries.version = 1;
    let maps = match cfg.layout {
        SetLayout::PerSwitch => manifests::fleet_config_maps(switches, &entries),
        SetLayout::Shared => vec![manifests::shared_config_map(&entries)],
    };
    let mut want = Want {
        objects: want.objects.clone(),
        resynced_from: env.tracker.last_syncs(),
    };
    want.resynced_from.retain(|n, _| n.starts_with("tes-"));
    let changed = (switches * entries.changed()) as u64;
    let p = timed_apply(env, cfg, "change", &maps, &want, total, changed).await?;
    push_or_stop(run, p)
}

async fn big(
    env: &mut Env,
    cfg: &Config,
    count: usize,
    per_map: usize,
    gzip: bool,
    run: &mut Run,
) -> anyhow::Result<()> {
    let entries = Entries {
        count,
        change_every: cfg.change_every,
        version: 0,
    };
    let device = device_list(env, 1).remove(0);
    let objects = manifests::big(&p4info(count)?, &device, &entries, per_map, gzip);
    let want = want_all(&objects);
    let p = timed_apply(env, cfg, "big", &objects, &want, count as u64, count as u64).await?;
    push_or_stop(run, p)
}

/// Keeps the phase; a phase that timed out ends the run.
fn push_or_stop(run: &mut Run, p: Phase) -> anyhow::Result<()> {
    let stop = p.not_ready.clone();
    run.phases.push(p);
    match stop {
        Some(why) => bail!("{why}"),
        None => Ok(()),
    }
}

fn want_all(objects: &[Value]) -> Want {
    Want {
        objects: objects
            .iter()
            .filter_map(|o| {
                let kind = Kind::of(o["kind"].as_str()?)?;
                Some((kind, o["metadata"]["name"].as_str()?.to_string()))
            })
            .collect(),
        resynced_from: HashMap::new(),
    }
}

/// Applies `objects`, waits for `want`, and measures the phase.
async fn timed_apply(
    env: &mut Env,
    cfg: &Config,
    name: &str,
    objects: &[Value],
    want: &Want,
    desired: u64,
    expected_writes: u64,
) -> anyhow::Result<Phase> {
    let dir = cfg.work.join(name);
    write_manifests(&dir, objects)?;
    let before = env.snapshot().await?;
    // Progress for whoever watches a ten-minute run (and when to attach
    // a profiler to one phase).
    eprintln!(
        "p4fleet-fleet-bench: phase {name}: applying {} objects",
        objects.len()
    );
    let t0 = Instant::now();
    apply(env, cfg, &dir, objects).await?;
    let apply_seconds = t0.elapsed().as_secs_f64();
    let waited = env.tracker.wait(want, t0, cfg.timeout).await;
    let after = env.snapshot().await?;
    let mut p = measure(name, &before, &after, objects.len());
    match waited {
        Ok(took) => p.seconds = took.as_secs_f64(),
        Err(e) => {
            p.seconds = t0.elapsed().as_secs_f64();
            p.not_ready = Some(format!("{e:#}"));
        }
    }
    p.apply_seconds = apply_seconds;
    p.desired_entries = desired;
    p.expected_writes = expected_writes;
    let mut rates: Vec<u64> = env
        .tracker
        .sets()
        .values()
        .filter_map(|s| s.entries_per_second)
        .collect();
    rates.sort_unstable();
    p.set_entries_per_second = rates.get(rates.len() / 2).copied();
    Ok(p)
}

/// Waits (polling the emulators' counters, every 500 ms) until every
/// device has been read back since the start: one resync round, the
/// phase `name`.
async fn idle_round(
    env: &mut Env,
    cfg: &Config,
    desired: u64,
    name: &str,
) -> anyhow::Result<Phase> {
    let before = env.snapshot().await?;
    eprintln!("p4fleet-fleet-bench: phase {name}: waiting for one resync round");
    let t0 = Instant::now();
    let limit = Duration::from_secs(cfg.resync_seconds * 2 + 60);
    loop {
        let mut now = Vec::new();
        for e in &env.emulators {
            now.extend(e.stats()?);
        }
        let all_read = now.len() == before.devices.len()
            && now
                .iter()
                .zip(&before.devices)
                .all(|(a, b)| a.read_rpcs > b.read_rpcs);
        // At least one resync long: a round that ended as soon as the
        // sets' resyncs (spread over the period) had all come would be
        // shorter than the period, and undercount what a round costs.
        if all_read && t0.elapsed() >= Duration::from_secs(cfg.resync_seconds) {
            break;
        }
        if t0.elapsed() > limit {
            let read = now
                .iter()
                .zip(&before.devices)
                .filter(|(a, b)| a.read_rpcs > b.read_rpcs)
                .count();
            bail!(
                "idle: only {read} of {} devices read back within {limit:?}",
                now.len()
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let seconds = t0.elapsed().as_secs_f64();
    let after = env.snapshot().await?;
    let mut p = measure(name, &before, &after, 0);
    p.seconds = seconds;
    p.desired_entries = desired;
    Ok(p)
}

fn measure(name: &str, before: &Snapshot, after: &Snapshot, applied: usize) -> Phase {
    let api = after.api.since(&before.api);
    let reconciles = moved(&before.reconciles, &after.reconciles);
    let triggers = moved(&before.triggers, &after.triggers);
    Phase {
        name: name.into(),
        objects_applied: applied,
        device: DeviceStats::total(&after.devices).since(&DeviceStats::total(&before.devices)),
        api: api
            .rows
            .iter()
            .map(|(k, r)| ApiUse {
                verb: k.verb.clone(),
                resource: k.resource.clone(),
                subresource: k.subresource.clone(),
                requests: r.requests,
                bytes: r.bytes,
            })
            .collect(),
        api_requests: api.requests(),
        api_bytes: api.bytes(),
        watch_sent: after
            .watch_sent
            .iter()
            .map(|(k, (n, b))| {
                let (n0, b0) = before.watch_sent.get(k).copied().unwrap_or_default();
                (k.clone(), (n - n0, b - b0))
            })
            .filter(|(_, (n, _))| *n > 0.0)
            .collect(),
        status_writes: api.status_writes(),
        reconciles,
        triggers,
        rpcs: after
            .rpcs
            .iter()
            .map(|(k, n)| (k.clone(), n - before.rpcs.get(k).copied().unwrap_or(0)))
            .filter(|(_, n)| *n > 0)
            .collect(),
        operator_cpu_seconds: after.operator.cpu_seconds - before.operator.cpu_seconds,
        operator_rss_before_bytes: before.operator.rss_bytes,
        operator_peak_rss_bytes: after.operator.peak_rss_bytes,
        emulator_cpu_seconds: after.emulator_cpu - before.emulator_cpu,
        ..Phase::default()
    }
}

fn default_drift() -> u64 {
    10
}

/// The counters of `after` that moved since `before`, by how much.
fn moved(before: &BTreeMap<String, f64>, after: &BTreeMap<String, f64>) -> BTreeMap<String, f64> {
    after
        .iter()
        .map(|(k, v)| (k.clone(), v - before.get(k).copied().unwrap_or(0.0)))
        .filter(|(_, v)| *v != 0.0)
        .collect()
}

fn write_manifests(dir: &Path, objects: &[Value]) -> anyhow::Result<()> {
    if dir.exists() {
        std::fs::remove_dir_all(dir)?;
    }
    std::fs::create_dir_all(dir)?;
    for (name, text) in manifests::yaml_files(objects) {
        std::fs::write(dir.join(name), text)?;
    }
    Ok(())
}

async fn apply(env: &Env, cfg: &Config, dir: &Path, objects: &[Value]) -> anyhow::Result<()> {
    match cfg.apply {
        ApplyMode::Kubectl => {
            let (kubeconfig, dir) = (env.kubeconfig.clone(), dir.to_path_buf());
            let out = tokio::task::spawn_blocking(move || {
                std::process::Command::new("kubectl")
                    .arg("--kubeconfig")
                    .arg(&kubeconfig)
                    .args(["apply", "--server-side", "--force-conflicts"])
                    .args(["--field-manager", FIELD_MANAGER, "-f"])
                    .arg(&dir)
                    .output()
            })
            .await??;
            if !out.status.success() {
                bail!(
                    "kubectl apply: {}",
                    String::from_utf8_lossy(&out.stderr).trim()
                );
            }
        }
        ApplyMode::Api => {
            let pp = PatchParams::apply(FIELD_MANAGER).force();
            // ConfigMaps first, then the custom resources, as Helm's
            // install order and Argo CD's sync order (by kind) apply them
            // and as kubectl does in the files' order: a set applied
            // beside its ConfigMaps would sync a part of its entries.
            let (maps, rest): (Vec<&Value>, Vec<&Value>) =
                objects.iter().partition(|o| o["kind"] == "ConfigMap");
            for wave in [maps, rest] {
                futures::stream::iter(wave)
                    .map(|o| {
                        let client = env.client.clone();
                        let pp = pp.clone();
                        async move {
                            let kind = o["kind"].as_str().unwrap_or_default();
                            let ar = match Kind::of(kind) {
                                Some(k) => k.resource(),
                                None => ApiResource::erase::<ConfigMap>(&()),
                            };
                            let api: Api<DynamicObject> = match o["metadata"]["namespace"].as_str()
                            {
                                Some(ns) => Api::namespaced_with(client, ns, &ar),
                                None => Api::all_with(client, &ar),
                            };
                            let name = o["metadata"]["name"].as_str().unwrap_or_default();
                            api.patch(name, &pp, &Patch::Apply(o))
                                .await
                                .map(|d| d.name_any())
                                .with_context(|| format!("apply {kind} {name}"))
                        }
                    })
                    .buffer_unordered(16)
                    .try_collect::<Vec<_>>()
                    .await?;
            }
        }
    }
    Ok(())
}
