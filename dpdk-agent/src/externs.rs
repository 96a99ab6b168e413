//! The extern functions the agent registers in every pipeline it builds,
//! and how they run: Sync (inline, on the pipeline's core), Skip (not
//! called: done at once) and Async on dedicated extern cores, through
//! DPDK SWX's own asynchronous extern protocol.
//!
//! **What an extern sees on DPDK.** A SWX extern function gets one
//! argument, its *mailbox*: a struct of fields of at most 64 bits that the
//! program moves values into and out of (`mov f.async_encrypt.w0
//! h.payload.w0`). It never sees the packet. The agent's mailbox
//! ([`MAILBOX_STRUCT`]) holds one AES block as two 64-bit words `w0`, `w1`
//! (the block's bytes in network order, as `mov` from a header leaves them
//! numerically) and the call's state. The crypto externs encrypt or decrypt
//! that block (AES-128-CBC, one block: AES of the block XOR the IV, with
//! the emulator's key and IV); a program that moves nothing into the
//! mailbox encrypts whatever its pipeline thread's mailbox held (zeros at
//! first, then the previous packet's result: DPDK keeps a thread's
//! mailbox between packets, where the emulator zeroes it per packet) and
//! changes no byte of the packet (examples/l2crypt/l2crypt.spec; the
//! variant l2crypt_mailbox.spec moves the first 16 payload bytes in and
//! out).
//!
//! **Async.** An extern that returns 0 parks its packet: the pipeline
//! switches to another of its 16 internal threads and calls the extern
//! again, with the same mailbox, when it comes back to that thread. So
//! the first call of an Async extern copies the mailbox's block into a
//! [`Lane`] to an extern core and returns 0; the extern core runs the work
//! into the lane's result slot and publishes how far it got; the next call
//! that finds its request done copies the result back into the mailbox,
//! returns 1 and the packet goes on. At most 16 packets are parked per
//! pipeline (`RTE_SWX_PIPELINE_THREADS_MAX`) and packets can leave out of
//! order.
//!
//! **Why lanes, not mailbox pointers.** The mailbox is the pipeline core's
//! memory. An extern core that writes into it (the result, a done mark)
//! pulls its cache line over to itself, and the pipeline core pulls it
//! back for every packet: two line transfers per packet, ~150 ns on this
//! VM, which made Async 2.7 times slower than Sync for an empty extern.
//! A lane keeps every line one-way per burst: requests and results are
//! packed four to a line, and the only shared words are two counters
//! (published, completed), each written by one side once per burst. The
//! empty extern copies no block at all.
//!
//! The extern functions run on the pipeline's core only (one data plane
//! thread per pipeline); the per-extern counters they bump are written by
//! that thread alone (load + store, no locked instruction).

use std::cell::UnsafeCell;
use std::ffi::{c_int, c_void};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use aes::cipher::{BlockDecrypt, BlockEncrypt, KeyInit};
use aes::{Aes128Dec, Aes128Enc};

use crate::ffi::ExternFn;

/// The mailbox struct type the agent registers (do not declare it in a
/// `.spec`: DPDK refuses a struct type registered twice).
pub const MAILBOX_STRUCT: &str = "p4fleet_extern_mailbox_t";
/// Its fields (name, bits). `p4fleet_state` is the agent's; a program
/// must not write it.
pub const MAILBOX_FIELDS: [(&str, u32); 3] = [("w0", 64), ("w1", 64), ("p4fleet_state", 64)];

const IDLE: u64 = 0;
/// The result is in the mailbox (shim/p4fa.c writes it too).
const DONE: u64 = 2;
/// Queued on the crypto device.
const SUBMITTED_CDEV: u64 = 3;

/// The mailbox as DPDK lays it out (fields in order, bytes packed).
#[repr(C)]
struct Mailbox {
    w0: u64,
    w1: u64,
    state: AtomicU64,
}

/// What an extern does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Encrypt,
    Decrypt,
    Empty,
}

impl Kind {
    /// As ExternRuntime reports it (the emulator's names).
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Encrypt => "aes128-cbc-encrypt",
            Kind::Decrypt => "aes128-cbc-decrypt",
            Kind::Empty => "empty",
        }
    }
}

/// The extern functions the agent implements, by the name a `.spec` calls
/// them (`extern f.NAME`), as the emulator names them. Each name is its
/// own registered function with its own state and counters.
pub const EXTERNS: [(&str, Kind); 6] = [
    ("async_encrypt", Kind::Encrypt),
    ("async_decrypt", Kind::Decrypt),
    ("empty", Kind::Empty),
    ("encrypt", Kind::Encrypt),
    ("decrypt", Kind::Decrypt),
    ("async_empty", Kind::Empty),
];

/// The slot of an extern name.
pub fn slot_of(name: &str) -> Option<usize> {
    EXTERNS.iter().position(|(n, _)| *n == name)
}

