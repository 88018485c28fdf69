//! Native `ProgramScheduler` and its result types (`Pin`, `Finished`, `Ended`): the same
//! names, signatures, results and exceptions as `ttlpolicy.reference.scheduler`.
//! Conversions only; every rule lives in `ttlpolicy_core::scheduler`.
//!
//! The scheduler keeps the very `TTLPolicy` object it was given and drives its core through
//! `borrow_mut`, so the caller sees the policy's estimators move. As in `policy.rs`, each
//! method converts its arguments before borrowing anything (re-entrant arguments work, each
//! call is atomic for other threads).

use std::sync::Arc;

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyString, PyTuple, PyType};
use pyo3::PyClass;
use ttlpolicy_core::scheduler::{
    check_id, Ended, Finished, Pin, ProgramScheduler, RequestState, DEFAULT_MAX_IDLE_PROGRAMS,
};
use ttlpolicy_core::tenants::TenantWeights;
use ttlpolicy_core::validate::check_tenant;

use crate::convert::{
    call1, call2, core_err, float_field, int_field, is_iterable, short_repr, type_name, Arg, Args,
    Fault,
};
use crate::policy::{policy_arg, PyPinDecision, PyTTLPolicy};
use crate::tenants::tenant_weights_arg;
use crate::turn_end::{FinishCall, TurnFields};
use crate::value::{self, Fields};

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyProgramScheduler>()?;
    m.add_class::<PyPin>()?;
    m.add_class::<PyFinished>()?;
    m.add_class::<PyEnded>()?;
    Ok(())
}

/// An id: a `str` (`TypeError` otherwise) of valid Unicode (`ValueError` for lone
/// surrogates, which UTF-8 cannot hold) and of a valid length — checked here, in full, so
/// that a bad id is reported before any later argument, as the reference does. Borrowed,
/// not copied.
pub(crate) fn id_str<'a>(field: &str, obj: &'a Bound<'_, PyAny>) -> PyResult<&'a str> {
    let text = unicode_str(field, obj)?;
    check_id(field, text).map_err(core_err)?;
    Ok(text)
}

/// A `str` that is valid UTF-8 (no lone surrogates), borrowed; its length unchecked.
fn unicode_str<'a>(field: &str, obj: &'a Bound<'_, PyAny>) -> PyResult<&'a str> {
    let s = obj.downcast::<PyString>().map_err(|_| {
        PyTypeError::new_err(format!("{field} must be a str, got {}", type_name(obj)))
    })?;
    s.to_str().map_err(|_| {
        PyValueError::new_err(format!(
            "{field} must be valid Unicode, got {}",
            short_repr(obj)
        ))
    })
}

/// The items of a sequence of `kind` (a str or bytes is refused: it would read as one item
/// per character).
pub(crate) fn items<'py>(
    field: &str,
    kind: &str,
    obj: &Bound<'py, PyAny>,
) -> PyResult<Vec<Bound<'py, PyAny>>> {
    let text = obj.is_instance_of::<PyString>() || obj.is_instance_of::<PyBytes>();
    let iter = match obj.try_iter() {
        Ok(iter) if !text && is_iterable(obj) => iter,
        _ => {
            return Err(PyTypeError::new_err(format!(
                "{field} must be a sequence of {kind}, got {}",
                type_name(obj)
            )))
        }
    };
    iter.collect()
}

