//! The order a bounded table of programs forgets in, shared fairly among tenants. Mirrors
//! `python/ttlpolicy/reference/fair_order.py`, whose doc states the rule: the oldest of all
//! is forgotten, unless the tenant whose program was just touched holds more than that one's
//! tenant, then its own oldest.
//!
//! The table keeps its own order of all entries (by a sequence number that grows as entries
//! are touched); [`TenantShares`] adds what the rule needs beside it: how many entries each
//! tenant holds, and each tenant's entries oldest first. Those queues are lazy — an entry
//! that left, or was touched again since, stays until it reaches the front or the stale ones
//! outnumber the held — so touching an entry costs a push, not an ordered tree's update.

use std::collections::VecDeque;

use crate::id_hash::IdMap;

/// One tenant's entries: how many it holds, and `(seq, value)` oldest first, stale included.
#[derive(Debug, Clone)]
struct Share<V> {
    held: usize,
    order: VecDeque<(u64, V)>,
}

impl<V> Default for Share<V> {
    fn default() -> Self {
        Share {
            held: 0,
            order: VecDeque::new(),
        }
    }
}

impl<V: Copy> Share<V> {
    fn compact(&mut self, current: impl Fn(u64, V) -> bool) {
        compact(&mut self.order, self.held, |&(seq, v)| current(seq, v));
    }
}

/// Keeps a lazy queue of `live` held entries and stale ones within `2 * live + 16`, and its
/// memory within a small multiple of its length: the stale entries (`held` false) dropped
/// once they outnumber the held ones, and the memory given back once it is over four times
/// what the entries need — whatever shortened the queue, this or a pop from its front
/// (amortized O(1) a push or a removal).
pub(crate) fn compact<T>(queue: &mut VecDeque<T>, live: usize, held: impl FnMut(&T) -> bool) {
    if queue.len() > 2 * live + 16 {
        queue.retain(held);
    }
    if queue.capacity() > 4 * queue.len() + 64 {
        queue.shrink_to(2 * queue.len() + 16);
    }
}

/// Each tenant's share of a table's entries (module doc). `current(seq, v)` tells whether the
/// table still holds entry `v` as touched at `seq` (not left, not touched again since).
#[derive(Debug, Clone)]
pub(crate) struct TenantShares<V> {
    /// The shared tenant's (`""`): kept apart, so that its changes hash nothing.
    shared: Share<V>,
    tenants: IdMap<Box<str>, Share<V>>,
}

impl<V> Default for TenantShares<V> {
    fn default() -> Self {
        TenantShares {
            shared: Share::default(),
            tenants: IdMap::default(),
        }
    }
}

impl<V: Copy> TenantShares<V> {
    /// Entries `tenant` holds.
    pub(crate) fn held(&self, tenant: &str) -> usize {
        if tenant.is_empty() {
            self.shared.held
        } else {
            self.tenants.get(tenant).map_or(0, |s| s.held)
        }
    }

    /// `tenant`'s entry `v` was added (or touched again) at `seq`.
    pub(crate) fn add(&mut self, tenant: &str, seq: u64, v: V, current: impl Fn(u64, V) -> bool) {
        let share = if tenant.is_empty() {
            &mut self.shared
        } else {
            if !self.tenants.contains_key(tenant) {
                self.tenants.insert(tenant.into(), Share::default());
            }
            self.tenants.get_mut(tenant).expect("inserted above")
        };
        share.held += 1;
        share.order.push_back((seq, v));
        share.compact(current);
    }

    /// One of `tenant`'s entries left the table (or is about to be touched again).
    pub(crate) fn sub(&mut self, tenant: &str, current: impl Fn(u64, V) -> bool) {
        if tenant.is_empty() {
            self.shared.held -= 1;
            self.shared.compact(current);
            return;
        }
        let share = self
            .tenants
            .get_mut(tenant)
            .expect("a tenant holding entries");
        share.held -= 1;
        if share.held == 0 {
            self.tenants.remove(tenant);
        } else {
            share.compact(current);
        }
    }

    /// `tenant`'s oldest entry still held: its `seq` and value (stale ones before it let go).
    pub(crate) fn oldest(
        &mut self,
        tenant: &str,
        current: impl Fn(u64, V) -> bool,
    ) -> Option<(u64, V)> {
        let share = if tenant.is_empty() {
            &mut self.shared
        } else {
            self.tenants.get_mut(tenant)?
        };
        while let Some(&(seq, v)) = share.order.front() {
            if current(seq, v) {
                return Some((seq, v));
            }
            share.order.pop_front();
        }
        None
    }

    /// The module doc's rule: whether room for one of `tenant` comes from its own oldest
    /// rather than from the table's oldest, whose tenant is `oldest_tenant`.
    pub(crate) fn own_goes(&self, tenant: &str, oldest_tenant: &str) -> bool {
        self.held(tenant) > self.held(oldest_tenant)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_count_and_find_the_oldest_held() {
        let live = std::cell::RefCell::new(vec![true; 8]);
        let current = |seq: u64, _: char| live.borrow()[seq as usize];
        let mut s = TenantShares::default();
        s.add("b", 0, 'x', current);
        s.add("a", 1, 'y', current);
        s.add("a", 2, 'z', current);
        assert!(s.own_goes("a", "b") && !s.own_goes("b", "a") && !s.own_goes("c", "b"));
        live.borrow_mut()[1] = false; // a's 'y' left
        s.sub("a", current);
        assert_eq!(s.oldest("a", current), Some((2, 'z')));
        assert_eq!((s.held("a"), s.held("b"), s.held("")), (1, 1, 0));
        live.borrow_mut()[0] = false;
        s.sub("b", current);
        assert_eq!((s.tenants.len(), s.oldest("b", current)), (1, None));
    }
}
