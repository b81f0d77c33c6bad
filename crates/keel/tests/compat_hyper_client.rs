//! hyper's clients on keel alone (feature `hyper-client`): hyper-util's
//! pooled `Client` and tonic's `Channel`, each given keel's executor and
//! `compat::hyper::Connector`, on a runtime with no tokio side, so that
//! any call into tokio's runtime would fail the test.

#[path = "../examples/common/greeter.rs"]
mod greeter;
#[path = "../examples/common/serve.rs"]
mod serve;
mod support;

use std::error::Error as StdError;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use http_body_util::{BodyExt, Empty};
use hyper::body::{Bytes, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::client::legacy::Client;
use keel::compat::hyper::{Connector, HyperExecutor, HyperTimer};
use keel::net::TcpListener;
use keel::{Class, Runtime};
use support::{within, TEST_LIMIT};

/// A runtime with no tokio side: the clients must need none.
fn keel_alone() -> Runtime {
    Runtime::builder()
        .workers(2)
        .tokio_threads(0)
        .build()
        .unwrap()
}

/// Serves HTTP/1.1 on a keel listener, answering each request with its
/// path; counts the connections it accepted.
fn serve_paths(accepted: Arc<AtomicUsize>) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    keel::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            accepted.fetch_add(1, Ordering::Relaxed);
            keel::spawn(async move {
                let answer = service_fn(|request: Request<Incoming>| async move {
                    let path = request.uri().path().to_owned();
                    Ok::<_, hyper::Error>(Response::new(http_body_util::Full::new(Bytes::from(
                        path,
                    ))))
                });
                let _ = http1::Builder::new().serve_connection(stream, answer).await;
            });
        }
    });
    addr
}

type PathClient = Client<Connector, Empty<Bytes>>;

fn client(connector: Connector) -> PathClient {
    Client::builder(HyperExecutor::current())
        .timer(HyperTimer::new())
        .pool_timer(HyperTimer::new())
        .build(connector)
}

async fn get(
    client: &PathClient,
    uri: String,
) -> Result<String, hyper_util::client::legacy::Error> {
    let response = client.get(uri.parse().unwrap()).await?;
    assert!(response.status().is_success());
    let body = response.into_body().collect().await.unwrap().to_bytes();
    Ok(String::from_utf8(body.to_vec()).unwrap())
}

/// The error and its sources, as one line.
fn chain(error: &dyn StdError) -> String {
    let mut line = error.to_string();
    let mut source = error.source();
    while let Some(error) = source {
        line.push_str(": ");
        line.push_str(&error.to_string());
        source = error.source();
    }
    line
}

#[test]
fn the_pooled_client_runs_on_keel_alone_and_reuses_its_connection() {
    within(TEST_LIMIT, || {
        let rt = keel_alone();
        rt.block_on(rt.spawn(async {
            assert!(tokio::runtime::Handle::try_current().is_err());
            let accepted = Arc::new(AtomicUsize::new(0));
            let addr = serve_paths(accepted.clone());
            let client = client(Connector::new());
            for i in 0..20 {
                let path = get(&client, format!("http://{addr}/n{i}")).await.unwrap();
                assert_eq!(path, format!("/n{i}"));
            }
            assert_eq!(
                accepted.load(Ordering::Relaxed),
                1,
                "20 requests in a row share one pooled connection"
            );

            // A name, resolved on the blocking pool.
            let port = addr.port();
            let path = get(&client, format!("http://localhost:{port}/by-name"))
                .await
                .unwrap();
            assert_eq!(path, "/by-name");

            // From tasks of every class at once.
            let calls: Vec<_> = (0..12)
                .map(|i| {
                    let class = [Class::URGENT, Class::NORMAL, Class::BULK][i % 3];
                    let client = client.clone();
                    keel::Handle::current().spawn_in(class, async move {
                        let path = get(&client, format!("http://{addr}/c{i}")).await.unwrap();
                        assert_eq!(Class::current(), Some(class));
                        path
                    })
                })
                .collect();
            for (i, call) in calls.into_iter().enumerate() {
                assert_eq!(call.await.unwrap(), format!("/c{i}"));
            }
        }))
        .unwrap();
    });
}

