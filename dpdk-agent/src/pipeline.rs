//! One DPDK SWX pipeline: built from a `.spec` the way DPDK 22.11 does it
//! (`rte_swx_pipeline_codegen` writes C, a C compiler makes a shared
//! object, `rte_swx_pipeline_build_from_lib` loads it with the I/O ports
//! of an iospec), its control API handle, its data plane thread and its
//! counters.

use std::ffi::{CString, c_char, c_int};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::externs;
use crate::ffi;

/// Where the pipeline's packets come from and go (the iospec).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PortIn {
    /// Packets of a pcap file, looped (`loops` 0 = forever): DPDK's
    /// `source` port.
    Source { pcap: PathBuf, loops: u64 },
    /// An rte_ring the agent creates (another DPDK thread feeds it).
    Ring { name: String },
    /// An ethdev (a NIC bound to a DPDK driver, or a `--vdev`) the agent
    /// configured and started.
    Ethdev { dev: String },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PortOut {
    /// Discards (and counts) packets, optionally into a pcap file: DPDK's
    /// `sink` port. It counts what it is given as *drops* (that is what a
    /// sink does); the agent reports them as transmitted on that port.
    Sink {
        pcap: Option<PathBuf>,
    },
    Ring {
        name: String,
    },
    Ethdev {
        dev: String,
    },
}

/// The pipeline's ports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ports {
    pub ins: Vec<PortIn>,
    pub outs: Vec<PortOut>,
    /// Output ports are padded with sinks up to this count. DPDK 22.11's
    /// `tx` does not bound-check the port: a program that sends to a port
    /// the pipeline does not have (l2crypt's broadcast sends to 0xff)
    /// crashes it. 256 covers every 8-bit port number.
    pub pad_outs_to: u32,
    /// Mempool of the source ports (created by the agent).
    pub mempool: String,
    pub burst: u32,
}

impl Ports {
    /// The iospec text DPDK's `pipeline_iospec_parse` reads.
    pub fn iospec(&self) -> String {
        let mut s = String::new();
        for (i, p) in self.ins.iter().enumerate() {
            match p {
                PortIn::Source { pcap, loops } => s.push_str(&format!(
                    "port in {i} source mempool {} file {} loop {loops} packets 0\n",
                    self.mempool,
                    pcap.display()
                )),
                PortIn::Ring { name } => {
                    s.push_str(&format!("port in {i} ring {name} bsz {}\n", self.burst))
                }
                PortIn::Ethdev { dev } => s.push_str(&format!(
                    "port in {i} ethdev {dev} rxq 0 bsz {}\n",
                    self.burst
                )),
            }
        }
        let n_out = (self.outs.len() as u32).max(self.pad_outs_to) as usize;
        for i in 0..n_out {
            match self.outs.get(i) {
                Some(PortOut::Sink { pcap: Some(f) }) => {
                    s.push_str(&format!("port out {i} sink file {}\n", f.display()))
                }
                Some(PortOut::Sink { pcap: None }) | None => {
                    s.push_str(&format!("port out {i} sink file none\n"))
                }
                Some(PortOut::Ring { name }) => {
                    s.push_str(&format!("port out {i} ring {name} bsz {}\n", self.burst))
                }
                Some(PortOut::Ethdev { dev }) => s.push_str(&format!(
                    "port out {i} ethdev {dev} txq 0 bsz {}\n",
                    self.burst
                )),
            }
        }
        s
    }

    /// Whether output port `i` is a sink (its packets are counted as
    /// drops by DPDK).
    pub fn out_is_sink(&self, i: usize) -> bool {
        matches!(self.outs.get(i), None | Some(PortOut::Sink { .. }))
    }
}

/// How the agent turns a `.spec` into a pipeline.
#[derive(Debug, Clone)]
pub struct BuildConfig {
    /// Where the generated C, shared objects and iospecs go (removed once
    /// their pipeline is built).
    pub workdir: PathBuf,
    /// The C compiler (`cc`).
    pub cc: String,
    /// libdpdk's cflags (pkg-config, as at build time).
    pub cflags: String,
    /// The directory with rte_swx_pipeline_internal.h and
    /// rte_swx_pipeline_spec.h of this DPDK version.
    pub internal_include: PathBuf,
    pub numa: i32,
}

