//! `decide` in the core alone (no Python), for `bench/RESULTS.md`: the state of
//! `bench/micro/test_bench_core.py::test_decide_full_window` (a tool whose window holds 1,024
//! lognormal durations; a cheap hold against a 2 s miss, so the scan visits nearly every
//! sample); prints the median and best per-call time over 200 rounds of 200 calls.
//!
//! `cargo run --release -p ttlpolicy-core --example decide_cost`

use ttlpolicy_core::policy::{DecideArgs, PolicyConfig, TTLPolicy};

#[path = "common/timing.rs"]
mod timing;

fn main() {
    let mut policy = TTLPolicy::new(PolicyConfig::default()).expect("default config");
    // lognormal(1, 1) by Box-Muller over a fixed LCG (not Python's generator)
    let mut x: u64 = 1;
    let mut uniform = || {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((x >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    };
    for _ in 0..1024 {
        let (u, v) = (uniform(), uniform());
        let z = (-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos();
        policy
            .observe_tool("", Some("search"), (1.0 + z).exp())
            .expect("a duration");
    }
    let args = DecideArgs {
        tool: Some("search"),
        request_blocks: 10,
        mean_active_blocks: 1000.0,
        cache_miss_cost_s: Some(2.0),
        now: 1.0,
        ..DecideArgs::default()
    };
    let (median, best) = timing::per_call_ns(200, 200, || {
        std::hint::black_box(policy.decide(std::hint::black_box(&args)).expect("decide"));
    });
    println!("decide, full window: median {median:.0} ns, best {best:.0} ns");
}