#[test]
fn the_client_reports_what_it_cannot_connect_to_and_serves_on() {
    within(TEST_LIMIT, || {
        let rt = keel_alone();
        rt.block_on(rt.spawn(async {
            let accepted = Arc::new(AtomicUsize::new(0));
            let addr = serve_paths(accepted);
            let client = client(Connector::new());

            // A port nobody listens on.
            let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let closed_port = closed.local_addr().unwrap().port();
            drop(closed);
            let refused = get(&client, format!("http://127.0.0.1:{closed_port}/"))
                .await
                .unwrap_err();
            assert!(refused.is_connect(), "{}", chain(&refused));
            assert!(chain(&refused).contains("refused"), "{}", chain(&refused));

            // https is refused by name, not sent in clear text.
            let https = get(&client, format!("https://{addr}/")).await.unwrap_err();
            assert!(chain(&https).contains("TLS"), "{}", chain(&https));

            // The client and the runtime serve on.
            assert_eq!(
                get(&client, format!("http://{addr}/after")).await.unwrap(),
                "/after"
            );
        }))
        .unwrap();
    });
}

/// A listener whose accept queue is full drops new SYNs, so a connect to
/// it waits: the connector's timeout must end the wait with an error.
#[test]
fn the_connect_timeout_ends_a_connect_that_gets_no_answer() {
    use socket2::{Domain, Socket, Type};

    within(TEST_LIMIT, || {
        let listener = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
        listener
            .bind(&"127.0.0.1:0".parse::<SocketAddr>().unwrap().into())
            .unwrap();
        listener.listen(0).unwrap();
        let addr = listener.local_addr().unwrap().as_socket().unwrap();
        // Fill the accept queue (a backlog of 0 holds one connection);
        // nothing accepts them.
        let fillers: Vec<_> = (0..3)
            .map(|_| {
                let socket = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
                socket.set_nonblocking(true).unwrap();
                let _ = socket.connect(&addr.into());
                socket
            })
            .collect();
        std::thread::sleep(Duration::from_millis(100));

        let rt = keel_alone();
        let error = rt
            .block_on(rt.spawn(async move {
                let client = client(Connector::new().connect_timeout(Duration::from_millis(300)));
                get(&client, format!("http://{addr}/")).await.unwrap_err()
            }))
            .unwrap();
        assert!(error.is_connect(), "{}", chain(&error));
        assert!(
            chain(&error).contains("took more than"),
            "{}",
            chain(&error)
        );
        drop(fillers);
    });
}

/// tonic's `Channel`, given keel's executor and connector, calls a tonic
/// service served on keel, with no tokio runtime anywhere.
#[test]
fn tonics_channel_runs_on_keel_alone_through_the_connector() {
    within(TEST_LIMIT, || {
        let rt = keel_alone();
        rt.block_on(rt.spawn(async {
            assert!(tokio::runtime::Handle::try_current().is_err());
            let listener = TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = listener.local_addr().unwrap();
            let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
            let server = keel::spawn(serve::serve(listener, greeter::GreeterServer, async move {
                let _ = stopped.await;
            }));

            let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
                .unwrap()
                .executor(HyperExecutor::current())
                .connect_with_connector(Connector::new())
                .await
                .unwrap();
            let calls: Vec<_> = [Class::URGENT, Class::NORMAL, Class::BULK]
                .into_iter()
                .map(|class| {
                    let channel = channel.clone();
                    keel::Handle::current().spawn_in(class, async move {
                        let mut client = greeter::GreeterClient::over(channel);
                        let reply = client.say_hello("keel").await.unwrap();
                        let stream = client.say_hello_stream("keel", 3).await.unwrap();
                        assert_eq!(Class::current(), Some(class));
                        (
                            reply.message,
                            stream.into_iter().map(|r| r.message).collect::<Vec<_>>(),
                        )
                    })
                })
                .collect();
            for call in calls {
                let (reply, stream) = call.await.unwrap();
                assert_eq!(reply, "Hello, keel!");
                assert_eq!(
                    stream,
                    ["Hello #1, keel!", "Hello #2, keel!", "Hello #3, keel!"]
                );
            }
            drop(channel);
            stop.send(()).unwrap();
            server.await.unwrap().unwrap();
        }))
        .unwrap();
    });
}
