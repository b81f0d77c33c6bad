//! What tokio-console's subscriber reads of a keel task, under a
//! subscriber filtered exactly as console-subscriber's layer is (events of
//! targets `runtime*`, spans named `runtime.*`, nothing else): the task's
//! `runtime.spawn` span with its id, name, kind and spawn location, and an
//! event for each clone, wake and drop of its waker naming that span, with
//! every clone ended once. A waker kept across polls stays the same waker.
//!
//! The filter matters: an `enabled!` check (a hint, not an event) of the
//! waker events' target is refused by it, and the console then shows every
//! task as having lost its waker.

mod support;

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::task::{Poll, Waker};
use std::time::Duration;

use keel::{Runtime, TaskBuilder};
use support::FieldText as Fields;
use tracing::span::{Attributes, Id};
use tracing::{Event, Subscriber};
use tracing_subscriber::layer::{Context, Layer};
use tracing_subscriber::prelude::*;

/// The spans (id, fields) and events (fields) the layer was given.
#[derive(Default)]
struct Seen {
    spans: Vec<(u64, BTreeMap<String, String>)>,
    events: Vec<BTreeMap<String, String>>,
}

static SEEN: Mutex<Seen> = Mutex::new(Seen {
    spans: Vec::new(),
    events: Vec::new(),
});

struct ConsoleLike;

impl<S: Subscriber> Layer<S> for ConsoleLike {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, _: Context<'_, S>) {
        let mut fields = Fields::default();
        attrs.record(&mut fields);
        SEEN.lock().unwrap().spans.push((id.into_u64(), fields.0));
    }

    fn on_event(&self, event: &Event<'_>, _: Context<'_, S>) {
        let mut fields = Fields::default();
        event.record(&mut fields);
        SEEN.lock().unwrap().events.push(fields.0);
    }
}

#[test]
fn a_tasks_waker_uses_are_events_naming_its_span_which_holds_its_spawn_site() {
    let filter = tracing_subscriber::filter::filter_fn(|meta| {
        if meta.is_event() {
            meta.target().starts_with("runtime")
        } else {
            meta.name().starts_with("runtime.")
        }
    });
    tracing_subscriber::registry()
        .with(ConsoleLike.with_filter(filter))
        .init();

    let rt = Runtime::builder().workers(1).build().unwrap();
    let (id, line, stable) = rt.block_on(async {
        let builder = TaskBuilder::new().name("waker-events");
        let (task, line) = (builder.spawn(waker_uses()), line!());
        let id = task.id();
        (id, line, task.await.unwrap())
    });
    // Every waker the task handed out is gone with the runtime.
    drop(rt);
    assert!(stable, "the traced waker changed between two polls");

    let seen = SEEN.lock().unwrap();
    let (span_id, fields) = seen
        .spans
        .iter()
        .find(|(_, f)| f.get("task.name").map(String::as_str) == Some("waker-events"))
        .expect("the task's span was created");
    assert_eq!(fields["task.id"], id.as_u64().to_string());
    assert_eq!(fields["task.class"], "normal");
    assert_eq!(fields["kind"], "task");
    assert!(
        fields["loc.file"].ends_with("task_console.rs"),
        "{fields:?}"
    );
    assert_eq!(fields["loc.line"], line.to_string());
    assert_ne!(fields["loc.col"], "0");

    let ops: Vec<&str> = seen
        .events
        .iter()
        .filter(|e| e.get("task.id") == Some(&span_id.to_string()))
        .filter_map(|e| e.get("op").map(String::as_str))
        .collect();
    let count = |op: &str| ops.iter().filter(|o| **o == op).count();
    // The poll that kept a clone and woke through it by reference, and the
    // timer that kept one and woke it by value.
    assert!(count("waker.clone") >= 2, "{ops:?}");
    assert!(count("waker.wake_by_ref") >= 1, "{ops:?}");
    assert!(
        count("waker.wake") + count("waker.wake_by_ref") >= 2,
        "{ops:?}"
    );
    // Each clone ends once: dropped, or consumed by a wake.
    assert_eq!(
        count("waker.clone"),
        count("waker.drop") + count("waker.wake"),
        "{ops:?}"
    );
}

/// Keeps a clone of its waker across a self-wake and says whether the
/// next poll's waker is the same one (`will_wake`), then sleeps on a timer.
async fn waker_uses() -> bool {
    let mut kept: Option<Waker> = None;
    let stable = std::future::poll_fn(|cx| match &kept {
        None => {
            let waker = cx.waker().clone();
            waker.wake_by_ref();
            kept = Some(waker);
            Poll::Pending
        }
        Some(waker) => Poll::Ready(waker.will_wake(cx.waker())),
    })
    .await;
    drop(kept);
    keel::time::sleep(Duration::from_millis(2)).await;
    stable
}
