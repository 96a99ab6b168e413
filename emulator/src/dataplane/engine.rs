//! The data plane of one emulated DPDK device: a loaded program, its
//! tables following a [`TableSource`], worker and extern cores, and the
//! control operations (start/stop, extern policy, cores, traffic) that
//! reconfigure it.
//!
//! Reconfiguration is atomic: a new policy (or core count, or traffic) is
//! validated whole, then the running cores are stopped at a burst boundary
//! after their in-flight async calls complete, and a new run starts with
//! the new settings. No packet sees a mix of old and new settings; counters
//! carry on.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use p4fleet_proto::p4info::P4Info;

use super::bind::{self, BindError, Binding};
use super::context::DEFAULT_CONTEXT_BYTES;
use super::externs::{CryptoKeys, ExternFn, ExternKind};
use super::packet::TrafficConfig;
use super::policy::{self, Capabilities, Executor, ExternPolicy, Mode, PolicyError, SuspendMethod};
use super::spec::{self, Program, SpecError};
use super::stats::{self, BUCKETS, DropCounts, EngineStats, ExternStats, TableStats};
use super::table::{CompileError, CompiledTable, TableSource};
use super::worker::{CorePort, ExtRt, ExternCore, Plan, Shared, Worker};

/// Most worker cores of one engine.
pub const MAX_WORKERS: usize = 16;
/// Most memory for Context images, per worker and extern.
pub const CONTEXT_MEMORY_BUDGET: usize = 256 << 20;
/// Most packet buffers per worker (with very large context pools, rx runs
/// out of buffers before the pool runs out of contexts: `rx_nombuf`).
pub const MAX_MBUFS_PER_WORKER: u32 = 1 << 18;

/// Why an engine cannot be built or reconfigured.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("spec: {0}")]
    Spec(#[from] SpecError),
    #[error("p4info: {0}")]
    Bind(#[from] BindError),
    #[error("extern {0:?}: this target has no implementation of it")]
    UnknownExtern(String),
    #[error("{field}: {reason}")]
    InvalidConfig { field: &'static str, reason: String },
    #[error(transparent)]
    Policy(#[from] PolicyError),
}

/// How to run an engine.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// P4 program name, as reported (e.g. `l2crypt`).
    pub pipeline: String,
    /// Worker cores.
    pub workers: u32,
    /// Packets polled per rx burst.
    pub rx_burst: u32,
    pub traffic: TrafficConfig,
    /// Stack bytes saved/restored per Context suspend (see `context.rs`).
    pub context_bytes: usize,
    pub keys: CryptoKeys,
    /// How often the tables' versions are polled.
    pub table_sync_interval: Duration,
    /// Rate sampling interval (packets/s, async ops/s).
    pub stats_interval: Duration,
    /// Copy the first N transmitted packets for inspection (tests); 0 = off.
    /// Capturing allocates per captured packet.
    pub capture: usize,
    /// Cores this target sets aside for extern work: the most dedicated
    /// cores one extern may get (0 = none, so no DedicatedCores executor).
    /// `None` = the machine's cores.
    pub extern_cores: Option<u32>,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            pipeline: String::new(),
            workers: 1,
            rx_burst: 32,
            traffic: TrafficConfig::default(),
            context_bytes: DEFAULT_CONTEXT_BYTES,
            keys: CryptoKeys::default(),
            table_sync_interval: Duration::from_millis(1),
            stats_interval: Duration::from_secs(1),
            capture: 0,
            extern_cores: None,
        }
    }
}

/// An extern of the loaded program.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExternInfo {
    pub name: String,
    /// P4Info instance id (0 when P4Info does not declare externs).
    pub p4info_id: u32,
    pub kind: ExternKind,
    pub capabilities: Capabilities,
}

/// A program loaded from its `.spec`, bound to its P4Info, with every
/// extern implemented and the configuration checked: everything that can
/// refuse a pipeline, before any thread starts.
pub struct LoadedProgram {
    program: Program,
    binding: Binding,
    kinds: Vec<ExternKind>,
    config: EngineConfig,
}

