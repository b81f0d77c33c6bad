//! The admin endpoint against hostile clients (feature `admin`): a flood of
//! half-open connections does not lock out health checks, the connection
//! that waited longest for a request head makes room for a new one, and a
//! connection that finds every slot answering gets a `503` it can read.

#![cfg(feature = "admin")]

mod support;

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use keel::admin::{self, Admin, AdminServer};
use keel::Runtime;
use support::http::{assert_healthy, closed_by_server, connect, get, read_answer};
use support::{runtime, wait_until, within, TEST_LIMIT, WATCHDOG};

/// Half a request head: what a slowloris client sends before it waits.
const HALF_A_HEAD: &[u8] = b"GET /health HTTP/1.1\r\nhost: slow\r\n";

/// Opens a connection that sends half a head and waits.
fn half_open(addr: SocketAddr) -> TcpStream {
    let mut stream = TcpStream::connect(addr).expect("connects");
    stream.write_all(HALF_A_HEAD).expect("half a head sent");
    stream
}

/// Whether the server closed `stream`, looking for at most 200 ms.
fn closed_soon(stream: &mut TcpStream) -> bool {
    stream
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    closed_by_server(stream)
}

/// The value of the unlabelled sample `name` in the text format.
fn metric(addr: SocketAddr, name: &str) -> f64 {
    let answer = get(addr, "/metrics");
    assert_eq!(answer.status, 200);
    answer
        .body
        .lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("no sample {name} in:\n{}", answer.body))
        .parse()
        .expect("a number")
}

/// Raises the soft limit of open files to at least `want` (within the
/// hard limit): the flood below holds more than the common default 1024.
/// Then grows the process's descriptor table to that size at once: the
/// kernel grows it by doubling as descriptors are opened, and in a
/// process with many threads each growth waits for an RCU grace period
/// (milliseconds on a virtual machine), which would show as a stall of
/// whichever health check opens the 512th or 1024th descriptor.
fn raise_fd_limit(want: u64) {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `getrlimit` writes only into the `rlimit` it is given, which
    // is valid and writable for the whole call.
    let got = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) };
    assert_eq!(got, 0);
    if limit.rlim_cur >= want {
        return;
    }
    limit.rlim_cur = want.min(limit.rlim_max);
    // SAFETY: `setrlimit` only reads the `rlimit` it is given, which is
    // valid for the whole call; a soft limit up to the hard one needs no
    // privilege.
    let set = unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) };
    assert_eq!(set, 0);
    assert!(
        limit.rlim_cur >= want,
        "the hard limit of open files ({}) is below the {want} this test needs",
        limit.rlim_max
    );
    let null = std::fs::File::open("/dev/null").unwrap();
    let high = i32::try_from(want - 1).unwrap();
    // SAFETY: `dup2` on a descriptor this function owns, to a number no
    // other code uses (the highest the limit allows), closed right after.
    let duped = unsafe { libc::dup2(std::os::fd::AsRawFd::as_raw_fd(&null), high) };
    assert_eq!(duped, high);
    // SAFETY: `high` was opened just above and nothing else holds it.
    let closed = unsafe { libc::close(high) };
    assert_eq!(closed, 0);
}

