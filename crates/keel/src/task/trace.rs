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
//!   entered, and the task as finished when the span closes: when the
//!   task has ended (completed, aborted, or cancelled by shutdown) and its
//!   last handle (`JoinHandle`, waker) is gone;
//! - each clone, wake and drop of the task's waker emits an event of target
//!   `runtime::waker` with `op` (`waker.clone`, `waker.wake`,
//!   `waker.wake_by_ref`, `waker.drop`) and `task.id`, the *span's* id, by
//!   which the console matches it to the task. A wake is what starts the
//!   console's "scheduled" time; clones minus drops are the task's live
//!   wakers, and an idle task with none has lost its waker.
//!
//! # Where they live, and what they cost
//!
//! Neither lives in the task allocation: a task with a span is marked by
//! one flag in its metadata (`TaskMeta::has_span`, in what was padding),
//! and its span and traced waker sit in a process-wide table keyed by the
//! address of that metadata (unique while the task allocation lives: the
//! entry is removed when the metadata drops, before the allocation is
//! freed). A field in the task header or the wrapper would cost every
//! task, traced or not: its drop glue, a larger allocation, and code the
//! compiler no longer inlines (BENCHMARKS.md, 2026-11-26: two such fields,
//! never used, cost a spawned and joined task about 7% more
//! instructions). So does making the span at spawn before the task
//! exists: the span is made by [`attach`], out of line, once the task is
//! built.
//!
//! With no subscriber that wants `TRACE` from anything (the default, and
//! the usual `info` or `debug` logging), a task has no span: deciding so is
//! one load of `tracing`'s global level filter at spawn, and each poll one
//! branch on the flag; the waker a task's future sees is the one
//! `async_task` made, untouched. With a subscriber at `TRACE` that does not
//! enable the span, it costs a check of the callsite's cached interest at
//! spawn as well. A task that has a span pays a lock of one of the
//! table's shards per poll, which a subscriber that records every enter
//! and exit dwarfs. Counted in instructions, a build with all of this
//! costs a spawned and joined task about 1.5%, and a poll about 1%, more
//! than the same tree with it (and `#[track_caller]` on the spawn path)
//! taken out (BENCHMARKS.md, 2026-11-26, "what the task span costs").
//!
//! The waker events need a wrapper around the task's waker
//! ([`WakerTrace`]), made only while the span is enabled and a subscriber
//! listens for `runtime::waker`: one allocation per task, kept in the
//! table until the task ends, and remade only when the runtime hands the
//! poll a different waker. It keeps its identity across polls, so
//! `Waker::will_wake` (which readiness and timer registrations use to
//! replace a waker rather than add one) still holds. It holds the task's
//! own waker, so it must go when the task ends, or it would keep the task
//! allocation (and the span) alive: it is released after the poll that
//! completes the task, when an aborted task is dropped, and, for tasks
//! cancelled by shutdown without a last poll, when the runtime has dropped
//! all its tasks ([`release_runtime`]).

use std::collections::BTreeMap;
use std::mem::ManuallyDrop;
use std::ops::Deref;
use std::panic::Location;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, RawWaker, RawWakerVTable, Waker};

use tracing::span::Id;
use tracing::Span;

use super::{TaskId, TaskMeta};

/// Whether a task spawned now may get a span: `false` when no subscriber
/// wants anything at `TRACE`, the level of the span (every callsite is
/// checked against it first), which one load decides. A task spawned
/// with `true` gets its span from [`attach`].
#[inline]
pub(crate) fn wants_spans() -> bool {
    tracing::level_filters::LevelFilter::current() >= tracing::Level::TRACE
}

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

/// Shards of the table, so that workers polling traced tasks rarely meet
/// on one lock.
const SHARDS: usize = 16;

/// The span and traced waker of every live task that has a span, by the
/// address of its metadata (see the module documentation). Empty unless a
/// subscriber wants `TRACE`.
static TABLE: [Mutex<BTreeMap<usize, TaskTrace>>; SHARDS] =
    [const { Mutex::new(BTreeMap::new()) }; SHARDS];

