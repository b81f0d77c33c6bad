//! keel against tokio's multi-thread runtime, both with 2 workers.
//!
//! Every group holds a keel and a tokio variant of the same code, so each
//! run prints them side by side. Each runtime is built once per group,
//! outside the timed loops. The scheduling work runs inside a root
//! task spawned on the runtime, so spawns and wakes come from a worker
//! thread, as in a server.
//!
//! - `spawn_join_100k`: spawn 100,000 tasks that each return a small
//!   integer, then await every `JoinHandle`. Measures the spawn path
//!   (allocation, queue push, waking an idle worker), one poll per task and
//!   the join. `worker` spawns from a root task on a worker; `block_on`
//!   spawns from the `block_on` thread, which is not a worker, so every
//!   task goes through the shared injection queue.
//! - `yield_pingpong`: two tasks alternate strictly 10,000 times. In
//!   `channel` they hand a token back and forth through a hand-rolled
//!   one-slot signal (std atomics and a `Mutex<Option<Waker>>`, the same
//!   code for both runtimes), so a round trip is two wakes, two schedules
//!   and two polls. In `yield_turns` they share a turn counter and each
//!   spins on `yield_now` until its turn comes, so it measures the cost of
//!   a yield and a re-poll.
//! - `wake_chain_10k`: 10,000 tasks each wait on their own signal; task
//!   `i`, once woken, signals task `i + 1`. Timed from signalling the first
//!   until the last has completed (spawning and parking the tasks is not
//!   timed). Measures wake-to-poll latency: each link is one wake, one
//!   schedule and one poll, and the runtime decides whether the woken task
//!   runs on the same worker or is taken by the other one.
//! - `accounting`: keel against itself with its per-worker accounting
//!   turned off (a hidden builder switch that exists for this group
//!   only), on the spawn, channel ping-pong, yield ping-pong and
//!   wake-chain workloads, and on one task yielding 100,000 times alone
//!   on one worker (the cleanest view of the per-poll cost: no second
//!   core, no cross-core traffic), each on and off back to back: what the
//!   state counters, queue-delay records and schedule timestamps cost.
//! - `charge_on_cpu`: keel against itself with the preemption meter off
//!   (`Builder::charge_on_cpu(false)`: polls charged their wall time), on
//!   the lone yield loop (two reads of the meter's ring per poll) and the
//!   wake chain (workers that park and wake, each switch logged by the
//!   kernel), on then off back to back.

use std::future::{poll_fn, Future};
use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use criterion::measurement::WallTime;
use criterion::{criterion_group, criterion_main, BenchmarkGroup, BenchmarkId, Criterion};

const WORKERS: usize = 2;
const SPAWN_TASKS: usize = 100_000;
const ROUND_TRIPS: u64 = 10_000;
const CHAIN_TASKS: usize = 10_000;
const YIELD_LOOP: u64 = 100_000;

/// What a benchmark needs from a runtime. Static dispatch only, so the two
/// runtimes run the same monomorphized benchmark code.
trait Rt: Sync + 'static {
    type JoinError: std::fmt::Debug;
    type Join<T: Send + 'static>: Future<Output = Result<T, Self::JoinError>> + Send + 'static;

    const NAME: &'static str;

    fn block_on<F: Future>(&self, future: F) -> F::Output;

    fn spawn<F>(future: F) -> Self::Join<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static;

    fn yield_now() -> impl Future<Output = ()> + Send;
}

/// keel, with its accounting on (`ACCOUNTED`, the only supported setting)
/// or off (for the `accounting` group).
struct Keel<const ACCOUNTED: bool = true>(keel::Runtime);

impl<const ACCOUNTED: bool> Rt for Keel<ACCOUNTED> {
    type JoinError = keel::JoinError;
    type Join<T: Send + 'static> = keel::JoinHandle<T>;

    const NAME: &'static str = if ACCOUNTED {
        "keel"
    } else {
        "keel-unaccounted"
    };

    fn block_on<F: Future>(&self, future: F) -> F::Output {
        self.0.block_on(future)
    }

    fn spawn<F>(future: F) -> keel::JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        keel::spawn(future)
    }

    fn yield_now() -> impl Future<Output = ()> + Send {
        keel::yield_now()
    }
}

