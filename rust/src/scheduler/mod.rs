//! Program-level scheduling state of CacheTTL: the waiting queue and the pin table. Mirrors
//! `python/ttlpolicy/reference/scheduler.py`, whose module doc states every rule; the
//! differential tests hold the two together.
//!
//! The scheduler does not own the policy: every operation that consults or feeds it takes
//! `&mut TTLPolicy`, so the Python bindings can keep using the very policy object the user
//! passed (and the user sees its estimators move).
//!
//! `ServeOrder::Attained` ([`ProgramScheduler::with_serve_order`]): returning calls rank by
//! their arrival plus the engine seconds their program has run, read when queued (least
//! attained service with a bounded wait); first calls after them, by program arrival.
//!
//! `PinHandover::Schedule` (the paper's rule, [`ProgramScheduler::with_handover`]): a pin
//! passes to the program's next request when it is popped, not when it arrives; until then
//! the program's waiting requests rank as pinned, and `expire` keeps a pin whose program has
//! a waiting request (and releases only pins with `deadline < now`).
//!
//! Queue age is bounded: a program idle (no live request, no pin) longer than the policy's
//! `max_ttl_s` returns as a new program — its FCFS place (rank, program order, the pin
//! reclaim order) is that of a new arrival; its turns, attained service and open tool gap
//! (still observed) are kept.
//!
//! Requests and programs live in slabs (a slot per live id, reused after it ends; an aborted
//! waiting request's slot once the queue has let go of it, see `queue`); the waiting queue
//! and the pin orders are indexed heaps over those slots.

pub mod pins;
pub mod queue;
mod slab;

use std::cmp::Ordering;
use std::collections::VecDeque;
use std::sync::Arc;

use crate::config::{PinHandover, ServeOrder};
use crate::error::{Error, PyFloat, PyStr, Result};
use crate::fair_order::TenantShares;
use crate::policy::{DecideArgs, PinDecision, TTLPolicy, MAX_BLOCKS};
use crate::tenants::{tenant_of, TenantWeights};
use crate::validate::{finite, int_in, non_negative, positive, tool_key};
pub use pins::Pin;
use pins::PinTable;
use queue::{IndexedHeap, Time};
use slab::Slab;

/// Ids are at most this many bytes of UTF-8.
pub const MAX_ID_BYTES: usize = 1024;
/// `mean_active_blocks` is the mean `blocks_held` over this many last finished requests.
pub const MEAN_ACTIVE_WINDOW: usize = 256;
/// η is observed on at most this many turns (the estimator's own bound).
pub const MAX_TURNS: i64 = 1_000_000;
/// Default cap on idle programs (no live request, no pin) kept; see [`ProgramScheduler`].
pub const DEFAULT_MAX_IDLE_PROGRAMS: i64 = 1 << 16;
/// The largest `max_idle_programs` accepted.
pub const MAX_IDLE_PROGRAMS: i64 = 1 << 32;

/// The priority tuple of a waiting request; smaller runs first:
/// `(not preempted, not pinned, rank, program order, request arrival, request id)` — the
/// rank is the program's arrival ([`ServeOrder::Program`]) or the attained-service rank
/// (module doc); program order, the order in which programs were first seen, keeps programs
/// that arrive at one instant in that order (program-level FCFS at a tie on time).
#[derive(Debug, Clone)]
pub struct Priority {
    /// False once preempted: preempted requests run first.
    pub not_preempted: bool,
    /// False when the request consumed its program's pin.
    pub not_pinned: bool,
    /// The program's arrival, or the attained-service rank (module doc).
    pub rank_s: f64,
    /// The request's program's place among the programs first seen (0, 1, …).
    pub program_order: u64,
    /// When the request arrived.
    pub arrival_s: f64,
    /// The request id (last tie-breaker).
    pub request_id: Arc<str>,
    /// The id's first 8 bytes, big-endian, zero-padded: orders like the id whenever two
    /// prefixes differ, so ties on time (a batch arriving at one `now`) rarely chase the
    /// id's pointer.
    id_prefix: u64,
}

impl Priority {
    fn new(
        preempted: bool,
        pinned: bool,
        rank_s: f64,
        program_order: u64,
        arrival_s: f64,
        id: &Arc<str>,
    ) -> Self {
        let mut head = [0u8; 8];
        let n = id.len().min(8);
        head[..n].copy_from_slice(&id.as_bytes()[..n]);
        Priority {
            not_preempted: !preempted,
            not_pinned: !pinned,
            rank_s,
            program_order,
            arrival_s,
            request_id: id.clone(),
            id_prefix: u64::from_be_bytes(head),
        }
    }
}

impl Ord for Priority {
    fn cmp(&self, o: &Self) -> Ordering {
        (self.not_preempted, self.not_pinned)
            .cmp(&(o.not_preempted, o.not_pinned))
            .then(Time(self.rank_s).cmp(&Time(o.rank_s)))
            .then(self.program_order.cmp(&o.program_order))
            .then(Time(self.arrival_s).cmp(&Time(o.arrival_s)))
            .then(self.id_prefix.cmp(&o.id_prefix))
            .then_with(|| self.request_id.cmp(&o.request_id))
    }
}

impl PartialEq for Priority {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == Ordering::Equal
    }
}

impl Eq for Priority {}

impl PartialOrd for Priority {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}

