//! Load control's per-call cost in the core alone (no Python), for `bench/RESULTS.md`: the
//! state of `bench/micro/test_bench_admission.py` (16 admitted programs away on a tool whose
//! window holds 1,024 durations, 1,000 waiting, the oldest refused); prints the median and
//! best per-call time of `may_run` refusing the head and of `eviction_order` of 8 programs.
//!
//! `cargo run --release -p ttlpolicy-core --example may_run_cost`

use ttlpolicy_core::admission::AdmissionControl;
use ttlpolicy_core::policy::{PolicyConfig, TTLPolicy};

const ADMITTED: usize = 16;
const WAITING: usize = 1000;
const NOW: f64 = 120.0;
const ROUNDS: usize = 200;
const OPS: usize = 200;

#[path = "common/timing.rs"]
mod timing;

fn main() {
    let mut policy = TTLPolicy::new(PolicyConfig::default()).expect("default config");
    // the bench's durations: exponential, mean 8 s (a fixed LCG, not Python's generator)
    let mut x: u64 = 12345;
    for _ in 0..1024 {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let u = ((x >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
        policy
            .observe_tool("", Some("bash"), -8.0 * u.ln())
            .expect("a duration");
    }
    let mut ac = AdmissionControl::new(6668).expect("admission");
    for i in 0..ADMITTED {
        let id = format!("A{i}");
        ac.arrive(&id, i as f64, 400).expect("arrive");
        assert!(ac.may_run(&policy, &id, i as f64).expect("may_run"));
    }
    for i in 0..ADMITTED {
        ac.finish(
            &format!("A{i}"),
            100.0 + i as f64,
            400,
            Some("bash"),
            8.0,
            false,
        )
        .expect("finish");
    }
    for i in 0..WAITING {
        ac.arrive(&format!("W{i}"), 116.0, 6000).expect("arrive");
    }
    assert!(!ac.may_run(&policy, "W0", NOW).expect("may_run"));
    let (median, best) = timing::per_call_ns(ROUNDS, OPS, || {
        std::hint::black_box(ac.may_run(&policy, "W0", NOW).expect("may_run"));
    });
    println!("may_run, the head refused: median {median:.0} ns, best {best:.0} ns");
    let eight: Vec<String> = (0..8).map(|i| format!("A{i}")).collect();
    let (median, best) = timing::per_call_ns(ROUNDS, OPS, || {
        std::hint::black_box(ac.eviction_order(&policy, &eight, NOW).expect("order"));
    });
    println!("eviction_order of 8 programs: median {median:.0} ns, best {best:.0} ns");
}
