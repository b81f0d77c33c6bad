//! Address resolution off the workers: [`ToSocketAddrs`] and
//! [`lookup_host`].
//!
//! `std::net::ToSocketAddrs` resolves a host name with `getaddrinfo`, which
//! blocks for as long as the resolver takes (a DNS server that does not
//! answer costs seconds). On a worker that would stall every task queued
//! behind it. So keel's connecting calls take this module's
//! [`ToSocketAddrs`], which sorts an address into one of two kinds:
//!
//! - a *literal* (a [`SocketAddr`], an `(IpAddr, u16)`, or a string such
//!   as `"127.0.0.1:80"` or `"[::1]:80"` that parses as one) is used as it
//!   is: no system call, no thread;
//! - a *name* (`"example.com:443"`, `("localhost", 80)`) is resolved on
//!   the runtime's blocking pool (see [`crate::blocking`]), waiting for
//!   room if the pool is full, while the calling task is suspended.
//!
//! The trait is sealed: its implementations are the ones listed on it.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

use crate::Handle;

pub(crate) use sealed::Target;

/// An address that keel's connecting calls accept: a literal address, or
/// a host name with a port, resolved off the workers (see
/// [`lookup_host`]).
///
/// Implemented for [`SocketAddr`], [`SocketAddrV4`], [`SocketAddrV6`],
/// `(IpAddr, u16)`, `(Ipv4Addr, u16)`, `(Ipv6Addr, u16)`, `(&str, u16)`,
/// `(String, u16)`, `&str`, `String`, `&[SocketAddr]`, and references to
/// each. It cannot be implemented outside keel.
pub trait ToSocketAddrs: sealed::Sealed {}

mod sealed {
    use std::net::SocketAddr;

    /// What a value of [`ToSocketAddrs`](super::ToSocketAddrs) turns into
    /// before any resolving.
    #[derive(Debug)]
    pub enum Target {
        /// Addresses given literally.
        Literal(Vec<SocketAddr>),
        /// A `host:port` string to hand to the system resolver.
        Name(String),
    }

    /// Keeps [`ToSocketAddrs`](super::ToSocketAddrs) to keel's own
    /// implementations.
    pub trait Sealed {
        /// The literal addresses, or the name to resolve.
        fn target(&self) -> Target;
    }
}

/// Implements the trait for types that are always literal.
macro_rules! literal {
    ($($ty:ty => |$v:ident| $addr:expr),* $(,)?) => {$(
        impl ToSocketAddrs for $ty {}
        impl sealed::Sealed for $ty {
            fn target(&self) -> Target {
                let $v = self;
                Target::Literal(vec![$addr])
            }
        }
    )*};
}

literal! {
    SocketAddr => |a| *a,
    SocketAddrV4 => |a| SocketAddr::V4(*a),
    SocketAddrV6 => |a| SocketAddr::V6(*a),
    (IpAddr, u16) => |a| SocketAddr::new(a.0, a.1),
    (Ipv4Addr, u16) => |a| SocketAddr::new(IpAddr::V4(a.0), a.1),
    (Ipv6Addr, u16) => |a| SocketAddr::new(IpAddr::V6(a.0), a.1),
}

impl ToSocketAddrs for str {}
impl sealed::Sealed for str {
    fn target(&self) -> Target {
        match self.parse::<SocketAddr>() {
            Ok(addr) => Target::Literal(vec![addr]),
            Err(_) => Target::Name(self.to_owned()),
        }
    }
}

impl ToSocketAddrs for String {}
impl sealed::Sealed for String {
    fn target(&self) -> Target {
        self.as_str().target()
    }
}

impl ToSocketAddrs for (&str, u16) {}
impl sealed::Sealed for (&str, u16) {
    fn target(&self) -> Target {
        let (host, port) = *self;
        match host.parse::<IpAddr>() {
            Ok(ip) => Target::Literal(vec![SocketAddr::new(ip, port)]),
            // `getaddrinfo` wants a bracketless IPv6 host, which a name
            // never is; the port is appended in the form std parses.
            Err(_) => Target::Name(format!("{host}:{port}")),
        }
    }
}

