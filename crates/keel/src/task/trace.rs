//! What keel tells `tracing` about a task: the span its polls run in, and,
//! while a subscriber listens for them, an event for each use of its
//! waker.
//!
//! Both follow the shape that `console-subscriber` (tokio-console's
//! instrumentation layer) reads, so the real `tokio-console` lists keel's
//! tasks with no keel-specific code on its side:
//!
//! - the span is named `runtime.spawn` (target `keel::task`, level
//!   `TRACE`, no parent) with the fields `task.id`, `task.name`,
//!   `task.class`, `kind` and the spawn location `loc.file`, `loc.line`,
//!   `loc.col`. The console counts a poll for each time the span is
//!   entered, and the task as finished when the span closes: when the task
//!   has finished and its last handle (`JoinHandle`, waker) is gone;
//! - each clone, wake and drop of the task's waker emits an event of target
//!   `runtime::waker` with `op` (`waker.clone`, `waker.wake`,
//!   `waker.wake_by_ref`, `waker.drop`) and `task.id`, the *span's* id, by
//!   which the console matches it to the task. A wake is what starts the
//!   console's "scheduled" time; clones minus drops are the task's live
//!   wakers, and an idle task with none has lost its waker.
//!
//! # Cost
//!
//! With no subscriber that wants `TRACE` from anything (the default, and
//! the usual `info` or `debug` logging), a task has no span: deciding so is
//! one load of `tracing`'s global level filter at spawn, and each poll one
//! branch; the waker a task's future sees is the one `async_task` made,
//! untouched. With a subscriber at `TRACE` that does not enable the span,
//! it costs a check of the callsite's cached interest at spawn as well.
//! The two fields that hold the span and the traced waker are not free
//! even when empty: counted in instructions, a spawned and joined task
//! costs about 8% more than before they existed (their drop glue and the
//! larger task allocation; BENCHMARKS.md, 2026-11-26 09:45).
//!
//! The waker events need a wrapper around the task's waker
//! ([`WakerTrace`]), made only while the span is enabled and a subscriber
//! listens for `runtime::waker`: one allocation per task, kept until the
//! task's future is dropped, and remade only when the runtime hands the
//! poll a different waker. It keeps its identity across polls, so
//! `Waker::will_wake` (which readiness and timer registrations use to
//! replace a waker rather than add one) still holds.

use std::marker::PhantomData;
use std::mem::ManuallyDrop;
use std::ops::Deref;
use std::panic::Location;
use std::sync::Arc;
use std::task::{RawWaker, RawWakerVTable, Waker};

use tracing::span::Id;
use tracing::Span;

use super::TaskId;

/// The span a task's polls run in (see the module documentation for its
/// name and fields), or `None` when no subscriber wants it. Events the
/// task emits carry it, and so does the stall report of a poll that held
/// its worker.
///
/// Below `TRACE` no subscriber can want the span (every callsite is
/// checked against that level first), so one load decides it, and
/// `class_name` is not even looked up. A span that `tracing` made disabled
/// is dropped for `None` as well: it would carry its metadata, and with
/// the `log` feature of `tracing` on (some common crates turn it on) ask
/// whether `log` wants a line at each enter, exit, copy and drop.
#[inline]
pub(crate) fn task_span<'a>(
    id: TaskId,
    name: Option<&str>,
    class_name: impl FnOnce() -> &'a str,
    spawned_at: &'static Location<'static>,
) -> Option<Span> {
    if tracing::level_filters::LevelFilter::current() < tracing::Level::TRACE {
        return None;
    }
    let span = make_task_span(id, name, class_name(), spawned_at);
    (!span.is_disabled()).then_some(span)
}

#[cold]
#[inline(never)]
fn make_task_span(
    id: TaskId,
    name: Option<&str>,
    class: &str,
    spawned_at: &'static Location<'static>,
) -> Span {
    // No parent: a task spawned inside another is not part of it, and a
    // parent span would stay open (held by its children) after its own
    // task ended.
    tracing::trace_span!(
        target: "keel::task",
        parent: None,
        "runtime.spawn",
        task.id = id.as_u64(),
        task.name = name.unwrap_or(""),
        task.class = class,
        kind = "task",
        loc.file = spawned_at.file(),
        loc.line = spawned_at.line(),
        loc.col = spawned_at.column(),
    )
}

/// The traced waker of one task, kept by its future between polls (empty
/// until a subscriber wants waker events).
#[derive(Default)]
pub(crate) struct WakerTrace(Option<Arc<Traced>>);

/// What a traced waker points at: the task's own waker, and the id of the
/// span its events name.
struct Traced {
    inner: Waker,
    span: Id,
}