/// A program that ended: its finished `turns`, the pin released (if any) and the live
/// requests dropped with it (sorted).
#[derive(Debug, Clone, PartialEq)]
pub struct Ended {
    /// The program.
    pub program_id: Arc<str>,
    /// Its finished requests.
    pub turns: i64,
    /// The pin released with it.
    pub pin: Option<Pin>,
    /// Its waiting and running requests, dropped with it (sorted).
    pub request_ids: Vec<Arc<str>>,
}

/// What `finish` did: the policy's decision (None on a last turn), the program's pin if
/// this request was pinned, the ended program on a last turn, and the pins of other tenants
/// released to make room for it within its share (the engine frees their blocks).
#[derive(Debug, Clone, PartialEq)]
pub struct Finished {
    /// The policy's decision (None on a last turn).
    pub decision: Option<PinDecision>,
    /// The program's pin, if this request was pinned.
    pub pin: Option<Pin>,
    /// The program, when this was its last turn.
    pub ended: Option<Ended>,
    /// Pins of tenants over their share released for this one.
    pub released: Vec<Pin>,
}

/// What an engine tells [`ProgramScheduler::finish`] about a turn's end besides which
/// request, when and how many blocks it holds: the reference's `TurnEnd`, field by field
/// (the bindings read it from a `TurnEnd` or `finish`'s keywords; the lifecycle forwards it
/// whole). A field added here is added there and in the binding's `TURN_END` (docs/design.md,
/// "A turn's end").
#[derive(Debug, Clone, Copy, Default)]
pub struct TurnEnd<'a> {
    /// The tool the request called (None: unknown or none).
    pub tool: Option<&'a str>,
    /// Whether this was the program's last turn (it ends the program).
    pub last_turn: bool,
    /// Seconds a miss would cost, if the engine knows (else the model's).
    pub cache_miss_cost_s: Option<f64>,
    /// Tokens of the request's prefix (for the model's miss cost).
    pub prefix_tokens: i64,
    /// Of those, tokens an offload tier holds.
    pub offloaded_tokens: i64,
    /// M̄ of the cost model, if the engine knows (else the tracked one).
    pub mean_active_blocks: Option<f64>,
}

/// A finish checked by [`ProgramScheduler::check_finish`], to commit.
#[derive(Debug)]
pub(crate) struct FinishPlan<'a> {
    slot: usize,
    t: f64,
    blocks: i64,
    /// The tool's key.
    key: Option<&'a str>,
    /// None: a last turn.
    decision: Option<PinDecision>,
    /// The window of `blocks_held` is full.
    full: bool,
    /// The window's sum with this finish.
    held_sum: i64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
/// Where a live request is.
pub enum RequestState {
    /// In the waiting queue.
    Waiting,
    /// Popped, not finished.
    Running,
}

#[derive(Debug, Clone)]
struct Program {
    arrival_s: f64,
    /// Its FCFS position: programs created before it (it follows `arrival_s`).
    order: u64,
    turns: i64,
    /// Seconds its requests have run (pop to finish or preempt).
    attained_s: f64,
    /// Slots of its waiting and running requests.
    live: Live,
    /// In the `idle` heap (so a busy program's abort need not look there).
    idle: bool,
    /// When it last became idle (read while it is idle).
    idle_since_s: f64,
    /// An outstanding tool call (or pinned gap): its tool and when it started.
    tool: Option<Box<str>>,
    tool_since_s: Option<f64>,
}

#[derive(Debug, Clone)]
struct Request {
    program: usize,
    /// The program's id hash: its table entry can be loaded before its slot is.
    program_hash: u64,
    arrival_s: f64,
    pinned: bool,
    preempted: bool,
    running: bool,
    /// Came back to a dropped cache; cleared at the first pop.
    returning: bool,
    /// When it last started running (pop).
    started_s: f64,
}

/// The slots of a program's live requests, the first inline: a program has one request at
/// a time unless the engine runs parallel ones, so the common program allocates nothing.
/// Order is not kept (nothing depends on it: `end` sorts what it returns).
#[derive(Debug, Clone, Default)]
struct Live {
    first: Option<usize>,
    rest: Vec<usize>,
}

impl Live {
    fn push(&mut self, slot: usize) {
        match self.first {
            None => self.first = Some(slot),
            Some(_) => self.rest.push(slot),
        }
    }
    fn remove(&mut self, slot: usize) {
        if self.first == Some(slot) {
            self.first = self.rest.pop();
        } else {
            self.rest.retain(|&s| s != slot);
        }
    }
    fn is_empty(&self) -> bool {
        self.first.is_none()
    }
    fn len(&self) -> usize {
        usize::from(self.first.is_some()) + self.rest.len()
    }
    fn get(&self, i: usize) -> Option<usize> {
        match i {
            0 => self.first,
            _ => self.rest.get(i - 1).copied(),
        }
    }
    fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        self.first.into_iter().chain(self.rest.iter().copied())
    }
}

/// An id: non-empty, at most [`MAX_ID_BYTES`] bytes of UTF-8.
pub fn check_id(field: &str, id: &str) -> Result<()> {
    if id.is_empty() || id.len() > MAX_ID_BYTES {
        return Err(Error::invalid(
            field,
            format!("{} bytes", id.len()),
            format!("1 to {MAX_ID_BYTES} bytes of UTF-8"),
        ));
    }
    Ok(())
}

