//! Python ⇄ core conversions shared by the native classes.
//!
//! The reference checks each argument's type and value together, field by field, in the
//! order its code reads them; the core receives typed values and checks them in that same
//! order. To raise the very exception the reference raises when several arguments are bad,
//! a failed conversion is not raised at once: [`Args`] records it and hands the core an
//! always-invalid sentinel (NaN, `i64::MIN`) instead, so the core — which validates before
//! it changes any state — reports the first bad field in the reference's order. If that
//! field is one whose conversion failed, the conversion's error (`TypeError`, or
//! `ValueError` for an int too large) is raised, otherwise the core's.

use std::borrow::Cow;

use pyo3::exceptions::{PyKeyError, PyOverflowError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::GILOnceCell;
use pyo3::types::{PyBytes, PyFloat, PyInt, PyList, PyString};
use ttlpolicy_core::Error;

/// A core error as the Python exception the reference raises.
pub fn core_err(e: Error) -> PyErr {
    match e {
        Error::UnknownKey { .. } => PyKeyError::new_err(e.to_string()),
        _ => PyValueError::new_err(e.to_string()),
    }
}

/// Why a Python object could not become the Rust type.
#[derive(Debug, Clone)]
pub enum Fault {
    /// Not a number / not an integer / not a str: `TypeError`.
    WrongType { expected: &'static str, got: String },
    /// An int outside i64 (`got`: its value as the reference prints it): `ValueError`, worded
    /// as the core's range check of that field, so the message states the allowed range.
    IntOutOfRange { got: String },
    /// An int too large for a float: `ValueError`, as the reference's `as_float`.
    FloatOverflow,
}

impl Fault {
    pub fn to_err(&self, field: &str) -> PyErr {
        match self {
            Fault::WrongType { expected, got } => {
                PyTypeError::new_err(format!("{field} must be {expected}, got {got}"))
            }
            Fault::IntOutOfRange { got } => PyValueError::new_err(format!(
                "{field} must be in [{}, {}], got {got}",
                i64::MIN,
                i64::MAX
            )),
            Fault::FloatOverflow => PyValueError::new_err(format!(
                "{field} is out of range, got an int too large for a float"
            )),
        }
    }

    /// The error when the core refused this field with `e`: an out-of-range int keeps the
    /// core's wording (its allowed range) with the real value instead of the stand-in.
    fn to_core_err(&self, field: &str, e: &Error) -> PyErr {
        match (self, e.reason()) {
            (Fault::IntOutOfRange { got }, Some(reason)) => {
                PyValueError::new_err(format!("{field} must be {reason}, got {got}"))
            }
            _ => self.to_err(field),
        }
    }
}

/// `repr(obj)`, cut short: the object may come from untrusted input. Mirrors `_validate.py`'s
/// `short_repr` (same cut, same marker).
pub fn short_repr(obj: &Bound<'_, PyAny>) -> String {
    const MAX: usize = 80;
    if let Ok(int) = obj.downcast::<PyInt>() {
        if !obj.is_instance_of::<pyo3::types::PyBool>() {
            return int_text(int);
        }
    }
    let r = match obj.repr() {
        Ok(r) => r.to_string_lossy().into_owned(),
        Err(_) => format!("<{}>", type_name(obj)),
    };
    match r.char_indices().nth(MAX) {
        Some((cut, _)) => format!("{}...", &r[..cut]),
        None => r,
    }
}

/// An int as the reference prints it: its digits, or its size when it is huge (printing a
/// 10⁶-digit int is slow, and Python refuses beyond 4300 digits).
fn int_text(int: &Bound<'_, PyInt>) -> String {
    let bits = int
        .call_method0("bit_length")
        .and_then(|b| b.extract::<u64>())
        .unwrap_or(u64::MAX);
    if bits <= MAX_PRINTED_INT_BITS {
        if let Ok(r) = int.repr() {
            return r.to_string_lossy().into_owned();
        }
    }
    format!("an int of {bits} bits")
}

/// Larger ints are printed as their size (as the reference's `_validate.short_repr`).
const MAX_PRINTED_INT_BITS: u64 = 256;

pub fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|_| "object".to_owned())
}

