//! Native twins of the decision core's Python classes: same names, signatures, defaults,
//! results and exceptions as `ttlpolicy.reference.{solver,history,estimators,policy}`.
//! Conversions only; every rule lives in `ttlpolicy-core`.

use std::borrow::Cow;

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyFloat, PyString, PyTuple, PyType};
use pyo3::{intern, IntoPyObjectExt};
use ttlpolicy_core::config::PinHandover;
use ttlpolicy_core::estimators::{CacheMissModel, EtaEstimator, OutOfOrderCost};
use ttlpolicy_core::history::ToolHistory;
use ttlpolicy_core::policy::{PinDecision, PolicyConfig, Source, TTLPolicy};
use ttlpolicy_core::solver;

use crate::convert::{call1, call2, core_err, f64_list, tool_later, tool_now, Arg, Args};

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyToolHistory>()?;
    m.add_class::<PyEtaEstimator>()?;
    m.add_class::<PyOutOfOrderCost>()?;
    m.add_class::<PyCacheMissModel>()?;
    m.add_class::<PyPinDecision>()?;
    m.add_class::<PyTTLPolicy>()?;
    m.add_function(wrap_pyfunction!(solve_ttl, m)?)?;
    Ok(())
}

/// `(tau_s, value)`: the TTL that maximises P(τ)·benefit_s − cost_per_s·τ, τ ≤ max_ttl_s.
#[pyfunction]
#[pyo3(signature = (samples_s, benefit_s, cost_per_s, max_ttl_s))]
fn solve_ttl(
    samples_s: &Bound<'_, PyAny>,
    benefit_s: Arg<f64>,
    cost_per_s: Arg<f64>,
    max_ttl_s: Arg<f64>,
) -> PyResult<(f64, f64)> {
    let mut args = Args::new();
    let b = args.take("benefit_s", benefit_s);
    let c = args.take("cost_per_s", cost_per_s);
    let m = args.take("max_ttl_s", max_ttl_s);
    let samples = f64_list(&mut args, "samples_s", samples_s)?;
    args.finish(solver::solve_ttl(&samples, b, c, m))
}

// -- ToolHistory ----------------------------------------------------------------------------

/// Sliding windows of tool durations, per tool and global, with a cap on tracked tools.
#[pyclass(name = "ToolHistory", module = "ttlpolicy._native")]
pub struct PyToolHistory {
    inner: ToolHistory,
}

#[pymethods]
impl PyToolHistory {
    #[new]
    #[pyo3(signature = (window = Arg::Ok(1024), max_tools = Arg::Ok(1024)))]
    fn new(window: Arg<i64>, max_tools: Arg<i64>) -> PyResult<Self> {
        let inner = call2(
            ("window", window),
            ("max_tools", max_tools),
            ToolHistory::new,
        )?;
        Ok(PyToolHistory { inner })
    }

    #[getter]
    fn window(&self) -> usize {
        self.inner.window()
    }

    #[getter]
    fn max_tools(&self) -> usize {
        self.inner.max_tools()
    }

    /// Record one duration of `tool` (None: unknown tool, global window only).
    fn observe(&mut self, tool: Option<&Bound<'_, PyAny>>, duration_s: Arg<f64>) -> PyResult<()> {
        let tool = tool_now(tool)?;
        call1("duration_s", duration_s, |d| {
            self.inner.observe(tool.as_deref(), d)
        })
    }

    fn count(&self, tool: Option<&Bound<'_, PyAny>>) -> PyResult<usize> {
        Ok(self.inner.count(tool_now(tool)?.as_deref()))
    }

    fn total_count(&self) -> usize {
        self.inner.total_count()
    }

    fn num_tools(&self) -> usize {
        self.inner.num_tools()
    }

    fn tools(&self) -> Vec<String> {
        self.inner.tools().into_iter().map(str::to_owned).collect()
    }

    fn cdf(&self, tool: Option<&Bound<'_, PyAny>>, t_s: Arg<f64>) -> PyResult<f64> {
        // The reference checks t_s before the tool.
        let mut args = Args::new();
        let t = args.take("t_s", t_s);
        let tool = tool_later(&mut args, tool);
        args.finish(self.inner.cdf(tool.as_deref(), t))
    }

    fn quantile(&self, tool: Option<&Bound<'_, PyAny>>, q: Arg<f64>) -> PyResult<Option<f64>> {
        let mut args = Args::new();
        let q = args.take("q", q);
        let tool = tool_later(&mut args, tool);
        args.finish(self.inner.quantile(tool.as_deref(), q))
    }

