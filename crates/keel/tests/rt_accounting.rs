//! Every worker accounts all of its wall time, in the right state.

#[macro_use]
mod support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use keel::{Class, Runtime, SpinPolicy};
use support::busy_for;

/// Allowed gap between a worker's states and the wall time, as a fraction.
const TOLERANCE: f64 = 0.01;

rt_test! {
    fn states_add_up_to_wall_time(rt) {
        // Busy, then idle (parked or spinning), then yield-heavy.
        rt.block_on(async {
            let tasks: Vec<_> = (0..4)
                .map(|_| keel::spawn(async { busy_for(Duration::from_millis(100)) }))
                .collect();
            for task in tasks {
                task.await.unwrap();
            }
        });
        std::thread::sleep(Duration::from_millis(150));
        rt.block_on(async {
            let tasks: Vec<_> = (0..8)
                .map(|_| {
                    keel::spawn(async {
                        for _ in 0..2_000 {
                            keel::yield_now().await;
                        }
                    })
                })
                .collect();
            for task in tasks {
                task.await.unwrap();
            }
        });
        std::thread::sleep(Duration::from_millis(100));
        let stats = rt.stats();
        for worker in &stats.workers {
            let states = worker.wall().as_secs_f64();
            let wall = (stats.elapsed - worker.started).as_secs_f64();
            eprintln!("worker {}: states {states:.4}s, wall {wall:.4}s: {worker:?}", worker.index);
            assert!(
                (states - wall).abs() <= wall * TOLERANCE,
                "worker {}: states add up to {states:.4}s, its wall time is {wall:.4}s",
                worker.index
            );
        }
    }
}

#[test]
fn runtime_clock_agrees_with_an_outside_clock() {
    let started = Instant::now();
    let rt = Runtime::builder().workers(2).build().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let stats = rt.stats();
    let outside = started.elapsed();
    // The runtime's clock is the time-stamp counter, scaled by a rate
    // measured at start: it agrees with the OS clock within the
    // tolerance, not to the nanosecond.
    let (elapsed, outside_s) = (stats.elapsed.as_secs_f64(), outside.as_secs_f64());
    assert!(
        (elapsed - outside_s).abs() <= outside_s * TOLERANCE,
        "runtime clock {elapsed:.4}s against {outside_s:.4}s outside"
    );
    for worker in &stats.workers {
        let states = worker.wall().as_secs_f64();
        let wall = outside.as_secs_f64() - worker.started.as_secs_f64();
        assert!(
            (states - wall).abs() <= wall * TOLERANCE,
            "worker {}: {states:.4}s accounted in {wall:.4}s since it started",
            worker.index
        );
    }
}

#[test]
fn an_idle_worker_that_only_spins_reports_spin_not_task() {
    let rt = Runtime::builder()
        .workers(1)
        .spin(SpinPolicy::Custom(Duration::from_secs(5)))
        .build()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let worker = &rt.stats().workers[0];
    eprintln!("{worker:?}");
    assert_eq!(worker.busy(), Duration::ZERO, "no task ran");
    assert_eq!(worker.parked, Duration::ZERO, "the worker never parked");
    assert!(
        worker.spin.as_secs_f64() >= worker.wall().as_secs_f64() * 0.9,
        "a spinning worker reports {:?} of spin in {:?}",
        worker.spin,
        worker.wall()
    );
}

#[test]
fn a_worker_inside_a_long_poll_reports_task_time_of_its_class() {
    let rt = one_worker_that_parks();
    let release = Arc::new(AtomicBool::new(false));
    let task = {
        let release = release.clone();
        rt.spawn_in(Class::BULK, async move {
            // One poll that blocks its worker until released.
            while !release.load(Ordering::Relaxed) {
                std::hint::spin_loop();
            }
        })
    };
    std::thread::sleep(Duration::from_millis(50));
    let before = rt.stats().workers[0].clone();
    std::thread::sleep(Duration::from_millis(300));
    let during = rt.stats().workers[0].since(&before);
    release.store(true, Ordering::Relaxed);
    rt.block_on(task).unwrap();
    eprintln!("during the poll: {during:?}");
    let bulk = during.task[Class::BULK.index()];
    assert!(
        bulk.as_secs_f64() >= during.wall().as_secs_f64() * 0.95,
        "bulk task time {bulk:?} over {:?} of a poll in progress",
        during.wall()
    );
    assert_eq!(during.polls[Class::BULK.index()], 0, "still the same poll");
}

