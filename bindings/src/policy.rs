//! Native twins of the decision core's Python classes: same names, signatures, defaults,
//! results and exceptions as `ttlpolicy.reference.{solver,history,estimators,policy}`.
//! Conversions only; every rule lives in `ttlpolicy-core`.
//!
//! Re-entrancy and threads: every method converts its arguments (which may run Python code:
//! `__float__`, `__index__`) before it borrows the object, and holds the borrow only while
//! the core runs (pure Rust, the GIL held). So an argument that calls back into the same
//! object works as in the reference, and each call is atomic for other threads.

use std::borrow::Cow;

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::GILOnceCell;
use pyo3::types::{PyDict, PyString, PyTuple, PyType};
use pyo3::IntoPyObjectExt;
use ttlpolicy_core::config::{FieldMut, PinHandover, ServeOrder};
use ttlpolicy_core::estimators::{CacheMissModel, EtaEstimator, OutOfOrderCost};
use ttlpolicy_core::history::ToolHistory;
use ttlpolicy_core::policy::{DecideArgs, PinDecision, PolicyConfig, Source, TTLPolicy};
use ttlpolicy_core::solver;

use crate::convert::{
    call1, call2, call3, core_err, f64_list, short_repr, tool_later, tool_now, type_name, Arg, Args,
};
use crate::scheduler::{Flag, Tenant};
use crate::value::{self, Fields};

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyToolHistory>()?;
    m.add_class::<PyEtaEstimator>()?;
    m.add_class::<PyOutOfOrderCost>()?;
    m.add_class::<PyCacheMissModel>()?;
    m.add_class::<PyPinDecision>()?;
    m.add_class::<PyTTLPolicy>()?;
    m.add_function(wrap_pyfunction!(solve_ttl, m)?)?;
    m.add_function(wrap_pyfunction!(set_config_class, m)?)?;
    m.add("SOURCES", Source::ALL.map(Source::as_str))?;
    let (defaults, published) = (PolicyConfig::default(), PolicyConfig::published());
    m.add("POLICY_CONFIG_DEFAULTS", config_fields(m.py(), defaults)?)?;
    m.add("POLICY_CONFIG_PUBLISHED", config_fields(m.py(), published)?)?;
    Ok(())
}

