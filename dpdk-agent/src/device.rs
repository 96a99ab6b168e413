//! The one device an agent serves: its pipeline (built, bound to the
//! P4Info, running), the table entries written through P4Runtime (kept as
//! written, for reads: DPDK's control API has no per-entry read), the
//! extern policy in force and the rates the pipeline's counters give.
//!
//! Everything here is blocking (DPDK builds, commits, thread joins): the
//! gRPC services call it through `spawn_blocking`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use p4fleet_model::entries::{ActionCall, ActionParam, ByteStr, Entry, EntryKey};
use p4fleet_model::pipeline_config::BfPipelineConfig;
use p4fleet_proto::externs as xpb;
use p4fleet_proto::p4info::P4Info;
use p4fleet_proto::p4runtime::{self as p4, set_forwarding_pipeline_config_request::Action};
use tonic::{Code, Status};

use crate::bind::{self, Binding, TableBind};
use crate::externs::{self, EXTERNS, Runtime};
use crate::ffi;
use crate::pipeline::{BuildConfig, Counters, Pipeline, Ports};
use crate::policy;

/// How the agent runs its device (its flags).
#[derive(Debug, Clone)]
pub struct Config {
    pub device_id: u64,
    pub build: BuildConfig,
    pub ports: Ports,
    /// Packets/s the input ports are paced to (0 = as fast as the core
    /// polls, what a switch does).
    pub rate_pps: u64,
    /// Most extern cores one extern may get (0: no DedicatedCores).
    pub max_extern_cores: u32,
    /// The crypto device started for InlineCryptoDevice (`--crypto-dev`).
    pub crypto_dev: Option<String>,
    pub stats_interval: Duration,
    /// CPUs to pin to (`--cpus`): the data plane on the first, extern
    /// cores on the others in turn; empty: not pinned.
    pub cpus: Vec<usize>,
}

/// One update's refusal: its code and message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpdateError {
    pub code: Code,
    pub message: String,
}

fn uerr(code: Code, message: impl Into<String>) -> UpdateError {
    UpdateError {
        code,
        message: message.into(),
    }
}

/// An entry as the agent keeps it.
#[derive(Debug, Clone)]
struct Stored {
    entry: Entry,
    metadata: Vec<u8>,
}

/// A checked program, ready to run.
pub struct Prepared {
    pipeline: Pipeline,
    binding: Binding,
    config: p4::ForwardingPipelineConfig,
    p4_name: String,
    /// Per DPDK table: the .spec's default action line.
    spec_defaults: HashMap<String, String>,
}

/// The running program.
pub struct Loaded {
    pub pipeline: Pipeline,
    binding: Binding,
    config: p4::ForwardingPipelineConfig,
    pub p4_name: String,
    spec_defaults: HashMap<String, String>,
    entries: HashMap<u32, HashMap<EntryKey, Stored>>,
    /// Default entries set through P4Runtime (the rest run the .spec's).
    defaults: HashMap<u32, p4::TableEntry>,
    /// The policy in force, one per extern of the program, in order.
    pub policy: Vec<xpb::ExternPolicy>,
    /// SetPolicy calls applied on this pipeline.
    pub policy_sets: u64,
}

/// Rates over the last sampling interval.
#[derive(Debug, Clone, Default)]
pub struct Rates {
    pub packets_per_second: f64,
    /// Per extern slot: completed async calls per second.
    pub async_ops: [f64; EXTERNS.len()],
    last: Option<(Instant, u64, [u64; EXTERNS.len()])>,
}

pub struct State {
    pub loaded: Option<Loaded>,
    saved: Option<Prepared>,
    runtime: Runtime,
}

pub struct Device {
    pub config: Config,
    pub state: Mutex<State>,
    pub rates: Mutex<Rates>,
}

fn invalid(msg: impl Into<String>) -> Status {
    Status::invalid_argument(msg.into())
}

