//! Native `ProgramLifecycle`: the same names, signatures, results and exceptions as
//! `ttlpolicy.reference.lifecycle`. Conversions only; every rule lives in
//! `ttlpolicy_core::lifecycle`.
//!
//! It keeps the very `ProgramScheduler` (and `AdmissionControl`) objects it was given and
//! borrows them, with their policy, for each call. `give_way`'s `release` is called while
//! they are borrowed: a `release` that calls back into them gets a `RuntimeError` (already
//! borrowed), as the core's contract says it must not.

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyInt};
use ttlpolicy_core::lifecycle::{Parts, ProgramLifecycle};
use ttlpolicy_core::policy::MAX_BLOCKS;
use ttlpolicy_core::validate::int_in;
use ttlpolicy_core::Error;

use crate::admission::PyAdmissionControl;
use crate::convert::{call1, call2, core_err, type_name, Arg, Args};
use crate::scheduler::{
    id_str, pin_obj, pins_list, Flag, PyEnded, PyFinished, PyPin, PyProgramScheduler,
};
use crate::turn_end::{FinishCall, TurnFields};

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyProgramLifecycle>()
}

/// Why `give_way` failed: the core refused a value, or `release` raised (or answered
/// something that is not an int).
enum Fail {
    Core(Error),
    Py(PyErr),
}

impl From<Error> for Fail {
    fn from(e: Error) -> Self {
        Fail::Core(e)
    }
}

/// An optional id argument (None stays None).
fn opt_id<'a>(field: &str, obj: Option<&'a Bound<'_, PyAny>>) -> PyResult<Option<&'a str>> {
    match obj {
        Some(o) if !o.is_none() => id_str(field, o).map(Some),
        _ => Ok(None),
    }
}

/// A program's life on one engine over a `ProgramScheduler` and an optional
/// `AdmissionControl` of the same policy (both used, never copied).
#[pyclass(name = "ProgramLifecycle", module = "ttlpolicy._native")]
pub struct PyProgramLifecycle {
    inner: ProgramLifecycle,
    scheduler: Py<PyProgramScheduler>,
    admission: Option<Py<PyAdmissionControl>>,
}

impl PyProgramLifecycle {
    /// `call` on the core lifecycle and the parts it joins, all borrowed for the call.
    fn with_parts<T>(
        slf: &Bound<'_, Self>,
        call: impl FnOnce(&mut ProgramLifecycle, &mut Parts<'_>) -> PyResult<T>,
    ) -> PyResult<T> {
        let py = slf.py();
        let mut this = slf.try_borrow_mut()?;
        let this = &mut *this;
        let mut scheduler = this.scheduler.bind(py).try_borrow_mut()?;
        let scheduler = &mut *scheduler;
        let mut policy = scheduler.policy.bind(py).try_borrow_mut()?;
        let mut admission = match &this.admission {
            Some(a) => Some(a.bind(py).try_borrow_mut()?),
            None => None,
        };
        let mut parts = Parts {
            policy: policy.core_mut(),
            scheduler: &mut scheduler.inner,
            admission: admission.as_deref_mut().map(|a| &mut a.inner),
        };
        call(&mut this.inner, &mut parts)
    }
}

#[pymethods]
impl PyProgramLifecycle {
    #[new]
    #[pyo3(signature = (scheduler, admission = None))]
    fn new(scheduler: &Bound<'_, PyAny>, admission: Option<&Bound<'_, PyAny>>) -> PyResult<Self> {
        let scheduler = scheduler.downcast::<PyProgramScheduler>().map_err(|_| {
            PyTypeError::new_err(format!(
                "scheduler must be a ProgramScheduler, got {}",
                type_name(scheduler)
            ))
        })?;
        let admission = match admission {
            None => None,
            Some(a) => {
                let a = a.downcast::<PyAdmissionControl>().map_err(|_| {
                    PyTypeError::new_err(format!(
                        "admission must be an AdmissionControl or None, got {}",
                        type_name(a)
                    ))
                })?;
                if !a.try_borrow()?.policy.is(&scheduler.try_borrow()?.policy) {
                    return Err(PyValueError::new_err(
                        "admission must read the scheduler's policy, got an AdmissionControl of \
                         another TTLPolicy",
                    ));
                }
                Some(a.clone().unbind())
            }
        };
        Ok(PyProgramLifecycle {
            inner: ProgramLifecycle::new(),
            scheduler: scheduler.clone().unbind(),
            admission,
        })
    }

