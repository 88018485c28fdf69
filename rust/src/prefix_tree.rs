//! Prefix tree over KV-block hashes, with a TTL per group of blocks chosen by return on
//! investment (the Kareto tuner). Mirrors `python/ttlpolicy/reference/prefix_tree.py`
//! operation for operation; the rules (grouping, reuse intervals, expiry, bound, charging)
//! are stated there.
//!
//! Layout: nodes live in an arena (`Vec<Node>` with a free list); one hash map indexes
//! children by `(parent, hash)`; siblings, the LRU order and the idle groups are intrusive
//! lists or ordered maps so that insert does O(1) work per block. Deadlines sit in a lazy
//! min-heap with at most one live entry per block, re-pushed when popped if the block was
//! touched since: a touch does no heap work.

use std::cmp::{Ordering, Reverse};
use std::collections::{BTreeMap, BinaryHeap, HashMap, VecDeque};

use crate::error::{Error, Result};
use crate::solver::solve_ttl;
use crate::validate::{int_in, non_negative};

/// Largest `max_nodes`.
pub const MAX_NODES: i64 = 1 << 31;
/// Largest `group_depth`.
pub const MAX_GROUP_DEPTH: i64 = 64;
/// Largest `window`.
pub const MAX_WINDOW: i64 = 1 << 20;
/// Largest `max_idle_groups`.
pub const MAX_IDLE_GROUPS: i64 = 1 << 32;

const NIL: u32 = u32::MAX;
const ROOT: u32 = 0;

/// A snapshot of one group.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupStats {
    /// The hashes of the group's head path (length ≤ group_depth).
    pub key: Vec<i64>,
    /// Blocks held now.
    pub blocks: usize,
    /// Inserts that reached the group.
    pub accesses: u64,
    /// Blocks of the group found held by an insert.
    pub hits: u64,
    /// The last `window` reuse intervals, oldest first.
    pub reuse_s: Vec<f64>,
    /// `f64::INFINITY`: no TTL.
    pub ttl_s: f64,
    /// Time of the group's last access (None: never accessed).
    pub last_access_s: Option<f64>,
}

struct Group {
    key: Box<[i64]>,
    blocks: usize,
    accesses: u64,
    hits: u64,
    reuse: VecDeque<f64>,
    ttl_s: f64,
    last_access_s: Option<f64>,
    /// Creation order (the reference keeps groups in an insertion-ordered dict).
    created: u64,
    /// Position in the idle order while the group holds no blocks.
    idle_since: Option<u64>,
}

struct Node {
    hash: i64,
    parent: u32,
    first_child: u32,
    last_child: u32,
    prev_sib: u32,
    next_sib: u32,
    lru_prev: u32,
    lru_next: u32,
    group: u32,
    last_access_s: f64,
    created_s: f64,
    /// Sequence number of the last touch.
    seq: u64,
    /// `seq` of this block's one live heap entry (0: none).
    queued: u64,
    /// Id of the insert whose prefix holds this block (protected from eviction).
    mark: u64,
    alive: bool,
}

impl Node {
    fn new(hash: i64, parent: u32, group: u32, now: f64) -> Self {
        Node {
            hash,
            parent,
            first_child: NIL,
            last_child: NIL,
            prev_sib: NIL,
            next_sib: NIL,
            lru_prev: NIL,
            lru_next: NIL,
            group,
            last_access_s: now,
            created_s: now,
            seq: 0,
            queued: 0,
            mark: 0,
            alive: true,
        }
    }
}

