//! `PrefixTree` and `GroupStats` for Python: argument conversions only, every rule lives in
//! `ttlpolicy_core::prefix_tree`. Hashes come as any sequence of ints (list, tuple, numpy
//! integer array); a wrong type raises `TypeError`, an int outside 64 bits `ValueError`, as in
//! the reference.

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyMapping, PyString, PyTuple, PyType};

use ttlpolicy_core::prefix_tree as core;

use crate::convert::{
    count_field, float_field, int_field, is_iterable, short_repr, to_i64, type_name, Arg, Args,
    Fault,
};
use crate::scheduler::each_item;
use crate::value::{self, Fields};

/// One hash, as the reference's `check_hashes`: `TypeError` for a non-integer, `ValueError`
/// outside 64 bits, an error raised by the object's own `__index__` passed through.
fn hash_i64(field: &str, v: &Bound<'_, PyAny>) -> PyResult<i64> {
    match to_i64(v) {
        Ok(n) => Ok(n),
        Err(Ok(Fault::IntOutOfRange { got })) => Err(PyValueError::new_err(format!(
            "{field} must fit in a signed 64-bit integer, got {got}"
        ))),
        Err(Ok(fault)) => Err(fault.to_err(field)),
        Err(Err(e)) => Err(e),
    }
}

/// Buffer formats that hold i64 in this machine's byte order (numpy `int64`, `array('q')`).
/// Any other (a big-endian array `>i8`, `uint64`, ...) is read element by element through
/// `__index__`, so its values are converted, never its bytes misread.
fn native_i64_format(format: &[u8]) -> bool {
    let (order, code) = match format {
        [code] => (b'@', *code),
        [order, code] => (*order, *code),
        _ => return false,
    };
    let native_order = match order {
        b'@' | b'=' => true,
        b'<' => cfg!(target_endian = "little"),
        b'>' | b'!' => cfg!(target_endian = "big"),
        _ => false,
    };
    // 'l' is 8 bytes only in native mode ('@'): PyBuffer<i64> checks the item size too.
    native_order && (code == b'q' || (code == b'l' && order == b'@'))
}

/// A sequence of block hashes.
fn hashes(field: &str, obj: &Bound<'_, PyAny>) -> PyResult<Vec<i64>> {
    if obj.is_instance_of::<PyString>() || obj.is_instance_of::<PyBytes>() {
        return Err(PyTypeError::new_err(format!(
            "{field} must be a sequence of integers, got {}",
            type_name(obj)
        )));
    }
    // Fast path: a contiguous buffer of native-order int64.
    if let Ok(buf) = pyo3::buffer::PyBuffer::<i64>::get(obj) {
        let format = buf.format().to_bytes();
        if buf.dimensions() == 1 && buf.is_c_contiguous() && native_i64_format(format) {
            return buf.to_vec(obj.py());
        }
    }
    let iter = obj
        .try_iter()
        .ok()
        .filter(|_| is_iterable(obj))
        .ok_or_else(|| {
            PyTypeError::new_err(format!(
                "{field} must be a sequence of integers, got {}",
                type_name(obj)
            ))
        })?;
    // (the length only as a hint, and a bounded one: a sequence's `__len__` may say anything)
    let mut out = Vec::with_capacity(obj.len().unwrap_or(0).min(1 << 16));
    for (i, item) in iter.enumerate() {
        out.push(hash_i64(&format!("{field}[{i}]"), &item?)?);
    }
    Ok(out)
}

/// A snapshot of one group. Compares, hashes and pickles by value, like the reference's
/// frozen dataclass.
#[pyclass(name = "GroupStats", module = "ttlpolicy._native", frozen)]
pub struct PyGroupStats(core::GroupStats);

impl Fields for PyGroupStats {
    const NAMES: &'static [&'static str] = &[
        "key",
        "blocks",
        "accesses",
        "hits",
        "reuse_s",
        "ttl_s",
        "last_access_s",
    ];
    fn fields<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        let g = &self.0;
        (
            PyTuple::new(py, &g.key)?,
            g.blocks,
            g.accesses,
            g.hits,
            PyTuple::new(py, &g.reuse_s)?,
            g.ttl_s,
            g.last_access_s,
        )
            .into_pyobject(py)
    }
}