#[test]
fn an_idle_worker_without_spin_reports_parked() {
    let rt = Runtime::builder()
        .workers(2)
        .spin(SpinPolicy::None)
        .build()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    for worker in rt.stats().workers {
        assert!(
            worker.parked.as_secs_f64() >= worker.wall().as_secs_f64() * 0.9,
            "an idle worker reports {:?} parked in {:?}",
            worker.parked,
            worker.wall()
        );
        assert_eq!(worker.spin, Duration::ZERO);
    }
}

/// A runtime of one worker that parks as soon as it runs dry.
fn one_worker_that_parks() -> Runtime {
    Runtime::builder()
        .workers(1)
        .spin(SpinPolicy::None)
        .build()
        .unwrap()
}

/// CPU time of the calling thread, as the kernel counts it.
#[cfg(target_os = "linux")]
fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the whole call.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0);
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// Spins until the calling thread has used `cpu` of CPU time.
#[cfg(target_os = "linux")]
fn compute_for(cpu: Duration) {
    let start = thread_cpu();
    while thread_cpu() - start < cpu {
        std::hint::spin_loop();
    }
}

/// A worker that computes for 60 ms of its thread's CPU time reports at
/// least that much `cpu`, and no more than it spent in on-CPU states plus
/// what its parks cost: microseconds as a rule, but a virtual machine
/// whose host takes the core away inside a system call charges that time
/// to the thread, 10 ms once on a busy host, hence the 20 ms allowed. A
/// parked worker's `cpu` does not grow.
#[cfg(target_os = "linux")]
#[test]
fn worker_cpu_time_comes_from_the_kernel() {
    let rt = one_worker_that_parks();
    let before = rt.stats();
    rt.block_on(
        rt.handle()
            .spawn(async { compute_for(Duration::from_millis(60)) }),
    )
    .unwrap();
    // Let the worker park (it publishes, and samples, before it sleeps).
    std::thread::sleep(Duration::from_millis(50));
    let after = rt.stats();
    let worker = after.workers[0].since(&before.workers[0]);
    eprintln!("{worker:?}, on cpu {:?}", worker.on_cpu());
    assert!(worker.cpu >= Duration::from_millis(59), "{worker:?}");
    assert!(
        worker.cpu <= worker.on_cpu() + Duration::from_millis(20),
        "cpu {:?} beyond on-CPU states {:?}",
        worker.cpu,
        worker.on_cpu()
    );
    assert!(worker.preempted() <= worker.on_cpu());

    // Parked: its clock stands still.
    std::thread::sleep(Duration::from_millis(100));
    let later = rt.stats();
    let idle = later.workers[0].since(&after.workers[0]);
    assert!(idle.parked >= Duration::from_millis(90), "{idle:?}");
    assert!(idle.cpu <= Duration::from_millis(5), "{idle:?}");
}

