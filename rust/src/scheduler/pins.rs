//! The pin table: which programs hold pinned KV blocks, how many, and until when. Mirrors
//! `python/ttlpolicy/reference/pins.py`.
//!
//! A program holds at most one pin; a second pin while the first is held (parallel requests
//! of one program) merges into it: blocks add up, the later deadline wins. Two orders:
//! expiry by `(deadline_s, program_id)`, and reclaim by the program's FCFS position (the
//! order it was first seen, which follows arrival) descending (the newest yields first).
//! Both are indexed heaps over the program's slot, so every operation is O(log n).
//!
//! Tenants share the pin budget: a program's tenant is read from its id ([`tenant_of`]); the
//! active tenants (a pin or a live request) share it in proportion to their weights
//! ([`crate::tenants`]: 1 each unless [`TenantWeights`] says otherwise), a tenant over its
//! share when `blocks · W > budget · weight`. [`PinTable::make_room`] says which pins a
//! finishing program may displace, [`PinTable::reclaim_slots_after`] takes from the tenant
//! furthest over its share first (most pinned blocks per unit of weight, ties to the greatest
//! tenant key). With one tenant no tenant is ever over its share. Picking that tenant scans
//! the active tenants (O(tenants) a step; a tenant's own pins are ordered).

use std::cmp::Reverse;
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use super::queue::{IndexedHeap, Time};
use crate::tenants::{cmp_usage, over_share};
pub use crate::tenants::{tenant_of, TenantWeights, TENANT_KEY_CHARS, TENANT_PREFIX};

/// An active tenant: its pinned blocks, its pins by FCFS position, its live requests and its
/// weight.
#[derive(Debug, Clone, Default)]
struct Tenant {
    blocks: i64,
    live: u64,
    weight: i64,
    /// `(order, slot)` of its pinned programs; the latest last.
    pins: BTreeSet<(u64, usize)>,
}

impl Tenant {
    /// Its latest pinned program's slot, None if none is younger than `keep_until`.
    fn latest(&self, keep_until: Option<u64>) -> Option<usize> {
        let &(order, slot) = self.pins.last()?;
        match keep_until {
            Some(k) if order <= k => None,
            _ => Some(slot),
        }
    }
}

/// `blocks` KV blocks of `program_id` kept in memory until `deadline_s`.
#[derive(Debug, Clone, PartialEq)]
pub struct Pin {
    /// The program holding the blocks.
    pub program_id: Arc<str>,
    /// Blocks kept.
    pub blocks: i64,
    /// When the pin expires.
    pub deadline_s: f64,
}

#[derive(Debug, Clone, Default)]
/// The pins, by program slot, ordered by deadline and by program arrival.
pub struct PinTable {
    /// By program slot.
    pins: Vec<Option<Pin>>,
    by_deadline: IndexedHeap<(Time, Arc<str>)>,
    /// By FCFS position (program order), latest on top.
    by_arrival: IndexedHeap<Reverse<u64>>,
    blocks: i64,
    /// The active tenants, by key.
    tenants: HashMap<Box<str>, Tenant>,
    weights: TenantWeights,
    /// The active tenants' summed weight.
    total_weight: i64,
}

impl PinTable {
    /// An empty table whose tenants weigh as `weights` says.
    pub fn with_weights(weights: TenantWeights) -> PinTable {
        PinTable {
            weights,
            ..PinTable::default()
        }
    }

    fn tenant(&mut self, program_id: &str) -> &mut Tenant {
        let key = tenant_of(program_id);
        if !self.tenants.contains_key(key) {
            let weight = self.weights.weight(key);
            self.total_weight += weight;
            self.tenants.insert(
                Box::from(key),
                Tenant {
                    weight,
                    ..Tenant::default()
                },
            );
        }
        self.tenants.get_mut(key).expect("just inserted")
    }

    fn settle(&mut self, program_id: &str) {
        let key = tenant_of(program_id);
        if let Some(t) = self.tenants.get(key) {
            if t.live == 0 && t.pins.is_empty() {
                self.total_weight -= t.weight;
                self.tenants.remove(key); // inactive: bounded by pins and live requests
            }
        }
    }

