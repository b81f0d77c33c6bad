//! A tonic gRPC service (unary and server streaming) served by keel, and
//! a tonic client on keel calling it.
//!
//! ```sh
//! cargo run -p keel --example grpc --features hyper -- serve 127.0.0.1:50051
//! cargo run -p keel --example grpc --features hyper -- call 127.0.0.1:50051 keel 3
//! ```
//!
//! See `common/greeter.rs` for why tonic's own transport is not used.

#[path = "common/greeter.rs"]
mod greeter;
#[path = "common/serve.rs"]
mod serve;

use std::io;

use futures_util::FutureExt;
use keel::net::TcpListener;
use keel::signal::unix::{signal, SignalKind};

#[keel::main(workers = 2)]
async fn main() -> io::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .as_slice()
    {
        ["serve", addr] => run_server(addr).await,
        ["call", addr, name, count] => {
            let addr = addr.parse().map_err(io::Error::other)?;
            let count = count.parse().map_err(io::Error::other)?;
            call(addr, name, count).await
        }
        _ => {
            eprintln!("usage: grpc serve ADDR | grpc call ADDR NAME COUNT");
            std::process::exit(2);
        }
    }
}

async fn run_server(addr: &str) -> io::Result<()> {
    let listener = TcpListener::bind(addr)?;
    println!("gRPC on {}", listener.local_addr()?);
    let mut interrupt = signal(SignalKind::interrupt())?;
    let mut terminate = signal(SignalKind::terminate())?;
    let shutdown = async move {
        keel::select! {
            _ = interrupt.recv().fuse() => println!("SIGINT: shutting down"),
            _ = terminate.recv().fuse() => println!("SIGTERM: shutting down"),
        }
    };
    serve::serve(listener, greeter::GreeterServer, shutdown).await?;
    println!("stopped");
    Ok(())
}

async fn call(addr: std::net::SocketAddr, name: &str, count: u32) -> io::Result<()> {
    let mut client = greeter::connect(addr).await?;
    let reply = client.say_hello(name).await.map_err(io::Error::other)?;
    println!("SayHello: {}", reply.message);
    let replies = client
        .say_hello_stream(name, count)
        .await
        .map_err(io::Error::other)?;
    for reply in replies {
        println!("SayHelloStream: {}", reply.message);
    }
    Ok(())
}