/// A heap entry ordered like the reference's tuple `(deadline, seq, node)`.
#[derive(Clone, Copy)]
struct Deadline {
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

/// A TTL: a number >= 0, or infinity for none.
pub fn check_ttl(field: &str, x: f64) -> Result<f64> {
    if x.is_nan() || x < 0.0 {
        Err(Error::invalid_f64(field, x, ">= 0 (inf: no TTL)"))
    } else {
        Ok(x)
    }
}

/// Blocks held in one tier, as a tree of block-hash prefixes, grouped for per-group TTLs.
pub struct PrefixTree {
    max_nodes: usize,
    group_depth: usize,
    window: usize,
    max_idle_groups: usize,
    default_ttl_s: f64,
    nodes: Vec<Node>,
    free_nodes: Vec<u32>,
    children: HashMap<(u32, i64), u32>,
    len: usize,
    lru_head: u32,
    lru_tail: u32,
    heap: BinaryHeap<Reverse<Deadline>>,
    groups: Vec<Option<Group>>,
    free_groups: Vec<u32>,
    group_index: HashMap<Box<[i64]>, u32>,
    idle: BTreeMap<u64, u32>,
    group_counter: u64,
    idle_counter: u64,
    seq: u64,
    inserts: u64,
    now: f64,
    closed_block_s: f64,
    expired_blocks: u64,
    evicted_blocks: u64,
    // Scratch buffers reused by every insert.
    path: Vec<u32>,
    path_groups: Vec<u32>,
    stack: Vec<u32>,
    order: Vec<u32>,
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
            window,
            max_idle_groups,
            default_ttl_s,
            nodes: vec![Node::new(0, NIL, NIL, 0.0)],
            free_nodes: Vec::new(),
            children: HashMap::new(),
            len: 0,
            lru_head: NIL,
            lru_tail: NIL,
            heap: BinaryHeap::new(),
            groups: Vec::new(),
            free_groups: Vec::new(),
            group_index: HashMap::new(),
            idle: BTreeMap::new(),
            group_counter: 0,
            idle_counter: 0,
            seq: 0,
            inserts: 0,
            now: 0.0,
            closed_block_s: 0.0,
            expired_blocks: 0,
            evicted_blocks: 0,
            path: Vec::new(),
            path_groups: Vec::new(),
            stack: Vec::new(),
            order: Vec::new(),
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
        self.window
    }
    /// Idle groups kept at most.
    pub fn max_idle_groups(&self) -> usize {
        self.max_idle_groups
    }
    /// TTL of a group with none set.
    pub fn default_ttl_s(&self) -> f64 {
        self.default_ttl_s
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
        self.groups_in_order()
            .into_iter()
            .map(|g| GroupStats {
                key: g.key.to_vec(),
                blocks: g.blocks,
                accesses: g.accesses,
                hits: g.hits,
                reuse_s: g.reuse.iter().copied().collect(),
                ttl_s: g.ttl_s,
                last_access_s: g.last_access_s,
            })
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
        self.groups_in_order()
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
        let mut n = self.lru_head;
        while n != NIL {
            let node = &self.nodes[n as usize];
            total += now.min(node.last_access_s + self.group(node.group).ttl_s) - node.created_s;
            n = node.lru_next;
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
        let mut path = std::mem::take(&mut self.path);
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
        self.touch_groups(hashes, matched, now);
        let stored = hashes.len().min(self.max_nodes) - matched;
        self.make_room(stored, mark, now);
        let d = self.group_depth;
        for &h in &hashes[matched..matched + stored] {
            let group = self.path_groups[(path.len() + 1).min(d) - 1];
            let child = self.new_node(node, h, group, now);
            path.push(child);
            node = child;
        }
        // Leaf first, so that every parent is more recent than its children: the least
        // recently used block is then always a leaf.
        for &n in path.iter().rev() {
            self.touch(n, now);
        }
        self.path = path;
        self.trim_idle_groups();
        Ok(matched)
    }

    /// Remove every block past its group's TTL at `now`; returns how many were removed.
    pub fn expire(&mut self, now: f64) -> Result<usize> {
        let now = self.check_now(now)?;
        self.now = now;
        let removed = self.expire_until(now);
        self.trim_idle_groups();
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
            let g = self.group_id(key);
            self.group_mut(g).ttl_s = *ttl;
        }
        // Deadlines moved: rebuild the heap from the held blocks, oldest first.
        self.heap.clear();
        let mut n = self.lru_head;
        while n != NIL {
            self.nodes[n as usize].queued = 0;
            self.push_deadline(n);
            n = self.nodes[n as usize].lru_next;
        }
        self.trim_idle_groups();
        Ok(())
    }

    // ---- internals -------------------------------------------------------------------

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

    fn group(&self, g: u32) -> &Group {
        self.groups[g as usize].as_ref().expect("live group")
    }

    fn group_mut(&mut self, g: u32) -> &mut Group {
        self.groups[g as usize].as_mut().expect("live group")
    }

    fn groups_in_order(&self) -> Vec<&Group> {
        let mut out: Vec<&Group> = self.groups.iter().flatten().collect();
        out.sort_by_key(|g| g.created);
        out
    }

    fn make_idle(&mut self, g: u32) {
        self.idle_counter += 1;
        let at = self.idle_counter;
        self.group_mut(g).idle_since = Some(at);
        self.idle.insert(at, g);
    }