/// The `.spec`'s `default_action` per table, as DPDK entry text.
fn spec_defaults(spec: &str) -> HashMap<String, String> {
    let mut out = HashMap::new();
    let mut table: Option<String> = None;
    for line in spec.lines() {
        let code = line.split(';').next().unwrap_or("");
        let toks: Vec<&str> = code.split_whitespace().collect();
        match toks.as_slice() {
            ["table", name, "{"] | ["table", name] => table = Some(name.to_string()),
            ["default_action", action, "args", rest @ ..] => {
                if let Some(t) = &table {
                    let args: Vec<&str> = rest
                        .iter()
                        .copied()
                        .filter(|a| *a != "const" && *a != "none")
                        .collect();
                    let mut text = format!("action {action}");
                    for a in args {
                        text.push(' ');
                        text.push_str(a);
                    }
                    out.insert(t.clone(), text);
                }
            }
            ["apply", ..] | ["action", ..] | ["learner", ..] | ["selector", ..] => table = None,
            _ => {}
        }
    }
    out
}

impl Config {
    /// The executors extern policies may use.
    pub fn executors(&self) -> policy::Executors {
        policy::Executors {
            max_cores: self.max_extern_cores,
            crypto_device: self.crypto_dev.is_some(),
        }
    }
}

impl Device {
    pub fn new(config: Config) -> Arc<Device> {
        Arc::new(Device {
            state: Mutex::new(State {
                loaded: None,
                saved: None,
                runtime: Runtime::pinned(match config.cpus.len() {
                    0 | 1 => config.cpus.clone(),
                    _ => config.cpus[1..].to_vec(),
                }),
            }),
            rates: Mutex::new(Rates::default()),
            config,
        })
    }

    fn check_device(&self, id: u64) -> Result<(), Status> {
        if id != self.config.device_id {
            return Err(Status::not_found(format!(
                "unknown device id {id} (this agent serves device {})",
                self.config.device_id
            )));
        }
        Ok(())
    }

    /// Builds and binds a program (nothing running changes).
    fn prepare(&self, config: &p4::ForwardingPipelineConfig) -> Result<Prepared, Status> {
        let p4info: &P4Info = config
            .p4info
            .as_ref()
            .ok_or_else(|| invalid("ForwardingPipelineConfig.p4info is missing"))?;
        let packed = BfPipelineConfig::unpack_dpdk(&config.p4_device_config).map_err(|e| {
            invalid(format!(
                "{e} (a DPDK target takes the .spec packed in a BfPipelineConfig with the p4 \
                 name, bfrt.json and context.json; docs/dpdk.md)"
            ))
        })?;
        let spec = packed
            .spec()
            .ok_or_else(|| invalid("the .spec is not text"))?;
        let pipeline = Pipeline::build(
            &packed.p4_name,
            spec,
            &self.config.ports,
            &self.config.build,
        )
        .map_err(|e| {
            invalid(format!(
                "p4_device_config: profiles[0].binary (the .spec) does not load on DPDK {}: {e}",
                env!("P4FLEET_DPDK_VERSION")
            ))
        })?;
        let binding = bind::bind(p4info, &pipeline.info)
            .map_err(|e| invalid(format!("the P4Info does not fit the .spec's pipeline: {e}")))?;
        Ok(Prepared {
            pipeline,
            binding,
            config: config.clone(),
            p4_name: packed.p4_name.clone(),
            spec_defaults: spec_defaults(spec),
        })
    }

