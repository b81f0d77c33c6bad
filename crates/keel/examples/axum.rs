//! An axum app served by keel: the same `Router` an axum user writes for
//! tokio, served through hyper-util on keel's `TcpListener`, HTTP/1 and
//! HTTP/2 on one port, with a graceful shutdown on Ctrl-C or SIGTERM.
//!
//! ```sh
//! cargo run --release -p keel --example axum --features hyper -- 127.0.0.1:3000
//! curl http://127.0.0.1:3000/              # Hello, world!
//! curl --http2-prior-knowledge http://127.0.0.1:3000/hello/keel
//! ```
//!
//! `axum_tokio` is the same app on tokio (`axum::serve`), for comparison;
//! `axum_vs_tokio.sh` runs wrk against both, rounds interleaved.

#[path = "common/serve.rs"]
mod serve;

use axum::extract::Path;
use axum::routing::get;
use axum::Router;
use futures_util::FutureExt;
use keel::net::TcpListener;
use keel::signal::unix::{signal, SignalKind};

/// The app: what would be written for any runtime.
fn app() -> Router {
    Router::new()
        .route("/", get(|| async { "Hello, world!" }))
        .route(
            "/hello/{name}",
            get(|Path(name): Path<String>| async move { format!("Hello, {name}!") }),
        )
}

#[keel::main(workers = 2)]
async fn main() -> std::io::Result<()> {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:3000".to_string());
    let listener = TcpListener::bind(addr.as_str())?;
    println!("listening on http://{}", listener.local_addr()?);
    let mut interrupt = signal(SignalKind::interrupt())?;
    let mut terminate = signal(SignalKind::terminate())?;
    let shutdown = async move {
        keel::select! {
            _ = interrupt.recv().fuse() => println!("SIGINT: shutting down"),
            _ = terminate.recv().fuse() => println!("SIGTERM: shutting down"),
        }
    };
    let left_open = serve::serve(listener, app(), shutdown).await?;
    println!("stopped; {left_open} connections were still open after the drain timeout");
    Ok(())
}
