//! [`TaskBuilder`]: spawning with a name and a class.
//!
//! A name costs one shared string per task and is read only when the task
//! misbehaves: a poll longer than the runtime's stall threshold is
//! reported with it (see [`Builder::stall_threshold`]), so the report says
//! *which* task held a worker, not just a number.
//!
//! [`Builder::stall_threshold`]: crate::Builder::stall_threshold

use std::future::Future;
use std::sync::Arc;

use crate::runtime::context;
use crate::sched::Class;
use crate::{Handle, JoinHandle};

/// Spawns a task with a name and, optionally, a class.
///
/// ```
/// use keel::{Class, TaskBuilder};
///
/// let rt = keel::Runtime::builder().workers(1).build().unwrap();
/// let answer = rt.block_on(async {
///     TaskBuilder::new()
///         .name("admin listener")
///         .class(Class::URGENT)
///         .spawn(async { 42 })
///         .await
/// });
/// assert_eq!(answer.unwrap(), 42);
/// ```
#[derive(Debug, Clone, Default)]
pub struct TaskBuilder {
    name: Option<Arc<str>>,
    class: Option<Class>,
}

impl TaskBuilder {
    /// A builder with no name, spawning in the class of the calling task
    /// (as [`crate::spawn`] does).
    pub fn new() -> TaskBuilder {
        TaskBuilder::default()
    }

    /// The task's name, shown in stall reports.
    pub fn name(mut self, name: impl Into<Arc<str>>) -> TaskBuilder {
        self.name = Some(name.into());
        self
    }

    /// The task's class. Default: the class of the calling task, or
    /// [`Class::NORMAL`] from `block_on` and outside tasks.
    pub fn class(mut self, class: Class) -> TaskBuilder {
        self.class = Some(class);
        self
    }

    /// Spawns `future` on the current runtime.
    ///
    /// # Panics
    ///
    /// Outside a keel runtime (use [`spawn_on`](TaskBuilder::spawn_on)
    /// there), or if the class does not exist in it.
    #[track_caller]
    pub fn spawn<F>(self, future: F) -> JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.spawn_on(&Handle::current(), future)
    }

    /// Spawns `future` on the runtime of `handle`.
    ///
    /// # Panics
    ///
    /// If the class does not exist in that runtime.
    #[track_caller]
    pub fn spawn_on<F>(self, handle: &Handle, future: F) -> JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        let shared = &handle.shared;
        let class = match self.class {
            Some(class) => {
                let classes = shared.config.classes.len();
                assert!(
                    class.index() < classes,
                    "class {} does not exist in this runtime, which has {classes} classes",
                    class.index()
                );
                class
            }
            None => context::current_class(shared).unwrap_or(Class::NORMAL),
        };
        shared.spawn_named(class, self.name, future)
    }
}