/// Key and IV of the crypto externs (the emulator's defaults, so both
/// targets encrypt the same block the same way).
pub const KEY: [u8; 16] = *b"p4fleet-l2crypt!";
pub const IV: [u8; 16] = *b"t4p4s-async-ext!";

struct Ciphers {
    enc: Aes128Enc,
    dec: Aes128Dec,
}

static CIPHERS: std::sync::LazyLock<Ciphers> = std::sync::LazyLock::new(|| Ciphers {
    enc: Aes128Enc::new(&KEY.into()),
    dec: Aes128Dec::new(&KEY.into()),
});

/// Runs `kind` over one mailbox block (in place).
#[inline]
fn work(kind: Kind, w0: &mut u64, w1: &mut u64) {
    let c = &*CIPHERS;
    let mut block = [0u8; 16];
    block[..8].copy_from_slice(&w0.to_be_bytes());
    block[8..].copy_from_slice(&w1.to_be_bytes());
    match kind {
        Kind::Encrypt => {
            for (b, iv) in block.iter_mut().zip(IV) {
                *b ^= iv;
            }
            c.enc.encrypt_block((&mut block).into());
        }
        Kind::Decrypt => {
            c.dec.decrypt_block((&mut block).into());
            for (b, iv) in block.iter_mut().zip(IV) {
                *b ^= iv;
            }
        }
        Kind::Empty => {
            std::hint::black_box(&mut block);
            return;
        }
    }
    *w0 = u64::from_be_bytes(block[..8].try_into().expect("8 bytes"));
    *w1 = u64::from_be_bytes(block[8..].try_into().expect("8 bytes"));
}

/// One block through `kind` (tests, docs): the 16 bytes in wire order.
pub fn apply(kind: Kind, block: &mut [u8; 16]) {
    let mut w0 = u64::from_be_bytes(block[..8].try_into().expect("8 bytes"));
    let mut w1 = u64::from_be_bytes(block[8..].try_into().expect("8 bytes"));
    work(kind, &mut w0, &mut w1);
    block[..8].copy_from_slice(&w0.to_be_bytes());
    block[8..].copy_from_slice(&w1.to_be_bytes());
}

pub const MODE_SYNC: u8 = 0;
/// Async on dedicated extern cores.
pub const MODE_ASYNC: u8 = 1;
pub const MODE_SKIP: u8 = 2;
/// Async on the crypto device, polled from the pipeline's thread.
pub const MODE_INLINE: u8 = 3;

/// Requests one lane holds (a power of two). The pipeline parks at most
/// 16 packets, so more is never used; a larger `queue_depth` is accepted
/// and reported as asked.
const LANE_SLOTS: usize = 64;

/// A value on a 128-byte block of its own (no false sharing between the
/// pipeline's and the extern core's words). Not 64: x86 cores prefetch
/// the neighbouring line of a pair, so two words on the two lines of one
/// 128-byte pair still bounce between the cores (as crossbeam's
/// CachePadded has it).
#[repr(align(128))]
struct Padded<T>(T);

/// The pipeline thread's side of a lane (only that thread touches it).
struct LaneProducer {
    /// Sequence number of the next request.
    next: u64,
    /// Requests below this are visible to the extern core.
    published: u64,
    /// Last `completed` read (re-read only when a request needs more).
    completed_seen: u64,
    /// Result slots held by a parked packet (bit `seq % LANE_SLOTS`).
    claimed: u64,
    /// The mailbox of each claimed slot: a policy change settles them
    /// (`Lane::settle`) before it replaces the lanes.
    owners: [*mut Mailbox; LANE_SLOTS],
}

impl Default for LaneProducer {
    fn default() -> Self {
        LaneProducer {
            next: 0,
            published: 0,
            completed_seen: 0,
            claimed: 0,
            owners: [std::ptr::null_mut(); LANE_SLOTS],
        }
    }
}

/// One extern's requests to one extern core: a single-producer
/// (pipeline thread) single-consumer (extern core) ring of blocks, with
/// the results in a parallel ring. Request `seq` lives in slot
/// `seq % LANE_SLOTS` of both.
struct Lane {
    /// Written by the pipeline thread once per burst.
    published: Padded<AtomicU64>,
    /// Written by the extern core once per burst: results below it are
    /// in `results`.
    completed: Padded<AtomicU64>,
    /// Requests in flight at most (`queue_depth`, at most [`LANE_SLOTS`]).
    capacity: u64,
    requests: [UnsafeCell<[u64; 2]>; LANE_SLOTS],
    results: [UnsafeCell<[u64; 2]>; LANE_SLOTS],
    producer: Padded<UnsafeCell<LaneProducer>>,
}

