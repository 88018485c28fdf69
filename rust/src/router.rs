//! Which engine instance serves a program's next call, when many serve one workload.
//! Mirrors `python/ttlpolicy/reference/router.py`, whose module doc states every rule; the
//! differential tests hold the two together.
//!
//! The router keeps each instance's last reported state and each program's *home* (the
//! instance that served its last call) with the live pin it holds there, and prices a call
//! with the TTL model's own terms, read from the [`TTLPolicy`] passed to each
//! [`route`](ProgramRouter::route): a lost context costs what a pin saves, `loss` =
//! `miss + η · T` ([`TTLPolicy::miss_cost_s`], [`TTLPolicy::eta`],
//! [`TTLPolicy::out_of_order_cost_s`]), and `T` is also the wait of a call short of memory.
//!
//! * wait at an instance = `n · miss_cost_s(tokens / n)` over the calls it waits behind,
//!   plus `T` when the call does not fit (free blocks, and room beside load control's
//!   working set); a returning call at its home waits behind the *return queue* only
//!   (`return_queue_len`, `return_queued_tokens`: program-level FCFS serves it ahead of
//!   newer programs), any other call behind the whole queue (it is a new program there);
//!   at the home, the working set counts the program already (only its growth over its last
//!   call's blocks is new) and a live pin's blocks come off the call's need;
//! * a returning call costs the wait at its home, plus `(1 − cached_fraction) · loss`
//!   without a live pin; elsewhere the wait plus `loss`; it stays unless another costs less;
//! * a new program costs the wait; ties: the home, then the most room, then registration;
//! * [`evicted`](ProgramRouter::evicted): the home lost the program's context (it holds at
//!   most half of its last call's blocks); the program is forgotten and routes as new;
//! * [`drain`](ProgramRouter::drain) takes an instance out and releases its programs;
//!   [`remove_instance`](ProgramRouter::remove_instance) also frees its slot;
//! * a cost that is not a number (`0 · inf`) counts as `+inf`: it never wins by scan order;
//! * [`pinned`](ProgramRouter::pinned) is a claim checked against the router's record: an
//!   expired pin, one for a program homed at another instance, or one for an unknown
//!   program while the table is full sets no home.
//!
//! ```
//! use ttlpolicy_core::policy::{PolicyConfig, TTLPolicy};
//! use ttlpolicy_core::router::{ProgramRouter, Report};
//!
//! let policy = TTLPolicy::new(PolicyConfig::default())?;
//! let mut router = ProgramRouter::new(8, 1000)?;
//! for id in ["a", "b"] {
//!     router.add_instance(id)?;
//!     let report = Report { free_blocks: 100, total_blocks: 100, ..Report::default() };
//!     router.report(id, &report)?;
//! }
//! let first = router.route(&policy, "P", 0.0, 10, 640)?.to_owned();
//! // Its instance pinned its context: the program's next call goes back there.
//! router.pinned(&first, "P", 30.0, 10, None)?;
//! assert_eq!(router.route(&policy, "P", 5.0, 12, 700)?, first);
//! // The instance dies: its programs are released and route elsewhere.
//! assert_eq!(router.drain(&first)?, vec!["P".to_owned()]);
//! assert_ne!(router.route(&policy, "P", 6.0, 12, 700)?, first);
//! # Ok::<(), ttlpolicy_core::Error>(())
//! ```

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::error::{Error, PyFloat, PyStr, Result};
use crate::id_hash::IdMap;
use crate::policy::{TTLPolicy, MAX_BLOCKS};
use crate::scheduler::check_id;
use crate::tenants::tenant_of;
use crate::validate::{finite, int_in};

/// Instances a router holds by default.
pub const DEFAULT_MAX_INSTANCES: i64 = 1024;
/// Programs a router remembers by default.
pub const DEFAULT_MAX_PROGRAMS: i64 = 1 << 20;
/// The largest `max_instances`.
pub const MAX_INSTANCES: i64 = 1 << 16;
/// The largest `max_programs`.
pub const MAX_PROGRAMS: i64 = 1 << 30;

