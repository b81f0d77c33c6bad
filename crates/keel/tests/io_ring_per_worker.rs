//! A ring per worker (`Builder::io_ring_per_worker`): a source is watched
//! on the ring of the worker whose task first waits for it, each worker
//! sleeps in its own ring, and a sleeping worker looks after the rings of
//! the workers that run. These tests check that sources wake their tasks
//! while every worker sleeps, wherever they were first waited on (a
//! worker, or a thread outside the runtime), that a worker held by a long
//! poll does not hold its ring's events or receives (nor a poll it pushed
//! just before), that a worker busy with short polls sees its ring's
//! events at the next poll boundary, and that a source
//! closes its socket when dropped, watched or not.
//!
//! These need a ring: where the kernel or a sandbox refuses one, they
//! fail with the reason.

#![cfg(target_os = "linux")]

mod support;

use std::future::Future;
use std::io::{Read, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::task::Poll;
use std::time::Duration;

use keel::io::{AsyncReadExt, AsyncWriteExt, IoBackend};
use keel::net::{TcpListener, TcpStream};
use keel::Runtime;

/// A runtime of `workers` workers with a ring each.
fn per_worker(workers: usize, ring_receives: bool) -> Runtime {
    build_with_rings(
        Runtime::builder()
            .workers(workers)
            .ring_receives(ring_receives),
    )
}

/// `builder`'s runtime on a ring per worker, never spinning; fails with
/// the reason where the ring is refused.
fn build_with_rings(builder: &mut keel::Builder) -> Runtime {
    builder
        .io_backend(IoBackend::Uring)
        .io_ring_per_worker(true)
        .spin(keel::SpinPolicy::None)
        .build()
        .unwrap_or_else(|error| {
            panic!(
                "this test needs io_uring: {error} (probe: {})",
                keel::io::probe_io_uring()
            )
        })
}

/// One worker with a ring, whose looks at IO by interval and by count are
/// put off for an hour: it enters its ring only to sleep, or when a
/// glance finds news there.
fn one_worker_that_never_looks() -> Runtime {
    build_with_rings(
        Runtime::builder()
            .workers(1)
            .io_interval(Duration::from_secs(3600))
            .io_every(u32::MAX),
    )
}

/// A loopback connection: the peer's end, and the accepted end.
fn pair() -> (std::net::TcpStream, std::net::TcpStream) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let peer = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    peer.set_read_timeout(Some(support::WATCHDOG)).unwrap();
    let (accepted, _) = listener.accept().unwrap();
    (peer, accepted)
}

#[test]
fn each_worker_has_a_ring_of_its_own() {
    let rt = per_worker(3, false);
    let io = rt.stats().io;
    // Every kernel since 5.4 maps the two rings together, so each worker
    // glances at its ring.
    assert_eq!((io.rings, io.ring_per_worker, io.glances), (3, true, 3));
    let shared = Runtime::builder()
        .workers(3)
        .io_backend(IoBackend::Uring)
        .io_rings(2)
        .build()
        .unwrap();
    let io = shared.stats().io;
    assert_eq!((io.rings, io.ring_per_worker, io.glances), (2, false, 0));
    let both = Runtime::builder()
        .workers(2)
        .io_rings(2)
        .io_ring_per_worker(true)
        .build()
        .unwrap_err();
    assert_eq!(both.kind(), std::io::ErrorKind::InvalidInput);
    assert!(
        both.to_string().contains("io_rings(2)") && both.to_string().contains("per_worker"),
        "{both}"
    );
    let epoll = Runtime::builder()
        .workers(2)
        .io_backend(IoBackend::Epoll)
        .io_ring_per_worker(true)
        .build()
        .unwrap();
    let io = epoll.stats().io;
    assert_eq!((io.rings, io.ring_per_worker, io.glances), (0, false, 0));
}

/// `KEEL_IO_RINGS=per-worker` asks for a ring per worker unless the
/// builder says otherwise, checked in child processes (the variable is
/// the process's).
#[test]
fn the_environment_asks_for_a_ring_per_worker() {
    let stdout = support::child_output(
        "report_the_ring_layouts",
        &[("KEEL_IO_RINGS", "per-worker")],
    );
    assert_eq!(
        support::reported(&stdout, "layouts: "),
        "default 3 per worker; io_rings(2) 2 shared; io_ring_per_worker(false) 1 shared"
    );
}

