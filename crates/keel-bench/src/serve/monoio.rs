//! The S0 and S1 servers on monoio, a thread-per-core io_uring runtime:
//! a peer of a different design, where each thread runs a runtime of its
//! own and a task never leaves the thread that spawned it.
//!
//! monoio cannot implement [`super::node::Node`]: its tasks and streams are
//! not `Send` (they hold their thread's driver), where keel's and tokio's
//! servers spawn `Send` futures. So its two servers are written here, as
//! monoio's own examples write a server, and share with the others what
//! is not the runtime: S0's service ([`super::s0`]'s `hello` through
//! hyper), S1's echo stamping and CPU slice. What differs:
//!
//! - **One runtime a worker.** `workers` threads, each a monoio runtime
//!   (`FusionDriver`: io_uring where the kernel has it, epoll otherwise;
//!   `startup.driver` says which) with its own listener on the same
//!   address (`SO_REUSEPORT`): the kernel spreads connections over the
//!   threads by hash, and a connection stays on the thread that accepted
//!   it. S1's CPU tasks are spread over the threads in turn.
//! - **Owned buffers.** The echo reads and writes with monoio's own calls,
//!   which hand the buffer to the kernel and get it back; hyper reads and
//!   writes through `monoio-compat`'s adapter (a copy into a buffer the
//!   adapter owns), the only way hyper runs on monoio.
//! - **No figures of its own.** monoio has no runtime metrics: a `mark`
//!   answers `null`.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::thread::JoinHandle;
use std::time::Duration;

use hyper::server::conn::http1;
use hyper::service::service_fn;
use monoio::io::{AsyncReadRent, AsyncWriteRentExt};
use monoio::net::{ListenerOpts, TcpListener, TcpStream};
use serde_json::json;

use super::s0::{hello, report_connection_error};
use super::stamp::stamp_echo;
use super::{cpu, Running};
use crate::error::Error;

/// What one thread serves.
#[derive(Clone)]
enum Service {
    /// S0: hyper with the 13-byte answer.
    Http,
    /// S1: the echo service, and CPU tasks counting into the counter.
    Echo {
        /// One CPU slice's iterations.
        slice_iters: u64,
        /// Slices done, all tasks together.
        slices: Arc<AtomicU64>,
    },
}

/// Starts S0's server on `workers` monoio threads bound to `addr`.
pub fn start_s0(workers: usize, addr: SocketAddr) -> Result<Running, Error> {
    start(workers, addr, Service::Http, 0)
}

/// Starts S1's server on `workers` monoio threads bound to `addr`, with
/// `cpu_tasks` CPU tasks spread over them, each adding one to `slices`
/// after every slice.
pub fn start_s1(
    workers: usize,
    addr: SocketAddr,
    cpu_tasks: usize,
    slice_iters: u64,
    slices: Arc<AtomicU64>,
) -> Result<Running, Error> {
    start(
        workers,
        addr,
        Service::Echo {
            slice_iters,
            slices,
        },
        cpu_tasks,
    )
}

/// The threads, stopped and joined when dropped.
struct Threads {
    /// Tells every thread's runtime to stop.
    stop: Arc<Stop>,
    /// One a runtime.
    threads: Vec<JoinHandle<()>>,
}

impl Drop for Threads {
    fn drop(&mut self) {
        self.stop.now();
        for thread in self.threads.drain(..) {
            // A thread that panicked has said why on stderr already.
            let _ = thread.join();
        }
    }
}

/// A stop signal each runtime's main future waits on, woken from the
/// thread that stops the server (monoio's `sync` feature). Not a timer: a
/// monoio runtime runs its timers only when it parks, and one whose tasks
/// are always ready (S1's CPU tasks) never does; such a runtime sees the
/// wake only once those tasks have seen the stop and ended.
#[derive(Default)]
struct Stop {
    /// Set once.
    stopped: AtomicBool,
    /// The main futures waiting.
    waiting: Mutex<Vec<Waker>>,
}

impl Stop {
    /// Stops every runtime.
    fn now(&self) {
        self.stopped.store(true, Ordering::SeqCst);
        let waiting = std::mem::take(&mut *self.waiting.lock().unwrap_or_else(|p| p.into_inner()));
        waiting.into_iter().for_each(Waker::wake);
    }