/// The items of a sequence of `kind`, each converted by `convert` (item `i` named
/// `field[i]` in an error).
pub(crate) fn each_item<T>(
    field: &str,
    kind: &str,
    obj: &Bound<'_, PyAny>,
    convert: fn(&str, &Bound<'_, PyAny>) -> PyResult<T>,
) -> PyResult<Vec<T>> {
    items(field, kind, obj)?
        .iter()
        .enumerate()
        .map(|(i, item)| convert(&format!("{field}[{i}]"), item))
        .collect()
}

/// An object of the result type `T` or None (`what`: "a Pin"), refused as the reference's
/// result types refuse another type.
fn instance_or_none<'a, 'py, T: PyClass>(
    field: &str,
    what: &str,
    obj: &'a Bound<'py, PyAny>,
) -> PyResult<Option<&'a Bound<'py, T>>> {
    if obj.is_none() {
        return Ok(None);
    }
    obj.downcast::<T>().map(Some).map_err(|_| {
        PyTypeError::new_err(format!(
            "{field} must be {what} or None, got {}",
            type_name(obj)
        ))
    })
}

/// A `bool` argument (numbers and None are refused, as in the reference); the fault is kept
/// until the caller raises it in the reference's order.
pub(crate) struct Flag(pub(crate) Result<bool, String>);

impl<'py> FromPyObject<'py> for Flag {
    fn extract_bound(obj: &Bound<'py, PyAny>) -> PyResult<Self> {
        Ok(Flag(match obj.downcast::<PyBool>() {
            Ok(b) => Ok(b.is_true()),
            Err(_) => Err(type_name(obj)),
        }))
    }
}

impl Flag {
    pub(crate) fn get(self, field: &str) -> PyResult<bool> {
        self.0
            .map_err(|got| PyTypeError::new_err(format!("{field} must be a bool, got {got}")))
    }
}

/// A `tenant` argument (`ToolHistory`'s namespace of tool names), checked when read: a str
/// (`""`, the default, the shared tenant) that is valid UTF-8, its length checked by the
/// core. An explicit None is refused as the reference refuses it.
pub(crate) struct Tenant<'py>(pub(crate) Option<Bound<'py, PyAny>>);

impl<'py> FromPyObject<'py> for Tenant<'py> {
    fn extract_bound(obj: &Bound<'py, PyAny>) -> PyResult<Self> {
        Ok(Tenant(Some(obj.clone())))
    }
}

impl Tenant<'_> {
    pub(crate) fn get(&self) -> PyResult<&str> {
        let Some(obj) = &self.0 else { return Ok("") };
        check_tenant(unicode_str("tenant", obj)?).map_err(core_err)
    }
}

// -- result types ---------------------------------------------------------------------------
//
// Each holds the core's value and builds its Python fields when read: `abort` and `finish`
// return one object, not a tree of them. Equality, hash, repr and pickling follow the
// reference's frozen dataclasses (a tuple of the fields).

/// `blocks` KV blocks of `program_id` kept in memory until `deadline_s`.
#[pyclass(name = "Pin", module = "ttlpolicy._native", frozen, eq)]
#[derive(Clone, PartialEq)]
pub struct PyPin {
    inner: Pin,
}

impl Fields for PyPin {
    const NAMES: &'static [&'static str] = &["program_id", "blocks", "deadline_s"];
    fn fields<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        let p = &self.inner;
        (&*p.program_id, p.blocks, p.deadline_s).into_pyobject(py)
    }
}

#[pymethods]
impl PyPin {
    #[classattr]
    fn __match_args__(py: Python<'_>) -> PyResult<Py<PyTuple>> {
        value::match_args::<Self>(py)
    }
    #[new]
    fn new(
        program_id: &Bound<'_, PyAny>,
        blocks: &Bound<'_, PyAny>,
        deadline_s: &Bound<'_, PyAny>,
    ) -> PyResult<Self> {
        Ok(PyPin {
            inner: Pin {
                program_id: Arc::from(id_str("program_id", program_id)?),
                blocks: int_field("blocks", blocks)?,
                deadline_s: float_field("deadline_s", deadline_s)?,
            },
        })
    }
    /// The program whose blocks are kept.
    #[getter]
    fn program_id(&self) -> &str {
        &self.inner.program_id
    }
    /// KV blocks kept in memory.
    #[getter]
    fn blocks(&self) -> i64 {
        self.inner.blocks
    }
    /// Until when the blocks are kept (s, the caller's clock).
    #[getter]
    fn deadline_s(&self) -> f64 {
        self.inner.deadline_s
    }
    fn __hash__(&self, py: Python<'_>) -> PyResult<isize> {
        value::hash(self, py)
    }
    fn __reduce__<'py>(
        slf: &Bound<'py, Self>,
    ) -> PyResult<(Bound<'py, PyType>, Bound<'py, PyTuple>)> {
        value::reduce(slf)
    }
    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        value::repr(self, py, "Pin")
    }
}

