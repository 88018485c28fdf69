//! A program's life on one engine: one object that engines report to and that says what they
//! must free or hold. Mirrors `python/ttlpolicy/reference/lifecycle.py`, whose module doc
//! states every rule; the differential tests hold the two together.
//!
//! An engine keeps three pieces of the library's state — the waiting queue and pin table
//! ([`ProgramScheduler`]), load control and the eviction order ([`AdmissionControl`],
//! optional) — and one of its own: the blocks of a pin *handed over* to its program's next
//! request at arrival, held until that request is admitted (a *held chain*).
//! [`ProgramLifecycle`] owns that table and the rules that join the three:
//!
//! * [`arrive`](ProgramLifecycle::arrive) reports a request to both; a pin it consumed
//!   becomes a held chain of that request (kept by arrival order);
//! * [`admitted`](ProgramLifecycle::admitted) ends the hold;
//! * [`finish`](ProgramLifecycle::finish) reports a finished request to both, once;
//!   [`abort`](ProgramLifecycle::abort) and [`end_program`](ProgramLifecycle::end_program)
//!   end the program in both; holds of the requests they drop go with them;
//! * [`give_way`](ProgramLifecycle::give_way): pins are reclaimed first; then, only when
//!   the engine is stalled, the held chains of the other waiting requests yield too, the
//!   latest to arrive first, until the engine's step is covered.
//!
//! Every call is all-or-nothing: what the scheduler or load control would refuse is refused
//! before either changes (the scheduler's checks first; `arrive`: load control's first). A
//! `release` that fails in `give_way` cannot be undone: the state it leaves is stated there.
//!
//! Like [`ProgramScheduler`] with its `&mut TTLPolicy`, the lifecycle does not own the parts
//! it joins: each call takes them as [`Parts`], so the Python bindings keep using the very
//! objects the user passed. The caller passes the same parts to every call (one policy,
//! the scheduler and load control built over it).
//!
//! ```
//! use ttlpolicy_core::lifecycle::{Parts, ProgramLifecycle};
//! use ttlpolicy_core::policy::{PolicyConfig, TTLPolicy};
//! use ttlpolicy_core::scheduler::{ProgramScheduler, TurnEnd};
//!
//! let mut policy = TTLPolicy::new(PolicyConfig::default())?;
//! let mut scheduler = ProgramScheduler::new(1000, 100)?;
//! let mut life = ProgramLifecycle::new();
//! let mut parts = Parts { policy: &mut policy, scheduler: &mut scheduler, admission: None };
//!
//! // Program "A" runs a call that ends with a tool call: its 40 blocks are pinned.
//! life.arrive(&mut parts, "a1", "A", 0.0, 10)?;
//! assert_eq!(parts.scheduler.pop(parts.policy, 0.0)?.as_deref(), Some("a1"));
//! let args = TurnEnd { tool: Some("bash"), cache_miss_cost_s: Some(100.0), ..TurnEnd::default() };
//! assert!(life.finish(&mut parts, "a1", 1.0, 40, args)?.pin.is_some());
//!
//! // Its next call consumes the pin: the engine holds those blocks for it until admitted.
//! life.arrive(&mut parts, "a2", "A", 5.0, 50)?;
//! assert_eq!(life.held("a2")?, Some("A"));
//!
//! // Nothing runs and the queue's head is 30 blocks short: the held chain yields.
//! let mut released = Vec::new();
//! let short = life.give_way(&mut parts, 5.0, 30, |program, request| {
//!     released.push((program.to_owned(), request.map(str::to_owned)));
//!     Ok::<i64, ttlpolicy_core::Error>(40) // the engine freed 40 blocks
//! }, true, None, None)?;
//! assert_eq!(short, -10);
//! assert_eq!(released, [("A".to_owned(), Some("a2".to_owned()))]);
//! assert_eq!(life.held_count(), 0);
//! # Ok::<(), ttlpolicy_core::Error>(())
//! ```

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::admission::AdmissionControl;
use crate::error::{Error, Result};
use crate::id_hash::IdMap;
use crate::policy::{TTLPolicy, MAX_BLOCKS};
use crate::scheduler::{check_id, Ended, Finished, Pin, ProgramScheduler, TurnEnd};
use crate::validate::{finite, int_in};

