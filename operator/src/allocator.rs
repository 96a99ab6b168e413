//! What the operator asks of its allocator (mimalloc, the binary's global
//! allocator, see main.rs) beyond allocating.

/// Returns the memory this thread freed to the OS now. mimalloc keeps a
/// thread's freed pages, and purges them later only when that thread
/// allocates again; the blocking pool's threads go idle right after a
/// parse, so the texts and buffers they freed stayed resident through
/// the write that follows (measured, with what the release costs, in
/// docs/dev/fleet-lab-notes.md). Called by the entry sources after a
/// blocking job over a large text. `force`: freed pages are purged now;
/// without it, mimalloc keeps some of them (the peak then varied by 20
/// MiB from run to run).
pub fn release_freed() {
    // SAFETY: mi_collect takes no pointers; it walks the calling thread's
    // own heap. Under another global allocator (the library's tests) it
    // finds mimalloc's heap of this thread empty.
    unsafe { libmimalloc_sys::mi_collect(true) }
}
