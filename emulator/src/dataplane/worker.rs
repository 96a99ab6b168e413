//! The per-packet path: run-to-completion worker cores and extern cores.
//!
//! A worker loops: poll completions of its async extern calls and resume
//! those packets; poll a burst from its rx port; run each packet through
//! the compiled program until it is sent, dropped or suspended at an async
//! extern call; hand suspended packets to their executor in bursts; send
//! the tx burst. An extern core loops over the request rings of the
//! workers it serves, runs the extern on each request's mailbox and rings
//! the result back. Nothing here locks or allocates: buffers, contexts,
//! rings, bursts and wait lists are sized when the run starts.
//!
//! Every packet runs in its own descriptor slot from rx on (one slot per
//! buffer, indexed like the buffer): suspending a packet copies nothing,
//! the slot simply stays put with its program counter and its externs'
//! mailboxes (an extern sees only its mailbox, as on DPDK SWX), and
//! resuming continues there. What a suspended packet holds is a
//! context-pool reservation of its extern (the pool bounds how many may
//! be parked) and, with the Context method, a coroutine image.
//!
//! A packet whose extern cannot park it (pool or executor queue full)
//! waits in the extern's wait list and the worker takes nothing from rx
//! until the list is empty, as a DPDK SWX pipeline keeps such a packet
//! parked and asks again (an extern cannot drop on DPDK); the rx port's
//! queue then loses what does not fit (`rx_missed`). The Context method,
//! T4P4S's coroutines (which DPDK SWX does not have), keeps T4P4S's
//! behaviour instead: the packet is dropped and counted.

use std::cell::Cell;
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use rtrb::{Consumer, Producer};

use super::bind::Binding;
use super::context::ContextPool;
use super::externs::{ExternFn, Mailbox};
use super::packet::{FreeList, Generator, MbufPool, RxPacket};
use super::policy::{Executor, ExternPolicy, Mode, SuspendMethod};
use super::spec::{ActionOp, MAX_ARGS, MAX_EXTERNS, MAX_HEADERS, MAX_META, Op, Operand, Program};
use super::stats::{DropCause, PORTS, WorkerCounters};
use super::table::CompiledTable;

/// State shared by the engine and all cores, for the engine's lifetime.
pub(crate) struct Shared {
    pub program: Program,
    pub binding: Binding,
    pub tables: Vec<ArcSwap<CompiledTable>>,
    /// Bumped after any table swap; workers reload their table pointers
    /// when it moves (one relaxed load per burst).
    pub table_epoch: AtomicU64,
    pub ext_fns: Vec<ExternFn>,
    /// One block per possible worker (index = worker id).
    pub counters: Vec<WorkerCounters>,
    pub clock: Instant,
    pub capture: super::engine::Capture,
    hdr_size: Vec<u16>,
    meta_mask: Vec<u64>,
}

impl Shared {
    pub fn new(
        program: Program,
        binding: Binding,
        ext_fns: Vec<ExternFn>,
        max_workers: usize,
        capture: usize,
    ) -> Shared {
        let tables = program
            .tables
            .iter()
            .map(|t| ArcSwap::from_pointee(CompiledTable::empty(t)))
            .collect();
        let counters = (0..max_workers)
            .map(|_| {
                WorkerCounters::new(
                    program.tables.len(),
                    program.actions.len(),
                    program.externs.len(),
                )
            })
            .collect();
        let hdr_size = program.headers.iter().map(|h| h.size).collect();
        let meta_mask = program
            .meta
            .iter()
            .map(|(_, w)| if *w >= 64 { u64::MAX } else { (1u64 << w) - 1 })
            .collect();
        Shared {
            program,
            binding,
            tables,
            table_epoch: AtomicU64::new(0),
            ext_fns,
            counters,
            clock: Instant::now(),
            capture: super::engine::Capture::new(capture),
            hdr_size,
            meta_mask,
        }
    }

    #[inline]
    pub fn now_ns(&self) -> u64 {
        self.clock.elapsed().as_nanos() as u64
    }
}

