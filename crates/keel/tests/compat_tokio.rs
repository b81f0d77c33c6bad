//! tokio's IO traits on keel's streams, with no tokio runtime: TLS with
//! tokio-rustls, tokio-util codecs, the owned halves and Unix streams.

use std::sync::Arc;

use futures_util::{SinkExt, StreamExt};
use keel::net::{TcpListener, TcpStream, UnixStream};

mod support;
use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio_rustls::{TlsAcceptor, TlsConnector};
use tokio_util::codec::{Framed, LinesCodec, LinesCodecError};

/// A runtime without a tokio side (with the `tokio-context` feature, a
/// runtime has one by default), so that what works here works on keel
/// alone.
fn runtime() -> keel::Runtime {
    keel::Runtime::builder()
        .workers(2)
        .tokio_threads(0)
        .build()
        .expect("a runtime without a tokio side builds")
}

/// No tokio runtime is around: whatever works here works on keel alone.
fn assert_no_tokio() {
    assert!(tokio::runtime::Handle::try_current().is_err());
}

/// A server and a client TLS configuration for `localhost`, with a
/// self-signed certificate made here (ring as the crypto provider).
fn tls_pair() -> (TlsAcceptor, TlsConnector) {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let certified = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    let cert = certified.cert.der().clone();
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(
        certified.signing_key.serialize_der(),
    ));
    let server = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![cert.clone()], key)
        .unwrap();
    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert).unwrap();
    let client = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    (
        TlsAcceptor::from(Arc::new(server)),
        TlsConnector::from(Arc::new(client)),
    )
}

#[test]
fn tls_handshake_and_echo_over_tokio_rustls_on_keel() {
    let rt = runtime();
    let (acceptor, connector) = tls_pair();
    rt.block_on(async move {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let server = keel::spawn(async move {
            assert_no_tokio();
            // First a client that does not trust the name: its handshake
            // fails, and the server goes on to the next connection.
            let (stream, _) = listener.accept().await.unwrap();
            assert!(acceptor.accept(stream).await.is_err());
            let (stream, _) = listener.accept().await.unwrap();
            let tls = acceptor.accept(stream).await.unwrap();
            let (read, mut write) = tokio::io::split(tls);
            let mut lines = BufReader::new(read).lines();
            while let Some(line) = lines.next_line().await.unwrap() {
                write
                    .write_all(format!("echo: {line}\n").as_bytes())
                    .await
                    .unwrap();
            }
            write.shutdown().await.unwrap();
        });
        assert_no_tokio();
        let stream = TcpStream::connect(addr).await.unwrap();
        let wrong = ServerName::try_from("example.com").unwrap();
        let error = connector.connect(wrong, stream).await.unwrap_err();
        assert!(error.to_string().contains("certificate"), "{error}");

        let stream = TcpStream::connect(addr).await.unwrap();
        let name = ServerName::try_from("localhost").unwrap();
        let mut tls = connector.connect(name, stream).await.unwrap();
        let big = "x".repeat(100_000);
        tls.write_all(format!("hello\n{big}\n").as_bytes())
            .await
            .unwrap();
        tls.shutdown().await.unwrap();
        let mut answer = String::new();
        tls.read_to_string(&mut answer).await.unwrap();
        assert_eq!(answer, format!("echo: hello\necho: {big}\n"));
        server.await.unwrap();
    });
}

#[test]
fn a_framed_codec_runs_over_keel_streams() {
    let rt = runtime();
    rt.block_on(async {
        assert_no_tokio();
        // Over TCP.
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let server = keel::spawn(async move {
            let (stream, _) = listener.accept().await.unwrap();
            let mut framed = Framed::new(stream, LinesCodec::new());
            while let Some(line) = framed.next().await {
                let line = line.unwrap();
                framed.send(line.to_uppercase()).await.unwrap();
            }
        });
        let mut client = Framed::new(TcpStream::connect(addr).await.unwrap(), LinesCodec::new());
        for word in ["alpha", "beta", "gamma"] {
            client.send(word).await.unwrap();
            assert_eq!(client.next().await.unwrap().unwrap(), word.to_uppercase());
        }
        drop(client);
        server.await.unwrap();

        // Over a Unix pair, with a bound on line length: an over-long line
        // is an error the reader sees, not an allocation without end.
        let (a, b) = UnixStream::pair().unwrap();
        let mut a = Framed::new(a, LinesCodec::new());
        let mut b = Framed::new(b, LinesCodec::new_with_max_length(16));
        a.send("short").await.unwrap();
        a.send("a line far longer than sixteen bytes")
            .await
            .unwrap();
        assert_eq!(b.next().await.unwrap().unwrap(), "short");
        assert!(matches!(
            b.next().await.unwrap(),
            Err(LinesCodecError::MaxLineLengthExceeded)
        ));
    });
}

#[test]
fn owned_halves_speak_tokio_io() {
    let rt = runtime();
    rt.block_on(async {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let client = keel::spawn(async move {
            let stream = TcpStream::connect(addr).await.unwrap();
            let (mut read, mut write) = stream.into_split();
            write.write_all(b"through the halves").await.unwrap();
            write.shutdown().await.unwrap();
            let mut back = Vec::new();
            read.read_to_end(&mut back).await.unwrap();
            back
        });
        let (stream, _) = listener.accept().await.unwrap();
        // `&TcpStream` reads and writes too.
        let mut got = Vec::new();
        (&stream).read_to_end(&mut got).await.unwrap();
        assert_eq!(got, b"through the halves");
        (&stream).write_all(&got).await.unwrap();
        AsyncWriteExt::shutdown(&mut &stream).await.unwrap();
        assert_eq!(client.await.unwrap(), b"through the halves");
    });
}
