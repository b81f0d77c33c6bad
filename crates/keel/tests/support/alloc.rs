//! An allocator that notes the largest single allocation, in the whole
//! process and on each thread, for the fuzz tests that bound what hostile
//! input can make the code allocate. A test binary installs it with
//!
//! ```ignore
//! #[global_allocator]
//! static ALLOCATOR: Largest = Largest;
//! ```

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The system allocator, noting the largest single allocation.
pub struct Largest;

static LARGEST: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    // A `Cell` of an integer, initialised by a constant: reading it
    // allocates nothing and it has no destructor, so the allocator may
    // use it on any thread at any time.
    static THREAD_LARGEST: Cell<usize> = const { Cell::new(0) };
}

/// The largest allocation (or reallocation) since the process started,
/// in bytes, on any thread.
pub fn largest_allocation() -> usize {
    LARGEST.load(Ordering::Relaxed)
}

/// The largest allocation on this thread since [`reset_thread_largest`]
/// (or since the thread started).
pub fn thread_largest() -> usize {
    THREAD_LARGEST.with(Cell::get)
}

/// Forgets this thread's largest allocation so far.
pub fn reset_thread_largest() {
    THREAD_LARGEST.with(|largest| largest.set(0));
}

fn note(size: usize) {
    LARGEST.fetch_max(size, Ordering::Relaxed);
    let _ = THREAD_LARGEST.try_with(|largest| largest.set(largest.get().max(size)));
}

// SAFETY: every call is passed to the system allocator unchanged; the
// only additions are an atomic maximum and a thread-local one, neither of
// which allocates.
unsafe impl GlobalAlloc for Largest {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: the caller's contract for `alloc` is passed on.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: the caller's contract for `alloc_zeroed` is passed on.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract for `dealloc` is passed on.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(new_size);
        // SAFETY: the caller's contract for `realloc` is passed on.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}