/// What one run of the data plane looks like (fixed until the next
/// reconfiguration).
#[derive(Debug, Clone)]
pub(crate) struct Plan {
    pub workers: usize,
    pub rx_burst: usize,
    pub policies: Vec<ExternPolicy>,
    pub traffic: super::packet::TrafficConfig,
    pub context_bytes: usize,
    pub mbufs_per_worker: u32,
}

/// The packet descriptor: everything the program needs to continue a
/// packet. It lives in the worker's slot for the packet's buffer from rx
/// to tx, suspended or not.
///
/// The fields every packet touches come first (one cache line), then the
/// metadata slots and the externs' mailboxes (only the program's are reset
/// at rx).
#[derive(Clone, Copy)]
#[repr(C)]
pub(crate) struct Pkt {
    ptr: *mut u8,
    rx_ns: u64,
    ext_ns: u64,
    /// Context method: the coroutine image slot while suspended.
    ctx: u32,
    len: u16,
    cursor: u16,
    pc: u16,
    port_in: u16,
    valid: u8,
    hdr_off: [u16; MAX_HEADERS],
    meta: [u64; MAX_META],
    /// Per extern of the program, this packet's mailbox (DPDK SWX keeps one
    /// per pipeline thread, i.e. per packet in flight).
    mbox: [Mailbox; MAX_EXTERNS],
}

impl Default for Pkt {
    fn default() -> Self {
        Pkt {
            ptr: std::ptr::null_mut(),
            ctx: 0,
            len: 0,
            cursor: 0,
            pc: 0,
            port_in: 0,
            valid: 0,
            hdr_off: [0; MAX_HEADERS],
            meta: [0; MAX_META],
            mbox: [[0; 2]; MAX_EXTERNS],
            rx_ns: 0,
            ext_ns: 0,
        }
    }
}

/// An async call on its way to an extern core: a copy of the call's
/// mailbox (the extern core never touches the packet or its descriptor),
/// and the buffer (= descriptor slot) to resume.
#[derive(Clone, Copy)]
pub(crate) struct Req {
    mbox: Mailbox,
    mbuf: u32,
    /// Its context-pool slot (released if the call cannot be queued).
    slot: u32,
}

/// A finished call on its way back: the mailbox the extern left and the
/// buffer to resume.
#[derive(Clone, Copy)]
pub(crate) struct Comp {
    mbox: Mailbox,
    mbuf: u32,
}

enum Exit {
    Tx(u64),
    Drop(DropCause),
    Suspend(usize),
}

#[derive(Clone, Copy)]
struct TxItem {
    ptr: *mut u8,
    mbuf: u32,
    len: u16,
    port: u64,
    rx_ns: u64,
}

/// One extern's runtime in one worker.
pub(crate) struct ExtRt {
    mode: Mode,
    context: bool,
    inline_device: bool,
    burst: usize,
    queue_depth: usize,
    pool: ContextPool,
    req: Vec<Producer<Req>>,
    comp: Vec<Consumer<Comp>>,
    /// Parked calls not in a ring yet: they go `burst` at a time, and
    /// (PacketDescriptor) those a full ring does not take stay here.
    staged: Vec<Req>,
    next_core: usize,
    /// The inline crypto device's queue (buffers of submitted calls).
    device: VecDeque<u32>,
    /// Packets at this extern's call that could not be parked (pool or
    /// queue full), in arrival order; never grows past the worker's
    /// buffers (PacketDescriptor only).
    waiting: VecDeque<u32>,
    sample: Cell<u32>,
}

