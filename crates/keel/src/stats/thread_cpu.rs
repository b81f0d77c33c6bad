//! CPU time of threads that are not workers (the tokio side's, see
//! `runtime::tokio_side`; the urgent lane's), read from any thread.
//!
//! Each thread registers its CPU clock when it starts and, when it stops,
//! leaves its final reading behind, so the total covers threads that came
//! and went (tokio's blocking threads do). A clock is read only while its
//! thread is registered, and a thread unregisters under the same lock
//! before it exits, so no read meets a dead thread's clock.

use std::sync::{Mutex, MutexGuard, PoisonError};
use std::thread::{self, ThreadId};
use std::time::Duration;

/// The CPU clocks of a set of threads.
#[derive(Debug, Default)]
pub(crate) struct ThreadCpuClocks {
    clocks: Mutex<Clocks>,
}

#[derive(Debug, Default)]
struct Clocks {
    /// Registered threads that have not stopped, with their CPU clocks.
    live: Vec<(ThreadId, ThreadClock)>,
    /// The CPU of the threads that stopped, ns.
    stopped_ns: u64,
}

impl ThreadCpuClocks {
    /// Adds the calling thread (on a platform without per-thread CPU
    /// clocks, it counts as using none).
    pub(crate) fn register_current(&self) {
        if let Some(clock) = ThreadClock::current() {
            self.lock().live.push((thread::current().id(), clock));
        }
    }

    /// Removes the calling thread, keeping the CPU it used.
    pub(crate) fn unregister_current(&self) {
        let id = thread::current().id();
        let mut clocks = self.lock();
        if let Some(at) = clocks.live.iter().position(|(thread, _)| *thread == id) {
            let (_, clock) = clocks.live.swap_remove(at);
            clocks.stopped_ns += clock.read_ns();
        }
    }

    /// CPU time of every thread registered, running or stopped.
    pub(crate) fn total(&self) -> Duration {
        let clocks = self.lock();
        let live: u64 = clocks.live.iter().map(|(_, clock)| clock.read_ns()).sum();
        Duration::from_nanos(clocks.stopped_ns + live)
    }

    /// Threads registered and not stopped.
    #[cfg_attr(not(feature = "tokio-context"), allow(dead_code))]
    pub(crate) fn live(&self) -> usize {
        self.lock().live.len()
    }

    fn lock(&self) -> MutexGuard<'_, Clocks> {
        // Plain bookkeeping, left consistent by every writer.
        self.clocks.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A thread's CPU clock, which any thread may read while it lives.
#[derive(Debug, Clone, Copy)]
struct ThreadClock(#[cfg(all(target_os = "linux", not(miri)))] libc::clockid_t);

impl ThreadClock {
    /// The calling thread's clock; `None` where there is none (and under
    /// Miri, which does not emulate it).
    fn current() -> Option<ThreadClock> {
        #[cfg(all(target_os = "linux", not(miri)))]
        {
            let mut clock: libc::clockid_t = 0;
            // SAFETY: `pthread_self()` is the calling thread, which is
            // alive for the call, and `clock` is writable.
            let rc = unsafe { libc::pthread_getcpuclockid(libc::pthread_self(), &mut clock) };
            (rc == 0).then_some(ThreadClock(clock))
        }
        #[cfg(not(all(target_os = "linux", not(miri))))]
        {
            None
        }
    }

    /// The CPU time of the clock's thread, ns; zero if the read fails.
    fn read_ns(self) -> u64 {
        #[cfg(all(target_os = "linux", not(miri)))]
        {
            let mut ts = libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            // SAFETY: `ts` is a valid, writable timespec, and the clock is
            // that of a thread still registered, hence alive (see the
            // module docs).
            let rc = unsafe { libc::clock_gettime(self.0, &mut ts) };
            if rc == 0 {
                let secs = u64::try_from(ts.tv_sec).unwrap_or(0);
                let nanos = u64::try_from(ts.tv_nsec).unwrap_or(0);
                return secs.saturating_mul(1_000_000_000).saturating_add(nanos);
            }
            0
        }
        #[cfg(not(all(target_os = "linux", not(miri))))]
        {
            0
        }
    }
}

#[cfg(all(test, target_os = "linux", not(miri)))]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// Spins until the calling thread has used `cpu` of CPU time.
    fn burn(cpu: Duration) {
        let start = crate::stats::account::thread_cpu_ns();
        let want = u64::try_from(cpu.as_nanos()).unwrap();
        while crate::stats::account::thread_cpu_ns() - start < want {
            std::hint::black_box(0u64);
        }
    }

    #[test]
    fn counts_running_and_stopped_threads() {
        let clocks = Arc::new(ThreadCpuClocks::default());
        let (registered, wait) = std::sync::mpsc::channel();
        let (release, go) = std::sync::mpsc::channel::<()>();
        let running = {
            let clocks = clocks.clone();
            thread::spawn(move || {
                clocks.register_current();
                burn(Duration::from_millis(30));
                registered.send(()).unwrap();
                go.recv().unwrap();
                clocks.unregister_current();
            })
        };
        wait.recv().unwrap();
        assert_eq!(clocks.live(), 1);
        let while_running = clocks.total();
        assert!(
            while_running >= Duration::from_millis(30),
            "a running thread's clock read {while_running:?}"
        );
        release.send(()).unwrap();
        running.join().unwrap();
        assert_eq!(clocks.live(), 0);
        let after = clocks.total();
        assert!(after >= while_running, "{after:?} < {while_running:?}");
        // A second thread adds to what the first left behind.
        let clocks2 = clocks.clone();
        thread::spawn(move || {
            clocks2.register_current();
            burn(Duration::from_millis(20));
            clocks2.unregister_current();
        })
        .join()
        .unwrap();
        assert!(clocks.total() >= after + Duration::from_millis(20));
    }

    #[test]
    fn an_unregistered_thread_changes_nothing() {
        let clocks = ThreadCpuClocks::default();
        clocks.unregister_current();
        assert_eq!(clocks.total(), Duration::ZERO);
        assert_eq!(clocks.live(), 0);
    }
}
