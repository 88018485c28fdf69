//! The `tenant_weights` argument (`ProgramScheduler`, `AdmissionControl`): a dict of str
//! tenant key to integer weight, converted for `ttlpolicy_core::tenants::TenantWeights`,
//! which checks the values. Types are checked here, before any value, as the reference's
//! `check_tenant_weights` does.

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString};

use crate::convert::{short_repr, to_i64, Args, Fault};

const FIELD: &str = "tenant_weights";
const KIND: &str = "a dict of str tenant keys to integer weights";

/// The entries of `obj` (None: none). A type fault is recorded in `args` and the entries
/// replaced by one the core refuses, so that the fault is raised in the core's order; an
/// int too large stands as `i64::MIN` with its fault recorded. An exception the object
/// itself raises passes through.
pub fn tenant_weights_arg(
    args: &mut Args,
    obj: Option<&Bound<'_, PyAny>>,
) -> PyResult<Vec<(String, i64)>> {
    let refused = || vec![(String::new(), i64::MIN)];
    let Some(obj) = obj.filter(|o| !o.is_none()) else {
        return Ok(Vec::new());
    };
    let Ok(dict) = obj.downcast::<PyDict>() else {
        args.record(FIELD, wrong(KIND, obj));
        return Ok(refused());
    };
    // A snapshot of the entries (as the reference's `list(dict.items(value))`): a weight's
    // `__index__` may change the dict while the entries are converted.
    let entries = dict.items();
    let mut out = Vec::with_capacity(entries.len());
    let mut too_large = None;
    for entry in entries.iter() {
        let (key, weight): (Bound<'_, PyAny>, Bound<'_, PyAny>) = entry.extract()?;
        let Ok(key) = key.downcast::<PyString>() else {
            args.record(FIELD, wrong(KIND, &key));
            return Ok(refused());
        };
        let weight = match to_i64(&weight) {
            Ok(w) => w,
            Err(Ok(fault @ Fault::IntOutOfRange { .. })) => {
                too_large.get_or_insert(fault);
                i64::MIN
            }
            Err(Ok(fault)) => {
                args.record(FIELD, fault);
                return Ok(refused());
            }
            Err(Err(e)) => return Err(e), // raised by the object itself
        };
        out.push((key.to_string_lossy().into_owned(), weight));
    }
    if let Some(fault) = too_large {
        args.record(FIELD, fault);
    }
    Ok(out)
}

fn wrong(expected: &'static str, obj: &Bound<'_, PyAny>) -> Fault {
    Fault::WrongType {
        expected,
        got: short_repr(obj),
    }
}
