//! [`Connector`]: the client side of hyper on keel, so that hyper-util's
//! pooled `Client` and tonic's `Channel` open their connections on keel's
//! sockets and run on keel's workers, with no tokio runtime.
//!
//! hyper's clients leave connecting to a `tower_service::Service<Uri>`
//! (hyper-util's `HttpConnector` is tokio's). This one resolves the URI's
//! host with [`TcpStream::connect`]: an IP literal is used as it is, a name
//! is resolved on the runtime's blocking pool (`getaddrinfo` blocks, and a
//! worker must not), then each address is tried in turn. It speaks plain
//! TCP: an `https` URI is refused with an error that says so, rather than
//! sent in clear text to a TLS port.
//!
//! A pooled client on keel alone (the example runs in a keel task):
//!
//! ```no_run
//! use http_body_util::Empty;
//! use hyper::body::Bytes;
//! use hyper_util::client::legacy::Client;
//! use keel::compat::hyper::{Connector, HyperExecutor, HyperTimer};
//!
//! # async fn call() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
//! let client: Client<Connector, Empty<Bytes>> = Client::builder(HyperExecutor::current())
//!     .timer(HyperTimer::new())
//!     .pool_timer(HyperTimer::new())
//!     .build(Connector::new());
//! let response = client.get("http://127.0.0.1:8080/".parse()?).await?;
//! println!("{}", response.status());
//! # Ok(())
//! # }
//! ```

use std::fmt;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::Uri;
use hyper_util::client::legacy::connect::{Connected, Connection};

use crate::net::TcpStream;

/// Opens TCP connections for hyper's clients on keel (see the module
/// docs): hyper-util's legacy `Client` (`Client::builder(exec).build(connector)`)
/// and tonic's `Endpoint::connect_with_connector`.
///
/// Defaults: no connect timeout of its own (the kernel's, about two
/// minutes for an address that does not answer; set
/// [`connect_timeout`](Self::connect_timeout) so a dead backend fails a
/// request quickly instead of holding it), and `TCP_NODELAY` on (a
/// request's small writes are not held back waiting for the peer's ACK).
#[derive(Clone, Default)]
pub struct Connector {
    connect_timeout: Option<Duration>,
    delay: bool,
}

impl Connector {
    /// A connector with the defaults above.
    pub fn new() -> Connector {
        Connector::default()
    }

    /// Fails a connection that is not established within `timeout`, the
    /// name's resolution included (default: none of its own).
    pub fn connect_timeout(mut self, timeout: Duration) -> Connector {
        self.connect_timeout = Some(timeout);
        self
    }

    /// Whether the connections set `TCP_NODELAY` (default: true).
    pub fn nodelay(mut self, nodelay: bool) -> Connector {
        self.delay = !nodelay;
        self
    }

    /// Connects to `uri`'s host and port (80 when the URI names none).
    async fn connect(self, uri: Uri) -> io::Result<TcpStream> {
        let (host, port) = target(&uri)?;
        let connect = TcpStream::connect((host, port));
        let stream = match self.connect_timeout {
            Some(timeout) => crate::time::timeout(timeout, connect).await.map_err(|_| {
                io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("connecting to {uri} took more than {timeout:?}"),
                )
            })??,
            None => connect.await?,
        };
        stream.set_nodelay(!self.delay)?;
        Ok(stream)
    }
}

impl fmt::Debug for Connector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Connector")
            .field("connect_timeout", &self.connect_timeout)
            .field("nodelay", &!self.delay)
            .finish()
    }
}

/// The host (an IPv6 literal without its brackets) and port `uri` names;
/// an error for a URI without a host, or with a scheme other than `http`.
fn target(uri: &Uri) -> io::Result<(String, u16)> {
    let invalid = |why: String| io::Error::new(io::ErrorKind::InvalidInput, why);
    match uri.scheme_str() {
        None | Some("http") => {}
        Some("https") => {
            return Err(invalid(format!(
                "{uri}: keel's Connector speaks plain TCP; an https URI needs a TLS \
                 connector around it"
            )))
        }
        Some(other) => return Err(invalid(format!("{uri}: unsupported scheme {other:?}"))),
    }
    let host = uri
        .host()
        .ok_or_else(|| invalid(format!("{uri}: the URI names no host")))?;
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    Ok((host.to_owned(), uri.port_u16().unwrap_or(80)))
}

impl tower_service::Service<Uri> for Connector {
    type Response = TcpStream;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<TcpStream>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        Box::pin(self.clone().connect(uri))
    }
}

/// What hyper-util's pool asks of a connection: a plain TCP stream, not
/// proxied, with no protocol negotiated (HTTP/2 is the client builder's
/// `http2_only` choice).
impl Connection for TcpStream {
    fn connected(&self) -> Connected {
        Connected::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(uri: &str) -> io::Result<(String, u16)> {
        target(&uri.parse().unwrap())
    }

    #[test]
    fn the_target_is_the_uris_host_and_port() {
        assert_eq!(
            parse("http://127.0.0.1:8080/x").unwrap(),
            ("127.0.0.1".into(), 8080)
        );
        assert_eq!(
            parse("http://localhost/").unwrap(),
            ("localhost".into(), 80)
        );
        assert_eq!(parse("http://[::1]:9000").unwrap(), ("::1".into(), 9000));
        assert_eq!(parse("example.com:81").unwrap(), ("example.com".into(), 81));
    }

    #[test]
    fn https_other_schemes_and_no_host_are_refused() {
        let https = parse("https://127.0.0.1/").unwrap_err();
        assert_eq!(https.kind(), io::ErrorKind::InvalidInput);
        assert!(https.to_string().contains("TLS"), "{https}");
        let ftp = parse("ftp://127.0.0.1/").unwrap_err();
        assert!(ftp.to_string().contains("unsupported scheme"), "{ftp}");
        let relative = parse("/path").unwrap_err();
        assert!(relative.to_string().contains("no host"), "{relative}");
    }

    #[test]
    fn the_defaults_are_nodelay_and_no_timeout() {
        let connector = Connector::new();
        assert_eq!(connector.connect_timeout, None);
        assert!(!connector.delay);
        assert!(Connector::new().nodelay(false).delay);
    }
}