/// The library state a [`ProgramLifecycle`] joins, borrowed for a call: one policy, the
/// scheduler over it and, optionally, load control over it.
#[derive(Debug)]
pub struct Parts<'a> {
    /// The policy the scheduler (and load control) read.
    pub policy: &'a mut TTLPolicy,
    /// The waiting queue and pin table.
    pub scheduler: &'a mut ProgramScheduler,
    /// Load control and the eviction order, if the engine uses them.
    pub admission: Option<&'a mut AdmissionControl>,
}

/// The rules that join a program's pieces of state on one engine (see the module doc), and
/// the table of held chains: request → program, by arrival. Bounded by the live requests:
/// an entry goes when its request is admitted, finishes or is dropped with its program.
#[derive(Debug, Clone, Default)]
pub struct ProgramLifecycle {
    /// Live requests (arrived, not finished) → their program.
    program_of: IdMap<Arc<str>, Arc<str>>,
    /// Held chains by arrival: sequence number → (request, program of the pin).
    held: BTreeMap<u64, (Arc<str>, Arc<str>)>,
    /// Request → its sequence number in `held`.
    held_seq: IdMap<Arc<str>, u64>,
    next_seq: u64,
}

impl ProgramLifecycle {
    /// A lifecycle that holds nothing yet.
    pub fn new() -> Self {
        Self::default()
    }

    // -- events ------------------------------------------------------------------------------

    /// A request arrives (both are told). Returns the pin it consumed, whose blocks the
    /// engine now holds for it until [`admitted`](Self::admitted).
    pub fn arrive(
        &mut self,
        parts: &mut Parts<'_>,
        request_id: &str,
        program_id: &str,
        now: f64,
        blocks_needed: i64,
    ) -> Result<Option<Pin>> {
        // the ids first (the bindings convert them first), then load control's refusal,
        // before the scheduler's change
        check_id("request_id", request_id)?;
        check_id("program_id", program_id)?;
        let checked = match parts.admission.as_deref() {
            Some(admission) => Some(admission.check_arrive(program_id, now, blocks_needed)?),
            None => None,
        };
        // a program the scheduler queues as new (idle past max_ttl_s, program order) is new to
        // load control too: one FCFS place in both, or an admitted program could wait behind a head load
        // control refuses, and nothing would run
        let renews =
            checked.is_some() && parts.scheduler.restarts_fcfs(parts.policy, program_id, now);
        let pin =
            parts
                .scheduler
                .arrive(parts.policy, request_id, program_id, now, blocks_needed)?;
        if let (Some(admission), Some((t, blocks))) = (parts.admission.as_deref_mut(), checked) {
            if renews {
                let _ = admission.end(program_id); // (load control may have dropped it)
            }
            admission.arrive_checked(program_id, t, blocks);
        }
        let rid: Arc<str> = Arc::from(request_id);
        self.program_of.insert(rid.clone(), Arc::from(program_id));
        if let Some(pin) = &pin {
            self.hold(rid, pin.program_id.clone());
        }
        Ok(pin)
    }

    /// The request entered the running batch: its held chain, if any, is its own now.
    /// Returns the program whose hold the engine drops (None: it held none).
    pub fn admitted(&mut self, request_id: &str) -> Result<Option<Arc<str>>> {
        check_id("request_id", request_id)?;
        Ok(self.unhold(request_id))
    }