/// Waiting queue and pin table of CacheTTL. See the module doc.
///
/// Bounded state: a program that is idle (no live request, no pin) is kept so that its next
/// request is known as a return; at most `max_idle_programs` are kept, the one idle longest
/// forgotten first, shared fairly among tenants (`fair_order`; as if aborted: no η
/// observation), counted in `dropped_idle_programs`.
/// So an engine that never ends its programs holds bounded memory.
#[derive(Debug, Clone)]
pub struct ProgramScheduler {
    total_blocks: i64,
    pin_budget_blocks: i64,
    queue: IndexedHeap<Priority>,
    pins: PinTable,
    programs: Slab<Program>,
    requests: Slab<Request>,
    held: VecDeque<i64>,
    held_sum: i64,
    now: f64,
    handover: PinHandover,
    serve_order: ServeOrder,
    /// At schedule: the pins `expire` may release (their program has no request waiting),
    /// by (deadline, program id) — what `next_deadline_s` reads. The reference scans.
    expirable: IndexedHeap<(Time, Arc<str>)>,
    /// Idle programs by slot, keyed by when they became idle (a sequence number).
    idle: IndexedHeap<u64>,
    /// Each tenant's share of the idle programs (the cap is shared fairly: `fair_order`).
    idle_shares: TenantShares<usize>,
    idle_seq: u64,
    /// Programs created so far: the next one's `order`.
    programs_seen: u64,
    max_idle_programs: usize,
    dropped_idle_programs: u64,
}

impl ProgramScheduler {
    /// A scheduler of `total_blocks` KV blocks, at most `pin_budget_blocks` of them pinned,
    /// keeping at most [`DEFAULT_MAX_IDLE_PROGRAMS`] idle programs.
    pub fn new(total_blocks: i64, pin_budget_blocks: i64) -> Result<ProgramScheduler> {
        Self::with_max_idle_programs(total_blocks, pin_budget_blocks, DEFAULT_MAX_IDLE_PROGRAMS)
    }

    /// [`new`](Self::new) with a cap of `max_idle_programs` idle programs.
    pub fn with_max_idle_programs(
        total_blocks: i64,
        pin_budget_blocks: i64,
        max_idle_programs: i64,
    ) -> Result<ProgramScheduler> {
        let total_blocks = int_in("total_blocks", total_blocks, 1, MAX_BLOCKS)?;
        let pin_budget_blocks = int_in("pin_budget_blocks", pin_budget_blocks, 0, total_blocks)?;
        let max_idle_programs =
            int_in("max_idle_programs", max_idle_programs, 0, MAX_IDLE_PROGRAMS)? as usize;
        Ok(ProgramScheduler {
            idle: IndexedHeap::default(),
            idle_shares: TenantShares::default(),
            idle_seq: 0,
            programs_seen: 0,
            max_idle_programs,
            dropped_idle_programs: 0,
            total_blocks,
            pin_budget_blocks,
            queue: IndexedHeap::default(),
            pins: PinTable::default(),
            programs: Slab::default(),
            requests: Slab::default(),
            held: VecDeque::with_capacity(MEAN_ACTIVE_WINDOW),
            held_sum: 0,
            now: f64::NEG_INFINITY,
            handover: PinHandover::Arrival,
            serve_order: ServeOrder::Program,
            expirable: IndexedHeap::default(),
        })
    }

    /// The same scheduler with its tenants' shares of the pin budget weighted by `weights`
    /// (default: equal). Set it before use.
    pub fn with_tenant_weights(mut self, weights: TenantWeights) -> ProgramScheduler {
        self.pins = PinTable::with_weights(weights);
        self
    }

    /// The same scheduler with its pins passing to the program's next request at `handover`
    /// (the reference reads it from the policy's config: `pin_handover`). Set it before use.
    pub fn with_pin_handover(mut self, handover: PinHandover) -> ProgramScheduler {
        self.handover = handover;
        self
    }

    /// The same scheduler with returning calls served in `order` (the reference reads it
    /// from the policy's config: `serve_order`). Set it before use.
    pub fn with_serve_order(mut self, order: ServeOrder) -> ProgramScheduler {
        self.serve_order = order;
        self
    }

    /// The order of returning calls.
    pub fn serve_order(&self) -> ServeOrder {
        self.serve_order
    }

    fn at_schedule(&self) -> bool {
        self.handover == PinHandover::Schedule
    }

    /// When a pin passes to the program's next request.
    pub fn pin_handover(&self) -> PinHandover {
        self.handover
    }

    // -- checks (no state changes) -----------------------------------------------------------

    fn check_now(&self, now: f64) -> Result<f64> {
        let t = finite("now", now)? + 0.0; // -0.0 → 0.0: one total order in both backends
        if t < self.now {
            return Err(Error::invalid_f64(
                "now",
                t,
                format!(">= {} (time never goes back)", PyFloat(self.now)),
            ));
        }
        Ok(t)
    }

    fn request_slot(&self, request_id: &str) -> Result<usize> {
        check_id("request_id", request_id)?;
        self.requests
            .find(request_id)
            .ok_or_else(|| Error::unknown("request_id", PyStr(request_id)))
    }

    fn running_slot(&self, request_id: &str) -> Result<usize> {
        let slot = self.request_slot(request_id)?;
        if !self.requests.get(slot).running {
            return Err(Error::invalid(
                format!("request_id {}", PyStr(request_id)),
                "a waiting request",
                "running",
            ));
        }
        Ok(slot)
    }

    fn key(&self, slot: usize) -> Priority {
        let r = self.requests.get(slot);
        let prog = self.programs.get(r.program);
        let id = self.requests.id(slot);
        let rank_s = match self.serve_order {
            ServeOrder::Attained if !r.preempted && prog.turns > 0 => r.arrival_s + prog.attained_s,
            ServeOrder::Attained if !r.preempted => f64::INFINITY,
            _ => prog.arrival_s,
        };
        Priority::new(r.preempted, r.pinned, rank_s, prog.order, r.arrival_s, id)
    }

