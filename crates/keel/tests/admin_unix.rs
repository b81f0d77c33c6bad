//! The admin endpoint on a Unix domain socket: it answers there, the
//! socket file lets only its owner connect by default, a stale file is
//! replaced and a live socket or another file is not, and the file goes
//! when the server does.

#![cfg(unix)]

use std::io::{ErrorKind, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};

use keel::admin::Admin;

mod support;

use support::TempDir;
use support::{runtime, within, TEST_LIMIT};

/// `GET path` over the socket at `socket`; the answer's status line and
/// body.
fn get(socket: &Path, path: &str) -> (String, String) {
    let mut stream = UnixStream::connect(socket).expect("connects");
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nhost: admin\r\nconnection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    let status = answer.lines().next().unwrap_or_default().to_owned();
    let body = answer
        .split_once("\r\n\r\n")
        .map_or(String::new(), |(_, body)| body.to_owned());
    (status, body)
}

fn socket_in(dir: &TempDir) -> PathBuf {
    dir.join("admin.sock")
}

#[test]
fn the_endpoint_answers_on_its_unix_socket_which_only_its_owner_may_use() {
    within(TEST_LIMIT, || {
        let rt = runtime();
        let dir = TempDir::new("admin-unix");
        let socket = socket_in(&dir);
        let server = Admin::builder().serve_unix(&socket, rt.handle()).unwrap();
        assert_eq!(server.path(), Some(socket.as_path()));
        let mode = std::fs::metadata(&socket).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "mode {mode:o}");

        let (status, body) = get(&socket, "/health");
        assert_eq!(status, "HTTP/1.1 200 OK");
        assert_eq!(body.trim(), "ok");
        let (status, body) = get(&socket, "/stats");
        assert_eq!(status, "HTTP/1.1 200 OK");
        let stats: serde_json::Value = serde_json::from_str(&body).expect("JSON stats");
        assert!(stats["worker_states"].is_array(), "{stats}");

        drop(server);
        assert!(!socket.exists(), "the socket file goes with the server");
    });
}

#[test]
fn the_mode_is_a_knob() {
    within(TEST_LIMIT, || {
        let rt = runtime();
        let dir = TempDir::new("admin-unix-mode");
        let socket = socket_in(&dir);
        let server = Admin::builder()
            .unix_mode(0o660)
            .serve_unix(&socket, rt.handle())
            .unwrap();
        let mode = std::fs::metadata(&socket).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o660, "mode {mode:o}");
        assert_eq!(get(&socket, "/health").0, "HTTP/1.1 200 OK");
        drop(server);
    });
}

#[test]
fn a_stale_socket_is_replaced_but_a_live_one_or_another_file_is_not() {
    within(TEST_LIMIT, || {
        let rt = runtime();
        let dir = TempDir::new("admin-unix-stale");
        let socket = socket_in(&dir);

        // Left by a process that died: nothing listens on it. It is shut
        // for reading before it is closed, so that it refuses connections
        // at once even while a child forked by another test of this
        // binary (`connect_as`) still holds a copy of its descriptor
        // until the child's exec closes it.
        let left = UnixListener::bind(&socket).unwrap();
        assert_eq!(
            // SAFETY: `left` owns the descriptor, open for the whole call.
            unsafe { libc::shutdown(left.as_raw_fd(), libc::SHUT_RD) },
            0
        );
        drop(left);
        assert!(socket.exists());
        let server = Admin::builder().serve_unix(&socket, rt.handle()).unwrap();
        assert_eq!(get(&socket, "/health").0, "HTTP/1.1 200 OK");

        // A live endpoint keeps its socket.
        let error = Admin::builder()
            .serve_unix(&socket, rt.handle())
            .expect_err("a live socket is in the way");
        assert_eq!(error.kind(), ErrorKind::AddrInUse, "{error}");
        assert!(
            error.to_string().contains("admin.sock"),
            "the error names the path: {error}"
        );
        assert_eq!(get(&socket, "/health").0, "HTTP/1.1 200 OK");
        drop(server);

        // A file that is not a socket is never removed.
        std::fs::write(&socket, b"not a socket").unwrap();
        let error = Admin::builder()
            .serve_unix(&socket, rt.handle())
            .expect_err("a regular file is in the way");
        assert_eq!(error.kind(), ErrorKind::AddrInUse, "{error}");
        assert_eq!(std::fs::read(&socket).unwrap(), b"not a socket");
        // Nothing is left behind by the failed binds.
        let left: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(left, ["admin.sock"], "{left:?}");
    });
}

/// Another user cannot connect: `connect` fails with `EACCES`. Needs root
/// to become another user (`nobody`, 65534) in a child process.
#[test]
fn another_user_is_refused_with_eacces() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("not root: cannot become another user, so only the mode is checked");
        return;
    }
    within(TEST_LIMIT, || {
        let rt = runtime();
        let dir = TempDir::new("admin-unix-eacces");
        // `nobody` must reach the directory to be refused by the socket's
        // own mode, not by the directory's.
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let socket = socket_in(&dir);
        let server = Admin::builder().serve_unix(&socket, rt.handle()).unwrap();
        assert_eq!(connect_as(65534, &socket).map(|_| ()), Err(libc::EACCES));
        // The owner still can.
        assert_eq!(get(&socket, "/health").0, "HTTP/1.1 200 OK");
        drop(server);
    });
}

/// Connects to `socket` from a child process running as `uid`; the
/// connect's error number if it failed.
fn connect_as(uid: libc::uid_t, socket: &Path) -> Result<(), i32> {
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::process::CommandExt;

    // Built before the fork: the child only makes system calls.
    // SAFETY: sockaddr_un is plain data; all zeros is a valid value.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let bytes = socket.as_os_str().as_bytes();
    assert!(bytes.len() < addr.sun_path.len(), "socket path too long");
    for (slot, &byte) in addr.sun_path.iter_mut().zip(bytes) {
        *slot = byte as libc::c_char;
    }
    let mut command = std::process::Command::new("/bin/true");
    // SAFETY: the closure runs in the child between fork and exec and
    // only makes system calls (setgid, setuid, socket, connect) on memory
    // prepared before the fork; it allocates nothing and takes no lock.
    unsafe {
        command.pre_exec(move || {
            if libc::setgid(uid) != 0 || libc::setuid(uid) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            let fd = libc::socket(libc::AF_UNIX, libc::SOCK_STREAM, 0);
            if fd < 0 {
                return Err(std::io::Error::last_os_error());
            }
            let len = std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t;
            if libc::connect(fd, (&raw const addr).cast(), len) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    match command.status() {
        Ok(status) => {
            assert!(status.success(), "/bin/true failed: {status}");
            Ok(())
        }
        Err(error) => Err(error.raw_os_error().unwrap_or(-1)),
    }
}
