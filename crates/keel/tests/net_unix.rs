//! Unix domain sockets: listening, connecting, pairs, and the errors of
//! bad paths.

use std::io::ErrorKind;
use std::net::Shutdown;
use std::path::PathBuf;

use keel::io::{AsyncReadExt, AsyncWriteExt};
use keel::net::{UnixListener, UnixStream};
use support::runtime;

mod support;

/// A fresh socket path in the temporary directory, removed first.
fn socket_path(name: &str) -> PathBuf {
    let path = std::env::temp_dir().join(format!("keel-{}-{name}.sock", std::process::id()));
    let _ = std::fs::remove_file(&path);
    path
}

#[test]
fn a_client_and_a_server_echo_over_a_unix_socket() {
    let rt = runtime();
    let path = socket_path("echo");
    rt.block_on(async {
        let listener = UnixListener::bind(&path).unwrap();
        assert_eq!(listener.path().as_deref(), Some(path.as_path()));
        let server = keel::spawn(async move {
            let (mut stream, _) = listener.accept().await.unwrap();
            let mut buf = vec![0u8; 1024];
            loop {
                let n = stream.read(&mut buf).await.unwrap();
                if n == 0 {
                    break;
                }
                stream.write_all(&buf[..n]).await.unwrap();
            }
        });
        let mut client = UnixStream::connect(&path).await.unwrap();
        let peer = client.peer_addr().unwrap();
        assert_eq!(peer.as_pathname(), Some(path.as_path()));
        let message = vec![7u8; 100_000];
        let mut echoed = vec![0u8; message.len()];
        // Write and read at once (a message larger than the socket
        // buffer would otherwise deadlock), through `&UnixStream`.
        let (write, read) = futures_util::join!(
            async {
                (&client).write_all(&message).await.unwrap();
                client.shutdown(Shutdown::Write).unwrap();
            },
            async { (&client).read_exact(&mut echoed).await.unwrap() }
        );
        let ((), ()) = (write, read);
        assert_eq!(echoed, message);
        assert_eq!(client.read(&mut [0u8; 8]).await.unwrap(), 0);
        server.await.unwrap();
    });
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn a_pair_carries_bytes_both_ways_and_end_of_file() {
    let rt = runtime();
    rt.block_on(async {
        let (mut a, mut b) = UnixStream::pair().unwrap();
        a.write_all(b"ping").await.unwrap();
        let mut buf = [0u8; 4];
        b.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf, b"ping");
        b.write_all(b"pong").await.unwrap();
        b.close().await.unwrap();
        let mut rest = Vec::new();
        a.read_to_end(&mut rest).await.unwrap();
        assert_eq!(rest, b"pong");
    });
}

#[test]
fn a_path_too_long_is_refused_with_its_name_and_the_runtime_serves_on() {
    let rt = runtime();
    let long = std::env::temp_dir().join("k".repeat(200));
    rt.block_on(async {
        let error = UnixListener::bind(&long).unwrap_err();
        assert_eq!(error.kind(), ErrorKind::InvalidInput, "{error}");
        assert!(
            error.to_string().contains("kkkk"),
            "names the path: {error}"
        );
        let error = UnixStream::connect(&long).await.unwrap_err();
        assert_eq!(error.kind(), ErrorKind::InvalidInput, "{error}");
        // Still serving: a good path binds.
        let path = socket_path("after-long");
        let listener = UnixListener::bind(&path).unwrap();
        let client = keel::spawn(UnixStream::connect(path.clone()));
        listener.accept().await.unwrap();
        client.await.unwrap().unwrap();
        std::fs::remove_file(&path).unwrap();
    });
}