impl ExtRt {
    /// `mbufs`: the worker's buffers (the most packets that can wait).
    pub fn new(
        p: &ExternPolicy,
        context_bytes: usize,
        mbufs: u32,
        req: Vec<Producer<Req>>,
        comp: Vec<Consumer<Comp>>,
    ) -> ExtRt {
        let is_async = p.mode == Mode::Async;
        let context = is_async && p.suspend == Some(SuspendMethod::Context);
        let inline_device = is_async && p.executor == Some(Executor::InlineCryptoDevice);
        ExtRt {
            mode: p.mode,
            context,
            inline_device,
            burst: p.burst_size as usize,
            queue_depth: p.queue_depth as usize,
            pool: ContextPool::new(
                if is_async { p.context_pool } else { 0 },
                if context { context_bytes } else { 0 },
            ),
            req,
            comp,
            staged: Vec::with_capacity(if is_async { p.burst_size as usize } else { 0 }),
            next_core: 0,
            device: VecDeque::with_capacity(if inline_device {
                p.queue_depth as usize
            } else {
                0
            }),
            waiting: VecDeque::with_capacity(if is_async && !context {
                mbufs as usize
            } else {
                0
            }),
            sample: Cell::new(0),
        }
    }
}

/// Every this many sync calls, one is timed (two clock reads).
const SYNC_SAMPLE: u32 = 32;
/// Every this many async completions, one submit-to-resume time is
/// recorded (the timestamps are taken anyway; the histogram write is what
/// sampling saves).
const ASYNC_SAMPLE: u32 = 8;

/// How long a core busy-polls with nothing to do before it starts
/// sleeping. DPDK lcores poll forever; this keeps an idle emulator from
/// burning the machine's cores while staying a busy poller under traffic
/// (yielding instead would hand the core to other processes for whole
/// time slices on a loaded machine, while the rings fill).
const IDLE_SPIN: Duration = Duration::from_millis(2);

/// Idle-loop state of a polling core.
struct Idle {
    since: Option<Instant>,
    polls: u32,
}

impl Idle {
    fn new() -> Idle {
        Idle {
            since: None,
            polls: 0,
        }
    }

    fn reset(&mut self) {
        self.since = None;
        self.polls = 0;
    }

    /// One empty poll: spin, or sleep once idle for [`IDLE_SPIN`].
    fn wait(&mut self) {
        self.polls += 1;
        if !self.polls.is_multiple_of(256) {
            std::hint::spin_loop();
            return;
        }
        let since = *self.since.get_or_insert_with(Instant::now);
        if since.elapsed() < IDLE_SPIN {
            std::hint::spin_loop();
        } else {
            // No traffic for a while: DPDK's power-aware loops
            // (l3fwd-power) sleep too.
            std::thread::sleep(Duration::from_micros(100));
        }
    }
}

pub(crate) struct Worker {
    id: usize,
    shared: Arc<Shared>,
    pool: MbufPool,
    free: FreeList,
    generator: Generator,
    port_in: u16,
    tables: Vec<Arc<CompiledTable>>,
    epoch: u64,
    ext: Vec<ExtRt>,
    rx: Box<[RxPacket]>,
    /// One descriptor per buffer of `pool` (same index).
    descs: Box<[Pkt]>,
    tx: Vec<TxItem>,
    done: Vec<Comp>,
    stack: Box<[u8]>,
    stop: Arc<AtomicBool>,
}

// SAFETY: the raw pointers inside point into `pool` (owned) or into
// buffers whose ownership the rings transfer; a worker runs on one thread.
unsafe impl Send for Worker {}

impl Worker {
    pub fn new(
        id: usize,
        shared: Arc<Shared>,
        plan: &Plan,
        ext: Vec<ExtRt>,
        stop: Arc<AtomicBool>,
    ) -> Worker {
        let pool = MbufPool::new(plan.mbufs_per_worker, plan.traffic.max_size());
        let free = pool.free_list();
        let max_done = ext.iter().map(|e| e.burst).max().unwrap_or(0).max(1);
        Worker {
            id,
            tables: shared.tables.iter().map(|t| t.load_full()).collect(),
            epoch: u64::MAX,
            generator: Generator::new(&plan.traffic, id, plan.workers),
            port_in: id as u16,
            pool,
            free,
            ext,
            rx: vec![
                RxPacket {
                    mbuf: 0,
                    ptr: std::ptr::null_mut(),
                    len: 0,
                };
                plan.rx_burst
            ]
            .into_boxed_slice(),
            descs: vec![Pkt::default(); plan.mbufs_per_worker as usize].into_boxed_slice(),
            tx: Vec::with_capacity(plan.rx_burst * 2),
            done: Vec::with_capacity(max_done),
            stack: vec![0x5a; plan.context_bytes].into_boxed_slice(),
            stop,
            shared,
        }
    }