/// 1,000 connections that each send half a head and wait (slowloris),
/// opened at 5,000 a second, and meanwhile 100 health checks on fresh
/// connections, spread over the flood: every one is answered `200`,
/// however many half-open connections are held. The endpoint runs with its
/// defaults (16 slots, a 5 s read timeout), which the flood fills many
/// times over; it sheds the half-open connections oldest first and counts
/// them in `/metrics`.
///
/// The pace: a slowloris attack is a trickle of connections, and 5,000 a
/// second is far past one; unpaced, the flood's own thread and the
/// kernel's work for it take both cores of a small machine, and the
/// checks' latency then measures the scheduler more than the endpoint
/// (every check is still answered).
///
/// Prints the health checks' latency (p50, p99, max): a figure to read,
/// not a bound to assert on a shared machine.
#[test]
fn a_thousand_half_open_connections_do_not_lock_out_health_checks() {
    const FLOOD: usize = 1_000;
    const CHECKS: usize = 100;
    const PACE: Duration = Duration::from_micros(200);
    within(TEST_LIMIT, || {
        raise_fd_limit(4_096);
        let rt = runtime();
        let server = admin::serve("127.0.0.1:0", rt.handle()).unwrap();
        let addr = server.local_addr();
        let opened = AtomicUsize::new(0);
        let (latencies, during_flood, mut held) = thread::scope(|scope| {
            let flood = scope.spawn(|| {
                let mut held = Vec::with_capacity(FLOOD);
                let start = Instant::now();
                for j in 0..FLOOD {
                    let due = start + PACE * j as u32;
                    if let Some(wait) = due.checked_duration_since(Instant::now()) {
                        thread::sleep(wait);
                    }
                    held.push(half_open(addr));
                    opened.fetch_add(1, Ordering::Release);
                }
                held
            });
            let mut latencies = Vec::with_capacity(CHECKS);
            let mut during_flood = 0;
            for i in 0..CHECKS {
                // Spread the checks over the flood: check i waits for 10 i
                // half-open connections.
                let deadline = Instant::now() + WATCHDOG;
                while opened.load(Ordering::Acquire) < i * FLOOD / CHECKS {
                    assert!(Instant::now() < deadline, "the flood stalled");
                    thread::yield_now();
                }
                if opened.load(Ordering::Acquire) < FLOOD {
                    during_flood += 1;
                }
                let started = Instant::now();
                let answer = get(addr, "/health");
                latencies.push(started.elapsed());
                assert_eq!(answer.status, 200, "health check {i}: {answer:?}");
                assert_eq!(answer.body, "ok\n");
            }
            (
                latencies,
                during_flood,
                flood.join().expect("the flood ran"),
            )
        });

        let mut sorted = latencies.clone();
        sorted.sort();
        let quantile = |q: f64| sorted[((sorted.len() as f64 * q).ceil() as usize).max(1) - 1];
        println!(
            "{CHECKS} health checks beside {FLOOD} half-open connections ({during_flood} \
             while the flood was still opening): p50 {:?}, p99 {:?}, max {:?}; \
             evicted {}, refused {}",
            quantile(0.50),
            quantile(0.99),
            sorted[sorted.len() - 1],
            server.evicted_connections(),
            server.rejected_connections(),
        );

        // Every connection but the slots' worth was shed, oldest first: at
        // most 16 half-open connections are still held by the endpoint
        // (the health checks' connections freed theirs when they closed).
        let shed = (FLOOD - admin::DEFAULT_MAX_CONNECTIONS) as u64;
        wait_until("the flood is shed", || server.evicted_connections() >= shed);
        assert_eq!(server.rejected_connections(), 0, "no slot was answering");
        assert!(metric(addr, "keel_admin_evicted_connections_total") >= shed as f64);
        // Every half-open connection but the slots' worth was closed (read
        // without waiting: an open one has nothing to read).
        let is_closed = |stream: &mut TcpStream| match stream.read(&mut [0u8; 64]) {
            Ok(0) => true,
            Err(e) if e.kind() == ErrorKind::ConnectionReset => true,
            Err(e) if e.kind() == ErrorKind::WouldBlock => false,
            other => panic!("a half-open connection read {other:?}"),
        };
        for stream in &held {
            stream.set_nonblocking(true).unwrap();
        }
        wait_until("the shed connections are closed", || {
            held.iter_mut()
                .map(is_closed)
                .filter(|&closed| closed)
                .count()
                >= FLOOD - admin::DEFAULT_MAX_CONNECTIONS
        });
        // The oldest went first: the first half-open connection is gone,
        // the last one is still served.
        assert!(is_closed(&mut held[0]));
        let mut last = held.pop().unwrap();
        assert!(!is_closed(&mut last));
        last.set_nonblocking(false).unwrap();
        last.write_all(b"\r\n").unwrap();
        last.set_read_timeout(Some(WATCHDOG)).unwrap();
        let answer = read_answer(&mut last, false).expect("the newest is answered");
        assert_eq!(answer.status, 200);
        drop(held);
        assert_healthy(addr);
    });
}