impl LoadedProgram {
    pub fn load(
        spec_text: &str,
        p4info: &P4Info,
        config: EngineConfig,
    ) -> Result<LoadedProgram, EngineError> {
        let program = spec::load(spec_text)?;
        let binding = bind::bind(&program, p4info)?;
        LoadedProgram::new(program, binding, config)
    }

    pub fn new(
        program: Program,
        binding: Binding,
        config: EngineConfig,
    ) -> Result<LoadedProgram, EngineError> {
        check_config(&config)?;
        let kinds = program
            .externs
            .iter()
            .map(|n| ExternKind::from_name(n).ok_or_else(|| EngineError::UnknownExtern(n.clone())))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(LoadedProgram {
            program,
            binding,
            kinds,
            config,
        })
    }

    pub fn program(&self) -> &Program {
        &self.program
    }
}

/// Transmitted packets copied for inspection.
pub(crate) struct Capture {
    limit: usize,
    taken: AtomicUsize,
    items: Mutex<Vec<(u32, Vec<u8>)>>,
}

impl Capture {
    pub fn new(limit: usize) -> Capture {
        Capture {
            limit,
            taken: AtomicUsize::new(0),
            items: Mutex::new(Vec::with_capacity(limit)),
        }
    }

    #[inline]
    pub fn wants(&self) -> bool {
        self.limit > 0 && self.taken.load(Ordering::Relaxed) < self.limit
    }

    pub fn push(&self, port: u32, bytes: &[u8]) {
        if self.taken.fetch_add(1, Ordering::Relaxed) < self.limit {
            self.items
                .lock()
                .expect("capture lock")
                .push((port, bytes.to_vec()));
        }
    }
}

struct Run {
    stop: Arc<AtomicBool>,
    cores_stop: Arc<AtomicBool>,
    workers: Vec<JoinHandle<()>>,
    cores: Vec<JoinHandle<()>>,
    extern_cores: usize,
}

impl Run {
    /// Stops rx, lets in-flight calls complete, joins everything.
    fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        for w in self.workers {
            let _ = w.join();
        }
        self.cores_stop.store(true, Ordering::Relaxed);
        for c in self.cores {
            let _ = c.join();
        }
    }
}

struct Control {
    run: Option<Run>,
    policies: Vec<ExternPolicy>,
    /// Policies applied (SetPolicy calls that changed nothing included).
    policy_sets: u64,
    workers: u32,
    rx_burst: u32,
    traffic: TrafficConfig,
    context_bytes: usize,
}

#[derive(Default)]
struct Rates {
    at: Option<Instant>,
    rx: u64,
    tx: u64,
    completed: Vec<u64>,
    rx_pps: f64,
    tx_pps: f64,
    ops: Vec<f64>,
}

struct Background {
    errors: Mutex<Vec<Option<String>>>,
    /// Version whose compilation failed, per table (not retried).
    failed: Mutex<Vec<Option<u64>>>,
    rates: Mutex<Rates>,
}

/// The data plane of one device.
pub struct Engine {
    shared: Arc<Shared>,
    source: Arc<dyn TableSource>,
    bg: Arc<Background>,
    ctl: Mutex<Control>,
    kinds: Vec<ExternKind>,
    caps: Capabilities,
    pipeline: String,
    bg_stop: Arc<AtomicBool>,
    bg_thread: Option<JoinHandle<()>>,
}

/// Cores this machine offers (the most any one extern may get).
pub fn available_cores() -> u32 {
    std::thread::available_parallelism()
        .map(|n| n.get() as u32)
        .unwrap_or(1)
}

