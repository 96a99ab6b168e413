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
//! mailbox encrypts zeros (examples/l2crypt/l2crypt.spec does; the variant
//! l2crypt_mailbox.spec moves the first 16 payload bytes in and out).
//!
//! **Async.** An extern that returns 0 parks its packet: the pipeline
//! switches to another of its 16 internal threads and calls the extern
//! again, with the same mailbox, when it comes back to that thread. So
//! the first call of an Async extern hands the mailbox to an extern core
//! (a lock-free SPSC ring per extern and core, [`rtrb`]) and returns 0; the
//! extern core runs the work and marks the mailbox done; the next call
//! that finds it done returns 1 and the packet goes on. At most 16 packets
//! are parked per pipeline (`RTE_SWX_PIPELINE_THREADS_MAX`) and packets
//! can leave out of order.
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
/// Handed to an extern core.
const SUBMITTED: u64 = 1;
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

/// A request to an extern core: the parked packet's mailbox.
#[derive(Clone, Copy)]
struct Request(*mut Mailbox);
// SAFETY: the mailbox is DPDK's per-thread memory of a pipeline that
// outlives the request: a pipeline is freed only after every submitted
// request has been executed (`Runtime::drain`), and while SUBMITTED only
// the extern core touches its fields.
unsafe impl Send for Request {}

/// One extern's state. The counters are written by the pipeline's thread
/// only (`bump`), except `executed` (extern cores).
struct Slot {
    mode: AtomicU8,
    /// Most calls in flight (submitted, not resumed).
    pool: AtomicU32,
    /// Operations handed to the crypto device at once.
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
    /// Async calls that waited because the pool or every queue was full
    /// (DPDK has no way to drop from an extern: the packet stays parked
    /// and asks again).
    waits: AtomicU64,
    /// Requests the extern cores finished.
    executed: AtomicU64,
    /// The rings to this extern's cores; touched by the pipeline's thread,
    /// replaced only while it is paused or stopped.
    producers: UnsafeCell<Vec<rtrb::Producer<Request>>>,
    next: UnsafeCell<usize>,
    /// Submitted calls not yet in a ring: they go out `burst` at a time,
    /// or when the pipeline comes back to a parked packet of this extern
    /// (one ring commit for many requests: fewer cache lines bouncing
    /// between the cores). Same ownership as `producers`.
    pending: UnsafeCell<Vec<Request>>,
}

// SAFETY: `producers` and `next` are used by the one pipeline thread, and
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
            executed: AtomicU64::new(0),
            producers: UnsafeCell::new(Vec::new()),
            next: UnsafeCell::new(0),
            pending: UnsafeCell::new(Vec::new()),
        }
    }
}

static SLOTS: [Slot; EXTERNS.len()] = [const { Slot::new() }; EXTERNS.len()];

/// Most requests one extern keeps pending (the pipeline parks 16; the
/// buffer is allocated once, at `Runtime::apply`).
const PENDING_MAX: usize = 64;