/// Why a `.spec` did not become a pipeline.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BuildError {
    #[error(
        "the .spec calls extern function(s) {names} that this agent does not implement (it has: {known})"
    )]
    UnknownExtern { names: String, known: String },
    #[error("DPDK's codegen refused the .spec at line {line}: {message} ({status})")]
    Codegen {
        line: u32,
        message: String,
        status: String,
    },
    #[error("compiling the generated pipeline failed ({command}): {stderr}")]
    Compile { command: String, stderr: String },
    #[error("rte_swx_pipeline_build_from_lib failed: {0}")]
    Build(String),
    #[error("{0}")]
    Io(String),
}

/// A table as the pipeline has it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableInfo {
    pub name: String,
    /// (match type: ffi::MATCH_*, bits, is_header) per key field.
    pub fields: Vec<(u32, u32, bool)>,
    /// Pipeline action ids the table's entries may run.
    pub entry_actions: Vec<u32>,
    /// Pipeline action ids its default may run.
    pub default_actions: Vec<u32>,
    pub default_is_const: bool,
    pub size: u32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActionInfo {
    pub name: String,
    /// (name, bits) per argument.
    pub args: Vec<(String, u32)>,
}

/// What the control side knows of a built pipeline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Info {
    pub n_ports_in: u32,
    /// Including the drop port DPDK adds as the last one.
    pub n_ports_out: u32,
    pub tables: Vec<TableInfo>,
    pub actions: Vec<ActionInfo>,
}

/// Raw handles; used from the control side under the device's lock, and
/// `p` by the data plane thread.
struct Handles {
    p: *mut ffi::Pipeline,
    ctl: *mut ffi::Ctl,
}

// SAFETY: DPDK's pipeline is run by one thread and inspected / changed
// through the control API by another (DPDK's own model: the control
// thread commits table changes by swapping the table state); the handles
// are only freed after the data plane thread has stopped.
unsafe impl Send for Handles {}
unsafe impl Sync for Handles {}

/// A built pipeline, with its data plane thread once started.
pub struct Pipeline {
    h: Handles,
    pub name: String,
    pub info: Info,
    /// Extern functions the `.spec` calls, in order of first call.
    pub externs: Vec<String>,
    pub ports: Ports,
    /// [stop, pause, paused], shared with the data plane thread.
    flags: Arc<[AtomicU32; 3]>,
    thread: Option<JoinHandle<()>>,
    pub started: Option<Instant>,
}

static BUILDS: AtomicU64 = AtomicU64::new(0);

/// The extern functions a `.spec` calls (`extern f.NAME`), in order.
pub fn spec_externs(spec: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for line in spec.lines() {
        let code = line.split(';').next().unwrap_or("");
        let code = code.split("//").next().unwrap_or("");
        let mut toks = code.split_whitespace();
        while let Some(t) = toks.next() {
            if t == "extern"
                && let Some(f) = toks.next().and_then(|n| n.strip_prefix("f."))
                && !out.iter().any(|o| o == f)
            {
                out.push(f.to_string());
            }
        }
    }
    out
}

fn c(s: &str) -> CString {
    CString::new(s).expect("no NUL in names the agent makes")
}

fn name_c(s: &str) -> CString {
    c(s)
}

fn path_c(p: &Path) -> CString {
    c(&p.display().to_string())
}

