//! The urgent lane (`Builder::urgent_lane`): urgent tasks and their sockets
//! are served by a thread of their own, which keeps serving while every
//! worker is held, and which cannot take more than the urgent class's
//! share of the workers' time.

#[macro_use]
mod support;

use std::io::{Read, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use keel::net::TcpListener;
use keel::{Class, LanePriority, Runtime, UrgentLane};
use support::{cpu_for, within};

fn lane_runtime(priority: LanePriority) -> Runtime {
    Runtime::builder()
        .workers(2)
        .urgent_lane(UrgentLane::new().priority(priority))
        .build()
        .unwrap()
}

/// A listener bound by an urgent task: registered with the lane's reactor.
fn urgent_listener(rt: &Runtime) -> TcpListener {
    rt.block_on(rt.spawn_in(Class::URGENT, async {
        TcpListener::bind("127.0.0.1:0").unwrap()
    }))
    .unwrap()
}

fn thread_name() -> Option<String> {
    std::thread::current().name().map(str::to_owned)
}

#[test]
fn urgent_tasks_run_on_the_lane_and_the_others_on_the_workers() {
    let rt = lane_runtime(LanePriority::NiceWorkers(5));
    let urgent = rt.block_on(rt.spawn_in(Class::URGENT, async {
        // Spawned from the lane: urgent again, and on the lane too.
        let child = keel::spawn(async { (Class::current(), thread_name()) });
        (thread_name(), child.await.unwrap())
    }));
    let (name, (child_class, child_name)) = urgent.unwrap();
    assert_eq!(name.as_deref(), Some("keel-worker-urgent"));
    assert_eq!(child_class, Some(Class::URGENT));
    assert_eq!(child_name.as_deref(), Some("keel-worker-urgent"));
    for class in [Class::NORMAL, Class::BULK] {
        let name = rt
            .block_on(rt.spawn_in(class, async { thread_name() }))
            .unwrap();
        assert!(
            name.as_deref()
                .is_some_and(|n| n.starts_with("keel-") && n != "keel-worker-urgent"),
            "{class:?} ran on {name:?}"
        );
    }
    let lane = rt.stats().lane.expect("the runtime has a lane");
    assert!(lane.polls >= 2, "{lane:?}");
    assert_eq!(lane.priority, "workers nice +5");
    assert!(rt.stats().classes[Class::URGENT.index()].polls >= lane.polls);
}

/// Every worker is held by a poll that blocks until the test lets it go;
/// an urgent echo server accepts, reads and answers meanwhile, because its
/// sockets and tasks are the lane's.
#[test]
fn the_lane_serves_its_sockets_while_every_worker_is_held() {
    let rt = lane_runtime(LanePriority::RealTime(1));
    let listener = urgent_listener(&rt);
    let addr = listener.local_addr().unwrap();
    rt.spawn_in(Class::URGENT, async move {
        loop {
            let (mut stream, _) = listener.accept().await.unwrap();
            keel::spawn(async move {
                use futures_util::{AsyncReadExt, AsyncWriteExt};
                let mut buf = [0u8; 64];
                let n = stream.read(&mut buf).await.unwrap();
                stream.write_all(&buf[..n]).await.unwrap();
            });
        }
    });
    // Both workers enter a poll that blocks until `release`.
    let started = Arc::new(Barrier::new(3));
    let release = Arc::new(AtomicBool::new(false));
    for _ in 0..2 {
        let (started, release) = (started.clone(), release.clone());
        rt.spawn_in(Class::NORMAL, async move {
            started.wait();
            let deadline = Instant::now() + Duration::from_secs(20);
            while !release.load(Ordering::SeqCst) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(1));
            }
        });
    }
    started.wait();
    let reply = within(Duration::from_secs(10), move || {
        let mut client = std::net::TcpStream::connect(addr).unwrap();
        client.write_all(b"ping").unwrap();
        let mut reply = [0u8; 4];
        client.read_exact(&mut reply).unwrap();
        reply
    });
    let held = !release.swap(true, Ordering::SeqCst);
    assert_eq!(&reply, b"ping");
    assert!(held, "the workers were still held when the reply came");
    let lane = rt.stats().lane.unwrap();
    assert!(lane.priority.starts_with("fifo:1") || lane.priority.contains("refused"));
}

