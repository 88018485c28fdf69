//! The groups of a prefix tree: named by their key, they outlive their blocks; each keeps its
//! access counts, reuse intervals and TTL. Groups without blocks are idle, and at most
//! `max_idle_groups` of them are remembered (the longest idle is forgotten first).

use std::collections::{BTreeMap, HashMap, VecDeque};

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

pub(super) struct Group {
    pub(super) key: Box<[i64]>,
    blocks: usize,
    accesses: u64,
    hits: u64,
    pub(super) reuse: VecDeque<f64>,
    pub(super) ttl_s: f64,
    last_access_s: Option<f64>,
    /// Creation order (the reference keeps groups in an insertion-ordered dict).
    created: u64,
    /// Position in the idle order while the group holds no blocks.
    idle_since: Option<u64>,
}

impl Group {
    pub(super) fn stats(&self) -> GroupStats {
        GroupStats {
            key: self.key.to_vec(),
            blocks: self.blocks,
            accesses: self.accesses,
            hits: self.hits,
            reuse_s: self.reuse.iter().copied().collect(),
            ttl_s: self.ttl_s,
            last_access_s: self.last_access_s,
        }
    }
}

/// Every remembered group, by id (a slab with a free list) and by key.
pub(super) struct Groups {
    /// Reuse intervals kept per group.
    window: usize,
    max_idle: usize,
    default_ttl_s: f64,
    slots: Vec<Option<Group>>,
    free: Vec<u32>,
    index: HashMap<Box<[i64]>, u32>,
    /// Idle groups by the time they became idle.
    idle: BTreeMap<u64, u32>,
    created: u64,
    idle_counter: u64,
}

impl Groups {
    pub(super) fn new(window: usize, max_idle: usize, default_ttl_s: f64) -> Self {
        Groups {
            window,
            max_idle,
            default_ttl_s,
            slots: Vec::new(),
            free: Vec::new(),
            index: HashMap::new(),
            idle: BTreeMap::new(),
            created: 0,
            idle_counter: 0,
        }
    }

    pub(super) fn window(&self) -> usize {
        self.window
    }

    pub(super) fn max_idle(&self) -> usize {
        self.max_idle
    }

    pub(super) fn default_ttl_s(&self) -> f64 {
        self.default_ttl_s
    }

    pub(super) fn get(&self, g: u32) -> &Group {
        self.slots[g as usize].as_ref().expect("live group")
    }

    fn get_mut(&mut self, g: u32) -> &mut Group {
        self.slots[g as usize].as_mut().expect("live group")
    }

    pub(super) fn ttl_s(&self, g: u32) -> f64 {
        self.get(g).ttl_s
    }

    pub(super) fn set_ttl_s(&mut self, g: u32, ttl_s: f64) {
        self.get_mut(g).ttl_s = ttl_s;
    }

    /// Every remembered group, in creation order.
    pub(super) fn in_order(&self) -> Vec<&Group> {
        let mut out: Vec<&Group> = self.slots.iter().flatten().collect();
        out.sort_by_key(|g| g.created);
        out
    }

    fn make_idle(&mut self, g: u32) {
        self.idle_counter += 1;
        let at = self.idle_counter;
        self.get_mut(g).idle_since = Some(at);
        self.idle.insert(at, g);
    }

    /// The group named `key`, created (idle, default TTL) if not remembered.
    pub(super) fn id(&mut self, key: &[i64]) -> u32 {
        if let Some(&g) = self.index.get(key) {
            return g;
        }
        self.created += 1;
        let group = Group {
            key: key.into(),
            blocks: 0,
            accesses: 0,
            hits: 0,
            reuse: VecDeque::new(),
            ttl_s: self.default_ttl_s,
            last_access_s: None,
            created: self.created,
            idle_since: None,
        };
        let g = match self.free.pop() {
            Some(g) => {
                self.slots[g as usize] = Some(group);
                g
            }
            None => {
                self.slots.push(Some(group));
                (self.slots.len() - 1) as u32
            }
        };
        self.index.insert(key.into(), g);
        self.make_idle(g);
        g
    }

    /// One access (and one reuse sample) for each group on the path of `hashes`, whose first
    /// `matched` blocks were held; block hits per group. The path's groups, depth 1 first,
    /// are written to `out`.
    pub(super) fn access(
        &mut self,
        hashes: &[i64],
        matched: usize,
        group_depth: usize,
        now: f64,
        out: &mut Vec<u32>,
    ) {
        let d = group_depth;
        let window = self.window;
        out.clear();
        for depth in 1..=hashes.len().min(d) {
            let g = self.id(&hashes[..depth]);
            let group = self.get_mut(g);
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
    }

    /// Group `g` holds one more block (it is no longer idle).
    pub(super) fn hold_block(&mut self, g: u32) {
        let group = self.get_mut(g);
        group.blocks += 1;
        let was_idle = if group.blocks == 1 {
            group.idle_since.take()
        } else {
            None
        };
        if let Some(at) = was_idle {
            self.idle.remove(&at);
        }
    }

    /// Group `g` holds one block fewer (idle when it holds none).
    pub(super) fn release_block(&mut self, g: u32) {
        let group = self.get_mut(g);
        group.blocks -= 1;
        if group.blocks == 0 {
            self.make_idle(g);
        }
    }

    /// Forget the longest-idle groups beyond `max_idle`.
    pub(super) fn trim_idle(&mut self) {
        while self.idle.len() > self.max_idle {
            let (_, g) = self.idle.pop_first().expect("non-empty");
            let group = self.slots[g as usize].take().expect("live group");
            self.index.remove(&group.key);
            self.free.push(g);
        }
    }
}