    fn counters(&self) -> &WorkerCounters {
        &self.shared.counters[self.id]
    }

    /// Packets parked or waiting to be.
    fn in_flight(&self) -> u32 {
        self.ext
            .iter()
            .map(|e| e.pool.in_use() + e.waiting.len() as u32)
            .sum()
    }

    /// Whether a packet waits for room at an extern (the worker then takes
    /// nothing new from rx).
    fn held(&self) -> bool {
        self.ext.iter().any(|e| !e.waiting.is_empty())
    }

    pub fn run(mut self) {
        let mut idle = Idle::new();
        // Apart from `self`, so that a packet's slot and the worker's other
        // state can be borrowed together.
        let mut descs = std::mem::take(&mut self.descs);
        loop {
            let stopping = self.stop.load(Ordering::Relaxed);
            let now = self.shared.now_ns();
            let epoch = self.shared.table_epoch.load(Ordering::Acquire);
            if epoch != self.epoch {
                for (mine, t) in self.tables.iter_mut().zip(&self.shared.tables) {
                    *mine = t.load_full();
                }
                self.epoch = epoch;
            }
            let mut work = 0;
            let mut received = 0;
            if !stopping && self.held() {
                // Backpressure: the rx queue keeps filling (and loses what
                // overflows it) while the worker cannot park more packets.
                self.generator.idle_poll(now);
                self.count_missed();
            } else if !stopping {
                let n = self
                    .generator
                    .rx_burst(&self.pool, &mut self.free, &mut self.rx, now);
                self.count_missed();
                if n > 0 {
                    self.counters().rx.add(n as u64);
                } else if self.free.available() == 0 {
                    self.counters().rx_nombuf.inc();
                }
                let n_meta = self.shared.program.meta.len();
                let n_ext = self.shared.program.externs.len();
                for i in 0..n {
                    let r = self.rx[i];
                    let p = &mut descs[r.mbuf as usize];
                    // A fresh packet: no header valid, metadata zero, at
                    // the first instruction (the rest is written before
                    // it is read).
                    p.ptr = r.ptr;
                    p.len = r.len;
                    p.cursor = 0;
                    p.pc = 0;
                    p.valid = 0;
                    p.port_in = self.port_in;
                    p.rx_ns = now;
                    // (A loop: `fill` calls memset for these few slots.)
                    for m in &mut p.meta[..n_meta] {
                        *m = 0;
                    }
                    // Zeroed, so a read before any write is deterministic
                    // (DPDK leaves the previous packet's values).
                    for m in &mut p.mbox[..n_ext] {
                        *m = [0; 2];
                    }
                    let exit = self.exec(p);
                    self.finish(r.mbuf, p, exit, now);
                }
                received = n;
                work += n;
            }
            // Submit, then take what completed (l2fwd-crypto's enqueue
            // burst, dequeue burst): the inline device completes this
            // burst's calls now; extern cores' completions arrive by the
            // next round.
            let mut polled_at = None;
            for e in 0..self.ext.len() {
                if !self.ext[e].staged.is_empty() {
                    self.flush(e);
                }
                if self.ext[e].mode == Mode::Async {
                    let at = match polled_at {
                        Some(t) => t,
                        None => *polled_at.insert(self.shared.now_ns()),
                    };
                    work += self.poll(e, at, &mut descs);
                }
            }
            // What completed made room: park the waiting packets, in order.
            for e in 0..self.ext.len() {
                while let Some(&mbuf) = self.ext[e].waiting.front() {
                    let at = match polled_at {
                        Some(t) => t,
                        None => *polled_at.insert(self.shared.now_ns()),
                    };
                    if self.park(e, mbuf, &mut descs[mbuf as usize], at).is_err() {
                        break;
                    }
                    self.ext[e].waiting.pop_front();
                    work += 1;
                }
            }
            if !self.tx.is_empty() {
                let end = self.shared.now_ns();
                self.tx_burst(end);
            }
            if work == 0 {
                if stopping && self.in_flight() == 0 {
                    break;
                }
                if self.in_flight() == 0 {
                    idle.wait();
                } else {
                    std::hint::spin_loop();
                }
            } else {
                idle.reset();
                if received < self.rx.len() && !stopping && self.in_flight() == 0 {
                    self.pace(now);
                }
            }
        }
        self.descs = descs;
    }

