//! `PreemptMeter`: how long the OS held the calling thread off its core
//! against its will, read without a system call.
//!
//! The scheduler charges a class for the time its polls held a worker
//! (see `sched::class`). On a machine with more runnable threads than
//! cores, part of a poll's wall time is not the poll's at all: the kernel
//! preempted the worker and ran someone else. Charged at wall time, a
//! class whose short poll was preempted for a 4 ms time slice pays for
//! those 4 ms and then waits behind the others until they catch up. The
//! meter measures that time so the worker can subtract it.
//!
//! # How
//!
//! The thread opens a software perf event on itself that counts nothing
//! but asks the kernel to log its context switches (`context_switch`)
//! with a `CLOCK_MONOTONIC` timestamp into a ring buffer mapped into the
//! process. The kernel writes a *switch-out* record when the thread leaves
//! its core, flagged *preempt* when it was still runnable (the kernel took
//! the core; a thread that blocks on a lock, a file or a sleep leaves
//! voluntarily and is not flagged), and a *switch-in* record when it is
//! back. Reading the ring is a load of its head: when the head has not
//! moved since the poll began, the poll ran without a switch, which is the
//! common case and costs one load. When it moved, the records between are
//! walked and the gaps from each preempt switch-out to the next switch-in
//! are summed.
//!
//! The sum is exact per poll, not sampled: each poll gets its own
//! preempted time, so the correction does not depend on how long polls
//! are. (A run delay sampled from `/proc` at intervals and charged to
//! whichever poll was running would credit the time to the polls most
//! likely to span a sample, the long ones, and tilt the split toward
//! them.) Voluntary waits stay charged: a poll that blocks holds its
//! worker as surely as one that computes.
//!
//! # When it is unavailable
//!
//! `perf_event_open` may be refused (a seccomp filter in a container, a
//! `perf_event_paranoid` above 2, a kernel without perf events, a system
//! other than Linux, Miri, which runs no system call it does not
//! emulate). [`PreemptMeter::open`] then fails and the worker
//! charges wall time, as it would without the meter; the stats say which
//! (a worker's `preempted` is `None`). A ring that overflows (more than
//! [`RING_PAGES`] pages of switches between two reads) loses records; the
//! kernel says so with a *lost* record, and that read reports nothing
//! rather than a wrong figure.

use std::io;

/// Pages of switch records (32 KiB: some 1,000 switches between two reads;
/// a worker reads at the start and end of every poll and after parking).
#[cfg_attr(any(loom, miri), allow(dead_code))]
pub(crate) const RING_PAGES: usize = 8;

/// A thread's view of its own context switches; see the module docs.
/// Belongs to the thread that opened it: the records are that thread's.
#[derive(Debug)]
pub(crate) struct PreemptMeter {
    #[cfg(all(target_os = "linux", not(loom), not(miri)))]
    ring: sys::Ring,
    /// How far the records have been read (the ring's tail).
    #[cfg(all(target_os = "linux", not(loom), not(miri)))]
    tail: u64,
}

impl PreemptMeter {
    /// Opens a meter for the calling thread.
    ///
    /// # Errors
    ///
    /// When the kernel refuses the perf event or its ring buffer (see the
    /// module docs), or on a system other than Linux.
    pub(crate) fn open() -> io::Result<PreemptMeter> {
        #[cfg(all(target_os = "linux", not(loom), not(miri)))]
        {
            let ring = sys::Ring::open(RING_PAGES)?;
            let tail = ring.head();
            Ok(PreemptMeter { ring, tail })
        }
        #[cfg(not(all(target_os = "linux", not(loom), not(miri))))]
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "the preemption meter needs Linux perf events (and not Miri)",
        ))
    }

    /// Forgets the switches logged so far: call where a measured interval
    /// begins (a poll's start).
    pub(crate) fn mark(&mut self) {
        #[cfg(all(target_os = "linux", not(loom), not(miri)))]
        {
            let head = self.ring.head();
            if head != self.tail {
                self.tail = head;
                self.ring.release(head);
            }
        }
    }

    /// Nanoseconds the thread spent preempted since the last
    /// [`mark`](Self::mark) (or read), and marks again. `None` if the
    /// kernel lost records in between (the ring overflowed).
    pub(crate) fn preempted(&mut self) -> Option<u64> {
        #[cfg(all(target_os = "linux", not(loom), not(miri)))]
        {
            let head = self.ring.head();
            if head == self.tail {
                return Some(0);
            }
            let total = self.ring.preempted_between(self.tail, head);
            self.tail = head;
            self.ring.release(head);
            total
        }
        #[cfg(not(all(target_os = "linux", not(loom), not(miri))))]
        Some(0)
    }
}

