//! Unit tests of the pool that need its internals: thread starts that the
//! OS refuses, simulated through `Pool::fail_starts`.

use std::io;
use std::sync::atomic::Ordering::SeqCst;
use std::sync::mpsc;
use std::time::Duration;

use crate::Runtime;

/// How long a test waits for anything before it fails instead of hanging.
const WATCHDOG: Duration = Duration::from_secs(30);

fn runtime(max_threads: usize, queue: usize) -> Runtime {
    Runtime::builder()
        .workers(1)
        .max_blocking_threads(max_threads)
        .blocking_queue(queue)
        .build()
        .unwrap()
}

/// Runs `f` on another thread and fails if it does not finish in time.
fn within<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(WATCHDOG)
        .expect("did not finish in time: a job hangs")
}

#[test]
fn a_job_is_rejected_with_the_os_error_when_no_thread_is_alive_or_can_start() {
    within(|| {
        let rt = runtime(4, 16);
        rt.handle().shared.blocking.fail_starts.store(1, SeqCst);
        let ran = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = ran.clone();
        let job = rt.spawn_blocking(move || flag.store(true, SeqCst));
        assert!(
            job.is_finished(),
            "a job no thread will take must resolve at once"
        );
        let error = rt.block_on(job).unwrap_err();
        assert!(error.is_rejected(), "{error}");
        let message = error.to_string();
        assert!(message.contains("could not start a thread"), "{message}");
        let expected = io::Error::from_raw_os_error(libc::EAGAIN).to_string();
        assert!(message.contains(&expected), "{message} lacks {expected:?}");
        assert_eq!(io::Error::from(error).kind(), io::ErrorKind::WouldBlock);
        assert!(!ran.load(SeqCst), "a rejected job ran");
        let stats = rt.stats().blocking;
        assert_eq!((stats.threads, stats.queued, stats.rejected), (0, 0, 1));

        // The OS lets threads start again: so does the pool.
        assert_eq!(rt.block_on(rt.spawn_blocking(|| 7)).unwrap(), 7);
    });
}

#[test]
fn unblock_fails_with_the_os_error_when_no_thread_is_alive_or_can_start() {
    within(|| {
        let rt = runtime(4, 16);
        rt.handle().shared.blocking.fail_starts.store(1, SeqCst);
        let result = rt.block_on(rt.handle().unblock(|| 1));
        let error = result.expect_err("no thread could run the job");
        assert_eq!(error.kind(), io::ErrorKind::WouldBlock, "{error}");
        assert!(
            error.to_string().contains("could not start a thread"),
            "{error}"
        );
        assert_eq!(rt.stats().blocking.waiting, 0);
        assert_eq!(rt.block_on(rt.handle().unblock(|| 2)).unwrap(), 2);
    });
}

#[test]
fn a_job_whose_thread_cannot_start_waits_for_a_thread_that_is_alive() {
    within(|| {
        let rt = runtime(2, 16);
        let (release, gate) = mpsc::channel::<()>();
        let (started_tx, started) = mpsc::channel();
        let first = rt.spawn_blocking(move || {
            started_tx.send(()).unwrap();
            gate.recv_timeout(WATCHDOG).unwrap();
            1
        });
        started.recv_timeout(WATCHDOG).unwrap();

        // A second thread may start, but the OS refuses it: the job waits
        // in the queue for the thread that is alive.
        rt.handle().shared.blocking.fail_starts.store(1, SeqCst);
        let second = rt.spawn_blocking(|| 2);
        assert_eq!(rt.handle().shared.blocking.fail_starts.load(SeqCst), 0);
        let stats = rt.stats().blocking;
        assert_eq!((stats.threads, stats.queued, stats.rejected), (1, 1, 0));
        assert!(!second.is_finished());

        release.send(()).unwrap();
        assert_eq!(rt.block_on(first).unwrap(), 1);
        assert_eq!(rt.block_on(second).unwrap(), 2);
    });
}

#[test]
fn a_queued_job_never_hangs_when_every_later_start_fails() {
    within(|| {
        let rt = runtime(3, 16);
        let (release, gate) = mpsc::channel::<()>();
        let (started_tx, started) = mpsc::channel();
        let first = rt.spawn_blocking(move || {
            started_tx.send(()).unwrap();
            gate.recv_timeout(WATCHDOG).unwrap();
        });
        started.recv_timeout(WATCHDOG).unwrap();
        rt.handle()
            .shared
            .blocking
            .fail_starts
            .store(usize::MAX, SeqCst);
        let queued: Vec<_> = (0..5).map(|i| rt.spawn_blocking(move || i)).collect();
        assert_eq!(rt.stats().blocking.queued, 5);
        release.send(()).unwrap();
        rt.block_on(first).unwrap();
        for (i, job) in queued.into_iter().enumerate() {
            assert_eq!(rt.block_on(job).unwrap(), i);
        }
        rt.handle().shared.blocking.fail_starts.store(0, SeqCst);
    });
}
