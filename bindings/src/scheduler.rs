//! Native `ProgramScheduler` and its result types (`Pin`, `Finished`, `Ended`): the same
//! names, signatures, results and exceptions as `ttlpolicy.reference.scheduler`.
//! Conversions only; every rule lives in `ttlpolicy_core::scheduler`.
//!
//! The scheduler keeps the very `TTLPolicy` object it was given and drives its core through
//! `borrow_mut`, so the caller sees the policy's estimators move.

use std::sync::Arc;

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyFloat, PyString, PyTuple};
use ttlpolicy_core::scheduler::{
    check_id, Ended, FinishArgs, Finished, Pin, ProgramScheduler, RequestState,
};

use crate::convert::{call1, call2, core_err, tool_now, Arg, Args, Fault};
use crate::policy::{PyPinDecision, PyTTLPolicy};

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyProgramScheduler>()?;
    m.add_class::<PyPin>()?;
    m.add_class::<PyFinished>()?;
    m.add_class::<PyEnded>()?;
    Ok(())
}

pub(crate) fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "object".to_owned())
}

/// An id: a `str` (`TypeError` otherwise) of valid Unicode (`ValueError` for lone
/// surrogates, which UTF-8 cannot hold) and of a valid length — checked here, in full, so
/// that a bad id is reported before any later argument, as the reference does. Borrowed,
/// not copied.
pub(crate) fn id_str<'a>(field: &str, obj: &'a Bound<'_, PyAny>) -> PyResult<&'a str> {
    let s = obj.downcast::<PyString>().map_err(|_| {
        PyTypeError::new_err(format!("{field} must be a str, got {}", type_name(obj)))
    })?;
    let text = s
        .to_str()
        .map_err(|_| PyValueError::new_err(format!("{field} must be valid Unicode, got {s}")))?;
    check_id(field, text).map_err(core_err)?;
    Ok(text)
}

/// The items of a sequence (a str is refused: it would read as one id per character).
fn items<'py>(field: &str, obj: &Bound<'py, PyAny>) -> PyResult<Vec<Bound<'py, PyAny>>> {
    if obj.is_instance_of::<PyString>() || obj.try_iter().is_err() {
        return Err(PyTypeError::new_err(format!(
            "{field} must be a sequence, got {}",
            type_name(obj)
        )));
    }
    obj.try_iter()?.collect()
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

fn float_repr(py: Python<'_>, x: f64) -> PyResult<String> {
    Ok(PyFloat::new(py, x).repr()?.to_string())
}

// -- result types ---------------------------------------------------------------------------

/// `blocks` KV blocks of `program_id` kept in memory until `deadline_s`.
#[pyclass(name = "Pin", module = "ttlpolicy._native", frozen, eq)]
#[derive(Clone, PartialEq)]
pub struct PyPin {
    inner: Pin,
}

#[pymethods]
impl PyPin {
    #[getter]
    fn program_id(&self) -> &str {
        &self.inner.program_id
    }
    #[getter]
    fn blocks(&self) -> i64 {
        self.inner.blocks
    }
    #[getter]
    fn deadline_s(&self) -> f64 {
        self.inner.deadline_s
    }
    /// As the reference's frozen dataclass: the hash of the field tuple.
    fn __hash__(&self, py: Python<'_>) -> PyResult<isize> {
        let p = &self.inner;
        (&*p.program_id, p.blocks, p.deadline_s)
            .into_pyobject(py)?
            .hash()
    }
    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        Ok(format!(
            "Pin(program_id={}, blocks={}, deadline_s={})",
            PyString::new(py, &self.inner.program_id).repr()?,
            self.inner.blocks,
            float_repr(py, self.inner.deadline_s)?
        ))
    }
}

fn pin_obj(pin: Option<Pin>) -> Option<PyPin> {
    pin.map(|inner| PyPin { inner })
}

/// A program that ended: its finished `turns`, the `pin` released and the live requests
/// dropped with it (`request_ids`, sorted).
#[pyclass(name = "Ended", module = "ttlpolicy._native", frozen)]
pub struct PyEnded {
    program_id: Arc<str>,
    #[pyo3(get)]
    turns: i64,
    #[pyo3(get)]
    pin: Option<Py<PyPin>>,
    #[pyo3(get)]
    request_ids: Py<PyTuple>,
}

impl PyEnded {
    fn fields<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        (
            &*self.program_id,
            self.turns,
            self.pin.as_ref().map(|p| p.clone_ref(py)),
            self.request_ids.clone_ref(py),
        )
            .into_pyobject(py)
    }
}

