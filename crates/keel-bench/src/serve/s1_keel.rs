//! The S1 server on keel: the same server as `s1_tokio`, line for line.
//!
//! A runtime with `opts.workers` workers and every other setting at its
//! default, except that `--no-accounting` turns the runtime's accounting
//! off (to measure what it costs); an accept loop with one task per
//! connection (`TCP_NODELAY`, `read` into a 64 KiB buffer, `write_all`
//! back, until end of stream; see [`super::node_keel::accept_echo`]); and
//! `opts.cpu_tasks` tasks that loop: one CPU slice, count it,
//! `keel::yield_now()`. Every task runs in the default class, as in the
//! tokio peer: what S1 measures is the scheduler's IO policy within one
//! class, not the classes.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use serde_json::Value;

use super::node_keel::{accept_echo, bind, runtime_with, stats_json};
use super::{cpu, Running, S1Opts};
use crate::error::Error;

/// Starts the keel S1 server (see [`super::S1Start`]).
pub fn start(opts: &S1Opts, slices: Arc<AtomicU64>) -> Result<Running, Error> {
    let rt = runtime_with(opts.workers, None, opts.io, opts.accounting)?;
    let (listener, addr) = bind(&rt, opts.addr)?;
    rt.spawn(accept_echo(listener));
    for _ in 0..opts.cpu_tasks {
        rt.spawn(cpu_task(opts.slice_iters, Arc::clone(&slices)));
    }
    let handle = rt.handle().clone();
    Ok(Running {
        addr,
        log_addr: None,
        api_addr: None,
        admin_addr: None,
        startup: Value::Null,
        runtime_stats: Box::new(move || stats_json(&handle.stats())),
        guard: Box::new(rt),
    })
}

/// One CPU task: slices forever, counting each and yielding between them.
pub async fn cpu_task(iters: u64, slices: Arc<AtomicU64>) {
    loop {
        cpu::slice(iters);
        slices.fetch_add(1, Ordering::Relaxed);
        keel::yield_now().await;
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// The keel server answers an echo and runs its CPU tasks.
    #[test]
    fn serves_echo_and_counts_slices() {
        use std::io::{Read, Write};
        let opts = S1Opts {
            workers: 2,
            io: keel::io::IoBackend::Epoll,
            cpu_tasks: 2,
            slice_iters: 1000,
            addr: "127.0.0.1:0".parse().unwrap(),
            accounting: true,
        };
        let slices = Arc::new(AtomicU64::new(0));
        let running = start(&opts, slices.clone()).unwrap();
        let mut client = std::net::TcpStream::connect(running.addr).unwrap();
        client
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        client.write_all(b"ping").unwrap();
        let mut echo = [0u8; 4];
        client.read_exact(&mut echo).unwrap();
        assert_eq!(&echo, b"ping");
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while slices.load(Ordering::Relaxed) == 0 && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(slices.load(Ordering::Relaxed) > 0);
        let stats = (running.runtime_stats)();
        assert_eq!(stats["worker_states"].as_array().unwrap().len(), 2);
    }
}
