//! The blocks: tree nodes in an arena (a `Vec` with a free list), each in two index lists —
//! its parent's children (insertion order, as the reference's dict) and the LRU order of all
//! held blocks (a parent is always more recent than its children, so the least recently used
//! block is a leaf).

use super::PrefixTree;
use crate::index_list::{linked, IndexList, Link};

/// Parent and group of the root, which has neither.
pub(super) const NONE: u32 = u32::MAX;
pub(super) const ROOT: u32 = 0;

/// Tag of a node's list of children.
pub(super) struct Siblings;
/// Tag of the LRU list of held blocks.
pub(super) struct Lru;

pub(super) struct Node {
    pub(super) hash: i64,
    parent: u32,
    children: IndexList<Siblings>,
    sibling: Link,
    lru: Link,
    pub(super) group: u32,
    pub(super) last_access_s: f64,
    pub(super) created_s: f64,
    /// Sequence number of the last touch.
    pub(super) seq: u64,
    /// `seq` of this block's one live heap entry (0: none).
    pub(super) queued: u64,
    /// Id of the insert whose prefix holds this block (protected from eviction).
    pub(super) mark: u64,
    pub(super) alive: bool,
}

impl Node {
    pub(super) fn new(hash: i64, parent: u32, group: u32, now: f64) -> Self {
        Node {
            hash,
            parent,
            children: IndexList::new(),
            sibling: Link::new(),
            lru: Link::new(),
            group,
            last_access_s: now,
            created_s: now,
            seq: 0,
            queued: 0,
            mark: 0,
            alive: true,
        }
    }

    /// The next block in LRU order (more recently used), if any.
    pub(super) fn lru_next(&self) -> Option<u32> {
        self.lru.next()
    }
}

linked!(Node, Siblings, sibling);
linked!(Node, Lru, lru);

impl PrefixTree {
    /// A new block `hash` under `parent`, in `group`, held from `now`.
    pub(super) fn new_node(&mut self, parent: u32, hash: i64, group: u32, now: f64) -> u32 {
        let node = Node::new(hash, parent, group, now);
        let id = match self.free_nodes.pop() {
            Some(id) => {
                self.nodes[id as usize] = node;
                id
            }
            None => {
                self.nodes.push(node);
                (self.nodes.len() - 1) as u32
            }
        };
        let mut kids = self.nodes[parent as usize].children;
        kids.push_back(&mut self.nodes, id);
        self.nodes[parent as usize].children = kids;
        self.children.insert((parent, hash), id);
        self.lru.push_back(&mut self.nodes, id);
        self.len += 1;
        self.groups.hold_block(group);
        id
    }

    /// Block `n` was used at `now`: most recent in LRU order, its deadline moved.
    pub(super) fn touch(&mut self, n: u32, now: f64) {
        self.seq += 1;
        let node = &mut self.nodes[n as usize];
        node.last_access_s = now;
        node.seq = self.seq;
        self.lru.move_to_back(&mut self.nodes, n);
        if self.nodes[n as usize].queued == 0 {
            self.push_deadline(n);
        }
    }

    /// Evict least recently used leaves until `stored` new blocks fit; blocks of the prefix
    /// being inserted (marked) are skipped, not evicted.
    pub(super) fn make_room(&mut self, stored: usize, mark: u64, now: f64) {
        while self.len + stored > self.max_nodes {
            let victim = self
                .lru
                .front()
                .expect("a tree over its bound holds blocks");
            if self.nodes[victim as usize].mark == mark {
                self.lru.move_to_back(&mut self.nodes, victim);
                continue;
            }
            let k = self.remove_subtree(victim, now);
            self.evicted_blocks += k as u64;
        }
    }

    /// Remove `top` and its descendants, charging each until min(t_remove, its deadline).
    pub(super) fn remove_subtree(&mut self, top: u32, t_remove: f64) -> usize {
        let mut order = std::mem::take(&mut self.scratch.order);
        let mut stack = std::mem::take(&mut self.scratch.stack);
        order.clear();
        stack.clear();
        stack.push(top);
        while let Some(n) = stack.pop() {
            order.push(n);
            // Children pushed last-first, so the first child is visited first.
            stack.extend(self.nodes[n as usize].children.iter_rev(&self.nodes));
        }
        let parent = self.nodes[top as usize].parent;
        let mut kids = self.nodes[parent as usize].children;
        kids.unlink(&mut self.nodes, top);
        self.nodes[parent as usize].children = kids;
        for &n in &order {
            let node = &self.nodes[n as usize];
            let (group, parent, hash) = (node.group, node.parent, node.hash);
            let charged =
                t_remove.min(node.last_access_s + self.groups.ttl_s(group)) - node.created_s;
            self.closed_block_s += charged;
            self.nodes[n as usize].alive = false;
            self.children.remove(&(parent, hash));
            self.lru.unlink(&mut self.nodes, n);
            self.len -= 1;
            self.free_nodes.push(n);
            self.groups.release_block(group);
        }
        let k = order.len();
        self.scratch.order = order;
        self.scratch.stack = stack;
        k
    }
}
