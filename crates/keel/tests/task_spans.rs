//! Each task's polls run inside its `runtime.spawn` span (target
//! `keel::task`; id, name, class): what a task logs carries them, and so
//! does the stall report of a poll that held its worker. A subscriber that
//! does not enable the span gets the events without it. (What
//! tokio-console reads of the span and of the task's waker is checked in
//! `task_console.rs`.)
//!
//! One subscriber serves the whole binary (the workers are threads of
//! their own, so it must be the global one); each test finds its own
//! events by a message no other test emits.

mod support;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use keel::{Class, Runtime, TaskBuilder};
use tracing::span::{Attributes, Id};
use tracing::{Event, Subscriber};
use tracing_subscriber::layer::{Context, Layer};
use tracing_subscriber::prelude::*;
use tracing_subscriber::registry::LookupSpan;

/// One event as the subscriber saw it: its message, and the name and
/// fields of the spans it was inside, innermost first.
#[derive(Debug, Clone)]
struct Seen {
    message: String,
    spans: Vec<(String, BTreeMap<String, String>)>,
}

/// A span's fields, kept in its extensions.
use support::FieldText as Fields;

struct Recorder(Arc<Mutex<Vec<Seen>>>);

/// The `task.name` of every `runtime.spawn` span closed so far.
fn closed_spans() -> &'static Mutex<Vec<String>> {
    static CLOSED: Mutex<Vec<String>> = Mutex::new(Vec::new());
    &CLOSED
}

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Recorder {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut fields = Fields::default();
        attrs.record(&mut fields);
        if let Some(span) = ctx.span(id) {
            span.extensions_mut().insert(fields);
        }
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(&id) else { return };
        if span.name() != "runtime.spawn" {
            return;
        }
        let name = span
            .extensions()
            .get::<Fields>()
            .and_then(|f| f.0.get("task.name").cloned())
            .unwrap_or_default();
        closed_spans().lock().unwrap().push(name);
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        let mut message = Fields::default();
        event.record(&mut message);
        let spans = ctx
            .event_scope(event)
            .map(|scope| {
                scope
                    .map(|span| {
                        let fields = span
                            .extensions()
                            .get::<Fields>()
                            .map(|f| f.0.clone())
                            .unwrap_or_default();
                        (span.name().to_owned(), fields)
                    })
                    .collect()
            })
            .unwrap_or_default();
        self.0.lock().unwrap().push(Seen {
            message: message.0.get("message").cloned().unwrap_or_default(),
            spans,
        });
    }
}

/// Whether spans of target `keel::task` are enabled: one test turns them
/// off to see events arrive without them.
static TASK_SPANS_ON: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(true);

/// The events seen so far, under the binary's one subscriber.
fn seen() -> &'static Arc<Mutex<Vec<Seen>>> {
    static SEEN: OnceLock<Arc<Mutex<Vec<Seen>>>> = OnceLock::new();
    SEEN.get_or_init(|| {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let filter = tracing_subscriber::filter::dynamic_filter_fn(|meta, _| {
            !(meta.is_span() && meta.target() == "keel::task")
                || TASK_SPANS_ON.load(std::sync::atomic::Ordering::SeqCst)
        });
        tracing_subscriber::registry()
            .with(Recorder(seen.clone()).with_filter(filter))
            .init();
        seen
    })
}

/// Held by each test: one of them turns the span off for a while.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The events whose message contains `marker`.
fn events_with(marker: &str) -> Vec<Seen> {
    seen()
        .lock()
        .unwrap()
        .iter()
        .filter(|e| e.message.contains(marker))
        .cloned()
        .collect()
}

