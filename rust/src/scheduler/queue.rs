//! An indexed (4-ary) min-heap: entries are named by a small integer handle (a slab slot),
//! so an entry can be removed or re-prioritised in O(log n) as well as pushed and popped.
//! Used for the waiting queue (by the priority tuple) and the pin table (by deadline, and by
//! program arrival for reclaim).
//!
//! Lazy removal ([`IndexedHeap::bury`], the waiting queue's aborts): the entry stays in
//! place, marked dead, and is dropped when it reaches the top or when the dead outnumber the
//! live (one O(n) rebuild per as many burials, so O(1) amortised). A removal from the middle
//! costs a sift of the last entry through up to log₄ n levels, each a cache miss at 100k
//! entries — half of what `abort` cost; burying touches one entry. A buried handle stays
//! taken until the heap gives it back ([`IndexedHeap::drain_freed`]), so a slab slot is not
//! reused while its dead entry still names it.

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;

const ABSENT: usize = usize::MAX;
/// The bit of an entry's handle that marks it dead (buried).
const DEAD: usize = 1 << (usize::BITS - 1);
/// Dead entries are swept out once they are this many and outnumber the live ones.
const MIN_SWEEP: usize = 64;
/// Children per node: a 4-ary heap is half as deep as a binary one and a node's children sit
/// side by side in memory, so a sift touches fewer cache lines one after another (the queue
/// holds ~100k entries, well beyond the L2 cache).
const ARITY: usize = 4;

/// A finite time in seconds with a total order. The scheduler only stores validated finite
/// times with -0.0 normalised to 0.0, so this order is the numeric one, as in the reference.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Time(pub f64);

impl Eq for Time {}

impl PartialOrd for Time {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Time {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.total_cmp(&other.0)
    }
}

/// Min-heap of `(key, handle)`; each handle appears at most once. The smallest entry is
/// never dead.
#[derive(Debug, Clone)]
pub struct IndexedHeap<K> {
    /// Entries; a dead one's handle has the `DEAD` bit set.
    heap: Vec<(K, usize)>,
    /// `pos[handle]`: the handle's index in `heap` (live or dead), or `ABSENT`.
    pos: Vec<usize>,
    /// Dead entries in `heap`.
    dead: usize,
    /// Handles whose dead entries left the heap, not yet drained.
    freed: Vec<usize>,
}

impl<K: Ord> Default for IndexedHeap<K> {
    fn default() -> Self {
        IndexedHeap {
            heap: Vec::new(),
            pos: Vec::new(),
            dead: 0,
            freed: Vec::new(),
        }
    }
}

impl<K: Ord> IndexedHeap<K> {
    /// Live entries held.
    pub fn len(&self) -> usize {
        self.heap.len() - self.dead
    }

    /// Whether no live entry is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether `handle` is held, live.
    pub fn contains(&self, handle: usize) -> bool {
        self.key(handle).is_some()
    }

    /// The key of `handle`, if held live.
    pub fn key(&self, handle: usize) -> Option<&K> {
        match self.pos.get(handle) {
            Some(&i) if i != ABSENT && self.heap[i].1 & DEAD == 0 => Some(&self.heap[i].0),
            _ => None,
        }
    }

    /// The smallest entry.
    pub fn peek(&self) -> Option<(usize, &K)> {
        self.heap.first().map(|(k, h)| (*h, k))
    }

    /// Inserts `handle` with `key`, or re-prioritises it if present. A buried handle must
    /// not be pushed before it is drained.
    pub fn push(&mut self, handle: usize, key: K) {
        if self.contains(handle) {
            let i = self.pos[handle];
            self.heap[i].0 = key;
            self.fix(i);
            // A larger key may have sunk from the top, raising a dead entry there.
            self.drop_dead_top();
            return;
        }
        debug_assert!(
            self.pos.get(handle).is_none_or(|&i| i == ABSENT),
            "handle {handle} is buried, not yet drained"
        );
        if handle >= self.pos.len() {
            self.pos.resize(handle + 1, ABSENT);
        }
        self.heap.push((key, handle));
        self.pos[handle] = self.heap.len() - 1;
        self.sift_up(self.heap.len() - 1);
    }

    /// Removes and returns the smallest entry.
    pub fn pop(&mut self) -> Option<(usize, K)> {
        let handle = self.heap.first()?.1;
        self.remove(handle).map(|k| (handle, k))
    }

    /// Removes `handle` if held live, returning its key.
    pub fn remove(&mut self, handle: usize) -> Option<K> {
        let i = *self.pos.get(handle)?;
        if i == ABSENT || self.heap[i].1 & DEAD != 0 {
            return None;
        }
        let key = self.take(i);
        self.drop_dead_top();
        Some(key)
    }

    /// Removes `handle` if held live, lazily (see the module doc): afterwards it counts as
    /// absent, but the handle is taken until [`drain_freed`](Self::drain_freed) yields it.
    /// Returns whether it was held.
    pub fn bury(&mut self, handle: usize) -> bool {
        let Some(&i) = self.pos.get(handle) else {
            return false;
        };
        if i == ABSENT || self.heap[i].1 & DEAD != 0 {
            return false;
        }
        if i == 0 {
            self.take(0);
            self.freed.push(handle);
            self.drop_dead_top();
        } else {
            self.heap[i].1 |= DEAD;
            self.dead += 1;
            if self.dead >= MIN_SWEEP && self.dead > self.len() {
                self.sweep();
            }
        }
        true
    }

