//! Native `StepModel` and `StepRun`: the simulator's step-time model, bit for bit the floats
//! of `ttlpolicy.sim.hardware`'s. Conversions only; the arithmetic is
//! `ttlpolicy_core::step_time`'s. Plain float arguments: the simulator's engine is the only
//! caller, once or more per step.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use ttlpolicy_core::step_time::{Line, StepModel, StepRun};

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyStepModel>()?;
    m.add_class::<PyStepRun>()
}

/// (c0, c_tok, c_attn, c_kv, c_seq) of a line.
type LineCoefficients = (f64, f64, f64, f64, f64);

fn line((c0, c_tok, c_attn, c_kv, c_seq): LineCoefficients) -> Line {
    Line {
        c0,
        c_tok,
        c_attn,
        c_kv,
        c_seq,
    }
}

/// The largest step count a run takes: the reference compares it with floats, exactly.
const MAX_STEPS: u64 = 1 << 53;

/// Step time = max(compute line, memory line), or the `decode` line for a decode-only step;
/// each line given as its five coefficients.
#[pyclass(name = "StepModel", module = "ttlpolicy._native", frozen)]
pub struct PyStepModel {
    inner: StepModel,
}

#[pymethods]
impl PyStepModel {
    #[new]
    #[pyo3(signature = (compute, memory, decode = None))]
    fn new(
        compute: LineCoefficients,
        memory: LineCoefficients,
        decode: Option<LineCoefficients>,
    ) -> Self {
        PyStepModel {
            inner: StepModel {
                compute: line(compute),
                memory: line(memory),
                decode: decode.map(line),
            },
        }
    }

    /// Seconds of a step of this shape (``seqs`` 0: a caller that does not count its sequences,
    /// priced as if they cost nothing).
    #[pyo3(signature = (tokens, attn, kv, seqs = 0.0))]
    fn step_s(&self, tokens: f64, attn: f64, kv: f64, seqs: f64) -> f64 {
        self.inner.step_s(tokens, attn, kv, seqs)
    }

    /// The run of steps whose first step has this shape and each further one ``d_attn`` attention
    /// units and ``d_kv`` KV tokens more (``StepRun``).
    #[pyo3(signature = (tokens, attn0, d_attn, kv0, d_kv, seqs = 0.0))]
    fn run(
        &self,
        tokens: f64,
        attn0: f64,
        d_attn: f64,
        kv0: f64,
        d_kv: f64,
        seqs: f64,
    ) -> PyStepRun {
        PyStepRun {
            inner: self.inner.run(tokens, attn0, d_attn, kv0, d_kv, seqs),
        }
    }
}

/// The times of a run of steps (`StepModel.run`).
#[pyclass(name = "StepRun", module = "ttlpolicy._native", frozen)]
pub struct PyStepRun {
    inner: StepRun,
}

#[pymethods]
impl PyStepRun {
    /// The compute line at the first step.
    #[getter]
    fn a0(&self) -> f64 {
        self.inner.a0
    }
    /// Growth of the compute line per step.
    #[getter]
    fn da(&self) -> f64 {
        self.inner.da
    }
    /// The memory line at the first step.
    #[getter]
    fn b0(&self) -> f64 {
        self.inner.b0
    }
    /// Growth of the memory line per step.
    #[getter]
    fn db(&self) -> f64 {
        self.inner.db
    }
    /// The first step index where the larger line may change (None: never).
    #[getter]
    fn split(&self) -> Option<u64> {
        self.inner.split
    }
    /// No line starts below zero or falls: then s(k), as computed (every operation rounds
    /// monotonically), never decreases with k, and "the clock reaches t after k steps" holds from
    /// one k on; ``reach`` may then start its search at a guess.
    #[getter]
    fn monotone(&self) -> bool {
        self.inner.monotone()
    }

    /// Time of the first ``k`` steps.
    fn s(&self, k: u64) -> f64 {
        self.inner.s(k)
    }

    /// The fewest steps ``j`` in [1, k] after which a clock at ``start_s`` reaches ``until_s``
    /// (``start_s + s(j) >= until_s``), and ``s(j)``.
    fn reach(&self, start_s: f64, until_s: f64, k: u64, s_k: f64) -> PyResult<(u64, f64)> {
        if !(1..=MAX_STEPS).contains(&k) {
            return Err(PyValueError::new_err(format!(
                "k must be in [1, {MAX_STEPS}], got {k}"
            )));
        }
        Ok(self.inner.reach(start_s, until_s, k, s_k))
    }
}