impl WakerTrace {
    /// The waker to poll the task's future with instead of `waker`, when
    /// `span` is enabled and a subscriber listens for waker events; `None`
    /// otherwise (the future is then polled with `waker` itself).
    ///
    /// The result borrows `self`: it holds no reference count of its own,
    /// exactly like the `&Waker` of a `Context`; clones of it do.
    pub(crate) fn waker_for(&mut self, span: &Span, waker: &Waker) -> Option<Borrowed<'_>> {
        let span = span.id()?;
        // An event's interest, not a hint's: console-subscriber's filter
        // passes events of target `runtime*` and nothing else by target.
        if !tracing::event_enabled!(target: "runtime::waker", tracing::Level::TRACE) {
            return None;
        }
        let traced = match &mut self.0 {
            Some(traced) if traced.inner.will_wake(waker) && traced.span == span => traced,
            slot => slot.insert(Arc::new(Traced {
                inner: waker.clone(),
                span,
            })),
        };
        let raw = RawWaker::new(Arc::as_ptr(traced).cast(), &VTABLE);
        Some(Borrowed {
            // SAFETY: the vtable's contract holds for `raw`: its data
            // pointer came from `Arc::as_ptr` of a live `Arc<Traced>`
            // (kept alive by `self` for as long as the result borrows
            // it), which is what every vtable function expects. The
            // waker is never dropped (`ManuallyDrop`), so it releases no
            // reference count it does not own.
            waker: ManuallyDrop::new(unsafe { Waker::from_raw(raw) }),
            _owner: PhantomData,
        })
    }
}

/// A traced waker borrowed from a [`WakerTrace`], for one poll.
pub(crate) struct Borrowed<'a> {
    waker: ManuallyDrop<Waker>,
    _owner: PhantomData<&'a Arc<Traced>>,
}

impl Deref for Borrowed<'_> {
    type Target = Waker;

    fn deref(&self) -> &Waker {
        &self.waker
    }
}

/// Emits the waker event `op` for the task of `span`.
fn emit(op: &'static str, span: &Id) {
    tracing::trace!(target: "runtime::waker", op = op, task.id = span.into_u64());
}

/// Every function receives a data pointer made by `Arc::as_ptr` of an
/// `Arc<Traced>` that owns one strong count for the waker being used
/// (or, for the borrowed waker of [`WakerTrace::waker_for`], that the
/// `WakerTrace` keeps alive): so the pointer is valid, and a function that
/// consumes the waker may release one count.
static VTABLE: RawWakerVTable = RawWakerVTable::new(clone, wake, wake_by_ref, drop_waker);

unsafe fn clone(data: *const ()) -> RawWaker {
    // SAFETY: `data` is a live `Arc<Traced>`'s pointer (the vtable's
    // contract); the new waker owns the count added here.
    unsafe { Arc::increment_strong_count(data.cast::<Traced>()) };
    // SAFETY: as above, the pointee is alive.
    emit("waker.clone", unsafe { &(*data.cast::<Traced>()).span });
    RawWaker::new(data, &VTABLE)
}

unsafe fn wake(data: *const ()) {
    // SAFETY: a waker being consumed owns one count (the vtable's
    // contract), released when `traced` drops.
    let traced = unsafe { Arc::from_raw(data.cast::<Traced>()) };
    emit("waker.wake", &traced.span);
    traced.inner.wake_by_ref();
}

unsafe fn wake_by_ref(data: *const ()) {
    // SAFETY: `data` is a live `Arc<Traced>`'s pointer; nothing is
    // released.
    let traced = unsafe { &*data.cast::<Traced>() };
    emit("waker.wake_by_ref", &traced.span);
    traced.inner.wake_by_ref();
}

unsafe fn drop_waker(data: *const ()) {
    // SAFETY: a waker being dropped owns one count (the vtable's
    // contract), released here.
    let traced = unsafe { Arc::from_raw(data.cast::<Traced>()) };
    emit("waker.drop", &traced.span);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::Wake;

    struct CountWakes(AtomicUsize);

    impl Wake for CountWakes {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// The wrapper's reference counting, under Miri too: clones, wakes by
    /// value and by reference, and drops, in every order, reach the task's
    /// own waker and release exactly what they took. (The events
    /// themselves are checked with a subscriber in `tests/task_spans.rs`.)
    #[test]
    fn a_traced_waker_forwards_wakes_and_balances_its_counts() {
        let counter = Arc::new(CountWakes(AtomicUsize::new(0)));
        let inner = Waker::from(counter.clone());
        let traced = Arc::new(Traced {
            inner,
            span: Id::from_u64(7),
        });
        let trace = WakerTrace(Some(traced.clone()));
        let raw = RawWaker::new(Arc::as_ptr(&traced).cast(), &VTABLE);
        // SAFETY: as in `waker_for`: the pointer is a live Arc's, and the
        // borrowed waker is never dropped.
        let borrowed = ManuallyDrop::new(unsafe { Waker::from_raw(raw) });
        borrowed.wake_by_ref();
        let first = (*borrowed).clone();
        let second = first.clone();
        assert_eq!(Arc::strong_count(&traced), 4);
        first.wake();
        second.wake_by_ref();
        drop(second);
        assert_eq!(counter.0.load(Ordering::SeqCst), 3);
        assert_eq!(Arc::strong_count(&traced), 2);
        drop(trace);
        assert_eq!(Arc::strong_count(&traced), 1);
        // The task's waker went with the last count.
        drop(traced);
        assert_eq!(Arc::strong_count(&counter), 1);
    }
}
