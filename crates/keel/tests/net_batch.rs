//! Batched input on `TcpStream`: `min_bytes`, `max_delay`, end-of-file and
//! errors, no loss, adaptive mode, split halves and the delivery counters.
//!
//! Time bounds here are functional (a read that should complete does so
//! within seconds; one that must wait does not complete before most of its
//! delay), never performance figures. The peers that write are plain
//! threads with std sockets, so the only keel reads are the ones under
//! test and the delivery counters can be compared exactly.

#[macro_use]
mod support;

use std::io::{ErrorKind, Write};
use std::net::Shutdown;
use std::sync::mpsc;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use keel::io::{AsyncReadExt, AsyncWriteExt};
use keel::net::{BatchPolicy, TcpListener, TcpStream};
use keel::time::timeout;

/// Generous bound for anything that should happen "at once".
const PROMPT: Duration = Duration::from_secs(5);

/// A keel stream accepted from a std client connected to it.
async fn pair() -> (TcpStream, std::net::TcpStream) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let peer = std::net::TcpStream::connect(listener.local_addr().unwrap()).expect("connect");
    peer.set_nodelay(true).unwrap();
    let (stream, _) = listener.accept().await.expect("accept");
    (stream, peer)
}

/// Runs `write` on its own thread with the std end of a connection once
/// `go` is sent (or at once if `go` is `None`).
fn writer(
    mut peer: std::net::TcpStream,
    go: Option<mpsc::Receiver<()>>,
    write: impl FnOnce(&mut std::net::TcpStream) + Send + 'static,
) -> thread::JoinHandle<std::net::TcpStream> {
    thread::spawn(move || {
        if let Some(go) = go {
            go.recv().expect("the test says go");
        }
        write(&mut peer);
        peer
    })
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

rt_test! {
    fn min_bytes_is_honoured(rt) {
        rt.block_on(async {
            let (mut stream, peer) = pair().await;
            stream.set_batch(BatchPolicy::fixed(1000, Duration::from_secs(5))).unwrap();
            let (go, wait) = mpsc::channel();
            let peer = writer(peer, Some(wait), |peer| {
                for i in 0..10u8 {
                    peer.write_all(&[i; 100]).unwrap();
                    thread::sleep(ms(3));
                }
            });
            let mut buf = vec![0u8; 4096];
            let start = Instant::now();
            go.send(()).unwrap();
            let n = timeout(PROMPT, stream.read(&mut buf)).await.expect("read completes").unwrap();
            assert!(n >= 1000, "the first read returned {n} bytes, below min_bytes");
            // Completed by the size, not by the 5 s delay.
            assert!(start.elapsed() < Duration::from_secs(4), "{:?}", start.elapsed());
            for i in 0..10u8 {
                assert!(buf[i as usize * 100..][..100].iter().all(|&b| b == i));
            }
            drop(peer.join().unwrap());
        });
    }

    fn max_delay_bounds_a_lone_small_write(rt) {
        rt.block_on(async {
            let (mut stream, mut peer) = pair().await;
            stream.set_batch(BatchPolicy::fixed(64 * 1024, ms(50))).unwrap();
            peer.write_all(&[9; 10]).unwrap();
            let mut buf = [0u8; 64];
            let start = Instant::now();
            let n = timeout(PROMPT, stream.read(&mut buf)).await.expect("delivered").unwrap();
            let waited = start.elapsed();
            assert_eq!(&buf[..n], &[9; 10]);
            // max_delay is a minimum wait for a partial batch, not a figure
            // of speed: the read must not have returned long before it.
            assert!(waited >= ms(40), "a partial batch returned after {waited:?}");
        });
    }

    fn max_delay_counts_from_a_byte_that_arrives_while_idle(rt) {
        rt.block_on(async {
            let (mut stream, peer) = pair().await;
            stream.set_batch(BatchPolicy::fixed(64 * 1024, ms(30))).unwrap();
            // The byte comes well after a whole max_delay of silence: the
            // read goes idle first, then must still deliver it.
            let (go, wait) = mpsc::channel();
            let peer = writer(peer, Some(wait), |peer| {
                thread::sleep(ms(100));
                peer.write_all(b"late").unwrap();
            });
            go.send(()).unwrap();
            let mut buf = [0u8; 16];
            let n = timeout(PROMPT, stream.read(&mut buf)).await.expect("delivered").unwrap();
            assert_eq!(&buf[..n], b"late");
            drop(peer.join().unwrap());
        });
    }

    fn end_of_file_is_prompt_below_min_bytes(rt) {
        rt.block_on(async {
            let (mut stream, mut peer) = pair().await;
            stream.set_batch(BatchPolicy::fixed(64 * 1024, Duration::from_secs(30))).unwrap();
            let start = Instant::now();
            peer.write_all(&[1; 10]).unwrap();
            peer.shutdown(Shutdown::Write).unwrap();
            let mut buf = [0u8; 64];
            let n = timeout(PROMPT, stream.read(&mut buf)).await.expect("data before EOF").unwrap();
            assert_eq!(&buf[..n], &[1; 10]);
            let n = timeout(PROMPT, stream.read(&mut buf)).await.expect("EOF").unwrap();
            assert_eq!(n, 0);
            assert!(start.elapsed() < PROMPT);
        });
    }

    fn a_reset_is_prompt_below_min_bytes(rt) {
        rt.block_on(async {
            let listener = TcpListener::bind("127.0.0.1:0").unwrap();
            let mut stream = TcpStream::connect(listener.local_addr().unwrap()).await.unwrap();
            let (peer, _) = listener.accept().await.unwrap();
            stream.set_batch(BatchPolicy::fixed(64 * 1024, Duration::from_secs(30))).unwrap();
            let resetter = keel::spawn(async move {
                (&peer).write_all(&[2; 10]).await.unwrap();
                keel::time::sleep(ms(20)).await;
                // Linger 0: dropping sends RST instead of FIN.
                peer.set_linger(Some(Duration::ZERO)).unwrap();
                drop(peer);
            });
            let start = Instant::now();
            let mut received = Vec::new();
            let mut buf = [0u8; 64];
            let error = loop {
                match timeout(PROMPT, stream.read(&mut buf)).await.expect("the reset surfaces") {
                    Ok(0) => panic!("end-of-file instead of a reset"),
                    Ok(n) => received.extend_from_slice(&buf[..n]),
                    Err(error) => break error,
                }
            };
            assert_eq!(error.kind(), ErrorKind::ConnectionReset, "{error}");
            assert!([2u8; 10].starts_with(&received), "{received:?}");
            assert!(start.elapsed() < PROMPT);
            resetter.await.unwrap();
        });
    }

    fn off_delivers_a_one_byte_write_at_once(rt) {
        rt.block_on(async {
            let (mut stream, peer) = pair().await;
            assert_eq!(stream.batch(), BatchPolicy::off());
            let (go, wait) = mpsc::channel();
            let peer = writer(peer, Some(wait), |peer| {
                thread::sleep(ms(10));
                peer.write_all(b"!").unwrap();
            });
            go.send(()).unwrap();
            let mut buf = [0u8; 4096];
            let start = Instant::now();
            let n = timeout(PROMPT, stream.read(&mut buf)).await.expect("delivered").unwrap();
            assert_eq!(&buf[..n], b"!");
            // No delay of any kind applies with batching off.
            assert!(start.elapsed() < Duration::from_secs(1), "{:?}", start.elapsed());
            drop(peer.join().unwrap());
        });
    }

    fn a_small_buffer_drains_a_released_batch_without_waiting(rt) {
        rt.block_on(async {
            let (mut stream, mut peer) = pair().await;
            stream.set_batch(BatchPolicy::fixed(1000, Duration::from_secs(30))).unwrap();
            let sent: Vec<u8> = (0..1000u32).map(|i| (i % 251) as u8).collect();
            peer.write_all(&sent).unwrap();
            // Ten reads of 100 bytes: the first waits for the batch, the
            // others take the rest of it at once (no 30 s waits, no EOF).
            let mut received = Vec::new();
            let start = Instant::now();
            while received.len() < sent.len() {
                let mut buf = [0u8; 100];
                let n = timeout(PROMPT, stream.read(&mut buf)).await.expect("progress").unwrap();
                assert!(n > 0);
                received.extend_from_slice(&buf[..n]);
            }
            assert_eq!(received, sent);
            assert!(start.elapsed() < PROMPT);
            drop(peer);
        });
    }

    fn a_min_bytes_beyond_the_receive_buffer_still_delivers(rt) {
        rt.block_on(async {
            let (mut stream, peer) = pair().await;
            // Can never be queued at once: clamped to half the buffer.
            stream.set_batch(BatchPolicy::fixed(usize::MAX, Duration::from_secs(30))).unwrap();
            assert_eq!(stream.batch().min_bytes(), Some(usize::MAX));
            let total = 4 << 20;
            let peer = writer(peer, None, move |peer| {
                let chunk = vec![5u8; 64 * 1024];
                for _ in 0..total / chunk.len() {
                    peer.write_all(&chunk).unwrap();
                }
                peer.shutdown(Shutdown::Write).unwrap();
            });
            let mut buf = vec![0u8; 256 * 1024];
            let mut received = 0;
            let start = Instant::now();
            loop {
                let n = timeout(PROMPT, stream.read(&mut buf)).await.expect("progress").unwrap();
                if n == 0 {
                    break;
                }
                assert!(buf[..n].iter().all(|&b| b == 5));
                received += n;
            }
            assert_eq!(received, total);
            assert!(start.elapsed() < Duration::from_secs(10), "{:?}", start.elapsed());
            drop(peer.join().unwrap());
        });
    }

    fn setting_a_policy_wakes_a_waiting_read(rt) {
        rt.block_on(async {
            let (stream, mut peer) = pair().await;
            let stream = Arc::new(stream);
            let long = BatchPolicy::fixed(64 * 1024, Duration::from_secs(30));
            stream.set_batch(long).unwrap();
            peer.write_all(b"held").unwrap();
            let read = |stream: Arc<TcpStream>| keel::spawn(async move {
                let mut buf = [0u8; 16];
                let n = (&*stream).read(&mut buf).await.unwrap();
                buf[..n].to_vec()
            });
            // The same batch size with a shorter delay: the socket's
            // low-water mark stays, so only keel can wake the read.
            let waiting = read(stream.clone());
            keel::time::sleep(ms(20)).await;
            stream.set_batch(BatchPolicy::fixed(64 * 1024, ms(10))).unwrap();
            let got = timeout(PROMPT, waiting).await.expect("woken by the new policy").unwrap();
            assert_eq!(got, b"held");
            // And back to off.
            stream.set_batch(long).unwrap();
            peer.write_all(b"again").unwrap();
            let waiting = read(stream.clone());
            keel::time::sleep(ms(20)).await;
            stream.set_batch(BatchPolicy::off()).unwrap();
            let got = timeout(PROMPT, waiting).await.expect("woken by off").unwrap();
            assert_eq!(got, b"again");
            assert_eq!(stream.batch(), BatchPolicy::off());
        });
    }

    fn a_receive_buffer_too_small_for_the_batch_does_not_stall(rt) {
        rt.block_on(async {
            // The policy is set while the receive buffer is large (the
            // batch is 64 KiB), then the buffer shrinks to a few KiB: the
            // batch can never be queued, and the first read depends on the
            // kernel signalling readable below the mark (memory pressure,
            // a closing window) instead of stalling until max_delay; the
            // reads after it use batches that fit.
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let peer = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
            peer.set_nodelay(true).unwrap();
            let (accepted, _) = listener.accept().unwrap();
            let same_socket = accepted.try_clone().unwrap();
            let mut stream = TcpStream::from_std(accepted).unwrap();
            stream.set_batch(BatchPolicy::fixed(64 * 1024, Duration::from_secs(30))).unwrap();
            socket2::SockRef::from(&same_socket).set_recv_buffer_size(4096).unwrap();
            // Few bytes: with a buffer shrunk under an advertised window,
            // TCP itself (batching or not) lets the peer send only when it
            // probes the window, every 200 ms or so.
            const TOTAL: usize = 20 * 1460;
            let peer = writer(peer, None, move |peer| {
                for _ in 0..20 {
                    peer.write_all(&[6; 1460]).unwrap();
                }
                // End-of-file releases the last, partial batch, which would
                // rightly wait for max_delay otherwise.
                peer.shutdown(Shutdown::Write).unwrap();
            });
            let mut buf = vec![0u8; 64 * 1024];
            let mut received = 0;
            let start = Instant::now();
            loop {
                let n = timeout(PROMPT, stream.read(&mut buf)).await.expect("no stall").unwrap();
                if n == 0 {
                    break;
                }
                assert!(buf[..n].iter().all(|&b| b == 6));
                received += n;
            }
            assert_eq!(received, TOTAL);
            assert!(start.elapsed() < Duration::from_secs(10), "{:?}", start.elapsed());
            drop(peer.join().unwrap());
        });
    }

    fn the_split_read_half_keeps_and_honours_the_policy(rt) {
        rt.block_on(async {
            let (stream, peer) = pair().await;
            let adaptive = BatchPolicy::adaptive(ms(100));
            stream.set_batch(adaptive).unwrap();
            let (mut read_half, write_half) = stream.into_split();
            assert_eq!(read_half.batch(), adaptive);
            read_half.set_batch(BatchPolicy::fixed(1000, Duration::from_secs(5))).unwrap();
            assert_eq!(read_half.batch().min_bytes(), Some(1000));
            let (go, wait) = mpsc::channel();
            let peer = writer(peer, Some(wait), |peer| {
                for _ in 0..10 {
                    peer.write_all(&[3; 100]).unwrap();
                    thread::sleep(ms(3));
                }
            });
            go.send(()).unwrap();
            let mut buf = vec![0u8; 4096];
            let start = Instant::now();
            let n = timeout(PROMPT, read_half.read(&mut buf)).await.expect("read").unwrap();
            assert!(n >= 1000, "the read half returned {n} bytes, below min_bytes");
            assert!(start.elapsed() < Duration::from_secs(4), "{:?}", start.elapsed());
            drop(write_half);
            drop(peer.join().unwrap());
        });
    }

    fn adaptive_adds_no_delay_to_request_response(rt) {
        rt.block_on(async {
            let listener = TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = listener.local_addr().unwrap();
            let delay = ms(100);
            let server = keel::spawn(async move {
                let (mut stream, _) = listener.accept().await.unwrap();
                stream.set_nodelay(true).unwrap();
                stream.set_batch(BatchPolicy::adaptive(delay)).unwrap();
                let mut request = [0u8; 100];
                while stream.read_exact(&mut request).await.is_ok() {
                    request.reverse();
                    stream.write_all(&request).await.unwrap();
                }
            });
            let mut client = TcpStream::connect(addr).await.unwrap();
            client.set_nodelay(true).unwrap();
            client.set_batch(BatchPolicy::adaptive(delay)).unwrap();
            let mut slowest = Duration::ZERO;
            for round in 0..200u32 {
                let mut request = [0u8; 100];
                request[..4].copy_from_slice(&round.to_le_bytes());
                let start = Instant::now();
                client.write_all(&request).await.unwrap();
                let mut response = [0u8; 100];
                client.read_exact(&mut response).await.unwrap();
                slowest = slowest.max(start.elapsed());
                assert_eq!(&response[96..], &round.to_be_bytes());
                // Far below max_delay: no round waited for a batch.
                assert!(start.elapsed() < ms(50), "round {round} took {:?}", start.elapsed());
            }
            drop(client);
            server.await.unwrap();
            eprintln!("slowest round {slowest:?}");
        });
    }

    fn adaptive_gathers_a_stream_of_small_writes(rt) {
        rt.block_on(async {
            let (mut stream, peer) = pair().await;
            stream.set_batch(BatchPolicy::adaptive(ms(100))).unwrap();
            const WRITES: usize = 400;
            let peer = writer(peer, None, |peer| {
                for i in 0..WRITES {
                    peer.write_all(&[(i % 251) as u8; 100]).unwrap();
                    thread::sleep(ms(1));
                }
                peer.shutdown(Shutdown::Write).unwrap();
            });
            let before = keel::Handle::current().stats().deliveries;
            let mut buf = vec![0u8; 64 * 1024];
            let (mut reads, mut bytes) = (0u64, 0usize);
            loop {
                let n = timeout(PROMPT, stream.read(&mut buf)).await.expect("progress").unwrap();
                if n == 0 {
                    break;
                }
                reads += 1;
                bytes += n;
            }
            drop(peer.join().unwrap());
            assert_eq!(bytes, WRITES * 100);
            assert!(reads < WRITES as u64 / 2, "{reads} deliveries for {WRITES} writes");
            let counted = keel::Handle::current().stats().deliveries.since(&before);
            assert_eq!(counted.adaptive.count, reads);
            assert_eq!(counted.adaptive.bytes, bytes as u64);
        });
    }

    fn deliveries_are_counted_per_mode(rt) {
        rt.block_on(async {
            let start = keel::Handle::current().stats().deliveries;
            let policies = [
                BatchPolicy::off(),
                BatchPolicy::fixed(300, ms(20)),
                BatchPolicy::adaptive(ms(20)),
            ];
            let mut counted = Vec::new();
            for policy in policies {
                let (mut stream, peer) = pair().await;
                stream.set_batch(policy).unwrap();
                let peer = writer(peer, None, |peer| {
                    for _ in 0..5 {
                        peer.write_all(&[4; 200]).unwrap();
                        thread::sleep(ms(2));
                    }
                    peer.shutdown(Shutdown::Write).unwrap();
                });
                let (mut reads, mut bytes) = (0u64, 0u64);
                let mut buf = [0u8; 512];
                loop {
                    let n = timeout(PROMPT, stream.read(&mut buf)).await.expect("progress").unwrap();
                    if n == 0 {
                        break;
                    }
                    reads += 1;
                    bytes += n as u64;
                }
                assert_eq!(bytes, 1000);
                counted.push((reads, bytes));
                drop(peer.join().unwrap());
            }
            let stats = keel::Handle::current().stats().deliveries.since(&start);
            assert_eq!((stats.off.count, stats.off.bytes), counted[0]);
            assert_eq!((stats.fixed.count, stats.fixed.bytes), counted[1]);
            assert_eq!((stats.adaptive.count, stats.adaptive.bytes), counted[2]);
            assert_eq!(stats.total().bytes, 3000);
        });
    }
}

/// Random write patterns under random policies: the bytes read are the
/// bytes written, in order. One runtime for all cases; chunks and pauses
/// are small so that 1000 cases finish in seconds in a debug build.
#[test]
fn no_data_is_lost_or_reordered() {
    use proptest::prelude::*;
    use proptest::test_runner::{Config, TestRunner};

    #[derive(Debug, Clone)]
    struct Case {
        /// (chunk size, pause after it in µs)
        chunks: Vec<(usize, u64)>,
        policy: BatchPolicy,
        buffer: usize,
    }

    support::within(Duration::from_secs(120), move || {
        let policy = prop_oneof![
            Just(BatchPolicy::off()),
            (0usize..3000, 0u64..4).prop_map(|(min, delay)| BatchPolicy::fixed(min, ms(delay))),
            (0u64..4).prop_map(|delay| BatchPolicy::adaptive(ms(delay))),
        ];
        let chunk = (
            1usize..700,
            // Mostly back to back, some short pauses, a few longer than
            // max_delay (so that batches time out and streams go idle).
            prop_oneof![12 => Just(0u64), 4 => 0u64..800, 1 => 1000u64..6000],
        );
        let case = (
            proptest::collection::vec(chunk, 1..16),
            policy,
            1usize..2048,
        )
            .prop_map(|(chunks, policy, buffer)| Case {
                chunks,
                policy,
                buffer,
            });
        let rt = keel::Runtime::builder().workers(2).build().unwrap();
        let listener = rt.block_on(async { TcpListener::bind("127.0.0.1:0").unwrap() });
        let addr = listener.local_addr().unwrap();
        let mut runner = TestRunner::new(Config {
            cases: 1000,
            failure_persistence: None,
            ..Config::default()
        });
        runner
            .run(&case, |case| {
                let mut peer = std::net::TcpStream::connect(addr).unwrap();
                peer.set_nodelay(true).unwrap();
                let mut counter = 0u8;
                let chunks: Vec<(Vec<u8>, u64)> = case
                    .chunks
                    .iter()
                    .map(|&(len, pause)| {
                        let bytes = (0..len)
                            .map(|_| {
                                counter = counter.wrapping_add(1) % 251;
                                counter
                            })
                            .collect();
                        (bytes, pause)
                    })
                    .collect();
                let sent: Vec<u8> = chunks.iter().flat_map(|(b, _)| b.clone()).collect();
                let write = thread::spawn(move || {
                    for (bytes, pause) in chunks {
                        peer.write_all(&bytes).unwrap();
                        if pause > 0 {
                            thread::sleep(Duration::from_micros(pause));
                        }
                    }
                    peer.shutdown(Shutdown::Write).unwrap();
                    peer
                });
                let received = rt.block_on(async {
                    let (mut stream, _) = listener.accept().await.unwrap();
                    stream.set_batch(case.policy).unwrap();
                    let mut received = Vec::new();
                    let mut buf = vec![0u8; case.buffer];
                    loop {
                        let n = timeout(PROMPT, stream.read(&mut buf))
                            .await
                            .expect("a read completes")
                            .unwrap();
                        if n == 0 {
                            break received;
                        }
                        received.extend_from_slice(&buf[..n]);
                    }
                });
                drop(write.join().unwrap());
                prop_assert_eq!(received.len(), sent.len());
                prop_assert!(received == sent, "bytes differ under {:?}", case.policy);
                Ok(())
            })
            .unwrap();
    });
}

/// Keeps the calling thread busy for `d` (a task that holds its worker).
fn spin_for(d: Duration) {
    let until = Instant::now() + d;
    while Instant::now() < until {
        std::hint::spin_loop();
    }
}

/// Deliveries that batch deadlines release together queue behind a task
/// that waited for an event: a request that arrives while the first of
/// them runs is answered next, not after the rest of the burst.
///
/// One worker, 16 batched streams with a few bytes each and a 20 ms
/// delay, and a plain stream standing for an API connection. A task holds
/// the worker past every deadline, so one turn of the wheel releases all
/// 16; the first delivery's handler writes the API's request and holds
/// the worker past the IO interval, so the request is seen at the end of
/// that poll, with 15 deliveries still queued.
#[test]
fn deadline_batches_queue_behind_events() {
    const STREAMS: usize = 16;
    let rt = keel::Runtime::builder().workers(1).build().unwrap();
    let order = rt.block_on(async {
        let order = Arc::new(std::sync::Mutex::new(Vec::<&'static str>::new()));
        let mut streams = Vec::new();
        let mut peers = Vec::new();
        for _ in 0..STREAMS {
            let (stream, mut peer) = pair().await;
            stream
                .set_batch(BatchPolicy::fixed(64 * 1024, ms(20)))
                .unwrap();
            peer.write_all(&[7; 10]).unwrap();
            streams.push(stream);
            peers.push(peer);
        }
        let (mut api, api_peer) = pair().await;
        let trigger = Arc::new(std::sync::Mutex::new(Some(api_peer)));
        let mut tasks = Vec::new();
        for mut stream in streams {
            let (order, trigger) = (Arc::clone(&order), Arc::clone(&trigger));
            tasks.push(keel::spawn(async move {
                let mut buf = [0u8; 64];
                let n = stream.read(&mut buf).await.unwrap();
                assert_eq!(n, 10);
                order.lock().unwrap().push("batch");
                let first = trigger.lock().unwrap().take();
                if let Some(mut api_peer) = first {
                    api_peer.write_all(b"GET").unwrap();
                    spin_for(ms(3));
                }
            }));
        }
        let api_order = Arc::clone(&order);
        tasks.push(keel::spawn(async move {
            let mut buf = [0u8; 64];
            assert!(api.read(&mut buf).await.unwrap() > 0);
            api_order.lock().unwrap().push("api");
        }));
        // Holds the worker until every deadline has passed.
        tasks.push(keel::spawn(async { spin_for(ms(60)) }));
        for task in tasks {
            timeout(PROMPT, task)
                .await
                .expect("every task ends")
                .unwrap();
        }
        drop(peers);
        let order = order.lock().unwrap().clone();
        order
    });
    assert_eq!(order.len(), STREAMS + 1, "{order:?}");
    assert_eq!(
        order.iter().position(|&o| o == "api"),
        Some(1),
        "the request waited behind the released batches: {order:?}"
    );
}