pub(crate) fn pin_obj(pin: Option<Pin>) -> Option<PyPin> {
    pin.map(|inner| PyPin { inner })
}

/// A program that ended: its finished `turns`, the `pin` released and the live requests
/// dropped with it (`request_ids`, sorted).
#[pyclass(name = "Ended", module = "ttlpolicy._native", frozen)]
pub struct PyEnded {
    pub(crate) inner: Ended,
}

impl Fields for PyEnded {
    const NAMES: &'static [&'static str] = &["program_id", "turns", "pin", "request_ids"];
    fn fields<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        let e = &self.inner;
        (
            &*e.program_id,
            e.turns,
            pin_obj(e.pin.clone()),
            self.ids(py)?,
        )
            .into_pyobject(py)
    }
}

impl PyEnded {
    fn ids<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, self.inner.request_ids.iter().map(|s| &**s))
    }
}

#[pymethods]
impl PyEnded {
    #[classattr]
    fn __match_args__(py: Python<'_>) -> PyResult<Py<PyTuple>> {
        value::match_args::<Self>(py)
    }
    #[new]
    fn new(
        program_id: &Bound<'_, PyAny>,
        turns: &Bound<'_, PyAny>,
        pin: &Bound<'_, PyAny>,
        request_ids: &Bound<'_, PyAny>,
    ) -> PyResult<Self> {
        let program_id = Arc::from(id_str("program_id", program_id)?);
        let turns = int_field("turns", turns)?;
        let pin = instance_or_none::<PyPin>("pin", "a Pin", pin)?.map(|p| p.get().inner.clone());
        let ids = items("request_ids", "str", request_ids)?;
        let request_ids = ids
            .iter()
            .map(|id| id_str("request_ids", id).map(Arc::from))
            .collect::<PyResult<_>>()?;
        Ok(PyEnded {
            inner: Ended {
                program_id,
                turns,
                pin,
                request_ids,
            },
        })
    }
    /// The program that ended.
    #[getter]
    fn program_id(&self) -> &str {
        &self.inner.program_id
    }
    /// Its finished turns.
    #[getter]
    fn turns(&self) -> i64 {
        self.inner.turns
    }
    /// The pin released when the program ended (None: it held none).
    #[getter]
    fn pin(&self) -> Option<PyPin> {
        pin_obj(self.inner.pin.clone())
    }
    /// Its live requests dropped with it, sorted.
    #[getter]
    fn request_ids<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        self.ids(py)
    }
    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        other
            .downcast::<PyEnded>()
            .is_ok_and(|o| o.get().inner == self.inner)
    }
    fn __hash__(&self, py: Python<'_>) -> PyResult<isize> {
        value::hash(self, py)
    }
    fn __reduce__<'py>(
        slf: &Bound<'py, Self>,
    ) -> PyResult<(Bound<'py, PyType>, Bound<'py, PyTuple>)> {
        value::reduce(slf)
    }
    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        value::repr(self, py, "Ended")
    }
}

/// What `finish` did: the policy's `decision` (None on a last turn), the program's `pin` if
/// this request was pinned, `ended` on a last turn, and the pins of other tenants `released`
/// to make room for it within its share.
#[pyclass(name = "Finished", module = "ttlpolicy._native", frozen)]
pub struct PyFinished {
    inner: Finished,
}