    // -- arrivals ----------------------------------------------------------------------------

    /// A request enters the waiting queue. Returns the program's pin if this arrival
    /// consumed it (its blocks are now this request's prefix).
    pub fn arrive(
        &mut self,
        policy: &mut TTLPolicy,
        request_id: &str,
        program_id: &str,
        now: f64,
        blocks_needed: i64,
    ) -> Result<Option<Pin>> {
        check_id("request_id", request_id)?;
        check_id("program_id", program_id)?;
        let t = self.check_now(now)?;
        // Checked (a request larger than the engine can never run), not stored: the engine
        // allocates, the queue only orders.
        int_in("blocks_needed", blocks_needed, 0, self.total_blocks)?;
        if self.requests.find(request_id).is_some() {
            return Err(Error::invalid(
                format!("request_id {}", PyStr(request_id)),
                "one already waiting or running",
                "new",
            ));
        }
        self.arrive_checked(policy, request_id, program_id, t)
            .inspect(|_| self.now = t)
    }

    /// [`arrive`](Self::arrive) for many requests at one `now`, in order; all are checked
    /// first, so one bad entry changes nothing.
    pub fn arrive_many<S: AsRef<str>>(
        &mut self,
        policy: &mut TTLPolicy,
        request_ids: &[S],
        program_ids: &[S],
        now: f64,
        blocks_needed: &[i64],
    ) -> Result<Vec<Option<Pin>>> {
        for r in request_ids {
            check_id("request_ids", r.as_ref())?;
        }
        for p in program_ids {
            check_id("program_ids", p.as_ref())?;
        }
        let t = self.check_now(now)?;
        for &b in blocks_needed {
            int_in("blocks_needed", b, 0, self.total_blocks)?;
        }
        let (nr, np, nb) = (request_ids.len(), program_ids.len(), blocks_needed.len());
        if nr != np || np != nb {
            return Err(Error::invalid(
                "request_ids, program_ids and blocks_needed",
                format!("{nr}, {np}, {nb}"),
                "of one length",
            ));
        }
        let mut seen = std::collections::HashSet::with_capacity(nr);
        for r in request_ids {
            let r = r.as_ref();
            if self.requests.find(r).is_some() || !seen.insert(r) {
                return Err(Error::invalid(
                    "request_ids",
                    format!("{} twice", PyStr(r)),
                    "new and distinct",
                ));
            }
        }
        self.now = t;
        let mut out = Vec::with_capacity(nr);
        for (r, p) in request_ids.iter().zip(program_ids) {
            out.push(self.arrive_checked(policy, r.as_ref(), p.as_ref(), t)?);
        }
        Ok(out)
    }

    /// Whether `program_id` arriving at `t` queues as a new program: idle longer than any pin
    /// lasts (module doc). The lifecycle asks first, so that load control starts it anew too.
    pub(crate) fn renews(&self, policy: &TTLPolicy, program_id: &str, t: f64) -> bool {
        self.programs.find(program_id).is_some_and(|p| {
            let prog = self.programs.get(p);
            prog.idle && t - prog.idle_since_s > policy.config().max_ttl_s
        })
    }

    /// Whether `program_id` arriving at `t` takes a new program's FCFS place: it `renews` and
    /// the queue is in program order (by attained service a returning call's rank does not use
    /// its program's arrival). Load control must then start it anew too.
    pub(crate) fn restarts_fcfs(&self, policy: &TTLPolicy, program_id: &str, t: f64) -> bool {
        self.serve_order == ServeOrder::Program && self.renews(policy, program_id, t)
    }

    fn arrive_checked(
        &mut self,
        policy: &mut TTLPolicy,
        request_id: &str,
        program_id: &str,
        t: f64,
    ) -> Result<Option<Pin>> {
        let renews = self.renews(policy, program_id, t);
        let found = self.programs.find(program_id);
        if let Some(p) = found {
            let prog = self.programs.get_mut(p);
            if let Some(since) = prog.tool_since_s {
                // The only call that may fail comes first: nothing is changed if it does.
                let tenant = tenant_of(program_id);
                policy.observe_tool(tenant, prog.tool.as_deref(), t - since)?;
                prog.tool = None;
                prog.tool_since_s = None;
            }
            if renews {
                // Idle longer than any pin lasts: it queues as a new arrival (module doc).
                prog.arrival_s = t;
                prog.order = self.programs_seen;
                self.programs_seen += 1;
            }
            self.unmark_idle(p);
        }
        let p = match found {
            Some(p) => p,
            None => {
                let order = self.programs_seen;
                self.programs_seen += 1;
                self.programs.insert(
                    Arc::from(program_id),
                    Program {
                        arrival_s: t,
                        order,
                        turns: 0,
                        attained_s: 0.0,
                        live: Live::default(),
                        idle: false,
                        idle_since_s: 0.0,
                        tool: None,
                        tool_since_s: None,
                    },
                )
            }
        };
        // At schedule, whether the cache was kept is known only when the request is popped.
        let (consumed, pinned, kept) = if self.at_schedule() {
            (None, self.pins.get(p).is_some(), false)
        } else {
            let consumed = self.pins.remove(p);
            let pinned = consumed.is_some();
            (consumed, pinned, pinned)
        };
        let prog = self.programs.get(p);
        let slot = self.requests.insert(
            Arc::from(request_id),
            Request {
                program: p,
                program_hash: self.programs.hash_of(p),
                arrival_s: t,
                pinned,
                preempted: false,
                running: false,
                returning: prog.turns > 0 && !kept,
                started_s: 0.0,
            },
        );
        self.programs.get_mut(p).live.push(slot);
        self.pins.live(program_id, 1);
        self.queue.push(slot, self.key(slot));
        self.sync_expirable(p);
        Ok(consumed)
    }

