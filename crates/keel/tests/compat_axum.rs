//! An axum `Router` served on keel (the `axum` example's serving code),
//! talked to by real HTTP/1 and HTTP/2 clients.

#[path = "../examples/common/serve.rs"]
mod serve;

use std::net::SocketAddr;
use std::time::Duration;

use axum::extract::Path;
use axum::routing::get;
use axum::Router;
use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper::{Request, StatusCode};
use keel::compat::hyper::HyperExecutor;
use keel::io::{AsyncReadExt, AsyncWriteExt};
use keel::net::{TcpListener, TcpStream};
use keel::{JoinHandle, Runtime};
use tokio::sync::oneshot;

fn app() -> Router {
    Router::new()
        .route("/", get(|| async { "Hello, world!" }))
        .route(
            "/hello/{name}",
            get(|Path(name): Path<String>| async move { format!("Hello, {name}!") }),
        )
}

/// Sends `request` on an HTTP/1 connection once it is ready for one: after
/// a response, the connection task must first see its end.
async fn send1(
    sender: &mut hyper::client::conn::http1::SendRequest<Empty<Bytes>>,
    request: Request<Empty<Bytes>>,
) -> hyper::Response<hyper::body::Incoming> {
    sender.ready().await.unwrap();
    sender.send_request(request).await.unwrap()
}

/// Starts the app; returns its address, the trigger of its shutdown and
/// the serving task (which yields how many connections outlived the drain).
fn start() -> (
    SocketAddr,
    oneshot::Sender<()>,
    JoinHandle<std::io::Result<usize>>,
) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let server = keel::spawn(serve::serve(listener, app(), async move {
        let _ = stopped.await;
    }));
    (addr, stop, server)
}

fn get_request(addr: SocketAddr, path: &str) -> Request<Empty<Bytes>> {
    Request::get(format!("http://{addr}{path}"))
        .header(hyper::header::HOST, addr.to_string())
        .body(Empty::new())
        .unwrap()
}

async fn body_text(response: hyper::Response<hyper::body::Incoming>) -> String {
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    String::from_utf8(bytes.to_vec()).unwrap()
}

#[test]
fn axum_answers_http1_and_http2_clients_on_keel() {
    let rt = Runtime::builder().workers(2).build().unwrap();
    rt.block_on(async {
        let (addr, stop, server) = start();

        // HTTP/1.1, several requests on one keep-alive connection.
        let stream = TcpStream::connect(addr).await.unwrap();
        let (mut h1, connection) = hyper::client::conn::http1::handshake(stream).await.unwrap();
        let h1_connection = keel::spawn(connection);
        for _ in 0..3 {
            let response = send1(&mut h1, get_request(addr, "/")).await;
            assert_eq!(response.status(), StatusCode::OK);
            assert_eq!(body_text(response).await, "Hello, world!");
        }
        let response = send1(&mut h1, get_request(addr, "/hello/keel")).await;
        assert_eq!(body_text(response).await, "Hello, keel!");
        let response = send1(&mut h1, get_request(addr, "/missing")).await;
        assert_eq!(response.status(), StatusCode::NOT_FOUND);

        // HTTP/2 (prior knowledge), concurrent streams on one connection.
        let stream = TcpStream::connect(addr).await.unwrap();
        let (h2, connection) =
            hyper::client::conn::http2::handshake(HyperExecutor::current(), stream)
                .await
                .unwrap();
        keel::spawn(connection);
        let requests: Vec<_> = (0..8)
            .map(|i| {
                let mut h2 = h2.clone();
                keel::spawn(async move {
                    let response = h2
                        .send_request(get_request(addr, &format!("/hello/{i}")))
                        .await
                        .unwrap();
                    assert_eq!(response.version(), hyper::Version::HTTP_2);
                    body_text(response).await
                })
            })
            .collect();
        for (i, request) in requests.into_iter().enumerate() {
            assert_eq!(request.await.unwrap(), format!("Hello, {i}!"));
        }

        // Graceful shutdown with both connections still open: the server
        // closes them (HTTP/1 idle, HTTP/2 GOAWAY) and returns at once.
        stop.send(()).unwrap();
        let left_open = keel::time::timeout(Duration::from_secs(30), server)
            .await
            .expect("the drain ended before its timeout")
            .unwrap()
            .unwrap();
        assert_eq!(left_open, 0);
        keel::time::timeout(Duration::from_secs(30), h1_connection)
            .await
            .expect("the client saw its connection closed")
            .unwrap()
            .unwrap();
        // Not accepting any more.
        let error = TcpStream::connect(addr).await.unwrap_err();
        assert_eq!(error.kind(), std::io::ErrorKind::ConnectionRefused);
    });
}

#[test]
fn a_malformed_request_gets_400_and_the_server_serves_on() {
    let rt = Runtime::builder().workers(2).build().unwrap();
    rt.block_on(async {
        let (addr, stop, server) = start();
        let mut raw = TcpStream::connect(addr).await.unwrap();
        raw.write_all(b"NOT HTTP AT ALL\r\n\r\n").await.unwrap();
        let mut answer = String::new();
        raw.read_to_string(&mut answer).await.unwrap();
        assert!(answer.starts_with("HTTP/1.1 400"), "{answer:?}");

        let stream = TcpStream::connect(addr).await.unwrap();
        let (mut h1, connection) = hyper::client::conn::http1::handshake(stream).await.unwrap();
        keel::spawn(connection);
        let response = send1(&mut h1, get_request(addr, "/")).await;
        assert_eq!(body_text(response).await, "Hello, world!");
        drop(h1);
        stop.send(()).unwrap();
        assert_eq!(server.await.unwrap().unwrap(), 0);
    });
}