    /// SetForwardingPipelineConfig (the caller checked arbitration).
    pub fn set_pipeline(
        &self,
        device_id: u64,
        action: Action,
        config: Option<p4::ForwardingPipelineConfig>,
    ) -> Result<(), Status> {
        self.check_device(device_id)?;
        let mut st = self.state.lock().expect("state lock");
        let prepared = match action {
            Action::Verify | Action::VerifyAndSave | Action::VerifyAndCommit => {
                let c = config
                    .as_ref()
                    .ok_or_else(|| invalid("config is missing"))?;
                self.prepare(c)?
            }
            Action::Commit => st.saved.take().ok_or_else(|| {
                Status::failed_precondition("COMMIT without a saved config (VERIFY_AND_SAVE first)")
            })?,
            Action::ReconcileAndCommit => {
                return Err(Status::unimplemented(
                    "RECONCILE_AND_COMMIT: a DPDK SWX pipeline is rebuilt from its .spec, its \
                     tables start empty; use VERIFY_AND_COMMIT",
                ));
            }
            Action::Unspecified => return Err(invalid("action is unspecified")),
        };
        match action {
            Action::Verify => return Ok(()),
            Action::VerifyAndSave => {
                st.saved = Some(prepared);
                return Ok(());
            }
            _ => {}
        }
        // The old pipeline stops (its parked packets finish first).
        if let Some(mut old) = st.loaded.take() {
            old.pipeline.pause();
            st.runtime.drain();
            old.pipeline.stop();
        }
        st.runtime.reset();
        let Prepared {
            mut pipeline,
            binding,
            config,
            p4_name,
            spec_defaults,
        } = prepared;
        pipeline.start(self.config.rate_pps, self.config.cpus.first().copied());
        tracing::info!(pipeline = %p4_name, "pipeline running");
        let policy = pipeline.externs.iter().map(|n| policy::sync(n)).collect();
        st.loaded = Some(Loaded {
            pipeline,
            binding,
            config,
            p4_name,
            spec_defaults,
            entries: HashMap::new(),
            defaults: HashMap::new(),
            policy,
            policy_sets: 0,
        });
        *self.rates.lock().expect("rates lock") = Rates::default();
        Ok(())
    }

    /// GetForwardingPipelineConfig.
    pub fn get_pipeline(
        &self,
        device_id: u64,
        response_type: i32,
    ) -> Result<p4::ForwardingPipelineConfig, Status> {
        use p4::get_forwarding_pipeline_config_request::ResponseType as R;
        self.check_device(device_id)?;
        let st = self.state.lock().expect("state lock");
        let l = st.loaded.as_ref().ok_or_else(|| {
            Status::failed_precondition(format!(
                "device {device_id} has no forwarding pipeline config"
            ))
        })?;
        let full = &l.config;
        Ok(match R::try_from(response_type).unwrap_or(R::All) {
            R::All => full.clone(),
            R::CookieOnly => p4::ForwardingPipelineConfig {
                cookie: full.cookie,
                ..Default::default()
            },
            R::P4infoAndCookie => p4::ForwardingPipelineConfig {
                p4info: full.p4info.clone(),
                cookie: full.cookie,
                ..Default::default()
            },
            R::DeviceConfigAndCookie => p4::ForwardingPipelineConfig {
                p4_device_config: full.p4_device_config.clone(),
                cookie: full.cookie,
                ..Default::default()
            },
        })
    }

    /// Write: per-update results (`None` = applied). Updates are staged
    /// in DPDK's control API and committed once per request; a failed
    /// commit (which DPDK rolls back whole) is retried update by update
    /// under CONTINUE_ON_ERROR, so what fits is applied.
    pub fn write(&self, req: &p4::WriteRequest) -> Result<Vec<Option<UpdateError>>, Status> {
        use p4::write_request::Atomicity;
        self.check_device(req.device_id)?;
        let mut st = self.state.lock().expect("state lock");
        let l = st.loaded.as_mut().ok_or_else(|| {
            Status::failed_precondition(format!(
                "device {} has no forwarding pipeline config",
                req.device_id
            ))
        })?;
        let atomic = Atomicity::try_from(req.atomicity).unwrap_or(Atomicity::ContinueOnError)
            != Atomicity::ContinueOnError;
        let mut results: Vec<Option<UpdateError>> = vec![None; req.updates.len()];
        let mut staged: Vec<(usize, Undo)> = Vec::new();
        for (i, u) in req.updates.iter().enumerate() {
            match l.stage(u) {
                Ok(undo) => staged.push((i, undo)),
                Err(e) => results[i] = Some(e),
            }
        }
        let failed = results.iter().any(Option::is_some);
        if atomic && failed {
            l.pipeline.abort();
            for (i, undo) in staged.into_iter().rev() {
                l.undo(undo);
                results[i] = Some(uerr(
                    Code::Aborted,
                    "not applied: another update of this atomic batch failed",
                ));
            }
            return Ok(results);
        }
        if staged.is_empty() {
            return Ok(results);
        }
        if let Err(code) = l.pipeline.commit() {
            let why = format!(
                "rte_swx_ctl_pipeline_commit failed ({}); DPDK rolled the batch back",
                ffi::strerror(code)
            );
            let indices: Vec<usize> = staged.iter().map(|(i, _)| *i).collect();
            for (_, undo) in staged.into_iter().rev() {
                l.undo(undo);
            }
            if atomic {
                for i in indices {
                    results[i] = Some(uerr(Code::ResourceExhausted, why.clone()));
                }
                return Ok(results);
            }
            // One at a time: each commit applies or refuses one update.
            for i in indices {
                match l.stage(&req.updates[i]) {
                    Ok(undo) => {
                        if let Err(code) = l.pipeline.commit() {
                            l.undo(undo);
                            results[i] = Some(uerr(
                                Code::ResourceExhausted,
                                format!(
                                    "rte_swx_ctl_pipeline_commit failed: {}",
                                    ffi::strerror(code)
                                ),
                            ));
                        }
                    }
                    Err(e) => results[i] = Some(e),
                }
            }
        }
        Ok(results)
    }

