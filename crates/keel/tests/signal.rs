//! Signals as futures. Each test uses its own signal: signals are
//! process-wide and the tests of this file run in parallel.

use std::io::ErrorKind;
use std::time::Duration;

use keel::signal::unix::{signal, SignalKind};
use keel::time::timeout;
use support::runtime;

mod support;

/// Sends `signum` to this process.
fn raise(signum: i32) {
    // SAFETY: raise(3) has no memory-safety preconditions; every test
    // installs a listener for the signal before raising it.
    assert_eq!(unsafe { libc::raise(signum) }, 0);
}

/// Long enough to be sure on a loaded machine.
const PATIENCE: Duration = Duration::from_secs(10);

#[test]
fn a_signal_wakes_the_task_waiting_for_it() {
    let rt = runtime();
    rt.block_on(async {
        let mut usr1 = signal(SignalKind::user_defined1()).unwrap();
        assert_eq!(usr1.kind(), SignalKind::user_defined1());
        let waiter = keel::spawn(async move {
            usr1.recv().await.unwrap();
            usr1
        });
        raise(libc::SIGUSR1);
        let mut usr1 = timeout(PATIENCE, waiter).await.unwrap().unwrap();
        // And the next one too.
        raise(libc::SIGUSR1);
        timeout(PATIENCE, usr1.recv()).await.unwrap().unwrap();
    });
}

#[test]
fn deliveries_before_a_recv_merge_into_one() {
    let rt = runtime();
    rt.block_on(async {
        let mut hup = signal(SignalKind::hangup()).unwrap();
        for _ in 0..3 {
            raise(libc::SIGHUP);
        }
        timeout(PATIENCE, hup.recv()).await.unwrap().unwrap();
        // All three were taken by that one recv (each wrote one byte, and a
        // recv reads up to 64): nothing more is pending.
        assert!(timeout(Duration::from_millis(50), hup.recv())
            .await
            .is_err());
    });
}

#[test]
fn a_signal_registered_twice_wakes_both_listeners_and_one_may_leave() {
    let rt = runtime();
    rt.block_on(async {
        let mut first = signal(SignalKind::user_defined2()).unwrap();
        let mut second = signal(SignalKind::user_defined2()).unwrap();
        raise(libc::SIGUSR2);
        timeout(PATIENCE, first.recv()).await.unwrap().unwrap();
        timeout(PATIENCE, second.recv()).await.unwrap().unwrap();
        // Dropping one listener leaves the other working.
        drop(first);
        raise(libc::SIGUSR2);
        timeout(PATIENCE, second.recv()).await.unwrap().unwrap();
    });
}

#[test]
fn signals_that_cannot_be_listened_for_are_refused_without_a_panic() {
    let rt = runtime();
    rt.block_on(async {
        for signum in [
            libc::SIGKILL,
            libc::SIGSTOP,
            libc::SIGSEGV,
            libc::SIGILL,
            libc::SIGFPE,
        ] {
            let error = signal(SignalKind::from_raw(signum)).unwrap_err();
            assert_eq!(error.kind(), ErrorKind::InvalidInput, "{signum}: {error}");
            assert!(error.to_string().contains(&signum.to_string()), "{error}");
        }
        for signum in [0, -1, 9999] {
            let error = signal(SignalKind::from_raw(signum)).unwrap_err();
            assert_eq!(error.kind(), ErrorKind::InvalidInput, "{signum}: {error}");
        }
        // Still serving: a good signal works after the refusals.
        let mut winch = signal(SignalKind::window_change()).unwrap();
        raise(libc::SIGWINCH);
        timeout(PATIENCE, winch.recv()).await.unwrap().unwrap();
    });
}

#[test]
fn ctrl_c_resolves_on_sigint() {
    let rt = runtime();
    rt.block_on(async {
        // Listening first replaces SIGINT's default action, so raising it
        // below cannot end the test process whatever ctrl_c's timing.
        let _guard = signal(SignalKind::interrupt()).unwrap();
        let ctrl_c = keel::spawn(keel::signal::ctrl_c());
        // ctrl_c listens from its first poll, which the test cannot see:
        // raise until it has resolved (bounded).
        let deadline = std::time::Instant::now() + PATIENCE;
        while !ctrl_c.is_finished() {
            assert!(
                std::time::Instant::now() < deadline,
                "ctrl_c never resolved"
            );
            raise(libc::SIGINT);
            keel::time::sleep(Duration::from_millis(10)).await;
        }
        ctrl_c.await.unwrap().unwrap();
    });
}

#[test]
fn a_listener_ends_with_its_runtime() {
    let rt = runtime();
    let mut alarm = rt.block_on(async { signal(SignalKind::alarm()).unwrap() });
    drop(rt);
    // The runtime is gone: recv says so instead of waiting for ever.
    let other = runtime();
    assert_eq!(other.block_on(alarm.recv()), None);
}

#[test]
fn listening_needs_a_runtime() {
    let error = signal(SignalKind::child()).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Other);
}