    /// The group named `key`, created (idle, default TTL) if not remembered.
    fn group_id(&mut self, key: &[i64]) -> u32 {
        if let Some(&g) = self.group_index.get(key) {
            return g;
        }
        self.group_counter += 1;
        let group = Group {
            key: key.into(),
            blocks: 0,
            accesses: 0,
            hits: 0,
            reuse: VecDeque::new(),
            ttl_s: self.default_ttl_s,
            last_access_s: None,
            created: self.group_counter,
            idle_since: None,
        };
        let g = match self.free_groups.pop() {
            Some(g) => {
                self.groups[g as usize] = Some(group);
                g
            }
            None => {
                self.groups.push(Some(group));
                (self.groups.len() - 1) as u32
            }
        };
        self.group_index.insert(key.into(), g);
        self.make_idle(g);
        g
    }

    /// One access (and one reuse sample) for each group on the path; block hits per group.
    fn touch_groups(&mut self, hashes: &[i64], matched: usize, now: f64) {
        let d = self.group_depth;
        let window = self.window;
        let mut out = std::mem::take(&mut self.path_groups);
        out.clear();
        for depth in 1..=hashes.len().min(d) {
            let g = self.group_id(&hashes[..depth]);
            let group = self.group_mut(g);
            if let Some(last) = group.last_access_s {
                if group.reuse.len() == window {
                    group.reuse.pop_front();
                }
                group.reuse.push_back(now - last);
            }
            group.last_access_s = Some(now);
            group.accesses += 1;
            if depth < d {
                group.hits += u64::from(matched >= depth);
            } else {
                group.hits += (matched + 1).saturating_sub(d) as u64;
            }
            out.push(g);
        }
        self.path_groups = out;
    }

    fn new_node(&mut self, parent: u32, hash: i64, group: u32, now: f64) -> u32 {
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
        // Append to the parent's children (insertion order, as the reference's dict).
        let last = self.nodes[parent as usize].last_child;
        if last == NIL {
            self.nodes[parent as usize].first_child = id;
        } else {
            self.nodes[last as usize].next_sib = id;
            self.nodes[id as usize].prev_sib = last;
        }
        self.nodes[parent as usize].last_child = id;
        self.children.insert((parent, hash), id);
        self.lru_push_back(id);
        self.len += 1;
        let g = self.group_mut(group);
        g.blocks += 1;
        let was_idle = if g.blocks == 1 {
            g.idle_since.take()
        } else {
            None
        };
        if let Some(at) = was_idle {
            self.idle.remove(&at);
        }
        id
    }

    fn touch(&mut self, n: u32, now: f64) {
        self.seq += 1;
        let node = &mut self.nodes[n as usize];
        node.last_access_s = now;
        node.seq = self.seq;
        self.lru_unlink(n);
        self.lru_push_back(n);
        if self.nodes[n as usize].queued == 0 {
            self.push_deadline(n);
        }
    }

