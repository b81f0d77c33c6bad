//! Reads that complete on the ring (`Builder::ring_receives`): bytes arrive whole and in order
//! through reads of every size and kind, a stream dropped with its read
//! queued or in flight frees its buffer and closes its socket, and its
//! receive never reaches the descriptor's next owner.
//!
//! These need a ring: where the kernel or a sandbox refuses one, they
//! fail with the reason (`keel --defaults` prints it too).

#![cfg(target_os = "linux")]

mod support;

use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::time::Duration;

use keel::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use keel::net::TcpStream;

/// A listener and a client connected to it, not yet accepted: the
/// accept then takes the lowest free descriptor number.
fn pending_pair() -> (std::net::TcpListener, std::net::TcpStream) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let peer = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    (listener, peer)
}

/// The byte at `offset` of the test pattern.
fn pattern(offset: usize) -> u8 {
    (offset % 251) as u8
}

#[test]
fn bytes_arrive_whole_and_in_order_through_reads_of_every_size() {
    let rt = support::receiving_on_the_ring(2);
    let (listener, mut peer) = pending_pair();
    let (accepted, _) = listener.accept().unwrap();
    const TOTAL: usize = 1 << 20;
    let writer = std::thread::spawn(move || {
        let bytes: Vec<u8> = (0..TOTAL).map(pattern).collect();
        // Pieces of uneven sizes, so reads meet partial buffers.
        let mut at = 0;
        let mut piece = 1;
        while at < TOTAL {
            let end = (at + piece).min(TOTAL);
            peer.write_all(&bytes[at..end]).unwrap();
            at = end;
            piece = piece * 7 % 70_001 + 1;
        }
        // Closed here: the reader meets end of file.
        drop(peer);
    });
    // Read in block_on's own future (off the workers) and in a task (on
    // them), with plain, vectored and one-byte reads.
    let got = rt.block_on(async move {
        let mut stream = TcpStream::from_std(accepted).unwrap();
        let mut got = Vec::with_capacity(TOTAL);
        let mut sizes = [1usize, 7, 4096, 100_000, 3].into_iter().cycle();
        while got.len() < TOTAL / 2 {
            let mut buf = vec![0; sizes.next().unwrap()];
            let n = stream.read(&mut buf).await.unwrap();
            assert!(n > 0, "end of file after {} bytes", got.len());
            got.extend_from_slice(&buf[..n]);
        }
        keel::spawn(async move {
            while got.len() < TOTAL {
                let (mut a, mut b) = ([0u8; 5], [0u8; 3000]);
                let mut bufs = [
                    std::io::IoSliceMut::new(&mut a),
                    std::io::IoSliceMut::new(&mut b),
                ];
                let n = stream.read_vectored(&mut bufs).await.unwrap();
                assert!(n > 0, "end of file after {} bytes", got.len());
                let joined: Vec<u8> = a.iter().chain(b.iter()).copied().take(n).collect();
                got.extend_from_slice(&joined);
            }
            // The peer closes after writing: end of file, and it stays.
            let mut rest = [0u8; 16];
            assert_eq!(stream.read(&mut rest).await.unwrap(), 0);
            assert_eq!(stream.read(&mut rest).await.unwrap(), 0);
            got
        })
        .await
        .unwrap()
    });
    writer.join().unwrap();
    assert_eq!(got.len(), TOTAL);
    if let Some(at) = (0..TOTAL).find(|&i| got[i] != pattern(i)) {
        panic!("byte {at} is {} where {} was sent", got[at], pattern(at));
    }
}

