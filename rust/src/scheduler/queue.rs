//! An indexed (4-ary) min-heap: entries are named by a small integer handle (a slab slot),
//! so an entry can be removed or re-prioritised in O(log n) as well as pushed and popped.
//! Used for the waiting queue (by the priority tuple) and the pin table (by deadline, and by
//! program arrival for reclaim).

use std::cmp::Ordering;

const ABSENT: usize = usize::MAX;
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

/// Min-heap of `(key, handle)`; each handle appears at most once.
#[derive(Debug, Clone)]
pub struct IndexedHeap<K> {
    heap: Vec<(K, usize)>,
    /// `pos[handle]`: the handle's index in `heap`, or `ABSENT`.
    pos: Vec<usize>,
}

impl<K: Ord> Default for IndexedHeap<K> {
    fn default() -> Self {
        IndexedHeap {
            heap: Vec::new(),
            pos: Vec::new(),
        }
    }
}

impl<K: Ord> IndexedHeap<K> {
    /// Entries held.
    pub fn len(&self) -> usize {
        self.heap.len()
    }

    /// Whether no entry is held.
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }

    /// Whether `handle` is held.
    pub fn contains(&self, handle: usize) -> bool {
        self.pos.get(handle).is_some_and(|&i| i != ABSENT)
    }

    /// The key of `handle`, if held.
    pub fn key(&self, handle: usize) -> Option<&K> {
        match self.pos.get(handle) {
            Some(&i) if i != ABSENT => Some(&self.heap[i].0),
            _ => None,
        }
    }

    /// The smallest entry.
    pub fn peek(&self) -> Option<(usize, &K)> {
        self.heap.first().map(|(k, h)| (*h, k))
    }

    /// Inserts `handle` with `key`, or re-prioritises it if present.
    pub fn push(&mut self, handle: usize, key: K) {
        if self.contains(handle) {
            let i = self.pos[handle];
            self.heap[i].0 = key;
            self.fix(i);
            return;
        }
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

    /// Removes `handle`, returning its key.
    pub fn remove(&mut self, handle: usize) -> Option<K> {
        let i = *self.pos.get(handle)?;
        if i == ABSENT {
            return None;
        }
        let last = self.heap.len() - 1;
        self.swap(i, last);
        let (key, _) = self.heap.pop().expect("non-empty");
        self.pos[handle] = ABSENT;
        if i < self.heap.len() {
            self.fix(i);
        }
        Some(key)
    }

    /// Every entry, in heap (not sorted) order.
    pub fn iter(&self) -> impl Iterator<Item = (usize, &K)> {
        self.heap.iter().map(|(k, h)| (*h, k))
    }

    fn swap(&mut self, i: usize, j: usize) {
        self.heap.swap(i, j);
        self.pos[self.heap[i].1] = i;
        self.pos[self.heap[j].1] = j;
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
    fn time_orders_numerically() {
        let mut v = [Time(3.0), Time(-1.0), Time(0.0), Time(2.5)];
        v.sort();
        assert_eq!(v.map(|t| t.0), [-1.0, 0.0, 2.5, 3.0]);
    }
}
