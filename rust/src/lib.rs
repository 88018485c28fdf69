//! ttlpolicy-core: how long an LLM engine should keep an agent program's KV cache.
//!
//! Pure Rust, no Python: the `bindings/` crate wraps it for `ttlpolicy._native`. Every rule
//! here mirrors the pure-Python reference in `python/ttlpolicy/reference/`; differential
//! tests hold the two together. No function reads a clock: time is always an argument.
//!
//! ```
//! use ttlpolicy_core::policy::{PolicyConfig, TTLPolicy};
//! use ttlpolicy_core::scheduler::{ProgramScheduler, TurnEnd};
//!
//! // A policy with default settings, and a scheduler of 1000 KV blocks, 100 of them pinnable.
//! let mut policy = TTLPolicy::new(PolicyConfig::default())?;
//! let mut sched = ProgramScheduler::new(1000, 100)?;
//!
//! // Program "A" sends a request, which runs and ends with a call to the tool "bash".
//! sched.arrive(&mut policy, "a1", "A", 0.0, 10)?;
//! assert_eq!(sched.pop(&mut policy, 0.0)?.as_deref(), Some("a1"));
//! let args = TurnEnd { tool: Some("bash"), cache_miss_cost_s: Some(100.0), ..TurnEnd::default() };
//! let finished = sched.finish(&mut policy, "a1", 1.0, 40, args)?;
//!
//! // Rebuilding the cache would cost 100 s: the policy pins the 40 blocks for a while.
//! let pin = finished.pin.expect("pinned");
//! assert_eq!(pin.blocks, 40);
//! assert!(pin.deadline_s > 1.0);
//!
//! // The program's next request consumes the pin (its prefix is still cached).
//! let consumed = sched.arrive(&mut policy, "a2", "A", 5.0, 10)?;
//! assert_eq!(consumed, Some(pin));
//! # Ok::<(), ttlpolicy_core::Error>(())
//! ```

#![warn(missing_docs)]

pub mod admission;
pub mod config;
pub mod error;
pub mod estimators;
mod fair_order;
pub mod history;
mod id_hash;
pub mod index_list;
pub mod lifecycle;
pub mod linker;
pub mod policy;
pub mod prefix_tree;
pub mod router;
pub mod scheduler;
pub mod solver;
pub mod step_time;
pub mod tenants;
pub mod validate;

pub use error::{Error, Result};