#[test]
fn two_tasks_reading_one_stream_share_its_bytes_and_both_wake() {
    let rt = support::receiving_on_the_ring(2);
    let (listener, mut peer) = pending_pair();
    let (accepted, _) = listener.accept().unwrap();
    let total = rt.block_on(async move {
        let stream = std::sync::Arc::new(TcpStream::from_std(accepted).unwrap());
        let readers: Vec<_> = (0..2)
            .map(|_| {
                let stream = stream.clone();
                keel::spawn(async move {
                    let mut count = 0;
                    let mut buf = [0u8; 100];
                    loop {
                        match (&*stream).read(&mut buf).await.unwrap() {
                            0 => return count,
                            n => count += n,
                        }
                    }
                })
            })
            .collect();
        keel::spawn_blocking(move || {
            for _ in 0..200 {
                peer.write_all(&[1; 1000]).unwrap();
                std::thread::sleep(Duration::from_micros(50));
            }
        })
        .await
        .unwrap();
        let mut total = 0;
        for reader in readers {
            total += reader.await.unwrap();
        }
        total
    });
    assert_eq!(total, 200 * 1000);
}

#[test]
fn streams_dropped_with_reads_in_flight_free_their_buffers_and_close() {
    let rt = support::receiving_on_the_ring(2);
    const STREAMS: usize = 50;
    let mut peers = Vec::new();
    let mut readers = Vec::new();
    for _ in 0..STREAMS {
        let (listener, peer) = pending_pair();
        let (accepted, _) = listener.accept().unwrap();
        peers.push(peer);
        readers.push(rt.handle().spawn(async move {
            let mut stream = TcpStream::from_std(accepted).unwrap();
            let mut buf = [0u8; 64];
            // Nothing is ever sent: the read waits until it is dropped.
            let _ = stream.read(&mut buf).await;
            unreachable!("nothing was sent");
        }));
    }
    support::wait_until("every read is in flight", || {
        rt.stats().io.operations_in_flight == STREAMS as u64
    });
    for reader in &readers {
        reader.abort();
    }
    for reader in readers {
        assert!(rt.block_on(reader).is_err(), "aborted");
    }
    support::wait_until("every receive's completion is reaped", || {
        rt.stats().io.operations_in_flight == 0
    });
    for mut peer in peers {
        peer.set_read_timeout(Some(support::WATCHDOG)).unwrap();
        let mut buf = [0u8; 8];
        assert_eq!(peer.read(&mut buf).unwrap(), 0, "the dropped stream closed");
    }
}

#[test]
fn a_read_dropped_before_or_after_submission_never_reaches_the_next_owner_of_its_descriptor() {
    let rt = support::receiving_on_the_ring(2);
    let mut reused = 0;
    for round in 0..200u64 {
        let (listener_a, mut peer_a) = pending_pair();
        let (accepted_a, _) = listener_a.accept().unwrap();
        let fd_a = accepted_a.as_raw_fd();
        // Connected before A goes, accepted after: B's descriptor is
        // the lowest free one, A's.
        let (listener_b, mut peer_b) = pending_pair();
        rt.block_on(async move {
            let stream = TcpStream::from_std(accepted_a).unwrap();
            let reader = keel::spawn(async move {
                let mut buf = [0u8; 16];
                let _ = (&stream).read(&mut buf).await;
            });
            // Dropped at varying points: queued, submitted, or armed.
            for _ in 0..round % 4 {
                keel::task::yield_now().await;
            }
            if round % 5 == 0 {
                keel::time::sleep(Duration::from_micros(round % 300)).await;
            }
            reader.abort();
            let _ = reader.await;
        });
        // A stream dropped on its home worker is closed at that ring's next
        // submission: once A's peer sees the end, A's number is free.
        peer_a.set_read_timeout(Some(support::WATCHDOG)).unwrap();
        assert_eq!(peer_a.read(&mut [0u8; 1]).unwrap(), 0, "A closed");
        let (accepted_b, _) = listener_b.accept().unwrap();
        reused += usize::from(accepted_b.as_raw_fd() == fd_a);
        peer_b.write_all(b"0123456789").unwrap();
        let got = rt.block_on(async move {
            let mut stream = TcpStream::from_std(accepted_b).unwrap();
            let mut got = [0u8; 10];
            keel::time::timeout(support::WATCHDOG, stream.read_exact(&mut got))
                .await
                .expect("B's bytes arrive")
                .unwrap();
            stream.write_all(b"ok").await.unwrap();
            got
        });
        assert_eq!(&got, b"0123456789", "round {round}");
        drop(peer_a);
    }
    // Tests beside this one open descriptors too; most rounds still reuse.
    assert!(
        reused > 20,
        "B took A's descriptor in {reused} of 200 rounds"
    );
    support::wait_until("no receive is left", || {
        rt.stats().io.operations_in_flight == 0
    });
}