    fn mean(&self, tool: Option<&Bound<'_, PyAny>>) -> PyResult<Option<f64>> {
        Ok(self.inner.mean(tool_now(tool)?.as_deref()))
    }

    fn samples(&self, tool: Option<&Bound<'_, PyAny>>) -> PyResult<Vec<f64>> {
        Ok(self.inner.samples(tool_now(tool)?.as_deref()).to_vec())
    }
}

// -- Estimators -----------------------------------------------------------------------------

/// η = −corr(k, N−k) over the turns of the last `window` finished programs, in [0, 1].
#[pyclass(name = "EtaEstimator", module = "ttlpolicy._native")]
pub struct PyEtaEstimator {
    inner: EtaEstimator,
}

#[pymethods]
impl PyEtaEstimator {
    #[new]
    #[pyo3(signature = (window = Arg::Ok(256), min_programs = Arg::Ok(8), clip = true))]
    fn new(window: Arg<i64>, min_programs: Arg<i64>, clip: bool) -> PyResult<Self> {
        let inner = call2(
            ("window", window),
            ("min_programs", min_programs),
            |w, m| EtaEstimator::with_clip(w, m, clip),
        )?;
        Ok(PyEtaEstimator { inner })
    }

    fn observe(&mut self, total_turns: Arg<i64>) -> PyResult<()> {
        call1("total_turns", total_turns, |n| self.inner.observe(n))
    }

    #[getter]
    fn eta(&self) -> f64 {
        self.inner.eta()
    }

    fn count(&self) -> usize {
        self.inner.count()
    }

    #[getter]
    fn window(&self) -> usize {
        self.inner.window()
    }

    #[getter]
    fn min_programs(&self) -> usize {
        self.inner.min_programs()
    }

    #[getter]
    fn clip(&self) -> bool {
        self.inner.clip()
    }
}

/// T: mean queueing delay over the last `window` requests that returned to a dropped cache.
#[pyclass(name = "OutOfOrderCost", module = "ttlpolicy._native")]
pub struct PyOutOfOrderCost {
    inner: OutOfOrderCost,
}

#[pymethods]
impl PyOutOfOrderCost {
    #[new]
    #[pyo3(signature = (window = Arg::Ok(256)))]
    fn new(window: Arg<i64>) -> PyResult<Self> {
        let inner = call1("window", window, OutOfOrderCost::new)?;
        Ok(PyOutOfOrderCost { inner })
    }

    fn observe(&mut self, delay_s: Arg<f64>) -> PyResult<()> {
        call1("delay_s", delay_s, |d| self.inner.observe(d))
    }

    #[getter]
    fn mean_s(&self) -> f64 {
        self.inner.mean_s()
    }

    fn count(&self) -> usize {
        self.inner.count()
    }

    #[getter]
    fn window(&self) -> usize {
        self.inner.window()
    }
}

/// Seconds to rebuild a dropped prefix: fitted prefill quadratic or offload reload.
#[pyclass(name = "CacheMissModel", module = "ttlpolicy._native")]
pub struct PyCacheMissModel {
    inner: CacheMissModel,
}

