//! Prefix tree over KV-block hashes, with a TTL per group of blocks chosen by return on
//! investment (the Kareto tuner). Mirrors `python/ttlpolicy/reference/prefix_tree.py`
//! operation for operation; the rules (grouping, reuse intervals, expiry, bound, charging)
//! are stated there.
//!
//! By concern: `blocks` (the nodes: an arena, children and LRU order as index lists, eviction
//! and removal), `groups` (group statistics, reuse intervals, TTLs, idle groups), `expiry`
//! (deadlines in a lazy heap). This module holds the tree and its public operations. One hash
//! map indexes children by `(parent, hash)`, so insert does O(1) work per block.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

use crate::error::{Error, Result};
use crate::index_list::IndexList;
use crate::solver::solve_ttl;
use crate::validate::{int_in, non_negative};

mod blocks;
mod expiry;
mod groups;
#[cfg(test)]
mod tests;

use blocks::{Lru, Node, NONE, ROOT};
pub use expiry::check_ttl;
use expiry::Deadline;
pub use groups::GroupStats;
use groups::Groups;

/// Largest `max_nodes`.
pub const MAX_NODES: i64 = 1 << 31;
/// Largest `group_depth`.
pub const MAX_GROUP_DEPTH: i64 = 64;
/// Largest `window`.
pub const MAX_WINDOW: i64 = 1 << 20;
/// Largest `max_idle_groups`.
pub const MAX_IDLE_GROUPS: i64 = 1 << 32;

/// Buffers reused by every insert (no allocation per call once warm).
#[derive(Default)]
struct Scratch {
    /// The blocks of the request being inserted, root side first.
    path: Vec<u32>,
    /// The groups on that path, depth 1 first.
    path_groups: Vec<u32>,
    /// Subtree removal: nodes to visit, and the visiting order.
    stack: Vec<u32>,
    order: Vec<u32>,
}

/// Blocks held in one tier, as a tree of block-hash prefixes, grouped for per-group TTLs.
pub struct PrefixTree {
    max_nodes: usize,
    group_depth: usize,
    nodes: Vec<Node>,
    free_nodes: Vec<u32>,
    children: HashMap<(u32, i64), u32>,
    /// Held blocks, least recently used first.
    lru: IndexList<Lru>,
    len: usize,
    heap: BinaryHeap<Reverse<Deadline>>,
    groups: Groups,
    /// Touch sequence number; insert sequence number (marks the prefix being inserted).
    seq: u64,
    inserts: u64,
    now: f64,
    closed_block_s: f64,
    expired_blocks: u64,
    evicted_blocks: u64,
    scratch: Scratch,
}

impl PrefixTree {
    /// Default `max_nodes` (blocks held; least recently used evicted beyond).
    pub const DEFAULT_MAX_NODES: i64 = 1 << 20;
    /// Default `group_depth` (blocks of the head path that name a group).
    pub const DEFAULT_GROUP_DEPTH: i64 = 2;
    /// Default `window` (reuse intervals kept per group).
    pub const DEFAULT_WINDOW: i64 = 256;
    /// Default `max_idle_groups` (groups holding no block kept for their statistics).
    pub const DEFAULT_MAX_IDLE_GROUPS: i64 = 1 << 16;
    /// Default `default_ttl_s` (infinity: no TTL until one is set).
    pub const DEFAULT_TTL_S: f64 = f64::INFINITY;

    /// An empty tree; see the module doc for the arguments.
    pub fn new(
        max_nodes: i64,
        group_depth: i64,
        window: i64,
        max_idle_groups: i64,
        default_ttl_s: f64,
    ) -> Result<Self> {
        let max_nodes = int_in("max_nodes", max_nodes, 1, MAX_NODES)? as usize;
        let group_depth = int_in("group_depth", group_depth, 1, MAX_GROUP_DEPTH)? as usize;
        let window = int_in("window", window, 1, MAX_WINDOW)? as usize;
        let max_idle_groups =
            int_in("max_idle_groups", max_idle_groups, 0, MAX_IDLE_GROUPS)? as usize;
        let default_ttl_s = check_ttl("default_ttl_s", default_ttl_s)?;
        Ok(PrefixTree {
            max_nodes,
            group_depth,
            nodes: vec![Node::new(0, NONE, NONE, 0.0)],
            free_nodes: Vec::new(),
            children: HashMap::new(),
            lru: IndexList::new(),
            len: 0,
            heap: BinaryHeap::new(),
            groups: Groups::new(window, max_idle_groups, default_ttl_s),
            seq: 0,
            inserts: 0,
            now: 0.0,
            closed_block_s: 0.0,
            expired_blocks: 0,
            evicted_blocks: 0,
            scratch: Scratch::default(),
        })
    }

    /// Blocks held at most.
    pub fn max_nodes(&self) -> usize {
        self.max_nodes
    }
    /// Head-path blocks that name a group.
    pub fn group_depth(&self) -> usize {
        self.group_depth
    }
    /// Reuse intervals kept per group.
    pub fn window(&self) -> usize {
        self.groups.window()
    }
    /// Idle groups kept at most.
    pub fn max_idle_groups(&self) -> usize {
        self.groups.max_idle()
    }
    /// TTL of a group with none set.
    pub fn default_ttl_s(&self) -> f64 {
        self.groups.default_ttl_s()
    }
    /// Blocks removed by `expire` so far.
    pub fn expired_blocks(&self) -> u64 {
        self.expired_blocks
    }
    /// Blocks evicted by the `max_nodes` cap so far.
    pub fn evicted_blocks(&self) -> u64 {
        self.evicted_blocks
    }
    /// Blocks held.
    pub fn len(&self) -> usize {
        self.len
    }
    /// Whether no block is held.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    // ---- queries (read-only) ---------------------------------------------------------