#[pymethods]
impl PyGroupStats {
    #[classattr]
    fn __match_args__(py: Python<'_>) -> PyResult<Py<PyTuple>> {
        value::match_args::<Self>(py)
    }
    #[new]
    fn new(
        key: &Bound<'_, PyAny>,
        blocks: &Bound<'_, PyAny>,
        accesses: &Bound<'_, PyAny>,
        hits: &Bound<'_, PyAny>,
        reuse_s: &Bound<'_, PyAny>,
        ttl_s: &Bound<'_, PyAny>,
        last_access_s: &Bound<'_, PyAny>,
    ) -> PyResult<Self> {
        let key = each_item("key", "integers", key, int_field)?;
        let blocks = count_field("blocks", blocks)?;
        let accesses = count_field("accesses", accesses)?;
        let hits = count_field("hits", hits)?;
        let reuse_s = each_item("reuse_s", "numbers", reuse_s, float_field)?;
        let ttl_s = float_field("ttl_s", ttl_s)?;
        let last_access_s = if last_access_s.is_none() {
            None
        } else {
            Some(float_field("last_access_s", last_access_s)?)
        };
        Ok(PyGroupStats(core::GroupStats {
            key,
            blocks: usize::try_from(blocks).unwrap_or(usize::MAX),
            accesses,
            hits,
            reuse_s,
            ttl_s,
            last_access_s,
        }))
    }
    /// The hashes of the group's head path (length ≤ ``group_depth``).
    #[getter]
    fn key<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, &self.0.key)
    }
    /// Blocks of the group held now.
    #[getter]
    fn blocks(&self) -> usize {
        self.0.blocks
    }
    /// Inserts that reached the group.
    #[getter]
    fn accesses(&self) -> u64 {
        self.0.accesses
    }
    /// Blocks of the group found held by an insert.
    #[getter]
    fn hits(&self) -> u64 {
        self.0.hits
    }
    /// The last ``window`` reuse intervals in seconds, oldest first.
    #[getter]
    fn reuse_s<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, &self.0.reuse_s)
    }
    /// The group's TTL in seconds (inf: no TTL).
    #[getter]
    fn ttl_s(&self) -> f64 {
        self.0.ttl_s
    }
    /// When (s) the group was last reached by an insert; None before.
    #[getter]
    fn last_access_s(&self) -> Option<f64> {
        self.0.last_access_s
    }
    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        other
            .downcast::<PyGroupStats>()
            .is_ok_and(|o| o.get().0 == self.0)
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
        value::repr(self, py, "GroupStats")
    }
}

/// Blocks held in one tier, as a tree of block-hash prefixes, grouped for per-group TTLs.
#[pyclass(name = "PrefixTree", module = "ttlpolicy._native")]
pub struct PyPrefixTree(core::PrefixTree);

