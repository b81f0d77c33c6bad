//! Connection slots: which connections the endpoint serves, which of them
//! wait for a request head, and which one gives up its slot when a new
//! connection arrives at the limit.
//!
//! # The policy
//!
//! The endpoint serves at most `max_connections` connections. Each one is,
//! at any moment, either
//!
//! - *waiting*: it has no complete request head being answered. A new
//!   connection waits until its first head is whole; a kept-alive one
//!   waits between an answer and the next head. A slowloris client (a head
//!   sent a byte at a time, or never finished) waits for as long as it
//!   holds the connection; or
//! - *answering*: a whole head was read, and the answer is not yet all
//!   handed to the kernel.
//!
//! A connection that arrives when every slot is taken takes the slot of a
//! waiting connection, which is closed without an answer (*evicted*):
//!
//! 1. of the connections that have sent part of a request head and no
//!    more, the one that has waited longest;
//! 2. if there is none, of the connections that have sent nothing since
//!    their wait began (new ones, and kept-alive ones between requests),
//!    the one that has waited longest.
//!
//! Only when every slot is answering is the newcomer refused, with a `503`
//! it can read. So idle or incomplete connections, however many, never
//! lock a client with a whole request out: they only push each other out,
//! and a complete request is always served unless `max_connections` other
//! requests are being answered at that moment.
//!
//! Why this order: a head begun and stalled is the mark of a slow or
//! hostile client (slowloris), and the one stalled longest is the likeliest
//! to be stuck. A connection that has sent nothing yet may be an honest
//! client whose request is one system call away, but whose thread the
//! machine has not run yet (a flood makes that likelier, not rarer), or a
//! kept-alive client between requests (a Prometheus scraper); it goes only
//! when no stalled head is left, and then the longest-waiting first. An
//! honest client can lose an idle kept-alive connection, which HTTP
//! clients reopen by themselves. A new connection starts waiting when it
//! is admitted, so within its stage it is never chosen before the
//! connections admitted ahead of it.

//! # Who touches what
//!
//! The table (which slots are taken, the waiting order) sits behind one
//! mutex. The accept loop admits (and evicts) under it; a connection's
//! task takes it at each change of state: an answer starts, an answer is
//! all written, the connection ends. An evicted connection learns it
//! through its [`Slot`]'s flag and waker, set under the same lock, so a
//! connection never changes the table entry of another.
//!
//! A connection is evicted only while it waits, as far as the table
//! knows; but its client may have sent a whole head that its task has not
//! read yet. So an evicted connection's task has one last look at its
//! input (see `conn`): a whole head found then is answered, outside the
//! table, and the connection closes after that answer. Those last looks
//! share the linger permits (at most `max_connections` at once), so the
//! endpoint serves at most twice its limit at any moment. Eviction never
//! cuts an answer.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};

use futures_util::task::AtomicWaker;
use slab::Slab;

/// The slots of one endpoint.
pub(super) struct Slots {
    max: usize,
    table: Mutex<Table>,
    /// Connections holding a slot (the table's length, readable without
    /// the lock).
    open: AtomicUsize,
    /// Connections closed to make room for a newer one, since the start.
    evicted: AtomicU64,
    /// Connections refused because every slot was answering.
    refused: AtomicU64,
}

/// Behind [`Slots::table`].
struct Table {
    /// One entry per taken slot.
    entries: Slab<Entry>,
    /// The waiting connections, in the order they are evicted: by stage,
    /// then by when they began to wait; to their entry's key.
    waiting: BTreeMap<Place, usize>,
    /// The next number in the waiting order.
    next_turn: u64,
}

struct Entry {
    /// The connection's side: its eviction flag and waker.
    shared: Arc<SlotShared>,
    /// Its place in [`Table::waiting`], while it waits.
    place: Option<Place>,
}

/// A waiting connection's place in the eviction order: stage first, then
/// the turn it began to wait.
type Place = (Stage, u64);

/// How far a waiting connection has got with its next request head.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Stage {
    /// Part of a head arrived, and the rest has not: evicted first.
    Stalled,
    /// Nothing has arrived since the wait began.
    Silent,
}