/// The child's half of the test above.
#[test]
#[ignore = "run by the_environment_asks_for_a_ring_per_worker in a child process"]
fn report_the_ring_layouts() {
    assert!(
        support::in_child_process(),
        "run only as the child of the_environment_asks_for_a_ring_per_worker"
    );
    let layout = |configure: &dyn Fn(&mut keel::Builder)| {
        let mut builder = Runtime::builder();
        builder.workers(3).io_backend(IoBackend::Uring);
        configure(&mut builder);
        let io = builder.build().unwrap().stats().io;
        let kind = if io.ring_per_worker {
            "per worker"
        } else {
            "shared"
        };
        format!("{} {kind}", io.rings)
    };
    println!(
        "layouts: default {}; io_rings(2) {}; io_ring_per_worker(false) {}",
        layout(&|_| {}),
        layout(&|builder| {
            builder.io_rings(2);
        }),
        layout(&|builder| {
            builder.io_ring_per_worker(false);
        }),
    );
}

/// A server on two workers echoes on connections it accepted, each
/// watched on the ring of the worker that first waited on it; the test
/// writes to each connection in turn after the workers had time to fall
/// asleep in their rings, twice, and waits for the echo.
fn accepted_sources_wake_sleeping_workers(ring_receives: bool) {
    let rt = per_worker(2, ring_receives);
    let listener = rt.block_on(async { TcpListener::bind("127.0.0.1:0").unwrap() });
    let addr = listener.local_addr().unwrap();
    const CONNECTIONS: usize = 8;
    rt.spawn(async move {
        for _ in 0..CONNECTIONS {
            let (mut stream, _) = listener.accept().await.unwrap();
            keel::spawn(async move {
                let mut buf = [0; 2];
                while stream.read_exact(&mut buf).await.is_ok() {
                    stream.write_all(&buf).await.unwrap();
                }
            });
        }
    });
    let mut peers: Vec<_> = (0..CONNECTIONS)
        .map(|_| {
            let peer = std::net::TcpStream::connect(addr).unwrap();
            peer.set_read_timeout(Some(support::WATCHDOG)).unwrap();
            peer
        })
        .collect();
    for round in 0..2u8 {
        for (index, peer) in peers.iter_mut().enumerate() {
            // Long enough for both workers to fall asleep in their rings.
            std::thread::sleep(Duration::from_millis(5));
            let message = [round, index as u8];
            peer.write_all(&message).unwrap();
            let mut echo = [0; 2];
            peer.read_exact(&mut echo).unwrap_or_else(|error| {
                panic!("connection {index}, round {round}: no echo ({error})")
            });
            assert_eq!(echo, message);
        }
    }
}

#[test]
fn accepted_streams_wake_sleeping_workers() {
    accepted_sources_wake_sleeping_workers(false);
}

#[test]
fn accepted_streams_with_ring_receives_wake_sleeping_workers() {
    accepted_sources_wake_sleeping_workers(true);
}

/// Reads one byte in `block_on` (outside the workers) from a new stream
/// whose peer writes `byte` after `delay`; says what went wrong, if
/// anything (the read bounded by the watchdog).
fn read_outside(rt: &Runtime, byte: u8, delay: Duration) -> Result<(), String> {
    let (mut peer, accepted) = pair();
    let mut stream = {
        let _entered = rt.handle().enter();
        TcpStream::from_std(accepted).unwrap()
    };
    let writer = std::thread::spawn(move || {
        std::thread::sleep(delay);
        peer.write_all(&[byte]).unwrap();
        peer
    });
    let mut read = [0];
    let outcome = rt.block_on(keel::time::timeout(
        support::WATCHDOG,
        stream.read_exact(&mut read),
    ));
    drop(writer.join().unwrap());
    match outcome {
        Ok(Ok(())) if read == [byte] => Ok(()),
        Ok(Ok(())) => Err(format!("read {read:?}, not {byte}")),
        Ok(Err(error)) => Err(error.to_string()),
        Err(_) => Err("the read was never woken".into()),
    }
}