impl Pipeline {
    /// Builds a pipeline from `spec` (the externs the agent implements are
    /// registered; see shim/p4fa.c on how). Nothing runs yet.
    pub fn build(
        name: &str,
        spec: &str,
        ports: &Ports,
        cfg: &BuildConfig,
    ) -> Result<Pipeline, BuildError> {
        let externs = spec_externs(spec);
        let unknown: Vec<&str> = externs
            .iter()
            .filter(|e| externs::slot_of(e).is_none())
            .map(String::as_str)
            .collect();
        if !unknown.is_empty() {
            return Err(BuildError::UnknownExtern {
                names: unknown.join(", "),
                known: externs::EXTERNS
                    .iter()
                    .map(|(n, _)| *n)
                    .collect::<Vec<_>>()
                    .join(", "),
            });
        }
        register_externs();
        let n = BUILDS.fetch_add(1, Ordering::Relaxed);
        std::fs::create_dir_all(&cfg.workdir)
            .map_err(|e| BuildError::Io(format!("{}: {e}", cfg.workdir.display())))?;
        let base = cfg.workdir.join(format!("pipeline-{n}"));
        let spec_path = base.with_extension("spec");
        let c_path = base.with_extension("c");
        let so_path = base.with_extension("so");
        let io_path = base.with_extension("io");
        let write = |p: &Path, text: &str| {
            std::fs::write(p, text).map_err(|e| BuildError::Io(format!("{}: {e}", p.display())))
        };
        write(&spec_path, spec)?;
        write(&io_path, &ports.iospec())?;

        let t0 = Instant::now();
        let mut line = 0u32;
        let mut msg = [0u8; 512];
        // SAFETY: valid C strings and a buffer of the given length.
        let status = unsafe {
            ffi::p4fa_codegen(
                path_c(&spec_path).as_ptr(),
                path_c(&c_path).as_ptr(),
                &mut line,
                msg.as_mut_ptr().cast::<c_char>(),
                msg.len(),
            )
        };
        if status != 0 {
            // SAFETY: plain getter.
            let reg = unsafe { ffi::p4fa_externs_last_status() };
            let mut message = ffi::c_buf_to_string(&msg);
            if reg != 0 {
                message = format!(
                    "registering the agent's extern functions failed ({}); does the .spec \
                     declare struct {}?",
                    ffi::strerror(reg),
                    externs::MAILBOX_STRUCT
                );
            }
            return Err(BuildError::Codegen {
                line,
                message,
                status: ffi::strerror(status),
            });
        }

        let t_codegen = t0.elapsed();
        let mut cmd = Command::new(&cfg.cc);
        cmd.args(["-O3", "-fPIC", "-shared", "-Wno-deprecated-declarations"])
            .args(cfg.cflags.split_whitespace())
            .arg("-I")
            .arg(&cfg.internal_include)
            .arg("-o")
            .arg(&so_path)
            .arg(&c_path);
        let command = format!("{cmd:?}");
        let out = cmd.output().map_err(|e| BuildError::Compile {
            command: command.clone(),
            stderr: e.to_string(),
        })?;
        if !out.status.success() {
            let stderr = String::from_utf8_lossy(&out.stderr);
            let tail: Vec<&str> = stderr.lines().rev().take(20).collect();
            return Err(BuildError::Compile {
                command,
                stderr: tail.into_iter().rev().collect::<Vec<_>>().join("\n"),
            });
        }

        let t_cc = t0.elapsed() - t_codegen;
        let mut p: *mut ffi::Pipeline = std::ptr::null_mut();
        // SAFETY: valid C strings; `p` receives the pipeline.
        let status = unsafe {
            ffi::p4fa_build_from_lib(
                c(&format!("{name}-{n}")).as_ptr(),
                path_c(&so_path).as_ptr(),
                path_c(&io_path).as_ptr(),
                cfg.numa as c_int,
                &mut p,
            )
        };
        if status != 0 || p.is_null() {
            return Err(BuildError::Build(format!(
                "{} (ports: {})",
                ffi::strerror(status),
                io_path.display()
            )));
        }
        // SAFETY: `p` is a built pipeline.
        let ctl = unsafe { ffi::p4fa_ctl_create(p) };
        if ctl.is_null() {
            // SAFETY: not running, not shared.
            unsafe { ffi::p4fa_pipeline_free(p) };
            return Err(BuildError::Build(
                "rte_swx_ctl_pipeline_create failed".into(),
            ));
        }
        let h = Handles { p, ctl };
        // The shared object is mapped now: the files of a pipeline that
        // built go (those of one that failed stay, for diagnosis).
        for f in [&spec_path, &c_path, &so_path, &io_path] {
            let _ = std::fs::remove_file(f);
        }
        let info = read_info(h.p).map_err(BuildError::Build)?;
        tracing::info!(
            pipeline = name,
            codegen_ms = t_codegen.as_millis() as u64,
            cc_ms = t_cc.as_millis() as u64,
            build_ms = (t0.elapsed() - t_codegen - t_cc).as_millis() as u64,
            "pipeline built from its .spec"
        );
        Ok(Pipeline {
            h,
            name: name.to_string(),
            info,
            externs,
            ports: ports.clone(),
            flags: Arc::new([AtomicU32::new(0), AtomicU32::new(0), AtomicU32::new(0)]),
            thread: None,
            started: None,
        })
    }

