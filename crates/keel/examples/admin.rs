//! The admin endpoint on a runtime with a little work in each class, for
//! a look at its routes, or a scraper to read.
//!
//! ```text
//! cargo run -p keel --example admin --features admin -- 127.0.0.1:9090 60
//! curl http://127.0.0.1:9090/metrics                       # Prometheus text 0.0.4
//! curl -H 'accept: application/openmetrics-text' http://127.0.0.1:9090/metrics
//! ```
//!
//! Arguments: the address to listen on (default `127.0.0.1:9090`; port 0
//! picks one), how many seconds to run (default 60), and `lane` to run the
//! urgent class on the urgent lane (`keel top` and `/metrics` then show
//! it). The first line printed names the endpoint's address.
//!
//! Built with `--cfg console_without_tokio_unstable`, it also serves
//! tokio-console (on `127.0.0.1:6669`, or `TOKIO_CONSOLE_BIND`), which
//! then lists keel's tasks, their classes among their fields:
//!
//! ```text
//! RUSTFLAGS="--cfg console_without_tokio_unstable" CARGO_TARGET_DIR=target/console \
//!     cargo run -p keel --example admin --features admin -- 127.0.0.1:9090 600
//! tokio-console                                 # cargo install tokio-console
//! ```

use std::io::Write;
use std::time::{Duration, Instant};

use keel::{Class, Runtime};

fn main() -> std::io::Result<()> {
    #[cfg(console_without_tokio_unstable)]
    console_subscriber::init();
    let mut args = std::env::args().skip(1);
    let addr = args.next().unwrap_or_else(|| "127.0.0.1:9090".to_owned());
    let seconds: u64 = match args.next() {
        Some(s) => s.parse().map_err(|_| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("seconds to run: {s:?} is not a number"),
            )
        })?,
        None => 60,
    };
    let mut builder = Runtime::builder();
    builder.workers(2);
    match args.next().as_deref() {
        None => {}
        Some("lane") => {
            builder.urgent_lane(keel::UrgentLane::new());
        }
        Some(other) => {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("third argument: {other:?} is not `lane`"),
            ))
        }
    }
    let rt = builder.build()?;
    let admin = keel::admin::serve(addr.as_str(), rt.handle())?;
    println!("admin endpoint on http://{}/", admin.local_addr());
    std::io::stdout().flush()?;
    let end = Instant::now() + Duration::from_secs(seconds);
    rt.block_on(async {
        // A task in each class wakes every 10 ms for a short slice of
        // work, and the blocking pool runs a job now and then, so every
        // family has figures.
        let tasks: Vec<_> = [Class::URGENT, Class::NORMAL, Class::BULK]
            .into_iter()
            .map(|class| {
                let name = format!(
                    "work-{}",
                    keel::Handle::current().class_name(class).unwrap_or("?")
                );
                keel::TaskBuilder::new()
                    .name(name)
                    .class(class)
                    .spawn(async move {
                        let mut sum = 0u64;
                        while Instant::now() < end {
                            for i in 0..20_000u64 {
                                sum = sum.wrapping_add(i * i);
                            }
                            keel::time::sleep(Duration::from_millis(10)).await;
                        }
                        sum
                    })
            })
            .collect();
        while Instant::now() < end {
            let _ = keel::spawn_blocking(|| std::thread::sleep(Duration::from_millis(1))).await;
            keel::time::sleep(Duration::from_millis(250)).await;
        }
        for task in tasks {
            let _ = task.await;
        }
    });
    admin.shutdown();
    Ok(())
}