/// An urgent task that never stops computing is throttled to the urgent
/// class's share of the workers (16 of 99 shares on 2 workers: about a
/// third of one core), and a normal task still runs beside it.
#[test]
fn the_lane_is_bounded_by_the_urgent_share() {
    let rt = lane_runtime(LanePriority::RealTime(1));
    let stop = Arc::new(AtomicBool::new(false));
    {
        let stop = stop.clone();
        rt.spawn_in(Class::URGENT, async move {
            while !stop.load(Ordering::Relaxed) {
                cpu_for(Duration::from_micros(500));
                keel::yield_now().await;
            }
        });
    }
    let normal = Arc::new(AtomicU64::new(0));
    {
        let (stop, normal) = (stop.clone(), normal.clone());
        rt.spawn_in(Class::NORMAL, async move {
            while !stop.load(Ordering::Relaxed) {
                let used = cpu_for(Duration::from_micros(500));
                normal.fetch_add(used.as_nanos() as u64, Ordering::Relaxed);
                keel::yield_now().await;
            }
        });
    }
    std::thread::sleep(Duration::from_millis(100));
    let (before, start) = (rt.stats().lane.unwrap(), Instant::now());
    std::thread::sleep(Duration::from_millis(500));
    let (after, wall) = (rt.stats().lane.unwrap(), start.elapsed());
    stop.store(true, Ordering::Relaxed);
    let charged = after.charged - before.charged;
    eprintln!(
        "lane charged {charged:?} in {wall:?}, throttled {} times; normal got {:?}",
        after.throttled - before.throttled,
        Duration::from_nanos(normal.load(Ordering::Relaxed))
    );
    assert!(after.throttled > before.throttled, "{after:?}");
    // The budget is 32% of one core; the margin allows a poll past it in
    // each window and a late wake at its end.
    assert!(
        charged.as_secs_f64() < 0.5 * wall.as_secs_f64(),
        "the lane ran {charged:?} in {wall:?}"
    );
    assert!(normal.load(Ordering::Relaxed) > 0);
}

/// An urgent task reading a socket whose whole input is already buffered
/// never meets a `WouldBlock`; on the lane it still spends its coop
/// budget and yields, so another urgent task runs while it is mid-stream.
#[test]
fn the_coop_budget_holds_on_the_lane() {
    use futures_util::AsyncReadExt;
    const TOTAL: usize = 64 * 1024;
    let rt = lane_runtime(LanePriority::NiceWorkers(1));
    let listener = urgent_listener(&rt);
    let addr = listener.local_addr().unwrap();
    let mut writer = std::net::TcpStream::connect(addr).unwrap();
    writer.write_all(&vec![1u8; TOTAL]).unwrap();
    let progress = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let reader = {
        let (progress, done) = (progress.clone(), done.clone());
        rt.spawn_in(Class::URGENT, async move {
            let (mut stream, _) = listener.accept().await.unwrap();
            let mut byte = [0u8; 1];
            for _ in 0..TOTAL {
                stream.read_exact(&mut byte).await.unwrap();
                progress.fetch_add(1, Ordering::Relaxed);
            }
            done.store(true, Ordering::Relaxed);
        })
    };
    let counter = rt.spawn_in(Class::URGENT, async move {
        let mut midway = 0;
        while !done.load(Ordering::Relaxed) {
            let p = progress.load(Ordering::Relaxed) as usize;
            if p > 0 && p < TOTAL {
                midway += 1;
            }
            keel::yield_now().await;
        }
        midway
    });
    rt.block_on(reader).unwrap();
    let midway = rt.block_on(counter).unwrap();
    assert!(midway >= 10, "the counter ran {midway} times mid-stream");
}

#[test]
fn a_runtime_with_a_lane_shuts_down_with_urgent_tasks_waiting() {
    let rt = lane_runtime(LanePriority::NiceWorkers(1));
    let listener = urgent_listener(&rt);
    // Nobody connects: the accept can only end with the runtime.
    let waiting = rt.spawn_in(
        Class::URGENT,
        async move { listener.accept().await.is_err() },
    );
    let sleeping = rt.spawn_in(Class::URGENT, keel::time::sleep(Duration::from_secs(60)));
    support::drop_within(rt);
    // Shutdown ends them, and their handles resolve: a task is either
    // dropped (cancelled), or, polled once more while the runtime stops,
    // finds its accept failing, as every IO operation does then.
    match support::block_on(waiting) {
        Err(error) => assert!(error.is_cancelled(), "{error}"),
        Ok(accept_failed) => assert!(accept_failed, "an accept returned a connection"),
    }
    assert!(support::block_on(sleeping).unwrap_err().is_cancelled());
}

#[test]
fn an_out_of_range_priority_is_refused_with_a_clear_error() {
    let error = Runtime::builder()
        .urgent_lane(UrgentLane::new().priority(LanePriority::RealTime(0)))
        .build()
        .unwrap_err();
    assert_eq!(error.kind(), std::io::ErrorKind::InvalidInput);
    assert!(error.to_string().contains("out of range"), "{error}");
}