#[pymethods]
impl PyEnded {
    /// Equality and hash by value, as the reference's frozen dataclass.
    fn __eq__(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<bool> {
        match other.downcast::<PyEnded>() {
            Ok(o) => self.fields(py)?.eq(o.get().fields(py)?),
            Err(_) => Ok(false),
        }
    }
    fn __hash__(&self, py: Python<'_>) -> PyResult<isize> {
        self.fields(py)?.hash()
    }
    #[getter]
    fn program_id(&self) -> &str {
        &self.program_id
    }
    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        Ok(format!(
            "Ended(program_id={}, turns={}, pin={}, request_ids={})",
            PyString::new(py, &self.program_id).repr()?,
            self.turns,
            self.pin.as_ref().map_or(Ok("None".to_owned()), |p| p
                .bind(py)
                .repr()
                .map(|r| r.to_string()))?,
            self.request_ids.bind(py).repr()?
        ))
    }
}

fn ended_obj(py: Python<'_>, e: Ended) -> PyResult<PyEnded> {
    let ids = PyTuple::new(py, e.request_ids.iter().map(|s| &**s))?;
    Ok(PyEnded {
        program_id: e.program_id,
        turns: e.turns,
        pin: pin_obj(e.pin).map(|p| Py::new(py, p)).transpose()?,
        request_ids: ids.unbind(),
    })
}

/// What `finish` did: the policy's `decision` (None on a last turn), the program's `pin` if
/// this request was pinned, and `ended` on a last turn.
#[pyclass(name = "Finished", module = "ttlpolicy._native", frozen)]
pub struct PyFinished {
    #[pyo3(get)]
    decision: Option<Py<PyPinDecision>>,
    #[pyo3(get)]
    pin: Option<Py<PyPin>>,
    #[pyo3(get)]
    ended: Option<Py<PyEnded>>,
}

impl PyFinished {
    fn fields<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        (
            self.decision.as_ref().map(|d| d.clone_ref(py)),
            self.pin.as_ref().map(|p| p.clone_ref(py)),
            self.ended.as_ref().map(|e| e.clone_ref(py)),
        )
            .into_pyobject(py)
    }
}

#[pymethods]
impl PyFinished {
    /// Equality and hash by value, as the reference's frozen dataclass.
    fn __eq__(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<bool> {
        match other.downcast::<PyFinished>() {
            Ok(o) => self.fields(py)?.eq(o.get().fields(py)?),
            Err(_) => Ok(false),
        }
    }
    fn __hash__(&self, py: Python<'_>) -> PyResult<isize> {
        self.fields(py)?.hash()
    }
    #[getter]
    fn pinned(&self) -> bool {
        self.pin.is_some()
    }
    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let r = |o: Option<Bound<'_, PyAny>>| -> PyResult<String> {
            o.map_or(Ok("None".to_owned()), |o| o.repr().map(|r| r.to_string()))
        };
        Ok(format!(
            "Finished(decision={}, pin={}, ended={})",
            r(self
                .decision
                .as_ref()
                .map(|d| d.bind(py).clone().into_any()))?,
            r(self.pin.as_ref().map(|p| p.bind(py).clone().into_any()))?,
            r(self.ended.as_ref().map(|e| e.bind(py).clone().into_any()))?
        ))
    }
}

fn finished_obj(py: Python<'_>, f: Finished) -> PyResult<PyFinished> {
    Ok(PyFinished {
        decision: f
            .decision
            .map(|d| Py::new(py, PyPinDecision::from(d)))
            .transpose()?,
        pin: pin_obj(f.pin).map(|p| Py::new(py, p)).transpose()?,
        ended: f
            .ended
            .map(|e| ended_obj(py, e).and_then(|e| Py::new(py, e)))
            .transpose()?,
    })
}

fn pins_list(pins: Vec<Pin>) -> Vec<PyPin> {
    pins.into_iter().map(|inner| PyPin { inner }).collect()
}

// -- ProgramScheduler -----------------------------------------------------------------------

/// Waiting queue and pin table of CacheTTL over a `TTLPolicy` (used, never copied).
#[pyclass(name = "ProgramScheduler", module = "ttlpolicy._native")]
pub struct PyProgramScheduler {
    inner: ProgramScheduler,
    policy: Py<PyTTLPolicy>,
}

