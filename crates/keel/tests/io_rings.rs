//! A ring driver of several rings (`Builder::io_rings`): a descriptor's
//! poll, receives and cancellation go to ring `fd % rings`, and the one
//! poller looks at every ring, blocking on all of them at once. These
//! tests put sources on every ring and check that each wakes its task
//! while the workers sleep, whether a worker or another thread registered
//! it and whether reads complete by readiness or on the ring, and that a
//! dropped source on any ring closes its socket.
//!
//! These need a ring: where the kernel or a sandbox refuses one, they
//! fail with the reason.

#![cfg(target_os = "linux")]

mod support;

use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::sync::mpsc;
use std::time::Duration;

use keel::io::{AsyncReadExt, AsyncWriteExt, IoBackend};
use keel::net::{TcpListener, TcpStream};
use keel::Runtime;

const RINGS: usize = 4;

/// A runtime of two workers on `RINGS` rings.
fn on_rings(ring_receives: bool) -> Runtime {
    support::on_rings(2, Some(RINGS), ring_receives)
}

/// Loopback connections, the client's end and the accepted one, until the
/// accepted ends' descriptors fall on every ring at least twice.
fn pairs_on_every_ring() -> Vec<(std::net::TcpStream, std::net::TcpStream)> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let mut pairs = Vec::new();
    let mut per_ring = [0; RINGS];
    // Two descriptors a pair would put every accepted end on every other
    // ring: a third, held until the end, moves the next pair along.
    let mut spacers = Vec::new();
    while per_ring.iter().any(|&n| n < 2) {
        spacers.push(std::fs::File::open("/dev/null").unwrap());
        assert!(pairs.len() < 64, "descriptors never covered every ring");
        let peer = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (accepted, _) = listener.accept().unwrap();
        per_ring[accepted.as_raw_fd() as usize % RINGS] += 1;
        peer.set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        pairs.push((peer, accepted));
    }
    pairs
}

/// Each accepted end is read by a task; the test writes to the peers one
/// at a time, after the workers had time to go to sleep, and waits for
/// the task to echo. `register_on_workers`: the tasks make their streams
/// (so a worker arms the polls); otherwise the test's thread does.
fn every_ring_wakes_sleeping_workers(ring_receives: bool, register_on_workers: bool) {
    let rt = on_rings(ring_receives);
    assert_eq!(rt.stats().io.rings, RINGS);
    let pairs = pairs_on_every_ring();
    let mut peers = Vec::new();
    let mut readers = Vec::new();
    for (peer, accepted) in pairs {
        let fd = accepted.as_raw_fd();
        let stream = if register_on_workers {
            None
        } else {
            let _entered = rt.handle().enter();
            Some(TcpStream::from_std(accepted.try_clone().unwrap()).unwrap())
        };
        readers.push(rt.spawn(async move {
            let mut stream = match stream {
                Some(stream) => stream,
                None => TcpStream::from_std(accepted).unwrap(),
            };
            let mut buf = [0; 4];
            for _ in 0..2 {
                stream.read_exact(&mut buf).await.unwrap();
                stream.write_all(&buf).await.unwrap();
            }
        }));
        peers.push((fd, peer));
    }
    for round in 0..2u8 {
        for (fd, peer) in &mut peers {
            // Long enough for both workers to park, one in the rings' wait.
            std::thread::sleep(Duration::from_millis(5));
            let message = [round, *fd as u8, 0xee, 0xff];
            peer.write_all(&message).unwrap();
            let mut echo = [0; 4];
            peer.read_exact(&mut echo).unwrap_or_else(|error| {
                panic!(
                    "descriptor {fd} on ring {}, round {round}: no echo ({error})",
                    *fd as usize % RINGS
                )
            });
            assert_eq!(echo, message);
        }
    }
    for reader in readers {
        rt.block_on(reader).unwrap();
    }
}

#[test]
fn sources_armed_by_workers_on_every_ring_wake_sleeping_workers() {
    every_ring_wakes_sleeping_workers(false, true);
}

#[test]
fn sources_registered_off_the_workers_on_every_ring_wake_sleeping_workers() {
    every_ring_wakes_sleeping_workers(false, false);
}

#[test]
fn receives_on_every_ring_wake_sleeping_workers() {
    every_ring_wakes_sleeping_workers(true, true);
}

/// Receives queued off the workers (a read in `block_on`) wake their own
/// ring's eventfd, which ends the poller's wait in the hub, on every ring.
#[test]
fn receives_queued_off_the_workers_on_every_ring_end_the_wait() {
    let rt = on_rings(true);
    for (mut peer, accepted) in pairs_on_every_ring() {
        let fd = accepted.as_raw_fd();
        let mut stream = {
            let _entered = rt.handle().enter();
            TcpStream::from_std(accepted).unwrap()
        };
        let writer = std::thread::spawn(move || {
            // Long enough for the read to be queued and the workers to
            // park, one in the rings' wait.
            std::thread::sleep(Duration::from_millis(5));
            peer.write_all(&[fd as u8]).unwrap();
            peer
        });
        let mut byte = [0];
        rt.block_on(keel::time::timeout(
            Duration::from_secs(20),
            stream.read_exact(&mut byte),
        ))
        .unwrap_or_else(|_| panic!("descriptor {fd} on ring {}: no wake", fd as usize % RINGS))
        .unwrap();
        assert_eq!(byte, [fd as u8]);
        drop(writer.join().unwrap());
    }
}

