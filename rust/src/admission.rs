//! Program-level admission and eviction order: which programs may run, whose cache goes
//! first. Mirrors `python/ttlpolicy/reference/admission.py`, whose module doc states every
//! rule (next use, working set, admission, eviction order) and the no-starvation invariant.
//!
//! The controller does not own the policy: the calls that read the tool-gap statistics take
//! `&TTLPolicy`, so the Python bindings keep using the very policy object the user holds.

use std::cmp::{Ordering, Reverse};
use std::collections::{BTreeMap, BinaryHeap};

use crate::config::PolicyConfig;
use crate::error::{Error, PyFloat, PyStr, Result};
use crate::fair_order::TenantShares;
use crate::id_hash::{IdMap, IdSet};
use crate::policy::{TTLPolicy, MAX_BLOCKS};
use crate::scheduler::{check_id, DEFAULT_MAX_IDLE_PROGRAMS, MAX_IDLE_PROGRAMS};
use crate::tenants::{is_inferred, tenant_of, TenantWeights};
use crate::validate::{finite, int_in, non_negative, tool_key};

/// Live programs tracked at once (each is forgotten when it ends).
pub const MAX_PROGRAMS: usize = 1 << 20;
/// Turns one admitted program may finish while the same head waits (the reference's module
/// doc: bounded wait).
pub const MAX_TURNS_AHEAD: u32 = 256;
/// Instants `next_shrink_s` tries under the expected working set (the reference's module
/// doc).
pub const SHRINK_LOOKS: usize = 256;

/// The first instant `t` from `since_s + elapsed_s` on whose time since `since_s` (`t -
/// since_s`, as the rules compute it) is at least `elapsed_s` (`beyond`: more than); `inf` if
/// none is finite. `since_s + elapsed_s` alone can round a few ulps short; past a few steps
/// (near 0 the float grid is fine: `since_s = -elapsed_s` would take ~10^18 steps) the
/// boundary is bisected over the floats' order, where `t - since_s` never falls.
fn first_instant(since_s: f64, elapsed_s: f64, beyond: bool) -> f64 {
    let reached = |t: f64| t - since_s > elapsed_s || (!beyond && t - since_s == elapsed_s);
    let mut t = since_s + elapsed_s;
    if !t.is_finite() {
        return f64::INFINITY;
    }
    for _ in 0..FIRST_INSTANT_STEPS {
        if reached(t) {
            return t;
        }
        t = t.next_up();
    }
    if reached(t) {
        return t;
    }
    // (`t` not reached, `inf` reached: the first reached float lies in between)
    let (mut lo, mut hi) = (
        i128::from(float_order(t)),
        i128::from(float_order(f64::INFINITY)),
    );
    while hi - lo > 1 {
        let mid = (lo + hi) / 2;
        if reached(float_at_order(mid as i64)) {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    float_at_order(hi as i64)
}

/// `next_up` steps `first_instant` takes before it bisects.
const FIRST_INSTANT_STEPS: usize = 4;

/// A float's place in the floats' order (as `f64::total_cmp`), as an integer.
fn float_order(x: f64) -> i64 {
    let b = x.to_bits() as i64;
    b ^ ((((b >> 63) as u64) >> 1) as i64)
}

/// The float at that place (`float_order`'s inverse).
fn float_at_order(k: i64) -> f64 {
    f64::from_bits((k ^ ((((k >> 63) as u64) >> 1) as i64)) as u64)
}

/// Where a program stands in the eviction order by itself, first to go first (the
/// reference's `_place`): not expected back; away, by the latest expected return instant;
/// away on the prior; live. Ties: the latest arrival, then the id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Class {
    Gone,
    Away,
    Prior,
    Live,
}

#[derive(Debug, Clone, Copy)]
struct Place {
    class: Class,
    /// `Away`: when the program is expected back (the latest goes first); else 0.
    back_s: f64,
}

impl Place {
    fn cmp(&self, other: &Place) -> Ordering {
        self.class.cmp(&other.class).then_with(|| {
            // partial_cmp so that 0.0 == -0.0 as in Python
            other
                .back_s
                .partial_cmp(&self.back_s)
                .unwrap_or(Ordering::Equal)
        })
    }
}

/// A known program in an eviction order: its state, id and the durations it is judged by.
struct Member<'a> {
    prog: &'a Program,
    id: &'a str,
    samples: &'a [f64],
    max_ttl_s: f64,
}

impl Member<'_> {
    fn place(&self, t: f64) -> Place {
        let (class, median) = standing(self.prog, self.samples, self.max_ttl_s, t);
        let back_s = match (class, self.prog.away_since_s) {
            (Class::Away, Some(since)) => since + median,
            _ => 0.0,
        };
        Place { class, back_s }
    }

    /// Whether `self` sorts before `other` when `self` stands at `place` and `other` at
    /// `at_place`: the sort's comparison (place, then latest arrival, then id).
    fn before(&self, place: Place, other: &Member<'_>, other_place: Place) -> bool {
        place
            .cmp(&other_place)
            .then_with(|| {
                other
                    .prog
                    .arrival_s
                    .partial_cmp(&self.prog.arrival_s)
                    .unwrap_or(Ordering::Equal)
            })
            .then_with(|| self.id.cmp(other.id))
            == Ordering::Less
    }

    fn cmp_at(&self, other: &Member<'_>, t: f64) -> Ordering {
        self.cmp_placed(self.place(t), other, other.place(t))
    }

    /// The sort's comparison of `self` standing at `place` with `other` at `other_place`.
    fn cmp_placed(&self, place: Place, other: &Member<'_>, other_place: Place) -> Ordering {
        if self.before(place, other, other_place) {
            Ordering::Less
        } else if other.before(other_place, self, place) {
            Ordering::Greater
        } else {
            Ordering::Equal
        }
    }

    /// The first instant in `(after_s, until_s]` at which `self` sorts before `other`
    /// standing at `other_place`; None if none. Its place moves only at its jumps (a
    /// recorded duration reached, `max_ttl_s` passed) and only forward, so that is the
    /// first jump whose place passes, found by bisection.
    fn first_before(
        &self,
        other: &Member<'_>,
        other_place: Place,
        after_s: f64,
        until_s: f64,
    ) -> Option<f64> {
        let p = self.prog;
        let (0, Some(_), Some(since)) = (p.live, p.tool.as_deref(), p.away_since_s) else {
            return None; // live or gone: its place never moves
        };
        if after_s - since > self.max_ttl_s {
            return None; // gone for good
        }
        let passes = |at: f64| self.before(self.place(at), other, other_place);
        let reach = |j: usize| first_instant(since, self.samples[j], false);
        let k0 = self.samples.partition_point(|&x| x <= after_s - since);
        // the first jump at a recorded duration whose place passes (passes() is monotone)
        let (mut lo, mut hi) = (k0, self.samples.len());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if passes(reach(mid)) {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        let mut first = if lo < self.samples.len() {
            reach(lo)
        } else {
            f64::INFINITY
        };
        let leave = first_instant(since, self.max_ttl_s, true);
        if leave < first && passes(leave) {
            first = leave;
        }
        (first <= until_s).then_some(first)
    }
}

