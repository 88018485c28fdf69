//! Native `ProgramLinker` and its result type `Link`: the same names, signatures, results and
//! exceptions as `ttlpolicy.reference.linker`. Conversions only; every rule lives in
//! `ttlpolicy_core::linker`. Block hashes are read from the caller's sequence on demand (only
//! the probed items), so a lookup's work does not grow with the prompt.

use std::sync::Arc;

use pyo3::exceptions::{PyOverflowError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{
    PyBool, PyByteArray, PyBytes, PyFloat, PyInt, PyList, PyString, PyTuple, PyType,
};
use ttlpolicy_core::linker::{
    BlockHashes, Link, LinkKind, ProgramKey, ProgramLinker, DEFAULT_MAX_AGE_S,
    DEFAULT_MAX_PROGRAMS, DEFAULT_MAX_TURN_ENDS, DEFAULT_MIN_DEPTH_FRACTION, MAX_PROGRAM_KEY,
};
use ttlpolicy_core::Error;

use crate::convert::{core_err, int_field, short_repr, type_name, Arg, Args, Fault};
use crate::scheduler::id_str;
use crate::value::{self, Fields};

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyProgramLinker>()?;
    m.add_class::<PyLink>()?;
    Ok(())
}

/// A Python sequence of block hashes, read item by item. A refused item's Python error is
/// kept here; the core sees an error naming the item and stops.
struct SeqHashes<'a, 'py> {
    obj: &'a Bound<'py, PyAny>,
    field: &'static str,
    len: usize,
    err: Option<PyErr>,
}

impl<'a, 'py> SeqHashes<'a, 'py> {
    /// `obj` as a sequence (`TypeError` for a str, bytes or a non-sequence, as the reference).
    fn new(field: &'static str, obj: &'a Bound<'py, PyAny>) -> PyResult<Self> {
        let refuse = || {
            PyTypeError::new_err(format!(
                "{field} must be a sequence of integers, got {}",
                type_name(obj)
            ))
        };
        let plain = obj.is_exact_instance_of::<PyList>() || obj.is_exact_instance_of::<PyTuple>();
        let text = obj.is_instance_of::<PyString>()
            || obj.is_instance_of::<PyBytes>()
            || obj.is_instance_of::<PyByteArray>();
        if !plain && (text || !obj.hasattr("__getitem__")?) {
            return Err(refuse());
        }
        let len = obj.len().map_err(|e| {
            if e.is_instance_of::<PyTypeError>(obj.py()) {
                refuse()
            } else {
                e
            }
        })?;
        Ok(SeqHashes {
            obj,
            field,
            len,
            err: None,
        })
    }

    fn item(&self, i: usize) -> PyResult<Bound<'py, PyAny>> {
        if let Ok(list) = self.obj.downcast::<PyList>() {
            return list.get_item(i);
        }
        if let Ok(tuple) = self.obj.downcast::<PyTuple>() {
            return tuple.get_item(i);
        }
        self.obj.get_item(i)
    }

    /// A hash in [-2^63, 2^64), read modulo 2^64, or bytes: the little-endian int of their
    /// first 8 (as the reference).
    fn convert(&self, i: usize, v: &Bound<'py, PyAny>) -> PyResult<u64> {
        if let Ok(b) = v.downcast::<PyBytes>() {
            let mut word = [0u8; 8];
            let head = &b.as_bytes()[..b.as_bytes().len().min(8)];
            word[..head.len()].copy_from_slice(head);
            return Ok(u64::from_le_bytes(word));
        }
        let name = || format!("{}[{i}]", self.field);
        let wrong = || {
            PyTypeError::new_err(format!(
                "{} must be an integer or bytes, got {}",
                name(),
                short_repr(v)
            ))
        };
        if v.is_instance_of::<PyFloat>() {
            return Err(wrong());
        }
        let py = v.py();
        match v.extract::<i64>() {
            Ok(h) => return Ok(h as u64),
            Err(e) if e.is_instance_of::<PyOverflowError>(py) => {}
            Err(e) if e.is_instance_of::<PyTypeError>(py) => return Err(wrong()),
            Err(e) => return Err(e),
        }
        if let Ok(h) = v.extract::<u64>() {
            return Ok(h);
        }
        let got = v
            .call_method0("__index__")
            .map_or_else(|_| short_repr(v), |i| short_repr(&i));
        Err(PyValueError::new_err(format!(
            "{} must be in [{}, {}], got {got}",
            name(),
            i64::MIN,
            u64::MAX
        )))
    }
}

