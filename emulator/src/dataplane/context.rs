//! What a packet holds while its async extern call runs: a reservation
//! in its extern's per-worker context pool (T4P4S's context pool), which
//! bounds how many packets may be parked. Exhaustion is an answer (`None`):
//! the worker decides what the packet does then (waits for a context, as
//! on DPDK SWX; with the Context method, is dropped, as in T4P4S).
//!
//! The packet itself does not move: it runs in its descriptor slot from rx
//! on (`worker.rs`), so the two suspend methods cost what they cost in
//! T4P4S on top of that:
//!
//! - PacketDescriptor: nothing more. The descriptor (program counter,
//!   metadata, header offsets) already is the packet's saved state, and
//!   resuming continues at its program counter.
//! - Context: T4P4S turns packet handlers into ucontext coroutines. What
//!   that costs per call and is modelled here: glibc's `getcontext` and
//!   `swapcontext` each make an `rt_sigprocmask` system call (save / restore
//!   the signal mask), and the handler's stack, which the paper says is
//!   saved and reloaded "at given checkpoints", is copied out and back
//!   (`context_bytes` per direction, default [`DEFAULT_CONTEXT_BYTES`]).
//!   So a suspend costs one system call plus one stack copy, and a resume
//!   the same. Not modelled: makecontext's stack allocation (T4P4S keeps a
//!   pool) and the register save itself (tens of bytes).

/// Stack bytes saved per Context suspend (and restored per resume): the
/// coroutine stack of the generated handler at the extern call. An
/// assumption (T4P4S does not publish one); `EngineConfig::context_bytes`
/// changes it.
pub const DEFAULT_CONTEXT_BYTES: usize = 8192;

/// A fixed number of contexts, with a coroutine image each for the
/// Context method.
pub struct ContextPool {
    capacity: u32,
    in_use: u32,
    /// Context method: free image slots.
    free: Vec<u32>,
    /// Context method: one `context_bytes` image per slot.
    images: Box<[u8]>,
    context_bytes: usize,
}

impl ContextPool {
    /// `capacity` contexts; `context_bytes` > 0 allocates the images of the
    /// Context method.
    pub fn new(capacity: u32, context_bytes: usize) -> ContextPool {
        let images = if context_bytes > 0 { capacity } else { 0 };
        ContextPool {
            capacity,
            in_use: 0,
            free: (0..images).rev().collect(),
            images: vec![0u8; images as usize * context_bytes].into_boxed_slice(),
            context_bytes,
        }
    }

    pub fn capacity(&self) -> u32 {
        self.capacity
    }

    pub fn in_use(&self) -> u32 {
        self.in_use
    }

    /// Takes a context; `None` when all are taken. The answer is the image
    /// slot (Context method; 0 otherwise).
    #[inline]
    pub fn acquire(&mut self) -> Option<u32> {
        if self.in_use == self.capacity {
            return None;
        }
        self.in_use += 1;
        if self.context_bytes == 0 {
            return Some(0);
        }
        self.free.pop()
    }

    /// Gives back a context [`ContextPool::acquire`] returned.
    #[inline]
    pub fn release(&mut self, slot: u32) {
        debug_assert!(self.in_use > 0, "context released twice");
        self.in_use -= 1;
        if self.context_bytes > 0 {
            debug_assert!(!self.free.contains(&slot), "slot {slot} freed twice");
            self.free.push(slot);
        }
    }

    /// Context method, suspend: saves the signal mask (as getcontext does)
    /// and copies the live stack image into slot `i`.
    #[inline]
    pub fn save_context(&mut self, i: u32, stack: &[u8]) {
        sigmask_syscall();
        let n = self.context_bytes;
        let off = i as usize * n;
        self.images[off..off + n].copy_from_slice(&stack[..n]);
    }

    /// Context method, resume: restores the signal mask (as swapcontext
    /// does) and copies slot `i`'s image back onto the live stack.
    #[inline]
    pub fn restore_context(&self, i: u32, stack: &mut [u8]) {
        sigmask_syscall();
        let n = self.context_bytes;
        let off = i as usize * n;
        stack[..n].copy_from_slice(&self.images[off..off + n]);
    }
}

/// One `rt_sigprocmask` system call, as glibc's get/set/swapcontext make.
#[inline]
fn sigmask_syscall() {
    // SAFETY: reads the current mask into a local; changes nothing.
    unsafe {
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::pthread_sigmask(libc::SIG_BLOCK, std::ptr::null(), &mut old);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exhaustion_is_an_answer_and_contexts_come_back() {
        let mut p = ContextPool::new(2, 0);
        let a = p.acquire().unwrap();
        let b = p.acquire().unwrap();
        assert_eq!(p.acquire(), None);
        assert_eq!(p.in_use(), 2);
        p.release(a);
        assert_eq!(p.in_use(), 1);
        assert!(p.acquire().is_some());
        p.release(b);
        p.release(a);
        assert_eq!(p.in_use(), 0);
        assert_eq!(p.capacity(), 2);
    }

    #[test]
    fn context_images_round_trip_per_slot() {
        let mut p = ContextPool::new(3, 64);
        let (a, b) = (p.acquire().unwrap(), p.acquire().unwrap());
        assert_ne!(a, b);
        p.save_context(a, &[7u8; 64]);
        p.save_context(b, &[9u8; 64]);
        let mut stack = [0u8; 64];
        p.restore_context(a, &mut stack);
        assert_eq!(stack, [7u8; 64]);
        p.restore_context(b, &mut stack);
        assert_eq!(stack, [9u8; 64]);
        p.release(a);
        assert_eq!(p.acquire(), Some(a));
    }
}