    /// A running request ended ([`ProgramScheduler::finish`]; load control is told the same,
    /// with `cache_miss_cost_s` as what rebuilding the context costs, 0 when None). What
    /// either would refuse is refused before either changes: the scheduler's checks first.
    pub fn finish(
        &mut self,
        parts: &mut Parts<'_>,
        request_id: &str,
        now: f64,
        blocks_held: i64,
        args: TurnEnd<'_>,
    ) -> Result<Finished> {
        let plan =
            parts
                .scheduler
                .check_finish(parts.policy, request_id, now, blocks_held, args)?;
        let rebuild_s = args.cache_miss_cost_s.unwrap_or(0.0);
        let told = match (parts.admission.as_deref(), self.program_of.get(request_id)) {
            (Some(admission), Some(pid)) => {
                admission.check_finish(pid, now, blocks_held, rebuild_s)?;
                Some(pid.clone())
            }
            _ => None,
        };
        let finished = parts.scheduler.finish_checked(parts.policy, plan)?;
        if let (Some(admission), Some(pid)) = (parts.admission.as_deref_mut(), told) {
            // (checked above: it cannot refuse now)
            admission.finish(&pid, now, blocks_held, args.tool, rebuild_s, args.last_turn)?;
        }
        self.program_of.remove(request_id);
        self.unhold(request_id);
        if let Some(ended) = &finished.ended {
            self.forget(ended);
        }
        Ok(finished)
    }

    /// The request was aborted: its whole program ends in both (no η sample).
    pub fn abort(&mut self, parts: &mut Parts<'_>, request_id: &str) -> Result<Ended> {
        let ended = parts.scheduler.abort(parts.policy, request_id)?;
        Self::end_admission(parts, &ended.program_id)?;
        self.program_of.remove(request_id);
        self.unhold(request_id);
        self.forget(&ended);
        Ok(ended)
    }

    /// The program is done (η observed): it ends in both.
    pub fn end_program(&mut self, parts: &mut Parts<'_>, program_id: &str) -> Result<Ended> {
        let ended = parts.scheduler.end_program(parts.policy, program_id)?;
        Self::end_admission(parts, &ended.program_id)?;
        self.forget(&ended);
        Ok(ended)
    }

    /// May a request of the program be scheduled now: load control's answer
    /// ([`AdmissionControl::may_run`]) when it is on (`PolicyConfig::admission`), else true.
    pub fn may_run(&self, parts: &mut Parts<'_>, program_id: &str, now: f64) -> Result<bool> {
        check_id("program_id", program_id)?;
        finite("now", now)?;
        match parts.admission.as_deref_mut() {
            Some(admission) if parts.policy.config().admission => {
                admission.may_run(parts.policy, program_id, now)
            }
            _ => Ok(true),
        }
    }

    /// Pins past their deadline, released ([`ProgramScheduler::expire`]).
    pub fn expire(&self, parts: &mut Parts<'_>, now: f64) -> Result<Vec<Pin>> {
        parts.scheduler.expire(now)
    }