/// A converted argument, or why it could not be converted. Extraction never fails, so the
/// fault can be raised later, in the core's order (see [`Args`]).
pub enum Arg<T> {
    Ok(T),
    Bad(Fault),
}

impl<'py> FromPyObject<'py> for Arg<f64> {
    fn extract_bound(obj: &Bound<'py, PyAny>) -> PyResult<Self> {
        Ok(match to_f64(obj) {
            Ok(x) => Arg::Ok(x),
            Err(f) => Arg::Bad(f?),
        })
    }
}

impl<'py> FromPyObject<'py> for Arg<i64> {
    fn extract_bound(obj: &Bound<'py, PyAny>) -> PyResult<Self> {
        Ok(match to_i64(obj) {
            Ok(x) => Arg::Ok(x),
            Err(f) => Arg::Bad(f?),
        })
    }
}

/// A real number through `__float__` or `__index__` (float, int, bool, numpy scalars), as
/// the reference's `as_float`. The outer error is an unrelated exception raised by the
/// object itself, passed through.
fn to_f64(obj: &Bound<'_, PyAny>) -> Result<f64, PyResult<Fault>> {
    if let Ok(f) = obj.downcast_exact::<PyFloat>() {
        return Ok(f.value());
    }
    let py = obj.py();
    // A float subclass is read through its `__float__`, as `float(value)` reads it (pyo3's
    // f64 extraction would take the stored value).
    let converted = if obj.is_instance_of::<PyFloat>() {
        py.get_type::<PyFloat>()
            .call1((obj,))
            .and_then(|f| f.extract::<f64>())
    } else {
        obj.extract::<f64>()
    };
    match converted {
        Ok(x) => Ok(x),
        Err(e) if e.is_instance_of::<PyOverflowError>(py) => Err(Ok(Fault::FloatOverflow)),
        Err(e) if e.is_instance_of::<PyTypeError>(py) || e.is_instance_of::<PyValueError>(py) => {
            Err(Ok(Fault::WrongType {
                expected: "a number",
                got: short_repr(obj),
            }))
        }
        Err(e) => Err(Err(e)),
    }
}

/// An integer through `__index__` (int, bool, numpy integers), as the reference's `as_int`:
/// floats are refused even when whole.
pub fn to_i64(obj: &Bound<'_, PyAny>) -> Result<i64, PyResult<Fault>> {
    let py = obj.py();
    if let Ok(i) = obj.downcast_exact::<PyInt>() {
        return i.extract::<i64>().map_err(|e| {
            if e.is_instance_of::<PyOverflowError>(py) {
                Ok(Fault::IntOutOfRange { got: int_text(i) })
            } else {
                Err(e)
            }
        });
    }
    if !obj.is_instance_of::<PyFloat>() {
        // `__index__` once (as `operator.index`): the int it gives is read, and printed
        // when out of range.
        static INDEX: GILOnceCell<Py<PyAny>> = GILOnceCell::new();
        let index = INDEX
            .get_or_try_init(py, || {
                Ok::<_, PyErr>(py.import("operator")?.getattr("index")?.unbind())
            })
            .map_err(Err)?;
        match index.bind(py).call1((obj,)) {
            Ok(i) => {
                let i = i.downcast_into::<PyInt>().map_err(|e| Err(e.into()))?;
                return i.extract::<i64>().map_err(|e| {
                    if e.is_instance_of::<PyOverflowError>(py) {
                        Ok(Fault::IntOutOfRange { got: int_text(&i) })
                    } else {
                        Err(e)
                    }
                });
            }
            Err(e) if !e.is_instance_of::<PyTypeError>(py) => return Err(Err(e)),
            Err(_) => {}
        }
    }
    Err(Ok(Fault::WrongType {
        expected: "an integer",
        got: short_repr(obj),
    }))
}

/// An integer field of a result type (any i64), refused as the reference's `as_int` and
/// `int_in` refuse it.
pub fn int_field(field: &str, obj: &Bound<'_, PyAny>) -> PyResult<i64> {
    to_i64(obj).or_else(|fault| Err(fault?.to_err(field)))
}

