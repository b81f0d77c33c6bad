//! The provided-buffer ring that a ring's multishot receives take their
//! buffers from (`IORING_REGISTER_PBUF_RING`, Linux 5.19).
//!
//! # Why
//!
//! A multishot receive is armed once for a stream's life and completes
//! once per arrival; the kernel picks the buffer for each arrival from
//! this pool and says which in the completion, so no buffer is tied to a
//! stream that is waiting.
//!
//! # Layout and protocol
//!
//! One anonymous mapping holds the ring of `entries` descriptors (16
//! bytes each, page aligned, as the kernel wants) and, after it, the
//! `entries` buffers of [`BUFFER_LEN`] bytes. The kernel consumes
//! descriptors from the ring's head; the process gives buffers back by
//! writing a descriptor at the tail and then publishing the new tail
//! (a 16-bit counter that overlays the first descriptor's last two
//! bytes) with a release store. Giving back happens on any thread, so
//! the producer side is a lock.
//!
//! # Invariants
//!
//! - **The mapping outlives the kernel's use of it.** The pool is
//!   registered with its ring and never unregistered: the ring's driver
//!   holds an `Arc` of it, and drops it only after the ring itself is
//!   closed; every stream whose multishot receive uses the pool holds one
//!   too, and the kernel holds that stream's slot until the receive's
//!   last completion is reaped.
//! - **A buffer is the kernel's or one slot's, never both.** It is the
//!   kernel's from the moment it is published at the tail until a
//!   completion names it; then the slot that got the completion owns it
//!   until it gives it back.

use std::io;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::Mutex;

use io_uring::IoUring;

use crate::io::lock;

/// Bytes a buffer holds: an arrival of more is split over several
/// completions.
pub(crate) const BUFFER_LEN: u32 = 16 * 1024;
/// Buffers a ring's pool holds (4 MiB at [`BUFFER_LEN`]); a power of two,
/// as the kernel requires.
pub(crate) const BUFFERS: u16 = 256;
/// The pool's group id; each ring has its own group namespace.
pub(crate) const GROUP: u16 = 0;

/// One descriptor of the ring, as the kernel reads it
/// (`struct io_uring_buf`).
#[repr(C)]
struct Descriptor {
    addr: u64,
    len: u32,
    bid: u16,
    /// In the first descriptor: the tail.
    resv: u16,
}

/// Where the tail lives: the first descriptor's `resv`.
const TAIL_OFFSET: usize = 14;
const _: () = assert!(std::mem::size_of::<Descriptor>() == 16);

/// A ring's provided buffers (see the module docs).
#[derive(Debug)]
pub(crate) struct BufPool {
    base: NonNull<u8>,
    mapped: usize,
    /// Where the buffers start in the mapping.
    buffers_at: usize,
    /// The next tail to publish; the producer's lock.
    tail: Mutex<u16>,
}

// SAFETY: the mapping is reached through `tail`'s lock (descriptors and
// the tail) or by the owner of a buffer (see the module invariants);
// nothing in the pool is tied to a thread.
unsafe impl Send for BufPool {}
// SAFETY: as above.
unsafe impl Sync for BufPool {}

impl BufPool {
    /// Maps a pool, hands every buffer to the kernel and registers it
    /// with `ring` as group [`GROUP`].
    pub(crate) fn register(ring: &IoUring) -> io::Result<BufPool> {
        let pool = BufPool::map()?;
        for id in 0..BUFFERS {
            pool.give_back(id);
        }
        // SAFETY: the ring's memory is the mapping's first bytes, page
        // aligned, and stays mapped as long as the kernel may read it (see
        // the module invariants).
        unsafe {
            ring.submitter().register_buf_ring_with_flags(
                pool.base.as_ptr() as u64,
                BUFFERS,
                GROUP,
                0,
            )
        }?;
        Ok(pool)
    }

