//! The tokio side: code that calls tokio's runtime itself (`tokio::spawn`,
//! `tokio::time`, tokio's sockets, `spawn_blocking`, `Handle::current()`)
//! works wherever keel code runs, and the tokio side lives and dies with
//! its keel runtime; both with threads of its own and on keel's workers
//! (`Builder::tokio_on_workers`).

#[macro_use]
mod support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use keel::{Class, Runtime, UrgentLane};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// What a library does with tokio's runtime: spawn, sleep, open and use
/// tokio sockets, run blocking work. Returns what the spawned task and the
/// blocking closure computed, and the bytes echoed.
async fn use_tokio_as_a_library_does() -> (u32, u32, Vec<u8>) {
    let handle = tokio::runtime::Handle::current();
    let spawned = tokio::spawn(async { 6 * 7 }).await.unwrap();
    tokio::time::sleep(Duration::from_millis(2)).await;
    let blocking = tokio::task::spawn_blocking(|| 40 + 2).await.unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = handle.spawn(async move {
        let (mut stream, _) = listener.accept().await.unwrap();
        let mut buf = [0u8; 5];
        stream.read_exact(&mut buf).await.unwrap();
        stream.write_all(&buf).await.unwrap();
    });
    let mut client = tokio::net::TcpStream::connect(addr).await.unwrap();
    client.write_all(b"hello").await.unwrap();
    let mut echoed = vec![0u8; 5];
    tokio::time::timeout(Duration::from_secs(10), client.read_exact(&mut echoed))
        .await
        .expect("the echo came back in time")
        .unwrap();
    server.await.unwrap();
    (spawned, blocking, echoed)
}

fn runtimes() -> [Runtime; 2] {
    support::with_each_tokio_side(2)
}

/// Checks what [`use_tokio_as_a_library_does`] returned: the spawned
/// task's and the blocking closure's results, and the echo.
fn assert_library_ran((spawned, blocking, echoed): (u32, u32, Vec<u8>)) {
    assert_eq!(
        (spawned, blocking, echoed.as_slice()),
        (42, 42, &b"hello"[..])
    );
}

#[test]
fn tokio_works_inside_keel_tasks_of_every_class() {
    for rt in runtimes() {
        for class in [Class::URGENT, Class::NORMAL, Class::BULK] {
            let out = rt
                .block_on(rt.spawn_in(class, async move {
                    assert_eq!(Class::current(), Some(class));
                    let out = use_tokio_as_a_library_does().await;
                    // Back on a keel worker, in the same class.
                    assert_eq!(Class::current(), Some(class));
                    out
                }))
                .unwrap();
            assert_library_ran(out);
        }
    }
}

#[test]
fn tokio_works_in_block_on_on_the_blocking_pool_and_after_enter() {
    for rt in runtimes() {
        in_block_on_on_the_blocking_pool_and_after_enter(&rt);
    }
}

fn in_block_on_on_the_blocking_pool_and_after_enter(rt: &Runtime) {
    let (spawned, _, echoed) = rt.block_on(use_tokio_as_a_library_does());
    assert_eq!((spawned, echoed.as_slice()), (42, &b"hello"[..]));

    // A blocking closure may call into tokio's runtime too.
    let from_pool = rt
        .block_on(rt.spawn_blocking(|| {
            tokio::runtime::Handle::current().block_on(tokio::spawn(async { 7 }))
        }))
        .unwrap()
        .unwrap();
    assert_eq!(from_pool, 7);

    // Outside block_on, with the runtime entered.
    assert!(tokio::runtime::Handle::try_current().is_err());
    {
        let _enter = rt.enter();
        let task = tokio::spawn(async { 9 });
        assert_eq!(rt.block_on(task).unwrap(), 9);
    }
    assert!(tokio::runtime::Handle::try_current().is_err());
}

#[test]
fn tokio_works_on_the_urgent_lane() {
    for on_workers in [false, true] {
        let rt = Runtime::builder()
            .workers(1)
            .urgent_lane(UrgentLane::default())
            .tokio_on_workers(on_workers)
            .build()
            .unwrap();
        assert_library_ran(
            rt.block_on(rt.spawn_in(Class::URGENT, use_tokio_as_a_library_does()))
                .unwrap(),
        );
    }
}

/// On the workers, one worker is enough: it drives tokio between its polls
/// and while it sleeps, and a tokio timer alone wakes it.
#[test]
fn one_worker_drives_a_tokio_side_on_the_workers() {
    let rt = Runtime::builder()
        .workers(1)
        .tokio_on_workers(true)
        .build()
        .unwrap();
    assert_library_ran(
        rt.block_on(rt.spawn(use_tokio_as_a_library_does()))
            .unwrap(),
    );
    // Nothing but a tokio timer and a tokio task: the parked worker must
    // wake for them.
    let woke = rt
        .block_on(rt.spawn(async {
            tokio::spawn(async {
                tokio::time::sleep(Duration::from_millis(20)).await;
                7
            })
            .await
            .unwrap()
        }))
        .unwrap();
    assert_eq!(woke, 7);
    let tokio = rt.stats().tokio.expect("a tokio side");
    assert_eq!(tokio.workers, 0, "no worker thread of its own");
}