    /// Read of table entries (and default entries).
    pub fn read(&self, req: &p4::ReadRequest) -> Result<Vec<p4::Entity>, Status> {
        self.check_device(req.device_id)?;
        let st = self.state.lock().expect("state lock");
        let l = st.loaded.as_ref().ok_or_else(|| {
            Status::failed_precondition(format!(
                "device {} has no forwarding pipeline config",
                req.device_id
            ))
        })?;
        let mut out = Vec::new();
        for e in &req.entities {
            match &e.entity {
                Some(p4::entity::Entity::TableEntry(te)) => l.read_table(te, &mut out)?,
                Some(other) => {
                    return Err(Status::unimplemented(format!(
                        "reading {} is not supported by the DPDK agent (table entries only)",
                        entity_name(other)
                    )));
                }
                None => return Err(invalid("entity is empty")),
            }
        }
        Ok(out)
    }

    /// The effective policy and the program's externs (ExternRuntime).
    pub fn with_loaded<T>(
        &self,
        target: Option<&xpb::Target>,
        f: impl FnOnce(&mut Loaded, &mut Runtime) -> Result<T, Status>,
    ) -> Result<T, Status> {
        let t = target.ok_or_else(|| invalid("target is required"))?;
        self.check_device(t.device_id)?;
        let mut st = self.state.lock().expect("state lock");
        let State {
            loaded, runtime, ..
        } = &mut *st;
        let l = loaded.as_mut().ok_or_else(|| {
            Status::failed_precondition(format!(
                "device {} has no forwarding pipeline config: its data plane runs once a \
                 pipeline is set",
                t.device_id
            ))
        })?;
        if !t.pipeline.is_empty() && t.pipeline != l.p4_name {
            return Err(Status::not_found(format!(
                "device {} runs pipeline {:?}, not {:?}",
                t.device_id, l.p4_name, t.pipeline
            )));
        }
        f(l, runtime)
    }

    /// SetPolicy: validated whole, then applied with the data plane paused
    /// (no packet sees a mix of old and new settings).
    pub fn set_policy(
        &self,
        target: Option<&xpb::Target>,
        desired: &[xpb::ExternPolicy],
    ) -> Result<Result<Vec<xpb::ExternPolicy>, policy::Refusal>, Status> {
        let ex = self.config.executors();
        self.with_loaded(target, |l, runtime| {
            let effective = match policy::resolve(&l.pipeline.externs, desired, ex) {
                Ok(p) => p,
                Err(r) => return Ok(Err(r)),
            };
            let mut settings = [externs::Setting::SYNC; EXTERNS.len()];
            for p in &effective {
                if let Some(i) = externs::slot_of(&p.name) {
                    settings[i] = policy::setting(p);
                }
            }
            l.pipeline.pause();
            runtime.apply(&settings);
            l.pipeline.resume();
            l.policy = effective.clone();
            l.policy_sets += 1;
            Ok(Ok(effective))
        })
    }