struct Tokio(tokio::runtime::Runtime);

impl Rt for Tokio {
    type JoinError = tokio::task::JoinError;
    type Join<T: Send + 'static> = tokio::task::JoinHandle<T>;

    const NAME: &'static str = "tokio";

    fn block_on<F: Future>(&self, future: F) -> F::Output {
        self.0.block_on(future)
    }

    fn spawn<F>(future: F) -> tokio::task::JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        tokio::spawn(future)
    }

    fn yield_now() -> impl Future<Output = ()> + Send {
        tokio::task::yield_now()
    }
}

fn keel_rt<const ACCOUNTED: bool>() -> Keel<ACCOUNTED> {
    keel_rt_with::<ACCOUNTED>(WORKERS)
}

fn keel_rt_with<const ACCOUNTED: bool>(workers: usize) -> Keel<ACCOUNTED> {
    Keel(
        keel::Runtime::builder()
            .workers(workers)
            .accounting(ACCOUNTED)
            .build()
            .expect("build keel runtime"),
    )
}

fn tokio_rt() -> Tokio {
    Tokio(
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(WORKERS)
            .build()
            .expect("build tokio runtime"),
    )
}

/// Runs `future` as a task on a worker of `rt` and waits for its output.
fn on_worker<R: Rt, F>(rt: &R, future: F) -> F::Output
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    rt.block_on(async { R::spawn(future).await.expect("root task failed") })
}

/// A one-slot, auto-reset signal: `notify` sets it and wakes the waiter;
/// a wait completes once it is set, and clears it. Built from std only so
/// both runtimes run identical synchronization code.
struct Signal {
    set: AtomicBool,
    waker: Mutex<Option<Waker>>,
}

impl Signal {
    fn new() -> Signal {
        Signal {
            set: AtomicBool::new(false),
            waker: Mutex::new(None),
        }
    }

    fn notify(&self) {
        self.set.store(true, Ordering::Release);
        let waker = self.waker.lock().expect("signal lock").take();
        if let Some(waker) = waker {
            waker.wake();
        }
    }

    /// Completes (and clears the signal) if it is set; otherwise registers
    /// the waker. The re-check after registering closes the race with a
    /// `notify` that took the slot before the waker was stored.
    fn poll_wait(&self, cx: &mut Context<'_>) -> Poll<()> {
        if self.set.swap(false, Ordering::Acquire) {
            return Poll::Ready(());
        }
        {
            let mut slot = self.waker.lock().expect("signal lock");
            match &mut *slot {
                Some(waker) if waker.will_wake(cx.waker()) => {}
                slot => *slot = Some(cx.waker().clone()),
            }
        }
        if self.set.swap(false, Ordering::Acquire) {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }

    async fn wait(&self) {
        poll_fn(|cx| self.poll_wait(cx)).await;
    }
}

async fn spawn_join<R: Rt>(tasks: usize) -> u64 {
    let handles: Vec<_> = (0..tasks)
        .map(|i| R::spawn(async move { (i & 0xff) as u64 }))
        .collect();
    let mut sum = 0;
    for handle in handles {
        sum += handle.await.expect("task failed");
    }
    sum
}

async fn pingpong_channel<R: Rt>(round_trips: u64) {
    let ping = Arc::new(Signal::new());
    let pong = Arc::new(Signal::new());
    let a = R::spawn({
        let (ping, pong) = (ping.clone(), pong.clone());
        async move {
            for _ in 0..round_trips {
                ping.notify();
                pong.wait().await;
            }
        }
    });
    let b = R::spawn(async move {
        for _ in 0..round_trips {
            ping.wait().await;
            pong.notify();
        }
    });
    a.await.expect("ping task failed");
    b.await.expect("pong task failed");
}

async fn pingpong_yield<R: Rt>(round_trips: u64) {
    let turn = Arc::new(AtomicU64::new(0));
    let player = |parity: u64| {
        let turn = turn.clone();
        R::spawn(async move {
            for i in 0..round_trips {
                let mine = 2 * i + parity;
                while turn.load(Ordering::Acquire) != mine {
                    R::yield_now().await;
                }
                turn.store(mine + 1, Ordering::Release);
            }
        })
    };
    let a = player(0);
    let b = player(1);
    a.await.expect("ping task failed");
    b.await.expect("pong task failed");
}

/// One task yields `yields` times: a poll and a yield, and nothing else.
async fn yield_loop<R: Rt>(yields: u64) {
    for _ in 0..yields {
        R::yield_now().await;
    }
}

/// Spawns the chain, waits until every link is parked on its signal, then
/// returns the time from the first signal to the completion of the last
/// link.
async fn wake_chain<R: Rt>(links: usize) -> Duration {
    let signals: Arc<[Signal]> = (0..links).map(|_| Signal::new()).collect();
    let parked = Arc::new(AtomicUsize::new(0));
    let mut handles: Vec<_> = (0..links)
        .map(|i| {
            let signals = signals.clone();
            let parked = parked.clone();
            R::spawn(async move {
                let mut counted = false;
                poll_fn(|cx| {
                    let poll = signals[i].poll_wait(cx);
                    if poll.is_pending() && !counted {
                        counted = true;
                        parked.fetch_add(1, Ordering::Release);
                    }
                    poll
                })
                .await;
                if let Some(next) = signals.get(i + 1) {
                    next.notify();
                }
            })
        })
        .collect();
    while parked.load(Ordering::Acquire) < links {
        R::yield_now().await;
    }
    let last = handles.pop().expect("at least one link");
    let start = Instant::now();
    signals[0].notify();
    last.await.expect("last link failed");
    let elapsed = start.elapsed();
    for handle in handles {
        handle.await.expect("link failed");
    }
    elapsed
}

type Group<'a> = BenchmarkGroup<'a, WallTime>;

fn group<'a>(c: &'a mut Criterion, name: &str) -> Group<'a> {
    let mut group = c.benchmark_group(name);
    group.sample_size(20);
    group.warm_up_time(Duration::from_secs(2));
    group.measurement_time(Duration::from_secs(5));
    group
}

