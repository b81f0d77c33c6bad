//! `ReadBuf`: the bytes a read on the ring fills, owned by its operation.

use std::ptr::NonNull;

/// Bytes a read step's kernel work writes: allocated by the operation,
/// written only by the kernel while the step is in flight, read by Rust
/// code only once the operation is done. Never borrowed as a slice
/// before then, so no Rust reference aliases the kernel's writes.
pub(crate) struct ReadBuf {
    bytes: NonNull<[u8]>,
}

// SAFETY: a `ReadBuf` owns its allocation, like a `Box<[u8]>`; the only
// access through a shared reference is `filled`, whose contract says the
// kernel no longer writes it.
unsafe impl Send for ReadBuf {}
// SAFETY: as above.
unsafe impl Sync for ReadBuf {}

impl ReadBuf {
    /// `len` zeroed bytes.
    pub(crate) fn new(len: usize) -> ReadBuf {
        ReadBuf {
            bytes: NonNull::from(Box::leak(vec![0u8; len].into_boxed_slice())),
        }
    }

    /// How many bytes the buffer holds.
    pub(crate) fn len(&self) -> usize {
        self.bytes.len()
    }

    /// Where the kernel writes.
    pub(crate) fn as_mut_ptr(&self) -> *mut u8 {
        self.bytes.as_ptr().cast()
    }

    /// The first `n` bytes (at most the buffer's length).
    ///
    /// # Safety
    ///
    /// Nothing writes the buffer while the slice lives: the read that
    /// filled it has completed.
    pub(super) unsafe fn filled(&self, n: usize) -> &[u8] {
        // SAFETY: the allocation lives as long as `self`; the caller
        // promises that nothing writes it meanwhile.
        let all = unsafe { self.bytes.as_ref() };
        &all[..n.min(all.len())]
    }
}

impl Drop for ReadBuf {
    fn drop(&mut self) {
        // SAFETY: made by `Box::leak` in `new` and freed only here.
        drop(unsafe { Box::from_raw(self.bytes.as_ptr()) });
    }
}

impl std::fmt::Debug for ReadBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadBuf").field("len", &self.len()).finish()
    }
}