/// `{field: value}` of a core config, in the field table's order, as the Python
/// `PolicyConfig.model_dump()` writes it (the parity test compares the two field by field).
fn config_fields(py: Python<'_>, mut cfg: PolicyConfig) -> PyResult<Bound<'_, PyDict>> {
    let out = PyDict::new(py);
    for (name, field) in cfg.fields_mut() {
        let value = match field {
            FieldMut::Int(x) => x.into_bound_py_any(py)?,
            FieldMut::Float(x) => x.into_bound_py_any(py)?,
            FieldMut::OptionalInt(x) => x.into_bound_py_any(py)?,
            FieldMut::OptionalFloat(x) => x.into_bound_py_any(py)?,
            FieldMut::Bool(x) => x.into_bound_py_any(py)?,
            FieldMut::Handover(x) => x.as_str().into_bound_py_any(py)?,
            FieldMut::Order(x) => x.as_str().into_bound_py_any(py)?,
        };
        out.set_item(name, value)?;
    }
    Ok(out)
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
    #[pyo3(signature = (
        window = Arg::Ok(ToolHistory::DEFAULT_WINDOW),
        max_tools = Arg::Ok(ToolHistory::DEFAULT_MAX_TOOLS),
    ))]
    #[pyo3(text_signature = "(window=1024, max_tools=1024)")]
    fn new(window: Arg<i64>, max_tools: Arg<i64>) -> PyResult<Self> {
        let inner = call2(
            ("window", window),
            ("max_tools", max_tools),
            ToolHistory::new,
        )?;
        Ok(PyToolHistory { inner })
    }

    /// Durations kept per tool and globally (the last ``window``).
    #[getter]
    fn window(&self) -> usize {
        self.inner.window()
    }

    /// The most tools tracked (tool names come from clients).
    #[getter]
    fn max_tools(&self) -> usize {
        self.inner.max_tools()
    }

    /// Record one duration of ``tenant``'s ``tool`` (None: unknown tool, global window
    /// only).
    #[pyo3(signature = (tool, duration_s, tenant = Tenant(None)))]
    #[pyo3(text_signature = "($self, /, tool, duration_s, tenant='')")]
    fn observe(
        slf: &Bound<'_, Self>,
        tool: Option<&Bound<'_, PyAny>>,
        duration_s: Arg<f64>,
        tenant: Tenant<'_>,
    ) -> PyResult<()> {
        let tenant = tenant.get()?;
        let tool = tool_now(tool)?;
        let mut this = slf.try_borrow_mut()?;
        call1("duration_s", duration_s, |d| {
            this.inner.observe(tenant, tool.as_deref(), d)
        })
    }

    /// Samples held for ``tenant``'s ``tool`` (None: the global window).
    #[pyo3(signature = (tool, tenant = Tenant(None)))]
    #[pyo3(text_signature = "($self, /, tool, tenant='')")]
    fn count(&self, tool: Option<&Bound<'_, PyAny>>, tenant: Tenant<'_>) -> PyResult<usize> {
        let tenant = tenant.get()?;
        Ok(self.inner.count(tenant, tool_now(tool)?.as_deref()))
    }

    /// Durations in the global window.
    fn total_count(&self) -> usize {
        self.inner.total_count()
    }

    /// Tools tracked now, of every tenant.
    fn num_tools(&self) -> usize {
        self.inner.num_tools()
    }

    /// ``tenant``'s tracked tools, least recently observed first.
    #[pyo3(signature = (tenant = Tenant(None)))]
    #[pyo3(text_signature = "($self, /, tenant='')")]
    fn tools(&self, tenant: Tenant<'_>) -> PyResult<Vec<String>> {
        let tenant = tenant.get()?;
        Ok(self
            .inner
            .tools(tenant)
            .into_iter()
            .map(str::to_owned)
            .collect())
    }

    /// Fraction of ``tenant``'s ``tool``'s samples ≤ t_s (0.0 with no samples).
    #[pyo3(signature = (tool, t_s, tenant = Tenant(None)))]
    #[pyo3(text_signature = "($self, /, tool, t_s, tenant='')")]
    fn cdf(
        slf: &Bound<'_, Self>,
        tool: Option<&Bound<'_, PyAny>>,
        t_s: Arg<f64>,
        tenant: Tenant<'_>,
    ) -> PyResult<f64> {
        // The reference checks the tenant, then t_s, then the tool.
        let tenant = tenant.get()?;
        let mut args = Args::new();
        let t = args.take("t_s", t_s);
        let tool = tool_later(&mut args, tool);
        let r = slf.try_borrow()?.inner.cdf(tenant, tool.as_deref(), t);
        args.finish(r)
    }

    /// Nearest-rank quantile of ``tenant``'s ``tool``'s samples; None with no samples.
    #[pyo3(signature = (tool, q, tenant = Tenant(None)))]
    #[pyo3(text_signature = "($self, /, tool, q, tenant='')")]
    fn quantile(
        slf: &Bound<'_, Self>,
        tool: Option<&Bound<'_, PyAny>>,
        q: Arg<f64>,
        tenant: Tenant<'_>,
    ) -> PyResult<Option<f64>> {
        let tenant = tenant.get()?;
        let mut args = Args::new();
        let q = args.take("q", q);
        let tool = tool_later(&mut args, tool);
        let r = slf.try_borrow()?.inner.quantile(tenant, tool.as_deref(), q);
        args.finish(r)
    }

    /// Mean duration (s) of ``tenant``'s ``tool`` (None: the global window); None when
    /// empty.
    #[pyo3(signature = (tool, tenant = Tenant(None)))]
    #[pyo3(text_signature = "($self, /, tool, tenant='')")]
    fn mean(&self, tool: Option<&Bound<'_, PyAny>>, tenant: Tenant<'_>) -> PyResult<Option<f64>> {
        let tenant = tenant.get()?;
        Ok(self.inner.mean(tenant, tool_now(tool)?.as_deref()))
    }

    /// The window's samples, sorted ascending.
    #[pyo3(signature = (tool, tenant = Tenant(None)))]
    #[pyo3(text_signature = "($self, /, tool, tenant='')")]
    fn samples(&self, tool: Option<&Bound<'_, PyAny>>, tenant: Tenant<'_>) -> PyResult<Vec<f64>> {
        let tenant = tenant.get()?;
        Ok(self
            .inner
            .samples(tenant, tool_now(tool)?.as_deref())
            .to_vec())
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
    #[pyo3(signature = (
        window = Arg::Ok(EtaEstimator::DEFAULT_WINDOW),
        min_programs = Arg::Ok(EtaEstimator::DEFAULT_MIN_PROGRAMS),
        clip = Flag(Ok(true)),
    ))]
    #[pyo3(text_signature = "(window=256, min_programs=8, clip=True)")]
    fn new(window: Arg<i64>, min_programs: Arg<i64>, clip: Flag) -> PyResult<Self> {
        let clip = clip.get("clip")?; // first, as the reference checks it
        let inner = call2(
            ("window", window),
            ("min_programs", min_programs),
            |w, m| EtaEstimator::with_clip(w, m, clip),
        )?;
        Ok(PyEtaEstimator { inner })
    }

    /// Records a finished program of ``total_turns`` turns.
    fn observe(slf: &Bound<'_, Self>, total_turns: Arg<i64>) -> PyResult<()> {
        let mut this = slf.try_borrow_mut()?;
        call1("total_turns", total_turns, |n| this.inner.observe(n))
    }

    /// η = −corr(k, N−k) over the window's programs; 1.0 until ``min_programs`` are seen.
    #[getter]
    fn eta(&self) -> f64 {
        self.inner.eta()
    }

    /// Programs in the window.
    fn count(&self) -> usize {
        self.inner.count()
    }

    /// Finished programs kept (the last ``window``).
    #[getter]
    fn window(&self) -> usize {
        self.inner.window()
    }

    /// Finished programs needed before η is estimated (η = 1 until then).
    #[getter]
    fn min_programs(&self) -> usize {
        self.inner.min_programs()
    }

    /// Whether η is clipped to [0, 1] (False: as it is, in [−1, 1]).
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
    #[pyo3(signature = (window = Arg::Ok(OutOfOrderCost::DEFAULT_WINDOW)))]
    #[pyo3(text_signature = "(window=256)")]
    fn new(window: Arg<i64>) -> PyResult<Self> {
        let inner = call1("window", window, OutOfOrderCost::new)?;
        Ok(PyOutOfOrderCost { inner })
    }

    /// Records one queueing delay of ``delay_s`` seconds.
    fn observe(slf: &Bound<'_, Self>, delay_s: Arg<f64>) -> PyResult<()> {
        let mut this = slf.try_borrow_mut()?;
        call1("delay_s", delay_s, |d| this.inner.observe(d))
    }

    /// T: the mean queueing delay in seconds over the window; 0.0 until a delay is observed.
    #[getter]
    fn mean_s(&self) -> f64 {
        self.inner.mean_s()
    }

    /// Delays in the window.
    fn count(&self) -> usize {
        self.inner.count()
    }

    /// Queueing delays kept (the last ``window``).
    #[getter]
    fn window(&self) -> usize {
        self.inner.window()
    }
}