/// A count field of a result type: an integer in `[0, i64::MAX]`.
pub fn count_field(field: &str, obj: &Bound<'_, PyAny>) -> PyResult<u64> {
    let range = |got: String| {
        PyValueError::new_err(format!("{field} must be in [0, {}], got {got}", i64::MAX))
    };
    match to_i64(obj) {
        Ok(n) if n >= 0 => Ok(n as u64),
        Ok(n) => Err(range(n.to_string())),
        Err(Ok(Fault::IntOutOfRange { got })) => Err(range(got)),
        Err(fault) => Err(fault?.to_err(field)),
    }
}

/// A float field of a result type, converted as the reference's `as_float` converts it.
pub fn float_field(field: &str, obj: &Bound<'_, PyAny>) -> PyResult<f64> {
    to_f64(obj).or_else(|fault| Err(fault?.to_err(field)))
}

/// Whether `obj` is an iterable as `isinstance(obj, collections.abc.Iterable)` says: its type
/// has `__iter__` (an object with only `__getitem__` is not).
pub fn is_iterable(obj: &Bound<'_, PyAny>) -> bool {
    obj.is_instance_of::<PyList>()
        || obj.is_instance_of::<pyo3::types::PyTuple>()
        || obj
            .get_type()
            .getattr("__iter__")
            .is_ok_and(|f| !f.is_none())
}

/// A value that every core check refuses: stands in for an argument that failed to convert.
pub trait Sentinel {
    const INVALID: Self;
}

impl Sentinel for f64 {
    const INVALID: f64 = f64::NAN;
}

impl Sentinel for i64 {
    const INVALID: i64 = i64::MIN;
}

/// Conversion faults of one call, raised in the order the core validates.
#[derive(Default)]
pub struct Args {
    faults: Vec<(Cow<'static, str>, Fault)>,
}

impl Args {
    pub fn new() -> Self {
        Args::default()
    }

    /// The value, or the sentinel with the fault recorded under `field`.
    pub fn take<T: Sentinel>(&mut self, field: &'static str, arg: Arg<T>) -> T {
        self.take_named(Cow::Borrowed(field), arg)
    }

    pub fn take_named<T: Sentinel>(&mut self, field: Cow<'static, str>, arg: Arg<T>) -> T {
        match arg {
            Arg::Ok(x) => x,
            Arg::Bad(f) => {
                self.faults.push((field, f));
                T::INVALID
            }
        }
    }

    /// An optional argument: None stays None, a bad value becomes `Some(sentinel)`.
    pub fn take_opt<T: Sentinel>(&mut self, field: &'static str, arg: Option<Arg<T>>) -> Option<T> {
        arg.map(|a| self.take(field, a))
    }

    /// Record a fault found outside [`Arg`] (a tool name, a sequence) that the core cannot
    /// see; it is raised unless the core reports an earlier field.
    pub fn record(&mut self, field: impl Into<Cow<'static, str>>, fault: Fault) {
        self.faults.push((field.into(), fault));
    }