impl Engine {
    /// Loads `spec_text` bound to `p4info`, following `source`'s tables.
    /// The engine starts stopped: [`Engine::start`] starts the traffic.
    pub fn load(
        spec_text: &str,
        p4info: &P4Info,
        source: Arc<dyn TableSource>,
        config: EngineConfig,
    ) -> Result<Engine, EngineError> {
        Engine::from_program(LoadedProgram::load(spec_text, p4info, config)?, source)
    }

    pub fn new(
        program: Program,
        binding: Binding,
        source: Arc<dyn TableSource>,
        config: EngineConfig,
    ) -> Result<Engine, EngineError> {
        Engine::from_program(LoadedProgram::new(program, binding, config)?, source)
    }

    /// The data plane of a loaded program, following `source`'s tables
    /// (synced once before this returns); stopped.
    pub fn from_program(
        loaded: LoadedProgram,
        source: Arc<dyn TableSource>,
    ) -> Result<Engine, EngineError> {
        let LoadedProgram {
            program,
            binding,
            kinds,
            config,
        } = loaded;
        let fns = kinds
            .iter()
            .map(|k| ExternFn::new(*k, &config.keys))
            .collect();
        let n_ext = kinds.len();
        let n_tables = program.tables.len();
        let shared = Arc::new(Shared::new(
            program,
            binding,
            fns,
            MAX_WORKERS,
            config.capture,
        ));
        let bg = Arc::new(Background {
            errors: Mutex::new(vec![None; n_tables]),
            failed: Mutex::new(vec![None; n_tables]),
            rates: Mutex::new(Rates {
                completed: vec![0; n_ext],
                ops: vec![0.0; n_ext],
                ..Rates::default()
            }),
        });
        sync_tables(&shared, source.as_ref(), &bg);
        let bg_stop = Arc::new(AtomicBool::new(false));
        let bg_thread = {
            let (shared, source, bg, stop) =
                (shared.clone(), source.clone(), bg.clone(), bg_stop.clone());
            let (sync_every, stats_every) = (config.table_sync_interval, config.stats_interval);
            std::thread::Builder::new()
                .name("dp-control".into())
                .spawn(move || background(shared, source, bg, stop, sync_every, stats_every))
                .map_err(|e| EngineError::InvalidConfig {
                    field: "threads",
                    reason: e.to_string(),
                })?
        };
        Ok(Engine {
            ctl: Mutex::new(Control {
                policy_sets: 0,
                run: None,
                policies: vec![ExternPolicy::default(); n_ext],
                workers: config.workers,
                rx_burst: config.rx_burst,
                traffic: config.traffic,
                context_bytes: config.context_bytes,
            }),
            shared,
            source,
            bg,
            kinds,
            caps: Capabilities::emulated(config.extern_cores.unwrap_or_else(available_cores)),
            pipeline: config.pipeline,
            bg_stop,
            bg_thread: Some(bg_thread),
        })
    }

    /// The P4 program name.
    pub fn pipeline(&self) -> &str {
        &self.pipeline
    }

    pub fn program(&self) -> &Program {
        &self.shared.program
    }

    pub fn binding(&self) -> &Binding {
        &self.shared.binding
    }

    pub fn capabilities(&self) -> &Capabilities {
        &self.caps
    }

    /// The program's externs with what this target can do with them.
    pub fn externs(&self) -> Vec<ExternInfo> {
        self.shared
            .program
            .externs
            .iter()
            .zip(&self.kinds)
            .zip(&self.shared.binding.extern_ids)
            .map(|((name, kind), id)| ExternInfo {
                name: name.clone(),
                p4info_id: *id,
                kind: *kind,
                capabilities: self.caps.clone(),
            })
            .collect()
    }

    /// The policy in force, per extern in program order.
    pub fn policy(&self) -> Vec<(String, ExternPolicy)> {
        let ctl = self.ctl.lock().expect("control lock");
        self.named(&ctl.policies)
    }

    fn named(&self, p: &[ExternPolicy]) -> Vec<(String, ExternPolicy)> {
        self.shared
            .program
            .externs
            .iter()
            .cloned()
            .zip(p.iter().copied())
            .collect()
    }

