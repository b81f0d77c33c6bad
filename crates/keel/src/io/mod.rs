//! IO: the reactor that tells tasks when their sockets are ready, and the
//! traits and helpers to read and write them.
//!
//! keel's sockets ([`crate::net`]) implement the `futures-io` traits
//! [`AsyncRead`] and [`AsyncWrite`]; the extension traits
//! [`AsyncReadExt`] and [`AsyncWriteExt`] (from `futures-util`, re-exported
//! here) give them `read`, `read_exact`, `write_all`, `close` and the rest.
//!
//! ```
//! use keel::io::{AsyncReadExt, AsyncWriteExt};
//! use keel::net::{TcpListener, TcpStream};
//!
//! let rt = keel::Runtime::new().unwrap();
//! rt.block_on(async {
//!     let listener = TcpListener::bind("127.0.0.1:0").unwrap();
//!     let addr = listener.local_addr().unwrap();
//!     let server = keel::spawn(async move {
//!         let (mut stream, _) = listener.accept().await.unwrap();
//!         let mut buf = [0; 5];
//!         stream.read_exact(&mut buf).await.unwrap();
//!         stream.write_all(&buf).await.unwrap();
//!     });
//!     let mut client = TcpStream::connect(addr).await.unwrap();
//!     client.write_all(b"hello").await.unwrap();
//!     let mut echo = [0; 5];
//!     client.read_exact(&mut echo).await.unwrap();
//!     assert_eq!(&echo, b"hello");
//!     server.await.unwrap();
//! });
//! ```
//!
//! # How readiness reaches a task
//!
//! 1. A socket is registered with the runtime's reactor (`io::reactor`,
//!    edge triggered) when it is created; its readiness lives in a
//!    `ScheduledIo` (`io::readiness`).
//! 2. A read tries the system call while the socket is believed readable;
//!    on `WouldBlock` it clears that belief and parks the task's waker.
//!    A TCP read that returns fewer bytes than it asked for (and some)
//!    emptied the socket, so it clears the belief too: the next read waits
//!    for the next event instead of making a system call to learn that
//!    nothing is there (a request/response server saves one per request).
//! 3. A worker polls the reactor (between polls every `io_interval`, or
//!    blocked in the driver's poll when idle), sets the readiness and wakes the
//!    task into its class's events lane, ahead of tasks that yielded.
//!
//! Every IO operation first asks the task's coop budget (see
//! [`Builder::task_quota`]) whether it may proceed.
//!
//! [`Builder::task_quota`]: crate::Builder::task_quota

mod driver;
pub(crate) mod reactor;
pub(crate) mod readiness;
pub(crate) mod ring_file;
mod ring_probe;
pub(crate) mod ring_recv;
pub(crate) mod source;

pub use driver::IoBackend;
pub use ring_probe::{probe_io_uring, RingSupport};

pub use futures_io::{AsyncBufRead, AsyncRead, AsyncWrite};
pub use futures_util::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};
/// Buffering for keel's sockets and files: a [`BufReader`] reads ahead in
/// one call what a protocol then takes in small pieces (a length prefix,
/// then a body), and passes writes through to the stream it wraps.
pub use futures_util::io::{BufReader, BufWriter};

use std::sync::{Mutex, MutexGuard};

/// Locks one of the reactor's `std` mutexes, ignoring poison.
///
/// The reactor is not modelled under loom, so it uses `std` locks rather
/// than [`crate::loom`]'s. Its locks guard the slab of registrations, the
/// poller and each source's waker lists; none is left half-changed by a
/// panic (wakers are woken outside them, and a waker's clone or drop
/// cannot break a list), so a poisoned lock carries no broken invariant.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
