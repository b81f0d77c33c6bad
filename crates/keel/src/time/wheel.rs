//! `Wheel`: a hierarchical timer wheel.
//!
//! Time is counted in *ticks* (the driver's resolution). The wheel has
//! [`LEVELS`] levels of [`SLOTS`] slots. A slot of level `L` spans
//! `SLOTS^L` ticks, so level 0 holds the next 64 ticks one per slot,
//! level 1 the next 4096 ticks 64 per slot, and so on: six levels cover
//! 64^6 ticks (about two years at 1 ms). Inserting and cancelling
//! are O(1); advancing visits only occupied slots, found through one
//! occupancy bitmap per level.
//!
//! # Invariants
//!
//! - `elapsed` is the tick up to which every timer has been returned by
//!   [`Wheel::advance`]; it never goes back.
//! - A timer due at tick `t > elapsed` sits at the level of the highest
//!   6-bit digit in which `t` and `elapsed` differ, in the slot given by
//!   `t`'s digit at that level. Everything in level `L` is therefore due
//!   before everything in level `L + 1`, and within a level, slots are in
//!   tick order from the current digit on.
//! - Advancing to a slot's start *cascades* its timers: each is either due
//!   (returned) or re-inserted relative to the new `elapsed`, at a lower
//!   level.
//! - A timer due at or before `elapsed` when inserted goes to `overdue` and
//!   is returned by the next `advance`.
//! - Deadlines more than `MAX_SPAN` ticks ahead are clamped to that. Near
//!   a multiple of `2^36` ticks, a timer can sit in a top-level slot whose
//!   digit is *behind* the current one: it belongs to the next top-level
//!   window. Occupied slots are therefore searched with wrap-around
//!   (`rotate_right`), which changes nothing below the top level, where no
//!   timer is ever behind.
//! - A [`TimerKey`] carries the generation of its entry: a key whose timer
//!   fired or was cancelled never matches the timer that reuses its slot.

use slab::Slab;

/// Slots per level: 64, so that a level's occupancy fits one `u64`.
pub(crate) const SLOTS: usize = 64;
const SLOT_BITS: u32 = 6;
/// Levels: 6 × 6 bits = 36 bits of ticks.
pub(crate) const LEVELS: usize = 6;
/// The furthest a timer may be set ahead of `elapsed`, in ticks; later
/// deadlines are clamped (about two years at 1 ms).
const MAX_SPAN: u64 = (1 << (SLOT_BITS as usize * LEVELS)) - 1;

/// Identifies a timer in its wheel until it fires or is cancelled; stale
/// keys match nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct TimerKey {
    index: usize,
    generation: u64,
}

#[derive(Debug)]
struct Entry<T> {
    tick: u64,
    generation: u64,
    value: T,
    /// Where the entry is: `Some((level, slot))`, or `None` when overdue.
    place: Option<(usize, usize)>,
    /// Its index in that slot's (or `overdue`'s) list.
    index: usize,
}

/// A hierarchical timer wheel holding one `T` per timer (see the module
/// docs).
#[derive(Debug)]
pub(crate) struct Wheel<T> {
    elapsed: u64,
    entries: Slab<Entry<T>>,
    slots: Vec<[Vec<usize>; SLOTS]>,
    occupied: [u64; LEVELS],
    overdue: Vec<usize>,
    /// Generation of the next entry.
    generation: u64,
}

impl<T> Wheel<T> {
    /// An empty wheel at tick `now`.
    pub(crate) fn new(now: u64) -> Wheel<T> {
        Wheel {
            elapsed: now,
            entries: Slab::new(),
            slots: (0..LEVELS)
                .map(|_| std::array::from_fn(|_| Vec::new()))
                .collect(),
            occupied: [0; LEVELS],
            overdue: Vec::new(),
            generation: 0,
        }
    }

    /// Number of timers held.
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Adds a timer due at `tick`.
    pub(crate) fn insert(&mut self, tick: u64, value: T) -> TimerKey {
        let generation = self.generation;
        self.generation += 1;
        let index = self.entries.insert(Entry {
            tick: tick.min(self.elapsed.saturating_add(MAX_SPAN)),
            generation,
            value,
            place: None,
            index: 0,
        });
        self.place(index);
        TimerKey { index, generation }
    }

    /// Removes a timer, returning its value, if it has not fired (nor been
    /// cancelled).
    pub(crate) fn cancel(&mut self, key: TimerKey) -> Option<T> {
        match self.entries.get(key.index) {
            Some(entry) if entry.generation == key.generation => {}
            _ => return None,
        }
        self.unlink(key.index);
        Some(self.entries.remove(key.index).value)
    }

