//! The `axum` example's app on tokio (`axum::serve`), two worker threads
//! as the keel example has, for side-by-side measurements:
//!
//! ```sh
//! cargo run --release -p keel --example axum_tokio -- 127.0.0.1:3001
//! ```

use axum::extract::Path;
use axum::routing::get;
use axum::serve::ListenerExt;
use axum::Router;

/// The same app as the `axum` example.
fn app() -> Router {
    Router::new()
        .route("/", get(|| async { "Hello, world!" }))
        .route(
            "/hello/{name}",
            get(|Path(name): Path<String>| async move { format!("Hello, {name}!") }),
        )
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> std::io::Result<()> {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:3001".to_string());
    let listener = tokio::net::TcpListener::bind(addr.as_str()).await?;
    println!("listening on http://{}", listener.local_addr()?);
    // TCP_NODELAY, as the keel example sets it.
    let listener = listener.tap_io(|stream| {
        let _ = stream.set_nodelay(true);
    });
    axum::serve(listener, app())
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
            println!("SIGINT: shutting down");
        })
        .await
}
