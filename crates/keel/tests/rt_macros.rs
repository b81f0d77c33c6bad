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
    assert_eq!(Class::current(), Some(Class::URGENT));
    // Tasks spawned from the body inherit its class.
    let child = keel::spawn(async { Class::current() }).await.unwrap();
    assert_eq!(child, Some(Class::URGENT));
}

#[keel::test(workers = 1)]
async fn without_the_class_option_the_body_runs_outside_any_task() {
    assert_eq!(Class::current(), None);
    let child = keel::spawn(async { Class::current() }).await.unwrap();
    assert_eq!(child, Some(Class::NORMAL));
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
