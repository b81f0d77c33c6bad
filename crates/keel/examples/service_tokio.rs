//! The `service` example's app on tokio, for side-by-side measurements:
//! the same `common/service_app.rs`, served by `axum::serve` and
//! `tonic::transport::Server`, with a `/health` route standing in for the
//! admin endpoint; only `main` differs.
//!
//! ```sh
//! DATABASE_URL=postgres://user@127.0.0.1:5432/db \
//!   cargo run --release -p keel --example service_tokio -- 127.0.0.1:3100 127.0.0.1:3109
//! ```

#[path = "common/greeter.rs"]
mod greeter;
#[path = "common/service_app.rs"]
mod service_app;

use std::future::IntoFuture;

use axum::routing::get;
use axum::serve::ListenerExt;
use service_app::{Addresses, BoxError};
use tokio::net::TcpListener;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), BoxError> {
    let addresses = Addresses::from_args()?;
    let admin = TcpListener::bind(addresses.admin.as_str()).await?;
    let admin_addr = admin.local_addr()?;
    tokio::spawn(
        axum::serve(
            admin,
            axum::Router::new().route("/health", get(|| async { "ok" })),
        )
        .into_future(),
    );
    let http_backend = TcpListener::bind(addresses.http_backend.as_str()).await?;
    tokio::spawn(axum::serve(http_backend, service_app::backend_router()).into_future());
    let grpc_backend = TcpListener::bind(addresses.grpc_backend.as_str()).await?;
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(greeter::GreeterServer)
            .serve_with_incoming(incoming(grpc_backend)),
    );
    let grpc = tonic::transport::Channel::from_shared(addresses.grpc_url())?
        .connect()
        .await?;
    let clients = service_app::connect(&addresses, grpc).await?;
    let listener = TcpListener::bind(addresses.api.as_str()).await?;
    println!(
        "listening on http://{}, admin on http://{admin_addr}",
        listener.local_addr()?
    );
    // TCP_NODELAY, as the keel example's serving sets it.
    let listener = listener.tap_io(|stream| {
        let _ = stream.set_nodelay(true);
    });
    axum::serve(listener, service_app::app(clients))
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    Ok(())
}

/// The connections `listener` accepts, as the stream tonic's server takes.
fn incoming(
    listener: TcpListener,
) -> impl futures_util::Stream<Item = std::io::Result<tokio::net::TcpStream>> {
    futures_util::stream::unfold(listener, |listener| async move {
        let accepted = listener.accept().await.map(|(stream, _)| stream);
        Some((accepted, listener))
    })
}
