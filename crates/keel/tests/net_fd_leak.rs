//! No file descriptor outlives its socket. Alone in its test binary, so
//! no other test opens descriptors while this one counts them.

use std::time::Duration;

use keel::io::{AsyncReadExt, AsyncWriteExt};
use keel::net::{TcpListener, TcpStream};

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .expect("/proc/self/fd is readable")
        .count()
}

#[test]
fn ten_thousand_connections_leave_no_descriptor_behind() {
    let rt = keel::Runtime::builder().workers(2).build().unwrap();
    // Warm up: the runtime's own descriptors (epoll, eventfd) and the
    // test harness's are open before the count.
    let before = open_fds();
    rt.block_on(async {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let server = keel::spawn(async move {
            for _ in 0..10_000 {
                let (mut stream, _) = listener.accept().await.unwrap();
                keel::spawn(async move {
                    let mut byte = [0u8; 1];
                    if stream.read_exact(&mut byte).await.is_ok() {
                        let _ = stream.write_all(&byte).await;
                    }
                });
            }
            // The listener drops here.
        });
        // 100 batches of 100 concurrent connections; half of each batch
        // also drops a pending read before closing.
        for batch in 0..100 {
            let clients: Vec<_> = (0..100)
                .map(|i| {
                    keel::spawn(async move {
                        let mut stream = TcpStream::connect(addr).await.unwrap();
                        if i % 2 == 0 {
                            let mut byte = [0u8; 1];
                            let _ = keel::time::timeout(
                                Duration::from_micros(1),
                                stream.read(&mut byte),
                            )
                            .await;
                        }
                        stream.write_all(&[batch as u8]).await.unwrap();
                        let mut echo = [0u8; 1];
                        stream.read_exact(&mut echo).await.unwrap();
                        assert_eq!(echo[0], batch as u8);
                    })
                })
                .collect();
            for client in clients {
                client.await.unwrap();
            }
        }
        server.await.unwrap();
    });
    // Server tasks end when their client closes; wait for the last ones
    // (bounded) rather than racing them.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while open_fds() > before && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(open_fds(), before, "descriptors leaked");
    drop(rt);
}