    /// Its ``ProgramScheduler``.
    #[getter]
    fn scheduler(&self, py: Python<'_>) -> Py<PyProgramScheduler> {
        self.scheduler.clone_ref(py)
    }

    /// Its load control (``AdmissionControl``), None without one.
    #[getter]
    fn admission(&self, py: Python<'_>) -> Option<Py<PyAdmissionControl>> {
        self.admission.as_ref().map(|a| a.clone_ref(py))
    }

    // -- events -----------------------------------------------------------------------------

    /// A request arrives (both are told).
    fn arrive(
        slf: &Bound<'_, Self>,
        request_id: &Bound<'_, PyAny>,
        program_id: &Bound<'_, PyAny>,
        now: Arg<f64>,
        blocks_needed: Arg<i64>,
    ) -> PyResult<Option<PyPin>> {
        let rid = id_str("request_id", request_id)?;
        let pid = id_str("program_id", program_id)?;
        Self::with_parts(slf, |life, parts| {
            call2(("now", now), ("blocks_needed", blocks_needed), |t, b| {
                life.arrive(parts, rid, pid, t, b)
            })
        })
        .map(pin_obj)
    }

    /// The request entered the running batch: its held chain, if any, is its own now.
    fn admitted(&mut self, request_id: &Bound<'_, PyAny>) -> PyResult<Option<String>> {
        let rid = id_str("request_id", request_id)?;
        let pid = self.inner.admitted(rid).map_err(core_err)?;
        Ok(pid.map(|p| p.to_string()))
    }