    /// Applies a complete policy set (unlisted externs return to Sync)
    /// atomically; returns the policy now in force. On error nothing
    /// changes.
    pub fn set_policy(
        &self,
        desired: &[(String, ExternPolicy)],
    ) -> Result<Vec<(String, ExternPolicy)>, PolicyError> {
        let resolved = policy::resolve(&self.shared.program.externs, desired, &self.caps)?;
        let mut ctl = self.ctl.lock().expect("control lock");
        for (name, p) in self.shared.program.externs.iter().zip(&resolved) {
            check_context_memory(name, p, ctl.context_bytes)?;
        }
        let was_running = self.halt(&mut ctl);
        ctl.policies = resolved;
        ctl.policy_sets += 1;
        if was_running {
            self.launch(&mut ctl);
        }
        Ok(self.named(&ctl.policies))
    }

    /// Changes the number of worker cores (restarts a running data plane).
    pub fn set_workers(&self, workers: u32) -> Result<(), EngineError> {
        check_workers(workers)?;
        self.reconfigure(|c| c.workers = workers);
        Ok(())
    }

    /// Changes the rx burst size (restarts a running data plane).
    pub fn set_rx_burst(&self, rx_burst: u32) -> Result<(), EngineError> {
        check_burst(rx_burst)?;
        self.reconfigure(|c| c.rx_burst = rx_burst);
        Ok(())
    }

    /// Changes the generated traffic (restarts a running data plane, and
    /// with it a finite source's count).
    pub fn set_traffic(&self, traffic: TrafficConfig) -> Result<(), EngineError> {
        traffic
            .validate()
            .map_err(|reason| EngineError::InvalidConfig {
                field: "traffic",
                reason,
            })?;
        self.reconfigure(|c| c.traffic = traffic);
        Ok(())
    }

    fn reconfigure(&self, f: impl FnOnce(&mut Control)) {
        let mut ctl = self.ctl.lock().expect("control lock");
        let was_running = self.halt(&mut ctl);
        f(&mut ctl);
        if was_running {
            self.launch(&mut ctl);
        }
    }

    /// Worker cores configured.
    pub fn workers(&self) -> u32 {
        self.ctl.lock().expect("control lock").workers
    }

    /// Starts the cores (no-op when running).
    pub fn start(&self) {
        let mut ctl = self.ctl.lock().expect("control lock");
        if ctl.run.is_none() {
            self.launch(&mut ctl);
        }
    }

    /// Stops the cores after in-flight calls complete.
    pub fn stop(&self) {
        let mut ctl = self.ctl.lock().expect("control lock");
        self.halt(&mut ctl);
    }

    pub fn is_running(&self) -> bool {
        self.ctl.lock().expect("control lock").run.is_some()
    }

    fn halt(&self, ctl: &mut Control) -> bool {
        match ctl.run.take() {
            Some(r) => {
                r.stop();
                true
            }
            None => false,
        }
    }