// SAFETY: `requests[i]` is written by the pipeline thread before it
// publishes `i` (release) and read by the extern core after it sees it
// (acquire), and not written again until the extern core has completed it
// (the producer's capacity check); `results[i]` is written by the extern
// core before it publishes completion (release) and read by the pipeline
// thread after it sees it (acquire), and not written again until the
// parked packet has read it and released its claim. `producer` is the
// pipeline thread's alone (or the control side's while that thread is
// paused or stopped), and so are the mailboxes it points at.
unsafe impl Sync for Lane {}
// SAFETY: as above (the raw mailbox pointers are only dereferenced by the
// pipeline thread or the control side while that thread is paused).
unsafe impl Send for Lane {}

impl Lane {
    fn new(queue_depth: u32) -> Lane {
        Lane {
            published: Padded(AtomicU64::new(0)),
            completed: Padded(AtomicU64::new(0)),
            capacity: u64::from(queue_depth).clamp(1, LANE_SLOTS as u64),
            requests: std::array::from_fn(|_| UnsafeCell::new([0; 2])),
            results: std::array::from_fn(|_| UnsafeCell::new([0; 2])),
            producer: Padded(UnsafeCell::new(LaneProducer::default())),
        }
    }

    /// Makes every request so far visible to the extern core.
    ///
    /// # Safety
    /// The pipeline's thread, or the control side while it is paused or
    /// stopped (the owner of `producer`).
    unsafe fn publish(&self) {
        // SAFETY: see the function's contract.
        let p = unsafe { &mut *self.producer.0.get() };
        if p.published != p.next {
            p.published = p.next;
            self.published.0.store(p.next, Ordering::Release);
        }
    }

    /// Hands every parked packet its result in its own mailbox, marked
    /// done, so that the packet resumes after the lanes are replaced.
    ///
    /// # Safety
    /// The control side, with the pipeline's thread paused or stopped and
    /// every published request completed (`Runtime::drain`).
    unsafe fn settle(&self, kind: Kind) {
        // SAFETY: see the function's contract.
        let p = unsafe { &mut *self.producer.0.get() };
        for i in 0..LANE_SLOTS {
            if p.claimed & (1 << i) == 0 {
                continue;
            }
            let mb = p.owners[i];
            // SAFETY: a claimed slot's mailbox belongs to a parked packet
            // of the paused pipeline; its request is completed.
            unsafe {
                if kind != Kind::Empty {
                    let [w0, w1] = *self.results[i].get();
                    (*mb).w0 = w0;
                    (*mb).w1 = w1;
                }
                (*mb).state.store(DONE, Ordering::Release);
            }
        }
        p.claimed = 0;
    }
}

/// Most requests published at once (a quarter of DPDK's 16 pipeline
/// threads).
const PUBLISH_MAX: u32 = 4;

/// An extern core's view of one lane: the extern's slot, its burst, the
/// lane.
type CoreLane = Padded<(usize, u32, Arc<Lane>)>;

/// A mailbox state that names a lane request: `LANE_TAG`, the lane's index
/// in its extern's lanes (12 bits) and the request's sequence number.
const LANE_TAG: u64 = 4;

fn lane_state(lane: usize, seq: u64) -> u64 {
    LANE_TAG | (lane as u64) << 4 | seq << 16
}

/// One extern's state. The counters are written by the pipeline's thread
/// only (`bump`), except `executed` (extern cores, on a line of its own).
struct Slot {
    mode: AtomicU8,
    /// Most calls in flight (submitted, not resumed).
    pool: AtomicU32,
    /// Requests published to an extern core at once; operations handed
    /// to the crypto device at once.
    burst: AtomicU32,
    sync_calls: AtomicU64,
    skipped: AtomicU64,
    submitted: AtomicU64,
    /// Of those, handed to extern cores (the rest went to the crypto
    /// device).
    to_cores: AtomicU64,
    /// Calls that found the mailbox done (the packet resumed).
    resumed: AtomicU64,
    /// Calls that found their request still running (the thread yielded
    /// again).
    polls: AtomicU64,
    /// Async calls that waited because the pool or the lane was full
    /// (DPDK has no way to drop from an extern: the packet stays parked
    /// and asks again).
    waits: AtomicU64,
    /// Requests the extern cores finished.
    executed: Padded<AtomicU64>,
    /// The lanes to this extern's cores; used by the pipeline's thread,
    /// replaced only while it is paused or stopped.
    lanes: UnsafeCell<Vec<Arc<Lane>>>,
    /// The lane the next request goes to (round robin).
    next: UnsafeCell<usize>,
}

// SAFETY: `lanes` and `next` are used by the one pipeline thread, and
// replaced by the control side only while that thread is paused or gone
// (with the pause flag's release/acquire ordering between them).
unsafe impl Sync for Slot {}