/// A task spawned from outside while every worker sleeps wakes one: the
/// runtime's waker (the first ring's eventfd) ends the wait in the hub.
#[test]
fn a_spawn_from_outside_ends_the_wait_in_the_hub() {
    let rt = on_rings(false);
    // Sources on every ring, so the wait is the hub's.
    let _pairs = pairs_on_every_ring();
    for round in 0..20 {
        std::thread::sleep(Duration::from_millis(5));
        let (tx, rx) = mpsc::channel();
        rt.spawn(async move { tx.send(round).unwrap() });
        assert_eq!(rx.recv_timeout(Duration::from_secs(20)), Ok(round));
    }
}

/// A stream dropped on any ring is cancelled there: its socket closes,
/// and the peer reads end of stream after what was written.
#[test]
fn a_stream_dropped_on_any_ring_closes_its_socket() {
    let rt = on_rings(true);
    let pairs = pairs_on_every_ring();
    let (done_tx, done_rx) = mpsc::channel();
    let mut peers = Vec::new();
    for (peer, accepted) in pairs {
        let done = done_tx.clone();
        rt.spawn(async move {
            let mut stream = TcpStream::from_std(accepted).unwrap();
            // A receive in flight on the stream's ring when it drops.
            let mut buf = [0; 1];
            let pending = keel::time::timeout(Duration::from_millis(1), stream.read(&mut buf));
            assert!(pending.await.is_err(), "nothing was sent");
            stream.write_all(b"bye").await.unwrap();
            drop(stream);
            done.send(()).unwrap();
        });
        peers.push(peer);
    }
    for _ in &peers {
        done_rx.recv_timeout(Duration::from_secs(20)).unwrap();
    }
    for mut peer in peers {
        let mut received = Vec::new();
        peer.read_to_end(&mut received)
            .expect("end of stream, not a timeout: the dropped stream's socket was closed");
        assert_eq!(received, b"bye");
    }
}

/// A listener dropped on any ring stops listening at once: its address
/// binds again right after the drop.
#[test]
fn a_listener_dropped_on_any_ring_frees_its_address() {
    let rt = on_rings(false);
    let mut rings_seen = [false; RINGS];
    let mut tries = 0;
    while rings_seen.iter().any(|seen| !seen) {
        tries += 1;
        assert!(tries < 64, "listeners never covered every ring");
        let fd = rt.block_on(async {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = listener.local_addr().unwrap();
            let fd = listener.as_raw_fd();
            // Armed by a worker, and reported once.
            let accepting = keel::spawn(async move {
                let listener = TcpListener::from_std(listener).unwrap();
                let accepted = listener.accept().await.map(drop);
                (listener, accepted)
            });
            let client = std::net::TcpStream::connect(addr).unwrap();
            let (listener, accepted) = accepting.await.unwrap();
            accepted.unwrap();
            drop(listener);
            drop(client);
            std::net::TcpListener::bind(addr)
                .unwrap_or_else(|error| panic!("ring {}: {error}", fd as usize % RINGS));
            fd
        });
        rings_seen[fd as usize % RINGS] = true;
        // The next listener gets another descriptor.
        let _hold = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        std::mem::forget(_hold);
    }
}