    /// Pins, then held chains, give way to the `short_blocks` the engine's next step lacks
    /// (see the module doc); returns the blocks still lacking (`<= 0`: covered).
    ///
    /// `release(program_id, request_id)` carries out one release and returns the blocks it
    /// made available (request None: the program's pin; else that request's held chain),
    /// in `[0, MAX_BLOCKS]`. It must not call back into the lifecycle or its parts (they are
    /// borrowed for the call). A release cannot be undone, so its errors (or a count out of
    /// range) leave this state: every pin `reclaim` took has left the pin table and is passed
    /// to `release` once, in reclaim order, even after one failed; if one did, no held chain
    /// yields and the first error is returned after the last release. Held chains yield one
    /// at a time, each leaving the table just before its release: the first error stops
    /// there and is returned, the chains not reached still held. Every argument is checked
    /// before anything changes. `stalled`: no running request will end to free memory (held chains
    /// yield only then); `keep`: the request whose held chain stays (the head's own prefix);
    /// `for_program`: reclaim only younger programs' pins (program-level FCFS).
    #[allow(clippy::too_many_arguments)]
    pub fn give_way<E, F>(
        &mut self,
        parts: &mut Parts<'_>,
        now: f64,
        short_blocks: i64,
        mut release: F,
        stalled: bool,
        keep: Option<&str>,
        for_program: Option<&str>,
    ) -> std::result::Result<i64, E>
    where
        E: From<Error>,
        F: FnMut(&str, Option<&str>) -> std::result::Result<i64, E>,
    {
        if let Some(keep) = keep {
            check_id("keep", keep)?;
        }
        if let Some(pid) = for_program {
            check_id("for_program", pid)?;
        }
        finite("now", now)?;
        let mut short = int_in("short_blocks", short_blocks, -MAX_BLOCKS, MAX_BLOCKS)?;
        if short <= 0 {
            return Ok(short);
        }
        if parts.scheduler.pin_count() > 0 {
            // Each reclaimed pin has left the scheduler: each goes to `release`, even after
            // one failed (else its blocks stayed held with nothing pinning them).
            let mut first_error = None;
            for pin in parts.scheduler.reclaim_for(short, now, for_program)? {
                match release(&pin.program_id, None).and_then(|n| Ok(released(n)?)) {
                    Ok(n) => short = short.saturating_sub(n),
                    Err(e) => first_error = first_error.or(Some(e)),
                }
            }
            if let Some(e) = first_error {
                return Err(e);
            }
        }
        if !stalled {
            return Ok(short);
        }
        // Latest-arrived first; the releases never touch `held` but for the entry removed.
        let mut below = u64::MAX;
        while short > 0 {
            let Some((&seq, (rid, _))) = self.held.range(..below).next_back() else {
                break;
            };
            below = seq;
            if keep == Some(&**rid) {
                continue;
            }
            let (rid, pid) = self.held.remove(&seq).expect("found above");
            self.held_seq.remove(&rid);
            short = short.saturating_sub(released(release(&pid, Some(&rid))?)?);
        }
        Ok(short)
    }

    // -- views -------------------------------------------------------------------------------

    /// The program whose handed-over chain is held for the request (None: none).
    pub fn held(&self, request_id: &str) -> Result<Option<&str>> {
        check_id("request_id", request_id)?;
        Ok(self.held_seq.get(request_id).map(|seq| &*self.held[seq].1))
    }

    /// Requests holding a handed-over chain, by arrival.
    pub fn held_request_ids(&self) -> Vec<Arc<str>> {
        self.held.values().map(|(rid, _)| rid.clone()).collect()
    }

    /// Requests holding a handed-over chain.
    pub fn held_count(&self) -> usize {
        self.held.len()
    }

    /// Could [`give_way`](Self::give_way) release anything: a pin is held, or a held chain
    /// is and nothing runs (an engine skips measuring its step otherwise).
    pub fn may_give_way(&self, scheduler: &ProgramScheduler, nothing_runs: bool) -> bool {
        scheduler.pin_count() > 0 || (nothing_runs && !self.held.is_empty())
    }

    // -- internals ---------------------------------------------------------------------------

