//! A tonic gRPC service served on keel (the `grpc` example's service and
//! serving code), called by tonic's client on keel.

#[path = "../examples/common/greeter.rs"]
mod greeter;
#[path = "../examples/common/serve.rs"]
mod serve;

use keel::net::TcpListener;
use keel::Runtime;
use tokio::sync::oneshot;
use tonic::Code;

#[test]
fn unary_and_server_streaming_calls_on_keel() {
    // No tokio side: tonic serves and calls on keel alone.
    let rt = Runtime::builder()
        .workers(2)
        .tokio_threads(0)
        .build()
        .unwrap();
    rt.block_on(async {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        let server = keel::spawn(serve::serve(listener, greeter::GreeterServer, async move {
            let _ = stopped.await;
        }));
        assert!(tokio::runtime::Handle::try_current().is_err());

        let mut client = greeter::connect(addr).await.unwrap();
        let reply = client.say_hello("keel").await.unwrap();
        assert_eq!(reply.message, "Hello, keel!");

        let replies = client.say_hello_stream("keel", 5).await.unwrap();
        let messages: Vec<_> = replies.into_iter().map(|r| r.message).collect();
        let expected: Vec<_> = (1..=5).map(|i| format!("Hello #{i}, keel!")).collect();
        assert_eq!(messages, expected);
        assert!(client.say_hello_stream("keel", 0).await.unwrap().is_empty());

        // Bad input gets a gRPC status, and the connection serves on.
        let status = client.say_hello("").await.unwrap_err();
        assert_eq!(status.code(), Code::InvalidArgument);
        let status = client
            .say_hello_stream("keel", greeter::MAX_STREAM_REPLIES + 1)
            .await
            .unwrap_err();
        assert_eq!(status.code(), Code::OutOfRange);
        assert_eq!(
            client.say_hello("again").await.unwrap().message,
            "Hello, again!"
        );

        // Many clients at once, each on its own HTTP/2 connection.
        let calls: Vec<_> = (0..16)
            .map(|i| {
                keel::spawn(async move {
                    let mut client = greeter::connect(addr).await.unwrap();
                    client.say_hello(&format!("n{i}")).await.unwrap().message
                })
            })
            .collect();
        for (i, call) in calls.into_iter().enumerate() {
            assert_eq!(call.await.unwrap(), format!("Hello, n{i}!"));
        }

        drop(client);
        stop.send(()).unwrap();
        assert_eq!(server.await.unwrap().unwrap(), 0);
    });
}