/// The sharpest case: a stream dropped with its receive queued but not
/// yet submitted, and a new stream accepted before the worker next
/// submits. One worker, and all of it inside one poll, so nothing is
/// submitted in between. B gets its own bytes, and A's peer sees the end.
/// With a ring per worker, A was closed on its home worker: it keeps its
/// number until the ring has cancelled its operations and closed it, so
/// B never gets it in that poll. On rings the workers share
/// (`KEEL_IO_RINGS`), A's cancellation is synchronous and its number free
/// at once: rounds go on until B took it in 20 (tests running beside
/// this one open descriptors too).
#[test]
fn a_queued_read_of_a_dropped_stream_is_never_submitted() {
    let rt = support::receiving_on_the_ring(1);
    let per_worker = rt.stats().io.ring_per_worker;
    let mut reused = 0;
    let mut round = 0;
    while if per_worker { round < 200 } else { reused < 20 } {
        round += 1;
        assert!(
            round <= 2000,
            "B took A's descriptor in only {reused} rounds"
        );
        let (listener_a, mut peer_a) = pending_pair();
        let (accepted_a, _) = listener_a.accept().unwrap();
        let fd_a = accepted_a.as_raw_fd();
        let (listener_b, mut peer_b) = pending_pair();
        peer_b.write_all(b"0123456789").unwrap();
        let got = rt.block_on(rt.handle().spawn(async move {
            let mut a = TcpStream::from_std(accepted_a).unwrap();
            queue_one_read(&mut a).await;
            drop(a);
            let (accepted_b, _) = listener_b.accept().unwrap();
            let reused = accepted_b.as_raw_fd() == fd_a;
            assert!(
                !(per_worker && reused),
                "A's number was free before its ring closed it"
            );
            let got = read_ten(accepted_b).await;
            (got, reused)
        }));
        let (got, was_reused) = got.unwrap();
        assert_eq!(&got, b"0123456789", "round {round}");
        reused += usize::from(was_reused);
        peer_a.set_read_timeout(Some(support::WATCHDOG)).unwrap();
        assert_eq!(peer_a.read(&mut [0u8; 1]).unwrap(), 0, "A closed");
    }
}

/// The same, with A dropped off the workers (in `block_on`'s own
/// future) right after the one poll that queued its receive: the
/// cancellation is then synchronous and A's number free at once, and a
/// new stream that takes it gets only its own bytes.
#[test]
fn a_read_queued_on_a_worker_and_dropped_off_the_workers_never_reaches_the_next_owner() {
    let rt = support::receiving_on_the_ring(1);
    // Tests running beside this one open descriptors too, so B does not
    // always get A's number: rounds go on until 20 did.
    let mut reused = 0;
    let mut round = 0;
    while reused < 20 {
        round += 1;
        assert!(
            round <= 2000,
            "B took A's descriptor in only {reused} rounds"
        );
        let (listener_a, _peer_a) = pending_pair();
        let (accepted_a, _) = listener_a.accept().unwrap();
        let fd_a = accepted_a.as_raw_fd();
        let (listener_b, mut peer_b) = pending_pair();
        peer_b.write_all(b"0123456789").unwrap();
        let (got, was_reused) = rt.block_on(async move {
            let a = queue_a_read_on_a_worker(accepted_a).await;
            drop(a);
            let (accepted_b, _) = listener_b.accept().unwrap();
            let reused = accepted_b.as_raw_fd() == fd_a;
            let got = read_ten(accepted_b).await;
            (got, reused)
        });
        assert_eq!(&got, b"0123456789", "round {round}");
        reused += usize::from(was_reused);
    }
}