    /// The request holds `program_id`'s chain (a request already holding keeps its place).
    fn hold(&mut self, request_id: Arc<str>, program_id: Arc<str>) {
        if let Some(seq) = self.held_seq.get(&request_id) {
            self.held.get_mut(seq).expect("indexed").1 = program_id;
            return;
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        self.held_seq.insert(request_id.clone(), seq);
        self.held.insert(seq, (request_id, program_id));
    }

    /// Drops the request's hold; returns the program it held.
    fn unhold(&mut self, request_id: &str) -> Option<Arc<str>> {
        let seq = self.held_seq.remove(request_id)?;
        self.held.remove(&seq).map(|(_, pid)| pid)
    }

    /// A program load control never saw, or forgot while idle past its cap, has nothing to
    /// end there.
    fn end_admission(parts: &mut Parts<'_>, program_id: &str) -> Result<()> {
        match parts.admission.as_deref_mut() {
            Some(admission) if admission.knows(program_id)? => admission.end(program_id),
            _ => Ok(()),
        }
    }

    fn forget(&mut self, ended: &Ended) {
        for rid in &ended.request_ids {
            self.program_of.remove(rid);
            self.unhold(rid);
        }
    }
}

/// The blocks a release made available, checked.
fn released(blocks: i64) -> Result<i64> {
    int_in("blocks released", blocks, 0, MAX_BLOCKS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::PolicyConfig;

    type Released = Vec<(String, Option<String>)>;

    /// A policy that pins (misses cost 100 s), a scheduler of 1000 blocks (500 pinnable)
    /// and load control on the same policy.
    struct Engine {
        policy: TTLPolicy,
        scheduler: ProgramScheduler,
        admission: AdmissionControl,
    }

    impl Engine {
        fn new() -> Self {
            Engine {
                policy: TTLPolicy::new(PolicyConfig::default()).unwrap(),
                scheduler: ProgramScheduler::new(1000, 500).unwrap(),
                admission: AdmissionControl::new(1000).unwrap(),
            }
        }

        fn parts(&mut self, with_admission: bool) -> Parts<'_> {
            Parts {
                policy: &mut self.policy,
                scheduler: &mut self.scheduler,
                admission: with_admission.then_some(&mut self.admission),
            }
        }
    }

    fn pinned_args() -> TurnEnd<'static> {
        TurnEnd {
            tool: Some("bash"),
            cache_miss_cost_s: Some(100.0),
            ..TurnEnd::default()
        }
    }

    /// Runs program `p`'s request `rid` from arrival to a pinned finish at `t`.
    fn pin(life: &mut ProgramLifecycle, parts: &mut Parts<'_>, rid: &str, p: &str, t: f64) {
        life.arrive(parts, rid, p, t, 10).unwrap();
        while parts.scheduler.pop(parts.policy, t).unwrap().is_some() {}
        assert!(life
            .finish(parts, rid, t, 10, pinned_args())
            .unwrap()
            .pin
            .is_some());
    }

    /// Each program of `pinned` pinned (`{p}1`), then those of `returning` back (`{p}2`,
    /// holding the chain handed over), at t = 5.
    fn held(parts: &mut Parts<'_>, pinned: &[&str], returning: &[&str]) -> ProgramLifecycle {
        let mut life = ProgramLifecycle::new();
        for (i, p) in pinned.iter().enumerate() {
            pin(&mut life, parts, &format!("{p}1"), p, i as f64);
        }
        for p in returning {
            let consumed = life.arrive(parts, &format!("{p}2"), p, 5.0, 10).unwrap();
            assert!(consumed.is_some());
        }
        life
    }