    fn launch(&self, ctl: &mut Control) {
        let parked: u32 = ctl
            .policies
            .iter()
            .filter(|p| p.mode == Mode::Async)
            .map(|p| p.context_pool)
            .sum();
        let plan = Plan {
            workers: ctl.workers as usize,
            rx_burst: ctl.rx_burst as usize,
            policies: ctl.policies.clone(),
            traffic: ctl.traffic.clone(),
            context_bytes: ctl.context_bytes,
            mbufs_per_worker: (ctl.rx_burst * 3 + 64)
                .saturating_add(parked)
                .min(MAX_MBUFS_PER_WORKER),
        };
        let extern_cores = plan
            .policies
            .iter()
            .filter(|p| p.mode == Mode::Async && p.executor == Some(Executor::DedicatedCores))
            .map(|p| p.cores as usize)
            .max()
            .unwrap_or(0);
        let mut core_ports: Vec<Vec<CorePort>> = (0..extern_cores).map(|_| Vec::new()).collect();
        let stop = Arc::new(AtomicBool::new(false));
        let cores_stop = Arc::new(AtomicBool::new(false));
        let mut workers = Vec::new();
        for w in 0..plan.workers {
            let ext = plan
                .policies
                .iter()
                .enumerate()
                .map(|(e, p)| {
                    let (mut req, mut comp) = (Vec::new(), Vec::new());
                    if p.mode == Mode::Async && p.executor == Some(Executor::DedicatedCores) {
                        for ports in core_ports.iter_mut().take(p.cores as usize) {
                            let (rp, rc) = rtrb::RingBuffer::new(p.queue_depth as usize);
                            let (cp, cc) = rtrb::RingBuffer::new(p.queue_depth as usize);
                            req.push(rp);
                            comp.push(cc);
                            ports.push(CorePort {
                                ext: e,
                                burst: p.burst_size as usize,
                                req: rc,
                                comp: cp,
                            });
                        }
                    }
                    ExtRt::new(p, plan.context_bytes, plan.mbufs_per_worker, req, comp)
                })
                .collect();
            workers.push(Worker::new(
                w,
                self.shared.clone(),
                &plan,
                ext,
                stop.clone(),
            ));
        }
        let cores = core_ports
            .into_iter()
            .enumerate()
            .map(|(i, ports)| {
                let core = ExternCore {
                    shared: self.shared.clone(),
                    ports,
                    stop: cores_stop.clone(),
                };
                std::thread::Builder::new()
                    .name(format!("dp-extern-{i}"))
                    .spawn(move || core.run())
                    .expect("spawning an extern core")
            })
            .collect();
        let workers = workers
            .into_iter()
            .enumerate()
            .map(|(i, w)| {
                std::thread::Builder::new()
                    .name(format!("dp-worker-{i}"))
                    .spawn(move || w.run())
                    .expect("spawning a worker core")
            })
            .collect();
        ctl.run = Some(Run {
            stop,
            cores_stop,
            workers,
            cores,
            extern_cores,
        });
    }

    /// Polls the table source now (the background thread also does,
    /// every `table_sync_interval`); returns tables that failed to compile.
    pub fn sync_tables(&self) -> Vec<CompileError> {
        sync_tables(&self.shared, self.source.as_ref(), &self.bg)
    }

    /// Transmitted packets captured so far (`EngineConfig::capture`).
    pub fn captured(&self) -> Vec<(u32, Vec<u8>)> {
        self.shared
            .capture
            .items
            .lock()
            .expect("capture lock")
            .clone()
    }

    /// Forgets captured packets and captures the next ones.
    pub fn clear_capture(&self) {
        let mut items = self.shared.capture.items.lock().expect("capture lock");
        items.clear();
        self.shared.capture.taken.store(0, Ordering::Relaxed);
    }

