//! Which program a call belongs to, told from its prompt's chained block hashes: for clients
//! that send no program id. Mirrors `python/ttlpolicy/reference/linker.py`, whose module doc
//! states every rule; the differential tests hold the two together.
//!
//! * [`finished`](ProgramLinker::finished) records a turn end: the *grid* points of its
//!   prompt and of its prompt + output ([`grid_positions`]: per level `j` the last
//!   [`RECORD_PER_LEVEL`] multiples of `2^j` below the end), each in an index keyed by
//!   `(tenant, hash)` that says which program recorded it (two programs: *ambiguous*);
//! * [`link`](ProgramLinker::link) descends the prompt's binary digits (block 0, then
//!   `g + 2^j` for `j` from the top down, moving on each recorded hash): at most
//!   [`probe_limit`] probes, whatever the prompt; the deepest point found links to its
//!   program unless it is ambiguous, forgotten, or shorter than `min_depth_fraction` of the
//!   program's latest prompt: `fork` when that program has a call running, else `continue`;
//!   otherwise `new`;
//! * bounded: `max_turn_ends` turn ends (none older than `max_age_s`) and `max_programs`
//!   programs, shared fairly: room for a tenant's new one is made from the table's oldest
//!   (least recent) unless the tenant holds more than that one's tenant, then from its own
//!   oldest.
//!
//! ```
//! use ttlpolicy_core::linker::{LinkKind, ProgramKey, ProgramLinker};
//!
//! let mut linker = ProgramLinker::new(1 << 10, 3600.0, 1 << 10, 0.9)?;
//! let first: Vec<u64> = (1..=40).collect();
//! let call = linker.link("tenant", &mut first.as_slice(), 0.0, None)?;
//! assert_eq!(call.kind, LinkKind::New);
//! linker.finished("tenant", &call.program, &mut first.as_slice(), 5.0, None)?;
//! // The next call extends the whole prompt: it continues the program.
//! let next: Vec<u64> = (1..=55).collect();
//! let again = linker.link("tenant", &mut next.as_slice(), 9.0, None)?;
//! assert_eq!((again.kind, &again.program), (LinkKind::Continue, &call.program));
//! // Another tenant's copy of the prompt links to nothing of this tenant.
//! let other = linker.link("stranger", &mut next.as_slice(), 9.0, None)?;
//! assert_eq!(other.kind, LinkKind::New);
//! assert!(matches!(other.program, ProgramKey::Linked(_)));
//! # Ok::<(), ttlpolicy_core::Error>(())
//! ```

use std::collections::VecDeque;
use std::sync::Arc;

use crate::error::{Error, PyFloat, Result};
use crate::fair_order::compact;
use crate::id_hash::IdMap;
use crate::policy::MAX_BLOCKS;
use crate::scheduler::check_id;
use crate::validate::{finite, int_in};

/// Turn ends a linker holds by default.
pub const DEFAULT_MAX_TURN_ENDS: i64 = 1 << 18;
/// Programs a linker holds by default.
pub const DEFAULT_MAX_PROGRAMS: i64 = 1 << 18;
/// How long a turn end is kept by default, seconds.
pub const DEFAULT_MAX_AGE_S: f64 = 86400.0;
/// The least share of a program's latest prompt a call must keep to link to it, by default.
pub const DEFAULT_MIN_DEPTH_FRACTION: f64 = 0.9;
/// The largest `max_turn_ends`.
pub const MAX_TURN_ENDS: i64 = 1 << 30;
/// The largest `max_programs`.
pub const MAX_PROGRAMS: i64 = 1 << 30;
/// The most blocks of a prompt (or prompt + output).
pub const MAX_PROMPT_BLOCKS: i64 = MAX_BLOCKS;
/// Grid points recorded per level.
pub const RECORD_PER_LEVEL: u64 = 2;
/// The largest program key the linker makes or accepts.
pub const MAX_PROGRAM_KEY: i64 = i64::MAX;

/// A program's key: one the linker made (`int` in Python), or a deployment's own id (`str`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ProgramKey {
    /// Made by the linker: 1, 2, ..., never reused.
    Linked(u64),
    /// A deployment's id.
    Named(Arc<str>),
}

/// What a call is to the programs the linker knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LinkKind {
    /// It continues `program`.
    Continue,
    /// It starts `program`, forked from `parent`, whose call is still running.
    Fork,
    /// It starts `program`.
    New,
}

impl LinkKind {
    /// The reference's name: `"continue"`, `"fork"`, `"new"`.
    pub fn as_str(self) -> &'static str {
        match self {
            LinkKind::Continue => "continue",
            LinkKind::Fork => "fork",
            LinkKind::New => "new",
        }
    }
}