    fn recorder(
        log: &mut Released,
        blocks: i64,
    ) -> impl FnMut(&str, Option<&str>) -> Result<i64> + '_ {
        move |p, r| {
            log.push((p.to_owned(), r.map(str::to_owned)));
            Ok(blocks)
        }
    }

    fn entry(p: &str, r: Option<&str>) -> (String, Option<String>) {
        (p.to_owned(), r.map(str::to_owned))
    }

    #[test]
    fn a_handed_over_pin_is_held_until_admitted() {
        let mut engine = Engine::new();
        let mut parts = engine.parts(false);
        let mut life = held(&mut parts, &["A"], &["A"]);
        assert_eq!(life.held("A2").unwrap(), Some("A"));
        assert_eq!(life.held_request_ids(), [Arc::from("A2")]);
        assert_eq!(life.admitted("A2").unwrap().as_deref(), Some("A"));
        assert_eq!(life.admitted("A2").unwrap(), None);
        assert_eq!(life.held_count(), 0);
        assert!(life.admitted("").is_err());
    }

    #[test]
    fn give_way_reclaims_pins_then_held_chains_latest_first_when_stalled() {
        let mut engine = Engine::new();
        let mut parts = engine.parts(false);
        let mut life = held(&mut parts, &["A", "B", "C"], &["A", "B"]);
        // C's pin is reclaimed; not stalled: the held chains stay.
        let mut log = Released::new();
        let short = life.give_way(
            &mut parts,
            5.0,
            5,
            recorder(&mut log, 10),
            false,
            None,
            None,
        );
        assert_eq!(short.unwrap(), -5);
        assert_eq!(log, [entry("C", None)]);
        assert!(!life.may_give_way(parts.scheduler, false));
        assert!(life.may_give_way(parts.scheduler, true));
        // Stalled: B2's chain (the latest) yields first, then A2's.
        log.clear();
        let short = life.give_way(
            &mut parts,
            5.0,
            25,
            recorder(&mut log, 10),
            true,
            None,
            None,
        );
        assert_eq!(short.unwrap(), 5);
        assert_eq!(log, [entry("B", Some("B2")), entry("A", Some("A2"))]);
        assert_eq!(life.held_count(), 0);
    }

    #[test]
    fn give_way_skips_keep_and_stops_once_covered() {
        let mut engine = Engine::new();
        let mut parts = engine.parts(false);
        let mut life = held(&mut parts, &["A", "B", "C"], &["A", "B", "C"]);
        let mut log = Released::new();
        let rec = recorder(&mut log, 10);
        let short = life.give_way(&mut parts, 5.0, 10, rec, true, Some("C2"), None);
        assert_eq!(short.unwrap(), 0);
        assert_eq!(log, [entry("B", Some("B2"))]);
        assert_eq!(life.held_request_ids(), [Arc::from("A2"), Arc::from("C2")]);
        // Nothing short: nothing released, the value returned as is.
        let rec = recorder(&mut log, 1);
        assert_eq!(
            life.give_way(&mut parts, 5.0, -3, rec, true, None, None)
                .unwrap(),
            -3
        );
        assert_eq!(log.len(), 1);
    }

    #[test]
    fn release_errors_and_bad_counts_are_returned() {
        let mut engine = Engine::new();
        let mut parts = engine.parts(false);
        let mut life = held(&mut parts, &["A"], &["A"]);
        let mut give_way = |now: f64, short: i64, freed: i64, keep: Option<&str>| {
            let release = |_: &str, _: Option<&str>| Ok::<i64, Error>(freed);
            life.give_way(&mut parts, now, short, release, true, keep, None)
                .unwrap_err()
                .to_string()
        };
        let max = format!("[0, {MAX_BLOCKS}]");
        assert_eq!(
            give_way(5.0, 5, -1, None),
            format!("blocks released must be in {max}, got -1")
        );
        assert!(give_way(5.0, 1 << 41, 0, None).starts_with("short_blocks must be in"));
        assert_eq!(
            give_way(f64::NAN, 1, 0, None),
            "now must be finite, got nan"
        );
        assert!(give_way(5.0, 1, 0, Some("")).starts_with("keep must be"));
        // the chain was handed to `release` before it failed: it is no longer held
        assert_eq!(life.held_count(), 0);
    }

    #[test]
    fn finish_abort_and_end_tell_load_control_and_drop_holds() {
        let mut engine = Engine::new();
        let mut parts = engine.parts(true);
        let mut life = held(&mut parts, &["A"], &["A"]);
        life.arrive(&mut parts, "A3", "A", 5.0, 10).unwrap(); // a parallel call
        let knows = |parts: &Parts<'_>, p: &str| parts.admission.as_deref().unwrap().knows(p);
        assert!(knows(&parts, "A").unwrap());
        // the program ends: both forget it, and A2's hold goes with it
        let ended = life.end_program(&mut parts, "A").unwrap();
        assert_eq!(ended.request_ids, [Arc::from("A2"), Arc::from("A3")]);
        assert!(!knows(&parts, "A").unwrap());
        assert_eq!(life.held_count(), 0);
        // an abort ends the program in both
        pin(&mut life, &mut parts, "B1", "B", 6.0);
        life.arrive(&mut parts, "B2", "B", 7.0, 10).unwrap();
        life.abort(&mut parts, "B2").unwrap();
        assert!(!knows(&parts, "B").unwrap());
        assert_eq!(life.held_count(), 0);
        assert!(life.program_of.is_empty());
        // a last turn ends it in both
        life.arrive(&mut parts, "C1", "C", 8.0, 10).unwrap();
        parts.scheduler.pop(parts.policy, 8.0).unwrap();
        let last = TurnEnd {
            last_turn: true,
            ..TurnEnd::default()
        };
        assert!(life
            .finish(&mut parts, "C1", 9.0, 10, last)
            .unwrap()
            .ended
            .is_some());
        assert!(!knows(&parts, "C").unwrap());
        // load control is off in the default config: every program may run
        assert!(life.may_run(&mut parts, "D", 9.0).unwrap());
        assert!(life.may_run(&mut parts, "", 9.0).is_err());
    }

    #[test]
    fn a_finish_load_control_refuses_changes_neither_part() {
        let mut engine = Engine::new();
        engine.admission = AdmissionControl::new(20).unwrap(); // fewer blocks than the engine
        let mut parts = engine.parts(true);
        let mut life = ProgramLifecycle::new();
        life.arrive(&mut parts, "a1", "A", 0.0, 10).unwrap();
        parts.scheduler.pop(parts.policy, 0.0).unwrap();
        // 40 blocks: the scheduler would pin them, load control refuses them
        let err = life.finish(&mut parts, "a1", 1.0, 40, pinned_args());
        assert_eq!(
            err.unwrap_err().to_string(),
            "blocks_held must be in [0, 20], got 40"
        );
        assert_eq!(parts.scheduler.pin_count(), 0);
        assert_eq!(parts.scheduler.running_count(), 1);
        // load control's clock moved ahead (may_run): an earlier finish is refused whole
        let admission = parts.admission.as_deref_mut().unwrap();
        admission.may_run(parts.policy, "A", 5.0).unwrap();
        let err = life.finish(&mut parts, "a1", 2.0, 10, pinned_args());
        assert!(err
            .unwrap_err()
            .to_string()
            .starts_with("now must be >= 5.0"));
        assert_eq!(parts.scheduler.running_count(), 1);
        // the retry at a time both accept goes through, once
        assert!(life
            .finish(&mut parts, "a1", 5.0, 10, pinned_args())
            .unwrap()
            .pin
            .is_some());
        assert!(life
            .finish(&mut parts, "a1", 6.0, 10, pinned_args())
            .is_err());
    }

    #[test]
    fn every_reclaimed_pin_is_released_though_one_release_fails() {
        let mut engine = Engine::new();
        let mut parts = engine.parts(false);
        let mut life = held(&mut parts, &["A", "B", "C", "D"], &["D"]);
        let mut log = Released::new();
        let release = |p: &str, r: Option<&str>| {
            log.push(entry(p, r));
            match p {
                "B" => Err(Error::invalid("engine", "B", "able to free")),
                "A" => Ok(-1), // a bad count, an error too
                _ => Ok(10),
            }
        };
        let err = life.give_way(&mut parts, 5.0, 30, release, true, None, None);
        assert!(err.unwrap_err().to_string().starts_with("engine must be"));
        // C, B, A reclaimed (latest first): each released; D2's chain stays held
        assert_eq!(log, [entry("C", None), entry("B", None), entry("A", None)]);
        assert_eq!(parts.scheduler.pin_count(), 0);
        assert_eq!(life.held_request_ids(), [Arc::from("D2")]);
    }
}
