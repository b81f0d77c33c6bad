//! Compile-time checks that keel's public types can cross threads: the
//! runtime, its handle, join handles and errors, stats, the builder's
//! types, the blocking pool's future and files, Unix sockets, signal
//! listeners and join sets are all `Send + Sync` (and
//! `JoinHandle` and `Unblock` are `Unpin`, so they can be polled without
//! pinning). A regression fails to compile; the single test
//! only makes the file count as a test target.

use keel::blocking::Unblock;
use keel::fs::{File, OpenOptions};
use keel::net::{UnixListener, UnixStream};
use keel::signal::unix::{Signal, SignalKind};
use keel::stats::{BlockingStats, ClassStats, QueueDelay, Stats, WorkerStats};
use keel::task::JoinSet;
use keel::{Builder, Class, Handle, JoinError, JoinHandle, Runtime, SpinPolicy, TaskId, YieldNow};

fn is_send<T: Send>() {}
fn is_sync<T: Sync>() {}
fn is_send_sync<T: Send + Sync>() {
    is_send::<T>();
    is_sync::<T>();
}
fn is_unpin<T: Unpin>() {}

/// Every check, as a function so that the test can call it.
fn assert_public_types_are_send_and_sync() {
    is_send_sync::<Runtime>();
    is_send_sync::<Handle>();
    is_send_sync::<JoinHandle<i32>>();
    is_send_sync::<JoinHandle<()>>();
    is_send_sync::<JoinError>();
    is_send_sync::<Stats>();
    is_send_sync::<WorkerStats>();
    is_send_sync::<ClassStats>();
    is_send_sync::<QueueDelay>();
    is_send_sync::<Class>();
    is_send_sync::<TaskId>();
    is_send_sync::<Builder>();
    is_send_sync::<SpinPolicy>();
    is_send_sync::<YieldNow>();
    is_send_sync::<BlockingStats>();
    is_send_sync::<Unblock<i32>>();
    is_send_sync::<File>();
    is_send_sync::<OpenOptions>();
    is_unpin::<Unblock<i32>>();
    is_unpin::<JoinHandle<i32>>();
    // A JoinHandle can be awaited from another thread's future.
    is_send::<JoinHandle<String>>();
    is_send_sync::<UnixListener>();
    is_send_sync::<UnixStream>();
    is_send_sync::<Signal>();
    is_send_sync::<SignalKind>();
    is_send_sync::<JoinSet<i32>>();
    is_unpin::<JoinSet<i32>>();
}

/// The futures of connecting and resolving can be spawned: they are
/// `Send` for the address types users pass.
fn connect_futures_are_send() {
    fn is_send_future<F: std::future::Future + Send>(_: F) {}
    is_send_future(keel::net::TcpStream::connect("localhost:80"));
    is_send_future(keel::net::TcpStream::connect(String::from("a:1")));
    is_send_future(keel::net::TcpStream::connect(("localhost", 80)));
    is_send_future(keel::net::lookup_host("localhost:80"));
    is_send_future(keel::net::UnixStream::connect("/tmp/x.sock"));
    is_send_future(keel::signal::ctrl_c());
    let mut set = JoinSet::<()>::new();
    is_send_future(set.join_next());
}

/// `JoinError` is a thread-safe error: it boxes into `Box<dyn Error + Send
/// + Sync>` and converts into `io::Error`, so `?` works in threaded code.
fn join_error_converts_into_threadsafe_errors() {
    let _boxed: fn(JoinError) -> Box<dyn std::error::Error + Send + Sync> = |e| Box::new(e);
    let _io: fn(JoinError) -> std::io::Error = std::io::Error::from;
}

#[test]
fn public_types_are_send_and_sync() {
    assert_public_types_are_send_and_sync();
    join_error_converts_into_threadsafe_errors();
    connect_futures_are_send();
}