/// Which program a call belongs to (see the module doc).
#[derive(Debug, Clone, PartialEq)]
pub struct Link {
    /// Continue, fork or new.
    pub kind: LinkKind,
    /// The call's program.
    pub program: ProgramKey,
    /// The program forked (forks only).
    pub parent: Option<ProgramKey>,
    /// The prompt's blocks found in the linked program's context (0: none).
    pub depth_blocks: i64,
    /// The blocks of the linked program's latest turn end (a fork: its parent's).
    pub context_blocks: i64,
}

/// A call's block hashes, read on demand: only the probed items are read (and checked).
pub trait BlockHashes {
    /// How many blocks.
    fn len(&self) -> usize;
    /// Whether there are none.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Block `i`'s hash (`i < len()`); an error names the item.
    fn hash_at(&mut self, i: usize) -> Result<u64>;
}

impl BlockHashes for &[u64] {
    fn len(&self) -> usize {
        <[u64]>::len(self)
    }
    fn hash_at(&mut self, i: usize) -> Result<u64> {
        Ok(self[i])
    }
}

/// The block positions a turn end of `n` blocks records, deepest first.
pub fn grid_positions(n: u64) -> Vec<u64> {
    let mut out: Vec<u64> = Vec::new();
    if n == 0 {
        return out;
    }
    let mut j = 0;
    loop {
        let m = (n - 1) >> j;
        for r in 0..RECORD_PER_LEVEL {
            if m >= r {
                let p = (m - r) << j;
                if !out.contains(&p) {
                    out.push(p);
                }
            }
        }
        if m == 0 {
            break;
        }
        j += 1;
    }
    out.sort_unstable_by(|a, b| b.cmp(a));
    out
}

/// The most probes a lookup of an `n`-block prompt makes.
pub fn probe_limit(n: u64) -> u32 {
    if n == 0 {
        0
    } else {
        1 + bit_length(n - 1)
    }
}

fn bit_length(x: u64) -> u32 {
    64 - x.leading_zeros()
}

#[derive(Debug, Clone)]
struct Program {
    tenant: u64,
    name: Option<Arc<str>>,
    live: i64,
    turn_ends: i64,
    context_blocks: i64,
    prompt_blocks: i64,
    seq: u64,
}

#[derive(Debug, Clone)]
struct Entry {
    program: u64,
    refs: u32,
    ambiguous: bool,
    time_s: f64,
}

#[derive(Debug, Clone)]
struct TurnEnd {
    /// Its number: turn ends are numbered in the order they are recorded.
    no: u64,
    /// Dropped (its points let go), but still in `turn_ends` until compacted or popped.
    dropped: bool,
    tenant: u64,
    program: u64,
    time_s: f64,
    hashes: Box<[u64]>,
}

#[derive(Debug, Clone)]
struct Tenant {
    name: Arc<str>,
    /// Programs and turn ends of the tenant: forgotten at 0.
    refs: u64,
    /// Its programs held.
    programs: u64,
    /// Its programs by last use, least recent first, stale entries as in `order`.
    order: VecDeque<(u64, u64)>,
    /// Its turn ends held.
    live_ends: u64,
    /// Its turn ends' numbers, oldest first; a dropped one's is stale.
    ends: VecDeque<u64>,
}

/// Tells a call's program from its prompt (see the module doc).
#[derive(Debug, Clone)]
pub struct ProgramLinker {
    max_turn_ends: i64,
    max_age_s: f64,
    max_programs: i64,
    min_depth_fraction: f64,
    /// Tenants holding state, by name and by number.
    tenants: IdMap<Arc<str>, u64>,
    tenant_refs: IdMap<u64, Tenant>,
    next_tenant: u64,
    index: IdMap<(u64, u64), Entry>,
    /// Turn ends, oldest first (so by number); dropped ones stay until they reach the front
    /// or are compacted away once they outnumber the held ones.
    turn_ends: VecDeque<TurnEnd>,
    /// Turn ends held (not dropped).
    live_ends: usize,
    next_end: u64,
    programs: IdMap<u64, Program>,
    /// Programs by last use, least recent first: (sequence number, serial). An entry whose
    /// program is gone or used since (its `seq` moved on) is stale: skipped, and dropped when
    /// stale entries outnumber the programs (a touch costs a push, not a tree's rebalancing).
    order: VecDeque<(u64, u64)>,
    named: IdMap<(u64, Arc<str>), u64>,
    next_serial: u64,
    next_seq: u64,
    now: f64,
}