/// What an instance reports (see [`ProgramRouter::report`]).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Report {
    /// KV blocks free now.
    pub free_blocks: i64,
    /// KV blocks in all.
    pub total_blocks: i64,
    /// Calls waiting.
    pub queue_len: i64,
    /// Their uncached prompt tokens.
    pub queued_tokens: i64,
    /// Load control's working set, blocks.
    pub working_set_blocks: i64,
    /// The fraction of returning calls' prefixes found cached, in [0, 1].
    pub cached_fraction: f64,
    /// The calls a returning call of a program served here waits behind (a part of the
    /// queue; given with `return_queued_tokens`). None: the whole queue (a FCFS engine).
    pub return_queue_len: Option<i64>,
    /// Their uncached prompt tokens (given with `return_queue_len`).
    pub return_queued_tokens: Option<i64>,
}

#[derive(Debug, Clone)]
struct Instance {
    id: Arc<str>,
    routable: bool,
    reported: bool,
    state: Report,
    /// The return queue: calls and their tokens (the whole queue when not reported).
    returns: (i64, i64),
}

impl Instance {
    fn new(id: Arc<str>) -> Self {
        Instance {
            id,
            routable: true,
            reported: false,
            state: Report::default(),
            returns: (0, 0),
        }
    }
}

#[derive(Debug, Clone)]
struct Program {
    home: usize,
    /// Its last call's `blocks_needed` (at its home).
    blocks: i64,
    pin_deadline_s: Option<f64>,
    pin_blocks: i64,
    seq: u64,
}

/// Routes programs' calls over engine instances (see the module doc). Bounded: at most
/// `max_instances` instances and `max_programs` programs, shared fairly among tenants (the
/// least recently routed or pinned forgotten first, unless the new program's tenant holds
/// more than that one's, then its own least recent).
#[derive(Debug, Clone)]
pub struct ProgramRouter {
    max_instances: i64,
    max_programs: i64,
    instances: Vec<Instance>,
    index: IdMap<Arc<str>, usize>,
    programs: IdMap<Arc<str>, Program>,
    /// Programs by last use: sequence number → program.
    order: BTreeMap<u64, Arc<str>>,
    /// Each tenant's programs (`tenant_of` their ids) by last use; a tenant with none is not
    /// kept.
    tenant_order: IdMap<Box<str>, BTreeMap<u64, Arc<str>>>,
    next_seq: u64,
    now: f64,
}

/// One `route` call's checked arguments and what it weighs for each instance.
struct Ask {
    t: f64,
    prefix: i64,
    /// Blocks the call needs where nothing of its program is kept.
    need_all: i64,
    /// Blocks it needs at its home while its pin lives there.
    kept_need: i64,
    /// Blocks its home's working set grows by (its program's last call counted there).
    home_grow: i64,
    home: Option<usize>,
    live_pin: bool,
    wait_memory_s: f64,
    /// What leaving the program's context costs (its miss, and its wait for memory).
    loss: f64,
}

impl Ask {
    /// The call's context is kept at instance `i`: its home, with a live pin.
    fn kept(&self, i: usize) -> bool {
        self.home == Some(i) && self.live_pin
    }

    /// (blocks needed, working-set growth) at instance `i`: one place for both the cost and
    /// the commit.
    fn need_grow(&self, i: usize) -> (i64, i64) {
        let need = if self.kept(i) {
            self.kept_need
        } else {
            self.need_all
        };
        let grow = if self.home == Some(i) {
            self.home_grow
        } else {
            self.need_all
        };
        (need, grow)
    }

    /// (expected seconds before the call runs and what leaving its context costs, room
    /// left in the working set) at instance `i`.
    fn cost(&self, policy: &TTLPolicy, i: usize, inst: &Instance) -> Result<(f64, i64)> {
        let s = &inst.state;
        let at_home = self.home == Some(i);
        let (need, grow) = self.need_grow(i);
        // a return at its home waits behind the return queue; a new program, the whole
        let (ahead, ahead_tokens) = if at_home {
            inst.returns
        } else {
            (s.queue_len, s.queued_tokens)
        };
        let mut queue_s = 0.0;
        if ahead > 0 {
            queue_s = ahead as f64 * policy.miss_cost_s(ahead_tokens / ahead, 0)?;
        }
        // (load control never holds back a program it admitted: at its home only memory)
        let fits =
            need <= s.free_blocks && (at_home || s.working_set_blocks + grow <= s.total_blocks);
        let mut cost = if fits {
            queue_s
        } else {
            queue_s + self.wait_memory_s
        };
        if self.home.is_some() {
            if !at_home {
                cost += self.loss;
            } else if !self.live_pin {
                cost += (1.0 - s.cached_fraction) * self.loss;
            }
        }
        if cost.is_nan() {
            // (0 · inf): never the best by scan order
            cost = f64::INFINITY;
        }
        Ok((cost, s.total_blocks - s.working_set_blocks - grow))
    }
}

