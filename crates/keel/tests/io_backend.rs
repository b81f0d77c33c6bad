//! The IO backend switch and the ring driver: a runtime on the ring serves
//! sockets as one on epoll does, closes what it drops, keeps watching a
//! socket whose watch the kernel ended (its arming thread exited), and
//! `KEEL_IO_BACKEND` picks the default backend.
//!
//! These need a ring: where the kernel or a sandbox refuses one, they
//! fail with the reason (`keel --defaults` prints it too).

#![cfg(target_os = "linux")]

mod support;

use std::io::{Read, Write};
use std::time::Duration;

use keel::io::{AsyncReadExt, AsyncWriteExt, IoBackend};
use keel::net::{TcpListener, TcpStream};
use keel::Runtime;

/// Two ends of a loopback TCP connection, plain `std` sockets: the
/// client's, and the accepted one, for a test to hand to keel.
fn connected_pair() -> (std::net::TcpStream, std::net::TcpStream) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let peer = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let (accepted, _) = listener.accept().unwrap();
    (peer, accepted)
}

#[test]
fn a_runtime_on_the_ring_says_so() {
    let rt = support::on_the_ring(1);
    let io = rt.stats().io;
    assert_eq!(io.driver, "io_uring");
    assert_eq!(io.requested, IoBackend::Uring);
    assert_eq!(io.fallback, None);
    let auto = Runtime::builder()
        .workers(1)
        .io_backend(IoBackend::Auto)
        .build()
        .unwrap();
    assert_eq!(
        auto.stats().io.driver,
        "io_uring",
        "Auto takes a ring that works"
    );
    let epoll = Runtime::builder()
        .workers(1)
        .io_backend(IoBackend::Epoll)
        .build()
        .unwrap();
    assert_eq!(epoll.stats().io.driver, "epoll");
}

/// Many connections at once, each a few exchanges of sizes from one byte
/// to more than a socket buffer, on two workers (tasks move between them,
/// and their sockets' events come from one ring).
#[test]
fn the_ring_serves_many_connections_at_once() {
    const CONNECTIONS: usize = 64;
    const EXCHANGES: usize = 20;
    let rt = support::on_the_ring(2);
    rt.block_on(async {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let server = keel::spawn(async move {
            let mut echoes = Vec::new();
            for _ in 0..CONNECTIONS {
                let (mut stream, _) = listener.accept().await.unwrap();
                echoes.push(keel::spawn(async move {
                    let mut buf = vec![0; 64 * 1024];
                    loop {
                        let n = stream.read(&mut buf).await.unwrap();
                        if n == 0 {
                            return;
                        }
                        stream.write_all(&buf[..n]).await.unwrap();
                    }
                }));
            }
            for echo in echoes {
                echo.await.unwrap();
            }
        });
        let clients: Vec<_> = (0..CONNECTIONS)
            .map(|client| {
                keel::spawn(async move {
                    let stream = TcpStream::connect(addr).await.unwrap();
                    for exchange in 0..EXCHANGES {
                        let len = 1 + (client * 7919 + exchange * 104_729) % 300_000;
                        let message: Vec<u8> =
                            (0..len).map(|i| (i + client + exchange) as u8).collect();
                        let (mut reader, mut writer) = (&stream, &stream);
                        let send = async { writer.write_all(&message).await };
                        let mut echo = vec![0; len];
                        let receive = async { reader.read_exact(&mut echo).await };
                        let (sent, received) = futures_util::future::join(send, receive).await;
                        sent.unwrap();
                        received.unwrap();
                        assert!(echo == message, "client {client}, exchange {exchange}");
                    }
                })
            })
            .collect();
        for client in clients {
            client.await.unwrap();
        }
        server.await.unwrap();
    });
}

/// A ring's poll holds a reference to the socket's file: were it not
/// cancelled when the stream drops, the socket would stay open and the
/// peer would never read end of stream.
#[test]
fn dropping_a_stream_on_the_ring_closes_its_socket() {
    let rt = support::on_the_ring(1);
    let (mut peer, accepted) = connected_pair();
    peer.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    rt.block_on(async move {
        let mut stream = TcpStream::from_std(accepted).unwrap();
        stream.write_all(b"bye").await.unwrap();
        // Armed and reported at least once before the drop.
        drop(stream);
    });
    let mut received = Vec::new();
    peer.read_to_end(&mut received)
        .expect("end of stream, not a timeout: the dropped stream's socket was closed");
    assert_eq!(received, b"bye");
}

/// The kernel ends a ring's poll at its first event after the thread that
/// armed it exited (the completion would run on that thread): a socket
/// registered on a thread that then ends must still wake the task that
/// reads it, at every event (the driver watches it again).
#[test]
fn a_socket_registered_by_a_thread_that_exited_still_wakes_its_reader() {
    let rt = support::on_the_ring(1);
    let (mut peer, accepted) = connected_pair();
    let handle = rt.handle().clone();
    // Registered (its poll armed) on a thread that ends at once.
    let stream = std::thread::spawn(move || {
        let _entered = handle.enter();
        TcpStream::from_std(accepted).unwrap()
    })
    .join()
    .unwrap();
    // The kernel ends the exited thread's poll at the socket's first
    // event (reported, as an end is, as ready both ways); the second
    // event needs the poll armed again.
    let (read_tx, read_rx) = std::sync::mpsc::channel();
    let reader = rt.spawn(async move {
        let mut stream = stream;
        for _ in 0..2 {
            let mut buf = [0; 5];
            keel::time::timeout(Duration::from_secs(10), stream.read_exact(&mut buf))
                .await
                .expect("the read was woken: the socket is still watched")
                .unwrap();
            read_tx.send(buf).unwrap();
        }
    });
    for message in [b"hello", b"again"] {
        // Give the reader time to find nothing and wait for the event.
        std::thread::sleep(Duration::from_millis(50));
        peer.write_all(message).unwrap();
        let read = read_rx
            .recv_timeout(Duration::from_secs(20))
            .expect("the reader read or timed out");
        assert_eq!(&read, message);
    }
    rt.block_on(reader).unwrap();
}

