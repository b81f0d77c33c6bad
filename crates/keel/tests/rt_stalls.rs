//! Stall detection: a poll longer than the stall threshold is counted in
//! its class and reported through `tracing` with the task's id, class and
//! name; a short poll is not. One subscriber per process, so the tests of
//! this file share it and tell their events apart by task name.

use std::fmt::{Debug, Write};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use keel::{Class, Runtime, TaskBuilder};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Metadata, Subscriber};

/// Every event any thread of this process emitted, as text.
fn events() -> &'static Arc<Mutex<Vec<String>>> {
    static EVENTS: OnceLock<Arc<Mutex<Vec<String>>>> = OnceLock::new();
    EVENTS.get_or_init(|| {
        let events = Arc::new(Mutex::new(Vec::new()));
        tracing::subscriber::set_global_default(Capture(events.clone()))
            .expect("no other subscriber in this test binary");
        events
    })
}

/// A subscriber that keeps each event as `LEVEL field=value ...`.
struct Capture(Arc<Mutex<Vec<String>>>);

struct Fields(String);

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn Debug) {
        let _ = write!(self.0, " {}={:?}", field.name(), value);
    }
}

impl Subscriber for Capture {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }
    fn record(&self, _: &Id, _: &Record<'_>) {}
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, event: &Event<'_>) {
        let mut fields = Fields(event.metadata().level().to_string());
        event.record(&mut fields);
        self.0.lock().unwrap().push(fields.0);
    }
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

/// The events that mention `name`.
fn events_naming(name: &str) -> Vec<String> {
    let needle = format!("task.name={name:?}");
    events()
        .lock()
        .unwrap()
        .iter()
        .filter(|e| e.contains(&needle))
        .cloned()
        .collect()
}

/// Waits until `stalls(class)` reaches `want`, or 10 s: counts are
/// published by the worker shortly after the poll.
fn wait_for_stalls(rt: &Runtime, class: Class, want: u64) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let stalls = rt.stats().classes[class.index()].stalls;
        if stalls >= want || Instant::now() >= deadline {
            return stalls;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn a_20ms_poll_is_a_stall_with_its_name_and_class_and_a_1ms_poll_is_not() {
    events();
    let rt = Runtime::builder().workers(2).build().unwrap();
    rt.block_on(async {
        TaskBuilder::new()
            .name("slowpoke")
            .class(Class::BULK)
            .spawn(async { std::thread::sleep(Duration::from_millis(20)) })
            .await
            .unwrap();
        TaskBuilder::new()
            .name("quick")
            .spawn(async { std::thread::sleep(Duration::from_millis(1)) })
            .await
            .unwrap();
    });
    assert_eq!(wait_for_stalls(&rt, Class::BULK, 1), 1);
    // Give the short poll's worker as long to publish before checking it
    // counted nothing.
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(rt.stats().classes[Class::NORMAL.index()].stalls, 0);

    let slow = events_naming("slowpoke");
    assert_eq!(slow.len(), 1, "{slow:?}");
    assert!(slow[0].starts_with("WARN"), "{slow:?}");
    assert!(slow[0].contains("task.class=\"bulk\""), "{slow:?}");
    assert!(slow[0].contains("task.id="), "{slow:?}");
    assert!(slow[0].contains("poll_ms="), "{slow:?}");
    assert!(events_naming("quick").is_empty());
}

#[test]
fn the_threshold_is_a_knob() {
    events();
    let rt = Runtime::builder()
        .workers(1)
        .stall_threshold(Duration::from_millis(2))
        .build()
        .unwrap();
    rt.block_on(async {
        TaskBuilder::new()
            .name("five-ms")
            .spawn(async { std::thread::sleep(Duration::from_millis(5)) })
            .await
            .unwrap();
    });
    assert_eq!(wait_for_stalls(&rt, Class::NORMAL, 1), 1);
    assert_eq!(events_naming("five-ms").len(), 1);

    let off = Runtime::builder()
        .workers(1)
        .stall_threshold(Duration::MAX)
        .build()
        .unwrap();
    off.block_on(async {
        TaskBuilder::new()
            .name("ignored")
            .spawn(async { std::thread::sleep(Duration::from_millis(20)) })
            .await
            .unwrap();
    });
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(off.stats().classes[Class::NORMAL.index()].stalls, 0);
    assert!(events_naming("ignored").is_empty());
}

/// An unnamed task's stall is reported with an empty name, and `spawn`
/// without a builder still works as before.
#[test]
fn an_unnamed_task_is_reported_too() {
    events();
    let rt = Runtime::builder()
        .workers(1)
        .stall_threshold(Duration::from_millis(3))
        .build()
        .unwrap();
    let id = rt.block_on(async {
        let handle = keel::spawn_in(Class::URGENT, async {
            std::thread::sleep(Duration::from_millis(6));
        });
        let id = handle.id();
        handle.await.unwrap();
        id
    });
    assert_eq!(wait_for_stalls(&rt, Class::URGENT, 1), 1);
    let needle = format!("task.id={}", id.as_u64());
    let found: Vec<String> = events()
        .lock()
        .unwrap()
        .iter()
        .filter(|e| e.contains(&needle) && e.contains("task.class=\"urgent\""))
        .cloned()
        .collect();
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].contains("task.name=\"\""), "{found:?}");
}
