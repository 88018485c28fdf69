//! Value semantics of the result types (`PinDecision`, `Pin`, `Ended`, `Finished`,
//! `GroupStats`), as the reference's frozen dataclasses have them: hash, repr and pickling
//! through the tuple of the fields, in the dataclass's order.

use pyo3::prelude::*;
use pyo3::types::{PyTuple, PyType};
use pyo3::PyClass;

/// A result type: its field names and values, in the reference dataclass's order.
pub trait Fields {
    /// The field names.
    const NAMES: &'static [&'static str];
    /// The field values, as Python objects.
    fn fields<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>>;
}

/// `hash(fields)`, as a frozen dataclass hashes.
pub fn hash<T: Fields>(x: &T, py: Python<'_>) -> PyResult<isize> {
    x.fields(py)?.hash()
}

/// `(type, fields)`: pickles as a call of the constructor.
pub fn reduce<'py, T>(slf: &Bound<'py, T>) -> PyResult<(Bound<'py, PyType>, Bound<'py, PyTuple>)>
where
    T: Fields + PyClass<Frozen = pyo3::pyclass::boolean_struct::True> + Sync,
{
    Ok((slf.as_any().get_type(), slf.get().fields(slf.py())?))
}

/// `Name(field=repr(value), ...)`, as a dataclass prints.
pub fn repr<T: Fields>(x: &T, py: Python<'_>, name: &str) -> PyResult<String> {
    let values = x.fields(py)?;
    let mut parts = Vec::with_capacity(T::NAMES.len());
    for (field, value) in T::NAMES.iter().zip(values.iter()) {
        parts.push(format!("{field}={}", value.repr()?));
    }
    Ok(format!("{name}({})", parts.join(", ")))
}

/// The field names as a tuple: a class's `__match_args__`, as a dataclass has them (`case
/// Pin(program_id, blocks, _)`).
pub fn match_args<T: Fields>(py: Python<'_>) -> PyResult<Py<PyTuple>> {
    Ok(PyTuple::new(py, T::NAMES)?.unbind())
}
