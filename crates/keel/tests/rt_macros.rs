//! `#[keel::test]` (and so `#[keel::main]`, which expands the same way).

use std::time::Duration;

use keel::{Class, Handle};

#[keel::test]
async fn a_plain_test_runs_on_a_runtime() {
    assert_eq!(keel::spawn(async { 6 * 7 }).await.unwrap(), 42);
}

#[keel::test(workers = 1, spin = "short")]
async fn options_reach_the_builder() {
    assert_eq!(Handle::current().workers(), 1);
}

#[keel::test(workers = 3, spin = "long")]
async fn other_options_reach_the_builder() {
    assert_eq!(Handle::current().workers(), 3);
}

#[keel::test(workers = 1)]
async fn a_test_may_return_a_result() -> std::io::Result<()> {
    let listener = keel::net::TcpListener::bind("127.0.0.1:0")?;
    listener.local_addr()?;
    Ok(())
}

#[keel::test(workers = 2, class = "urgent")]
async fn the_class_option_runs_the_body_as_a_task_of_that_class() {
    // Tasks spawned from the body inherit its class: their polls show up
    // in the urgent class's count once a worker publishes it.
    for _ in 0..10 {
        keel::spawn(async {}).await.unwrap();
    }
    let handle = Handle::current();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let stats = handle.stats();
        if stats.classes[Class::URGENT.index()].polls >= 10 {
            assert_eq!(stats.classes[Class::NORMAL.index()].polls, 0);
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{stats:?}");
        keel::time::sleep(Duration::from_millis(5)).await;
    }
}

#[keel::test(class = "bulk")]
#[should_panic(expected = "a panic in the body")]
async fn a_panic_in_a_class_body_fails_the_test() {
    panic!("a panic in the body");
}

#[keel::test]
async fn select_and_join_are_reexported() {
    use futures_util::FutureExt;
    let (a, b) = keel::join!(async { 1 }, keel::spawn(async { 2 }));
    assert_eq!(a + b.unwrap(), 3);
    let first = keel::select! {
        _ = keel::time::sleep(Duration::from_secs(3600)).fuse() => "timer",
        v = async { "now" }.fuse() => v,
    };
    assert_eq!(first, "now");
}
