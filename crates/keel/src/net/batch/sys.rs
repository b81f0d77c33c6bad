//! The system calls batching needs: how much is queued (`FIONREAD`),
//! whether the kernel calls the socket readable now (`poll`), the receive
//! low-water mark (`SO_RCVLOWAT`) and the receive buffer (`SO_RCVBUF`).
//!
//! Unix only; elsewhere every call fails with `Unsupported`, so that
//! setting a batch policy fails instead of batching badly.

#[cfg(unix)]
mod imp {
    use std::io;
    use std::os::fd::AsRawFd;

    use mio::net::TcpStream;
    use socket2::SockRef;

    /// Bytes queued in the socket's receive queue, not yet read.
    pub(crate) fn queued(socket: &TcpStream) -> io::Result<usize> {
        let mut queued: libc::c_int = 0;
        // SAFETY: `FIONREAD` (`SIOCINQ` on a TCP socket) stores one `c_int`
        // through its argument, which points to `queued`, a live local of
        // that type; the descriptor is the open socket `socket` borrows
        // for the length of the call. The call touches no other memory.
        let result = unsafe { libc::ioctl(socket.as_raw_fd(), libc::FIONREAD, &mut queued) };
        if result < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(usize::try_from(queued).unwrap_or(0))
    }

    /// Whether the kernel reports the socket readable now, under its
    /// current low-water mark (or at end-of-file, or with an error).
    pub(crate) fn readable_now(socket: &TcpStream) -> io::Result<bool> {
        let mut entry = libc::pollfd {
            fd: socket.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: `entry` is one valid, live `pollfd` and the count is 1, so
        // the kernel reads and writes only it; a zero timeout makes the
        // call return at once. The descriptor stays open while `socket` is
        // borrowed.
        let result = unsafe { libc::poll(&mut entry, 1, 0) };
        if result < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(entry.revents & (libc::POLLIN | libc::POLLERR | libc::POLLHUP) != 0)
    }

    /// Sets `SO_RCVLOWAT` to `bytes` (at least 1, at most `c_int::MAX`).
    pub(crate) fn set_low_water(socket: &TcpStream, bytes: usize) -> io::Result<()> {
        let value = libc::c_int::try_from(bytes.max(1)).unwrap_or(libc::c_int::MAX);
        // SAFETY: `value` is a live `c_int` and the length passed is its
        // size, which is what `SO_RCVLOWAT` reads; the kernel only reads
        // from the pointer. The descriptor is the open socket `socket`
        // borrows.
        let result = unsafe {
            libc::setsockopt(
                socket.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVLOWAT,
                (&value as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if result < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// The socket's receive buffer size (`SO_RCVBUF`; Linux reports the
    /// doubled value it actually allows).
    pub(crate) fn receive_buffer(socket: &TcpStream) -> io::Result<usize> {
        SockRef::from(socket).recv_buffer_size()
    }
}

#[cfg(not(unix))]
mod imp {
    use std::io;

    use mio::net::TcpStream;

    fn unsupported() -> io::Error {
        io::Error::new(
            io::ErrorKind::Unsupported,
            "batched reads need FIONREAD and SO_RCVLOWAT (unix only)",
        )
    }

    pub(crate) fn queued(_: &TcpStream) -> io::Result<usize> {
        Err(unsupported())
    }

    pub(crate) fn readable_now(_: &TcpStream) -> io::Result<bool> {
        Err(unsupported())
    }

    pub(crate) fn set_low_water(_: &TcpStream, _: usize) -> io::Result<()> {
        Err(unsupported())
    }

    pub(crate) fn receive_buffer(_: &TcpStream) -> io::Result<usize> {
        Err(unsupported())
    }
}

pub(crate) use imp::{queued, readable_now, receive_buffer, set_low_water};