/// A worker woken 2,000 times from outside, parking in between, reports
/// the CPU its thread used going to sleep and waking up (estimated from
/// one park in eight, some 250 here): some of it (each park is at least a
/// system call) but never more than its thread's CPU clock, which a
/// figure read from the wall clock while parked (some 100 ms here) would
/// exceed on a quiet machine. That the estimate leaves out the tasks'
/// CPU is shown by the accounting's unit tests, which choose the parks it
/// times.
#[cfg(target_os = "linux")]
#[test]
fn a_worker_that_parks_reports_the_cpu_of_parking() {
    const PARKS: u32 = 2_000;
    let rt = one_worker_that_parks();
    let before = rt.stats();
    for _ in 0..PARKS {
        rt.block_on(rt.handle().spawn(async {})).unwrap();
        // Long enough for the worker to park again.
        std::thread::sleep(Duration::from_micros(50));
    }
    // Parking again publishes.
    std::thread::sleep(Duration::from_millis(50));
    let total = rt.stats().workers[0].clone();
    let worker = total.since(&before.workers[0]);
    eprintln!("{worker:?}");
    assert!(
        worker.parked >= Duration::from_micros(50) * PARKS,
        "{worker:?}"
    );
    assert!(
        worker.park_cpu >= Duration::from_nanos(100) * PARKS,
        "park CPU {:?} for {PARKS} parks",
        worker.park_cpu
    );
    assert!(
        total.park_cpu <= total.cpu,
        "park CPU {:?} against thread CPU {:?}",
        total.park_cpu,
        total.cpu
    );
}

/// With the accounting off (the overhead benchmark's switch) tasks still
/// run, and the snapshot shows no polls and no queue delays.
#[test]
fn accounting_off_records_nothing() {
    let rt = Runtime::builder()
        .workers(2)
        .accounting(false)
        .build()
        .unwrap();
    let sum: u64 = rt.block_on(async {
        let tasks: Vec<_> = (0..100u64).map(|i| keel::spawn(async move { i })).collect();
        let mut sum = 0;
        for task in tasks {
            sum += task.await.unwrap();
        }
        sum
    });
    assert_eq!(sum, 4950);
    let stats = rt.stats();
    assert!(stats
        .classes
        .iter()
        .all(|c| c.polls == 0 && c.queue_delay.count() == 0));
    assert!(stats.workers.iter().all(|w| w.busy().is_zero()));

    // A poll in progress while the snapshot is taken is not shown as task
    // time either: the worker's state word is kept for the scheduler, but
    // nothing is accounted from it.
    let started = Arc::new(AtomicBool::new(false));
    let release = Arc::new(AtomicBool::new(false));
    let holder = rt.handle().spawn({
        let (started, release) = (Arc::clone(&started), Arc::clone(&release));
        async move {
            started.store(true, Ordering::SeqCst);
            while !release.load(Ordering::SeqCst) {
                std::hint::spin_loop();
            }
        }
    });
    support::wait_until("the holding poll starts", || started.load(Ordering::SeqCst));
    std::thread::sleep(Duration::from_millis(20));
    let during = rt.stats();
    release.store(true, Ordering::SeqCst);
    rt.block_on(holder).unwrap();
    assert!(
        during.workers.iter().all(|w| w.busy().is_zero()),
        "{:?}",
        during.workers.iter().map(|w| w.busy()).collect::<Vec<_>>()
    );
}

/// A poll that holds its worker for 30 ms shows as a gap of at least that
/// between the worker's looks at the reactor.
#[test]
fn io_poll_gap_shows_a_poll_that_holds_its_worker() {
    let rt = one_worker_that_parks();
    rt.block_on(
        rt.handle()
            .spawn(async { busy_for(Duration::from_millis(30)) }),
    )
    .unwrap();
    support::wait_until("the gap is published", || {
        rt.stats().workers[0].io_poll_gap_max >= Duration::from_millis(30)
    });
}

/// A worker with work looks at the reactor after every `io_every` task
/// polls, and each look is counted: a task that yields 400 times on a
/// worker that looks every 4 polls (and, by time, only once an hour) gets
/// at least 100 looks.
#[test]
fn io_looks_count_each_look_at_the_reactor() {
    let rt = Runtime::builder()
        .workers(1)
        .spin(SpinPolicy::None)
        .io_every(4)
        .io_interval(Duration::from_secs(3600))
        .build()
        .unwrap();
    let before = rt.stats().workers[0].clone();
    rt.block_on(rt.handle().spawn(async {
        for _ in 0..400 {
            keel::yield_now().await;
        }
    }))
    .unwrap();
    support::wait_until("the looks are published", || {
        rt.stats().workers[0].since(&before).io_looks >= 100
    });
}

