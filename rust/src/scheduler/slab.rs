//! A slab of values named by string ids: each value lives in a reusable slot, found by its id
//! through a hash table of slot numbers.
//!
//! Built for `abort`'s cost at ~100k live ids, where every access is a cache miss: an id is
//! hashed once, when it enters, and its hash kept in its slot, so growing the table hashes
//! nothing, a probe compares the stored hash before the (cold) id string, and removing a slot
//! compares slot numbers only. The table holds `u32` slot numbers, half the memory of `usize`.

use std::fmt;
use std::hash::BuildHasher;
use std::sync::Arc;

use hashbrown::HashTable;

use crate::id_hash::IdHasher;

/// A live slot: the id, its hash, the value.
#[derive(Debug, Clone)]
struct Entry<T> {
    hash: u64,
    id: Arc<str>,
    value: T,
}

/// Values in reusable slots, found by id.
#[derive(Clone)]
pub(super) struct Slab<T> {
    slots: Vec<Option<Entry<T>>>,
    /// Slots freed, reused before the vector grows.
    free: Vec<usize>,
    index: HashTable<u32>,
    /// Ids are client input: keyed per table (`id_hash`).
    hasher: IdHasher,
}

impl<T> Default for Slab<T> {
    fn default() -> Self {
        Slab {
            slots: Vec::new(),
            free: Vec::new(),
            index: HashTable::new(),
            hasher: IdHasher::default(),
        }
    }
}

impl<T: fmt::Debug> fmt::Debug for Slab<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map()
            .entries(self.slots.iter().flatten().map(|e| (&e.id, &e.value)))
            .finish()
    }
}

impl<T> Slab<T> {
    /// The slot of `id`, if live.
    pub(super) fn find(&self, id: &str) -> Option<usize> {
        let hash = self.hasher.hash_one(id);
        let slots = &self.slots;
        self.index
            .find(hash, |&s| {
                let e = slots[s as usize].as_ref().expect("indexed slot is live");
                e.hash == hash && *e.id == *id
            })
            .map(|&s| s as usize)
    }

    /// The stored hash of the id in `slot`.
    pub(super) fn hash_of(&self, slot: usize) -> u64 {
        self.slots[slot].as_ref().expect("live slot").hash
    }

    /// Starts loading what removing `slot` (whose id hashed to `hash`) and then dropping
    /// its id will read: its table entry, its slot and the id's allocation (a hint: the
    /// results are not needed).
    pub(super) fn touch(&self, slot: usize, hash: u64) {
        std::hint::black_box(self.index.find(hash, |&s| s as usize == slot));
        let entry = self.slots.get(slot).and_then(Option::as_ref);
        std::hint::black_box(entry.map(|e| Arc::strong_count(&e.id)));
    }

    /// Stores `value` under `id` (which must not be live); returns its slot.
    pub(super) fn insert(&mut self, id: Arc<str>, value: T) -> usize {
        let hash = self.hasher.hash_one(&*id);
        let entry = Some(Entry { hash, id, value });
        let slot = match self.free.pop() {
            Some(s) => {
                self.slots[s] = entry;
                s
            }
            None => {
                self.slots.push(entry);
                self.slots.len() - 1
            }
        };
        let handle = u32::try_from(slot).expect("fewer than 2^32 live ids");
        let slots = &self.slots;
        self.index.insert_unique(hash, handle, |&s| {
            slots[s as usize]
                .as_ref()
                .expect("indexed slot is live")
                .hash
        });
        slot
    }

    /// Frees `slot`; returns its id and value.
    pub(super) fn remove(&mut self, slot: usize) -> (Arc<str>, T) {
        let removed = self.retire(slot);
        self.release(slot);
        removed
    }

    /// Forgets the id in `slot` and returns it with the value, but keeps the slot taken
    /// (another structure still names it) until [`release`](Self::release).
    pub(super) fn retire(&mut self, slot: usize) -> (Arc<str>, T) {
        let entry = self.slots[slot].take().expect("live slot");
        // Found by the stored hash and the slot number: no hashing, no string compare.
        if let Ok(found) = self.index.find_entry(entry.hash, |&s| s as usize == slot) {
            found.remove();
        }
        (entry.id, entry.value)
    }

    /// A retired slot may be reused.
    pub(super) fn release(&mut self, slot: usize) {
        debug_assert!(self.slots[slot].is_none(), "slot {slot} is live");
        self.free.push(slot);
    }

    /// The id in `slot`.
    pub(super) fn id(&self, slot: usize) -> &Arc<str> {
        &self.slots[slot].as_ref().expect("live slot").id
    }

    /// The value in `slot`.
    pub(super) fn get(&self, slot: usize) -> &T {
        &self.slots[slot].as_ref().expect("live slot").value
    }

    /// The value in `slot`, to update.
    pub(super) fn get_mut(&mut self, slot: usize) -> &mut T {
        &mut self.slots[slot].as_mut().expect("live slot").value
    }

    /// Live ids.
    pub(super) fn len(&self) -> usize {
        self.index.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_what_was_inserted_and_reuses_freed_slots() {
        let mut slab = Slab::default();
        let a = slab.insert(Arc::from("a"), 1);
        let b = slab.insert(Arc::from("b"), 2);
        assert_eq!(
            (slab.find("a"), slab.find("b"), slab.find("c")),
            (Some(a), Some(b), None)
        );
        assert_eq!(slab.remove(a), (Arc::from("a"), 1));
        assert_eq!((slab.find("a"), slab.len()), (None, 1));
        let c = slab.insert(Arc::from("c"), 3);
        assert_eq!(c, a, "the freed slot is reused");
        assert_eq!(
            (slab.find("c"), *slab.get(c), &**slab.id(c)),
            (Some(c), 3, "c")
        );
        *slab.get_mut(b) = 20;
        assert_eq!(*slab.get(b), 20);
        // A retired slot is not reused until released.
        assert_eq!(slab.retire(b), (Arc::from("b"), 20));
        assert_eq!(slab.find("b"), None);
        let d = slab.insert(Arc::from("d"), 4);
        assert_ne!(d, b);
        slab.release(b);
        assert_eq!(slab.insert(Arc::from("e"), 5), b);
    }

    #[test]
    fn stays_consistent_through_growth_and_churn() {
        // Insert, remove about a third (ids of a length divisible by 3), insert more: every live id is found in its slot, no dead
        // one is, while the table grows (rehashing from the stored hashes) and slots recycle.
        let mut slab = Slab::default();
        let mut live = std::collections::HashMap::new();
        for round in 0..3 {
            for i in 0..5000 {
                let id = format!("r{round}-{i}");
                let slot = slab.insert(Arc::from(id.as_str()), i);
                live.insert(id, slot);
            }
            let gone: Vec<String> = live.keys().filter(|k| k.len() % 3 == 0).cloned().collect();
            for id in &gone {
                let slot = live.remove(id).unwrap();
                assert_eq!(&*slab.remove(slot).0, id.as_str());
                assert_eq!(slab.find(id), None);
            }
            assert_eq!(slab.len(), live.len());
            for (id, &slot) in &live {
                assert_eq!(slab.find(id), Some(slot));
                assert_eq!(&**slab.id(slot), id.as_str());
            }
        }
    }
}