    #[inline]
    fn count_missed(&mut self) {
        let m = self.generator.take_missed();
        if m > 0 {
            self.counters().rx_missed.add(m);
        }
    }

    /// Under a packet rate below what the core can do, sleeps until the
    /// next full rx burst is due (at most 1 ms) instead of spinning on one
    /// packet at a time: an emulated target at a modest rate then costs
    /// its host little CPU. At line rate it never sleeps.
    fn pace(&self, now: u64) {
        const MIN_SLEEP_NS: u64 = 50_000;
        if let Some(wait) = self.generator.ns_until_due(self.rx.len() as u64, now)
            && wait >= MIN_SLEEP_NS
        {
            std::thread::sleep(Duration::from_nanos(wait.min(1_000_000)));
        }
    }

    #[inline]
    fn read(&self, p: &Pkt, o: Operand, args: &[u64; MAX_ARGS]) -> u64 {
        match o {
            Operand::Header { hdr, offset, bytes } => {
                if p.valid & (1 << hdr) == 0 {
                    return 0;
                }
                let start = p.hdr_off[hdr as usize] as usize + offset as usize;
                let mut v = 0u64;
                for i in 0..bytes as usize {
                    // SAFETY: the header was extracted within the packet.
                    v = (v << 8) | unsafe { *p.ptr.add(start + i) } as u64;
                }
                v
            }
            Operand::Meta(i) => p.meta[i as usize],
            Operand::Mailbox { ext, word } => p.mbox[ext as usize][word as usize],
            Operand::Arg(i) => args[i as usize],
            Operand::Imm(v) => v,
        }
    }

    #[inline]
    fn write(&self, p: &mut Pkt, o: Operand, v: u64) {
        match o {
            Operand::Header { hdr, offset, bytes } => {
                if p.valid & (1 << hdr) == 0 {
                    return;
                }
                let start = p.hdr_off[hdr as usize] as usize + offset as usize;
                for i in 0..bytes as usize {
                    let shift = 8 * (bytes as usize - 1 - i);
                    // SAFETY: as in `read`.
                    unsafe { *p.ptr.add(start + i) = (v >> shift) as u8 };
                }
            }
            Operand::Meta(i) => p.meta[i as usize] = v & self.shared.meta_mask[i as usize],
            Operand::Mailbox { ext, word } => p.mbox[ext as usize][word as usize] = v,
            Operand::Arg(_) | Operand::Imm(_) => {}
        }
    }