impl Slot {
    const fn new() -> Slot {
        Slot {
            mode: AtomicU8::new(MODE_SYNC),
            pool: AtomicU32::new(u32::MAX),
            burst: AtomicU32::new(1),
            sync_calls: AtomicU64::new(0),
            skipped: AtomicU64::new(0),
            submitted: AtomicU64::new(0),
            to_cores: AtomicU64::new(0),
            resumed: AtomicU64::new(0),
            polls: AtomicU64::new(0),
            waits: AtomicU64::new(0),
            executed: Padded(AtomicU64::new(0)),
            lanes: UnsafeCell::new(Vec::new()),
            next: UnsafeCell::new(0),
        }
    }
}

static SLOTS: [Slot; EXTERNS.len()] = [const { Slot::new() }; EXTERNS.len()];

#[inline]
fn bump(c: &AtomicU64) {
    c.store(c.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
}

/// Publishes every lane's requests of a slot.
///
/// # Safety
/// Called by the control side while the pipeline's thread is paused or
/// stopped (the ownership of `Slot::lanes`).
unsafe fn flush(slot: &Slot) {
    // SAFETY: see the function's contract.
    for lane in unsafe { &*slot.lanes.get() } {
        // SAFETY: as above.
        unsafe { lane.publish() };
    }
}

/// A parked packet's call on a lane request: done (result copied back,
/// returns true) or not yet.
///
/// # Safety
/// The pipeline's thread; `mb` is the mailbox whose state names `lane`'s
/// request `seq`.
#[inline]
unsafe fn resume(kind: Kind, lane: &Lane, seq: u64, mb: *mut Mailbox) -> bool {
    // SAFETY: the pipeline thread owns the producer side (contract).
    let p = unsafe { &mut *lane.producer.0.get() };
    if seq >= p.published {
        // Back at a parked packet whose request is still unpublished: the
        // burst did not fill; send what there is.
        // SAFETY: as above.
        unsafe { lane.publish() };
    }
    if seq >= p.completed_seen {
        p.completed_seen = lane.completed.0.load(Ordering::Acquire);
        if seq >= p.completed_seen {
            return false;
        }
    }
    let i = seq as usize % LANE_SLOTS;
    if kind != Kind::Empty {
        // SAFETY: completed (acquire above): the extern core is done with
        // this result slot, and it is this packet's claim.
        unsafe {
            let [w0, w1] = *lane.results[i].get();
            (*mb).w0 = w0;
            (*mb).w1 = w1;
        }
    }
    p.claimed &= !(1 << i);
    true
}

/// Hands a call to one of the slot's lanes; false when it cannot take
/// it now (the packet asks again).
///
/// # Safety
/// The pipeline's thread; `mb` is the call's mailbox.
#[inline]
unsafe fn submit(slot: &Slot, kind: Kind, lanes: &[Arc<Lane>], mb: *mut Mailbox) -> bool {
    // SAFETY: the pipeline thread owns `next` (contract).
    let next = unsafe { &mut *slot.next.get() };
    let l = *next % lanes.len();
    let lane = &lanes[l];
    // SAFETY: as above, and the producer side.
    let p = unsafe { &mut *lane.producer.0.get() };
    if p.next - p.completed_seen >= lane.capacity {
        p.completed_seen = lane.completed.0.load(Ordering::Acquire);
        if p.next - p.completed_seen >= lane.capacity {
            return false;
        }
    }
    let seq = p.next;
    let i = seq as usize % LANE_SLOTS;
    if p.claimed & (1 << i) != 0 {
        // A parked packet has not picked its result up from this slot yet.
        return false;
    }
    if kind != Kind::Empty {
        // SAFETY: the slot is free (capacity and claim checked); the
        // extern core reads it only after `publish`.
        unsafe { *lane.requests[i].get() = [(*mb).w0, (*mb).w1] };
    }
    p.claimed |= 1 << i;
    p.owners[i] = mb;
    p.next = seq + 1;
    // SAFETY: the mailbox is this thread's.
    unsafe { (*mb).state.store(lane_state(l, seq), Ordering::Relaxed) };
    *next = l + 1;
    // A few parked packets at a time at most: the extern core works
    // through one group while the pipeline fills the next (a whole round
    // of 16 ran the two cores in lock step, docs/dpdk.md).
    let burst = slot.burst.load(Ordering::Relaxed).min(PUBLISH_MAX);
    if p.next - p.published >= u64::from(burst) {
        // SAFETY: the pipeline thread.
        unsafe { lane.publish() };
    }
    true
}

/// The extern function of slot `I` (what DPDK calls).
///
/// # Safety
/// `mailbox` is this extern's mailbox of a live pipeline thread, laid out
/// as [`MAILBOX_FIELDS`]; called only from the pipeline's thread.
unsafe extern "C" fn call<const I: usize>(mailbox: *mut c_void) -> c_int {
    let slot = &SLOTS[I];
    let kind = EXTERNS[I].1;
    let mb = mailbox.cast::<Mailbox>();
    // SAFETY: see the function's contract. The state is written by this
    // thread, and by the crypto device's completion (shim/p4fa.c), which
    // also runs on this thread (`p4fa_cdev_poll`).
    let state = unsafe { &(*mb).state };
    match state.load(Ordering::Acquire) {
        IDLE => {}
        DONE => {
            state.store(IDLE, Ordering::Relaxed);
            bump(&slot.resumed);
            return 1;
        }
        SUBMITTED_CDEV => {
            // The crypto device is polled by the packet's own core: here.
            // SAFETY: the device's queue pair is used by this thread only.
            unsafe { crate::ffi::p4fa_cdev_poll() };
            if state.load(Ordering::Acquire) == DONE {
                state.store(IDLE, Ordering::Relaxed);
                bump(&slot.resumed);
                return 1;
            }
            bump(&slot.polls);
            return 0;
        }
        st => {
            debug_assert_eq!(st & 0xf, LANE_TAG);
            // SAFETY: the pipeline's thread (the function's contract); the
            // lanes are not replaced while a packet is parked on them
            // (`Runtime::apply` drains first).
            let lanes = unsafe { &*slot.lanes.get() };
            let lane = &lanes[((st >> 4) & 0xfff) as usize];
            // SAFETY: the state names this lane's request.
            if unsafe { resume(kind, lane, st >> 16, mb) } {
                state.store(IDLE, Ordering::Relaxed);
                bump(&slot.resumed);
                return 1;
            }
            bump(&slot.polls);
            return 0;
        }
    }
    match slot.mode.load(Ordering::Relaxed) {
        MODE_SKIP => {
            bump(&slot.skipped);
            1
        }
        MODE_INLINE if kind != Kind::Empty => {
            let in_flight =
                slot.submitted.load(Ordering::Relaxed) - slot.resumed.load(Ordering::Relaxed);
            if in_flight >= u64::from(slot.pool.load(Ordering::Relaxed)) {
                bump(&slot.waits);
                return 0;
            }
            state.store(SUBMITTED_CDEV, Ordering::Relaxed);
            // SAFETY: the mailbox stays valid until the device is done
            // (`Runtime::drain`); this thread alone uses the device.
            let st = unsafe {
                crate::ffi::p4fa_cdev_submit(
                    mailbox,
                    c_int::from(kind == Kind::Decrypt),
                    slot.burst.load(Ordering::Relaxed),
                )
            };
            if st != 0 {
                state.store(IDLE, Ordering::Relaxed);
                bump(&slot.waits);
                return 0;
            }
            bump(&slot.submitted);
            0
        }
        MODE_ASYNC => {
            let in_flight =
                slot.submitted.load(Ordering::Relaxed) - slot.resumed.load(Ordering::Relaxed);
            if in_flight >= u64::from(slot.pool.load(Ordering::Relaxed)) {
                bump(&slot.waits);
                return 0;
            }
            // SAFETY: only this thread uses them (see `Slot`).
            let lanes = unsafe { &*slot.lanes.get() };
            if lanes.is_empty() {
                // No extern core (cannot happen with a valid policy): run it.
                unsafe { work(kind, &mut (*mb).w0, &mut (*mb).w1) };
                bump(&slot.sync_calls);
                return 1;
            }
            // A full lane keeps the packet parked: it asks again (DPDK
            // cannot drop from an extern).
            // SAFETY: this thread, this call's mailbox.
            if !unsafe { submit(slot, kind, lanes, mb) } {
                bump(&slot.waits);
                return 0;
            }
            bump(&slot.submitted);
            bump(&slot.to_cores);
            0
        }
        _ => {
            // SAFETY: the mailbox is this thread's (contract).
            unsafe { work(kind, &mut (*mb).w0, &mut (*mb).w1) };
            bump(&slot.sync_calls);
            1
        }
    }
}

/// The C function of each slot, in [`EXTERNS`] order.
pub fn functions() -> [ExternFn; EXTERNS.len()] {
    [
        call::<0>, call::<1>, call::<2>, call::<3>, call::<4>, call::<5>,
    ]
}

/// One extern's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    pub sync_calls: u64,
    pub skipped: u64,
    pub submitted: u64,
    pub resumed: u64,
    pub polls: u64,
    pub waits: u64,
    pub executed: u64,
}

