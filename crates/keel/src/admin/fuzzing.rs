//! The endpoint's request handling on bytes in memory, for the fuzz
//! target `admin_request` (built with `--cfg fuzzing`): one connection's
//! worth of input goes through hyper's parser, the routes, `Accept`
//! negotiation, the slot accounting and the answer writer exactly as a
//! TCP connection's would, without sockets, so a fuzzer can run it tens of
//! thousands of times a second and see every branch it takes.

use std::io;
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll};

use super::conn::{serve_on, Transport};
use super::{AdminOptions, Shared};
use crate::Runtime;

/// The most bytes one exchange writes back before its client stops
/// reading: bounds the memory of a run that asks for `/metrics` many
/// times over.
pub const MAX_OUTPUT: usize = 1 << 20;

/// One runtime and one endpoint state for every exchange of the process.
fn endpoint() -> &'static (Runtime, Arc<Shared>) {
    static ENDPOINT: OnceLock<(Runtime, Arc<Shared>)> = OnceLock::new();
    ENDPOINT.get_or_init(|| {
        let rt = Runtime::builder()
            .workers(1)
            .build()
            .expect("a runtime for the fuzz target");
        let shared = Arc::new(Shared::new(rt.handle(), &AdminOptions::new()));
        (rt, shared)
    })
}

/// Serves `input` as everything one client sends on one connection, in
/// reads of at most `read_size` bytes (at least 1), then the end of the
/// stream; returns every byte the endpoint wrote back, up to
/// [`MAX_OUTPUT`]. The endpoint has its default options.
///
/// # Panics
///
/// If the endpoint does not finish the exchange: with all input given at
/// once and every write taken, it never has to wait.
pub fn exchange(input: &[u8], read_size: usize) -> Vec<u8> {
    let (rt, shared) = endpoint();
    let pipe = Arc::new(Pipe {
        input: input.to_vec(),
        read_size: read_size.max(1),
        state: Mutex::new(PipeState::default()),
    });
    let slot = shared
        .slots
        .admit()
        .expect("a slot: exchanges run one at a time");
    rt.block_on(serve_on(pipe.clone(), shared, &slot));
    drop(slot);
    let state = pipe.state.lock().unwrap_or_else(|p| p.into_inner());
    state.output.clone()
}

/// A client in memory: its input is read in pieces, its output kept.
struct Pipe {
    input: Vec<u8>,
    read_size: usize,
    state: Mutex<PipeState>,
}

#[derive(Default)]
struct PipeState {
    /// How much of the input has been read.
    read: usize,
    output: Vec<u8>,
    write_shut: bool,
}

impl Pipe {
    fn state(&self) -> std::sync::MutexGuard<'_, PipeState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Transport for Pipe {
    fn poll_read(&self, _cx: &mut Context<'_>, buf: &mut [u8]) -> Poll<io::Result<usize>> {
        let mut state = self.state();
        let rest = &self.input[state.read..];
        let n = rest.len().min(buf.len()).min(self.read_size);
        buf[..n].copy_from_slice(&rest[..n]);
        state.read += n;
        Poll::Ready(Ok(n))
    }

    fn poll_write(&self, _cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let mut state = self.state();
        if state.write_shut {
            return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into()));
        }
        let room = MAX_OUTPUT - state.output.len();
        if room == 0 {
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::ConnectionReset,
                "the fuzzing client read all it will",
            )));
        }
        let n = buf.len().min(room);
        state.output.extend_from_slice(&buf[..n]);
        Poll::Ready(Ok(n))
    }

    fn poll_flush(&self, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn shutdown_write(&self) -> io::Result<()> {
        self.state().write_shut = true;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_in_memory_is_answered() {
        let out = exchange(b"GET /health HTTP/1.1\r\nhost: a\r\n\r\n", 3);
        let text = String::from_utf8(out).unwrap();
        assert!(text.starts_with("HTTP/1.1 200 OK\r\n"), "{text}");
        assert!(text.ends_with("\r\n\r\nok\n"), "{text}");
        let out = exchange(
            b"GET /metrics HTTP/1.1\r\n\r\nGET /nowhere HTTP/1.1\r\n\r\n",
            4096,
        );
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("text/plain; version=0.0.4"), "{text}");
        assert!(text.contains("HTTP/1.1 404 Not Found"), "{text}");
        let out = exchange(b"\x16\x03\x01garbage\r\n\r\n", 1);
        assert!(out.starts_with(b"HTTP/1.1 400 Bad Request\r\n"));
    }
}