#[pymethods]
impl PyProgramScheduler {
    #[new]
    fn new(
        policy: &Bound<'_, PyAny>,
        total_blocks: Arg<i64>,
        pin_budget_blocks: Arg<i64>,
    ) -> PyResult<Self> {
        let policy = policy.downcast::<PyTTLPolicy>().map_err(|_| {
            PyTypeError::new_err(format!(
                "policy must be a TTLPolicy, got {}",
                type_name(policy)
            ))
        })?;
        let inner = call2(
            ("total_blocks", total_blocks),
            ("pin_budget_blocks", pin_budget_blocks),
            ProgramScheduler::new,
        )?;
        Ok(PyProgramScheduler {
            inner,
            policy: policy.clone().unbind(),
        })
    }

    #[getter]
    fn policy(&self, py: Python<'_>) -> Py<PyTTLPolicy> {
        self.policy.clone_ref(py)
    }

    // -- arrivals ---------------------------------------------------------------------------

    fn arrive(
        &mut self,
        py: Python<'_>,
        request_id: &Bound<'_, PyAny>,
        program_id: &Bound<'_, PyAny>,
        now: Arg<f64>,
        blocks_needed: Arg<i64>,
    ) -> PyResult<Option<PyPin>> {
        let rid = id_str("request_id", request_id)?;
        let pid = id_str("program_id", program_id)?;
        let policy = &mut *self.policy.borrow_mut(py);
        call2(("now", now), ("blocks_needed", blocks_needed), |t, b| {
            self.inner.arrive(policy.core_mut(), rid, pid, t, b)
        })
        .map(pin_obj)
    }