impl Counters {
    /// Submitted and not resumed yet.
    pub fn in_flight(&self) -> u64 {
        self.submitted.saturating_sub(self.resumed)
    }
}

pub fn counters(slot: usize) -> Counters {
    let s = &SLOTS[slot];
    let r = |c: &AtomicU64| c.load(Ordering::Relaxed);
    Counters {
        sync_calls: r(&s.sync_calls),
        skipped: r(&s.skipped),
        submitted: r(&s.submitted),
        resumed: r(&s.resumed),
        polls: r(&s.polls),
        waits: r(&s.waits),
        executed: r(&s.executed.0),
    }
}

/// How one extern runs, as the runtime applies it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Setting {
    pub mode: u8,
    /// Extern cores (Async).
    pub cores: u32,
    /// Requests an extern core takes from a ring at once; operations
    /// handed to the crypto device at once.
    pub burst: u32,
    /// Most calls in flight.
    pub pool: u32,
    /// Capacity of each ring.
    pub queue_depth: u32,
}

impl Setting {
    pub const SYNC: Setting = Setting {
        mode: MODE_SYNC,
        cores: 0,
        burst: 1,
        pool: u32::MAX,
        queue_depth: 1,
    };
}

/// The extern cores of the settings in force.
pub struct Runtime {
    /// On a block of its own: the extern cores read it in their loop, and
    /// a heap neighbour the pipeline writes would bounce that line between
    /// the cores.
    stop: Arc<Padded<AtomicBool>>,
    threads: Vec<JoinHandle<()>>,
    /// CPUs the extern cores are pinned to, in turn (empty: not pinned).
    cpus: Vec<usize>,
}