    /// Ready once [`Stop::now`] was called.
    fn wait(&self) -> impl Future<Output = ()> + '_ {
        std::future::poll_fn(|cx| {
            if self.stopped.load(Ordering::SeqCst) {
                return Poll::Ready(());
            }
            self.waiting
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(cx.waker().clone());
            // Looked at again after registering, so a stop in between is
            // not missed.
            if self.stopped.load(Ordering::SeqCst) {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        })
    }
}

/// Starts `workers` threads serving `service` on `addr`, `cpu_tasks`
/// spread over them; returns once every thread is bound.
fn start(
    workers: usize,
    addr: SocketAddr,
    service: Service,
    cpu_tasks: usize,
) -> Result<Running, Error> {
    let workers = workers.max(1);
    let mut threads = Threads {
        stop: Arc::new(Stop::default()),
        threads: Vec::with_capacity(workers),
    };
    // The first thread binds `addr` (perhaps port 0); the others bind the
    // address it got.
    let mut bound = addr;
    for index in 0..workers {
        let (ready, bound_at) = mpsc::channel();
        let service = service.clone();
        let stop = Arc::clone(&threads.stop);
        // CPU tasks in turn: thread `index` runs tasks index, index +
        // workers, ...
        let tasks = (index..cpu_tasks).step_by(workers).count();
        let thread = std::thread::Builder::new()
            .name(format!("monoio-{index}"))
            .spawn(move || serve_on_this_thread(bound, service, tasks, stop, ready))
            .map_err(|e| Error::new(format!("cannot start a monoio thread: {e}")))?;
        threads.threads.push(thread);
        bound = bound_at
            .recv()
            .map_err(|_| Error::new("a monoio thread exited before binding"))?
            .map_err(|e| Error::new(format!("monoio: {e}")))?;
    }
    let driver = if monoio::utils::detect_uring() {
        "io_uring"
    } else {
        "epoll"
    };
    Ok(Running {
        addr: bound,
        log_addr: None,
        api_addr: None,
        admin_addr: None,
        startup: json!({ "driver": driver }),
        runtime_stats: Box::new(|| serde_json::Value::Null),
        guard: Box::new(threads),
    })
}

/// One thread's runtime: binds, says where, serves until `stop`.
fn serve_on_this_thread(
    addr: SocketAddr,
    service: Service,
    cpu_tasks: usize,
    stop: Arc<Stop>,
    ready: mpsc::Sender<Result<SocketAddr, String>>,
) {
    let runtime = monoio::RuntimeBuilder::<monoio::FusionDriver>::new()
        .enable_timer()
        .build();
    let mut runtime = match runtime {
        Ok(runtime) => runtime,
        Err(error) => {
            let _ = ready.send(Err(format!("cannot start a runtime: {error}")));
            return;
        }
    };
    runtime.block_on(async move {
        let listener = match TcpListener::bind_with_config(addr, &ListenerOpts::new()) {
            Ok(listener) => listener,
            Err(error) => {
                let _ = ready.send(Err(format!("cannot bind {addr}: {error}")));
                return;
            }
        };
        let local = listener.local_addr().map_err(|e| e.to_string());
        let _ = ready.send(local);
        if let Service::Echo {
            slice_iters,
            slices,
        } = &service
        {
            for _ in 0..cpu_tasks {
                monoio::spawn(cpu_task(
                    *slice_iters,
                    Arc::clone(slices),
                    Arc::clone(&stop),
                ));
            }
        }
        monoio::spawn(accept_each(listener, service));
        stop.wait().await;
    });
}

