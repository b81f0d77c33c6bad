//! A service as tokio users write them, on keel: an axum API that reads
//! PostgreSQL through sqlx, calls an HTTP backend with reqwest and a gRPC
//! backend with tonic (`common/service_app.rs`), with keel's admin
//! endpoint beside it. `service_tokio.rs` runs the same app on tokio; the
//! two files differ only in `main`.
//!
//! ```sh
//! DATABASE_URL=postgres://user@127.0.0.1:5432/db \
//!   cargo run --release -p keel --example service \
//!   --features admin,hyper-client,tokio-context -- 127.0.0.1:3000 127.0.0.1:3009
//! curl http://127.0.0.1:3000/api/7        # user7 <score> Hello, user7!
//! curl http://127.0.0.1:3009/stats        # keel's accounting, the tokio side's CPU included
//! ```
//!
//! Arguments: the API's, the admin endpoint's, the HTTP backend's and the
//! gRPC backend's addresses (both backends are served by this process).
//! On keel, the API and both backends are served by keel's workers, and
//! tonic's `Channel` connects through `keel::compat::hyper::Connector`;
//! sqlx and reqwest run through the tokio side (feature `tokio-context`),
//! which runs on keel's workers (`tokio_on_workers = true`: no tokio
//! thread, no hop to one for each event of their sockets).
//! `service_vs_tokio.sh` runs wrk against both.

#[path = "common/greeter.rs"]
mod greeter;
#[path = "common/serve.rs"]
mod serve;
#[path = "common/service_app.rs"]
mod service_app;

use keel::compat::hyper::{Connector, HyperExecutor};
use keel::net::TcpListener;
use service_app::{Addresses, BoxError};

#[keel::main(workers = 2, tokio_on_workers = true)]
async fn main() -> Result<(), BoxError> {
    let addresses = Addresses::from_args()?;
    let admin = keel::admin::serve(addresses.admin.as_str(), &keel::Handle::current())?;
    let http_backend = TcpListener::bind(addresses.http_backend.as_str())?;
    keel::spawn(serve::serve(
        http_backend,
        service_app::backend_router(),
        std::future::pending(),
    ));
    let grpc_backend = TcpListener::bind(addresses.grpc_backend.as_str())?;
    keel::spawn(serve::serve(
        grpc_backend,
        greeter::GreeterServer,
        std::future::pending(),
    ));
    let grpc = tonic::transport::Endpoint::from_shared(addresses.grpc_url())?
        .executor(HyperExecutor::current())
        .connect_with_connector(Connector::new())
        .await?;
    let clients = service_app::connect(&addresses, grpc).await?;
    let listener = TcpListener::bind(addresses.api.as_str())?;
    println!(
        "listening on http://{}, admin on http://{}",
        listener.local_addr()?,
        admin.local_addr()
    );
    let shutdown = async {
        let _ = keel::signal::ctrl_c().await;
    };
    serve::serve(listener, service_app::app(clients), shutdown).await?;
    Ok(())
}