impl Default for Runtime {
    fn default() -> Self {
        Runtime::pinned(Vec::new())
    }
}

impl Runtime {
    /// Extern core `c` runs pinned to `cpus[c % cpus.len()]`.
    pub fn pinned(cpus: Vec<usize>) -> Runtime {
        Runtime {
            stop: Arc::new(Padded(AtomicBool::new(false))),
            threads: Vec::new(),
            cpus,
        }
    }

    /// Waits until every submitted request has been executed (the extern
    /// cores keep running; the pipeline must be paused or stopped, so
    /// that nothing new is submitted), then hands each parked packet its
    /// result in its mailbox, marked done: it resumes whatever lanes
    /// come next, and no lane points into a pipeline that is freed.
    pub fn drain(&self) {
        let start = std::time::Instant::now();
        loop {
            for s in &SLOTS {
                // SAFETY: the pipeline is paused or stopped (contract).
                unsafe { flush(s) };
            }
            // The crypto device is polled here while the pipeline is
            // paused or stopped: then nothing else uses its queue pair.
            // SAFETY: as said.
            let device_busy = unsafe {
                crate::ffi::p4fa_cdev_poll();
                crate::ffi::p4fa_cdev_in_flight() > 0
            };
            let cores_busy = SLOTS
                .iter()
                .any(|s| s.executed.0.load(Ordering::Acquire) < s.to_cores.load(Ordering::Acquire));
            if !device_busy && !cores_busy {
                for (s, (_, kind)) in SLOTS.iter().zip(EXTERNS) {
                    // SAFETY: paused or stopped, every request completed.
                    for lane in unsafe { &*s.lanes.get() } {
                        unsafe { lane.settle(kind) };
                    }
                }
                return;
            }
            if (cores_busy && self.threads.is_empty()) || start.elapsed() > Duration::from_secs(10)
            {
                // Nothing can finish them: a bug, said loudly.
                tracing::error!("extern requests left unexecuted");
                return;
            }
            std::thread::sleep(Duration::from_micros(100));
        }
    }

    fn stop_threads(&mut self) {
        self.stop.0.store(true, Ordering::Release);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        self.stop = Arc::new(Padded(AtomicBool::new(false)));
    }

    /// Applies `settings` (one per slot; the pipeline's thread must be
    /// paused or stopped): drains what is in flight, stops the old extern
    /// cores, starts new ones, switches the modes.
    ///
    /// Extern cores are shared: extern core `c` serves every Async extern
    /// with more than `c` cores (one ring per extern and core).
    pub fn apply(&mut self, settings: &[Setting; EXTERNS.len()]) {
        self.drain();
        self.stop_threads();
        let n_cores = settings
            .iter()
            .filter(|s| s.mode == MODE_ASYNC)
            .map(|s| s.cores)
            .max()
            .unwrap_or(0) as usize;
        // Each entry on a cache line of its own: an extern core reads its
        // entries all the time, and a heap neighbour that the pipeline
        // writes would bounce the line between the cores.
        let mut per_core: Vec<Vec<CoreLane>> = (0..n_cores).map(|_| Vec::new()).collect();
        for (i, s) in settings.iter().enumerate() {
            let slot = &SLOTS[i];
            let mut lanes = Vec::new();
            if s.mode == MODE_ASYNC {
                for core in per_core.iter_mut().take(s.cores as usize) {
                    let lane = Arc::new(Lane::new(s.queue_depth));
                    lanes.push(lane.clone());
                    core.push(Padded((i, s.burst.max(1), lane)));
                }
            }
            // SAFETY: the pipeline's thread is paused or stopped (contract);
            // `drain` settled its parked packets.
            unsafe {
                *slot.lanes.get() = lanes;
                *slot.next.get() = 0;
            }
            slot.pool.store(s.pool.max(1), Ordering::Relaxed);
            slot.burst.store(s.burst.max(1), Ordering::Relaxed);
            slot.mode.store(s.mode, Ordering::Release);
        }
        for (c, rings) in per_core.into_iter().enumerate() {
            let stop = self.stop.clone();
            let cpu = (!self.cpus.is_empty()).then(|| self.cpus[c % self.cpus.len()]);
            self.threads.push(
                std::thread::Builder::new()
                    .name(format!("extern-core-{c}"))
                    .spawn(move || {
                        crate::eal::pin_or_log(cpu, "an extern core");
                        extern_core(rings, stop)
                    })
                    .expect("spawn an extern core"),
            );
        }
    }

