//! hyper 1.x served and called on keel (feature `hyper`): HTTP/1 and
//! HTTP/2 round trips, keep-alive, the executor's class, and the timer
//! behind hyper's header-read timeout.

#![cfg(feature = "hyper")]

mod support;

use std::time::{Duration, Instant};

use futures_util::{AsyncReadExt, AsyncWriteExt};
use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::client::conn::{http1 as client1, http2 as client2};
use hyper::server::conn::{http1, http2};
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use keel::compat::hyper::{HyperExecutor, HyperIo, HyperTimer};
use keel::net::{TcpListener, TcpStream};
use keel::{Class, Runtime};
use support::{runtime, within};

/// Echoes the request's method, path and body, and names the class the
/// handler ran in.
async fn echo(request: Request<Incoming>) -> Result<Response<Full<Bytes>>, hyper::Error> {
    let head = format!("{} {}", request.method(), request.uri().path());
    let body = request.into_body().collect().await?.to_bytes();
    let class = keel::Handle::current()
        .class_name(Class::current().expect("in a task"))
        .unwrap_or("?")
        .to_owned();
    let mut answer = format!("{head} {class} ").into_bytes();
    answer.extend_from_slice(&body);
    Ok(Response::new(Full::new(Bytes::from(answer))))
}

async fn post(
    sender: &mut client1::SendRequest<Full<Bytes>>,
    path: &str,
    body: &'static [u8],
) -> (StatusCode, String) {
    let request = Request::post(path)
        .header("host", "localhost")
        .body(Full::new(Bytes::from_static(body)))
        .unwrap();
    // An HTTP/1 connection takes the next request once the last answer
    // has been read to the end; `ready` waits for that.
    sender.ready().await.expect("connection ready");
    let response = sender
        .send_request(request)
        .await
        .expect("request answered");
    let status = response.status();
    let body = response
        .into_body()
        .collect()
        .await
        .expect("body read")
        .to_bytes();
    (status, String::from_utf8(body.to_vec()).unwrap())
}

#[test]
fn http1_round_trips_with_keep_alive() {
    within(support::TEST_LIMIT, || {
        let rt = runtime();
        rt.block_on(async {
            let listener = TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = listener.local_addr().unwrap();
            let server = keel::spawn_in(Class::URGENT, async move {
                let (stream, _) = listener.accept().await.unwrap();
                http1::Builder::new()
                    .serve_connection(stream, service_fn(echo))
                    .await
            });
            let stream = TcpStream::connect(addr).await.unwrap();
            let (mut sender, connection) = client1::handshake(stream).await.unwrap();
            let driver = keel::spawn(connection);
            for i in 0..100 {
                let (status, body) = post(&mut sender, &format!("/r{i}"), b"payload").await;
                assert_eq!(status, StatusCode::OK);
                assert_eq!(body, format!("POST /r{i} urgent payload"));
            }
            drop(sender);
            driver
                .await
                .unwrap()
                .expect("client connection ends cleanly");
            server
                .await
                .unwrap()
                .expect("server connection ends cleanly");
        });
    });
}

#[test]
fn http2_round_trips_on_the_executor() {
    within(support::TEST_LIMIT, || {
        let rt = runtime();
        rt.block_on(async {
            let listener = TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = listener.local_addr().unwrap();
            let server = keel::spawn(async move {
                let (stream, _) = listener.accept().await.unwrap();
                http2::Builder::new(HyperExecutor::current().class(Class::BULK))
                    .timer(HyperTimer::new())
                    .serve_connection(stream, service_fn(echo))
                    .await
            });
            let stream = TcpStream::connect(addr).await.unwrap();
            let (sender, connection) =
                client2::handshake(HyperExecutor::current(), HyperIo::new(stream))
                    .await
                    .unwrap();
            let driver = keel::spawn(connection);
            // Concurrent streams on one connection, each its own task.
            let mut calls = Vec::new();
            for i in 0..50 {
                let mut sender = sender.clone();
                calls.push(keel::spawn(async move {
                    let request = Request::post(format!("http://localhost/s{i}"))
                        .body(Full::new(Bytes::from(format!("body{i}"))))
                        .unwrap();
                    let response = sender.send_request(request).await.expect("answered");
                    assert_eq!(response.status(), StatusCode::OK);
                    let body = response.into_body().collect().await.unwrap().to_bytes();
                    String::from_utf8(body.to_vec()).unwrap()
                }));
            }
            for (i, call) in calls.into_iter().enumerate() {
                // hyper's HTTP/2 server runs each request's service in a
                // task of its own, spawned with the executor: in BULK.
                assert_eq!(call.await.unwrap(), format!("POST /s{i} bulk body{i}"));
            }
            drop(sender);
            driver
                .await
                .unwrap()
                .expect("client connection ends cleanly");
            server
                .await
                .unwrap()
                .expect("server connection ends cleanly");
        });
    });
}