/// Reading switch records out of a perf ring's record pages: the part of
/// the meter with no system call, so that it runs, and is tested, under
/// Miri too.
#[cfg_attr(any(loom, miri, not(target_os = "linux")), allow(dead_code))]
mod records {
    const PERF_RECORD_LOST: u32 = 2;
    const PERF_RECORD_SWITCH: u32 = 14;
    const MISC_SWITCH_OUT: u16 = 1 << 13;
    const MISC_SWITCH_OUT_PREEMPT: u16 = 1 << 14;

    /// The record pages of a ring: `size` bytes at `data`, which the
    /// kernel fills with 8-byte-aligned, 8-byte-sized records, wrapping
    /// at the end.
    #[derive(Debug)]
    pub(super) struct Records {
        data: *const u8,
        /// Bytes of records (a power of two).
        size: u64,
    }

    impl Records {
        /// A view of `size` bytes of records at `data`.
        ///
        /// # Safety
        ///
        /// `data` must be 8-byte aligned, `size` a power of two of at
        /// least 8, and the `size` bytes at `data` readable for as long
        /// as the view is used.
        pub(super) unsafe fn new(data: *const u8, size: u64) -> Records {
            debug_assert!(size.is_power_of_two() && size >= 8 && data.cast::<u64>().is_aligned());
            Records { data, size }
        }

        /// The u64 at byte `at` of the records (wrapping).
        fn word(&self, at: u64) -> u64 {
            let offset = (at % self.size) as usize;
            // SAFETY: records are 8-byte aligned and sized, so a word read
            // at a record's start or body never straddles the end of the
            // pages (`size` is a multiple of 8 and `data` is aligned, as
            // `new` requires); `offset` is below `size`; and the pages are
            // readable while `self` is used. Volatile: the kernel writes
            // them behind the compiler's back (never below the tail we
            // released, so never the words read here).
            unsafe { self.data.add(offset).cast::<u64>().read_volatile() }
        }

        /// Preempted nanoseconds in the records from byte `from` to `to`
        /// (positions that only grow; the pages wrap), or `None` if the
        /// kernel lost records there or a header is corrupt.
        pub(super) fn preempted_between(&self, from: u64, to: u64) -> Option<u64> {
            let mut at = from;
            let mut out_at: Option<u64> = None;
            let mut total = 0u64;
            while at < to {
                let header = self.word(at);
                let kind = header as u32;
                let misc = (header >> 32) as u16;
                let size = u64::from((header >> 48) as u16);
                if size < 8 {
                    // A corrupt header would loop forever: give up.
                    return None;
                }
                match kind {
                    PERF_RECORD_LOST => return None,
                    PERF_RECORD_SWITCH if size >= 16 => {
                        // With `sample_id_all` and only TIME sampled, the
                        // record's body is its timestamp.
                        let time = self.word(at + 8);
                        if misc & MISC_SWITCH_OUT != 0 {
                            out_at = (misc & MISC_SWITCH_OUT_PREEMPT != 0).then_some(time);
                        } else if let Some(out) = out_at.take() {
                            total += time.saturating_sub(out);
                        }
                    }
                    _ => {}
                }
                at += size;
            }
            Some(total)
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        /// A record header: kind, misc flags, size.
        fn header(kind: u32, misc: u16, size: u16) -> u64 {
            u64::from(kind) | (u64::from(misc) << 32) | (u64::from(size) << 48)
        }

        fn switch_out(preempted: bool) -> u64 {
            let misc = MISC_SWITCH_OUT
                | if preempted {
                    MISC_SWITCH_OUT_PREEMPT
                } else {
                    0
                };
            header(PERF_RECORD_SWITCH, misc, 16)
        }

        /// Writes `words` into a ring of `slots` words from word `start`,
        /// wrapping, and reads the preempted time over them.
        fn read(slots: usize, start: usize, words: &[u64]) -> Option<u64> {
            let mut ring = vec![0u64; slots];
            for (i, &word) in words.iter().enumerate() {
                ring[(start + i) % slots] = word;
            }
            // SAFETY: a Vec<u64> is 8-byte aligned; `slots` is a power of
            // two; the vector outlives the view.
            let records = unsafe { Records::new(ring.as_ptr().cast(), (slots * 8) as u64) };
            let from = (start * 8) as u64;
            records.preempted_between(from, from + (words.len() * 8) as u64)
        }

        /// A preempted switch-out counts until the next switch-in; a
        /// voluntary one does not; other records are skipped by their size.
        #[test]
        fn preempted_gaps_are_summed_and_voluntary_ones_are_not() {
            let words = [
                switch_out(true),
                100,
                header(PERF_RECORD_SWITCH, 0, 16),
                250,
                header(3, 0, 24), // another kind of record, 24 bytes
                0,
                0,
                switch_out(false),
                300,
                header(PERF_RECORD_SWITCH, 0, 16),
                900,
                switch_out(true),
                1_000,
                header(PERF_RECORD_SWITCH, 0, 16),
                1_040,
            ];
            assert_eq!(read(16, 0, &words), Some(150 + 40));
            // The same records across the end of the pages.
            assert_eq!(read(16, 9, &words), Some(150 + 40));
        }

        /// Lost records, or a header whose size is corrupt, give no figure.
        #[test]
        fn lost_records_and_corrupt_headers_give_none() {
            let lost = [switch_out(true), 100, header(PERF_RECORD_LOST, 0, 24), 0, 0];
            assert_eq!(read(8, 0, &lost), None);
            let corrupt = [header(PERF_RECORD_SWITCH, 0, 0)];
            assert_eq!(read(8, 0, &corrupt), None);
            assert_eq!(read(8, 0, &[]), Some(0));
        }
    }
}

#[cfg(all(target_os = "linux", not(loom), not(miri)))]
mod sys {
    //! The perf event, its mapping, and the record format (from
    //! `linux/perf_event.h`, which `libc` does not carry).