    // -- the queue ---------------------------------------------------------------------------

    /// The request `pop` would return.
    pub fn peek(&self) -> Option<&Arc<str>> {
        self.queue.peek().map(|(_, k)| &k.request_id)
    }

    /// Up to `n` waiting requests, in the order `pop` would return them if nothing changed:
    /// what a caller may run out of turn (`take`) when the head cannot run. Changes nothing.
    pub fn first_waiting(&self, n: i64) -> Result<Vec<Arc<str>>> {
        let count = int_in("n", n, 0, MAX_BLOCKS)? as usize;
        Ok(self
            .queue
            .smallest(count)
            .into_iter()
            .map(|k| k.request_id.clone())
            .collect())
    }

    /// The waiting request with the smallest priority tuple, now running.
    pub fn pop(&mut self, policy: &mut TTLPolicy, now: f64) -> Result<Option<Arc<str>>> {
        let t = self.check_now(now)?;
        let popped = self.pop_checked(policy, t)?;
        self.now = t;
        Ok(popped)
    }

    /// Up to `n` requests, as `pop` would return them one by one.
    pub fn pop_many(&mut self, policy: &mut TTLPolicy, n: i64, now: f64) -> Result<Vec<Arc<str>>> {
        let count = int_in("n", n, 0, MAX_BLOCKS)? as usize;
        let t = self.check_now(now)?;
        self.now = t;
        let mut out = Vec::with_capacity(count.min(self.queue.len()));
        while out.len() < count {
            match self.pop_checked(policy, t)? {
                Some(id) => out.push(id),
                None => break,
            }
        }
        Ok(out)
    }

    fn pop_checked(&mut self, policy: &mut TTLPolicy, t: f64) -> Result<Option<Arc<str>>> {
        let Some((slot, _)) = self.queue.peek() else {
            return Ok(None);
        };
        self.start(policy, slot, t)?;
        Ok(Some(self.requests.id(slot).clone()))
    }

    /// The waiting request `request_id` runs now, ahead of its turn; every other request
    /// keeps its place. For an engine that passes over a head load control refuses (a tenant's
    /// program behind another tenant's): `pop` then `preempt` would rank the passed-over
    /// requests as preempted, ahead of everything.
    pub fn take(&mut self, policy: &mut TTLPolicy, request_id: &str, now: f64) -> Result<()> {
        let slot = self.request_slot(request_id)?;
        if self.requests.get(slot).running {
            return Err(Error::invalid(
                format!("request_id {}", PyStr(request_id)),
                "a running request",
                "waiting",
            ));
        }
        let t = self.check_now(now)?;
        self.start(policy, slot, t)?;
        self.now = t;
        Ok(())
    }

    /// Waiting request `slot` leaves the queue and runs from `t`.
    fn start(&mut self, policy: &mut TTLPolicy, slot: usize, t: f64) -> Result<()> {
        let program = self.requests.get(slot).program;
        let handover = self.at_schedule() && self.pins.get(program).is_some();
        let req = self.requests.get_mut(slot);
        if req.returning && !handover {
            policy.observe_queueing_delay(t - req.arrival_s)?;
        }
        req.returning = false;
        req.running = true;
        req.started_s = t;
        self.queue.remove(slot);
        self.release_buried();
        if handover {
            // The pin passes to this request: its blocks are its prefix now.
            self.pins.remove(program);
            self.rekey_waiting(program);
        }
        self.sync_expirable(program);
        Ok(())
    }

    /// A running request goes back to the queue, ahead of every request not preempted.
    pub fn preempt(&mut self, request_id: &str, now: f64) -> Result<()> {
        let slot = self.running_slot(request_id)?;
        let t = self.check_now(now)?;
        self.now = t;
        let req = self.requests.get_mut(slot);
        req.running = false;
        req.preempted = true;
        let (program, ran_s) = (req.program, t - req.started_s);
        self.programs.get_mut(program).attained_s += ran_s;
        self.queue.push(slot, self.key(slot));
        self.sync_expirable(program);
        Ok(())
    }

    // -- finishing and pins ------------------------------------------------------------------

    /// A running request ended holding `blocks_held` blocks. Unless it was the program's last
    /// turn, the policy decides a TTL and the blocks are pinned until `now + ttl_s` when
    /// `ttl_s > 0` and the pin budget has room. A last turn ends the program.
    pub fn finish(
        &mut self,
        policy: &mut TTLPolicy,
        request_id: &str,
        now: f64,
        blocks_held: i64,
        args: TurnEnd<'_>,
    ) -> Result<Finished> {
        let plan = self.check_finish(policy, request_id, now, blocks_held, args)?;
        self.finish_checked(policy, plan)
    }