impl BlockHashes for SeqHashes<'_, '_> {
    fn len(&self) -> usize {
        self.len
    }

    fn hash_at(&mut self, i: usize) -> ttlpolicy_core::Result<u64> {
        match self.item(i).and_then(|v| self.convert(i, &v)) {
            Ok(h) => Ok(h),
            Err(e) => {
                self.err = Some(e);
                Err(Error::invalid(format!("{}[{i}]", self.field), "", ""))
            }
        }
    }
}

/// The core's answer, or the item's own error when the core stopped at a refused item.
fn with_items<T>(
    hashes: &mut SeqHashes<'_, '_>,
    args: Args,
    r: ttlpolicy_core::Result<T>,
) -> PyResult<T> {
    match (r, hashes.err.take()) {
        (Err(_), Some(e)) => Err(e),
        (r, _) => args.finish(r),
    }
}

/// A program key argument: an int the linker made (not a bool) or a deployment's str id.
fn program_key(obj: &Bound<'_, PyAny>) -> PyResult<ProgramKey> {
    if obj.is_instance_of::<PyString>() {
        return Ok(ProgramKey::Named(Arc::from(id_str("program", obj)?)));
    }
    if obj.is_instance_of::<PyInt>() && !obj.is_instance_of::<PyBool>() {
        let range = || {
            PyValueError::new_err(format!(
                "program must be in [1, {MAX_PROGRAM_KEY}], got {}",
                short_repr(obj)
            ))
        };
        return match obj.extract::<i64>() {
            Ok(n) if n >= 1 => Ok(ProgramKey::Linked(n as u64)),
            _ => Err(range()),
        };
    }
    Err(PyTypeError::new_err(format!(
        "program must be an int or a str, got {}",
        type_name(obj)
    )))
}

fn key_obj(py: Python<'_>, key: &ProgramKey) -> PyResult<PyObject> {
    Ok(match key {
        ProgramKey::Linked(n) => n.into_pyobject(py)?.into_any().unbind(),
        ProgramKey::Named(s) => PyString::new(py, s).into_any().unbind(),
    })
}

/// Tells a call's program from its prompt's chained block hashes.
#[pyclass(name = "ProgramLinker", module = "ttlpolicy._native")]
pub struct PyProgramLinker {
    inner: ProgramLinker,
}