#[pymethods]
impl PyCacheMissModel {
    #[new]
    #[pyo3(signature = (
        prefill_base_s = Arg::Ok(0.01),
        prefill_s_per_token = Arg::Ok(1e-4),
        prefill_s_per_token2 = Arg::Ok(0.0),
        kv_bytes_per_token = Arg::Ok(131072),
        offload_bandwidth_bytes_per_s = None,
        window = Arg::Ok(256),
        min_samples = Arg::Ok(8),
    ))]
    fn new(
        prefill_base_s: Arg<f64>,
        prefill_s_per_token: Arg<f64>,
        prefill_s_per_token2: Arg<f64>,
        kv_bytes_per_token: Arg<i64>,
        offload_bandwidth_bytes_per_s: Option<Arg<f64>>,
        window: Arg<i64>,
        min_samples: Arg<i64>,
    ) -> PyResult<Self> {
        let mut args = Args::new();
        let a = args.take("prefill_base_s", prefill_base_s);
        let b = args.take("prefill_s_per_token", prefill_s_per_token);
        let c = args.take("prefill_s_per_token2", prefill_s_per_token2);
        let kv = args.take("kv_bytes_per_token", kv_bytes_per_token);
        let bw = args.take_opt(
            "offload_bandwidth_bytes_per_s",
            offload_bandwidth_bytes_per_s,
        );
        let w = args.take("window", window);
        let m = args.take("min_samples", min_samples);
        let inner = args.finish(CacheMissModel::new(a, b, c, kv, bw, w, m))?;
        Ok(PyCacheMissModel { inner })
    }

    fn observe_prefill(&mut self, tokens: Arg<i64>, seconds: Arg<f64>) -> PyResult<()> {
        call2(("tokens", tokens), ("seconds", seconds), |n, s| {
            self.inner.observe_prefill(n, s)
        })
    }

    #[getter]
    fn fitted(&self) -> bool {
        self.inner.fitted()
    }

    /// (a, b, c) of prefill_s = a + b·tokens + c·tokens², fitted or default.
    #[getter]
    fn coefficients(&self) -> (f64, f64, f64) {
        self.inner.coefficients()
    }

    #[getter]
    fn default_coeffs(&self) -> (f64, f64, f64) {
        self.inner.default_coeffs()
    }

    #[getter]
    fn kv_bytes_per_token(&self) -> i64 {
        self.inner.kv_bytes_per_token()
    }

    #[getter]
    fn offload_bandwidth_bytes_per_s(&self) -> Option<f64> {
        self.inner.offload_bandwidth_bytes_per_s()
    }

    #[getter]
    fn window(&self) -> usize {
        self.inner.window()
    }

    #[getter]
    fn min_samples(&self) -> usize {
        self.inner.min_samples()
    }

    fn prefill_s(&self, tokens: Arg<i64>) -> PyResult<f64> {
        call1("tokens", tokens, |n| self.inner.prefill_s(n))
    }

    fn reload_s(&self, tokens: Arg<i64>) -> PyResult<Option<f64>> {
        call1("tokens", tokens, |n| self.inner.reload_s(n))
    }

    #[pyo3(signature = (prefix_tokens, offloaded_tokens = Arg::Ok(0)))]
    fn miss_cost_s(&self, prefix_tokens: Arg<i64>, offloaded_tokens: Arg<i64>) -> PyResult<f64> {
        call2(
            ("prefix_tokens", prefix_tokens),
            ("offloaded_tokens", offloaded_tokens),
            |p, o| self.inner.miss_cost_s(p, o),
        )
    }
}

// -- PinDecision ----------------------------------------------------------------------------

/// A pin decision. `ttl_s == 0` means: do not pin. Immutable, compares and hashes by value
/// like the reference's frozen dataclass.
#[pyclass(name = "PinDecision", module = "ttlpolicy._native", frozen, eq)]
#[derive(Clone, PartialEq)]
pub struct PyPinDecision {
    pub inner: PinDecision,
}

impl PyPinDecision {
    /// The fields as the reference's dataclass orders them.
    fn fields<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        let d = &self.inner;
        PyTuple::new(
            py,
            [
                d.ttl_s.into_bound_py_any(py)?,
                d.benefit_s.into_bound_py_any(py)?,
                d.cost_per_s.into_bound_py_any(py)?,
                d.p_return.into_bound_py_any(py)?,
                source_str(py, d.source).clone().into_any(),
            ],
        )
    }
}

impl From<PinDecision> for PyPinDecision {
    fn from(inner: PinDecision) -> Self {
        PyPinDecision { inner }
    }
}