impl Slots {
    /// Slots for at most `max` connections.
    pub(super) fn new(max: usize) -> Slots {
        Slots {
            max,
            table: Mutex::new(Table {
                entries: Slab::new(),
                waiting: BTreeMap::new(),
                next_turn: 0,
            }),
            open: AtomicUsize::new(0),
            evicted: AtomicU64::new(0),
            refused: AtomicU64::new(0),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Table> {
        // Every change under the lock is a few map operations that cannot
        // panic halfway, so a poisoned lock holds a consistent table.
        self.table
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// A slot for a new connection, waiting (silent) from now; if none is
    /// free, a waiting connection is evicted for it (see the module docs
    /// for which). `None` (counted as refused) if every slot is answering.
    pub(super) fn admit(self: &Arc<Self>) -> Option<Slot> {
        let mut table = self.lock();
        if table.entries.len() >= self.max {
            let Some((_, key)) = table.waiting.pop_first() else {
                drop(table);
                self.refused.fetch_add(1, Ordering::Relaxed);
                return None;
            };
            let victim = table.entries.remove(key);
            victim.shared.evicted.store(true, Ordering::Release);
            victim.shared.waker.wake();
            self.evicted.fetch_add(1, Ordering::Relaxed);
        }
        let shared = Arc::new(SlotShared {
            evicted: AtomicBool::new(false),
            waker: AtomicWaker::new(),
            phase: AtomicU8::new(WAITING),
            answers: AtomicU64::new(0),
            heard: AtomicBool::new(false),
        });
        let place = (Stage::Silent, table.next_turn);
        table.next_turn += 1;
        let key = table.entries.insert(Entry {
            shared: shared.clone(),
            place: Some(place),
        });
        table.waiting.insert(place, key);
        self.open.store(table.entries.len(), Ordering::Relaxed);
        Some(Slot(Arc::new(SlotInner {
            slots: self.clone(),
            key,
            shared,
        })))
    }

    /// Connections holding a slot now.
    pub(super) fn open(&self) -> usize {
        self.open.load(Ordering::Relaxed)
    }

    /// Connections evicted since the start.
    pub(super) fn evicted(&self) -> u64 {
        self.evicted.load(Ordering::Relaxed)
    }

    /// Connections refused since the start.
    pub(super) fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }
}

/// What a connection's slot and the table share.
struct SlotShared {
    /// Set (under the table's lock) when the slot was given to another
    /// connection; the entry is gone from the table then.
    evicted: AtomicBool,
    /// Woken on eviction.
    waker: AtomicWaker,
    /// [`WAITING`], [`ANSWERING`] or [`WRITTEN`]; only the connection's
    /// own task changes it.
    phase: AtomicU8,
    /// Whole request heads read; only the connection's own task changes
    /// it.
    answers: AtomicU64,
    /// Whether bytes arrived since the current wait began; only the
    /// connection's own task changes it.
    heard: AtomicBool,
}

/// No answer in progress.
const WAITING: u8 = 0;
/// A head was read; its answer is being made or written.
const ANSWERING: u8 = 1;
/// The answer's body was handed to the HTTP layer; the slot waits again
/// once a flush of the transport completes.
const WRITTEN: u8 = 2;

/// One connection's slot: cloned into the parts of the connection that
/// report its progress, and given back when the last clone drops (or
/// taken by a newer connection if it is evicted first).
#[derive(Clone)]
pub(super) struct Slot(Arc<SlotInner>);

struct SlotInner {
    slots: Arc<Slots>,
    key: usize,
    shared: Arc<SlotShared>,
}

impl Slot {
    /// Whether the slot was given to another connection.
    pub(super) fn is_evicted(&self) -> bool {
        self.0.shared.evicted.load(Ordering::Acquire)
    }

    /// Whether an answer is in progress: a head was read, and the answer
    /// was not yet flushed.
    pub(super) fn is_answering(&self) -> bool {
        self.0.shared.phase.load(Ordering::Relaxed) != WAITING
    }

    /// Whole request heads read on this connection.
    pub(super) fn answers(&self) -> u64 {
        self.0.shared.answers.load(Ordering::Relaxed)
    }

    /// Resolves once the slot was given to another connection.
    pub(super) fn evicted(&self) -> Evicted<'_> {
        Evicted(self)
    }

    /// A whole request head was read: the connection answers, and cannot
    /// be evicted until the answer is written.
    pub(super) fn answering(&self) {
        let shared = &self.0.shared;
        shared.answers.fetch_add(1, Ordering::Relaxed);
        if shared.phase.swap(ANSWERING, Ordering::Relaxed) == ANSWERING {
            return;
        }
        let mut table = self.0.slots.lock();
        if shared.evicted.load(Ordering::Acquire) {
            return;
        }
        if let Some(entry) = table.entries.get_mut(self.0.key) {
            if let Some(place) = entry.place.take() {
                table.waiting.remove(&place);
            }
        }
    }

    /// Bytes arrived: a waiting connection that had sent nothing of its
    /// next head has begun one, and is [`Stage::Stalled`] until the head
    /// is whole.
    pub(super) fn heard(&self) {
        let shared = &self.0.shared;
        if shared.phase.load(Ordering::Relaxed) != WAITING
            || shared.heard.swap(true, Ordering::Relaxed)
        {
            return;
        }
        let mut table = self.0.slots.lock();
        if shared.evicted.load(Ordering::Acquire) {
            return;
        }
        let Some(entry) = table.entries.get_mut(self.0.key) else {
            return;
        };
        if let Some(place @ (Stage::Silent, turn)) = entry.place {
            let stalled = (Stage::Stalled, turn);
            entry.place = Some(stalled);
            table.waiting.remove(&place);
            table.waiting.insert(stalled, self.0.key);
        }
    }

    /// The answer's body was handed over; the slot waits again at the
    /// next completed flush.
    pub(super) fn answer_handed_over(&self) {
        let _ = self.0.shared.phase.compare_exchange(
            ANSWERING,
            WRITTEN,
            Ordering::Relaxed,
            Ordering::Relaxed,
        );
    }

    /// A flush of the transport completed: if the answer was all handed
    /// over, it is now with the kernel, and the connection waits for its
    /// next head, as the newest waiter.
    pub(super) fn flushed(&self) {
        let shared = &self.0.shared;
        if shared
            .phase
            .compare_exchange(WRITTEN, WAITING, Ordering::Relaxed, Ordering::Relaxed)
            .is_err()
        {
            return;
        }
        shared.heard.store(false, Ordering::Relaxed);
        let mut table = self.0.slots.lock();
        if shared.evicted.load(Ordering::Acquire) {
            return;
        }
        let place = (Stage::Silent, table.next_turn);
        table.next_turn += 1;
        if let Some(entry) = table.entries.get_mut(self.0.key) {
            if entry.place.is_none() {
                entry.place = Some(place);
                table.waiting.insert(place, self.0.key);
            }
        }
    }
}

impl Drop for SlotInner {
    fn drop(&mut self) {
        let mut table = self.slots.lock();
        // An evicted slot's entry is already gone, and its key may hold
        // another connection now.
        if self.shared.evicted.load(Ordering::Acquire) {
            return;
        }
        let entry = table.entries.remove(self.key);
        if let Some(place) = entry.place {
            table.waiting.remove(&place);
        }
        self.slots
            .open
            .store(table.entries.len(), Ordering::Relaxed);
    }
}

/// The future of [`Slot::evicted`].
pub(super) struct Evicted<'a>(&'a Slot);