    /// The mapping: the ring, empty, then the buffers.
    fn map() -> io::Result<BufPool> {
        let page = page_size();
        let ring_len = usize::from(BUFFERS) * std::mem::size_of::<Descriptor>();
        let buffers_at = ring_len.div_ceil(page) * page;
        let mapped = buffers_at + usize::from(BUFFERS) * BUFFER_LEN as usize;
        // SAFETY: an anonymous private mapping at an address the kernel
        // picks: no existing memory is affected.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                mapped,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(BufPool {
            base: NonNull::new(base.cast()).expect("mmap does not return null on success"),
            mapped,
            buffers_at,
            tail: Mutex::new(0),
        })
    }

    /// The first `len` bytes of buffer `id`.
    ///
    /// # Safety
    ///
    /// The caller owns buffer `id` (a completion named it and it was not
    /// given back since), and the kernel wrote its first `len` bytes.
    pub(crate) unsafe fn bytes(&self, id: u16, len: usize) -> &[u8] {
        assert!(
            id < BUFFERS && len <= BUFFER_LEN as usize,
            "buffer {id}: {len} bytes"
        );
        // SAFETY: within the mapping (checked above); written by the
        // kernel and owned by the caller, per the contract.
        unsafe { std::slice::from_raw_parts(self.buffer(id), len) }
    }

    /// Hands buffer `id` back to the kernel. Its owner calls this once,
    /// and does not touch the buffer again.
    pub(crate) fn give_back(&self, id: u16) {
        assert!(id < BUFFERS, "buffer {id} is not the pool's");
        let mut tail = lock(&self.tail);
        let index = usize::from(*tail & (BUFFERS - 1));
        // SAFETY: descriptor `index` is in the ring's part of the mapping
        // and outside what the kernel may read (it reads only between its
        // head and the published tail); the lock makes this the only
        // writer. The fields are written one by one, so that the first
        // descriptor's `resv`, the tail, is left alone.
        unsafe {
            let descriptor = self.base.as_ptr().cast::<Descriptor>().add(index);
            std::ptr::addr_of_mut!((*descriptor).addr).write(self.buffer(id) as u64);
            std::ptr::addr_of_mut!((*descriptor).len).write(BUFFER_LEN);
            std::ptr::addr_of_mut!((*descriptor).bid).write(id);
        }
        *tail = tail.wrapping_add(1);
        self.published_tail().store(*tail, Ordering::Release);
    }

    /// A pool that no ring reads, with every buffer handed out as the
    /// kernel would have handed them, for tests that play the kernel.
    #[cfg(test)]
    pub(super) fn unregistered() -> BufPool {
        BufPool::map().expect("an anonymous mapping")
    }

    /// Writes `bytes` into buffer `id`, as the kernel does.
    #[cfg(test)]
    pub(super) fn fill_as_the_kernel(&self, id: u16, bytes: &[u8]) {
        assert!(id < BUFFERS && bytes.len() <= BUFFER_LEN as usize);
        // SAFETY: within the mapping (checked above); the test owns the
        // buffer, as the kernel would.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.buffer(id), bytes.len()) };
    }

    /// How many buffers were given back so far (the published tail).
    #[cfg(test)]
    pub(super) fn given_back(&self) -> u16 {
        self.published_tail().load(Ordering::Acquire)
    }

    fn buffer(&self, id: u16) -> *mut u8 {
        // SAFETY: `id < BUFFERS` (the callers check), so the offset is
        // within the mapping.
        unsafe {
            self.base
                .as_ptr()
                .add(self.buffers_at + usize::from(id) * BUFFER_LEN as usize)
        }
    }

    fn published_tail(&self) -> &AtomicU16 {
        // SAFETY: two bytes inside the mapping, aligned to 2 (the mapping
        // is page aligned, the offset even), read by the kernel and
        // written only here, atomically.
        unsafe { AtomicU16::from_ptr(self.base.as_ptr().add(TAIL_OFFSET).cast()) }
    }
}

impl Drop for BufPool {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `register`, of this length; nothing
        // reads or writes it any more (see the module invariants).
        unsafe { libc::munmap(self.base.as_ptr().cast(), self.mapped) };
    }
}

fn page_size() -> usize {
    // SAFETY: sysconf takes no pointer.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(page).unwrap_or(4096).max(4096)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn descriptor(pool: &BufPool, index: usize) -> (u64, u32, u16) {
        // SAFETY: within the ring's part of the mapping; no other thread.
        unsafe {
            let d = pool.base.as_ptr().cast::<Descriptor>().add(index);
            ((*d).addr, (*d).len, (*d).bid)
        }
    }

    #[test]
    fn buffers_given_back_are_published_at_the_tail_which_wraps() {
        let pool = BufPool::map().unwrap();
        for id in 0..BUFFERS {
            pool.give_back(id);
        }
        assert_eq!(pool.published_tail().load(Ordering::Acquire), BUFFERS);
        let first = descriptor(&pool, 0);
        assert_eq!(first.0, pool.buffer(0) as u64);
        assert_eq!((first.1, first.2), (BUFFER_LEN, 0));
        // The tail, in the first descriptor's last bytes, survived the
        // descriptor's writes.
        pool.give_back(7);
        assert_eq!(pool.published_tail().load(Ordering::Acquire), BUFFERS + 1);
        assert_eq!(descriptor(&pool, 0).2, 7);
        assert_eq!(descriptor(&pool, 0).0, pool.buffer(7) as u64);
        assert_eq!(descriptor(&pool, 1).2, 1);
    }

    #[test]
    #[should_panic(expected = "not the pool's")]
    fn a_buffer_id_out_of_the_pool_is_refused() {
        BufPool::map().unwrap().give_back(BUFFERS);
    }
}