impl ProgramRouter {
    /// A router of at most `max_instances` instances and `max_programs` programs.
    pub fn new(max_instances: i64, max_programs: i64) -> Result<Self> {
        let max_instances = int_in("max_instances", max_instances, 1, MAX_INSTANCES)?;
        let max_programs = int_in("max_programs", max_programs, 1, MAX_PROGRAMS)?;
        Ok(ProgramRouter {
            max_instances,
            max_programs,
            instances: Vec::new(),
            index: IdMap::default(),
            programs: IdMap::default(),
            order: BTreeMap::new(),
            tenant_order: IdMap::default(),
            next_seq: 0,
            now: f64::NEG_INFINITY,
        })
    }

    // -- instances ---------------------------------------------------------------------------

    /// Registers an instance (or a drained one again); routed to once it reports.
    pub fn add_instance(&mut self, instance_id: &str) -> Result<()> {
        check_id("instance_id", instance_id)?;
        if let Some(&i) = self.index.get(instance_id) {
            let inst = &mut self.instances[i];
            if inst.routable {
                return Err(Error::invalid(
                    "instance_id",
                    format!("{} (registered)", PyStr(instance_id)),
                    "new or drained",
                ));
            }
            *inst = Instance::new(inst.id.clone());
            return Ok(());
        }
        if self.instances.len() as i64 >= self.max_instances {
            return Err(Error::invalid(
                "instance_id",
                format!("{} (one more)", PyStr(instance_id)),
                format!("within max_instances ({})", self.max_instances),
            ));
        }
        let id: Arc<str> = Arc::from(instance_id);
        self.index.insert(id.clone(), self.instances.len());
        self.instances.push(Instance::new(id));
        Ok(())
    }

    /// Forgets the instance (dead, gone for good): as [`drain`](Self::drain), and its slot is
    /// free (its id, registered again, is a new instance, last in registration order).
    /// Returns the programs it released, least recently routed first.
    pub fn remove_instance(&mut self, instance_id: &str) -> Result<Vec<String>> {
        let released = self.drain(instance_id)?;
        let i = self.lookup(instance_id)?;
        let inst = self.instances.remove(i);
        self.index.remove(&*inst.id);
        for later in &self.instances[i..] {
            if let Some(k) = self.index.get_mut(&*later.id) {
                *k -= 1;
            }
        }
        for prog in self.programs.values_mut() {
            // (none is homed at i: drained)
            if prog.home > i {
                prog.home -= 1;
            }
        }
        Ok(released)
    }

    /// An instance's state. `Ok(false)`: ignored (the instance is drained).
    pub fn report(&mut self, instance_id: &str, report: &Report) -> Result<bool> {
        let i = self.lookup(instance_id)?;
        int_in("free_blocks", report.free_blocks, 0, MAX_BLOCKS)?;
        let total = int_in("total_blocks", report.total_blocks, 0, MAX_BLOCKS)?;
        int_in("queue_len", report.queue_len, 0, MAX_BLOCKS)?;
        int_in("queued_tokens", report.queued_tokens, 0, MAX_BLOCKS)?;
        int_in(
            "working_set_blocks",
            report.working_set_blocks,
            0,
            MAX_BLOCKS,
        )?;
        let cached = finite("cached_fraction", report.cached_fraction)?;
        if let Some(n) = report.return_queue_len {
            int_in("return_queue_len", n, 0, MAX_BLOCKS)?;
        }
        if let Some(n) = report.return_queued_tokens {
            int_in("return_queued_tokens", n, 0, MAX_BLOCKS)?;
        }
        if !(0.0..=1.0).contains(&cached) {
            return Err(Error::invalid_f64("cached_fraction", cached, "in [0, 1]"));
        }
        if report.free_blocks > total {
            return Err(Error::invalid(
                "free_blocks",
                report.free_blocks,
                format!("<= total_blocks ({total})"),
            ));
        }
        let returns = match (report.return_queue_len, report.return_queued_tokens) {
            (None, None) => (report.queue_len, report.queued_tokens),
            (Some(_), None) => {
                return Err(Error::invalid(
                    "return_queued_tokens",
                    "None",
                    "given with return_queue_len",
                ))
            }
            (None, Some(_)) => {
                return Err(Error::invalid(
                    "return_queue_len",
                    "None",
                    "given with return_queued_tokens",
                ))
            }
            (Some(n), Some(tokens)) => {
                if n > report.queue_len {
                    return Err(Error::invalid(
                        "return_queue_len",
                        n,
                        format!("<= queue_len ({})", report.queue_len),
                    ));
                }
                if tokens > report.queued_tokens {
                    return Err(Error::invalid(
                        "return_queued_tokens",
                        tokens,
                        format!("<= queued_tokens ({})", report.queued_tokens),
                    ));
                }
                (n, tokens)
            }
        };
        let inst = &mut self.instances[i];
        if !inst.routable {
            return Ok(false);
        }
        inst.reported = true;
        inst.state = *report;
        inst.returns = returns;
        Ok(true)
    }