/// `observe_prefill`'s arguments converted with their field names, then `observe` (the same
/// method on `CacheMissModel` and on `TTLPolicy`: pyo3 needs one per class).
fn observe_prefill_args(
    tokens: Arg<i64>,
    seconds: Arg<f64>,
    cached_tokens: Arg<i64>,
    observe: impl FnOnce(i64, f64, i64) -> ttlpolicy_core::Result<()>,
) -> PyResult<()> {
    call3(
        ("tokens", tokens),
        ("seconds", seconds),
        ("cached_tokens", cached_tokens),
        observe,
    )
}

/// Seconds to rebuild a dropped prefix: fitted prefill quadratic or offload reload.
#[pyclass(name = "CacheMissModel", module = "ttlpolicy._native")]
pub struct PyCacheMissModel {
    inner: CacheMissModel,
}

#[pymethods]
impl PyCacheMissModel {
    #[new]
    #[allow(clippy::too_many_arguments)] // the reference constructor's keyword arguments
    #[pyo3(signature = (
        prefill_base_s = Arg::Ok(CacheMissModel::DEFAULT_PREFILL_BASE_S),
        prefill_s_per_token = Arg::Ok(CacheMissModel::DEFAULT_PREFILL_S_PER_TOKEN),
        prefill_s_per_token2 = Arg::Ok(CacheMissModel::DEFAULT_PREFILL_S_PER_TOKEN2),
        kv_bytes_per_token = Arg::Ok(CacheMissModel::DEFAULT_KV_BYTES_PER_TOKEN),
        offload_bandwidth_bytes_per_s = None,
        window = Arg::Ok(CacheMissModel::DEFAULT_WINDOW),
        min_samples = Arg::Ok(CacheMissModel::DEFAULT_MIN_SAMPLES),
        prefill_chunk_tokens = None,
    ))]
    #[pyo3(text_signature = "(prefill_base_s=0.01, prefill_s_per_token=0.0001, \
        prefill_s_per_token2=0.0, kv_bytes_per_token=131072, \
        offload_bandwidth_bytes_per_s=None, window=256, min_samples=8, \
        prefill_chunk_tokens=None)")]
    fn new(
        prefill_base_s: Arg<f64>,
        prefill_s_per_token: Arg<f64>,
        prefill_s_per_token2: Arg<f64>,
        kv_bytes_per_token: Arg<i64>,
        offload_bandwidth_bytes_per_s: Option<Arg<f64>>,
        window: Arg<i64>,
        min_samples: Arg<i64>,
        prefill_chunk_tokens: Option<Arg<i64>>,
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
        let chunk = args.take_opt("prefill_chunk_tokens", prefill_chunk_tokens);
        let model = CacheMissModel::new(a, b, c, kv, bw, w, m)
            .and_then(|model| model.with_prefill_chunk_tokens(chunk));
        let inner = args.finish(model)?;
        Ok(PyCacheMissModel { inner })
    }

    /// A prefill chunk of ``tokens`` new tokens after ``cached_tokens`` already computed took
    /// ``seconds``.
    #[pyo3(signature = (tokens, seconds, cached_tokens = Arg::Ok(0)))]
    #[pyo3(text_signature = "($self, /, tokens, seconds, cached_tokens=0)")]
    fn observe_prefill(
        slf: &Bound<'_, Self>,
        tokens: Arg<i64>,
        seconds: Arg<f64>,
        cached_tokens: Arg<i64>,
    ) -> PyResult<()> {
        let mut this = slf.try_borrow_mut()?;
        observe_prefill_args(tokens, seconds, cached_tokens, |n, s, k| {
            this.inner.observe_prefill(n, s, k)
        })
    }

    /// Whether the prefill coefficients are fitted from measurements (else the configured
    /// defaults).
    #[getter]
    fn fitted(&self) -> bool {
        self.inner.fitted()
    }

    /// (a, b, c) of prefill_s = a + b·tokens + c·tokens², fitted or default.
    #[getter]
    fn coefficients(&self) -> (f64, f64, f64) {
        self.inner.coefficients()
    }

    /// The configured ``(prefill_base_s, prefill_s_per_token, prefill_s_per_token2)``, used until a
    /// fit.
    #[getter]
    fn default_coeffs(&self) -> (f64, f64, f64) {
        self.inner.default_coeffs()
    }

    /// KV-cache bytes of one token (for the offload reload time).
    #[getter]
    fn kv_bytes_per_token(&self) -> i64 {
        self.inner.kv_bytes_per_token()
    }

    /// The offload tier's reload bandwidth in bytes per second; None: no offload tier.
    #[getter]
    fn offload_bandwidth_bytes_per_s(&self) -> Option<f64> {
        self.inner.offload_bandwidth_bytes_per_s()
    }

    /// Measurements kept for the prefill fit (the last ``window``).
    #[getter]
    fn window(&self) -> usize {
        self.inner.window()
    }

    /// Measurements needed before the prefill fit is used.
    #[getter]
    fn min_samples(&self) -> usize {
        self.inner.min_samples()
    }

    /// The engine's prefill chunk (most prompt tokens per step); None: one step per prefix.
    #[getter]
    fn prefill_chunk_tokens(&self) -> Option<i64> {
        self.inner.prefill_chunk_tokens()
    }

    /// Predicted prefill seconds of ``tokens`` tokens (never negative).
    fn prefill_s(slf: &Bound<'_, Self>, tokens: Arg<i64>) -> PyResult<f64> {
        let this = slf.try_borrow()?;
        call1("tokens", tokens, |n| this.inner.prefill_s(n))
    }

    /// Seconds to load ``tokens`` of KV back from the offload tier; None without a tier.
    fn reload_s(slf: &Bound<'_, Self>, tokens: Arg<i64>) -> PyResult<Option<f64>> {
        let this = slf.try_borrow()?;
        call1("tokens", tokens, |n| this.inner.reload_s(n))
    }

    /// Cost of losing ``prefix_tokens`` of cache, of which ``offloaded_tokens`` are still held by
    /// the offload tier: recompute all, or reload those and recompute the rest.
    #[pyo3(signature = (prefix_tokens, offloaded_tokens = Arg::Ok(0)))]
    #[pyo3(text_signature = "($self, /, prefix_tokens, offloaded_tokens=0)")]
    fn miss_cost_s(
        slf: &Bound<'_, Self>,
        prefix_tokens: Arg<i64>,
        offloaded_tokens: Arg<i64>,
    ) -> PyResult<f64> {
        let this = slf.try_borrow()?;
        call2(
            ("prefix_tokens", prefix_tokens),
            ("offloaded_tokens", offloaded_tokens),
            |p, o| this.inner.miss_cost_s(p, o),
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

impl Fields for PyPinDecision {
    const NAMES: &'static [&'static str] =
        &["ttl_s", "benefit_s", "cost_per_s", "p_return", "source"];
    fn fields<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        let d = &self.inner;
        PyTuple::new(
            py,
            [
                d.ttl_s.into_bound_py_any(py)?,
                d.benefit_s.into_bound_py_any(py)?,
                d.cost_per_s.into_bound_py_any(py)?,
                d.p_return.into_bound_py_any(py)?,
                source_str(py, d.source).into_any(),
            ],
        )
    }
}