fn bench_spawn_join<R: Rt>(group: &mut Group<'_>, rt: &R) {
    group.bench_function(BenchmarkId::new(R::NAME, "worker"), |b| {
        b.iter(|| black_box(on_worker(rt, spawn_join::<R>(SPAWN_TASKS))));
    });
    group.bench_function(BenchmarkId::new(R::NAME, "block_on"), |b| {
        b.iter(|| black_box(rt.block_on(spawn_join::<R>(SPAWN_TASKS))));
    });
}

fn bench_pingpong<R: Rt>(group: &mut Group<'_>, rt: &R) {
    group.bench_function(BenchmarkId::new(R::NAME, "channel"), |b| {
        b.iter(|| on_worker(rt, pingpong_channel::<R>(ROUND_TRIPS)));
    });
    group.bench_function(BenchmarkId::new(R::NAME, "yield_turns"), |b| {
        b.iter(|| on_worker(rt, pingpong_yield::<R>(ROUND_TRIPS)));
    });
}

fn bench_wake_chain<R: Rt>(group: &mut Group<'_>, rt: &R) {
    group.bench_function(BenchmarkId::new(R::NAME, "chain"), |b| {
        b.iter_custom(|iters| {
            (0..iters)
                .map(|_| on_worker(rt, wake_chain::<R>(CHAIN_TASKS)))
                .sum()
        });
    });
}

