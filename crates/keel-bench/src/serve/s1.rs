//! S1, IO starvation under CPU load, written once over [`Node`]: the echo
//! service and the CPU tasks.
//!
//! An accept loop with one task per connection (`TCP_NODELAY`, `read` into
//! a 64 KiB buffer, `write_all` back, until end of stream; see
//! [`super::node::accept_echo`]), and `opts.cpu_tasks` tasks that loop: one
//! CPU slice, count it, yield. Every task runs in the runtime's default
//! (keel: the default class): what S1 measures is the scheduler's IO
//! policy within one class, not the classes. keel runs with every setting
//! at its default but the worker count, except that `--no-accounting`
//! turns its accounting off (to measure what it costs); tokio is a
//! multi-thread runtime with defaults but the worker count, its CPU tasks
//! ordinary spawned tasks that call `tokio::task::yield_now()`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::node::{accept_echo, running, Node};
use super::{cpu, Running, S1Opts};
use crate::error::Error;

/// Starts the S1 server on `node`: the echo service and `opts.cpu_tasks`
/// CPU tasks, each of which adds one to `slices` after every slice;
/// returns once the service is bound.
pub fn start<N: Node>(node: N, opts: &S1Opts, slices: Arc<AtomicU64>) -> Result<Running, Error> {
    let (listener, addr) = node.bind(opts.addr)?;
    node.spawn(accept_echo::<N>(listener));
    for _ in 0..opts.cpu_tasks {
        node.spawn(cpu_task::<N>(opts.slice_iters, Arc::clone(&slices)));
    }
    Ok(running(node, addr))
}

/// One CPU task: slices forever, counting each and yielding between them.
pub async fn cpu_task<N: Node>(iters: u64, slices: Arc<AtomicU64>) {
    loop {
        cpu::slice(iters);
        slices.fetch_add(1, Ordering::Relaxed);
        N::yield_now().await;
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::time::Duration;

    use super::*;
    use crate::serve::node_keel::{runtime, KeelNode};
    use crate::serve::node_tokio::TokioNode;

    fn opts() -> S1Opts {
        S1Opts {
            workers: 2,
            io: keel::io::IoBackend::Epoll,
            cpu_tasks: 2,
            slice_iters: 1000,
            addr: "127.0.0.1:0".parse().unwrap(),
            accounting: true,
        }
    }

    /// Answers an echo and runs its CPU tasks; returns the runtime's
    /// figures.
    fn serves_echo_and_counts_slices<N: Node>(node: N) -> serde_json::Value {
        let slices = Arc::new(AtomicU64::new(0));
        let running = start(node, &opts(), slices.clone()).unwrap();
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
        (running.runtime_stats)()
    }

    #[test]
    fn the_keel_server_echoes_counts_slices_and_reports_its_workers() {
        let rt = runtime(2, None, keel::io::IoBackend::Epoll).unwrap();
        let stats = serves_echo_and_counts_slices(KeelNode::new(rt));
        assert_eq!(stats["worker_states"].as_array().unwrap().len(), 2);
    }

    #[test]
    fn the_tokio_server_echoes_counts_slices_and_reports_its_workers() {
        let rt = crate::serve::node_tokio::runtime(2).unwrap();
        let stats = serves_echo_and_counts_slices(TokioNode::new(rt));
        assert_eq!(stats["workers"].as_array().unwrap().len(), 2);
    }
}