/// What the table holds for one task.
struct TaskTrace {
    span: Span,
    waker: WakerTrace,
    /// The runtime that spawned the task (the address of its shared
    /// state), for [`release_runtime`].
    owner: usize,
}

/// The key of `meta`'s task, and the shard that holds it.
fn slot(meta: &TaskMeta) -> (usize, MutexGuard<'static, BTreeMap<usize, TaskTrace>>) {
    let key = std::ptr::from_ref(meta) as usize;
    // Task allocations are larger than 64 bytes: the low bits say nothing.
    let shard = &TABLE[(key >> 6) % SHARDS];
    // Nothing that can panic runs under these locks but the map's own
    // code, which leaves it consistent.
    (key, shard.lock().unwrap_or_else(PoisonError::into_inner))
}

/// Makes the span of the task whose metadata is `meta` (see the module
/// documentation for its name and fields; `class` is its class's name,
/// `spawned_at` where it was spawned, `owner` the address of the spawning
/// runtime's shared state) and files it under the metadata's
/// final address. Called once, for a task spawned when
/// [`wants_spans`] said so, built but not yet scheduled (so that no poll
/// reads `has_span` before it settles). Events the task emits carry the
/// span, and so does the stall report of a poll that held its worker.
///
/// A span that `tracing` made disabled is not kept, and the task is
/// polled as one without a span: it would carry its metadata, and with
/// the `log` feature of `tracing` on (some common crates turn it on) ask
/// whether `log` wants a line at each enter, exit, copy and drop.
#[cold]
#[inline(never)]
pub(crate) fn attach(
    meta: &TaskMeta,
    owner: usize,
    class: &str,
    spawned_at: &'static Location<'static>,
) {
    let span = make_task_span(meta.id, meta.name.as_deref(), class, spawned_at);
    if span.is_disabled() {
        meta.has_span.store(false, Ordering::Relaxed);
        return;
    }
    let (key, mut table) = slot(meta);
    table.insert(
        key,
        TaskTrace {
            span,
            waker: WakerTrace::default(),
            owner,
        },
    );
}

/// Removes the span of `meta`'s task, closing it unless a copy is still
/// held (a stall report's). Called when the metadata drops.
#[cold]
pub(crate) fn detach(meta: &TaskMeta) {
    let (key, mut table) = slot(meta);
    let trace = table.remove(&key);
    // The span closes outside the lock: a subscriber's `on_close` may
    // spawn, and so reach this table.
    drop(table);
    drop(trace);
}

/// A copy of the span of `meta`'s task, if it has one.
#[inline]
pub(crate) fn span_of(meta: &TaskMeta) -> Option<Span> {
    if !meta.has_span() {
        return None;
    }
    copy_span(meta)
}

#[cold]
#[inline(never)]
fn copy_span(meta: &TaskMeta) -> Option<Span> {
    let (key, table) = slot(meta);
    table.get(&key).map(|trace| trace.span.clone())
}