#[pymethods]
impl PyPrefixTree {
    #[new]
    #[pyo3(signature = (
        max_nodes = Arg::Ok(core::PrefixTree::DEFAULT_MAX_NODES),
        group_depth = Arg::Ok(core::PrefixTree::DEFAULT_GROUP_DEPTH),
        window = Arg::Ok(core::PrefixTree::DEFAULT_WINDOW),
        max_idle_groups = Arg::Ok(core::PrefixTree::DEFAULT_MAX_IDLE_GROUPS),
        default_ttl_s = Arg::Ok(core::PrefixTree::DEFAULT_TTL_S),
    ))]
    #[pyo3(text_signature = "(max_nodes=1048576, group_depth=2, window=256, \
        max_idle_groups=65536, default_ttl_s=math.inf)")]
    fn new(
        max_nodes: Arg<i64>,
        group_depth: Arg<i64>,
        window: Arg<i64>,
        max_idle_groups: Arg<i64>,
        default_ttl_s: Arg<f64>,
    ) -> PyResult<Self> {
        let mut args = Args::new();
        let n = args.take("max_nodes", max_nodes);
        let d = args.take("group_depth", group_depth);
        let w = args.take("window", window);
        let i = args.take("max_idle_groups", max_idle_groups);
        let t = args.take("default_ttl_s", default_ttl_s);
        Ok(PyPrefixTree(
            args.finish(core::PrefixTree::new(n, d, w, i, t))?,
        ))
    }

    /// The most blocks held; an insert that needs room expires, then evicts least recently used
    /// leaves.
    #[getter]
    fn max_nodes(&self) -> usize {
        self.0.max_nodes()
    }
    /// Blocks of a request's head path that name its group.
    #[getter]
    fn group_depth(&self) -> usize {
        self.0.group_depth()
    }
    /// Reuse intervals kept per group (the last ``window``).
    #[getter]
    fn window(&self) -> usize {
        self.0.window()
    }
    /// The most groups without blocks remembered (the longest idle is forgotten beyond).
    #[getter]
    fn max_idle_groups(&self) -> usize {
        self.0.max_idle_groups()
    }
    /// The TTL in seconds of a group without one set (inf: none).
    #[getter]
    fn default_ttl_s(&self) -> f64 {
        self.0.default_ttl_s()
    }
    /// Blocks removed so far past their group's TTL.
    #[getter]
    fn expired_blocks(&self) -> u64 {
        self.0.expired_blocks()
    }
    /// Blocks evicted so far to stay within ``max_nodes``.
    #[getter]
    fn evicted_blocks(&self) -> u64 {
        self.0.evicted_blocks()
    }
    fn __len__(&self) -> usize {
        self.0.len()
    }

    // Methods that convert Python objects do so before borrowing the tree (see policy.rs).

    /// Leading blocks of ``hash_ids`` held now (as of the last insert or expire).
    fn match_len(slf: &Bound<'_, Self>, hash_ids: &Bound<'_, PyAny>) -> PyResult<usize> {
        let h = hashes("hash_ids", hash_ids)?;
        Ok(slf.try_borrow()?.0.match_len(&h))
    }

    /// Every remembered group, in creation order.
    fn groups(&self) -> Vec<PyGroupStats> {
        self.0.groups().into_iter().map(PyGroupStats).collect()
    }

    /// τ_g = solve_ttl(reuse intervals of g, benefit_per_hit, price_per_block_s, max_ttl_s) for
    /// every group, in creation order (a group without samples gets 0).
    fn group_ttls<'py>(
        slf: &Bound<'py, Self>,
        py: Python<'py>,
        benefit_per_hit: Arg<f64>,
        price_per_block_s: Arg<f64>,
        max_ttl_s: Arg<f64>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let mut args = Args::new();
        let b = args.take("benefit_per_hit", benefit_per_hit);
        let p = args.take("price_per_block_s", price_per_block_s);
        let m = args.take("max_ttl_s", max_ttl_s);
        let ttls = slf.try_borrow()?.0.group_ttls(b, p, m);
        let ttls = args.finish(ttls)?;
        let out = PyDict::new(py);
        for (key, ttl) in ttls {
            out.set_item(PyTuple::new(py, key)?, ttl)?;
        }
        Ok(out)
    }

    /// Block-seconds held so far: removed blocks as charged, held ones until min(now, deadline).
    fn block_seconds(slf: &Bound<'_, Self>, now: Arg<f64>) -> PyResult<f64> {
        let mut args = Args::new();
        let t = args.take("now", now);
        let r = slf.try_borrow()?.0.block_seconds(t);
        args.finish(r)
    }

    /// Store a request's blocks at time ``now``; returns how many leading blocks were held.
    fn insert(
        slf: &Bound<'_, Self>,
        hash_ids: &Bound<'_, PyAny>,
        now: Arg<f64>,
    ) -> PyResult<usize> {
        // The reference checks the hashes first, then the time.
        let h = hashes("hash_ids", hash_ids)?;
        let mut args = Args::new();
        let t = args.take("now", now);
        let r = slf.try_borrow_mut()?.0.insert(&h, t);
        args.finish(r)
    }

    /// Remove every block past its group's TTL at ``now``; returns how many were removed.
    fn expire(slf: &Bound<'_, Self>, now: Arg<f64>) -> PyResult<usize> {
        let mut args = Args::new();
        let t = args.take("now", now);
        let r = slf.try_borrow_mut()?.0.expire(t);
        args.finish(r)
    }

    /// Set the TTL of the groups named by the keys (creating those not yet seen).
    fn set_group_ttls(slf: &Bound<'_, Self>, ttls: &Bound<'_, PyAny>) -> PyResult<()> {
        let mapping = ttls.downcast::<PyMapping>().map_err(|_| {
            PyTypeError::new_err(format!(
                "ttls must be a mapping of group key to TTL, got {}",
                ttls.get_type()
                    .name()
                    .map(|n| n.to_string())
                    .unwrap_or_default()
            ))
        })?;
        let mut out = Vec::new();
        let mut args = Args::new();
        for item in mapping.items()?.iter() {
            // (a pair, as a mapping's items are: another shape is refused alike on both sides)
            let (key, ttl): (Bound<'_, PyAny>, Bound<'_, PyAny>) =
                item.extract().map_err(|_| {
                    PyTypeError::new_err(format!(
                        "ttls must be a mapping of group key to TTL, got an item {}",
                        short_repr(&item)
                    ))
                })?;
            let key = hashes("group key", &key)?;
            let ttl = args.take_named(format!("ttls[{key:?}]").into(), ttl.extract::<Arg<f64>>()?);
            out.push((key, ttl));
        }
        let r = slf.try_borrow_mut()?.0.set_group_ttls(&out);
        args.finish(r)
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyPrefixTree>()?;
    m.add_class::<PyGroupStats>()?;
    Ok(())
}
