//! Expiry: a block expires at `last_access_s + ttl(group)`. Deadlines sit in a lazy min-heap
//! with at most one live entry per block, re-pushed when popped if the block was touched
//! since, so a touch does no heap work.

use std::cmp::{Ordering, Reverse};

use super::PrefixTree;
use crate::error::{Error, Result};

/// A TTL: a number >= 0, or infinity for none.
pub fn check_ttl(field: &str, x: f64) -> Result<f64> {
    if x.is_nan() || x < 0.0 {
        Err(Error::invalid_f64(field, x, ">= 0 (inf: no TTL)"))
    } else {
        Ok(x)
    }
}

/// A heap entry ordered like the reference's tuple `(deadline, seq, node)`.
#[derive(Clone, Copy)]
pub(super) struct Deadline {
    at_s: f64,
    seq: u64,
    node: u32,
}

impl PartialEq for Deadline {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Deadline {}
impl PartialOrd for Deadline {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Deadline {
    fn cmp(&self, other: &Self) -> Ordering {
        self.at_s
            .total_cmp(&other.at_s)
            .then(self.seq.cmp(&other.seq))
    }
}

impl PrefixTree {
    /// Queue block `n`'s deadline (none under an infinite TTL).
    pub(super) fn push_deadline(&mut self, n: u32) {
        let node = &self.nodes[n as usize];
        let ttl = self.groups.ttl_s(node.group);
        if ttl != f64::INFINITY {
            let entry = Deadline {
                at_s: node.last_access_s + ttl,
                seq: node.seq,
                node: n,
            };
            self.nodes[n as usize].queued = entry.seq;
            self.heap.push(Reverse(entry));
        }
    }

    /// Remove every block whose deadline is before `now`; how many were removed.
    pub(super) fn expire_until(&mut self, now: f64) -> usize {
        let mut removed = 0;
        while let Some(&Reverse(top)) = self.heap.peek() {
            if top.at_s >= now {
                break;
            }
            self.heap.pop();
            let node = &self.nodes[top.node as usize];
            if !node.alive || node.queued != top.seq {
                continue;
            }
            let deadline = node.last_access_s + self.groups.ttl_s(node.group);
            self.nodes[top.node as usize].queued = 0;
            if deadline < now {
                let k = self.remove_subtree(top.node, deadline);
                self.expired_blocks += k as u64;
                removed += k;
            } else {
                // Touched since it was queued.
                self.push_deadline(top.node);
            }
        }
        removed
    }
}
