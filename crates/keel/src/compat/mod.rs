//! Adapters that let other crates' traits run on keel.
//!
//! keel's sockets speak [`futures-io`](crate::io)'s `AsyncRead` and
//! `AsyncWrite`; libraries written against another runtime's traits need
//! a thin layer. Each adapter lives behind a feature so that a server that
//! does not use the library does not build it.
//!
//! - [`hyper`](mod@hyper) (feature `hyper`): hyper 1.x's executor, timer and IO traits,
//!   so `hyper::server::conn::http1` and `http2` (and hyper's clients)
//!   run on keel.
//! - `tokio` (feature `tokio-io`): tokio's `AsyncRead` and
//!   `AsyncWrite` for keel's streams, without a tokio runtime, for crates
//!   written against them (tokio-rustls, tokio-util codecs, ...).
//! - The tokio side (feature `tokio-context`): a tokio runtime that each
//!   keel runtime owns and enters wherever keel code runs, for libraries
//!   that call tokio's runtime themselves (reqwest, sqlx, tonic's
//!   transport, redis); see [`Builder::tokio_threads`](crate::Builder::tokio_threads).

#[cfg(feature = "hyper")]
pub mod hyper;
#[cfg(feature = "tokio-io")]
pub mod tokio;