/// Registers `accepted` and queues one read of it from a task on the
/// workers (one poll: its receive is queued there), then hands the
/// stream back.
async fn queue_a_read_on_a_worker(accepted: std::net::TcpStream) -> TcpStream {
    keel::spawn(async move {
        let mut a = TcpStream::from_std(accepted).unwrap();
        queue_one_read(&mut a).await;
        a
    })
    .await
    .unwrap()
}

/// Polls a read of `stream` once, to which nothing was sent: its receive
/// is queued, and the read dropped.
async fn queue_one_read(stream: &mut TcpStream) {
    let mut buf = [0u8; 16];
    std::future::poll_fn(|cx| {
        let queued = std::pin::Pin::new(&mut *stream).poll_read(cx, &mut buf);
        assert!(queued.is_pending(), "nothing was sent to A");
        std::task::Poll::Ready(())
    })
    .await;
}

/// The ten bytes B's peer sent, read through a keel stream.
async fn read_ten(accepted: std::net::TcpStream) -> [u8; 10] {
    let mut stream = TcpStream::from_std(accepted).unwrap();
    let mut got = [0u8; 10];
    keel::time::timeout(Duration::from_secs(5), stream.read_exact(&mut got))
        .await
        .expect("B's bytes go to B's read")
        .unwrap();
    got
}

/// A stream's receive is multishot: armed at its first read, it stays
/// armed (one operation in flight) across every message after, rather
/// than one receive submitted a read.
#[test]
fn a_streams_receive_stays_armed_across_its_messages() {
    let rt = support::receiving_on_the_ring(1);
    let (listener, mut peer) = pending_pair();
    let (accepted, _) = listener.accept().unwrap();
    let echo = rt.handle().spawn(async move {
        let mut stream = TcpStream::from_std(accepted).unwrap();
        let mut buf = [0u8; 8];
        loop {
            match stream.read(&mut buf).await.unwrap() {
                0 => return,
                n => stream.write_all(&buf[..n]).await.unwrap(),
            }
        }
    });
    peer.set_read_timeout(Some(support::WATCHDOG)).unwrap();
    for round in 0..100u8 {
        peer.write_all(&[round; 8]).unwrap();
        let mut back = [0u8; 8];
        peer.read_exact(&mut back).unwrap();
        assert_eq!(back, [round; 8]);
        // The echo answered: its read returned, and its receive is still
        // the kernel's.
        assert_eq!(rt.stats().io.operations_in_flight, 1, "round {round}");
    }
    drop(peer);
    rt.block_on(echo).unwrap();
    support::wait_until("the receive ended with its stream", || {
        rt.stats().io.operations_in_flight == 0
    });
}

/// Streams that receive more than the ring's buffer pool holds, and are
/// not read meanwhile, run it dry; their receives fall back to their own
/// buffers, and every byte still arrives, in order.
#[test]
fn streams_that_run_the_buffer_pool_dry_still_get_every_byte_in_order() {
    let rt = support::receiving_on_the_ring(2);
    const STREAMS: usize = 20;
    // 20 × 1 MiB unread, against a pool of 4 MiB.
    const EACH: usize = 1 << 20;
    let mut writers = Vec::new();
    let mut streams = Vec::new();
    for _ in 0..STREAMS {
        let (listener, mut peer) = pending_pair();
        let (accepted, _) = listener.accept().unwrap();
        streams.push(accepted);
        writers.push(std::thread::spawn(move || {
            let bytes: Vec<u8> = (0..EACH).map(pattern).collect();
            peer.write_all(&bytes[..1]).unwrap();
            std::thread::sleep(Duration::from_millis(100));
            peer.write_all(&bytes[1..]).unwrap();
        }));
    }
    let got = rt.block_on(async move {
        let mut streams: Vec<TcpStream> = streams
            .into_iter()
            .map(|s| TcpStream::from_std(s).unwrap())
            .collect();
        // Each stream's first read arms its receive; then nobody reads
        // while the rest arrives.
        for stream in &mut streams {
            let mut first = [0u8; 1];
            stream.read_exact(&mut first).await.unwrap();
            assert_eq!(first[0], pattern(0));
        }
        keel::time::sleep(Duration::from_millis(500)).await;
        let mut readers = Vec::new();
        for mut stream in streams {
            readers.push(keel::spawn(async move {
                let mut got = vec![0u8; EACH - 1];
                stream.read_exact(&mut got).await.unwrap();
                got
            }));
        }
        let mut all = Vec::new();
        for reader in readers {
            all.push(reader.await.unwrap());
        }
        all
    });
    for writer in writers {
        writer.join().unwrap();
    }
    for (index, bytes) in got.iter().enumerate() {
        if let Some(at) = (0..EACH - 1).find(|&i| bytes[i] != pattern(i + 1)) {
            panic!("stream {index}: byte {} is wrong", at + 1);
        }
    }
}