impl From<Finished> for PyFinished {
    fn from(inner: Finished) -> Self {
        PyFinished { inner }
    }
}

impl Fields for PyFinished {
    const NAMES: &'static [&'static str] = &["decision", "pin", "ended", "released"];
    fn fields<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        (
            self.decision(),
            self.pin(),
            self.ended(),
            self.released(py)?,
        )
            .into_pyobject(py)
    }
}

#[pymethods]
impl PyFinished {
    #[classattr]
    fn __match_args__(py: Python<'_>) -> PyResult<Py<PyTuple>> {
        value::match_args::<Self>(py)
    }
    #[new]
    #[pyo3(
        signature = (decision, pin, ended, released = None),
        text_signature = "(decision, pin, ended, released=())"
    )]
    fn new(
        decision: &Bound<'_, PyAny>,
        pin: &Bound<'_, PyAny>,
        ended: &Bound<'_, PyAny>,
        released: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let decision = instance_or_none::<PyPinDecision>("decision", "a PinDecision", decision)?;
        let pin = instance_or_none::<PyPin>("pin", "a Pin", pin)?;
        let ended = instance_or_none::<PyEnded>("ended", "an Ended", ended)?;
        let mut pins = Vec::new();
        if let Some(released) = released {
            for item in items("released", "Pin", released)? {
                let p = item.downcast::<PyPin>().map_err(|_| {
                    PyTypeError::new_err(format!(
                        "released must be a sequence of Pin, got {}",
                        type_name(&item)
                    ))
                })?;
                pins.push(p.get().inner.clone());
            }
        }
        Ok(PyFinished {
            inner: Finished {
                decision: decision.map(|d| d.get().inner),
                pin: pin.map(|p| p.get().inner.clone()),
                ended: ended.map(|e| e.get().inner.clone()),
                released: pins,
            },
        })
    }
    /// Pins of other tenants released to make room within its share (the engine frees their
    /// blocks).
    #[getter]
    fn released<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, pins_list(self.inner.released.clone()))
    }
    /// The policy's pin decision (None on a last turn).
    #[getter]
    fn decision(&self) -> Option<PyPinDecision> {
        self.inner.decision.map(PyPinDecision::from)
    }
    /// The program's pin if this request was pinned (merged with one it held), else None.
    #[getter]
    fn pin(&self) -> Option<PyPin> {
        pin_obj(self.inner.pin.clone())
    }
    /// The program's ``Ended`` when this was its last turn, else None.
    #[getter]
    fn ended(&self) -> Option<PyEnded> {
        self.inner.ended.clone().map(|inner| PyEnded { inner })
    }
    /// Whether this request was pinned (``pin`` is not None).
    #[getter]
    fn pinned(&self) -> bool {
        self.inner.pin.is_some()
    }
    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        other
            .downcast::<PyFinished>()
            .is_ok_and(|o| o.get().inner == self.inner)
    }
    fn __hash__(&self, py: Python<'_>) -> PyResult<isize> {
        value::hash(self, py)
    }
    fn __reduce__<'py>(
        slf: &Bound<'py, Self>,
    ) -> PyResult<(Bound<'py, PyType>, Bound<'py, PyTuple>)> {
        value::reduce(slf)
    }
    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        value::repr(self, py, "Finished")
    }
}

pub(crate) fn pins_list(pins: Vec<Pin>) -> Vec<PyPin> {
    pins.into_iter().map(|inner| PyPin { inner }).collect()
}

// -- ProgramScheduler -----------------------------------------------------------------------

/// Waiting queue and pin table of CacheTTL over a `TTLPolicy` (used, never copied).
#[pyclass(name = "ProgramScheduler", module = "ttlpolicy._native")]
pub struct PyProgramScheduler {
    pub(crate) inner: ProgramScheduler,
    pub(crate) policy: Py<PyTTLPolicy>,
}