    /// Runs `p` from its program counter until it leaves the program.
    #[inline]
    fn exec(&self, p: &mut Pkt) -> Exit {
        const NO_ARGS: [u64; MAX_ARGS] = [0; MAX_ARGS];
        let prog = &self.shared.program;
        loop {
            let op = prog.ops[p.pc as usize];
            p.pc += 1;
            match op {
                Op::Rx { meta } => p.meta[meta as usize] = p.port_in as u64,
                Op::Extract { hdr } => {
                    let size = self.shared.hdr_size[hdr as usize];
                    if p.cursor + size > p.len {
                        return Exit::Drop(DropCause::Truncated);
                    }
                    p.hdr_off[hdr as usize] = p.cursor;
                    p.valid |= 1 << hdr;
                    p.cursor += size;
                }
                Op::Mov { dst, src } => {
                    let v = self.read(p, src, &NO_ARGS);
                    self.write(p, dst, v);
                }
                Op::Jmp { target } => p.pc = target,
                Op::JmpEq { target, a, b } => {
                    if self.read(p, a, &NO_ARGS) == self.read(p, b, &NO_ARGS) {
                        p.pc = target;
                    }
                }
                Op::JmpNeq { target, a, b } => {
                    if self.read(p, a, &NO_ARGS) != self.read(p, b, &NO_ARGS) {
                        p.pc = target;
                    }
                }
                Op::JmpValid { target, hdr } => {
                    if p.valid & (1 << hdr) != 0 {
                        p.pc = target;
                    }
                }
                Op::JmpInvalid { target, hdr } => {
                    if p.valid & (1 << hdr) == 0 {
                        p.pc = target;
                    }
                }
                Op::Table { table } => {
                    if self.apply_table(p, table as usize) {
                        return Exit::Drop(DropCause::Program);
                    }
                }
                Op::Extern { ext } => {
                    let e = ext as usize;
                    let x = &self.ext[e];
                    match x.mode {
                        Mode::Skip => self.counters().externs[e].skipped.inc(),
                        Mode::Sync => {
                            let mb = &mut p.mbox[e];
                            let c = &self.counters().externs[e];
                            let s = x.sample.get() + 1;
                            if s == SYNC_SAMPLE {
                                x.sample.set(0);
                                let t0 = Instant::now();
                                self.shared.ext_fns[e].call(mb);
                                c.latency.record(t0.elapsed().as_nanos() as u64);
                            } else {
                                x.sample.set(s);
                                self.shared.ext_fns[e].call(mb);
                            }
                            c.sync_calls.inc();
                        }
                        Mode::Async => return Exit::Suspend(e),
                    }
                }
                Op::Tx { meta } => return Exit::Tx(p.meta[meta as usize]),
                Op::Drop => return Exit::Drop(DropCause::Program),
            }
        }
    }

    /// Looks up table `t` and runs the action; true when it dropped.
    #[inline]
    fn apply_table(&self, p: &mut Pkt, t: usize) -> bool {
        const NO_ARGS: [u64; MAX_ARGS] = [0; MAX_ARGS];
        let def = &self.shared.program.tables[t];
        let mut key: u128 = 0;
        for k in &def.keys {
            let v = self.read(p, k.src, &NO_ARGS) as u128;
            key = if k.bits >= 128 {
                v
            } else {
                (key << k.bits) | v
            };
        }
        let (entry, hit) = self.tables[t].lookup(key);
        let c = self.counters();
        if hit {
            c.table_hit[t].inc();
            self.tables[t].count_hit(entry, p.len as u64);
        } else {
            c.table_miss[t].inc();
        }
        c.action[entry.action as usize].inc();
        let mut dropped = false;
        for aop in &self.shared.program.actions[entry.action as usize].ops {
            match *aop {
                ActionOp::Mov { dst, src } => {
                    let v = self.read(p, src, &entry.args);
                    self.write(p, dst, v);
                }
                ActionOp::Drop => dropped = true,
            }
        }
        dropped
    }

    #[inline(always)]
    fn finish(&mut self, mbuf: u32, p: &mut Pkt, exit: Exit, now: u64) {
        match exit {
            Exit::Tx(port) => {
                if self.tx.len() == self.tx.capacity() {
                    let end = self.shared.now_ns();
                    self.tx_burst(end);
                }
                self.tx.push(TxItem {
                    ptr: p.ptr,
                    mbuf,
                    len: p.len,
                    port,
                    rx_ns: p.rx_ns,
                });
            }
            Exit::Drop(cause) => {
                self.counters().drop(cause);
                self.free.release(mbuf);
            }
            Exit::Suspend(e) => self.suspend(e, mbuf, p, now),
        }
    }