    /// The instance pinned the program's context (`blocks`) until `deadline_s`: its home now.
    /// `Ok(false)`: refused, nothing changed (the instance is drained; the pin expired by
    /// `now`, default the router's clock; the program is homed at another instance; or it is
    /// unknown and the table is full).
    pub fn pinned(
        &mut self,
        instance_id: &str,
        program_id: &str,
        deadline_s: f64,
        blocks: i64,
        now: Option<f64>,
    ) -> Result<bool> {
        check_id("instance_id", instance_id)?;
        check_id("program_id", program_id)?;
        let i = self.lookup(instance_id)?;
        let deadline = finite("deadline_s", deadline_s)?;
        let n = int_in("blocks", blocks, 0, MAX_BLOCKS)?;
        let t = match now {
            Some(t) => finite("now", t)?,
            None => self.now,
        };
        if !self.instances[i].routable || deadline <= t {
            return Ok(false);
        }
        match self.programs.get(program_id) {
            // homed elsewhere: the router's own record wins
            Some(p) if p.home != i => return Ok(false),
            // a claim never forgets a program
            None if self.programs.len() as i64 >= self.max_programs => return Ok(false),
            _ => {}
        }
        let prog = self.touch(program_id, i);
        // its footprint there: at least the pinned context
        prog.blocks = prog.blocks.max(n);
        prog.pin_deadline_s = Some(deadline);
        prog.pin_blocks = n;
        Ok(true)
    }

    /// The instance is dead or draining: no call goes there any more. Returns the programs it
    /// released (homed there), least recently routed first.
    pub fn drain(&mut self, instance_id: &str) -> Result<Vec<String>> {
        let i = self.lookup(instance_id)?;
        let inst = &mut self.instances[i];
        inst.routable = false;
        inst.reported = false;
        let mut released = Vec::new();
        let programs = &mut self.programs;
        self.order.retain(|&seq, pid| {
            if programs.get(pid).is_some_and(|p| p.home == i) {
                programs.remove(pid);
                released.push((seq, pid.clone()));
                false
            } else {
                true
            }
        });
        for (seq, pid) in &released {
            self.unlist(*seq, pid);
        }
        Ok(released
            .into_iter()
            .map(|(_, pid)| pid.to_string())
            .collect())
    }

    /// The instance evicted the program's context but `held_blocks` of it: if it is the
    /// program's home and holds at most half of its last call's blocks, the program is
    /// forgotten (it routes as new). `Ok(false)`: nothing changed (an unknown program,
    /// another home, more than half held, or a drained instance).
    pub fn evicted(
        &mut self,
        instance_id: &str,
        program_id: &str,
        held_blocks: i64,
    ) -> Result<bool> {
        check_id("instance_id", instance_id)?;
        check_id("program_id", program_id)?;
        let i = self.lookup(instance_id)?;
        let held = int_in("held_blocks", held_blocks, 0, MAX_BLOCKS)?;
        let lost = self
            .programs
            .get(program_id)
            .is_some_and(|p| p.home == i && 2 * held <= p.blocks);
        if !lost || !self.instances[i].routable {
            return Ok(false);
        }
        self.end_program(program_id)
    }

