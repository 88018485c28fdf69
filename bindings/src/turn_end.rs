//! `finish`'s turn (the scheduler's and the lifecycle's): the reference's `TurnEnd` (one
//! Python class for both backends, like `PolicyConfig`) or its fields as keywords, converted
//! to the core's `TurnEnd` in the reference's order. A field added to the reference's and the
//! core's `TurnEnd` is added here, to [`TURN_END`] and [`FinishCall`], and nowhere else in
//! the bindings: both `finish` methods take [`TurnFields`] whole.

use std::borrow::Cow;

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::sync::GILOnceCell;
use pyo3::types::{PyDict, PyString, PyType};
use ttlpolicy_core::scheduler::{Finished, TurnEnd};

use crate::convert::{tool_now, type_name, Arg, Args};
use crate::scheduler::{id_str, Flag, PyFinished};

/// The reference's `TurnEnd` fields, in its order.
const TURN_END: [&str; 6] = [
    "tool",
    "last_turn",
    "cache_miss_cost_s",
    "prefix_tokens",
    "offloaded_tokens",
    "mean_active_blocks",
];

/// The reference's `TurnEnd` class, imported at the first `finish` that is given one (the
/// package is loaded by then: this module is its submodule).
fn turn_end_class(py: Python<'_>) -> PyResult<&Bound<'_, PyType>> {
    static CLASS: GILOnceCell<Py<PyType>> = GILOnceCell::new();
    CLASS.import(py, "ttlpolicy.reference.scheduler", "TurnEnd")
}

/// [`TURN_END`]'s names as Python strs, interned once (read by attribute on each call).
fn field_names(py: Python<'_>) -> &[Py<PyString>] {
    static NAMES: GILOnceCell<Vec<Py<PyString>>> = GILOnceCell::new();
    NAMES.get_or_init(py, || {
        TURN_END
            .iter()
            .map(|n| PyString::intern(py, n).unbind())
            .collect()
    })
}

/// The fields `finish` was given, by [`TURN_END`]'s index (None: absent, the core's
/// default), each still a Python object: converted by [`FinishCall::convert`].
pub(crate) struct TurnFields<'py>([Option<Bound<'py, PyAny>>; 6]);

impl<'py> TurnFields<'py> {
    /// `finish`'s `turn` (a `TurnEnd` or None) and its keywords, refused as the reference's
    /// `turn_end` refuses them: a `turn` that is not a `TurnEnd`, both forms, a keyword that
    /// names no field (`TypeError`).
    pub(crate) fn read(
        py: Python<'py>,
        turn: Option<&Bound<'py, PyAny>>,
        keywords: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Self> {
        let mut out: [Option<Bound<'py, PyAny>>; 6] = Default::default();
        let keywords = keywords.filter(|k| !k.is_empty());
        match turn.filter(|t| !t.is_none()) {
            Some(turn) => {
                if !turn.is_instance(turn_end_class(py)?)? {
                    return Err(PyTypeError::new_err(format!(
                        "turn must be a TurnEnd or None, got {}",
                        type_name(turn)
                    )));
                }
                if let Some((name, _)) = keywords.and_then(|k| k.iter().next()) {
                    return Err(PyTypeError::new_err(format!(
                        "finish() takes a TurnEnd or its fields as keywords, not both, got \
                         turn and {}",
                        name.repr()?
                    )));
                }
                for (slot, name) in out.iter_mut().zip(field_names(py)) {
                    *slot = Some(turn.getattr(name.bind(py))?);
                }
            }
            None => {
                for (name, value) in keywords.into_iter().flatten() {
                    let i = name
                        .downcast::<PyString>()
                        .ok()
                        .and_then(|s| s.to_str().ok())
                        .and_then(|s| TURN_END.iter().position(|f| *f == s));
                    let Some(i) = i else {
                        return Err(PyTypeError::new_err(format!(
                            "finish() got an unexpected keyword argument {}",
                            name.repr()?
                        )));
                    };
                    out[i] = Some(value);
                }
            }
        }
        Ok(TurnFields(out))
    }
}

/// A present field that is not None.
fn given<'a, 'py>(field: &'a Option<Bound<'py, PyAny>>) -> Option<&'a Bound<'py, PyAny>> {
    field.as_ref().filter(|v| !v.is_none())
}

/// An int field: absent is the core's default; None is converted (and refused) like any
/// value.
fn int_field(field: &Option<Bound<'_, PyAny>>, default: i64) -> PyResult<Arg<i64>> {
    field.as_ref().map_or(Ok(Arg::Ok(default)), |v| v.extract())
}

/// An optional float field: absent or None is None.
fn opt_float_field(field: &Option<Bound<'_, PyAny>>) -> PyResult<Option<Arg<f64>>> {
    given(field).map(|v| v.extract()).transpose()
}

/// `finish`'s arguments (the scheduler's and the lifecycle's), converted in the reference's
/// order: the types it checks first are refused at once, the others' faults are kept until
/// the core has checked the values ([`Args`]).
pub(crate) struct FinishCall<'a> {
    pub(crate) rid: &'a str,
    pub(crate) now: f64,
    pub(crate) blocks: i64,
    tool: Option<Cow<'a, str>>,
    last_turn: bool,
    cache_miss_cost_s: Option<f64>,
    prefix_tokens: i64,
    offloaded_tokens: i64,
    mean_active_blocks: Option<f64>,
    args: Args,
}

impl<'a> FinishCall<'a> {
    pub(crate) fn convert(
        request_id: &'a Bound<'_, PyAny>,
        now: Arg<f64>,
        blocks_held: Arg<i64>,
        turn: &'a TurnFields<'_>,
    ) -> PyResult<Self> {
        let [tool, last_turn, cache_miss_cost_s, prefix_tokens, offloaded_tokens, mean_active] =
            &turn.0;
        let default = TurnEnd::default();
        let tool = tool_now(given(tool))?;
        let last_turn = match last_turn {
            None => default.last_turn,
            Some(v) => v.extract::<Flag>()?.get("last_turn")?,
        };
        let rid = id_str("request_id", request_id)?;
        let mut args = Args::new();
        Ok(FinishCall {
            rid,
            now: args.take("now", now),
            blocks: args.take("blocks_held", blocks_held),
            tool,
            last_turn,
            cache_miss_cost_s: args
                .take_opt("cache_miss_cost_s", opt_float_field(cache_miss_cost_s)?),
            prefix_tokens: args.take(
                "prefix_tokens",
                int_field(prefix_tokens, default.prefix_tokens)?,
            ),
            offloaded_tokens: args.take(
                "offloaded_tokens",
                int_field(offloaded_tokens, default.offloaded_tokens)?,
            ),
            mean_active_blocks: args.take_opt("mean_active_blocks", opt_float_field(mean_active)?),
            args,
        })
    }

    /// The core's turn.
    pub(crate) fn core(&self) -> TurnEnd<'_> {
        TurnEnd {
            tool: self.tool.as_deref(),
            last_turn: self.last_turn,
            cache_miss_cost_s: self.cache_miss_cost_s,
            prefix_tokens: self.prefix_tokens,
            offloaded_tokens: self.offloaded_tokens,
            mean_active_blocks: self.mean_active_blocks,
        }
    }

    /// The core's answer as the reference's (see [`Args::finish`]).
    pub(crate) fn done(self, r: ttlpolicy_core::Result<Finished>) -> PyResult<PyFinished> {
        Ok(PyFinished::from(self.args.finish(r)?))
    }
}