    /// Leading blocks of `hashes` held now (as of the last insert or expire).
    pub fn match_len(&self, hashes: &[i64]) -> usize {
        let mut node = ROOT;
        for (n, &h) in hashes.iter().enumerate() {
            match self.children.get(&(node, h)) {
                Some(&c) => node = c,
                None => return n,
            }
        }
        hashes.len()
    }

    /// Every remembered group, in creation order.
    pub fn groups(&self) -> Vec<GroupStats> {
        self.groups
            .in_order()
            .into_iter()
            .map(|g| g.stats())
            .collect()
    }

    /// τ_g = solve_ttl(reuse intervals of g, benefit_per_hit, price_per_block_s, max_ttl_s)
    /// for every group, in creation order (a group without samples gets 0). Changes nothing.
    pub fn group_ttls(
        &self,
        benefit_per_hit: f64,
        price_per_block_s: f64,
        max_ttl_s: f64,
    ) -> Result<Vec<(Vec<i64>, f64)>> {
        let benefit = non_negative("benefit_per_hit", benefit_per_hit)?;
        let price = non_negative("price_per_block_s", price_per_block_s)?;
        let cap = non_negative("max_ttl_s", max_ttl_s)?;
        let mut samples = Vec::new();
        self.groups
            .in_order()
            .into_iter()
            .map(|g| {
                samples.clear();
                samples.extend(g.reuse.iter().copied());
                Ok((g.key.to_vec(), solve_ttl(&samples, benefit, price, cap)?.0))
            })
            .collect()
    }

    /// Block-seconds held so far: removed blocks as charged, held ones until
    /// min(now, deadline).
    pub fn block_seconds(&self, now: f64) -> Result<f64> {
        let now = self.check_now(now)?;
        let mut total = self.closed_block_s;
        for n in self.lru.iter(&self.nodes) {
            let node = &self.nodes[n as usize];
            total += now.min(node.last_access_s + self.groups.ttl_s(node.group)) - node.created_s;
        }
        Ok(total)
    }

    // ---- updates ---------------------------------------------------------------------

    /// Store a request's blocks at time `now`; returns how many leading blocks were held.
    pub fn insert(&mut self, hashes: &[i64], now: f64) -> Result<usize> {
        let now = self.check_now(now)?;
        self.now = now;
        self.expire_until(now);
        self.inserts += 1;
        let mark = self.inserts;
        let mut path = std::mem::take(&mut self.scratch.path);
        path.clear();
        let mut node = ROOT;
        for &h in hashes {
            match self.children.get(&(node, h)) {
                Some(&c) => {
                    self.nodes[c as usize].mark = mark;
                    path.push(c);
                    node = c;
                }
                None => break,
            }
        }
        let matched = path.len();
        let d = self.group_depth;
        let mut path_groups = std::mem::take(&mut self.scratch.path_groups);
        self.groups
            .access(hashes, matched, d, now, &mut path_groups);
        let stored = hashes.len().min(self.max_nodes) - matched;
        self.make_room(stored, mark, now);
        for &h in &hashes[matched..matched + stored] {
            let group = path_groups[(path.len() + 1).min(d) - 1];
            let child = self.new_node(node, h, group, now);
            path.push(child);
            node = child;
        }
        // Leaf first, so that every parent is more recent than its children: the least
        // recently used block is then always a leaf.
        for &n in path.iter().rev() {
            self.touch(n, now);
        }
        self.scratch.path = path;
        self.scratch.path_groups = path_groups;
        self.groups.trim_idle();
        Ok(matched)
    }

    /// Remove every block past its group's TTL at `now`; returns how many were removed.
    pub fn expire(&mut self, now: f64) -> Result<usize> {
        let now = self.check_now(now)?;
        self.now = now;
        let removed = self.expire_until(now);
        self.groups.trim_idle();
        Ok(removed)
    }

    /// Set the TTL of the groups named by the keys (creating those not yet seen).
    pub fn set_group_ttls(&mut self, ttls: &[(Vec<i64>, f64)]) -> Result<()> {
        for (key, ttl) in ttls {
            if key.is_empty() || key.len() > self.group_depth {
                return Err(Error::invalid(
                    "group key",
                    format!("{key:?}"),
                    format!("1 to {} hashes long", self.group_depth),
                ));
            }
            check_ttl(&format!("ttls[{key:?}]"), *ttl)?;
        }
        for (key, ttl) in ttls {
            let g = self.groups.id(key);
            self.groups.set_ttl_s(g, *ttl);
        }
        // Deadlines moved: rebuild the heap from the held blocks, oldest first.
        self.heap.clear();
        let mut at = self.lru.front();
        while let Some(n) = at {
            self.nodes[n as usize].queued = 0;
            self.push_deadline(n);
            at = self.nodes[n as usize].lru_next();
        }
        self.groups.trim_idle();
        Ok(())
    }

    fn check_now(&self, now: f64) -> Result<f64> {
        let t = non_negative("now", now)?;
        if t < self.now {
            return Err(Error::invalid_f64(
                "now",
                t,
                format!(
                    "not before the last time seen, {}",
                    crate::error::PyFloat(self.now)
                ),
            ));
        }
        Ok(t)
    }
}