    /// The program's tenant has `delta` more live requests.
    pub fn live(&mut self, program_id: &str, delta: i64) {
        let t = self.tenant(program_id);
        t.live = t
            .live
            .checked_add_signed(delta)
            .expect("live requests are counted");
        self.settle(program_id);
    }

    /// Tenants with a pin or a live request.
    pub fn active_tenants(&self) -> usize {
        self.tenants.len()
    }

    /// Pins held.
    pub fn len(&self) -> usize {
        self.by_deadline.len()
    }

    /// Whether no pin is held.
    pub fn is_empty(&self) -> bool {
        self.by_deadline.is_empty()
    }

    /// Pinned blocks in all.
    pub fn blocks(&self) -> i64 {
        self.blocks
    }

    /// The pin of the program in `slot`.
    pub fn get(&self, slot: usize) -> Option<&Pin> {
        self.pins.get(slot).and_then(Option::as_ref)
    }

    /// Pins (or merges into the program's pin); returns the program's pin.
    pub fn add(
        &mut self,
        slot: usize,
        program_id: &Arc<str>,
        blocks: i64,
        deadline_s: f64,
        order: u64,
    ) -> Pin {
        if slot >= self.pins.len() {
            self.pins.resize(slot + 1, None);
        }
        let old_order = self.by_arrival.key(slot).map(|r| r.0);
        let (blocks, deadline_s) = match &self.pins[slot] {
            Some(old) => {
                self.blocks -= old.blocks;
                (old.blocks + blocks, deadline_s.max(old.deadline_s))
            }
            None => (blocks, deadline_s),
        };
        let added = blocks - self.pins[slot].as_ref().map_or(0, |old| old.blocks);
        let tenant = self.tenant(program_id);
        tenant.blocks += added;
        if let Some(o) = old_order {
            tenant.pins.remove(&(o, slot));
        }
        tenant.pins.insert((order, slot));
        let pin = Pin {
            program_id: program_id.clone(),
            blocks,
            deadline_s,
        };
        self.blocks += blocks;
        self.pins[slot] = Some(pin.clone());
        self.by_deadline
            .push(slot, (Time(deadline_s), program_id.clone()));
        self.by_arrival.push(slot, Reverse(order));
        pin
    }

    /// Removes and returns the pin of the program in `slot`.
    pub fn remove(&mut self, slot: usize) -> Option<Pin> {
        let pin = self.pins.get_mut(slot)?.take()?;
        self.by_deadline.remove(slot);
        let order = self
            .by_arrival
            .remove(slot)
            .expect("a pin is in both heaps")
            .0;
        self.blocks -= pin.blocks;
        let tenant = self.tenant(&pin.program_id);
        tenant.blocks -= pin.blocks;
        tenant.pins.remove(&(order, slot));
        self.settle(&pin.program_id);
        Some(pin)
    }

    /// The earliest deadline.
    pub fn next_deadline_s(&self) -> Option<f64> {
        self.by_deadline.peek().map(|(_, (t, _))| t.0)
    }

    /// Removes and returns the pins with `deadline_s <= now`, earliest first.
    pub fn expire(&mut self, now: f64) -> Vec<Pin> {
        let mut out = Vec::new();
        while let Some((slot, (t, _))) = self.by_deadline.peek() {
            if t.0 > now {
                break;
            }
            out.push(self.remove(slot).expect("a heap entry has a pin"));
        }
        out
    }

    /// Removes and returns the pins with `deadline_s < now` (strictly), earliest first, with
    /// their program slots.
    pub fn expire_before(&mut self, now: f64) -> Vec<(usize, Pin)> {
        let mut out = Vec::new();
        while let Some((slot, (t, _))) = self.by_deadline.peek() {
            if t.0 >= now {
                break;
            }
            out.push((slot, self.remove(slot).expect("a heap entry has a pin")));
        }
        out
    }