#[pymethods]
impl PyProgramLinker {
    #[new]
    #[pyo3(signature = (
        max_turn_ends = Arg::Ok(DEFAULT_MAX_TURN_ENDS), max_age_s = Arg::Ok(DEFAULT_MAX_AGE_S),
        max_programs = Arg::Ok(DEFAULT_MAX_PROGRAMS),
        min_depth_fraction = Arg::Ok(DEFAULT_MIN_DEPTH_FRACTION),
    ))]
    #[pyo3(
        text_signature = "(max_turn_ends=262144, max_age_s=86400.0, max_programs=262144, \
        min_depth_fraction=0.9)"
    )]
    fn new(
        max_turn_ends: Arg<i64>,
        max_age_s: Arg<f64>,
        max_programs: Arg<i64>,
        min_depth_fraction: Arg<f64>,
    ) -> PyResult<Self> {
        let mut args = Args::new();
        let turn_ends = args.take("max_turn_ends", max_turn_ends);
        let age = args.take("max_age_s", max_age_s);
        let programs = args.take("max_programs", max_programs);
        let fraction = args.take("min_depth_fraction", min_depth_fraction);
        let inner = args.finish(ProgramLinker::new(turn_ends, age, programs, fraction))?;
        Ok(PyProgramLinker { inner })
    }

    /// The program of a call of ``tenant`` with these prompt block hashes (module doc);
    /// ``program``: the call's own id, when the deployment allows one (no search).
    #[pyo3(signature = (tenant, prompt_hashes, now, program = None))]
    fn link(
        slf: &Bound<'_, Self>,
        tenant: &Bound<'_, PyAny>,
        prompt_hashes: &Bound<'_, PyAny>,
        now: Arg<f64>,
        program: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyLink> {
        let tenant = id_str("tenant", tenant)?;
        let mut hashes = SeqHashes::new("prompt_hashes", prompt_hashes)?;
        let mut args = Args::new();
        let t = args.take("now", now);
        // (a program that is not a str is refused after `now`, as the reference does: the
        // core refuses the empty stand-in under "program")
        let name = match program {
            None => None,
            Some(obj) => match obj.downcast::<PyString>() {
                Ok(s) => Some(s.to_str().map_err(|_| {
                    PyValueError::new_err(format!(
                        "program must be valid Unicode, got {}",
                        short_repr(obj)
                    ))
                })?),
                Err(_) => {
                    args.record(
                        "program",
                        Fault::WrongType {
                            expected: "a str",
                            got: type_name(obj),
                        },
                    );
                    Some("")
                }
            },
        };
        let result = slf
            .try_borrow_mut()?
            .inner
            .link(tenant, &mut hashes, t, name);
        with_items(&mut hashes, args, result).map(|inner| PyLink { inner })
    }

    /// A call of ``program`` ended: records its turn end (``hashes``: its prompt's blocks, then its
    /// output's; ``prompt_blocks``: how many are the prompt, None: all).
    #[pyo3(signature = (tenant, program, hashes, now, prompt_blocks = None))]
    fn finished(
        slf: &Bound<'_, Self>,
        tenant: &Bound<'_, PyAny>,
        program: &Bound<'_, PyAny>,
        hashes: &Bound<'_, PyAny>,
        now: Arg<f64>,
        prompt_blocks: Option<Arg<i64>>,
    ) -> PyResult<bool> {
        let tenant = id_str("tenant", tenant)?;
        let key = program_key(program)?;
        let mut seq = SeqHashes::new("hashes", hashes)?;
        let mut args = Args::new();
        let t = args.take("now", now);
        let k = args.take_opt("prompt_blocks", prompt_blocks);
        let result = slf
            .try_borrow_mut()?
            .inner
            .finished(tenant, &key, &mut seq, t, k);
        with_items(&mut seq, args, result)
    }

    /// The program is done: forgotten (a call matching its turn ends starts a new one).
    fn end_program(
        &mut self,
        tenant: &Bound<'_, PyAny>,
        program: &Bound<'_, PyAny>,
    ) -> PyResult<bool> {
        let tenant = id_str("tenant", tenant)?;
        let key = program_key(program)?;
        self.inner.end_program(tenant, &key).map_err(core_err)
    }

    /// Calls of the program running (linked, not finished); 0 for an unknown one.
    fn running(&self, tenant: &Bound<'_, PyAny>, program: &Bound<'_, PyAny>) -> PyResult<i64> {
        let tenant = id_str("tenant", tenant)?;
        let key = program_key(program)?;
        self.inner.running(tenant, &key).map_err(core_err)
    }

    /// Turn ends kept.
    #[getter]
    fn turn_end_count(&self) -> usize {
        self.inner.turn_end_count()
    }

    /// Programs tracked.
    #[getter]
    fn program_count(&self) -> usize {
        self.inner.program_count()
    }

    /// Index entries (recorded block hashes).
    #[getter]
    fn point_count(&self) -> usize {
        self.inner.point_count()
    }

    /// The most turn ends kept (module doc, "Bounded state": which go first).
    #[getter]
    fn max_turn_ends(&self) -> i64 {
        self.inner.max_turn_ends()
    }

    /// Seconds a turn end is kept (dropped at the next call later than its time plus this).
    #[getter]
    fn max_age_s(&self) -> f64 {
        self.inner.max_age_s()
    }

    /// The most programs tracked (module doc, "Bounded state": which are forgotten first).
    #[getter]
    fn max_programs(&self) -> i64 {
        self.inner.max_programs()
    }

    /// A match shorter than this fraction of a program's latest prompt starts a new program.
    #[getter]
    fn min_depth_fraction(&self) -> f64 {
        self.inner.min_depth_fraction()
    }
}

