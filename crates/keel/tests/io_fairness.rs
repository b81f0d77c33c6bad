//! IO under CPU load and the coop budget: sockets are served while every
//! worker is busy, and an always-ready socket cannot hold a worker.
//!
//! Bounds here are deliberately generous (functional, not performance):
//! the tight figures are `keel bench s1`'s.

#[macro_use]
mod support;

use std::io::{Read, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use keel::io::{AsyncReadExt, AsyncWriteExt};
use keel::net::{TcpListener, TcpStream};
use keel::Runtime;
use support::busy_for;

/// 8 tasks that each loop: ~200 µs of CPU work, then yield.
fn start_cpu_hogs(rt: &Runtime, stop: &Arc<AtomicBool>, slices: &Arc<AtomicU64>) {
    for _ in 0..8 {
        let stop = stop.clone();
        let slices = slices.clone();
        rt.spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                busy_for(Duration::from_micros(200));
                slices.fetch_add(1, Ordering::Relaxed);
                keel::yield_now().await;
            }
        });
    }
}

fn cpu_saturated_runtime_still_answers_a_socket(workers: usize) {
    let rt = Runtime::builder().workers(workers).build().unwrap();
    let listener = rt.block_on(async { TcpListener::bind("127.0.0.1:0").unwrap() });
    let addr = listener.local_addr().unwrap();
    rt.spawn(async move {
        let (mut stream, _) = listener.accept().await.unwrap();
        let mut buf = [0u8; 64];
        while let Ok(n) = stream.read(&mut buf).await {
            if n == 0 || stream.write_all(&buf[..n]).await.is_err() {
                break;
            }
        }
    });
    let stop = Arc::new(AtomicBool::new(false));
    let slices = Arc::new(AtomicU64::new(0));
    start_cpu_hogs(&rt, &stop, &slices);
    // Every worker is busy from here on.
    support::wait_until("the CPU tasks run", || slices.load(Ordering::Relaxed) > 50);

    let mut client = std::net::TcpStream::connect(addr).unwrap();
    client.set_nodelay(true).unwrap();
    client.set_read_timeout(Some(support::WATCHDOG)).unwrap();
    let mut rtts = Vec::new();
    let slices_before = slices.load(Ordering::Relaxed);
    for round in 0..200u8 {
        let message = [round; 64];
        let start = Instant::now();
        client.write_all(&message).unwrap();
        let mut echo = [0u8; 64];
        client.read_exact(&mut echo).unwrap();
        rtts.push(start.elapsed());
        assert_eq!(echo, message);
        std::thread::sleep(Duration::from_micros(500));
    }
    let slices_during = slices.load(Ordering::Relaxed) - slices_before;
    stop.store(true, Ordering::Relaxed);
    rtts.sort();
    let median = rtts[rtts.len() / 2];
    eprintln!(
        "{workers} workers: RTT median {median:?}, max {:?}, CPU slices meanwhile {slices_during}",
        rtts[rtts.len() - 1]
    );
    // The CPU tasks kept every worker busy the whole time...
    assert!(
        slices_during > 200,
        "CPU tasks stalled: {slices_during} slices"
    );
    // ...and the socket was still answered within a few IO intervals
    // plus one slice, not after the queues drained (they never do). 20 ms
    // is 200 intervals: only a starved reactor misses it.
    assert!(
        median < Duration::from_millis(20),
        "median RTT {median:?} under CPU load"
    );
}

#[test]
fn a_cpu_saturated_runtime_still_answers_a_socket_one_worker() {
    cpu_saturated_runtime_still_answers_a_socket(1);
}

#[test]
fn a_cpu_saturated_runtime_still_answers_a_socket_two_workers() {
    cpu_saturated_runtime_still_answers_a_socket(2);
}