    /// All counters, summed over workers.
    pub fn stats(&self) -> EngineStats {
        let (running, workers, extern_cores, policies, policy_sets) = {
            let ctl = self.ctl.lock().expect("control lock");
            (
                ctl.run.is_some(),
                ctl.workers,
                ctl.run.as_ref().map(|r| r.extern_cores).unwrap_or(0) as u32,
                ctl.policies.clone(),
                ctl.policy_sets,
            )
        };
        let sh = &self.shared;
        let prog = &sh.program;
        let cs = &sh.counters;
        let sum = |f: &dyn Fn(&stats::WorkerCounters) -> u64| cs.iter().map(f).sum::<u64>();
        let drops = DropCounts {
            program: sum(&|c| c.drops[stats::DropCause::Program as usize].get()),
            truncated: sum(&|c| c.drops[stats::DropCause::Truncated as usize].get()),
            pool_exhausted: sum(&|c| c.drops[stats::DropCause::PoolExhausted as usize].get()),
            queue_full: sum(&|c| c.drops[stats::DropCause::QueueFull as usize].get()),
            bad_port: sum(&|c| c.drops[stats::DropCause::BadPort as usize].get()),
        };
        let tx_per_port = (0..stats::PORTS)
            .filter_map(|p| {
                let n = sum(&|c| c.tx_port[p].get());
                (n > 0).then_some((p as u32, n))
            })
            .collect();
        let errors = self.bg.errors.lock().expect("errors lock").clone();
        let tables = prog
            .tables
            .iter()
            .enumerate()
            .map(|(t, def)| {
                let compiled = sh.tables[t].load();
                TableStats {
                    name: sh.binding.tables[t].name.clone(),
                    table_id: sh.binding.tables[t].table_id,
                    entries: compiled.entries as u64,
                    version: compiled.version,
                    hits: sum(&|c| c.table_hit[t].get()),
                    misses: sum(&|c| c.table_miss[t].get()),
                    actions: def
                        .actions
                        .iter()
                        .map(|a| {
                            let a = *a as usize;
                            (
                                prog.actions[a].name.clone(),
                                sh.binding.action_ids[a],
                                // Action counters are per action, shared by
                                // the tables that run it.
                                sum(&|c| c.action[a].get()),
                            )
                        })
                        .collect(),
                    compile_error: errors[t].clone(),
                }
            })
            .collect();
        let rates = self.bg.rates.lock().expect("rates lock");
        let externs = prog
            .externs
            .iter()
            .enumerate()
            .map(|(e, name)| {
                let mut h = [0u64; BUCKETS];
                for c in cs {
                    c.externs[e].latency.merge_into(&mut h);
                }
                let submitted = sum(&|c| c.externs[e].submitted.get());
                let completed = sum(&|c| c.externs[e].completed.get());
                ExternStats {
                    name: name.clone(),
                    policy: policies[e],
                    sync_calls: sum(&|c| c.externs[e].sync_calls.get()),
                    skipped: sum(&|c| c.externs[e].skipped.get()),
                    async_submitted: submitted,
                    async_completed: completed,
                    async_ops_per_second: rates.ops[e],
                    in_flight: submitted.saturating_sub(completed),
                    drops_pool_exhausted: sum(&|c| c.externs[e].drop_pool.get()),
                    drops_queue_full: sum(&|c| c.externs[e].drop_queue.get()),
                    async_waits: sum(&|c| c.externs[e].waits.get()),
                    latency_p50_ns: stats::quantile(&h, 0.5),
                    latency_p99_ns: stats::quantile(&h, 0.99),
                }
            })
            .collect();
        let mut h = [0u64; BUCKETS];
        for c in cs {
            c.latency.merge_into(&mut h);
        }
        EngineStats {
            running,
            workers,
            extern_cores,
            policy_sets,
            rx_packets: sum(&|c| c.rx.get()),
            rx_nombuf: sum(&|c| c.rx_nombuf.get()),
            rx_missed: sum(&|c| c.rx_missed.get()),
            tx_packets: sum(&|c| c.tx.get()),
            tx_bytes: sum(&|c| c.tx_bytes.get()),
            drops,
            packets_per_second: rates.tx_pps,
            rx_packets_per_second: rates.rx_pps,
            tx_per_port,
            tables,
            externs,
            latency_p50_ns: stats::quantile(&h, 0.5),
            latency_p99_ns: stats::quantile(&h, 0.99),
        }
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        if let Ok(mut ctl) = self.ctl.lock()
            && let Some(r) = ctl.run.take()
        {
            r.stop();
        }
        self.bg_stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.bg_thread.take() {
            let _ = t.join();
        }
    }
}

fn check_workers(w: u32) -> Result<(), EngineError> {
    if w == 0 || w as usize > MAX_WORKERS {
        return Err(EngineError::InvalidConfig {
            field: "workers",
            reason: format!("{w} outside 1..={MAX_WORKERS}"),
        });
    }
    Ok(())
}