/// How long a program away, judged by `samples`, may stay expected back (the reference's
/// `away_limit_s`, whose doc says why): `max_ttl_s`, and on the prior (no duration
/// recorded) at most `prior_mean_s · (1 + ln(window))`; an `inferred` program at most
/// [`inferred_away_limit_s`] as well.
fn away_limit_s(cfg: &PolicyConfig, samples: &[f64], inferred: bool) -> f64 {
    let limit_s = if samples.is_empty() {
        cfg.max_ttl_s
            .min(cfg.prior_mean_s * (1.0 + (cfg.window as f64).ln()))
    } else {
        cfg.max_ttl_s
    };
    if inferred {
        return limit_s.min(inferred_away_limit_s(cfg, samples));
    }
    limit_s
}

/// How long an inferred program away may stay expected back (the reference's
/// `inferred_away_limit_s`): the `inferred_away_quantile` of `samples` (nearest rank, at
/// least the first), or on the prior its quantile `-prior_mean_s · ln(1 - q)`; `inf` at 1.
fn inferred_away_limit_s(cfg: &PolicyConfig, samples: &[f64]) -> f64 {
    let q = cfg.inferred_away_quantile;
    if q >= 1.0 {
        return f64::INFINITY;
    }
    if samples.is_empty() {
        return -cfg.prior_mean_s * (1.0 - q).ln();
    }
    let rank = (q * samples.len() as f64).ceil() as usize;
    samples[rank.saturating_sub(1)]
}

/// How a program stands at `t` (the reference's `_standing`): its class and, away, the
/// median of its tool's durations (`samples`) longer than its time away (nearest rank); else
/// 0. Both its next use and its place in the eviction order follow from these.
fn standing(prog: &Program, samples: &[f64], max_ttl_s: f64, t: f64) -> (Class, f64) {
    if prog.live > 0 {
        return (Class::Live, 0.0);
    }
    let (Some(_), Some(since)) = (prog.tool.as_deref(), prog.away_since_s) else {
        return (Class::Gone, 0.0);
    };
    let elapsed = t - since;
    if elapsed > max_ttl_s {
        return (Class::Gone, 0.0); // away longer than any pin lasts: not expected back
    }
    let n = samples.len();
    if n == 0 {
        return (Class::Prior, 0.0);
    }
    let k = samples.partition_point(|&x| x <= elapsed); // bisect_right
    if k == n {
        return (Class::Gone, 0.0);
    }
    (Class::Away, samples[k + (n - k).div_ceil(2) - 1])
}

/// The first instant in `(t, until_s]` at which `p`, just after `u` in the eviction order at
/// `t`, sorts before it; None if none. While `u` stands still that is `p`'s first jump past
/// `u`'s place; `u` moves only forward, so if `u` too has moved by then, look again from
/// there (each look starts past one of `u`'s jumps: this ends).
fn first_pass(u: &Member<'_>, p: &Member<'_>, t: f64, until_s: f64) -> Option<f64> {
    let mut after_s = t;
    loop {
        let at = p.first_before(u, u.place(after_s), after_s, until_s)?;
        if p.cmp_at(u, at) == Ordering::Less {
            return Some(at);
        }
        after_s = at;
    }
}

#[derive(Debug, Clone)]
struct Program {
    arrival_s: f64,
    blocks: i64,
    /// Its tenant's key (`tenant_of` its id).
    tenant: Box<str>,
    /// Its id says an engine inferred it (`is_inferred`): away, it is judged by
    /// `inferred_away_limit_s` too.
    inferred: bool,
    rebuild_s: f64,
    admitted: bool,
    live: u64,
    tool: Option<String>,
    away_since_s: Option<f64>,
    /// Key in `idle` while the program has no live request.
    idle_seq: Option<u64>,
    /// Turns finished while the head of refusal episode `turns_epoch` waited.
    turns_ahead: u32,
    turns_epoch: u64,
}

/// When a member's share of the expected working set may next fall: (instant, member),
/// earliest first.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Fall(f64, usize);

impl Eq for Fall {}

impl PartialOrd for Fall {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Fall {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.total_cmp(&other.0).then(self.1.cmp(&other.1))
    }
}

/// The admitted programs' load at an instant (`AdmissionControl::load_beside`).
struct Load {
    /// The working set.
    working: i64,
    /// Their summed footprint.
    total: i64,
    /// How many.
    count: i64,
    /// Whether one arrived at the instant asked about.
    cohort: bool,
}

/// A pending entry: (first arrival, program id), oldest first.
#[derive(Debug, Clone, PartialEq)]
struct Pending(f64, String);

impl Eq for Pending {}

impl PartialOrd for Pending {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Pending {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0
            .total_cmp(&other.0)
            .then_with(|| self.1.cmp(&other.1))
    }
}

/// A tenant of known programs (the reference's `_Tenant`): how many (it is active while it
/// has any), its weight, and its programs not yet admitted, oldest first (stale entries
/// skipped lazily).
#[derive(Debug, Clone)]
struct TenantQueue {
    programs: usize,
    weight: i64,
    pending: BinaryHeap<Reverse<Pending>>,
}

/// Working-set admission and next-use eviction order. See the module doc.
#[derive(Debug, Clone)]
pub struct AdmissionControl {
    total_blocks: i64,
    programs: IdMap<String, Program>,
    pending: BinaryHeap<Reverse<Pending>>,
    /// Ids of the admitted programs (the working set is summed over them only).
    admitted: IdSet<String>,
    now: f64,
    /// Programs with no live request, by when they became so (oldest first).
    idle: BTreeMap<u64, String>,
    /// Each tenant's share of the idle programs (the cap is shared fairly: `fair_order`).
    idle_shares: TenantShares<()>,
    idle_seq: u64,
    max_idle_programs: usize,
    dropped_idle_programs: u64,
    /// The head last refused, (arrival, id), while it waits; its episode's number; whether an
    /// admitted program has run `MAX_TURNS_AHEAD` turns ahead of it (bounded wait).
    refused: Option<(f64, String)>,
    refusal_epoch: u64,
    head_due: bool,
    weights: TenantWeights,
    /// The active tenants (with a known program), by key, and their summed weight.
    tenants: IdMap<String, TenantQueue>,
    tenants_weight: i64,
}

impl AdmissionControl {
    /// A controller for an engine of `total_blocks` KV blocks (1 to `MAX_BLOCKS`), keeping
    /// at most [`DEFAULT_MAX_IDLE_PROGRAMS`] idle programs.
    pub fn new(total_blocks: i64) -> Result<Self> {
        Self::with_max_idle_programs(total_blocks, DEFAULT_MAX_IDLE_PROGRAMS)
    }

    /// [`new`](Self::new) with a cap of `max_idle_programs` idle programs (no live request):
    /// beyond it the one idle longest is forgotten, shared fairly among tenants
    /// (`fair_order`), as by [`end`](Self::end).
    pub fn with_max_idle_programs(total_blocks: i64, max_idle_programs: i64) -> Result<Self> {
        let total_blocks = int_in("total_blocks", total_blocks, 1, MAX_BLOCKS)?;
        let max_idle_programs =
            int_in("max_idle_programs", max_idle_programs, 0, MAX_IDLE_PROGRAMS)? as usize;
        Ok(AdmissionControl {
            total_blocks,
            programs: IdMap::default(),
            pending: BinaryHeap::new(),
            admitted: IdSet::default(),
            now: f64::NEG_INFINITY,
            idle: BTreeMap::new(),
            idle_shares: TenantShares::default(),
            idle_seq: 0,
            max_idle_programs,
            dropped_idle_programs: 0,
            refused: None,
            refusal_epoch: 0,
            head_due: false,
            weights: TenantWeights::default(),
            tenants: IdMap::default(),
            tenants_weight: 0,
        })
    }

