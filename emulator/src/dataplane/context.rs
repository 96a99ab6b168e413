//! Where a packet waits while its async extern call runs: a per-worker
//! pool of preallocated contexts (T4P4S's context pool). Exhaustion is an
//! answer (`None`: the caller drops the packet and counts it), never a
//! wait.
//!
//! The two suspend methods cost what they cost in T4P4S:
//!
//! - PacketDescriptor: the packet's descriptor (program counter, metadata,
//!   header offsets: a few cache lines) is copied into the slot and back.
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

/// Fixed-capacity pool of `T` slots with optional coroutine images.
pub struct ContextPool<T> {
    slots: Box<[T]>,
    free: Vec<u32>,
    /// Context method: one `context_bytes` image per slot.
    images: Box<[u8]>,
    context_bytes: usize,
}

impl<T: Copy + Default> ContextPool<T> {
    /// `capacity` slots; `context_bytes` > 0 allocates the images of the
    /// Context method.
    pub fn new(capacity: u32, context_bytes: usize) -> ContextPool<T> {
        ContextPool {
            slots: vec![T::default(); capacity as usize].into_boxed_slice(),
            free: (0..capacity).rev().collect(),
            images: vec![0u8; capacity as usize * context_bytes].into_boxed_slice(),
            context_bytes,
        }
    }

    pub fn capacity(&self) -> u32 {
        self.slots.len() as u32
    }

    pub fn in_use(&self) -> u32 {
        (self.slots.len() - self.free.len()) as u32
    }

    /// Parks `value`; `None` when every slot is taken.
    #[inline]
    pub fn park(&mut self, value: &T) -> Option<u32> {
        let i = self.free.pop()?;
        self.slots[i as usize] = *value;
        Some(i)
    }

    /// The parked value of slot `i` (still owned by the pool).
    #[inline]
    pub fn get(&self, i: u32) -> &T {
        &self.slots[i as usize]
    }

    /// The parked value of slot `i`, to update it in place.
    #[inline]
    pub fn get_mut(&mut self, i: u32) -> &mut T {
        &mut self.slots[i as usize]
    }

    /// Takes the value out and frees the slot.
    #[inline]
    pub fn unpark(&mut self, i: u32) -> T {
        debug_assert!(!self.free.contains(&i), "slot {i} freed twice");
        self.free.push(i);
        self.slots[i as usize]
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
    fn exhaustion_is_an_answer_and_slots_come_back() {
        let mut p: ContextPool<u64> = ContextPool::new(2, 0);
        let a = p.park(&10).unwrap();
        let b = p.park(&20).unwrap();
        assert_eq!(p.park(&30), None);
        assert_eq!(p.in_use(), 2);
        assert_eq!(*p.get(b), 20);
        assert_eq!(p.unpark(a), 10);
        assert_eq!(p.in_use(), 1);
        let c = p.park(&40).unwrap();
        assert_eq!(c, a);
        assert_eq!(p.unpark(c), 40);
        assert_eq!(p.unpark(b), 20);
        assert_eq!(p.in_use(), 0);
        assert_eq!(p.capacity(), 2);
    }

    #[test]
    fn context_images_round_trip() {
        let mut p: ContextPool<u8> = ContextPool::new(3, 64);
        let mut stack = [7u8; 64];
        let i = p.park(&1).unwrap();
        p.save_context(i, &stack);
        stack.fill(0);
        p.restore_context(i, &mut stack);
        assert_eq!(stack, [7u8; 64]);
    }
}
