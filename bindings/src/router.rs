//! Native `ProgramRouter`: the same names, signatures, results and exceptions as
//! `ttlpolicy.reference.router`. Conversions only; every rule lives in
//! `ttlpolicy_core::router`. It keeps the very `TTLPolicy` it was given and reads it, borrowed,
//! at each `route`.

use pyo3::prelude::*;
use ttlpolicy_core::router::{ProgramRouter, Report, DEFAULT_MAX_INSTANCES, DEFAULT_MAX_PROGRAMS};

use crate::convert::{core_err, Arg, Args};
use crate::policy::{policy_arg, PyTTLPolicy};
use crate::scheduler::id_str;

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyProgramRouter>()
}

/// Routes programs' calls over engine instances, over a `TTLPolicy` (used, never copied).
#[pyclass(name = "ProgramRouter", module = "ttlpolicy._native")]
pub struct PyProgramRouter {
    inner: ProgramRouter,
    policy: Py<PyTTLPolicy>,
}

#[pymethods]
impl PyProgramRouter {
    #[new]
    #[pyo3(signature = (
        policy, max_instances = Arg::Ok(DEFAULT_MAX_INSTANCES),
        max_programs = Arg::Ok(DEFAULT_MAX_PROGRAMS),
    ))]
    #[pyo3(text_signature = "(policy, max_instances=1024, max_programs=1048576)")]
    fn new(
        policy: &Bound<'_, PyAny>,
        max_instances: Arg<i64>,
        max_programs: Arg<i64>,
    ) -> PyResult<Self> {
        let policy = policy_arg(policy)?;
        let mut args = Args::new();
        let instances = args.take("max_instances", max_instances);
        let programs = args.take("max_programs", max_programs);
        let inner = args.finish(ProgramRouter::new(instances, programs))?;
        Ok(PyProgramRouter {
            inner,
            policy: policy.unbind(),
        })
    }

    /// The ``TTLPolicy`` it prices pins and rebuilt contexts with.
    #[getter]
    fn policy(&self, py: Python<'_>) -> Py<PyTTLPolicy> {
        self.policy.clone_ref(py)
    }

    // -- instances --------------------------------------------------------------------------

    /// Registers an instance (or one drained before, again); it is routed to once it reports.
    fn add_instance(&mut self, instance_id: &Bound<'_, PyAny>) -> PyResult<()> {
        let iid = id_str("instance_id", instance_id)?;
        self.inner.add_instance(iid).map_err(core_err)
    }

    /// An instance's state: free and total KV blocks, calls waiting and their uncached prompt
    /// tokens, load control's working set (blocks), the fraction of returning calls' prefixes it
    /// found cached; optionally the part of the queue a returning call of a program it serves waits
    /// behind, calls and their uncached prompt tokens (given together; default: the whole queue).
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (
        instance_id, free_blocks, total_blocks, queue_len, queued_tokens, working_set_blocks,
        cached_fraction, return_queue_len = None, return_queued_tokens = None,
    ))]
    fn report(
        slf: &Bound<'_, Self>,
        instance_id: &Bound<'_, PyAny>,
        free_blocks: Arg<i64>,
        total_blocks: Arg<i64>,
        queue_len: Arg<i64>,
        queued_tokens: Arg<i64>,
        working_set_blocks: Arg<i64>,
        cached_fraction: Arg<f64>,
        return_queue_len: Option<Arg<i64>>,
        return_queued_tokens: Option<Arg<i64>>,
    ) -> PyResult<bool> {
        let iid = id_str("instance_id", instance_id)?;
        let mut args = Args::new();
        let report = Report {
            free_blocks: args.take("free_blocks", free_blocks),
            total_blocks: args.take("total_blocks", total_blocks),
            queue_len: args.take("queue_len", queue_len),
            queued_tokens: args.take("queued_tokens", queued_tokens),
            working_set_blocks: args.take("working_set_blocks", working_set_blocks),
            cached_fraction: args.take("cached_fraction", cached_fraction),
            return_queue_len: args.take_opt("return_queue_len", return_queue_len),
            return_queued_tokens: args.take_opt("return_queued_tokens", return_queued_tokens),
        };
        // (arguments converted before the borrow: a number whose `__index__` reads this
        // router works, as on the reference)
        let result = slf.try_borrow_mut()?.inner.report(iid, &report);
        args.finish(result)
    }

    /// The instance pinned the program's context (``blocks``) until ``deadline_s``: it is the
    /// program's home now.
    #[pyo3(signature = (instance_id, program_id, deadline_s, blocks, now = None))]
    fn pinned(
        slf: &Bound<'_, Self>,
        instance_id: &Bound<'_, PyAny>,
        program_id: &Bound<'_, PyAny>,
        deadline_s: Arg<f64>,
        blocks: Arg<i64>,
        now: Option<Arg<f64>>,
    ) -> PyResult<bool> {
        let iid = id_str("instance_id", instance_id)?;
        let pid = id_str("program_id", program_id)?;
        let mut args = Args::new();
        let deadline = args.take("deadline_s", deadline_s);
        let n = args.take("blocks", blocks);
        let t = args.take_opt("now", now);
        let result = slf.try_borrow_mut()?.inner.pinned(iid, pid, deadline, n, t);
        args.finish(result)
    }

    /// Forgets the instance (dead, gone for good): as ``drain``, and its slot is free.
    fn remove_instance(&mut self, instance_id: &Bound<'_, PyAny>) -> PyResult<Vec<String>> {
        let iid = id_str("instance_id", instance_id)?;
        self.inner.remove_instance(iid).map_err(core_err)
    }

    /// The instance is dead or draining: no call goes there any more.
    fn drain(&mut self, instance_id: &Bound<'_, PyAny>) -> PyResult<Vec<String>> {
        let iid = id_str("instance_id", instance_id)?;
        self.inner.drain(iid).map_err(core_err)
    }

    /// The instance evicted the program's context but ``held_blocks`` of it: if it is the program's
    /// home and holds at most half of its last call's blocks, the program is forgotten (it routes
    /// as new).
    #[pyo3(signature = (instance_id, program_id, held_blocks = Arg::Ok(0)))]
    #[pyo3(text_signature = "($self, /, instance_id, program_id, held_blocks=0)")]
    fn evicted(
        slf: &Bound<'_, Self>,
        instance_id: &Bound<'_, PyAny>,
        program_id: &Bound<'_, PyAny>,
        held_blocks: Arg<i64>,
    ) -> PyResult<bool> {
        let iid = id_str("instance_id", instance_id)?;
        let pid = id_str("program_id", program_id)?;
        let mut args = Args::new();
        let held = args.take("held_blocks", held_blocks);
        let result = slf.try_borrow_mut()?.inner.evicted(iid, pid, held);
        args.finish(result)
    }

    /// The program is done: forgotten.
    fn end_program(&mut self, program_id: &Bound<'_, PyAny>) -> PyResult<bool> {
        let pid = id_str("program_id", program_id)?;
        self.inner.end_program(pid).map_err(core_err)
    }

    // -- the decision -----------------------------------------------------------------------

    /// The instance for the program's call needing ``blocks_needed`` KV blocks, whose context to
    /// rebuild elsewhere is ``prefix_tokens`` long (see the module doc).
    fn route(
        slf: &Bound<'_, Self>,
        py: Python<'_>,
        program_id: &Bound<'_, PyAny>,
        now: Arg<f64>,
        blocks_needed: Arg<i64>,
        prefix_tokens: Arg<i64>,
    ) -> PyResult<String> {
        let pid = id_str("program_id", program_id)?;
        let mut args = Args::new();
        let t = args.take("now", now);
        let blocks = args.take("blocks_needed", blocks_needed);
        let prefix = args.take("prefix_tokens", prefix_tokens);
        let mut this = slf.try_borrow_mut()?;
        let this = &mut *this;
        let policy = this.policy.bind(py).try_borrow()?;
        let chosen = this
            .inner
            .route(policy.core(), pid, t, blocks, prefix)
            .map(str::to_owned);
        args.finish(chosen)
    }

    // -- views ------------------------------------------------------------------------------

    /// The instance that served the program's last call (None: unknown program).
    fn home(&self, program_id: &Bound<'_, PyAny>) -> PyResult<Option<String>> {
        let pid = id_str("program_id", program_id)?;
        let home = self.inner.home(pid).map_err(core_err)?;
        Ok(home.map(str::to_owned))
    }

    /// Is the instance routed to: registered, reported since, not drained.
    fn routable(&self, instance_id: &Bound<'_, PyAny>) -> PyResult<bool> {
        let iid = id_str("instance_id", instance_id)?;
        self.inner.routable(iid).map_err(core_err)
    }

    /// Registered instances, drained ones included, in registration order.
    #[getter]
    fn instance_ids(&self) -> Vec<String> {
        let ids = self.inner.instance_ids();
        ids.iter().map(|id| id.to_string()).collect()
    }

    /// Programs tracked.
    #[getter]
    fn program_count(&self) -> usize {
        self.inner.program_count()
    }

    /// The most instances registered at once.
    #[getter]
    fn max_instances(&self) -> i64 {
        self.inner.max_instances()
    }

    /// The most programs tracked (shared fairly among tenants: the module doc).
    #[getter]
    fn max_programs(&self) -> i64 {
        self.inner.max_programs()
    }
}
