//! A server with keel's admin endpoint, a HAProxy-style stats socket on a
//! Unix path, and a graceful shutdown on SIGTERM or Ctrl-C.
//!
//! ```sh
//! cargo run -p keel --example admin_signals --features admin -- \
//!     127.0.0.1:7000 127.0.0.1:9090 /tmp/keel-stats.sock
//! printf 'show info\n' | nc -U /tmp/keel-stats.sock   # the stats socket
//! curl http://127.0.0.1:9090/status                   # the admin endpoint
//! kill -TERM <pid>                                     # drains, then exits
//! ```
//!
//! The application is an echo server. On SIGTERM it stops accepting,
//! gives open connections [`DRAIN`] to finish, aborts the rest, removes
//! the socket file and stops the admin endpoint.

use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt;
use keel::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use keel::net::{TcpListener, UnixListener, UnixStream};
use keel::signal::unix::{signal, SignalKind};
use keel::task::JoinSet;
use keel::{Class, Handle};

/// How long open connections get to finish after SIGTERM.
const DRAIN: Duration = Duration::from_secs(5);

/// The longest command line the stats socket reads: a command is input,
/// and input must not grow a buffer without bound.
const MAX_COMMAND: u64 = 256;

#[keel::main(workers = 2)]
async fn main() -> io::Result<()> {
    let mut args = std::env::args().skip(1);
    let app_addr = args.next().unwrap_or_else(|| "127.0.0.1:7000".into());
    let admin_addr = args.next().unwrap_or_else(|| "127.0.0.1:9090".into());
    let socket_path = args.next().unwrap_or_else(|| "/tmp/keel-stats.sock".into());

    // Listen for the signals first, so that one arriving during start-up
    // already means "shut down" rather than the default action.
    let mut terminate = signal(SignalKind::terminate())?;
    let mut interrupt = signal(SignalKind::interrupt())?;

    let open = Arc::new(AtomicUsize::new(0));
    let admin = keel::admin::Admin::builder()
        .status_section({
            let open = open.clone();
            move || format!("echo connections open: {}\n", open.load(Ordering::Relaxed))
        })
        .serve(admin_addr.as_str(), &Handle::current())?;
    let app = TcpListener::bind(app_addr.as_str())?;
    // A socket file left by a crashed run is replaced; a live one is not.
    let stats = UnixListener::options()
        .replace_stale(true)
        .bind(&socket_path)?;
    println!(
        "echo on {}, admin on http://{}, stats socket {socket_path}, pid {}",
        app.local_addr()?,
        admin.local_addr(),
        std::process::id()
    );

    let stats_task = keel::spawn_in(Class::URGENT, serve_stats(stats, open.clone()));
    let mut connections = JoinSet::new();
    loop {
        keel::select! {
            accepted = app.accept().fuse() => match accepted {
                Ok((stream, _)) => {
                    let open = open.clone();
                    connections.spawn(async move {
                        open.fetch_add(1, Ordering::Relaxed);
                        let _ = echo(stream).await;
                        open.fetch_sub(1, Ordering::Relaxed);
                    });
                }
                Err(error) => {
                    eprintln!("accept: {error}");
                    keel::time::sleep(Duration::from_millis(10)).await;
                }
            },
            // Reap finished connections as we go.
            _ = connections.join_next().fuse() => {}
            _ = terminate.recv().fuse() => { println!("SIGTERM: draining"); break; }
            _ = interrupt.recv().fuse() => { println!("SIGINT: draining"); break; }
        }
    }

    drop(app);
    let drained = keel::time::timeout(DRAIN, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        println!(
            "{} connections still open after {DRAIN:?}: closing them",
            connections.len()
        );
        connections.shutdown().await;
    }
    stats_task.abort();
    let _ = stats_task.await;
    std::fs::remove_file(&socket_path)?;
    admin.shutdown();
    println!("stopped cleanly");
    Ok(())
}

/// Echoes until the peer closes.
async fn echo(mut stream: keel::net::TcpStream) -> io::Result<()> {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = stream.read(&mut buf).await?;
        if n == 0 {
            return Ok(());
        }
        stream.write_all(&buf[..n]).await?;
    }
}

/// The stats socket: one command per line, as HAProxy's (`show info`,
/// `show stat`), an answer, then the connection closes.
async fn serve_stats(listener: UnixListener, open: Arc<AtomicUsize>) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            keel::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        let open = open.clone();
        keel::spawn(async move {
            let _ = answer(stream, &open).await;
        });
    }
}

async fn answer(stream: UnixStream, open: &AtomicUsize) -> io::Result<()> {
    let mut line = String::new();
    BufReader::new((&stream).take(MAX_COMMAND))
        .read_line(&mut line)
        .await?;
    let stats = Handle::current().stats();
    let reply = match line.trim() {
        "show info" => format!(
            "uptime_s: {}\nworkers: {}\nlive_tasks: {}\necho_connections: {}\n",
            stats.elapsed.as_secs(),
            stats.workers.len(),
            Handle::current().live_tasks(),
            open.load(Ordering::Relaxed),
        ),
        "show stat" => {
            let mut out = String::from("# class,shares,busy_ms,polls,queue_delay_p99_us\n");
            for class in &stats.classes {
                out += &format!(
                    "{},{},{},{},{}\n",
                    class.name,
                    class.shares,
                    class.busy.as_millis(),
                    class.polls,
                    class.queue_delay.p99().as_micros()
                );
            }
            out
        }
        other => format!("Unknown command: {other:?}; try 'show info' or 'show stat'\n"),
    };
    (&stream).write_all(reply.as_bytes()).await?;
    (&stream).close().await
}