    /// The core's answer, unless a conversion failed: then the error of the first field the
    /// core found bad — the conversion's own error if that field failed to convert.
    pub fn finish<T>(self, result: ttlpolicy_core::Result<T>) -> PyResult<T> {
        let Some((field, fault)) = self.faults.first() else {
            return result.map_err(core_err);
        };
        match result {
            Err(e) => match e.field() {
                Some(bad) => match self.faults.iter().find(|(f, _)| f == bad) {
                    Some((f, fault)) => Err(fault.to_core_err(f, &e)),
                    None => Err(core_err(e)),
                },
                None => Err(core_err(e)),
            },
            Ok(_) => Err(fault.to_err(field)),
        }
    }
}

/// The core call `call` on one converted argument, with [`Args`]' error order.
pub fn call1<A: Sentinel, T>(
    field: &'static str,
    arg: Arg<A>,
    call: impl FnOnce(A) -> ttlpolicy_core::Result<T>,
) -> PyResult<T> {
    let mut args = Args::new();
    let a = args.take(field, arg);
    args.finish(call(a))
}

/// The core call `call` on two converted arguments, with [`Args`]' error order.
pub fn call2<A: Sentinel, B: Sentinel, T>(
    (field_a, arg_a): (&'static str, Arg<A>),
    (field_b, arg_b): (&'static str, Arg<B>),
    call: impl FnOnce(A, B) -> ttlpolicy_core::Result<T>,
) -> PyResult<T> {
    let mut args = Args::new();
    let a = args.take(field_a, arg_a);
    let b = args.take(field_b, arg_b);
    args.finish(call(a, b))
}

/// The core call `call` on three converted arguments, with [`Args`]' error order.
pub fn call3<A: Sentinel, B: Sentinel, C: Sentinel, T>(
    (field_a, arg_a): (&'static str, Arg<A>),
    (field_b, arg_b): (&'static str, Arg<B>),
    (field_c, arg_c): (&'static str, Arg<C>),
    call: impl FnOnce(A, B, C) -> ttlpolicy_core::Result<T>,
) -> PyResult<T> {
    let mut args = Args::new();
    let a = args.take(field_a, arg_a);
    let b = args.take(field_b, arg_b);
    let c = args.take(field_c, arg_c);
    args.finish(call(a, b, c))
}

/// An untrusted tool name: `str` or None. A str that is not valid UTF-8 (lone surrogates)
/// gets U+FFFD for each, exactly like the reference's utf-16 surrogatepass/replace round
/// trip. Valid names are borrowed, not copied. (The core cuts the name to its length cap.)
pub fn tool_name<'a>(tool: Option<&'a Bound<'_, PyAny>>) -> Result<Option<Cow<'a, str>>, Fault> {
    let Some(obj) = tool else { return Ok(None) };
    let Ok(s) = obj.downcast::<PyString>() else {
        return Err(Fault::WrongType {
            expected: "a str or None",
            got: type_name(obj),
        });
    };
    if let Ok(text) = s.to_str() {
        return Ok(Some(Cow::Borrowed(text)));
    }
    let units: Vec<u16> = s
        .call_method1("encode", ("utf-16-le", "surrogatepass"))
        .ok()
        .and_then(|b| b.downcast_into::<PyBytes>().ok())
        .map(|b| {
            b.as_bytes()
                .chunks_exact(2)
                .map(|c| u16::from_le_bytes([c[0], c[1]]))
                .collect()
        })
        .unwrap_or_default();
    Ok(Some(Cow::Owned(String::from_utf16_lossy(&units))))
}

/// [`tool_name`] raising its `TypeError` at once: for calls where the reference reads the
/// tool before any other argument.
pub fn tool_now<'a>(tool: Option<&'a Bound<'_, PyAny>>) -> PyResult<Option<Cow<'a, str>>> {
    tool_name(tool).map_err(|f| f.to_err("tool"))
}

/// [`tool_name`] with the fault recorded in `args`: for calls where the reference checks
/// other arguments first. A bad tool reads as None meanwhile.
pub fn tool_later<'a>(args: &mut Args, tool: Option<&'a Bound<'_, PyAny>>) -> Option<Cow<'a, str>> {
    tool_name(tool).unwrap_or_else(|f| {
        args.record("tool", f);
        None
    })
}

/// Floats of any iterable, each converted like a float argument named `{field}[i]`. Faults
/// are recorded in `args` (a non-iterable object under `field`, with no samples).
pub fn f64_list(
    args: &mut Args,
    field: &'static str,
    obj: &Bound<'_, PyAny>,
) -> PyResult<Vec<f64>> {
    let mut out = Vec::new();
    let mut push = |args: &mut Args, i: usize, item: &Bound<'_, PyAny>| -> PyResult<()> {
        let x = match to_f64(item) {
            Ok(x) => x,
            Err(f) => {
                args.record(format!("{field}[{i}]"), f?);
                f64::NAN
            }
        };
        out.push(x);
        Ok(())
    };
    if let Ok(list) = obj.downcast::<PyList>() {
        for (i, item) in list.iter().enumerate() {
            push(args, i, &item)?;
        }
    } else {
        match obj.try_iter() {
            Ok(iter) => {
                for (i, item) in iter.enumerate() {
                    push(args, i, &item?)?;
                }
            }
            Err(e) if e.is_instance_of::<PyTypeError>(obj.py()) => {
                args.record(
                    field,
                    Fault::WrongType {
                        expected: "an iterable of numbers",
                        got: type_name(obj),
                    },
                );
            }
            Err(e) => return Err(e),
        }
    }
    Ok(out)
}