/// A stream first waited on outside the runtime (in `block_on`) is
/// watched, or its receive submitted, by a worker's ring, which the wait
/// wakes while every worker sleeps.
fn a_stream_read_outside_wakes_a_sleeping_worker(ring_receives: bool) {
    let rt = per_worker(2, ring_receives);
    for round in 0..8u8 {
        // Long enough for the read to wait and the workers to sleep.
        read_outside(&rt, round, Duration::from_millis(5))
            .unwrap_or_else(|why| panic!("round {round}: {why}"));
    }
}

#[test]
fn a_stream_read_outside_the_runtime_wakes_a_sleeping_worker() {
    a_stream_read_outside_wakes_a_sleeping_worker(false);
}

#[test]
fn a_receive_queued_outside_the_runtime_wakes_a_sleeping_worker() {
    a_stream_read_outside_wakes_a_sleeping_worker(true);
}

/// How the holding task first waits on its stream in [`held_worker`].
#[derive(Clone, Copy)]
enum FirstWait {
    /// A read under a 2 ms timeout: the worker parks (and so enters its
    /// ring) before the hold.
    Timeout,
    /// One poll of a read, then the hold at once: the stream's poll is
    /// pushed to the worker's ring for its next enter, which does not come
    /// before the hold.
    OnePoll,
}

/// A task waits on a stream (so the stream is watched on its worker's
/// ring), hands it to a reader, and then holds its worker in one long
/// poll until the reader has echoed twice: the other worker, asleep in its
/// own ring, must serve the busy worker's ring (the events; the poll the
/// busy worker pushed but did not submit; with ring receives the second
/// receive, queued there by the reader's worker), or the echoes never
/// come and the long poll ends at the watchdog.
fn held_worker(ring_receives: bool, first_wait: FirstWait) {
    let rt = per_worker(2, ring_receives);
    let (mut peer, accepted) = pair();
    let (handed_tx, handed_rx) = mpsc::channel();
    let (echoed_tx, echoed_rx) = mpsc::channel::<()>();
    let holder = rt.spawn(async move {
        let mut stream = TcpStream::from_std(accepted).unwrap();
        // Waits on the stream: its watch (or its receive's home) is this
        // worker's ring from now on.
        let mut buf = [0; 1];
        let waited = match first_wait {
            FirstWait::Timeout => {
                let read = stream.read(&mut buf);
                keel::time::timeout(Duration::from_millis(2), read)
                    .await
                    .is_err()
            }
            FirstWait::OnePoll => {
                let mut read = std::pin::pin!(stream.read(&mut buf));
                std::future::poll_fn(|cx| Poll::Ready(read.as_mut().poll(cx).is_pending())).await
            }
        };
        assert!(waited, "nothing was sent yet");
        handed_tx.send(stream).unwrap();
        // One long poll: the worker is held until the echo came back.
        echoed_rx
            .recv_timeout(support::WATCHDOG)
            .expect("the echo never came while this worker was held");
    });
    let mut stream = handed_rx.recv_timeout(support::WATCHDOG).unwrap();
    // Queued from outside: the other worker runs it.
    let reader = rt.spawn(async move {
        let mut byte = [0; 1];
        for _ in 0..2 {
            stream.read_exact(&mut byte).await.unwrap();
            stream.write_all(&byte).await.unwrap();
        }
    });
    let mut echoes = Vec::new();
    let echoed = b"ef".iter().try_for_each(|&byte| {
        // Long enough for the reader to wait and its worker to fall asleep.
        std::thread::sleep(Duration::from_millis(20));
        peer.write_all(&[byte])?;
        let mut echo = [0; 1];
        peer.read_exact(&mut echo)?;
        echoes.push(echo[0]);
        Ok::<_, std::io::Error>(())
    });
    echoed_tx.send(()).unwrap();
    echoed.expect("the echoes, while the stream's worker is held");
    assert_eq!(echoes, b"ef");
    rt.block_on(reader).unwrap();
    rt.block_on(holder).unwrap();
}

#[test]
fn a_long_poll_does_not_hold_its_rings_events() {
    held_worker(false, FirstWait::Timeout);
}

#[test]
fn a_long_poll_does_not_hold_its_rings_receives() {
    held_worker(true, FirstWait::Timeout);
}

/// A worker's first wait on a stream pushes the stream's poll to the
/// worker's own ring without entering the kernel: it goes in with the
/// worker's next look or park. Held by a long poll at once, before
/// either, the worker leaves that poll to the sleeping worker to submit.
#[test]
fn a_poll_pushed_by_a_worker_held_at_once_is_submitted_for_it() {
    held_worker(false, FirstWait::OnePoll);
}

