//! Address resolution: names go to the blocking pool, literals do not.

use std::future::Future;
use std::io::ErrorKind;

mod support;

use keel::net::{lookup_host, TcpListener, TcpStream};
use keel::Runtime;

/// Blocking jobs completed so far.
fn pool_jobs(rt: &Runtime) -> u64 {
    rt.stats().blocking.completed
}

#[test]
fn a_host_name_is_resolved_on_the_blocking_pool() {
    let rt = Runtime::builder().workers(1).build().unwrap();
    let before = pool_jobs(&rt);
    let port = rt.block_on(async {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let accept = keel::spawn(async move { listener.accept().await.map(|_| ()) });
        // `localhost` may resolve to ::1 first, where nothing listens:
        // connect tries each address in turn.
        let stream = TcpStream::connect(format!("localhost:{port}"))
            .await
            .unwrap();
        assert!(stream.peer_addr().unwrap().ip().is_loopback());
        accept.await.unwrap().unwrap();
        let addrs: Vec<_> = lookup_host(("localhost", port)).await.unwrap().collect();
        assert!(!addrs.is_empty() && addrs.iter().all(|a| a.port() == port));
        port
    });
    assert_ne!(port, 0);
    // The pool counts a job just after handing its output over: wait for
    // the count (bounded) rather than read it at once.
    support::wait_until("two lookups counted on the pool", || {
        pool_jobs(&rt) >= before + 2
    });
}

#[test]
fn a_literal_address_never_reaches_the_pool() {
    let rt = Runtime::builder().workers(1).build().unwrap();
    let before = pool_jobs(&rt);
    rt.block_on(async {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let accept = keel::spawn(async move { listener.accept().await.map(|_| ()) });
        TcpStream::connect(addr.to_string()).await.unwrap();
        accept.await.unwrap().unwrap();
        let literal: Vec<_> = lookup_host(("127.0.0.1", 9)).await.unwrap().collect();
        assert_eq!(literal, ["127.0.0.1:9".parse().unwrap()]);
        let v6: Vec<_> = lookup_host("[::1]:9").await.unwrap().collect();
        assert_eq!(v6, ["[::1]:9".parse().unwrap()]);
    });
    assert_eq!(pool_jobs(&rt), before, "no job ran on the pool");
}

#[test]
fn a_malformed_address_is_an_error_and_the_runtime_serves_on() {
    let rt = Runtime::builder().workers(1).build().unwrap();
    rt.block_on(async {
        // No port: the resolver refuses it at once, without asking DNS.
        let error = lookup_host("localhost").await.err().unwrap();
        assert_eq!(error.kind(), ErrorKind::InvalidInput, "{error}");
        let error = TcpStream::connect("localhost").await.unwrap_err();
        assert_eq!(error.kind(), ErrorKind::InvalidInput, "{error}");
        let empty: &[std::net::SocketAddr] = &[];
        let error = TcpStream::connect(empty).await.unwrap_err();
        assert_eq!(error.kind(), ErrorKind::InvalidInput, "{error}");
        assert_eq!(keel::spawn(async { 7 }).await.unwrap(), 7);
    });
}

#[test]
fn lookups_need_a_runtime_for_names_only() {
    let rt = Runtime::builder().workers(1).build().unwrap();
    // Inside a runtime both work; outside, a name has no pool to go to.
    let outside = std::thread::spawn(|| {
        let waker = std::task::Waker::noop();
        let mut cx = std::task::Context::from_waker(waker);
        let mut lookup = std::pin::pin!(lookup_host("localhost:80"));
        match lookup.as_mut().poll(&mut cx) {
            std::task::Poll::Ready(Err(error)) => error.kind(),
            other => panic!("expected an error at once, got {:?}", other.is_ready()),
        }
    })
    .join()
    .unwrap();
    assert_eq!(outside, ErrorKind::Other);
    rt.block_on(async {
        assert!(lookup_host("127.0.0.1:80").await.is_ok());
    });
}