/// Accepts connections forever, one task each; a failed accept is
/// reported and followed by a short pause.
async fn accept_each(listener: TcpListener, service: Service) {
    loop {
        match listener.accept().await {
            Ok((stream, peer)) => {
                if let Err(error) = stream.set_nodelay(true) {
                    eprintln!("keel serve: {peer}: cannot set TCP_NODELAY: {error}");
                }
                match service {
                    Service::Http => monoio::spawn(serve_http(stream, peer)),
                    Service::Echo { .. } => monoio::spawn(echo(stream)),
                };
            }
            Err(error) => {
                eprintln!("keel serve: accept failed: {error}");
                monoio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
}

/// S0: hyper on one connection until the client closes it or asks to.
async fn serve_http(stream: TcpStream, peer: SocketAddr) {
    let io = monoio_compat::hyper::MonoioIo::new(monoio_compat::TcpStreamCompat::new(stream));
    if let Err(error) = http1::Builder::new()
        .serve_connection(io, service_fn(hello))
        .await
    {
        report_connection_error(peer, &error);
    }
}

/// S1: echoes everything a connection sends until it closes, stamping a
/// probe's requests with the server's clock.
async fn echo(mut stream: TcpStream) {
    // monoio reads into a vector's capacity and sets its length to what
    // it read.
    let mut buf = Vec::with_capacity(64 * 1024);
    loop {
        let (result, mut received) = stream.read(buf).await;
        match result {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        stamp_echo(&mut received);
        let (result, sent) = stream.write_all(received).await;
        if result.is_err() {
            return;
        }
        buf = sent;
    }
}

/// One CPU task: slices until the server stops, counting each and
/// yielding between them. It looks at the stop itself: a thread whose
/// tasks are always ready never parks, and a wake from another thread
/// (the stop's) reaches a monoio runtime only when it parks.
async fn cpu_task(iters: u64, slices: Arc<AtomicU64>, stop: Arc<Stop>) {
    while !stop.stopped.load(Ordering::Relaxed) {
        cpu::slice(iters);
        slices.fetch_add(1, Ordering::Relaxed);
        YieldNow(false).await;
    }
}

/// Returns `Pending` once, and has its task woken from the back of its
/// thread's queue, so that every other ready task runs first.
///
/// monoio has no `yield_now`, and the way tokio's is written (wake the
/// task, return `Pending`) does not yield there: a task woken during its
/// own poll goes to the front of the queue and runs again at once, so one
/// CPU task would keep its thread to itself. The wake comes instead from
/// a task spawned for it, which goes to the back.
struct YieldNow(
    /// Whether it returned `Pending` already.
    bool,
);

impl Future for YieldNow {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.0 {
            return Poll::Ready(());
        }
        self.0 = true;
        let waker = cx.waker().clone();
        monoio::spawn(async move { waker.wake() });
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};

    use super::*;

    /// A client of the server at `addr`, with a watchdog on its reads.
    fn client(addr: SocketAddr) -> std::net::TcpStream {
        let client = std::net::TcpStream::connect(addr).unwrap();
        client
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        client
    }

    #[test]
    fn the_s0_server_answers_on_every_thread() {
        let running = start_s0(2, "127.0.0.1:0".parse().unwrap()).unwrap();
        assert!(running.startup["driver"].is_string());
        // Enough connections that both threads' listeners take some.
        for _ in 0..8 {
            let mut client = client(running.addr);
            client
                .write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                .unwrap();
            let mut answer = String::new();
            client.read_to_string(&mut answer).unwrap();
            assert!(answer.starts_with("HTTP/1.1 200 OK"), "{answer}");
            assert!(answer.ends_with("Hello, world!"), "{answer}");
        }
        assert!((running.runtime_stats)().is_null());
    }

    #[test]
    fn the_s1_server_echoes_and_counts_slices() {
        let slices = Arc::new(AtomicU64::new(0));
        let running = start_s1(2, "127.0.0.1:0".parse().unwrap(), 3, 1000, slices.clone()).unwrap();
        let mut client = client(running.addr);
        for round in 1..4u8 {
            client.write_all(&[round; 100]).unwrap();
            let mut echo = [0u8; 100];
            client.read_exact(&mut echo).unwrap();
            assert_eq!(echo, [round; 100]);
        }
        // A probe's request (zeros where the stamp goes) comes back
        // stamped with the server's clock.
        client.write_all(&[0; 100]).unwrap();
        let mut stamped = [0u8; 100];
        client.read_exact(&mut stamped).unwrap();
        assert!(stamped.iter().any(|&b| b != 0), "the echo was stamped");
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while slices.load(Ordering::Relaxed) == 0 && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(slices.load(Ordering::Relaxed) > 0);
        drop(running);
    }
}