    fn arrive_many(
        &mut self,
        py: Python<'_>,
        request_ids: &Bound<'_, PyAny>,
        program_ids: &Bound<'_, PyAny>,
        now: Arg<f64>,
        blocks_needed: &Bound<'_, PyAny>,
    ) -> PyResult<Vec<Option<PyPin>>> {
        let rid_objs = items("request_ids", request_ids)?;
        let rids = rid_objs
            .iter()
            .map(|o| id_str("request_ids", o))
            .collect::<PyResult<Vec<_>>>()?;
        let pid_objs = items("program_ids", program_ids)?;
        let pids = pid_objs
            .iter()
            .map(|o| id_str("program_ids", o))
            .collect::<PyResult<Vec<_>>>()?;
        let mut args = Args::new();
        let t = args.take("now", now);
        // A non-sequence is refused after `now`, as in the reference: its fault stands in as
        // one always-invalid entry, which the core reports after checking `now`.
        let blocks = match items("blocks_needed", blocks_needed) {
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
        let mut policy = self.policy.borrow_mut(py);
        let r = self
            .inner
            .arrive_many(policy.core_mut(), &rids, &pids, t, &blocks);
        Ok(args.finish(r)?.into_iter().map(pin_obj).collect())
    }

    // -- the queue --------------------------------------------------------------------------

    fn peek(&self) -> Option<&str> {
        self.inner.peek().map(|s| &**s)
    }

    fn pop(&mut self, py: Python<'_>, now: Arg<f64>) -> PyResult<Option<Py<PyString>>> {
        let policy = &mut *self.policy.borrow_mut(py);
        let popped = call1("now", now, |t| self.inner.pop(policy.core_mut(), t))?;
        Ok(popped.map(|id| PyString::new(py, &id).unbind()))
    }

    fn pop_many(&mut self, py: Python<'_>, n: Arg<i64>, now: Arg<f64>) -> PyResult<Vec<String>> {
        let policy = &mut *self.policy.borrow_mut(py);
        let popped = call2(("n", n), ("now", now), |n, t| {
            self.inner.pop_many(policy.core_mut(), n, t)
        })?;
        Ok(popped.iter().map(|s| s.to_string()).collect())
    }

    fn preempt(&mut self, request_id: &Bound<'_, PyAny>, now: Arg<f64>) -> PyResult<()> {
        let rid = id_str("request_id", request_id)?;
        call1("now", now, |t| self.inner.preempt(rid, t))
    }

    // -- finishing and pins -----------------------------------------------------------------

    #[pyo3(signature = (
        request_id, now, blocks_held, tool = None, last_turn = Flag(Ok(false)), cache_miss_cost_s = None,
        prefix_tokens = Arg::Ok(0), offloaded_tokens = Arg::Ok(0), mean_active_blocks = None
    ))]
    #[allow(clippy::too_many_arguments)]
    fn finish(
        &mut self,
        py: Python<'_>,
        request_id: &Bound<'_, PyAny>,
        now: Arg<f64>,
        blocks_held: Arg<i64>,
        tool: Option<&Bound<'_, PyAny>>,
        last_turn: Flag,
        cache_miss_cost_s: Option<Arg<f64>>,
        prefix_tokens: Arg<i64>,
        offloaded_tokens: Arg<i64>,
        mean_active_blocks: Option<Arg<f64>>,
    ) -> PyResult<PyFinished> {
        // Types the core cannot be handed a failing stand-in for are refused at once (the
        // reference checks them first too).
        let tool = tool_now(tool)?;
        let last_turn = last_turn.get("last_turn")?;
        let rid = id_str("request_id", request_id)?;
        let mut args = Args::new();
        let t = args.take("now", now);
        let blocks = args.take("blocks_held", blocks_held);
        let fa = FinishArgs {
            tool: tool.as_deref(),
            last_turn,
            cache_miss_cost_s: args.take_opt("cache_miss_cost_s", cache_miss_cost_s),
            prefix_tokens: args.take("prefix_tokens", prefix_tokens),
            offloaded_tokens: args.take("offloaded_tokens", offloaded_tokens),
            mean_active_blocks: args.take_opt("mean_active_blocks", mean_active_blocks),
        };
        let mut policy = self.policy.borrow_mut(py);
        let r = self.inner.finish(policy.core_mut(), rid, t, blocks, fa);
        drop(policy);
        finished_obj(py, args.finish(r)?)
    }

    fn expire(&mut self, now: Arg<f64>) -> PyResult<Vec<PyPin>> {
        call1("now", now, |t| self.inner.expire(t)).map(pins_list)
    }

    fn reclaim(&mut self, blocks_needed: Arg<i64>, now: Arg<f64>) -> PyResult<Vec<PyPin>> {
        call2(("blocks_needed", blocks_needed), ("now", now), |need, t| {
            self.inner.reclaim(need, t)
        })
        .map(pins_list)
    }

    fn record_queueing_delay(&mut self, py: Python<'_>, delay_s: Arg<f64>) -> PyResult<()> {
        let policy = &mut *self.policy.borrow_mut(py);
        call1("delay_s", delay_s, |d| {
            self.inner.record_queueing_delay(policy.core_mut(), d)
        })
    }

    // -- ending -----------------------------------------------------------------------------

    fn end_program(&mut self, py: Python<'_>, program_id: &Bound<'_, PyAny>) -> PyResult<PyEnded> {
        let pid = id_str("program_id", program_id)?;
        let mut policy = self.policy.borrow_mut(py);
        let r = self
            .inner
            .end_program(policy.core_mut(), pid)
            .map_err(core_err);
        drop(policy);
        ended_obj(py, r?)
    }

    fn abort(&mut self, py: Python<'_>, request_id: &Bound<'_, PyAny>) -> PyResult<PyEnded> {
        let rid = id_str("request_id", request_id)?;
        let mut policy = self.policy.borrow_mut(py);
        let r = self.inner.abort(policy.core_mut(), rid).map_err(core_err);
        drop(policy);
        ended_obj(py, r?)
    }

    // -- read-only views --------------------------------------------------------------------

    #[getter]
    fn total_blocks(&self) -> i64 {
        self.inner.total_blocks()
    }
    #[getter]
    fn pin_budget_blocks(&self) -> i64 {
        self.inner.pin_budget_blocks()
    }
    #[getter]
    fn pinned_blocks(&self) -> i64 {
        self.inner.pinned_blocks()
    }
    #[getter]
    fn pin_count(&self) -> usize {
        self.inner.pin_count()
    }
    #[getter]
    fn waiting_count(&self) -> usize {
        self.inner.waiting_count()
    }
    #[getter]
    fn running_count(&self) -> usize {
        self.inner.running_count()
    }
    #[getter]
    fn program_count(&self) -> usize {
        self.inner.program_count()
    }
    #[getter]
    fn next_deadline_s(&self) -> Option<f64> {
        self.inner.next_deadline_s()
    }
    #[getter]
    fn mean_active_blocks(&self) -> Option<f64> {
        self.inner.mean_active_blocks()
    }

    fn pins(&self) -> Vec<PyPin> {
        pins_list(self.inner.pins())
    }

    fn pin(&self, program_id: &Bound<'_, PyAny>) -> PyResult<Option<PyPin>> {
        let pid = id_str("program_id", program_id)?;
        self.inner.pin(pid).map(pin_obj).map_err(core_err)
    }

    fn state(&self, request_id: &Bound<'_, PyAny>) -> PyResult<&'static str> {
        let rid = id_str("request_id", request_id)?;
        Ok(match self.inner.state(rid).map_err(core_err)? {
            RequestState::Waiting => "waiting",
            RequestState::Running => "running",
        })
    }

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
            p.program_arrival_s,
            p.arrival_s,
            &*p.request_id,
        )
            .into_pyobject(py)
    }
}