    /// Every extern back to Sync with zeroed counters (a new pipeline).
    pub fn reset(&mut self) {
        self.apply(&[Setting::SYNC; EXTERNS.len()]);
        for s in &SLOTS {
            for c in [
                &s.sync_calls,
                &s.skipped,
                &s.submitted,
                &s.to_cores,
                &s.resumed,
                &s.polls,
                &s.waits,
                &s.executed.0,
            ] {
                c.store(0, Ordering::Relaxed);
            }
        }
    }

    /// Extern cores running.
    pub fn cores(&self) -> u32 {
        self.threads.len() as u32
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        self.stop_threads();
    }
}

/// An extern core: takes bursts of published requests from its lanes,
/// runs each into its result slot, publishes how far it got. Idle, it
/// keeps polling for 50 ms, then sleeps 50 µs at a time (an idle agent
/// leaves the machine's cores alone). It never yields: the pipeline parks
/// at most 16 packets, so each extern core round trip that takes a
/// scheduler time slice stalls the whole pipeline for it (first measured
/// with spin-yield-sleep: ~4,000 packets/s). 50 ms rather than the first
/// 200 µs: a core that falls asleep while the pipeline is briefly
/// descheduled costs a sleep per group when the packets come back.
fn extern_core(lanes: Vec<CoreLane>, stop: Arc<Padded<AtomicBool>>) {
    const KEEP_POLLING: Duration = Duration::from_millis(50);
    let mut idle_since: Option<Instant> = None;
    let mut spins = 0u32;
    while !stop.0.load(Ordering::Acquire) {
        let mut did = 0u64;
        for Padded((slot, burst, lane)) in &lanes {
            let published = lane.published.0.load(Ordering::Acquire);
            // This core is `completed`'s only writer: its own value.
            let done = lane.completed.0.load(Ordering::Relaxed);
            let n = (published - done).min(u64::from(*burst));
            if n == 0 {
                continue;
            }
            let kind = EXTERNS[*slot].1;
            for seq in done..done + n {
                let i = seq as usize % LANE_SLOTS;
                // SAFETY: published (acquire above) and not completed: the
                // request is this core's to read, the result slot to write
                // (see `Lane`).
                unsafe {
                    let [mut w0, mut w1] = *lane.requests[i].get();
                    work(kind, &mut w0, &mut w1);
                    if kind != Kind::Empty {
                        *lane.results[i].get() = [w0, w1];
                    }
                }
            }
            lane.completed.0.store(done + n, Ordering::Release);
            SLOTS[*slot].executed.0.fetch_add(n, Ordering::Release);
            did += n;
        }
        if did > 0 {
            idle_since = None;
            continue;
        }
        std::hint::spin_loop();
        spins = spins.wrapping_add(1);
        if !spins.is_multiple_of(256) {
            continue;
        }
        let since = *idle_since.get_or_insert_with(Instant::now);
        if since.elapsed() > KEEP_POLLING {
            std::thread::sleep(Duration::from_micros(50));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aes::cipher::{BlockEncryptMut, KeyIvInit, block_padding::NoPadding};

    #[test]
    fn one_block_is_aes_128_cbc_with_the_emulators_key_and_iv() {
        let plain: [u8; 16] = std::array::from_fn(|i| (i * 7 + 3) as u8);
        let mut block = plain;
        apply(Kind::Encrypt, &mut block);
        let mut want = plain;
        cbc::Encryptor::<aes::Aes128>::new(&KEY.into(), &IV.into())
            .encrypt_padded_mut::<NoPadding>(&mut want, 16)
            .unwrap();
        assert_eq!(block, want);
        apply(Kind::Decrypt, &mut block);
        assert_eq!(block, plain);
        apply(Kind::Empty, &mut block);
        assert_eq!(block, plain);
    }

    fn mailbox(seed: u64) -> Mailbox {
        Mailbox {
            w0: seed.wrapping_mul(0x9e37_79b9_7f4a_7c15),
            w1: !seed,
            state: AtomicU64::new(IDLE),
        }
    }

    fn expected(mb: &Mailbox, kind: Kind) -> (u64, u64) {
        let (mut w0, mut w1) = (mb.w0, mb.w1);
        work(kind, &mut w0, &mut w1);
        (w0, w1)
    }

    /// The only test that touches the process-wide slots (tests run in
    /// parallel): the lanes as the pipeline thread uses them, without DPDK.
    #[test]
    fn async_calls_park_resume_with_their_own_results_and_survive_a_policy_change() {
        const ENC: usize = 3; // "encrypt"
        const EMPTY: usize = 2;
        assert_eq!(EXTERNS[ENC], ("encrypt", Kind::Encrypt));
        let f = functions();
        let mut rt = Runtime::default();
        rt.reset();
        let mut settings = [Setting::SYNC; EXTERNS.len()];
        for i in [ENC, EMPTY] {
            settings[i] = Setting {
                mode: MODE_ASYNC,
                cores: 2,
                burst: 64,
                pool: 1023,
                queue_depth: 8,
            };
        }
        rt.apply(&settings);
        assert_eq!(rt.cores(), 2);

        // 16 parked packets (DPDK's most) over two lanes of 8: every call
        // parks, then each resumes with its own block encrypted.
        let mut mbs: Vec<Mailbox> = (0..16).map(mailbox).collect();
        let want: Vec<_> = mbs.iter().map(|m| expected(m, Kind::Encrypt)).collect();
        for mb in &mut mbs {
            let r = unsafe { f[ENC]((mb as *mut Mailbox).cast()) };
            assert_eq!(r, 0, "an Async call parks its packet");
        }
        let mut resumed = vec![false; mbs.len()];
        let start = Instant::now();
        while resumed.iter().any(|r| !r) {
            assert!(start.elapsed() < Duration::from_secs(10), "{resumed:?}");
            for (mb, r) in mbs.iter_mut().zip(&mut resumed) {
                if !*r && unsafe { f[ENC]((mb as *mut Mailbox).cast()) } == 1 {
                    *r = true;
                }
            }
        }
        for (i, (mb, w)) in mbs.iter().zip(&want).enumerate() {
            assert_eq!((mb.w0, mb.w1), *w, "packet {i}'s own result");
            assert_eq!(mb.state.load(Ordering::Relaxed), IDLE);
        }
        let c = counters(ENC);
        assert_eq!((c.submitted, c.resumed, c.executed), (16, 16, 16));
        assert_eq!(c.sync_calls, 0);

        // More calls than two lanes of 8 hold: each parks, submitted or
        // waiting for room (DPDK cannot drop from an extern), none run
        // inline.
        let mut more: Vec<Mailbox> = (100..140).map(mailbox).collect();
        for mb in &mut more {
            assert_eq!(unsafe { f[EMPTY]((mb as *mut Mailbox).cast()) }, 0);
        }
        let c = counters(EMPTY);
        assert_eq!((c.submitted + c.waits, c.sync_calls), (40, 0));
        assert!(c.submitted >= 16, "each lane takes its 8 at once: {c:?}");

        // A policy change while packets are parked (the pipeline paused):
        // each parked packet resumes on its next call with its result,
        // although its lane is gone.
        let mut parked: Vec<Mailbox> = (200..210).map(mailbox).collect();
        let want: Vec<_> = parked.iter().map(|m| expected(m, Kind::Encrypt)).collect();
        for mb in &mut parked {
            assert_eq!(unsafe { f[ENC]((mb as *mut Mailbox).cast()) }, 0);
        }
        rt.apply(&[Setting::SYNC; EXTERNS.len()]);
        assert_eq!(rt.cores(), 0);
        for (mb, w) in parked.iter_mut().zip(&want) {
            assert_eq!(mb.state.load(Ordering::Relaxed), DONE);
            assert_eq!(unsafe { f[ENC]((mb as *mut Mailbox).cast()) }, 1);
            assert_eq!((mb.w0, mb.w1), *w);
        }
        // Empty's parked ones resume too, and new calls are Sync.
        for mb in &mut more {
            if mb.state.load(Ordering::Relaxed) == DONE {
                assert_eq!(unsafe { f[EMPTY]((mb as *mut Mailbox).cast()) }, 1);
            }
        }
        let mut mb = mailbox(7);
        let w = expected(&mb, Kind::Encrypt);
        assert_eq!(unsafe { f[ENC]((&mut mb as *mut Mailbox).cast()) }, 1);
        assert_eq!((mb.w0, mb.w1), w);
        rt.reset();
    }

    #[test]
    fn names_have_slots() {
        assert_eq!(slot_of("async_encrypt"), Some(0));
        assert_eq!(slot_of("empty"), Some(2));
        assert_eq!(slot_of("compress"), None);
    }
}
