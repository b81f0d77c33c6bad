//! `Registry`: every live task of a runtime, so that shutdown can drop them.
//!
//! A task that is waiting on an event sits in no queue: only the wakers held
//! by whatever it waits on know it. To drop such tasks at shutdown, the
//! runtime keeps one waker per live task here. Spawning inserts it; the
//! task's future removes it when dropped (through [`Entry`]), whether the
//! task completed, was aborted or was cancelled by shutdown.
//!
//! # Shutdown
//!
//! [`Registry::close`] sets `closed`; from then on [`Registry::insert`]
//! refuses new tasks. Since the flag is read under the shard lock and set
//! before the shutdown path takes any shard lock, every task is either
//! refused or visible to [`Registry::wakers`]. The runtime then wakes every
//! registered task (which pushes it onto a queue) and drops everything the
//! queues hold, until the registry is empty.
//!
//! The table is sharded by task id so that spawns and completions on
//! different workers rarely meet on one lock.

use std::sync::Arc;
use std::task::Waker;

use crossbeam_utils::CachePadded;
use slab::Slab;

use crate::loom::lock;
use crate::loom::sync::atomic::{AtomicBool, Ordering};
use crate::loom::sync::Mutex;

/// Shard count: a power of two, a few times the worker count of a large
/// machine, so two workers contend on one lock rarely.
const SHARDS: usize = 64;

/// The live tasks of one runtime.
#[derive(Debug)]
pub(crate) struct Registry {
    shards: Box<[CachePadded<Mutex<Slab<Waker>>>]>,
    closed: AtomicBool,
}

/// A task's place in the registry, released when dropped.
#[derive(Debug)]
pub(crate) struct Entry {
    slot: Option<(Arc<Registry>, usize, usize)>,
}

impl Entry {
    /// An entry for a task the registry refused (it is dropped at once).
    pub(crate) fn refused() -> Entry {
        Entry { slot: None }
    }

    /// An entry for a task the registry does not track: a job of the
    /// blocking pool, which shutdown stops through the pool (see
    /// [`crate::blocking`]), and which is not a live task.
    pub(crate) fn unregistered() -> Entry {
        Entry { slot: None }
    }
}

impl Drop for Entry {
    fn drop(&mut self) {
        if let Some((registry, shard, key)) = self.slot.take() {
            lock(&registry.shards[shard]).try_remove(key);
        }
    }
}

impl Registry {
    pub(crate) fn new() -> Registry {
        Registry {
            shards: (0..SHARDS)
                .map(|_| CachePadded::new(Mutex::new(Slab::new())))
                .collect(),
            closed: AtomicBool::new(false),
        }
    }

    /// Registers a new task. `make` builds the task around its entry and
    /// returns the task's waker with whatever else the caller needs. Returns
    /// `Err` with `make`'s result if the registry is closed; the task was
    /// then built with a refused entry and the caller must drop it unrun.
    pub(crate) fn insert<R>(
        self: &Arc<Self>,
        id: u64,
        make: impl FnOnce(Entry) -> (Waker, R),
    ) -> Result<R, R> {
        let shard = (id as usize) & (SHARDS - 1);
        let mut slab = lock(&self.shards[shard]);
        if self.closed.load(Ordering::Acquire) {
            drop(slab);
            return Err(make(Entry::refused()).1);
        }
        let key = slab.vacant_key();
        let (waker, result) = make(Entry {
            slot: Some((self.clone(), shard, key)),
        });
        slab.insert(waker);
        Ok(result)
    }

    /// Refuses all further tasks.
    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::Release);
    }

    /// Wakers of every task still registered.
    pub(crate) fn wakers(&self) -> Vec<Waker> {
        self.shards
            .iter()
            .flat_map(|shard| {
                lock(shard)
                    .iter()
                    .map(|(_, waker)| waker.clone())
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    /// The number of live tasks.
    pub(crate) fn len(&self) -> usize {
        self.shards.iter().map(|shard| lock(shard).len()).sum()
    }
}