impl ProgramLinker {
    /// A linker of at most `max_turn_ends` turn ends, none older than `max_age_s`, and
    /// `max_programs` programs; a call links to a program only when it keeps at least
    /// `min_depth_fraction` of the program's latest prompt.
    pub fn new(
        max_turn_ends: i64,
        max_age_s: f64,
        max_programs: i64,
        min_depth_fraction: f64,
    ) -> Result<Self> {
        let max_turn_ends = int_in("max_turn_ends", max_turn_ends, 1, MAX_TURN_ENDS)?;
        let max_age_s = finite("max_age_s", max_age_s)?;
        if max_age_s <= 0.0 {
            return Err(Error::invalid_f64("max_age_s", max_age_s, "> 0"));
        }
        let max_programs = int_in("max_programs", max_programs, 1, MAX_PROGRAMS)?;
        let fraction = finite("min_depth_fraction", min_depth_fraction)?;
        if !(0.0..=1.0).contains(&fraction) {
            return Err(Error::invalid_f64(
                "min_depth_fraction",
                fraction,
                "in [0, 1]",
            ));
        }
        Ok(ProgramLinker {
            max_turn_ends,
            max_age_s,
            max_programs,
            min_depth_fraction: fraction,
            tenants: IdMap::default(),
            tenant_refs: IdMap::default(),
            next_tenant: 0,
            index: IdMap::default(),
            turn_ends: VecDeque::new(),
            live_ends: 0,
            next_end: 0,
            programs: IdMap::default(),
            order: VecDeque::new(),
            named: IdMap::default(),
            next_serial: 1,
            next_seq: 0,
            now: f64::NEG_INFINITY,
        })
    }

    // -- the decision ------------------------------------------------------------------------

    /// The program of a call of `tenant` with these prompt block hashes; `program`: the
    /// call's own id, when the deployment allows one (no search).
    pub fn link<H: BlockHashes>(
        &mut self,
        tenant: &str,
        prompt: &mut H,
        now: f64,
        program: Option<&str>,
    ) -> Result<Link> {
        check_id("tenant", tenant)?;
        let n = check_len("prompt_hashes", prompt.len())?;
        let now = self.check_now(now)?;
        if let Some(name) = program {
            check_id("program", name)?;
        }
        let tno = self.tenants.get(tenant).copied();
        let found = match tno {
            Some(t) => self.descend(t, prompt, n, now)?,
            None => {
                // (nothing recorded for the tenant; the probes still check block 0)
                if n > 0 {
                    prompt.hash_at(0)?;
                }
                None
            }
        };
        self.advance(now);
        // (the tenant and the point stay: a live point holds its turn end, and so its tenant)
        let entry = match (tno, found) {
            (Some(t), Some((_, h))) => self.index.get(&(t, h)).cloned(),
            _ => None,
        };
        let deepest = entry.zip(found.map(|(g, _)| g));
        match program {
            Some(name) => Ok(self.link_named(tenant, name, deepest)),
            None => Ok(self.link_inferred(tenant, deepest)),
        }
    }

    /// `link` of a call that names its program: continues it, or makes it; `deepest`: the
    /// deepest recorded point's entry and position (its depth counts if it is the program's).
    fn link_named(&mut self, tenant: &str, name: &str, deepest: Option<(Entry, u64)>) -> Link {
        let t = self.intern(tenant);
        let serial = self.named.get(&(t, Arc::from(name))).copied();
        let kind = if serial.is_some() {
            LinkKind::Continue
        } else {
            LinkKind::New
        };
        let serial = match serial {
            Some(s) => s,
            None => self.new_program(t, Some(Arc::from(name))),
        };
        let prog = self.touch(serial);
        prog.live += 1;
        let context = prog.context_blocks;
        let depth = match deepest {
            Some((e, g)) if !e.ambiguous && e.program == serial => g as i64 + 1,
            _ => 0,
        };
        Link {
            kind,
            program: ProgramKey::Named(Arc::from(name)),
            parent: None,
            depth_blocks: depth,
            context_blocks: context,
        }
    }

    /// `link` of a call without a program id: the program whose unambiguous point it reaches
    /// deep enough continues (a fork when that program has a call running), else a new one.
    fn link_inferred(&mut self, tenant: &str, deepest: Option<(Entry, u64)>) -> Link {
        let matched = match deepest {
            Some((e, g)) if !e.ambiguous => self.programs.get(&e.program).and_then(|p| {
                let keeps = (g + 1) as f64 >= self.min_depth_fraction * p.prompt_blocks as f64;
                keeps.then_some((e.program, p.live, p.context_blocks, g))
            }),
            _ => None,
        };
        let t = self.intern(tenant);
        let Some((parent, live, context, g)) = matched else {
            return Link {
                kind: LinkKind::New,
                program: ProgramKey::Linked(self.new_live_program(t)),
                parent: None,
                depth_blocks: 0,
                context_blocks: 0,
            };
        };
        if live > 0 {
            self.touch(parent);
            let parent_key = self.key(parent);
            return Link {
                kind: LinkKind::Fork,
                program: ProgramKey::Linked(self.new_live_program(t)),
                parent: Some(parent_key),
                depth_blocks: g as i64 + 1,
                context_blocks: context,
            };
        }
        self.touch(parent).live += 1;
        Link {
            kind: LinkKind::Continue,
            program: self.key(parent),
            parent: None,
            depth_blocks: g as i64 + 1,
            context_blocks: context,
        }
    }