    /// Starts the data plane thread, on `cpu` if given. `rate_pps` > 0
    /// paces the input ports.
    pub fn start(&mut self, rate_pps: u64, cpu: Option<usize>) {
        if self.thread.is_some() {
            return;
        }
        let flags = self.flags.clone();
        let p = self.h.p as usize;
        self.thread = Some(
            std::thread::Builder::new()
                .name("dataplane".into())
                .spawn(move || {
                    crate::eal::pin_or_log(cpu, "the data plane");
                    // Paced: small steps so the pacing is smooth; otherwise
                    // DPDK's pipeline example quantum.
                    let quantum = if rate_pps > 0 { 64 } else { 1000 };
                    // SAFETY: the pipeline outlives this thread (`stop`
                    // joins it before freeing), the flags are in `flags`.
                    unsafe {
                        ffi::p4fa_run(
                            p as *mut ffi::Pipeline,
                            flags[0].as_ptr(),
                            flags[1].as_ptr(),
                            flags[2].as_ptr(),
                            rate_pps,
                            quantum,
                        )
                    }
                })
                .expect("spawn the data plane thread"),
        );
        self.started = Some(Instant::now());
    }

    pub fn running(&self) -> bool {
        self.thread.is_some()
    }

    /// Pauses the data plane at its next step and waits until it idles
    /// (no extern function is being called then). No-op when not running.
    pub fn pause(&self) {
        if self.thread.is_none() {
            return;
        }
        self.flags[1].store(1, Ordering::Release);
        let start = Instant::now();
        while self.flags[2].load(Ordering::Acquire) == 0 {
            if start.elapsed() > Duration::from_secs(10) {
                tracing::error!("the data plane did not pause within 10 s");
                return;
            }
            std::thread::sleep(Duration::from_micros(50));
        }
    }

    pub fn resume(&self) {
        self.flags[2].store(0, Ordering::Release);
        self.flags[1].store(0, Ordering::Release);
    }

    /// Stops and joins the data plane thread.
    pub fn stop(&mut self) {
        if let Some(t) = self.thread.take() {
            self.flags[0].store(1, Ordering::Release);
            let _ = t.join();
        }
    }

    /// Stages one table change for the next commit (DPDK's entry text
    /// format); -EBADMSG when DPDK does not parse the line.
    pub fn table_op(&self, table: &str, line: &str, op: c_int) -> Result<(), c_int> {
        // SAFETY: live ctl, valid C strings.
        let st = unsafe { ffi::p4fa_table_op(self.h.ctl, c(table).as_ptr(), c(line).as_ptr(), op) };
        if st == 0 { Ok(()) } else { Err(st) }
    }

    /// Commits the staged changes (all or none: on failure DPDK rolls the
    /// transaction back and drops it).
    pub fn commit(&self) -> Result<(), c_int> {
        // SAFETY: live ctl.
        let st = unsafe { ffi::p4fa_commit(self.h.ctl, 1) };
        if st == 0 { Ok(()) } else { Err(st) }
    }

    /// Drops the staged changes.
    pub fn abort(&self) {
        // SAFETY: live ctl.
        unsafe { ffi::p4fa_abort(self.h.ctl) }
    }