#[test]
fn a_tasks_events_carry_its_id_name_and_class() {
    let _serial = serial();
    seen();
    let rt = Runtime::builder().workers(2).build().unwrap();
    let (id, unnamed_id) = rt.block_on(async {
        let named = TaskBuilder::new()
            .name("fetcher")
            .class(Class::BULK)
            .spawn(async {
                tracing::info!("span test: from the named task");
                keel::yield_now().await;
                tracing::info!("span test: after a yield");
                // A task spawned here is not inside this one's span.
                keel::spawn(async { tracing::info!("span test: from a child") })
                    .await
                    .unwrap();
            });
        let id = named.id();
        named.await.unwrap();
        let unnamed = keel::spawn(async { tracing::info!("span test: from an unnamed task") });
        let unnamed_id = unnamed.id();
        unnamed.await.unwrap();
        // block_on's own future is no task: no span.
        tracing::info!("span test: from block_on");
        (id, unnamed_id)
    });
    for message in ["from the named task", "after a yield"] {
        let events = events_with(&format!("span test: {message}"));
        assert_eq!(events.len(), 1, "{events:?}");
        let (name, fields) = &events[0].spans[0];
        assert_eq!(name, "runtime.spawn");
        assert_eq!(fields["task.id"], id.as_u64().to_string(), "{fields:?}");
        assert_eq!(fields["task.name"], "fetcher");
        assert_eq!(fields["task.class"], "bulk");
    }
    let child = &events_with("span test: from a child")[0];
    assert_eq!(child.spans.len(), 1, "{child:?}");
    // It inherits the class it was spawned from.
    assert_eq!(child.spans[0].1["task.class"], "bulk");
    assert_ne!(child.spans[0].1["task.id"], id.as_u64().to_string());
    let unnamed = &events_with("span test: from an unnamed task")[0];
    assert_eq!(
        unnamed.spans[0].1["task.id"],
        unnamed_id.as_u64().to_string()
    );
    assert_eq!(unnamed.spans[0].1["task.name"], "");
    assert_eq!(unnamed.spans[0].1["task.class"], "normal");
    assert!(events_with("span test: from block_on")[0].spans.is_empty());
}

#[test]
fn a_stall_report_carries_the_span_of_the_task_that_stalled() {
    let _serial = serial();
    seen();
    let rt = Runtime::builder()
        .workers(1)
        .stall_threshold(Duration::from_millis(5))
        .build()
        .unwrap();
    let id = rt.block_on(async {
        let task = TaskBuilder::new()
            .name("stall-span-test")
            .spawn(async { std::thread::sleep(Duration::from_millis(20)) });
        let id = task.id();
        task.await.unwrap();
        id
    });
    let reports = || -> Vec<Seen> {
        events_with("without yielding")
            .into_iter()
            .filter(|e| {
                e.spans.first().is_some_and(|(_, f)| {
                    f.get("task.name").map(String::as_str) == Some("stall-span-test")
                })
            })
            .collect()
    };
    // The worker reports the stall after the poll, which may be after the
    // task's result reached block_on.
    support::wait_until("the stall is reported", || !reports().is_empty());
    let reports = reports();
    assert_eq!(reports.len(), 1, "{reports:?}");
    assert_eq!(reports[0].spans[0].1["task.id"], id.as_u64().to_string());
}

#[test]
fn with_the_span_disabled_events_come_without_it() {
    let _serial = serial();
    seen();
    TASK_SPANS_ON.store(false, std::sync::atomic::Ordering::SeqCst);
    tracing::callsite::rebuild_interest_cache();
    let rt = Runtime::builder().workers(1).build().unwrap();
    rt.block_on(async {
        keel::spawn(async { tracing::info!("span test: spans off") })
            .await
            .unwrap();
    });
    TASK_SPANS_ON.store(true, std::sync::atomic::Ordering::SeqCst);
    tracing::callsite::rebuild_interest_cache();
    let events = events_with("span test: spans off");
    assert_eq!(events.len(), 1);
    assert!(events[0].spans.is_empty(), "{events:?}");
}

/// A task's span closes exactly once whichever way the task ends: run to
/// completion, aborted (both while the runtime runs), or cancelled by
/// shutdown while it waited. (The span and the task's traced waker live
/// outside the task allocation; a traced waker kept past the task's end
/// would keep the task, and so its span, alive.)
#[test]
fn every_tasks_span_closes_once_however_it_ends() {
    let _serial = serial();
    seen();
    let name = "close-test";
    let rt = Runtime::builder().workers(1).build().unwrap();
    rt.block_on(async {
        let mut handles = Vec::new();
        for i in 0..30 {
            handles.push(TaskBuilder::new().name(name).spawn(async move {
                if i % 3 != 0 {
                    std::future::pending::<()>().await;
                }
            }));
        }
        // A third completes; a third is aborted; a third is still waiting
        // when the runtime drops.
        for (i, handle) in handles.into_iter().enumerate() {
            match i % 3 {
                0 => handle.await.unwrap(),
                1 => handle.abort(),
                _ => drop(handle),
            }
        }
    });
    let closed = || {
        closed_spans()
            .lock()
            .unwrap()
            .iter()
            .filter(|n| *n == name)
            .count()
    };
    // Those that completed or were aborted close while the runtime runs
    // (their last handle is gone once the worker is done with them).
    support::wait_until("the ended tasks' spans close", || closed() >= 20);
    assert_eq!(closed(), 20);
    drop(rt);
    assert_eq!(closed(), 30);
}