    /// A call of `program` ended: records its turn end (`hashes`: its prompt's blocks, then
    /// its output's; `prompt_blocks`: how many are the prompt, None: all). No hashes: an
    /// aborted call, nothing recorded. `Ok(false)` when the program is unknown (forgotten, or
    /// a key the linker did not make); a named program is made when unknown.
    pub fn finished<H: BlockHashes>(
        &mut self,
        tenant: &str,
        program: &ProgramKey,
        hashes: &mut H,
        now: f64,
        prompt_blocks: Option<i64>,
    ) -> Result<bool> {
        check_id("tenant", tenant)?;
        check_program(program)?;
        let n = check_len("hashes", hashes.len())?;
        let now = self.check_now(now)?;
        let k = match prompt_blocks {
            None => n,
            Some(k) => int_in("prompt_blocks", k, 0, n as i64)? as u64,
        };
        let points = turn_end_points(hashes, k, n)?;
        self.advance(now);
        let Some(serial) = self.finished_serial(tenant, program) else {
            return Ok(false);
        };
        let prog = self.touch(serial);
        prog.live = (prog.live - 1).max(0);
        let t = prog.tenant;
        if points.is_empty() {
            self.forget_if_idle(serial);
            return Ok(true);
        }
        self.record_turn_end(t, serial, points, now);
        let prog = self.programs.get_mut(&serial).expect("touched");
        prog.context_blocks = n as i64;
        prog.prompt_blocks = k as i64;
        Ok(true)
    }

    /// The serial of the program a call of `tenant` finished in: a named program is made
    /// when unknown; None for a linked key the linker does not know for the tenant.
    fn finished_serial(&mut self, tenant: &str, program: &ProgramKey) -> Option<u64> {
        match program {
            ProgramKey::Named(name) => {
                let t = self.intern(tenant);
                Some(match self.named.get(&(t, name.clone())) {
                    Some(&s) => s,
                    None => self.new_program(t, Some(name.clone())),
                })
            }
            ProgramKey::Linked(_) => self.serial(tenant, program),
        }
    }

    /// Records a turn end of program `serial` (tenant `t`) at `points`, dropping turn ends
    /// to keep at most `max_turn_ends` (module doc, "Bounded state").
    fn record_turn_end(&mut self, t: u64, serial: u64, points: Vec<u64>, now: f64) {
        // (counted first: making room must not forget this program; `finished` has just
        // made it the most recent)
        self.programs
            .get_mut(&serial)
            .expect("a known program")
            .turn_ends += 1;
        while self.live_ends as i64 >= self.max_turn_ends {
            let at = self.end_to_drop(t);
            self.drop_end(at);
        }
        for &h in &points {
            self.index
                .entry((t, h))
                .and_modify(|e| {
                    e.refs += 1;
                    e.ambiguous |= e.program != serial;
                    e.time_s = now;
                })
                .or_insert(Entry {
                    program: serial,
                    refs: 1,
                    ambiguous: false,
                    time_s: now,
                });
        }
        self.tenant_ref(t, 1);
        let no = self.next_end;
        self.next_end += 1;
        self.turn_ends.push_back(TurnEnd {
            no,
            dropped: false,
            tenant: t,
            program: serial,
            time_s: now,
            hashes: points.into_boxed_slice(),
        });
        self.live_ends += 1;
        let own = self.tenant_refs.get_mut(&t).expect("held above");
        own.ends.push_back(no);
        own.live_ends += 1;
    }