/// Runs the keel variants, then the tokio ones, in one group. Each
/// runtime lives only while its own variants run, so the idle one cannot
/// disturb the other.
fn compare(
    c: &mut Criterion,
    name: &str,
    keel: fn(&mut Group<'_>, &Keel),
    tokio: fn(&mut Group<'_>, &Tokio),
) {
    let mut group = group(c, name);
    keel(&mut group, &keel_rt());
    tokio(&mut group, &tokio_rt());
    group.finish();
}

fn spawn_join_100k(c: &mut Criterion) {
    compare(c, "spawn_join_100k", bench_spawn_join, bench_spawn_join);
}

fn yield_pingpong(c: &mut Criterion) {
    compare(c, "yield_pingpong", bench_pingpong, bench_pingpong);
}

fn wake_chain_10k(c: &mut Criterion) {
    compare(c, "wake_chain_10k", bench_wake_chain, bench_wake_chain);
}

/// keel with and without its accounting, each workload on then off back
/// to back (so that slow drift of a shared machine lands on both alike),
/// each runtime alive only while its own variant runs.
fn accounting(c: &mut Criterion) {
    let mut group = group(c, "accounting");
    fn spawn<const A: bool>(group: &mut Group<'_>) {
        let rt = keel_rt::<A>();
        group.bench_function(BenchmarkId::new(Keel::<A>::NAME, "spawn_join_100k"), |b| {
            b.iter(|| black_box(on_worker(&rt, spawn_join::<Keel<A>>(SPAWN_TASKS))));
        });
    }
    fn channel<const A: bool>(group: &mut Group<'_>) {
        let rt = keel_rt::<A>();
        group.bench_function(BenchmarkId::new(Keel::<A>::NAME, "pingpong_channel"), |b| {
            b.iter(|| on_worker(&rt, pingpong_channel::<Keel<A>>(ROUND_TRIPS)));
        });
    }
    fn yields<const A: bool>(group: &mut Group<'_>) {
        let rt = keel_rt::<A>();
        group.bench_function(BenchmarkId::new(Keel::<A>::NAME, "pingpong_yield"), |b| {
            b.iter(|| on_worker(&rt, pingpong_yield::<Keel<A>>(ROUND_TRIPS)));
        });
    }
    fn chain<const A: bool>(group: &mut Group<'_>) {
        let rt = keel_rt::<A>();
        group.bench_function(BenchmarkId::new(Keel::<A>::NAME, "wake_chain_10k"), |b| {
            b.iter_custom(|iters| {
                (0..iters)
                    .map(|_| on_worker(&rt, wake_chain::<Keel<A>>(CHAIN_TASKS)))
                    .sum()
            });
        });
    }
    fn lone_yields<const A: bool>(group: &mut Group<'_>) {
        let rt = keel_rt_with::<A>(1);
        group.bench_function(
            BenchmarkId::new(Keel::<A>::NAME, "yield_loop_1_worker"),
            |b| {
                b.iter(|| on_worker(&rt, yield_loop::<Keel<A>>(YIELD_LOOP)));
            },
        );
    }
    spawn::<true>(&mut group);
    spawn::<false>(&mut group);
    channel::<true>(&mut group);
    channel::<false>(&mut group);
    yields::<true>(&mut group);
    yields::<false>(&mut group);
    chain::<true>(&mut group);
    chain::<false>(&mut group);
    lone_yields::<true>(&mut group);
    lone_yields::<false>(&mut group);
    group.finish();
}

/// keel with its polls charged their time on a core (the default) and
/// their wall time, back to back.
fn charge_on_cpu(c: &mut Criterion) {
    let mut group = group(c, "charge_on_cpu");
    let build = |workers: usize, on: bool| {
        Keel::<true>(
            keel::Runtime::builder()
                .workers(workers)
                .charge_on_cpu(on)
                .build()
                .expect("build keel runtime"),
        )
    };
    let name = |on: bool| if on { "keel" } else { "keel-wall-charge" };
    for on in [true, false] {
        let rt = build(1, on);
        group.bench_function(BenchmarkId::new(name(on), "yield_loop_1_worker"), |b| {
            b.iter(|| on_worker(&rt, yield_loop::<Keel>(YIELD_LOOP)));
        });
    }
    for on in [true, false] {
        let rt = build(WORKERS, on);
        group.bench_function(BenchmarkId::new(name(on), "wake_chain_10k"), |b| {
            b.iter_custom(|iters| {
                (0..iters)
                    .map(|_| on_worker(&rt, wake_chain::<Keel>(CHAIN_TASKS)))
                    .sum()
            });
        });
    }
    group.finish();
}

/// `criterion_group!` declares its entry point `pub` and undocumented; a
/// private module keeps it out of `missing_docs`.
mod entry {
    use super::{
        accounting, charge_on_cpu, criterion_group, spawn_join_100k, wake_chain_10k, yield_pingpong,
    };

    criterion_group!(
        benches,
        spawn_join_100k,
        yield_pingpong,
        wake_chain_10k,
        accounting,
        charge_on_cpu
    );
}

criterion_main!(entry::benches);