    fn push_deadline(&mut self, n: u32) {
        let node = &self.nodes[n as usize];
        let ttl = self.group(node.group).ttl_s;
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

    fn expire_until(&mut self, now: f64) -> usize {
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
            let deadline = node.last_access_s + self.group(node.group).ttl_s;
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

    /// Evict least recently used leaves until `stored` new blocks fit; blocks of the prefix
    /// being inserted (marked) are skipped, not evicted.
    fn make_room(&mut self, stored: usize, mark: u64, now: f64) {
        while self.len + stored > self.max_nodes {
            let victim = self.lru_head;
            if self.nodes[victim as usize].mark == mark {
                self.lru_unlink(victim);
                self.lru_push_back(victim);
                continue;
            }
            let k = self.remove_subtree(victim, now);
            self.evicted_blocks += k as u64;
        }
    }

    /// Remove `top` and its descendants, charging each until min(t_remove, its deadline).
    fn remove_subtree(&mut self, top: u32, t_remove: f64) -> usize {
        let mut order = std::mem::take(&mut self.order);
        let mut stack = std::mem::take(&mut self.stack);
        order.clear();
        stack.clear();
        stack.push(top);
        while let Some(n) = stack.pop() {
            order.push(n);
            // Children pushed last-first, so the first child is visited first.
            let mut c = self.nodes[n as usize].last_child;
            while c != NIL {
                stack.push(c);
                c = self.nodes[c as usize].prev_sib;
            }
        }
        self.unlink_child(top);
        for &n in &order {
            let node = &self.nodes[n as usize];
            let (group, parent, hash) = (node.group, node.parent, node.hash);
            let charged =
                t_remove.min(node.last_access_s + self.group(group).ttl_s) - node.created_s;
            self.closed_block_s += charged;
            self.nodes[n as usize].alive = false;
            self.children.remove(&(parent, hash));
            self.lru_unlink(n);
            self.len -= 1;
            self.free_nodes.push(n);
            let g = self.group_mut(group);
            g.blocks -= 1;
            if g.blocks == 0 {
                self.make_idle(group);
            }
        }
        let k = order.len();
        self.order = order;
        self.stack = stack;
        k
    }

    fn unlink_child(&mut self, n: u32) {
        let (parent, prev, next) = {
            let node = &self.nodes[n as usize];
            (node.parent, node.prev_sib, node.next_sib)
        };
        if prev == NIL {
            self.nodes[parent as usize].first_child = next;
        } else {
            self.nodes[prev as usize].next_sib = next;
        }
        if next == NIL {
            self.nodes[parent as usize].last_child = prev;
        } else {
            self.nodes[next as usize].prev_sib = prev;
        }
    }

    fn lru_push_back(&mut self, n: u32) {
        let tail = self.lru_tail;
        {
            let node = &mut self.nodes[n as usize];
            node.lru_prev = tail;
            node.lru_next = NIL;
        }
        if tail == NIL {
            self.lru_head = n;
        } else {
            self.nodes[tail as usize].lru_next = n;
        }
        self.lru_tail = n;
    }

    fn lru_unlink(&mut self, n: u32) {
        let (prev, next) = {
            let node = &self.nodes[n as usize];
            (node.lru_prev, node.lru_next)
        };
        if prev == NIL {
            self.lru_head = next;
        } else {
            self.nodes[prev as usize].lru_next = next;
        }
        if next == NIL {
            self.lru_tail = prev;
        } else {
            self.nodes[next as usize].lru_prev = prev;
        }
    }

    fn trim_idle_groups(&mut self) {
        while self.idle.len() > self.max_idle_groups {
            let (_, g) = self.idle.pop_first().expect("non-empty");
            let group = self.groups[g as usize].take().expect("live group");
            self.group_index.remove(&group.key);
            self.free_groups.push(g);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(max_nodes: i64, ttl: f64) -> PrefixTree {
        PrefixTree::new(max_nodes, 2, 16, 1024, ttl).unwrap()
    }

    #[test]
    fn insert_counts_held_prefix() {
        let mut t = tree(100, f64::INFINITY);
        assert_eq!(t.insert(&[1, 2, 3], 0.0).unwrap(), 0);
        assert_eq!(t.insert(&[1, 2, 4], 1.0).unwrap(), 2);
        assert_eq!(t.match_len(&[1, 2, 3, 9]), 3);
        assert_eq!(t.len(), 4);
    }

    #[test]
    fn bound_evicts_least_recent_leaf_not_the_prefix() {
        let mut t = tree(5, 10.0);
        t.insert(&[1, 2, 3], 0.0).unwrap();
        t.insert(&[1, 2, 4], 1.0).unwrap();
        assert_eq!(t.insert(&[1, 2, 4, 5, 6, 7], 2.0).unwrap(), 3);
        assert_eq!(t.len(), 5);
        assert_eq!(t.match_len(&[1, 2, 3]), 2);
        assert_eq!(t.evicted_blocks(), 1);
    }

    #[test]
    fn expiry_charges_until_the_deadline() {
        let mut t = tree(5, 10.0);
        t.insert(&[1, 2, 3], 0.0).unwrap();
        t.insert(&[1, 2, 4], 1.0).unwrap();
        t.insert(&[1, 2, 4, 5, 6, 7], 2.0).unwrap();
        assert_eq!(t.expire(12.5).unwrap(), 5);
        assert!(t.is_empty());
        // Blocks 1, 2 held 0..12; 3 held 0..2 (evicted); 4 held 1..12; 5, 6 held 2..12.
        assert_eq!(t.block_seconds(20.0).unwrap(), 57.0);
        assert!(t.groups().iter().all(|g| g.blocks == 0));
    }

    #[test]
    fn refuses_time_going_back_and_bad_ttls() {
        let mut t = tree(5, 10.0);
        t.insert(&[1], 5.0).unwrap();
        assert!(t.insert(&[1], 4.0).is_err());
        assert!(t.set_group_ttls(&[(vec![1], f64::NAN)]).is_err());
        assert!(t.set_group_ttls(&[(vec![], 1.0)]).is_err());
        assert!(PrefixTree::new(0, 2, 16, 16, 1.0).is_err());
    }
}