/// A stream that receives and is not read holds at most its share of the
/// ring's buffer pool: its multishot receive is cancelled (nothing is left
/// in flight), the rest waits in the socket, and once read, every byte
/// arrives in order and the receive is armed again.
#[test]
fn an_unread_stream_gives_up_its_receive_at_its_share_of_the_pool() {
    let rt = support::receiving_on_the_ring(1);
    let (listener, mut peer) = pending_pair();
    let (accepted, _) = listener.accept().unwrap();
    const TOTAL: usize = 1 << 20;
    let mut stream = rt.block_on(async move { TcpStream::from_std(accepted).unwrap() });
    peer.write_all(&[pattern(0)]).unwrap();
    rt.block_on(async {
        let mut first = [0u8; 1];
        stream.read_exact(&mut first).await.unwrap();
    });
    support::wait_until("the receive is armed", || {
        rt.stats().io.operations_in_flight == 1
    });
    let writer = std::thread::spawn(move || {
        let bytes: Vec<u8> = (1..TOTAL).map(pattern).collect();
        peer.write_all(&bytes).unwrap();
        peer
    });
    // Nobody reads: the receive takes its share of the pool and ends.
    support::wait_until("the receive was cancelled", || {
        rt.stats().io.operations_in_flight == 0
    });
    let got = rt.block_on(async move {
        let mut got = vec![0u8; TOTAL - 1];
        stream.read_exact(&mut got).await.unwrap();
        (got, stream)
    });
    let (got, _stream) = got;
    drop(writer.join().unwrap());
    if let Some(at) = (0..TOTAL - 1).find(|&i| got[i] != pattern(i + 1)) {
        panic!("byte {} is wrong", at + 1);
    }
}

/// Off by default: on the ring, reads then go by readiness, and a read
/// of bytes already in the socket completes in the poll that asks.
#[test]
fn without_ring_receives_reads_go_by_readiness() {
    let rt = support::on_the_ring(1);
    let (listener, mut peer) = pending_pair();
    let (accepted, _) = listener.accept().unwrap();
    peer.write_all(b"ready").unwrap();
    rt.block_on(async move {
        let mut stream = TcpStream::from_std(accepted).unwrap();
        // Wait until the bytes can be read, then look once.
        let mut buf = [0u8; 5];
        stream.read_exact(&mut buf[..1]).await.unwrap();
        let waiting = keel::spawn(async move {
            let mut more = [0u8; 4];
            std::future::poll_fn(|cx| {
                match std::pin::Pin::new(&mut stream).poll_read(cx, &mut more) {
                    std::task::Poll::Ready(result) => {
                        std::task::Poll::Ready(result.map(|n| (n, more)))
                    }
                    std::task::Poll::Pending => panic!("bytes in the socket, and the read waits"),
                }
            })
            .await
            .unwrap()
        });
        assert_eq!(waiting.await.unwrap(), (4, *b"eady"));
    });
    assert_eq!(rt.stats().io.operations_in_flight, 0);
}