/// With every slot taken, a whole request takes the slot of a waiting
/// connection: a stalled head first, the one waiting longest; then,
/// only when no head is stalled, the connection silent longest (an
/// answered keep-alive connection waits silent from its answer on).
#[test]
fn a_new_connection_evicts_stalled_heads_first_then_the_longest_silent() {
    within(TEST_LIMIT, || {
        let rt = runtime();
        let server = Admin::builder()
            .max_connections(2)
            .serve("127.0.0.1:0", rt.handle())
            .unwrap();
        let addr = server.local_addr();
        let mut first = half_open(addr);
        wait_until("the first is admitted", || server.connections() == 1);
        let mut second = half_open(addr);
        wait_until("the second is admitted", || server.connections() == 2);

        // Two stalled heads: the one stalled longest makes room.
        assert_healthy(addr);
        assert!(closed_soon(&mut first), "the longest stalled is closed");
        assert!(!closed_soon(&mut second), "the newer one is kept");
        assert_eq!(server.evicted_connections(), 1);

        // A kept-alive connection, answered once, waits silent: the
        // stalled `second` goes before it, though it came earlier.
        wait_until("the health check's slot is free", || {
            server.connections() == 1
        });
        let mut kept = connect(addr);
        kept.write_all(b"GET /health HTTP/1.1\r\nhost: a\r\n\r\n")
            .unwrap();
        assert_eq!(read_answer(&mut kept, false).unwrap().status, 200);
        assert_healthy(addr);
        assert!(closed_soon(&mut second));
        assert!(!closed_soon(&mut kept));
        assert_eq!(server.evicted_connections(), 2);

        // Two silent connections: the one silent longest (`kept`, since
        // its answer) makes room.
        wait_until("one slot held", || server.connections() == 1);
        let mut quiet = TcpStream::connect(addr).unwrap();
        wait_until("the quiet one is admitted", || server.connections() == 2);
        assert_healthy(addr);
        assert!(closed_soon(&mut kept));
        assert!(!closed_soon(&mut quiet));
        assert_eq!(server.evicted_connections(), 3);
        assert_eq!(server.rejected_connections(), 0);
        assert_eq!(metric(addr, "keel_admin_evicted_connections_total"), 3.0);

        // The survivor sends its request late, and is answered.
        quiet
            .write_all(b"GET /health HTTP/1.1\r\nhost: a\r\n\r\n")
            .unwrap();
        quiet.set_read_timeout(Some(WATCHDOG)).unwrap();
        assert_eq!(read_answer(&mut quiet, false).unwrap().status, 200);
    });
}

/// A gate that `/status` waits at while the test holds it shut: it keeps
/// one connection answering for as long as the test needs.
#[derive(Default)]
struct Gate {
    open: Mutex<bool>,
    opened: Condvar,
    waiting: AtomicBool,
}

impl Gate {
    fn wait(&self) {
        self.waiting.store(true, Ordering::SeqCst);
        let open = self.open.lock().unwrap();
        let (_open, timeout) = self
            .opened
            .wait_timeout_while(open, WATCHDOG, |open| !*open)
            .unwrap();
        assert!(!timeout.timed_out(), "the gate was never opened");
    }

    fn open(&self) {
        *self.open.lock().unwrap() = true;
        self.opened.notify_all();
    }
}

/// An endpoint of one slot whose `/status` answer waits at `gate`.
fn gated_endpoint(rt: &Runtime, gate: &Arc<Gate>) -> AdminServer {
    let at_gate = gate.clone();
    Admin::builder()
        .max_connections(1)
        .read_timeout(Duration::from_millis(500))
        .status_section(move || {
            at_gate.wait();
            String::new()
        })
        .serve("127.0.0.1:0", rt.handle())
        .unwrap()
}

/// Reads a `503` and then the end of the stream, never a reset.
fn assert_refused_readably(stream: &mut TcpStream) {
    stream.set_read_timeout(Some(WATCHDOG)).unwrap();
    let answer = read_answer(stream, false).expect("a 503, not a reset");
    assert_eq!(answer.status, 503, "{answer:?}");
    assert_eq!(answer.headers["connection"], "close");
    assert_eq!(answer.body, "too many admin connections, try later\n");
    let mut rest = Vec::new();
    match stream.read_to_end(&mut rest) {
        Ok(_) => assert!(rest.is_empty(), "{rest:?}"),
        Err(e) => panic!("the refused connection ended with {e}, not an end of stream"),
    }
}

