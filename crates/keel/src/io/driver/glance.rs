//! A glance at a ring: whether it has news, in three loads, from any
//! thread, with no lock and no system call.
//!
//! # Why
//!
//! A worker between two polls may look at IO only every `io_interval` or
//! `io_every` polls, because a look costs: on epoll an `epoll_wait`, on
//! the ring the poller's lock, the submission lock and the flags. Whether
//! a look would find anything, though, is written in memory the kernel
//! shares with the process: the completion queue's head and tail differ
//! when completions wait, and the submission ring's flags say when
//! completions wait to be posted (`IORING_SQ_TASKRUN`: this thread's task
//! work, posted at its next entry to the kernel) or were kept aside
//! (`IORING_SQ_CQ_OVERFLOW`). A worker on the ring glances at its ring
//! after every poll and looks only when there is news, so an event is
//! seen at the first poll boundary after it, not up to an interval later
//! (see `sched::worker`).
//!
//! # How
//!
//! The `io-uring` crate keeps its mapping of the rings to itself, so the
//! glance maps the rings' first page again, read only, with the offsets
//! the kernel gave at setup (`io_uring_params`, which
//! [`io_uring::Parameters`] wraps transparently). Both mappings show the
//! same pages; the kernel writes the words read here with single stores
//! (`WRITE_ONCE`, `smp_store_release`), and the reaper writes the head
//! through the crate's mapping with an atomic store. A glance is a hint:
//! the look that follows it synchronises as any look does, and a glance
//! that misses a completion posted a moment later leaves it to the next
//! glance, interval or park, as before.

use std::io;
use std::os::fd::AsRawFd;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};

use io_uring::IoUring;

/// The offset that maps the submission ring (and, with
/// `IORING_FEAT_SINGLE_MMAP`, the completion ring: one region).
const IORING_OFF_SQ_RING: libc::off_t = 0;
/// `io_uring_params::features`: the two rings are one region.
const IORING_FEAT_SINGLE_MMAP: u32 = 1 << 0;
/// Submission ring flags: completions were kept aside for want of room.
const IORING_SQ_CQ_OVERFLOW: u32 = 1 << 1;
/// Submission ring flags: task work waits to post completions.
const IORING_SQ_TASKRUN: u32 = 1 << 2;

/// `struct io_sqring_offsets` of the kernel's `io_uring.h`.
#[repr(C)]
struct SqOffsets {
    head: u32,
    tail: u32,
    ring_mask: u32,
    ring_entries: u32,
    flags: u32,
    dropped: u32,
    array: u32,
    resv1: u32,
    user_addr: u64,
}

/// `struct io_cqring_offsets` of the kernel's `io_uring.h`.
#[repr(C)]
struct CqOffsets {
    head: u32,
    tail: u32,
    ring_mask: u32,
    ring_entries: u32,
    overflow: u32,
    cqes: u32,
    flags: u32,
    resv1: u32,
    user_addr: u64,
}

/// `struct io_uring_params` of the kernel's `io_uring.h`.
#[repr(C)]
struct Params {
    sq_entries: u32,
    cq_entries: u32,
    flags: u32,
    sq_thread_cpu: u32,
    sq_thread_idle: u32,
    features: u32,
    wq_fd: u32,
    resv: [u32; 3],
    sq_off: SqOffsets,
    cq_off: CqOffsets,
}

const _: () = assert!(std::mem::size_of::<Params>() == 120);
const _: () = assert!(std::mem::size_of::<io_uring::Parameters>() == std::mem::size_of::<Params>());
const _: () =
    assert!(std::mem::align_of::<io_uring::Parameters>() == std::mem::align_of::<Params>());

/// A read-only view of one ring's heads (see the module docs).
pub(super) struct Glance {
    /// The mapping's start.
    base: NonNull<u8>,
    /// The mapping's length.
    len: usize,
    /// Byte offsets in the mapping of the completion queue's head and
    /// tail and of the submission ring's flags.
    cq_head: usize,
    cq_tail: usize,
    sq_flags: usize,
}

