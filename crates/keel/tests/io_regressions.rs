//! Regressions of the reactor, the sockets and parking: each was once a
//! hang or a spin. Each scenario runs on its own thread and is judged by a
//! bounded wait, so a hang fails the test instead of stalling the suite (a
//! hung runtime is leaked, never dropped).

use std::io::{ErrorKind, Read, Write};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use keel::io::{AsyncReadExt, AsyncWriteExt};
use keel::net::{TcpListener, UdpSocket};
use keel::{Runtime, SpinPolicy};

/// Runs `f` on a fresh thread; `None` if it did not finish within `limit`.
fn bounded<T: Send + 'static>(
    limit: Duration,
    f: impl FnOnce() -> T + Send + 'static,
) -> Option<T> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(limit).ok()
}

/// A connected UDP socket that saw an ICMP error is readable-with-error
/// once; a later `recv` that finds nothing must wait, not spin on an error
/// bit that never clears.
#[test]
fn udp_recv_after_a_refused_datagram_waits_instead_of_spinning() {
    let outcome = bounded(Duration::from_secs(5), || {
        let rt = Runtime::builder().workers(1).build().unwrap();
        let timed_out = rt.block_on(async {
            keel::spawn(async {
                let closed = std::net::UdpSocket::bind("127.0.0.1:0")
                    .unwrap()
                    .local_addr()
                    .unwrap();
                let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
                socket.connect(closed).unwrap();
                socket.send(b"anyone?").await.unwrap();
                // Let the reactor see EPOLLERR before recv consumes it.
                keel::time::sleep(Duration::from_millis(50)).await;
                let mut buf = [0u8; 16];
                let error = socket.recv(&mut buf).await.unwrap_err();
                assert_eq!(error.kind(), ErrorKind::ConnectionRefused);
                // Nothing else will arrive: this must simply time out.
                keel::time::timeout(Duration::from_millis(200), socket.recv(&mut buf))
                    .await
                    .is_err()
            })
            .await
            .unwrap()
        });
        std::mem::forget(rt);
        timed_out
    });
    assert_eq!(
        outcome,
        Some(true),
        "recv after ECONNREFUSED never returned: the worker spins in poll_io"
    );
}

/// The worker blocked in the reactor leaves it to run a task that then
/// polls for long; the other worker, asleep on its parker, must take over
/// the reactor, or every socket waits for that poll although a worker is
/// idle. The runtime is idle for 300 ms first, so that the other worker
/// dozes (sleeps untimed, see `sched::doze`) when the blocker leaves: the
/// departure must wake it.
#[test]
fn an_idle_worker_serves_sockets_while_the_former_blocker_is_busy() {
    let rtt = bounded(Duration::from_secs(20), || {
        let rt = Runtime::builder()
            .workers(2)
            .spin(SpinPolicy::None)
            .build()
            .unwrap();
        let listener = rt.block_on(async { TcpListener::bind("127.0.0.1:0").unwrap() });
        let addr = listener.local_addr().unwrap();
        rt.spawn(async move {
            let (mut slow, _) = listener.accept().await.unwrap();
            let (mut echo, _) = listener.accept().await.unwrap();
            keel::spawn(async move {
                let mut byte = [0u8; 1];
                slow.read_exact(&mut byte).await.unwrap();
                // One long poll (a CPU-heavy request, or a blocking call).
                std::thread::sleep(Duration::from_millis(1500));
                slow.write_all(&byte).await.unwrap();
            });
            keel::spawn(async move {
                let mut byte = [0u8; 1];
                while echo.read_exact(&mut byte).await.is_ok() {
                    echo.write_all(&byte).await.unwrap();
                }
            });
        });
        let mut slow = std::net::TcpStream::connect(addr).unwrap();
        let mut echo = std::net::TcpStream::connect(addr).unwrap();
        echo.set_nodelay(true).unwrap();
        let mut byte = [0u8; 1];
        echo.write_all(b"w").unwrap();
        echo.read_exact(&mut byte).unwrap();
        // Both workers park: one blocks in epoll, the other on its condvar,
        // where it dozes after 100 ms.
        std::thread::sleep(Duration::from_millis(300));
        slow.write_all(b"s").unwrap();
        std::thread::sleep(Duration::from_millis(100));
        let start = Instant::now();
        echo.write_all(b"e").unwrap();
        echo.read_exact(&mut byte).unwrap();
        let rtt = start.elapsed();
        slow.read_exact(&mut byte).unwrap();
        rtt
    })
    .expect("scenario hung");
    assert!(
        rtt < Duration::from_millis(300),
        "echo RTT {rtt:?} with one worker idle on its condvar"
    );
}