/// The default backend comes from `KEEL_IO_BACKEND`, checked in child
/// processes (the variable is the process's).
#[test]
fn the_environment_picks_the_default_backend() {
    let child = |value: &str| {
        let stdout =
            support::child_output("report_the_default_backend", &[(IoBackend::ENV, value)]);
        support::reported(&stdout, "default: ")
    };
    assert_eq!(child("uring"), "io_uring; explicit epoll: epoll");
    assert_eq!(child("epoll"), "epoll; explicit epoll: epoll");
    let refused = child("kqueue");
    assert!(
        refused.starts_with("refused: KEEL_IO_BACKEND=kqueue: expected auto, epoll or uring"),
        "{refused}"
    );
    assert!(refused.ends_with("; explicit epoll: epoll"), "{refused}");
}

/// The child's half of the test above.
#[test]
#[ignore = "run by the_environment_picks_the_default_backend in a child process"]
fn report_the_default_backend() {
    assert!(
        support::in_child_process(),
        "run only as the child of the_environment_picks_the_default_backend"
    );
    let default = match Runtime::builder().workers(1).build() {
        Ok(rt) => rt.stats().io.driver.to_owned(),
        Err(error) => format!("refused: {error}"),
    };
    // A backend set on the builder wins over the variable.
    let explicit = Runtime::builder()
        .workers(1)
        .io_backend(IoBackend::Epoll)
        .build()
        .unwrap()
        .stats()
        .io
        .driver;
    println!("default: {default}; explicit epoll: {explicit}");
}

/// The kernel posts a ring poll's completion from the thread that armed
/// it, interrupting that thread's blocking system call: a `read` with a
/// timeout then fails with `EINTR`. A thread that builds a runtime and
/// registers sockets on it (here a listener, whose connections keep
/// producing events, and wakes of the runtime) must not be interrupted.
#[test]
fn a_thread_that_registers_sockets_on_the_ring_is_not_interrupted() {
    let rt = support::on_the_ring(1);
    let listener = {
        let _entered = rt.enter();
        TcpListener::bind("127.0.0.1:0").unwrap()
    };
    let addr = listener.local_addr().unwrap();
    let server = rt.spawn(async move {
        for _ in 0..200 {
            let (stream, _) = listener.accept().await.unwrap();
            drop(stream);
        }
    });
    let clients = std::thread::spawn(move || {
        for _ in 0..200 {
            let _ = std::net::TcpStream::connect(addr).unwrap();
            std::thread::sleep(Duration::from_millis(1));
        }
    });
    // This thread blocks in a read with a timeout while the events come.
    let quiet = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let mut idle = std::net::TcpStream::connect(quiet.local_addr().unwrap()).unwrap();
    idle.set_read_timeout(Some(Duration::from_millis(20)))
        .unwrap();
    let mut reads = 0;
    while !clients.is_finished() && reads < 500 {
        let mut byte = [0; 1];
        match idle.read(&mut byte) {
            Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => reads += 1,
            other => panic!("a read that times out returned {other:?}"),
        }
    }
    clients.join().unwrap();
    rt.block_on(server).unwrap();
}

/// A worker that computes makes no system call, and the ring is set up
/// not to interrupt it to post the completions of the polls it armed: they
/// are posted at its next entry to the kernel (its look between polls
/// when the ring marks work pending, or the timer tick). One worker runs a
/// task that computes in slices, yielding between them, until a socket it
/// armed has delivered: the reader must get its bytes while the computing
/// goes on, not after it (bounded at 10 s, the failure).
#[test]
fn a_computing_worker_still_sees_its_sockets_events() {
    let rt = support::on_the_ring(1);
    let (mut peer, accepted) = connected_pair();
    let delivered = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let done = delivered.clone();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let reader = rt.spawn(async move {
        // Registered on the worker, which arms its poll.
        let mut stream = TcpStream::from_std(accepted).unwrap();
        ready_tx.send(()).unwrap();
        let mut buf = [0; 4];
        stream.read_exact(&mut buf).await.unwrap();
        done.store(true, std::sync::atomic::Ordering::SeqCst);
        buf
    });
    ready_rx.recv().unwrap();
    let computing = rt.spawn(async move {
        let start = std::time::Instant::now();
        while !delivered.load(std::sync::atomic::Ordering::SeqCst) {
            if start.elapsed() > Duration::from_secs(10) {
                return false;
            }
            let slice = std::time::Instant::now();
            while slice.elapsed() < Duration::from_micros(200) {
                std::hint::spin_loop();
            }
            keel::task::yield_now().await;
        }
        true
    });
    // Give the computing task the worker before the bytes come.
    std::thread::sleep(Duration::from_millis(20));
    peer.write_all(b"ping").unwrap();
    assert!(
        rt.block_on(computing).unwrap(),
        "the bytes were not seen while the worker computed"
    );
    assert_eq!(&rt.block_on(reader).unwrap(), b"ping");
}