fn source_str(py: Python<'_>, s: Source) -> &Bound<'_, PyString> {
    match s {
        Source::ToolCdf => intern!(py, "tool_cdf"),
        Source::GlobalCdf => intern!(py, "global_cdf"),
        Source::ExponentialPrior => intern!(py, "exponential_prior"),
        Source::Capped => intern!(py, "capped"),
        Source::NoBenefit => intern!(py, "no_benefit"),
    }
}

#[pymethods]
impl PyPinDecision {
    #[new]
    fn new(
        ttl_s: f64,
        benefit_s: f64,
        cost_per_s: f64,
        p_return: f64,
        source: &str,
    ) -> PyResult<Self> {
        let source = Source::parse(source).ok_or_else(|| {
            pyo3::exceptions::PyValueError::new_err(format!(
                "source must be one of tool_cdf, global_cdf, exponential_prior, capped, \
                 no_benefit, got {source:?}"
            ))
        })?;
        Ok(PinDecision {
            ttl_s,
            benefit_s,
            cost_per_s,
            p_return,
            source,
        }
        .into())
    }

    #[getter]
    fn ttl_s(&self) -> f64 {
        self.inner.ttl_s
    }

    #[getter]
    fn benefit_s(&self) -> f64 {
        self.inner.benefit_s
    }

    #[getter]
    fn cost_per_s(&self) -> f64 {
        self.inner.cost_per_s
    }

    #[getter]
    fn p_return(&self) -> f64 {
        self.inner.p_return
    }

    #[getter]
    fn source<'py>(&self, py: Python<'py>) -> Bound<'py, PyString> {
        source_str(py, self.inner.source).clone()
    }

    #[getter]
    fn pin(&self) -> bool {
        self.inner.pin()
    }

    fn __hash__(&self, py: Python<'_>) -> PyResult<isize> {
        self.fields(py)?.hash()
    }

    fn __reduce__<'py>(
        slf: &Bound<'py, Self>,
    ) -> PyResult<(Bound<'py, PyType>, Bound<'py, PyTuple>)> {
        Ok((slf.get_type(), slf.get().fields(slf.py())?))
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let r = |x: f64| -> PyResult<String> { Ok(PyFloat::new(py, x).repr()?.to_string()) };
        let d = &self.inner;
        Ok(format!(
            "PinDecision(ttl_s={}, benefit_s={}, cost_per_s={}, p_return={}, source='{}')",
            r(d.ttl_s)?,
            r(d.benefit_s)?,
            r(d.cost_per_s)?,
            r(d.p_return)?,
            d.source.as_str()
        ))
    }
}

// -- TTLPolicy ------------------------------------------------------------------------------

/// Owns the tool history and the η, T and cache-miss estimators; decides pins.
#[pyclass(name = "TTLPolicy", module = "ttlpolicy._native")]
pub struct PyTTLPolicy {
    inner: TTLPolicy,
    config: Py<PyAny>,
}

impl PyTTLPolicy {
    /// The core policy, for other native classes that drive it (the scheduler).
    pub fn core(&self) -> &TTLPolicy {
        &self.inner
    }

    pub fn core_mut(&mut self) -> &mut TTLPolicy {
        &mut self.inner
    }
}

/// The fields of a Python `PolicyConfig`, read by attribute (it is already validated by
/// pydantic; the core validates again).
fn read_config(cfg: &Bound<'_, PyAny>) -> PyResult<PolicyConfig> {
    let int = |name: &str| -> PyResult<i64> { cfg.getattr(name)?.extract() };
    let float = |name: &str| -> PyResult<f64> { cfg.getattr(name)?.extract() };
    Ok(PolicyConfig {
        window: int("window")?,
        max_tools: int("max_tools")?,
        min_tool_samples: int("min_tool_samples")?,
        min_total_samples: int("min_total_samples")?,
        prior_mean_s: float("prior_mean_s")?,
        max_ttl_s: float("max_ttl_s")?,
        eta_window_programs: int("eta_window_programs")?,
        eta_min_programs: int("eta_min_programs")?,
        ooo_window: int("ooo_window")?,
        prefill_window: int("prefill_window")?,
        min_prefill_samples: int("min_prefill_samples")?,
        prefill_base_s: float("prefill_base_s")?,
        prefill_s_per_token: float("prefill_s_per_token")?,
        prefill_s_per_token2: float("prefill_s_per_token2")?,
        kv_bytes_per_token: int("kv_bytes_per_token")?,
        offload_bandwidth_bytes_per_s: cfg.getattr("offload_bandwidth_bytes_per_s")?.extract()?,
        scale_cost_by_memory: cfg.getattr("scale_cost_by_memory")?.extract()?,
        prior_mean_from_history: cfg.getattr("prior_mean_from_history")?.extract()?,
        cold_start_eta: cfg.getattr("cold_start_eta")?.extract()?,
        clip_eta: cfg.getattr("clip_eta")?.extract()?,
        pin_handover: {
            let name: String = cfg.getattr("pin_handover")?.extract()?;
            PinHandover::parse(&name).ok_or_else(|| {
                PyValueError::new_err(format!(
                    "pin_handover must be 'arrival' or 'schedule', got {name:?}"
                ))
            })?
        },
    })
}