    /// Suspends packet `mbuf` (its descriptor `p` stays in its slot) for an
    /// async call of extern `e`. When the extern cannot park it (context
    /// pool or executor queue full), the packet waits for room (DPDK SWX:
    /// an extern cannot drop), or with the Context method is dropped and
    /// counted (T4P4S).
    #[inline(always)]
    fn suspend(&mut self, e: usize, mbuf: u32, p: &mut Pkt, now: u64) {
        // Behind packets already waiting: they go first.
        let cause = if self.ext[e].waiting.is_empty() {
            match self.park(e, mbuf, p, now) {
                Ok(()) => return,
                Err(cause) => cause,
            }
        } else {
            DropCause::PoolExhausted
        };
        let c = &self.shared.counters[self.id];
        let x = &mut self.ext[e];
        if x.context {
            c.drop(cause);
            match cause {
                DropCause::QueueFull => c.externs[e].drop_queue.inc(),
                _ => c.externs[e].drop_pool.inc(),
            }
            self.free.release(mbuf);
        } else {
            x.waiting.push_back(mbuf);
            c.externs[e].waits.inc();
        }
    }

    /// Takes a context of extern `e` for packet `mbuf` and hands its call
    /// to the executor; the error says what was full (nothing taken then).
    #[inline(always)]
    fn park(&mut self, e: usize, mbuf: u32, p: &mut Pkt, now: u64) -> Result<(), DropCause> {
        let x = &self.ext[e];
        if x.inline_device {
            if x.device.len() == x.queue_depth {
                return Err(DropCause::QueueFull);
            }
        } else if x.staged.len() == x.burst {
            // A full ring left the burst staged; it may have room now.
            self.flush(e);
            if self.ext[e].staged.len() == self.ext[e].burst {
                return Err(DropCause::QueueFull);
            }
        }
        let c = &self.shared.counters[self.id];
        let x = &mut self.ext[e];
        let slot = x.pool.acquire().ok_or(DropCause::PoolExhausted)?;
        p.ext_ns = now;
        p.ctx = slot;
        if x.context {
            x.pool.save_context(slot, &self.stack);
        }
        if x.inline_device {
            x.device.push_back(mbuf);
            c.externs[e].submitted.inc();
            return Ok(());
        }
        x.staged.push(Req {
            mbox: p.mbox[e],
            mbuf,
            slot,
        });
        if x.staged.len() == x.burst {
            self.flush(e);
        }
        Ok(())
    }

    /// Hands extern `e`'s staged calls to its next core in one burst.
    /// Those that do not fit stay staged (they keep their contexts and go
    /// with the next flush), or with the Context method are dropped
    /// (queue full, as T4P4S).
    fn flush(&mut self, e: usize) {
        let c = &self.shared.counters[self.id];
        let x = &mut self.ext[e];
        let core = x.next_core;
        x.next_core = (core + 1) % x.req.len();
        let ring = &mut x.req[core];
        let n = ring.slots().min(x.staged.len());
        if n > 0 {
            let chunk = ring
                .write_chunk_uninit(n)
                .expect("n is at most the free slots");
            chunk.fill_from_iter(x.staged[..n].iter().copied());
            c.externs[e].submitted.add(n as u64);
        }
        if !x.context {
            x.staged.drain(..n);
            return;
        }
        for r in &x.staged[n..] {
            x.pool.release(r.slot);
            c.drop(DropCause::QueueFull);
            c.externs[e].drop_queue.inc();
            self.free.release(r.mbuf);
        }
        x.staged.clear();
    }

    /// Resumes extern `e`'s completed calls (at most one burst per core).
    fn poll(&mut self, e: usize, now: u64, descs: &mut [Pkt]) -> usize {
        let mut work = 0;
        if self.ext[e].inline_device {
            // The emulated device completes what it holds, in a burst, on
            // this core (a software crypto PMD's dequeue).
            let shared = self.shared.clone();
            let f = &shared.ext_fns[e];
            let x = &mut self.ext[e];
            let n = x.device.len().min(x.burst);
            if n == 0 {
                return 0;
            }
            self.completed(e, n);
            for _ in 0..n {
                let mbuf = self.ext[e].device.pop_front().expect("n <= len");
                f.call(&mut descs[mbuf as usize].mbox[e]);
                self.resume(e, mbuf, now, descs);
            }
            return n;
        }
        for core in 0..self.ext[e].comp.len() {
            self.done.clear();
            let x = &mut self.ext[e];
            let ring = &mut x.comp[core];
            let n = ring.slots().min(x.burst);
            if n == 0 {
                continue;
            }
            let chunk = ring.read_chunk(n).expect("n is at most the filled slots");
            let (a, b) = chunk.as_slices();
            self.done.extend_from_slice(a);
            self.done.extend_from_slice(b);
            chunk.commit_all();
            self.completed(e, n);
            for i in 0..n {
                let Comp { mbox, mbuf } = self.done[i];
                descs[mbuf as usize].mbox[e] = mbox;
                self.resume(e, mbuf, now, descs);
            }
            work += n;
        }
        work
    }

