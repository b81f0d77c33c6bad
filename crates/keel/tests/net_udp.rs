//! UDP sockets on the reactor.

#[macro_use]
mod support;

use std::io::ErrorKind;

use keel::net::UdpSocket;

rt_test! {
    fn datagrams_round_trip_with_send_to_and_recv_from(rt) {
        rt.block_on(async {
            let server = UdpSocket::bind("127.0.0.1:0").unwrap();
            let server_addr = server.local_addr().unwrap();
            let echo = keel::spawn(async move {
                let mut buf = [0u8; 64];
                for _ in 0..100 {
                    let (n, from) = server.recv_from(&mut buf).await.unwrap();
                    server.send_to(&buf[..n], from).await.unwrap();
                }
            });
            let client = UdpSocket::bind("127.0.0.1:0").unwrap();
            for i in 0..100u32 {
                client.send_to(&i.to_le_bytes(), server_addr).await.unwrap();
                let mut buf = [0u8; 64];
                let (n, from) = client.recv_from(&mut buf).await.unwrap();
                assert_eq!((&buf[..n], from), (&i.to_le_bytes()[..], server_addr));
            }
            echo.await.unwrap();
        });
    }

    fn connected_sockets_send_and_recv(rt) {
        rt.block_on(async {
            let a = UdpSocket::bind("127.0.0.1:0").unwrap();
            let b = UdpSocket::bind("127.0.0.1:0").unwrap();
            a.connect(b.local_addr().unwrap()).unwrap();
            b.connect(a.local_addr().unwrap()).unwrap();
            assert_eq!(a.peer_addr().unwrap(), b.local_addr().unwrap());
            a.send(b"over").await.unwrap();
            let mut buf = [0u8; 16];
            let n = b.recv(&mut buf).await.unwrap();
            assert_eq!(&buf[..n], b"over");
        });
    }

    fn a_datagram_to_a_closed_port_surfaces_as_refused(rt) {
        rt.block_on(async {
            let closed = std::net::UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
            let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
            socket.connect(closed).unwrap();
            socket.send(b"anyone?").await.unwrap();
            // The ICMP port-unreachable comes back as the socket's error.
            let mut buf = [0u8; 16];
            let error = socket.recv(&mut buf).await.unwrap_err();
            assert_eq!(error.kind(), ErrorKind::ConnectionRefused, "{error}");
        });
    }

    fn an_unconnected_socket_cannot_send(rt) {
        rt.block_on(async {
            let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
            assert!(socket.peer_addr().is_err());
            let error = socket.send(b"nowhere").await.unwrap_err();
            // Linux says "destination address required".
            assert!(
                matches!(error.kind(), ErrorKind::NotConnected | ErrorKind::Other)
                    || error.raw_os_error() == Some(89),
                "{error:?}"
            );
        });
    }
}
