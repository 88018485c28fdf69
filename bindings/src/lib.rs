//! `ttlpolicy._native`: PyO3 wrappers over `ttlpolicy-core`. Conversions only — every rule
//! lives in the core crate.

use pyo3::prelude::*;

mod admission;
mod convert;
mod lifecycle;
mod linker;
mod policy;
mod prefix_tree;
mod router;
mod scheduler;
mod step_time;
mod turn_end;
mod tenants;
mod value;

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    // what this build was made from (bindings/build.rs); checked by ttlpolicy/_backend.py
    m.add("SOURCE_DIGEST", env!("TTLPOLICY_SOURCE_DIGEST"))?;
    policy::register(m)?;
    admission::register(m)?;
    scheduler::register(m)?;
    lifecycle::register(m)?;
    linker::register(m)?;
    prefix_tree::register(m)?;
    router::register(m)?;
    step_time::register(m)?;
    Ok(())
}