    use std::io;
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    use std::sync::atomic::{AtomicU64, Ordering};

    use super::records::Records;

    const PERF_TYPE_SOFTWARE: u32 = 1;
    const PERF_COUNT_SW_DUMMY: u64 = 9;
    const PERF_SAMPLE_TIME: u64 = 1 << 2;
    /// `perf_event_attr` as of `PERF_ATTR_SIZE_VER5`.
    const ATTR_SIZE: u32 = 112;

    // Bits of the attribute's flag word.
    const DISABLED: u64 = 1 << 0;
    const EXCLUDE_KERNEL: u64 = 1 << 5;
    const EXCLUDE_HV: u64 = 1 << 6;
    const WATERMARK: u64 = 1 << 14;
    const SAMPLE_ID_ALL: u64 = 1 << 18;
    const USE_CLOCKID: u64 = 1 << 25;
    const CONTEXT_SWITCH: u64 = 1 << 26;

    /// `PERF_FLAG_FD_CLOEXEC`: the descriptor is not inherited by programs
    /// the process executes.
    const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 1 << 3;

    /// `PERF_EVENT_IOC_ENABLE`.
    const IOC_ENABLE: libc::c_ulong = 0x2400;

    /// Offsets of `data_head` and `data_tail` in the first (control) page.
    const DATA_HEAD: usize = 1024;
    const DATA_TAIL: usize = 1032;

    /// `struct perf_event_attr`, version 5.
    #[repr(C)]
    #[derive(Default)]
    struct Attr {
        kind: u32,
        size: u32,
        config: u64,
        sample_period: u64,
        sample_type: u64,
        read_format: u64,
        flags: u64,
        wakeup_watermark: u32,
        bp_type: u32,
        config1: u64,
        config2: u64,
        branch_sample_type: u64,
        sample_regs_user: u64,
        sample_stack_user: u32,
        clockid: i32,
        sample_regs_intr: u64,
        aux_watermark: u32,
        sample_max_stack: u16,
        reserved: u16,
    }

    /// The event and its mapped ring: one control page, then `pages` of
    /// records.
    #[derive(Debug)]
    pub(super) struct Ring {
        base: *mut u8,
        len: usize,
        /// The record pages, after the control page.
        records: Records,
        _fd: OwnedFd,
    }

    // SAFETY: the mapping is owned by the `Ring` and unmapped only by its
    // drop; moving it to another thread moves that ownership. (The records
    // are those of the thread that opened the event, which is why the
    // meter is only used by that thread; a move is harmless, not wrong.)
    unsafe impl Send for Ring {}