/// CPU seconds of this process's threads named `name` so far, from
/// `/proc/self/task/*/stat` (user + system ticks).
fn threads_cpu_s(name: &str) -> f64 {
    let ticks_per_s = 100.0; // USER_HZ on Linux
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|task| {
            let path = task.ok()?.path();
            let comm = std::fs::read_to_string(path.join("comm")).ok()?;
            if comm.trim() != name {
                return None;
            }
            let stat = std::fs::read_to_string(path.join("stat")).ok()?;
            let fields: Vec<&str> = stat[stat.rfind(')')? + 2..].split(' ').collect();
            let user: f64 = fields[11].parse().ok()?;
            let system: f64 = fields[12].parse().ok()?;
            Some((user + system) / ticks_per_s)
        })
        .sum()
}

/// The one worker of a side on the workers parks in tokio again and
/// again, woken each time by keel's own socket (a peer that answers after
/// a pause) between tokio timers, so tokio's view of keel's reactor goes
/// stale between parks: every event still wakes it, and once idle it
/// sleeps instead of spinning on a readiness keel has already drained.
#[test]
fn a_worker_parked_in_tokio_wakes_for_each_keel_event_and_then_sleeps() {
    use std::io::{Read, Write};
    const ROUNDS: u8 = 40;
    const NAME: &str = "kpark"; // a thread name is cut at 15 bytes
    let rt = Runtime::builder()
        .workers(1)
        .tokio_on_workers(true)
        .thread_name(NAME)
        .build()
        .unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let peer = std::thread::spawn(move || {
        let (mut stream, _) = listener.accept().unwrap();
        for round in 0..ROUNDS {
            std::thread::sleep(Duration::from_millis(2));
            stream.write_all(&[round]).unwrap();
            let mut back = [0u8; 1];
            stream.read_exact(&mut back).unwrap();
            assert_eq!(back[0], round);
        }
    });
    let rt = Arc::new(rt);
    let driver = rt.clone();
    let echoed = support::within(support::WATCHDOG, move || {
        driver
            .block_on(driver.spawn(async move {
                let mut stream = keel::net::TcpStream::connect(addr).await.unwrap();
                let mut echoed = 0;
                for _ in 0..ROUNDS {
                    let mut byte = [0u8; 1];
                    keel::io::AsyncReadExt::read_exact(&mut stream, &mut byte)
                        .await
                        .unwrap();
                    tokio::time::sleep(Duration::from_micros(200)).await;
                    keel::io::AsyncWriteExt::write_all(&mut stream, &byte)
                        .await
                        .unwrap();
                    echoed += 1;
                }
                echoed
            }))
            .unwrap()
    });
    assert_eq!(echoed, ROUNDS);
    peer.join().unwrap();
    // Idle: a worker that spun on a stale readiness would burn the whole
    // second; a sleeping one, next to nothing.
    let before = threads_cpu_s(&format!("{NAME}-0"));
    std::thread::sleep(Duration::from_secs(1));
    let spent = threads_cpu_s(&format!("{NAME}-0")) - before;
    assert!(spent < 0.25, "the idle worker used {spent} s of CPU in 1 s");
}

#[test]
fn without_a_tokio_side_tokio_is_not_there() {
    let rt = Runtime::builder()
        .workers(1)
        .tokio_threads(0)
        .build()
        .unwrap();
    let inside = rt
        .block_on(rt.spawn(async { tokio::runtime::Handle::try_current().is_ok() }))
        .unwrap();
    assert!(!inside);
    assert!(rt.stats().tokio.is_none());
    let refused = Runtime::builder()
        .tokio_threads(0)
        .tokio_on_workers(true)
        .build()
        .unwrap_err();
    assert_eq!(refused.kind(), std::io::ErrorKind::InvalidInput);
    assert!(
        refused.to_string().contains("tokio_on_workers"),
        "{refused}"
    );
}

#[test]
fn dropping_the_runtime_drops_the_tokio_sides_tasks_after_keels() {
    for (on_workers, rt) in [false, true].into_iter().zip(runtimes()) {
        drops_the_tokio_sides_tasks_after_keels(rt, on_workers);
    }
}