impl From<PinDecision> for PyPinDecision {
    fn from(inner: PinDecision) -> Self {
        PyPinDecision { inner }
    }
}

/// The source's name (the core's), interned: decisions share one str per source.
fn source_str(py: Python<'_>, s: Source) -> Bound<'_, PyString> {
    static NAMES: GILOnceCell<Vec<Py<PyString>>> = GILOnceCell::new();
    let names = NAMES.get_or_init(py, || {
        Source::ALL
            .iter()
            .map(|s| PyString::intern(py, s.as_str()).unbind())
            .collect()
    });
    let i = Source::ALL.iter().position(|&x| x == s).unwrap_or(0);
    names[i].bind(py).clone()
}

#[pymethods]
impl PyPinDecision {
    #[classattr]
    fn __match_args__(py: Python<'_>) -> PyResult<Py<PyTuple>> {
        value::match_args::<Self>(py)
    }
    /// Fields as the reference's dataclass, whose `__post_init__` checks them alike.
    #[new]
    fn new(
        ttl_s: Arg<f64>,
        benefit_s: Arg<f64>,
        cost_per_s: Arg<f64>,
        p_return: Arg<f64>,
        source: &Bound<'_, PyAny>,
    ) -> PyResult<Self> {
        let mut args = Args::new();
        let ttl_s = args.take("ttl_s", ttl_s);
        let benefit_s = args.take("benefit_s", benefit_s);
        let cost_per_s = args.take("cost_per_s", cost_per_s);
        let p_return = args.take("p_return", p_return);
        args.finish(Ok(()))?;
        let source = source
            .downcast::<PyString>()
            .ok()
            .and_then(|s| Source::parse(s.to_str().ok()?))
            .ok_or_else(|| {
                let names: Vec<&str> = Source::ALL.iter().map(|s| s.as_str()).collect();
                PyValueError::new_err(format!(
                    "source must be one of {}, got {}",
                    names.join(", "),
                    short_repr(source)
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

    /// How long to keep the blocks, in seconds (0: do not pin).
    #[getter]
    fn ttl_s(&self) -> f64 {
        self.inner.ttl_s
    }

    /// Seconds saved if the program returns to a kept cache (miss cost + η·T).
    #[getter]
    fn benefit_s(&self) -> f64 {
        self.inner.benefit_s
    }

    /// Cost of holding the blocks, per second (request_blocks / mean_active_blocks).
    #[getter]
    fn cost_per_s(&self) -> f64 {
        self.inner.cost_per_s
    }

    /// P(τ): the probability that the program returns within the pin.
    #[getter]
    fn p_return(&self) -> f64 {
        self.inner.p_return
    }

    /// Which rule produced the decision.
    #[getter]
    fn source<'py>(&self, py: Python<'py>) -> Bound<'py, PyString> {
        source_str(py, self.inner.source)
    }

    /// Whether to pin (``ttl_s > 0``).
    #[getter]
    fn pin(&self) -> bool {
        self.inner.pin()
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
        value::repr(self, py, "PinDecision")
    }
}

// -- TTLPolicy ------------------------------------------------------------------------------

/// Owns the tool history and the η, T and cache-miss estimators; decides pins.
#[pyclass(name = "TTLPolicy", module = "ttlpolicy._native")]
pub struct PyTTLPolicy {
    inner: TTLPolicy,
    config: Py<PyAny>,
}

/// The `policy` argument of a class built over a `TTLPolicy` (the scheduler, load control,
/// the router): the very object, or the reference's `TypeError`.
pub fn policy_arg<'py>(policy: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyTTLPolicy>> {
    policy.downcast::<PyTTLPolicy>().cloned().map_err(|_| {
        PyTypeError::new_err(format!(
            "policy must be a TTLPolicy, got {}",
            type_name(policy)
        ))
    })
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

/// The Python `PolicyConfig` class, handed over by the package when it loads this module
/// (`ttlpolicy/_backend.py`): this module imports nothing from the package.
static CONFIG_CLASS: GILOnceCell<Py<PyType>> = GILOnceCell::new();

/// Called once by the package: the class `TTLPolicy` checks its `config` against and builds
/// its default config from.
#[pyfunction]
fn set_config_class(py: Python<'_>, cls: Bound<'_, PyType>) -> PyResult<()> {
    let registered = CONFIG_CLASS.get_or_init(py, || cls.clone().unbind());
    if registered.bind(py).is(&cls) {
        Ok(())
    } else {
        Err(PyValueError::new_err(
            "set_config_class: a config class is already set",
        ))
    }
}

fn config_class(py: Python<'_>) -> PyResult<&Bound<'_, PyType>> {
    CONFIG_CLASS
        .get(py)
        .map(|c| c.bind(py))
        .ok_or_else(|| PyTypeError::new_err("TTLPolicy: import ttlpolicy first (no config class)"))
}

/// The fields of a Python `PolicyConfig`, read by attribute through the core's field table
/// and converted like any argument (pydantic validated them; the core validates again).
fn read_config(cfg: &Bound<'_, PyAny>) -> PyResult<PolicyConfig> {
    let mut out = PolicyConfig::default();
    let mut args = Args::new();
    for (name, field) in out.fields_mut() {
        let value = cfg.getattr(name)?;
        match field {
            FieldMut::Int(x) => *x = args.take(name, value.extract()?),
            FieldMut::Float(x) => *x = args.take(name, value.extract()?),
            FieldMut::OptionalFloat(x) => {
                *x = args.take_opt(name, value.extract::<Option<Arg<f64>>>()?)
            }
            FieldMut::OptionalInt(x) => {
                *x = args.take_opt(name, value.extract::<Option<Arg<i64>>>()?)
            }
            FieldMut::Bool(x) => *x = value.extract()?,
            FieldMut::Handover(x) => {
                let text: String = value.extract()?;
                *x = PinHandover::parse(&text).ok_or_else(|| {
                    PyValueError::new_err(format!(
                        "{name} must be 'arrival' or 'schedule', got {text:?}"
                    ))
                })?
            }
            FieldMut::Order(x) => {
                let text: String = value.extract()?;
                *x = ServeOrder::parse(&text).ok_or_else(|| {
                    PyValueError::new_err(format!(
                        "{name} must be 'program' or 'attained', got {text:?}"
                    ))
                })?
            }
        }
    }
    args.finish(out.validate())?;
    Ok(out)
}

#[pymethods]
impl PyTTLPolicy {
    #[new]
    #[pyo3(signature = (config = None))]
    fn new(py: Python<'_>, config: Option<Bound<'_, PyAny>>) -> PyResult<Self> {
        let class = config_class(py)?;
        let config = match config {
            None => class.call0()?,
            Some(c) if c.is_instance(class)? => c,
            Some(c) => {
                return Err(PyTypeError::new_err(format!(
                    "config must be a PolicyConfig, got {}",
                    type_name(&c)
                )))
            }
        };
        let inner = TTLPolicy::new(read_config(&config)?).map_err(core_err)?;
        Ok(PyTTLPolicy {
            inner,
            config: config.unbind(),
        })
    }

    /// Its ``PolicyConfig``.
    #[getter]
    fn config(&self, py: Python<'_>) -> Py<PyAny> {
        self.config.clone_ref(py)
    }

    // -- observations -----------------------------------------------------------------------

    /// Records ``tenant``'s tool call of ``duration_s`` seconds (None: unknown tool;
    /// ``tenant`` "": the shared namespace, ``ToolHistory``).
    #[pyo3(signature = (tool, duration_s, tenant = Tenant(None)))]
    #[pyo3(text_signature = "($self, /, tool, duration_s, tenant='')")]
    fn observe_tool(
        slf: &Bound<'_, Self>,
        tool: Option<&Bound<'_, PyAny>>,
        duration_s: Arg<f64>,
        tenant: Tenant<'_>,
    ) -> PyResult<()> {
        let tenant = tenant.get()?;
        let tool = tool_now(tool)?;
        let mut this = slf.try_borrow_mut()?;
        call1("duration_s", duration_s, |d| {
            this.inner.observe_tool(tenant, tool.as_deref(), d)
        })
    }

    /// Records a finished program of ``total_turns`` turns (for η).
    fn observe_program(slf: &Bound<'_, Self>, total_turns: Arg<i64>) -> PyResult<()> {
        let mut this = slf.try_borrow_mut()?;
        call1("total_turns", total_turns, |n| {
            this.inner.observe_program(n)
        })
    }

    /// Records a queueing delay (s) of a request that returned to a dropped cache (for T).
    fn observe_queueing_delay(slf: &Bound<'_, Self>, delay_s: Arg<f64>) -> PyResult<()> {
        let mut this = slf.try_borrow_mut()?;
        call1("delay_s", delay_s, |d| this.inner.observe_queueing_delay(d))
    }

    /// Records a measured prefill (for the cache-miss model): ``tokens`` new tokens after
    /// ``cached_tokens`` already computed took ``seconds``.
    #[pyo3(signature = (tokens, seconds, cached_tokens = Arg::Ok(0)))]
    #[pyo3(text_signature = "($self, /, tokens, seconds, cached_tokens=0)")]
    fn observe_prefill(
        slf: &Bound<'_, Self>,
        tokens: Arg<i64>,
        seconds: Arg<f64>,
        cached_tokens: Arg<i64>,
    ) -> PyResult<()> {
        let mut this = slf.try_borrow_mut()?;
        observe_prefill_args(tokens, seconds, cached_tokens, |n, s, k| {
            this.inner.observe_prefill(n, s, k)
        })
    }

    // -- read-only views --------------------------------------------------------------------

    /// η from the finished programs' turns (see ``EtaEstimator``).
    #[getter]
    fn eta(&self) -> f64 {
        self.inner.eta()
    }

    /// T: the mean queueing delay in seconds of requests that returned to a dropped cache.
    #[getter]
    fn out_of_order_cost_s(&self) -> f64 {
        self.inner.out_of_order_cost_s()
    }

    /// Durations recorded for ``tenant``'s ``tool`` (None: all tools).
    #[pyo3(signature = (tool, tenant = Tenant(None)))]
    #[pyo3(text_signature = "($self, /, tool, tenant='')")]
    fn tool_count(&self, tool: Option<&Bound<'_, PyAny>>, tenant: Tenant<'_>) -> PyResult<usize> {
        let tenant = tenant.get()?;
        Ok(self.inner.tool_count(tenant, tool_now(tool)?.as_deref()))
    }

    /// Seconds to rebuild ``prefix_tokens`` tokens, ``offloaded_tokens`` of them reloadable.
    #[pyo3(signature = (prefix_tokens, offloaded_tokens = Arg::Ok(0)))]
    #[pyo3(text_signature = "($self, /, prefix_tokens, offloaded_tokens=0)")]
    fn miss_cost_s(
        slf: &Bound<'_, Self>,
        prefix_tokens: Arg<i64>,
        offloaded_tokens: Arg<i64>,
    ) -> PyResult<f64> {
        let this = slf.try_borrow()?;
        call2(
            ("prefix_tokens", prefix_tokens),
            ("offloaded_tokens", offloaded_tokens),
            |p, o| this.inner.miss_cost_s(p, o),
        )
    }

    // -- the decision -----------------------------------------------------------------------

    /// How long to pin the ``request_blocks`` of a request that just called ``tool``.
    #[pyo3(signature = (
        tool = None,
        request_blocks = Arg::Ok(0),
        mean_active_blocks = Arg::Ok(TTLPolicy::DEFAULT_MEAN_ACTIVE_BLOCKS),
        cache_miss_cost_s = None,
        prefix_tokens = Arg::Ok(0),
        now = Arg::Ok(0.0),
        offloaded_tokens = Arg::Ok(0),
        tenant = Tenant(None),
    ))]
    // The defaults as `inspect.signature` shows them (pyo3 shows an `Arg` default as `...`);
    // tests/core/test_public_surface.py holds them to the reference's.
    #[pyo3(
        text_signature = "($self, /, tool=None, request_blocks=0, mean_active_blocks=1.0, \
        cache_miss_cost_s=None, prefix_tokens=0, now=0.0, offloaded_tokens=0, tenant='')"
    )]
    #[allow(clippy::too_many_arguments)]
    fn decide(
        slf: &Bound<'_, Self>,
        tool: Option<&Bound<'_, PyAny>>,
        request_blocks: Arg<i64>,
        mean_active_blocks: Arg<f64>,
        cache_miss_cost_s: Option<Arg<f64>>,
        prefix_tokens: Arg<i64>,
        now: Arg<f64>,
        offloaded_tokens: Arg<i64>,
        tenant: Tenant<'_>,
    ) -> PyResult<PyPinDecision> {
        let tenant = tenant.get()?;
        let tool: Option<Cow<'_, str>> = tool_now(tool)?;
        let mut args = Args::new();
        let blocks = args.take("request_blocks", request_blocks);
        let mean_active = args.take("mean_active_blocks", mean_active_blocks);
        let miss = args.take_opt("cache_miss_cost_s", cache_miss_cost_s);
        let prefix = args.take("prefix_tokens", prefix_tokens);
        let now = args.take("now", now);
        let offloaded = args.take("offloaded_tokens", offloaded_tokens);
        let decision = slf.try_borrow()?.inner.decide(&DecideArgs {
            tool: tool.as_deref(),
            request_blocks: blocks,
            mean_active_blocks: mean_active,
            cache_miss_cost_s: miss,
            prefix_tokens: prefix,
            now,
            offloaded_tokens: offloaded,
            tenant,
        });
        args.finish(decision).map(PyPinDecision::from)
    }
}