// SAFETY: the mapping is shared memory that is only read, through atomic
// loads; it stays mapped until the glance is dropped.
unsafe impl Send for Glance {}
// SAFETY: as above: `&Glance` only loads atomically.
unsafe impl Sync for Glance {}

impl std::fmt::Debug for Glance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Glance").field("len", &self.len).finish()
    }
}

impl Glance {
    /// A glance at `ring`.
    ///
    /// # Errors
    ///
    /// `Unsupported` if the kernel maps the two rings apart (before Linux
    /// 5.4), or the mapping's error.
    pub(super) fn new(ring: &IoUring) -> io::Result<Glance> {
        // SAFETY: `io_uring::Parameters` is documented as a transparent
        // wrapper of the kernel's `io_uring_params`, whose layout `Params`
        // copies from the kernel's ABI (size and alignment asserted above).
        let params = unsafe { &*std::ptr::from_ref(ring.params()).cast::<Params>() };
        if params.features & IORING_FEAT_SINGLE_MMAP == 0 {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "the kernel maps the io_uring's rings apart (no IORING_FEAT_SINGLE_MMAP)",
            ));
        }
        let cq_head = params.cq_off.head as usize;
        let cq_tail = params.cq_off.tail as usize;
        let sq_flags = params.sq_off.flags as usize;
        let len = cq_head.max(cq_tail).max(sq_flags) + std::mem::size_of::<u32>();
        // SAFETY: maps `len` bytes of the ring's region, which the kernel
        // made at setup at least as long (the offsets are inside it), read
        // only and shared; takes no pointer of ours.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                ring.as_raw_fd(),
                IORING_OFF_SQ_RING,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let base = NonNull::new(base.cast::<u8>())
            .ok_or_else(|| io::Error::other("mmap of the ring returned null"))?;
        Ok(Glance {
            base,
            len,
            cq_head,
            cq_tail,
            sq_flags,
        })
    }

    /// The word at byte `offset` of the mapping.
    fn word(&self, offset: usize) -> &AtomicU32 {
        // SAFETY: `offset` is one of the kernel's offsets, inside the
        // mapping (its length covers the largest) and 4-byte aligned, as
        // the kernel lays out its `u32`s; `AtomicU32` has `u32`'s layout,
        // and the mapping lives as long as `self`.
        unsafe { &*self.base.as_ptr().add(offset).cast::<AtomicU32>() }
    }

    /// Whether a look at the ring would find something: completions in
    /// its queue, completions waiting for this thread's task work, or
    /// completions kept aside.
    pub(super) fn news(&self) -> bool {
        let tail = self.word(self.cq_tail).load(Ordering::Acquire);
        let head = self.word(self.cq_head).load(Ordering::Relaxed);
        tail != head
            || self.word(self.sq_flags).load(Ordering::Relaxed)
                & (IORING_SQ_TASKRUN | IORING_SQ_CQ_OVERFLOW)
                != 0
    }
}

impl Drop for Glance {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping made in `new`, which nothing
        // borrows any more (`word`'s borrows end with `&self`'s).
        unsafe { libc::munmap(self.base.as_ptr().cast(), self.len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use io_uring::opcode;

    /// The glance sees a completion from its posting to its reap, and
    /// nothing before or after.
    #[test]
    #[cfg_attr(miri, ignore = "Miri cannot make the io_uring system calls")]
    fn a_glance_sees_a_completion_until_it_is_reaped() {
        let mut ring = IoUring::new(8).unwrap_or_else(|error| {
            panic!(
                "this test needs io_uring: {error} (probe: {})",
                crate::io::probe_io_uring()
            )
        });
        let glance = Glance::new(&ring).expect("a glance at a ring of Linux 5.4 or later");
        assert!(!glance.news(), "nothing was submitted yet");
        let nop = opcode::Nop::new().build().user_data(7);
        // SAFETY: a no-op points at no memory.
        unsafe { ring.submission().push(&nop) }.unwrap();
        ring.submit_and_wait(1).unwrap();
        assert!(glance.news(), "a completion waits");
        let reaped: Vec<u64> = ring.completion().map(|cqe| cqe.user_data()).collect();
        assert_eq!(reaped, [7]);
        assert!(!glance.news(), "the completion was reaped");
    }
}