/// Files open (on the rings in turn), read and sync on a runtime of
/// several rings.
#[test]
fn files_open_read_and_sync_on_several_rings() {
    let rt = on_rings(false);
    let dir = std::env::temp_dir().join(format!("keel-io-rings-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let written: Vec<_> = (0..2 * RINGS)
        .map(|i| {
            let path = dir.join(format!("{i}"));
            std::fs::write(&path, format!("file {i}")).unwrap();
            path
        })
        .collect();
    let read = rt.block_on(async move {
        keel::spawn(async move {
            let mut contents = Vec::new();
            for path in &written {
                let mut file = keel::fs::File::open(path).await.unwrap();
                let mut buf = [0; 64];
                let n = file.read(&mut buf).await.unwrap();
                file.sync_all().await.unwrap();
                contents.push(String::from_utf8(buf[..n].to_vec()).unwrap());
            }
            contents
        })
        .await
        .unwrap()
    });
    let expected: Vec<_> = (0..2 * RINGS).map(|i| format!("file {i}")).collect();
    assert_eq!(read, expected);
    assert_eq!(rt.stats().io.operations_in_flight, 0);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_runtime_runs_the_rings_it_is_asked_for() {
    let ring = |workers: usize, rings: Option<usize>| {
        let mut builder = Runtime::builder();
        builder.workers(workers).io_backend(IoBackend::Uring);
        if let Some(rings) = rings {
            builder.io_rings(rings);
        }
        builder.build()
    };
    if std::env::var_os("KEEL_IO_RINGS").is_none() {
        let io = ring(3, None).unwrap().stats().io;
        assert_eq!((io.rings, io.ring_per_worker), (3, true), "the default");
    }
    assert_eq!(ring(3, Some(1)).unwrap().stats().io.rings, 1);
    assert_eq!(ring(1, Some(5)).unwrap().stats().io.rings, 5);
    let refused = ring(2, Some(0)).unwrap_err();
    assert_eq!(refused.kind(), std::io::ErrorKind::InvalidInput);
    assert!(refused.to_string().contains("io_rings"), "{refused}");
    let epoll = Runtime::builder()
        .workers(2)
        .io_backend(IoBackend::Epoll)
        .build()
        .unwrap();
    assert_eq!(epoll.stats().io.rings, 0);
}

/// `KEEL_IO_RINGS` sets the default number of rings, checked in child
/// processes (the variable is the process's).
#[test]
fn the_environment_sets_the_default_rings() {
    let child = |value: &str| {
        let stdout = support::child_output("report_the_default_rings", &[("KEEL_IO_RINGS", value)]);
        support::reported(&stdout, "rings: ")
    };
    assert_eq!(child("3"), "3; explicit 2: 2");
    for bad in ["0", "many"] {
        let refused = child(bad);
        assert!(
            refused.starts_with(&format!(
                "refused: KEEL_IO_RINGS={bad}: expected a positive number of rings"
            )),
            "{refused}"
        );
        assert!(refused.ends_with("; explicit 2: 2"), "{refused}");
    }
}

/// The child's half of the test above.
#[test]
#[ignore = "run by the_environment_sets_the_default_rings in a child process"]
fn report_the_default_rings() {
    assert!(
        support::in_child_process(),
        "run only as the child of the_environment_sets_the_default_rings"
    );
    let ring = || {
        let mut builder = Runtime::builder();
        builder.workers(1).io_backend(IoBackend::Uring);
        builder
    };
    let default = match ring().build() {
        Ok(rt) => rt.stats().io.rings.to_string(),
        Err(error) => format!("refused: {error}"),
    };
    // A number set on the builder wins over the variable.
    let explicit = ring().io_rings(2).build().unwrap().stats().io.rings;
    println!("rings: {default}; explicit 2: {explicit}");
}

/// A ring refused after others were set up (here for want of
/// descriptors) fails the build with the ring's place and the kernel's
/// reason, leaks none of the rings set up before it, and a later build
/// succeeds. Run in a child process: the descriptor limit is the
/// process's.
#[test]
fn a_ring_refused_midway_fails_the_build_and_leaks_nothing() {
    let stdout = support::child_output("report_a_ring_refused_midway", &[]);
    // Some limit let a ring or more be set up, and refused a later one.
    let midway = support::reported(&stdout, "midway: ");
    assert!(midway.starts_with("the io_uring driver: ring "), "{stdout}");
    assert!(midway.contains("Too many open files"), "{stdout}");
    assert_eq!(
        support::reported(&stdout, "leaked after a refusal: "),
        "0",
        "{stdout}"
    );
    assert_eq!(
        support::reported(&stdout, "then: "),
        RINGS.to_string(),
        "{stdout}"
    );
}

/// The child's half of the test above: raises the descriptor limit one
/// at a time from 0 until a runtime of `RINGS` rings builds.
#[test]
#[ignore = "run by a_ring_refused_midway_fails_the_build_and_leaks_nothing in a child process"]
fn report_a_ring_refused_midway() {
    assert!(
        support::in_child_process(),
        "run only as the child of a_ring_refused_midway_fails_the_build_and_leaks_nothing"
    );
    let open = || std::fs::read_dir("/proc/self/fd").unwrap().count();
    let rings = || {
        Runtime::builder()
            .workers(1)
            .io_backend(IoBackend::Uring)
            .io_rings(RINGS)
            .build()
    };
    // Whatever a first build opens once for the process is open from here.
    drop(rings().unwrap());
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: writes the limit into `limit`, which lives across the call.
    let got = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) };
    assert_eq!(got, 0);
    let saved = limit;
    let baseline = open();
    let mut midway = None;
    let mut leaked = 0;
    // The limit bounds descriptor numbers, not their count: each step up
    // frees at most one more number for the build.
    for ceiling in 0..1024 {
        limit.rlim_cur = ceiling;
        // SAFETY: reads `limit`, which lives across the call.
        assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) }, 0);
        let built = rings();
        // SAFETY: as above, with the saved limit, so that `open` can read.
        assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &saved) }, 0);
        match built {
            Ok(_) => break,
            Err(error) => {
                let error = error.to_string();
                if (2..=RINGS).any(|ring| error.contains(&format!("ring {ring} of {RINGS}: "))) {
                    midway = Some(error);
                }
                leaked = leaked.max(open().saturating_sub(baseline));
            }
        }
    }
    // SAFETY: as above.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &saved) }, 0);
    let then = rings().map_or_else(
        |error| error.to_string(),
        |rt| rt.stats().io.rings.to_string(),
    );
    println!("midway: {}", midway.as_deref().unwrap_or("none"));
    println!("leaked after a refusal: {leaked}");
    println!("then: {then}");
}
