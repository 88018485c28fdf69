//! The pin table: which programs hold pinned KV blocks, how many, and until when. Mirrors
//! `python/ttlpolicy/reference/pins.py`.
//!
//! A program holds at most one pin; a second pin while the first is held (parallel requests
//! of one program) merges into it: blocks add up, the later deadline wins. Two orders:
//! expiry by `(deadline_s, program_id)`, and reclaim by the program's FCFS position (the
//! order it was first seen, which follows arrival) descending (the newest yields first).
//! Both are indexed heaps over the program's slot, so every operation is O(log n).

use std::cmp::Reverse;
use std::sync::Arc;

use super::queue::{IndexedHeap, Time};

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
}

impl PinTable {
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
        let (blocks, deadline_s) = match &self.pins[slot] {
            Some(old) => {
                self.blocks -= old.blocks;
                (old.blocks + blocks, deadline_s.max(old.deadline_s))
            }
            None => (blocks, deadline_s),
        };
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
        self.by_arrival.remove(slot);
        self.blocks -= pin.blocks;
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

    /// Removes pins, latest-arrived program first, until `blocks_needed` blocks are released
    /// or no pin is left.
    pub fn reclaim(&mut self, blocks_needed: i64) -> Vec<Pin> {
        self.reclaim_slots(blocks_needed)
            .into_iter()
            .map(|(_, pin)| pin)
            .collect()
    }

    /// [`reclaim`](Self::reclaim), with the program slots.
    pub fn reclaim_slots(&mut self, blocks_needed: i64) -> Vec<(usize, Pin)> {
        self.reclaim_slots_after(blocks_needed, None)
    }

    /// [`reclaim_slots`](Self::reclaim_slots), keeping the pins of programs whose FCFS
    /// position is at most `keep_until` (that program's own included).
    pub fn reclaim_slots_after(
        &mut self,
        blocks_needed: i64,
        keep_until: Option<u64>,
    ) -> Vec<(usize, Pin)> {
        let mut out = Vec::new();
        let mut released = 0;
        while released < blocks_needed {
            let Some((slot, &Reverse(order))) = self.by_arrival.peek() else {
                break;
            };
            if let Some(last_kept) = keep_until {
                if order <= last_kept {
                    break; // every pin left is of a program no younger than `keep_until`
                }
            }
            let pin = self.remove(slot).expect("a heap entry has a pin");
            released += pin.blocks;
            out.push((slot, pin));
        }
        out
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