    /// Samples the counters into rates (every `stats_interval`).
    pub fn sample(&self) {
        let st = self.state.lock().expect("state lock");
        let Some(l) = st.loaded.as_ref() else {
            return;
        };
        let tx = l.pipeline.counters().tx_packets;
        drop(st);
        let done: [u64; EXTERNS.len()] = std::array::from_fn(|i| externs::counters(i).resumed);
        let now = Instant::now();
        let mut r = self.rates.lock().expect("rates lock");
        if let Some((t0, tx0, done0)) = r.last {
            let dt = now.duration_since(t0).as_secs_f64().max(1e-9);
            r.packets_per_second = tx.saturating_sub(tx0) as f64 / dt;
            for i in 0..EXTERNS.len() {
                r.async_ops[i] = done[i].saturating_sub(done0[i]) as f64 / dt;
            }
        }
        r.last = Some((now, tx, done));
    }

    /// GetStats.
    pub fn stats(&self, target: Option<&xpb::Target>) -> Result<xpb::GetStatsResponse, Status> {
        let rates = self.rates.lock().expect("rates lock").clone();
        self.with_loaded(target, |l, runtime| {
            let c: Counters = l.pipeline.counters();
            let externs: Vec<xpb::ExternStats> = l
                .policy
                .iter()
                .filter_map(|p| {
                    let i = externs::slot_of(&p.name)?;
                    let x = externs::counters(i);
                    Some(xpb::ExternStats {
                        name: p.name.clone(),
                        policy: Some(p.clone()),
                        sync_calls: x.sync_calls,
                        skipped: x.skipped,
                        async_submitted: x.submitted,
                        async_completed: x.resumed,
                        async_ops_per_second: rates.async_ops[i],
                        queue_depth: x.in_flight(),
                        // DPDK cannot drop from an extern: a full pool or
                        // queue keeps the packet parked (counted apart,
                        // docs/dpdk.md).
                        drops_pool_exhausted: 0,
                        drops_queue_full: 0,
                        latency_p50_ns: 0,
                        latency_p99_ns: 0,
                    })
                })
                .collect();
            let tables = l
                .binding
                .tables
                .values()
                .map(|t| {
                    let tc = c.tables.iter().find(|x| x.name == t.dpdk_name);
                    let actions = t
                        .actions
                        .iter()
                        .filter_map(|(id, a)| {
                            let di = l
                                .pipeline
                                .info
                                .actions
                                .iter()
                                .position(|x| x.name == a.dpdk_name)?;
                            let name = t
                                .schema
                                .actions
                                .iter()
                                .find(|x| x.id == *id)
                                .map(|x| x.short_name().to_string())
                                .unwrap_or_default();
                            Some(xpb::ActionStats {
                                name,
                                action_id: *id,
                                packets: tc.and_then(|tc| tc.per_action.get(di)).copied()?,
                            })
                        })
                        .collect();
                    xpb::TableStats {
                        name: t.schema.name.clone(),
                        table_id: t.schema.id,
                        entries: l.entries.get(&t.schema.id).map_or(0, |m| m.len() as u64),
                        hits: tc.map_or(0, |x| x.hits),
                        misses: tc.map_or(0, |x| x.misses),
                        actions,
                        error: String::new(),
                    }
                })
                .collect();
            Ok(xpb::GetStatsResponse {
                pipeline: Some(xpb::PipelineStats {
                    pipeline: l.p4_name.clone(),
                    running: l.pipeline.running(),
                    worker_cores: 1,
                    extern_cores: runtime.cores(),
                    rx_packets: c.rx_packets,
                    tx_packets: c.tx_packets,
                    tx_bytes: c.tx_bytes,
                    packets_per_second: rates.packets_per_second,
                    drops: Some(xpb::Drops {
                        program: c.dropped,
                        ..Default::default()
                    }),
                    latency_p50_ns: 0,
                    latency_p99_ns: 0,
                    tx_ports: c
                        .tx_per_port
                        .iter()
                        .map(|(port, packets)| xpb::PortStats {
                            port: *port,
                            packets: *packets,
                        })
                        .collect(),
                    tables,
                    policy_sets: l.policy_sets,
                }),
                externs,
            })
        })
    }

    /// Stops the data plane and frees the pipeline (process exit).
    pub fn shutdown(&self) {
        let mut st = self.state.lock().expect("state lock");
        if let Some(mut l) = st.loaded.take() {
            l.pipeline.pause();
            st.runtime.drain();
            l.pipeline.stop();
        }
        st.saved = None;
    }
}