    #[inline]
    fn completed(&self, e: usize, n: usize) {
        self.counters().externs[e].completed.add(n as u64);
    }

    /// Continues packet `mbuf` after its async call of extern `e`, at the
    /// program counter its slot kept.
    #[inline(always)]
    fn resume(&mut self, e: usize, mbuf: u32, now: u64, descs: &mut [Pkt]) {
        let p = &mut descs[mbuf as usize];
        let x = &mut self.ext[e];
        if x.context {
            x.pool.restore_context(p.ctx, &mut self.stack);
        }
        x.pool.release(p.ctx);
        let s = x.sample.get();
        if s == 0 {
            x.sample.set(ASYNC_SAMPLE - 1);
            self.shared.counters[self.id].externs[e]
                .latency
                .record(now.saturating_sub(p.ext_ns));
        } else {
            x.sample.set(s - 1);
        }
        let exit = self.exec(p);
        self.finish(mbuf, p, exit, now);
    }

    /// Sends the tx burst: counts per port, records rx-to-tx latency,
    /// returns the buffers.
    fn tx_burst(&mut self, end: u64) {
        let c = &self.shared.counters[self.id];
        let capture = &self.shared.capture;
        let mut sent = 0u64;
        let mut bytes = 0u64;
        for t in &self.tx {
            if t.port < PORTS as u64 {
                c.tx_port[t.port as usize].inc();
                c.latency.record(end.saturating_sub(t.rx_ns));
                sent += 1;
                bytes += t.len as u64;
                if capture.wants() {
                    // SAFETY: the worker owns the buffer until it is freed below.
                    capture.push(t.port as u32, unsafe {
                        std::slice::from_raw_parts(t.ptr, t.len as usize)
                    });
                }
            } else {
                c.drop(DropCause::BadPort);
            }
            self.free.release(t.mbuf);
        }
        c.tx.add(sent);
        c.tx_bytes.add(bytes);
        self.tx.clear();
    }
}

/// A request ring and its completion ring, seen from an extern core.
pub(crate) struct CorePort {
    pub ext: usize,
    pub burst: usize,
    pub req: Consumer<Req>,
    pub comp: Producer<Comp>,
}

/// A core dedicated to extern calls.
pub(crate) struct ExternCore {
    pub shared: Arc<Shared>,
    pub ports: Vec<CorePort>,
    pub stop: Arc<AtomicBool>,
}

impl ExternCore {
    pub fn run(mut self) {
        let mut idle = Idle::new();
        loop {
            let mut work = 0;
            for port in &mut self.ports {
                let n = port.req.slots().min(port.comp.slots()).min(port.burst);
                if n == 0 {
                    continue;
                }
                let f = &self.shared.ext_fns[port.ext];
                let chunk = port.req.read_chunk(n).expect("n <= filled slots");
                let (a, b) = chunk.as_slices();
                let out = port.comp.write_chunk_uninit(n).expect("n <= free slots");
                out.fill_from_iter(a.iter().chain(b).map(|r| {
                    let mut mbox = r.mbox;
                    f.call(&mut mbox);
                    Comp { mbox, mbuf: r.mbuf }
                }));
                chunk.commit_all();
                work += n;
            }
            if work == 0 {
                if self.stop.load(Ordering::Relaxed) {
                    break;
                }
                idle.wait();
            } else {
                idle.reset();
            }
        }
    }
}