    /// The tick and value of a pending timer, to update it in place.
    pub(crate) fn get_mut(&mut self, key: TimerKey) -> Option<(u64, &mut T)> {
        match self.entries.get_mut(key.index) {
            Some(entry) if entry.generation == key.generation => {
                Some((entry.tick, &mut entry.value))
            }
            _ => None,
        }
    }

    /// The earliest tick at which some timer is due, if any.
    pub(crate) fn next_deadline(&self) -> Option<u64> {
        if !self.overdue.is_empty() {
            return Some(self.elapsed);
        }
        let (level, slot, _) = self.next_occupied()?;
        let earliest = self.slots[level][slot]
            .iter()
            .map(|&key| self.entries[key].tick)
            .min()
            .expect("an occupied slot holds a timer");
        Some(earliest)
    }

    /// Moves time forward to `now`, calling `fire` with every timer due at
    /// or before it, earliest slot first.
    pub(crate) fn advance(&mut self, now: u64, mut fire: impl FnMut(T)) {
        for key in std::mem::take(&mut self.overdue) {
            fire(self.entries.remove(key).value);
        }
        if now <= self.elapsed {
            return;
        }
        while let Some((level, slot, start)) = self.next_occupied() {
            if start > now {
                break;
            }
            self.elapsed = self.elapsed.max(start);
            self.occupied[level] &= !(1 << slot);
            for key in std::mem::take(&mut self.slots[level][slot]) {
                if self.entries[key].tick <= now {
                    fire(self.entries.remove(key).value);
                } else {
                    self.place(key);
                }
            }
        }
        self.elapsed = now;
    }

    /// The first occupied slot in tick order, and the first tick it covers:
    /// lowest level first, and within a level from the current digit on,
    /// wrapping around (see the invariants).
    fn next_occupied(&self) -> Option<(usize, usize, u64)> {
        (0..LEVELS).find_map(|level| {
            let current = digit(self.elapsed, level);
            let occupied = self.occupied[level];
            if occupied == 0 {
                return None;
            }
            let offset = occupied.rotate_right(current).trailing_zeros();
            let shift = SLOT_BITS as usize * level;
            let window = self.elapsed & !((1u64 << (shift + SLOT_BITS as usize)) - 1);
            let start = window + (u64::from(current + offset) << shift);
            Some((level, ((current + offset) as usize) % SLOTS, start))
        })
    }

    fn place(&mut self, key: usize) {
        let tick = self.entries[key].tick;
        let (list, place) = if tick <= self.elapsed {
            (&mut self.overdue, None)
        } else {
            let level = level_for(self.elapsed, tick);
            let slot = digit(tick, level) as usize;
            self.occupied[level] |= 1 << slot;
            (&mut self.slots[level][slot], Some((level, slot)))
        };
        let entry = &mut self.entries[key];
        entry.place = place;
        entry.index = list.len();
        list.push(key);
    }

    fn unlink(&mut self, key: usize) {
        let Entry { place, index, .. } = self.entries[key];
        let list = match place {
            Some((level, slot)) => &mut self.slots[level][slot],
            None => &mut self.overdue,
        };
        list.swap_remove(index);
        if let Some(&moved) = list.get(index) {
            self.entries[moved].index = index;
        }
        if let Some((level, slot)) = place {
            if self.slots[level][slot].is_empty() {
                self.occupied[level] &= !(1 << slot);
            }
        }
    }
}

/// The 6-bit digit of `tick` at `level`.
fn digit(tick: u64, level: usize) -> u32 {
    ((tick >> (SLOT_BITS as usize * level)) & (SLOTS as u64 - 1)) as u32
}