/// A reader of an always-ready socket (its whole input is already in the
/// kernel's buffer) and a task that counts its own polls share one worker.
/// Returns the reader's progress (bytes read) seen by each of the
/// counter's polls.
fn always_ready_reader_shares_the_worker(rt: &Runtime) -> Vec<usize> {
    const TOTAL: usize = 64 * 1024;
    let listener = rt.block_on(async { TcpListener::bind("127.0.0.1:0").unwrap() });
    let addr = listener.local_addr().unwrap();
    // Fill the connection completely before the reader starts.
    let mut writer = std::net::TcpStream::connect(addr).unwrap();
    writer.write_all(&vec![1u8; TOTAL]).unwrap();
    let (stream, _) = rt.block_on(async { listener.accept().await.unwrap() });

    let progress = Arc::new(AtomicU64::new(0));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let done = Arc::new(AtomicBool::new(false));
    let reader = {
        let progress = progress.clone();
        let done = done.clone();
        rt.spawn(async move {
            let mut stream: TcpStream = stream;
            let mut byte = [0u8; 1];
            // One byte per read: 64k operations, none of which blocks.
            for _ in 0..TOTAL {
                stream.read_exact(&mut byte).await.unwrap();
                progress.fetch_add(1, Ordering::Relaxed);
            }
            done.store(true, Ordering::Relaxed);
        })
    };
    let counter = {
        let seen = seen.clone();
        rt.spawn(async move {
            while !done.load(Ordering::Relaxed) {
                seen.lock()
                    .unwrap()
                    .push(progress.load(Ordering::Relaxed) as usize);
                keel::yield_now().await;
            }
        })
    };
    rt.block_on(async {
        reader.await.unwrap();
        counter.await.unwrap();
    });
    drop(writer);
    let seen = seen.lock().unwrap().clone();
    seen
}

/// The counter ran while the reader was part-way through: the reader was
/// made to yield although its socket never blocked.
fn assert_interleaved(seen: &[usize]) {
    let midway = seen.iter().filter(|&&p| p > 0 && p < 64 * 1024).count();
    assert!(
        midway >= 10,
        "the counter ran only {midway} times while the reader was mid-stream ({} polls)",
        seen.len()
    );
}

#[test]
fn the_io_budget_makes_an_always_ready_reader_yield() {
    // Only the operation count can trigger: the time quota is an hour.
    let rt = Runtime::builder()
        .workers(1)
        .task_io_budget(128)
        .task_quota(Duration::from_secs(3600))
        .build()
        .unwrap();
    let seen = always_ready_reader_shares_the_worker(&rt);
    assert_interleaved(&seen);
}

#[test]
fn the_time_quota_makes_an_always_ready_reader_yield() {
    // Only the quota can trigger: the operation budget never runs out.
    let rt = Runtime::builder()
        .workers(1)
        .task_io_budget(u32::MAX)
        .task_quota(Duration::from_micros(200))
        .build()
        .unwrap();
    let seen = always_ready_reader_shares_the_worker(&rt);
    assert_interleaved(&seen);
}

#[test]
fn io_time_is_accounted_and_states_still_add_up() {
    let rt = Runtime::builder().workers(2).build().unwrap();
    rt.block_on(async {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        keel::spawn(async move {
            let (mut stream, _) = listener.accept().await.unwrap();
            let mut buf = [0u8; 64];
            while let Ok(n) = stream.read(&mut buf).await {
                if n == 0 || stream.write_all(&buf[..n]).await.is_err() {
                    break;
                }
            }
        });
        let mut client = TcpStream::connect(addr).await.unwrap();
        for _ in 0..500 {
            client.write_all(&[9u8; 64]).await.unwrap();
            let mut echo = [0u8; 64];
            client.read_exact(&mut echo).await.unwrap();
        }
    });
    let stats = rt.stats();
    let io: Duration = stats.workers.iter().map(|w| w.io).sum();
    assert!(io > Duration::ZERO, "no IO time accounted: {stats:?}");
    for worker in &stats.workers {
        let wall = worker.wall();
        let since_start = stats.elapsed.saturating_sub(worker.started);
        let gap = wall.abs_diff(since_start);
        assert!(
            gap <= since_start / 100 + Duration::from_millis(2),
            "worker {}: states add to {wall:?}, lived {since_start:?}",
            worker.index
        );
    }
}