/// A worker kept busy by short polls, its looks at IO by interval and by
/// count put off for an hour, still sees its ring's events at the next
/// poll boundary: a glance at its ring (shared memory, no system call)
/// tells it that a look would find them.
#[test]
fn a_busy_worker_sees_its_rings_events_at_the_next_poll_boundary() {
    let rt = one_worker_that_never_looks();
    let (mut peer, accepted) = pair();
    let (spinning_tx, spinning_rx) = mpsc::channel();
    let (read_tx, read_rx) = mpsc::channel();
    rt.spawn(async move {
        let mut stream = TcpStream::from_std(accepted).unwrap();
        let mut byte = [0; 1];
        // The first wait pushes the stream's poll; the park that waits
        // for the timeout submits it.
        let read = stream.read(&mut byte);
        let timed_out = keel::time::timeout(Duration::from_millis(2), read)
            .await
            .is_err();
        assert!(timed_out, "nothing was sent yet");
        // From here the worker runs short polls without end, and never
        // parks, until the byte is read.
        let done = Arc::new(AtomicBool::new(false));
        let spinner = keel::spawn({
            let done = done.clone();
            async move {
                while !done.load(Ordering::Relaxed) {
                    keel::yield_now().await;
                }
            }
        });
        spinning_tx.send(()).unwrap();
        stream.read_exact(&mut byte).await.unwrap();
        done.store(true, Ordering::Relaxed);
        spinner.await.unwrap();
        read_tx.send(byte[0]).unwrap();
    });
    spinning_rx.recv_timeout(support::WATCHDOG).unwrap();
    peer.write_all(b"g").unwrap();
    let read = read_rx
        .recv_timeout(support::WATCHDOG)
        .expect("the busy worker never saw the stream's event");
    assert_eq!(read, b'g');
}

/// A stream dropped before any task waited on it was never watched; one
/// dropped after a wait (a receive in flight, with ring receives) is
/// cancelled on its ring. Either way its socket closes: the peer reads
/// end of stream after what was written.
#[test]
fn a_stream_dropped_watched_or_not_closes_its_socket() {
    let rt = per_worker(2, true);
    for wait_first in [false, true] {
        let (mut peer, accepted) = pair();
        rt.block_on(rt.spawn(async move {
            let mut stream = TcpStream::from_std(accepted).unwrap();
            if wait_first {
                let mut buf = [0; 1];
                let pending = keel::time::timeout(Duration::from_millis(1), stream.read(&mut buf));
                assert!(pending.await.is_err(), "nothing was sent");
            }
            stream.write_all(b"bye").await.unwrap();
        }))
        .unwrap();
        let mut received = Vec::new();
        peer.read_to_end(&mut received).unwrap_or_else(|error| {
            panic!("waited first: {wait_first}: the socket stayed open ({error})")
        });
        assert_eq!(received, b"bye");
    }
    // The cancelled receive's completion is reaped by its ring's worker,
    // woken by it, a moment after the drop.
    support::wait_until("the cancelled receive is reaped", || {
        rt.stats().io.operations_in_flight == 0
    });
}

/// A stream watched on its worker's ring and dropped there is closed at
/// that ring's next submission, with no system call at the drop. The
/// worker then stays busy with short polls (it never parks), with its
/// looks at IO kept to the default `io_interval`: the close still goes
/// in at its next look, and the peer sees the end while the worker
/// spins. Then the same with the worker held by one long poll (no
/// boundary at all): the sleeping worker, serving the held one's ring,
/// submits it.
#[test]
fn a_stream_closed_on_its_worker_closes_while_the_worker_stays_busy() {
    for held in [false, true] {
        let rt = per_worker(if held { 2 } else { 1 }, false);
        let (mut peer, accepted) = pair();
        let done = Arc::new(AtomicBool::new(false));
        let busy = rt.spawn({
            let done = done.clone();
            async move {
                let mut stream = TcpStream::from_std(accepted).unwrap();
                let mut byte = [0; 1];
                // Watched on this worker's ring: the read waits.
                let read = keel::time::timeout(Duration::from_millis(2), stream.read(&mut byte));
                assert!(read.await.is_err(), "nothing was sent yet");
                drop(stream);
                // Past the peer's read timeout: the close must not wait
                // for this loop to end.
                let deadline = std::time::Instant::now() + 2 * support::WATCHDOG;
                while !done.load(Ordering::Relaxed) && std::time::Instant::now() < deadline {
                    if !held {
                        keel::yield_now().await;
                    }
                }
            }
        });
        let mut rest = Vec::new();
        let closed = peer.read_to_end(&mut rest);
        done.store(true, Ordering::Relaxed);
        rt.block_on(busy).unwrap();
        closed.unwrap_or_else(|error| {
            panic!("held: {held}: the socket stayed open while its worker ran ({error})")
        });
        assert!(rest.is_empty());
    }
}