fn entity_name(e: &p4::entity::Entity) -> &'static str {
    use p4::entity::Entity as E;
    match e {
        E::ExternEntry(_) => "extern entries",
        E::TableEntry(_) => "table entries",
        E::ActionProfileMember(_) => "action profile members",
        E::ActionProfileGroup(_) => "action profile groups",
        E::MeterEntry(_) => "meter entries",
        E::DirectMeterEntry(_) => "direct meter entries",
        E::CounterEntry(_) => "counter entries",
        E::DirectCounterEntry(_) => "direct counter entries",
        E::PacketReplicationEngineEntry(_) => "packet replication engine entries",
        E::ValueSetEntry(_) => "value set entries",
        E::RegisterEntry(_) => "register entries",
        E::DigestEntry(_) => "digest entries",
    }
}

/// How to take back one staged update from the agent's entry store.
enum Undo {
    Remove(u32, EntryKey),
    Restore(u32, Stored),
    Default(u32, Option<p4::TableEntry>),
}

fn hex_to_bytes(s: &str) -> Option<ByteStr> {
    let v: u128 = if let Some(h) = s.strip_prefix("0x") {
        u128::from_str_radix(h, 16).ok()?
    } else {
        s.parse().ok()?
    };
    Some(ByteStr::canonical(&v.to_be_bytes()))
}

impl Loaded {
    fn table(&self, id: u32) -> Result<&TableBind, UpdateError> {
        self.binding
            .tables
            .get(&id)
            .ok_or_else(|| uerr(Code::NotFound, format!("unknown table id {id}")))
    }

    fn dpdk_refused(code: i32, line: &str) -> UpdateError {
        if code == -libc::EBADMSG {
            uerr(
                Code::InvalidArgument,
                format!("DPDK's control API did not accept the entry {line:?}"),
            )
        } else {
            uerr(
                Code::InvalidArgument,
                format!(
                    "DPDK's control API refused the entry {line:?}: {}",
                    ffi::strerror(code)
                ),
            )
        }
    }