    /// What [`finish`](Self::finish) would refuse, changing nothing (the lifecycle asks load
    /// control too before either part commits); else what
    /// [`finish_checked`](Self::finish_checked) commits.
    pub(crate) fn check_finish<'a>(
        &self,
        policy: &TTLPolicy,
        request_id: &str,
        now: f64,
        blocks_held: i64,
        args: TurnEnd<'a>,
    ) -> Result<FinishPlan<'a>> {
        let slot = self.running_slot(request_id)?;
        let t = self.check_now(now)?;
        let blocks = int_in("blocks_held", blocks_held, 0, self.total_blocks)?;
        let key = args.tool.map(tool_key);
        if let Some(m) = args.cache_miss_cost_s {
            non_negative("cache_miss_cost_s", m)?;
        }
        int_in("prefix_tokens", args.prefix_tokens, 0, MAX_BLOCKS)?;
        int_in("offloaded_tokens", args.offloaded_tokens, 0, MAX_BLOCKS)?;
        let full = self.held.len() == MEAN_ACTIVE_WINDOW;
        let held_sum = self.held_sum + blocks - if full { self.held[0] } else { 0 };
        let held_n = self.held.len() + usize::from(!full);
        let mean_active = match args.mean_active_blocks {
            None => (held_sum as f64 / held_n as f64).max(1.0),
            Some(m) => positive("mean_active_blocks", m)?,
        };
        let decision = if args.last_turn {
            None
        } else {
            let program = self.requests.get(slot).program;
            let tenant = tenant_of(self.programs.id(program));
            Some(policy.decide(&DecideArgs {
                tool: key,
                request_blocks: blocks,
                mean_active_blocks: mean_active,
                cache_miss_cost_s: args.cache_miss_cost_s,
                prefix_tokens: args.prefix_tokens,
                now: t,
                offloaded_tokens: args.offloaded_tokens,
                tenant,
            })?)
        };
        Ok(FinishPlan {
            slot,
            t,
            blocks,
            key,
            decision,
            full,
            held_sum,
        })
    }

    /// [`finish`](Self::finish) with what [`check_finish`](Self::check_finish) returned
    /// (nothing changed in between). Fails only where the policy refuses η's sample of a
    /// last turn, which its bound (`MAX_TURNS`) rules out.
    pub(crate) fn finish_checked(
        &mut self,
        policy: &mut TTLPolicy,
        plan: FinishPlan<'_>,
    ) -> Result<Finished> {
        let (slot, t, blocks) = (plan.slot, plan.t, plan.blocks);
        self.now = t;
        if plan.full {
            self.held.pop_front();
        }
        self.held.push_back(blocks);
        self.held_sum = plan.held_sum;
        let req = self.requests.get(slot);
        let (p, ran_s) = (req.program, t - req.started_s);
        let prog = self.programs.get_mut(p);
        prog.turns += 1;
        prog.attained_s += ran_s;
        prog.live.remove(slot);
        self.requests.remove(slot);
        let id = self.programs.id(p).clone();
        let Some(decision) = plan.decision else {
            self.pins.live(&id, -1);
            let ended = self.end(policy, p, true)?;
            return Ok(Finished {
                decision: None,
                pin: None,
                ended: Some(ended),
                released: Vec::new(),
            });
        };
        let mut pin = None;
        // (its tenant is still active here: the live count drops after the decision)
        let room = if decision.ttl_s > 0.0 {
            self.pins.make_room(&id, blocks, self.pin_budget_blocks)
        } else {
            None
        };
        let mut released = Vec::new();
        if let Some(room) = room {
            for other in room {
                let gone = self.pins.remove(other).expect("make_room names pins");
                self.unpinned(other);
                released.push(gone);
            }
            let mut deadline_s = t + decision.ttl_s;
            if !deadline_s.is_finite() {
                deadline_s = f64::MAX; // a TTL near the float limit: still finite
            }
            let order = self.programs.get(p).order;
            pin = Some(self.pins.add(p, &id, blocks, deadline_s, order));
            if self.at_schedule() {
                self.rekey_waiting(p);
                self.sync_expirable(p);
            }
        }
        self.pins.live(&id, -1);
        self.note_unpinned(&released);
        let prog = self.programs.get_mut(p);
        if plan.key.is_some() || pin.is_some() {
            prog.tool = plan.key.map(Box::from);
            prog.tool_since_s = Some(t);
        } else {
            prog.tool = None;
            prog.tool_since_s = None;
        }
        self.note_idle(p);
        Ok(Finished {
            decision: Some(decision),
            pin,
            ended: None,
            released,
        })
    }

    /// Releases and returns the pins whose deadline is `<= now`, by (deadline, program); at
    /// schedule ([`PinHandover::Schedule`]), those with deadline `< now` whose program has no
    /// request waiting.
    pub fn expire(&mut self, now: f64) -> Result<Vec<Pin>> {
        let t = self.check_now(now)?;
        self.now = t;
        if !self.at_schedule() {
            let released = self.pins.expire(t);
            self.note_unpinned(&released);
            return Ok(released);
        }
        let mut out = Vec::new();
        let mut held = Vec::new();
        for (slot, pin) in self.pins.expire_before(t) {
            if self.has_waiting(slot) {
                held.push((slot, pin));
            } else {
                self.expirable.remove(slot);
                out.push(pin);
            }
        }
        for (slot, pin) in held {
            // A request of the program waits: the pin stays, unchanged.
            let order = self.programs.get(slot).order;
            let id = self.programs.id(slot);
            self.pins.add(slot, id, pin.blocks, pin.deadline_s, order);
        }
        self.note_unpinned(&out);
        Ok(out)
    }

    /// Keeps `expirable` exact for program `p` (at schedule only).
    fn sync_expirable(&mut self, p: usize) {
        if !self.at_schedule() {
            return;
        }
        match self.pins.get(p) {
            Some(pin) if !self.has_waiting(p) => {
                let key = (Time(pin.deadline_s), pin.program_id.clone());
                self.expirable.push(p, key);
            }
            _ => {
                self.expirable.remove(p);
            }
        }
    }

    fn has_waiting(&self, p: usize) -> bool {
        self.programs
            .get(p)
            .live
            .iter()
            .any(|slot| self.queue.contains(slot))
    }

    /// Handover at schedule: the program's waiting requests rank as pinned exactly while it
    /// holds a pin.
    fn rekey_waiting(&mut self, p: usize) {
        let pinned = self.pins.get(p).is_some();
        for i in 0..self.programs.get(p).live.len() {
            let Some(slot) = self.programs.get(p).live.get(i) else {
                break;
            };
            if self.queue.contains(slot) && self.requests.get(slot).pinned != pinned {
                self.requests.get_mut(slot).pinned = pinned;
                self.queue.push(slot, self.key(slot));
            }
        }
        self.release_buried();
    }

    /// Releases pins until at least `blocks_needed` blocks are released or no pin is left:
    /// the latest pin of the tenant furthest over its share of the pin budget while one is,
    /// then latest-arrived program first.
    pub fn reclaim(&mut self, blocks_needed: i64, now: f64) -> Result<Vec<Pin>> {
        self.reclaim_for(blocks_needed, now, None)
    }

    /// [`reclaim`](Self::reclaim) for a request of program `for_program`: that program's own
    /// pin and the pins of programs that arrived before it are kept (program-level FCFS: an
    /// older program's cache is not given to a younger one). `None`: any pin.
    pub fn reclaim_for(
        &mut self,
        blocks_needed: i64,
        now: f64,
        for_program: Option<&str>,
    ) -> Result<Vec<Pin>> {
        let need = int_in("blocks_needed", blocks_needed, 0, MAX_BLOCKS)?;
        let keep_until = match for_program {
            None => None,
            Some(pid) => {
                check_id("for_program", pid)?;
                let p = self
                    .programs
                    .find(pid)
                    .ok_or_else(|| Error::unknown("for_program", PyStr(pid)))?;
                Some(self.programs.get(p).order)
            }
        };
        let t = self.check_now(now)?;
        self.now = t;
        let released = self
            .pins
            .reclaim_slots_after(need, self.pin_budget_blocks, keep_until);
        let mut out = Vec::with_capacity(released.len());
        for (slot, pin) in released {
            self.unpinned(slot);
            out.push(pin);
        }
        self.note_unpinned(&out);
        Ok(out)
    }

    /// At schedule, program `p`'s pin was released: its waiting requests rank unpinned.
    fn unpinned(&mut self, p: usize) {
        if self.at_schedule() {
            self.rekey_waiting(p);
            self.expirable.remove(p);
        }
    }

    /// Programs whose pin was released may now be idle.
    fn note_unpinned(&mut self, released: &[Pin]) {
        for pin in released {
            if let Some(p) = self.programs.find(&pin.program_id) {
                self.note_idle(p);
            }
        }
    }

    /// Marks program `p` idle if it has no live request and no pin, first making room under
    /// the cap (the idle longest forgotten, shared fairly among tenants: `fair_order`).
    fn note_idle(&mut self, p: usize) {
        if !self.programs.get(p).live.is_empty() || self.pins.get(p).is_some() {
            return;
        }
        // (already idle: it is taken out and put back last, the count unchanged)
        self.unmark_idle(p);
        // room first: what goes is chosen as p is about to join (`fair_order`)
        while !self.idle.is_empty() && self.idle.len() >= self.max_idle_programs {
            let Some((oldest, _)) = self.idle.peek() else {
                break;
            };
            let tenant = tenant_of(self.programs.id(p));
            let idle = &self.idle;
            let q = if self
                .idle_shares
                .own_goes(tenant, tenant_of(self.programs.id(oldest)))
            {
                let own = self
                    .idle_shares
                    .oldest(tenant, |at, slot| idle.key(slot) == Some(&at));
                own.expect("a tenant holding more idle programs than another")
                    .1
            } else {
                oldest
            };
            self.unmark_idle(q);
            self.programs.remove(q);
            self.dropped_idle_programs += 1;
        }
        if self.max_idle_programs == 0 {
            // no room at all: it goes itself
            self.programs.remove(p);
            self.dropped_idle_programs += 1;
            return;
        }
        let seq = self.idle_seq;
        self.idle_seq += 1;
        self.idle.push(p, seq);
        let idle = &self.idle;
        let tenant = tenant_of(self.programs.id(p));
        self.idle_shares
            .add(tenant, seq, p, |at, slot| idle.key(slot) == Some(&at));
        let prog = self.programs.get_mut(p);
        prog.idle = true;
        prog.idle_since_s = self.now;
    }

    /// Request slots the queue no longer names are free for new requests.
    fn release_buried(&mut self) {
        for slot in self.queue.drain_freed() {
            self.requests.release(slot);
        }
    }

    /// Program `p` is no longer idle.
    fn unmark_idle(&mut self, p: usize) {
        let prog = self.programs.get_mut(p);
        if prog.idle {
            prog.idle = false;
            self.idle.remove(p);
            let idle = &self.idle;
            self.idle_shares
                .sub(tenant_of(self.programs.id(p)), |at, slot| {
                    idle.key(slot) == Some(&at)
                });
        }
    }

    /// A queueing delay the queue cannot see (`pop` records its own), for T.
    pub fn record_queueing_delay(&self, policy: &mut TTLPolicy, delay_s: f64) -> Result<()> {
        policy.observe_queueing_delay(delay_s)
    }

    // -- ending ------------------------------------------------------------------------------

    /// The program is done: release its pin, drop its live requests, observe its turns for
    /// η and forget it.
    pub fn end_program(&mut self, policy: &mut TTLPolicy, program_id: &str) -> Result<Ended> {
        check_id("program_id", program_id)?;
        let p = self
            .programs
            .find(program_id)
            .ok_or_else(|| Error::unknown("program_id", PyStr(program_id)))?;
        self.end(policy, p, true)
    }

    /// The request was aborted: its whole program ends, without observing η.
    pub fn abort(&mut self, policy: &mut TTLPolicy, request_id: &str) -> Result<Ended> {
        let slot = self.request_slot(request_id)?;
        let req = self.requests.get(slot);
        let p = req.program;
        // Prefetch by hand (measured, random order at 100k waiting: 1.31 -> 0.96 us, and
        // ~3 % more for the id's allocation, which the caller frees): the program's table
        // entry, slot and id and the request's heap entry are each a cache miss, and the
        // chains (program entry -> its table probe; heap position -> heap entry) do not
        // depend on each other. Loading them here, before `end` and the caller need them,
        // lets the misses overlap instead of coming one after the other.
        self.programs.touch(p, req.program_hash);
        self.queue.touch(slot);
        self.end(policy, p, false)
    }

    fn end(&mut self, policy: &mut TTLPolicy, p: usize, observe: bool) -> Result<Ended> {
        let turns = self.programs.get(p).turns;
        if observe && turns > 0 {
            policy.observe_program(turns.min(MAX_TURNS))?;
        }
        self.unmark_idle(p);
        let (id, prog) = self.programs.remove(p);
        if !prog.live.is_empty() {
            self.pins.live(&id, -(prog.live.len() as i64));
        }

        let pin = self.pins.remove(p);
        if self.at_schedule() {
            self.expirable.remove(p);
        }
        let mut dropped = Vec::with_capacity(prog.live.len());
        for slot in prog.live.iter() {
            // A waiting request is buried in the queue (see queue.rs): its slot stays taken
            // until the queue lets go of it.
            let (rid, _) = if self.queue.bury(slot) {
                self.requests.retire(slot)
            } else {
                self.requests.remove(slot)
            };
            dropped.push(rid);
        }
        self.release_buried();
        dropped.sort();
        Ok(Ended {
            program_id: id,
            turns: prog.turns,
            pin,
            request_ids: dropped,
        })
    }

    // -- read-only views ---------------------------------------------------------------------

    /// KV blocks of the engine.
    pub fn total_blocks(&self) -> i64 {
        self.total_blocks
    }
    /// The cap on idle programs kept.
    pub fn max_idle_programs(&self) -> usize {
        self.max_idle_programs
    }
    /// Idle programs forgotten because of the cap, since construction.
    pub fn dropped_idle_programs(&self) -> u64 {
        self.dropped_idle_programs
    }
    /// Blocks that may be pinned at once.
    pub fn pin_budget_blocks(&self) -> i64 {
        self.pin_budget_blocks
    }
    /// Blocks pinned now.
    pub fn pinned_blocks(&self) -> i64 {
        self.pins.blocks()
    }
    /// Pins held now.
    pub fn pin_count(&self) -> usize {
        self.pins.len()
    }
    /// Requests waiting.
    pub fn waiting_count(&self) -> usize {
        self.queue.len()
    }
    /// Requests running.
    pub fn running_count(&self) -> usize {
        self.requests.len() - self.queue.len()
    }
    /// Programs tracked (live, pinned or idle).
    pub fn program_count(&self) -> usize {
        self.programs.len()
    }
    /// The earliest pin deadline. At schedule ([`PinHandover::Schedule`]): of the pins
    /// `expire` may release, those whose program has no request waiting.
    pub fn next_deadline_s(&self) -> Option<f64> {
        if !self.at_schedule() {
            return self.pins.next_deadline_s();
        }
        self.expirable.peek().map(|(_, (t, _))| t.0)
    }
    /// The tracked M̄; None before any request finished.
    pub fn mean_active_blocks(&self) -> Option<f64> {
        if self.held.is_empty() {
            return None;
        }
        Some((self.held_sum as f64 / self.held.len() as f64).max(1.0))
    }
    /// Every pin, by (deadline, program id).
    pub fn pins(&self) -> Vec<Pin> {
        self.pins.all()
    }
    /// The program's pin, None when it holds none (or is unknown).
    pub fn pin(&self, program_id: &str) -> Result<Option<Pin>> {
        check_id("program_id", program_id)?;
        Ok(self
            .programs
            .find(program_id)
            .and_then(|p| self.pins.get(p).cloned()))
    }
    /// Whether a live request waits or runs.
    pub fn state(&self, request_id: &str) -> Result<RequestState> {
        let slot = self.request_slot(request_id)?;
        Ok(if self.requests.get(slot).running {
            RequestState::Running
        } else {
            RequestState::Waiting
        })
    }
    /// The priority tuple of a waiting request.
    pub fn priority(&self, request_id: &str) -> Result<Priority> {
        let slot = self.request_slot(request_id)?;
        match self.queue.key(slot) {
            Some(k) => Ok(k.clone()),
            None => Err(Error::invalid(
                format!("request_id {}", PyStr(request_id)),
                "a running request",
                "waiting",
            )),
        }
    }
}

#[cfg(test)]
mod tests;