    /// The same controller with its tenants' shares of `total_blocks` weighted by `weights`
    /// (default: equal). Set it before use.
    pub fn with_tenant_weights(mut self, weights: TenantWeights) -> Self {
        self.weights = weights;
        self
    }

    /// The cap on idle programs kept.
    pub fn max_idle_programs(&self) -> usize {
        self.max_idle_programs
    }

    /// Idle programs forgotten because of the cap.
    pub fn dropped_idle_programs(&self) -> u64 {
        self.dropped_idle_programs
    }

    /// The engine's KV blocks.
    pub fn total_blocks(&self) -> i64 {
        self.total_blocks
    }

    fn check_now(&self, now: f64) -> Result<f64> {
        let t = finite("now", now)? + 0.0; // -0.0 → 0.0, as the reference
        if t < self.now {
            return Err(Error::invalid_f64(
                "now",
                t,
                format!(">= {} (time never goes back)", PyFloat(self.now)),
            ));
        }
        Ok(t)
    }

    fn known(&self, program_id: &str) -> Result<()> {
        check_id("program_id", program_id)?;
        if self.programs.contains_key(program_id) {
            Ok(())
        } else {
            Err(Error::unknown("program_id", PyStr(program_id)))
        }
    }

    /// What [`arrive`](Self::arrive) would refuse, changing nothing (the lifecycle asks it
    /// before the scheduler takes the request, so that a refusal leaves both as they were);
    /// else the checked `now` and `blocks_needed`.
    pub(crate) fn check_arrive(
        &self,
        program_id: &str,
        now: f64,
        blocks_needed: i64,
    ) -> Result<(f64, i64)> {
        check_id("program_id", program_id)?;
        let t = self.check_now(now)?;
        let blocks = int_in("blocks_needed", blocks_needed, 0, self.total_blocks)?;
        if !self.programs.contains_key(program_id) && self.programs.len() >= MAX_PROGRAMS {
            return Err(Error::invalid(
                "program_id",
                format!("{} (a new program)", PyStr(program_id)),
                format!("one of at most {MAX_PROGRAMS} tracked programs; end some first"),
            ));
        }
        Ok((t, blocks))
    }

    /// What [`finish`](Self::finish) would refuse, changing nothing (the lifecycle asks it
    /// before the scheduler commits a finish, so that a refusal leaves both as they were).
    pub(crate) fn check_finish(
        &self,
        program_id: &str,
        now: f64,
        blocks_held: i64,
        rebuild_s: f64,
    ) -> Result<()> {
        self.known(program_id)?;
        self.check_now(now)?;
        int_in("blocks_held", blocks_held, 0, self.total_blocks)?;
        non_negative("rebuild_s", rebuild_s)?;
        if self.programs[program_id].live == 0 {
            return Err(Error::invalid(
                "program_id",
                PyStr(program_id),
                "a program with a live request",
            ));
        }
        Ok(())
    }

    // -- events ------------------------------------------------------------------------------

    /// A request of the program arrives (its first one makes the program known).
    pub fn arrive(&mut self, program_id: &str, now: f64, blocks_needed: i64) -> Result<()> {
        let (t, blocks) = self.check_arrive(program_id, now, blocks_needed)?;
        self.arrive_checked(program_id, t, blocks);
        Ok(())
    }

    /// [`arrive`](Self::arrive) with what [`check_arrive`](Self::check_arrive) returned
    /// (nothing changed in between).
    pub(crate) fn arrive_checked(&mut self, program_id: &str, t: f64, blocks: i64) {
        if !self.programs.contains_key(program_id) {
            self.programs.insert(
                program_id.to_owned(),
                Program {
                    arrival_s: t,
                    blocks,
                    tenant: Box::from(tenant_of(program_id)),
                    inferred: is_inferred(program_id),
                    rebuild_s: 0.0,
                    admitted: false,
                    live: 0,
                    tool: None,
                    away_since_s: None,
                    idle_seq: None,
                    turns_ahead: 0,
                    turns_epoch: 0,
                },
            );
            self.pending
                .push(Reverse(Pending(t, program_id.to_owned())));
            Self::compact_pending(&self.programs, &mut self.pending, self.programs.len());
            let key = tenant_of(program_id);
            if !self.tenants.contains_key(key) {
                let weight = self.weights.weight(key);
                self.tenants_weight += weight;
                let queue = TenantQueue {
                    programs: 0,
                    weight,
                    pending: BinaryHeap::new(),
                };
                self.tenants.insert(key.to_owned(), queue);
            }
            let queue = self.tenants.get_mut(key).expect("inserted above");
            queue.programs += 1;
            queue
                .pending
                .push(Reverse(Pending(t, program_id.to_owned())));
            let programs = queue.programs;
            Self::compact_pending(&self.programs, &mut queue.pending, programs);
        }
        let prog = self.programs.get_mut(program_id).expect("inserted above");
        if let Some(seq) = prog.idle_seq.take() {
            self.idle.remove(&seq);
            let idle = &self.idle;
            self.idle_shares
                .sub(&prog.tenant, |at, ()| idle.contains_key(&at));
        }
        prog.blocks = prog.blocks.max(blocks);
        prog.live += 1;
        prog.away_since_s = None;
        self.now = t;
    }

    /// A request of the program ended holding `blocks_held` blocks, with a call to `tool`;
    /// `rebuild_s` is what losing its context would cost. A last turn ends the program.
    pub fn finish(
        &mut self,
        program_id: &str,
        now: f64,
        blocks_held: i64,
        tool: Option<&str>,
        rebuild_s: f64,
        last_turn: bool,
    ) -> Result<()> {
        self.known(program_id)?;
        let t = self.check_now(now)?;
        let blocks = int_in("blocks_held", blocks_held, 0, self.total_blocks)?;
        let rebuild = non_negative("rebuild_s", rebuild_s)?;
        if self.programs[program_id].live == 0 {
            return Err(Error::invalid(
                "program_id",
                PyStr(program_id),
                "a program with a live request",
            ));
        }
        self.now = t;
        if last_turn {
            self.end_known(program_id);
            return Ok(());
        }
        let prog = self.programs.get_mut(program_id).expect("checked above");
        prog.blocks = prog.blocks.max(blocks);
        prog.rebuild_s = rebuild;
        prog.live -= 1;
        if prog.admitted && self.refused.is_some() {
            // a turn finished while the head last refused waits
            if prog.turns_epoch != self.refusal_epoch {
                prog.turns_epoch = self.refusal_epoch;
                prog.turns_ahead = 0;
            }
            prog.turns_ahead += 1;
            self.head_due |= prog.turns_ahead >= MAX_TURNS_AHEAD;
        }
        if prog.live == 0 {
            prog.tool = tool.map(|s| tool_key(s).to_owned());
            prog.away_since_s = Some(t);
            let tenant = tenant_of(program_id);
            // room first: what goes is chosen as the program is about to join (`fair_order`)
            while !self.idle.is_empty() && self.idle.len() >= self.max_idle_programs {
                let (_, oldest) = self.idle.first_key_value().expect("not empty");
                let gone = if self.idle_shares.own_goes(tenant, tenant_of(oldest)) {
                    let idle = &self.idle;
                    let (at, ()) = self
                        .idle_shares
                        .oldest(tenant, |at, ()| idle.contains_key(&at))
                        .expect("a tenant holding more idle programs than another");
                    self.idle[&at].clone()
                } else {
                    oldest.clone()
                };
                self.end_known(&gone);
                self.dropped_idle_programs += 1;
            }
            if self.max_idle_programs == 0 {
                // no room at all: it goes itself
                self.end_known(program_id);
                self.dropped_idle_programs += 1;
                return Ok(());
            }
            let seq = self.idle_seq;
            self.idle_seq += 1;
            self.idle.insert(seq, program_id.to_owned());
            self.programs
                .get_mut(program_id)
                .expect("kept: not idle while room was made")
                .idle_seq = Some(seq);
            let idle = &self.idle;
            self.idle_shares
                .add(tenant, seq, (), |at, ()| idle.contains_key(&at));
        }
        Ok(())
    }