    /// The program is done: forgotten. `Ok(false)`: it was not known.
    pub fn end_program(&mut self, program_id: &str) -> Result<bool> {
        check_id("program_id", program_id)?;
        match self.programs.remove(program_id) {
            Some(prog) => {
                self.order.remove(&prog.seq);
                self.unlist(prog.seq, program_id);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    // -- the decision ------------------------------------------------------------------------

    /// The instance for the program's call needing `blocks_needed` KV blocks, whose context
    /// to rebuild elsewhere is `prefix_tokens` long (see the module doc).
    pub fn route(
        &mut self,
        policy: &TTLPolicy,
        program_id: &str,
        now: f64,
        blocks_needed: i64,
        prefix_tokens: i64,
    ) -> Result<&str> {
        let ask = self.ask(policy, program_id, now, blocks_needed, prefix_tokens)?;
        // The best (cost, not home, −room, index) so far.
        let mut best: Option<(f64, bool, i64, usize)> = None;
        for (i, inst) in self.instances.iter().enumerate() {
            if !inst.reported {
                continue;
            }
            let (cost, room) = ask.cost(policy, i, inst)?;
            let key = (cost, ask.home != Some(i), -room, i);
            let better = match best {
                None => true,
                Some(b) => key.0 < b.0 || (key.0 == b.0 && (key.1, key.2, key.3) < (b.1, b.2, b.3)),
            };
            if better {
                best = Some(key);
            }
        }
        let Some((_, _, _, chosen)) = best else {
            return Err(Error::invalid(
                "routable instances",
                0,
                ">= 1 (registered, reported, not drained)",
            ));
        };
        self.now = ask.t;
        self.commit(program_id, chosen, &ask);
        Ok(&self.instances[chosen].id)
    }

    /// `route`'s arguments checked, and what it weighs for every instance.
    fn ask(
        &self,
        policy: &TTLPolicy,
        program_id: &str,
        now: f64,
        blocks_needed: i64,
        prefix_tokens: i64,
    ) -> Result<Ask> {
        check_id("program_id", program_id)?;
        let t = finite("now", now)?;
        if t < self.now {
            return Err(Error::invalid_f64(
                "now",
                t,
                format!(">= the last route's now ({})", PyFloat(self.now)),
            ));
        }
        let need_all = int_in("blocks_needed", blocks_needed, 0, MAX_BLOCKS)?;
        let prefix = int_in("prefix_tokens", prefix_tokens, 0, MAX_BLOCKS)?;
        let wait_memory_s = policy.out_of_order_cost_s();
        let loss = policy.miss_cost_s(prefix, 0)? + policy.eta() * wait_memory_s;
        let (home, live_pin, pin_blocks, last_blocks) = match self.programs.get(program_id) {
            Some(p) => (
                Some(p.home),
                p.pin_deadline_s.is_some_and(|d| t < d),
                p.pin_blocks,
                p.blocks,
            ),
            None => (None, false, 0, 0),
        };
        Ok(Ask {
            t,
            prefix,
            need_all,
            kept_need: (need_all - pin_blocks).max(0),
            home_grow: (need_all - last_blocks).max(0),
            home,
            live_pin,
            wait_memory_s,
            loss,
        })
    }

    /// The call goes to instance `chosen`: its queue, free blocks and working set as the
    /// router now expects them, and the program homed there.
    fn commit(&mut self, program_id: &str, chosen: usize, ask: &Ask) {
        let (need, grow) = ask.need_grow(chosen);
        let kept = ask.kept(chosen);
        let inst = &mut self.instances[chosen];
        if ask.home == Some(chosen) {
            inst.returns.0 += 1;
            if !kept {
                inst.returns.1 = (inst.returns.1 + ask.prefix).min(MAX_BLOCKS);
            }
        }
        let s = &mut inst.state;
        s.queue_len += 1;
        if !kept {
            s.queued_tokens = (s.queued_tokens + ask.prefix).min(MAX_BLOCKS);
        }
        s.free_blocks = (s.free_blocks - need).max(0);
        s.working_set_blocks = (s.working_set_blocks + grow).min(MAX_BLOCKS);
        let prog = self.touch(program_id, chosen);
        prog.home = chosen;
        prog.blocks = ask.need_all;
        prog.pin_deadline_s = None;
        prog.pin_blocks = 0;
    }

    // -- views -------------------------------------------------------------------------------

    /// The instance that served the program's last call (None: unknown program).
    pub fn home(&self, program_id: &str) -> Result<Option<&str>> {
        check_id("program_id", program_id)?;
        Ok(self
            .programs
            .get(program_id)
            .map(|p| &*self.instances[p.home].id))
    }

    /// Is the instance routed to: registered, reported since, not drained.
    pub fn routable(&self, instance_id: &str) -> Result<bool> {
        let i = self.lookup(instance_id)?;
        Ok(self.instances[i].reported)
    }

    /// Registered instances, drained ones included, in registration order.
    pub fn instance_ids(&self) -> Vec<&str> {
        self.instances.iter().map(|inst| &*inst.id).collect()
    }

    /// Programs remembered.
    pub fn program_count(&self) -> usize {
        self.programs.len()
    }

    /// The instance bound.
    pub fn max_instances(&self) -> i64 {
        self.max_instances
    }

    /// The program bound.
    pub fn max_programs(&self) -> i64 {
        self.max_programs
    }

    // -- internals ---------------------------------------------------------------------------

    fn lookup(&self, instance_id: &str) -> Result<usize> {
        check_id("instance_id", instance_id)?;
        self.index
            .get(instance_id)
            .copied()
            .ok_or_else(|| Error::unknown("instance_id", PyStr(instance_id)))
    }

    /// The program that makes room for one of `tenant` (the reference's module doc): the
    /// least recently used, unless `tenant` holds more programs than that one's tenant, then
    /// its own least recently used. Its sequence number and id.
    fn to_forget(&self, tenant: &str) -> (u64, Arc<str>) {
        let (&seq, oldest) = self.order.first_key_value().expect("a full table");
        let theirs = self.tenant_order[tenant_of(oldest)].len();
        match self.tenant_order.get(tenant) {
            Some(own) if own.len() > theirs => {
                let (&seq, pid) = own.first_key_value().expect("a tenant with programs");
                (seq, pid.clone())
            }
            _ => (seq, oldest.clone()),
        }
    }

    /// Takes `program_id` (last used at `seq`) out of its tenant's order.
    fn unlist(&mut self, seq: u64, program_id: &str) {
        let tenant = tenant_of(program_id);
        let own = self
            .tenant_order
            .get_mut(tenant)
            .expect("a program's tenant");
        own.remove(&seq);
        if own.is_empty() {
            self.tenant_order.remove(tenant);
        }
    }

    /// The program's entry, most recent now (made, forgetting one when full: `to_forget`).
    fn touch(&mut self, program_id: &str, home: usize) -> &mut Program {
        let seq = self.next_seq;
        self.next_seq += 1;
        let tenant = tenant_of(program_id);
        if let Some(prog) = self.programs.get_mut(program_id) {
            let key = self
                .order
                .remove(&prog.seq)
                .expect("every program is in the order");
            let own = self
                .tenant_order
                .get_mut(tenant)
                .expect("a program's tenant");
            own.remove(&prog.seq);
            own.insert(seq, key.clone());
            prog.seq = seq;
            self.order.insert(seq, key);
            return self.programs.get_mut(program_id).expect("just seen");
        }
        if self.programs.len() as i64 >= self.max_programs {
            let (gone_seq, gone) = self.to_forget(tenant);
            self.order.remove(&gone_seq);
            self.programs.remove(&gone);
            self.unlist(gone_seq, &gone);
        }
        let key: Arc<str> = Arc::from(program_id);
        self.order.insert(seq, key.clone());
        match self.tenant_order.get_mut(tenant) {
            Some(own) => {
                own.insert(seq, key.clone());
            }
            None => {
                self.tenant_order
                    .insert(tenant.into(), BTreeMap::from([(seq, key.clone())]));
            }
        }
        self.programs.entry(key).or_insert(Program {
            home,
            blocks: 0,
            pin_deadline_s: None,
            pin_blocks: 0,
            seq,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::PolicyConfig;

    fn router(n: usize) -> ProgramRouter {
        let mut r = ProgramRouter::new(64, 4).unwrap();
        for i in 0..n {
            let id = format!("i{i}");
            r.add_instance(&id).unwrap();
            let rep = Report {
                free_blocks: 100,
                total_blocks: 100,
                ..Report::default()
            };
            assert!(r.report(&id, &rep).unwrap());
        }
        r
    }

    #[test]
    fn a_live_pin_with_no_wait_keeps_its_program() {
        let policy = TTLPolicy::new(PolicyConfig::default()).unwrap();
        let mut r = router(3);
        let home = r.route(&policy, "p", 0.0, 10, 1000).unwrap().to_owned();
        r.pinned(&home, "p", 10.0, 10, None).unwrap();
        // the home looks busier, but its queue is empty and the call fits: it stays
        assert_eq!(r.route(&policy, "p", 1.0, 20, 1000).unwrap(), home);
    }

    #[test]
    fn programs_are_bounded_least_recent_first() {
        let policy = TTLPolicy::new(PolicyConfig::default()).unwrap();
        let mut r = router(2);
        for (k, p) in ["a", "b", "c", "d", "e"].iter().enumerate() {
            r.route(&policy, p, k as f64, 1, 0).unwrap();
        }
        assert_eq!(r.program_count(), 4);
        assert_eq!(r.home("a").unwrap(), None);
        assert!(r.home("e").unwrap().is_some());
    }

    #[test]
    fn bad_reports_are_refused_without_change() {
        let mut r = router(1);
        let bad = Report {
            cached_fraction: f64::NAN,
            ..Report::default()
        };
        let e = r.report("i0", &bad).unwrap_err();
        assert_eq!(e.to_string(), "cached_fraction must be finite, got nan");
        assert!(matches!(
            r.report("x", &Report::default()),
            Err(Error::UnknownKey { .. })
        ));
        assert!(r.routable("i0").unwrap());
    }

    #[test]
    fn a_nan_cost_never_wins_by_scan_order() {
        // rebuilding costs inf: at a home finding every prefix cached, (1 − 1) · inf is NaN
        let config = PolicyConfig {
            prefill_s_per_token2: 1e300,
            ..PolicyConfig::default()
        };
        let policy = TTLPolicy::new(config).unwrap();
        let mut r = router(3);
        for id in ["i0", "i1", "i2"] {
            let rep = Report {
                free_blocks: 100,
                total_blocks: 100,
                cached_fraction: 1.0,
                ..Report::default()
            };
            r.report(id, &rep).unwrap();
        }
        assert!(r.pinned("i2", "p", -1.0, 10, None).unwrap());
        // every cost is inf (or NaN): the tie goes home, not to the first scanned
        assert_eq!(r.route(&policy, "p", 0.0, 10, 1 << 20).unwrap(), "i2");
    }

    #[test]
    fn removing_an_instance_frees_its_slot_and_keeps_other_homes() {
        let policy = TTLPolicy::new(PolicyConfig::default()).unwrap();
        let mut r = ProgramRouter::new(3, 8).unwrap();
        for id in ["a", "b", "c"] {
            r.add_instance(id).unwrap();
            r.report(id, &Report::default()).unwrap();
        }
        r.pinned("a", "pa", 9.0, 1, None).unwrap();
        r.pinned("c", "pc", 9.0, 1, None).unwrap();
        assert_eq!(r.remove_instance("a").unwrap(), vec!["pa".to_owned()]);
        assert_eq!(r.instance_ids(), vec!["b", "c"]);
        assert_eq!(r.home("pc").unwrap(), Some("c"));
        r.add_instance("a").unwrap(); // a new instance, last
        r.add_instance("d").unwrap_err(); // full
        assert_eq!(r.instance_ids(), vec!["b", "c", "a"]);
        r.route(&policy, "pc", 0.0, 1, 0).unwrap();
        assert!(matches!(
            r.remove_instance("zz"),
            Err(Error::UnknownKey { .. })
        ));
    }

    #[test]
    fn a_pin_claim_must_agree_with_the_routers_record() {
        let policy = TTLPolicy::new(PolicyConfig::default()).unwrap();
        let mut r = router(2);
        let home = r.route(&policy, "p", 5.0, 10, 100).unwrap().to_owned();
        let other = if home == "i0" { "i1" } else { "i0" };
        assert!(!r.pinned(other, "p", 50.0, 10, None).unwrap()); // homed elsewhere
        assert!(!r.pinned(&home, "p", 5.0, 10, None).unwrap()); // expired on its clock
        assert!(!r.pinned(&home, "p", 7.0, 10, Some(7.0)).unwrap()); // expired by `now`
        assert!(r.pinned(&home, "p", 7.0, 10, None).unwrap());
        assert_eq!(r.home("p").unwrap(), Some(&*home));
    }
}