/// A connection is never evicted while it answers: with every slot
/// answering, newcomers are refused with a `503` they can read, whether
/// they sent a request (with more bytes after it) or nothing, and whether
/// or not a linger permit was free. The answering connection then gets
/// its answer.
#[test]
fn connections_past_the_limit_get_503_while_every_slot_answers() {
    within(TEST_LIMIT, || {
        let rt = runtime();
        let gate = Arc::new(Gate::default());
        let server = gated_endpoint(&rt, &gate);
        let addr = server.local_addr();
        let status = thread::spawn(move || get(addr, "/status"));
        wait_until("/status is answering", || {
            gate.waiting.load(Ordering::SeqCst)
        });

        // A request followed by more than the answer: drained, not reset.
        let mut with_request = connect(addr);
        let mut sent = b"GET /health HTTP/1.1\r\nhost: a\r\n\r\n".to_vec();
        sent.extend(std::iter::repeat_n(b'x', 64 * 1024));
        with_request.write_all(&sent).unwrap();
        assert_refused_readably(&mut with_request);
        // Silent; the one linger permit is held by nobody now, or by the
        // first refusal until it closes: either way a readable 503.
        let mut silent = connect(addr);
        assert_refused_readably(&mut silent);
        // A refusal that keeps its connection open holds the linger
        // permit: the next is closed at once, still after a whole 503.
        let mut holding = connect(addr);
        holding.set_read_timeout(Some(WATCHDOG)).unwrap();
        assert_eq!(read_answer(&mut holding, false).unwrap().status, 503);
        let mut at_once = connect(addr);
        at_once
            .write_all(b"GET /health HTTP/1.1\r\nhost: a\r\n\r\n")
            .unwrap();
        thread::sleep(Duration::from_millis(20));
        assert_refused_readably(&mut at_once);
        assert!(closed_by_server(&mut holding));
        assert_eq!(server.rejected_connections(), 4);
        assert_eq!(server.evicted_connections(), 0);

        gate.open();
        let answer = status.join().expect("the /status client ran");
        assert_eq!(answer.status, 200, "{answer:?}");
        // With one slot, a connection opened the instant an answer arrives
        // can find that slot still answering (the answer is written, its
        // flush not yet seen): wait for the slot to be free.
        wait_until("the slot is free", || server.connections() == 0);
        assert_healthy(addr);
        wait_until("the slot is free", || server.connections() == 0);
        assert_eq!(metric(addr, "keel_admin_rejected_connections_total"), 4.0);
    });
}

/// A connection that sends nothing at all waits like any other: newer
/// connections push the silent ones out, oldest first.
#[test]
fn silent_connections_make_room_too() {
    within(TEST_LIMIT, || {
        let rt = runtime();
        let server = Admin::builder()
            .max_connections(3)
            .serve("127.0.0.1:0", rt.handle())
            .unwrap();
        let addr = server.local_addr();
        let mut first: Vec<TcpStream> = (1..=3)
            .map(|n| {
                let stream = TcpStream::connect(addr).unwrap();
                wait_until("admitted", || server.connections() == n);
                stream
            })
            .collect();
        let mut second: Vec<TcpStream> = (1..=3)
            .map(|n| {
                let stream = TcpStream::connect(addr).unwrap();
                wait_until("one evicted", || server.evicted_connections() == n);
                stream
            })
            .collect();
        for stream in &mut first {
            stream.set_read_timeout(Some(WATCHDOG)).unwrap();
            match stream.read(&mut [0u8; 16]) {
                Ok(0) => {}
                Err(e) if e.kind() == ErrorKind::ConnectionReset => {}
                other => panic!("a silent connection was not closed: {other:?}"),
            }
        }
        assert!(second.iter_mut().all(|s| !closed_soon(s)));
        assert_healthy(addr);
        assert_eq!(server.evicted_connections(), 4);
        assert!(closed_soon(&mut second[0]));
    });
}