    /// The pipeline's own counters.
    pub fn counters(&self) -> Counters {
        let p = self.h.p;
        let mut out = Counters::default();
        let c = &mut out;
        for i in 0..self.info.n_ports_in {
            let (mut pk, mut by, mut em) = (0, 0, 0);
            // SAFETY: live pipeline, port in range.
            unsafe { ffi::p4fa_port_in_stats(p, i, &mut pk, &mut by, &mut em) };
            c.rx_packets += pk;
            c.rx_bytes += by;
        }
        let drop_port = self.info.n_ports_out.saturating_sub(1);
        for i in 0..self.info.n_ports_out {
            let (mut pk, mut by, mut dpk, mut dby) = (0, 0, 0, 0);
            // SAFETY: as above.
            unsafe { ffi::p4fa_port_out_stats(p, i, &mut pk, &mut by, &mut dpk, &mut dby) };
            if i == drop_port {
                // DPDK's drop port: a sink after the configured ports.
                c.dropped += pk + dpk;
            } else if self.ports.out_is_sink(i as usize) {
                c.tx_per_port.push((i, pk + dpk));
                c.tx_bytes += by + dby;
            } else {
                c.tx_per_port.push((i, pk));
                c.tx_bytes += by;
                c.port_drops += dpk;
            }
        }
        c.tx_per_port.retain(|(_, n)| *n > 0);
        c.tx_packets = c.tx_per_port.iter().map(|(_, n)| n).sum();
        for t in &self.info.tables {
            let mut per_action = vec![0u64; self.info.actions.len()];
            let (mut hit, mut miss) = (0, 0);
            // SAFETY: live pipeline; per_action has n_actions counters.
            unsafe {
                ffi::p4fa_table_stats(
                    p,
                    name_c(&t.name).as_ptr(),
                    &mut hit,
                    &mut miss,
                    per_action.as_mut_ptr(),
                )
            };
            c.tables.push(TableCounters {
                name: t.name.clone(),
                hits: hit,
                misses: miss,
                per_action,
            });
        }
        out
    }
}

impl Drop for Pipeline {
    fn drop(&mut self) {
        self.stop();
        // SAFETY: the data plane thread is gone; nothing else holds them.
        unsafe {
            ffi::p4fa_ctl_free(self.h.ctl);
            ffi::p4fa_pipeline_free(self.h.p);
        }
    }
}

/// A pipeline's counters (since it was built).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counters {
    pub rx_packets: u64,
    pub rx_bytes: u64,
    pub tx_packets: u64,
    pub tx_bytes: u64,
    /// Sent to a port, non-zero only: (port, packets).
    pub tx_per_port: Vec<(u32, u64)>,
    /// The program's drops (DPDK's drop port).
    pub dropped: u64,
    /// Packets an output port could not send (ring / NIC queue full).
    pub port_drops: u64,
    pub tables: Vec<TableCounters>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TableCounters {
    pub name: String,
    pub hits: u64,
    pub misses: u64,
    /// Per pipeline action id.
    pub per_action: Vec<u64>,
}

/// Registers (once) the agent's extern functions for every pipeline
/// built from now on.
fn register_externs() {
    static DONE: std::sync::Once = std::sync::Once::new();
    DONE.call_once(|| {
        let field_names: Vec<CString> = externs::MAILBOX_FIELDS.iter().map(|(n, _)| c(n)).collect();
        let field_ptrs: Vec<*const c_char> = field_names.iter().map(|s| s.as_ptr()).collect();
        let bits: Vec<u32> = externs::MAILBOX_FIELDS.iter().map(|(_, b)| *b).collect();
        let names: Vec<CString> = externs::EXTERNS.iter().map(|(n, _)| c(n)).collect();
        let name_ptrs: Vec<*const c_char> = names.iter().map(|s| s.as_ptr()).collect();
        let fns = externs::functions();
        // SAFETY: arrays of the given lengths; the shim copies the strings.
        let st = unsafe {
            ffi::p4fa_externs_set(
                c(externs::MAILBOX_STRUCT).as_ptr(),
                field_ptrs.as_ptr(),
                bits.as_ptr(),
                bits.len() as u32,
                name_ptrs.as_ptr(),
                fns.as_ptr(),
                fns.len() as u32,
            )
        };
        assert_eq!(st, 0, "p4fa_externs_set");
    });
}