    impl Ring {
        pub(super) fn open(pages: usize) -> io::Result<Ring> {
            assert!(pages.is_power_of_two(), "the ring must be 2^n pages");
            let attr = Attr {
                kind: PERF_TYPE_SOFTWARE,
                size: ATTR_SIZE,
                config: PERF_COUNT_SW_DUMMY,
                sample_type: PERF_SAMPLE_TIME,
                flags: DISABLED
                    | EXCLUDE_KERNEL
                    | EXCLUDE_HV
                    | WATERMARK
                    | SAMPLE_ID_ALL
                    | USE_CLOCKID
                    | CONTEXT_SWITCH,
                // Nobody waits on the event: never wake anyone.
                wakeup_watermark: u32::MAX,
                clockid: libc::CLOCK_MONOTONIC,
                ..Attr::default()
            };
            // SAFETY: `attr` is a valid, initialised `perf_event_attr` of the
            // size it declares, and outlives the call; pid 0 and cpu -1 ask
            // for the calling thread on any CPU, with no group.
            let fd = unsafe {
                libc::syscall(
                    libc::SYS_perf_event_open,
                    &attr as *const Attr,
                    0,
                    -1,
                    -1,
                    PERF_FLAG_FD_CLOEXEC,
                )
            };
            if fd < 0 {
                return Err(io::Error::last_os_error());
            }
            // SAFETY: the system call returned a new descriptor that nothing
            // else owns.
            let fd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
            // SAFETY: sysconf has no memory-safety preconditions.
            let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
            let len = page * (pages + 1);
            // SAFETY: a fresh shared mapping of the event's fd; the kernel
            // decides its contents and nothing aliases it yet.
            let base = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_SHARED,
                    fd.as_raw_fd(),
                    0,
                )
            };
            if base == libc::MAP_FAILED {
                return Err(io::Error::last_os_error());
            }
            let base: *mut u8 = base.cast();
            let ring = Ring {
                base,
                len,
                // SAFETY: the record pages follow the control page inside
                // the mapping, which lives as long as the ring; they hold
                // `page * pages` bytes, a power of two (both are), and
                // start page-aligned.
                records: unsafe { Records::new(base.add(page), (page * pages) as u64) },
                _fd: fd,
            };
            // SAFETY: an ioctl on the event's own fd with no argument.
            if unsafe { libc::ioctl(ring._fd.as_raw_fd(), IOC_ENABLE, 0) } != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(ring)
        }

        fn control(&self, offset: usize) -> &AtomicU64 {
            // SAFETY: `offset` is one of the two 8-byte-aligned fields of
            // the control page, which stays mapped while `self` lives; the
            // kernel and this thread access them only as whole u64s.
            unsafe { &*self.base.add(offset).cast::<AtomicU64>() }
        }

        /// How far the kernel has written.
        pub(super) fn head(&self) -> u64 {
            // Acquire: the records up to the head are visible once it is.
            self.control(DATA_HEAD).load(Ordering::Acquire)
        }

        /// Tells the kernel the records up to `tail` may be overwritten.
        pub(super) fn release(&self, tail: u64) {
            self.control(DATA_TAIL).store(tail, Ordering::Release);
        }

        /// Preempted nanoseconds in the records from `from` to `to`, or
        /// `None` if some were lost.
        pub(super) fn preempted_between(&self, from: u64, to: u64) -> Option<u64> {
            self.records.preempted_between(from, to)
        }
    }

    impl Drop for Ring {
        fn drop(&mut self) {
            // SAFETY: `base` and `len` are the mapping made in `open`, and
            // no reference into it outlives `self`.
            unsafe {
                libc::munmap(self.base.cast(), self.len);
            }
        }
    }
}

#[cfg(all(test, target_os = "linux", not(loom)))]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    fn pin_to(cpu: usize) {
        // SAFETY: a zeroed cpu_set_t is a valid empty set, and the call
        // only reads it.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(cpu, &mut set);
            libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set);
        }
    }

    fn spin(d: Duration) {
        let end = Instant::now() + d;
        while Instant::now() < end {
            std::hint::spin_loop();
        }
    }

    #[test]
    #[cfg_attr(miri, ignore = "perf events: Miri emulates no perf_event_open")]
    fn a_voluntary_sleep_is_not_preemption() {
        let mut meter = PreemptMeter::open().expect("perf events are permitted here");
        meter.mark();
        for _ in 0..20 {
            std::thread::sleep(Duration::from_millis(1));
        }
        // Twenty switches out and in, for 20 ms asleep. Were a sleep
        // counted as preemption, the 20 ms would be. A real preemption may
        // still follow a wake on a loaded machine (the tests beside this
        // one), for a scheduler slice at most, far less than the sleeps.
        let preempted = meter.preempted().expect("no records lost");
        assert!(
            preempted < 10_000_000,
            "{preempted} ns preempted over twenty 1 ms sleeps: the sleeps were counted"
        );
    }

    #[test]
    #[cfg_attr(miri, ignore = "perf events: Miri emulates no perf_event_open")]
    fn a_competitor_on_the_same_core_shows_as_preempted_time() {
        let mut meter = PreemptMeter::open().expect("perf events are permitted here");
        pin_to(0);
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let competitor = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                pin_to(0);
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    std::hint::spin_loop();
                }
            })
        };
        meter.mark();
        let start = Instant::now();
        spin(Duration::from_millis(300));
        let wall = start.elapsed().as_nanos() as u64;
        let preempted = meter.preempted().expect("no records lost");
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        competitor.join().unwrap();
        // Two spinners share one core: the kernel runs each about half the
        // time. A wide margin: any sizeable share proves the time is seen,
        // and the preempted time cannot exceed the wall time.
        assert!(
            preempted > wall / 5 && preempted < wall,
            "preempted {preempted} ns of {wall} ns"
        );
    }
}