    /// The program is done: forgotten. `Ok(false)`: it was not known.
    pub fn end_program(&mut self, tenant: &str, program: &ProgramKey) -> Result<bool> {
        check_id("tenant", tenant)?;
        check_program(program)?;
        match self.serial(tenant, program) {
            Some(s) => {
                self.remove(s);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    // -- views -------------------------------------------------------------------------------

    /// Calls of the program running (linked, not finished); 0 for an unknown one.
    pub fn running(&self, tenant: &str, program: &ProgramKey) -> Result<i64> {
        check_id("tenant", tenant)?;
        check_program(program)?;
        Ok(self
            .serial(tenant, program)
            .map_or(0, |s| self.programs[&s].live))
    }

    /// Turn ends held.
    pub fn turn_end_count(&self) -> usize {
        self.live_ends
    }

    /// Programs held.
    pub fn program_count(&self) -> usize {
        self.programs.len()
    }

    /// Index entries (recorded block hashes).
    pub fn point_count(&self) -> usize {
        self.index.len()
    }

    /// The turn-end bound.
    pub fn max_turn_ends(&self) -> i64 {
        self.max_turn_ends
    }

    /// The age bound, seconds.
    pub fn max_age_s(&self) -> f64 {
        self.max_age_s
    }

    /// The program bound.
    pub fn max_programs(&self) -> i64 {
        self.max_programs
    }

    /// The least share of a program's latest prompt a call keeps to link to it.
    pub fn min_depth_fraction(&self) -> f64 {
        self.min_depth_fraction
    }

    // -- internals ---------------------------------------------------------------------------

    fn check_now(&self, now: f64) -> Result<f64> {
        let t = finite("now", now)?;
        if t < self.now {
            return Err(Error::invalid_f64(
                "now",
                t,
                format!(">= the last call's now ({})", PyFloat(self.now)),
            ));
        }
        Ok(t)
    }

    fn serial(&self, tenant: &str, program: &ProgramKey) -> Option<u64> {
        let t = *self.tenants.get(tenant)?;
        match program {
            ProgramKey::Named(name) => self.named.get(&(t, name.clone())).copied(),
            ProgramKey::Linked(s) => self
                .programs
                .get(s)
                .filter(|p| p.tenant == t && p.name.is_none())
                .map(|_| *s),
        }
    }

    fn key(&self, serial: u64) -> ProgramKey {
        match &self.programs[&serial].name {
            Some(name) => ProgramKey::Named(name.clone()),
            None => ProgramKey::Linked(serial),
        }
    }

    /// The deepest recorded point and its hash (see the module doc); None when block 0 is
    /// not recorded. Changes nothing: a point whose newest turn end is older than
    /// `max_age_s` counts as dropped already.
    fn descend<H: BlockHashes>(
        &self,
        tenant: u64,
        prompt: &mut H,
        n: u64,
        now: f64,
    ) -> Result<Option<(u64, u64)>> {
        let recorded = |h: u64| {
            self.index
                .get(&(tenant, h))
                .is_some_and(|e| now - e.time_s <= self.max_age_s)
        };
        if n == 0 {
            return Ok(None);
        }
        let h0 = prompt.hash_at(0)?;
        if !recorded(h0) {
            return Ok(None);
        }
        let (mut g, mut hg) = (0u64, h0);
        for j in (0..bit_length(n - 1)).rev() {
            let p = g + (1u64 << j);
            if p < n {
                let h = prompt.hash_at(p as usize)?;
                if recorded(h) {
                    (g, hg) = (p, h);
                }
            }
        }
        Ok(Some((g, hg)))
    }

    fn advance(&mut self, now: f64) {
        self.now = now;
        while let Some(e) = self.oldest_end() {
            if now - e.time_s <= self.max_age_s {
                break;
            }
            self.drop_end(0);
        }
    }

    /// The oldest turn end held, at the front of `turn_ends` (dropped ones before it let go).
    fn oldest_end(&mut self) -> Option<&TurnEnd> {
        while self.turn_ends.front().is_some_and(|e| e.dropped) {
            self.turn_ends.pop_front();
        }
        self.turn_ends.front()
    }

    /// Where in `turn_ends` the turn end that makes room for one of tenant `t` is (module
    /// doc, "Bounded state").
    fn end_to_drop(&mut self, t: u64) -> usize {
        let oldest = self.oldest_end().expect("a full table").tenant;
        let theirs = self.tenant_refs[&oldest].live_ends;
        let own = self.tenant_refs.get_mut(&t).expect("a held tenant");
        if own.live_ends > theirs {
            while let Some(&no) = own.ends.front() {
                match end_at(&self.turn_ends, no) {
                    Some(at) => return at,
                    None => own.ends.pop_front(),
                };
            }
            unreachable!("a tenant holding turn ends has a front one");
        }
        0
    }

    /// Drops the turn end at `at` in `turn_ends` (held): its points let go, its program
    /// forgotten when that was all it held.
    fn drop_end(&mut self, at: usize) {
        let e = &mut self.turn_ends[at];
        e.dropped = true;
        let end = TurnEnd {
            hashes: std::mem::take(&mut e.hashes),
            ..*e
        };
        self.live_ends -= 1;
        let turn_ends = &mut self.turn_ends;
        compact(turn_ends, self.live_ends, |e| !e.dropped);
        let own = self
            .tenant_refs
            .get_mut(&end.tenant)
            .expect("a held tenant");
        own.live_ends -= 1;
        compact(&mut own.ends, own.live_ends as usize, |&no| {
            end_at(turn_ends, no).is_some()
        });
        for &h in end.hashes.iter() {
            let key = (end.tenant, h);
            let e = self
                .index
                .get_mut(&key)
                .expect("a turn end's points are indexed");
            e.refs -= 1;
            if e.refs == 0 {
                self.index.remove(&key);
            }
        }
        if let Some(prog) = self.programs.get_mut(&end.program) {
            prog.turn_ends -= 1;
            self.forget_if_idle(end.program);
        }
        self.tenant_ref(end.tenant, -1);
    }

    fn forget_if_idle(&mut self, serial: u64) {
        let p = &self.programs[&serial];
        if p.live == 0 && p.turn_ends == 0 {
            self.remove(serial);
        }
    }

    fn remove(&mut self, serial: u64) {
        let Some(prog) = self.programs.remove(&serial) else {
            return;
        };
        if let Some(name) = prog.name {
            self.named.remove(&(prog.tenant, name));
        }
        let own = self
            .tenant_refs
            .get_mut(&prog.tenant)
            .expect("a held tenant");
        own.programs -= 1;
        let programs = &self.programs;
        compact(&mut own.order, own.programs as usize, |&(seq, serial)| {
            is_current(programs, seq, serial)
        });
        self.tenant_ref(prog.tenant, -1);
    }

    /// The program that makes room for one of tenant `t` (module doc, "Bounded state").
    fn program_to_forget(&mut self, t: u64) -> u64 {
        let oldest = front_program(&mut self.order, &self.programs).expect("a full table");
        let theirs = self.tenant_refs[&self.programs[&oldest].tenant].programs;
        let own = self.tenant_refs.get_mut(&t).expect("a held tenant");
        if own.programs > theirs {
            return front_program(&mut own.order, &self.programs).expect("a tenant's program");
        }
        oldest
    }

    fn new_program(&mut self, tenant: u64, name: Option<Arc<str>>) -> u64 {
        // (the tenant is held first: forgetting the least recent program must not forget it)
        self.tenant_ref(tenant, 1);
        if self.programs.len() as i64 >= self.max_programs {
            let gone = self.program_to_forget(tenant);
            self.remove(gone);
        }
        self.tenant_refs
            .get_mut(&tenant)
            .expect("held above")
            .programs += 1;
        let serial = self.next_serial;
        self.next_serial += 1;
        let seq = self.next_seq;
        self.next_seq += 1;
        if let Some(name) = &name {
            self.named.insert((tenant, name.clone()), serial);
        }
        self.programs.insert(
            serial,
            Program {
                tenant,
                name,
                live: 0,
                turn_ends: 0,
                context_blocks: 0,
                prompt_blocks: 0,
                seq,
            },
        );
        self.used(seq, serial);
        serial
    }

    /// A new linked program of tenant `t` with one call running.
    fn new_live_program(&mut self, t: u64) -> u64 {
        let serial = self.new_program(t, None);
        self.programs.get_mut(&serial).expect("just made").live += 1;
        serial
    }

    fn touch(&mut self, serial: u64) -> &mut Program {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.programs.get_mut(&serial).expect("a known program").seq = seq;
        self.used(seq, serial);
        self.programs.get_mut(&serial).expect("a known program")
    }

    /// `serial` was used at `seq`: its entry goes last in `order` and in its tenant's; stale
    /// entries are dropped once they outnumber the programs ([`compact`]).
    fn used(&mut self, seq: u64, serial: u64) {
        self.order.push_back((seq, serial));
        let programs = &self.programs;
        compact(&mut self.order, programs.len(), |&(seq, serial)| {
            is_current(programs, seq, serial)
        });
        let own = self
            .tenant_refs
            .get_mut(&programs[&serial].tenant)
            .expect("a held tenant");
        own.order.push_back((seq, serial));
        compact(&mut own.order, own.programs as usize, |&(seq, serial)| {
            is_current(programs, seq, serial)
        });
    }

    /// The tenant's number (made when new; it lives while programs or turn ends hold it).
    fn intern(&mut self, tenant: &str) -> u64 {
        if let Some(&no) = self.tenants.get(tenant) {
            return no;
        }
        let no = self.next_tenant;
        self.next_tenant += 1;
        let name: Arc<str> = Arc::from(tenant);
        self.tenants.insert(name.clone(), no);
        self.tenant_refs.insert(
            no,
            Tenant {
                name,
                refs: 0,
                programs: 0,
                order: VecDeque::new(),
                live_ends: 0,
                ends: VecDeque::new(),
            },
        );
        no
    }

    fn tenant_ref(&mut self, no: u64, delta: i64) {
        let t = self.tenant_refs.get_mut(&no).expect("an interned tenant");
        if delta > 0 {
            t.refs += 1;
            return;
        }
        t.refs -= 1;
        if t.refs == 0 {
            let gone = self.tenant_refs.remove(&no).expect("just seen");
            self.tenants.remove(&gone.name);
        }
    }
}

/// The least recently used program in `order` (stale entries before it are let go).
fn front_program(order: &mut VecDeque<(u64, u64)>, programs: &IdMap<u64, Program>) -> Option<u64> {
    while let Some(&(seq, serial)) = order.front() {
        if is_current(programs, seq, serial) {
            return Some(serial);
        }
        order.pop_front();
    }
    None
}

/// Where turn end `no` is in `turn_ends`, if it is held (ordered by number: a binary search).
fn end_at(turn_ends: &VecDeque<TurnEnd>, no: u64) -> Option<usize> {
    turn_ends
        .binary_search_by_key(&no, |e| e.no)
        .ok()
        .filter(|&at| !turn_ends[at].dropped)
}

/// Whether the recency entry (`seq`, `serial`) is its program's latest use (not stale).
fn is_current(programs: &IdMap<u64, Program>, seq: u64, serial: u64) -> bool {
    programs.get(&serial).is_some_and(|p| p.seq == seq)
}

/// The distinct hashes at the grid positions (`grid_positions`) of a turn end's prompt
/// (`k` blocks) and of its whole context (`n` blocks): the points recorded for it.
fn turn_end_points<H: BlockHashes>(hashes: &mut H, k: u64, n: u64) -> Result<Vec<u64>> {
    let mut points: Vec<u64> = Vec::new();
    for end in [k, n] {
        for p in grid_positions(end) {
            let h = hashes.hash_at(p as usize)?;
            if !points.contains(&h) {
                points.push(h);
            }
        }
    }
    Ok(points)
}

fn check_len(field: &str, n: usize) -> Result<u64> {
    if n as u64 > MAX_PROMPT_BLOCKS as u64 {
        return Err(Error::invalid(
            field,
            n,
            format!("at most {MAX_PROMPT_BLOCKS} blocks"),
        ));
    }
    Ok(n as u64)
}

fn check_program(program: &ProgramKey) -> Result<()> {
    match program {
        ProgramKey::Named(name) => check_id("program", name),
        ProgramKey::Linked(s) => {
            if *s == 0 || *s > MAX_PROGRAM_KEY as u64 {
                return Err(Error::invalid(
                    "program",
                    s,
                    format!("in [1, {MAX_PROGRAM_KEY}]"),
                ));
            }
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn linker() -> ProgramLinker {
        ProgramLinker::new(64, 100.0, 64, 0.9).unwrap()
    }

    fn run(l: &mut ProgramLinker, tenant: &str, prompt: &[u64], now: f64) -> Link {
        let link = l.link(tenant, &mut &prompt[..], now, None).unwrap();
        l.finished(tenant, &link.program, &mut &prompt[..], now, None)
            .unwrap();
        link
    }

    #[test]
    fn grid_is_dense_near_the_end() {
        assert_eq!(grid_positions(14), vec![13, 12, 10, 8, 0]);
        assert_eq!(grid_positions(1), vec![0]);
        assert!(grid_positions(0).is_empty());
        assert_eq!(probe_limit(1), 1);
        assert_eq!(probe_limit(1 << 20), 21);
    }

    #[test]
    fn a_continuation_links_and_a_shared_prefix_does_not() {
        let mut l = linker();
        let shared: Vec<u64> = (1..=20).collect();
        let a: Vec<u64> = shared.iter().copied().chain(100..130).collect();
        let b: Vec<u64> = shared.iter().copied().chain(200..230).collect();
        let la = run(&mut l, "t", &a, 0.0);
        let lb = run(&mut l, "t", &b, 1.0);
        assert_eq!(lb.kind, LinkKind::New);
        let a2: Vec<u64> = a.iter().copied().chain(300..310).collect();
        let next = run(&mut l, "t", &a2, 2.0);
        assert_eq!(next.kind, LinkKind::Continue);
        assert_eq!(next.program, la.program);
        assert_eq!(next.depth_blocks, a.len() as i64);
        // a third program sharing only the (now ambiguous) prefix starts anew
        let c: Vec<u64> = shared.iter().copied().chain(400..430).collect();
        assert_eq!(run(&mut l, "t", &c, 3.0).kind, LinkKind::New);
    }

    #[test]
    fn turn_ends_are_bounded_and_age_out() {
        let mut l = ProgramLinker::new(4, 10.0, 64, 0.9).unwrap();
        for i in 0..10u64 {
            let p: Vec<u64> = (i * 1000..i * 1000 + 50).collect();
            run(&mut l, "t", &p, i as f64);
        }
        assert_eq!(l.turn_end_count(), 4);
        let p: Vec<u64> = (5..9).collect();
        l.link("t", &mut &p[..], 100.0, None).unwrap();
        assert_eq!(l.turn_end_count(), 0);
        assert_eq!(l.point_count(), 0);
        // (the one running call's program stays)
        assert_eq!(l.program_count(), 1);
    }

    #[test]
    fn a_flooding_tenant_churns_its_own_share() {
        let mut l = ProgramLinker::new(8, 1e6, 8, 0.9).unwrap();
        let b: Vec<Vec<u64>> = (1..=2u64)
            .map(|i| (i * 1000..i * 1000 + 40).collect())
            .collect();
        let keys: Vec<ProgramKey> = b.iter().map(|p| run(&mut l, "b", p, 0.0).program).collect();
        for i in 0..50u64 {
            let p: Vec<u64> = (100_000 + i * 1000..100_040 + i * 1000).collect();
            run(&mut l, "a", &p, 1.0 + i as f64);
        }
        assert_eq!((l.program_count(), l.turn_end_count()), (8, 8));
        for (p, k) in b.iter().zip(&keys) {
            let next: Vec<u64> = p.iter().copied().chain([7]).collect();
            let link = l.link("b", &mut &next[..], 60.0, None).unwrap();
            assert_eq!((link.kind, &link.program), (LinkKind::Continue, k));
        }
    }

    #[test]
    fn a_tenants_queues_shrink_with_what_it_holds() {
        let mut l = ProgramLinker::new(1 << 12, 1e6, 1 << 12, 0.9).unwrap();
        let names: Vec<ProgramKey> = (0..2000)
            .map(|i| ProgramKey::Named(Arc::from(format!("p{i}"))))
            .collect();
        let p: Vec<u64> = (1..=8).collect();
        for k in &names {
            l.finished("a", k, &mut &p[..], 0.0, None).unwrap();
        }
        // every program but the last ended; the tenant lives on in its turn ends
        for k in &names[..1999] {
            assert!(l.end_program("a", k).unwrap());
        }
        let a = &l.tenant_refs[&l.tenants["a"]];
        assert_eq!(a.programs, 1);
        assert!(a.order.len() <= 18 && a.order.capacity() <= 4 * 18 + 64);
    }

    #[test]
    fn own_share_pops_still_give_a_shrunk_tenants_memory_back() {
        // (a review's case: "a" shrinks by the pops of its own share, which never made its
        // queue long enough to be compacted, and kept its peak's memory)
        let m = 4096usize;
        let mut l = ProgramLinker::new(1 << 12, 1e6, m as i64, 0.9).unwrap();
        let none: [u64; 0] = [];
        l.link("z", &mut &none[..], 0.0, Some("z0")).unwrap(); // least recent, 1 program
        let mut k = 0;
        while l.program_count() < m {
            l.link("a", &mut &none[..], 0.0, Some(&format!("p{k}")))
                .unwrap();
            k += 1;
        }
        let (mut front, mut next) = (0, k);
        for w in 0..k - 2 {
            let first = ProgramKey::Named(Arc::from(format!("p{front}")));
            l.end_program("a", &first).unwrap();
            l.link("w", &mut &none[..], 0.0, Some(&format!("w{w}")))
                .unwrap();
            // the own-share path
            l.link("a", &mut &none[..], 0.0, Some(&format!("p{next}")))
                .unwrap();
            next += 1;
            front += 2;
        }
        let a = &l.tenant_refs[&l.tenants["a"]];
        assert_eq!(a.programs, 2);
        assert!(a.order.capacity() <= 4 * 18 + 64, "{}", a.order.capacity());
    }

    #[test]
    fn a_tenant_whose_state_aged_out_starts_anew() {
        let mut l = ProgramLinker::new(8, 1.0, 8, 0.9).unwrap();
        let p: Vec<u64> = (1..30).collect();
        run(&mut l, "t", &p, 0.0);
        // (the tenant's last turn end ages out inside this very call)
        let next = l.link("t", &mut &p[..], 10.0, None).unwrap();
        assert_eq!(next.kind, LinkKind::New);
        assert_eq!(l.program_count(), 1);
    }

    #[test]
    fn bad_input_changes_nothing() {
        let mut l = linker();
        let p: Vec<u64> = (1..5).collect();
        let e = l.link("t", &mut &p[..], f64::NAN, None).unwrap_err();
        assert_eq!(e.to_string(), "now must be finite, got nan");
        let e = l
            .finished("t", &ProgramKey::Linked(0), &mut &p[..], 0.0, None)
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "program must be in [1, 9223372036854775807], got 0"
        );
        assert_eq!(l.program_count(), 0);
        assert!(l.tenants.is_empty());
    }
}
