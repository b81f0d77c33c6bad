//! Unix domain sockets: [`listener`] and [`stream`].
//!
//! # No batched input here
//!
//! [`BatchPolicy`](crate::net::BatchPolicy) rests on the kernel holding a
//! socket's readable event back until `SO_RCVLOWAT` bytes are queued.
//! Linux does that for TCP only: an `AF_UNIX` stream socket accepts the
//! option (it bounds a blocking `recv`), yet `epoll` and `poll` report it
//! readable from the first byte whatever the mark. Batching it would save
//! reads but not one wake-up, which is the whole point, so [`UnixStream`]
//! offers no `set_batch`: its reads deliver as soon as any byte is there.

pub(crate) mod listener;
pub(crate) mod stream;

pub use listener::{UnixListenOptions, UnixListener};
pub use stream::UnixStream;