    /// Validates one update and stages it in DPDK's control API; on
    /// success the store already shows it (undo on a failed commit).
    fn stage(&mut self, u: &p4::Update) -> Result<Undo, UpdateError> {
        use p4::update::Type;
        let te = match u.entity.as_ref().and_then(|e| e.entity.as_ref()) {
            Some(p4::entity::Entity::TableEntry(te)) => te,
            Some(other) => {
                return Err(uerr(
                    Code::Unimplemented,
                    format!(
                        "{} are not supported by the DPDK agent (table entries only)",
                        entity_name(other)
                    ),
                ));
            }
            None => return Err(uerr(Code::InvalidArgument, "update without an entity")),
        };
        let ty = Type::try_from(u.r#type).unwrap_or(Type::Unspecified);
        let t = self.table(te.table_id)?.clone();
        if te.is_default_action {
            return self.stage_default(&t, te, ty);
        }
        if te.idle_timeout_ns != 0 {
            return Err(uerr(
                Code::Unimplemented,
                "idle timeouts: DPDK SWX tables have no entry ageing (learner tables do, and are \
                 not supported by the agent yet)",
            ));
        }
        let table_id = te.table_id;
        match ty {
            Type::Insert | Type::Modify => {
                let entry = Entry::from_proto(&t.schema, te)
                    .map_err(|e| uerr(Code::InvalidArgument, e.to_string()))?;
                let a = t.actions.get(&entry.action.action_id);
                if !a.is_some_and(|a| a.for_entries) {
                    return Err(uerr(
                        Code::InvalidArgument,
                        format!(
                            "action id {} is not an entry action of table {} in the .spec",
                            entry.action.action_id, t.schema.name
                        ),
                    ));
                }
                let existing = self
                    .entries
                    .get(&table_id)
                    .and_then(|m| m.get(&entry.key))
                    .cloned();
                match (ty, &existing) {
                    (Type::Insert, Some(_)) => {
                        return Err(uerr(Code::AlreadyExists, "the entry exists"));
                    }
                    (Type::Modify, None) => {
                        return Err(uerr(Code::NotFound, "no such entry to modify"));
                    }
                    _ => {}
                }
                if existing.is_none() {
                    let n = self.entries.get(&table_id).map_or(0, |m| m.len());
                    if n as u64 >= t.schema.size.max(u64::from(t.size)) {
                        return Err(uerr(
                            Code::ResourceExhausted,
                            format!("table {} is full ({n} entries)", t.schema.name),
                        ));
                    }
                }
                let line = bind::entry_text(&t, &entry)
                    .ok_or_else(|| uerr(Code::InvalidArgument, "the action does not bind"))?;
                self.pipeline
                    .table_op(&t.dpdk_name, &line, ffi::OP_ADD)
                    .map_err(|c| Self::dpdk_refused(c, &line))?;
                let key = entry.key.clone();
                self.entries.entry(table_id).or_default().insert(
                    key.clone(),
                    Stored {
                        entry,
                        metadata: te.metadata.clone(),
                    },
                );
                Ok(match existing {
                    Some(old) => Undo::Restore(table_id, old),
                    None => Undo::Remove(table_id, key),
                })
            }
            Type::Delete => {
                let key = EntryKey::from_proto(&t.schema, te)
                    .map_err(|e| uerr(Code::InvalidArgument, e.to_string()))?;
                let existing = self
                    .entries
                    .get(&table_id)
                    .and_then(|m| m.get(&key))
                    .cloned()
                    .ok_or_else(|| uerr(Code::NotFound, "no such entry to delete"))?;
                let line = bind::match_text(&t, &key);
                self.pipeline
                    .table_op(&t.dpdk_name, &line, ffi::OP_DELETE)
                    .map_err(|c| Self::dpdk_refused(c, &line))?;
                if let Some(m) = self.entries.get_mut(&table_id) {
                    m.remove(&key);
                }
                Ok(Undo::Restore(table_id, existing))
            }
            Type::Unspecified => Err(uerr(Code::InvalidArgument, "update type is unspecified")),
        }
    }

    fn stage_default(
        &mut self,
        t: &TableBind,
        te: &p4::TableEntry,
        ty: p4::update::Type,
    ) -> Result<Undo, UpdateError> {
        if ty != p4::update::Type::Modify {
            return Err(uerr(
                Code::InvalidArgument,
                "a default entry can only be modified",
            ));
        }
        if !te.r#match.is_empty() || te.priority != 0 {
            return Err(uerr(
                Code::InvalidArgument,
                "a default entry has no match and no priority",
            ));
        }
        if t.default_is_const {
            return Err(uerr(
                Code::PermissionDenied,
                format!(
                    "table {}: the .spec declares its default action const",
                    t.schema.name
                ),
            ));
        }
        let line = match te.action.as_ref().and_then(|a| a.r#type.as_ref()) {
            Some(p4::table_action::Type::Action(a)) => {
                let call = ActionCall::from_proto(a);
                let ab = t.actions.get(&call.action_id);
                if !ab.is_some_and(|a| a.for_default) {
                    return Err(uerr(
                        Code::InvalidArgument,
                        format!(
                            "action id {} cannot be the default of table {} in the .spec",
                            call.action_id, t.schema.name
                        ),
                    ));
                }
                bind::action_text(t, &call).ok_or_else(|| {
                    uerr(Code::InvalidArgument, "the action's parameters do not bind")
                })?
            }
            Some(_) => {
                return Err(uerr(
                    Code::Unimplemented,
                    "action profiles are not supported by the DPDK agent",
                ));
            }
            // No action: back to the .spec's default.
            None => self
                .spec_defaults
                .get(&t.dpdk_name)
                .cloned()
                .ok_or_else(|| {
                    uerr(
                        Code::FailedPrecondition,
                        "the .spec's default action of this table is unknown",
                    )
                })?,
        };
        self.pipeline
            .table_op(&t.dpdk_name, &line, ffi::OP_DEFAULT)
            .map_err(|c| Self::dpdk_refused(c, &line))?;
        let old = if te.action.is_some() {
            let mut stored = te.clone();
            if let Some(p4::table_action::Type::Action(a)) =
                stored.action.as_mut().and_then(|a| a.r#type.as_mut())
            {
                *a = ActionCall::from_proto(a).to_proto_action();
            }
            self.defaults.insert(t.schema.id, stored)
        } else {
            self.defaults.remove(&t.schema.id)
        };
        Ok(Undo::Default(t.schema.id, old))
    }

    fn undo(&mut self, u: Undo) {
        match u {
            Undo::Remove(t, k) => {
                if let Some(m) = self.entries.get_mut(&t) {
                    m.remove(&k);
                }
            }
            Undo::Restore(t, s) => {
                self.entries
                    .entry(t)
                    .or_default()
                    .insert(s.entry.key.clone(), s);
            }
            Undo::Default(t, old) => {
                match old {
                    Some(e) => self.defaults.insert(t, e),
                    None => self.defaults.remove(&t),
                };
            }
        }
    }

    /// The default entry of a table: the one written, or the .spec's.
    fn default_entry(&self, t: &TableBind) -> p4::TableEntry {
        if let Some(e) = self.defaults.get(&t.schema.id) {
            return e.clone();
        }
        let mut out = p4::TableEntry {
            table_id: t.schema.id,
            is_default_action: true,
            ..Default::default()
        };
        let Some(line) = self.spec_defaults.get(&t.dpdk_name) else {
            return out;
        };
        let toks: Vec<&str> = line.split_whitespace().collect();
        let Some((id, a)) = toks
            .get(1)
            .and_then(|name| t.actions.iter().find(|(_, a)| a.dpdk_name == *name))
        else {
            return out;
        };
        let params = a
            .params
            .iter()
            .filter_map(|(pid, arg)| {
                let i = toks.iter().position(|x| x == arg)?;
                Some(ActionParam {
                    param_id: *pid,
                    value: hex_to_bytes(toks.get(i + 1)?)?,
                })
            })
            .collect();
        out.action = Some(
            ActionCall {
                action_id: *id,
                params,
            }
            .to_proto(),
        );
        out
    }

    fn read_table(&self, te: &p4::TableEntry, out: &mut Vec<p4::Entity>) -> Result<(), Status> {
        let wrap = |e: p4::TableEntry| p4::Entity {
            entity: Some(p4::entity::Entity::TableEntry(e)),
        };
        let tables: Vec<&TableBind> =
            if te.table_id == 0 {
                let mut v: Vec<&TableBind> = self.binding.tables.values().collect();
                v.sort_by_key(|t| t.schema.id);
                v
            } else {
                vec![self.binding.tables.get(&te.table_id).ok_or_else(|| {
                    Status::not_found(format!("unknown table id {}", te.table_id))
                })?]
            };
        for t in tables {
            if te.is_default_action {
                out.push(wrap(self.default_entry(t)));
                continue;
            }
            let Some(m) = self.entries.get(&t.schema.id) else {
                continue;
            };
            let one = |s: &Stored| {
                let mut e = s.entry.to_proto();
                e.metadata = s.metadata.clone();
                wrap(e)
            };
            if te.r#match.is_empty() {
                let mut v: Vec<&Stored> = m.values().collect();
                v.sort_by(|a, b| a.entry.key.cmp(&b.entry.key));
                out.extend(v.into_iter().map(one));
            } else {
                let key = EntryKey::from_proto(&t.schema, te)
                    .map_err(|e| Status::invalid_argument(e.to_string()))?;
                if let Some(s) = m.get(&key) {
                    out.push(one(s));
                }
            }
        }
        Ok(())
    }
}

/// The canonical form of an action, as stored for reads.
trait ToProtoAction {
    fn to_proto_action(&self) -> p4::Action;
}

impl ToProtoAction for ActionCall {
    fn to_proto_action(&self) -> p4::Action {
        p4::Action {
            action_id: self.action_id,
            params: self
                .params
                .iter()
                .map(|p| p4::action::Param {
                    param_id: p.param_id,
                    value: p.value.to_vec(),
                })
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_defaults_as_entry_text() {
        let spec = include_str!("../../examples/l2crypt/l2crypt.spec");
        let d = spec_defaults(spec);
        assert_eq!(d["smac"], "action learn");
        assert_eq!(d["dmac"], "action broadcast");
        let d = spec_defaults("table t {\n\tdefault_action fwd args port 3 const\n}\napply {\n}\n");
        assert_eq!(d["t"], "action fwd port 3");
    }
}