#[inline]
fn bump(c: &AtomicU64) {
    c.store(c.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
}

/// Hands a slot's pending requests to its extern cores' rings, one
/// commit per ring; what does not fit stays pending.
///
/// # Safety
/// Called by the pipeline's thread, or by the control side while that
/// thread is paused or stopped (the ownership of `Slot::producers`).
unsafe fn flush(slot: &Slot) {
    // SAFETY: see the function's contract.
    let (producers, next, pending) = unsafe {
        (
            &mut *slot.producers.get(),
            &mut *slot.next.get(),
            &mut *slot.pending.get(),
        )
    };
    let n = producers.len();
    if n == 0 || pending.is_empty() {
        return;
    }
    let share = pending.len().div_ceil(n);
    for k in 0..n {
        if pending.is_empty() {
            break;
        }
        let i = (*next + k) % n;
        let take = share.min(pending.len()).min(producers[i].slots());
        if take == 0 {
            continue;
        }
        let chunk = producers[i]
            .write_chunk_uninit(take)
            .expect("`take` slots are free");
        chunk.fill_from_iter(pending.drain(..take));
        *next = (i + 1) % n;
    }
}

/// The extern function of slot `I` (what DPDK calls).
///
/// # Safety
/// `mailbox` is this extern's mailbox of a live pipeline thread, laid out
/// as [`MAILBOX_FIELDS`]; called only from the pipeline's thread.
unsafe extern "C" fn call<const I: usize>(mailbox: *mut c_void) -> c_int {
    let slot = &SLOTS[I];
    let mb = mailbox.cast::<Mailbox>();
    // SAFETY: see the function's contract; the state is only read here
    // while an extern core may store to it (atomically).
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
        _ => {
            // SAFETY: the pipeline's thread (the function's contract).
            unsafe {
                if !(*slot.pending.get()).is_empty() {
                    flush(slot);
                }
            }
            bump(&slot.polls);
            return 0;
        }
    }
    let kind = EXTERNS[I].1;
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
            let (producers, pending) =
                unsafe { (&*slot.producers.get(), &mut *slot.pending.get()) };
            if producers.is_empty() {
                // No extern core (cannot happen with a valid policy): run it.
                unsafe { work(kind, &mut (*mb).w0, &mut (*mb).w1) };
                bump(&slot.sync_calls);
                return 1;
            }
            // A full ring keeps requests pending: the packet stays parked
            // and asks again (DPDK cannot drop from an extern).
            if pending.len() >= PENDING_MAX {
                bump(&slot.waits);
                return 0;
            }
            state.store(SUBMITTED, Ordering::Relaxed);
            pending.push(Request(mb));
            bump(&slot.submitted);
            bump(&slot.to_cores);
            if pending.len() >= slot.burst.load(Ordering::Relaxed) as usize {
                // SAFETY: this thread (contract).
                unsafe { flush(slot) };
            }
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
        executed: r(&s.executed),
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
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl Default for Runtime {
    fn default() -> Self {
        Runtime {
            stop: Arc::new(AtomicBool::new(false)),
            threads: Vec::new(),
        }
    }
}

impl Runtime {
    /// Waits until every submitted request has been executed (the extern
    /// cores keep running; the pipeline must be paused or stopped, so
    /// that nothing new is submitted).
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
                .any(|s| s.executed.load(Ordering::Acquire) < s.to_cores.load(Ordering::Acquire));
            if !device_busy && !cores_busy {
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
        self.stop.store(true, Ordering::Release);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        self.stop = Arc::new(AtomicBool::new(false));
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
        let mut per_core: Vec<Vec<(usize, u32, rtrb::Consumer<Request>)>> =
            (0..n_cores).map(|_| Vec::new()).collect();
        for (i, s) in settings.iter().enumerate() {
            let slot = &SLOTS[i];
            let mut producers = Vec::new();
            if s.mode == MODE_ASYNC {
                for core in per_core.iter_mut().take(s.cores as usize) {
                    let (p, c) = rtrb::RingBuffer::new(s.queue_depth.max(1) as usize);
                    producers.push(p);
                    core.push((i, s.burst.max(1), c));
                }
            }
            // SAFETY: the pipeline's thread is paused or stopped (contract).
            unsafe {
                *slot.producers.get() = producers;
                *slot.next.get() = 0;
                let pending = &mut *slot.pending.get();
                pending.clear();
                pending.reserve(PENDING_MAX);
            }
            slot.pool.store(s.pool.max(1), Ordering::Relaxed);
            slot.burst.store(s.burst.max(1), Ordering::Relaxed);
            slot.mode.store(s.mode, Ordering::Release);
        }
        for (c, rings) in per_core.into_iter().enumerate() {
            let stop = self.stop.clone();
            self.threads.push(
                std::thread::Builder::new()
                    .name(format!("extern-core-{c}"))
                    .spawn(move || extern_core(rings, stop))
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
                &s.executed,
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

/// An extern core: takes bursts from its rings, runs each call, marks its
/// mailbox done. Idle, it keeps polling for 200 µs, then sleeps 50 µs at a
/// time (an idle agent leaves the machine's cores alone). It never yields:
/// the pipeline parks at most 16 packets, so each extern core round trip
/// that takes a scheduler time slice (a yield on a busy machine, a long
/// sleep) stalls the whole pipeline for it (first measured with
/// spin-yield-sleep: ~4,000 packets/s).
fn extern_core(mut rings: Vec<(usize, u32, rtrb::Consumer<Request>)>, stop: Arc<AtomicBool>) {
    const KEEP_POLLING: Duration = Duration::from_micros(200);
    let mut idle_since: Option<Instant> = None;
    let mut spins = 0u32;
    while !stop.load(Ordering::Acquire) {
        let mut did = 0usize;
        for (slot, burst, ring) in &mut rings {
            let n = ring.slots().min(*burst as usize);
            if n == 0 {
                continue;
            }
            let kind = EXTERNS[*slot].1;
            let chunk = ring.read_chunk(n).expect("n slots are there");
            for Request(mb) in chunk {
                // SAFETY: a SUBMITTED mailbox is this core's until DONE
                // (see `Request`).
                unsafe {
                    work(kind, &mut (*mb).w0, &mut (*mb).w1);
                    (*mb).state.store(DONE, Ordering::Release);
                }
            }
            SLOTS[*slot].executed.fetch_add(n as u64, Ordering::Release);
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

    #[test]
    fn names_have_slots() {
        assert_eq!(slot_of("async_encrypt"), Some(0));
        assert_eq!(slot_of("empty"), Some(2));
        assert_eq!(slot_of("compress"), None);
    }
}