/// A stream closed on its worker just before the runtime shuts down,
/// which leaves the worker no look to submit the close at (none is due
/// after the poll, and the worker leaves its loop once the poll ends):
/// the ring's drop submits it, and the peer sees the end.
#[test]
fn a_close_queued_at_shutdown_is_submitted_by_the_rings_drop() {
    let rt = one_worker_that_never_looks();
    let (mut peer, accepted) = pair();
    let (dropped_tx, dropped_rx) = mpsc::channel();
    let (hold_tx, hold_rx) = mpsc::channel::<()>();
    rt.spawn(async move {
        let mut stream = TcpStream::from_std(accepted).unwrap();
        let mut byte = [0; 1];
        let read = keel::time::timeout(Duration::from_millis(2), stream.read(&mut byte));
        assert!(read.await.is_err(), "nothing was sent yet");
        drop(stream);
        dropped_tx.send(()).unwrap();
        // Held in this poll until the runtime is being dropped.
        let _ = hold_rx.recv_timeout(Duration::from_millis(200));
    });
    dropped_rx.recv_timeout(support::WATCHDOG).unwrap();
    // The runtime stops while the task still holds its worker: the worker
    // leaves its loop at the end of that poll, with no look after it.
    drop(rt);
    drop(hold_tx);
    let mut rest = Vec::new();
    peer.read_to_end(&mut rest)
        .expect("the socket closed with the runtime");
    assert!(rest.is_empty());
}

/// A listener watched on its worker's ring (it waited for a connection)
/// stops listening when dropped: its address binds again at once, though
/// the cancelled poll's hold on the socket ends a moment later.
#[test]
fn a_listener_dropped_after_a_wait_frees_its_address_at_once() {
    let rt = per_worker(2, false);
    for _ in 0..8 {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let accepting = rt.spawn(async move {
            let listener = TcpListener::from_std(listener).unwrap();
            let accepted = listener.accept().await.map(drop);
            (listener, accepted)
        });
        // Long enough for the accept to wait, and its worker to sleep in
        // its ring, the listener's poll armed there.
        std::thread::sleep(Duration::from_millis(20));
        let client = std::net::TcpStream::connect(addr).unwrap();
        let (listener, accepted) = rt.block_on(accepting).unwrap();
        accepted.unwrap();
        drop(listener);
        drop(client);
        std::net::TcpListener::bind(addr)
            .unwrap_or_else(|error| panic!("{addr} still listened after the drop: {error}"));
    }
}

/// A stream first waited on outside the runtime is watched on a ring
/// chosen in turn, whose worker arms it; while that worker is held by a
/// long poll, the sleeping worker arms it instead. Two streams, read in
/// turn from `block_on` while one worker is held, go to both rings: one of
/// the reads must be served that way, or it waits for the watchdog.
#[test]
fn a_stream_first_waited_on_outside_is_watched_while_its_rings_worker_is_held() {
    let rt = per_worker(2, false);
    let (held_tx, held_rx) = mpsc::channel();
    let (release_tx, release_rx) = mpsc::channel::<()>();
    let holder = rt.spawn(async move {
        held_tx.send(()).unwrap();
        release_rx
            .recv_timeout(support::WATCHDOG)
            .expect("released once both reads were served");
    });
    held_rx.recv_timeout(support::WATCHDOG).unwrap();
    let served = (0..2u8).try_for_each(|round| {
        // Long enough for the read to wait and the free worker to fall
        // asleep.
        read_outside(&rt, round, Duration::from_millis(20))
            .map_err(|why| format!("round {round}: {why}"))
    });
    release_tx.send(()).unwrap();
    rt.block_on(holder).unwrap();
    served.unwrap();
}
