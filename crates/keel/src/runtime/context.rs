//! The thread-local context: which runtime this thread belongs to, which
//! class the task being polled has, and (on workers) the local queues.
//!
//! Set by a worker thread for its whole life, and by `block_on` for its
//! duration. Read by `spawn` (which runtime, which class) and by the
//! schedule function (push to this worker's queue, or to the injector).

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use crate::sched::{Class, Local, Shared};
use crate::Handle;

struct Context {
    handle: RefCell<Option<Handle>>,
    /// Class of the task being polled on this thread, if any.
    class: Cell<Option<Class>>,
    /// The local queues, on a worker thread.
    local: RefCell<Option<Rc<Local>>>,
    /// The IO budget of the task being polled (see [`crate::task::coop`]);
    /// `None` outside a poll on a worker or a lane: no limit.
    budget: Cell<Option<Budget>>,
    /// This thread is a runtime's urgent lane (see `sched::urgent`).
    lane: Cell<bool>,
}

/// What the task being polled on this thread may still do before its IO
/// yields (see [`crate::task::coop`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Budget {
    /// IO operations left.
    pub(crate) ops: u32,
    /// The full count, given at the poll's start.
    pub(crate) full: u32,
    /// When the poll must yield at its next IO operation.
    pub(crate) deadline: u64,
}

#[cfg(not(loom))]
thread_local! {
    static CONTEXT: Context = const {
        Context {
            handle: RefCell::new(None),
            class: Cell::new(None),
            local: RefCell::new(None),
            budget: Cell::new(None),
            lane: Cell::new(false),
        }
    };
}

// Loom runs its threads as coroutines on one OS thread: each needs its own
// copy, which only loom's thread-locals give.
#[cfg(loom)]
loom::thread_local! {
    static CONTEXT: Context = Context {
        handle: RefCell::new(None),
        class: Cell::new(None),
        local: RefCell::new(None),
        budget: Cell::new(None),
        lane: Cell::new(false),
    };
}

/// Restores the previous context when dropped.
pub(crate) struct EnterGuard {
    previous: Option<Handle>,
}

impl Drop for EnterGuard {
    fn drop(&mut self) {
        let previous = self.previous.take();
        let _ = CONTEXT.try_with(|c| *c.handle.borrow_mut() = previous);
    }
}

/// Makes `handle` the current runtime of this thread until the guard drops.
pub(crate) fn enter(handle: Handle) -> EnterGuard {
    let previous = CONTEXT.with(|c| c.handle.borrow_mut().replace(handle));
    EnterGuard { previous }
}

/// The runtime this thread is in, if any.
pub(crate) fn current() -> Option<Handle> {
    CONTEXT
        .try_with(|c| c.handle.borrow().clone())
        .ok()
        .flatten()
}

/// Whether this thread is a worker or an urgent lane (of any runtime):
/// a thread that must not block on a future, since the tasks it should
/// run would wait.
pub(crate) fn is_worker() -> bool {
    CONTEXT
        .try_with(|c| c.lane.get() || c.local.borrow().is_some())
        .unwrap_or(false)
}

/// Marks this thread as an urgent lane, for its whole life.
pub(crate) fn set_lane() {
    let _ = CONTEXT.try_with(|c| c.lane.set(true));
}

/// The budget of the task being polled on this thread, if it has one.
pub(crate) fn budget() -> Option<Budget> {
    CONTEXT.try_with(|c| c.budget.get()).ok().flatten()
}

/// Sets the budget of the task being polled on this thread (`None`: no
/// limit).
pub(crate) fn set_budget(budget: Option<Budget>) {
    let _ = CONTEXT.try_with(|c| c.budget.set(budget));
}

/// The current runtime's clock, read now; `None` outside a runtime.
pub(crate) fn now() -> Option<u64> {
    CONTEXT
        .try_with(|c| c.handle.borrow().as_ref().map(|h| h.shared.clock.now()))
        .ok()
        .flatten()
}

/// The class of the task being polled on this thread, if it belongs to
/// `shared`'s runtime.
pub(crate) fn current_class(shared: &Shared) -> Option<Class> {
    CONTEXT
        .try_with(|c| {
            let class = c.class.get()?;
            let handle = c.handle.borrow();
            let same = handle.as_ref().is_some_and(|h| h.is(shared));
            same.then_some(class)
        })
        .ok()
        .flatten()
}

/// The class of the task being polled on this thread, whatever its runtime.
pub(crate) fn any_current_class() -> Option<Class> {
    CONTEXT.try_with(|c| c.class.get()).ok().flatten()
}

/// Runs `f` as if a task of `class` were being polled on this thread: a
/// socket created inside registers where that class's sockets do (see
/// `sched::urgent`).
#[cfg_attr(not(feature = "admin"), allow(dead_code))]
pub(crate) fn with_class<R>(class: Class, f: impl FnOnce() -> R) -> R {
    let previous = CONTEXT
        .try_with(|c| c.class.replace(Some(class)))
        .ok()
        .flatten();
    let result = f();
    set_class(previous);
    result
}

/// Records the class of the task about to be polled (or `None` after).
pub(crate) fn set_class(class: Option<Class>) {
    let _ = CONTEXT.try_with(|c| c.class.set(class));
}

/// Sets this thread up for the poll of a task of `class` with `budget`:
/// one access to the thread-local for both, as a poll makes one on
/// either side of every task it runs.
pub(crate) fn enter_poll(class: Class, budget: Budget) {
    let _ = CONTEXT.try_with(|c| {
        c.class.set(Some(class));
        c.budget.set(Some(budget));
    });
}

/// Undoes [`enter_poll`] once the poll has ended: what runs on the thread
/// between polls (waking the tasks of IO events) is not a task's poll,
/// and has no class and no budget.
pub(crate) fn leave_poll() {
    let _ = CONTEXT.try_with(|c| {
        c.class.set(None);
        c.budget.set(None);
    });
}

/// Installs a worker's local queues on this thread.
pub(crate) fn set_local(local: Option<Rc<Local>>) {
    let _ = CONTEXT.try_with(|c| *c.local.borrow_mut() = local);
}

/// Runs `f` with this thread's local queues, if it is a worker.
///
/// `f` runs outside the thread-local's borrow, on a counted reference to
/// the queues: a wake inside it may reach this function again. While the
/// thread-local is being torn down, `f` sees a foreign thread (`None`).
#[inline]
pub(crate) fn with_local<R>(f: impl FnOnce(Option<&Local>) -> R) -> R {
    let local = CONTEXT
        .try_with(|c| c.local.try_borrow().ok().and_then(|local| local.clone()))
        .ok()
        .flatten();
    f(local.as_deref())
}
