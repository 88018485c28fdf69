//! Native `AdmissionControl`: the same names, signatures, results and exceptions as
//! `ttlpolicy.reference.admission`. Conversions only; every rule lives in
//! `ttlpolicy_core::admission`. It keeps the very `TTLPolicy` object it was given and reads
//! its tool-gap statistics through `borrow`.

use pyo3::prelude::*;
use pyo3::types::PyList;
use ttlpolicy_core::admission::AdmissionControl;
use ttlpolicy_core::scheduler::DEFAULT_MAX_IDLE_PROGRAMS;
use ttlpolicy_core::tenants::TenantWeights;

use crate::convert::{call1, call2, tool_now, Arg, Args};
use crate::policy::{policy_arg, PyTTLPolicy};
use crate::scheduler::{id_str, items, Flag};
use crate::tenants::tenant_weights_arg;

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyAdmissionControl>()
}

/// Working-set admission and next-use eviction order over a `TTLPolicy` (read, not copied).
#[pyclass(name = "AdmissionControl", module = "ttlpolicy._native")]
pub struct PyAdmissionControl {
    pub(crate) inner: AdmissionControl,
    pub(crate) policy: Py<PyTTLPolicy>,
}

#[pymethods]
impl PyAdmissionControl {
    #[new]
    #[pyo3(signature = (
        policy, total_blocks, max_idle_programs = Arg::Ok(DEFAULT_MAX_IDLE_PROGRAMS),
        tenant_weights = None,
    ))]
    #[pyo3(text_signature = "(policy, total_blocks, max_idle_programs=65536, \
        tenant_weights=None)")]
    fn new(
        policy: &Bound<'_, PyAny>,
        total_blocks: Arg<i64>,
        max_idle_programs: Arg<i64>,
        tenant_weights: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let policy = policy_arg(policy)?;
        let mut args = Args::new();
        let total = args.take("total_blocks", total_blocks);
        let max_idle = args.take("max_idle_programs", max_idle_programs);
        let weights = tenant_weights_arg(&mut args, tenant_weights)?;
        let inner = args.finish(
            AdmissionControl::with_max_idle_programs(total, max_idle)
                .and_then(|a| Ok(a.with_tenant_weights(TenantWeights::new(&weights)?))),
        )?;
        Ok(PyAdmissionControl {
            inner,
            policy: policy.unbind(),
        })
    }

    /// The ``TTLPolicy`` whose tool-gap statistics it reads (the very object given).
    #[getter]
    fn policy(&self, py: Python<'_>) -> Py<PyTTLPolicy> {
        self.policy.clone_ref(py)
    }

    /// The engine's KV blocks, the working set's capacity.
    #[getter]
    fn total_blocks(&self) -> i64 {
        self.inner.total_blocks()
    }

    /// The most idle programs remembered (the longest idle is forgotten beyond).
    #[getter]
    fn max_idle_programs(&self) -> usize {
        self.inner.max_idle_programs()
    }

    /// Idle programs forgotten so far to keep at most ``max_idle_programs``.
    #[getter]
    fn dropped_idle_programs(&self) -> u64 {
        self.inner.dropped_idle_programs()
    }

    /// A request of the program arrives (its first one makes the program known).
    fn arrive(
        slf: &Bound<'_, Self>,
        program_id: &Bound<'_, PyAny>,
        now: Arg<f64>,
        blocks_needed: Arg<i64>,
    ) -> PyResult<()> {
        let pid = id_str("program_id", program_id)?;
        let mut args = Args::new();
        let t = args.take("now", now);
        let b = args.take("blocks_needed", blocks_needed);
        let this = &mut *slf.try_borrow_mut()?; // (arguments converted first: they may call back)
        let r = this.inner.arrive(pid, t, b);
        args.finish(r)
    }

    /// A request of the program ended holding ``blocks_held`` blocks, with a call to ``tool``
    /// (None: no tool); ``rebuild_s`` is what losing its context would cost.
    #[pyo3(signature = (program_id, now, blocks_held, tool = None, rebuild_s = Arg::Ok(0.0), last_turn = Flag(Ok(false))))]
    #[pyo3(
        text_signature = "($self, /, program_id, now, blocks_held, tool=None, \
        rebuild_s=0.0, last_turn=False)"
    )]
    fn finish(
        slf: &Bound<'_, Self>,
        program_id: &Bound<'_, PyAny>,
        now: Arg<f64>,
        blocks_held: Arg<i64>,
        tool: Option<&Bound<'_, PyAny>>,
        rebuild_s: Arg<f64>,
        last_turn: Flag,
    ) -> PyResult<()> {
        let tool = tool_now(tool)?;
        let last = last_turn.get("last_turn")?;
        let pid = id_str("program_id", program_id)?;
        let mut args = Args::new();
        let t = args.take("now", now);
        let b = args.take("blocks_held", blocks_held);
        let rb = args.take("rebuild_s", rebuild_s);
        let this = &mut *slf.try_borrow_mut()?; // (arguments converted first: they may call back)
        let r = this.inner.finish(pid, t, b, tool.as_deref(), rb, last);
        args.finish(r)
    }

    /// The program ended (or was aborted): forget it.
    fn end(slf: &Bound<'_, Self>, program_id: &Bound<'_, PyAny>) -> PyResult<()> {
        let pid = id_str("program_id", program_id)?;
        let this = &mut *slf.try_borrow_mut()?; // (arguments converted first: they may call back)
        Args::new().finish(this.inner.end(pid))
    }

    /// Expected seconds until the program uses its context again (see the module doc); ``inf`` for
    /// an unknown program.
    fn next_use_s(
        slf: &Bound<'_, Self>,
        py: Python<'_>,
        program_id: &Bound<'_, PyAny>,
        now: Arg<f64>,
    ) -> PyResult<f64> {
        let pid = id_str("program_id", program_id)?;
        let this = &mut *slf.try_borrow_mut()?; // (arguments converted first: they may call back)
        let policy = this.policy.try_borrow(py)?;
        call1("now", now, |t| this.inner.next_use_s(policy.core(), pid, t))
    }

    /// The working set at ``now`` (see the module doc).
    fn working_set_blocks(slf: &Bound<'_, Self>, py: Python<'_>, now: Arg<f64>) -> PyResult<i64> {
        let this = &*slf.try_borrow()?; // (arguments converted first: they may call back)
        let policy = this.policy.try_borrow(py)?;
        call1("now", now, |t| {
            this.inner.working_set_blocks(policy.core(), t)
        })
    }

    /// The first instant after ``now`` at which the working set may shrink with no event
    /// (``arrive``, ``finish``, ``end``, a recorded tool duration) in between: an admitted program
    /// away on a tool leaves it (see ``_leave_s``); ``inf`` if none will.
    fn next_shrink_s(slf: &Bound<'_, Self>, py: Python<'_>, now: Arg<f64>) -> PyResult<f64> {
        let this = &*slf.try_borrow()?; // (arguments converted first: they may call back)
        let policy = this.policy.try_borrow(py)?;
        call1("now", now, |t| this.inner.next_shrink_s(policy.core(), t))
    }

    /// May a request of the program be scheduled now? True for an admitted program; for the oldest
    /// program not yet admitted, admits it (and says True) when the rule allows; False otherwise.
    fn may_run(
        slf: &Bound<'_, Self>,
        py: Python<'_>,
        program_id: &Bound<'_, PyAny>,
        now: Arg<f64>,
    ) -> PyResult<bool> {
        let pid = id_str("program_id", program_id)?;
        let this = &mut *slf.try_borrow_mut()?; // (arguments converted first: they may call back)
        let policy = this.policy.try_borrow(py)?;
        call1("now", now, |t| this.inner.may_run(policy.core(), pid, t))
    }

    /// Admit the program now, whatever the working set: for requests load control must not hold
    /// back (an engine's anonymous one-request programs, served as stock).
    fn admit(slf: &Bound<'_, Self>, program_id: &Bound<'_, PyAny>, now: Arg<f64>) -> PyResult<()> {
        let pid = id_str("program_id", program_id)?;
        let this = &mut *slf.try_borrow_mut()?; // (arguments converted first: they may call back)
        call1("now", now, |t| this.inner.admit(pid, t))
    }

    /// ``program_ids`` (programs whose cached contexts may be evicted) sorted so that the first
    /// should go first: latest next use first, then latest-arrived program first; unknown
    /// programs first of all, in the order given.
    ///
    /// The order as the very `str` objects given (the reference returns them too): no copy
    /// of an id is made on either side, and a caller's dict lookups keep their cached hashes.
    fn eviction_order<'py>(
        slf: &Bound<'_, Self>,
        py: Python<'py>,
        program_ids: &Bound<'py, PyAny>,
        now: Arg<f64>,
    ) -> PyResult<Bound<'py, PyList>> {
        let items = items("program_ids", "str", program_ids)?;
        let ids = program_ids_of(&items)?;
        let this = &mut *slf.try_borrow_mut()?; // (arguments converted first: they may call back)
        let policy = this.policy.try_borrow(py)?;
        let ranks = call1("now", now, |t| {
            this.inner.eviction_ranks(policy.core(), &ids, t)
        })?;
        PyList::new(py, ranks.into_iter().map(|i| &items[i]))
    }

    /// The first instant in ``(now, until_s]`` at which ``eviction_order(program_ids, ·)`` differs
    /// from its answer at ``now`` with no event in between; ``inf`` if none (it looks no further
    /// than ``until_s``).
    fn next_order_change_s(
        slf: &Bound<'_, Self>,
        py: Python<'_>,
        program_ids: &Bound<'_, PyAny>,
        now: Arg<f64>,
        until_s: Arg<f64>,
    ) -> PyResult<f64> {
        let items = items("program_ids", "str", program_ids)?;
        let ids = program_ids_of(&items)?;
        let this = &*slf.try_borrow()?; // (arguments converted first: they may call back)
        let policy = this.policy.try_borrow(py)?;
        call2(("now", now), ("until_s", until_s), |t, until| {
            this.inner
                .next_order_change_s(policy.core(), &ids, t, until)
        })
    }

    /// Whether the program is tracked (arrived, not ended, not forgotten while idle).
    fn knows(slf: &Bound<'_, Self>, program_id: &Bound<'_, PyAny>) -> PyResult<bool> {
        let pid = id_str("program_id", program_id)?;
        let this = &*slf.try_borrow()?; // (arguments converted first: they may call back)
        Args::new().finish(this.inner.knows(pid))
    }

    /// Whether the program is admitted (False for an unknown program).
    fn admitted(slf: &Bound<'_, Self>, program_id: &Bound<'_, PyAny>) -> PyResult<bool> {
        let pid = id_str("program_id", program_id)?;
        let this = &*slf.try_borrow()?; // (arguments converted first: they may call back)
        Args::new().finish(this.inner.admitted(pid))
    }

    /// Programs admitted (in the working set).
    #[getter]
    fn admitted_count(&self) -> usize {
        self.inner.admitted_count()
    }

    /// Programs known (arrived, not ended, not forgotten while idle).
    #[getter]
    fn program_count(&self) -> usize {
        self.inner.program_count()
    }

    /// Programs known and not yet admitted.
    #[getter]
    fn waiting_count(&self) -> usize {
        self.inner.waiting_count()
    }
}

/// The ids of `program_ids`' items, each checked as an id.
fn program_ids_of<'a>(items: &'a [Bound<'_, PyAny>]) -> PyResult<Vec<&'a str>> {
    items
        .iter()
        .map(|item| id_str("program_ids", item))
        .collect()
}