    /// Starts loading the entry of `handle` (a hint: the result is not needed).
    pub fn touch(&self, handle: usize) {
        if let Some(&i) = self.pos.get(handle) {
            if let Some(e) = self.heap.get(i) {
                std::hint::black_box(e.1);
            }
        }
    }

    /// The buried handles whose entries have left the heap: free to reuse now.
    pub fn drain_freed(&mut self) -> std::vec::Drain<'_, usize> {
        self.freed.drain(..)
    }

    /// The `n` smallest live keys, smallest first: a walk down from the top that keeps the
    /// frontier in a small heap, so it reads O(n log n) entries whatever the heap's size
    /// (a dead entry is passed, its children read: its key still bounds theirs).
    pub fn smallest(&self, n: usize) -> Vec<&K> {
        let mut out = Vec::with_capacity(n.min(self.len()));
        let mut frontier: BinaryHeap<Reverse<(&K, usize)>> = BinaryHeap::new();
        if let Some((k, _)) = self.heap.first() {
            frontier.push(Reverse((k, 0)));
        }
        while out.len() < n {
            let Some(Reverse((k, i))) = frontier.pop() else {
                break;
            };
            if self.heap[i].1 & DEAD == 0 {
                out.push(k);
            }
            let first_child = ARITY * i + 1;
            for c in first_child..(first_child + ARITY).min(self.heap.len()) {
                frontier.push(Reverse((&self.heap[c].0, c)));
            }
        }
        out
    }

    /// Every live entry, in heap (not sorted) order.
    pub fn iter(&self) -> impl Iterator<Item = (usize, &K)> {
        self.heap
            .iter()
            .filter(|(_, h)| h & DEAD == 0)
            .map(|(k, h)| (*h, k))
    }

    /// Removes the entry at index `i` (live or dead), returning its key.
    fn take(&mut self, i: usize) -> K {
        let last = self.heap.len() - 1;
        self.swap(i, last);
        let (key, handle) = self.heap.pop().expect("non-empty");
        self.pos[handle & !DEAD] = ABSENT;
        if i < self.heap.len() {
            self.fix(i);
        }
        key
    }

    /// Keeps the smallest entry live: drops dead entries from the top.
    fn drop_dead_top(&mut self) {
        while let Some(&(_, h)) = self.heap.first() {
            if h & DEAD == 0 {
                break;
            }
            self.take(0);
            self.dead -= 1;
            self.freed.push(h & !DEAD);
        }
    }

    /// Drops every dead entry and rebuilds the heap (bottom-up, O(n)).
    fn sweep(&mut self) {
        let freed = &mut self.freed;
        let pos = &mut self.pos;
        self.heap.retain(|&(_, h)| {
            if h & DEAD != 0 {
                pos[h & !DEAD] = ABSENT;
                freed.push(h & !DEAD);
            }
            h & DEAD == 0
        });
        self.dead = 0;
        for (i, &(_, h)) in self.heap.iter().enumerate() {
            self.pos[h] = i;
        }
        for i in (0..self.heap.len()).rev() {
            self.sift_down(i);
        }
    }

    fn swap(&mut self, i: usize, j: usize) {
        self.heap.swap(i, j);
        self.pos[self.heap[i].1 & !DEAD] = i;
        self.pos[self.heap[j].1 & !DEAD] = j;
    }

    fn fix(&mut self, i: usize) {
        if i > 0 && self.heap[i].0 < self.heap[(i - 1) / ARITY].0 {
            self.sift_up(i);
        } else {
            self.sift_down(i);
        }
    }

    fn sift_up(&mut self, mut i: usize) {
        while i > 0 {
            let parent = (i - 1) / ARITY;
            if self.heap[i].0 >= self.heap[parent].0 {
                break;
            }
            self.swap(i, parent);
            i = parent;
        }
    }

    fn sift_down(&mut self, mut i: usize) {
        let n = self.heap.len();
        loop {
            let first = ARITY * i + 1;
            let mut m = i;
            for c in first..(first + ARITY).min(n) {
                if self.heap[c].0 < self.heap[m].0 {
                    m = c;
                }
            }
            if m == i {
                break;
            }
            self.swap(i, m);
            i = m;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tiny deterministic generator, so the test needs no dependency.
    fn lcg(state: &mut u64) -> u64 {
        *state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        *state >> 33
    }

    #[test]
    fn matches_a_sorted_model_under_push_pop_remove_update() {
        let mut heap = IndexedHeap::default();
        let mut model: Vec<(u64, usize)> = Vec::new();
        let mut seed = 7;
        for _ in 0..20_000 {
            let handle = (lcg(&mut seed) % 64) as usize;
            match lcg(&mut seed) % 4 {
                0 | 1 => {
                    let key = lcg(&mut seed) % 100;
                    heap.push(handle, key);
                    model.retain(|&(_, h)| h != handle);
                    model.push((key, handle));
                }
                2 => {
                    let got = heap.remove(handle);
                    let want = model.iter().position(|&(_, h)| h == handle);
                    assert_eq!(got, want.map(|i| model.remove(i).0));
                }
                _ => {
                    model.sort();
                    let got = heap.pop();
                    let want = if model.is_empty() {
                        None
                    } else {
                        Some(model.remove(0))
                    };
                    // equal keys may pop in any handle order; the key must be the minimum
                    assert_eq!(got.map(|(_, k)| k), want.map(|(k, _)| k));
                    if let (Some((h, k)), Some((_, wh))) = (got, want) {
                        if h != wh {
                            // put the model back in step: it removed another equal key
                            let i = model.iter().position(|&(mk, mh)| mh == h && mk == k);
                            let i = i.expect("popped handle is in the model");
                            model[i].1 = wh;
                        }
                    }
                }
            }
            assert_eq!(heap.len(), model.len());
            for &(k, h) in &model {
                assert_eq!(heap.key(h), Some(&k));
            }
        }
    }

    #[test]
    fn buried_entries_count_as_gone_and_their_handles_come_back_once() {
        // push / pop / remove / bury at random against a sorted model of the live entries;
        // a buried handle is not pushed again until drained, and is drained exactly once.
        let mut heap = IndexedHeap::default();
        let mut model: Vec<(u64, usize)> = Vec::new();
        let mut buried: Vec<usize> = Vec::new();
        let mut seed = 11;
        for step in 0..40_000 {
            let handle = (lcg(&mut seed) % 300) as usize;
            let op = lcg(&mut seed) % 8;
            let key = lcg(&mut seed) % 1000;
            let at = model.iter().position(|&(_, h)| h == handle);
            match op {
                0..=2 if !buried.contains(&handle) => {
                    heap.push(handle, key);
                    model.retain(|&(_, h)| h != handle);
                    model.push((key, handle));
                }
                3 | 4 => {
                    assert_eq!(heap.bury(handle), at.is_some());
                    if let Some(i) = at {
                        model.remove(i);
                        buried.push(handle);
                    }
                }
                5 => assert_eq!(heap.remove(handle), at.map(|i| model.remove(i).0)),
                6 => {
                    model.sort();
                    let got = heap.pop();
                    assert_eq!(got.map(|(_, k)| k), model.first().map(|&(k, _)| k));
                    if let Some((h, k)) = got {
                        let i = model.iter().position(|&e| e == (k, h));
                        model.remove(i.expect("the popped entry is live"));
                    }
                }
                _ => {}
            }
            for h in heap.drain_freed().collect::<Vec<_>>() {
                let i = buried.iter().position(|&b| b == h);
                buried.remove(i.expect("a freed handle was buried, once"));
            }
            assert_eq!(heap.len(), model.len(), "step {step}");
            assert!(heap.dead <= buried.len() && heap.dead + heap.len() == heap.heap.len());
            let min = model.iter().min().map(|&(k, _)| k);
            assert_eq!(
                heap.peek().map(|(_, &k)| k),
                min,
                "the top is live and smallest"
            );
            for &(k, h) in &model {
                assert_eq!(heap.key(h), Some(&k));
            }
            for &h in &buried {
                assert!(!heap.contains(h));
            }
            if step % 16 == 0 {
                // the smallest live keys, in order, past the buried ones
                let mut keys: Vec<u64> = model.iter().map(|&(k, _)| k).collect();
                keys.sort_unstable();
                let n = (lcg(&mut seed) % 40) as usize;
                let got: Vec<u64> = heap.smallest(n).into_iter().copied().collect();
                assert_eq!(got, keys[..n.min(keys.len())], "step {step}");
            }
        }
    }

    #[test]
    fn a_sweep_drops_the_dead_once_they_outnumber_the_live() {
        let mut heap = IndexedHeap::default();
        for h in 0..200 {
            heap.push(h, h as u64);
        }
        // Bury from the back (never the top): dead stay in place until they outnumber the live.
        for h in (100..200).rev() {
            assert!(heap.bury(h));
        }
        assert_eq!((heap.len(), heap.dead, heap.heap.len()), (100, 100, 200));
        assert_eq!(heap.drain_freed().count(), 0, "no dead entry has left yet");
        assert!(heap.bury(99));
        assert_eq!(
            (heap.len(), heap.dead, heap.heap.len()),
            (99, 0, 99),
            "swept"
        );
        let mut freed: Vec<usize> = heap.drain_freed().collect();
        freed.sort();
        assert_eq!(freed, (99..200).collect::<Vec<_>>());
        let popped: Vec<u64> = std::iter::from_fn(|| heap.pop().map(|(_, k)| k)).collect();
        assert_eq!(popped, (0..99).collect::<Vec<_>>());
    }

    #[test]
    fn time_orders_numerically() {
        let mut v = [Time(3.0), Time(-1.0), Time(0.0), Time(2.5)];
        v.sort();
        assert_eq!(v.map(|t| t.0), [-1.0, 0.0, 2.5, 3.0]);
    }
}