impl Future for Evicted<'_> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.0.is_evicted() {
            return Poll::Ready(());
        }
        self.0 .0.shared.waker.register(cx.waker());
        if self.0.is_evicted() {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::pin::pin;
    use std::task::{Wake, Waker};

    fn slots(max: usize) -> Arc<Slots> {
        Arc::new(Slots::new(max))
    }

    /// Takes `slot` through one whole answer: answering, handed over,
    /// flushed.
    fn answer(slot: &Slot) {
        slot.answering();
        slot.answer_handed_over();
        slot.flushed();
    }

    #[test]
    fn admits_up_to_the_limit_then_evicts_the_longest_waiting() {
        let slots = slots(3);
        let a = slots.admit().unwrap();
        let b = slots.admit().unwrap();
        let c = slots.admit().unwrap();
        assert_eq!(slots.open(), 3);
        let d = slots.admit().unwrap();
        assert!(a.is_evicted());
        assert!(!b.is_evicted() && !c.is_evicted() && !d.is_evicted());
        assert_eq!((slots.open(), slots.evicted()), (3, 1));
        let _e = slots.admit().unwrap();
        assert!(b.is_evicted());
        assert!(!c.is_evicted());
        assert_eq!(slots.evicted(), 2);
        // The evicted slots' drops free nothing: their places are taken.
        drop((a, b));
        assert_eq!(slots.open(), 3);
    }

    #[test]
    fn a_connection_answering_is_never_evicted() {
        let slots = slots(2);
        let a = slots.admit().unwrap();
        let b = slots.admit().unwrap();
        a.answering();
        let _c = slots.admit().unwrap();
        assert!(!a.is_evicted());
        assert!(b.is_evicted());
        // The answer handed over but not yet flushed: still answering.
        a.answer_handed_over();
        let _d = slots.admit().unwrap();
        assert!(!a.is_evicted(), "evicted before its answer was flushed");
        // Flushed: it waits again, behind `d`, which waited first.
        a.flushed();
        let _e = slots.admit().unwrap();
        assert!(!a.is_evicted());
        let _f = slots.admit().unwrap();
        assert!(a.is_evicted());
    }

    #[test]
    fn a_head_read_as_the_slot_is_taken_is_still_answered() {
        let slots = slots(1);
        let a = slots.admit().unwrap();
        let _b = slots.admit().unwrap();
        assert!(a.is_evicted());
        // `a`'s task read a whole head before it saw the eviction: it
        // answers (and changes nothing in the table), then leaves.
        a.answering();
        assert!(a.is_answering());
        a.answer_handed_over();
        assert!(a.is_answering());
        a.flushed();
        assert!(!a.is_answering());
        assert_eq!(slots.open(), 1);
        drop(a);
        assert_eq!(slots.open(), 1);
    }

    #[test]
    fn every_slot_answering_refuses() {
        let slots = slots(2);
        let a = slots.admit().unwrap();
        let b = slots.admit().unwrap();
        a.answering();
        b.answering();
        assert!(slots.admit().is_none());
        assert_eq!((slots.refused(), slots.evicted()), (1, 0));
        answer(&b);
        let c = slots.admit().unwrap();
        assert!(b.is_evicted());
        assert!(!c.is_evicted());
        drop(a);
        assert_eq!(slots.open(), 1);
        assert!(slots.admit().is_some());
    }

    #[test]
    fn an_answered_connection_waits_behind_the_ones_already_waiting() {
        let slots = slots(3);
        let a = slots.admit().unwrap();
        let b = slots.admit().unwrap();
        let c = slots.admit().unwrap();
        // `a` is answered after `b` and `c` began to wait: it waits last.
        answer(&a);
        let _d = slots.admit().unwrap();
        assert!(b.is_evicted());
        let _e = slots.admit().unwrap();
        assert!(c.is_evicted());
        let _f = slots.admit().unwrap();
        assert!(a.is_evicted());
    }

    #[test]
    fn a_stalled_head_goes_before_a_silent_connection() {
        let slots = slots(3);
        let silent = slots.admit().unwrap();
        let stalled = slots.admit().unwrap();
        stalled.heard();
        let newer_silent = slots.admit().unwrap();
        // The stalled one goes first though it came later...
        let _d = slots.admit().unwrap();
        assert!(stalled.is_evicted());
        assert!(!silent.is_evicted());
        // ...then the silent ones, the longest waiting first.
        let _e = slots.admit().unwrap();
        assert!(silent.is_evicted());
        assert!(!newer_silent.is_evicted());
    }

    #[test]
    fn stalled_heads_go_longest_waiting_first() {
        let slots = slots(2);
        let a = slots.admit().unwrap();
        let b = slots.admit().unwrap();
        // `b` stalls first, `a` later: `a` still waited longer.
        b.heard();
        a.heard();
        let _c = slots.admit().unwrap();
        assert!(a.is_evicted());
        assert!(!b.is_evicted());
    }

    #[test]
    fn an_answered_connection_is_silent_again_until_it_hears() {
        let slots = slots(2);
        let a = slots.admit().unwrap();
        a.heard();
        answer(&a);
        let b = slots.admit().unwrap();
        b.heard();
        // `a` waits silent after its answer: the stalled `b` goes first.
        let _c = slots.admit().unwrap();
        assert!(b.is_evicted());
        assert!(!a.is_evicted());
        // Heard during its answer changes nothing; heard while waiting
        // makes it stalled.
        a.heard();
        let d = slots.admit().unwrap();
        assert!(a.is_evicted());
        assert!(!d.is_evicted());
    }

    #[test]
    fn a_dropped_slot_frees_its_place() {
        let slots = slots(2);
        let a = slots.admit().unwrap();
        let b = slots.admit().unwrap();
        drop(a);
        assert_eq!(slots.open(), 1);
        let _c = slots.admit().unwrap();
        assert!(!b.is_evicted());
        assert_eq!(slots.evicted(), 0);
    }

    #[test]
    fn zero_slots_refuse_everything() {
        let slots = slots(0);
        assert!(slots.admit().is_none());
        assert_eq!(slots.refused(), 1);
    }

    #[test]
    fn eviction_wakes_the_evicted_connection() {
        struct Count(AtomicUsize);
        impl Wake for Count {
            fn wake(self: Arc<Self>) {
                self.0.fetch_add(1, Ordering::Relaxed);
            }
        }
        let woken = Arc::new(Count(AtomicUsize::new(0)));
        let waker = Waker::from(woken.clone());
        let mut cx = Context::from_waker(&waker);
        let slots = slots(1);
        let a = slots.admit().unwrap();
        let mut evicted = pin!(a.evicted());
        assert!(evicted.as_mut().poll(&mut cx).is_pending());
        let _b = slots.admit().unwrap();
        assert_eq!(woken.0.load(Ordering::Relaxed), 1);
        assert!(evicted.poll(&mut cx).is_ready());
    }
}
