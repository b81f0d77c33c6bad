//! TCP: listeners and streams on the reactor.

#[macro_use]
mod support;

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use keel::io::{AsyncReadExt, AsyncWriteExt};
use keel::net::{TcpListener, TcpStream};
use keel::time::timeout;

/// Accepts connections forever, echoing each one until EOF.
async fn echo_server(listener: TcpListener) {
    loop {
        let Ok((mut stream, _)) = listener.accept().await else {
            continue;
        };
        keel::spawn(async move {
            let mut buf = [0u8; 4096];
            loop {
                match stream.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        if stream.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                    }
                }
            }
        });
    }
}

fn bind_local() -> TcpListener {
    TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0")
}

rt_test! {
    /// A stream is closed without being taken off epoll first (the close
    /// of its file does that), and on a ring per worker by its worker's
    /// next enter. A descriptor the process duplicated keeps the socket
    /// open, and on epoll its registration: the old socket's events then
    /// name a forgotten token. New streams, one likely on the dropped
    /// number, are served all the while, and what the old peer sent stays
    /// in the old socket for the duplicate to read.
    fn a_duplicated_descriptor_outliving_its_stream_disturbs_no_other(rt) {
        rt.block_on(async {
            let std_listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let mut old_peer =
                std::net::TcpStream::connect(std_listener.local_addr().unwrap()).unwrap();
            let (accepted, _) = std_listener.accept().unwrap();
            // A second descriptor of the same socket, which outlives `old`.
            let mut old_socket = accepted.try_clone().unwrap();
            let mut old = TcpStream::from_std(accepted).unwrap();
            // Waited on once, so a ring per worker watches it.
            let mut byte = [0u8; 1];
            assert!(timeout(Duration::from_millis(2), old.read(&mut byte)).await.is_err());
            drop(old);
            let listener = bind_local();
            let addr = listener.local_addr().unwrap();
            let server = keel::spawn(echo_server(listener));
            for round in 0..20u8 {
                old_peer.write_all(&[round]).unwrap();
                let mut stream = TcpStream::connect(addr).await.unwrap();
                stream.write_all(&[round; 3]).await.unwrap();
                let mut echo = [0u8; 3];
                timeout(Duration::from_secs(10), stream.read_exact(&mut echo))
                    .await
                    .expect("a new stream is served")
                    .unwrap();
                assert_eq!(echo, [round; 3]);
            }
            server.abort();
            old_socket.set_nonblocking(false).unwrap();
            old_socket.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            let mut sent = [0u8; 20];
            old_socket.read_exact(&mut sent).unwrap();
            assert_eq!(sent.to_vec(), (0..20u8).collect::<Vec<_>>());
        });
    }

    fn echo_with_1000_concurrent_connections(rt) {
        rt.block_on(async {
            let listener = bind_local();
            let addr = listener.local_addr().unwrap();
            let server = keel::spawn(echo_server(listener));
            // Connect all first, so the 1000 connections are open at once.
            let mut streams = Vec::with_capacity(1000);
            for _ in 0..1000 {
                streams.push(TcpStream::connect(addr).await.expect("connect"));
            }
            let clients: Vec<_> = streams
                .into_iter()
                .enumerate()
                .map(|(i, mut stream)| {
                    keel::spawn(async move {
                        let message = format!("connection {i:04} says hello");
                        for _ in 0..3 {
                            stream.write_all(message.as_bytes()).await.unwrap();
                            let mut echo = vec![0; message.len()];
                            stream.read_exact(&mut echo).await.unwrap();
                            assert_eq!(echo, message.as_bytes());
                        }
                    })
                })
                .collect();
            for client in clients {
                client.await.expect("client task");
            }
            server.abort();
        });
    }

    fn half_close_lets_the_peer_answer_after_eof(rt) {
        rt.block_on(async {
            let listener = bind_local();
            let addr = listener.local_addr().unwrap();
            let server = keel::spawn(async move {
                let (mut stream, _) = listener.accept().await.unwrap();
                let mut request = Vec::new();
                // Reads to EOF: the client shut down its writing half.
                stream.read_to_end(&mut request).await.unwrap();
                stream.write_all(&request).await.unwrap();
                stream.write_all(b" (done)").await.unwrap();
                stream.close().await.unwrap();
            });
            let mut client = TcpStream::connect(addr).await.unwrap();
            client.write_all(b"question").await.unwrap();
            client.shutdown(Shutdown::Write).unwrap();
            let mut reply = String::new();
            client.read_to_string(&mut reply).await.unwrap();
            assert_eq!(reply, "question (done)");
            server.await.unwrap();
        });
    }

    fn split_halves_read_and_write_from_different_tasks(rt) {
        rt.block_on(async {
            let listener = bind_local();
            let addr = listener.local_addr().unwrap();
            let server = keel::spawn(echo_server(listener));
            let (mut reader, mut writer) = TcpStream::connect(addr).await.unwrap().into_split();
            assert_eq!(reader.peer_addr().unwrap(), addr);
            let total = 256 * 1024;
            let write = keel::spawn(async move {
                let chunk = vec![7u8; 1024];
                for _ in 0..total / chunk.len() {
                    writer.write_all(&chunk).await.unwrap();
                }
                // Dropping the writing half sends FIN; the echo server then
                // closes, and the reader sees EOF.
                drop(writer);
            });
            let mut received = Vec::new();
            reader.read_to_end(&mut received).await.unwrap();
            assert_eq!(received.len(), total);
            assert!(received.iter().all(|&b| b == 7));
            write.await.unwrap();
            server.abort();
        });
    }

    fn vectored_writes_arrive_in_order(rt) {
        rt.block_on(async {
            let listener = bind_local();
            let addr = listener.local_addr().unwrap();
            let server = keel::spawn(async move {
                let (mut stream, _) = listener.accept().await.unwrap();
                let mut all = Vec::new();
                stream.read_to_end(&mut all).await.unwrap();
                all
            });
            let mut client = TcpStream::connect(addr).await.unwrap();
            let parts = [&b"head:"[..], &b"body"[..], &b":tail"[..]];
            let slices: Vec<_> = parts.iter().map(|p| std::io::IoSlice::new(p)).collect();
            let written = client.write_vectored(&slices).await.unwrap();
            // Loopback takes 14 bytes at once; a short write would be legal
            // but is not what a fresh socket does.
            assert_eq!(written, 14);
            client.close().await.unwrap();
            assert_eq!(server.await.unwrap(), b"head:body:tail");
        });
    }

    fn connect_refused_is_an_error(rt) {
        rt.block_on(async {
            // Bind then close: nothing listens on the port now.
            let addr = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
            let error = TcpStream::connect(addr).await.unwrap_err();
            assert_eq!(error.kind(), ErrorKind::ConnectionRefused, "{error}");
        });
    }

    fn a_reset_connection_is_an_error(rt) {
        rt.block_on(async {
            let listener = bind_local();
            let addr = listener.local_addr().unwrap();
            let server = keel::spawn(async move {
                let (stream, _) = listener.accept().await.unwrap();
                let mut first = [0u8; 1];
                (&stream).read_exact(&mut first).await.unwrap();
                // Linger 0: closing sends RST instead of FIN.
                stream.set_linger(Some(Duration::ZERO)).unwrap();
                drop(stream);
            });
            let mut client = TcpStream::connect(addr).await.unwrap();
            client.write_all(b"x").await.unwrap();
            server.await.unwrap();
            let mut buf = [0u8; 16];
            let error = client.read(&mut buf).await.unwrap_err();
            assert_eq!(error.kind(), ErrorKind::ConnectionReset, "{error}");
        });
    }

    fn a_dropped_pending_read_leaves_the_stream_usable(rt) {
        rt.block_on(async {
            let listener = bind_local();
            let addr = listener.local_addr().unwrap();
            let mut client = TcpStream::connect(addr).await.unwrap();
            let (mut server, _) = listener.accept().await.unwrap();
            let mut buf = [0u8; 8];
            // Nothing was sent: the read is pending when the timeout drops it.
            let pending = timeout(Duration::from_millis(20), server.read(&mut buf)).await;
            assert!(pending.is_err(), "read finished with nothing sent: {pending:?}");
            client.write_all(b"late").await.unwrap();
            server.read_exact(&mut buf[..4]).await.unwrap();
            assert_eq!(&buf[..4], b"late");
        });
    }

    fn a_dropped_pending_accept_leaves_the_listener_usable(rt) {
        rt.block_on(async {
            let listener = Arc::new(bind_local());
            let addr = listener.local_addr().unwrap();
            let waiting = listener.clone();
            let accept = keel::spawn(async move { waiting.accept().await.map(|_| ()) });
            keel::time::sleep(Duration::from_millis(5)).await;
            accept.abort();
            assert!(accept.await.unwrap_err().is_cancelled());
            let client = keel::spawn(TcpStream::connect(addr));
            let (stream, peer) = listener.accept().await.unwrap();
            assert_eq!(stream.peer_addr().unwrap(), peer);
            client.await.unwrap().unwrap();
        });
    }

    fn options_and_addresses_are_reported(rt) {
        rt.block_on(async {
            let listener = TcpListener::options()
                .reuse_port(true)
                .backlog(16)
                .bind("127.0.0.1:0")
                .unwrap();
            let addr = listener.local_addr().unwrap();
            // SO_REUSEPORT: a second listener may bind the same port.
            let twin = TcpListener::options().reuse_port(true).bind(addr).unwrap();
            assert_eq!(twin.local_addr().unwrap(), addr);
            let client = TcpStream::connect(addr).await.unwrap();
            assert_eq!(client.peer_addr().unwrap(), addr);
            client.set_nodelay(true).unwrap();
            assert!(client.nodelay().unwrap());
            client.set_nodelay(false).unwrap();
            assert!(!client.nodelay().unwrap());
            // Without SO_REUSEPORT the port is taken.
            let error = TcpListener::bind(addr).unwrap_err();
            assert_eq!(error.kind(), ErrorKind::AddrInUse, "{error}");
        });
    }

    fn a_std_client_talks_to_a_keel_server(rt) {
        let listener = rt.block_on(async { bind_local() });
        let addr = listener.local_addr().unwrap();
        let server = rt.spawn(echo_server(listener));
        let mut client = std::net::TcpStream::connect(addr).unwrap();
        client.set_read_timeout(Some(support::WATCHDOG)).unwrap();
        for round in 0..50u32 {
            let message = round.to_le_bytes();
            client.write_all(&message).unwrap();
            let mut echo = [0u8; 4];
            client.read_exact(&mut echo).unwrap();
            assert_eq!(echo, message);
        }
        server.abort();
    }
}

#[test]
fn sockets_outside_a_runtime_are_a_clear_error() {
    let error = TcpListener::bind("127.0.0.1:0").unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Other);
    assert!(
        error.to_string().contains("inside a keel runtime"),
        "{error}"
    );
    let error = keel::net::UdpSocket::bind("127.0.0.1:0").unwrap_err();
    assert!(
        error.to_string().contains("inside a keel runtime"),
        "{error}"
    );
}

#[test]
fn an_unresolvable_address_is_a_clear_error() {
    let rt = keel::Runtime::builder().workers(1).build().unwrap();
    rt.block_on(async {
        let empty: &[SocketAddr] = &[];
        let error = TcpListener::bind(empty).unwrap_err();
        assert_eq!(error.kind(), ErrorKind::InvalidInput, "{error}");
        let error = TcpStream::connect(empty).await.unwrap_err();
        assert_eq!(error.kind(), ErrorKind::InvalidInput, "{error}");
    });
}