fn drops_the_tokio_sides_tasks_after_keels(rt: Runtime, on_workers: bool) {
    let tokio_task_dropped = Arc::new(AtomicBool::new(false));
    let flag = support::DropFlag(tokio_task_dropped.clone());
    // A tokio task that never ends, and a keel task that holds a tokio
    // timer and the tokio task's handle when the runtime drops.
    rt.block_on(async move {
        let forever = tokio::spawn(async move {
            let _flag = flag;
            std::future::pending::<()>().await;
        });
        keel::spawn(async move {
            let _sleep = tokio::time::sleep(Duration::from_secs(3600));
            forever.await.ok();
        });
    });
    if !on_workers {
        // tokio starts its workers when it is built, but a thread counts
        // once it runs its start hook, which may come later.
        support::wait_until("a tokio thread is alive", || {
            rt.stats().tokio.expect("a tokio side").threads >= 1
        });
    }
    assert!(!tokio_task_dropped.load(Ordering::SeqCst));
    drop(rt);
    assert!(
        tokio_task_dropped.load(Ordering::SeqCst),
        "the tokio side's task outlived the runtime"
    );
}

#[test]
fn the_tokio_sides_cpu_and_tasks_are_counted() {
    let rt = Runtime::builder()
        .workers(1)
        .tokio_threads(2)
        .build()
        .unwrap();
    let before = rt.stats().tokio.expect("a tokio side");
    assert_eq!(before.workers, 2);
    // Burn 50 ms of CPU on the tokio side, and keep a task alive there.
    let (hold, held) = tokio::sync::oneshot::channel::<()>();
    rt.block_on(async move {
        tokio::spawn(async move {
            let _ = held.await;
        });
        // 50 ms on a core, however long the kernel keeps it off one.
        tokio::spawn(async { support::cpu_for(Duration::from_millis(50)) })
            .await
            .unwrap();
    });
    // tokio counts the burning task alive until it releases it, a moment
    // after its handle resolved: wait for tokio's own count to settle on
    // the held task alone, then keel's figure must say the same.
    let alive_on_tokio = || {
        rt.block_on(async {
            tokio::runtime::Handle::current()
                .metrics()
                .num_alive_tasks()
        })
    };
    support::wait_until("tokio counts only the held task alive", || {
        alive_on_tokio() == 1
    });
    let after = rt.stats().tokio.expect("a tokio side");
    assert_eq!(after.alive_tasks, 1, "the held task is alive");
    assert!(
        after.cpu >= before.cpu + Duration::from_millis(50),
        "tokio side CPU {:?} -> {:?} after 50 ms of spinning",
        before.cpu,
        after.cpu
    );
    assert!(
        after.busy > before.busy,
        "{:?} -> {:?}",
        before.busy,
        after.busy
    );
    // Both workers count once each has run its start hook.
    support::wait_until("both tokio workers are alive", || {
        rt.stats().tokio.expect("a tokio side").threads >= 2
    });
    drop(hold);
}

/// A keel HTTP/1.1 server answering every request on a connection with
/// `hello`; returns its address.
fn hello_server(rt: &Runtime) -> std::net::SocketAddr {
    let listener = {
        let _enter = rt.enter();
        keel::net::TcpListener::bind("127.0.0.1:0").unwrap()
    };
    let addr = listener.local_addr().unwrap();
    rt.spawn(async move {
        loop {
            let Ok((mut stream, _)) = listener.accept().await else {
                return;
            };
            keel::spawn(async move {
                let mut request = Vec::new();
                let mut buf = [0u8; 1024];
                loop {
                    match stream.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => request.extend_from_slice(&buf[..n]),
                    }
                    // Answer each complete request (no bodies are sent).
                    while let Some(end) = request.windows(4).position(|w| w == b"\r\n\r\n") {
                        request.drain(..end + 4);
                        let reply = b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello";
                        if stream.write_all(reply).await.is_err() {
                            return;
                        }
                    }
                }
            });
        }
    });
    addr
}

#[test]
fn reqwest_runs_inside_keel_tasks() {
    for rt in runtimes() {
        reqwest_inside_keel_tasks(&rt);
    }
}

fn reqwest_inside_keel_tasks(rt: &Runtime) {
    let addr = hello_server(rt);
    let url = format!("http://{addr}/");
    let bodies = rt
        .block_on(rt.spawn(async move {
            // The one-shot helper, then a client whose pooled connection
            // (driven by a task reqwest spawns on tokio) serves 20 requests.
            let mut bodies = vec![reqwest::get(&url).await.unwrap().text().await.unwrap()];
            let client = reqwest::Client::new();
            for _ in 0..20 {
                let response = client.get(&url).send().await.unwrap();
                assert_eq!(response.status(), 200);
                bodies.push(response.text().await.unwrap());
            }
            bodies
        }))
        .unwrap();
    assert_eq!(bodies.len(), 21);
    assert!(bodies.iter().all(|b| b == "hello"), "{bodies:?}");
}