/// Runs `poll` (one poll of the future of `meta`'s task) inside the task's
/// span, with a traced waker in place of `cx`'s while a subscriber listens
/// for waker events; just `poll(cx)` if the span is gone. When `done` says
/// the poll ended the task, the traced waker is released (see
/// [`release_waker`]).
#[cold]
#[inline(never)]
pub(crate) fn poll_in_span<R>(
    meta: &TaskMeta,
    cx: &mut Context<'_>,
    poll: &mut dyn FnMut(&mut Context<'_>) -> R,
    done: impl FnOnce(&R) -> bool,
) -> R {
    let (key, mut table) = slot(meta);
    let Some(trace) = table.get_mut(&key) else {
        drop(table);
        return poll(cx);
    };
    let span = trace.span.clone();
    let traced = trace.waker.waker_for(&span, cx.waker());
    drop(table);
    let polled = {
        let _entered = span.enter();
        match &traced {
            Some(waker) => poll(&mut Context::from_waker(waker)),
            None => poll(cx),
        }
    };
    drop(traced);
    if done(&polled) {
        release_waker(meta);
    }
    polled
}

/// Drops the traced waker kept for `meta`'s task, once its future can no
/// longer be polled (it completed or was aborted; [`release_runtime`] for
/// tasks cancelled by shutdown). The traced waker holds the task's own
/// waker, so kept past that point it would keep the task allocation (and
/// with it the span) alive forever.
#[cold]
#[inline(never)]
pub(crate) fn release_waker(meta: &TaskMeta) {
    let (key, mut table) = slot(meta);
    let waker = table.get_mut(&key).and_then(|trace| trace.waker.0.take());
    // The task may be freed by this drop, and its metadata's drop locks
    // this shard.
    drop(table);
    drop(waker);
}

/// Drops the traced wakers of every task of the runtime `owner` (see
/// [`attach`]), once its shutdown has dropped the futures of all its
/// tasks: those cancelled without a last poll release theirs here.
pub(crate) fn release_runtime(owner: usize) {
    for shard in &TABLE {
        let wakers: Vec<_> = shard
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .values_mut()
            .filter(|trace| trace.owner == owner)
            .filter_map(|trace| trace.waker.0.take())
            .collect();
        // Outside the lock, as in `release_waker`.
        drop(wakers);
    }
}

/// The traced waker of one task, kept in the table between polls (empty
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
    fn waker_for(&mut self, span: &Span, waker: &Waker) -> Option<Borrowed> {
        let span = span.id()?;
        // An event's interest, not a hint's: console-subscriber's filter
        // passes events of target `runtime*` and nothing else by target.
        if !tracing::event_enabled!(target: "runtime::waker", tracing::Level::TRACE) {
            return None;
        }
        let traced = match &mut self.0 {
            Some(traced) if traced.inner.will_wake(waker) => traced,
            slot => slot.insert(Arc::new(Traced {
                inner: waker.clone(),
                span,
            })),
        };
        Some(Borrowed::new(traced.clone()))
    }
}

/// A traced waker for one poll: a reference count of the wrapper, and a
/// waker made from it that owns no count of its own (exactly like the
/// `&Waker` of a `Context`; clones of it own theirs).
pub(crate) struct Borrowed {
    waker: ManuallyDrop<Waker>,
    _owner: Arc<Traced>,
}

impl Borrowed {
    fn new(owner: Arc<Traced>) -> Borrowed {
        let raw = RawWaker::new(Arc::as_ptr(&owner).cast(), &VTABLE);
        Borrowed {
            // SAFETY: the vtable's contract holds for `raw`: its data
            // pointer came from `Arc::as_ptr` of a live `Arc<Traced>`
            // (`owner`, kept alive beside the waker for as long as the
            // waker is), which is what every vtable function expects. The
            // waker is never dropped (`ManuallyDrop`), so it releases no
            // reference count it does not own.
            waker: ManuallyDrop::new(unsafe { Waker::from_raw(raw) }),
            _owner: owner,
        }
    }
}

impl Deref for Borrowed {
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
/// `Arc<Traced>` that owns one strong count for the waker being used (or,
/// for a [`Borrowed`] waker, that the `Borrowed` keeps alive): so the
/// pointer is valid, and a function that consumes the waker may release
/// one count.
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
        let borrowed = Borrowed::new(traced.clone());
        borrowed.wake_by_ref();
        let first = (*borrowed).clone();
        let second = first.clone();
        assert_eq!(Arc::strong_count(&traced), 5);
        first.wake();
        second.wake_by_ref();
        drop(second);
        assert_eq!(counter.0.load(Ordering::SeqCst), 3);
        assert_eq!(Arc::strong_count(&traced), 3);
        drop(borrowed);
        assert_eq!(Arc::strong_count(&traced), 2);
        drop(trace);
        assert_eq!(Arc::strong_count(&traced), 1);
        // The task's waker went with the last count.
        drop(traced);
        assert_eq!(Arc::strong_count(&counter), 1);
    }
}
