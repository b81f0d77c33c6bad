//! A minimal executor for the calling thread, with no runtime: polls a
//! future to completion, parking between wake-ups.
//!
//! Shared by the integration tests (through `support`), the log's unit
//! tests and the log-recovery fuzz target (both include this file by
//! path), so there is one definition of it.

// Not every includer uses every item.
#![allow(dead_code)]

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::thread;
use std::time::{Duration, Instant};

/// How long [`block_on`] waits for a pending future before it fails the
/// test instead of hanging.
pub const BLOCK_ON_LIMIT: Duration = Duration::from_secs(30);

/// Polls `future` to completion on this thread, parking between
/// wake-ups; panics if it is still pending after [`BLOCK_ON_LIMIT`] (a lost
/// wake-up shows as a failure, not a hung suite).
pub fn block_on<F: Future>(future: F) -> F::Output {
    struct Unparker(thread::Thread);
    impl Wake for Unparker {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(Unparker(thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut future = pin!(future);
    let deadline = Instant::now() + BLOCK_ON_LIMIT;
    loop {
        if let Poll::Ready(output) = future.as_mut().poll(&mut cx) {
            return output;
        }
        let now = Instant::now();
        assert!(
            now < deadline,
            "future still pending after {BLOCK_ON_LIMIT:?}"
        );
        thread::park_timeout(deadline - now);
    }
}
