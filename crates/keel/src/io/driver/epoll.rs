//! The epoll driver, through `mio`: sources registered edge triggered, an
//! eventfd ([`mio::Waker`]) to interrupt a blocked `epoll_wait`.

use std::io;
use std::time::Duration;

use mio::event::Source;
use mio::{Events, Interest, Poll, Registry, Token};

use super::Owner;
use crate::io::readiness::Event;

/// Events taken from epoll per call.
const EVENTS_CAPACITY: usize = 1024;

/// The registration side: usable from any thread.
#[derive(Debug)]
pub(crate) struct Epoll {
    registry: Registry,
    waker: mio::Waker,
}

/// The epoll instance and its event buffer; one poller at a time.
#[derive(Debug)]
pub(crate) struct Poller {
    poll: Poll,
    events: Events,
    wake_token: Token,
}

impl Epoll {
    pub(super) fn new(wake_token: usize) -> io::Result<(Epoll, Poller)> {
        let poll = Poll::new()?;
        let registry = poll.registry().try_clone()?;
        let waker = mio::Waker::new(&registry, Token(wake_token))?;
        let poller = Poller {
            poll,
            events: Events::with_capacity(EVENTS_CAPACITY),
            wake_token: Token(wake_token),
        };
        Ok((Epoll { registry, waker }, poller))
    }

    pub(super) fn register(
        &self,
        source: &mut impl Source,
        token: usize,
        interest: Interest,
    ) -> io::Result<()> {
        self.registry.register(source, Token(token), interest)
    }

    pub(super) fn wake(&self) {
        // Fails only if the eventfd cannot be written, which the kernel
        // never does for a counter far from overflow; the blocker would
        // then wake at its timeout or next event.
        let _ = self.waker.wake();
    }
}

impl Poller {
    /// `epoll_wait` into the event buffer (which mio empties first, so a
    /// failed wait leaves nothing to reap).
    pub(super) fn wait(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        self.poll.poll(&mut self.events, timeout)
    }

    /// Whether the last wait put events in the buffer.
    pub(super) fn has_events(&self) -> bool {
        !self.events.is_empty()
    }

    /// Reports what the last wait put in the buffer, once.
    pub(super) fn reap(
        &mut self,
        wake: &mut Vec<std::task::Waker>,
        mut on_event: impl FnMut(usize, Event, &mut Vec<std::task::Waker>) -> Owner,
    ) {
        for event in self.events.iter() {
            if event.token() == self.wake_token {
                continue;
            }
            // epoll keeps watching a source until its file closes: the
            // owner is of no use here.
            let _ = on_event(
                event.token().0,
                Event {
                    readable: event.is_readable(),
                    writable: event.is_writable(),
                    read_closed: event.is_read_closed(),
                    write_closed: event.is_write_closed(),
                    error: event.is_error(),
                },
                wake,
            );
        }
        self.events.clear();
    }

    #[cfg(feature = "tokio-context")]
    pub(super) fn fd(&self) -> std::os::fd::RawFd {
        use std::os::fd::AsRawFd;
        self.poll.as_raw_fd()
    }
}
