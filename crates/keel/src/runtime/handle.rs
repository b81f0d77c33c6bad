//! `Handle`: a cheap, cloneable reference to a runtime, for spawning and
//! reading stats from anywhere.

use std::fmt;
use std::future::Future;
use std::marker::PhantomData;
use std::sync::Arc;

use super::context;
use crate::blocking::{self, Unblock};
use crate::sched::{Class, Shared};
use crate::stats::Stats;
use crate::JoinHandle;

/// A reference to a running runtime. Clone it freely and send it to other
/// threads; it does not keep the workers alive: once the [`Runtime`] is
/// dropped, tasks spawned through a handle are cancelled at once.
///
/// [`Runtime`]: crate::Runtime
#[derive(Clone)]
pub struct Handle {
    pub(crate) shared: Arc<Shared>,
}

impl Handle {
    /// The runtime of the calling thread: a worker, or a thread inside
    /// [`Runtime::block_on`](crate::Runtime::block_on).
    ///
    /// # Panics
    ///
    /// If the thread is not inside a keel runtime; see [`Handle::try_current`].
    #[track_caller]
    pub fn current() -> Handle {
        match Handle::try_current() {
            Some(handle) => handle,
            None => panic!(
                "not inside a keel runtime: call this from a task or from \
                 Runtime::block_on, or spawn through a Handle"
            ),
        }
    }

    /// The runtime of the calling thread, if any.
    pub fn try_current() -> Option<Handle> {
        context::current()
    }

    /// Spawns a task in the class of the calling task when called from a
    /// task of this runtime, and in [`Class::NORMAL`] otherwise.
    #[track_caller]
    pub fn spawn<F>(&self, future: F) -> JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        let class = context::current_class(&self.shared).unwrap_or(Class::NORMAL);
        self.shared.spawn(class, future)
    }

    /// Spawns a task in `class`.
    ///
    /// # Panics
    ///
    /// If `class` does not exist in this runtime (it came from another
    /// runtime with more classes).
    #[track_caller]
    pub fn spawn_in<F>(&self, class: Class, future: F) -> JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        let classes = self.shared.config.classes.len();
        assert!(
            class.index() < classes,
            "class {} does not exist in this runtime, which has {classes} classes",
            class.index()
        );
        self.shared.spawn(class, future)
    }

    /// Runs `f` on this runtime's blocking pool without waiting for room;
    /// see [`crate::spawn_blocking`].
    pub fn spawn_blocking<F, R>(&self, f: F) -> JoinHandle<R>
    where
        F: FnOnce() -> R + Send + 'static,
        R: Send + 'static,
    {
        blocking::spawn(self, f)
    }

    /// Runs `f` on this runtime's blocking pool, waiting for room if it is
    /// full; see [`blocking::unblock`].
    pub fn unblock<F, R>(&self, f: F) -> Unblock<R>
    where
        F: FnOnce() -> R + Send + 'static,
        R: Send + 'static,
    {
        Unblock::new(self.clone(), f)
    }

    /// The class called `name`, if this runtime defines it.
    pub fn class(&self, name: &str) -> Option<Class> {
        self.shared
            .config
            .classes
            .iter()
            .position(|c| c.name == name)
            .map(|index| Class(index as u8))
    }

    /// The name of `class`, if it exists in this runtime.
    pub fn class_name(&self, class: Class) -> Option<&str> {
        self.shared.config.class_name(class)
    }

    /// Number of worker threads.
    pub fn workers(&self) -> usize {
        self.shared.config.workers
    }

    /// Number of tasks spawned and not yet finished. Jobs of the blocking
    /// pool are not tasks here; see [`Stats::blocking`].
    pub fn live_tasks(&self) -> usize {
        self.shared.registry.len()
    }

    /// A snapshot of the runtime's accounting: per worker, where its wall
    /// time went; per class, the wall time of its polls, polls and queue
    /// delay; the blocking
    /// pool's threads, queue and busy time; TCP read deliveries per batch
    /// mode.
    pub fn stats(&self) -> Stats {
        self.shared.stats()
    }

    /// Makes this runtime the current one of the calling thread until the
    /// guard drops; see [`Runtime::enter`](crate::Runtime::enter).
    pub fn enter(&self) -> EnterGuard<'_> {
        EnterGuard {
            _inner: context::enter(self.clone()),
            _tokio: self.shared.enter_tokio(),
            _handle: PhantomData,
        }
    }

    /// Whether this handle refers to `shared`'s runtime.
    pub(crate) fn is(&self, shared: &Shared) -> bool {
        std::ptr::eq(Arc::as_ptr(&self.shared), shared)
    }
}

impl fmt::Debug for Handle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Handle")
            .field("workers", &self.shared.config.workers)
            .finish_non_exhaustive()
    }
}

/// The runtime made current by [`Handle::enter`] or
/// [`Runtime::enter`](crate::Runtime::enter); dropping it restores the
/// thread's previous runtime (or none). It stays on the thread that made
/// it (it is not `Send`).
#[must_use = "the runtime is current only while the guard lives"]
pub struct EnterGuard<'a> {
    _inner: context::EnterGuard,
    /// The runtime's tokio side, entered too (see
    /// [`Builder::tokio_threads`](crate::Builder::tokio_threads)).
    _tokio: crate::sched::TokioGuard<'a>,
    /// Borrows the handle, and keeps the guard on its thread.
    _handle: PhantomData<(&'a Handle, *const ())>,
}

impl fmt::Debug for EnterGuard<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EnterGuard").finish_non_exhaustive()
    }
}