    /// A running request ended (``ProgramScheduler.finish``, the same ``turn`` or its fields as
    /// keywords; load control is told the same, with ``cache_miss_cost_s`` as what rebuilding the
    /// context costs).
    #[pyo3(signature = (request_id, now, blocks_held, turn = None, **fields))]
    #[pyo3(text_signature = "($self, /, request_id, now, blocks_held, turn=None, **fields)")]
    fn finish(
        slf: &Bound<'_, Self>,
        request_id: &Bound<'_, PyAny>,
        now: Arg<f64>,
        blocks_held: Arg<i64>,
        turn: Option<&Bound<'_, PyAny>>,
        fields: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<PyFinished> {
        let turn = TurnFields::read(slf.py(), turn, fields)?;
        let call = FinishCall::convert(request_id, now, blocks_held, &turn)?;
        Self::with_parts(slf, |life, parts| {
            let r = life.finish(parts, call.rid, call.now, call.blocks, call.core());
            call.done(r)
        })
    }

    /// The request was aborted: its whole program ends in both (no η sample).
    fn abort(slf: &Bound<'_, Self>, request_id: &Bound<'_, PyAny>) -> PyResult<PyEnded> {
        let rid = id_str("request_id", request_id)?;
        let inner = Self::with_parts(slf, |life, parts| life.abort(parts, rid).map_err(core_err))?;
        Ok(PyEnded { inner })
    }

    /// The program is done (η observed): it ends in both.
    fn end_program(slf: &Bound<'_, Self>, program_id: &Bound<'_, PyAny>) -> PyResult<PyEnded> {
        let pid = id_str("program_id", program_id)?;
        let inner = Self::with_parts(slf, |life, parts| {
            life.end_program(parts, pid).map_err(core_err)
        })?;
        Ok(PyEnded { inner })
    }

    /// May a request of the program be scheduled now: load control's answer
    /// (``AdmissionControl.may_run``) when it is on (``PolicyConfig.admission``), else True.
    fn may_run(
        slf: &Bound<'_, Self>,
        program_id: &Bound<'_, PyAny>,
        now: Arg<f64>,
    ) -> PyResult<bool> {
        let pid = id_str("program_id", program_id)?;
        Self::with_parts(slf, |life, parts| {
            call1("now", now, |t| life.may_run(parts, pid, t))
        })
    }

    /// Pins past their deadline, released (``ProgramScheduler.expire``).
    fn expire(slf: &Bound<'_, Self>, now: Arg<f64>) -> PyResult<Vec<PyPin>> {
        Self::with_parts(slf, |life, parts| {
            call1("now", now, |t| life.expire(parts, t))
        })
        .map(pins_list)
    }

    /// Pins, then held chains, give way to ``short_blocks`` the engine's next step lacks (see the
    /// module doc); returns the blocks still lacking (``<= 0``: covered).
    #[pyo3(signature = (
        now, short_blocks, release, stalled = Flag(Ok(false)), keep = None, for_program = None
    ))]
    #[pyo3(
        text_signature = "($self, /, now, short_blocks, release, stalled=False, \
        keep=None, for_program=None)"
    )]
    #[allow(clippy::too_many_arguments)]
    fn give_way(
        slf: &Bound<'_, Self>,
        now: Arg<f64>,
        short_blocks: Arg<i64>,
        release: &Bound<'_, PyAny>,
        stalled: Flag,
        keep: Option<&Bound<'_, PyAny>>,
        for_program: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<i64> {
        // The types the reference checks first, in its order; the values are the core's.
        if !release.is_callable() {
            return Err(PyTypeError::new_err(format!(
                "release must be callable, got {}",
                type_name(release)
            )));
        }
        let stalled = stalled.get("stalled")?;
        let keep = opt_id("keep", keep)?;
        let for_program = opt_id("for_program", for_program)?;
        let mut args = Args::new();
        let t = args.take("now", now);
        let short = args.take("short_blocks", short_blocks);
        let answer = Self::with_parts(slf, |life, parts| {
            let release = |pid: &str, rid: Option<&str>| -> Result<i64, Fail> {
                let freed = release.call1((pid, rid)).map_err(Fail::Py)?;
                if freed.is_instance_of::<PyBool>() || !freed.is_instance_of::<PyInt>() {
                    return Err(Fail::Py(PyTypeError::new_err(format!(
                        "release must return an int of blocks, got {}",
                        type_name(&freed)
                    ))));
                }
                match freed.extract::<Arg<i64>>().map_err(Fail::Py)? {
                    Arg::Ok(n) => Ok(n),
                    // An int outside i64: the core's range check, worded with that int (its
                    // own `Args`: the error of one answer, whichever fails first).
                    bad => {
                        let mut answer = Args::new();
                        let n = answer.take("blocks released", bad);
                        let refused = int_in("blocks released", n, 0, MAX_BLOCKS);
                        Err(Fail::Py(answer.finish(refused).expect_err("out of range")))
                    }
                }
            };
            Ok(life.give_way(parts, t, short, release, stalled, keep, for_program))
        })?;
        match answer {
            Ok(short) => args.finish(Ok(short)),
            Err(Fail::Core(e)) => args.finish(Err(e)),
            Err(Fail::Py(e)) => Err(e),
        }
    }

    // -- views ------------------------------------------------------------------------------

    /// The program whose handed-over chain is held for the request (None: none).
    fn held(&self, request_id: &Bound<'_, PyAny>) -> PyResult<Option<String>> {
        let rid = id_str("request_id", request_id)?;
        let pid = self.inner.held(rid).map_err(core_err)?;
        Ok(pid.map(str::to_owned))
    }

    /// Requests holding a handed-over chain, by arrival.
    #[getter]
    fn held_request_ids(&self) -> Vec<String> {
        let ids = self.inner.held_request_ids();
        ids.iter().map(|id| id.to_string()).collect()
    }

    /// Requests holding a handed-over chain.
    #[getter]
    fn held_count(&self) -> usize {
        self.inner.held_count()
    }

    /// Could ``give_way`` release anything: a pin is held, or a held chain is and nothing runs (an
    /// engine skips measuring its step otherwise).
    fn may_give_way(&self, py: Python<'_>, nothing_runs: Flag) -> PyResult<bool> {
        let nothing_runs = nothing_runs.get("nothing_runs")?;
        let scheduler = self.scheduler.bind(py).try_borrow()?;
        Ok(self.inner.may_give_way(&scheduler.inner, nothing_runs))
    }
}