impl ToSocketAddrs for (String, u16) {}
impl sealed::Sealed for (String, u16) {
    fn target(&self) -> Target {
        (self.0.as_str(), self.1).target()
    }
}

impl ToSocketAddrs for &[SocketAddr] {}
impl sealed::Sealed for &[SocketAddr] {
    fn target(&self) -> Target {
        Target::Literal(self.to_vec())
    }
}

impl<T: ToSocketAddrs + ?Sized> ToSocketAddrs for &T {}
impl<T: sealed::Sealed + ?Sized> sealed::Sealed for &T {
    fn target(&self) -> Target {
        (**self).target()
    }
}

/// Resolves `addr` to its socket addresses: a literal at once, a host
/// name on the blocking pool of the current runtime, so that a slow
/// resolver suspends the calling task and never blocks a worker.
///
/// ```
/// # let rt = keel::Runtime::new().unwrap();
/// # rt.block_on(async {
/// let addrs: Vec<_> = keel::net::lookup_host("localhost:8080").await?.collect();
/// assert!(addrs.iter().all(|a| a.port() == 8080 && a.ip().is_loopback()));
/// // A literal is never sent to the resolver.
/// let literal: Vec<_> = keel::net::lookup_host("127.0.0.1:1").await?.collect();
/// assert_eq!(literal, ["127.0.0.1:1".parse().unwrap()]);
/// # std::io::Result::Ok(())
/// # }).unwrap();
/// ```
///
/// # Errors
///
/// The resolver's error (an unknown host, a string without a port:
/// `InvalidInput`), `InvalidInput` if the name resolves to no address,
/// `Other` outside a keel runtime, or if the runtime shuts down while the
/// lookup waits.
pub async fn lookup_host(
    addr: impl ToSocketAddrs,
) -> io::Result<impl Iterator<Item = SocketAddr> + Send + 'static> {
    resolve(target(&addr)).await.map(Vec::into_iter)
}

/// What `addr` says, before resolving: taken before any await, so that
/// the future holds no borrow of it.
pub(crate) fn target<A: ToSocketAddrs + ?Sized>(addr: &A) -> Target {
    sealed::Sealed::target(addr)
}

/// The addresses of `target`, at least one (see [`lookup_host`]).
pub(crate) async fn resolve(target: Target) -> io::Result<Vec<SocketAddr>> {
    let addrs = match target {
        Target::Literal(addrs) => addrs,
        Target::Name(name) => {
            let handle = Handle::try_current().ok_or_else(|| {
                io::Error::other("keel::net::lookup_host must be called inside a keel runtime")
            })?;
            handle
                .unblock(move || {
                    std::net::ToSocketAddrs::to_socket_addrs(name.as_str())
                        .map(Iterator::collect::<Vec<_>>)
                })
                .await??
        }
    };
    if addrs.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "the address resolved to no socket address",
        ));
    }
    Ok(addrs)
}

#[cfg(test)]
mod tests {
    use super::sealed::Sealed;
    use super::*;

    fn is_literal(target: Target) -> bool {
        matches!(target, Target::Literal(_))
    }

    #[test]
    fn literals_skip_the_resolver_and_names_do_not() {
        assert!(is_literal("127.0.0.1:80".target()));
        assert!(is_literal("[::1]:80".target()));
        assert!(is_literal(("10.0.0.1", 80).target()));
        assert!(is_literal(("::1", 80).target()));
        assert!(is_literal(String::from("1.2.3.4:5").target()));
        let addr: SocketAddr = "1.2.3.4:5".parse().unwrap();
        assert!(is_literal(addr.target()));
        assert!(is_literal((&[addr, addr][..]).target()));
        match ("localhost", 80).target() {
            Target::Name(name) => assert_eq!(name, "localhost:80"),
            other => panic!("a host name is a name: {other:?}"),
        }
        assert!(matches!("localhost:80".target(), Target::Name(_)));
        // A malformed string is handed to the resolver, which says why.
        assert!(matches!("no port here".target(), Target::Name(_)));
    }
}