#[test]
fn a_file_in_the_way_is_addr_in_use_unless_it_is_a_stale_socket_and_replacing_is_asked() {
    let rt = runtime();
    let path = socket_path("in-the-way");
    rt.block_on(async {
        // A live listener: never replaced.
        let live = UnixListener::bind(&path).unwrap();
        for options in [UnixListener::options(), {
            let mut o = UnixListener::options();
            o.replace_stale(true);
            o
        }] {
            let error = options.bind(&path).unwrap_err();
            assert_eq!(error.kind(), ErrorKind::AddrInUse, "{error}");
            assert!(error.to_string().contains("in-the-way"), "{error}");
        }
        // The live listener still accepts.
        let client = keel::spawn(UnixStream::connect(path.clone()));
        live.accept().await.unwrap();
        client.await.unwrap().unwrap();
        // Dropped, it leaves a stale socket file: refused by default...
        drop(live);
        assert!(path.exists());
        let error = UnixListener::bind(&path).unwrap_err();
        assert_eq!(error.kind(), ErrorKind::AddrInUse, "{error}");
        // ...replaced on request.
        let again = UnixListener::options()
            .replace_stale(true)
            .bind(&path)
            .unwrap();
        let client = keel::spawn(UnixStream::connect(path.clone()));
        again.accept().await.unwrap();
        client.await.unwrap().unwrap();
        drop(again);
        std::fs::remove_file(&path).unwrap();

        // A regular file is never removed.
        std::fs::write(&path, b"not a socket").unwrap();
        let error = UnixListener::options()
            .replace_stale(true)
            .bind(&path)
            .unwrap_err();
        assert_eq!(error.kind(), ErrorKind::AddrInUse, "{error}");
        assert_eq!(std::fs::read(&path).unwrap(), b"not a socket");
        std::fs::remove_file(&path).unwrap();
    });
}

#[test]
fn connecting_to_nothing_fails_clearly() {
    let rt = runtime();
    let path = socket_path("nothing");
    rt.block_on(async {
        let error = UnixStream::connect(&path).await.unwrap_err();
        assert_eq!(error.kind(), ErrorKind::NotFound, "{error}");
        assert!(error.to_string().contains("nothing"), "{error}");
        // A stale socket file: refused.
        drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
        let error = UnixStream::connect(&path).await.unwrap_err();
        assert_eq!(error.kind(), ErrorKind::ConnectionRefused, "{error}");
    });
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn std_sockets_are_taken_over() {
    let rt = runtime();
    let path = socket_path("from-std");
    let std_listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
    let std_client = std::os::unix::net::UnixStream::connect(&path).unwrap();
    rt.block_on(async {
        let listener = UnixListener::from_std(std_listener).unwrap();
        let (mut server, _) = listener.accept().await.unwrap();
        let mut client = UnixStream::from_std(std_client).unwrap();
        client.write_all(b"x").await.unwrap();
        let mut byte = [0u8; 1];
        server.read_exact(&mut byte).await.unwrap();
        assert_eq!(&byte, b"x");
    });
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn unix_sockets_need_a_runtime() {
    let path = socket_path("no-runtime");
    let error = UnixListener::bind(&path).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Other);
    assert!(UnixStream::pair().is_err());
    assert!(!path.exists(), "nothing was bound");
}

/// With a mode, the socket file has it, and the same rules hold for a
/// file in the way (the temporary name it was bound under is not left
/// behind).
#[test]
fn a_socket_bound_with_a_mode_has_it_and_keeps_the_rules_for_a_file_in_the_way() {
    use std::os::unix::fs::PermissionsExt;
    let rt = runtime();
    let path = socket_path("with-mode");
    rt.block_on(async {
        let listener = UnixListener::options().mode(0o640).bind(&path).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o640, "{mode:o}");
        let client = keel::spawn(UnixStream::connect(path.clone()));
        listener.accept().await.unwrap();
        client.await.unwrap().unwrap();

        // Live: refused, replacing asked or not.
        for replace in [false, true] {
            let error = UnixListener::options()
                .mode(0o600)
                .replace_stale(replace)
                .bind(&path)
                .unwrap_err();
            assert_eq!(error.kind(), ErrorKind::AddrInUse, "{error}");
        }
        // Stale: refused by default, replaced on request.
        drop(listener);
        let error = UnixListener::options().mode(0o600).bind(&path).unwrap_err();
        assert_eq!(error.kind(), ErrorKind::AddrInUse, "{error}");
        let again = UnixListener::options()
            .mode(0o600)
            .replace_stale(true)
            .bind(&path)
            .unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "{mode:o}");
        drop(again);
        std::fs::remove_file(&path).unwrap();
        let prefix = path.file_name().unwrap().to_string_lossy().into_owned();
        let leftovers: Vec<_> = std::fs::read_dir(path.parent().unwrap())
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
            .collect();
        assert!(leftovers.is_empty(), "{leftovers:?}");
    });
}