/// A socket outlives its runtime in user hands; used from a second
/// runtime it must fail clearly (nobody polls the first reactor any more)
/// rather than wait forever.
#[test]
fn a_socket_of_a_dropped_runtime_fails_instead_of_hanging() {
    let outcome = bounded(Duration::from_secs(10), || {
        let first = Runtime::builder().workers(1).build().unwrap();
        let socket = first.block_on(async { UdpSocket::bind("127.0.0.1:0").unwrap() });
        let addr = socket.local_addr().unwrap();
        drop(first);
        let second = Runtime::builder().workers(1).build().unwrap();
        second.block_on(async move {
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(100));
                let peer = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
                peer.send_to(b"hi", addr).unwrap();
            });
            let mut buf = [0u8; 16];
            keel::time::timeout(Duration::from_secs(2), socket.recv_from(&mut buf))
                .await
                .map(|r| r.map(|(n, _)| n))
        })
    });
    match outcome {
        Some(Ok(Err(error))) => {
            assert!(error.to_string().contains("has shut down"), "{error}");
        }
        other => panic!("recv on a socket of a dropped runtime: {other:?}"),
    }
}

/// A task polls a CPU-bound branch (~1 ms, then yield) before an IO
/// branch: the time quota is spent before the IO branch is reached on
/// every poll, yet the IO branch must still make progress.
#[test]
fn an_io_branch_behind_a_cpu_branch_still_makes_progress() {
    let outcome = bounded(Duration::from_secs(10), || {
        let rt = Runtime::builder().workers(1).build().unwrap();
        let got = rt.block_on(async {
            keel::spawn(async {
                let a = UdpSocket::bind("127.0.0.1:0").unwrap();
                let b = UdpSocket::bind("127.0.0.1:0").unwrap();
                b.send_to(b"ready", a.local_addr().unwrap()).await.unwrap();
                let cpu = std::pin::pin!(async {
                    loop {
                        let start = Instant::now();
                        while start.elapsed() < Duration::from_millis(1) {}
                        keel::yield_now().await;
                    }
                });
                let mut buf = [0u8; 16];
                let read = std::pin::pin!(a.recv_from(&mut buf));
                let io = keel::time::timeout(
                    Duration::from_secs(2),
                    futures_util::future::select(cpu, read),
                )
                .await;
                io.is_ok()
            })
            .await
            .unwrap()
        });
        std::mem::forget(rt);
        got
    });
    assert_eq!(outcome, Some(true), "the ready datagram was never read");
}

/// Several tasks may receive on one `Arc<UdpSocket>`: two datagrams for
/// two waiting receivers must wake both.
#[test]
fn two_tasks_receiving_on_one_udp_socket_both_get_a_datagram() {
    let outcome = bounded(Duration::from_secs(10), || {
        let rt = Runtime::builder().workers(2).build().unwrap();
        let done = rt.block_on(async {
            let socket = std::sync::Arc::new(UdpSocket::bind("127.0.0.1:0").unwrap());
            let addr = socket.local_addr().unwrap();
            let receivers: Vec<_> = (0..2)
                .map(|_| {
                    let socket = socket.clone();
                    keel::spawn(async move {
                        let mut buf = [0u8; 16];
                        socket.recv_from(&mut buf).await.unwrap().0
                    })
                })
                .collect();
            // Both receivers are waiting before anything is sent.
            keel::time::sleep(Duration::from_millis(100)).await;
            let sender = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
            sender.send_to(b"one", addr).unwrap();
            keel::time::sleep(Duration::from_millis(50)).await;
            sender.send_to(b"two", addr).unwrap();
            let mut done = 0;
            for receiver in receivers {
                if keel::time::timeout(Duration::from_secs(2), receiver)
                    .await
                    .is_ok()
                {
                    done += 1;
                }
            }
            done
        });
        std::mem::forget(rt);
        done
    });
    assert_eq!(outcome, Some(2), "a receiver was never woken");
}

/// Connections are opened and closed from many tasks at once so slab slots
/// are reused while other workers poll; every exchange must complete.
#[test]
fn churn_of_short_connections_never_hangs() {
    let outcome = bounded(Duration::from_secs(60), || {
        let rt = Runtime::builder().workers(4).build().unwrap();
        rt.block_on(async {
            let listener = TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = listener.local_addr().unwrap();
            keel::spawn(async move {
                loop {
                    let Ok((mut stream, _)) = listener.accept().await else {
                        continue;
                    };
                    keel::spawn(async move {
                        let mut buf = [0u8; 8];
                        if stream.read_exact(&mut buf).await.is_ok() {
                            let _ = stream.write_all(&buf).await;
                        }
                    });
                }
            });
            let clients: Vec<_> = (0..8u64)
                .map(|c| {
                    keel::spawn(async move {
                        for i in 0..250u64 {
                            let mut s = keel::net::TcpStream::connect(addr).await.unwrap();
                            let msg = (c * 1000 + i).to_le_bytes();
                            s.write_all(&msg).await.unwrap();
                            let mut echo = [0u8; 8];
                            s.read_exact(&mut echo).await.unwrap();
                            assert_eq!(echo, msg);
                        }
                    })
                })
                .collect();
            for c in clients {
                c.await.unwrap();
            }
        });
        std::mem::forget(rt);
    });
    assert!(outcome.is_some(), "connection churn hung");
}
