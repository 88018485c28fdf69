//! ttlpolicy-core: how long an LLM engine should keep an agent program's KV cache.
//!
//! Pure Rust, no Python: the `bindings/` crate wraps it for `ttlpolicy._native`. Every rule
//! here mirrors the pure-Python reference in `python/ttlpolicy/reference/`; differential
//! tests hold the two together. No function reads a clock: time is always an argument.

pub mod admission;
pub mod config;
pub mod error;
pub mod estimators;
pub mod history;
pub mod policy;
pub mod prefix_tree;
pub mod scheduler;
pub mod solver;
pub mod validate;

pub use error::{Error, Result};