/// The level of a timer due at `tick` when the wheel is at `elapsed`: that
/// of the highest digit in which they differ.
fn level_for(elapsed: u64, tick: u64) -> usize {
    let differing = (elapsed ^ tick) | (SLOTS as u64 - 1);
    let highest_bit = 63 - differing.leading_zeros() as usize;
    (highest_bit / SLOT_BITS as usize).min(LEVELS - 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fired(wheel: &mut Wheel<u64>, now: u64) -> Vec<u64> {
        let mut out = Vec::new();
        wheel.advance(now, |v| out.push(v));
        out
    }

    #[test]
    fn fires_at_the_deadline_not_before() {
        let mut wheel = Wheel::new(0);
        wheel.insert(10, 10);
        assert_eq!(fired(&mut wheel, 9), Vec::<u64>::new());
        assert_eq!(wheel.next_deadline(), Some(10));
        assert_eq!(fired(&mut wheel, 10), vec![10]);
        assert_eq!(wheel.len(), 0);
        assert_eq!(wheel.next_deadline(), None);
    }

    #[test]
    fn far_timers_cascade_down_and_fire_in_order() {
        let mut wheel = Wheel::new(5);
        for tick in [70_000, 64, 4_100, 5_000_000, 65, 300] {
            wheel.insert(tick, tick);
        }
        let mut all = Vec::new();
        let mut now = 5;
        while wheel.len() > 0 {
            now = wheel.next_deadline().unwrap();
            all.extend(fired(&mut wheel, now));
        }
        assert_eq!(all, vec![64, 65, 300, 4_100, 70_000, 5_000_000]);
        assert_eq!(now, 5_000_000);
    }

    #[test]
    fn cancel_removes_and_overdue_fire_next() {
        let mut wheel = Wheel::new(100);
        let a = wheel.insert(150, 1);
        let b = wheel.insert(150, 2);
        wheel.insert(90, 3); // already due
        assert_eq!(wheel.cancel(a), Some(1));
        assert_eq!(wheel.cancel(a), None);
        assert_eq!(wheel.next_deadline(), Some(100));
        assert_eq!(fired(&mut wheel, 100), vec![3]);
        assert_eq!(fired(&mut wheel, 200), vec![2]);
        assert_eq!(wheel.cancel(b), None);
    }

    /// Random inserts, cancels and advances, checked against a sorted map:
    /// every timer fires exactly once, at the first advance that reaches
    /// its tick, never earlier, and `next_deadline` is always the earliest.
    #[test]
    fn a_stale_key_never_cancels_the_timer_that_reuses_its_slot() {
        let mut wheel = Wheel::new(0);
        let old = wheel.insert(5, 1);
        assert_eq!(fired(&mut wheel, 5), vec![1]);
        let new = wheel.insert(50, 2); // reuses the freed slot
        assert_eq!(wheel.cancel(old), None);
        assert_eq!(wheel.len(), 1);
        assert_eq!(fired(&mut wheel, 50), vec![2]);
        assert_eq!(wheel.cancel(new), None);
    }

    #[test]
    fn matches_a_sorted_model_under_random_operations() {
        matches_model_from(0);
    }

    /// The same across the top level's wrap-around (2^36 ticks, about two
    /// years at 1 ms), where the next window's timers sit behind the digit.
    #[test]
    fn matches_a_sorted_model_across_the_top_level_wrap() {
        matches_model_from((1 << 36) - 3_000_000);
        matches_model_from((1 << 37) - 40);
    }

    /// Operations per model run: fewer under Miri, which interprets
    /// every step some thousand times slower and checks the wheel's
    /// memory accesses, not its arithmetic, on each.
    const MODEL_OPERATIONS: u64 = if cfg!(miri) { 1_500 } else { 20_000 };

    fn matches_model_from(start: u64) {
        use std::collections::BTreeMap;
        let mut rng = 0x2545_F491_4F6C_DD1Du64;
        let mut next = move |bound: u64| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng % bound
        };
        let mut wheel = Wheel::new(start);
        let mut model: BTreeMap<(u64, u64), TimerKey> = BTreeMap::new();
        let mut now = start;
        for id in 0..MODEL_OPERATIONS {
            match next(10) {
                0..=4 => {
                    // Mostly near, sometimes far, sometimes already due.
                    let span = [8, 64, 5_000, 300_000, 50_000_000][next(5) as usize];
                    let tick = (now + next(span)).saturating_sub(next(3));
                    let key = wheel.insert(tick, id);
                    model.insert((tick.max(now), id), key);
                }
                5 | 6 if !model.is_empty() => {
                    let nth = next(model.len() as u64) as usize;
                    let (&entry, &key) = model.iter().nth(nth).unwrap();
                    assert_eq!(wheel.cancel(key), Some(entry.1));
                    model.remove(&entry);
                }
                _ => {
                    assert_eq!(
                        wheel.next_deadline(),
                        model.keys().next().map(|&(tick, _)| tick),
                        "next deadline at {now}"
                    );
                    now += [1, 10, 63, 64, 65, 4_096, 100_000][next(7) as usize];
                    let mut got = Vec::new();
                    wheel.advance(now, |id| got.push(id));
                    let due: Vec<(u64, u64)> =
                        model.range(..(now + 1, 0)).map(|(&k, _)| k).collect();
                    for entry in &due {
                        model.remove(entry);
                    }
                    let mut want: Vec<u64> = due.iter().map(|&(_, id)| id).collect();
                    got.sort_unstable();
                    want.sort_unstable();
                    assert_eq!(got, want, "fired at {now}");
                }
            }
            assert_eq!(wheel.len(), model.len());
        }
    }
}