fn read_info(p: *mut ffi::Pipeline) -> Result<Info, String> {
    let (mut n_in, mut n_out, mut n_tables, mut n_actions) = (0, 0, 0, 0);
    // SAFETY: live pipeline; out-pointers are locals.
    let st = unsafe { ffi::p4fa_info(p, &mut n_in, &mut n_out, &mut n_tables, &mut n_actions) };
    if st != 0 {
        return Err(format!("pipeline info: {}", ffi::strerror(st)));
    }
    let mut buf = [0u8; 128];
    let mut actions = Vec::new();
    for a in 0..n_actions {
        let mut n_args = 0;
        // SAFETY: as above, buffer of the given length.
        unsafe { ffi::p4fa_action_info(p, a, buf.as_mut_ptr().cast(), buf.len(), &mut n_args) };
        let name = ffi::c_buf_to_string(&buf);
        let mut args = Vec::new();
        for i in 0..n_args {
            let mut bits = 0;
            // SAFETY: as above.
            unsafe {
                ffi::p4fa_action_arg_info(p, a, i, buf.as_mut_ptr().cast(), buf.len(), &mut bits)
            };
            args.push((ffi::c_buf_to_string(&buf), bits));
        }
        actions.push(ActionInfo { name, args });
    }
    let mut tables = Vec::new();
    for t in 0..n_tables {
        let (mut n_fields, mut n_acts, mut is_const, mut size) = (0, 0, 0, 0);
        // SAFETY: as above.
        unsafe {
            ffi::p4fa_table_info(
                p,
                t,
                buf.as_mut_ptr().cast(),
                buf.len(),
                &mut n_fields,
                &mut n_acts,
                &mut is_const,
                &mut size,
            )
        };
        let name = ffi::c_buf_to_string(&buf);
        let mut fields = Vec::new();
        for f in 0..n_fields {
            let (mut kind, mut bits, mut is_header) = (0, 0, 0);
            // SAFETY: as above.
            unsafe {
                ffi::p4fa_table_match_field_info(p, t, f, &mut kind, &mut bits, &mut is_header)
            };
            fields.push((kind, bits, is_header != 0));
        }
        let (mut entry_actions, mut default_actions) = (Vec::new(), Vec::new());
        for i in 0..n_acts {
            let (mut id, mut for_entries, mut for_default) = (0, 0, 0);
            // SAFETY: as above.
            unsafe {
                ffi::p4fa_table_action_info(p, t, i, &mut id, &mut for_entries, &mut for_default)
            };
            if for_entries != 0 {
                entry_actions.push(id);
            }
            if for_default != 0 {
                default_actions.push(id);
            }
        }
        tables.push(TableInfo {
            name,
            fields,
            entry_actions,
            default_actions,
            default_is_const: is_const != 0,
            size,
        });
    }
    Ok(Info {
        n_ports_in: n_in,
        n_ports_out: n_out,
        tables,
        actions,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn externs_of_a_spec_in_order_without_comments() {
        let spec = "apply {\n\textern f.async_encrypt\n; extern f.hidden\n\textern f.async_decrypt // x\n\
                    \textern f.async_encrypt\n}\n";
        assert_eq!(spec_externs(spec), ["async_encrypt", "async_decrypt"]);
    }

    #[test]
    fn the_iospec_pads_outputs_with_sinks() {
        let ports = Ports {
            ins: vec![PortIn::Source {
                pcap: "/tmp/x.pcap".into(),
                loops: 0,
            }],
            outs: vec![PortOut::Ring { name: "r1".into() }],
            pad_outs_to: 3,
            mempool: "MP".into(),
            burst: 32,
        };
        assert_eq!(
            ports.iospec(),
            "port in 0 source mempool MP file /tmp/x.pcap loop 0 packets 0\n\
             port out 0 ring r1 bsz 32\n\
             port out 1 sink file none\n\
             port out 2 sink file none\n"
        );
        assert!(!ports.out_is_sink(0));
        assert!(ports.out_is_sink(2));
    }
}
