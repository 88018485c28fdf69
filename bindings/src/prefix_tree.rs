//! `PrefixTree` and `GroupStats` for Python: argument conversions only, every rule lives in
//! `ttlpolicy_core::prefix_tree`. Hashes come as any sequence of ints (list, tuple, numpy
//! integer array); a wrong type raises `TypeError`, an int outside 64 bits `ValueError`, as in
//! the reference.

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyInt, PyMapping, PyString, PyTuple};

use ttlpolicy_core::prefix_tree as core;

use crate::convert::{core_err, Arg, Args};

/// One 64-bit signed integer: TypeError for a non-int, ValueError when out of range.
fn int_i64(field: &str, v: &Bound<'_, PyAny>) -> PyResult<i64> {
    match v.extract::<i64>() {
        Ok(n) => Ok(n),
        Err(_) if v.is_instance_of::<PyInt>() || v.hasattr("__index__").unwrap_or(false) => {
            Err(PyValueError::new_err(format!(
                "{field} must fit in a signed 64-bit integer, got {v}"
            )))
        }
        Err(_) => Err(PyTypeError::new_err(format!(
            "{field} must be an integer, got {}",
            v.repr()?
        ))),
    }
}

/// A sequence of block hashes.
fn hashes(field: &str, obj: &Bound<'_, PyAny>) -> PyResult<Vec<i64>> {
    if obj.is_instance_of::<PyString>() || obj.is_instance_of::<PyBytes>() {
        return Err(PyTypeError::new_err(format!(
            "{field} must be a sequence of integers, got {}",
            obj.get_type().name()?
        )));
    }
    // Fast path: a contiguous buffer of int64 (numpy int64 arrays, array('q')).
    if let Ok(buf) = pyo3::buffer::PyBuffer::<i64>::get(obj) {
        if buf.dimensions() == 1 && buf.is_c_contiguous() {
            return buf.to_vec(obj.py());
        }
    }
    let iter = obj.try_iter().map_err(|_| {
        let name = obj
            .get_type()
            .name()
            .map(|n| n.to_string())
            .unwrap_or_default();
        PyTypeError::new_err(format!(
            "{field} must be a sequence of integers, got {name}"
        ))
    })?;
    let mut out = Vec::with_capacity(obj.len().unwrap_or(0));
    for (i, item) in iter.enumerate() {
        out.push(int_i64(&format!("{field}[{i}]"), &item?)?);
    }
    Ok(out)
}

/// A snapshot of one group.
#[pyclass(name = "GroupStats", module = "ttlpolicy._native", frozen)]
pub struct PyGroupStats(core::GroupStats);

#[pymethods]
impl PyGroupStats {
    #[getter]
    fn key<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, &self.0.key)
    }
    #[getter]
    fn blocks(&self) -> usize {
        self.0.blocks
    }
    #[getter]
    fn accesses(&self) -> u64 {
        self.0.accesses
    }
    #[getter]
    fn hits(&self) -> u64 {
        self.0.hits
    }
    #[getter]
    fn reuse_s<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, &self.0.reuse_s)
    }
    #[getter]
    fn ttl_s(&self) -> f64 {
        self.0.ttl_s
    }
    #[getter]
    fn last_access_s(&self) -> Option<f64> {
        self.0.last_access_s
    }
    fn __repr__(&self) -> String {
        let g = &self.0;
        format!(
            "GroupStats(key={:?}, blocks={}, accesses={}, hits={}, reuse_s=<{} samples>, ttl_s={}, last_access_s={:?})",
            g.key, g.blocks, g.accesses, g.hits, g.reuse_s.len(), g.ttl_s, g.last_access_s
        )
    }
}

/// Blocks held in one tier, as a tree of block-hash prefixes, grouped for per-group TTLs.
#[pyclass(name = "PrefixTree", module = "ttlpolicy._native")]
pub struct PyPrefixTree(core::PrefixTree);

#[pymethods]
impl PyPrefixTree {
    #[new]
    #[pyo3(signature = (max_nodes=Arg::Ok(1 << 20), group_depth=Arg::Ok(2), window=Arg::Ok(256), max_idle_groups=Arg::Ok(1 << 16), default_ttl_s=Arg::Ok(f64::INFINITY)))]
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

    #[getter]
    fn max_nodes(&self) -> usize {
        self.0.max_nodes()
    }
    #[getter]
    fn group_depth(&self) -> usize {
        self.0.group_depth()
    }
    #[getter]
    fn window(&self) -> usize {
        self.0.window()
    }
    #[getter]
    fn max_idle_groups(&self) -> usize {
        self.0.max_idle_groups()
    }
    #[getter]
    fn default_ttl_s(&self) -> f64 {
        self.0.default_ttl_s()
    }
    #[getter]
    fn expired_blocks(&self) -> u64 {
        self.0.expired_blocks()
    }
    #[getter]
    fn evicted_blocks(&self) -> u64 {
        self.0.evicted_blocks()
    }
    fn __len__(&self) -> usize {
        self.0.len()
    }

    fn match_len(&self, hash_ids: &Bound<'_, PyAny>) -> PyResult<usize> {
        Ok(self.0.match_len(&hashes("hash_ids", hash_ids)?))
    }

    fn groups(&self) -> Vec<PyGroupStats> {
        self.0.groups().into_iter().map(PyGroupStats).collect()
    }

    fn group_ttls<'py>(
        &self,
        py: Python<'py>,
        benefit_per_hit: Arg<f64>,
        price_per_block_s: Arg<f64>,
        max_ttl_s: Arg<f64>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let mut args = Args::new();
        let b = args.take("benefit_per_hit", benefit_per_hit);
        let p = args.take("price_per_block_s", price_per_block_s);
        let m = args.take("max_ttl_s", max_ttl_s);
        let ttls = args.finish(self.0.group_ttls(b, p, m))?;
        let out = PyDict::new(py);
        for (key, ttl) in ttls {
            out.set_item(PyTuple::new(py, key)?, ttl)?;
        }
        Ok(out)
    }

    fn block_seconds(&self, now: Arg<f64>) -> PyResult<f64> {
        let mut args = Args::new();
        let t = args.take("now", now);
        args.finish(self.0.block_seconds(t))
    }

    fn insert(&mut self, hash_ids: &Bound<'_, PyAny>, now: Arg<f64>) -> PyResult<usize> {
        // The reference checks the hashes first, then the time.
        let h = hashes("hash_ids", hash_ids)?;
        let mut args = Args::new();
        let t = args.take("now", now);
        args.finish(self.0.insert(&h, t))
    }

    fn expire(&mut self, now: Arg<f64>) -> PyResult<usize> {
        let mut args = Args::new();
        let t = args.take("now", now);
        args.finish(self.0.expire(t))
    }

    fn set_group_ttls(&mut self, ttls: &Bound<'_, PyAny>) -> PyResult<()> {
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
        for item in mapping.items()?.iter() {
            let (key, ttl): (Bound<'_, PyAny>, Bound<'_, PyAny>) = item.extract()?;
            let key = hashes("group key", &key)?;
            let ttl = ttl.extract::<f64>().map_err(|_| {
                PyTypeError::new_err(format!("ttls[{key:?}] must be a number, got {ttl}"))
            })?;
            out.push((key, ttl));
        }
        self.0.set_group_ttls(&out).map_err(core_err)
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyPrefixTree>()?;
    m.add_class::<PyGroupStats>()?;
    Ok(())
}