/// Which program a call belongs to: `kind` ("continue", "fork", "new"), `program`, `parent`
/// (forks), `depth_blocks`, `context_blocks`.
#[pyclass(name = "Link", module = "ttlpolicy._native", frozen)]
pub struct PyLink {
    inner: Link,
}

impl Fields for PyLink {
    const NAMES: &'static [&'static str] = &[
        "kind",
        "program",
        "parent",
        "depth_blocks",
        "context_blocks",
    ];
    fn fields<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        let l = &self.inner;
        let parent = match &l.parent {
            Some(p) => key_obj(py, p)?,
            None => py.None(),
        };
        (
            l.kind.as_str(),
            key_obj(py, &l.program)?,
            parent,
            l.depth_blocks,
            l.context_blocks,
        )
            .into_pyobject(py)
    }
}

#[pymethods]
impl PyLink {
    #[classattr]
    fn __match_args__(py: Python<'_>) -> PyResult<Py<PyTuple>> {
        value::match_args::<Self>(py)
    }
    #[new]
    fn new(
        kind: &Bound<'_, PyAny>,
        program: &Bound<'_, PyAny>,
        parent: Option<&Bound<'_, PyAny>>,
        depth_blocks: &Bound<'_, PyAny>,
        context_blocks: &Bound<'_, PyAny>,
    ) -> PyResult<Self> {
        let named = kind
            .downcast::<PyString>()
            .ok()
            .and_then(|k| k.to_str().ok());
        let kind = match named {
            Some("continue") => LinkKind::Continue,
            Some("fork") => LinkKind::Fork,
            Some("new") => LinkKind::New,
            _ => {
                return Err(PyValueError::new_err(format!(
                    "kind must be 'continue', 'fork' or 'new', got {}",
                    short_repr(kind)
                )))
            }
        };
        let program = program_key(program)?;
        let parent = parent
            .filter(|p| !p.is_none())
            .map(program_key)
            .transpose()?;
        Ok(PyLink {
            inner: Link {
                kind,
                program,
                parent,
                depth_blocks: int_field("depth_blocks", depth_blocks)?,
                context_blocks: int_field("context_blocks", context_blocks)?,
            },
        })
    }
    /// ``"continue"``, ``"fork"`` or ``"new"``.
    #[getter]
    fn kind(&self) -> &'static str {
        self.inner.kind.as_str()
    }
    /// The program the call belongs to.
    #[getter]
    fn program(&self, py: Python<'_>) -> PyResult<PyObject> {
        key_obj(py, &self.inner.program)
    }
    /// The forked program (None unless a fork).
    #[getter]
    fn parent(&self, py: Python<'_>) -> PyResult<Option<PyObject>> {
        self.inner
            .parent
            .as_ref()
            .map(|p| key_obj(py, p))
            .transpose()
    }
    /// The prompt's blocks found in the linked program's context (0: none).
    #[getter]
    fn depth_blocks(&self) -> i64 {
        self.inner.depth_blocks
    }
    /// The blocks of the linked program's latest turn end (a fork: its parent's).
    #[getter]
    fn context_blocks(&self) -> i64 {
        self.inner.context_blocks
    }
    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        other
            .downcast::<PyLink>()
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
        value::repr(self, py, "Link")
    }
}
