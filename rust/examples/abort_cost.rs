//! `abort` cost in the core alone (no Python), for `bench/RESULTS.md`: a scheduler with `W`
//! waiting single-request programs, aborted in id order or at random, in bursts of 200;
//! prints the median and best per-abort time.
//!
//! `cargo run --release -p ttlpolicy-core --example abort_cost -- 100000 random [aborts]`
//! (`aborts`, default 8000: more of them make a longer run to profile).

use std::time::Instant;

use ttlpolicy_core::policy::{PolicyConfig, TTLPolicy};
use ttlpolicy_core::scheduler::ProgramScheduler;

const BURST: usize = 200;
const ABORTS: usize = 8000;

#[path = "common/timing.rs"]
#[allow(dead_code)] // (per_call_ns: aborts consume their ids, so bursts are timed here)
mod timing;

fn main() {
    let waiting: usize = std::env::args()
        .nth(1)
        .map_or(100_000, |s| s.parse().expect("waiting: a count"));
    let random = std::env::args().nth(2).as_deref() == Some("random");
    let aborts: usize = std::env::args()
        .nth(3)
        .map_or(ABORTS, |s| s.parse().expect("aborts: a count"));
    let mut policy = TTLPolicy::new(PolicyConfig::default()).expect("default config");
    let mut s = ProgramScheduler::new(10 * waiting as i64 + 10, 10).expect("scheduler");
    let ids: Vec<String> = (0..waiting).map(|i| format!("w{i}")).collect();
    let programs: Vec<String> = (0..waiting).map(|i| format!("W{i}")).collect();
    s.arrive_many(&mut policy, &ids, &programs, 0.0, &vec![1; waiting])
        .expect("arrivals");
    let mut order: Vec<usize> = (0..waiting).collect();
    if random {
        let mut x: u64 = 12345;
        for i in (1..waiting).rev() {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            order.swap(i, (x >> 33) as usize % (i + 1));
        }
    }
    let per_abort_ns: Vec<f64> = order[..aborts.min(waiting)]
        .chunks(BURST)
        .map(|burst| {
            let t = Instant::now();
            for &i in burst {
                std::hint::black_box(s.abort(&mut policy, &ids[i]).expect("live request"));
            }
            t.elapsed().as_nanos() as f64 / burst.len() as f64
        })
        .collect();
    let (median, best) = timing::median_best(per_abort_ns);
    println!("waiting={waiting} random={random}: abort median {median:.0} ns, best {best:.0} ns");
}