fn check_burst(b: u32) -> Result<(), EngineError> {
    if b == 0 || b > policy::MAX_BURST {
        return Err(EngineError::InvalidConfig {
            field: "rx_burst",
            reason: format!("{b} outside 1..={}", policy::MAX_BURST),
        });
    }
    Ok(())
}

fn check_config(c: &EngineConfig) -> Result<(), EngineError> {
    check_workers(c.workers)?;
    check_burst(c.rx_burst)?;
    c.traffic
        .validate()
        .map_err(|reason| EngineError::InvalidConfig {
            field: "traffic",
            reason,
        })
}

fn check_context_memory(
    name: &str,
    p: &ExternPolicy,
    context_bytes: usize,
) -> Result<(), PolicyError> {
    if p.suspend != Some(SuspendMethod::Context) || context_bytes == 0 {
        return Ok(());
    }
    let max = (CONTEXT_MEMORY_BUDGET / context_bytes) as u32;
    if p.context_pool > max {
        return Err(PolicyError::OutOfRange {
            name: name.to_string(),
            field: "context_pool",
            value: p.context_pool,
            min: 1,
            max,
        });
    }
    Ok(())
}

fn sync_tables(shared: &Shared, source: &dyn TableSource, bg: &Background) -> Vec<CompileError> {
    let mut out = Vec::new();
    let mut swapped = false;
    for (i, tb) in shared.binding.tables.iter().enumerate() {
        let v = source.version(tb.table_id);
        if v == shared.tables[i].load().version {
            continue;
        }
        if bg.failed.lock().expect("failed lock")[i] == Some(v) {
            continue;
        }
        let snap = source.snapshot(tb.table_id);
        match CompiledTable::compile(&shared.program, &shared.binding, i, &snap) {
            Ok(t) => {
                shared.tables[i].store(Arc::new(t));
                bg.errors.lock().expect("errors lock")[i] = None;
                bg.failed.lock().expect("failed lock")[i] = None;
                swapped = true;
            }
            Err(e) => {
                tracing::warn!(error = %e, "data plane keeps the previous table");
                bg.errors.lock().expect("errors lock")[i] = Some(e.to_string());
                bg.failed.lock().expect("failed lock")[i] = Some(snap.version);
                out.push(e);
            }
        }
    }
    if swapped {
        shared.table_epoch.fetch_add(1, Ordering::Release);
    }
    out
}

fn background(
    shared: Arc<Shared>,
    source: Arc<dyn TableSource>,
    bg: Arc<Background>,
    stop: Arc<AtomicBool>,
    sync_every: Duration,
    stats_every: Duration,
) {
    let mut next_stats = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        sync_tables(&shared, source.as_ref(), &bg);
        let now = Instant::now();
        if now >= next_stats {
            sample_rates(&shared, &bg, now);
            next_stats = now + stats_every;
        }
        std::thread::sleep(sync_every);
    }
}

fn sample_rates(shared: &Shared, bg: &Background, now: Instant) {
    let cs = &shared.counters;
    let rx: u64 = cs.iter().map(|c| c.rx.get()).sum();
    let tx: u64 = cs.iter().map(|c| c.tx.get()).sum();
    let completed: Vec<u64> = (0..shared.program.externs.len())
        .map(|e| cs.iter().map(|c| c.externs[e].completed.get()).sum())
        .collect();
    let mut r = bg.rates.lock().expect("rates lock");
    if let Some(at) = r.at {
        let dt = now.duration_since(at).as_secs_f64();
        if dt > 0.0 {
            r.rx_pps = (rx - r.rx) as f64 / dt;
            r.tx_pps = (tx - r.tx) as f64 / dt;
            r.ops = completed
                .iter()
                .zip(&r.completed)
                .map(|(n, o)| (n - o) as f64 / dt)
                .collect();
        }
    }
    r.at = Some(now);
    r.rx = rx;
    r.tx = tx;
    r.completed = completed;
}
