//! tonic's own transport inside keel tasks, through the tokio side:
//! `tonic::transport::Server` (tokio's listener, connections spawned with
//! `tokio::spawn`) and `tonic::transport::Channel` (tokio's connector and
//! timers), the calls themselves awaited by keel tasks.

#[path = "../examples/common/greeter.rs"]
mod greeter;

use std::time::Duration;

use keel::{Class, Runtime};
use tonic::transport::{Channel, Server};

#[test]
fn tonic_transport_server_and_channel_run_inside_keel() {
    for on_workers in [false, true] {
        let rt = Runtime::builder()
            .workers(2)
            .tokio_on_workers(on_workers)
            .build()
            .unwrap();
        let (addr_tx, addr_rx) = std::sync::mpsc::channel();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        // The server, driven by a keel task: tonic accepts on a tokio
        // listener and serves each connection on a task of its own.
        let server = rt.spawn(async move {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            addr_tx.send(listener.local_addr().unwrap()).unwrap();
            Server::builder()
                .timeout(Duration::from_secs(10))
                .add_service(greeter::GreeterServer)
                .serve_with_incoming_shutdown(tokio_stream_of(listener), async move {
                    let _ = stopped.await;
                })
                .await
        });
        let addr = addr_rx.recv_timeout(Duration::from_secs(10)).unwrap();

        // The client, in a keel task of each class, over tonic's Channel.
        for class in [Class::URGENT, Class::NORMAL, Class::BULK] {
            let (reply, stream) = rt
                .block_on(rt.spawn_in(class, async move {
                    let channel = Channel::from_shared(format!("http://{addr}"))
                        .unwrap()
                        .connect_timeout(Duration::from_secs(5))
                        .connect()
                        .await
                        .unwrap();
                    let mut client = greeter::GreeterClient::over(channel);
                    let reply = client.say_hello("keel").await.unwrap();
                    let stream = client.say_hello_stream("keel", 5).await.unwrap();
                    assert_eq!(Class::current(), Some(class));
                    (reply, stream)
                }))
                .unwrap();
            assert_eq!(reply.message, "Hello, keel!");
            let messages: Vec<_> = stream.into_iter().map(|r| r.message).collect();
            let expected: Vec<_> = (1..=5).map(|i| format!("Hello #{i}, keel!")).collect();
            assert_eq!(messages, expected);
        }

        stop.send(()).unwrap();
        rt.block_on(server).unwrap().unwrap();
    }
}

/// tonic's incoming stream of connections from a tokio listener.
fn tokio_stream_of(
    listener: tokio::net::TcpListener,
) -> impl futures_util::Stream<Item = std::io::Result<tokio::net::TcpStream>> {
    futures_util::stream::unfold(listener, |listener| async move {
        let accepted = listener.accept().await.map(|(stream, _)| stream);
        Some((accepted, listener))
    })
}