    /// The program ended (or was aborted): forget it.
    pub fn end(&mut self, program_id: &str) -> Result<()> {
        self.known(program_id)?;
        self.end_known(program_id);
        Ok(())
    }

    fn end_known(&mut self, program_id: &str) {
        if let Some(prog) = self.programs.remove(program_id) {
            if prog.admitted {
                self.admitted.remove(program_id);
            }
            if let Some(seq) = prog.idle_seq {
                self.idle.remove(&seq);
                let idle = &self.idle;
                self.idle_shares
                    .sub(&prog.tenant, |at, ()| idle.contains_key(&at));
            }
            let queue = self
                .tenants
                .get_mut(&*prog.tenant)
                .expect("a known program's tenant is active");
            queue.programs -= 1;
            if queue.programs == 0 {
                self.tenants_weight -= queue.weight;
                self.tenants.remove(&*prog.tenant);
            }
        }
    }

    // -- the rules ---------------------------------------------------------------------------

    /// The sorted durations a program away on `tool` is judged by (see the module doc).
    fn samples<'a>(policy: &'a TTLPolicy, tenant: &str, tool: &str) -> &'a [f64] {
        let history = policy.history();
        let min = policy.config().min_tool_samples.max(1) as usize;
        match history.window_of(tenant, Some(tool)) {
            Some(w) if w.len() >= min => w.sorted(),
            _ => history.global().sorted(),
        }
    }

    /// The durations a program away is judged by (none for a live program or one away
    /// without a tool).
    fn samples_of<'a>(policy: &'a TTLPolicy, prog: &Program) -> &'a [f64] {
        match (prog.live, prog.tool.as_deref()) {
            (0, Some(tool)) => Self::samples(policy, &prog.tenant, tool),
            _ => &[],
        }
    }

    fn next_use(prog: &Program, policy: &TTLPolicy, t: f64) -> f64 {
        let cfg = policy.config();
        let samples = Self::samples_of(policy, prog);
        let limit_s = away_limit_s(cfg, samples, prog.inferred);
        let (class, median) = standing(prog, samples, limit_s, t);
        match (class, prog.away_since_s) {
            (Class::Away, Some(since)) => median - (t - since),
            (Class::Prior, _) => cfg.prior_mean_s * std::f64::consts::LN_2,
            (Class::Live, _) => 0.0,
            _ => f64::INFINITY, // gone: e.g. away longer than any pin lasts
        }
    }

    /// Expected seconds until the program uses its context again; `inf` if unknown.
    pub fn next_use_s(&mut self, policy: &TTLPolicy, program_id: &str, now: f64) -> Result<f64> {
        check_id("program_id", program_id)?;
        let t = self.check_now(now)?;
        Ok(match self.programs.get(program_id) {
            Some(prog) => Self::next_use(prog, policy, t),
            None => f64::INFINITY,
        })
    }

    /// When a program of the working set at `t` (next use `<= limit_s`) first leaves it
    /// with no event in between; `inf` if it never does (the reference's `_leave_s`, which
    /// scans the recorded durations one by one; this skips runs of them that cannot be the
    /// one, and gives up past `until_s`, a leave already found elsewhere).
    fn leave_s(prog: &Program, policy: &TTLPolicy, t: f64, limit_s: f64, until_s: f64) -> f64 {
        let (Some(tool), Some(since), 0) = (prog.tool.as_deref(), prog.away_since_s, prog.live)
        else {
            return f64::INFINITY;
        };
        let samples = Self::samples(policy, &prog.tenant, tool);
        let max_ttl_s = away_limit_s(policy.config(), samples, prog.inferred);
        let leave = first_instant(since, max_ttl_s, true);
        let n = samples.len();
        let elapsed = t - since;
        // Away past samples[j - 1] (j durations passed), the next use is the median of the
        // rest, samples[(n + j - 1) / 2], minus that time: j = n, or that minus samples[j - 1]
        // above limit_s, is a leave. (Within a run of equal durations a j short of the run's
        // end has a median no later: the run's end leaves at the same instant if it does.)
        let median = |j: usize| samples[(n + j - 1) / 2];
        let mut j = samples.partition_point(|&x| x <= elapsed) + 1;
        while j <= n {
            let d = samples[j - 1];
            if d > max_ttl_s || since + d > until_s {
                break;
            }
            if j == n || median(j) - d > limit_s {
                return first_instant(since, d, false).min(leave);
            }
            // Skip j + 1 ..= j + w when none can leave: each one's median is at most
            // median(j + w) and its time away at least samples[j].
            let mut w = 0;
            while j + 2 * w + 1 < n && median(j + 2 * w + 1) - samples[j] <= limit_s {
                w = 2 * w + 1;
            }
            j += w + 1;
        }
        leave
    }

    /// The first instant after `now` at which the working set may shrink with no event in
    /// between; `inf` if it never does. A program refused admission at `now` stays refused
    /// until then (see the module doc: when to ask again).
    pub fn next_shrink_s(&self, policy: &TTLPolicy, now: f64) -> Result<f64> {
        let t = self.check_now(now)?;
        if policy.config().expected_working_set {
            return Ok(self.expected_shrink_s(policy, t));
        }
        let mut first = f64::INFINITY;
        for id in &self.admitted {
            let p = &self.programs[id.as_str()];
            let limit_s = self.horizon_s(p, policy);
            if Self::next_use(p, policy, t) <= limit_s {
                first = first.min(Self::leave_s(p, policy, t, limit_s, first));
            }
        }
        Ok(first)
    }

    /// The working set at which the oldest waiting program is admitted (equal arrivals: the
    /// smallest of them), or, with nobody waiting, one block below the working set at `t`.
    fn room_blocks(&self, policy: &TTLPolicy, t: f64) -> i64 {
        let waiting = || self.programs.values().filter(|p| !p.admitted);
        let first_s = waiting().map(|p| p.arrival_s).min_by(f64::total_cmp);
        let (Some(first_s), false) = (first_s, self.admitted.is_empty()) else {
            return self.working_set(policy, t) - 1;
        };
        let admitted: i64 = self
            .admitted
            .iter()
            .map(|a| self.programs[a.as_str()].blocks)
            .sum();
        let mean = admitted / self.admitted.len() as i64;
        let need = waiting()
            .filter(|p| p.arrival_s == first_s)
            .map(|p| p.blocks.max(mean))
            .min()
            .expect("the oldest waiting program");
        self.total_blocks - need
    }

    /// The first instant after `after_s` at which a member's share of the expected working
    /// set may fall with no event (the reference's `_fall_s`); `inf` when it is live or not
    /// expected back.
    fn fall_s(prog: &Program, policy: &TTLPolicy, after_s: f64) -> f64 {
        let (Some(tool), Some(since), 0) = (prog.tool.as_deref(), prog.away_since_s, prog.live)
        else {
            return f64::INFINITY;
        };
        let samples = Self::samples(policy, &prog.tenant, tool);
        let max_ttl_s = away_limit_s(policy.config(), samples, prog.inferred);
        if after_s - since > max_ttl_s {
            return f64::INFINITY;
        }
        let leave = first_instant(since, max_ttl_s, true);
        if samples.is_empty() {
            return leave; // the prior's share is constant until then
        }
        match samples.get(samples.partition_point(|&x| x <= after_s - since)) {
            Some(&d) => first_instant(since, d, false).min(leave),
            None => f64::INFINITY, // past every record: counts nothing until an event
        }
    }

    /// `next_shrink_s` under the expected working set (the reference's module doc). The
    /// reference sums the whole working set at every instant a member may fall; this keeps
    /// each member's share as of its own latest fall (a heap of the next ones) and sums the
    /// whole only when those shares leave room. A share only grows between its own falls,
    /// so while they leave no room the whole does not either: the same answer.
    fn expected_shrink_s(&self, policy: &TTLPolicy, t: f64) -> f64 {
        if self.tenants.len() > 1 {
            // any member's fall may make room in its tenant's share
            return self
                .admitted
                .iter()
                .map(|id| Self::fall_s(&self.programs[id.as_str()], policy, t))
                .fold(f64::INFINITY, f64::min);
        }
        let room = self.room_blocks(policy, t);
        let members: Vec<(&Program, f64)> = self
            .admitted
            .iter()
            .map(|id| {
                let p = &self.programs[id.as_str()];
                (p, self.horizon_s(p, policy))
            })
            .collect();
        let share =
            |i: usize, at: f64| Self::expected_blocks(members[i].0, policy, at, members[i].1);
        let mut shares: Vec<i64> = (0..members.len()).map(|i| share(i, t)).collect();
        let mut sum: i64 = shares.iter().sum();
        let mut falls: BinaryHeap<Reverse<Fall>> = BinaryHeap::new();
        let push = |falls: &mut BinaryHeap<Reverse<Fall>>, i: usize, after_s: f64| {
            let at = Self::fall_s(members[i].0, policy, after_s);
            if at < f64::INFINITY {
                falls.push(Reverse(Fall(at, i)));
            }
        };
        for i in 0..members.len() {
            push(&mut falls, i, t);
        }
        let mut at = t;
        for _ in 0..SHRINK_LOOKS {
            let Some(&Reverse(Fall(next, _))) = falls.peek() else {
                return f64::INFINITY;
            };
            at = next;
            while let Some(&Reverse(Fall(when, i))) = falls.peek() {
                if when != at {
                    break;
                }
                falls.pop();
                let now_share = share(i, at);
                sum += now_share - shares[i];
                shares[i] = now_share;
                push(&mut falls, i, at);
            }
            if sum <= room {
                for (i, s) in shares.iter_mut().enumerate() {
                    *s = share(i, at); // the others' shares may have grown since their falls
                }
                sum = shares.iter().sum();
                if sum <= room {
                    return at;
                }
            }
        }
        at
    }

    /// How soon a member must be back to be worth keeping: `n · rebuild_s`, scaled.
    fn horizon_s(&self, prog: &Program, policy: &TTLPolicy) -> f64 {
        let scale = policy.config().working_set_horizon_scale;
        prog.rebuild_s * self.admitted.len() as f64 * scale
    }

    /// A member's share of the expected working set (the reference's `_expected_blocks`).
    /// (`standing`'s classes, without its median: two binary searches, not three.)
    fn expected_blocks(prog: &Program, policy: &TTLPolicy, t: f64, horizon_s: f64) -> i64 {
        Self::expected_blocks_in(prog, policy, Self::samples_of(policy, prog), t, horizon_s)
    }

    /// [`expected_blocks`](Self::expected_blocks) given the program's durations
    /// ([`samples_of`](Self::samples_of)).
    fn expected_blocks_in(
        prog: &Program,
        policy: &TTLPolicy,
        samples: &[f64],
        t: f64,
        horizon_s: f64,
    ) -> i64 {
        if prog.live > 0 {
            return prog.blocks;
        }
        let cfg = policy.config();
        let (Some(_), Some(since)) = (prog.tool.as_deref(), prog.away_since_s) else {
            return 0; // not expected back
        };
        let elapsed = t - since;
        if elapsed > away_limit_s(cfg, samples, prog.inferred) {
            return 0;
        }
        if samples.is_empty() {
            // the prior: whole when its next use is within the horizon, as the median rule
            let within = cfg.prior_mean_s * std::f64::consts::LN_2 <= horizon_s;
            return if within { prog.blocks } else { 0 };
        }
        let longer = samples.partition_point(|&x| x <= elapsed);
        if longer == samples.len() {
            return 0; // away past every record
        }
        let reach_s = elapsed + horizon_s;
        let within = longer + samples[longer..].partition_point(|&x| x <= reach_s);
        // (i128: blocks up to 2^40 times a window of up to 2^20 durations)
        let num = i128::from(prog.blocks) * (within - longer) as i128;
        let den = (samples.len() - longer) as i128;
        ((num + den - 1) / den) as i64 // rounded up, as the reference
    }

    fn working_set(&self, policy: &TTLPolicy, t: f64) -> i64 {
        self.load_beside(policy, t, f64::NAN, None).working
    }

    /// The admitted programs' load, and whether one arrived at `arrival_s` (its cohort is
    /// admitted): may_run's one pass over the members.
    /// Of `tenant`'s members only, when given.
    fn load_beside(
        &self,
        policy: &TTLPolicy,
        t: f64,
        arrival_s: f64,
        tenant: Option<&str>,
    ) -> Load {
        let expected = policy.config().expected_working_set;
        let (mut working, mut total, mut count, mut cohort) = (0i64, 0i64, 0i64, false);
        // members away on one tool read one window: looked up once per run of that tool
        let mut window: Option<(&str, &str, &[f64])> = None;
        for id in &self.admitted {
            let p = &self.programs[id.as_str()];
            if tenant.is_some_and(|k| *p.tenant != *k) {
                continue;
            }
            count += 1;
            total += p.blocks;
            cohort |= p.arrival_s == arrival_s;
            let horizon_s = self.horizon_s(p, policy);
            if expected {
                let samples = match (p.live, p.tool.as_deref()) {
                    (0, Some(tool)) => match window {
                        Some((tenant, last, samples)) if last == tool && tenant == &*p.tenant => {
                            samples
                        }
                        _ => {
                            let samples = Self::samples(policy, &p.tenant, tool);
                            window = Some((&*p.tenant, tool, samples));
                            samples
                        }
                    },
                    _ => &[],
                };
                working += Self::expected_blocks_in(p, policy, samples, t, horizon_s);
            } else if Self::next_use(p, policy, t) <= horizon_s {
                working += p.blocks;
            }
        }
        Load {
            working,
            total,
            count,
            cohort,
        }
    }

    /// The working set at `now` (see the module doc).
    pub fn working_set_blocks(&self, policy: &TTLPolicy, now: f64) -> Result<i64> {
        let t = self.check_now(now)?;
        Ok(self.working_set(policy, t))
    }

    /// The oldest program not yet admitted (dropping stale heap entries).
    fn head(&mut self) -> Option<f64> {
        Self::head_of(&self.programs, &mut self.pending)
    }

    /// Drops `pending`'s stale entries (those `head_of` would drop) once they outnumber the
    /// `programs` that could be current, and gives memory back: a queue's head is only looked
    /// at when a program waits, so without this each program ever seen left an entry
    /// (amortized O(log n) a push).
    fn compact_pending(
        programs: &IdMap<String, Program>,
        pending: &mut BinaryHeap<Reverse<Pending>>,
        current_at_most: usize,
    ) {
        if pending.len() > 2 * current_at_most + 16 {
            pending.retain(|Reverse(Pending(arrival, pid))| {
                matches!(programs.get(pid), Some(p) if !p.admitted && p.arrival_s == *arrival)
            });
            if pending.capacity() > 4 * pending.len() + 64 {
                pending.shrink_to(2 * pending.len() + 16);
            }
        }
    }

    /// The arrival of the oldest program of `pending` not yet admitted (dropping stale
    /// entries: admitted since, ended, or ended and back as a new program).
    fn head_of(
        programs: &IdMap<String, Program>,
        pending: &mut BinaryHeap<Reverse<Pending>>,
    ) -> Option<f64> {
        while let Some(Reverse(Pending(arrival, pid))) = pending.peek() {
            if matches!(programs.get(pid), Some(p) if !p.admitted && p.arrival_s == *arrival) {
                return Some(*arrival);
            }
            pending.pop();
        }
        None
    }

    /// Is the program its tenant's oldest waiting one, fitting its tenant's share beside its
    /// tenant's working set (the reference's `_within_share`)? False with one active tenant.
    fn within_share(&mut self, policy: &TTLPolicy, t: f64, program_id: &str) -> bool {
        if self.tenants.len() < 2 {
            return false;
        }
        let prog = &self.programs[program_id];
        let (arrival, blocks, key) = (prog.arrival_s, prog.blocks, prog.tenant.clone());
        let queue = self
            .tenants
            .get_mut(&*key)
            .expect("a known program's tenant");
        match Self::head_of(&self.programs, &mut queue.pending) {
            Some(oldest) if oldest >= arrival => {}
            _ => return false,
        }
        let weight = queue.weight;
        let load = self.load_beside(policy, t, f64::NAN, Some(&key));
        let mean = if load.count > 0 {
            load.total / load.count
        } else {
            0
        };
        let need = load.working + blocks.max(mean);
        i128::from(need) * i128::from(self.tenants_weight)
            <= i128::from(self.total_blocks) * i128::from(weight)
    }

    /// May a request of the program be scheduled now? Admits the oldest waiting program
    /// when the rule allows. See the module doc.
    pub fn may_run(&mut self, policy: &TTLPolicy, program_id: &str, now: f64) -> Result<bool> {
        self.known(program_id)?;
        let t = self.check_now(now)?;
        self.now = t;
        let (admitted, arrival, blocks) = {
            let p = &self.programs[program_id];
            (p.admitted, p.arrival_s, p.blocks)
        };
        if admitted {
            return Ok(true);
        }
        match self.head() {
            Some(oldest) if oldest >= arrival => {}
            _ => {
                // an older program waits for admission; it holds back no other tenant's
                // program within that tenant's share
                if !self.within_share(policy, t, program_id) {
                    return Ok(false);
                }
                self.admit_known(program_id);
                return Ok(true);
            }
        }
        let n = self.admitted.len();
        if n > 0 {
            let load = self.load_beside(policy, t, arrival, None);
            // one program admitted, in flight: the mean is a guess from one (bounded wait)
            let alone_in_flight =
                n == 1 && self.admitted.iter().all(|id| self.programs[id].live > 0);
            // Expected footprint: its own, or the admitted programs' mean when larger.
            let mean = if alone_in_flight {
                0
            } else {
                load.total / n as i64
            };
            let expected = blocks.max(mean);
            let this_head = |r: &Option<(f64, String)>| matches!(r, Some((a, id)) if *a == arrival && id == program_id);
            let refused = !load.cohort
                && load.working + expected > self.total_blocks
                && !(self.head_due && this_head(&self.refused));
            if refused && !self.within_share(policy, t, program_id) {
                if !this_head(&self.refused) {
                    // a new wait: count turns anew
                    self.refused = Some((arrival, program_id.to_owned()));
                    self.refusal_epoch += 1;
                    self.head_due = false;
                }
                return Ok(false);
            }
        }
        self.admit_known(program_id);
        Ok(true)
    }

    fn admit_known(&mut self, program_id: &str) {
        let prog = self
            .programs
            .get_mut(program_id)
            .expect("checked by the caller");
        prog.admitted = true;
        let arrival = prog.arrival_s;
        self.admitted.insert(program_id.to_owned());
        if matches!(&self.refused, Some((a, id)) if *a == arrival && id == program_id) {
            self.refused = None;
            self.head_due = false;
        }
    }

    /// Admit the program now, whatever the working set: for requests load control must not
    /// hold back (an engine's anonymous one-request programs, served as stock).
    pub fn admit(&mut self, program_id: &str, now: f64) -> Result<()> {
        self.known(program_id)?;
        self.now = self.check_now(now)?;
        if !self.programs[program_id].admitted {
            self.admit_known(program_id);
        }
        Ok(())
    }

    /// `program_ids` sorted so that the first should be evicted first: unknown programs (in
    /// the order given), then by latest next use, latest-arrived program, id.
    pub fn eviction_order<S: AsRef<str>>(
        &mut self,
        policy: &TTLPolicy,
        program_ids: &[S],
        now: f64,
    ) -> Result<Vec<String>> {
        let ranks = self.eviction_ranks(policy, program_ids, now)?;
        Ok(ranks
            .into_iter()
            .map(|i| program_ids[i].as_ref().to_owned())
            .collect())
    }

    /// [`eviction_order`](Self::eviction_order) as positions in `program_ids` (the first to
    /// evict first), for a caller that holds its own object per id — the Python binding
    /// returns the very `str` objects it was given, as the reference does, instead of new
    /// copies; an engine may index its own table. Same checks, same order.
    pub fn eviction_ranks<S: AsRef<str>>(
        &mut self,
        policy: &TTLPolicy,
        program_ids: &[S],
        now: f64,
    ) -> Result<Vec<usize>> {
        for p in program_ids {
            check_id("program_ids", p.as_ref())?;
        }
        let t = self.check_now(now)?;
        self.now = t;
        let mut out: Vec<usize> = Vec::with_capacity(program_ids.len());
        let mut known: Vec<usize> = Vec::with_capacity(program_ids.len());
        for (i, p) in program_ids.iter().enumerate() {
            if self.programs.contains_key(p.as_ref()) {
                known.push(i);
            } else {
                out.push(i);
            }
        }
        out.extend(self.sorted_known(policy, program_ids, &known, t));
        Ok(out)
    }

    /// The members `known` (positions in `program_ids` of programs this controller knows).
    fn members<'a, S: AsRef<str>>(
        &'a self,
        policy: &'a TTLPolicy,
        program_ids: &'a [S],
        known: &[usize],
    ) -> Vec<(usize, Member<'a>)> {
        known
            .iter()
            .map(|&i| {
                let id = program_ids[i].as_ref();
                let prog = &self.programs[id];
                let samples = Self::samples_of(policy, prog);
                let member = Member {
                    prog,
                    id,
                    samples,
                    max_ttl_s: away_limit_s(policy.config(), samples, prog.inferred),
                };
                (i, member)
            })
            .collect()
    }

    /// The positions `known` (of programs in `program_ids` this controller knows) in eviction
    /// order at `t`.
    fn sorted_known<S: AsRef<str>>(
        &self,
        policy: &TTLPolicy,
        program_ids: &[S],
        known: &[usize],
        t: f64,
    ) -> Vec<usize> {
        self.sorted_members(policy, program_ids, known, t)
            .into_iter()
            .map(|(i, _)| i)
            .collect()
    }

    /// The members `known`, in eviction order at `t`: each one's place found once (a
    /// comparison would find it again, by binary search). A stable sort: equal ids keep the
    /// order given, as in the reference.
    fn sorted_members<'a, S: AsRef<str>>(
        &'a self,
        policy: &'a TTLPolicy,
        program_ids: &'a [S],
        known: &[usize],
        t: f64,
    ) -> Vec<(usize, Member<'a>)> {
        let mut placed: Vec<(usize, Member<'a>, Place)> = self
            .members(policy, program_ids, known)
            .into_iter()
            .map(|(i, m)| {
                let place = m.place(t);
                (i, m, place)
            })
            .collect();
        placed.sort_by(|(_, a, pa), (_, b, pb)| a.cmp_placed(*pa, b, *pb));
        placed.into_iter().map(|(i, m, _)| (i, m)).collect()
    }

    /// The first instant in `(now, until_s]` at which
    /// [`eviction_order`](Self::eviction_order) of `program_ids` differs from its answer at
    /// `now` with no event in between; `inf` if none (it looks no further than `until_s`).
    /// Moves no clock. Only a jump of a next use changes the order (the reference's
    /// `next_order_change_s` says why), which compares the order at each jump in time
    /// order. The same instant found pair by pair: the order first changes when a program
    /// first passes the one before it, and a program's place only moves forward, so each
    /// pair's first pass is a bisection of the passing program's jumps.
    pub fn next_order_change_s<S: AsRef<str>>(
        &self,
        policy: &TTLPolicy,
        program_ids: &[S],
        now: f64,
        until_s: f64,
    ) -> Result<f64> {
        for p in program_ids {
            check_id("program_ids", p.as_ref())?;
        }
        let t = self.check_now(now)?;
        let until = finite("until_s", until_s)?;
        // unknown programs go first, in a fixed order
        let known: Vec<usize> = (0..program_ids.len())
            .filter(|&i| self.programs.contains_key(program_ids[i].as_ref()))
            .collect();
        if known.len() < 2 || until <= t {
            return Ok(f64::INFINITY);
        }
        let members = self.sorted_members(policy, program_ids, &known, t);
        let mut first = f64::INFINITY;
        for pair in members.windows(2) {
            if let Some(at) = first_pass(&pair[0].1, &pair[1].1, t, first.min(until)) {
                first = at;
            }
        }
        Ok(first)
    }

    // -- views -------------------------------------------------------------------------------

    /// Whether the program is tracked (arrived, not ended, not forgotten while idle).
    pub fn knows(&self, program_id: &str) -> Result<bool> {
        check_id("program_id", program_id)?;
        Ok(self.programs.contains_key(program_id))
    }

    /// Whether the program is admitted (false for an unknown program).
    pub fn admitted(&self, program_id: &str) -> Result<bool> {
        check_id("program_id", program_id)?;
        Ok(self.programs.get(program_id).is_some_and(|p| p.admitted))
    }

    /// Programs admitted and not ended.
    pub fn admitted_count(&self) -> usize {
        self.admitted.len()
    }

    /// Programs known (admitted or waiting).
    pub fn program_count(&self) -> usize {
        self.programs.len()
    }

    /// Programs known and not yet admitted.
    pub fn waiting_count(&self) -> usize {
        self.programs.len() - self.admitted.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::PolicyConfig;

    fn policy() -> TTLPolicy {
        TTLPolicy::new(PolicyConfig::default()).unwrap()
    }

    #[test]
    fn the_first_instant_past_a_wait_is_found_near_zero_too() {
        // (since = -elapsed: the first float past 0 that reads as more than the wait; one
        // float at a time that took ~10^18 steps)
        for (since, elapsed, beyond) in [
            (-300.0, 300.0, true),
            (-300.0, 300.0, false),
            (1e9, 0.1, true),
            (-1e-300, 1e-300, true),
        ] {
            let t = first_instant(since, elapsed, beyond);
            let reached = |t: f64| t - since > elapsed || (!beyond && t - since == elapsed);
            assert!(reached(t) && t >= since + elapsed);
            assert!(t.next_down() < since + elapsed || !reached(t.next_down()));
        }
        assert_eq!(first_instant(f64::MAX, f64::MAX, true), f64::INFINITY);
    }

    #[test]
    fn pending_queues_stay_within_the_programs_kept() {
        // (a review's case: programs admitted at once, ended or forgotten as idle, each left
        // an entry in the queues, looked at only when a program waited)
        let pol = policy();
        let mut ac = AdmissionControl::with_max_idle_programs(1_000_000, 100).unwrap();
        for i in 0..5000 {
            let (p, t) = (format!("p{i}"), i as f64);
            ac.arrive(&p, t, 1).unwrap();
            assert!(ac.may_run(&pol, &p, t).unwrap());
            ac.finish(&p, t, 1, Some("bash"), 1.0, false).unwrap();
        }
        assert_eq!(ac.program_count(), 100);
        assert!(ac.pending.len() <= 2 * 100 + 17);
        assert!(ac.tenants[""].pending.len() <= 2 * 100 + 17);
    }

    #[test]
    fn admits_fcfs_while_the_working_set_fits() {
        let pol = policy();
        let mut ac = AdmissionControl::new(100).unwrap();
        ac.arrive("a", 0.0, 60).unwrap();
        ac.arrive("b", 1.0, 60).unwrap();
        // b is younger: it may not pass a.
        assert!(!ac.may_run(&pol, "b", 1.0).unwrap());
        assert!(ac.may_run(&pol, "a", 1.0).unwrap());
        // a is away on a tool (on the prior, back within its horizon): 60 + 60 > 100.
        ac.finish("a", 1.0, 60, Some("t"), 5.0, false).unwrap();
        assert!(!ac.may_run(&pol, "b", 1.0).unwrap());
        ac.end("a").unwrap();
        assert!(ac.may_run(&pol, "b", 2.0).unwrap());
        assert_eq!(ac.admitted_count(), 1);
    }

    #[test]
    fn the_expected_working_set_weighs_a_member_by_its_chance_to_be_back() {
        // the reference's test_admission.py case: a (40 blocks) away since 1 s on a tool of
        // gaps 1, 2, 3, 100 s, rebuilt in 1 s; b (30) live: a horizon of 2 s
        let cfg = PolicyConfig {
            min_tool_samples: 1,
            expected_working_set: true,
            working_set_horizon_scale: 1.0,
            ..PolicyConfig::default()
        };
        let mut pol = TTLPolicy::new(cfg).unwrap();
        for d in [1.0, 2.0, 3.0, 100.0] {
            pol.observe_tool("", Some("mix"), d).unwrap();
        }
        let mut ac = AdmissionControl::new(100).unwrap();
        ac.arrive("a", 0.0, 40).unwrap();
        assert!(ac.may_run(&pol, "a", 0.0).unwrap());
        ac.arrive("b", 0.5, 30).unwrap();
        assert!(ac.may_run(&pol, "b", 0.5).unwrap());
        ac.finish("a", 1.0, 40, Some("mix"), 1.0, false).unwrap();
        let sets: Vec<i64> = [1.0, 2.0, 3.0, 4.0]
            .iter()
            .map(|&t| ac.working_set_blocks(&pol, t).unwrap())
            .collect();
        assert_eq!(sets, vec![20 + 30, 27 + 30, 20 + 30, 30]);
        ac.arrive("c", 1.0, 52).unwrap();
        assert!(!ac.may_run(&pol, "c", 1.0).unwrap());
        assert_eq!(ac.next_shrink_s(&pol, 1.0).unwrap(), 4.0);
    }

    #[test]
    fn a_program_away_without_a_tool_leaves_the_working_set() {
        let pol = policy();
        let mut ac = AdmissionControl::new(100).unwrap();
        ac.arrive("a", 0.0, 60).unwrap();
        assert!(ac.may_run(&pol, "a", 0.0).unwrap());
        ac.finish("a", 1.0, 60, None, 5.0, false).unwrap();
        assert_eq!(ac.working_set_blocks(&pol, 1.0).unwrap(), 0);
        ac.arrive("b", 2.0, 60).unwrap();
        assert!(ac.may_run(&pol, "b", 2.0).unwrap());
        let order = ac.eviction_order(&pol, &["b", "zz", "a"], 2.0).unwrap();
        assert_eq!(order, vec!["zz", "a", "b"]);
        // the same order as positions in the input, duplicates kept in the order given
        let ids = ["b", "zz", "a", "b"];
        let ranks = ac.eviction_ranks(&pol, &ids, 2.0).unwrap();
        assert_eq!(ranks, vec![1, 2, 0, 3]);
        let by_rank: Vec<&str> = ranks.iter().map(|&i| ids[i]).collect();
        assert_eq!(by_rank, ac.eviction_order(&pol, &ids, 2.0).unwrap());
    }

    /// A policy that has seen `tool` take `gaps_s`, and a controller of 100 blocks that has
    /// admitted "p" (50 blocks) at 0 s; the median rule (the cases below state it).
    fn admitted_p(
        min_tool_samples: i64,
        tool: &str,
        gaps_s: &[f64],
    ) -> (TTLPolicy, AdmissionControl) {
        let mut pol = TTLPolicy::new(PolicyConfig {
            min_tool_samples,
            expected_working_set: false,
            working_set_horizon_scale: 1.0,
            ..PolicyConfig::default()
        })
        .unwrap();
        for &d in gaps_s {
            pol.observe_tool("", Some(tool), d).unwrap();
        }
        let mut ac = AdmissionControl::new(100).unwrap();
        ac.arrive("p", 0.0, 50).unwrap();
        assert!(ac.may_run(&pol, "p", 0.0).unwrap());
        (pol, ac)
    }

    #[test]
    fn a_refused_program_is_asked_again_when_a_member_leaves_the_working_set() {
        let (pol, mut ac) = admitted_p(4, "bash", &[1.0, 2.0, 4.0, 8.0, 16.0]);
        // p's request is live: it leaves on no clock
        assert_eq!(ac.next_shrink_s(&pol, 0.0).unwrap(), f64::INFINITY);
        // away on bash, alone, rebuild 5 s: next use 4, 4 - e, then 8 - 2 = 6 > 5 at e = 2
        ac.finish("p", 10.0, 50, Some("bash"), 5.0, false).unwrap();
        ac.arrive("next", 10.5, 60).unwrap();
        assert!(!ac.may_run(&pol, "next", 10.5).unwrap());
        assert_eq!(ac.next_shrink_s(&pol, 10.5).unwrap(), 12.0);
        assert!(!ac.may_run(&pol, "next", 12.0f64.next_down()).unwrap());
        assert!(ac.may_run(&pol, "next", 12.0).unwrap());
    }

    #[test]
    fn the_instant_a_member_leaves_is_not_rounded_short() {
        let (pol, mut ac) = admitted_p(1, "t", &[1.0, 4.0, 16.0]);
        ac.finish("p", 0.1, 50, Some("t"), 5.0, false).unwrap();
        // (0.1 + 4.0) - 0.1 < 4.0: the sum alone rounds short
        let at = ac.next_shrink_s(&pol, 0.1).unwrap();
        assert!(at - 0.1 >= 4.0 && at.next_down() - 0.1 < 4.0);
    }

    #[test]
    fn the_eviction_order_changes_at_a_jump_that_reorders() {
        // "t" took 1, 3 and 10 s; a left at 0 s, b at 1 s. At 1.5 s: a's next use is the
        // median of {3, 10} - 1.5 = 1.5, b's of {1, 3, 10} - 0.5 = 2.5: b goes first. b's
        // jump at 2 s (its time away reaches 1 s) keeps the order (2 against 1); a's at 3 s
        // (10 - 3 = 7 against 1) reverses it; b's at 4 s (7 against 6) reverses it again.
        let (pol, mut ac) = admitted_p(1, "t", &[1.0, 3.0, 10.0]);
        ac.end("p").unwrap();
        ac.arrive("a", 0.0, 10).unwrap();
        ac.finish("a", 0.0, 10, Some("t"), 1.0, false).unwrap();
        ac.arrive("b", 0.5, 10).unwrap();
        ac.finish("b", 1.0, 10, Some("t"), 1.0, false).unwrap();
        let ids = ["a", "b"];
        assert_eq!(ac.next_order_change_s(&pol, &ids, 1.5, 100.0).unwrap(), 3.0);
        assert_eq!(ac.next_order_change_s(&pol, &ids, 1.5, 3.0).unwrap(), 3.0);
        let never = ac
            .next_order_change_s(&pol, &ids, 1.5, 3.0f64.next_down())
            .unwrap();
        assert_eq!(never, f64::INFINITY);
        assert_eq!(ac.next_order_change_s(&pol, &ids, 3.0, 100.0).unwrap(), 4.0);
        // one known program has one order; the query moved no clock
        assert_eq!(
            ac.next_order_change_s(&pol, &["a", "zz"], 1.5, 100.0)
                .unwrap(),
            f64::INFINITY
        );
        assert_eq!(ac.eviction_order(&pol, &ids, 1.5).unwrap(), vec!["b", "a"]);
        assert_eq!(ac.eviction_order(&pol, &ids, 3.0).unwrap(), vec!["a", "b"]);
    }

    #[test]
    fn bad_input_changes_nothing() {
        let pol = policy();
        let mut ac = AdmissionControl::new(10).unwrap();
        assert!(ac.arrive("a", 0.0, 11).is_err());
        assert!(ac.arrive("", 0.0, 1).is_err());
        assert!(ac.arrive("a", f64::NAN, 1).is_err());
        assert_eq!(ac.program_count(), 0);
        assert!(matches!(
            ac.may_run(&pol, "a", 0.0),
            Err(Error::UnknownKey { .. })
        ));
    }
}