#[pymethods]
impl PyProgramScheduler {
    #[new]
    #[pyo3(signature = (
        policy, total_blocks, pin_budget_blocks,
        max_idle_programs = Arg::Ok(DEFAULT_MAX_IDLE_PROGRAMS), tenant_weights = None,
    ))]
    #[pyo3(text_signature = "(policy, total_blocks, pin_budget_blocks, \
        max_idle_programs=65536, tenant_weights=None)")]
    fn new(
        policy: &Bound<'_, PyAny>,
        total_blocks: Arg<i64>,
        pin_budget_blocks: Arg<i64>,
        max_idle_programs: Arg<i64>,
        tenant_weights: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let policy = policy_arg(policy)?;
        let mut args = Args::new();
        let total = args.take("total_blocks", total_blocks);
        let budget = args.take("pin_budget_blocks", pin_budget_blocks);
        let max_idle = args.take("max_idle_programs", max_idle_programs);
        let weights = tenant_weights_arg(&mut args, tenant_weights)?;
        // The pin handover and the serving order are part of the policy's model: read from
        // its config, as the reference does.
        let (handover, order) = {
            let policy = policy.try_borrow()?;
            let config = policy.core().config();
            (config.pin_handover, config.serve_order)
        };
        let inner = args
            .finish(
                ProgramScheduler::with_max_idle_programs(total, budget, max_idle)
                    .and_then(|s| Ok(s.with_tenant_weights(TenantWeights::new(&weights)?))),
            )?
            .with_pin_handover(handover)
            .with_serve_order(order);
        Ok(PyProgramScheduler {
            inner,
            policy: policy.unbind(),
        })
    }

    /// The ``TTLPolicy`` it decides with (used, never copied).
    #[getter]
    fn policy(&self, py: Python<'_>) -> Py<PyTTLPolicy> {
        self.policy.clone_ref(py)
    }

    /// When a pin passes to the program's next request: `"arrival"` or `"schedule"`.
    #[getter]
    fn pin_handover(&self) -> &'static str {
        self.inner.pin_handover().as_str()
    }

    /// The order of returning calls: `"program"` or `"attained"`.
    #[getter]
    fn serve_order(&self) -> &'static str {
        self.inner.serve_order().as_str()
    }

    // -- arrivals ---------------------------------------------------------------------------

    /// A request enters the waiting queue.
    fn arrive(
        slf: &Bound<'_, Self>,
        py: Python<'_>,
        request_id: &Bound<'_, PyAny>,
        program_id: &Bound<'_, PyAny>,
        now: Arg<f64>,
        blocks_needed: Arg<i64>,
    ) -> PyResult<Option<PyPin>> {
        let rid = id_str("request_id", request_id)?;
        let pid = id_str("program_id", program_id)?;
        let this = &mut *slf.try_borrow_mut()?;
        let policy = &mut *this.policy.try_borrow_mut(py)?;
        call2(("now", now), ("blocks_needed", blocks_needed), |t, b| {
            this.inner.arrive(policy.core_mut(), rid, pid, t, b)
        })
        .map(pin_obj)
    }

    /// ``arrive`` for many requests at one ``now``, in order (all checked first: one bad entry
    /// changes nothing).
    fn arrive_many(
        slf: &Bound<'_, Self>,
        py: Python<'_>,
        request_ids: &Bound<'_, PyAny>,
        program_ids: &Bound<'_, PyAny>,
        now: Arg<f64>,
        blocks_needed: &Bound<'_, PyAny>,
    ) -> PyResult<Vec<Option<PyPin>>> {
        let rid_objs = items("request_ids", "str", request_ids)?;
        let rids = rid_objs
            .iter()
            .map(|o| id_str("request_ids", o))
            .collect::<PyResult<Vec<_>>>()?;
        let pid_objs = items("program_ids", "str", program_ids)?;
        let pids = pid_objs
            .iter()
            .map(|o| id_str("program_ids", o))
            .collect::<PyResult<Vec<_>>>()?;
        let mut args = Args::new();
        let t = args.take("now", now);
        // A non-sequence is refused after `now`, as in the reference: its fault stands in as
        // one always-invalid entry, which the core reports after checking `now`.
        let blocks = match items("blocks_needed", "int", blocks_needed) {
            Ok(objs) => objs
                .iter()
                .map(|o| Ok(args.take("blocks_needed", o.extract::<Arg<i64>>()?)))
                .collect::<PyResult<Vec<i64>>>()?,
            Err(e) if e.is_instance_of::<PyTypeError>(py) => {
                args.record(
                    "blocks_needed",
                    Fault::WrongType {
                        expected: "a sequence of int",
                        got: type_name(blocks_needed),
                    },
                );
                vec![i64::MIN]
            }
            Err(e) => return Err(e),
        };
        let this = &mut *slf.try_borrow_mut()?;
        let mut policy = this.policy.try_borrow_mut(py)?;
        let r = this
            .inner
            .arrive_many(policy.core_mut(), &rids, &pids, t, &blocks);
        Ok(args.finish(r)?.into_iter().map(pin_obj).collect())
    }

    // -- the queue --------------------------------------------------------------------------

    /// The request ``pop`` would return, or None when nothing waits.
    fn peek(&self) -> Option<&str> {
        self.inner.peek().map(|s| &**s)
    }

    /// The waiting request with the smallest priority tuple, now running; None if none.
    fn pop(slf: &Bound<'_, Self>, py: Python<'_>, now: Arg<f64>) -> PyResult<Option<Py<PyString>>> {
        let this = &mut *slf.try_borrow_mut()?;
        let policy = &mut *this.policy.try_borrow_mut(py)?;
        let popped = call1("now", now, |t| this.inner.pop(policy.core_mut(), t))?;
        Ok(popped.map(|id| PyString::new(py, &id).unbind()))
    }

    /// Up to ``n`` waiting requests, in the order ``pop`` would return them if nothing
    /// changed: what a caller may run out of turn (``take``) when the head cannot run.
    /// Changes nothing.
    fn first_waiting(slf: &Bound<'_, Self>, n: Arg<i64>) -> PyResult<Vec<String>> {
        let this = &*slf.try_borrow()?; // (arguments converted first: they may call back)
        let waiting = call1("n", n, |n| this.inner.first_waiting(n))?;
        Ok(waiting.iter().map(|s| s.to_string()).collect())
    }

    /// Up to ``n`` requests, as ``pop`` would return them one by one.
    fn pop_many(
        slf: &Bound<'_, Self>,
        py: Python<'_>,
        n: Arg<i64>,
        now: Arg<f64>,
    ) -> PyResult<Vec<String>> {
        let this = &mut *slf.try_borrow_mut()?;
        let policy = &mut *this.policy.try_borrow_mut(py)?;
        let popped = call2(("n", n), ("now", now), |n, t| {
            this.inner.pop_many(policy.core_mut(), n, t)
        })?;
        Ok(popped.iter().map(|s| s.to_string()).collect())
    }

    /// The waiting request runs now, ahead of its turn; every other request keeps its place.
    fn take(
        slf: &Bound<'_, Self>,
        py: Python<'_>,
        request_id: &Bound<'_, PyAny>,
        now: Arg<f64>,
    ) -> PyResult<()> {
        let rid = id_str("request_id", request_id)?;
        let this = &mut *slf.try_borrow_mut()?;
        let policy = &mut *this.policy.try_borrow_mut(py)?;
        call1("now", now, |t| this.inner.take(policy.core_mut(), rid, t))
    }

    /// A running request goes back to the queue, ahead of every request not preempted.
    fn preempt(
        slf: &Bound<'_, Self>,
        request_id: &Bound<'_, PyAny>,
        now: Arg<f64>,
    ) -> PyResult<()> {
        let rid = id_str("request_id", request_id)?;
        let mut this = slf.try_borrow_mut()?;
        call1("now", now, |t| this.inner.preempt(rid, t))
    }

    // -- finishing and pins -----------------------------------------------------------------

    /// A running request ended, holding ``blocks_held`` blocks; ``turn`` (a ``TurnEnd``, or its
    /// fields as keywords) says with a call to which tool, whether it was the program's last turn
    /// and what a miss would cost.
    #[pyo3(signature = (request_id, now, blocks_held, turn = None, **fields))]
    #[pyo3(text_signature = "($self, /, request_id, now, blocks_held, turn=None, **fields)")]
    fn finish(
        slf: &Bound<'_, Self>,
        py: Python<'_>,
        request_id: &Bound<'_, PyAny>,
        now: Arg<f64>,
        blocks_held: Arg<i64>,
        turn: Option<&Bound<'_, PyAny>>,
        fields: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<PyFinished> {
        let turn = TurnFields::read(py, turn, fields)?;
        let call = FinishCall::convert(request_id, now, blocks_held, &turn)?;
        let this = &mut *slf.try_borrow_mut()?;
        let mut policy = this.policy.try_borrow_mut(py)?;
        let r = (this.inner).finish(
            policy.core_mut(),
            call.rid,
            call.now,
            call.blocks,
            call.core(),
        );
        call.done(r)
    }

    /// Releases and returns the pins whose deadline is ``<= now``, by (deadline, program); at
    /// schedule (``pin_handover``), those with deadline ``< now`` whose program has no request
    /// waiting.
    fn expire(slf: &Bound<'_, Self>, now: Arg<f64>) -> PyResult<Vec<PyPin>> {
        let mut this = slf.try_borrow_mut()?;
        call1("now", now, |t| this.inner.expire(t)).map(pins_list)
    }

    /// Releases pins until at least ``blocks_needed`` blocks are released or no pin is left: the
    /// latest pin of the tenant furthest over its share of the pin budget while one is, then
    /// latest-arrived program first; returns them in release order.
    #[pyo3(signature = (blocks_needed, now, for_program=None))]
    fn reclaim(
        slf: &Bound<'_, Self>,
        blocks_needed: Arg<i64>,
        now: Arg<f64>,
        for_program: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Vec<PyPin>> {
        let pid = match for_program {
            Some(obj) if !obj.is_none() => Some(id_str("for_program", obj)?),
            _ => None,
        };
        let mut this = slf.try_borrow_mut()?;
        call2(("blocks_needed", blocks_needed), ("now", now), |need, t| {
            this.inner.reclaim_for(need, t, pid)
        })
        .map(pins_list)
    }

    /// A queueing delay the queue cannot see (``pop`` records its own) for the out-of-order cost T.
    fn record_queueing_delay(
        slf: &Bound<'_, Self>,
        py: Python<'_>,
        delay_s: Arg<f64>,
    ) -> PyResult<()> {
        let this = &*slf.try_borrow()?;
        let policy = &mut *this.policy.try_borrow_mut(py)?;
        call1("delay_s", delay_s, |d| {
            this.inner.record_queueing_delay(policy.core_mut(), d)
        })
    }

    // -- ending -----------------------------------------------------------------------------

    /// The program is done: release its pin, drop its live requests, observe its turns for η and
    /// forget it.
    fn end_program(&mut self, py: Python<'_>, program_id: &Bound<'_, PyAny>) -> PyResult<PyEnded> {
        // An id is a str: converting it runs no Python code, so `&mut self` is safe here.
        let pid = id_str("program_id", program_id)?;
        let policy = &mut *self.policy.try_borrow_mut(py)?;
        let inner = self
            .inner
            .end_program(policy.core_mut(), pid)
            .map_err(core_err)?;
        Ok(PyEnded { inner })
    }

    /// The request was aborted (its client went away): its whole program ends, without observing η.
    fn abort(&mut self, py: Python<'_>, request_id: &Bound<'_, PyAny>) -> PyResult<PyEnded> {
        let rid = id_str("request_id", request_id)?;
        let policy = &mut *self.policy.try_borrow_mut(py)?;
        let inner = self.inner.abort(policy.core_mut(), rid).map_err(core_err)?;
        Ok(PyEnded { inner })
    }

    // -- read-only views --------------------------------------------------------------------

    /// The engine's KV blocks.
    #[getter]
    fn total_blocks(&self) -> i64 {
        self.inner.total_blocks()
    }
    /// The most idle programs remembered (the longest idle is forgotten beyond).
    #[getter]
    fn max_idle_programs(&self) -> usize {
        self.inner.max_idle_programs()
    }
    /// Idle programs forgotten so far to keep at most ``max_idle_programs``.
    #[getter]
    fn dropped_idle_programs(&self) -> u64 {
        self.inner.dropped_idle_programs()
    }
    /// The most KV blocks all pins may hold together.
    #[getter]
    fn pin_budget_blocks(&self) -> i64 {
        self.inner.pin_budget_blocks()
    }
    /// KV blocks held by pins.
    #[getter]
    fn pinned_blocks(&self) -> i64 {
        self.inner.pinned_blocks()
    }
    /// Pins held.
    #[getter]
    fn pin_count(&self) -> usize {
        self.inner.pin_count()
    }
    /// Requests waiting.
    #[getter]
    fn waiting_count(&self) -> usize {
        self.inner.waiting_count()
    }
    /// Requests running.
    #[getter]
    fn running_count(&self) -> usize {
        self.inner.running_count()
    }
    /// Programs known (live, pinned or idle).
    #[getter]
    fn program_count(&self) -> usize {
        self.inner.program_count()
    }
    /// The earliest pin deadline, None without pins.
    #[getter]
    fn next_deadline_s(&self) -> Option<f64> {
        self.inner.next_deadline_s()
    }
    /// The tracked M̄ (see the module doc); None before any request finished.
    #[getter]
    fn mean_active_blocks(&self) -> Option<f64> {
        self.inner.mean_active_blocks()
    }

    /// Every pin, by (deadline, program id).
    fn pins(&self) -> Vec<PyPin> {
        pins_list(self.inner.pins())
    }

    /// The program's pin, None when it holds none (or is unknown).
    fn pin(&self, program_id: &Bound<'_, PyAny>) -> PyResult<Option<PyPin>> {
        let pid = id_str("program_id", program_id)?;
        self.inner.pin(pid).map(pin_obj).map_err(core_err)
    }

    /// ``"waiting"`` or ``"running"``.
    fn state(&self, request_id: &Bound<'_, PyAny>) -> PyResult<&'static str> {
        let rid = id_str("request_id", request_id)?;
        Ok(match self.inner.state(rid).map_err(core_err)? {
            RequestState::Waiting => "waiting",
            RequestState::Running => "running",
        })
    }

    /// The priority tuple of a waiting request (smaller runs first): (not preempted, not pinned,
    /// rank_s, program order, arrival_s, request id), ``rank_s`` the program's arrival or, with
    /// ``serve_order="attained"``, see the module doc; engines that sort their own queue (SGLang)
    /// use it as the sort key.
    fn priority<'py>(
        &self,
        py: Python<'py>,
        request_id: &Bound<'_, PyAny>,
    ) -> PyResult<Bound<'py, PyTuple>> {
        let rid = id_str("request_id", request_id)?;
        let p = self.inner.priority(rid).map_err(core_err)?;
        (
            p.not_preempted,
            p.not_pinned,
            p.rank_s,
            p.program_order,
            p.arrival_s,
            &*p.request_id,
        )
            .into_pyobject(py)
    }
}