/// A task that yields is stamped as scheduled when its poll ends, not when
/// it began: on one worker, two tasks that each poll about 5 ms and yield
/// wait one poll of the other between their polls, where a stamp taken at
/// the start of the poll would report two.
///
/// The polls' length is what the tasks measure of their own polls, not
/// the 5 ms they aim at: on a busy machine the kernel stretches a poll,
/// and the wait that follows it, alike.
#[test]
fn a_yielding_task_waits_from_the_end_of_its_poll() {
    const POLL: Duration = Duration::from_millis(5);
    const ROUNDS: usize = 40;
    let rt = one_worker_that_parks();
    let polls = Arc::new(std::sync::Mutex::new(Vec::new()));
    let tasks: Vec<_> = (0..2)
        .map(|_| {
            let polls = polls.clone();
            rt.spawn_in(Class::BULK, async move {
                for _ in 0..ROUNDS {
                    let start = Instant::now();
                    busy_for(POLL);
                    polls.lock().unwrap().push(start.elapsed());
                    keel::yield_now().await;
                }
            })
        })
        .collect();
    for task in tasks {
        rt.block_on(task).unwrap();
    }
    // Publication happens when the worker parks, which it did by now.
    std::thread::sleep(Duration::from_millis(50));
    let delay = &rt.stats().classes[Class::BULK.index()].queue_delay;
    let mut polls = polls.lock().unwrap().clone();
    polls.sort();
    let poll = polls[polls.len() / 2];
    eprintln!(
        "yield to next poll: p50 {:?}, p99 {:?} over {} polls; a poll's median {poll:?}",
        delay.p50(),
        delay.p99(),
        delay.count()
    );
    assert!(delay.count() >= 2 * ROUNDS as u64);
    assert!(
        delay.p50() >= poll * 8 / 10 && delay.p50() <= poll * 3 / 2,
        "p50 {:?}: not about one poll of the other task ({poll:?}; two would be a \
         stamp from the start of the poll)",
        delay.p50()
    );
}

/// A task woken by another task's poll goes to that worker's LIFO slot,
/// where no other worker can take it: it can run no sooner than the
/// waking poll's end, and its queue delay counts from there. Here the
/// waking poll computes for 50 ms after the wake; counted from the wake,
/// the delay would be at least that.
#[test]
fn a_task_woken_into_the_lifo_slot_waits_from_the_end_of_the_waking_poll() {
    const AFTER_WAKE: Duration = Duration::from_millis(50);
    let rt = Runtime::builder()
        .workers(1)
        .spin(SpinPolicy::None)
        .build()
        .unwrap();
    let signal = Arc::new(support::Signal::default());
    let waiting = Arc::new(AtomicBool::new(false));
    let woken = rt.spawn_in(Class::BULK, {
        let (signal, waiting) = (signal.clone(), waiting.clone());
        async move {
            waiting.store(true, Ordering::SeqCst);
            signal.wait().await;
        }
    });
    support::wait_until("the bulk task waits", || waiting.load(Ordering::SeqCst));
    let waker = rt.spawn_in(Class::NORMAL, async move {
        signal.notify();
        busy_for(AFTER_WAKE);
    });
    rt.block_on(async {
        waker.await.unwrap();
        woken.await.unwrap();
    });
    // Published when the worker parks, which it does once idle.
    support::wait_until("both bulk polls are recorded", || {
        rt.stats().classes[Class::BULK.index()].queue_delay.count() >= 2
    });
    let delays = &rt.stats().classes[Class::BULK.index()].queue_delay;
    assert_eq!(delays.count(), 2, "the spawn's first poll and the wake's");
    assert!(
        delays.max() < AFTER_WAKE,
        "the woken task's delay {:?} counts the waking poll's {AFTER_WAKE:?}",
        delays.max()
    );
}