#[pymethods]
impl PyTTLPolicy {
    #[new]
    #[pyo3(signature = (config = None))]
    fn new(py: Python<'_>, config: Option<Bound<'_, PyAny>>) -> PyResult<Self> {
        let class = py.import("ttlpolicy.config")?.getattr("PolicyConfig")?;
        let config = match config {
            None => class.call0()?,
            Some(c) if c.is_instance(&class)? => c,
            Some(c) => {
                return Err(PyTypeError::new_err(format!(
                    "config must be a PolicyConfig, got {}",
                    c.get_type().name()?
                )))
            }
        };
        let inner = TTLPolicy::new(read_config(&config)?).map_err(core_err)?;
        Ok(PyTTLPolicy {
            inner,
            config: config.unbind(),
        })
    }

    #[getter]
    fn config(&self, py: Python<'_>) -> Py<PyAny> {
        self.config.clone_ref(py)
    }

    // -- observations -----------------------------------------------------------------------

    fn observe_tool(
        &mut self,
        tool: Option<&Bound<'_, PyAny>>,
        duration_s: Arg<f64>,
    ) -> PyResult<()> {
        let tool = tool_now(tool)?;
        call1("duration_s", duration_s, |d| {
            self.inner.observe_tool(tool.as_deref(), d)
        })
    }

    fn observe_program(&mut self, total_turns: Arg<i64>) -> PyResult<()> {
        call1("total_turns", total_turns, |n| {
            self.inner.observe_program(n)
        })
    }

    fn observe_queueing_delay(&mut self, delay_s: Arg<f64>) -> PyResult<()> {
        call1("delay_s", delay_s, |d| self.inner.observe_queueing_delay(d))
    }

    fn observe_prefill(&mut self, tokens: Arg<i64>, seconds: Arg<f64>) -> PyResult<()> {
        call2(("tokens", tokens), ("seconds", seconds), |n, s| {
            self.inner.observe_prefill(n, s)
        })
    }

    // -- read-only views --------------------------------------------------------------------

    #[getter]
    fn eta(&self) -> f64 {
        self.inner.eta()
    }

    #[getter]
    fn out_of_order_cost_s(&self) -> f64 {
        self.inner.out_of_order_cost_s()
    }

    fn tool_count(&self, tool: Option<&Bound<'_, PyAny>>) -> PyResult<usize> {
        Ok(self.inner.tool_count(tool_now(tool)?.as_deref()))
    }

    #[pyo3(signature = (prefix_tokens, offloaded_tokens = Arg::Ok(0)))]
    fn miss_cost_s(&self, prefix_tokens: Arg<i64>, offloaded_tokens: Arg<i64>) -> PyResult<f64> {
        call2(
            ("prefix_tokens", prefix_tokens),
            ("offloaded_tokens", offloaded_tokens),
            |p, o| self.inner.miss_cost_s(p, o),
        )
    }

    // -- the decision -----------------------------------------------------------------------

    /// How long to pin the `request_blocks` of a request that just called `tool`.
    #[pyo3(signature = (
        tool = None,
        request_blocks = Arg::Ok(0),
        mean_active_blocks = Arg::Ok(1.0),
        cache_miss_cost_s = None,
        prefix_tokens = Arg::Ok(0),
        now = Arg::Ok(0.0),
        offloaded_tokens = Arg::Ok(0),
    ))]
    #[allow(clippy::too_many_arguments)]
    fn decide(
        &self,
        tool: Option<&Bound<'_, PyAny>>,
        request_blocks: Arg<i64>,
        mean_active_blocks: Arg<f64>,
        cache_miss_cost_s: Option<Arg<f64>>,
        prefix_tokens: Arg<i64>,
        now: Arg<f64>,
        offloaded_tokens: Arg<i64>,
    ) -> PyResult<PyPinDecision> {
        let tool: Option<Cow<'_, str>> = tool_now(tool)?;
        let mut args = Args::new();
        let blocks = args.take("request_blocks", request_blocks);
        let mean_active = args.take("mean_active_blocks", mean_active_blocks);
        let miss = args.take_opt("cache_miss_cost_s", cache_miss_cost_s);
        let prefix = args.take("prefix_tokens", prefix_tokens);
        let now = args.take("now", now);
        let offloaded = args.take("offloaded_tokens", offloaded_tokens);
        let decision = self.inner.decide(
            tool.as_deref(),
            blocks,
            mean_active,
            miss,
            prefix,
            now,
            offloaded,
        );
        args.finish(decision).map(PyPinDecision::from)
    }
}