    /// The latest eligible pin (slot) of the tenant furthest over its share of `budget`,
    /// None if no tenant over its share has one younger than `keep_until`.
    fn furthest_over(&self, budget: i64, keep_until: Option<u64>) -> Option<usize> {
        let w = self.total_weight;
        let mut over: Vec<(&str, &Tenant)> = self
            .tenants
            .iter()
            .filter(|(_, t)| over_share(t.blocks, t.weight, budget, w))
            .map(|(k, t)| (&**k, t))
            .collect();
        over.sort_by(|a, b| {
            cmp_usage((b.1.blocks, b.1.weight), (a.1.blocks, a.1.weight)).then(b.0.cmp(a.0))
        });
        over.iter().find_map(|(_, t)| t.latest(keep_until))
    }

    /// Removes pins until `blocks_needed` blocks are released or no pin is left: the latest
    /// pin of the tenant furthest over its share of `budget` while one is, then latest-arrived
    /// program first — keeping the pins of programs whose FCFS position is at most
    /// `keep_until` (that program's own included). Returns them with their slots.
    pub fn reclaim_slots_after(
        &mut self,
        blocks_needed: i64,
        budget: i64,
        keep_until: Option<u64>,
    ) -> Vec<(usize, Pin)> {
        let mut out = Vec::new();
        let mut released = 0;
        while released < blocks_needed {
            let slot = match self.furthest_over(budget, keep_until) {
                Some(slot) => slot,
                None => {
                    let Some((slot, &Reverse(order))) = self.by_arrival.peek() else {
                        break;
                    };
                    if keep_until.is_some_and(|last_kept| order <= last_kept) {
                        break; // every pin left is of a program no younger than `keep_until`
                    }
                    slot
                }
            };
            let pin = self.remove(slot).expect("a heap entry has a pin");
            released += pin.blocks;
            out.push((slot, pin));
        }
        out
    }

    /// The slots of the pins to release so that `program_id` may pin `blocks` more blocks
    /// within `budget`: none when they fit the free budget (work-conserving); else, when its
    /// tenant stays within its share, the latest pins of the tenants furthest over theirs
    /// until they fit; None (no pin) when they cannot.
    pub fn make_room(&self, program_id: &str, blocks: i64, budget: i64) -> Option<Vec<usize>> {
        if self.blocks + blocks <= budget {
            return Some(Vec::new());
        }
        let key = tenant_of(program_id);
        let own = self.tenants.get(key);
        let weight = self.weights.weight(key);
        let w = self.total_weight + if own.is_none() { weight } else { 0 };
        if over_share(own.map_or(0, |t| t.blocks) + blocks, weight, budget, w) {
            return None; // at or beyond its share: it takes nobody's pin
        }
        let mut left: Vec<(i64, i64, &str, _)> = self
            .tenants
            .iter()
            .filter(|(k, _)| &***k != key)
            .map(|(k, t)| (t.blocks, t.weight, &**k, t.pins.iter().rev()))
            .collect();
        let mut free = budget - self.blocks;
        let mut out = Vec::new();
        while free < blocks {
            let victim = left
                .iter_mut()
                .filter(|v| over_share(v.0, v.1, budget, w))
                .max_by(|a, b| cmp_usage((a.0, a.1), (b.0, b.1)).then(a.2.cmp(b.2)))?;
            let &(_, slot) = victim.3.next().expect("over its share: it holds a pin");
            let pin_blocks = self.pins[slot].as_ref().expect("a tenant's pin").blocks;
            victim.0 -= pin_blocks;
            free += pin_blocks;
            out.push(slot);
        }
        Some(out)
    }

    /// Every pin, by `(deadline_s, program_id)`.
    pub fn all(&self) -> Vec<Pin> {
        let mut keyed: Vec<_> = self.by_deadline.iter().collect();
        keyed.sort_by(|a, b| a.1.cmp(b.1));
        keyed
            .into_iter()
            .map(|(slot, _)| self.pins[slot].clone().expect("a heap entry has a pin"))
            .collect()
    }
}