#[test]
fn header_read_timeout_closes_a_silent_client() {
    within(support::TEST_LIMIT, || {
        let rt = runtime();
        rt.block_on(async {
            let listener = TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = listener.local_addr().unwrap();
            let server = keel::spawn(async move {
                let (stream, _) = listener.accept().await.unwrap();
                let started = Instant::now();
                let result = http1::Builder::new()
                    .timer(HyperTimer::new())
                    .header_read_timeout(Duration::from_millis(200))
                    .serve_connection(stream, service_fn(echo))
                    .await;
                (result, started.elapsed())
            });
            // Half a request line, then nothing: a slowloris.
            let mut client = TcpStream::connect(addr).await.unwrap();
            client
                .write_all(b"GET / HTTP/1.1\r\nhost: lo")
                .await
                .unwrap();
            let mut rest = Vec::new();
            let read = client.read_to_end(&mut rest).await;
            let (result, elapsed) = server.await.unwrap();
            let error = result.expect_err("the connection times out");
            assert!(error.is_timeout(), "a timeout, not {error}");
            assert!(
                elapsed >= Duration::from_millis(200),
                "not before the timeout: {elapsed:?}"
            );
            // The server closed the connection, cleanly or by a reset (it
            // may have answered 408 first): the client's read came back.
            if let Err(error) = read {
                assert_eq!(error.kind(), std::io::ErrorKind::ConnectionReset, "{error}");
            }
            let text = String::from_utf8_lossy(&rest);
            assert!(
                text.is_empty() || text.starts_with("HTTP/1.1 408"),
                "{text}"
            );
        });
    });
}

#[test]
fn timer_reset_moves_a_sleep() {
    use hyper::rt::Timer;
    within(support::TEST_LIMIT, || {
        let rt = runtime();
        rt.block_on(async {
            let timer = HyperTimer::new();
            let mut sleep = timer.sleep(Duration::from_secs(3600));
            let started = Instant::now();
            timer.reset(&mut sleep, Instant::now() + Duration::from_millis(30));
            sleep.await;
            let elapsed = started.elapsed();
            assert!(elapsed >= Duration::from_millis(30), "{elapsed:?}");
            assert!(elapsed < Duration::from_secs(3600));
        });
    });
}

#[test]
fn executor_rejects_a_class_the_runtime_lacks() {
    let rt = runtime();
    let handle = rt.handle().clone();
    let other = Runtime::builder()
        .workers(1)
        .class("c4", 10)
        .class("c5", 10)
        .build()
        .unwrap();
    let extra = other.handle().class("c5").unwrap();
    let outcome = std::panic::catch_unwind(move || HyperExecutor::new(handle).class(extra));
    assert!(outcome.is_err(), "a class of another runtime is refused");
}

#[test]
fn http1_over_a_unix_socket() {
    within(Duration::from_secs(60), || {
        let rt = runtime();
        rt.block_on(async {
            let path = std::env::temp_dir().join(format!("keel-hyper-{}.sock", std::process::id()));
            let listener = keel::net::UnixListener::options()
                .replace_stale(true)
                .bind(&path)
                .unwrap();
            let server = keel::spawn(async move {
                let (stream, _) = listener.accept().await.unwrap();
                http1::Builder::new()
                    .serve_connection(stream, service_fn(echo))
                    .await
                    .unwrap();
            });
            let stream = keel::net::UnixStream::connect(&path).await.unwrap();
            let (mut sender, connection) = client1::handshake(stream).await.unwrap();
            keel::spawn(connection);
            let request = Request::post("/local")
                .header(hyper::header::HOST, "localhost")
                .body(Full::new(Bytes::from_static(b"over a unix socket")))
                .unwrap();
            let response = sender.send_request(request).await.unwrap();
            assert_eq!(response.status(), StatusCode::OK);
            let body = response.into_body().collect().await.unwrap().to_bytes();
            assert_eq!(&body[..], b"POST /local normal over a unix socket");
            drop(sender);
            server.await.unwrap();
            std::fs::remove_file(&path).unwrap();
        });
    });
}
